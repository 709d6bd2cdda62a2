"""``course-notebooks``: build the solved and instructor-release versions of the course's notebooks.

    course-notebooks solutions --out solutions/   # stubs filled with course_lib's reference, outputs cleared
    course-notebooks release --out release/       # the same, as nbgrader "source" notebooks for instructors
    course-notebooks student SOLVED.ipynb... --out DIR   # markers back to stubs (nbgrader's release step)

The committed notebooks are the student versions; nothing else is kept by hand.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import nbformat

from .notebooks import solve, unsolve

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"


def _load(path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(path, as_version=4)
    module = nb.metadata.get("course", {}).get("checks")
    if module:
        folder = str(path.resolve().parent)  # an assignment's checks module sits beside its notebook
        if folder not in sys.path:
            sys.path.insert(0, folder)
        importlib.import_module(module)  # registers the notebook's exercises
    return nb


def _clear_outputs(nb: nbformat.NotebookNode) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course-notebooks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["solutions", "release", "student"])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to convert (default: every notebook of the course)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if not paths:
        parser.error("no notebooks given and none found")
    args.out.mkdir(parents=True, exist_ok=True)
    for path in paths:
        nb = _load(path)
        if args.action == "student":
            result = unsolve(nb)
        else:
            result = solve(nb)
            if args.action == "release":
                result.metadata.setdefault("course", {})["version"] = "release"
        _clear_outputs(result)
        nbformat.write(result, args.out / path.name)
        print(f"{args.action}: {path.name} -> {args.out / path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
