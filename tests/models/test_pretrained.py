"""Checkpoints saved by ``transformers`` (randomly initialised, small configs) load into the course's models
with equal logits (float32, <= 1e-5): GPT-2 into ``GPT``, Llama and Mistral into ``Llama``; safetensors,
``pytorch_model.bin`` and shards; cached generation equal to the uncached one; bad folders named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from course_lib.generation.sampling import generate
from course_lib.models.gpt import GPT
from course_lib.models.llama import Llama
from course_lib.models.pretrained import load_gpt2, load_llama, read_checkpoint
from course_lib.models.rope import Llama3Scaling

transformers = pytest.importorskip("transformers")

TOL = {"rtol": 0, "atol": 1e-5}


def _save(model: torch.nn.Module, folder: Path, **kwargs) -> Path:
    model.save_pretrained(folder, **kwargs)
    return folder


@torch.no_grad()
def _perturb_vectors(model: torch.nn.Module) -> torch.nn.Module:
    """Biases and norm gains away from their 0 / 1 start, so that a wrong mapping of them shows."""
    for p in model.parameters():
        if p.dim() == 1:
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _gpt2(tie: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=40, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0, tie_word_embeddings=tie)
    model = transformers.GPT2LMHeadModel(config).eval()
    return _perturb_vectors(model)


def _llama(num_kv_heads: int = 2, tie: bool = False, model_type: str = "llama", **extra) -> torch.nn.Module:
    torch.manual_seed(1)
    kind = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
            "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[model_type]
    config = kind[0](vocab_size=100, hidden_size=32, intermediate_size=88, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=num_kv_heads, rms_norm_eps=1e-5, rope_theta=500000.0,
                     max_position_embeddings=64, tie_word_embeddings=tie, **extra)
    model = kind[1](config).eval()
    return _perturb_vectors(model)


def _logits(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits


@pytest.mark.parametrize("tie", [True, False])
def test_gpt2_checkpoint_gives_equal_logits(tmp_path: Path, tie: bool) -> None:
    theirs = _gpt2(tie)
    ours = load_gpt2(_save(theirs, tmp_path))
    assert isinstance(ours, GPT) and not ours.training
    assert (ours.lm_head.weight is ours.token_embedding.weight) == tie
    tokens = torch.randint(0, 100, (3, 17))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), _logits(theirs, tokens), **TOL)


@pytest.mark.parametrize("num_kv_heads, tie", [(2, False), (1, True), (4, False)])
def test_llama_checkpoint_gives_equal_logits(tmp_path: Path, num_kv_heads: int, tie: bool) -> None:
    theirs = _llama(num_kv_heads, tie)
    ours = load_llama(_save(theirs, tmp_path))
    assert (tmp_path / "model.safetensors").exists()
    assert isinstance(ours, Llama) and ours.layers[0].self_attn.num_kv_heads == num_kv_heads
    tokens = torch.randint(0, 100, (2, 19))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), _logits(theirs, tokens), **TOL)


def test_mistral_sliding_window_checkpoint_gives_equal_logits_past_the_window(tmp_path: Path) -> None:
    theirs = _llama(2, model_type="mistral", sliding_window=5)
    theirs.config._attn_implementation = "eager"
    ours = load_llama(_save(theirs, tmp_path))
    assert ours.window == 5
    tokens = torch.randint(0, 100, (2, 16))  # longer than the window: the mask matters
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), _logits(theirs, tokens), **TOL)


def test_the_window_cache_after_a_long_prefill_equals_hugging_faces_mistral(tmp_path: Path) -> None:
    """Mistral's rolling buffer: after a prompt longer than the window only the last ``window`` positions stay
    (copies: the prompt's memory is let go), and every decoding step's logits equal Hugging Face's uncached
    sliding-window forward over all the tokens."""
    window = 5
    theirs = _llama(2, model_type="mistral", sliding_window=window)
    theirs.config._attn_implementation = "eager"
    ours = load_llama(_save(theirs, tmp_path))
    tokens = torch.randint(0, 100, (2, 12))  # the prompt: more than twice the window
    with torch.no_grad():
        cache = ours.make_cache()
        logits = ours(tokens, cache)
        torch.testing.assert_close(logits, _logits(theirs, tokens), **TOL)
        assert all(c.length == window and c.keys.untyped_storage().nbytes() == c.keys.nbytes for c in cache)
        for _ in range(9):  # greedy steps, each checked against Hugging Face's full forward
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            logits = ours(tokens[:, -1:], cache)
            torch.testing.assert_close(logits[:, -1], _logits(theirs, tokens)[:, -1], **TOL)
            assert cache[0].length == window and cache[0].seen == tokens.shape[1]


def test_cached_generation_equals_uncached_and_hugging_faces(tmp_path: Path) -> None:
    theirs = _llama(2)
    theirs.generation_config.eos_token_id = None  # no end-of-sequence: both run the full 8 steps
    ours = load_llama(_save(theirs, tmp_path))
    prompt = torch.randint(0, 100, (2, 5))
    with torch.no_grad():
        cache, tokens = ours.make_cache(), prompt
        logits = ours(prompt, cache)
        for _ in range(8):  # greedy, one token at a time through the cache
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            logits = ours(tokens[:, -1:], cache)
    uncached = generate(ours, prompt, 8, temperature=0, use_cache=False)
    hf = theirs.generate(prompt, max_new_tokens=8, do_sample=False, attention_mask=torch.ones_like(prompt),
                         pad_token_id=0)
    assert torch.equal(tokens, uncached) and torch.equal(tokens, hf)


def test_pytorch_bin_and_shards_load_alike(tmp_path: Path) -> None:
    theirs = _llama(2)
    single = _save(theirs, tmp_path / "single")
    binary = tmp_path / "bin"
    binary.mkdir()
    (binary / "config.json").write_text((single / "config.json").read_text())
    torch.save(theirs.state_dict(), binary / "pytorch_model.bin")
    sharded = _save(theirs, tmp_path / "sharded", max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").exists()
    tokens = torch.randint(0, 100, (1, 9))
    expected = _logits(theirs, tokens)
    for folder in (single, binary, sharded):
        with torch.no_grad():
            torch.testing.assert_close(load_llama(folder)(tokens), expected, **TOL)
    config, weights = read_checkpoint(sharded)
    assert config["model_type"] == "llama" and "model.norm.weight" in weights


def test_dtype_argument(tmp_path: Path) -> None:
    folder = _save(_gpt2(), tmp_path)
    assert load_gpt2(folder, dtype=torch.float64).lm_head.weight.dtype == torch.float64
    assert load_gpt2(folder, dtype=None).lm_head.weight.dtype == torch.float32  # as saved
    theirs = _llama(2)
    half = load_llama(_save(theirs, tmp_path / "llama"), dtype=torch.bfloat16)
    tokens = torch.randint(0, 100, (2, 12))
    with torch.no_grad():
        logits = half(tokens)
    assert logits.dtype == torch.bfloat16
    expected = _logits(theirs, tokens)
    assert float((logits.float() - expected).abs().max()) < 0.05 * float(expected.abs().max())


def test_bad_folders_are_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        load_llama(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(FileNotFoundError, match=r"no weights in .*expected model.safetensors"):
        load_llama(tmp_path)
    gpt2 = _save(_gpt2(), tmp_path / "gpt2")
    with pytest.raises(ValueError, match="model_type='gpt2', expected 'llama' or 'mistral'"):
        load_llama(gpt2)
    llama = _save(_llama(2), tmp_path / "llama")
    config = json.loads((llama / "config.json").read_text())
    config["num_hidden_layers"] = 1
    (llama / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"no place for: \['model.layers.1"):
        load_llama(llama)
    config["num_hidden_layers"], config["intermediate_size"] = 2, 64
    (llama / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"mlp.gate_proj.weight|w_gate.weight has shape \(88, 32\)"):
        load_llama(llama)


def _llama_with(rope: dict, **extra) -> torch.nn.Module:
    """A small Llama of head size 16 with the given RoPE parameters (transformers 5's ``rope_parameters``)."""
    torch.manual_seed(2)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
                                      max_position_embeddings=4096, rope_parameters=rope, **extra)
    return _perturb_vectors(transformers.LlamaForCausalLM(config).eval())


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 512}


