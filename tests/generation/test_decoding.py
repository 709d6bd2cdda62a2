"""course_lib.generation.decoding: greedy decoding and beam search against brute force on a model whose probabilities
we know, batching, beam_size=1 equal to greedy, and clear errors for bad input."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from course_lib.data.translation import Vocab, WordTokenizer
from course_lib.generation.decoding import beam_search, beam_search_step, greedy_decode, translate

PAD, BOS, EOS = 0, 1, 2
V = 6  # ids 0..5: pad, bos, eos, and three words 3, 4, 5


class MarkovModel(nn.Module):
    """A fake encoder-decoder: the next token's log-probabilities depend only on the source's first token
    (a 'context') and the previous target token, read from a fixed random table."""

    def __init__(self, seed: int = 0, max_len: int = 32) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(V, V, V, generator=gen) * 2  # (context, previous token, next token)
        logits[..., PAD] = -1e9
        logits[..., BOS] = -1e9
        self.table = nn.Parameter(torch.log_softmax(logits, dim=-1), requires_grad=False)
        self.max_len, self.pad_id = max_len, PAD
        self.calls = 0

    def encode(self, src):
        return src.float().unsqueeze(-1)  # (batch, src_len, 1)

    def decode(self, tgt_in, memory, src_mask=None):
        self.calls += 1
        context = memory[:, 0, 0].long()  # (batch,)
        return self.table[context.unsqueeze(1).expand_as(tgt_in), tgt_in]  # (batch, tgt_len, V)

    def sequence_log_prob(self, context: int, tokens: list[int]) -> float:
        prev, total = BOS, 0.0
        for t in tokens:
            total += float(self.table[context, prev, t])
            prev = t
        return total


def _strip(row: torch.Tensor) -> list[int]:
    out = []
    for t in row.tolist():
        out.append(t)
        if t == EOS:
            break
    return [t for t in out if t != PAD]


def _brute_force(model: MarkovModel, context: int, max_len: int, alpha: float) -> tuple[list[int], float]:
    """The best sequence among all finished ones (ending in <eos>) and unfinished ones of length max_len."""
    best, best_score = None, -math.inf
    for n in range(1, max_len + 1):
        for body in itertools.product([3, 4, 5, EOS], repeat=n):
            if EOS in body[:-1]:
                continue
            if body[-1] != EOS and n < max_len:
                continue
            score = model.sequence_log_prob(context, list(body)) / (n ** alpha)
            if score > best_score:
                best, best_score = list(body), score
    return best, best_score


def test_greedy_follows_the_argmax_chain() -> None:
    model = MarkovModel(1)
    src = torch.tensor([[3, 4], [5, 0]])
    out = greedy_decode(model, src, max_len=6)
    for row, context in zip(out, [3, 5], strict=True):
        prev, expected = BOS, []
        for _ in range(6):
            prev = int(model.table[context, prev].argmax())
            expected.append(prev)
            if prev == EOS:
                break
        assert _strip(row) == expected


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_finds_the_brute_force_optimum(seed, alpha) -> None:
    model = MarkovModel(seed)
    src = torch.tensor([[3], [4], [5]])
    out, scores = beam_search(model, src, beam_size=64, max_len=4, length_penalty=alpha, return_scores=True)
    for row, context, score in zip(out, [3, 4, 5], scores, strict=True):
        best, best_score = _brute_force(model, context, 4, alpha)
        assert _strip(row) == best
        assert float(score) == pytest.approx(best_score, abs=1e-5)


def test_beam_of_one_is_greedy() -> None:
    model = MarkovModel(4)
    src = torch.tensor([[3, 4, 5], [4, 0, 0], [5, 3, 0]])
    assert torch.equal(beam_search(model, src, beam_size=1, max_len=8), greedy_decode(model, src, max_len=8))


def test_beam_is_never_worse_than_greedy_in_model_score() -> None:
    for seed in range(5):
        model = MarkovModel(seed)
        src = torch.tensor([[3], [4], [5]])
        g = greedy_decode(model, src, max_len=6)
        b = beam_search(model, src, beam_size=4, max_len=6, length_penalty=0.0)
        for gr, br, c in zip(g, b, [3, 4, 5], strict=True):
            assert model.sequence_log_prob(c, _strip(br)) >= model.sequence_log_prob(c, _strip(gr)) - 1e-6


def test_batched_beam_equals_one_sentence_at_a_time() -> None:
    model = MarkovModel(7)
    src = torch.tensor([[3, 5, 4], [5, 0, 0], [4, 4, 0]])
    batched = beam_search(model, src, beam_size=3, max_len=7)
    for i in range(3):
        single = beam_search(model, src[i:i + 1, : int((src[i] != 0).sum())], beam_size=3, max_len=7)
        assert _strip(batched[i]) == _strip(single[0])


def test_beam_search_step_against_brute_force() -> None:
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, generator=gen)
    log_probs = torch.log_softmax(torch.randn(2, 3, 7, generator=gen), dim=-1)
    new, beam, tok = beam_search_step(scores, log_probs, 4)
    for b in range(2):
        cands = sorted(((float(scores[b, k] + log_probs[b, k, v]), k, v) for k in range(3) for v in range(7)),
                       reverse=True)[:4]
        assert [(k, v) for _, k, v in cands] == list(zip(beam[b].tolist(), tok[b].tolist(), strict=True))
        assert new[b].tolist() == pytest.approx([s for s, _, _ in cands])


def test_decoding_stops_when_all_are_finished() -> None:
    model = MarkovModel(0)
    model.table.data[..., EOS] = 0.0  # <eos> is certain
    model.table.data[..., 3:] = -1e9
    out = greedy_decode(model, torch.tensor([[3], [4]]), max_len=20)
    assert out.tolist() == [[EOS], [EOS]] and model.calls == 1


@pytest.mark.parametrize("fn", [greedy_decode, beam_search])
def test_bad_sources_raise_before_any_layer(fn) -> None:
    model = MarkovModel(0, max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        fn(model, torch.full((1, 9), 3))
    with pytest.raises(ValueError, match="empty"):
        fn(model, torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"rows \[1\] are all padding"):
        fn(model, torch.tensor([[3, 4], [0, 0]]))
    with pytest.raises(ValueError, match=r"\(batch, src_len\)"):
        fn(model, torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="needs 9 target positions"):
        fn(model, torch.tensor([[3]]), max_len=8)
    assert model.calls == 0


def test_beam_search_bad_arguments() -> None:
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(MarkovModel(0), torch.tensor([[3]]), beam_size=0)
    with pytest.raises(ValueError, match="length_penalty"):
        beam_search(MarkovModel(0), torch.tensor([[3]]), length_penalty=-1.0)


def _translation_setup():
    src_vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "four", "five"])
    tgt_vocab = Vocab(["<pad>", "<bos>", "<eos>", "<unk>", "vier", "fünf"])

    class Joiner:
        def tokenize(self, text):
            return text.split()

        def detokenize(self, tokens):
            return "+".join(tokens)

    return src_vocab, tgt_vocab, Joiner()


def test_translate_strings_in_order_and_unknown_words() -> None:
    model = MarkovModel(3)
    sv, tv, tt = _translation_setup()
    sentences = ["five four five", "four", "five"]
    out = translate(model, sentences, WordTokenizer(), sv, tt, tv, max_len=5, batch_size=2)
    direct = greedy_decode(model, torch.tensor([[5, 4, 5], [4, 0, 0], [5, 0, 0]]), max_len=5)
    assert out == [tt.detokenize(tv.decode(r.tolist())) for r in direct]
    assert translate(model, ["six"], WordTokenizer(), sv, tt, tv, max_len=5) == \
        translate(model, ["<unk>"], WordTokenizer(), sv, tt, tv, max_len=5)  # unknown word -> <unk> (id 3)
    with pytest.raises(KeyError, match="six"):
        translate(model, ["six"], WordTokenizer(), sv, tt, tv, unknown="error")
    with pytest.raises(ValueError, match="sentence 1"):
        translate(model, ["four", "  "], WordTokenizer(), sv, tt, tv)
    with pytest.raises(TypeError, match="list of strings"):
        translate(model, "four", WordTokenizer(), sv, tt, tv)
    beam = translate(model, sentences, WordTokenizer(), sv, tt, tv, method="beam", beam_size=1, max_len=5)
    assert beam == out


def test_with_the_course_transformer() -> None:
    from course_lib.models.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(10, 12, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32,
                        dropout=0.0, max_len=16).eval()
    src = torch.tensor([[4, 5, 6], [7, 8, 0]])
    g = greedy_decode(model, src, max_len=6)
    assert g.shape[0] == 2 and g.shape[1] <= 6
    assert torch.equal(beam_search(model, src, beam_size=1, max_len=6), g)
    with pytest.raises(ValueError, match="max_len=16"):
        greedy_decode(model, torch.full((1, 17), 4))
