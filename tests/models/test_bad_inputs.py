"""Bad inputs to the public API that gave a cryptic error or none (issue 17): each now gets a clear one.

Every error names the argument and what was expected and given. Also the two documented rules: NaN in
attention's input is NaN in its output on both of MultiHeadAttention's paths, and an empty batch (batch 0)
is accepted by every module (an empty result), an empty sequence refused.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_lib import Encoder, MultiHeadAttention, Transformer, padding_mask, scaled_dot_product_attention
from course_lib.generation.decoding import beam_search, beam_search_step, greedy_decode
from course_lib.models.attention import fused_attention
from course_lib.training.engine import label_smoothed_cross_entropy, transformer_lr


def test_float64_query_with_float32_key_is_named() -> None:
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4)
    for fn in (scaled_dot_product_attention, fused_attention):
        with pytest.raises(TypeError, match=r"same dtype.*query torch.float64, key torch.float32"):
            fn(q, k, k)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(TypeError, match=r"weights' dtype torch.float32.*query torch.float64"):
        mha(x.double(), x, x)


def test_target_beyond_the_classes_is_named() -> None:
    logits, target = torch.randn(2, 3, 5), torch.tensor([[1, 2, 7], [0, 4, 1]])
    with pytest.raises(ValueError, match=r"class id 7 at index \[0, 2\], outside the 5 classes"):
        label_smoothed_cross_entropy(logits, target)
    with pytest.raises(ValueError, match="class id -3"):
        label_smoothed_cross_entropy(logits, torch.tensor([[1, 2, -3], [0, 4, 1]]))
    # the ignored id may lie outside the classes (PyTorch's -100), as in nn.CrossEntropyLoss
    target = torch.tensor([[1, 2, -100], [0, 4, 1]])
    ours = label_smoothed_cross_entropy(logits, target, smoothing=0.1, ignore_index=-100)
    theirs = nn.CrossEntropyLoss(label_smoothing=0.1)(logits.reshape(-1, 5), target.reshape(-1))
    assert torch.allclose(ours, theirs, atol=1e-6)


@pytest.mark.parametrize("beam_size", [0, -1, 7, True, 2.0])
def test_beam_step_beam_size_outside_the_candidates(beam_size) -> None:
    scores, log_probs = torch.zeros(2, 2), torch.randn(2, 2, 3).log_softmax(-1)  # 2 beams * 3 tokens = 6
    with pytest.raises(ValueError, match=r"beam_size must be an int from 1 to beam \* vocab = 6"):
        beam_search_step(scores, log_probs, beam_size)


def test_beam_step_mismatched_shapes_are_named() -> None:
    with pytest.raises(ValueError, match=r"got scores \(2, 3\) and log_probs \(2, 2, 5\)"):
        beam_search_step(torch.zeros(2, 3), torch.randn(2, 2, 5), 2)
    with pytest.raises(ValueError, match="scores must have shape"):
        beam_search_step(torch.zeros(2), torch.randn(2, 1, 5), 2)


@pytest.mark.parametrize("bad", [0, -2])
def test_beam_search_refuses_beam_size_below_one(bad: int) -> None:
    model = Transformer(7, 7, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16)
    with pytest.raises(ValueError, match="beam_size must be an int >= 1"):
        beam_search(model, torch.tensor([[3, 4]]), beam_size=bad, max_len=3)


def test_transformer_lr_refuses_negative_steps_and_reads_zero_as_one() -> None:
    with pytest.raises(ValueError, match="step must be >= 0.*got -5"):
        transformer_lr(-5, d_model=512)
    assert transformer_lr(0, 512, 4000) == transformer_lr(1, 512, 4000) == pytest.approx(512 ** -0.5 * 4000 ** -1.5)


def test_nan_query_gives_nan_on_both_paths_of_multi_head_attention() -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    q = x.clone()
    q[0, 1, 0] = float("nan")
    fused, _ = mha(q, x, x)
    formula, _ = mha(q, x, x, need_weights=True)
    assert torch.equal(fused.isnan(), formula.isnan())
    assert fused[0, 1].isnan().all() and not fused[1].isnan().any()  # only that query's row
    torch.testing.assert_close(fused.nan_to_num(7.0), formula.nan_to_num(7.0))
    # finite input still takes PyTorch's fused kernel and agrees with the formula
    torch.testing.assert_close(mha(x, x, x)[0], mha(x, x, x, need_weights=True)[0])


def test_fused_attention_sends_inf_to_the_formula_and_survives_a_sum_that_overflows() -> None:
    """fused_attention proves its input finite with one sum: an inf must be caught, a huge total is harmless."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    k_inf = k.clone()
    k_inf[0, 1, 2, 0] = float("inf")
    fused, formula = fused_attention(q, k_inf, v), scaled_dot_product_attention(q, k_inf, v)[0]
    assert torch.equal(fused.isnan(), formula.isnan()) and fused[0, 1].isnan().any()
    torch.testing.assert_close(fused.nan_to_num(7.0), formula.nan_to_num(7.0))
    huge = torch.full_like(v, 3e38)  # every element finite; their float32 sum overflows to inf
    out = fused_attention(q, k, huge)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, huge)[0])


