"""Training and evaluating a language model on one stream of tokens (notebook 10).

Teacher forcing on a stream: a window of ``seq_len + 1`` tokens gives ``seq_len`` training examples at
once, input ``window[:, :-1]`` and target ``window[:, 1:]`` (each position predicts the token after it).
The loss is the mean cross-entropy over all those positions (:func:`lm_loss`); its exponential on held-out
text is the **perplexity**: the model is, on average, as unsure as a uniform choice among that many tokens.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data.python_docs import random_windows, sequential_windows
from course_lib.training.engine import make_adamw
from course_lib.training.parallel import progress_bar
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["lm_loss", "LMHistory", "train_lm", "evaluate_perplexity"]


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


@dataclass
class LMHistory:
    """Losses per step, validation perplexities (step, value), tokens seen and seconds spent."""

    losses: list[float] = field(default_factory=list)
    valid: list[tuple[int, float]] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0


def train_lm(model: nn.Module, stream: torch.Tensor, steps: int, batch_size: int = 32, seq_len: int = 128,
             lr: float = 2e-3, warmup: int = 50, weight_decay: float = 0.1, seed: int = 0,
             valid_stream: torch.Tensor | None = None, eval_every: int = 0, max_seconds: float | None = None,
             progress: bool = True) -> LMHistory:
    """Train ``model`` (tokens -> logits) with AdamW on random windows of ``stream``.

    The learning rate rises linearly for ``warmup`` steps, then decays along a cosine to 10 % (the
    schedule of GPT-2 and most language models since). Gradients are clipped to norm 1. Batches come from a
    generator seeded with ``seed``. ``max_seconds`` stops early (for benchmarks with a time budget);
    ``eval_every`` > 0 records the validation perplexity on ``valid_stream`` along the way.
    """
    check_positive_ints("train_lm", steps=steps, batch_size=batch_size, seq_len=seq_len)
    check_positive_ints("train_lm", minimum=0, warmup=warmup, eval_every=eval_every)
    if not lr > 0:
        raise ValueError(f"train_lm: lr must be > 0, got {lr!r}")
    if eval_every and valid_stream is None:
        raise ValueError(f"train_lm: eval_every={eval_every} needs a valid_stream to evaluate on, got None")
    optimizer = make_adamw(model, lr, weight_decay, betas=(0.9, 0.95))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress_ = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress_)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    gen = torch.Generator().manual_seed(seed)
    history = LMHistory()
    device = next(model.parameters()).device
    model.train()
    start = time.perf_counter()
    bar = progress_bar(steps, desc="training", disable=not progress)
    for step in range(steps):
        window = random_windows(stream, batch_size, seq_len, gen).to(device)  # (batch, seq_len + 1)
        logits = model(window[:, :-1])  # (batch, seq_len, vocab)
        # targets: the window shifted by one, so every input position is scored (lm_loss's shift, pre-applied)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"train_lm: the loss became {loss.item()} at step {step + 1}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        history.losses.append(loss.item())
        history.tokens += window[:, 1:].numel()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{history.losses[-1]:.3f}")
        bar.update(1)
        if eval_every and valid_stream is not None and (step + 1) % eval_every == 0:
            history.valid.append((step + 1, evaluate_perplexity(model, valid_stream, seq_len)))
            model.train()
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    bar.close()
    history.seconds = time.perf_counter() - start
    model.eval()
    return history


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
