"""course_lib.training.parallel and course_lib.experiments.ablation: runs in other processes give the numbers they
give here.

References: the same function called in this process, one run after another; PyTorch's own state_dict for
the final model. The spawned processes import course_lib from this checkout, as a notebook's kernel does.
"""

from __future__ import annotations

import operator

import pytest
import torch

from course_lib.data.digits import digits_split
from course_lib.experiments.ablation import (
    NumberDataRecipe,
    RunSettings,
    build_variant,
    number_data,
    score_model,
    train_variant,
)
from course_lib.models.vit import VisionTransformer
from course_lib.training.image_classifier import fit_classifier
from course_lib.training.parallel import default_workers, map_in_processes, progress_bar

TINY_BASE = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.1, smoothing=0.1, positions="sinusoidal")
TINY = RunSettings(NumberDataRecipe(n_train=300, n_valid=20, seed=0, bpe_vocab_size=60), base=TINY_BASE,
                   train_steps=6, checkpoints=3, checkpoint_every=2, batch_size=16, warmup=2, decode_max_len=8)


def test_results_come_back_in_the_order_of_the_tasks_here_and_in_processes() -> None:
    tasks = [(a, b) for a in range(4) for b in (1, 2)]
    expected = [a ** b for a, b in tasks]
    assert map_in_processes(pow, tasks, workers=1, progress=False) == expected
    assert map_in_processes(pow, tasks, workers=2, progress=False) == expected


def test_an_error_in_a_worker_reaches_the_caller() -> None:
    with pytest.raises(ZeroDivisionError):
        map_in_processes(operator.truediv, [(1, 1), (1, 0), (2, 1)], workers=2, progress=False)


def test_a_device_other_than_the_cpu_runs_here_and_threads_are_restored() -> None:
    saved = torch.get_num_threads()
    out = map_in_processes(operator.add, [(1, 2)], workers=4, threads=1, device="meta", progress=False)
    assert out == [3] and torch.get_num_threads() == saved


def test_workers_follow_course_workers_and_never_exceed_the_tasks(monkeypatch) -> None:
    monkeypatch.setenv("COURSE_WORKERS", "3")
    assert default_workers(10) == 3 and default_workers(2) == 2
    monkeypatch.setenv("COURSE_WORKERS", "0")
    with pytest.raises(ValueError, match="COURSE_WORKERS.*'0'"):
        default_workers(5)
    monkeypatch.delenv("COURSE_WORKERS")
    assert 1 <= default_workers(100)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        map_in_processes(pow, [(1, 1)], threads=0, progress=False)


def test_run_settings_refuse_checkpoints_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match="train_steps=4 cannot hold 3 checkpoints 2 steps apart"):
        RunSettings(NumberDataRecipe(), train_steps=4, checkpoints=3, checkpoint_every=2)
    with pytest.raises(ValueError, match="must be >= 1"):
        RunSettings(NumberDataRecipe(), checkpoints=0)


def test_a_run_keeps_its_last_checkpoints_and_scores_its_final_model() -> None:
    run = train_variant({"d_k": 4}, 3, TINY)
    assert len(run["checkpoints"]) == TINY.checkpoints
    data = number_data(TINY.data)
    model = build_variant(dict(TINY.base) | {"d_k": 4}, data)
    model.load_state_dict(run["checkpoints"][-1])
    assert score_model(model, data, TINY.decode_max_len) == run["final"]  # the last checkpoint is the final model
    first, last = run["checkpoints"][0], run["checkpoints"][-1]
    assert any(not torch.equal(first[k], last[k]) for k in last)  # training moved the weights between them
    assert run["params"] == sum(p.numel() for p in model.parameters())


@pytest.mark.slow
def test_runs_in_two_processes_equal_the_same_runs_here() -> None:
    tasks = [({}, 0, TINY), ({"num_heads": 1}, 1, TINY), ({"positions": "learned"}, 2, TINY)]
    here = map_in_processes(train_variant, tasks, workers=1, progress=False)
    there = map_in_processes(train_variant, tasks, workers=2, progress=False)
    for a, b in zip(here, there, strict=True):
        assert a["final"] == b["final"]
        for ca, cb in zip(a["checkpoints"], b["checkpoints"], strict=True):
            assert ca.keys() == cb.keys() and all(torch.equal(ca[k], cb[k]) for k in ca)
    assert here[0]["final"] != here[1]["final"]  # different variants and seeds: different runs


