"""Training and evaluating a language model on one stream of tokens (notebook 11).

Teacher forcing on a stream: a window of ``seq_len + 1`` tokens gives ``seq_len`` training examples at
once, input ``window[:, :-1]`` and target ``window[:, 1:]`` (each position predicts the token after it).
The loss is the mean cross-entropy over all those positions (:func:`lm_loss`); its exponential on held-out
text is the **perplexity**: the model is, on average, as unsure as a uniform choice among that many tokens.

Training runs on the course's one loop, :func:`course_lib.training.engine.train`, with this module's batch adapter
:func:`lm_step` (a window in, every position's next-token logits against the window shifted by one) and
two hooks: :class:`~course_lib.training.engine.EvaluateEvery` (the validation perplexity) and
:class:`~course_lib.training.engine.TimeLimit` (a time budget).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data.python_docs import random_windows, sequential_windows
from course_lib.training.engine import (
    EvaluateEvery,
    Hook,
    Prediction,
    TimeLimit,
    TrainHistory,
    make_adamw,
    train,
    warmup_cosine_schedule,
)
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["lm_loss", "lm_batches", "lm_step", "train_lm", "evaluate_perplexity"]



def _check_lm_loss_inputs(logits: torch.Tensor, tokens: torch.Tensor) -> None:
    """Raise a ValueError naming the argument, the shape or dtype expected and the one given."""
    for name, x in (("logits", logits), ("tokens", tokens)):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"lm_loss: {name} must be a torch.Tensor, got {type(x).__name__}")
    if logits.dim() != 3 or tokens.shape != logits.shape[:2]:
        raise ValueError(f"lm_loss: logits must be (batch, seq, vocab) and tokens (batch, seq), got "
                         f"{tuple(logits.shape)} and {tuple(tokens.shape)}")
    if not logits.is_floating_point() or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"lm_loss: logits must be floating point and tokens integer ids, got "
                         f"{logits.dtype} and {tokens.dtype}")
    if tokens.shape[1] < 2:
        raise ValueError(f"lm_loss: tokens must have seq >= 2 (position t is scored on token t + 1; a single "
                         f"token has no next one), got shape {tuple(tokens.shape)}")


@validated_by(_check_lm_loss_inputs)
def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The shifted language-model loss: mean cross-entropy of predicting ``tokens[:, t + 1]`` from
    ``logits[:, t]``, over every position ``t = 0 .. seq - 2``.

    The model's output at position ``t`` has seen tokens ``0..t`` (causal mask) and is scored on token
    ``t + 1``; the last position has no next token in the window and is not scored.

    Shapes: ``logits`` (batch, seq, vocab) computed from ``tokens`` (batch, seq) -> a scalar.
    """
    predictions = logits[:, :-1]  # (batch, seq - 1, vocab): every position but the last
    targets = tokens[:, 1:]  # (batch, seq - 1): the token after each
    return F.cross_entropy(predictions.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def lm_batches(stream: torch.Tensor, batch_size: int, seq_len: int,
               generator: torch.Generator | None = None) -> Iterator[torch.Tensor]:
    """Endless random windows of ``stream``, (batch_size, seq_len + 1) each, drawn with ``generator``."""
    while True:
        yield random_windows(stream, batch_size, seq_len, generator)


def lm_step(model: nn.Module, window: torch.Tensor, device: torch.device | str) -> Prediction:
    """The batch adapter of a language model: ``model(window[:, :-1])`` against ``window[:, 1:]``.

    Returns the logits flattened to (batch * seq_len, vocab) and the targets to (batch * seq_len,), so that
    ``F.cross_entropy`` scores every position (:func:`lm_loss`'s shift, applied to the window beforehand);
    every predicted token counts as an item.
    """
    window = window.to(device)  # (batch, seq_len + 1)
    logits = model(window[:, :-1])  # (batch, seq_len, vocab)
    targets = window[:, 1:]  # (batch, seq_len): the token after each input position
    return Prediction(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), targets.numel())


