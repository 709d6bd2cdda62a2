"""Build the course's website: every notebook executed, the guides, the benchmarks' results and the API reference.

``make site`` runs this script; it writes a static site (plain HTML, CSS and JavaScript, nothing fetched from
another host at page load) into ``build/site`` by default. Steps:

1. execute every notebook in ``notebooks/`` (found by glob, so a new notebook needs no edit here) in a fresh
   kernel with nbclient, caching each executed notebook under ``build/site-cache/``: the cache key is a hash of
   the notebook, of course_lib's and data/'s files, of requirements.txt and of the smoke flag, so a rebuild
   after one notebook changes re-executes only that notebook (a change to course_lib re-executes them all,
   since any notebook may show its effect);
2. build the API reference with pdoc (the command of docs/instructors.md; cached the same way);
3. stage the pages in the repository's own layout (README.md as the home page, docs/*.md,
   benchmarks/results/*, notebooks/*.ipynb executed, api/), copy MathJax from the pinned PyPI package, and write
   a MkDocs configuration from ``site/mkdocs.yml`` with the navigation in syllabus order (files sorted by name:
   ``00_welcome`` ... ``12_...``);
4. run MkDocs (Material theme, mkdocs-jupyter renders the executed notebooks) in strict mode;
5. build course_lib's wheel into ``packages/``: where the notebooks' first cell installs it from where
   ``course_lib`` is missing (Colab; ``course_lib.edition.install``).

The reader sees the student version of each notebook, executed: every exercise is a stub whose check says
"not implemented yet", and the cells after it run on the course's reference, so every figure and number is
there while no exercise is spoiled (site/README.md says why). The script imports nothing from course_lib before the
notebooks have run (the notebooks' kernels do), so a broken course_lib fails the notebook that shows it, with its
traceback.

Usage::

    python tools/build_site.py                   # build/site, full training loops
    COURSE_SMOKE=1 python tools/build_site.py    # training loops shortened (what CI builds)
    python tools/build_site.py --out /tmp/site --cache /tmp/cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import nbformat
import yaml
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SITE_CONFIG = ROOT / "site"
#: Bump when the way notebooks are executed changes, so that old cache entries are not reused.
CACHE_VERSION = "1"
#: MathJax 3's files that the site uses, inside the pinned package django-static-mathjax (a copy of MathJax's
#: npm release): the TeX-to-HTML component with every TeX extension, its fonts, and the parts its menu loads.
MATHJAX_FILES = ("tex-chtml-full.js", "output/chtml/fonts/woff-v2", "ui", "a11y")
_ID = re.compile(r'\bid="([^"]*)"')
_FRAGMENT_LINK = re.compile(r'<a href="#([^"]*)">(.*?)</a>', re.DOTALL)


def default_cache() -> Path:
    """Where executed notebooks and the API reference are kept between builds: $COURSE_SITE_CACHE, or build/."""
    return Path(os.environ.get("COURSE_SITE_CACHE", ROOT / "build" / "site-cache"))


def notebooks(root: Path = ROOT) -> list[Path]:
    """The course's notebooks in syllabus order (their names start with the lesson's number)."""
    return sorted((root / "notebooks").glob("*.ipynb"))


def _tree_bytes(folder: Path, pattern: str) -> Iterator[bytes]:
    """The name and content of every file under ``folder`` matching ``pattern``, in a stable order (to hash)."""
    for path in sorted(folder.rglob(pattern)):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path.relative_to(ROOT).as_posix().encode()
            yield path.read_bytes()


def environment_key(smoke: bool) -> str:
    """What every executed notebook depends on besides its own source: course_lib, data/, the pins, the mode."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} smoke={smoke}".encode())
    for chunk in [*_tree_bytes(ROOT / "course_lib", "*.py"), *_tree_bytes(ROOT / "data", "*")]:
        digest.update(chunk)
    digest.update((ROOT / "requirements.txt").read_bytes())
    return digest.hexdigest()


def notebook_key(notebook: Path, environment: str) -> str:
    """The cache key of one executed notebook."""
    return hashlib.sha256(environment.encode() + notebook.read_bytes()).hexdigest()[:20]


def cached_notebook(cache: Path, notebook: Path, environment: str) -> Path:
    """Where ``notebook``, executed in ``environment`` (:func:`environment_key`), is kept in ``cache``."""
    return cache / "notebooks" / f"{notebook.stem}-{notebook_key(notebook, environment)}.ipynb"


