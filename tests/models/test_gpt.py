"""The decoder-only language model, its generation and KV cache, the n-gram baseline and the text corpus.

References we did not write: nn.TransformerEncoderLayer/nn.TransformerEncoder (norm_first=True) under a
causal mask, F.cross_entropy, the uncached forward (for the cache), straightforward sort-based filters
written here the obvious way (for top-k/top-p), exact enumeration (an n-gram distribution sums to 1).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data.python_docs import (
    ByteBPE,
    TextCorpus,
    encode_documents,
    is_validation_document,
    load_text_file,
    python_docs_corpus,
    random_windows,
    sequential_windows,
    split_documents,
)
from course_lib.generation.sampling import (
    generate,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)
from course_lib.models.gpt import GPT
from course_lib.models.masking import causal_mask
from course_lib.models.ngram import KneserNeyLM
from course_lib.training.language_model import evaluate_perplexity, lm_loss, train_lm

VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN = 37, 16, 4, 3, 40, 48


def _randomise(module: nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu"])
def test_gpt_equals_a_stack_of_pytorch_encoder_layers_under_a_causal_mask(activation: str) -> None:
    gen = torch.Generator().manual_seed(0)
    eps = 1e-6
    act = nn.GELU(approximate="tanh") if activation == "gelu_tanh" else nn.GELU()
    t_layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, 0.0, activation=act, layer_norm_eps=eps,
                                         batch_first=True, norm_first=True)
    t_stack = nn.TransformerEncoder(t_layer, LAYERS, norm=nn.LayerNorm(D_MODEL, eps=eps), enable_nested_tensor=False)
    tok_emb, pos_emb = nn.Embedding(VOCAB, D_MODEL), nn.Embedding(MAX_LEN, D_MODEL)
    for m in (t_stack, tok_emb, pos_emb):
        _randomise(m, gen)
    ours = GPT(VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN, activation=activation, layer_norm_eps=eps)
    ours.blocks.load_from_torch(t_stack)
    with torch.no_grad():
        ours.token_embedding.weight.copy_(tok_emb.weight)
        ours.positions.embedding.weight.copy_(pos_emb.weight)
    ours.eval(), t_stack.eval()
    tokens = torch.randint(0, VOCAB, (3, 11), generator=gen)
    x = tok_emb(tokens) + pos_emb(torch.arange(11))
    hidden = t_stack(x, mask=nn.Transformer.generate_square_subsequent_mask(11), is_causal=True)
    expected = hidden @ tok_emb.weight.T  # tied output: the embedding matrix, no bias
    torch.testing.assert_close(ours(tokens), expected, atol=1e-5, rtol=1e-5)
    assert ours.lm_head.weight is ours.token_embedding.weight


def test_gpt_is_causal_and_checks_its_input() -> None:
    gen = torch.Generator().manual_seed(1)
    model = GPT(VOCAB, D_MODEL, HEADS, 2, D_FF, MAX_LEN).eval()
    a = torch.randint(0, VOCAB, (2, 10), generator=gen)
    b = a.clone()
    b[:, 6:] = (b[:, 6:] + 1) % VOCAB  # change the future
    torch.testing.assert_close(model(a)[:, :6], model(b)[:, :6])  # the past does not see it
    weights = model.attention_weights(a)
    assert len(weights) == 2 and weights[0].shape == (2, HEADS, 10, 10)
    assert bool((weights[0].masked_select(~causal_mask(10)) == 0).all())
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, MAX_LEN + 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(batch, seq\)"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="token ids"):
        model(torch.full((1, 3), VOCAB))


def test_lm_loss_equals_cross_entropy_on_shifted_targets() -> None:
    gen = torch.Generator().manual_seed(2)
    logits, tokens = torch.randn(3, 7, VOCAB, generator=gen), torch.randint(0, VOCAB, (3, 7), generator=gen)
    by_loop = sum(F.cross_entropy(logits[b, t], tokens[b, t + 1], reduction="sum") for b in range(3) for t in range(6))
    torch.testing.assert_close(lm_loss(logits, tokens), by_loop / 18)


# --- generation -----------------------------------------------------------------------------------------

def _reference_top_k(row: list[float], k: int) -> list[float]:
    kept = sorted(row, reverse=True)[:k]
    return [x if x >= kept[-1] else -math.inf for x in row]


def _reference_top_p(row: list[float], p: float) -> list[float]:
    probs = torch.softmax(torch.tensor(row, dtype=torch.float64), 0).tolist()
    order = sorted(range(len(row)), key=lambda i: -row[i])
    kept, mass = [], 0.0
    for i in order:
        kept.append(i)
        mass += probs[i]
        if mass >= p - 1e-9:
            break
    smallest = min(row[i] for i in kept)
    return [x if x >= smallest else -math.inf for x in row]


def test_top_k_and_top_p_equal_straightforward_references() -> None:
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(20, 11, generator=gen) * 2
    for k in (1, 3, 10):
        expected = torch.tensor([_reference_top_k(r, k) for r in logits.tolist()])
        torch.testing.assert_close(top_k_filter(logits, k), expected)
    for p in (0.1, 0.5, 0.9, 0.99):
        expected = torch.tensor([_reference_top_p(r, p) for r in logits.tolist()])
        torch.testing.assert_close(top_p_filter(logits, p), expected)


def test_filter_edge_cases() -> None:
    logits = torch.tensor([[1.0, 2.0, 2.0, 0.5]])
    torch.testing.assert_close(top_k_filter(logits, 4), logits)  # k = vocab
    torch.testing.assert_close(top_k_filter(logits, 99), logits)  # k > vocab
    torch.testing.assert_close(top_p_filter(logits, 1.0), logits)  # p = 1 keeps everything
    inf = -math.inf
    assert top_k_filter(logits, 1).tolist() == [[inf, 2.0, 2.0, inf]]  # ties with the k-th are kept
    assert top_p_filter(logits, 0.01).tolist() == [[inf, 2.0, 2.0, inf]]  # the top token (and its tie)
    with pytest.raises(ValueError, match="k must"):
        top_k_filter(logits, 0)
    with pytest.raises(ValueError, match="p must"):
        top_p_filter(logits, 0.0)


def test_sampling_is_seeded_and_follows_the_filters() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(4000, 1)
    draws = sample_next_token(logits, 1.0, generator=torch.Generator().manual_seed(0))
    again = sample_next_token(logits, 1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    freq = torch.bincount(draws, minlength=4).float() / 4000
    torch.testing.assert_close(freq, torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=0.03, rtol=0)
    nucleus = sample_next_token(logits, 1.0, top_p=0.7, generator=torch.Generator().manual_seed(1))
    assert set(nucleus.tolist()) == {0, 1}
    assert set(sample_next_token(logits, 1.0, top_k=1).tolist()) == {0}
    assert torch.equal(sample_next_token(logits, 0.0), torch.zeros(4000, dtype=torch.long))  # greedy


def test_cached_logits_equal_uncached_at_every_step() -> None:
    gen = torch.Generator().manual_seed(4)
    model = GPT(VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN).eval()
    _randomise(model, gen)
    tokens = torch.randint(0, VOCAB, (2, 30), generator=gen)
    full = model(tokens)  # (2, 30, vocab)
    cache = model.make_cache()
    logits = model(tokens[:, :5], cache=cache)  # a prompt of 5, then one token at a time
    torch.testing.assert_close(logits, full[:, :5], atol=1e-5, rtol=0)
    for t in range(5, 30):
        logits = model(tokens[:, t:t + 1], cache=cache)
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=0)
    assert cache[0].length == 30 and cache[0].keys.shape == (2, HEADS, 30, D_MODEL // HEADS)
    gen_a = generate(model, tokens[:, :4], 20, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(5))
    gen_b = generate(model, tokens[:, :4], 20, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(5),
                     use_cache=False)
    assert torch.equal(gen_a, gen_b) and gen_a.shape == (2, 24)
    with pytest.raises(ValueError, match="max_len"):
        generate(model, tokens[:, :4], MAX_LEN, use_cache=True)


# --- n-gram ---------------------------------------------------------------------------------------------

def test_kneser_ney_distributions_sum_to_one_and_prefer_seen_continuations() -> None:
    gen = torch.Generator().manual_seed(7)
    stream = torch.randint(0, 6, (400,), generator=gen)
    for order in (1, 2, 3, 4, 5):
        lm = KneserNeyLM(stream, vocab_size=8, order=order)
        # seen and unseen (7 never occurs) contexts
        for context in [(), (1,), (2, 3), (7, 7), (6, 1), (0, 1, 2), (7, 1, 2), (4, 0, 1, 2)]:
            total = sum(lm.prob(context, w) for w in range(8))
            assert abs(total - 1) < 1e-9, (order, context, total)
            assert lm.prob(context, 7) > 0  # an unseen token still has some probability
    lm = KneserNeyLM(torch.tensor([0, 1, 2] * 50), vocab_size=4, order=3)
    assert lm.prob((0, 1), 2) > 0.9 and lm.perplexity(torch.tensor([0, 1, 2] * 5)) < 1.2


def test_kneser_ney_bigram_by_hand() -> None:
    # stream a b a b a c (a=0, b=1, c=2); bigrams ab ba ab ba ac; continuation counts N1+(.w): b 1, a 1, c 1
    lm = KneserNeyLM(torch.tensor([0, 1, 0, 1, 0, 2]), vocab_size=3, order=2, discount=0.5)
    p1_b = (1 - 0.5) / 3 + 0.5 * 3 / 3 / 3  # continuation unigram, interpolated with uniform
    expected = (2 - 0.5) / 3 + 0.5 * 2 / 3 * p1_b  # c(ab)=2, c(a.)=3, two types after a
    assert abs(lm.prob((0,), 1) - expected) < 1e-12


def _kneser_ney_by_counting(ids: list[int], vocab: int, order: int, d: float, context: tuple, w: int) -> float:
    """The module docstring's formulas, from counts taken afresh by scanning the stream (a test oracle)."""
    if order == 1:
        count = {t: ids.count(t) for t in set(ids)}  # raw counts at the highest order
    else:  # continuation counts: distinct left neighbours of (w,) among the bigrams
        count = {t: len({ids[i - 1] for i in range(1, len(ids)) if ids[i] == t}) for t in set(ids[1:])}
    total = sum(count.values())
    p = max(count.get(w, 0) - d, 0) / total + d * len(count) / total / vocab
    for k in range(2, order + 1):  # build up from the bigram to the full order
        ctx = context[len(context) - (k - 1):] if k > 1 else ()
        grams = [tuple(ids[i:i + k]) for i in range(len(ids) - k + 1)]
        if k == order:
            c = Counter(grams)
        else:
            longer = {tuple(ids[i:i + k + 1]) for i in range(len(ids) - k)}
            c = Counter(g[1:] for g in longer)
        total = sum(v for g, v in c.items() if g[:-1] == ctx)
        if total == 0:
            continue
        types = sum(1 for g in c if g[:-1] == ctx)
        p = max(c.get(ctx + (w,), 0) - d, 0) / total + d * types / total * p
    return p


