"""Pre-training an encoder-only model with masked language modelling, then fine-tuning it (notebook 12).

Both run on the course's one training loop, :func:`course_lib.training.engine.train`, with their own batch
adapters: :func:`mlm_step` (masked windows of the pre-training text; the MLM head runs on the selected
positions only, the others are not scored anyway) and :func:`fine_tuning_step` (a ``[CLS]`` sequence and
its label through ``model.classify``).

Inputs: pre-training reads windows of one token stream (documents separated by ``[SEP]``), each starting
with ``[CLS]`` so that the model always sees it at position 0 as it will when fine-tuned; a classification
input is ``[CLS]`` + the text's first ``seq_len - 1`` tokens, padded with ``[PAD]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data.python_docs import ByteBPE, random_windows
from course_lib.data.stdlib_docstrings import DocstringTask, docstring_task, stdlib_docstrings
from course_lib.models.bert import BERT, IGNORE_INDEX, mask_tokens, mlm_loss
from course_lib.training.engine import Prediction, TrainHistory, make_adamw, train, warmup_linear_schedule
from course_lib.validation import check_positive_ints

__all__ = ["SPECIAL_TOKENS", "classification_inputs", "DocstringData", "labelled_subset", "mlm_batches",
           "mlm_step", "fine_tuning_step", "pretrain_mlm", "fine_tune"]

#: BERT's special tokens, in id order after ``<|endoftext|>`` (id 0).
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")

MaskFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def classification_inputs(bpe: ByteBPE, texts: Iterable[str], seq_len: int, cls_id: int, pad_id: int) -> torch.Tensor:
    """``[CLS]`` + the first ``seq_len - 1`` tokens of each text, padded with ``pad_id``: (num_texts, seq_len)."""
    rows = []
    for text in texts:
        ids = [cls_id, *bpe.encode(text)[: seq_len - 1]]
        rows.append(ids + [pad_id] * (seq_len - len(ids)))
    return torch.tensor(rows, dtype=torch.long)


@dataclass
class DocstringData:
    """Notebook 12's data, ready to train on: the tokeniser, the pre-training stream and the labelled task.

    Attributes:
        bpe: byte-level BPE trained on the pre-training docstrings, with :data:`SPECIAL_TOKENS`.
        stream: (num_tokens,) every pre-training docstring followed by ``[SEP]``.
        train_tokens, valid_tokens: (num_docstrings, seq_len) ``[CLS]`` inputs of the labelled task.
        train_labels, valid_labels: (num_docstrings,) their package's index in ``classes``.
        train_texts, valid_texts: the docstrings themselves.
    """

    bpe: ByteBPE
    classes: tuple[str, ...]
    seq_len: int
    stream: torch.Tensor
    train_texts: list[str]
    valid_texts: list[str]
    train_tokens: torch.Tensor
    train_labels: torch.Tensor
    valid_tokens: torch.Tensor
    valid_labels: torch.Tensor

    @property
    def pad_id(self) -> int:
        return self.bpe.token_id("[PAD]")

    @property
    def cls_id(self) -> int:
        return self.bpe.token_id("[CLS]")

    @property
    def sep_id(self) -> int:
        return self.bpe.token_id("[SEP]")

    @property
    def mask_id(self) -> int:
        return self.bpe.token_id("[MASK]")

    @property
    def special_ids(self) -> list[int]:
        """Ids that masking never selects: ``<|endoftext|>``, ``[PAD]``, ``[CLS]``, ``[SEP]`` (and ``[MASK]``)."""
        return [self.bpe.eot_id, *(self.bpe.token_id(t) for t in SPECIAL_TOKENS)]

    @classmethod
    def build(cls, vocab_size: int = 1000, seq_len: int = 64, task: DocstringTask | None = None) -> DocstringData:
        """Read the standard library's docstrings, split them, train the tokeniser and encode everything.

        ``task``: the split already made (``docstring_task(stdlib_docstrings())``, as notebook 12 shows it),
        so that the library is not read a second time; None reads it here.
        """
        task = task if task is not None else docstring_task(stdlib_docstrings())
        bpe = ByteBPE.train(task.pretrain_texts, vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS)
        sep = bpe.token_id("[SEP]")
        ids: list[int] = []
        for text in task.pretrain_texts:
            ids += [*bpe.encode(text), sep]
        cls_id, pad_id = bpe.token_id("[CLS]"), bpe.token_id("[PAD]")
        return cls(bpe, task.classes, seq_len, torch.tensor(ids, dtype=torch.long), task.train_texts,
                   task.valid_texts, classification_inputs(bpe, task.train_texts, seq_len, cls_id, pad_id),
                   torch.tensor(task.train_labels), classification_inputs(bpe, task.valid_texts, seq_len, cls_id,
                                                                         pad_id), torch.tensor(task.valid_labels))


def _check_labelled(fn: str, model: BERT, tokens: torch.Tensor, labels: torch.Tensor) -> None:
    """Raise a ValueError unless ``tokens`` is (batch, seq) of ids and ``labels`` (batch,) of class ids that
    ``model``'s classifier has (checked once per call, before any step: no read-back inside the loop)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or not isinstance(labels, torch.Tensor) \
            or labels.shape != tokens.shape[:1]:
        raise ValueError(f"{fn}: tokens must be (batch, seq) and labels (batch,), got "
                         f"{tuple(getattr(tokens, 'shape', ()))} and {tuple(getattr(labels, 'shape', ()))}")
    head = getattr(model, "head", None)
    if head is not None and labels.numel():
        classes = head.classifier.out_features
        low, high = (int(v) for v in torch.aminmax(labels))
        if low < 0 or high >= classes:
            raise ValueError(f"{fn}: labels must be class ids in [0, {classes}) (the model's num_classes), got "
                             f"ids from {low} to {high}")


