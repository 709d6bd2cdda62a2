"""Exercises of notebook 12 (the encoder-only model, BERT): the 80/10/10 masking, the MLM loss and the

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
classification head on ``[CLS]``.

The masking is random, so no output can be compared with the reference's number for number: a learner who
draws the same probabilities in another order, or picks exactly 15 % of each sequence as the original BERT
code does, is right too. Its check runs the learner's function with PyTorch's generator seeded (the same
verdict every time) on batches of about 10 000 positions and judges what came out
(:func:`course_lib.exercises.judges.masking_problems`, shipped with the class edition): what must hold exactly
(labels, untouched positions, special tokens, the range of random replacements) and what must hold on average,
each share within five standard deviations of its binomial spread (a correct implementation fails about once in
a million checks).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks.nb05_encoder import random_state
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.exercises.judges import MASK, RANDOM, SELECT, masking_problems
from course_lib.models.bert import IGNORE_INDEX, ClassificationHead, mask_tokens, mlm_loss

NOTEBOOK = "12_bert"


# ---------------------------------------------------------------------------------------------------
# 11.1 mask_tokens
# ---------------------------------------------------------------------------------------------------

def _sequences(gen: torch.Generator, batch: int, seq: int, ordinary: Sequence[int], cls: int, sep: int,
               pad: int) -> torch.Tensor:
    """(batch, seq): [CLS], tokens drawn from ``ordinary``, a [SEP] in some rows, padding at the end of others."""
    pool = torch.tensor(list(ordinary))
    tokens = pool[torch.randint(0, len(pool), (batch, seq), generator=gen)]
    tokens[:, 0] = cls
    tokens[::3, seq // 2] = sep
    lengths = torch.randint(seq // 2, seq + 1, (batch,), generator=gen)
    tokens[torch.arange(seq)[None, :] >= lengths[:, None]] = pad
    return tokens


def _masking_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    batch = 100 if hidden else 96
    cases = [
        Case("96 sequences of 128 tokens, vocabulary of 30 ([PAD] 0, [CLS] 1, [SEP] 2, [MASK] 3)",
             args=(_sequences(gen, batch, 128, range(4, 16), 1, 2, 0), 3, 30, [0, 1, 2])),
        Case("a vocabulary of 1000 ids, the text using ids 4-40 only",
             args=(_sequences(gen, batch, 128, range(4, 41), 1, 2, 0), 3, 1000, [0, 1, 2])),
        Case("special ids in the middle of the vocabulary ([PAD] 7, [CLS] 12, [SEP] 20, [MASK] 29)",
             args=(_sequences(gen, batch, 128, [i for i in range(29) if i not in (7, 12, 20)], 12, 20, 7),
                   29, 30, [7, 12, 20])),
    ]
    if hidden:
        cases.append(Case("120 sequences of 100 tokens, vocabulary of 50 ([MASK] 0, [PAD] 49)",
                          args=(_sequences(gen, 120, 100, range(3, 40), 1, 2, 49), 0, 50, [49, 1, 2])))
    return cases


def _ordinary_ids(vocab_size: int, special: torch.Tensor) -> torch.Tensor:
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special[special < vocab_size]] = False
    return ordinary.nonzero().squeeze(1)


def _masking(tokens, mask_id, vocab_size, special_ids, select, mask_p, random_p, random_from=None,
             skip_special=True, generator=None):
    """A parametrised masking, for the mistakes: the reference's steps with one thing changed."""
    special = torch.tensor([*special_ids, mask_id])
    selected = torch.rand(tokens.shape, generator=generator) < select
    if skip_special:
        selected &= ~torch.isin(tokens, special)
    action = torch.rand(tokens.shape, generator=generator)
    to_mask = selected & (action < mask_p)
    to_random = selected & (action >= mask_p) & (action < mask_p + random_p)
    pool = _ordinary_ids(vocab_size, special) if random_from is None else random_from
    inputs = torch.where(to_mask, mask_id, tokens)
    inputs = torch.where(to_random, pool[torch.randint(0, len(pool), tokens.shape, generator=generator)], inputs)
    return inputs, torch.where(selected, tokens, IGNORE_INDEX)