@pytest.mark.parametrize("order", [2, 3, 4, 5])
def test_kneser_ney_equals_the_formulas_counted_by_hand(order: int) -> None:
    gen = torch.Generator().manual_seed(order)
    ids = torch.randint(0, 4, (120,), generator=gen).tolist() + [0, 1, 2, 3, 0, 1, 2, 3]
    lm = KneserNeyLM(torch.tensor(ids), vocab_size=6, order=order, discount=0.6)
    for context in [(0, 1, 2, 3), (3, 3, 0, 1), (5, 1, 2, 0), (2, 2, 2, 2), (5, 5, 5, 5)]:
        for w in range(6):
            expected = _kneser_ney_by_counting(ids, 6, order, 0.6, context[-(order - 1):], w)
            assert abs(lm.prob(context, w) - expected) < 1e-12, (order, context, w)


def test_kneser_ney_longer_context_resolves_what_a_trigram_cannot() -> None:
    # after "0 1" comes 2 or 3 equally often; the token before "0 1" decides which
    stream = torch.tensor([5, 0, 1, 2, 6, 0, 1, 3] * 40)
    tri, four = KneserNeyLM(stream, 8, order=3), KneserNeyLM(stream, 8, order=4)
    assert abs(tri.prob((5, 0, 1), 2) - tri.prob((6, 0, 1), 2)) < 1e-12  # the trigram only sees "0 1"
    assert four.prob((5, 0, 1), 2) > 0.95 and four.prob((6, 0, 1), 3) > 0.95
    assert four.perplexity(stream[:64]) < tri.perplexity(stream[:64])
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        KneserNeyLM(stream, 8, order=0)


