"""Grading throughput: submissions per minute for a five-exercise notebook (target: >= 30, --jobs 2, 2 idle cores).

Grades a class of submissions of the five-exercise assignment in ``tests/grading/grading_fixtures/fx_assignment/``
with the real command path (``course_lib.grading.cli.grade_many``: a fresh bubblewrap sandbox per
submission, static policy, hidden cases, reports and CSV written). The same class is also graded
without the sandbox (``--unsafe-no-sandbox``: the same runner as a plain process) to report the sandbox's
own overhead. The class is a realistic mix: 60 % fully solved, 20 % with one wrong exercise, 20 % with two
exercises left as stubs. Attacks are not part of the mix: a submission that loops forever costs its time
limit by design (measured separately below, once).

Each configuration (``--jobs 1`` and ``--jobs 2``) is repeated; the table quotes the median and the range.
``--folder DIR`` grades every notebook in ``DIR`` instead (a real class's submissions; ``--source`` the notebook
they answer, by default the five-exercise assignment). A class with stubs or wrong answers before a later
exercise starts more sandboxes (a later exercise is graded with the earlier reference restored): the table says
how many per submission.

The cost of the grader's witness (the runner's own profiler session over each cases request, issue 45) is
measured apart, per graded call: the sandbox's side of notebook 00's exercise (``observe_cases`` on its hidden
cases) with and without the witness, in this process.

Run (on a shared machine take the benchmark lock, so that no other timing run overlaps)::

    flock /tmp/bench.lock python benchmarks/bench_grading.py                 # 12 submissions x 3 repeats
    flock /tmp/bench.lock python benchmarks/bench_grading.py --quick         # 4 submissions x 1 repeat
    flock /tmp/bench.lock python benchmarks/bench_grading.py --jobs 2 --folder CLASS --source NOTEBOOK

Writes ``benchmarks/results/grading.md`` (and ``grading.json``).
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402  (benchmarks/ is not a package)

FX = ROOT / "tests" / "grading" / "grading_fixtures" / "fx_assignment" / "fx_assignment.ipynb"
RESULTS = HERE / "results"
TARGET_PER_MINUTE = 30.0  # issue 31: the grader asking one exercise at a time must still grade 30 a minute


def make_class(folder: Path, n: int) -> list[Path]:
    """``n`` submissions of the five-exercise assignment: solved, one wrong exercise, or two stubs."""
    sys.path.insert(0, str(FX.parent))
    import fx_checks  # noqa: F401 - registers the exercises

    from course_lib.exercises.notebooks import exercise_cells, solve

    student = nbformat.read(FX, as_version=4)
    solved = solve(student)
    paths = []
    for i in range(n):
        nb = copy.deepcopy(solved)
        cells = [cell for _, cell, _ in exercise_cells(nb)]
        stubs = [cell for _, cell, _ in exercise_cells(student)]
        kind = ("solved", "solved", "solved", "one wrong", "solved", "two stubs")[i % 6] if n > 1 else "solved"
        if kind == "one wrong":
            cells[0].source = cells[0].source.replace("/ math.sqrt(q.shape[-1])", "")
        elif kind == "two stubs":
            cells[2].source, cells[4].source = stubs[2].source, stubs[4].source
        path = folder / f"student{i:02d}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the sandboxes), user + system."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_once(paths: list[Path], jobs: int, out: Path, sandbox: bool = True, source: Path = FX
             ) -> tuple[float, float, list]:
    """Wall seconds, CPU seconds (grader + sandboxes) and the reports of one grading run."""
    from course_lib.grading.cli import grade_many
    from course_lib.grading.runner import GradeConfig

    config = GradeConfig(source=source, seed=0, sandbox=sandbox)
    cpu, start = _cpu_seconds(), time.perf_counter()
    reports = grade_many(paths, config, out, jobs=jobs, quiet=True)
    return time.perf_counter() - start, _cpu_seconds() - cpu, reports


def attack_once(folder: Path, out: Path) -> tuple[float, int]:
    """Seconds to grade one submission whose exercises loop and exit (policy off, 10 s per cell)."""
    from course_lib.exercises.notebooks import exercise_cells, solve
    from course_lib.grading.runner import GradeConfig, grade_submission

    nb = solve(nbformat.read(FX, as_version=4))
    cells = [cell for _, cell, _ in exercise_cells(nb)]
    cells[1].source = "def fx_causal_mask(seq_len):\n    while True:\n        pass\n"
    cells[2].source = "import os\ndef fx_attend(q, k, v):\n    return q, k\nos._exit(1)\n"
    path = folder / "attacker.ipynb"
    nbformat.write(nb, path)
    start = time.perf_counter()
    report = grade_submission(path, GradeConfig(source=FX, seed=0, cell_timeout=10, policy=False))
    return time.perf_counter() - start, report.kernel_starts


def witness_cost(repeats: int = 20) -> dict:
    """Milliseconds per graded call of notebook 00's exercise on its hidden cases (the sandbox's side,
    ``observe_cases``), with the runner's witness around the request and without it (median of ``repeats``)."""
    import course_lib.checks  # noqa: F401 - registers the course's exercises
    from course_lib.exercises import get_exercise
    from course_lib.grading.sandbox.codec import encode_cases
    from course_lib.grading.sandbox.sandbox_main import observe_cases, witness_recorder
    from course_lib.models.softmax import stable_softmax

    exercise = get_exercise("stable_softmax")
    cases = exercise.cases("hidden", seed=0)
    arrays, described = encode_cases(cases)
    job = {"differentiable": exercise.differentiable, "train_mode": False,
           "watch": list(exercise.forbidden_calls), "seed": exercise.seed, "access": None}
    witnessed = witness_recorder()

    def bare() -> object:
        return observe_cases(job, stable_softmax, described, arrays)

    times: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):
        for kind in ("without", "with"):
            start = time.perf_counter()
            bare() if kind == "without" else witnessed("bench", bare)
            times[kind].append((time.perf_counter() - start) * 1000 / len(cases))
    return {"cases": len(cases), "ms_per_call_without": statistics.median(times["without"]),
            "ms_per_call_with": statistics.median(times["with"])}


