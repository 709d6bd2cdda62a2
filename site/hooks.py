"""MkDocs hooks of the course's website: links written for the repository keep working on the site.

The site's pages keep the repository's layout (README.md is the home page, docs/*.md, benchmarks/results/*,
notebooks/*.ipynb), so a relative link written in the repository points at the same file on the site. Two
kinds still need a hand after MkDocs has rendered a page (``on_page_content``):

- a link from a notebook to another notebook (``02_multi_head_attention.ipynb``): MkDocs rewrites links in
  Markdown pages only, and a notebook's HTML comes from nbconvert, so the link is pointed at the notebook's page;
- a link to a file of the repository that is not part of the site (``../assignments/kv_cache/``): it points at
  the file in the repository when ``repo_url`` is configured, and otherwise becomes plain text with the path as
  its title, rather than a link that 404s.

A relative link to neither a page nor a file of the repository is left alone, for the site's browser test
(tests/website/test_site.py) to report as broken.

A notebook's deep dives (the sections a class can skip: cells with the metadata ``course.deep_dive``, see
``tools/lesson_time.py``) are folded: each deep dive's cells, from its ``## Deep dive: <title>`` heading on, go
into a collapsed ``<details>`` that Material draws as a collapsible admonition, the title as its summary.

A notebook's page opens with its links to Colab and Binder (:func:`open_in_links`), from the one setting of where the
repository is published (``[tool.course] repository``, :mod:`course_lib.edition.install`): links, not images, so the
page still fetches nothing from another host.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import posixpath
import re
import sys
from html import escape, unescape
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

_ANCHOR_HREF = re.compile(r'(<a\b[^>]*?)\bhref="([^"]*)"', re.IGNORECASE)
_HEADING_ID = re.compile(r'<h[1-6][^>]*?\bid="([^"]*)"', re.IGNORECASE)
_DIV = re.compile(r"<div\b|</div>", re.IGNORECASE)
_NOTEBOOK_DIV = re.compile(r'<div class="jp-Notebook"[^>]*>')
_DEEP_DIVE_HEADING = re.compile(r"<h2\b[^>]*>(?P<title>Deep dive.*?)(?:<a class=\"anchor-link\".*?)?</h2>", re.DOTALL)


def _is_relative(href: str) -> bool:
    parts = urlsplit(href)
    return not (parts.scheme or parts.netloc or href.startswith(("#", "/")) or not parts.path)


def on_page_content(html: str, page, config, files) -> str:
    """Point notebook-to-notebook links at pages and links to repository files at the repository."""
    repo_root = Path(config["extra"]["course_repository_root"])
    repo_url = (config.get("repo_url") or "").rstrip("/")
    here = posixpath.dirname(page.file.src_uri)
    by_source = {f.src_uri: f for f in files}
    destinations = {f.dest_uri for f in files}

    def rewrite(match: re.Match) -> str:
        opening, href = match.group(1), match.group(2)
        if not _is_relative(href):
            return match.group(0)
        parts = urlsplit(href)
        target = posixpath.normpath(posixpath.join(here, unquote(parts.path)))
        fragment = f"#{parts.fragment}" if parts.fragment else ""
        if target in destinations:
            return match.group(0)  # already a page or an asset of the site
        if target in by_source:
            url = by_source[target].url_relative_to(page.file)
            return f'{opening}href="{escape(url)}{escape(fragment)}"'
        repo_path = "" if target == "." else target
        if not target.startswith("..") and (repo_root / repo_path).exists():
            if repo_url:
                kind = "tree" if (repo_root / repo_path).is_dir() else "blob"
                return f'{opening}href="{escape(f"{repo_url}/{kind}/main/{repo_path}")}"'
            return f'{opening}class="course-repo-path" title="{escape(repo_path)} in the course\'s repository"'
        return match.group(0)

    html = _ANCHOR_HREF.sub(rewrite, html)
    if page.file.src_uri.endswith(".ipynb"):
        _align_toc_with_headings(page.toc, html)
        cells = json.loads(Path(page.file.abs_src_path).read_text(encoding="utf-8"))["cells"]
        html = fold_deep_dives(html, [_lesson_time(repo_root).is_deep_dive(cell) for cell in cells])
        html = open_in_links(posixpath.basename(page.file.src_uri), repo_root) + html
    return html


@functools.cache
def _lesson_time(repo_root: Path) -> ModuleType:
    """tools/lesson_time.py, which says what a deep dive is (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("lesson_time", repo_root / "tools" / "lesson_time.py")
    module = sys.modules["lesson_time"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell_spans(html: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each element directly inside nbconvert's ``jp-Notebook`` div: one per cell, in order."""
    opening = _NOTEBOOK_DIV.search(html)
    if opening is None:
        return []
    spans, depth, start = [], 1, 0
    for token in _DIV.finditer(html, opening.end()):
        if token.group(0).lower() == "</div>":
            depth -= 1
            if depth == 1:
                spans.append((start, token.end()))
            elif depth == 0:
                return spans
        else:
            if depth == 1:
                start = token.start()
            depth += 1
    raise ValueError("fold_deep_dives: the notebook's <div> elements are not balanced")


def fold_deep_dives(html: str, deep_dive: list[bool]) -> str:
    """Wrap each deep dive's cells in a collapsed ``<details>`` (Material's collapsible admonition).

    ``deep_dive`` says, cell by cell, whether the notebook's cell belongs to a deep dive; nbconvert writes one
    element per cell, in order, so the two are matched by position. A run of deep-dive cells is one fold, and
    a new fold starts at each "Deep dive" heading; the heading's text is the fold's summary.
    """
    if not any(deep_dive):
        return html
    spans = _cell_spans(html)
    if len(spans) != len(deep_dive):
        raise ValueError(f"fold_deep_dives: the page shows {len(spans)} cells, the notebook has {len(deep_dive)}")
    folds: list[list[tuple[int, int]]] = []
    for index, (span, deep) in enumerate(zip(spans, deep_dive, strict=True)):
        if not deep:
            continue
        heading = _DEEP_DIVE_HEADING.search(html, *span)
        if not folds or heading is not None or not deep_dive[index - 1]:
            folds.append([])
        folds[-1].append(span)
    for fold in reversed(folds):  # from the end, so that earlier offsets stay valid
        start, end = fold[0][0], fold[-1][1]
        heading = _DEEP_DIVE_HEADING.search(html, start, fold[0][1])
        title = re.sub(r"<[^>]+>", "", heading.group("title")).strip() if heading else "Deep dive"
        html = (f'{html[:start]}<details class="info course-deep-dive"><summary>{escape(unescape(title))} '
                f'<span class="course-deep-dive-note">(a deep dive: a class can skip it)</span></summary>\n'
                f"{html[start:end]}\n</details>{html[end:]}")
    return html


def open_in_links(notebook: str, repo_root: Path) -> str:
    """A paragraph of links that open ``notebook`` (a file name of ``notebooks/``) in Colab and on Binder."""
    from course_lib.edition.install import binder_url, colab_url, publication

    where = publication(repo_root / "pyproject.toml")
    return (f'<p class="course-open-in">Open this notebook in <a href="{escape(colab_url(notebook, where))}">Colab</a>'
            f' or on <a href="{escape(binder_url(notebook, where))}">Binder</a>.</p>\n')


def _align_toc_with_headings(toc, html: str) -> None:
    """Point the table of contents of a notebook's page at its headings' real ids.

    mkdocs-jupyter makes the contents' ids from the headings' text without their code (``exercise-01`` for
    "Exercise 0.1 — `stable_softmax`"), while nbconvert's headings keep it (``exercise-01-stable_softmax``); the
    contents' links then lead nowhere. Both list the notebook's Markdown headings in page order, so when they
    count the same headings, each entry takes the id of the heading at its position; otherwise an entry whose id
    no heading has takes the id of the next heading that starts with it.
    """
    heading_ids = _HEADING_ID.findall(html)
    entries = []

    def flatten(items) -> None:
        for item in items:
            entries.append(item)
            flatten(item.children)

    flatten(toc)
    if len(entries) == len(heading_ids):
        for entry, heading_id in zip(entries, heading_ids, strict=True):
            entry.id = heading_id
        return
    present, position = set(heading_ids), 0
    for entry in entries:
        if entry.id in present:
            if entry.id in heading_ids[position:]:
                position = heading_ids.index(entry.id, position) + 1
            continue
        for index in range(position, len(heading_ids)):
            if heading_ids[index].startswith(entry.id):
                entry.id, position = heading_ids[index], index + 1
                break
