"""Where the course runs: one device choice, one seed, one switch for quick smoke runs.

Every notebook starts with::

    from course_lib.runtime import get_device, set_seed, SMOKE
    device = get_device()   # cuda, then mps, then cpu: chosen here once, never hard-coded
    set_seed(0)

On the CPU, :func:`get_device` also sets PyTorch's number of threads, once (see :func:`configure_threads`):
one thread by default, because most of the course's models are small, and on a 2-core machine shared with
other work two threads fighting over small matrices made a training step 17-21x slower than one thread
(``benchmarks/results/threads.md``). The notebooks whose models are large enough to gain from a second core
on an idle machine (07, 10, 11: 1.2-1.7x faster) measure instead, with ``get_device(threads="measure")`` at
start and :func:`choose_threads` before each long cell: with a core busy with other work, two threads were
2x slower than one for the same models (``threads_busy.md``), so a probe of a quarter of a second
(:func:`measure_threads`: how much CPU other work uses, and a small matmul timed) picks 1 or 2 and one
printed line says which.
``COURSE_THREADS=1`` (or ``2``, ``all``) in the environment overrides every notebook's choice and the probe.
``COURSE_THREADS_LOG=path`` appends every such decision to that file, one JSON line each (what the probe saw
and chose, and when): ``benchmarks/bench_notebooks.py`` records them beside each notebook's time.

``SMOKE`` is True only when the environment variable ``COURSE_SMOKE=1`` is set. The test suite sets it
when it executes notebooks a second and third time (student and solved versions) to test the exercise
mechanism; it shrinks training loops through :func:`steps`. The nbval run and every learner see the full
default (``SMOKE`` False).
"""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from course_lib.validation import check_positive_ints

__all__ = ["get_device", "set_seed", "SMOKE", "steps", "configure_threads", "DEFAULT_THREADS", "choose_threads",
           "measure_threads", "watch_threads"]

SMOKE: bool = os.environ.get("COURSE_SMOKE", "") == "1"
DEFAULT_THREADS = 1
_threads_configured = False
PROBE_SAMPLES = 5  # readings of the other work's CPU use in one probe; their median decides
PROBE_EVERY = 0.05  # seconds each reading covers (so a probe takes PROBE_SAMPLES * PROBE_EVERY = 0.25 s)
WATCH_EVERY = 1.0  # seconds between two load samples of watch_threads
WATCH_SAMPLES = 5  # samples whose median decides (a command that runs for an instant does not count)


def configure_threads(threads: int | str | None = None, *, default: int = DEFAULT_THREADS) -> int:
    """Set the number of threads PyTorch uses on the CPU; return it.

    Args:
        threads: a positive number, or ``"all"`` (one per logical CPU). ``None`` reads the environment
            variable ``COURSE_THREADS`` and falls back to ``default``.
        default: the number used when neither ``threads`` nor ``COURSE_THREADS`` says one; at most the
            number of logical CPUs (a default of 2 on a one-CPU machine is 1).

    The default is one thread: for the notebooks' small models a step with two threads was 17x (ViT of
    notebook 08) and 21x (notebook 02's toy model) slower than with one on a busy 2-core machine (measured
    with ``benchmarks/bench_threads.py``). Larger models on an idle machine gain from more. The number of
    threads changes the order of floating-point sums, so a notebook's numbers are reproducible for a fixed
    thread count on one machine (1 and 2 threads give slightly different trainings).

    Example:
        >>> configure_threads(1)
        1
    """
    count = os.cpu_count() or 1
    if default < 1:
        raise ValueError(f"configure_threads: default must be >= 1, got {default!r}")
    chosen = threads if threads is not None else os.environ.get("COURSE_THREADS") or min(default, count)
    if chosen == "all":
        value = count
    else:
        try:
            value = int(chosen)
        except (TypeError, ValueError):
            value = 0
        if value < 1:
            raise ValueError(f"configure_threads: threads (or COURSE_THREADS) must be a number >= 1 or 'all', "
                             f"got {chosen!r}")
    torch.set_num_threads(value)
    _watch.active, _watch.samples = False, []  # a count set here is kept; choose_threads re-arms the watch
    return value


@dataclass
class _Watch:
    """The state of :func:`watch_threads`: on after :func:`choose_threads` measured two threads."""

    active: bool = False
    last: float = -math.inf  # time.monotonic() of the last load sample
    samples: list[float] = field(default_factory=list)  # CPUs busy with other work per sample, the latest last
    snapshot: _CpuSnapshot | None = None  # the CPU clocks at the last sample: the next one covers the time since


_watch = _Watch()


