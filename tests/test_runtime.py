"""course_lib.runtime: the device, the seed, the smoke switch and the CPU threads."""

from __future__ import annotations

import itertools
import math

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


def _trace(others: list[float], every: float, own: list[float] | None = None, cpus: int = 2,
           tick: float = 0.01) -> list:
    """CPU clocks as ``/proc/stat`` and ``time.process_time()`` give them, one snapshot before and one after each
    interval: ``others[i]`` CPUs busy with other work and ``own[i]`` with this process during interval i of
    ``every`` seconds. The idle time is rounded down to ``tick`` seconds, as the kernel prints it."""
    from course_lib.runtime import _CpuSnapshot

    own = own or [0.0] * len(others)
    idle = own_total = 0.0
    snapshots = [_CpuSnapshot(1000.0, 500.0, 7.0, cpus)]
    for i, (busy, mine) in enumerate(zip(others, own, strict=True)):
        idle += (cpus - busy - mine) * every
        own_total += mine * every
        snapshots.append(_CpuSnapshot(1000.0 + (i + 1) * every, 500.0 + math.floor(idle / tick + 1e-9) * tick,
                                      7.0 + own_total, cpus))
    return snapshots


def _fake_probe(monkeypatch, one_s: float, two_s: float, others: list[float] | None,
                own: list[float] | None = None) -> list[int]:
    """Make measure_threads see a matmul of one_s seconds with one thread and two_s with two, and the CPU clocks
    of ``_trace(others, PROBE_EVERY, own)`` (None: no /proc/stat). Returns the thread counts timed, in order."""
    from course_lib import runtime

    timed = []

    def matmul_seconds(threads, a, repeats, give_up=0):
        timed.append(threads)
        return one_s if threads == 1 else two_s

    from course_lib.runtime import _CpuSnapshot

    snapshots = iter(_trace(others, runtime.PROBE_EVERY, own) if others is not None else [])
    monkeypatch.setattr(runtime, "_matmul_seconds", matmul_seconds)
    monkeypatch.setattr(runtime, "_cpu_snapshot", lambda: next(snapshots, _CpuSnapshot(0.0, None, 0.0, 2)))
    monkeypatch.setattr(runtime.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    return timed


IDLE = [0.0] * 5


@pytest.mark.parametrize(("one_s", "two_s", "others", "expected"), [
    (2e-3, 1.1e-3, IDLE, 2),                       # idle: two threads 1.8x faster
    (2e-3, 1.1e-3, None, 2),                       # idle, no /proc/stat: the matmul decides
    (2e-3, 1.8e-3, IDLE, 1),                       # a second thread hardly helps (1.1x)
    (2e-3, 40e-3, IDLE, 1),                        # a core taken where the load does not show: 20x slower
    (2e-3, 1.1e-3, [1.0] * 5, 1),                  # a core kept busy by another program: not even timed
    (2e-3, 1.1e-3, [2.0] * 5, 1),                  # both cores busy
])
def test_measure_threads_picks_two_only_when_a_second_core_is_free(monkeypatch, restore_threads, one_s,
                                                                   two_s, others, expected) -> None:
    from course_lib.runtime import measure_threads

    timed = _fake_probe(monkeypatch, one_s, two_s, others)
    torch.set_num_threads(1)
    measured = measure_threads()
    assert measured.threads == expected and torch.get_num_threads() == 1  # the probe restores the count
    if others is not None and others[0] >= 1:
        assert timed == [] and measured.speedup is None and measured.busy_elsewhere == pytest.approx(others[0])
        assert str(measured) == f"{others[0]:.1f} CPUs busy with other work: no CPU free for a second thread"
    else:
        assert timed[:2] == [1, 2] and measured.speedup == pytest.approx(one_s / two_s)
        assert "2 threads" in str(measured) and (others is None) != ("busy with other work" in str(measured))


# Readings of the CPUs busy with other work, PROBE_SAMPLES of PROBE_EVERY (50 ms) each, as the probe takes them.
# Idle traces are built from what runs on the idle machine: kdamond (this host's DAMON kernel thread) ran
# 16 slices of 2.8 ms in 5 s (/proc/77/schedstat), the notebook server answers a cell in a burst.
KDAMOND = 2.8e-3 / 0.05                              # one slice of kdamond in a 50-ms reading: 0.06 CPUs
@pytest.mark.parametrize(("others", "expected"), [
    ([0.0, KDAMOND, 0.0, 0.0, KDAMOND], 2),          # kdamond's slices count as the CPU they use, not a CPU
    ([2.0, 1.0, 0.0, KDAMOND, 0.0], 2),              # server and browser busy as the cell starts: a burst
    ([0.19, 0.19, 0.19, 0.19, 0.19], 2),             # idle work a printed tick shows in every reading
    ([0.0, 0.0, 1.0, 1.0, 1.0], 1),                  # a program started during the probe and kept a core
    ([1.0, 1.0, 1.0, 0.9, 1.0], 1),                  # `python -c "while True: pass"`: a core in every reading
    ([0.6, 0.6, 0.6, 0.6, 0.6], 1),                  # a program using 60 % of a core throughout
])
def test_the_load_is_judged_by_the_median_reading(monkeypatch, restore_threads, others, expected) -> None:
    from course_lib.runtime import measure_threads

    _fake_probe(monkeypatch, 2e-3, 1.1e-3, others)
    measured = measure_threads()
    assert measured.threads == expected
    assert len(measured.samples) == 5 and measured.busy_elsewhere == pytest.approx(sorted(others)[2], abs=0.21)


# Real clocks (wall, idle seconds, own CPU seconds, CPUs) read by _cpu_snapshot every 50 ms on this course's
# 2-CPU build machine while other work kept both CPUs busy (load average 5.6): never an idle tick.
RECORDED_BUSY = [(12292.0314, 6079.53, 1.4099, 2), (12292.0817, 6079.53, 1.4102, 2), (12292.1321, 6079.53, 1.4104, 2),
                 (12292.1824, 6079.53, 1.4106, 2), (12292.2353, 6079.53, 1.4109, 2), (12292.2856, 6079.53, 1.4111, 2)]


def test_a_recorded_busy_machine_gives_one_thread_without_timing(monkeypatch, restore_threads) -> None:
    from course_lib import runtime

    timed = _fake_probe(monkeypatch, 2e-3, 1.1e-3, IDLE)
    recorded = iter(runtime._CpuSnapshot(*clocks) for clocks in RECORDED_BUSY)
    monkeypatch.setattr(runtime, "_cpu_snapshot", lambda: next(recorded))
    measured = runtime.measure_threads()
    assert measured.threads == 1 and timed == [] and measured.busy_elsewhere == pytest.approx(2.0, abs=0.01)


def test_this_process_own_cpu_time_is_not_other_work(monkeypatch, restore_threads) -> None:
    """PyTorch's worker threads spin for a while after an operation, a notebook's own threads (the kernel's
    I/O threads) wake: all this process's, counted by time.process_time() and taken off the machine's busy time
    (the earlier probe counted this process's sleeping-but-queued threads as another program's)."""
    from course_lib.runtime import measure_threads

    _fake_probe(monkeypatch, 2e-3, 1.1e-3, [0.0] * 5, own=[1.0, 1.0, 0.5, 1.0, 1.0])
    measured = measure_threads()
    assert measured.threads == 2 and measured.busy_elsewhere == pytest.approx(0.0, abs=0.21)
    _fake_probe(monkeypatch, 2e-3, 1.1e-3, [1.0] * 5, own=[1.0] * 5)    # both CPUs busy, one with others' work
    assert measure_threads().threads == 1


def test_busy_elsewhere_from_two_snapshots() -> None:
    from course_lib.runtime import _busy_elsewhere, _CpuSnapshot

    start = _CpuSnapshot(10.0, 100.0, 3.0, 2)
    assert _busy_elsewhere(start, _CpuSnapshot(11.0, 101.0, 3.0, 2)) == pytest.approx(1.0)  # one CPU idle
    assert _busy_elsewhere(start, _CpuSnapshot(11.0, 101.0, 4.0, 2)) == pytest.approx(0.0)  # ... the other ours
    assert _busy_elsewhere(start, _CpuSnapshot(11.0, 102.0, 3.2, 2)) == 0.0                 # never below 0
    assert _busy_elsewhere(start, _CpuSnapshot(11.0, None, 3.0, 2)) is None                 # no /proc/stat
    assert _busy_elsewhere(start, start) is None                                            # no time between


def test_cpu_snapshot_reads_the_idle_and_iowait_columns(monkeypatch) -> None:
    import io

    from course_lib import runtime

    stat = ("cpu  1617765 250 153601 587799 5866 0 1932 1510 0 0\n"
            "cpu0 808000 100 76000 293000 2900 0 900 700 0 0\ncpu1 809765 150 77601 294799 2966 0 1032 810 0 0\n"
            "intr 123\nctxt 456\n")
    monkeypatch.setattr(runtime, "open", lambda path: io.StringIO(stat), raising=False)
    monkeypatch.setattr(runtime.os, "sysconf", lambda name: 100)
    snapshot = runtime._cpu_snapshot()
    assert snapshot.idle == pytest.approx((587799 + 5866) / 100) and snapshot.cpus == 2

    def missing(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(runtime, "open", missing, raising=False)
    assert runtime._cpu_snapshot().idle is None


def test_the_real_snapshot_is_consistent() -> None:
    """On Linux two real snapshots give a figure between 0 and the number of CPUs."""
    from course_lib.runtime import _busy_elsewhere, _cpu_snapshot

    start = _cpu_snapshot()
    sum(i * i for i in range(200_000))
    end = _cpu_snapshot()
    busy = _busy_elsewhere(start, end)
    assert end.own > start.own and (busy is None or 0.0 <= busy <= end.cpus + 0.5)


def test_choose_threads_sets_and_announces_the_measured_count_and_the_environment_wins(
        monkeypatch, restore_threads, capsys) -> None:
    from course_lib.runtime import choose_threads, get_device

    monkeypatch.delenv("COURSE_THREADS", raising=False)
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    _fake_probe(monkeypatch, 2e-3, 1e-3, IDLE)
    assert choose_threads() == 2 == torch.get_num_threads()
    assert capsys.readouterr().out.startswith("using 2 CPU threads (measured: 0.0 CPUs busy with other work, "
                                              "2 threads 2.00x as fast as 1")
    _fake_probe(monkeypatch, 2e-3, 30e-3, IDLE)
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
    _fake_probe(monkeypatch, 2e-3, 1e-3, IDLE)
    assert choose_threads(announce=False) == 2 and not log.exists()
    monkeypatch.setenv("COURSE_THREADS_LOG", str(log))
    _fake_probe(monkeypatch, 2e-3, 1e-3, IDLE)
    assert choose_threads(announce=False) == 2
    _fake_probe(monkeypatch, 2e-3, 1.1e-3, [1.0] * 5)    # a core busy with other work
    assert choose_threads(announce=False) == 1
    monkeypatch.setenv("COURSE_THREADS", "2")
    assert choose_threads(announce=False) == 2
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["threads"] for r in records] == [2, 1, 2]
    assert records[0]["busy_elsewhere"] == pytest.approx(0.0) and records[0]["speedup"] == pytest.approx(2.0)
    assert records[1]["busy_elsewhere"] == pytest.approx(1.0) and records[1]["reason"].startswith("measured: 1.0 CPUs")
    assert records[1]["samples"] == pytest.approx([1.0] * 5) and records[1]["speedup"] is None  # not timed
    assert records[2] == {**records[2], "reason": "COURSE_THREADS=2", "busy_elsewhere": None, "speedup": None}
    monkeypatch.setenv("COURSE_THREADS_LOG", str(tmp_path / "no_such_folder" / "log"))
    assert choose_threads(announce=False) == 2                # an unwritable log never stops a lesson
    assert capsys.readouterr().out == ""


def _armed_watch(monkeypatch, others: list[float]) -> None:
    """choose_threads measured two threads (a fake probe on an idle machine); afterwards the CPU clocks the watch
    reads show ``others`` CPUs busy with other work in each WATCH_EVERY interval, one after another (idle when
    they run out)."""
    from course_lib import runtime

    monkeypatch.delenv("COURSE_THREADS", raising=False)
    monkeypatch.delenv("COURSE_THREADS_LOG", raising=False)
    _fake_probe(monkeypatch, 2e-3, 1e-3, IDLE)
    # the probe's clocks, then the watch's: training on two threads uses 1.5 CPUs of this process
    snapshots = itertools.chain(_trace(IDLE, runtime.PROBE_EVERY),
                                _trace([*others, *[0.0] * 100], runtime.WATCH_EVERY, own=[1.5] * (len(others) + 100)))
    monkeypatch.setattr(runtime, "_cpu_snapshot", lambda: next(snapshots))
    assert runtime.choose_threads(announce=False) == 2


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
    read = runtime._cpu_snapshot
    monkeypatch.setattr(runtime, "_cpu_snapshot", lambda: calls.append(1) or read())
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


@pytest.mark.parametrize(("durations", "expected"), [
    ([1e-3, 50e-3, 1e-3, 1e-3, 1e-3], 1e-3),    # one run 50x slower (a worker woken late): the median stands
    ([1e-3, 50e-3, 60e-3, 1e-3, 1e-3], 60e-3),  # a second slow run: busy, the measurement ends there
    ([1e-3, 2e-3, 3e-3, 4e-3, 5e-3], 3e-3),     # no slow run: the median
])
def test_one_slow_matmul_run_does_not_decide(monkeypatch, durations, expected):
    """Measured on an idle 2-core machine: 1 of 30 probes met one two-thread run 50x slower than the rest and
    chose one thread for the whole notebook. Two slow runs end the measurement; one alone does not."""
    from course_lib import runtime

    clock = iter(t for d in durations for t in (0.0, d))  # perf_counter() before and after each timed run
    monkeypatch.setattr(runtime.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(runtime.torch, "mm", lambda a, b: None)
    monkeypatch.setattr(runtime.torch, "set_num_threads", lambda n: None)
    assert runtime._matmul_seconds(2, None, len(durations), give_up=10e-3) == pytest.approx(expected)