# --- corpus ---------------------------------------------------------------------------------------------

def test_python_docs_corpus_split_is_by_document_and_stable() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        corpus = python_docs_corpus()
    assert not set(corpus.train_names) & set(corpus.valid_names)
    assert all(is_validation_document(n) for n in corpus.valid_names)
    assert 3 <= len(corpus.valid) <= 0.2 * len(corpus.train)
    assert "statement" in " ".join(corpus.train)
    # the manual's topics quote one another: no validation paragraph may occur in a training topic
    seen = {p.strip() for text in corpus.train for p in text.split("\n\n")}
    assert not [p for text in corpus.valid for p in text.split("\n\n") if p.strip() in seen]
    assert corpus.removed_chars > 0 and "seen in training removed" in repr(corpus)


def test_validation_paragraphs_quoted_from_training_are_removed() -> None:
    names = [f"doc {i}" for i in range(40)]
    held_out = next(n for n in names if is_validation_document(n))
    texts = [f"Own words of {n}.\n\nA paragraph that every document quotes." for n in names]
    corpus = split_documents(names, texts, "test documents")
    assert held_out in corpus.valid_names
    for text in corpus.valid:  # the shared paragraph went, the document's own stayed
        assert "every document quotes" not in text and text.startswith("Own words of")
    assert corpus.removed_chars == len(corpus.valid) * len("\n\nA paragraph that every document quotes.")
    copied = [texts[0]] * 40  # every validation document wholly copied: nothing left to validate on
    with pytest.raises(ValueError, match="validation documents"):
        split_documents(names, copied, "test documents")


