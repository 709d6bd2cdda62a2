"""Independent runs on several CPU cores, one process each: for grids of small experiments.

A grid of small trainings (notebook 12: 7 variants x 3 seeds) is a set of independent runs. Inside one
run, a second thread gains little for small models: each step is many small operations, dominated by
their fixed cost, not by arithmetic (``benchmarks/results/threads.md``). Two runs side by side on two
cores, one thread each, finish in about half the time, and a busy core only slows them down as much as it
would slow one run down (no thread waits for another).

Each worker is a fresh Python process started with ``spawn``: the default on macOS and Windows, and the
start method that is safe in a process that already runs threads, as a Jupyter kernel does. So the
function must be importable (defined in a module, such as :func:`course_lib.ablation.train_variant`, not in
the notebook), and its arguments and results are pickled.

``COURSE_WORKERS=1`` (or any number) in the environment sets the number of processes for every call.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, TypeVar

import torch

__all__ = ["map_in_processes", "default_workers"]

T = TypeVar("T")


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


def _start_worker(threads: int) -> None:
    """Runs once in each new process: its number of PyTorch threads."""
    torch.set_num_threads(threads)


def map_in_processes(fn: Callable[..., T], tasks: Sequence[tuple[Any, ...]], *, workers: int | None = None,
                     threads: int = 1, device: torch.device | str = "cpu", desc: str = "runs",
                     progress: bool = True) -> list[T]:
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
        desc: the progress bar's label (the bar counts finished runs).

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
    bar = tqdm(total=len(tasks), desc=desc, disable=not progress)
    try:
        if count == 1 or torch.device(device).type != "cpu" or len(tasks) <= 1:
            return _map_here(fn, tasks, threads, bar)
        return _map_in_pool(fn, tasks, min(count, len(tasks)), threads, bar)
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
                 bar: Any) -> list[T]:
    """The runs in ``workers`` spawned processes; results put back in the order of ``tasks``."""
    results: list[Any] = [None] * len(tasks)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                             initargs=(threads,)) as pool:
        futures = {pool.submit(fn, *task): index for index, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                bar.update()
        except BaseException:
            for future in futures:  # an error or an interrupt: do not start the runs still waiting
                future.cancel()
            raise
    return results