@dataclass(frozen=True)
class ThreadMeasurement:
    """What :func:`measure_threads` saw: the threads to use and why, in one line."""

    threads: int
    busy_elsewhere: float | None  # CPUs busy with other work, the median reading (None: not Linux)
    speedup: float | None  # a small matmul's time with one thread over its time with two (None: not timed)
    samples: tuple[float, ...] = ()  # CPUs busy with other work in each reading, in order (for the log)

    def __str__(self) -> str:
        others = "" if self.busy_elsewhere is None else f"{self.busy_elsewhere:.1f} CPUs busy with other work"
        if self.speedup is None:
            return f"{others}: no CPU free for a second thread"
        return f"{others}{', ' if others else ''}2 threads {self.speedup:.2f}x as fast as 1 on a small matmul"


@dataclass(frozen=True)
class _CpuSnapshot:
    """The machine's CPU clocks at one instant: enough to tell, between two snapshots, how much of the CPUs
    other work used (:func:`_busy_elsewhere`)."""

    wall: float  # time.monotonic(), seconds
    idle: float | None  # seconds all CPUs together spent idle or waiting for I/O since boot (None: no /proc/stat)
    own: float  # seconds of CPU this process used, all its threads (time.process_time())
    cpus: int  # CPUs online (the per-CPU lines of /proc/stat; os.cpu_count() without it)


def _cpu_snapshot() -> _CpuSnapshot:
    """Read the CPU clocks now: the idle and I/O-wait columns of ``/proc/stat``'s first line (in clock ticks of
    ``SC_CLK_TCK``, 10 ms; the kernel keeps the idle time to the microsecond and rounds it down when printed),
    this process's CPU time (to the nanosecond, every thread: PyTorch's spinning workers included), and the
    time. Outside Linux ``idle`` is None."""
    own, wall = time.process_time(), time.monotonic()
    try:
        with open("/proc/stat") as stat:
            lines = stat.read().splitlines()
        fields = lines[0].split()  # "cpu user nice system idle iowait irq softirq steal ..."
        tick = os.sysconf("SC_CLK_TCK")
        idle = (int(fields[4]) + int(fields[5])) / tick
        cpus = sum(line.startswith("cpu") and line[3:4].isdigit() for line in lines)
    except (OSError, ValueError, IndexError):
        return _CpuSnapshot(wall, None, own, os.cpu_count() or 1)
    return _CpuSnapshot(wall, idle, own, cpus or os.cpu_count() or 1)


def _busy_elsewhere(start: _CpuSnapshot, end: _CpuSnapshot) -> float | None:
    """How many CPUs other work kept busy between two snapshots, on average (None without /proc/stat).

    Every CPU second that was not idle, less this process's own: other programs, the notebook server, the
    kernel's threads (``kdamond``, ``kworker``: each by the CPU time it really used, a burst of a few
    milliseconds counts as that, not as a busy CPU), and time the hypervisor took from this machine (steal:
    a core that is not there for a second thread either). Rounded down at 0: the idle time is printed in
    10-ms ticks, so over 50 ms on 2 CPUs one reading is within +-0.2 CPUs.
    """
    if start.idle is None or end.idle is None or end.wall <= start.wall:
        return None
    seconds = end.wall - start.wall
    busy = end.cpus * seconds - (end.idle - start.idle)  # CPU seconds used by every task
    return max(0.0, (busy - (end.own - start.own)) / seconds)


