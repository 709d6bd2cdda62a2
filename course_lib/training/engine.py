"""Training a Transformer (notebook 07): the label-smoothed loss, the paper's warm-up schedule, a plain loop.

Section 5.3 of "Attention Is All You Need": Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

(:func:`transformer_lr`, :func:`make_optimizer`, :func:`make_scheduler`). Section 5.4: label smoothing
with epsilon_ls = 0.1 (:func:`label_smoothed_cross_entropy`, equal to
``nn.CrossEntropyLoss(label_smoothing=..., ignore_index=pad)``). :func:`train` is the course's one
training loop (translation, images, the command-line trainer ``course-train``, one process or many): a fixed
number of steps with a tqdm progress bar, returning a :class:`TrainHistory` (losses, learning rates, tokens,
time, evaluations).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.training.parallel import progress_bar
from course_lib.validation import validated_by

__all__ = [
    "label_smoothed_cross_entropy", "transformer_lr", "make_optimizer", "make_adamw", "fused_if_supported",
    "make_scheduler",
    "TrainHistory", "Prediction", "translation_step", "classification_step", "train", "teacher_forced_accuracy",
]


def _check_loss_inputs(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1,
                       ignore_index: int = 0) -> None:
    """Raise a ValueError naming the argument for mismatched shapes or a target id outside the classes."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() or logits.dim() < 2:
        raise ValueError(f"label_smoothed_cross_entropy: logits must be a float tensor (..., num_classes), "
                         f"got {getattr(logits, 'shape', type(logits).__name__)}")
    if not isinstance(target, torch.Tensor) or target.dtype != torch.long or target.shape != logits.shape[:-1]:
        raise ValueError(f"label_smoothed_cross_entropy: target must be a LongTensor of shape "
                         f"{tuple(logits.shape[:-1])} (logits without the class axis), got "
                         f"{getattr(target, 'dtype', None)} {tuple(getattr(target, 'shape', ()))}")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"label_smoothed_cross_entropy: smoothing must be in [0, 1], got {smoothing}")
    num_classes = logits.shape[-1]
    outside = (target != ignore_index) & ((target < 0) | (target >= num_classes))
    if bool(outside.any()):
        where = [int(i) for i in outside.nonzero()[0]]
        raise ValueError(f"label_smoothed_cross_entropy: target holds class id {int(target[tuple(where)])} at "
                         f"index {where}, outside the {num_classes} classes of logits (ids 0 to {num_classes - 1}; "
                         f"ignore_index={ignore_index} is skipped)")


@validated_by(_check_loss_inputs)
def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float = 0.1,
                                 ignore_index: int = 0) -> torch.Tensor:
    """Cross-entropy against a smoothed target distribution, averaged over the non-padding positions.

    The smoothed target puts 1 - smoothing on the right class and spreads smoothing uniformly over all C
    classes (the right one included), so the loss at one position is

        (1 - smoothing) * (-log p[target]) + smoothing * mean_c(-log p[c]).

    Log-probabilities come from ``log_softmax`` (never ``log(softmax)``, which gives log 0 = -inf once a
    probability underflows). Positions whose target is ``ignore_index`` count for nothing.

    Equal to ``nn.CrossEntropyLoss(label_smoothing=smoothing, ignore_index=ignore_index)`` with one
    documented difference: a batch that is all padding gives 0 (no position to average, no gradient)
    where PyTorch gives NaN. A logit of -inf (a class forbidden outright) makes the smoothing term
    infinite, as in PyTorch: smoothing asks for some probability on every class.

    Shapes: ``logits`` (..., C), for example (batch, tgt_len, vocab); ``target`` (...) of class ids.

    Example:
        >>> logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 0.0]])
        >>> target = torch.tensor([0, 2])
        >>> bool(torch.isclose(label_smoothed_cross_entropy(logits, target, 0.1, ignore_index=-100),
        ...     nn.CrossEntropyLoss(label_smoothing=0.1)(logits, target)))
        True
    """
    log_probs = F.log_softmax(logits, dim=-1)                        # (..., C)
    keep = target != ignore_index                                    # (...)
    safe_target = target.masked_fill(~keep, 0)                       # any valid id where ignored
    nll = -log_probs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)  # (...) -log p[target]
    if smoothing > 0:  # (skipped at 0, so that a -inf logit cannot turn 0 * inf into NaN)
        uniform = -log_probs.mean(dim=-1)                            # (...) mean_c -log p[c]
        per_position = (1.0 - smoothing) * nll + smoothing * uniform
    else:
        per_position = nll
    per_position = per_position.masked_fill(~keep, 0.0)              # padding contributes nothing
    return per_position.sum() / keep.sum().clamp(min=1)


