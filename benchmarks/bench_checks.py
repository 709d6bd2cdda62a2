"""How long a learner waits for a check: the first check of each notebook and the later ones.

Target (issue 17): the first check of a notebook answers in <= 1 s and every later check in <= 0.3 s on 2
cores. For each notebook, a fresh interpreter does what the notebook's first cell does (``import torch``,
``from course_lib.checks import check``, ``get_device()``), then times ``check(name)`` for each of the
notebook's exercises in order, with the course's reference defined under the stub's name (a passing check
runs every public case; a stub stops at the first). The first check pays for importing that notebook's checks
module; the later ones only run their cases. Each notebook's round repeats ``--repeats`` times in fresh
interpreters; the table gives medians.

``tests/notebooks/test_browser_lab.py`` measures the same in JupyterLab (``check_times.json`` beside its screenshots).

Run::

    flock /tmp/bench.lock python benchmarks/bench_checks.py          # 3 repeats
    python benchmarks/bench_checks.py --quick                        # 1 repeat

Writes ``benchmarks/results/checks.md`` and ``checks.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

FIRST_TARGET_S, LATER_TARGET_S = 1.0, 0.3

CHILD = r"""
import contextlib, io, json, sys, time
t0 = time.perf_counter()
import torch
from course_lib.checks import check
from course_lib.runtime import get_device
get_device()
setup = time.perf_counter() - t0
names = sys.argv[1:]
timings = []
for name in names:
    from course_lib.exercises import get_exercise
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as out:
        ex = get_exercise(name)
        globals()[ex.reference.__name__] = ex.reference  # what a solved exercise cell defines
        check(name)
    timings.append(time.perf_counter() - start)
    assert f"{name}: passed" in out.getvalue(), out.getvalue()
print(json.dumps({"setup": setup, "checks": timings}))
"""


def exercises_of(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.metadata["course"]["exercise"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("course", {}).get("role") == "check"]


def run(names: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", CHILD, *names], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 3)
    busy = cpu_busy_share(1.0)
    rows = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        names = exercises_of(path)
        if not names:
            continue
        runs = [run(names) for _ in range(repeats)]
        first = statistics.median(r["checks"][0] for r in runs)
        later = [statistics.median(r["checks"][i] for r in runs) for i in range(1, len(names))]
        rows[path.stem] = {"exercises": names, "first_s": first, "later_s": later,
                           "setup_s": statistics.median(r["setup"] for r in runs)}
    first_max = max(r["first_s"] for r in rows.values())
    later_max = max((x for r in rows.values() for x in r["later_s"]), default=0.0)
    note, info = load_note(busy), machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "checks.json").write_text(json.dumps({"notebooks": rows, "repeats": repeats, "busy_share": busy,
                                                     "machine": info}, indent=1))
    lines = ["# How long a check takes", "",
             f"Each notebook's checks in a fresh interpreter after its first cell's imports; median of {repeats} "
             f"run(s). Target: first check <= {FIRST_TARGET_S} s, later checks <= {LATER_TARGET_S} s on 2 cores.",
             "", "| notebook | first cell's imports (s) | first check (s) | later checks (s) |", "|---|---|---|---|"]
    for nb, r in rows.items():
        later = ", ".join(f"{x:.3f}" for x in r["later_s"]) or "-"
        lines.append(f"| {nb} | {r['setup_s']:.2f} | {r['first_s']:.3f} | {later} |")
    met = first_max <= FIRST_TARGET_S and later_max <= LATER_TARGET_S
    lines += ["", f"Slowest first check {first_max:.3f} s, slowest later check {later_max:.3f} s: target "
              f"{'met' if met else 'not met'}.", "", note, "", markdown_machine(info), ""]
    (RESULTS / "checks.md").write_text("\n".join(lines))
    print(f"RESULT first check max {first_max:.3f} s (target {FIRST_TARGET_S}), later check max "
          f"{later_max:.3f} s (target {LATER_TARGET_S}): {'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