def _matmul_seconds(threads: int, a: torch.Tensor, repeats: int, give_up: float = math.inf) -> float:
    """The median time of ``a @ a`` with ``threads`` threads, after one untimed run (a new thread count
    restarts PyTorch's thread pool); the median, because a single lucky or unlucky run says little. A second
    run slower than ``give_up`` seconds ends the measurement at once with that time (on a busy machine two
    threads can be hundreds of times slower, and the answer is already clear). One slow run alone does not:
    on an idle 2-core machine 1 of 30 probes met a two-thread run 50x slower than the others (a worker thread
    woken late), and ending there chose one thread for the whole notebook (``tools/probe_threads.py``)."""
    torch.set_num_threads(threads)
    torch.mm(a, a)
    times: list[float] = []
    slow = 0
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, a)
        times.append(time.perf_counter() - start)
        slow += times[-1] > give_up
        if slow >= 2:
            return times[-1]
    return sorted(times)[len(times) // 2]


def _load_samples(count: int, every: float) -> list[float]:
    """``count`` readings of :func:`_busy_elsewhere`, each over ``every`` seconds one after the other, while
    this process sleeps (so that it neither slows the other work down nor counts itself); [] without
    /proc/stat."""
    samples = []
    previous = _cpu_snapshot()
    for _ in range(count):
        time.sleep(every)
        current = _cpu_snapshot()
        busy = _busy_elsewhere(previous, current)
        if busy is None:
            return []
        samples.append(busy)
        previous = current
    return samples


def measure_threads(size: int = 256, repeats: int = 5) -> ThreadMeasurement:
    """Measure whether a second CPU thread helps now: 1 or 2 threads, in about a quarter of a second (of
    which this process uses a few milliseconds of CPU).

    Two signals. First, on Linux, how much of the CPUs other work uses: :data:`PROBE_SAMPLES` readings of
    :data:`PROBE_EVERY` seconds each, from the machine's idle time less this process's own CPU time
    (:func:`_busy_elsewhere`), judged by their median. A program that keeps a core busy uses it in every
    reading; a burst of the notebook server or of a kernel thread fills at most one or two and counts only
    by the CPU it used. When more than 0.5 CPUs are busy elsewhere (at most 1.5 free), one thread, and no
    matmul is timed. Second, a (``size`` x ``size``) matmul timed with 1 then 2 threads then 1 again (two
    threads wait for each other at every operation, so with a core taken by work the load does not show,
    such as another virtual machine's, a second thread is slower, not faster): two threads only when they are
    at least 1.3x faster (``benchmarks/results/threads*.md``: on a 2-core machine with one core busy two
    threads were 2-15x slower than one; on an idle one 1.2-1.7x faster for the models of notebooks 07, 11
    and 11). The thread count in effect before the call is restored.

    Why not the number of tasks ready to run (``/proc/loadavg``'s 4th field), as before: it is one instant,
    and the earlier probe's 16 samples of it all fell within 10-20 ms, so anything that ran for a few
    milliseconds then (a kernel thread, the notebook server answering the cell) counted as a busy core; on
    an idle 2-core machine 2 of 6 probes saw 0.5-1.0 CPUs busy and 3 of 6 notebook runs chose one thread.

    Example:
        >>> measure_threads().threads in (1, 2)
        True
    """
    if (os.cpu_count() or 1) < 2:
        return ThreadMeasurement(1, None, None)
    samples = _load_samples(PROBE_SAMPLES, PROBE_EVERY)
    busy_elsewhere = float(statistics.median(samples)) if samples else None
    if busy_elsewhere is not None and (os.cpu_count() or 1) - busy_elsewhere <= 1.5:
        return ThreadMeasurement(1, busy_elsewhere, None, tuple(samples))  # no CPU free: no need to time
    saved = torch.get_num_threads()
    a = torch.randn(size, size)
    try:
        one = _matmul_seconds(1, a, repeats)
        two = _matmul_seconds(2, a, repeats, give_up=2 * one)
        if two < one:  # before and after: a change of load during the probe hits both
            one = min(one, _matmul_seconds(1, a, repeats))
    finally:
        torch.set_num_threads(saved)
    speedup = one / two
    return ThreadMeasurement(2 if speedup >= 1.3 else 1, busy_elsewhere, speedup, tuple(samples))


def _log_choice(threads: int, reason: str, measured: ThreadMeasurement | None) -> None:
    """Append one decision of :func:`choose_threads` to the file ``COURSE_THREADS_LOG`` names, as a JSON line.

    Off unless that variable is set. The benchmarks set it to see, beside a notebook's time, which thread
    count each probe chose and why (a busy core must give 1 at every probe): evidence that the machine's
    load does not distort, unlike the seconds. A file that cannot be written is skipped: a log never stops
    a lesson.
    """
    path = os.environ.get("COURSE_THREADS_LOG")
    if not path:
        return
    record = {"time": time.time(), "pid": os.getpid(), "threads": threads, "reason": reason,
              "busy_elsewhere": None if measured is None else measured.busy_elsewhere,
              "speedup": None if measured is None else measured.speedup,
              "samples": None if measured is None else [round(n, 3) for n in measured.samples]}
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(record) + "\n")
    except OSError:
        pass


def choose_threads(max_threads: int = 2, announce: bool = True) -> int:
    """Set PyTorch's CPU threads for what follows, by measurement (:func:`measure_threads`); return the count.

    Called at the start of the notebooks whose models gain from a second core on an idle machine (07, 10,
    11, through ``get_device(threads="measure")``) and again before each of their long cells, because the
    load of a shared machine changes. ``COURSE_THREADS`` (``1``, ``2``, ``all``) overrides the measurement;
    ``COURSE_THREADS_LOG`` (a file path) records every decision (:func:`_log_choice`).
    ``announce`` prints one line: the choice and what was measured.
    """
    check_positive_ints("choose_threads", max_threads=max_threads)
    chosen = os.environ.get("COURSE_THREADS")
    measured = None
    if chosen:
        value = configure_threads(chosen)
        reason = f"COURSE_THREADS={chosen}"
    elif max_threads < 2:
        value, reason = configure_threads(1), f"max_threads={max_threads}"
    else:
        measured = measure_threads()
        value, reason = configure_threads(measured.threads), f"measured: {measured}"
    _log_choice(value, reason, measured)
    _watch.active, _watch.samples, _watch.last = measured is not None and value > 1, [], -math.inf
    _watch.snapshot = _cpu_snapshot() if _watch.active else None  # the watch's first sample starts here
    if announce:
        print(f"using {value} CPU thread{'s' if value > 1 else ''} ({reason})")
    return value