def _specials_selected(tokens, mask_id, vocab_size, special_ids, generator=None):
    return _masking(tokens, mask_id, vocab_size, special_ids, SELECT, MASK, RANDOM, skip_special=False,
                    generator=generator)


def _all_masked(tokens, mask_id, vocab_size, special_ids, generator=None):
    return _masking(tokens, mask_id, vocab_size, special_ids, SELECT, 1.0, 0.0, generator=generator)


def _proportions_swapped(tokens, mask_id, vocab_size, special_ids, generator=None):
    return _masking(tokens, mask_id, vocab_size, special_ids, SELECT, RANDOM, MASK, generator=generator)


def _random_may_be_special(tokens, mask_id, vocab_size, special_ids, generator=None):
    return _masking(tokens, mask_id, vocab_size, special_ids, SELECT, MASK, RANDOM,
                    random_from=torch.arange(vocab_size), generator=generator)


def _random_from_the_batch(tokens, mask_id, vocab_size, special_ids, generator=None):
    present = torch.unique(tokens[~torch.isin(tokens, torch.tensor([*special_ids, mask_id]))])
    return _masking(tokens, mask_id, vocab_size, special_ids, SELECT, MASK, RANDOM, random_from=present,
                    generator=generator)


def _labels_of_the_masked_input(tokens, mask_id, vocab_size, special_ids, generator=None):
    inputs, labels = mask_tokens(tokens, mask_id, vocab_size, special_ids, generator=generator)
    return inputs, torch.where(labels != IGNORE_INDEX, inputs, IGNORE_INDEX)


def _independent_draws(tokens, mask_id, vocab_size, special_ids, generator=None):
    special = torch.tensor([*special_ids, mask_id])
    selected = (torch.rand(tokens.shape, generator=generator) < SELECT) & ~torch.isin(tokens, special)
    to_mask = selected & (torch.rand(tokens.shape, generator=generator) < MASK)
    to_random = selected & (torch.rand(tokens.shape, generator=generator) < RANDOM)  # a second draw: overlaps
    pool = _ordinary_ids(vocab_size, special)
    inputs = torch.where(to_mask, mask_id, tokens)
    inputs = torch.where(to_random, pool[torch.randint(0, len(pool), tokens.shape, generator=generator)], inputs)
    return inputs, torch.where(selected, tokens, IGNORE_INDEX)


def _in_place(tokens, mask_id, vocab_size, special_ids, generator=None):
    inputs, labels = mask_tokens(tokens, mask_id, vocab_size, special_ids, generator=generator)
    tokens[labels != IGNORE_INDEX] = inputs[labels != IGNORE_INDEX]  # writes into the caller's tensor
    return tokens, labels


def _exactly_15_percent_per_sequence(tokens, mask_id, vocab_size, special_ids, generator=None):
    """The original BERT code: exactly round(15 %) of each sequence's ordinary positions, then 80/10/10."""
    special = torch.tensor([*special_ids, mask_id])
    inputs, labels = tokens.clone(), torch.full_like(tokens, IGNORE_INDEX)
    pool = _ordinary_ids(vocab_size, special)
    for row in range(tokens.shape[0]):
        candidates = (~torch.isin(tokens[row], special)).nonzero().squeeze(1)
        count = round(SELECT * len(candidates))
        for position in candidates[torch.randperm(len(candidates), generator=generator)[:count]].tolist():
            labels[row, position] = tokens[row, position]
            draw = torch.rand((), generator=generator)
            if draw < MASK:
                inputs[row, position] = mask_id
            elif draw < MASK + RANDOM:
                inputs[row, position] = pool[torch.randint(0, len(pool), (), generator=generator)]
    return inputs, labels


