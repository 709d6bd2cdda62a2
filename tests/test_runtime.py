"""course_lib.runtime: the device, the seed, the smoke switch and the CPU threads."""

from __future__ import annotations

import pytest
import torch

from course_lib.runtime import DEFAULT_THREADS, configure_threads


@pytest.fixture()
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_threads_default_to_one_and_the_environment_overrides(monkeypatch, restore_threads) -> None:
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    assert configure_threads() == DEFAULT_THREADS == 1 and torch.get_num_threads() == 1
    monkeypatch.setenv("COURSE_THREADS", "all")
    import os
    assert configure_threads() == (os.cpu_count() or 1) == torch.get_num_threads()
    monkeypatch.setenv("COURSE_THREADS", "1")
    assert configure_threads(2) == 2 == torch.get_num_threads()  # an explicit argument wins


@pytest.mark.parametrize("bad", [0, -1, "two", ""])
def test_bad_thread_counts_are_named(bad, restore_threads) -> None:
    with pytest.raises(ValueError, match="threads"):
        configure_threads(bad)


def test_a_notebook_may_ask_for_more_threads_and_the_environment_still_wins(monkeypatch, restore_threads) -> None:
    import os

    from course_lib.runtime import get_device
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    cpus = os.cpu_count() or 1
    assert get_device("cpu", threads=2).type == "cpu" and torch.get_num_threads() == min(2, cpus)
    assert configure_threads(default=cpus + 5) == cpus  # a default never exceeds the machine
    monkeypatch.setenv("COURSE_THREADS", "1")
    get_device("cpu", threads=2)
    assert torch.get_num_threads() == 1  # the learner's COURSE_THREADS overrides the notebook's choice
    with pytest.raises(ValueError, match="default"):
        configure_threads(default=0)


def _fake_probe(monkeypatch, one_s: float, two_s: float, others: int | None | list[int]) -> None:
    """Make measure_threads see a matmul of one_s seconds with one thread and two_s with two, and ``others``
    threads of other programs running (None: no /proc/loadavg; a list: one sample after another)."""
    from course_lib import runtime

    sequence = iter(others if isinstance(others, list) else [])

    def matmul_seconds(threads, a, repeats, samples, give_up=0):
        samples.extend(runtime._runnable_elsewhere() for _ in range(repeats))
        return one_s if threads == 1 else two_s

    monkeypatch.setattr(runtime, "_matmul_seconds", matmul_seconds)
    monkeypatch.setattr(runtime, "_runnable_elsewhere",
                        (lambda: next(sequence, 0)) if isinstance(others, list) else (lambda: others))
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)


@pytest.mark.parametrize(("one_s", "two_s", "others", "expected"), [
    (2e-3, 1.1e-3, 0, 2),     # idle: two threads 1.8x faster
    (2e-3, 1.1e-3, None, 2),  # idle, no /proc/loadavg: the matmul decides
    (2e-3, 1.8e-3, 0, 1),     # a second thread hardly helps (1.1x)
    (2e-3, 40e-3, 0, 1),      # a core taken: two threads 20x slower
    (2e-3, 1.1e-3, 1, 1),     # a fast matmul, but another program keeps a core busy
    (2e-3, 1.1e-3, 2, 1),     # both CPUs taken by other programs: decided without timing
])
def test_measure_threads_picks_two_only_when_a_second_core_is_free(monkeypatch, restore_threads, one_s,
                                                                  two_s, others, expected) -> None:
    from course_lib.runtime import measure_threads

    _fake_probe(monkeypatch, one_s, two_s, others)
    torch.set_num_threads(1)
    measured = measure_threads()
    assert measured.threads == expected and torch.get_num_threads() == 1  # the probe restores the count
    if others is not None and others >= 2:
        assert measured.speedup is None
        assert str(measured) == "2.0 CPUs busy with other work: no CPU free for a second thread"
    else:
        assert measured.speedup == pytest.approx(one_s / two_s) and "2 threads" in str(measured)
        assert (others is None) != ("busy with other work" in str(measured))