def watch_threads(now: float | None = None) -> int:
    """Keep a measured choice of two threads honest while a long loop runs; return the threads in effect.

    The course's training loop (:func:`course_lib.training.engine.train`) calls this after every step. It does
    nothing unless :func:`choose_threads` measured and chose two threads (never against ``COURSE_THREADS``
    or a count set with :func:`configure_threads`). Then, at most every :data:`WATCH_EVERY` seconds, it
    samples how many CPUs other work used since the previous sample (as :func:`measure_threads` does: the
    machine's idle time less this process's CPU time, :func:`_busy_elsewhere`), and when the median of the
    last :data:`WATCH_SAMPLES` samples leaves at most 1.5 CPUs free (the probe's own rule) it switches to
    one thread for the rest of the run and says so in one line. Why: the probe sees the load
    of one instant; work that starts after it (another program, a video call) made two threads 2.5x slower
    than one for notebook 12's pre-training (222 processor seconds for 600 steps against 56-62 with one
    thread, measured beside other work). A sample costs a read of ``/proc``; on an idle machine the watch
    never switches, so the loop runs as before. ``now`` (seconds, ``time.monotonic()``) is for tests.

    The switch changes the order of floating-point sums from that step on, as the probe's choice already
    does: on an idle machine (no switch) a seed gives the same numbers as before.
    """
    if not _watch.active:
        return torch.get_num_threads()
    now = time.monotonic() if now is None else now
    if now - _watch.last < WATCH_EVERY:
        return torch.get_num_threads()
    _watch.last = now
    snapshot = _cpu_snapshot()
    previous, _watch.snapshot = _watch.snapshot, snapshot
    if snapshot.idle is None:  # no /proc/stat: nothing to watch
        _watch.active = False
        return torch.get_num_threads()
    busy = None if previous is None else _busy_elsewhere(previous, snapshot)
    if busy is None:  # no interval yet (a snapshot without /proc/stat): this sample starts the first one
        return torch.get_num_threads()
    _watch.samples = [*_watch.samples, busy][-WATCH_SAMPLES:]
    if len(_watch.samples) < WATCH_SAMPLES:
        return torch.get_num_threads()
    elsewhere = float(statistics.median(_watch.samples))
    if (os.cpu_count() or 1) - elsewhere > 1.5:
        return torch.get_num_threads()
    reason = f"{elsewhere:.1f} CPUs busy with other work since the measurement"
    torch.set_num_threads(1)
    _watch.active, _watch.samples = False, []
    _log_choice(1, f"watched: {reason}", None)
    print(f"using 1 CPU thread from now on ({reason})")
    return 1


def get_device(prefer: str | None = None, threads: int | str | None = None) -> torch.device:
    """Return the best available device: CUDA, then Apple MPS, then CPU (threads set on first use, see above).

    Args:
        prefer: force a device by name (``"cpu"``, ``"cuda"``, ``"mps"``); the environment variable
            ``COURSE_DEVICE`` does the same without editing a notebook.
        threads: this notebook's number of CPU threads when ``COURSE_THREADS`` is not set (default
            :data:`DEFAULT_THREADS`, capped at the number of logical CPUs), or ``"measure"``: 1 or 2 as
            :func:`choose_threads` measures them now (announced in one line). Given, it is applied even if
            an earlier call already set the threads.

    Example:
        >>> get_device("cpu")
        device(type='cpu')
    """
    name = prefer or os.environ.get("COURSE_DEVICE")
    if name:
        device = torch.device(name)
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        device = torch.device("mps")
    else:
        device = torch.device("cpu")
    global _threads_configured
    if device.type == "cpu" and (threads is not None or not _threads_configured):
        # once, unless asked: a later torch.set_num_threads(n) in a notebook stays
        if threads == "measure":
            choose_threads()
        else:
            configure_threads(default=threads if threads is not None else DEFAULT_THREADS)
        _threads_configured = True
    return device


def set_seed(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch so that a notebook gives the same numbers twice on one machine.

    Example:
        >>> set_seed(0); a = torch.rand(2)
        >>> set_seed(0); bool(torch.equal(a, torch.rand(2)))
        True
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def steps(full: int, smoke: int) -> int:
    """The number of training steps for a loop: ``full`` normally, ``smoke`` under ``COURSE_SMOKE=1``.

    Example:
        >>> steps(3000, 20) in (3000, 20)
        True
    """
    if full < 1 or smoke < 1:
        raise ValueError(f"steps: full and smoke must be >= 1, got full={full}, smoke={smoke}")
    return smoke if SMOKE else full