def _bernoulli_in_stages(tokens, mask_id, vocab_size, special_ids, generator=None):
    """Hugging Face's data collator's way: nested Bernoulli draws (80 %, then half of the remaining 20 %)."""
    special = torch.isin(tokens, torch.tensor([*special_ids, mask_id]))
    probability = torch.full(tokens.shape, SELECT).masked_fill(special, 0.0)
    selected = torch.bernoulli(probability, generator=generator).bool()
    labels = tokens.masked_fill(~selected, IGNORE_INDEX)
    to_mask = torch.bernoulli(torch.full(tokens.shape, MASK), generator=generator).bool() & selected
    to_random = torch.bernoulli(torch.full(tokens.shape, 0.5), generator=generator).bool() & selected & ~to_mask
    allowed = torch.ones(vocab_size, dtype=torch.bool)
    allowed[[i for i in [*special_ids, mask_id] if i < vocab_size]] = False
    ids = torch.multinomial(allowed.float(), tokens.numel(), replacement=True, generator=generator)
    inputs = tokens.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, ids.reshape(tokens.shape), inputs)
    return inputs, labels


def _random_never_the_original(tokens, mask_id, vocab_size, special_ids, generator=None):
    """Draws a replacement different from the original token (a shift by 1..N-1 within the ordinary ids)."""
    special = torch.tensor([*special_ids, mask_id])
    pool = _ordinary_ids(vocab_size, special)
    selected = (torch.rand(tokens.shape, generator=generator) < SELECT) & ~torch.isin(tokens, special)
    action = torch.rand(tokens.shape, generator=generator)
    rank = torch.searchsorted(pool, tokens.clamp(max=int(pool.max())))  # (batch, seq): the token's index in pool
    shift = torch.randint(1, len(pool), tokens.shape, generator=generator)
    other = pool[(rank + shift) % len(pool)]
    inputs = torch.where(selected & (action < MASK), mask_id, tokens)
    inputs = torch.where(selected & (action >= MASK) & (action < MASK + RANDOM), other, inputs)
    return inputs, torch.where(selected, tokens, IGNORE_INDEX)


def _selection_inverted(tokens, mask_id, vocab_size, special_ids, generator=None):
    return _masking(tokens, mask_id, vocab_size, special_ids, 1.0 - SELECT, MASK, RANDOM, generator=generator)


def _unselected_positions_masked(tokens, mask_id, vocab_size, special_ids, generator=None):
    """The replacements go where the selection is False: the wrong tokens are masked."""
    special = torch.tensor([*special_ids, mask_id])
    selected = (torch.rand(tokens.shape, generator=generator) < SELECT) & ~torch.isin(tokens, special)
    action = torch.rand(tokens.shape, generator=generator)
    ordinary_unselected = ~selected & ~torch.isin(tokens, special)
    inputs = torch.where(ordinary_unselected & (action < MASK), mask_id, tokens)
    return inputs, torch.where(selected, tokens, IGNORE_INDEX)


def _two_selections(tokens, mask_id, vocab_size, special_ids, generator=None):
    """One selection for the inputs, another for the labels: the masked tokens are not the labelled ones."""
    inputs, _ = mask_tokens(tokens, mask_id, vocab_size, special_ids, generator=generator)
    _, labels = mask_tokens(tokens, mask_id, vocab_size, special_ids, generator=generator)
    return inputs, labels


WRONG_TOKENS_MASKED = ("the wrong tokens are masked: the [MASK] and random replacements go to the SELECTED positions, "
                       "exactly those whose label is the original token (ONE selection decides both); every other "
                       "position keeps its token.")

