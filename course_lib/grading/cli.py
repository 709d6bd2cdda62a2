"""``course-grade``: grade submitted notebooks; write a report per submission and a CSV for the class.

    course-grade submissions/*.ipynb --out grades/
    course-grade alice.ipynb bob.ipynb --out grades/ --timeout-cell 20 --timeout-total 120 --memory-mb 1024
    course-grade hw/*.ipynb --out grades/ --source my_assignment/hw1.ipynb   # an instructor's own assignment

For each submission it writes ``<name>.json`` and ``<name>.md``; for the class ``grades.csv`` (one row per
submission and exercise) and ``summary.csv`` (one row per submission). The grader runs every submission in a
bubblewrap sandbox (no network, its own processes, a private disk, the course's references withheld) with
time and memory limits, and compares the results in its own process; see docs/grading.md.
Exit status: 0 when every report was written (whatever the scores), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .report import report_name, write_csv, write_json, write_markdown
from .runner import CourseCopy, GradeConfig, SubmissionReport, grade_submission
from .sandbox import SandboxUnavailable, probe
from .submission import display_name

__all__ = ["main", "grade_many"]


def _grade_safely(path: Path, config: GradeConfig, courses: dict[Path, CourseCopy]) -> SubmissionReport:
    """A report for ``path`` whatever happens (``grade_submission`` does not raise; belt and braces)."""
    try:
        return grade_submission(path, config, courses)
    except Exception as err:  # noqa: BLE001
        return SubmissionReport(submission=display_name(path), status="internal-error", sandbox=config.sandbox,
                                message=f"the grader failed: {type(err).__name__}: {err}")


def _save(path: Path, report: SubmissionReport, out: Path, taken: set[str], quiet: bool) -> str:
    """Write one submission's JSON and Markdown reports; returns their base name."""
    name = report_name(display_name(path), taken)
    write_json(report, out / f"{name}.json")
    write_markdown(report, out / f"{name}.md")
    if not quiet:
        print(f"{display_name(path)!r}: {report.total:g}/{report.max_total:g} ({report.elapsed_s:.1f} s) -> "
              f"{out / name}.md", flush=True)
    return name


def grade_many(paths: list[Path], config: GradeConfig, out: Path, jobs: int = 1, quiet: bool = False
               ) -> list[SubmissionReport]:
    """Grade every submission, write all reports into ``out``; return the reports in the order given."""
    out.mkdir(parents=True, exist_ok=True)
    config.resolved_seed()  # one secret seed for the whole run: every student gets the same hidden cases
    taken: set[str] = set()
    named: list[tuple[str, SubmissionReport]] = []
    courses: dict[Path, CourseCopy] = {}
    # Threads, not processes: the work is waiting for sandboxes (each its own processes), and the threads
    # share the course copies, their hidden cases and reference outputs.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_grade_safely, p, config, courses) for p in paths]
        for path, future in zip(paths, futures, strict=True):
            report = future.result()
            named.append((_save(path, report, out, taken, quiet), report))
    write_csv(named, out)
    return [r for _, r in named]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="+", type=Path, help="submitted .ipynb files (or folders of them)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the reports and CSV files")
    parser.add_argument("--source", type=Path, default=None,
                        help="the course's (or your assignment's) copy of the notebook; default: found from the "
                             "submission among the course's notebooks")
    parser.add_argument("--timeout-cell", type=float, default=30.0, help="seconds per cell (default 30)")
    parser.add_argument("--timeout-total", type=float, default=300.0, help="seconds per submission (default 300)")
    parser.add_argument("--memory-mb", type=int, default=1024, help="memory limit of the kernel (default 1024)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the hidden cases (default: a secret random seed per run, recorded in the "
                             "JSON reports)")
    parser.add_argument("--max-mb", type=float, default=20.0, help="largest submission file read (default 20 MB)")
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    parser.add_argument("--allow-module", action="append", default=[],
                        help="a further module exercise cells may import (repeatable)")
    parser.add_argument("--no-policy", action="store_true",
                        help="skip the static policy (NOT for real grading: runtime defences only)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="run submissions without the bubblewrap sandbox (NOT for untrusted code; every report "
                             "says so)")
    parser.add_argument("--quiet", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``course-grade``: grade the submissions named in ``argv``; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    paths: list[Path] = []
    for p in args.submissions:
        if p.is_dir():
            paths += sorted(p.glob("*.ipynb"))
        else:
            paths.append(p)
    if not paths:
        parser.error("no submissions found")
    if args.source is not None and not args.source.is_file():
        parser.error(f"--source {args.source}: no such notebook")
    if args.timeout_cell <= 0 or args.timeout_total <= 0 or args.memory_mb <= 0:
        parser.error("time and memory limits must be positive")
    if not args.unsafe_no_sandbox:
        try:
            probe()
        except SandboxUnavailable as err:
            print(f"course-grade: {err}", file=sys.stderr)
            return 2
    config = GradeConfig(source=args.source, cell_timeout=args.timeout_cell, total_timeout=args.timeout_total,
                         memory_mb=args.memory_mb, seed=args.seed, max_bytes=int(args.max_mb * 2**20),
                         policy=not args.no_policy, extra_modules=tuple(args.allow_module),
                         sandbox=not args.unsafe_no_sandbox)
    started = time.monotonic()
    reports = grade_many(paths, config, args.out, jobs=args.jobs, quiet=args.quiet)
    if not args.quiet:
        print(f"graded {len(reports)} submission(s) in {time.monotonic() - started:.1f} s; "
              f"reports in {args.out}/ (grades.csv, summary.csv)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
