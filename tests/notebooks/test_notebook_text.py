"""What a reader sees before running anything: notebook 00's syllabus is the README's, and no markdown cell is a
wall of text (issue 33: cells of 3,764 and 5,299 characters mixed results, a new section and the next exercise).
"""

from __future__ import annotations

import importlib.util
import re

import nbformat
import pytest
from conftest import NOTEBOOKS, ROOT

_spec = importlib.util.spec_from_file_location("syllabus", ROOT / "tools" / "syllabus.py")
syllabus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(syllabus)

MAX_MARKDOWN_CHARS = 2000  # about what fits on one screen of JupyterLab at 1440 px


def test_notebook_00s_syllabus_is_the_readmes() -> None:
    nb = nbformat.read(syllabus.NOTEBOOK, as_version=4)
    shown = [nb.cells[i].source for i in syllabus.syllabus_cell_indices(nb)]
    wanted = list(syllabus.syllabus_cells(syllabus.README.read_text(encoding="utf-8")))
    assert shown == wanted, "notebook 00's syllabus differs from README.md's: run python tools/syllabus.py"


def test_the_syllabus_lists_every_notebook_and_a_difference_is_seen() -> None:
    readme = syllabus.README.read_text(encoding="utf-8")
    assert [name for _, name, _ in syllabus.readme_rows(readme)] == [p.stem for p in NOTEBOOKS]
    row = next(line for line in readme.splitlines() if line.startswith("| `13_paper_experiments`"))
    shorter = syllabus.syllabus_cells(readme.replace(row + "\n", ""))
    assert shorter != syllabus.syllabus_cells(readme) and "12_paper" not in "".join(shorter)
    assert syllabus.main(["--check"]) == 0


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_markdown_cell_is_a_wall_of_text(path) -> None:
    nb = nbformat.read(path, as_version=4)
    long = {i: len(c.source) for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown" and len(c.source) > MAX_MARKDOWN_CHARS}
    assert not long, (f"{path.name}: markdown cells over {MAX_MARKDOWN_CHARS} characters {long}: split them at "
                      f"their natural boundaries (a result, a new section, the next exercise)")


MAX_FIGURE_INCHES = 11  # matplotlib's inline 100 dpi: 1,100 px, about a notebook's output area at a 1440-px window
FIGSIZE = re.compile(r"figsize=\((?P<width>[^,]+),")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_attention_maps_fit_a_1440_px_window(path) -> None:
    """A cell that draws attention maps sizes its figure with a fixed width that fits the output area, so that
    JupyterLab does not shrink it and its token labels (issue 33: notebooks 07 and 11) stay readable."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "plot_attention(" not in cell.source:
            continue
        for match in FIGSIZE.finditer(cell.source):
            width = match["width"].strip()
            assert re.fullmatch(r"\d+(\.\d+)?", width) and float(width) <= MAX_FIGURE_INCHES, \
                f"{path.name} cell {i}: figsize width {width!r}, expected a number <= {MAX_FIGURE_INCHES} inches"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_title_carries_the_notebooks_number(path) -> None:
    """The first line a student reads, ``# NN · Title``, has the number of the file (five titles kept their old
    number when a notebook was inserted before them)."""
    first = nbformat.read(path, as_version=4).cells[0].source.splitlines()[0]
    assert re.match(rf"# {path.name[:2]} · \S", first), f"{path.name}: its title reads {first!r}"