MASK_TOKENS = register(Exercise(
    name="mask_tokens",
    notebook=NOTEBOOK,
    points=3,
    reference=mask_tokens,
    summary="BERT's 80/10/10 masking: select 15 % of the ordinary tokens; [MASK], random or unchanged",
    **public_and_hidden(_masking_cases),
    seed=0,
    compare=masking_problems,
    mistakes=[
        Mistake("special tokens selected", _specials_selected,
                "never select a special position ([PAD], [CLS], [SEP], [MASK]): draw the 15 % among the ordinary "
                "tokens only.",
                detail="selected = (torch.rand(...) < 0.15) & ~torch.isin(tokens, special)."),
        Mistake("every selected token becomes [MASK]", _all_masked,
                "only 80 % of the selected positions become [MASK]; 10 % get a random token and 10 % stay as "
                "they are, so that the model must also check tokens that look fine."),
        Mistake("proportions swapped", _proportions_swapped,
                "draw one number per position and compare it with 0.8: below it [MASK]; between 0.8 and 0.9 a "
                "random token; above 0.9 unchanged."),
        Mistake("random tokens may be special", _random_may_be_special,
                "draw random replacements from the ordinary ids only (not [PAD], [CLS], [SEP], [MASK]): build "
                "the list of ids that are not special and index it with torch.randint."),
        Mistake("random tokens from the batch", _random_from_the_batch,
                "a random replacement is drawn uniformly from the whole vocabulary (its ordinary ids), not from "
                "the tokens that happen to be in the batch."),
        Mistake("labels of the masked input", _labels_of_the_masked_input,
                "the label is the ORIGINAL token (what the model must recover), not the [MASK] or random token it "
                "sees; unselected positions get the ignored label -100.",
                detail="labels = torch.where(selected, tokens, -100)."),
        Mistake("two independent draws", _independent_draws,
                "use ONE uniform draw per position for the three choices (a second draw lets a position be "
                "picked for [MASK] and for a random token, which upsets 80/10/10)."),
        Mistake("tokens changed in place", _in_place,
                "build new tensors; the caller's tokens must stay as they were.",
                detail="torch.where(...) or tokens.clone() before writing into it."),
        Mistake("selection inverted", _selection_inverted,
                "about 15 % of the ordinary positions are selected, not 85 %: a position is selected when its "
                "uniform draw falls BELOW select_prob.",
                detail="selected = (torch.rand(tokens.shape, generator=generator) < select_prob) & ..., not >=."),
        Mistake("the unselected positions masked", _unselected_positions_masked, WRONG_TOKENS_MASKED,
                detail="to_mask = selected & (action < mask_prob), not ~selected & (...)."),
        Mistake("inputs and labels from two selections", _two_selections, WRONG_TOKENS_MASKED,
                detail="draw selected once; inputs = torch.where(selected & ..., ...); labels = "
                       "torch.where(selected, tokens, -100)."),
    ],
    also_correct=[_exactly_15_percent_per_sequence, _bernoulli_in_stages, _random_never_the_original],
))


# ---------------------------------------------------------------------------------------------------
# 11.2 mlm_loss
# ---------------------------------------------------------------------------------------------------

def _selected(gen: torch.Generator, batch: int, seq: int, vocab: int, share: float = 0.3) -> torch.Tensor:
    tokens = torch.randint(0, vocab, (batch, seq), generator=gen)
    chosen = torch.rand(batch, seq, generator=gen) < share
    chosen[0, 0] = True  # at least one
    return torch.where(chosen, tokens, IGNORE_INDEX)