def test_two_d_mask_when_batch_equals_seq_is_refused_unless_unambiguous() -> None:
    """One rule: a 2-D mask is (seq_q, seq_k); a (batch, seq_k) padding mask has that shape when batch == seq_q."""
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(4, 4, 8)
    tokens = torch.tensor([[5, 6, 0, 0], [5, 6, 7, 0], [5, 0, 0, 0], [5, 6, 7, 8]])
    with pytest.raises(ValueError, match=r"ambiguous.*batch == seq_q == 4.*\(batch, 1, 1, seq_k\)"):
        mha(x, x, x, mask=tokens != 0)
    with pytest.raises(ValueError, match="ambiguous"):
        scaled_dot_product_attention(x, x, x, mask=tokens != 0)
    # the unambiguous forms pass: 4-D padding, a causal 2-D mask, an all-True 2-D mask, and any 2-D mask
    # when batch != seq_q
    mha(x, x, x, mask=padding_mask(tokens, 0))
    causal = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    torch.testing.assert_close(mha(x, x, x, mask=causal)[0], mha(x, x, x, mask=causal[None, None])[0])
    mha(x, x, x, mask=torch.ones(4, 4, dtype=torch.bool))
    mha(x[:3], x[:3], x[:3], mask=tokens[:, :4] != 0)  # batch 3, seq 4: a (seq_q, seq_k) mask, no doubt


def test_batch_zero_is_accepted_everywhere() -> None:
    """The one rule for batch 0: every module returns an empty result; an empty sequence is refused."""
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.zeros(0, 3, 8)
    assert mha(x, x, x)[0].shape == (0, 3, 8) and mha(x, x, x, need_weights=True)[1].shape == (0, 2, 3, 3)
    assert Encoder(1, 8, 2, 16).eval()(x).shape == (0, 3, 8)
    model = Transformer(7, 7, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16).eval()
    src, tgt = torch.zeros(0, 5, dtype=torch.long), torch.zeros(0, 4, dtype=torch.long)
    assert model(src, tgt).shape == (0, 4, 7)
    assert model.encode(src).shape == (0, 5, 8)
    assert greedy_decode(model, src, max_len=3).shape == (0, 0)
    out, scores = beam_search(model, src, beam_size=2, max_len=3, return_scores=True)
    assert out.shape == (0, 0) and scores.shape == (0,)
    assert label_smoothed_cross_entropy(torch.zeros(0, 4, 7), torch.zeros(0, 4, dtype=torch.long)) == 0
    with pytest.raises(ValueError, match="length 0"):
        model(torch.zeros(2, 0, dtype=torch.long), tgt[:2])
    with pytest.raises(ValueError, match="length 0"):
        greedy_decode(model, torch.zeros(2, 0, dtype=torch.long))


