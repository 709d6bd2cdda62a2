"""Time to execute every course notebook top to bottom, as a learner (or nbval) runs it.

Executes each ``notebooks/NN_*.ipynb`` with nbclient in a fresh kernel of this interpreter (the course's
``execute_notebook``), one after the other, with the full default step counts (``COURSE_SMOKE`` unset) and
the non-interactive matplotlib backend. Kernel start-up is included: it is part of what a learner waits
for. Target (issue 8 for notebooks 00-09, then issue 19 with notebooks 10-12): every notebook together in at
most 12 minutes on 2 cores.

Run::

    flock /tmp/bench.lock python benchmarks/bench_notebooks.py               # every notebook, once
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --repeats 3   # medians of 3 runs
    python benchmarks/bench_notebooks.py --only 09                           # some notebooks
    python benchmarks/bench_notebooks.py --quick                             # COURSE_SMOKE=1 (mechanism only)
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --only 10 11 --out notebooks_10_11
    flock /tmp/bench.lock python benchmarks/bench_notebooks.py --only 10 11 --busy --against notebooks_10_11

``--busy`` keeps one logical CPU busy with a spinning process while the notebooks run (a laptop with other
work on it; issue 33's target: notebooks 10 and 11 within 1.5x their idle time); ``--against STEM`` compares
each notebook's median with the one recorded in ``results/STEM.json`` (an idle run of the same notebooks).

``--quick`` runs the notebooks with shortened training loops: it checks that the benchmark works, it does
not measure the target. Writes ``benchmarks/results/notebooks.md`` (and ``notebooks.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
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


def time_notebook(path: Path, timeout: int) -> tuple[float, str]:
    """Seconds to execute ``path`` (a fresh copy, outputs discarded) and "ok" or the error's last line."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        execute_notebook(nb, cwd=path.parent, timeout=timeout)
        status = "ok"
    except Exception as err:  # noqa: BLE001 - reported in the table, the other notebooks still run
        lines = [line.strip() for line in str(err).splitlines() if line.strip().strip("-")]
        status = f"failed: {type(err).__name__}: {lines[-1][:120] if lines else ''}"
    return time.perf_counter() - start, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="COURSE_SMOKE=1: shortened loops (not the target)")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every notebook (median reported)")
    parser.add_argument("--only", nargs="+", metavar="NN", help="notebook numbers or names, e.g. 07 09")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per cell")
    parser.add_argument("--busy", action="store_true", help="keep one logical CPU busy while the notebooks run")
    parser.add_argument("--out", default=None, help="the results' file stem (default notebooks, notebooks_busy)")
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
    times: dict[str, list[float]] = {p.stem: [] for p in notebooks}
    statuses: dict[str, str] = {}
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        for r in range(args.repeats):
            for path in notebooks:
                seconds, status = time_notebook(path, args.timeout)
                times[path.stem].append(seconds)
                statuses[path.stem] = status if statuses.get(path.stem, "ok") == "ok" else statuses[path.stem]
                print(f"[{r + 1}/{args.repeats}] {path.stem}: {seconds:.1f} s ({status})", flush=True)
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
         "total_median": total, "machine": machine}, indent=2))
    print(f"RESULT all notebooks: {total:.0f} s ({total / 60:.1f} min), "
          f"target <= {TARGET_SECONDS / 60:.0f} min: {verdict}")
    failed = [name for name, s in statuses.items() if s != "ok"]
    if failed:
        print(f"RESULT failed notebooks: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
