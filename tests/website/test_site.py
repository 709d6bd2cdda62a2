"""The course's website, built and read in a real browser (Playwright on the system Chromium).

One build (``tools/build_site.py``) into a temporary folder: under ``make test`` it runs after nbval has executed
every notebook, and builds from those executed notebooks (``tests/site_cache.py`` puts them in the site's cache),
so nothing is executed twice; run alone, it builds in smoke mode (``COURSE_SMOKE=1``, as
``make site COURSE_SMOKE=1``). The site is served on localhost by ``http.server`` in a thread; then every page
reachable from the home page is visited, and each must:

- load (HTTP 200) with no console error and no uncaught exception;
- make no request that fails and none to another host than the local server (such requests are blocked, and
  counted: the site must work offline);
- have its maths typeset by the local MathJax: no ``$...$`` left as text outside code, and MathJax's elements
  present where the page's source has maths;
- show every image, loaded (``naturalWidth > 0``).

Every link to the site (``href``, fragments included) must lead to a page or file that exists and to an
element with that id; every notebook in notebooks/ must have its page, in the navigation. Screenshots of the
course's pages (their first screen) go to tests/browser.py's SCREENSHOTS folder.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import pytest
from browser import CHROMIUM_ARGS, SCREENSHOTS, chromium, required_chromium
from conftest import ROOT
from site_cache import load_build_site
from static_server import serve

pytestmark = pytest.mark.slow

#: Text that MathJax should have turned into maths: $...$ holding a TeX command, a sub- or superscript.
UNTYPESET = re.compile(r"\$[^$\n]*(\\[A-Za-z]+|[_^])[^$\n]*\$")
#: The text of a page outside code, scripts and typeset maths (where untypeset TeX would show).
PROSE_JS = """() => {
  const skip = new Set(['PRE', 'CODE', 'SCRIPT', 'STYLE', 'MJX-CONTAINER', 'TEXTAREA']);
  const parts = [];
  const walk = (node) => {
    if (node.nodeType === Node.TEXT_NODE) { parts.push(node.textContent); return; }
    if (node.nodeType !== Node.ELEMENT_NODE || skip.has(node.tagName)) return;
    for (const child of node.childNodes) walk(child);
  };
  walk(document.body);
  return parts.join('');
}"""


def _has_maths(notebook: Path) -> bool:
    """True when a Markdown cell of the notebook holds $...$ maths with TeX in it."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return any(UNTYPESET.search("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")


def _nbval_executed_all() -> bool:
    """True when every notebook is in the site's cache as executed with the default step counts: nbval has run
    them all in this session (``make test``: site_cache.py writes them there) or a full ``make site`` did."""
    build_site = load_build_site()
    environment = build_site.environment_key(False)
    return all(build_site.cached_notebook(build_site.default_cache(), notebook, environment).exists()
               for notebook in build_site.notebooks())


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    """The site, built from the notebooks nbval executed in this session when it executed them all, else in
    smoke mode (executed notebooks cached in build/site-cache, keyed on their sources: see tools/build_site.py)."""
    recorder = pytestconfig.pluginmanager.get_plugin("course-site-cache")
    # Under xdist another worker may still be executing the last notebooks: wait for them (site_cache.py).
    outcomes = recorder.wait_for_notebooks() if recorder is not None else {}
    full = _nbval_executed_all()
    written = {path for path, outcome in outcomes.items() if outcome == "written"}
    if written == set(load_build_site().notebooks()):
        # nbval passed every notebook in this session: the build must find them all (else the plugin is broken
        # and every notebook would be executed a second time, silently doubling CI's time).
        assert full, "nbval executed every notebook, but tests/site_cache.py did not put them all in the site's cache"
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "COURSE_SMOKE": "" if full else "1"}
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "build_site.py"), "--out", str(out)],
                            env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, f"the site did not build:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return out


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    """A static server of the site on a free localhost port; its base URL."""
    with serve(site) as url:
        yield url


#: Pages read at once: a page's last wait (no request for 500 ms, "networkidle") is idle time, which four tabs
#: overlap (184 pages: 141 s one at a time on an idle 2-core machine).
TABS = 4


def _crawl(base: str) -> dict[str, dict]:
    """Visit every HTML page reachable from the home page; return what each showed, by URL."""
    return asyncio.run(_crawl_in_tabs(base, required_chromium()))


