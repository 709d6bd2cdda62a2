"""The figures README.md (and docs/grading.md's throughput) quote from a benchmark are the ones ``benchmarks/results/``
holds.

A benchmark rerun that changes a figure makes this fail until the README says the new one; a README edit that
rounds or remembers a figure differently fails too. The figures are read from the results' JSON (the Markdown
only for what the JSON does not record, the commit measured).
"""

from __future__ import annotations

import json
import re

from conftest import NOTEBOOKS, ROOT, load_tool

RESULTS = ROOT / "benchmarks" / "results"
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
           "thirteen", "fourteen", "fifteen", "sixteen"]


def _readme() -> str:
    return " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


def _paragraph(text: str, opening: str) -> str:
    """The text from ``opening`` to the next heading or table (``text``'s whitespace squashed)."""
    start = text.find(opening)
    assert start >= 0, f"README.md no longer says {opening!r}"
    return re.split(r" (?:#+ |\| )", text[start:], maxsplit=1)[0]


# --- the notebooks' timing -------------------------------------------------------------------------------------

def _timing_errors(paragraph: str, results: dict, commit: str, notebooks: list[str]) -> list[str]:
    """What README's timing paragraph says that the notebooks' results (``results``: notebooks.json; ``commit``:
    the one notebooks.md names) contradict: the total, the pass count, the idle machine, the commit, the number of
    notebooks timed, the longest five in order, and the notebooks not timed."""
    seconds = {name[:2]: sum(runs) / len(runs) for name, runs in results["seconds"].items()}
    errors = []
    if f"took {results['total_median']:.1f} s" not in paragraph:
        errors.append(f"the total is {results['total_median']:.1f} s")
    if results["repeats"] != 1 or "one pass" not in paragraph:
        errors.append(f"{results['repeats']} pass(es)")
    if results["busy"] or "idle" not in paragraph:
        errors.append("the measurement was not idle" if results["busy"] else "the paragraph does not say idle")
    if f"commit {commit}" not in paragraph:
        errors.append(f"the commit is {commit}")
    if f"the {NUMBERS[len(seconds)]} notebooks" not in paragraph:
        errors.append(f"{len(seconds)} notebooks were timed")
    longest = sorted(seconds, key=seconds.get, reverse=True)[:5]
    stated = re.findall(r"\b(\d\d) \((?:[^()]|\([^()]*\))*\) (\d+) s\b", paragraph.split("The longest:", 1)[-1])
    if stated != [(nb, f"{seconds[nb]:.0f}") for nb in longest]:
        errors.append(f"the longest five are {[(nb, round(seconds[nb])) for nb in longest]}, it says {stated}")
    untimed = [nb for nb in notebooks if nb not in seconds]
    said = re.search(r"Notebooks? ([\d, and]+) (?:has|have) not been timed", paragraph)
    if (re.findall(r"\d\d", said.group(1)) if said else []) != untimed:
        errors.append(f"the notebooks not timed are {untimed or 'none'}")
    return errors


def test_the_readme_quotes_the_notebooks_timing() -> None:
    results = json.loads((RESULTS / "notebooks.json").read_text(encoding="utf-8"))
    commit = re.search(r"Commit (\w+)", (RESULTS / "notebooks.md").read_text(encoding="utf-8")).group(1)
    notebooks = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    paragraph = _paragraph(_readme(), "The last idle measurement of the whole course")
    errors = _timing_errors(paragraph, results, commit, notebooks)
    assert not errors, "README's notebook timings against benchmarks/results/notebooks.*:\n" + "\n".join(errors)


