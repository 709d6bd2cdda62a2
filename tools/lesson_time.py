"""How long a class needs for a notebook's core path: an estimate from what the learner reads, writes and waits for.

A lesson is meant to fit one 75-minute class session. Its **core** is every cell but the deep dives: a deep dive
is a section a class can skip, every cell of it (its ``## Deep dive: <title>`` heading included) marked with the
cell metadata ``{"course": {"deep_dive": true}}``. The estimate of the core, in minutes, is the sum of:

- **reading**: the words of its markdown cells at ``WORDS_PER_MINUTE`` (120, a careful reading of technical
  prose); a word is a whitespace-separated token with a letter or a digit in it (a formula's ``$d_k$`` counts);
- **code**: the non-blank, non-comment lines of its code cells at ``LINES_PER_MINUTE`` (6: read, run, look at
  the output); an exercise cell is not counted here (the exercise's minutes cover it), nor the install cell
  (metadata ``course.role == "install"``: run once, not read);
- **exercises**: each exercise's expected minutes, ``EXERCISE_MINUTES`` (15) unless its exercise cell declares
  other minutes in its metadata, ``{"course": {"exercise": ..., "role": "exercise", "minutes": 25}}``;
- **the run**: the notebook's measured run time from ``benchmarks/results/notebooks.json`` (the whole notebook,
  deep dives included: an upper bound of the core's), or ``DEFAULT_RUN_SECONDS`` where it was not measured.

The rates are the ones the course's issue 43 measured the course with; they are stated here and printed with the
table so that a reader can redo the sum by hand. ``tests/notebooks/test_lesson_time.py`` requires every notebook's
core to fit ``SESSION_MINUTES``::

    python tools/lesson_time.py                          # the table for every notebook of notebooks/
    python tools/lesson_time.py notebooks/01_attention.ipynb
    python tools/lesson_time.py --json                   # the same numbers as JSON
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "benchmarks" / "results" / "notebooks.json"
WORDS_PER_MINUTE = 120
LINES_PER_MINUTE = 6
EXERCISE_MINUTES = 15
DEFAULT_RUN_SECONDS = 120
SESSION_MINUTES = 75
_WORD = re.compile(r"[^\W_]")  # a letter or a digit, of any script (Korean included)


def is_deep_dive(cell: nbformat.NotebookNode | dict) -> bool:
    """True when ``cell`` belongs to a deep dive (metadata ``{"course": {"deep_dive": true}}``)."""
    return cell.get("metadata", {}).get("course", {}).get("deep_dive") is True


def markdown_words(source: str) -> int:
    """The words of a markdown cell: whitespace-separated tokens holding a letter or a digit."""
    return sum(1 for token in source.split() if _WORD.search(token))


def code_lines(source: str) -> int:
    """The non-blank lines of a code cell that are not comments (``#`` first)."""
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


@dataclass(frozen=True)
class Estimate:
    """A notebook's core path: what is counted, and the minutes it gives."""

    notebook: str
    words: int
    code_lines: int
    exercises: int
    exercise_minutes: float
    run_seconds: float
    run_measured: bool
    deep_dive_cells: int
    deep_dive_words: int

    @property
    def minutes(self) -> float:
        """The core's estimated minutes: reading + code + exercises + the run."""
        return (self.words / WORDS_PER_MINUTE + self.code_lines / LINES_PER_MINUTE + self.exercise_minutes
                + self.run_seconds / 60)


def measured_run_seconds(timings: Path = TIMINGS) -> dict[str, float]:
    """``{notebook stem: seconds}`` of the notebooks whose measured run finished ("ok") in ``timings``."""
    if not timings.exists():
        return {}
    data = json.loads(timings.read_text(encoding="utf-8"))
    return {name: sorted(runs)[len(runs) // 2] for name, runs in data.get("seconds", {}).items()
            if runs and data.get("status", {}).get(name) == "ok"}


def estimate(nb: nbformat.NotebookNode, notebook: str, run_seconds: float | None = None) -> Estimate:
    """The estimate of ``nb``'s core (its cells but the deep dives); ``run_seconds`` None: the stated default.

    Example:
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("one two three"),
        ...                                      nbformat.v4.new_code_cell("x = 1\\n# a comment\\n\\nprint(x)")])
        >>> e = estimate(nb, "demo", run_seconds=30)
        >>> (e.words, e.code_lines, e.exercises, round(e.minutes, 3))
        (3, 2, 0, 0.858)
    """
    words = lines = dive_cells = dive_words = 0
    exercise_minutes: dict[str, float] = {}
    for cell in nb.cells:
        source = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        if is_deep_dive(cell):
            dive_cells += 1
            dive_words += markdown_words(source) if cell.cell_type == "markdown" else 0
            continue
        course = cell.get("metadata", {}).get("course", {})
        if cell.cell_type == "markdown":
            words += markdown_words(source)
        elif cell.cell_type == "code" and course.get("role") == "exercise":
            exercise_minutes[course["exercise"]] = float(course.get("minutes", EXERCISE_MINUTES))
        elif cell.cell_type == "code" and course.get("role") == "install":
            continue  # the Colab install cell: run, never read (it does nothing where course_lib is installed)
        elif cell.cell_type == "code":
            lines += code_lines(source)
    measured = run_seconds is not None
    return Estimate(notebook, words, lines, len(exercise_minutes), sum(exercise_minutes.values()),
                    run_seconds if measured else DEFAULT_RUN_SECONDS, measured, dive_cells, dive_words)


def estimate_file(path: Path, timings: dict[str, float] | None = None) -> Estimate:
    """The estimate of the notebook at ``path``, with its measured run time when ``timings`` has it."""
    timings = measured_run_seconds() if timings is None else timings
    return estimate(nbformat.read(path, as_version=4), path.stem, timings.get(path.stem))


METHOD = (f"core = every cell but the deep dives (metadata course.deep_dive); minutes = markdown words / "
          f"{WORDS_PER_MINUTE} + code lines (non-blank, non-comment, exercise cells excepted) / {LINES_PER_MINUTE} + "
          f"each exercise's minutes ({EXERCISE_MINUTES} unless its cell declares course.minutes) + the run "
          f"(measured: {TIMINGS.relative_to(ROOT)}, the whole notebook; else {DEFAULT_RUN_SECONDS} s, marked *)")


def table(estimates: list[Estimate]) -> str:
    """The estimates as a plain-text table, the method first and the total last."""
    header = (f"{'notebook':<28} {'words':>6} {'lines':>6} {'exer.':>5} {'ex.min':>6} {'run s':>7} "
              f"{'core min':>8}  {'fits':<4} {'deep-dive cells':>15}")
    rows = [METHOD, "", header, "-" * len(header)]
    for e in estimates:
        run = f"{e.run_seconds:.0f}{'' if e.run_measured else '*'}"
        rows.append(f"{e.notebook:<28} {e.words:>6} {e.code_lines:>6} {e.exercises:>5} {e.exercise_minutes:>6.0f} "
                    f"{run:>7} {e.minutes:>8.1f}  {'yes' if e.minutes <= SESSION_MINUTES else 'NO':<4} "
                    f"{e.deep_dive_cells:>15}")
    total = sum(e.minutes for e in estimates)
    rows.append("-" * len(header))
    rows.append(f"{'total':<28} {'':>6} {'':>6} {'':>5} {'':>6} {'':>7} {total:>8.1f}  "
                f"({total / 60:.1f} h; {sum(e.minutes > SESSION_MINUTES for e in estimates)} of {len(estimates)} "
                f"over {SESSION_MINUTES} min)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: every one of notebooks/)")
    parser.add_argument("--json", action="store_true", help="print the estimates as JSON")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    timings = measured_run_seconds()
    estimates = [estimate_file(path, timings) for path in paths]
    if args.json:
        print(json.dumps({"method": METHOD, "notebooks": [asdict(e) | {"minutes": round(e.minutes, 1)}
                                                          for e in estimates]}, indent=1))
    else:
        print(table(estimates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