class _RecordingBar:
    """Stands in for tqdm in the caller: records the total it was given and the counts it receives."""

    made: list[_RecordingBar] = []

    def __init__(self, total: int | None = None, **kwargs: object) -> None:
        self.total, self.n, self.disable = total, 0, kwargs.get("disable", False)
        _RecordingBar.made.append(self)

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix(self, *args: object, **kwargs: object) -> None:
        pass

    def close(self) -> None:
        pass


def _tiny_vit(seed: int) -> VisionTransformer:
    torch.manual_seed(seed)
    return VisionTransformer(image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=16, num_heads=2,
                             num_layers=1, d_ff=32)


@pytest.mark.slow
def test_classifiers_trained_in_processes_equal_those_trained_here_and_report_every_step(monkeypatch) -> None:
    import tqdm.auto

    split = digits_split()
    options = {"batch_size": 32, "lr": 3e-3, "eval_every": 4, "seed": 5}
    steps = [9, 5, 7]
    seeds = (0, 1, 2)
    tasks = [(_tiny_vit(seed), split, n, options | {"progress": False}) for seed, n in zip(seeds, steps, strict=True)]
    here = map_in_processes(fit_classifier, tasks, workers=1, threads=1, progress=False)
    monkeypatch.setattr(tqdm.auto, "tqdm", _RecordingBar)
    _RecordingBar.made.clear()
    fresh = [(_tiny_vit(seed), split, n, options) for seed, n in zip(seeds, steps, strict=True)]
    there = map_in_processes(fit_classifier, fresh, workers=2, total_steps=sum(steps))
    (bar,) = _RecordingBar.made  # the caller's one bar; the workers' bars forwarded to it
    assert bar.total == sum(steps) and bar.n == sum(steps) and not bar.disable
    for (model_here, hist_here), (model_there, hist_there), task in zip(here, there, tasks, strict=True):
        assert model_here is task[0]  # trained in place here; a copy comes back from a worker
        assert hist_there.loss == hist_here.loss and hist_there.val_acc == hist_here.val_acc
        state = model_there.state_dict()
        assert all(torch.equal(v, state[k]) for k, v in model_here.state_dict().items())
    assert here[0][1].loss != here[1][1].loss  # different seeds: different runs


def test_counting_steps_here_leaves_the_bars_to_the_runs(monkeypatch) -> None:
    import tqdm.auto

    monkeypatch.setattr(tqdm.auto, "tqdm", _RecordingBar)
    _RecordingBar.made.clear()
    fit_inputs = [(_tiny_vit(0), digits_split(), 3, {"batch_size": 8})]
    map_in_processes(fit_classifier, fit_inputs, workers=1, total_steps=3)
    caller, run = _RecordingBar.made  # the caller's bar is hidden; the run's own bar counts its steps
    assert caller.disable and not run.disable and run.n == 3
    with pytest.raises(ValueError, match="total_steps must be >= 0, got -1"):
        map_in_processes(pow, [(1, 1)], total_steps=-1)


def test_a_bar_in_a_worker_forwards_every_step_and_one_outside_is_tqdm(monkeypatch) -> None:
    import queue

    import tqdm.auto

    import course_lib.training.parallel as parallel

    monkeypatch.setattr(tqdm.auto, "tqdm", _RecordingBar)
    assert isinstance(progress_bar(4), _RecordingBar)  # outside a worker: the usual bar
    reports: queue.Queue = queue.Queue()
    monkeypatch.setattr(parallel, "_reports", reports)  # as _start_worker sets it in a worker
    monkeypatch.setattr(parallel, "_REPORT_EVERY", 3600.0)  # nothing sent before close: counts add up
    bar = progress_bar(10, desc="run")
    assert not isinstance(bar, _RecordingBar)
    for _ in range(7):
        bar.update()
        bar.set_postfix(loss="1.0")
    assert reports.empty()
    bar.close()
    assert reports.get_nowait() == 7 and reports.empty()
    assert isinstance(progress_bar(3, disable=True), _RecordingBar)  # a disabled bar never reports
