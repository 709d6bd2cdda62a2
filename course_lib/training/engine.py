"""Training a Transformer (notebook 07): the label-smoothed loss, the paper's warm-up schedule, a plain loop.

Section 5.3 of "Attention Is All You Need": Adam with beta1 = 0.9, beta2 = 0.98, eps = 1e-9, and

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

(:func:`transformer_lr`, :func:`make_optimizer`, :func:`make_scheduler`). Section 5.4: label smoothing
with epsilon_ls = 0.1 (:func:`label_smoothed_cross_entropy`, equal to
``nn.CrossEntropyLoss(label_smoothing=..., ignore_index=pad)``). :func:`train` is the course's one
training loop (translation, images, the command-line trainer ``course-train``, one process or many): a fixed
number of steps with a tqdm progress bar, returning a :class:`TrainHistory` (losses, learning rates, tokens,
time, evaluations). What differs between the course's trainings is said by two small pieces:

- a **step** turns a batch into a :class:`Prediction` (``translation_step``, ``classification_step``,
  ``course_lib.training.language_model.lm_step``, ``course_lib.training.pretraining.mlm_step``, ...);
- **hooks** run after every optimizer step: ``hook(history, prediction)``, returning True to stop there.
  :class:`EvaluateEvery` (a validation score every k steps), :class:`TimeLimit` (a time cap) and
  :class:`EarlyStopping` (stop when the validation score stops improving) are the course's.

The learning-rate schedules live here too, one function each: the paper's (:func:`make_scheduler`), warm-up
then cosine decay (:func:`warmup_cosine_schedule`) and warm-up then linear decay
(:func:`warmup_linear_schedule`); the last two stay at their final value after their last step.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.runtime import watch_threads
from course_lib.training.optim import AdamW
from course_lib.training.optim import clip_grad_norm as clip_by_norm_in_place
from course_lib.training.parallel import progress_bar
from course_lib.validation import validated_by

__all__ = [
    "label_smoothed_cross_entropy", "transformer_lr", "make_optimizer", "make_adamw", "fused_if_supported",
    "make_scheduler", "warmup_cosine_factor", "warmup_cosine_schedule", "warmup_linear_factor",
    "warmup_linear_schedule",
    "TrainHistory", "Prediction", "Hook", "EvaluateEvery", "TimeLimit", "EarlyStopping", "translation_step",
    "classification_step", "train", "teacher_forced_accuracy",
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


def make_adamw(model: nn.Module, lr: float, weight_decay: float = 0.01, betas: tuple[float, float] = (0.9, 0.999),
               update: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None
               ) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matrices only (GPT-2's and BERT's recipe): biases, LayerNorm gains and
    other vectors are not decayed, since shrinking them towards 0 regularises nothing useful.

    PyTorch's ``torch.optim.AdamW``; with ``update`` (one tensor's step, the signature of
    :func:`course_lib.training.optim.adamw_update`, such as notebook 10's learner's) the course's
    :class:`course_lib.training.optim.AdamW` running it, bit-equal to PyTorch's with the course's update."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if update is not None:
        return AdamW(groups, lr=lr, betas=betas, update=update)
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


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


def _check_schedule_arguments(step: int, warmup: int, steps: int, floor: float = 0.0, zero_start: bool = False
                              ) -> None:
    """Raise unless step, warmup >= 0, steps >= 1 and 0 <= floor <= 1."""
    if step < 0 or warmup < 0 or steps < 1:
        raise ValueError(f"schedule: step and warmup must be >= 0 and steps >= 1, got step={step}, "
                         f"warmup={warmup}, steps={steps}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"schedule: floor must be in [0, 1] (a fraction of the peak rate), got {floor}")


@validated_by(_check_schedule_arguments)
def warmup_cosine_factor(step: int, warmup: int, steps: int, floor: float = 0.0, zero_start: bool = False) -> float:
    """The learning rate at ``step`` (counted from 0) as a fraction of the peak: a linear warm-up over
    ``warmup`` steps, then a cosine decay from 1 to ``floor``, reached at step ``steps`` and kept after it.

    The warm-up's convention: the course's (``zero_start=False``) is ``(step + 1) / warmup``, so that the first
    step already learns and the peak is reached at step ``warmup - 1``; ``zero_start=True`` is
    ``step / warmup`` (Hugging Face's ``get_cosine_schedule_with_warmup`` and most course assignments), whose
    first step has rate 0 and whose peak is step ``warmup``. The decay is the same in both.

    ``floor=0`` is the ViT paper's decay (notebook 08); ``floor=0.1`` GPT-2's and most language models'
    (notebook 11). A cosine continued past its last step would climb again; the decay is therefore clamped.

    Example:
        >>> [round(warmup_cosine_factor(s, warmup=2, steps=6, floor=0.1), 3) for s in (0, 1, 2, 4, 6, 9)]
        [0.5, 1.0, 1.0, 0.55, 0.1, 0.1]
    """
    if step < warmup:
        return (step if zero_start else step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))  # 0 -> 1 over the decay, then 1
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


@validated_by(_check_schedule_arguments)
def warmup_linear_factor(step: int, warmup: int, steps: int, floor: float = 0.0) -> float:
    """BERT's schedule at ``step`` (from 0), as a fraction of the peak: a linear warm-up over ``warmup``
    steps, then a linear decay to ``floor`` at step ``steps``, kept after it.

    Example:
        >>> [round(warmup_linear_factor(s, warmup=2, steps=6), 3) for s in (0, 1, 2, 4, 6, 9)]
        [0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    """
    if step < warmup:
        return (step + 1) / warmup
    remaining = max(0.0, (steps - step) / max(1, steps - warmup))  # 1 -> 0 over the decay, then 0
    return floor + (1.0 - floor) * remaining


def warmup_cosine_schedule(optimizer: torch.optim.Optimizer, warmup: int, steps: int, floor: float = 0.0,
                           zero_start: bool = False) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` multiplying the optimizer's rate by :func:`warmup_cosine_factor` (warm-up, cosine decay
    to ``floor`` at ``steps``, then constant; ``zero_start`` chooses the warm-up's convention)."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine_factor(step, warmup, steps, floor, zero_start))


def warmup_linear_schedule(optimizer: torch.optim.Optimizer, warmup: int, steps: int, floor: float = 0.0
                           ) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` multiplying the optimizer's rate by :func:`warmup_linear_factor` (BERT's warm-up and
    linear decay to ``floor`` at ``steps``, then constant)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_linear_factor(step, warmup, steps, floor))


@dataclass
class TrainHistory:
    """What :func:`train` measured: one entry per step, periodic evaluations, and totals.

    The one history of every trainer in ``course_lib`` (translation, images, language models, BERT, the
    command-line trainer). ``losses`` and ``lrs`` have one entry per optimizer step; ``valid`` holds
    ``(step, score)`` pairs recorded by :class:`EvaluateEvery` (a language model's validation perplexity);
    ``eval_steps`` with ``train_acc`` / ``val_acc`` are a classifier's accuracies
    (:func:`course_lib.training.image_classifier.train_classifier`); ``items`` counts what the loss averages over
    (target tokens for translation, images for a classifier);
    ``seconds`` is the training time so far (updated after every step, evaluations included).
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
    valid: list[tuple[int, float]] = field(default_factory=list)  # (step, validation score) pairs

    @property
    def loss(self) -> list[float]:
        """The per-step losses (the name ``image_classifier.train_classifier``'s history always used)."""
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
            if name == "valid":  # pairs come back from a checkpoint as lists
                value = [(int(step), float(score)) for step, score in value]
            setattr(self, name, list(value) if isinstance(value, list) else value)


class Prediction(NamedTuple):
    """What a batch adapter returns for one batch: the model's ``logits``, the ``target`` the loss compares
    them with, the number of ``items`` the loss averages over (non-padding target tokens, or images), and the
    target's ``ignore_index`` (padding) for the default loss."""

    logits: torch.Tensor
    target: torch.Tensor
    items: int
    ignore_index: int = -100


#: A hook: ``hook(history, prediction)`` runs after every optimizer step (the step already in ``history``); a
#: True result stops training after that step. It may evaluate (and leave the model in eval mode: the engine
#: switches it back), save, log, or decide to stop.
Hook = Callable[[TrainHistory, Prediction], bool | None]


@dataclass
class EvaluateEvery:
    """A hook: every ``every`` steps, ``history.valid.append((step, evaluate()))``.

    ``evaluate()`` takes no argument and returns a number (a validation perplexity, an accuracy); it may
    switch the model to eval mode.

    Example:
        >>> history = TrainHistory(steps=4)
        >>> EvaluateEvery(2, lambda: 1.5)(history, None)
        >>> history.valid
        [(4, 1.5)]
    """

    every: int
    evaluate: Callable[[], float]

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"EvaluateEvery: every must be >= 1 (steps between evaluations), got {self.every}")

    def __call__(self, history: TrainHistory, prediction: Prediction | None) -> None:
        if history.steps % self.every == 0:
            history.valid.append((history.steps, float(self.evaluate())))


@dataclass
class TimeLimit:
    """A hook: stop once ``history.seconds`` (the training time so far, evaluations included) exceeds
    ``seconds``: a time budget for benchmarks. The step under way is finished first."""

    seconds: float

    def __call__(self, history: TrainHistory, prediction: Prediction | None) -> bool:
        return history.seconds > self.seconds


@dataclass
class EarlyStopping:
    """A hook: stop when the last ``patience`` scores in ``history.valid`` are no better than the best score
    before them (by at least ``min_delta``). Lower is better (a loss, a perplexity) unless
    ``higher_is_better`` (an accuracy). Put it after the :class:`EvaluateEvery` that records the scores.

    Example:
        >>> history = TrainHistory(valid=[(1, 3.0), (2, 2.0), (3, 2.5), (4, 2.1)])
        >>> EarlyStopping(patience=2)(history, None), EarlyStopping(patience=3)(history, None)
        (True, False)
    """

    patience: int
    min_delta: float = 0.0
    higher_is_better: bool = False

    def __post_init__(self) -> None:
        if self.patience < 1:
            raise ValueError(f"EarlyStopping: patience must be >= 1 (evaluations), got {self.patience}")

    def __call__(self, history: TrainHistory, prediction: Prediction | None) -> bool:
        if len(history.valid) <= self.patience:
            return False
        sign = -1.0 if self.higher_is_better else 1.0  # compare sign * score: lower is better
        best_before = min(sign * score for _, score in history.valid[:-self.patience])
        recent = min(sign * score for _, score in history.valid[-self.patience:])
        return recent > best_before - self.min_delta


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
          autocast_dtype: torch.dtype | None = None, leave: bool = True, accumulate: int = 1,
          hooks: Sequence[Hook] = (),
          clip_fn: Callable[..., tuple[list[torch.Tensor], torch.Tensor]] | None = None) -> TrainHistory:
    """Train ``model`` for exactly ``steps`` optimizer steps on batches from ``loader`` (cycled).

    The one training loop of the course. Each step: ``step_fn(model, batch, device)`` turns a batch into a
    :class:`Prediction` (logits, target, items); ``loss_fn(logits, target)`` gives the loss; then
    ``zero_grad``, ``backward``, gradient-norm clipping at ``clip_grad_norm`` (None: no clipping; PyTorch's
    ``clip_grad_norm_``, or ``clip_fn`` when given: notebook 10's signature, a learner's own), ``optimizer.step()``
    and ``scheduler.step()``. The default ``step_fn`` is :func:`translation_step`
    (``model(src, tgt_in)`` on a :class:`course_lib.data.translation.Batch`); :func:`classification_step` takes
    ``(images, labels)``. The default loss is :func:`label_smoothed_cross_entropy` with smoothing 0.1 and
    the target's padding ignored. A fixed number of steps (not seconds) makes a seed give the same numbers
    on any machine; the time is measured.

    ``on_step(history, prediction)`` runs after every step (evaluations, checkpoints, logs), then every
    :data:`Hook` of ``hooks`` in order; training stops after a step at which a hook returned True (a time cap,
    early stopping), so ``steps`` is then an upper bound. A hook that switched the model to eval mode (to
    evaluate) gets it back in training mode before the next step. (Under ``torch.distributed`` a hook that
    stops must decide alike on every process: a step count does, a clock need not.) Under
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
    seconds_before, start = history.seconds, time.perf_counter()
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
            if clip_grad_norm is not None and clip_fn is None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
            elif clip_grad_norm is not None:  # a given clipping function (notebook 10's signature), in place
                clip_by_norm_in_place(model.parameters(), clip_grad_norm, clip=clip_fn)
            history.lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            history.losses.append(recorded)
            history.tokens += items
            history.steps += 1
            history.seconds = seconds_before + time.perf_counter() - start
            if on_step is not None:
                on_step(history, pred)
            stop = [bool(hook(history, pred)) for hook in hooks]  # every hook runs, then any may stop
            if not model.training:  # a hook evaluated
                model.train()
            watch_threads()  # two measured threads become one if other work took a CPU meanwhile
            if history.steps % 20 == 0 or history.steps == 1:
                bar.set_postfix(loss=f"{history.losses[-1]:.3f}", lr=f"{history.lrs[-1]:.2e}")
            bar.update(1)
            if any(stop):
                break
    finally:
        history.seconds = seconds_before + time.perf_counter() - start
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
