"""The website folds a notebook's deep dives (site/hooks.py), checked on pages rendered as the site renders them
(mkdocs-jupyter's nbconvert, no kernel, no MkDocs build): the whole site's test is tests/website/test_site.py."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from conftest import ROOT
from mkdocs_jupyter.nbconvert2 import nb2html

_spec = importlib.util.spec_from_file_location("site_hooks", ROOT / "site" / "hooks.py")
hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hooks)
DEEP = {"course": {"deep_dive": True}}
md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell


def _page(tmp_path: Path, cells: list[nbformat.NotebookNode]) -> tuple[str, SimpleNamespace, dict]:
    """A notebook's HTML as mkdocs-jupyter renders it, and the page and config objects MkDocs hands the hook."""
    path = tmp_path / "notebooks" / "99_demo.ipynb"
    path.parent.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    page = SimpleNamespace(file=SimpleNamespace(src_uri="notebooks/99_demo.ipynb", abs_src_path=str(path)), toc=[])
    return nb2html(str(path), execute=False), page, {"extra": {"course_repository_root": str(ROOT)}}


def _folds(html: str) -> list[str]:
    return re.findall(r'<details class="info course-deep-dive">(.*?)\n</details>', html, re.DOTALL)


NOTEBOOK = [
    md("# 99 · Demo\n\nThe core."),
    code("core_value = 1"),
    md("## Recap\n\nWhat the core taught."),
    md("## Deep dive: the first measurement\n\nWhy it holds.", metadata=DEEP),
    code("first_dive_value = 2", metadata=DEEP),
    md("## Deep dive: a second one\n\nMore.", metadata={"course": {"deep_dive": True}, "tags": ["keep"]}),
    code("second_dive_value = 3", metadata=DEEP),
]


def test_each_deep_dive_is_folded_with_its_title_and_the_core_is_not(tmp_path: Path) -> None:
    html, page, config = _page(tmp_path, NOTEBOOK)
    folded = hooks.on_page_content(html, page, config, files=[])
    folds = _folds(folded)
    assert len(folds) == 2
    assert folds[0].startswith("<summary>Deep dive: the first measurement <span")
    assert "first_dive_value" in folds[0] and "second_dive_value" not in folds[0]
    assert folds[1].startswith("<summary>Deep dive: a second one") and "second_dive_value" in folds[1]
    core = re.sub(r"<details.*?</details>", "", folded, flags=re.DOTALL)
    assert "core_value" in core and "What the core taught" in core and "Deep dive" not in core
    assert "<details open" not in folded  # folded: closed until the reader opens it
    links = hooks.open_in_links(page.file.src_uri.rsplit("/", 1)[-1], ROOT)  # the page's Colab/Binder links
    assert folded.startswith(links)
    assert len(folded) - len(links) - len(html) < 400  # only the wrappers were added: no cell lost or repeated


def test_a_notebook_without_deep_dives_is_left_as_rendered(tmp_path: Path) -> None:
    html, page, config = _page(tmp_path, NOTEBOOK[:3])
    links = hooks.open_in_links(page.file.src_uri.rsplit("/", 1)[-1], ROOT)  # the page's Colab/Binder links
    assert hooks.on_page_content(html, page, config, files=[]) == links + html


def test_the_cells_are_matched_to_the_notebook_or_the_build_stops(tmp_path: Path) -> None:
    html, _, _ = _page(tmp_path, NOTEBOOK)
    with pytest.raises(ValueError, match="the page shows 7 cells, the notebook has 6"):
        hooks.fold_deep_dives(html, [False] * 5 + [True])