def test_mixed_precision_inputs_are_accepted_under_autocast() -> None:
    """Under autocast the activations are bfloat16 while the weights stay float32: not a dtype mistake."""
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = mha(x.bfloat16(), x.bfloat16(), x.bfloat16())
    assert out.dtype == torch.bfloat16
    with pytest.raises(TypeError, match="same dtype"), torch.autocast("cpu", dtype=torch.bfloat16):
        mha(x.bfloat16(), x, x)


def test_causal_mask_with_a_cache_offset_is_unambiguous() -> None:
    """A key/value cache's chunk mask (query i sees keys 0..i + offset) is causal, whatever the batch."""
    q, k = torch.randn(2, 2, 4), torch.randn(2, 5, 4)
    chunk = torch.tril(torch.ones(2, 5, dtype=torch.bool), diagonal=3)
    out, weights = scaled_dot_product_attention(q, k, k, mask=chunk)
    assert torch.equal(weights == 0, ~chunk.expand(2, 2, 5))
    with pytest.raises(ValueError, match="ambiguous"):
        scaled_dot_product_attention(q, k, k, mask=torch.tensor([[True, True, False, True, False]] * 2))


# Issue 33: bad inputs to the API of notebooks 09-13 that were silent or cryptic.

def _gpt(vocab_size: int = 20, max_len: int = 16):
    from course_lib.models.gpt import GPT

    torch.manual_seed(0)
    return GPT(vocab_size, d_model=8, num_heads=2, num_layers=1, max_len=max_len).eval()


def test_lm_loss_on_one_token_sequences_is_refused_not_nan() -> None:
    from course_lib.training.language_model import lm_loss

    with pytest.raises(ValueError, match=r"lm_loss: tokens must have seq >= 2.*got shape \(3, 1\)"):
        lm_loss(torch.randn(3, 1, 5), torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match=r"lm_loss: logits must be floating point and tokens integer ids, got "
                                         r"torch.float32 and torch.float32"):
        lm_loss(torch.randn(3, 4, 5), torch.zeros(3, 4))


@pytest.mark.parametrize(("stream", "message"), [
    (torch.tensor([0, 1, 5, 2]), r"stream must hold ids in \[0, vocab_size=4\), got ids from 0 to 5"),
    (torch.tensor([0, -1, 2]), r"ids in \[0, vocab_size=4\), got ids from -1 to 2"),
    (torch.tensor([], dtype=torch.long), "at least one token to count, got an empty stream"),
    (torch.tensor([0.0, 1.0, 2.0]), r"1-D integer tensor of token ids, got torch.float32 of shape \(3,\)"),
    (torch.tensor([[0, 1], [2, 3]]), r"1-D integer tensor.*shape \(2, 2\)"),
])
def test_kneser_ney_refuses_a_stream_it_cannot_count(stream: torch.Tensor, message: str) -> None:
    from course_lib.models.ngram import KneserNeyLM

    with pytest.raises(ValueError, match=message):
        KneserNeyLM(stream, vocab_size=4, order=3)


def test_kneser_ney_refuses_ids_outside_the_vocabulary_when_scoring() -> None:
    from course_lib.models.ngram import KneserNeyLM

    lm = KneserNeyLM(torch.tensor([0, 1, 2, 0, 1, 2]), vocab_size=4, order=2)
    with pytest.raises(ValueError, match=r"y: stream must hold ids in \[0, vocab_size=4\), got ids from 0 to 9"):
        lm.perplexity(torch.tensor([0, 1, 9]))
    with pytest.raises(ValueError, match=r"prob: context and w must be int ids in \[0, 4\), got 4"):
        lm.prob((0,), 4)
    with pytest.raises(ValueError, match=r"targets must be a bool tensor of the stream's shape \(3,\)"):
        lm.perplexity(torch.tensor([0, 1, 2]), targets=torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="vocab_size must be an int >= 1, got 0"):
        KneserNeyLM(torch.tensor([0, 1]), vocab_size=0)


