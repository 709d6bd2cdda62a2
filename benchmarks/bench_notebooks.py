"""Time to execute every course notebook top to bottom, as a learner (or nbval) runs it.

Executes each ``notebooks/NN_*.ipynb`` with nbclient in a fresh kernel of this interpreter (the course's
``execute_notebook``), one after the other, with the full default step counts (``COURSE_SMOKE`` unset) and
the non-interactive matplotlib backend. Kernel start-up is included: it is part of what a learner waits
for. Target (issue 8 for notebooks 00-09, then issue 19 with notebooks 11-13): every notebook together in at
most 12 minutes on 2 cores.

Run::

    flock /tmp/bench.lock python benchmarks/bench_notebooks.py               # every notebook, once
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --repeats 3   # medians of 3 runs
    python benchmarks/bench_notebooks.py --only 09                           # some notebooks
    python benchmarks/bench_notebooks.py --quick                             # COURSE_SMOKE=1 (mechanism only)
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --only 10 11 --out notebooks_10_11
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --only 10 11 --busy --against notebooks_10_11

``--busy`` keeps one logical CPU busy with a spinning process while the notebooks run (a laptop with other
work on it; issue 33's target: notebooks 11 and 12 within 1.5x their idle time); ``--against STEM`` compares
each notebook's median with the one recorded in ``results/STEM.json`` (an idle run of the same notebooks).
``--paired`` measures both in one invocation: every repeat runs each notebook idle and busy one after the
other (which goes first alternates), so that the ratio compares runs of the same hour; a separate idle run
varied 50-97 s for notebook 12 (``notebooks*.md``), more than the effect measured. Writes
``notebooks_paired.md`` by default::

    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --only 10 11 --paired --repeats 3

Beside each time: the kernel's processor seconds (user + system, all its threads; the spinning process is
not counted) and the thread counts the notebook's probes chose (``COURSE_THREADS_LOG``, see
``course_lib.runtime.choose_threads``), evidence that the machine's load distorts far less than seconds:
with a core busy, every probe should choose 1 and the processor seconds should stay those of one thread.

``--quick`` runs the notebooks with shortened training loops: it checks that the benchmark works, it does
not measure the target. Writes ``benchmarks/results/notebooks.md`` (and ``notebooks.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from course_lib.exercises.execute import execute_notebook

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402  (benchmarks/ is not a package)

RESULTS = HERE / "results"
TARGET_SECONDS = 720.0


def _children_cpu() -> float:
    """User + system seconds of this process's finished (waited-for) children: a kernel, once it has exited."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def time_notebook(path: Path, timeout: int) -> tuple[float, str, float, list[int]]:
    """Execute ``path`` (a fresh copy, outputs discarded); return its seconds, "ok" or the error's last line,
    the kernel's processor seconds, and the thread counts its probes chose, in order (``COURSE_THREADS_LOG``).

    The kernel is a child of this process, waited for when the notebook ends, so the growth of
    ``RUSAGE_CHILDREN`` over the run is its processor time (a spinning process started by ``--busy`` is
    waited for only at the end, so it is not counted)."""
    nb = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "threads.jsonl"
        os.environ["COURSE_THREADS_LOG"] = str(log)  # the kernel inherits this process's environment
        cpu_before, start = _children_cpu(), time.perf_counter()
        try:
            execute_notebook(nb, cwd=path.parent, timeout=timeout)
            status = "ok"
        except Exception as err:  # noqa: BLE001 - reported in the table, the other notebooks still run
            lines = [line.strip() for line in str(err).splitlines() if line.strip().strip("-")]
            status = f"failed: {type(err).__name__}: {lines[-1][:120] if lines else ''}"
        finally:
            os.environ.pop("COURSE_THREADS_LOG", None)
        seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
        chosen = [json.loads(line)["threads"] for line in log.read_text().splitlines()] if log.exists() else []
    return seconds, status, cpu, chosen


