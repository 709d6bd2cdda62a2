"""Exercise of notebook 13 (the paper's experiments at small scale): averaging checkpoints, one entry at a time.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
"""

from __future__ import annotations

import torch

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.experiments.paper import average_weights

NOTEBOOK = "13_paper_experiments"


def _values(gen: torch.Generator, count: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(*shape, generator=gen) for _ in range(count)]


def _average_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    counters = [torch.tensor(10 * (i + 1)) for i in range(3)]  # num_batches_tracked at three checkpoints
    cases = [
        Case("a (5, 3) weight at five checkpoints (the paper's base model averaged the last 5)",
             args=(_values(gen, 5, (5, 3)),)),
        Case("a bias at two checkpoints", args=(_values(gen, 2, (3,)),)),
        Case("one checkpoint: itself", args=(_values(gen, 1, (2, 2)),)),
        Case("an integer buffer (num_batches_tracked): the last checkpoint's, still an integer", args=(counters,)),
    ]
    if hidden:
        cases.append(Case("twenty checkpoints (the big model averaged 20)", args=(_values(gen, 20, (4, 2)),)))
    return cases


def _last_only(values):
    return values[-1].clone()


def _sum_not_mean(values):
    return sum(values) if values[-1].is_floating_point() else values[-1].clone()


def _first_and_last(values):
    return (values[0] + values[-1]) / 2 if values[-1].is_floating_point() else values[-1].clone()


def _integers_averaged(values):
    return torch.stack([v.double() for v in values]).mean(0).to(
        values[-1].dtype if values[-1].is_floating_point() else torch.float64)


def _divided_by_one_less(values):
    return sum(values) / max(len(values) - 1, 1) if values[-1].is_floating_point() else values[-1].clone()


def _into_the_first(values):
    out = values[0]
    if out.is_floating_point():
        for v in values[1:]:
            out += v
        out /= len(values)
    return out


def _exponential_moving_average(values):
    out = values[0].clone()
    for v in values[1:]:
        out = 0.5 * out + 0.5 * v if out.is_floating_point() else v.clone()
    return out


def _with_stack(values):
    return torch.stack(list(values)).mean(dim=0) if values[-1].is_floating_point() else values[-1].clone()


def _running_mean(values):
    if not values[-1].is_floating_point():
        return values[-1].clone()
    mean = torch.zeros_like(values[0])
    for i, v in enumerate(values, start=1):
        mean = mean + (v - mean) / i
    return mean


AVERAGE_WEIGHTS = register(Exercise(
    name="average_weights",
    notebook=NOTEBOOK,
    points=1,
    reference=average_weights,
    summary="one state_dict entry averaged over checkpoints (integer buffers from the last)",
    **public_and_hidden(_average_cases),
    mistakes=[
        Mistake("last checkpoint only", _last_only, "average every checkpoint given, not just the last one."),
        Mistake("sum, not mean", _sum_not_mean, "divide the sum by the number of checkpoints."),
        Mistake("first and last only", _first_and_last,
                "every checkpoint counts with the same weight: sum all of them and divide by len(values)."),
        Mistake("integer buffers averaged", _integers_averaged,
                "an integer buffer (a counter such as num_batches_tracked) is not a weight: return the last "
                "checkpoint's value, with its integer dtype."),
        Mistake("divided by one less", _divided_by_one_less, "divide by len(values), the number of terms."),
        Mistake("written into the first checkpoint", _into_the_first,
                "build a new tensor: adding in place into the first checkpoint's tensor changes the caller's model.",
                detail="total = values[0].clone() (or sum(values)), not +=."),
        Mistake("exponential moving average", _exponential_moving_average,
                "halving at each step weights later checkpoints more; the paper takes the plain mean."),
    ],
    also_correct=[_with_stack, _running_mean],
))