def measure(paths: list[Path], folder: Path, jobs: int, repeats: int, sandbox: bool, source: Path = FX) -> dict:
    """Median rate and CPU per submission of ``repeats`` runs of one configuration."""
    rates, cpus, totals, starts = [], [], None, []
    for r in range(repeats):
        seconds, cpu, reports = run_once(paths, jobs, folder / f"out-{jobs}-{sandbox}-{r}", sandbox, source)
        rates.append(len(paths) / seconds * 60)
        cpus.append(cpu / len(paths))
        totals = [rep.total for rep in reports]
        starts.append(sum(rep.kernel_starts for rep in reports) / len(paths))
        print(f"jobs={jobs} sandbox={sandbox} repeat {r + 1}: {len(paths)} submissions in {seconds:.1f} s "
              f"= {rates[-1]:.1f}/min, {cpus[-1]:.2f} CPU s each", flush=True)
    return {"jobs": jobs, "sandbox": sandbox, "submissions": len(paths), "repeats": repeats,
            "median_per_min": statistics.median(rates), "min_per_min": min(rates), "max_per_min": max(rates),
            "cpu_s_per_submission": statistics.median(cpus), "scores": totals,
            "sandboxes_per_submission": statistics.median(starts)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="4 submissions, 1 repeat (checks the benchmark works)")
    parser.add_argument("--folder", type=Path, help="grade the notebooks in this folder instead of a generated class")
    parser.add_argument("--source", type=Path, default=FX, help="the notebook the --folder's submissions answer")
    args = parser.parse_args()
    if args.quick:
        args.submissions, args.repeats = 4, 1
    busy_before = cpu_busy_share()
    info = machine_info()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        folder = Path(tmp)
        if args.folder is not None:
            paths = sorted(args.folder.glob("*.ipynb"))
            if not paths:
                parser.error(f"--folder {args.folder}: no .ipynb file in it")
        else:
            paths = make_class(folder, args.submissions)
        for jobs in args.jobs:
            rows.append(measure(paths, folder, jobs, args.repeats, sandbox=True, source=args.source))
        bare = measure(paths, folder, max(args.jobs), args.repeats, sandbox=False, source=args.source)
        attack_s, attack_starts = attack_once(folder, folder / "out-attack")
        witness = witness_cost(5 if args.quick else 20)
    best = max(rows, key=lambda r: r["median_per_min"])
    same = next(r for r in rows if r["jobs"] == bare["jobs"])
    overhead_wall = 60 / same["median_per_min"] - 60 / bare["median_per_min"]
    overhead_cpu = same["cpu_s_per_submission"] - bare["cpu_s_per_submission"]
    verdict = "meets" if best["median_per_min"] >= TARGET_PER_MINUTE else "misses"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "grading.json").write_text(json.dumps({"machine": info, "rows": rows, "unsandboxed": bare,
                                                       "sandbox_overhead_wall_s": overhead_wall,
                                                       "sandbox_overhead_cpu_s": overhead_cpu, "attack_s": attack_s,
                                                       "attack_sandbox_starts": attack_starts,
                                                       "witness": witness}, indent=2))
    lines = ["# Grading throughput", "",
             (f"The {len(paths)} submissions in `{args.folder}` (answering `{args.source.name}`)" if args.folder else
              "Submissions of the five-exercise assignment (`tests/grading/grading_fixtures/fx_assignment/`)")
             + " graded by `course_lib.grading.cli.grade_many` exactly as `course-grade` does (a fresh bubblewrap "
             "sandbox per submission, 1024 MB memory limit, static policy, hidden cases, JSON/Markdown/CSV reports)."
             + ("" if args.folder else " Class mix: 60 % solved, 20 % one wrong exercise, 20 % two stubs.")
             + " Produced by `benchmarks/bench_grading.py`"
             + (" --quick" if args.quick else "") + ".", "",
             markdown_machine(info), "",
             load_note(busy_before) + " Numbers are medians of the repeats, with the range.", "",
             "| parallel jobs | submissions | repeats | submissions / minute (median) | range | CPU s per "
             "submission (grader + sandbox) | bound on 2 idle cores | sandboxes per submission |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        bound = 2 * 60 / row["cpu_s_per_submission"] if row["cpu_s_per_submission"] > 0 else float("nan")
        lines.append(f"| {row['jobs']} | {row['submissions']} | {row['repeats']} | "
                     f"**{row['median_per_min']:.1f}** | {row['min_per_min']:.1f} – {row['max_per_min']:.1f} | "
                     f"{row['cpu_s_per_submission']:.2f} | {bound:.0f}/min | {row['sandboxes_per_submission']:.2f} |")
    lines += ["", f"Target: at least {TARGET_PER_MINUTE:g} submissions per minute on 2 cores; the best configuration "
              f"(`--jobs {best['jobs']}`) {verdict} it with a median of {best['median_per_min']:.1f}/min.", "",
              f"Sandbox overhead: the same class with `--jobs {bare['jobs']}` and `--unsafe-no-sandbox` (the same "
              f"runner as a plain process) graded at {bare['median_per_min']:.1f}/min with "
              f"{bare['cpu_s_per_submission']:.2f} CPU s per submission: the sandbox costs {overhead_wall:+.2f} s of "
              f"wall time and {overhead_cpu:+.2f} CPU s per submission (measured under the load stated above).", "",
              "The CPU time per submission (user + system, of the grader and of its sandboxes, from `getrusage`) "
              "does not depend much on how busy the machine is; 2 cores x 60 s divided by it bounds what an idle "
              "2-core machine can do (the sandbox's start, mostly `import torch`, dominates it).", "",
              f"One attacking submission (an endless loop in one exercise, `os._exit` in another; policy off, "
              f"10 s per cell) took {attack_s:.1f} s with {attack_starts} sandbox starts: the loop costs its "
              "per-cell limit, each restart a sandbox start.", "",
              f"The grader's witness (its own profiler session over each cases request): notebook 00's exercise "
              f"observed on its {witness['cases']} hidden cases costs {witness['ms_per_call_with']:.2f} ms per graded "
              f"call with it and {witness['ms_per_call_without']:.2f} ms without (median of the repeats, in the "
              "grader's process, under the load stated above).", ""]
    (RESULTS / "grading.md").write_text("\n".join(lines))
    print(f"RESULT grading throughput: {best['median_per_min']:.1f} submissions/min (jobs={best['jobs']}), "
          f"target {TARGET_PER_MINUTE:g}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
