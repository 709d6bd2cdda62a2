"""course_lib.parallel and course_lib.ablation: runs in other processes give the numbers they give here.

References: the same function called in this process, one run after another; PyTorch's own state_dict for
the final model. The spawned processes import course_lib from this checkout, as a notebook's kernel does.
"""

from __future__ import annotations

import operator

import pytest
import torch

from course_lib.ablation import (
    NumberDataRecipe,
    RunSettings,
    build_variant,
    number_data,
    score_model,
    train_variant,
)
from course_lib.parallel import default_workers, map_in_processes

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