def train_lm(model: nn.Module, stream: torch.Tensor, steps: int, batch_size: int = 32, seq_len: int = 128,
             lr: float = 2e-3, warmup: int = 50, weight_decay: float = 0.1, seed: int = 0,
             valid_stream: torch.Tensor | None = None, eval_every: int = 0, max_seconds: float | None = None,
             progress: bool = True, update: Callable[..., tuple[torch.Tensor, ...]] | None = None,
             clip: Callable[..., tuple[list[torch.Tensor], torch.Tensor]] | None = None) -> TrainHistory:
    """Train ``model`` (tokens -> logits) with AdamW on random windows of ``stream``.

    The learning rate rises linearly for ``warmup`` steps, then decays along a cosine to 10 % (the
    schedule of GPT-2 and most language models since: :func:`course_lib.training.engine.warmup_cosine_schedule`
    with ``floor=0.1``). Gradients are clipped to norm 1. Batches come from a generator seeded with
    ``seed``. ``max_seconds`` stops early (for benchmarks with a time budget); ``eval_every`` > 0 records
    the validation perplexity on ``valid_stream`` along the way, as ``(step, perplexity)`` pairs in the
    history's ``valid``. ``update`` and ``clip`` train with given pieces (notebook 10's ``adamw_update`` and
    ``clip_by_global_norm``, the learner's in notebook 11): the same numbers as PyTorch's with the course's.

    The loop is the course's one engine, :func:`course_lib.training.engine.train`: the batch adapter
    :func:`lm_step`, the cross-entropy, and the hooks :class:`~course_lib.training.engine.EvaluateEvery` and
    :class:`~course_lib.training.engine.TimeLimit`.
    """
    check_positive_ints("train_lm", steps=steps, batch_size=batch_size, seq_len=seq_len)
    check_positive_ints("train_lm", minimum=0, warmup=warmup, eval_every=eval_every)
    if not lr > 0:
        raise ValueError(f"train_lm: lr must be > 0, got {lr!r}")
    if eval_every and valid_stream is None:
        raise ValueError(f"train_lm: eval_every={eval_every} needs a valid_stream to evaluate on, got None")
    optimizer = make_adamw(model, lr, weight_decay, betas=(0.9, 0.95), update=update)
    scheduler = warmup_cosine_schedule(optimizer, warmup, steps, floor=0.1)
    hooks: list[Hook] = []
    if eval_every:
        hooks.append(EvaluateEvery(eval_every, lambda: evaluate_perplexity(model, valid_stream, seq_len)))
    if max_seconds is not None:
        hooks.append(TimeLimit(max_seconds))
    batches = lm_batches(stream, batch_size, seq_len, torch.Generator().manual_seed(seed))
    try:
        return train(model, batches, steps, optimizer, scheduler, loss_fn=F.cross_entropy,
                     device=next(model.parameters()).device, clip_grad_norm=1.0, progress=progress,
                     step_fn=lm_step, hooks=hooks, clip_fn=clip)
    except FloatingPointError as error:
        raise FloatingPointError(str(error).replace("train:", "train_lm:", 1)) from error


@torch.no_grad()
def evaluate_perplexity(model: nn.Module, stream: torch.Tensor, seq_len: int = 128, batch_size: int = 64) -> float:
    """exp(mean cross-entropy) over the stream cut into consecutive windows (:func:`sequential_windows`):
    every token after the first is predicted once, from the tokens before it in its window."""
    check_positive_ints("evaluate_perplexity", seq_len=seq_len, batch_size=batch_size)
    model.eval()
    windows = sequential_windows(stream, seq_len)  # (num_windows, seq_len + 1)
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for batch in windows.split(batch_size):
        batch = batch.to(device)
        logits = model(batch[:, :-1])  # (b, seq_len, vocab)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1),
                                 reduction="sum").item()
        count += batch[:, 1:].numel()
    return math.exp(total / count)
