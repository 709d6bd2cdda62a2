"""Load real checkpoints saved in Hugging Face's layouts from a local folder (never a download).

A checkpoint folder as ``transformers``' ``save_pretrained`` writes it (and as the Hub stores it) holds
``config.json`` and the weights: ``model.safetensors`` (the ``safetensors`` format: a JSON header and raw
tensors, nothing executable), or ``pytorch_model.bin`` (a pickled state dict, read with
``torch.load(weights_only=True)``), or several shards listed in ``model.safetensors.index.json`` /
``pytorch_model.bin.index.json``.

- :func:`load_gpt2` builds the course's :class:`~course_lib.models.gpt.GPT` (whose layout is GPT-2's already). One
  trap: GPT-2's checkpoints store their linear layers as ``Conv1D`` with the weight *transposed*,
  ``(in_features, out_features)``, and the three attention projections side by side in ``c_attn``.
- :func:`load_llama` builds :class:`~course_lib.models.llama.Llama` from a Llama- or Mistral-layout checkpoint
  (RoPE in the "half" layout, as Hugging Face stores it).

Tokenizers: the folder's ``tokenizer.json`` loads with ``tokenizers.Tokenizer.from_file`` (README, "Real
checkpoints").

Example:
    >>> read_checkpoint("/nonexistent")
    Traceback (most recent call last):
    ...
    FileNotFoundError: read_checkpoint: /nonexistent/config.json not found: folder must be a checkpoint folder ...
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from course_lib.models.gpt import GPT
from course_lib.models.llama import Llama
from course_lib.models.rope import Llama3Scaling

__all__ = ["read_checkpoint", "load_gpt2", "load_llama"]

# Buffers older checkpoints saved beside the weights: functions of the config, not parameters.
_BUFFERS = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _weight_files(folder: Path) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = folder / index_name
        if index.exists():
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            return [folder / shard for shard in shards]
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (folder / name).exists():
            return [folder / name]
    raise FileNotFoundError(f"read_checkpoint: no weights in {folder}: expected model.safetensors, "
                            f"pytorch_model.bin or a *.index.json of shards; found {sorted(os.listdir(folder))}")


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as err:
            raise ImportError(f"read_checkpoint: {path.name} needs the safetensors package (pip install "
                              f"safetensors)") from err
        try:
            return load_file(str(path))
        except Exception as err:  # safetensors raises its own error types, whose text names no file
            raise ValueError(f"read_checkpoint: {path} is not a readable safetensors file (truncated or "
                             f"damaged?): {err}") from err
    try:
        return torch.load(path, map_location="cpu", weights_only=True)  # tensors only: no code is unpickled
    except Exception as err:
        raise ValueError(f"read_checkpoint: {path} is not a readable PyTorch state dict (truncated or damaged?): "
                         f"{err}") from err


def read_checkpoint(folder: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """Read ``config.json`` and every weight tensor of a local checkpoint folder: ``(config, state_dict)``.

    Shapes: the tensors as stored (Hugging Face's names, e.g. ``model.layers.0.self_attn.q_proj.weight``).

    Example:
        >>> config, weights = read_checkpoint(folder)          # doctest: +SKIP
        >>> config["model_type"], len(weights)                 # doctest: +SKIP
        ('gpt2', 148)
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"read_checkpoint: {config_path} not found: folder must be a checkpoint folder "
                                f"(config.json and model.safetensors or pytorch_model.bin), got {folder}")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"read_checkpoint: {config_path} is not valid JSON: {err}") from err
    if not isinstance(config, dict):
        raise ValueError(f"read_checkpoint: {config_path} must hold a JSON object, got {type(config).__name__}")
    state: dict[str, torch.Tensor] = {}
    for path in _weight_files(folder):
        state.update(_read_weights(path))
    return config, state