def labelled_subset(labels: torch.Tensor, per_class: int, seed: int) -> torch.Tensor:
    """Indices of ``per_class`` examples of every class, drawn without replacement with ``seed``: (num,).

    The small labelled budget of a fine-tuning experiment: the same indices for every model compared.
    """
    check_positive_ints("labelled_subset", per_class=per_class)
    gen = torch.Generator().manual_seed(seed)
    chosen = []
    for c in torch.unique(labels).tolist():
        members = (labels == c).nonzero().squeeze(1)  # (num_of_class,)
        if len(members) < per_class:
            raise ValueError(f"labelled_subset: class {c} has {len(members)} examples, fewer than {per_class}")
        chosen.append(members[torch.randperm(len(members), generator=gen)[:per_class]])
    return torch.cat(chosen)


def mlm_batches(stream: torch.Tensor, batch_size: int, seq_len: int, cls_id: int, mask_id: int, vocab_size: int,
                special_ids: Sequence[int], mask_fn: MaskFn = mask_tokens,
                generator: torch.Generator | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless masked batches ``(inputs, labels)``, each (batch, seq_len): ``[CLS]`` + a random window of
    ``seq_len - 1`` tokens of ``stream``, masked by ``mask_fn`` (BERT's 80/10/10, :func:`mask_tokens`)."""
    cls = torch.full((batch_size, 1), cls_id, dtype=torch.long)
    while True:
        windows = random_windows(stream, batch_size, seq_len - 2, generator)  # (batch, seq_len - 1)
        tokens = torch.cat([cls, windows], dim=1)  # (batch, seq_len)
        yield mask_fn(tokens, mask_id, vocab_size, special_ids, generator=generator)


def mlm_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device | str) -> Prediction:
    """The batch adapter of pre-training: MLM logits at the selected positions, as a batch of one sequence.

    Logits (1, num_selected, vocab) against labels (1, num_selected), so that :func:`mlm_loss` (or a learner's
    version of it) scores them; the unselected positions skip the output layer, which they would not be scored
    on. A batch with nothing selected gives empty tensors (mlm_loss gives 0 for it).
    """
    inputs, labels = (t.to(device) for t in batch)
    selected = labels != IGNORE_INDEX  # (batch, seq)
    logits = model.mlm_logits(model.hidden_states(inputs)[selected])  # (num_selected, vocab)
    return Prediction(logits[None], labels[selected][None], int(selected.sum()))


def fine_tuning_step(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor],
                        device: torch.device | str) -> Prediction:
    """The batch adapter of fine-tuning: ``model.classify(tokens)`` (batch, num_classes) against labels (batch,)."""
    tokens, labels = (t.to(device) for t in batch)
    return Prediction(model.classify(tokens), labels, len(labels))


def pretrain_mlm(model: BERT, stream: torch.Tensor, steps: int, cls_id: int, mask_id: int,
                 special_ids: Sequence[int], mask_fn: MaskFn = mask_tokens,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = mlm_loss, batch_size: int = 32,
                 seq_len: int = 64, lr: float = 1e-3, warmup: int = 50, seed: int = 0, progress: bool = True
                 ) -> TrainHistory:
    """Masked-language-model pre-training of ``model`` for ``steps`` steps on random windows of ``stream``.

    ``mask_fn`` and ``loss_fn`` default to the course's :func:`mask_tokens` and :func:`mlm_loss` (a learner's
    own can be passed). Batches and masking come from a generator seeded with ``seed``.
    """
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    batches = mlm_batches(stream, batch_size, seq_len, cls_id, mask_id, model.vocab_size, special_ids, mask_fn, gen)
    optimizer = make_adamw(model, lr)
    scheduler = warmup_linear_schedule(optimizer, min(warmup, steps), steps)
    return train(model, batches, steps, optimizer, scheduler, loss_fn=loss_fn, device=device, progress=progress,
                 step_fn=mlm_step, desc="pre-training (MLM)")


def fine_tune(model: BERT, tokens: torch.Tensor, labels: torch.Tensor, steps: int, batch_size: int = 16,
              lr: float = 1e-3, warmup: int = 10, seed: int = 0, progress: bool = True) -> TrainHistory:
    """Train ``model.classify`` (the whole model, head included) on ``(tokens, labels)`` for ``steps`` steps.

    Batches are drawn in a shuffled order seeded with ``seed``; the loss is the cross-entropy.
    """
    _check_labelled("fine_tune", model, tokens, labels)
    device = next(model.parameters()).device
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens, labels), batch_size=batch_size,
                                         shuffle=True, generator=torch.Generator().manual_seed(seed))
    optimizer = make_adamw(model, lr)
    scheduler = warmup_linear_schedule(optimizer, min(warmup, steps), steps)
    return train(model, loader, steps, optimizer, scheduler, loss_fn=F.cross_entropy, device=device,
                 progress=progress, step_fn=fine_tuning_step, desc="fine-tuning", leave=False)
