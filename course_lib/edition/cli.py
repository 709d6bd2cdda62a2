"""``course-class-edition``: build what students receive for a graded class (no graded answer in it).

    course-class-edition --graded 05 --out class05/         # the week of notebook 05: notebooks 00-05, 05 graded
    course-class-edition --out class/                       # the course: notebooks/ + course_lib/ + pyproject.toml
    course-class-edition --out class/ --notebooks 00 01     # only these notebooks (their calls recorded)
    course-class-edition --assignment assignments/kv_cache --out kv_student/   # an assignment's student folder
    course-class-edition --graded 05 --out class05/ --colab https://example.org/class05/packages   # for Colab

``--graded NN`` is how a class runs, one notebook graded a week: it ships notebooks 00 to NN, withholds the
answers of NN (and of every later notebook, whose modules stay in ``course_lib``), ships the earlier notebooks'
references as they are (past due: the course's published solutions) and records only NN's calls.

The course's build runs each notebook once (the self-study edition) to record the calls its lesson makes to
graded functions that have no PyTorch counterpart (``--no-record`` skips it: those calls then say the answer
is withheld). Students install the result with ``pip install class/`` (or put it on ``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``course-class-edition``; returns the exit status."""
    parser = argparse.ArgumentParser(prog="course-class-edition", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output folder (new or empty)")
    parser.add_argument("--notebooks", nargs="*", default=None,
                        help="notebook numbers or names to include (default: every notebook, 00 to 14)")
    parser.add_argument("--graded", default=None, metavar="NN",
                        help="the edition of one assignment: notebooks 00..NN, NN's answers withheld (and later ones')")
    parser.add_argument("--assignment", type=Path, default=None,
                        help="build the student folder of this assignment folder instead of the course")
    parser.add_argument("--no-record", action="store_true", help="do not run the notebooks to record their calls")
    parser.add_argument("--colab", default=None, metavar="URL",
                        help="Colab-ready: build the edition's wheel into OUT/packages/, and make every notebook's "
                             "first cell install it from URL (where you publish that folder) where course_lib is "
                             "missing")
    args = parser.parse_args(argv)
    from .build import build_edition, build_student_folder

    if args.assignment is not None:
        manifest = build_student_folder(args.assignment, args.out)
        print(f"student folder of {args.assignment}: {len(manifest['exercises'])} exercises as stored data, "
              f"{len(manifest['parts'])} graded parts withheld -> {args.out}")
        return 0
    from course_lib.exercises.cli import NOTEBOOK_DIR

    paths = None
    if args.graded is not None and args.notebooks is not None:
        parser.error("give --graded or --notebooks, not both")
    if args.notebooks is not None:
        every = sorted(Path(NOTEBOOK_DIR).glob("[0-9][0-9]_*.ipynb"))
        paths = [p for p in every if any(p.stem.startswith(n) for n in args.notebooks)]
        if not paths:
            parser.error(f"no notebook matches {args.notebooks}")
    try:
        manifest = build_edition(args.out, paths, record=not args.no_record, graded=args.graded, colab=args.colab)
    except (FileExistsError, ValueError) as err:
        parser.error(str(err))
    kinds = [part["kind"] for part in manifest["parts"].values()]
    graded = f", {manifest['graded']} graded" if manifest.get("graded") else ""
    print(f"class edition -> {args.out}: {len(manifest['notebooks'])} notebooks{graded}, {len(manifest['checked'])} "
          f"exercises checked from stored data, {len(manifest['exercises'])} withheld; graded parts: "
          f"{kinds.count('backed')} PyTorch-backed, "
          f"{kinds.count('stored')} stored outputs, {kinds.count('withheld')} withheld")
    if manifest.get("colab"):
        print(f"Colab-ready: publish {args.out / 'packages'} at {args.colab}; every notebook's first cell installs "
              f"{manifest['colab']} from there where course_lib is missing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
