"""Independent runs on several CPU cores, one process each: for grids of small experiments.

A grid of small trainings (notebook 13: 7 variants x 3 seeds) is a set of independent runs. Inside one
run, a second thread gains little for small models: each step is many small operations, dominated by
their fixed cost, not by arithmetic (``benchmarks/results/threads.md``). Two runs side by side on two
cores, one thread each, finish in about half the time, and a busy core only slows them down as much as it
would slow one run down (no thread waits for another).

Each worker is a fresh Python process started with ``spawn``: the default on macOS and Windows, and the
start method that is safe in a process that already runs threads, as a Jupyter kernel does. So the
function must be importable (defined in a module, such as :func:`course_lib.experiments.ablation.train_variant`, not in
the notebook), and its arguments and results are pickled.

``COURSE_WORKERS=1`` (or any number) in the environment sets the number of processes for every call.

A worker's own output does not reach the notebook (it goes to the terminal that started Jupyter), so a
training loop's progress bar in a worker sends its counts to the caller instead: :func:`progress_bar` is the
bar the course's loops use, and ``map_in_processes(..., total_steps=...)`` shows the steps of all runs in
one bar.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, TypeVar

import torch

__all__ = ["map_in_processes", "default_workers", "progress_bar"]

T = TypeVar("T")

_reports: Any = None  # in a worker of map_in_processes: the queue to the caller's progress bar
_REPORT_EVERY = 0.2   # seconds between two reports of one bar


def default_workers(tasks: int) -> int:
    """How many processes to use for ``tasks`` runs: ``COURSE_WORKERS`` if set, else one per logical CPU.

    Never more than there are tasks, never fewer than one.

    Example:
        >>> default_workers(1)
        1
    """
    chosen = os.environ.get("COURSE_WORKERS")
    if chosen is None:
        value = os.cpu_count() or 1
    else:
        try:
            value = int(chosen)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"default_workers: COURSE_WORKERS must be a number >= 1, got {chosen!r}")
    return max(1, min(value, tasks))


def _start_worker(threads: int, reports: Any) -> None:
    """Runs once in each new process: its number of PyTorch threads, and where its progress goes."""
    global _reports
    torch.set_num_threads(threads)
    _reports = reports


class _ForwardedBar:
    """The part of tqdm's interface that the course's loops use; counts go to the caller's bar.

    Steps are added up and sent at most every ``_REPORT_EVERY`` seconds (and when the bar closes), so a
    loop of short steps does not spend its time on messages.
    """

    def __init__(self, reports: Any) -> None:
        self._reports = reports
        self._pending = 0
        self._last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self._pending += n
        if time.monotonic() - self._last >= _REPORT_EVERY:
            self._send()

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        """Loss and learning rate stay in the worker: the caller's bar shows the steps of several runs."""

    def close(self) -> None:
        self._send()

    def _send(self) -> None:
        if self._pending:
            self._reports.put(self._pending)
            self._pending = 0
        self._last = time.monotonic()


def progress_bar(total: int, desc: str = "", disable: bool = False, leave: bool = True) -> Any:
    """A tqdm progress bar for a loop of ``total`` steps, or in a worker of :func:`map_in_processes` a bar
    that adds its steps to the caller's bar (the worker's own output would not reach the notebook).

    Example:
        >>> bar = progress_bar(3, disable=True)
        >>> bar.update(3); bar.close()
    """
    if _reports is None or disable:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=disable, leave=leave)
    return _ForwardedBar(_reports)


def map_in_processes(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]], *, workers: int | None = None,
                     threads: int = 1, device: torch.device | str = "cpu", desc: str = "runs",
                     progress: bool = True, total_steps: int | None = None) -> list[T]:
    """``[fn(*task) for task in tasks]``, computed in up to ``workers`` processes; results in ``tasks``' order.

    Args:
        fn: a module-level function (it is imported by name in each worker).
        tasks: the argument tuples, one per run.
        workers: the number of processes; None: :func:`default_workers`. With one worker, or when
            ``device`` is not the CPU (one process keeps a GPU busy), the runs go one after another here,
            in this process.
        threads: PyTorch threads in each worker, and for the runs made here (restored afterwards), so
            that a run gives the same numbers however many workers there are.
        device: where the runs compute; only its type is used.
        desc: the progress bar's label.
        progress: show a progress bar. It counts finished runs, unless ``total_steps`` is given.
        total_steps: the steps of all runs together, when each run trains with a :func:`progress_bar`
            (as :func:`course_lib.training.engine.train` does with ``progress=True``): the bar then counts the
            steps the workers report. Runs made here show their own bars instead.

    An exception in a run is raised here, with the worker's traceback, after the other runs are cancelled.

    Example:
        >>> map_in_processes(pow, [(2, 3), (3, 2)], workers=1, progress=False)
        [8, 9]
    """
    from tqdm.auto import tqdm

    if threads < 1:
        raise ValueError(f"map_in_processes: threads must be >= 1, got {threads}")
    tasks = [tuple(task) for task in tasks]
    count = workers if workers is not None else default_workers(len(tasks))
    if count < 1:
        raise ValueError(f"map_in_processes: workers must be >= 1, got {count}")
    if total_steps is not None and total_steps < 0:
        raise ValueError(f"map_in_processes: total_steps must be >= 0, got {total_steps}")
    here = count == 1 or torch.device(device).type != "cpu" or len(tasks) <= 1
    by_steps = total_steps is not None
    show = progress and not (here and by_steps)  # runs made here show their own step bars
    bar = tqdm(total=total_steps if by_steps else len(tasks), desc=desc, disable=not show,
               unit="step" if by_steps else "run")
    try:
        if here:
            return _map_here(fn, tasks, threads, bar)
        return _map_in_pool(fn, tasks, min(count, len(tasks)), threads, bar, by_steps)
    finally:
        bar.close()


def _map_here(fn: Callable[..., T], tasks: list[tuple[Any, ...]], threads: int, bar: Any) -> list[T]:
    """The runs one after another in this process, with ``threads`` threads."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        results = []
        for task in tasks:
            results.append(fn(*task))
            bar.update()
        return results
    finally:
        torch.set_num_threads(saved)


def _map_in_pool(fn: Callable[..., T], tasks: list[tuple[Any, ...]], workers: int, threads: int,
                 bar: Any, by_steps: bool) -> list[T]:
    """The runs in ``workers`` spawned processes; results put back in the order of ``tasks``.

    While it waits, the caller moves its bar: by finished runs, or (``by_steps``) by the steps that the
    workers' :func:`progress_bar` bars report through a queue.
    """
    results: list[Any] = [None] * len(tasks)
    context = multiprocessing.get_context("spawn")
    reports = context.Queue() if by_steps else None
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                             initargs=(threads, reports)) as pool:
        futures = {pool.submit(fn, *task): index for index, task in enumerate(tasks)}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, timeout=_REPORT_EVERY, return_when=FIRST_COMPLETED)
                _drain(reports, bar)
                for future in finished:
                    results[futures[future]] = future.result()
                    if not by_steps:
                        bar.update()
        except BaseException:
            for future in futures:  # an error or an interrupt: do not start the runs still waiting
                future.cancel()
            raise
    if reports is not None:
        _drain(reports, bar)  # the workers have exited: their last reports are in the queue
        reports.close()
    return results


def _drain(reports: Any, bar: Any) -> None:
    """Move ``bar`` by the steps the workers have reported so far (nothing to do when counting runs)."""
    if reports is None:
        return
    while True:
        try:
            bar.update(reports.get_nowait())
        except queue.Empty:
            return