def _dtype(dtype: object, who: str) -> torch.dtype | None:
    """``dtype`` as a torch.dtype: a torch.dtype, None (the checkpoint's own), or its name ("float16",
    "torch.bfloat16", as ``config.json``'s ``torch_dtype`` writes it)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"{who}: dtype must be a floating-point dtype, got {dtype}")
        return dtype
    if isinstance(dtype, str):
        named = getattr(torch, dtype.removeprefix("torch."), None)
        if isinstance(named, torch.dtype) and named.is_floating_point:
            return named
    raise ValueError(f"{who}: dtype must be a floating-point torch.dtype, its name (e.g. 'float16', "
                     f"'bfloat16') or None (the checkpoint's dtype), got {dtype!r}")


def _require_keys(config: dict, folder: str | os.PathLike, who: str, *keys: str) -> None:
    """Raise naming ``config.json`` and the keys it lacks."""
    missing = [key for key in keys if key not in config]
    if missing:
        raise ValueError(f"{who}: {Path(folder) / 'config.json'} lacks {missing} (a {config.get('model_type')!r} "
                         f"config needs {list(keys)})")


def _take_all(model: torch.nn.Module, ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor],
              used: set[str], dtype: torch.dtype | None, who: str) -> None:
    """Load ``ours`` into ``model`` strictly; raise naming the checkpoint's tensors that nothing used."""
    unused = sorted(k for k in theirs if k not in used and not k.endswith(_BUFFERS))
    if unused:
        raise ValueError(f"{who}: the checkpoint has tensors this model has no place for: {unused[:8]}"
                         f"{' ...' if len(unused) > 8 else ''}")
    expected = model.state_dict()
    for name, tensor in ours.items():
        if name in expected and tensor.shape != expected[name].shape:
            raise ValueError(f"{who}: {name} has shape {tuple(tensor.shape)} in the checkpoint but "
                             f"{tuple(expected[name].shape)} in the model built from config.json")
    missing = sorted(set(expected) - set(ours))
    if missing:
        raise ValueError(f"{who}: the checkpoint lacks {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    model.to(dtype or ours["token_embedding.weight"].dtype)  # None: the checkpoint's own dtype
    model.load_state_dict(ours)  # copies, casting to the model's dtype


def _output_layer(ours: dict[str, torch.Tensor], state: dict[str, torch.Tensor], tied: bool, used: set[str],
                  who: str) -> None:
    """``lm_head.weight``: the embedding's matrix when tied (checkpoints then omit it), else the checkpoint's."""
    used.add("lm_head.weight")
    if tied:
        ours["lm_head.weight"] = ours["token_embedding.weight"]
    elif "lm_head.weight" in state:
        ours["lm_head.weight"] = state["lm_head.weight"]
    else:
        raise ValueError(f"{who}: tie_word_embeddings is false but the checkpoint has no lm_head.weight (saved "
                         f"from the model without its language-model head?)")


def _getter(state: dict[str, torch.Tensor], prefix: str, used: set[str], who: str):
    def get(name: str) -> torch.Tensor:
        key = prefix + name
        if key not in state:
            raise ValueError(f"{who}: the checkpoint has no tensor {key!r}")
        used.add(key)
        return state[key]
    return get


def _prefix(state: dict[str, torch.Tensor], with_head: str, marker: str) -> str:
    """``with_head`` when the checkpoint was saved from the model with its LM head (keys start with it)."""
    return with_head if any(k.startswith(with_head + marker) for k in state) else ""


def load_gpt2(folder: str | os.PathLike, dtype: torch.dtype | str | None = torch.float32) -> GPT:
    """A :class:`~course_lib.models.gpt.GPT` holding a GPT-2 checkpoint (``GPT2LMHeadModel`` or ``GPT2Model``).

    Mapping (layer ``i``): ``wte`` -> ``token_embedding``, ``wpe`` -> ``positions.embedding``, ``h.i.ln_1`` ->
    ``blocks.layers.i.norm1``, ``h.i.attn.c_attn`` -> ``self_attn.w_q|w_k|w_v`` (split in three, transposed),
    ``h.i.attn.c_proj`` -> ``self_attn.w_o``, ``h.i.ln_2`` -> ``norm2``, ``h.i.mlp.c_fc|c_proj`` ->
    ``feed_forward.linear1|linear2`` (transposed), ``ln_f`` -> ``blocks.norm``; ``lm_head`` tied to ``wte``.
    The model is returned in eval mode, in ``dtype`` (a torch.dtype or its name, e.g. ``"float16"``; None: the
    checkpoint's dtype).

    Shapes: the model maps tokens ``(batch, seq <= n_positions)`` to logits ``(batch, seq, vocab_size)``.

    Example:
        >>> gpt = load_gpt2("checkpoints/gpt2")                  # doctest: +SKIP
        >>> gpt(torch.tensor([[464, 3290]])).shape              # doctest: +SKIP
        torch.Size([1, 2, 50257])
    """
    who = "load_gpt2"
    dtype = _dtype(dtype, who)
    config, state = read_checkpoint(folder)
    if config.get("model_type") != "gpt2":
        raise ValueError(f"{who}: config.json has model_type={config.get('model_type')!r}, expected 'gpt2'")
    _require_keys(config, folder, who, "vocab_size", "n_embd", "n_head", "n_layer", "n_positions", "layer_norm_epsilon")
    if config.get("scale_attn_by_inverse_layer_idx") or not config.get("scale_attn_weights", True):
        raise ValueError(f"{who}: only GPT-2's attention scaling 1/sqrt(d_k) is supported (scale_attn_weights=True, "
                         f"scale_attn_by_inverse_layer_idx=False)")
    activation = _ACTIVATIONS.get(config.get("activation_function", "gelu_new"))
    if activation is None:
        raise ValueError(f"{who}: activation_function {config['activation_function']!r} is not one of "
                         f"{sorted(_ACTIVATIONS)}")
    d_model, num_layers, tied = config["n_embd"], config["n_layer"], config.get("tie_word_embeddings", True)
    model = GPT(config["vocab_size"], d_model, config["n_head"], num_layers, config.get("n_inner") or 4 * d_model,
                max_len=config["n_positions"], activation=activation, layer_norm_eps=config["layer_norm_epsilon"],
                tie_weights=tied)
    used: set[str] = set()
    get = _getter(state, _prefix(state, "transformer.", "wte"), used, who)
    ours = {"token_embedding.weight": get("wte.weight"), "positions.embedding.weight": get("wpe.weight"),
            "blocks.norm.weight": get("ln_f.weight"), "blocks.norm.bias": get("ln_f.bias")}
    for i in range(num_layers):
        mine, theirs = f"blocks.layers.{i}.", f"h.{i}."
        q, k, v = get(theirs + "attn.c_attn.weight").t().chunk(3, dim=0)  # Conv1D (d, 3d) -> 3 x (d, d)
        b_q, b_k, b_v = get(theirs + "attn.c_attn.bias").chunk(3, dim=0)
        ours |= {mine + "self_attn.w_q.weight": q, mine + "self_attn.w_k.weight": k, mine + "self_attn.w_v.weight": v,
                 mine + "self_attn.w_q.bias": b_q, mine + "self_attn.w_k.bias": b_k, mine + "self_attn.w_v.bias": b_v}
        for ours_name, their_name in (("self_attn.w_o", "attn.c_proj"), ("feed_forward.linear1", "mlp.c_fc"),
                                      ("feed_forward.linear2", "mlp.c_proj")):
            ours[mine + ours_name + ".weight"] = get(theirs + their_name + ".weight").t()  # Conv1D: (in, out)
            ours[mine + ours_name + ".bias"] = get(theirs + their_name + ".bias")
        for norm, their_norm in (("norm1", "ln_1"), ("norm2", "ln_2")):
            for part in ("weight", "bias"):
                ours[f"{mine}{norm}.{part}"] = get(f"{theirs}{their_norm}.{part}")
    _output_layer(ours, state, tied, used, who)
    _take_all(model, ours, state, used, dtype, who)
    return model.eval()


def _rope_base(config: dict, who: str) -> float | Llama3Scaling:
    """``rope_theta``, or Llama 3.1's scaling with it, from a config of transformers 4 (top level, ``rope_scaling``)
    or 5 (``rope_parameters``); any other ``rope_type`` is refused by name."""
    parameters = config.get("rope_parameters") or {}
    theta = float(parameters.get("rope_theta", config.get("rope_theta", 10000.0)))
    scaling = Llama3Scaling.from_config(config.get("rope_scaling") or parameters, theta, f"{who} (config.json)",
                                        config.get("max_position_embeddings"))
    return theta if scaling is None else scaling


def load_llama(folder: str | os.PathLike, dtype: torch.dtype | str | None = torch.float32) -> Llama:
    """A :class:`~course_lib.models.llama.Llama` holding a Llama- or Mistral-layout checkpoint's weights.

    Mapping (layer ``i``): ``model.embed_tokens`` -> ``token_embedding``, ``model.layers.i.input_layernorm`` ->
    ``layers.i.norm1``, ``self_attn.{q,k,v,o}_proj`` -> ``self_attn.w_q|w_k|w_v|w_o``,
    ``post_attention_layernorm`` -> ``norm2``, ``mlp.{gate,up,down}_proj`` -> ``feed_forward.w_gate|w_up|w_down``,
    ``model.norm`` -> ``norm``, ``lm_head`` -> ``lm_head`` (or the embedding when ``tie_word_embeddings``).
    ``nn.Linear`` stores ``(out, in)`` on both sides: nothing is transposed. Mistral's ``sliding_window`` becomes
    the model's ``window``; ``rope_scaling`` of type ``"llama3"`` becomes a
    :class:`~course_lib.models.rope.Llama3Scaling` as its ``rope_base`` (other types are refused by name). The model
    is returned in eval mode, in ``dtype`` (a torch.dtype or its name, e.g. ``"float16"``; None: the checkpoint's
    dtype).

    Shapes: the model maps tokens ``(batch, seq)`` to logits ``(batch, seq, vocab_size)``.

    Example:
        >>> lm = load_llama("checkpoints/tiny-llama")            # doctest: +SKIP
        >>> lm(torch.tensor([[1, 15043]])).shape                 # doctest: +SKIP
        torch.Size([1, 2, 32000])
    """
    who = "load_llama"
    dtype = _dtype(dtype, who)
    config, state = read_checkpoint(folder)
    if config.get("model_type") not in ("llama", "mistral"):
        raise ValueError(f"{who}: config.json has model_type={config.get('model_type')!r}, expected 'llama' or "
                         f"'mistral'")
    _require_keys(config, folder, who, "vocab_size", "hidden_size", "num_attention_heads", "num_hidden_layers",
                  "intermediate_size")
    rope_base = _rope_base(config, who)
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{who}: hidden_act {config['hidden_act']!r} is not SwiGLU's 'silu'")
    tied, num_layers = config.get("tie_word_embeddings", False), config["num_hidden_layers"]
    model = Llama(config["vocab_size"], config["hidden_size"], config["num_attention_heads"], num_layers,
                  num_kv_heads=config.get("num_key_value_heads"), d_ff=config["intermediate_size"],
                  max_len=config.get("max_position_embeddings", 2048), norm_eps=config.get("rms_norm_eps", 1e-6),
                  rope_base=rope_base, window=config.get("sliding_window"), tie_weights=tied,
                  d_k=config.get("head_dim"), attention_bias=config.get("attention_bias", False),
                  mlp_bias=config.get("mlp_bias", False))
    used: set[str] = set()
    get = _getter(state, _prefix(state, "model.", "embed_tokens"), used, who)
    ours = {"token_embedding.weight": get("embed_tokens.weight"), "norm.weight": get("norm.weight")}
    names = [("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm")]
    names += [(f"self_attn.w_{x}", f"self_attn.{x}_proj") for x in "qkvo"]
    names += [(f"feed_forward.w_{x}", f"mlp.{x}_proj") for x in ("gate", "up", "down")]
    expected = model.state_dict()
    for i in range(num_layers):
        for mine, theirs in names:
            for part in ("weight", "bias"):
                if f"layers.{i}.{mine}.{part}" in expected:
                    ours[f"layers.{i}.{mine}.{part}"] = get(f"layers.{i}.{theirs}.{part}")
    _output_layer(ours, state, tied, used, who)
    _take_all(model, ours, state, used, dtype, who)
    return model.eval()