def test_byte_bpe_round_trips_any_text_and_is_deterministic() -> None:
    texts = ["def f(x):\n    return x + 1\n", "The for statement is used to iterate.", "naïve café ☕"] * 5
    a, b = ByteBPE.train(texts, vocab_size=300), ByteBPE.train(texts, vocab_size=300)
    for text in texts + ["unseen \t text with 日本 and emoji 🙂"]:
        assert a.decode(a.encode(text)) == text
        assert a.encode(text) == b.encode(text)
    stream = encode_documents(a, texts[:2])
    assert int((stream == a.eot_id).sum()) == 2 and a.eot_id == 0


def test_windows_and_text_file_loader(tmp_path) -> None:
    stream = torch.arange(50)
    w = random_windows(stream, 4, 10, torch.Generator().manual_seed(0))
    assert w.shape == (4, 11) and bool((w[:, 1:] - w[:, :-1] == 1).all())
    s = sequential_windows(stream, 10)
    assert s.shape == (4, 11) and torch.equal(s[1, 0], s[0, -1])
    path = tmp_path / "mine.txt"
    path.write_text("\n\n".join(f"Paragraph {i}. " + "words " * 100 for i in range(40)), encoding="utf-8")
    corpus = load_text_file(path, min_chars=600)
    assert isinstance(corpus, TextCorpus) and corpus.train and corpus.valid
    boilerplate = "Copyright the author. All rights reserved."
    path.write_text("\n\n".join(f"Paragraph {i}. " + "words " * 100 + "\n\n" + boilerplate for i in range(40)),
                    encoding="utf-8")
    corpus = load_text_file(path, min_chars=600)
    assert corpus.valid and not any(boilerplate in text for text in corpus.valid)
    assert any(boilerplate in text for text in corpus.train)
    with pytest.raises(ValueError, match="too few"):
        (tmp_path / "short.txt").write_text("tiny", encoding="utf-8")
        load_text_file(tmp_path / "short.txt")


@pytest.mark.slow
def test_a_small_lm_learns_a_repeating_stream() -> None:
    torch.manual_seed(0)
    stream = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6] * 100)
    model = GPT(10, 16, 2, 1, 32, 16)
    history = train_lm(model, stream, steps=60, batch_size=8, seq_len=16, lr=1e-2, warmup=5, progress=False)
    assert history.losses[-1] < 0.5 * history.losses[0]
    assert evaluate_perplexity(model, stream[:200], 16) < 2.0


def test_kneser_ney_rediscounted_equals_a_fresh_count_and_tuning_keeps_the_dev_minimum() -> None:
    """Another discount on the same counts is the model built with it; the tuning's choice is the pair of lowest
    development perplexity, each entry equal to a model built afresh and scored on the development text."""
    from course_lib.models.ngram import tune_kneser_ney

    gen = torch.Generator().manual_seed(0)
    train = torch.randint(0, 6, (400,), generator=gen) // 2 * 2  # even ids only: some structure to learn
    train[1::3] = (train[0::3][: len(train[1::3])] + 1) % 6  # an odd id follows each third token
    dev = train[:120].flip(0).contiguous()
    lm = KneserNeyLM(train, vocab_size=6, order=3)
    fresh = KneserNeyLM(train, vocab_size=6, order=3, discount=0.9)
    assert lm.rediscounted(0.9).perplexity(dev) == fresh.perplexity(dev) and lm.discount == 0.75
    tuning = tune_kneser_ney(train, dev, 6, orders=(1, 2, 3), discounts=(0.3, 0.75, 0.95))
    best = min(p for row in tuning.dev_perplexity.values() for p in row.values())
    assert tuning.dev_perplexity[tuning.order][tuning.discount] == best
    assert tuning.dev_perplexity[2][0.3] == KneserNeyLM(train, 6, 2, 0.3).perplexity(dev)
    with pytest.raises(ValueError, match=r"discount must be a number in \(0, 1\), got 1.0"):
        lm.rediscounted(1.0)
