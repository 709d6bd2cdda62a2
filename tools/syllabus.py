"""Notebook 00's syllabus, generated from the README's: one source, so the two never drift apart.

The README's "## Syllabus" table (``| `NN_topic` | what you build |``) is the source. Notebook 00 shows the same
rows in three markdown cells (the Transformer itself, notebooks 00-08; the paper's claims measured and the
Transformer's descendants, 09-13; today's models, 14 on), so that no cell grows past what a reader takes in at once.
``tests/test_syllabus.py`` fails when notebook 00 differs from what this script writes::

    python tools/syllabus.py            # rewrite notebook 00's two syllabus cells from README.md
    python tools/syllabus.py --check    # only compare; exit 1 when they differ
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOTEBOOK = ROOT / "notebooks" / "00_welcome.ipynb"
FIRST_HEADING = "## The syllabus"
SECOND_LEAD = "From notebook 09 on, the paper's claims are measured, and the Transformer's descendants are built:"
THIRD_LEAD = "Then the Transformer becomes today's open models (Llama, Mistral), weight for weight:"
SPLIT_AT = (9, 14)  # the first notebook of the second cell, and of the third
CLOSING = ("Each notebook explains **why** before **how**: the paper's formulas, a small worked example, a figure,\n"
           "and an experiment you can re-run. The reference solutions live in the course's package, `course_lib`;\n"
           "the notebooks import from it, so there is exactly one copy of every solution.")
_ROW = re.compile(r"^\| `(?P<number>\d\d)_(?P<topic>\w+)` \| (?P<what>.+) \|$")


def readme_rows(readme: str) -> list[tuple[int, str, str]]:
    """``(number, notebook, what you build)`` of every row of the README's syllabus table, in order."""
    start = readme.index("## Syllabus")
    end = readme.index("\n## ", start + 1)
    rows = []
    for line in readme[start:end].splitlines():
        match = _ROW.match(line.strip())
        if match:
            rows.append((int(match["number"]), f"{match['number']}_{match['topic']}", match["what"]))
    if not rows:
        raise ValueError("README.md: no syllabus rows (| `NN_topic` | what you build |) under '## Syllabus'")
    return rows


def _table(rows: list[tuple[int, str, str]]) -> str:
    return "\n".join(["| notebook | what you build |", "|---|---|"] +
                     [f"| `{name}` | {what} |" for _, name, what in rows])


def syllabus_cells(readme: str) -> tuple[str, str, str]:
    """The sources of notebook 00's three syllabus cells, built from the README's table."""
    rows = readme_rows(readme)
    first = [r for r in rows if r[0] < SPLIT_AT[0]]
    second = [r for r in rows if SPLIT_AT[0] <= r[0] < SPLIT_AT[1]]
    third = [r for r in rows if r[0] >= SPLIT_AT[1]]
    return (f"{FIRST_HEADING}\n\n{_table(first)}",
            f"{SECOND_LEAD}\n\n{_table(second)}",
            f"{THIRD_LEAD}\n\n{_table(third)}\n\n{CLOSING}")


def syllabus_cell_indices(nb: nbformat.NotebookNode) -> tuple[int, int, int]:
    """Where notebook 00's three syllabus cells are: the one that opens with the heading and the next two."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and cell.source.startswith(FIRST_HEADING):
            if i + 2 >= len(nb.cells) or any(c.cell_type != "markdown" for c in nb.cells[i + 1:i + 3]):
                raise ValueError(f"{NOTEBOOK.name}: the syllabus cell {i} must be followed by two markdown cells")
            return i, i + 1, i + 2
    raise ValueError(f"{NOTEBOOK.name}: no markdown cell opens with {FIRST_HEADING!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when notebook 00 differs")
    args = parser.parse_args(argv)
    raw = NOTEBOOK.read_text(encoding="utf-8")
    nb = nbformat.reads(raw, as_version=4)
    wanted = syllabus_cells(README.read_text(encoding="utf-8"))
    indices = syllabus_cell_indices(nb)
    if [nb.cells[i].source for i in indices] == list(wanted):
        return 0
    if args.check:
        print(f"{NOTEBOOK.name}: its syllabus differs from README.md's; run python tools/syllabus.py")
        return 1
    for i, source in zip(indices, wanted, strict=True):
        nb.cells[i].source = source
    NOTEBOOK.write_text(nbformat.writes(nb) + ("\n" if raw.endswith("\n") else ""), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