def test_generate_refuses_a_negative_number_of_new_tokens() -> None:
    from course_lib.generation.sampling import generate

    model, prompt = _gpt(), torch.tensor([[1, 2, 3]])
    for use_cache in (True, False):
        with pytest.raises(ValueError, match="generate: max_new_tokens must be an int >= 0, got -1"):
            generate(model, prompt, max_new_tokens=-1, use_cache=use_cache)
    assert torch.equal(generate(model, prompt, max_new_tokens=0), prompt)  # zero: the prompt, as asked


def test_the_cache_path_makes_the_id_check_of_gpt_forward() -> None:
    from course_lib.generation.sampling import generate

    model = _gpt(vocab_size=20)
    bad = torch.tensor([[1, 25, 3]])
    with pytest.raises(ValueError, match=r"GPT: token ids must be in \[0, vocab_size=20\), got \[1, 25\]"):
        model(bad)
    with pytest.raises(ValueError, match=r"GPT: token ids must be in \[0, vocab_size=20\), got \[1, 25\]"):
        model(bad, cache=model.make_cache())
    for use_cache in (True, False):
        with pytest.raises(ValueError, match=r"generate: token ids must be in \[0, vocab_size=20\), got \[1, 25\]"):
            generate(model, bad, max_new_tokens=2, use_cache=use_cache)
    with pytest.raises(ValueError, match=r"generate: tokens must be an integer tensor of shape \(batch, seq\), "
                                         r"got torch.float32 \(1, 3\)"):
        generate(model, bad.float(), max_new_tokens=2)
    layers = model.make_cache()
    model(torch.tensor([[1, 2], [3, 4]]), cache=layers)
    with pytest.raises(ValueError, match="GPT: the cache holds batch 2, tokens has batch 3"):
        model(torch.tensor([[1], [2], [3]]), cache=layers)


def test_attend_with_cache_names_the_mismatched_argument() -> None:
    from course_lib.generation.sampling import attend_with_cache

    q = k = v = torch.randn(2, 4, 1, 8)  # (batch, heads, new, d_k)
    past = torch.randn(2, 4, 5, 8)
    with pytest.raises(ValueError, match=r"past_keys must have shape \(batch=2, heads=4, past, 8\).*\(2, 3, 5, 8\)"):
        attend_with_cache(q, k, v, torch.randn(2, 3, 5, 8), past)
    with pytest.raises(ValueError, match=r"past_values must have shape .*got \(2, 4, 5, 6\)"):
        attend_with_cache(q, k, v, past, torch.randn(2, 4, 5, 6))
    with pytest.raises(ValueError, match="must hold the same number of positions, got 5 and 4"):
        attend_with_cache(q, k, v, past, torch.randn(2, 4, 4, 8))
    with pytest.raises(ValueError, match="must both be None .* got Tensor and NoneType"):
        attend_with_cache(q, k, v, past, None)
    with pytest.raises(ValueError, match=r"q_new and k_new must have the same shape.*k_new \(2, 4, 1, 6\)"):
        attend_with_cache(q, torch.randn(2, 4, 1, 6), v, None, None)
    with pytest.raises(ValueError, match=r"k_new must be a 4-D tensor \(batch, heads, new, d_k\), got \(2, 1, 8\)"):
        attend_with_cache(q, torch.randn(2, 1, 8), v, None, None)


@pytest.mark.parametrize(("poison", "found"), [(float("nan"), "NaN"), (float("inf"), r"\+inf")])
def test_sample_next_token_names_nan_and_inf_logits(poison: float, found: str) -> None:
    from course_lib.generation.sampling import sample_next_token

    logits = torch.randn(3, 5)
    logits[1, 2] = poison
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match=f"sample_next_token: logits must be finite.*row 1 holds {found}"):
            sample_next_token(logits, temperature=temperature)
    with pytest.raises(ValueError, match="row 0 holds only -inf"):
        sample_next_token(torch.full((1, 4), float("-inf")))
    with pytest.raises(ValueError, match="temperature must be a number >= 0, got nan"):
        sample_next_token(torch.randn(1, 4), temperature=float("nan"))