def execute(notebook: Path, destination: Path, timeout: int) -> float:
    """Execute ``notebook`` top to bottom in a fresh kernel (working folder notebooks/); write it; return seconds.

    A cell that raises fails the build, naming the notebook: a page must never show a traceback instead of a
    lesson. Widget state is not stored (the progress bars' widgets would need a widget manager from a CDN).
    """
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            store_widget_state=False, record_timing=False,
                            resources={"metadata": {"path": str(notebook.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    except Exception as error:  # noqa: BLE001 - re-raised with the notebook's name
        raise SystemExit(f"build_site: {notebook.name} failed while executing:\n{error}") from error
    seconds = time.perf_counter() - start
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_suffix(".partial")
    nbformat.write(nb, partial)
    partial.replace(destination)  # a build interrupted mid-write never leaves a half notebook in the cache
    return seconds


def executed_notebooks(cache: Path, smoke: bool, timeout: int) -> list[tuple[Path, Path]]:
    """``(source, executed copy)`` for every notebook, executing only those whose key is not cached."""
    environment = environment_key(smoke)
    pairs = []
    for notebook in notebooks():
        cached = cached_notebook(cache, notebook, environment)
        if cached.exists():
            print(f"build_site: {notebook.name}: cached", flush=True)
        else:
            print(f"build_site: {notebook.name}: executing ...", flush=True)
            seconds = execute(notebook, cached, timeout)
            print(f"build_site: {notebook.name}: executed in {seconds:.1f} s", flush=True)
        pairs.append((notebook, cached))
    return pairs


def api_cache_folder(cache: Path) -> Path:
    """Where the pdoc build of this course_lib (and this pdoc) is cached: keyed on every course_lib source."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} pdoc {metadata.version('pdoc')}".encode())
    for chunk in _tree_bytes(ROOT / "course_lib", "*.py"):
        digest.update(chunk)
    return cache / f"api-{digest.hexdigest()[:20]}"


def store_api_reference(built: Path, cache: Path) -> Path:
    """Put a pdoc build (pdoc's default docformat, every public module) into the cache, its dead links unlinked.

    ``tests/repository/test_docs.py`` builds the same reference to check it and hands its build here, so that
    ``make test`` runs pdoc once, not once for the test and again for the site.
    """
    folder = api_cache_folder(cache)
    partial = folder.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(built, partial)
    for page in partial.rglob("*.html"):
        page.write_text(unlink_missing_fragments(page.read_text(encoding="utf-8")), encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    partial.replace(folder)
    return folder


def api_reference(cache: Path) -> Path:
    """The pdoc build of course_lib's public modules (docs/instructors.md's command), cached on course_lib."""
    folder = api_cache_folder(cache)
    if folder.exists():
        print("build_site: API reference: cached", flush=True)
        return folder
    print("build_site: API reference: pdoc ...", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    modules = subprocess.run([sys.executable, str(ROOT / "tools" / "update_api_record.py"), "--modules"],
                             check=True, capture_output=True, text=True, env=env).stdout.split()
    built = cache / "api-build"
    shutil.rmtree(built, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pdoc", *modules, "-o", str(built)], check=True, env=env)
    try:
        return store_api_reference(built, cache)
    finally:
        shutil.rmtree(built, ignore_errors=True)


def unlink_missing_fragments(html: str) -> str:
    """Turn ``<a href="#name">text</a>`` into plain ``text`` where the page has no element with id ``name``.

    pdoc links a word of a docstring that names an inherited member (``state_dict``, from ``nn.Module``) to an
    entry it does not render; such a link would lead nowhere on the page.
    """
    ids = set(_ID.findall(html))
    return _FRAGMENT_LINK.sub(lambda m: m.group(0) if m.group(1) in ids else m.group(2), html)


def api_index(api: Path) -> str:
    """A page that links every module's page of the pdoc build (pdoc's own index shows only ``course_lib``,
    whose ``__all__`` names functions and classes, not the submodules)."""
    modules = sorted(p.relative_to(api).with_suffix("").as_posix().replace("/", ".")
                     for p in api.rglob("*.html") if p.name != "index.html")
    rows = "\n".join(f"| [`{name}`](api/{name.replace('.', '/')}.html) |" for name in modules)
    return ("# API reference\n\nThe reference of `course_lib`'s public modules, built from their docstrings by "
            "pdoc (the command of the instructor's guide). `import course_lib` gives the names of the first "
            "page; a change to a public name or signature fails the tests until `tests/api_record.json` is "
            f"updated on purpose.\n\n| module |\n|---|\n{rows}\n")


def mathjax_folder() -> Path:
    """MathJax 3's es5 folder inside the installed django-static-mathjax package."""
    return Path(metadata.distribution("django-static-mathjax").locate_file("mathjax/static/mathjax/es5"))


def _copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, destination)
    else:
        shutil.copy2(source, destination)


EXPLORER_MARK = 'class="course-explorer"'
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def stage_notebook(source: Path, destination: Path) -> None:
    """Copy an executed notebook for the site, showing each explorer as its static twin: an output that carries
    the explorer's HTML (``course_lib.figures.explorer``) loses its widget view, which would need a widget
    manager from a CDN, so that the page renders the HTML, the same JavaScript on the same data."""
    notebook = json.loads(source.read_text(encoding="utf-8"))
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and EXPLORER_MARK in "".join(data.get("text/html", "")):
                del data[WIDGET_VIEW]
    destination.parent.mkdir(parents=True, exist_ok=True)
    destination.write_text(json.dumps(notebook, ensure_ascii=False, indent=1), encoding="utf-8")


def stage(folder: Path, executed: list[tuple[Path, Path]], api: Path) -> dict:
    """Lay the site's sources out in ``folder/docs`` and return the navigation (MkDocs' ``nav``)."""
    docs = folder / "docs"
    shutil.rmtree(docs, ignore_errors=True)
    docs.mkdir(parents=True)
    _copy(ROOT / "README.md", docs / "index.md")
    _copy(SITE_CONFIG / "README.md", docs / "site" / "README.md")
    guides = sorted((ROOT / "docs").glob("*.md"))
    for guide in guides:
        _copy(guide, docs / "docs" / guide.name)
    results = ROOT / "benchmarks" / "results"
    for result in sorted(results.iterdir()):
        if result.is_file():
            _copy(result, docs / "benchmarks" / "results" / result.name)
    for notebook, cached in executed:
        stage_notebook(cached, docs / "notebooks" / notebook.name)
    _copy(api, docs / "api")
    (docs / "reference.md").write_text(api_index(docs / "api"), encoding="utf-8")
    _copy(SITE_CONFIG / "assets", docs / "assets")
    for name in MATHJAX_FILES:
        _copy(mathjax_folder() / name, docs / "assets" / "mathjax" / name)

    # Guides: the instructor's guide first, then the others by name. Benchmarks: their README first.
    guides.sort(key=lambda p: (p.name != "instructors.md", p.name))
    benchmark_pages = sorted(results.glob("*.md"), key=lambda p: (p.name != "README.md", p.name))
    return [
        {"Home": "index.md"},
        {"Notebooks": [f"notebooks/{nb.name}" for nb, _ in executed]},
        {"Guides": [f"docs/{g.name}" for g in guides] + [{"About this website": "site/README.md"}]},
        {"Benchmarks": [f"benchmarks/results/{p.name}" for p in benchmark_pages]},
        {"API reference": "reference.md"},
    ]


def build(out: Path, cache: Path, smoke: bool, timeout: int) -> None:
    """Build the whole site into ``out`` (replaced)."""
    start = time.perf_counter()
    executed = executed_notebooks(cache, smoke, timeout)
    api = api_reference(cache)
    work = cache / "staging"
    nav = stage(work, executed, api)
    config = yaml.safe_load((SITE_CONFIG / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir=str(work / "docs"), site_dir=str(out.resolve()), nav=nav)
    config.setdefault("extra", {})["course_repository_root"] = str(ROOT)
    config["hooks"] = [str(SITE_CONFIG / hook) for hook in config.get("hooks", [])]
    for plugin in config["plugins"]:
        if isinstance(plugin, dict) and "mkdocs-jupyter" in plugin:
            plugin["mkdocs-jupyter"]["cache_dir"] = str(cache / "mkdocs-jupyter")
    (work / "mkdocs.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    print("build_site: MkDocs ...", flush=True)
    # NO_MKDOCS_2_WARNING: Material's notice about its end of life (May 2027), which site/README.md discusses.
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "-f", str(work / "mkdocs.yml")],
                   check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    from course_lib.edition.install import build_wheel  # after the notebooks: they show a broken course_lib first

    wheel = build_wheel(ROOT, out / "packages")  # what the notebooks' first cell installs where course_lib is missing
    print(f"build_site: {wheel.relative_to(out)}", flush=True)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"build_site: site in {out} ({size / 1e6:.1f} MB) built in {time.perf_counter() - start:.0f} s; "
          f"serve it with: python -m http.server -d {out}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line and build."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site", help="where the site is written")
    parser.add_argument("--cache", type=Path, default=default_cache(),
                        help="executed notebooks and the API reference, kept between builds")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds a cell may run before the build fails")
    args = parser.parse_args(argv)
    smoke = os.environ.get("COURSE_SMOKE", "") == "1"
    # The kernels import the course_lib of this tree, and their progress bars do not matter on a static page.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    build(args.out, args.cache, smoke, args.timeout)


if __name__ == "__main__":
    main()