async def _crawl_in_tabs(base: str, executable: str) -> dict[str, dict]:
    """:func:`_crawl` with :data:`TABS` tabs of one browser, each taking the next page waiting to be read."""
    from playwright.async_api import async_playwright

    seen: dict[str, dict] = {}
    queue: asyncio.Queue[str] = asyncio.Queue()
    queued = {base + "index.html"}
    queue.put_nowait(base + "index.html")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        problems: dict[object, list[str]] = {}  # page -> what went wrong while it showed its current URL

        async def only_local(route: object) -> None:
            url = route.request.url
            if url.startswith(base) or url.startswith(("data:", "blob:")):
                await route.continue_()
            else:
                problems.get(route.request.frame.page, []).append(f"external request: {url}")
                await route.abort()

        await context.route("**/*", only_local)

        async def tab() -> None:
            page = await context.new_page()
            found = problems[page] = []
            page.on("console", lambda m: found.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: found.append(f"uncaught: {e}"))
            page.on("requestfailed", lambda r: found.append(f"failed request: {r.url} ({r.failure})"))
            page.on("response", lambda r: found.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
            while True:
                url = await queue.get()
                try:
                    found.clear()
                    seen[url] = await _read_page(page, url, base, found)
                    for link in seen[url].get("links", []):
                        target = urldefrag(link).url
                        if target not in queued:
                            queued.add(target)
                            queue.put_nowait(target)
                finally:
                    queue.task_done()

        tabs = [asyncio.create_task(tab()) for _ in range(TABS)]
        reading = asyncio.create_task(queue.join())
        await asyncio.wait([reading, *tabs], return_when=asyncio.FIRST_COMPLETED)
        for task in tabs:
            task.cancel()
        failed = [task.exception() for task in tabs if task.done() and not task.cancelled() and task.exception()]
        if failed:
            raise failed[0]
        await context.close()
        await browser.close()
    return seen


async def _read_page(page: object, url: str, base: str, problems: list[str]) -> dict:
    """What ``page`` shows at ``url``: status, type, maths, untypeset TeX, images, ids, links, problems."""
    started = time.perf_counter()
    response = await page.goto(url, wait_until="load")
    info: dict = {"status": response.status if response else None,
                  "type": (response.headers.get("content-type", "") if response else "")}
    if "text/html" not in info["type"]:
        info["problems"] = list(problems)
        return info
    await page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise",
                                 timeout=30_000)
    await page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
    await page.wait_for_load_state("networkidle")
    info["maths"] = await page.locator("mjx-container").count()
    info["untypeset"] = UNTYPESET.findall(await page.evaluate(PROSE_JS))
    info["images"] = await page.evaluate("() => [...document.images].map(i => "
                                         "({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0}))")
    info["ids"] = set(await page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))
    info["ids"] |= set(await page.evaluate("() => [...document.querySelectorAll('a[name]')].map(e => e.name)"))
    hrefs = await page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => a.href)")
    info["links"] = [h for h in hrefs if h.startswith(base)]
    path = urlsplit(url).path.strip("/")
    if not path.startswith("api/"):  # the pdoc pages are many and alike: their checks suffice
        # The first screen only: a notebook's whole page is ~15,000 px tall and takes 15 s to capture.
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = "site-" + re.sub(r"[^A-Za-z0-9_.-]", "_", path.removesuffix(".html"))
        await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
    info["problems"] = list(problems)
    info["seconds"] = time.perf_counter() - started
    return info


@pytest.fixture(scope="module")
def crawled(server: str) -> tuple[str, dict[str, dict]]:
    return server, _crawl(server)