def test_the_timing_rule_can_fail() -> None:
    results = {"seconds": {f"{n:02d}_x": [float(n)] for n in range(7)}, "total_median": 21.0, "repeats": 1,
               "busy": False}
    good = ("one pass, idle, commit abc took 21.0 s for the seven notebooks. The longest: 06 (a (b)) 6 s, "
            "05 (c) 5 s, 04 (d) 4 s, 03 (e) 3 s and 02 (f) 2 s. Notebooks 07 and 08 have not been timed")
    notebooks = [f"{n:02d}" for n in range(9)]
    assert _timing_errors(good, results, "abc", notebooks) == []
    bad = good.replace("21.0", "20.9").replace("05 (c) 5 s, 04 (d) 4 s", "04 (d) 4 s, 05 (c) 5 s")
    assert len(_timing_errors(bad, results, "abd", notebooks[:8])) == 4


# --- threads ---------------------------------------------------------------------------------------------------

def _ratio_range(name: str, loops: list[str], slower: bool) -> str:
    """``"lo-hi"`` of two threads' step time against one thread's (``slower``: 2 over 1, else 1 over 2) for the
    ``loops`` of ``benchmarks/results/<name>.json``, one decimal."""
    median = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))["median_ms"]
    ratios = [median[loop]["2"] / median[loop]["1"] if slower else median[loop]["1"] / median[loop]["2"]
              for loop in loops]
    return f"{min(ratios):.1f}-{max(ratios):.1f}"


def test_the_readme_quotes_the_threads_benchmarks() -> None:
    """Two threads on an idle machine: notebooks 07, 11 and 12 measure whether to use them for the GPT-sized
    models (``gpt``, ``gpt_dropout``); on a busy one, the slow-down of ViT, the toy model and GPT."""
    text = _readme()
    faster = _ratio_range("threads", ["gpt", "gpt_dropout"], slower=False)
    assert f"notebooks 07, 11 and 12, whose models train {faster} times faster with two on an idle" in text, faster
    slower = _ratio_range("threads_busy", ["vit", "toy", "gpt"], slower=True)
    assert f"({slower}x in `benchmarks/results/threads_busy.md`: ViT, toy model, GPT)" in text, slower


# --- the lessons' length ---------------------------------------------------------------------------------------

def test_the_readme_quotes_the_lessons_length_as_the_estimate_gives_it() -> None:
    """The shortest and longest core and the course's total, as ``tools/lesson_time.py`` computes them now."""
    estimates = [load_tool("lesson_time").estimate_file(path) for path in NOTEBOOKS]
    shortest = min(estimates, key=lambda e: e.minutes)
    longest = max(estimates, key=lambda e: e.minutes)
    hours = sum(e.minutes for e in estimates) / 60
    said = _paragraph(_readme(), "**One lesson, one class session.**")
    expected = (f"from {shortest.minutes:.1f} minutes ({shortest.notebook[:2]}) to {longest.minutes:.1f} "
                f"({longest.notebook[:2]}), {hours:.1f} hours for the {len(estimates)} lessons")
    assert expected in said, f"README.md should say: {expected!r}"


# --- the grader's throughput (docs/grading.md) -----------------------------------------------------------------

def test_the_grading_guide_quotes_the_grading_benchmark() -> None:
    """docs/grading.md's "Throughput": the rate with ``--jobs 2``, its CPU time and sandboxes per submission, and
    the rate without the sandbox, as ``benchmarks/results/grading.json`` holds them."""
    results = json.loads((RESULTS / "grading.json").read_text(encoding="utf-8"))
    row = next(r for r in results["rows"] if r["jobs"] == 2 and r["sandbox"])
    text = " ".join((ROOT / "docs" / "grading.md").read_text(encoding="utf-8").split())
    said = _paragraph(text, "Each submission starts a sandbox")
    expected = [f"graded at {row['median_per_min']:.1f} submissions a minute",
                f"({row['cpu_s_per_submission']:.2f} CPU seconds per submission",
                f"{row['sandboxes_per_submission']:.2f} sandboxes per submission",
                f"and {results['unsandboxed']['median_per_min']:.1f} a minute without the sandbox"]
    missing = [phrase for phrase in expected if phrase not in said]
    assert not missing, f"docs/grading.md should say: {missing}"
