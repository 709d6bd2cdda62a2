"""The one training engine (``course_lib.training.engine.train``): no other loop in the library, its hooks, the
trainers that run on it giving the numbers their own loops gave, and the schedules that stop at their last
step."""

from __future__ import annotations

import ast
import inspect
import math
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_lib
import course_lib.training.engine as training
from course_lib.training.engine import (
    EarlyStopping,
    EvaluateEvery,
    TimeLimit,
    TrainHistory,
    classification_step,
    train,
    warmup_cosine_factor,
    warmup_cosine_schedule,
    warmup_linear_factor,
    warmup_linear_schedule,
)

PACKAGE = Path(course_lib.__file__).resolve().parent


# ------------------------------------------------------------------------------------------------
# One loop: no other backward() or optimizer step in the library
# ------------------------------------------------------------------------------------------------

def _training_calls(path: Path) -> list[str]:
    """``file:line .attr()`` for every call ``x.backward(...)`` or ``x.step(...)`` in the file (any receiver:
    a loss, an optimizer, a scheduler), found in the syntax tree, not by text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.name}:{node.lineno} .{node.func.attr}()"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("backward", "step")]


def test_no_backward_or_optimizer_step_outside_the_engine() -> None:
    engine = Path(inspect.getsourcefile(training.train)).resolve()
    assert _training_calls(engine), "the scan finds nothing in the engine itself: it would find nothing anywhere"
    found = [call for path in sorted(PACKAGE.rglob("*.py")) if path.resolve() != engine
             for call in _training_calls(path)]
    assert not found, ("a training loop outside course_lib.training.engine.train (write a step and hooks for it "
                       "instead): " + ", ".join(found))


def test_the_scan_sees_a_loop_written_any_way(tmp_path) -> None:
    loop = tmp_path / "loop.py"
    loop.write_text("def fit(model, opt, batches):\n    for x, y in batches:\n"
                    "        (model(x) - y).pow(2).mean().backward()\n        getattr(opt, 'zero_grad')()\n"
                    "        opt.step()\n", encoding="utf-8")
    assert _training_calls(loop) == ["loop.py:3 .backward()", "loop.py:5 .step()"]


# ------------------------------------------------------------------------------------------------
# Hooks
# ------------------------------------------------------------------------------------------------

def _regression(seed: int = 0) -> tuple[nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 4, generator=gen)
    y = (x @ torch.randn(4, 3, generator=gen)).argmax(-1)  # a linearly separable 3-class task
    torch.manual_seed(seed)
    return nn.Linear(4, 3), [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]


def _train(model, batches, steps, hooks=(), lr=0.1):
    return train(model, batches, steps, torch.optim.SGD(model.parameters(), lr=lr), loss_fn=F.cross_entropy,
                 step_fn=classification_step, clip_grad_norm=None, progress=False, hooks=hooks)


def test_evaluate_every_records_and_the_model_trains_again_after_it() -> None:
    model, batches = _regression()
    modes = []

    def evaluate() -> float:
        model.eval()  # as an evaluation does; the engine must switch back before the next step
        return float(len(modes))

    history = _train(model, batches, 10, hooks=[EvaluateEvery(3, evaluate),
                                                lambda h, p: modes.append(model.training)])
    assert history.valid == [(3, 2.0), (6, 5.0), (9, 8.0)] and history.steps == 10  # evaluated at steps 3, 6, 9
    assert modes[2] is False and modes[3] is True  # eval during step 3's hooks, training again at step 4
    assert not model.training  # the engine leaves the model in eval mode at the end, as before


def test_time_limit_stops_after_the_step_that_crosses_it() -> None:
    model, batches = _regression()
    history = _train(model, batches, 1000, hooks=[lambda h, p: setattr(h, "seconds", 0.5 * h.steps),
                                                  TimeLimit(2.0)])
    assert history.steps == 5 and len(history.losses) == 5  # 2.5 s > 2 s after step 5


def test_early_stopping_on_the_validation_score() -> None:
    scores = iter([3.0, 2.0, 2.5, 2.2, 1.0])
    model, batches = _regression()
    history = _train(model, batches, 100, hooks=[EvaluateEvery(2, lambda: next(scores)), EarlyStopping(2)])
    assert history.valid == [(2, 3.0), (4, 2.0), (6, 2.5), (8, 2.2)] and history.steps == 8
    accuracy = TrainHistory(valid=[(1, 0.5), (2, 0.7), (3, 0.6), (4, 0.65)])
    assert EarlyStopping(2, higher_is_better=True)(accuracy, None)
    assert not EarlyStopping(2, higher_is_better=True)(TrainHistory(valid=[(1, 0.5), (2, 0.6), (3, 0.7)]), None)
    small_gain = TrainHistory(valid=[(1, 3.0), (2, 2.0), (3, 1.95), (4, 1.99)])
    assert not EarlyStopping(2)(small_gain, None) and EarlyStopping(2, min_delta=0.1)(small_gain, None)
    with pytest.raises(ValueError, match="patience must be >= 1"):
        EarlyStopping(0)
    with pytest.raises(ValueError, match="every must be >= 1"):
        EvaluateEvery(0, lambda: 0.0)


def test_a_history_with_evaluations_round_trips_through_state_dict() -> None:
    history = TrainHistory(losses=[1.0, 0.5], steps=2, valid=[(2, 7.5)])
    again = TrainHistory()
    again.load_state_dict({**history.state_dict(), "valid": [[2, 7.5]]})  # as a checkpoint may return it
    assert again == history


# ------------------------------------------------------------------------------------------------
# train_lm on the engine: the numbers of the loop it replaced
# ------------------------------------------------------------------------------------------------

def _old_train_lm(model, stream, steps, batch_size, seq_len, lr, warmup, weight_decay, seed):
    """``lm.train_lm``'s own loop as it was before it moved onto the engine (copied from the old module, so
    that the test compares against what learners ran, not against the engine itself)."""
    from course_lib.data.python_docs import random_windows
    from course_lib.training.engine import make_adamw

    optimizer = make_adamw(model, lr, weight_decay, betas=(0.9, 0.95))

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress_ = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress_)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        window = random_windows(stream, batch_size, seq_len, gen)
        logits = model(window[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # the reference loop the engine must reproduce (a test, not the library)
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def test_train_lm_gives_the_numbers_of_its_old_loop() -> None:
    from course_lib.models.gpt import GPT
    from course_lib.training.language_model import evaluate_perplexity, train_lm

    stream = torch.randint(0, 40, (600,), generator=torch.Generator().manual_seed(1))
    kwargs = dict(steps=12, batch_size=4, seq_len=16, lr=3e-3, warmup=4, weight_decay=0.1, seed=3)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(GPT(40, d_model=16, num_heads=2, num_layers=2, max_len=16, dropout=0.1))
    torch.manual_seed(7)  # the same global random state for dropout on both sides
    old = _old_train_lm(models[0], stream, **kwargs)
    torch.manual_seed(7)
    history = train_lm(models[1], stream, valid_stream=stream[:200], eval_every=6, progress=False, **kwargs)
    assert isinstance(history, TrainHistory) and history.steps == 12
    assert history.tokens == 12 * 4 * 16 and history.losses == old  # the same numbers, to the last bit
    for (name, a), b in zip(models[0].state_dict().items(), models[1].state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert [step for step, _ in history.valid] == [6, 12]  # the last evaluation is of the final model:
    assert history.valid[-1][1] == evaluate_perplexity(models[1], stream[:200], 16)


def test_train_lm_stops_at_its_time_limit_and_names_itself_on_nan() -> None:
    from course_lib.models.gpt import GPT
    from course_lib.training.language_model import train_lm

    stream = torch.randint(0, 40, (300,))
    history = train_lm(GPT(40, d_model=16, num_heads=2, num_layers=1, max_len=8), stream, steps=500, batch_size=2,
                       seq_len=8, max_seconds=0.0, progress=False)
    assert history.steps == 1  # the first step crosses a budget of 0 s
    with pytest.raises(FloatingPointError, match=r"train_lm: the loss became (nan|inf) at step \d"):
        train_lm(GPT(40, d_model=16, num_heads=2, num_layers=1, max_len=8), stream, steps=20, batch_size=2,
                 seq_len=8, lr=1e30, warmup=0, progress=False)


# ------------------------------------------------------------------------------------------------
# Schedules: one function each, constant after the last step
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor, floor", [(warmup_cosine_factor, 0.0), (warmup_cosine_factor, 0.1),
                                           (warmup_linear_factor, 0.0), (warmup_linear_factor, 0.2)])
def test_schedules_warm_up_decay_and_stay_at_their_floor(factor, floor) -> None:
    warmup, steps = 5, 40
    values = [factor(s, warmup, steps, floor) for s in range(3 * steps)]
    assert values[:warmup] == pytest.approx([(s + 1) / warmup for s in range(warmup)])
    decay = values[warmup - 1:steps + 1]
    assert all(a >= b for a, b in zip(decay, decay[1:], strict=False))  # never climbs
    assert values[steps] == pytest.approx(floor) and set(values[steps:]) == {values[steps]}


def test_schedule_formulas_against_the_old_ones() -> None:
    """The ViT's cosine (to 0), GPT-2's (to 10 %) and BERT's linear decay, as their modules wrote them, up to the
    last step; after it the old cosine climbed again, the shared one stays."""
    warmup, steps = 3, 20
    for s in range(warmup, steps + 1):
        progress = (s - warmup) / (steps - warmup)
        assert warmup_cosine_factor(s, warmup, steps) == 0.5 * (1.0 + math.cos(math.pi * progress))
        assert warmup_cosine_factor(s, warmup, steps, 0.1) == 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))
        assert warmup_linear_factor(s, warmup, steps) == max(0.0, (steps - s) / (steps - warmup))
    old_vit_after = 0.5 * (1.0 + math.cos(math.pi * (2 * steps - warmup) / (steps - warmup)))
    assert old_vit_after > 0.5 and warmup_cosine_factor(2 * steps, warmup, steps) == 0.0


@pytest.mark.parametrize("make", [warmup_cosine_schedule, warmup_linear_schedule])
def test_lr_schedulers_follow_their_factor(make) -> None:
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=2.0)
    scheduler = make(optimizer, 2, 6, floor=0.25)
    factor = warmup_cosine_factor if make is warmup_cosine_schedule else warmup_linear_factor
    for step in range(10):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(2.0 * factor(step, 2, 6, 0.25))
        optimizer.step()
        scheduler.step()
    with pytest.raises(ValueError, match="floor must be in"):
        make(optimizer, 2, 6, floor=1.5)


# ------------------------------------------------------------------------------------------------
# One accuracy of a classifier
# ------------------------------------------------------------------------------------------------

def test_classifier_accuracy_of_a_classifier_and_of_bert() -> None:
    from course_lib.evaluation.metrics import classifier_accuracy
    from course_lib.models.bert import BERT

    model = nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        model.bias.zero_()
    inputs = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [3.0, 1.0, 0.0], [0.0, 1.0, 5.0]])
    labels = torch.tensor([0, 1, 1, 1])
    model.train()
    assert classifier_accuracy(model, inputs, labels, batch_size=3) == 0.75 and model.training
    bert = BERT(20, d_model=8, num_heads=2, num_layers=1, max_len=8, num_classes=3).eval()
    tokens, classes = torch.randint(0, 20, (6, 8)), torch.tensor([0, 1, 2, 0, 1, 2])
    expected = (bert.classify(tokens).argmax(-1) == classes).float().mean().item()
    assert classifier_accuracy(bert, tokens, classes, classify=bert.classify) == pytest.approx(expected)
    with pytest.raises(ValueError, match="same length"):
        classifier_accuracy(model, inputs, labels[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        classifier_accuracy(model, inputs, labels)  # the new name warns of nothing