def test_sequential_windows_names_seq_len_zero() -> None:
    from course_lib.data.python_docs import random_windows, sequential_windows

    stream = torch.arange(10)
    for fn in (sequential_windows, lambda s, n: random_windows(s, 2, n)):
        with pytest.raises(ValueError, match=r"_windows: seq_len must be an int >= 1, got 0"):
            fn(stream, 0)
    with pytest.raises(ValueError, match="seq_len=12 needs a stream of at least seq_len \\+ 1 tokens, got 10"):
        sequential_windows(stream, 12)


def test_bert_refuses_a_pad_id_outside_its_vocabulary_and_a_head_without_classes() -> None:
    from course_lib.models.bert import BERT, ClassificationHead

    with pytest.raises(ValueError, match=r"BERT: pad_id must be None or an id in \[0, vocab_size=20\), got 30"):
        BERT(vocab_size=20, d_model=8, num_heads=2, num_layers=1, pad_id=30)
    with pytest.raises(ValueError, match="ClassificationHead: num_classes must be an int >= 1, got 0"):
        ClassificationHead(d_model=8, num_classes=0)
    with pytest.raises(ValueError, match="BERT: num_classes must be an int >= 0, got -1"):
        BERT(vocab_size=20, d_model=8, num_heads=2, num_layers=1, num_classes=-1)


def test_mask_tokens_refuses_ids_outside_the_vocabulary() -> None:
    from course_lib.models.bert import mask_tokens

    tokens = torch.tensor([[4, 5, 25, 6]])
    with pytest.raises(ValueError, match=r"tokens must hold ids in \[0, vocab_size=20\), got ids from 4 to 25"):
        mask_tokens(tokens, mask_id=3, vocab_size=20, special_ids=[0, 1, 2])