def test_every_page_loads_offline_without_errors(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    assert len(pages) > 20, f"only {len(pages)} pages reached from the home page"
    bad = {url: p["problems"] for url, p in pages.items() if p["problems"] or p["status"] != 200}
    assert not bad, "pages with errors:\n" + "\n".join(f"  {u}: {p}" for u, p in bad.items())


def test_every_notebook_has_its_page_in_the_navigation(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    home_links = {urldefrag(link).url for link in pages[base + "index.html"]["links"]}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        url = urljoin(base, f"notebooks/{notebook.stem}.html")
        assert url in home_links, f"{notebook.name}: no link to its page in the navigation"
        assert pages.get(url, {}).get("status") == 200, f"{notebook.name}: its page did not load"
        assert pages[url]["images"] or notebook.stem.startswith("00"), f"{notebook.name}: its page shows no figure"


def test_the_guides_benchmarks_and_api_reference_have_pages(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    expected = [f"docs/{p.stem}.html" for p in (ROOT / "docs").glob("*.md")]
    expected += [f"benchmarks/results/{p.stem}.html" for p in (ROOT / "benchmarks" / "results").glob("*.md")
                 if p.name != "README.md"]
    expected += ["api/course_lib.html", "api/course_lib/models/attention.html"]
    missing = [e for e in expected if pages.get(urljoin(base, e), {}).get("status") != 200]
    assert not missing, f"pages not reached from the home page: {missing}"


def test_maths_is_typeset(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    left = {u: p["untypeset"][:3] for u, p in pages.items() if p.get("untypeset")}
    assert not left, f"maths left as TeX: {left}"
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if _has_maths(notebook):
            page = pages[urljoin(base, f"notebooks/{notebook.stem}.html")]
            assert page["maths"] > 0, f"{notebook.name} has maths but its page shows no MathJax element"


def test_images_are_present_and_loaded(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    broken = {u: [i["src"] for i in p["images"] if not i["ok"]] for u, p in pages.items() if p.get("images")}
    broken = {u: srcs for u, srcs in broken.items() if srcs}
    assert not broken, f"images that did not load: {broken}"
    assert sum(len(p.get("images", [])) for p in pages.values()) >= len(list((ROOT / "notebooks").glob("*.ipynb")))


def test_no_internal_link_is_broken(crawled: tuple[str, dict[str, dict]]) -> None:
    base, pages = crawled
    broken = []
    for url, page in pages.items():
        for link in page.get("links", []):
            target, fragment = urldefrag(link)
            fragment = unquote(fragment)
            reached = pages.get(target)
            if reached is None or reached["status"] != 200:
                broken.append(f"{url} -> {link} (HTTP {reached and reached['status']})")
            elif fragment and "ids" in reached and fragment not in reached["ids"]:
                broken.append(f"{url} -> {link} (no element with id {fragment!r})")
    assert not broken, f"{len(broken)} broken links:\n" + "\n".join(f"  {b}" for b in sorted(set(broken))[:40])


def _explorer_page(browser: object, url: str, base: str) -> tuple[object, list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused: list[str] = []
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith((base, "data:", "blob:"))
               else (refused.append(route.request.url), route.abort()))
    page.goto(url, wait_until="load")
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")  # the deep dives,
    page.wait_for_selector(".course-explorer .cx-root", timeout=30_000)  # opened as a reader opens them
    return page, refused


def test_the_explorer_works_on_the_site_offline(server: str) -> None:
    """Notebooks 07 and 11 show their explorers' static twins: a hover highlights where a token looks (07's
    cross-attention, 11's self-attention), and 11's temperature slider changes the bars; nothing is fetched."""
    with chromium() as browser:
        for name in ("07_training_and_decoding", "11_language_model"):
            page, refused = _explorer_page(browser, f"{server}notebooks/{name}.html", server)
            view = page.locator(".course-explorer [data-view=attention]").first
            view.locator("[data-side=query] .cx-token").nth(1).hover()
            weights = view.locator("[data-side=key] .cx-token").evaluate_all(
                "els => els.map(e => Number(e.dataset.weight || 0))")
            assert sum(weights) == pytest.approx(1.0, abs=5e-3), (name, weights)  # a row of weights
            if name.startswith("11"):
                bars = page.locator(".course-explorer [data-view=generation] .cx-bar")
                before = float(bars.first.get_attribute("data-prob"))
                slider = page.locator(".course-explorer [data-view=generation] input[data-name=temperature]")
                slider.fill("0.3")
                slider.dispatch_event("input")
                assert float(bars.first.get_attribute("data-prob")) > before
            assert refused == [], refused
            page.close()


def test_the_crawl_reports_what_goes_wrong_on_the_page_where_it_happens(tmp_path: Path) -> None:
    """The crawl can fail: of five pages read in tabs at once, the errors, the blocked request to another host,
    the missing image and the broken link are each found, and on their own page only."""
    pages = {"index.html": "".join(f'<a href="{n}.html">{n}</a>' for n in ("ok", "error", "external", "image")),
             "ok.html": "<p>fine</p>",
             "error.html": "<script>console.error('boom'); undefinedFunction();</script>",
             "external.html": '<img src="https://example.org/x.png">',
             "image.html": '<img src="missing.png"><a href="gone.html">gone</a>'}
    for name, body in pages.items():
        (tmp_path / name).write_text(f"<!doctype html><html><body>{body}</body></html>", encoding="utf-8")
    with serve(tmp_path) as base:
        seen = _crawl(base)
        problems = {urlsplit(url).path.strip("/"): info["problems"] for url, info in seen.items()}
    assert problems["index.html"] == problems["ok.html"] == [], problems
    assert any("boom" in p for p in problems["error.html"]) and any("uncaught" in p for p in problems["error.html"])
    assert "external request: https://example.org/x.png" in problems["external.html"], problems
    assert any("404" in p and "missing.png" in p for p in problems["image.html"]), problems
    assert seen[base + "gone.html"]["status"] == 404