def _spinning() -> subprocess.Popen:
    """A process that keeps one logical CPU busy until it is killed (another program on a learner's laptop)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="COURSE_SMOKE=1: shortened loops (not the target)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every notebook (median reported)")
    parser.add_argument("--only", nargs="+", metavar="NN", help="notebook numbers or names, e.g. 07 09")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell")
    parser.add_argument("--busy", action="store_true", help="keep one logical CPU busy while the notebooks run")
    parser.add_argument("--paired", action="store_true",
                        help="run every notebook idle and busy in turn in each repeat; report the ratio")
    parser.add_argument("--out", default=None,
                        help="the results' file stem (default notebooks, notebooks_busy, notebooks_paired)")
    parser.add_argument("--against", default=None, metavar="STEM",
                        help="compare with the medians in results/STEM.json (an idle run of the same notebooks)")
    args = parser.parse_args(argv)

    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        notebooks = [p for p in notebooks if any(p.stem.startswith(o) or p.stem == o for o in args.only)]
    if not notebooks:
        raise SystemExit("bench_notebooks: no notebook selected")
    os.environ["MPLBACKEND"] = "Agg"
    if args.quick:
        os.environ["COURSE_SMOKE"] = "1"
    else:
        os.environ.pop("COURSE_SMOKE", None)

    load_before = cpu_busy_share()
    if args.paired:
        return paired(notebooks, args, load_before)
    times: dict[str, list[float]] = {p.stem: [] for p in notebooks}
    cpus: dict[str, list[float]] = {p.stem: [] for p in notebooks}
    chosen: dict[str, list[list[int]]] = {p.stem: [] for p in notebooks}
    statuses: dict[str, str] = {}
    spinner = _spinning() if args.busy else None
    try:
        for r in range(args.repeats):
            for path in notebooks:
                seconds, status, cpu, threads = time_notebook(path, args.timeout)
                times[path.stem].append(seconds)
                cpus[path.stem].append(cpu)
                chosen[path.stem].append(threads)
                statuses[path.stem] = status if statuses.get(path.stem, "ok") == "ok" else statuses[path.stem]
                print(f"[{r + 1}/{args.repeats}] {path.stem}: {seconds:.1f} s, kernel {cpu:.1f} processor s, "
                      f"threads chosen {threads} ({status})", flush=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()

    medians = {name: statistics.median(ts) for name, ts in times.items()}
    total = sum(medians.values())
    complete = not args.only
    machine = machine_info()
    idle = json.loads((RESULTS / f"{args.against}.json").read_text())["seconds"] if args.against else {}
    lines = [
        "# Time to execute every notebook" + (", one CPU busy" if args.busy else ""),
        "",
        "Each notebook executed top to bottom with nbclient in a fresh kernel (start-up included), "
        + ("with COURSE_SMOKE=1 (shortened loops: a check of the benchmark, NOT the target measurement)"
           if args.quick else "with the full default step counts")
        + f"; median of {args.repeats} run(s)."
        + (" One logical CPU was kept busy by a spinning process throughout (`--busy`)." if args.busy else ""),
        "",
        "| notebook | seconds (median) | all runs | status |" + (f" against {args.against} |" if idle else ""),
        "|---|---|---|---|" + ("---|" if idle else ""),
    ]
    for name in times:
        ratio = (f" {medians[name] / statistics.median(idle[name]):.2f}x |" if name in idle else " - |") if idle else ""
        lines.append(f"| {name} | {medians[name]:.1f} | {', '.join(f'{t:.1f}' for t in times[name])} | "
                     f"{statuses[name]} |{ratio}")
    verdict = ("met" if total <= TARGET_SECONDS else "NOT met") if complete and not args.quick else \
        "not judged (not every notebook, or quick mode)"
    passes = [sum(ts[r] for ts in times.values()) for r in range(args.repeats)]  # each whole course, in order
    lines += [
        f"| **total** | **{total:.1f}** ({total / 60:.1f} min) | {', '.join(f'{t:.1f}' for t in passes)} | |",
        "",
        "The total is the sum of the notebooks' medians; \"all runs\" on its line gives each pass through the "
        "whole course, in the order they ran.",
        "",
        f"Target: all notebooks together <= {TARGET_SECONDS / 60:.0f} min on 2 cores: {verdict}.",
        "",
        "The kernel's processor seconds (user + system, median) and the thread counts its probes chose "
        "(each run's in brackets): " + "; ".join(
            f"{name} {statistics.median(cpus[name]):.1f} s {' '.join(map(str, chosen[name]))}" for name in times)
        + ".",
        "",
        load_note(load_before),
        "",
        markdown_machine(machine),
    ]
    RESULTS.mkdir(exist_ok=True)
    if args.busy:  # the load was read before the spinning process started
        lines[-3] = "Before the spinning process started: " + lines[-3][0].lower() + lines[-3][1:]
    stem = args.out or ("notebooks_busy" if args.busy else "notebooks")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"quick": args.quick, "repeats": args.repeats, "busy": args.busy, "seconds": times, "status": statuses,
         "kernel_cpu_seconds": cpus, "threads_chosen": chosen, "total_median": total, "machine": machine}, indent=2))
    print(f"RESULT all notebooks: {total:.0f} s ({total / 60:.1f} min), "
          f"target <= {TARGET_SECONDS / 60:.0f} min: {verdict}")
    failed = [name for name, s in statuses.items() if s != "ok"]
    if failed:
        print(f"RESULT failed notebooks: {failed}")
    return 1 if failed else 0


def paired(notebooks: list[Path], args: argparse.Namespace, load_before: float) -> int:
    """``--paired``: each repeat runs every notebook idle and with one CPU kept busy, one right after the
    other (the busy run first in odd repeats, so that neither always follows the other); writes the medians,
    their ratio against issue 33's target (busy <= 1.5x idle), the kernel's processor seconds and the
    thread counts the probes chose."""
    runs: dict[str, dict[str, list]] = {p.stem: {f"{kind}_{what}": [] for kind in ("idle", "busy")
                                                 for what in ("seconds", "cpu", "threads")} for p in notebooks}
    statuses: dict[str, str] = {}
    for r in range(args.repeats):
        for path in notebooks:
            for kind in (("busy", "idle") if r % 2 else ("idle", "busy")):
                spinner = _spinning() if kind == "busy" else None
                try:
                    seconds, status, cpu, threads = time_notebook(path, args.timeout)
                finally:
                    if spinner is not None:
                        spinner.kill()
                        spinner.wait()
                record = runs[path.stem]
                record[f"{kind}_seconds"].append(seconds)
                record[f"{kind}_cpu"].append(cpu)
                record[f"{kind}_threads"].append(threads)
                statuses[path.stem] = status if statuses.get(path.stem, "ok") == "ok" else statuses[path.stem]
                print(f"[{r + 1}/{args.repeats}] {path.stem} {kind}: {seconds:.1f} s, kernel {cpu:.1f} processor s, "
                      f"threads chosen {threads} ({status})", flush=True)
    lines = [
        "# Time to execute notebooks idle and with one CPU busy, paired",
        "",
        "Each notebook executed top to bottom with nbclient in a fresh kernel (start-up included), "
        + ("with COURSE_SMOKE=1 (shortened loops: a check of the benchmark, NOT the target measurement)"
           if args.quick else "with the full default step counts")
        + f"; {args.repeats} repeat(s), each running the notebook idle and busy (one logical CPU kept busy by a "
          "spinning process) one right after the other, the busy run first in every second repeat.",
        "",
        "| notebook | idle s (median) | busy s (median) | busy / idle | target <= 1.5x | idle runs | busy runs | "
        "kernel processor s idle / busy | threads chosen idle / busy | status |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, record in runs.items():
        idle, busy = statistics.median(record["idle_seconds"]), statistics.median(record["busy_seconds"])
        ratio = busy / idle
        verdict = "not judged (quick)" if args.quick else ("met" if ratio <= 1.5 else "NOT met")
        lines.append(
            f"| {name} | {idle:.1f} | {busy:.1f} | {ratio:.2f}x | {verdict} | "
            f"{', '.join(f'{t:.1f}' for t in record['idle_seconds'])} | "
            f"{', '.join(f'{t:.1f}' for t in record['busy_seconds'])} | "
            f"{statistics.median(record['idle_cpu']):.1f} / {statistics.median(record['busy_cpu']):.1f} | "
            f"{' '.join(map(str, record['idle_threads']))} / {' '.join(map(str, record['busy_threads']))} | "
            f"{statuses[name]} |")
    lines += [
        "",
        "Processor seconds are the kernel's (user + system, all its threads). With a core busy, the probes "
        "should choose 1 thread and the kernel's processor seconds should be those of one thread: the busy "
        "run is then as fast as one core allows, and the ratio measures how much the notebook gains from a "
        "second core when it is free.",
        "",
        "Before the first run: " + load_note(load_before)[0].lower() + load_note(load_before)[1:],
        "",
        markdown_machine(machine_info()),
    ]
    RESULTS.mkdir(exist_ok=True)
    stem = args.out or "notebooks_paired"
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"quick": args.quick, "repeats": args.repeats, "paired": True, "runs": runs, "status": statuses,
         "machine": machine_info()}, indent=2))
    for name, record in runs.items():
        print(f"RESULT {name}: busy / idle = {statistics.median(record['busy_seconds']):.1f} / "
              f"{statistics.median(record['idle_seconds']):.1f} s")
    failed = [name for name, s in statuses.items() if s != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