def test_additive_attention_blames_the_argument_that_is_wrong() -> None:
    from course_lib.models.seq2seq import additive_attention

    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 6)
    w_q, w_k = torch.randn(8, 4), torch.randn(8, 6)
    with pytest.raises(ValueError, match=r"v must have shape \(d_att=8,\) like w_q \(8, 4\), got \(7,\)"):
        additive_attention(q, k, k, w_q, w_k, torch.randn(7))
    with pytest.raises(ValueError, match=r"w_k must have shape \(d_att=8, d_k=6\) like w_q \(8, 4\), got \(7, 6\)"):
        additive_attention(q, k, k, w_q, torch.randn(7, 6), torch.randn(8))
    with pytest.raises(ValueError, match=r"w_q must have shape \(d_att, d_q=4\), got \(8, 5\)"):
        additive_attention(q, k, k, torch.randn(8, 5), w_k, torch.randn(8))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"steps": -1}, "train_lm: steps must be an int >= 1, got -1"),
    ({"batch_size": 0}, "train_lm: batch_size must be an int >= 1, got 0"),
    ({"lr": 0.0}, "train_lm: lr must be > 0, got 0.0"),
    ({"eval_every": 5}, "eval_every=5 needs a valid_stream"),
])
def test_train_lm_names_a_bad_setting_before_training(kwargs: dict, message: str) -> None:
    from course_lib.training.language_model import train_lm

    settings = {"steps": 2, "batch_size": 2, "seq_len": 4, "progress": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        train_lm(_gpt(), torch.randint(0, 20, (50,)), **settings)


def test_fine_tuning_and_accuracy_name_labels_that_do_not_fit() -> None:
    from course_lib.models.bert import BERT
    from course_lib.training.pretraining import fine_tune, labelled_subset

    model = BERT(20, d_model=8, num_heads=2, num_layers=1, max_len=16, num_classes=3)
    tokens = torch.randint(0, 20, (8, 10))
    with pytest.raises(ValueError, match=r"fine_tune: labels must be class ids in \[0, 3\).*got ids from 5 to 5"):
        fine_tune(model, tokens, torch.full((8,), 5), 2, progress=False)
    with pytest.raises(ValueError, match=r"and labels \(batch,\), got \(8, 10\) and \(7,\)"):
        fine_tune(model, tokens, torch.zeros(7, dtype=torch.long), 2, progress=False)
    with pytest.raises(ValueError, match="labelled_subset: per_class must be an int >= 1, got 0"):
        labelled_subset(torch.tensor([0, 1, 0, 1]), 0, seed=0)


# --- notebook 14's API (issue 48) -----------------------------------------------------------------------------

def _tiny_llama_folder(folder):
    """A checkpoint folder as save_pretrained writes it, from a small random Llama of transformers."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                                      num_attention_heads=2, max_position_embeddings=32)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_load_llama_takes_a_dtype_by_name_and_names_a_bad_one(tmp_path) -> None:
    from course_lib.models.pretrained import load_gpt2, load_llama

    folder = _tiny_llama_folder(tmp_path)
    for name in ("float16", "torch.bfloat16", "float64"):
        model = load_llama(folder, dtype=name)
        assert model.lm_head.weight.dtype == getattr(torch, name.removeprefix("torch."))
    for bad in ("half-precision", "int8", torch.int64, 16):
        with pytest.raises(ValueError, match=r"load_llama: dtype must be a floating-point torch.dtype, its name"
                                             r"|load_llama: dtype must be a floating-point dtype"):
            load_llama(folder, dtype=bad)
    with pytest.raises(ValueError, match="load_gpt2: dtype must be"):
        load_gpt2(folder, dtype="float17")


def test_a_config_without_a_key_and_a_truncated_weights_file_are_named(tmp_path) -> None:
    import json

    from course_lib.models.pretrained import load_llama

    folder = _tiny_llama_folder(tmp_path)
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    with pytest.raises(ValueError, match=r"model.safetensors is not a readable safetensors file \(truncated"):
        load_llama(folder)
    (folder / "model.safetensors").write_bytes(weights)
    config = json.loads((folder / "config.json").read_text())
    del config["num_hidden_layers"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json lacks \['num_hidden_layers'\]"):
        load_llama(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="config.json is not valid JSON"):
        load_llama(folder)


def test_llama_refuses_heads_that_do_not_divide_the_width_as_hugging_face_does() -> None:
    from course_lib.models.llama import Llama

    with pytest.raises(ValueError, match=r"d_model=18 must be divisible by num_heads=4 .*4 x 4 = 16 != 18"):
        Llama(50, d_model=18, num_heads=4)
    transformers = pytest.importorskip("transformers")
    with pytest.raises(Exception, match="hidden size .18. is not a multiple of the number of attention heads .4."):
        transformers.LlamaConfig(vocab_size=50, hidden_size=18, num_attention_heads=4)  # the reference refuses it
    assert Llama(50, d_model=18, num_heads=4, d_k=6).layers[0].self_attn.w_q.out_features == 24  # d_k given: fine


@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan"), "1e-6", True])
def test_rmsnorm_refuses_eps_that_is_not_positive(eps) -> None:
    from course_lib.models.llama import RMSNorm

    with pytest.raises(ValueError, match=r"RMSNorm: eps must be a number > 0 .*got"):
        RMSNorm(8, eps=eps)
    zeros = RMSNorm(8, eps=1e-6)(torch.zeros(2, 8))
    assert torch.equal(zeros, torch.zeros(2, 8))  # a row of zeros: zeros, not NaN


def test_swiglu_names_an_input_of_the_wrong_width() -> None:
    from course_lib.models.llama import SwiGLU

    with pytest.raises(ValueError, match=r"SwiGLU: x must be a floating-point tensor of shape \(..., d_model=8\), "
                                         r"got torch.float32 \(2, 3, 6\)"):
        SwiGLU(8, 24)(torch.randn(2, 3, 6))


def test_attention_positions_of_the_wrong_shape_are_named() -> None:
    from course_lib.models.gqa import GroupedQueryAttention

    attn = GroupedQueryAttention(16, 4, 2)
    x = torch.randn(2, 5, 16)
    for bad in (torch.arange(4), torch.arange(5.0), torch.zeros(3, 5, dtype=torch.long), [0, 1, 2, 3, 4]):
        with pytest.raises(ValueError, match=r"positions must be an integer tensor of shape \(seq=5,\) or "
                                             r"\(batch=2, seq=5\)"):
            attn(x, positions=bad)
