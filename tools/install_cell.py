"""Write every notebook's install cell and the README's Colab and Binder links, from the one publishing setting.

The setting is ``[tool.course] repository`` in ``pyproject.toml`` (where the repository is published). Each notebook
in ``notebooks/`` gets, as its first code cell, the cell of :func:`course_lib.edition.install.install_cell_source`
at the current ``course_lib.__version__`` (cell metadata ``{"course": {"role": "install"}}``; an existing one is
updated in place, so running this twice changes nothing). The README's block between the two ``open-in`` markers
lists every notebook with its Colab and Binder links. ``tests/edition/test_install_cell.py`` fails when either is
stale::

    python tools/install_cell.py            # rewrite the notebooks' install cells and the README's links
    python tools/install_cell.py --check    # only compare; exit 1 when something differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

import course_lib
from course_lib.edition.install import (
    Publication,
    binder_url,
    colab_url,
    install_cell_source,
    packages_url,
    publication,
    set_install_cell,
)

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN = "<!-- open-in: written by tools/install_cell.py from pyproject.toml's [tool.course] repository -->"
END = "<!-- /open-in -->"


def notebooks(root: Path = ROOT) -> list[Path]:
    """The course's notebooks, in order."""
    return sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def links_block(paths: list[Path], where: Publication) -> str:
    """The README's list of every notebook's Colab and Binder links, markers included."""
    lines = [BEGIN, "", "| notebook | open it in |", "|---|---|"]
    for path in paths:
        lines.append(f"| `{path.stem}` | [Colab]({colab_url(path.name, where)}) · "
                     f"[Binder]({binder_url(path.name, where)}) |")
    return "\n".join([*lines, "", END])


def readme_with_links(readme: str, block: str) -> str:
    """``readme`` with its ``open-in`` block replaced by ``block`` (the markers must be there)."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md: no block between {BEGIN!r} and {END!r}")
    head, rest = readme.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def stale(root: Path = ROOT, write: bool = False) -> list[str]:
    """The files whose install cell or links differ from the setting's (rewritten when ``write``)."""
    where = publication(root / "pyproject.toml")
    source = install_cell_source(course_lib.__version__, packages_url(where))
    changed = []
    for path in notebooks(root):
        nb = nbformat.read(path, as_version=4)
        if set_install_cell(nb, source):
            changed.append(str(path.relative_to(root)))
            if write:
                nbformat.write(nb, path)
    readme = (root / "README.md").read_text(encoding="utf-8")
    wanted = readme_with_links(readme, links_block(notebooks(root), where))
    if wanted != readme:
        changed.append("README.md")
        if write:
            (root / "README.md").write_text(wanted, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` compare) the install cells and the README's links; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when something differs")
    args = parser.parse_args(argv)
    changed = stale(write=not args.check)
    verb = "differ from the setting" if args.check else "rewritten"
    print(f"install_cell: {len(changed)} file(s) {verb}" + "".join(f"\n  {c}" for c in changed))
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