@pytest.mark.parametrize("rope", [{"rope_type": "default", "rope_theta": 10000.0},
                                  {"rope_type": "default", "rope_theta": 500000.0},
                                  {"rope_theta": 500000.0, **LLAMA3}],
                         ids=["base 1e4", "base 5e5", "llama3 scaling"])
def test_logits_at_long_positions_equal_hugging_faces(tmp_path: Path, rope: dict) -> None:
    """Float64 logits at positions 2048..4095 (given as position ids, each sequence its own) equal Hugging Face's to
    1e-10: the rotary tables are theirs bit for bit (with float64-rounded frequencies they were 1e-2 apart)."""
    theirs = _llama_with(rope).double()
    ours = load_llama(_save(theirs, tmp_path), dtype=torch.float64)
    assert isinstance(ours.layers[0].self_attn.rope_base, Llama3Scaling) == ("factor" in rope)
    tokens = torch.randint(0, 100, (2, 96))
    positions = torch.stack([torch.arange(2048, 2048 + 96), torch.arange(4000, 4096)])  # (batch, seq)
    with torch.no_grad():
        expected = theirs(tokens, position_ids=positions).logits
        torch.testing.assert_close(ours(tokens, positions=positions), expected, rtol=0, atol=1e-10)
        shared = torch.arange(3000, 3096)  # (seq,): the same positions for the whole batch
        torch.testing.assert_close(ours(tokens, positions=shared),
                                   theirs(tokens, position_ids=shared[None].expand(2, -1)).logits, rtol=0, atol=1e-10)


def test_a_cache_with_position_ids_equals_hugging_faces(tmp_path: Path) -> None:
    """Positions given step by step through the cache: the same logits as Hugging Face's with position_ids."""
    theirs = _llama(2)
    ours = load_llama(_save(theirs, tmp_path))
    tokens, positions = torch.randint(0, 100, (1, 9)), torch.arange(500, 509)[None]
    with torch.no_grad():
        expected = theirs(tokens, position_ids=positions).logits
        cache = ours.make_cache()
        steps = [ours(tokens[:, :6], cache, positions=positions[:, :6]), ours(tokens[:, 6:], cache,
                                                                              positions=positions[:, 6:])]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, **TOL)


@pytest.mark.parametrize("rope_type", ["yarn", "linear", "dynamic"])
def test_other_rope_scalings_are_refused_by_name(tmp_path: Path, rope_type: str) -> None:
    folder = _save(_llama(2), tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": rope_type, "rope_theta": 10000.0, "factor": 2.0}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"load_llama .*rope_type '{rope_type}' is not supported"):
        load_llama(folder)