def _loss_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    vocab = 13 if hidden else 11
    uneven = _selected(gen, 3, 8, vocab)
    uneven[1] = IGNORE_INDEX  # a sequence with nothing selected
    uneven[2, :6] = torch.randint(0, vocab, (6,), generator=gen)  # and one with many
    extreme = torch.tensor([[[0.0, 400.0, -400.0], [900.0, 0.0, 1.0], [1.0, 2.0, 3.0]]])
    cases = [
        Case("(batch=2, seq=10, vocab) logits, about 30 % selected",
             args=(torch.randn(2, 10, vocab, generator=gen) * 2, _selected(gen, 2, 10, vocab))),
        Case("sequences with 0, 2 and 6 selected positions: the mean is over selected positions",
             args=(torch.randn(3, 8, vocab, generator=gen), uneven)),
        Case("nothing selected: the loss is 0, not NaN",
             args=(torch.randn(2, 5, vocab, generator=gen), torch.full((2, 5), IGNORE_INDEX))),
        Case("extreme logits (a probability underflows to 0)", args=(extreme, torch.tensor([[2, -100, 0]]))),
    ]
    if hidden:
        cases.append(Case("(4, 6, vocab), one position selected",
                          args=(torch.randn(4, 6, vocab, generator=gen), torch.where(
                              torch.arange(24).reshape(4, 6) == 7, 3, IGNORE_INDEX))))
    return cases


def _per_position(logits, labels):
    """Cross-entropy at every position (0 where nothing is predicted): (batch, seq)."""
    return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE_INDEX, reduction="none")


def _mean_over_all_positions(logits, labels):
    return _per_position(logits, labels).mean()


def _nan_when_nothing_selected(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX)


def _summed(logits, labels):
    return _per_position(logits, labels).sum()


def _mean_of_sequence_means(logits, labels):
    chosen = (labels != IGNORE_INDEX).float()
    per_sequence = _per_position(logits, labels).sum(1) / chosen.sum(1).clamp(min=1)
    return per_sequence[chosen.sum(1) > 0].mean() if bool(chosen.any()) else logits.sum() * 0.0


def _log_of_softmax(logits, labels):
    chosen = labels != IGNORE_INDEX
    if not bool(chosen.any()):
        return logits.sum() * 0.0
    log_probs = torch.log(torch.softmax(logits[chosen], dim=-1))
    return -log_probs.gather(-1, labels[chosen][:, None]).mean()


def _weighted_mean(logits, labels):
    chosen = (labels != IGNORE_INDEX).float()  # (batch, seq)
    log_probs = F.log_softmax(logits, dim=-1)
    picked = log_probs.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)  # (batch, seq)
    return -(picked * chosen).sum() / chosen.sum().clamp(min=1)


def _with_a_loop(logits, labels):
    terms = [torch.logsumexp(logits[b, t], 0) - logits[b, t, labels[b, t]]
             for b in range(labels.shape[0]) for t in range(labels.shape[1]) if int(labels[b, t]) != IGNORE_INDEX]
    return torch.stack(terms).mean() if terms else logits.sum() * 0.0


MLM_LOSS = register(Exercise(
    name="mlm_loss",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # pre-training back-propagates through it
    reference=mlm_loss,
    summary="the masked-language-model loss: mean cross-entropy over the selected positions only",
    **public_and_hidden(_loss_cases),
    mistakes=[
        Mistake("mean over every position", _mean_over_all_positions,
                "average over the SELECTED positions (labels != -100) only; dividing by batch * seq counts "
                "the unselected positions as zero losses."),
        Mistake("NaN when nothing is selected", _nan_when_nothing_selected,
                "with nothing selected, the library's cross-entropy averages over zero positions and gives NaN: "
                "return a zero that stays in the autograd graph in that case.",
                detail="logits.sum() * 0.0 when (labels != -100) has no True."),
        Mistake("sum instead of mean", _summed,
                "take the mean over the selected positions, not the sum (the loss must not grow with the "
                "batch)."),
        Mistake("mean of per-sequence means", _mean_of_sequence_means,
                "average over all selected positions of the batch together: a sequence with 6 selected "
                "positions weighs three times one with 2."),
        Mistake("log of softmax", _log_of_softmax,
                "the log of a softmax gives log(0) = -inf once a probability underflows: use the library's "
                "cross-entropy or log-softmax, which are computed stably.",
                detail="F.cross_entropy or F.log_softmax, not torch.log(torch.softmax(...))."),
    ],
    also_correct=[_weighted_mean, _with_a_loop],
))