def _check_lr_arguments(step: int, d_model: int, warmup: int = 4000) -> None:
    """Raise unless step >= 0 and d_model, warmup >= 1 (step 0 is LambdaLR's call before the first update)."""
    if d_model < 1 or warmup < 1:
        raise ValueError(f"transformer_lr: d_model and warmup must be >= 1, got d_model={d_model}, "
                         f"warmup={warmup}")
    if step < 0:
        raise ValueError(f"transformer_lr: step must be >= 0 (steps count from 1; 0 is read as 1), got {step}")


@validated_by(_check_lr_arguments)
def transformer_lr(step: int, d_model: int, warmup: int = 4000) -> float:
    """The paper's learning rate at ``step``: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).

    It grows linearly for ``warmup`` steps, peaks at d_model^-0.5 * warmup^-0.5 when step = warmup, and
    then decays as 1/sqrt(step). Steps count from 1; step 0 (which ``LambdaLR`` asks for before the
    first update) is treated as step 1, so the rate is never 0 or infinite.

    Example:
        >>> round(transformer_lr(4000, d_model=512, warmup=4000), 6)
        0.000699
    """
    step = max(step, 1)  # LambdaLR asks for step 0 before the first update
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def _as_list(params: torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """A group's ``"params"``, read once (it may be a generator) into a list."""
    return [params] if isinstance(params, torch.Tensor) else list(params)


_FUSED_DEVICES = ("cpu", "cuda", "mps")  # device types with fused Adam/AdamW kernels in torch 2.13


def fused_if_supported(optimizer_class: type[torch.optim.Optimizer], params: Iterable, **kwargs: object
                       ) -> torch.optim.Optimizer:
    """``optimizer_class(params, fused=True, **kwargs)`` where PyTorch has a fused kernel, else the default.

    Adam's and AdamW's default update on the CPU is a Python loop of small operations per parameter
    tensor; the fused kernel does the same update in one pass over each tensor (the same formula, equal up
    to float32 rounding). For the course's small models the loop is a large share of a training step
    (about 2 of 17 ms for notebook 08's ViT on one CPU thread), so every trainer in ``course_lib`` uses
    this. Parameters that are not real floating-point tensors on a CPU, CUDA or MPS device get the default
    implementation (PyTorch would accept ``fused=True`` for them and fail only at the first ``step()``).
    ``params`` may be tensors or parameter groups (dicts with a ``"params"`` list), as for any optimizer.
    """
    params = [{**item, "params": _as_list(item["params"])} if isinstance(item, dict) else item for item in params]
    tensors = [t for item in params for t in (item["params"] if isinstance(item, dict) else [item])]
    fusable = all(t.is_floating_point() and t.device.type in _FUSED_DEVICES for t in tensors)
    return optimizer_class(params, fused=True, **kwargs) if fusable else optimizer_class(params, **kwargs)


def make_optimizer(model: nn.Module, betas: tuple[float, float] = (0.9, 0.98), eps: float = 1e-9,
                   weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam with the paper's betas and eps, and base learning rate 1 (the schedule gives the rate).

    Fused where PyTorch supports it (:func:`fused_if_supported`); create it after moving the model to
    its device.
    """
    return fused_if_supported(torch.optim.Adam, model.parameters(), lr=1.0, betas=betas, eps=eps,
                              weight_decay=weight_decay)


def make_adamw(model: nn.Module, lr: float, weight_decay: float = 0.01,
               betas: tuple[float, float] = (0.9, 0.999)) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices only (GPT-2's and BERT's recipe): biases, LayerNorm gains and
    other vectors are not decayed, since shrinking them towards 0 regularises nothing useful."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas)


def make_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup: int = 4000,
                   scale: float = 1.0) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` that sets the rate to ``scale * transformer_lr(step + 1, d_model, warmup)``.

    ``scale`` multiplies the whole curve (1 is the paper; small models trained for few steps often
    prefer a larger peak). The optimizer's base rate must be 1, as :func:`make_optimizer` sets it.
    """
    for group in optimizer.param_groups:
        if group.get("initial_lr", group["lr"]) != 1.0:
            raise ValueError(f"make_scheduler: the optimizer's base lr must be 1.0 (the schedule gives the "
                             f"rate), got {group['lr']}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: scale * transformer_lr(step + 1, d_model, warmup))


@dataclass
class TrainHistory:
    """What :func:`train` measured: one entry per step, periodic evaluations, and totals.

    The one history of every trainer in ``course_lib`` (translation, images, the command-line trainer).
    ``losses`` and ``lrs`` have one entry per optimizer step; ``eval_steps`` with ``train_acc`` /
    ``val_acc`` are filled by whoever evaluates (``images.train_classifier`` every ``eval_every`` steps);
    ``items`` counts what the loss averages over (target tokens for translation, images for a classifier).
    """

    losses: list[float] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    eval_steps: list[int] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)
    epochs: float = 0.0  # passes over the training set that the steps amount to (where known)

    @property
    def loss(self) -> list[float]:
        """The per-step losses (the name ``images.train_classifier``'s history always used)."""
        return self.losses

    @property
    def items(self) -> int:
        """What the loss averaged over, summed over all steps (target tokens or images)."""
        return self.tokens

    @property
    def tokens_per_second(self) -> float:
        """Target tokens (padding excluded) processed per second of training."""
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    def smoothed(self, window: int = 50) -> list[float]:
        """The losses averaged over a sliding window (for a readable loss curve)."""
        out, total = [], 0.0
        for i, loss in enumerate(self.losses):
            total += loss
            if i >= window:
                total -= self.losses[i - window]
            out.append(total / min(i + 1, window))
        return out

    def state_dict(self) -> dict:
        """Everything measured, as plain Python values (for a checkpoint)."""
        return {name: (list(value) if isinstance(value, list) else value) for name, value in vars(self).items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        for name, value in state.items():
            if not hasattr(self, name):
                raise KeyError(f"TrainHistory.load_state_dict: unknown field {name!r}")
            setattr(self, name, list(value) if isinstance(value, list) else value)


class Prediction(NamedTuple):
    """What a batch adapter returns for one batch: the model's ``logits``, the ``target`` the loss compares
    them with, the number of ``items`` the loss averages over (non-padding target tokens, or images), and the
    target's ``ignore_index`` (padding) for the default loss."""

    logits: torch.Tensor
    target: torch.Tensor
    items: int
    ignore_index: int = -100


def translation_step(model: nn.Module, batch, device: torch.device | str) -> Prediction:
    """The batch adapter for translation: a :class:`course_lib.data.translation.Batch` through ``model(src, tgt_in)``.

    Logits (batch, tgt_len, vocab) against ``tgt_out`` (batch, tgt_len); padding is ignored and not counted.
    """
    batch = batch.to(device)
    logits = model(batch.src, batch.tgt_in)  # (batch, tgt_len, vocab)
    return Prediction(logits, batch.tgt_out, batch.num_tgt_tokens, batch.pad_id)


def classification_step(model: nn.Module, batch, device: torch.device | str) -> Prediction:
    """The batch adapter for classification: ``(images, labels)`` through ``model(images)``.

    Logits (batch, num_classes) against labels (batch,); every image counts once.
    """
    images, labels = batch
    images, labels = images.to(device), labels.to(device)
    return Prediction(model(images), labels, len(labels))  # logits (batch, num_classes)


def _forever(loader: Iterable) -> Iterator:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise ValueError("train: the loader yields no batches")


def _distributed_world() -> int:
    """The number of processes training together (1 unless ``torch.distributed`` is initialised)."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _no_sync(model: nn.Module, skip: bool) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync()`` when ``skip`` (this backward keeps its gradients local: no all-reduce), else nothing."""
    return model.no_sync() if skip and hasattr(model, "no_sync") else contextlib.nullcontext()


def _global_loss(items: int, loss_sum: float, world: int, device: torch.device) -> tuple[int, float]:
    """``(items, mean loss)`` of the global batch: this process's ``items`` and ``items * loss`` summed over
    every process (one all-reduce). A non-finite loss on any process makes the mean non-finite everywhere."""
    if world == 1:
        return items, loss_sum / max(items, 1)
    totals = torch.tensor([float(items), loss_sum], dtype=torch.float64, device=device)
    torch.distributed.all_reduce(totals)
    global_items = totals[0].item()
    return int(global_items), totals[1].item() / max(global_items, 1.0)


def train(model: nn.Module, loader: Iterable, steps: int, optimizer: torch.optim.Optimizer,
          scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
          loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
          device: torch.device | str = "cpu", clip_grad_norm: float | None = 1.0, progress: bool = True,
          history: TrainHistory | None = None, step_fn: Callable[..., Prediction] = translation_step,
          desc: str = "training", on_step: Callable[[TrainHistory, Prediction], None] | None = None,
          autocast_dtype: torch.dtype | None = None, leave: bool = True, accumulate: int = 1) -> TrainHistory:
    """Train ``model`` for exactly ``steps`` optimizer steps on batches from ``loader`` (cycled).

    The one training loop of the course. Each step: ``step_fn(model, batch, device)`` turns a batch into a
    :class:`Prediction` (logits, target, items); ``loss_fn(logits, target)`` gives the loss; then
    ``zero_grad``, ``backward``, gradient-norm clipping at ``clip_grad_norm`` (None: no clipping),
    ``optimizer.step()`` and ``scheduler.step()``. The default ``step_fn`` is :func:`translation_step`
    (``model(src, tgt_in)`` on a :class:`course_lib.data.translation.Batch`); :func:`classification_step` takes
    ``(images, labels)``. The default loss is :func:`label_smoothed_cross_entropy` with smoothing 0.1 and
    the target's padding ignored. A fixed number of steps (not seconds) makes a seed give the same numbers
    on any machine; the time is measured.

    ``on_step(history, prediction)`` runs after every step (evaluations, checkpoints, logs). Under
    ``torch.distributed`` (the model wrapped in ``DistributedDataParallel``), the loss each process
    back-propagates is rescaled by its share of the items of the global batch, so that DDP's average of the
    gradients is the gradient of the loss averaged over all items of all processes: N processes with batch
    b compute what one process with batch N*b computes, even when padding makes the token counts differ.
    The recorded loss is then the global one. ``autocast_dtype`` (e.g. ``torch.bfloat16`` on CUDA) runs
    the forward pass and the loss under ``torch.autocast``.

    ``accumulate`` > 1 (gradient accumulation): each step takes that many batches from ``loader``, one
    backward pass each (under DDP's ``no_sync`` but the last, so the gradients cross the processes once a
    step), each loss weighted by its items; the summed gradient is then divided by the global batch's items.
    A step on k batches of b thus computes (up to rounding) what one step on a batch of k*b computes.

    A non-finite loss stops training with a FloatingPointError naming the step (never a silent NaN); under
    ``torch.distributed`` every process stops at that step (the check reads the all-reduced loss), never
    one process alone while the others wait for it. Pass a previous ``history`` to continue a run.
    """
    if steps < 0:
        raise ValueError(f"train: steps must be >= 0, got {steps}")
    if accumulate < 1:
        raise ValueError(f"train: accumulate must be >= 1 (batches per optimizer step), got {accumulate}")
    history = history if history is not None else TrainHistory()
    world = _distributed_world()
    device_type = torch.device(device).type
    model.train()
    batches = iter(_forever(loader))
    bar = progress_bar(steps, desc=desc, disable=not progress, leave=leave)  # in a worker: to the caller's bar
    start = time.perf_counter()
    try:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            local_items, local_sum = 0, 0.0
            for micro in range(accumulate):
                with _no_sync(model, skip=micro < accumulate - 1):
                    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
                        pred = step_fn(model, next(batches), device)
                        if loss_fn is None:
                            loss = label_smoothed_cross_entropy(pred.logits, pred.target, 0.1,
                                                                ignore_index=pred.ignore_index)
                        else:
                            loss = loss_fn(pred.logits, pred.target)
                    local_items, local_sum = local_items + pred.items, local_sum + float(pred.items) * loss.item()
                    if accumulate > 1:  # the sum over items; divided by the global items below
                        (loss * (pred.items * world)).backward()
            if world == 1 and accumulate == 1:
                items, recorded = pred.items, loss.item()
            else:
                items, recorded = _global_loss(local_items, local_sum, world, loss.device)
            if not math.isfinite(recorded):
                where = "" if not torch.isfinite(loss) or world == 1 else " (on another process)"
                error = FloatingPointError(f"train: the loss became {recorded} at step {history.steps + 1}{where}")
                error.loss = recorded  # for wrappers that word the message their own way
                raise error
            if accumulate == 1:
                (loss * (pred.items * world / max(items, 1.0)) if world > 1 else loss).backward()
            else:
                for parameter in model.parameters():
                    if parameter.grad is not None:
                        parameter.grad.div_(max(items, 1))
            if clip_grad_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            history.lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            history.losses.append(recorded)
            history.tokens += items
            history.steps += 1
            if on_step is not None:
                on_step(history, pred)
            if history.steps % 20 == 0 or history.steps == 1:
                bar.set_postfix(loss=f"{history.losses[-1]:.3f}", lr=f"{history.lrs[-1]:.2e}")
            bar.update(1)
    finally:
        history.seconds += time.perf_counter() - start
        bar.close()
    model.eval()
    return history


@torch.no_grad()
def teacher_forced_accuracy(model: nn.Module, loader: Iterable, device: torch.device | str = "cpu") -> float:
    """The fraction of non-padding target tokens whose argmax prediction is right, with teacher forcing."""
    model.eval()
    right = total = 0
    for batch in loader:
        batch = batch.to(device)
        pred = model(batch.src, batch.tgt_in).argmax(-1)  # (batch, tgt_len)
        keep = batch.tgt_out != batch.pad_id
        right += int(((pred == batch.tgt_out) & keep).sum())
        total += int(keep.sum())
    return right / total if total else math.nan