@pytest.mark.parametrize(("samples", "expected"), [
    ([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 2),  # a shell command ran for an instant: the median says idle
    ([0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 1),  # another program keeps a core busy in every sample
])
def test_the_load_is_judged_by_the_median_sample(monkeypatch, restore_threads, samples, expected) -> None:
    from course_lib.runtime import measure_threads

    _fake_probe(monkeypatch, 2e-3, 1.1e-3, samples)
    assert measure_threads().threads == expected


def test_this_process_own_threads_are_not_other_work(monkeypatch) -> None:
    """PyTorch's worker threads spin for a while after an operation: they are this process's, not others'
    (on an idle machine the probe counted them as a busy core and chose one thread)."""
    import io

    from course_lib import runtime

    monkeypatch.setattr(runtime, "open", lambda path: io.StringIO("0.50 0.40 0.30 3/120 4242\n"), raising=False)
    monkeypatch.setattr(runtime, "_runnable_here", lambda: 3)  # the calling thread and two spinning workers
    assert runtime._runnable_elsewhere() == 0
    monkeypatch.setattr(runtime, "_runnable_here", lambda: 1)
    assert runtime._runnable_elsewhere() == 2


def test_runnable_here_counts_at_least_the_calling_thread() -> None:
    from course_lib.runtime import _runnable_here

    assert _runnable_here() >= 1


def test_choose_threads_sets_and_announces_the_measured_count_and_the_environment_wins(
        monkeypatch, restore_threads, capsys) -> None:
    from course_lib.runtime import choose_threads, get_device

    monkeypatch.delenv("COURSE_THREADS", raising=False)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    _fake_probe(monkeypatch, 2e-3, 1e-3, 0)
    assert choose_threads() == 2 == torch.get_num_threads()
    assert capsys.readouterr().out.startswith("using 2 CPU threads (measured: 0.0 CPUs busy with other work, "
                                              "2 threads 2.00x as fast as 1")
    _fake_probe(monkeypatch, 2e-3, 30e-3, 0)
    assert get_device("cpu", threads="measure").type == "cpu" and torch.get_num_threads() == 1
    assert capsys.readouterr().out.startswith("using 1 CPU thread (measured:")
    monkeypatch.setenv("COURSE_THREADS", "2")
    assert choose_threads() == 2 and capsys.readouterr().out == "using 2 CPU threads (COURSE_THREADS=2)\n"
    with pytest.raises(ValueError, match="choose_threads: max_threads must be an int >= 1, got 0"):
        choose_threads(0)


def test_the_real_probe_returns_one_or_two_and_restores_the_threads(restore_threads) -> None:
    from course_lib.runtime import measure_threads

    torch.set_num_threads(1)
    measured = measure_threads()
    assert measured.threads in (1, 2) and (measured.speedup is None or measured.speedup > 0)
    assert torch.get_num_threads() == 1


def test_every_thread_decision_is_logged_when_asked(monkeypatch, restore_threads, tmp_path, capsys) -> None:
    """COURSE_THREADS_LOG: one JSON line per choose_threads call, with what the probe saw and chose (the
    benchmarks read it beside a notebook's time); nothing is written without the variable."""
    import json

    from course_lib.runtime import choose_threads

    log = tmp_path / "threads.jsonl"
    monkeypatch.delenv("COURSE_THREADS", raising=False)
    monkeypatch.delenv("COURSE_THREADS_LOG", raising=False)
    _fake_probe(monkeypatch, 2e-3, 1e-3, 0)
    assert choose_threads(announce=False) == 2 and not log.exists()
    monkeypatch.setenv("COURSE_THREADS_LOG", str(log))
    assert choose_threads(announce=False) == 2
    _fake_probe(monkeypatch, 2e-3, 1.1e-3, 1)            # a core busy with other work
    assert choose_threads(announce=False) == 1
    monkeypatch.setenv("COURSE_THREADS", "2")
    assert choose_threads(announce=False) == 2
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["threads"] for r in records] == [2, 1, 2]
    assert records[0]["busy_elsewhere"] == 0.0 and records[0]["speedup"] == pytest.approx(2.0)
    assert records[1]["busy_elsewhere"] == 1.0 and records[1]["reason"].startswith("measured: 1.0 CPUs busy")
    assert records[2] == {**records[2], "reason": "COURSE_THREADS=2", "busy_elsewhere": None, "speedup": None}
    monkeypatch.setenv("COURSE_THREADS_LOG", str(tmp_path / "no_such_folder" / "log"))
    assert choose_threads(announce=False) == 2                # an unwritable log never stops a lesson
    assert capsys.readouterr().out == ""


def _armed_watch(monkeypatch, others: list[int]) -> None:
    """choose_threads measured two threads (a fake probe on an idle machine); afterwards the load samples
    the watch reads are ``others``, one after another (0 when they run out)."""
    from course_lib import runtime

    monkeypatch.delenv("COURSE_THREADS", raising=False)
    monkeypatch.delenv("COURSE_THREADS_LOG", raising=False)
    _fake_probe(monkeypatch, 2e-3, 1e-3, 0)
    assert runtime.choose_threads(announce=False) == 2
    later = iter(others)
    monkeypatch.setattr(runtime, "_runnable_elsewhere", lambda: next(later, 0))


@pytest.mark.parametrize(("others", "expected"), [
    ([0, 0, 0, 0, 0, 0, 0], 2),  # idle all along: the measured two threads stay
    ([0, 1, 0, 0, 0, 1, 0], 2),  # commands that ran for an instant: the median says idle
    ([1, 1, 1, 1, 1], 1),        # another program took a CPU after the measurement: one thread from now on
    ([0, 0, 1, 1, 1], 1),        # ... also when it started during the run
])
def test_watch_threads_drops_to_one_thread_when_other_work_takes_a_cpu(monkeypatch, restore_threads, capsys,
                                                                       others, expected) -> None:
    from course_lib.runtime import WATCH_EVERY, watch_threads

    _armed_watch(monkeypatch, others)
    seen = [watch_threads(now=1000.0 + i * WATCH_EVERY) for i in range(len(others))]
    assert seen[-1] == expected == torch.get_num_threads()
    assert seen[:4] == [2, 2, 2, 2]  # never decided on fewer than WATCH_SAMPLES samples
    out = capsys.readouterr().out
    assert (out == "using 1 CPU thread from now on (1.0 CPUs busy with other work since the measurement)\n") \
        == (expected == 1)
    assert watch_threads(now=5000.0) == expected  # after a switch the watch is off: it never goes back to two


def test_watch_threads_samples_at_most_every_watch_every_seconds(monkeypatch, restore_threads) -> None:
    from course_lib import runtime

    _armed_watch(monkeypatch, [1] * 20)
    calls = []
    busy = runtime._runnable_elsewhere
    monkeypatch.setattr(runtime, "_runnable_elsewhere", lambda: calls.append(1) or busy())
    for i in range(40):  # 40 steps of a quarter of WATCH_EVERY: 10 samples at most
        runtime.watch_threads(now=2000.0 + i * runtime.WATCH_EVERY / 4)
    assert len(calls) == runtime.WATCH_SAMPLES and torch.get_num_threads() == 1


def test_watch_threads_never_overrides_a_count_that_was_not_measured(monkeypatch, restore_threads) -> None:
    """COURSE_THREADS, configure_threads and a probe that chose one thread leave the watch off."""
    from course_lib import runtime

    _armed_watch(monkeypatch, [1] * 50)
    runtime.configure_threads(2)                      # a notebook or a learner set two threads
    assert [runtime.watch_threads(now=3000.0 + i) for i in range(8)] == [2] * 8
    monkeypatch.setenv("COURSE_THREADS", "2")
    runtime.choose_threads(announce=False)
    assert [runtime.watch_threads(now=4000.0 + i) for i in range(8)] == [2] * 8


def test_the_training_loop_watches_the_threads(monkeypatch, restore_threads) -> None:
    """train() calls watch_threads after every step: a CPU taken during a run moves it to one thread."""
    from torch import nn

    from course_lib import runtime
    from course_lib.training.engine import classification_step, train

    _armed_watch(monkeypatch, [1] * 50)
    monkeypatch.setattr(runtime, "WATCH_EVERY", 0.0)  # a sample after every step
    model = nn.Linear(3, 2)
    batches = [(torch.randn(4, 3), torch.tensor([0, 1, 0, 1]))]
    history = train(model, batches, 6, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=nn.functional.cross_entropy,
                    step_fn=classification_step, progress=False)
    assert history.steps == 6 and torch.get_num_threads() == 1


def test_own_threads_are_counted_before_and_after_the_load_is_read(monkeypatch) -> None:
    """A worker thread that stops spinning while /proc/loadavg is read was in the load: the larger of this
    process's two counts is taken off, so an idle machine never looks busy to the probe or the watch."""
    import io

    from course_lib import runtime

    read = []

    def fake_open(path):
        read.append(path)
        return io.StringIO("0.50 0.40 0.30 3/120 4242\n")  # 3 running: this process's three threads

    monkeypatch.setattr(runtime, "open", fake_open, raising=False)
    # before the read: the calling thread and two spinning workers; after it: the workers went to sleep
    monkeypatch.setattr(runtime, "_runnable_here", lambda: 1 if read else 3)
    assert runtime._runnable_elsewhere() == 0