# ---------------------------------------------------------------------------------------------------
# 11.3 ClassificationHead
# ---------------------------------------------------------------------------------------------------

def _head_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d_model, classes = (10, 4) if hidden else (8, 3)
    init = {"d_model": d_model, "num_classes": classes, "dropout": 0.1}

    def case(label: str, batch: int, seq: int) -> Case:
        hidden_states = torch.randn(batch, seq, d_model, generator=gen) * 2 + 0.5
        return Case(label, args=(hidden_states,), init=init, state=random_state(ClassificationHead(**init), gen))

    return [case("(batch=4, seq=6, d_model) hidden states", 4, 6),
            case("batch 3, seq 3 (batch == seq)", 3, 3),
            case("a batch of one sequence of one token", 1, 1)]


class _MeanPooled(ClassificationHead):
    def forward(self, hidden):
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden.mean(1)))))


class _LastPosition(ClassificationHead):
    def forward(self, hidden):
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[:, -1]))))


class _FirstSequence(ClassificationHead):
    def forward(self, hidden):
        return self.classifier(self.dropout(torch.tanh(self.pooler(hidden[0]))))


class _NoTanh(ClassificationHead):
    def forward(self, hidden):
        return self.classifier(self.dropout(self.pooler(hidden[:, 0])))


class _NoPooler(ClassificationHead):
    def forward(self, hidden):
        return self.classifier(self.dropout(hidden[:, 0]))


class _TanhAtTheEnd(ClassificationHead):
    def forward(self, hidden):
        return torch.tanh(self.classifier(self.dropout(self.pooler(hidden[:, 0]))))


class _WithSelect(nn.Module):
    def __init__(self, d_model: int, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, hidden):
        first = hidden.select(dim=1, index=0)  # (batch, d_model)
        return self.classifier(self.dropout(self.pooler(first).tanh()))


class _WithMatrices(_WithSelect):
    def forward(self, hidden):
        first = hidden[:, :1].squeeze(1)  # (batch, d_model)
        pooled = torch.tanh(first @ self.pooler.weight.T + self.pooler.bias)
        return F.linear(self.dropout(pooled), self.classifier.weight, self.classifier.bias)


CLASSIFICATION_HEAD = register(Exercise(
    name="classification_head",
    notebook=NOTEBOOK,
    points=2,
    reference=ClassificationHead,
    train_mode=True,  # dropout's place shows only in training mode: the outputs there are compared too (seeded)
    summary="BERT's classifier: the [CLS] vector through the pooler (dense + tanh), dropout and a linear layer",
    **public_and_hidden(_head_cases),
    mistakes=[
        Mistake("mean over the positions", _MeanPooled,
                "BERT classifies from the [CLS] vector alone, position 0 of each sequence.",
                detail="hidden[:, 0]."),
        Mistake("last position", _LastPosition,
                "[CLS] is the FIRST token of every input (position 0), not the last.",
                detail="hidden[:, 0], not hidden[:, -1]."),
        Mistake("first sequence of the batch", _FirstSequence,
                "hidden is (batch, seq, d_model): take position 0 of every sequence, not the whole first sequence.",
                detail="hidden[:, 0], not hidden[0]."),
        Mistake("no tanh", _NoTanh,
                "BERT's pooler is a dense layer followed by tanh, applied to the [CLS] vector.",
                detail="torch.tanh(self.pooler(cls))."),
        Mistake("pooler skipped", _NoPooler,
                "pass the [CLS] vector through the pooler (dense + tanh) before dropout and the classifier."),
        Mistake("tanh on the logits", _TanhAtTheEnd,
                "tanh belongs to the pooler, before the classifier; logits must be free to take any value."),
    ],
    also_correct=[_WithSelect, _WithMatrices],
))
