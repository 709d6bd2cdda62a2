"""Exercises of notebook 07 (training and decoding): the label-smoothed loss, the warm-up schedule and one

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
step of beam search.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.generation.decoding import beam_search_step
from course_lib.training.engine import label_smoothed_cross_entropy, transformer_lr

NOTEBOOK = "07_training_and_decoding"


# ---------------------------------------------------------------------------------------------------
# 7.1 label_smoothed_cross_entropy
# ---------------------------------------------------------------------------------------------------

def _loss_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    vocab = 9 if hidden else 7
    logits = torch.randn(3, 5, vocab, generator=gen) * 2
    target = torch.randint(1, vocab, (3, 5), generator=gen)
    target[0, 3:] = 0  # padding at the end of two rows
    target[2, 4:] = 0
    flat_logits = torch.randn(6, vocab, generator=gen)
    flat_target = torch.randint(0, vocab, (6,), generator=gen)
    extreme = torch.tensor([[0.0, -1e4, 1.0, 2.0], [300.0, -300.0, 0.0, 1.0], [5.0, 1.0, -2000.0, 0.0]])
    cases = [
        Case("(batch=3, seq=5, vocab) logits with padding, smoothing 0.1", args=(logits, target, 0.1, 0)),
        Case("smoothing 0: plain cross-entropy", args=(logits, target, 0.0, 0)),
        Case("padded positions hold very different logits (they must not count, in either term)",
             args=(torch.where((target == 0)[..., None], logits * 10, logits), target, 0.1, 0)),
        Case("(6, vocab) logits, smoothing 0.3, ignore_index=-100 (nothing ignored)",
             args=(flat_logits, flat_target, 0.3, -100)),
        Case("extreme logits (softmax underflows to 0)", args=(extreme, torch.tensor([2, 0, 1]), 0.1, -100)),
        Case("a batch that is all padding (expected: 0, not NaN)",
             args=(logits[:1, :2], torch.zeros(1, 2, dtype=torch.long), 0.1, 0)),
    ]
    if hidden:
        cases.append(Case("smoothing 1.0", args=(logits, target, 1.0, 0)))
    return cases


def _log_of_softmax(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = torch.log(torch.softmax(logits, dim=-1))
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    loss = (1 - smoothing) * nll + smoothing * (-log_probs.mean(-1))
    return (loss * keep).sum() / keep.sum().clamp(min=1)


def _padding_counted(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    nll = -log_probs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return ((1 - smoothing) * nll + smoothing * (-log_probs.mean(-1))).mean()


def _padding_in_smoothing_term(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    masked_nll = (nll * keep).sum() / keep.sum().clamp(min=1)
    return (1 - smoothing) * masked_nll + smoothing * (-log_probs.mean(-1)).mean()  # padding in this mean


def _divide_by_all_positions(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    loss = ((1 - smoothing) * nll + smoothing * (-log_probs.mean(-1))) * keep
    return loss.sum() / target.numel()


def _spread_over_other_classes(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    safe = target.masked_fill(~keep, 0)
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    others = (-log_probs.sum(-1) - nll) / (logits.shape[-1] - 1)
    loss = ((1 - smoothing) * nll + smoothing * others) * keep
    return loss.sum() / keep.sum().clamp(min=1)


def _no_uniform_term(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    nll = -log_probs.gather(-1, target.masked_fill(~keep, 0).unsqueeze(-1)).squeeze(-1)
    return ((1 - smoothing) * nll * keep).sum() / keep.sum().clamp(min=1)


def _kl_divergence(logits, target, smoothing=0.1, ignore_index=0):
    log_probs = F.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    q = torch.full_like(log_probs, smoothing / logits.shape[-1])
    q.scatter_add_(-1, target.masked_fill(~keep, 0).unsqueeze(-1),
                   torch.full_like(log_probs[..., :1], 1 - smoothing))
    kl = (q * (torch.log(q.clamp(min=1e-30)) - log_probs)).sum(-1)
    return (kl * keep).sum() / keep.sum().clamp(min=1)


def _pytorch_without_guard(logits, target, smoothing=0.1, ignore_index=0):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=ignore_index, label_smoothing=smoothing)


def _pytorch_with_guard(logits, target, smoothing=0.1, ignore_index=0):
    """The class edition's stand-in pasted into the cell: right numbers, PyTorch's loss computes them."""
    if bool((target == ignore_index).all()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                           ignore_index=ignore_index, label_smoothing=smoothing)


#: PyTorch's cross-entropy, label smoothing included (``nn.CrossEntropyLoss`` runs it): the class edition computes
#: the loss through it, so the grader refuses it here, by the function and by its operator whatever reached it.
PYTORCH_CROSS_ENTROPY = ("torch.nn.functional.cross_entropy",)
PYTORCH_LOSS_HINT = ("build the loss from a log-softmax yourself: (1 - smoothing) times the target's -log p, plus "
                     "smoothing times the mean of -log p over the classes, averaged over the non-padding positions. "
                     "PyTorch's cross-entropy (the functional one and nn.CrossEntropyLoss) computes all of it, so "
                     "it is not accepted here; the notebook compares yours with it after the exercise.")
PYTORCH_LOSS_DETAIL = ("log_p = F.log_softmax(logits, dim=-1); nll = -log_p.gather(-1, target.unsqueeze(-1)) (or "
                       "F.nll_loss); uniform = -log_p.mean(-1); mask both with target != ignore_index.")


def _smoothing_ignored(logits, target, smoothing=0.1, ignore_index=0):
    return label_smoothed_cross_entropy(logits, target, 0.0, ignore_index)


def _loss_via_smoothed_distribution(logits, target, smoothing=0.1, ignore_index=0):
    num_classes = logits.shape[-1]
    keep = target != ignore_index
    q = F.one_hot(target.masked_fill(~keep, 0), num_classes).float() * (1 - smoothing) + smoothing / num_classes
    per_position = -(q * F.log_softmax(logits, dim=-1)).sum(-1)
    return torch.where(keep, per_position, torch.zeros_like(per_position)).sum() / max(int(keep.sum()), 1)


def _loss_with_a_loop(logits, target, smoothing=0.1, ignore_index=0):
    flat_logits, flat_target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)
    total, count = logits.sum() * 0.0, 0  # a zero that stays in the graph (an all-padding batch)
    for row, t in zip(flat_logits, flat_target, strict=True):
        if int(t) == ignore_index:
            continue
        lp = row - torch.logsumexp(row, 0)
        total = total + (1 - smoothing) * -lp[t] + smoothing * -lp.mean()
        count += 1
    return total / max(count, 1)


LABEL_SMOOTHING = register(Exercise(
    name="label_smoothed_cross_entropy",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=label_smoothed_cross_entropy,
    summary="the label-smoothed cross-entropy averaged over non-padding positions",
    **public_and_hidden(_loss_cases),
    forbidden_calls=PYTORCH_CROSS_ENTROPY,
    forbidden_ops=("cross_entropy",),  # aten::cross_entropy_loss, whatever name reaches it
    forbidden_hint=PYTORCH_LOSS_HINT,
    mistakes=[
        Mistake("log of softmax", _log_of_softmax,
                "the log of a softmax gives log(0) = -inf once a probability underflows: use the library's "
                "log-softmax, which is computed stably.",
                detail="F.log_softmax(logits, dim=-1) (or logits - logits.logsumexp(-1, keepdim=True)), not "
                       "torch.log(torch.softmax(...))."),
        Mistake("padding counted", _padding_counted,
                "positions whose target is ignore_index must not contribute: mask them out of the sum."),
        Mistake("padding in the smoothing term", _padding_in_smoothing_term,
                "mask the padding out of both terms: the smoothing term (mean of -log p over the classes) "
                "must also be averaged over the non-padding positions only."),
        Mistake("divided by every position", _divide_by_all_positions,
                "average over the non-padding positions only: divide by their count, not by the number of all "
                "positions.",
                detail="divide by (target != ignore_index).sum(), not target.numel()."),
        Mistake("smoothing spread over the other classes", _spread_over_other_classes,
                "PyTorch (and this course) spreads smoothing over all C classes, the right one included: "
                "the uniform term is the mean of -log p over every class."),
        Mistake("no uniform term", _no_uniform_term,
                "(1 - smoothing) * NLL is only half of it: add smoothing * mean over classes of -log p."),
        Mistake("KL divergence", _kl_divergence,
                "this is KL(q || p), which differs from the cross-entropy by q's entropy (a constant): the "
                "gradients agree but the value does not; compute -sum q log p."),
        Mistake("PyTorch's loss without the all-padding guard", _pytorch_without_guard,
                "on a batch that is all padding there is nothing to average: return 0, not 0 / 0 = NaN."),
        Mistake("smoothing ignored", _smoothing_ignored,
                "use the smoothing argument: with smoothing > 0 the loss mixes in the uniform term."),
        Mistake("PyTorch's label smoothing with the guard", _pytorch_with_guard, PYTORCH_LOSS_HINT,
                detail=PYTORCH_LOSS_DETAIL),
    ],
    also_correct=[_loss_via_smoothed_distribution, _loss_with_a_loop],
))


# ---------------------------------------------------------------------------------------------------
# 7.2 transformer_lr
# ---------------------------------------------------------------------------------------------------

def _lr_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    warmup = 4000 if not hidden else 1000 + int(torch.randint(0, 3000, (), generator=gen))
    d_model = 512 if not hidden else int(torch.randint(64, 1024, (), generator=gen))
    return [
        Case("step 1", args=(1, d_model, warmup)),
        Case("during warm-up (step = warmup / 4)", args=(warmup // 4, d_model, warmup)),
        Case("the peak (step = warmup)", args=(warmup, d_model, warmup)),
        Case("after warm-up (step = 10 * warmup)", args=(10 * warmup, d_model, warmup)),
        Case("step 0 (LambdaLR's first call): treated as step 1", args=(0, d_model, warmup)),
        Case("a small model: d_model=128, warmup=400, step 250", args=(250, 128, 400)),
    ]


def _lr_warmup_power_half(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -0.5)


def _lr_max(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model ** -0.5 * max(step ** -0.5, step * warmup ** -1.5)


def _lr_sqrt_d_model(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model ** 0.5 * min(step ** -0.5, step * warmup ** -1.5)


def _lr_no_d_model(step, d_model, warmup=4000):
    step = max(step, 1)
    return min(step ** -0.5, step * warmup ** -1.5)


def _lr_step_zero(step, d_model, warmup=4000):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def _lr_decay_too_fast(step, d_model, warmup=4000):
    step = max(step, 1)
    return d_model ** -0.5 * min(1 / step, step * warmup ** -1.5)


def _lr_two_branches(step, d_model, warmup=4000):
    step = 1 if step < 1 else step
    if step < warmup:
        return step * warmup ** -1.5 / math.sqrt(d_model)
    return 1 / math.sqrt(d_model * step)


def _lr_with_torch(step, d_model, warmup=4000):
    s = torch.tensor(float(max(step, 1)), dtype=torch.float64)
    return float(torch.rsqrt(torch.tensor(float(d_model), dtype=torch.float64))
                 * torch.minimum(torch.rsqrt(s), s / warmup ** 1.5))


WARMUP = register(Exercise(
    name="transformer_lr",
    notebook=NOTEBOOK,
    points=1,
    reference=transformer_lr,
    summary="the paper's warm-up learning-rate schedule",
    **public_and_hidden(_lr_cases),
    atol=1e-10,
    rtol=1e-6,
    mistakes=[
        Mistake("warmup^-0.5", _lr_warmup_power_half,
                "the warm-up branch is step times warmup^-1.5, so that both branches meet when the step reaches "
                "warmup.",
                detail="step * warmup ** -1.5."),
        Mistake("max instead of min", _lr_max,
                "take the min of the two branches, step^-0.5 and step * warmup^-1.5 (check both exponents' "
                "signs): the rate rises linearly, then decays."),
        Mistake("d_model^+0.5", _lr_sqrt_d_model, "the factor is d_model^-0.5: bigger models get smaller rates."),
        Mistake("no d_model factor", _lr_no_d_model, "multiply by d_model^-0.5."),
        Mistake("step 0 not handled", _lr_step_zero,
                "LambdaLR first asks for step 0, where step^-0.5 divides by zero: use max(step, 1)."),
        Mistake("decays as 1/step", _lr_decay_too_fast,
                "after warm-up the rate decays as step^-0.5 (the inverse square root), not 1/step."),
    ],
    also_correct=[_lr_two_branches, _lr_with_torch],
))


# ---------------------------------------------------------------------------------------------------
# 7.3 beam_search_step
# ---------------------------------------------------------------------------------------------------

def _beam_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    vocab = 11 if hidden else 7
    scores = -torch.rand(2, 3, generator=gen) * 3
    log_probs = torch.log_softmax(torch.randn(2, 3, vocab, generator=gen) * 2, dim=-1)
    first = torch.tensor([[0.0, float("-inf"), float("-inf")]])
    first_lp = torch.log_softmax(torch.randn(1, 3, vocab, generator=gen) * 2, dim=-1)
    return [
        Case("batch=2, beam=3, keep 3", args=(scores, log_probs, 3)),
        Case("batch=2, beam=3, keep 2", args=(scores, log_probs, 2)),
        Case("the first step: only beam 0 is alive (the others score -inf)", args=(first, first_lp, 3)),
        Case("one beam (greedy)", args=(scores[:, :1], log_probs[:, :1], 1)),
    ]


def _per_beam_best(scores, log_probs, beam_size):
    best_lp, best_tok = log_probs.max(dim=-1)            # the best token of each beam only
    total = scores + best_lp
    new, beam = total.topk(beam_size, dim=-1) if beam_size <= total.shape[1] else total.topk(total.shape[1])
    return new, beam, best_tok.gather(1, beam)


def _each_beam_extended_once(scores, log_probs, beam_size):
    best_lp, best_tok = log_probs.max(dim=-1)  # (batch, beam): one token per beam, the beams kept in their order
    return scores + best_lp, torch.arange(scores.shape[1]).expand_as(best_tok), best_tok


ONE_TOKEN_PER_BEAM_HINT = ("a beam can contribute several of the best candidates, and another none: take the "
                           "top-k over all beam * vocab extensions at once (flatten the last two axes).")


def _scores_not_added(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    new, index = log_probs.reshape(batch, -1).topk(beam_size, dim=-1)
    return new, index // vocab, index % vocab


def _divided_by_beam(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    new, index = (scores.unsqueeze(-1) + log_probs).reshape(batch, -1).topk(beam_size, dim=-1)
    return new, index % beam, index // beam


def _probabilities_multiplied(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    new, index = (scores.unsqueeze(-1) * log_probs).reshape(batch, -1).topk(beam_size, dim=-1)
    return new, index // vocab, index % vocab


def _smallest(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    new, index = (scores.unsqueeze(-1) + log_probs).reshape(batch, -1).topk(beam_size, dim=-1, largest=False)
    return new, index // vocab, index % vocab


def _flattened_over_batch(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    flat = (scores.unsqueeze(-1) + log_probs).reshape(-1)  # all sentences mixed together
    new, index = flat.topk(beam_size * batch)
    return new.reshape(batch, beam_size), (index % (beam * vocab) // vocab).reshape(batch, beam_size), \
        (index % vocab).reshape(batch, beam_size)


def _beam_with_sort(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    flat = (log_probs + scores[:, :, None]).flatten(1)
    order = flat.argsort(dim=-1, descending=True)[:, :beam_size]
    return flat.gather(1, order), torch.div(order, vocab, rounding_mode="floor"), torch.remainder(order, vocab)


def _beam_with_loops(scores, log_probs, beam_size):
    batch, beam, vocab = log_probs.shape
    out_s, out_b, out_t = [], [], []
    for i in range(batch):
        cands = [(float(scores[i, b] + log_probs[i, b, v]), b, v) for b in range(beam) for v in range(vocab)]
        cands.sort(key=lambda c: c[0], reverse=True)
        out_s.append([c[0] for c in cands[:beam_size]])
        out_b.append([c[1] for c in cands[:beam_size]])
        out_t.append([c[2] for c in cands[:beam_size]])
    return torch.tensor(out_s), torch.tensor(out_b), torch.tensor(out_t)


BEAM_STEP = register(Exercise(
    name="beam_search_step",
    notebook=NOTEBOOK,
    points=2,
    reference=beam_search_step,
    summary="one step of beam search: the best extensions over all beams",
    **public_and_hidden(_beam_cases),
    mistakes=[
        Mistake("only each beam's best token", _per_beam_best, ONE_TOKEN_PER_BEAM_HINT),
        Mistake("each beam extended by its best token, in beam order", _each_beam_extended_once,
                ONE_TOKEN_PER_BEAM_HINT),
        Mistake("previous scores not added", _scores_not_added,
                "a candidate's score is its beam's score plus the token's log-probability."),
        Mistake("index split by beam size", _divided_by_beam,
                "in the flattened (beam * vocab) axis, the integer quotient by vocab is the beam and the remainder "
                "the token.",
                detail="beam = index // vocab, token = index % vocab."),
        Mistake("log-probabilities multiplied", _probabilities_multiplied,
                "probabilities multiply, so log-probabilities add: each beam's score is added to every next token's "
                "log-probability.",
                detail="scores.unsqueeze(-1) + log_probs."),
        Mistake("smallest scores kept", _smallest,
                "log-probabilities are <= 0 and higher is better: keep the largest (topk's default)."),
        Mistake("sentences mixed together", _flattened_over_batch,
                "each sentence keeps its own beams: flatten (beam, vocab) per sentence, not the batch axis too."),
    ],
    also_correct=[_beam_with_sort, _beam_with_loops],
))
