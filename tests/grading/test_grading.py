"""The grading command, attacked: every submission is graded as it should be, and a report is always written.

Fixtures are built here from the committed ``notebooks/00_welcome.ipynb`` (one exercise), from the
five-exercise assignment in ``tests/grading/grading_fixtures/fx_assignment/`` (to prove that one attacked exercise
costs only its own points) and from the attacks in ``tests/grading/grading_fixtures/attacks/`` (graded in the
bubblewrap sandbox with the static policy off: the sandbox alone must hold). Tests that start sandboxes are
marked ``slow``; they share runs where they can (a sandbox start, mostly ``import torch``, costs seconds).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import NOTEBOOKS, ROOT
from nbtools import load

from course_lib.exercises import get_exercise
from course_lib.exercises.feedback import run_check
from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.grading.cli import grade_many, main
from course_lib.grading.judging.policy import check_source, setup_namespace
from course_lib.grading.judging.results import UntrustedData, load_arrays, parse_header
from course_lib.grading.records.report import csv_safe, escape_markdown
from course_lib.grading.runner import STANDARD_IMPORTS, GradeConfig, grade_submission, read_submission
from course_lib.grading.sandbox import codec as H
from course_lib.grading.sandbox.executor import MAX_TASKS
from course_lib.grading.sandbox.sandbox import SandboxUnavailable, probe
from course_lib.models.softmax import stable_softmax

NB00 = ROOT / "notebooks" / "00_welcome.ipynb"
FX = ROOT / "tests" / "grading" / "grading_fixtures" / "fx_assignment" / "fx_assignment.ipynb"
HDR = "def stable_softmax(x, dim=-1):\n"


def _with_exercises(nb: nbformat.NotebookNode, sources: dict[int, str]) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose n-th exercise cell (0-based, course order) holds ``sources[n]``."""
    out = copy.deepcopy(nb)
    for n, (_, cell, _) in enumerate(exercise_cells(out)):
        if n in sources:
            cell.source = sources[n]
    return out


def _write(nb: nbformat.NotebookNode, folder: Path, name: str) -> Path:
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _tamper(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Tags, nbgrader fields, course metadata and kernelspec all rewritten by the learner, plus a decoy cell."""
    nb = copy.deepcopy(nb)
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    nb.metadata["course"] = {"notebook": "00_welcome", "checks": "os"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.metadata["tags"] = ["skip-execution", "raises-exception"]
            cell.metadata["nbgrader"] = {"grade": True, "points": 100, "solution": False, "grade_id": "x"}
            cell.metadata["course"] = {"exercise": "stable_softmax", "role": "check"}
    nb.cells.append(nbformat.v4.new_code_cell(HDR + "    return x\n", metadata={
        "course": {"exercise": "stable_softmax", "role": "exercise"}, "tags": ["exercise"]}))
    return nb


# ---------------------------------------------------------------------------------------------------
# The static policy (no kernel)
# ---------------------------------------------------------------------------------------------------

NAMESPACE = setup_namespace(STANDARD_IMPORTS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_policy_accepts_every_solved_exercise_of_the_course(path: Path) -> None:
    nb = load(path)
    from course_lib.exercises import get_exercise

    for _, cell, name in exercise_cells(solve(nb)):
        violations = check_source(cell.source, get_exercise(name).reference, NAMESPACE)
        assert not violations, f"{path.stem}/{name}: the solved cell is refused: {violations}"


ORDINARY = [
    "import torch\nimport math\nfrom typing import Optional\nfrom functools import reduce\n" + HDR +
    "    m = x.amax(dim=dim, keepdim=True)\n    e = torch.exp(x - m)\n    return e / e.sum(dim=dim, keepdim=True)\n",
    "from __future__ import annotations\nimport numpy as np\nfrom collections import OrderedDict\n" + HDR +
    "    return torch.softmax(x, dim=dim)\n",
    "class Block(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
    "        self.w = nn.Linear(d, d)\n"
    "    def forward(self, x):\n        return F.relu(self.w(x)) + type(self).__name__.count('B')\n",
    "from course_lib.runtime import set_seed\n" + HDR + "    '''Shift by the max; 100% stable.'''\n    return x\n",
]


@pytest.mark.parametrize("source", ORDINARY, ids=range(len(ORDINARY)))
def test_policy_accepts_ordinary_code(source: str) -> None:
    assert check_source(source, stable_softmax, NAMESPACE) == []


HOSTILE = {
    "exec": ("exec('x = 1')", "runs code"), "eval": ("eval('1')", "runs code"),
    "compile": ("compile('1', 'f', 'eval')", "compiles"), "dunder import": ("__import__('os')", "imports"),
    "importlib": ("import importlib", "importlib"), "os": ("import os\nos._exit(1)", "imports os"),
    "sys": ("from sys import modules", "sys"), "subprocess": ("import subprocess", "subprocess"),
    "builtins": ("import builtins", "builtins"), "open": ("open('/etc/passwd').read()", "opens files"),
    "pathlib": ("from pathlib import Path", "pathlib"), "get_ipython": (
        "get_ipython().input_transformers_cleanup.append(lambda lines: [])", "IPython"),
    "globals": ("globals()['x'] = 1", "namespace"), "globals attr": ("f = stable_softmax.__globals__", "__globals__"),
    "subclasses": ("().__class__.__base__.__subclasses__()", "__subclasses__"),
    "code": ("def f(): pass\nf.__code__ = None", "__code__"), "np.load": ("np.load('x.npy')", "files"),
    "torch.load": ("torch.load('w.pt')", "files"), "torch.hub": ("from torch import hub", "torch.hub"),
    "monkeypatch allclose": ("torch.allclose = lambda *a, **k: True", "monkeypatching"),
    "setattr on a library": ("setattr(torch, 'allclose', None)", "monkeypatching"),
    "patch the checks": ("from course_lib.exercises import feedback\nfeedback.compare_outputs = lambda *a: []",
                         "grading machinery"),
    "magic": ("%load /etc/passwd", "magic"), "shell": ("!cat /etc/passwd", "shell"),
    "dynamic getattr": ("getattr(torch, 'al' + 'lclose')", "computed"),
    # found by a red-team review: attributes by a string the attribute checks cannot see
    "attrgetter": ("import operator\ng = operator.attrgetter('__globals__')(stable_softmax)", "attrgetter"),
    "attrgetter imported": ("from operator import attrgetter", "operator.attrgetter"),
    "getattr as a value": ("import functools\nfunctools.reduce(getattr, ['x'], torch)", "direct call"),
    "getattr renamed": ("g = getattr", "direct call"),
    "dunder in a string": ("name = '__builtins__'", "special attribute __builtins__"),
    "shared memory": ("t = torch.empty(10)\nt.share_memory_()", "share_memory_"),
    "write a module file": ("np.zeros(3).tofile('numpy.py')", "tofile"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_policy_refuses_hostile_constructs(name: str) -> None:
    source, reason = HOSTILE[name]
    violations = check_source(source + "\n" + HDR + "    return x\n", stable_softmax, NAMESPACE)
    assert violations and any(reason in v.reason for v in violations), violations


REFERENCE_CALLS = [
    "from course_lib.models.softmax import stable_softmax as ref\n" + HDR + "    return ref(x, dim)\n",
    "from course_lib import stable_softmax as s\n" + HDR + "    return s(x, dim)\n",
    "import course_lib.models.softmax\n" + HDR + "    return course_lib.models.softmax.stable_softmax(x, dim)\n",
    "from course_lib.models import softmax\n" + HDR + "    return softmax.stable_softmax(x, dim)\n",
]


@pytest.mark.parametrize("source", REFERENCE_CALLS, ids=range(len(REFERENCE_CALLS)))
def test_policy_refuses_calling_the_reference(source: str) -> None:
    violations = check_source(source, stable_softmax, NAMESPACE)
    assert violations and violations[0].kind == "reference", violations


def test_policy_sees_a_reference_bound_by_the_setup_and_a_subclass_of_a_reference_class() -> None:
    namespace = setup_namespace(STANDARD_IMPORTS
                                + ["from course_lib.models.softmax import stable_softmax as softmax_ref"])
    got = check_source(HDR + "    return softmax_ref(x, dim)\n", stable_softmax, namespace)
    assert got and got[0].kind == "reference"
    sys.path.insert(0, str(FX.parent))
    try:
        import fx_checks
    finally:
        sys.path.remove(str(FX.parent))
    src = "from torch import nn\nimport fx_checks\nclass FxScale(fx_checks.FxScale):\n    def forward(self, x):\n" \
          "        return super().forward(x)\n"
    got = check_source(src, fx_checks.FxScale, {**NAMESPACE, "fx_checks": fx_checks}, extra_modules=["fx_checks"])
    assert any(v.kind == "reference" and "derives from" in v.reason for v in got), got


# ---------------------------------------------------------------------------------------------------
# Moving data in and out of the kernel (no kernel)
# ---------------------------------------------------------------------------------------------------

def test_cases_round_trip_as_plain_arrays(tmp_path: Path) -> None:
    import torch

    from course_lib.exercises import Case

    case = Case("c", args=(torch.randn(2, 3), 3, 2.5, None, "s", (True, [torch.arange(4)])),
                kwargs={"dim": -1, "m": torch.ones(2, 2, dtype=torch.bool)}, init={"d": 4},
                state={"w": torch.randn(4).to(torch.bfloat16)})
    arrays, described = H.encode_cases([case])
    np.savez(tmp_path / "a.npz", **arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as data:
        loaded = {k: data[k] for k in data.files}
    args = H.decode_value(described[0]["args"], loaded, as_torch=True)
    assert torch.equal(args[0], case.args[0]) and args[1:5] == (3, 2.5, None, "s")
    assert args[5][0] is True and torch.equal(args[5][1][0], torch.arange(4))
    state = H.decode_value(described[0]["state"], loaded, as_torch=True)
    assert state["w"].dtype == torch.bfloat16 and torch.equal(state["w"], case.state["w"])
    with pytest.raises(TypeError):
        H.encode_cases([Case("bad", args=(object(),))])


def _npz(**arrays) -> bytes:
    blob = io.BytesIO()
    np.savez(blob, **arrays)
    return blob.getvalue()


def _bomb(megabytes: int, declared: int | None = None) -> bytes:
    """A deflate bomb: an .npz whose one member expands to ``megabytes`` of zeros."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                                  "shape": ((megabytes << 20) // 8,)})
    blob = io.BytesIO()
    with zipfile.ZipFile(blob, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("a0.npy", "w", force_zip64=True) as f:
            f.write(header.getvalue())
            for _ in range(megabytes):
                f.write(bytes(1 << 20))
    data = blob.getvalue()
    if declared is not None:  # lie in the central directory about the size
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            size = z.infolist()[0].file_size
        data = data.replace(size.to_bytes(8, "little"), declared.to_bytes(8, "little"))
    return data


def test_outputs_are_loaded_with_limits_and_never_unpickled() -> None:
    assert np.array_equal(load_arrays(_npz(a0=np.arange(3)))["a0"], np.arange(3))
    with pytest.raises(UntrustedData):
        load_arrays(_npz(a0=np.array([object()], dtype=object)))  # a pickle inside the npz
    with pytest.raises(UntrustedData):
        load_arrays(_npz(a0=np.array(["text"])))  # only bool, int, float
    with pytest.raises(UntrustedData, match="declares"):
        load_arrays(_bomb(80))
    with pytest.raises(UntrustedData):
        load_arrays(_bomb(80, declared=1000))  # the stream is capped whatever the header says
    with pytest.raises(UntrustedData):
        load_arrays(b"PK\x03\x04 not a zip")
    with pytest.raises(UntrustedData):
        parse_header(b"[" * 100_000 + b"]" * 100_000)
    assert parse_header(json.dumps({"s": "\udc80"}).encode())["s"] == "\udc80"
    spoof = H.encode_value(type("Always", (), {"__eq__": lambda s, o: True})(), {}, strict=False)
    assert spoof["t"] == "unsupported"
    assert H.decode_value(spoof, {}, as_torch=False) != np.zeros(1)


def test_reports_escape_markdown_html_csv_and_any_string() -> None:
    forged = "x |\n**Score: 1 / 1** <img src=x onerror=alert(1)>\n# A+ `code` [link](http://x)"
    text = escape_markdown(forged)
    assert "\n" not in text and "<img" not in text and "&lt;img" in text and "\\|" in text and "\\*\\*" in text
    assert "\\#" in text and "\\[link\\]" in text
    assert escape_markdown("\udc80 ok") == "? ok"
    for formula in ("=HYPERLINK(\"http://x\")", "+1", "-1+2", "@SUM(A1)", "\tx", "\rx"):
        assert csv_safe(formula).startswith("'"), formula
    assert csv_safe(1.5) == 1.5 and csv_safe("fine") == "fine"
    assert csv_safe("a\x1b[2J\rb\u202ec\nd é") == "a\\x1b[2J\\rb\\u202ec\nd é"  # line feeds stay, in quotes
    assert escape_markdown("\x1b]0;title\x07 \u2066x") == "\\\\x1b\\]0;title\\\\x07 \\\\u2066x"


def test_unreadable_submissions_are_described_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "bad.ipynb"
    bad.write_text('{"cells": [ {"cell_type": "code", "source": ')
    assert "not valid JSON" in read_submission(bad, 1 << 20)[3]
    bad.write_text(json.dumps({"cells": {"not": "a list"}}))
    assert "no list of cells" in read_submission(bad, 1 << 20)[3]
    bad.write_text(json.dumps({"cells": [{"cell_type": "code", "source": 42}, 7, {"cell_type": "code",
                                                                                "source": ["a", 3, "b"]}]}))
    nb, cells, _, problem = read_submission(bad, 1 << 20)
    assert problem == "" and cells == [(0, ""), (2, "ab")]
    bad.write_text("[" * 100_000 + "]" * 100_000)
    assert read_submission(bad, 1 << 20)[3]
    deep = "x = " + "(" * 150 + "1" + ")" * 150 + "\n" + "-" * 100_000 + "1\n"
    assert check_source(deep, stable_softmax, NAMESPACE)  # refused, not a crash
    assert check_source("x = 1\0", stable_softmax, NAMESPACE)[0].kind == "syntax"
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * (2 << 20))
    assert "over the grader's limit" in read_submission(big, 1 << 20, max_file_bytes=1 << 20)[3]
    big.write_text(json.dumps({"cells": [{"cell_type": "code", "source": "x = 1\n" * 200_000, "outputs": []}]}))
    assert "over the grader's limit of 1 MB on executed code" in read_submission(big, 1 << 20)[3]
    fifo = tmp_path / "fifo.ipynb"
    os.mkfifo(fifo)
    assert "not a regular file" in read_submission(fifo, 1 << 20)[3]  # returns at once: never opened to read
    link = tmp_path / "link.ipynb"
    link.symlink_to("/etc/hostname")
    assert "not a regular file" in read_submission(link, 1 << 20)[3]
    bom = tmp_path / "bom.ipynb"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"cells": [{"cell_type": "code", "source": "x"}]}).encode())
    assert read_submission(bom, 1 << 20)[1:4:2] == ([(0, "x")], "")


def test_grade_many_called_from_python_prints_nothing_that_drives_the_terminal(tmp_path: Path, capsys) -> None:
    """An instructor's own script calls ``grade_many`` rather than ``course-grade``: its output is escaped too."""
    subs = tmp_path / "subs"
    subs.mkdir()
    name = subs / "00_welcome_\x1b[2J\rchanged: bob: new, total 1.ipynb"
    name.write_text("{")
    grade_many([name], GradeConfig(**CONFIG), tmp_path / "out", quiet=False)
    printed = capsys.readouterr()
    assert "\\x1b[2J\\rchanged: bob" in printed.out, printed.out
    assert not re.search("[\x1b\r]", printed.out + printed.err), printed


def test_cli_writes_reports_for_malformed_huge_and_stub_submissions(tmp_path: Path, capsys) -> None:
    """No kernel is needed: a stub is recognised as such, broken files get reports saying why."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "00_welcome_malformed.ipynb").write_text("{ this is not json")
    (subs / "00_welcome_huge.ipynb").write_text(json.dumps({"cells": [{"cell_type": "code", "outputs": [],
                                                                      "source": "x = 1\n" * 60_000}]}))
    _write(load(NB00), subs, "00_welcome_stub")
    # A file name that would drive the terminal: clear the screen, return to the line's start, reverse the text.
    (subs / "00_welcome_\x1b[2J\x1b[H\rchanged: bob: new, total 1\u202e.ipynb").write_text("{")
    out = tmp_path / "out"
    assert main([str(subs), "--out", str(out), "--max-mb", "0.25", "--jobs", "2"]) == 0
    printed = capsys.readouterr()
    assert not re.search("[\x1b\r\u202e]", printed.out + printed.err), printed
    assert "\\x1b[2J\\x1b[H\\rchanged: bob" in printed.out, printed.out
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    reports.pop("00_welcome__2J_H_changed_bob_new_total_1_")
    assert set(reports) == {"00_welcome_malformed", "00_welcome_huge", "00_welcome_stub"}
    assert reports["00_welcome_malformed"]["status"] == "unreadable"
    assert "not valid JSON" in reports["00_welcome_malformed"]["message"]
    assert "over the grader's limit" in reports["00_welcome_huge"]["message"]
    for rep in reports.values():
        assert rep["max_total"] == 1 and rep["total"] == 0 and rep["kernel_starts"] == 0
        assert rep["versions"]["torch"] and rep["versions"]["course_lib"] and rep["versions"]["python"]
    stub = reports["00_welcome_stub"]["exercises"][0]
    assert stub["status"] == "not-implemented" and stub["score"] == 0
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"missing", "not-implemented"}
    assert len(list(csv.reader((out / "summary.csv").open(newline="")))) == 5  # the CR stays inside its quoted cell
    assert "Score: 0 / 1" in (out / "00_welcome_stub.md").read_text()


def test_a_submission_of_no_known_notebook_gets_a_report(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    report = grade_submission(_write(nb, tmp_path, "essay"), GradeConfig(seed=0))
    assert report.status == "unknown-notebook" and report.total == 0 and "--source" in report.message


# ---------------------------------------------------------------------------------------------------
# Graded in kernels: notebook 00
# ---------------------------------------------------------------------------------------------------

CONFIG = dict(cell_timeout=8.0, total_timeout=240.0, memory_mb=1024, seed=12345)

NB00_ATTACKS: dict[str, tuple[str, str, str]] = {
    # name: (exercise cell source, expected status, a phrase of the message)
    "wrong_with_fake_passed_lines": (
        "print('✅ stable_softmax: passed (7/7 cases)')\n" + HDR +
        "    print('✅ stable_softmax: passed')\n    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n",
        "fail", "NaN"),
    "equality_spoofing": ("class Always:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
                          + HDR + "    return Always()\n", "fail", "not a tensor"),
    "infinite_loop": (HDR + "    while True:\n        pass\n", "timeout", "per-cell limit"),
    "too_much_memory": (HDR + "    return torch.ones(2**31) + x.sum()\n", "error", "memory limit"),
    "changes_its_input": (HDR + "    x -= x.amax(dim=dim, keepdim=True)\n"
                          "    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)\n", "fail", "in place"),
    "raising_at_top_level": ("raise ValueError('boom')\n" + HDR + "    return x\n", "error", "ValueError: boom"),
    "os_exit": ("import os\n" + HDR + "    os._exit(0)\n", "forbidden", "imports os"),
    "monkeypatch_allclose": ("import torch\ntorch.allclose = lambda *a, **k: True\n" + HDR + "    return x\n",
                             "forbidden", "monkeypatching"),
    "monkeypatch_checks": ("import course_lib.exercises.feedback as fb\nfb.compare_outputs = lambda *a, **k: []\n"
                           + HDR + "    return x\n", "forbidden", "course_lib.exercises"),
    "blank_later_cells": ("get_ipython().input_transformers_cleanup.append(lambda lines: [])\n" + HDR +
                          "    return x\n", "forbidden", "get_ipython"),
    "read_files": (HDR + "    secret = open('/etc/hostname').read()\n    return x\n", "forbidden", "opens files"),
    "calls_the_reference": ("from course_lib.models.softmax import stable_softmax as ref\n" + HDR
                            + "    return ref(x, dim)\n",
                            "forbidden", "reference"),
}


@pytest.fixture(scope="module")
def nb00_graded(tmp_path_factory) -> dict[str, dict]:
    """Every notebook-00 fixture graded in one run of the command (one kernel per submission that runs)."""
    folder = tmp_path_factory.mktemp("nb00")
    nb = load(NB00)
    paths = [_write(solve(nb), folder, "00_welcome_solved"), _write(nb, folder, "00_welcome_stub"),
             _write(_tamper(solve(nb)), folder, "00_welcome_tampered_correct"),
             _write(_tamper(_with_exercises(nb, {0: NB00_ATTACKS["wrong_with_fake_passed_lines"][0]})), folder,
                    "00_welcome_tampered_wrong")]
    paths += [_write(_with_exercises(nb, {0: src}), folder, f"00_welcome_{name}")
              for name, (src, _, _) in NB00_ATTACKS.items()]
    out = folder / "out"
    grade_many(paths, GradeConfig(**CONFIG), out, quiet=True)
    return {p.stem.removeprefix("00_welcome_"): json.loads((out / f"{p.stem}.json").read_text()) for p in paths}


@pytest.mark.slow
def test_the_solved_notebook_earns_full_marks(nb00_graded) -> None:
    rep = nb00_graded["solved"]
    assert rep["total"] == rep["max_total"] == 1 and rep["exercises"][0]["status"] == "pass", rep
    assert rep["flags"] == []
    hidden = len(get_exercise("stable_softmax").cases("hidden", seed=0))
    assert rep["exercises"][0]["cases_passed"] == rep["exercises"][0]["cases_total"] == hidden


OTHER_NOTEBOOKS = [p for p in NOTEBOOKS if p.stem != "00_welcome"]


@pytest.mark.slow
@pytest.mark.parametrize("path", OTHER_NOTEBOOKS, ids=[p.stem for p in OTHER_NOTEBOOKS])
def test_every_solved_course_notebook_earns_full_marks(path: Path, tmp_path: Path) -> None:
    report = grade_submission(_write(solve(load(path)), tmp_path, f"{path.stem}_solved"), GradeConfig(**CONFIG))
    assert report.max_total > 0 and report.total == report.max_total, [
        (r.exercise, r.status, r.message) for r in report.exercises]
    assert report.flags == [], report.flags  # an honest notebook is never flagged for review


@pytest.mark.slow
def test_the_untouched_stub_scores_zero_without_running(nb00_graded) -> None:
    rep = nb00_graded["stub"]
    assert rep["total"] == 0 and rep["exercises"][0]["status"] == "not-implemented" and rep["kernel_starts"] == 0


@pytest.mark.slow
def test_tags_metadata_and_kernelspec_are_ignored(nb00_graded) -> None:
    assert nb00_graded["tampered_correct"]["total"] == 1
    wrong = nb00_graded["tampered_wrong"]
    assert wrong["total"] == 0 and wrong["exercises"][0]["status"] == "fail"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NB00_ATTACKS))
def test_every_attack_scores_zero_with_a_report_that_says_why(nb00_graded, name: str) -> None:
    _, status, phrase = NB00_ATTACKS[name]
    rep = nb00_graded[name]
    result = rep["exercises"][0]
    assert rep["total"] == 0 and result["score"] == 0
    assert result["status"] == status, result
    assert phrase in result["message"], result["message"]
    if status == "forbidden":
        assert rep["kernel_starts"] == 0, "a refused cell must never run"


@pytest.mark.slow
def test_a_wrong_answer_gets_the_hint_of_the_mistake_it_makes(nb00_graded) -> None:
    result = nb00_graded["wrong_with_fake_passed_lines"]["exercises"][0]
    assert "subtract the maximum" in result["hint"]


# ---------------------------------------------------------------------------------------------------
# Graded in kernels: five exercises, so that one attacked exercise costs only its own points
# ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fx_nb() -> nbformat.NotebookNode:
    return load_fx()


def load_fx() -> nbformat.NotebookNode:
    if str(FX.parent) not in sys.path:
        sys.path.insert(0, str(FX.parent))
    import fx_checks  # noqa: F401 - registers the assignment's exercises

    return nbformat.read(FX, as_version=4)


def _fx_grade(nb: nbformat.NotebookNode, folder: Path, name: str, **overrides) -> dict:
    path = _write(nb, folder, name)
    config = GradeConfig(source=FX, **{**CONFIG, **overrides})
    report = grade_submission(path, config)
    return {"total": report.total, "max": report.max_total, "starts": report.kernel_starts,
            **{r.exercise: (r.status, r.score, r.message) for r in report.exercises}}


@pytest.mark.slow
def test_fx_solved_earns_full_marks_and_the_stub_zero(fx_nb, tmp_path: Path) -> None:
    got = _fx_grade(solve(fx_nb), tmp_path, "fx_solved")
    assert got["total"] == got["max"] == 6, got
    stub = _fx_grade(fx_nb, tmp_path, "fx_stub")
    assert stub["total"] == 0 and stub["starts"] == 0


RUNTIME_ATTACKS = {
    1: ("def fx_causal_mask(seq_len):\n    while True:\n        pass\n", "timeout"),
    2: ("import os\ndef fx_attend(q, k, v):\n    return q, k\nos._exit(1)\n", "error"),
    3: ("get_ipython().input_transformers_cleanup.append(lambda lines: [])\n"
        "class FxScale(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
        "        self.weight = nn.Parameter(torch.ones(d))\n"
        "    def forward(self, x):\n        return x * self.weight\n",
        "error"),
}


@pytest.mark.slow
def test_runtime_defences_alone_contain_loops_exits_and_hooks(fx_nb, tmp_path: Path) -> None:
    """Policy OFF: the sandbox must be restarted after each attack, and the clean exercises still graded."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources.update({n: src for n, (src, _) in RUNTIME_ATTACKS.items()})
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_runtime", policy=False)
    assert got["fx_scaled_scores"][:2] == ("pass", 1.0) and got["fx_masked_mean"][:2] == ("pass", 1.0), got
    assert got["fx_causal_mask"][:2] == ("timeout", 0.0)
    assert got["fx_attend"][:2] == ("error", 0.0) and "sandbox stopped" in got["fx_attend"][2]
    # Cells run in IPython, as in Jupyter: the hook is reset before the next cell, the class itself is right.
    assert got["fx_scale"][:2] == ("pass", 1.0), got
    assert got["total"] == 3 and got["starts"] == 3, got  # a fresh sandbox after each exercise that did not pass


def _flooder(exercises: tuple[int, ...]) -> str:
    """A cell that starts a thread sending frames with guessed request ids for ``exercises``, for ever."""
    return (
        "import json, os, struct, threading, time\n"
        "def _flood():\n"
        "    n = 0\n"
        "    while True:\n"
        "        n += 1\n"
        f"        for e in {exercises!r}:\n"
        "            for h in ({'id': n, 'exercise': e, 'ran': True}, {'event': 'cell', 'exercise': e},\n"
        "                      {'id': n, 'exercise': e, 'cases': []}):\n"
        "                d = json.dumps(h).encode(); p = struct.pack('>I', len(d)) + d\n"
        "                try:\n"
        "                    os.write(int(os.environ['COURSE_GRADE_CHANNEL']), struct.pack('>Q', len(p)) + p)\n"
        "                except OSError:\n"
        "                    return\n"
        "        time.sleep(0.05)\n"
        "threading.Thread(target=_flood, daemon=True).start()\n")


@pytest.mark.slow
def test_the_grader_keeps_one_answer_per_request_on_its_own_clock(fx_nb, tmp_path: Path) -> None:
    """Protocol, policy OFF: the second exercise's cell floods the pipe with frames for itself and the third
    (guessed request ids, "cell" events, early "results") while it runs far past the per-cell limit: it gets
    timeout (no frame restarts its clock, no early answer is kept) and the third is graded on its own cell."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources[1] = _flooder((1, 2)) + "time.sleep(30)\n" + sources[1]
    sources[2] = "def fx_attend(q, k, v):\n    while True:\n        pass\n"
    started = time.monotonic()
    path = _write(_with_exercises(fx_nb, sources), tmp_path, "fx_protocol")
    report = grade_submission(path, GradeConfig(source=FX, **{**CONFIG, "cell_timeout": 4.0}, policy=False))
    got = {r.exercise: (r.status, r.score) for r in report.exercises}
    assert got["fx_scaled_scores"] == ("pass", 1.0) and got["fx_causal_mask"] == ("timeout", 0.0), got
    assert got["fx_attend"] == ("timeout", 0.0) and report.total == 3, got  # fx_scale and fx_masked_mean pass
    assert any("answers no request" in note for note in report.notes), report.notes
    assert time.monotonic() - started < 120


@pytest.mark.slow
def test_runtime_defences_alone_contain_patches_reference_calls_memory_files_and_spoofs(fx_nb, tmp_path) -> None:
    """Policy OFF, one sandbox: nothing the sandbox does can make a wrong answer pass."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources.update({
        0: "import torch\ntorch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda a, b: True\n"
           "def fx_scaled_scores(q, k):\n    return q @ k.transpose(-2, -1)\n",
        1: "from fx_checks import fx_causal_mask as ref\ndef fx_causal_mask(n):\n    return ref(n)\n",
        2: "def fx_attend(q, k, v):\n    x = torch.ones(2**31)\n    return x, x\n",
        4: "class Always:\n    def __eq__(self, o):\n        return True\n    __hash__ = None\n"
           "def fx_masked_mean(x, mask):\n    return Always()\n",
    })
    sources[3] = sources[3].replace("return x * self.weight", "return x * float(len(open('/etc/hostname').read()))")
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_runtime2", policy=False)
    assert got["fx_scaled_scores"][:2] == ("fail", 0.0), got
    # the assignment's checks module (its references, its hidden cases) is not in the sandbox at all
    assert got["fx_causal_mask"][:2] == ("error", 0.0) and "fx_checks" in got["fx_causal_mask"][2], got
    assert got["fx_attend"][:2] == ("error", 0.0) and "memory limit" in got["fx_attend"][2]
    assert got["fx_scale"][:2] == ("error", 0.0) and "FileNotFoundError" in got["fx_scale"][2]
    assert got["fx_masked_mean"][:2] == ("fail", 0.0)
    assert got["total"] == 0 and got["starts"] == 5  # after each exercise that did not pass (but the last)


@pytest.mark.slow
def test_runtime_defences_alone_stop_module_shadowing_and_answers_computed_by_the_reference(fx_nb, tmp_path) -> None:
    """Policy OFF (found by a red-team review): a numpy.py written into the working folder before a forced
    restart must not shadow NumPy for the next sandbox, and the reference is absent while its own exercise
    cell runs (so a table of its answers cannot be computed ahead of the hidden cases)."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources[0] = ("def fx_scaled_scores(q, k):\n    return q\n"
                  "with open('numpy.py', 'w') as f:\n    f.write('raise ImportError(\"shadowed\")')\n"
                  "while True:\n    pass\n")
    sources[1] = ("from fx_checks import fx_causal_mask as ref\n_T = {n: ref(n) for n in range(1, 64)}\n"
                  "def fx_causal_mask(n):\n    return _T[n]\n")
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_shadow", policy=False)
    assert got["fx_scaled_scores"][:2] == ("timeout", 0.0), got
    assert got["fx_causal_mask"][:2] == ("error", 0.0) and "fx_checks" in got["fx_causal_mask"][2], got
    for name in ("fx_attend", "fx_scale", "fx_masked_mean"):  # graded after the restart: setup was not shadowed
        assert got[name][0] == "pass", got
    assert got["starts"] == 3  # the loop, then the error: a fresh sandbox after each


@pytest.mark.slow
def test_with_the_policy_on_only_the_refused_exercises_lose_points(fx_nb, tmp_path: Path) -> None:
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources[1] = "import os\n" + sources[1]
    sources[2] = "import fx_checks\n" + sources[2]
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_policy")
    assert got["fx_causal_mask"][0] == "forbidden" and got["fx_attend"][0] == "forbidden", got
    # a second sandbox for the exercises after the refused ones, with their references restored (as the check binds)
    assert got["total"] == 3 and got["starts"] == 2


# ---------------------------------------------------------------------------------------------------
# The sandbox: every attack class of tests/grading/grading_fixtures/attacks, honest students, file names
# ---------------------------------------------------------------------------------------------------

ATTACKS = ROOT / "tests" / "grading" / "grading_fixtures" / "attacks"
ATTACK_FILES = sorted(ATTACKS.glob("*.py"))


def _expected(path: Path) -> set[str]:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), path
    return set(first.removeprefix("# expect: ").split(","))


def _descendants(pid: int) -> set[int]:
    """The processes started by ``pid``, their children and so on (read from /proc: each process's parent)."""
    parents = {}
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
        except (OSError, ValueError):
            continue
        if proc.name.isdigit():  # the command name may hold spaces and ')': the fields after the last ')' are fixed
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _sandbox_processes(folder: Path) -> list[str]:
    """Command lines of the sandbox processes this test started that still run: this process's descendants, and
    any process whose command line names this test's folder or a grader scratch folder named after this process
    (a process that left the tree still names them). Another grading run on the machine is none of these."""
    own = _descendants(os.getpid())
    scratch = re.compile(rf"course-grade-[a-z]+-{os.getpid()}-")
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if not ("sandbox_main.py" in cmd or "echo hacked" in cmd or "bwrap --unshare-all" in cmd):
            continue
        if (proc.name.isdigit() and int(proc.name) in own) or str(folder) in cmd or scratch.search(cmd):
            found.append(cmd[:200])
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or shutil.which("setsid") is None,
                    reason="reads /proc and starts a detached shell with setsid (Linux)")
def test_the_process_scan_sees_its_own_processes_only(tmp_path: Path) -> None:
    """A process this test starts is seen (as a descendant, or by the folder it names); one started elsewhere,
    here by a detached shell whose command line names another folder, is not."""
    mine = subprocess.Popen(["sh", "-c", f"sleep 30; echo hacked > {tmp_path}/x"])
    other = tmp_path.parent / "not-this-test"
    stranger = subprocess.Popen(["setsid", "sh", "-c", f"sleep 30; echo hacked > {other}/x"],
                                start_new_session=True)
    try:
        time.sleep(0.3)
        seen = _sandbox_processes(tmp_path)
        assert any(str(tmp_path) in cmd for cmd in seen), seen
        assert not any(str(other) in cmd for cmd in seen), seen
    finally:
        for proc in (mine, stranger):
            proc.kill()
            proc.wait()
        for proc in Path("/proc").iterdir():  # the detached shell left this test's tree: found by its folder
            try:
                if str(other).encode() in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def _moved_files(folder: Path) -> list[Path]:
    """Files an attack renamed (``*.moved``) in this test's folder or in this process's scratch folders."""
    scratch = Path(tempfile.gettempdir()).glob(f"course-grade-*-{os.getpid()}-*")
    return [p for root in (folder, *scratch) for p in root.rglob("*.moved")]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> dict:
    """Every attack graded in one run (policy OFF, --jobs 2), each next to an honest, solved neighbour."""
    folder = tmp_path_factory.mktemp("attacks")
    out, canary = folder / "out", folder / "canary"
    nb = load(NB00)
    paths = []
    for n, attack in enumerate(ATTACK_FILES):
        source = attack.read_text().replace("{OUT}", str(out)).replace("{CANARY}", str(canary))
        source = source.replace("{REPO}", str(ROOT))
        if attack.stem == "huge_cell":
            source += "\n" + "# padding\n" * 650_000  # 6.5 MB
        paths.append(_write(_with_exercises(nb, {0: source}), folder, f"00_welcome_{attack.stem}"))
        if n % 6 == 0:
            paths.append(_write(solve(nb), folder, f"00_welcome_honest{n}"))
    started = time.monotonic()
    reports = grade_many(paths, GradeConfig(**{**CONFIG, "cell_timeout": 15.0}, policy=False), out, jobs=2,
                         quiet=True)
    elapsed = time.monotonic() - started
    processes = _sandbox_processes(folder)
    csv_before = (out / "grades.csv").read_bytes()
    time.sleep(4)  # a detached process would act now
    return {"reports": {p.stem.removeprefix("00_welcome_"): r for p, r in zip(paths, reports, strict=True)},
            "out": out, "canary": canary, "folder": folder, "processes": processes, "elapsed": elapsed,
            "csv_before": csv_before, "csv_after": (out / "grades.csv").read_bytes()}


@pytest.mark.slow
@pytest.mark.parametrize("attack", ATTACK_FILES, ids=[p.stem for p in ATTACK_FILES])
def test_an_attack_gains_nothing_and_gets_a_report(attacked, attack: Path) -> None:
    report = attacked["reports"][attack.stem]
    result = report.exercises[0]
    assert report.total == 0 and result.score == 0, (result.status, result.message)
    assert result.status in _expected(attack), (result.status, result.message)
    assert (attacked["out"] / f"00_welcome_{attack.stem}.json").is_file()
    assert (attacked["out"] / f"00_welcome_{attack.stem}.md").is_file()


@pytest.mark.slow
def test_attacks_change_no_other_grade_leave_no_process_and_no_file(attacked) -> None:
    honest = {k: r for k, r in attacked["reports"].items() if k.startswith("honest")}
    assert honest and all(r.total == r.max_total == 1 and not r.flags for r in honest.values()), {
        k: (r.exercises[0].message, r.flags) for k, r in honest.items()}
    assert attacked["processes"] == [], attacked["processes"]
    assert _sandbox_processes(attacked["folder"]) == []
    assert attacked["csv_after"] == attacked["csv_before"] and b"hacked" not in attacked["csv_after"]
    assert b"hacked" not in (attacked["out"] / "summary.csv").read_bytes()
    assert not list(attacked["folder"].glob("canary*")), list(attacked["folder"].glob("canary*"))
    assert (ROOT / "README.md").is_file()
    assert not _moved_files(attacked["folder"])
    rows = list(csv.DictReader((attacked["out"] / "grades.csv").open(encoding="utf-8")))
    assert len(rows) == len(attacked["reports"])


@pytest.mark.slow
def test_attack_reports_say_what_happened(attacked) -> None:
    reports = attacked["reports"]
    assert "too large" in reports["huge_cell"].exercises[0].message
    assert "done" not in reports["poison_the_library"].exercises[0].message  # every write refused
    assert "broke the grader's limits" in reports["bomb"].exercises[0].message
    assert "over the grader's limit" in reports["endless_output"].exercises[0].message
    message = reports["numpy_requires_grad"].exercises[0].message
    assert "not connected" in message or "no gradient flows back" in message, message
    held = reports["memfd"].exercises[0].message  # bounded by 32 files of 8 MB, and by the address space
    memfd, maps = int(held.split("held ")[1].split(" MB")[0]), int(held.split(" and ")[1].split(" MB")[0])
    assert memfd <= 256 and maps < CONFIG["memory_mb"] + 1024, held
    assert "wrote" in reports["disk_fill"].exercises[0].message
    forked = reports["fork_bomb"].exercises[0].message  # bounded by the control group (root) or RLIMIT_NPROC
    assert "then no limit" not in forked and int(forked.split("forked ")[1].split(" ")[0]) <= MAX_TASKS, forked
    assert int(reports["disk_fill"].exercises[0].message.split("wrote ")[1].split(" MB")[0]) <= 64
    assert "done" not in reports["files_outside"].exercises[0].message.split(": ", 1)[1]
    markdown = (attacked["out"] / "00_welcome_forge_report.md").read_text(encoding="utf-8")
    assert "<img" not in markdown and markdown.count("**Score:") == 1 and "\n# Grading report: A+" not in markdown
    assert sum(line.startswith("| stable") for line in markdown.splitlines()) == 1  # no forged table row
    assert "\\udc80" in (attacked["out"] / "00_welcome_surrogate.json").read_text(encoding="ascii")
    broken = [(attacked["out"] / "00_welcome_broken_output.md").read_text(encoding="utf-8"),
              (attacked["out"] / "grades.csv").read_text(encoding="utf-8"),
              (attacked["out"] / "summary.csv").read_text(encoding="utf-8")]
    assert "HYPERLINK" in broken[0] and "&lt;img" in broken[0] and "<img" not in broken[0]  # flagged line, escaped
    assert not any(re.search("[\x1b\u202e]", text) for text in broken)  # `cat` cannot drive a terminal
    assert not re.search("\r(?!\n)", broken[1]), "a lone CR in grades.csv rewrites the line it is printed on"
    assert sum(line.startswith("| stable") for line in broken[0].splitlines()) == 1  # no forged table row


@pytest.mark.slow
def test_the_graders_memory_stays_bounded_with_the_bomb_and_the_huge_cell(tmp_path: Path) -> None:
    """The grader in a process of its own: its peak resident memory with the bomb and the 6.5 MB cell."""
    nb = load(NB00)
    bomb = (ATTACKS / "bomb.py").read_text()
    huge = (ATTACKS / "huge_cell.py").read_text() + "\n" + "# padding\n" * 650_000
    for name, source in (("bomb", bomb), ("huge", huge)):
        _write(_with_exercises(nb, {0: source}), tmp_path, f"00_welcome_{name}")
    # VmHWM, the peak of this process's own memory since exec: getrusage's ru_maxrss is carried over from the
    # parent at fork on Linux, so it reported the pytest session's size (1-2 GB after the notebooks), not the grader.
    code = ("from course_lib.grading.cli import main\n"
            f"main([{str(tmp_path)!r}, '--out', {str(tmp_path / 'out')!r}, '--no-policy', '--quiet'])\n"
            "print(next(int(line.split()[1]) for line in open('/proc/self/status')\n"
            "           if line.startswith('VmHWM')) // 1024)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    peak_mb = int(done.stdout.strip().splitlines()[-1])
    # The grader alone (torch imported): 0.3 GB; 0.43 GB with these two submissions; 3.5 GB with the bomb before
    # the frames were capped.
    assert peak_mb < 1536, peak_mb
    for name in ("bomb", "huge"):
        assert json.loads((tmp_path / "out" / f"00_welcome_{name}.json").read_text())["total"] == 0


def _nb04_with(source: str) -> nbformat.NotebookNode:
    nb = solve(load(ROOT / "notebooks" / "04_masking.ipynb"))
    for _, cell, name in exercise_cells(nb):
        if name == "padding_mask":
            cell.source = source
    return nb


SOLUTION = ("    e = torch.exp(x - x.amax(dim=dim, keepdim=True))\n"
            "    return e / e.sum(dim=dim, keepdim=True)\n")

#: Honest exercise cells of notebook 00 written as Jupyter lets a learner write them (each must earn full marks).
HONEST_CELLS = {
    "display": "from IPython.display import display\n" + HDR + SOLUTION + "display(stable_softmax(torch.ones(3)))\n",
    "magics": HDR + SOLUTION + "%timeit -n 1 -r 1 stable_softmax(torch.ones(3))\n",
    "cell magic": "%%time\n" + HDR + SOLUTION,
    "stdlib imports": "import time, random, re\nfrom statistics import mean\n" + HDR + SOLUTION,
    "non-ASCII names": HDR + "    größte = x.amax(dim=dim, keepdim=True)  # the largest\n"
                       "    e = torch.exp(x - größte)\n    return e / e.sum(dim=dim, keepdim=True)\n",
    "CRLF": (HDR + SOLUTION).replace("\n", "\r\n"),
}


@pytest.mark.slow
def test_honest_variants_score_what_the_notebook_check_says(tmp_path: Path) -> None:
    """display, magics, standard-library imports, non-ASCII names, CRLF line ends, an edited stub with the
    solution in the next cell before the check, nbformat 4.4, saved outputs: full marks, as the check says."""
    nb = load(NB00)
    folder = tmp_path / "subs"
    folder.mkdir()
    for name, source in HONEST_CELLS.items():
        _write(_with_exercises(nb, {0: source}), folder, "00_welcome_" + name.replace(" ", "_"))
    edited = _with_exercises(nb, {0: HDR + "    m = x.amax(dim=dim)  # I started\n    raise NotImplementedError()\n"})
    index = next(i for i, _, _ in exercise_cells(edited))
    edited.cells.insert(index + 1, nbformat.v4.new_code_cell(HDR + SOLUTION))
    _write(edited, folder, "00_welcome_edited_stub_then_solution")
    old = solve(nb)
    old.nbformat_minor = 4
    for cell in old.cells:
        cell.pop("id", None)
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 200_000)]
    (folder / "00_welcome_nbformat44_outputs.ipynb").write_text(json.dumps(old))
    out = tmp_path / "out"
    assert main([str(folder), "--out", str(out), "--quiet", "--jobs", "2", "--seed", "5", "--max-mb", "50"]) == 0
    for path in out.glob("*.json"):
        report = json.loads(path.read_text())
        assert report["total"] == report["max_total"] == 1, (path.name, report["exercises"][0]["message"])
        assert report["flags"] == [], (path.name, report["flags"])
    assert len(list(out.glob("*.json"))) == len(HONEST_CELLS) + 2
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("import torch", store_history=False)
    for name, source in HONEST_CELLS.items():  # the notebook's own check says the same, cell run as Jupyter runs it
        shell.user_ns.pop("stable_softmax", None)
        assert shell.run_cell(source, store_history=False).success, name
        assert run_check("stable_softmax", shell.user_ns["stable_softmax"]).passed, name


@pytest.mark.slow
def test_honest_students_are_graded_as_they_meant(tmp_path: Path) -> None:
    """A BOM, helpers in their own cell, the stub left above a solution in a new cell, a notebook global
    (PAD) as a default, and file names of any bytes: full marks; a FIFO gets a report."""
    nb = load(NB00)
    solved = solve(nb)
    folder = tmp_path / "subs"
    folder.mkdir()
    with_bom = folder / "00_welcome_bom.ipynb"
    with_bom.write_bytes(b"\xef\xbb\xbf" + nbformat.writes(solved).encode())
    shifted = "    return _normalise(torch.exp(x - x.amax(dim=dim, keepdim=True)), dim)\n"
    helper = _with_exercises(nb, {0: HDR + shifted})
    index = next(i for i, _, _ in exercise_cells(helper))
    helper.cells.insert(index, nbformat.v4.new_code_cell("def _normalise(e, dim):\n    return e / e.sum(dim=dim, "
                                                         "keepdim=True)\n"))
    _write(helper, folder, "00_welcome_helper_cell")
    beside = copy.deepcopy(nb)  # the stub untouched, the solution in a new cell below it
    index = next(i for i, _, _ in exercise_cells(beside))
    beside.cells.insert(index + 1, nbformat.v4.new_code_cell(next(c.source for _, c, _ in exercise_cells(solved))))
    _write(beside, folder, "00_welcome_stub_beside")
    pad = _nb04_with("def padding_mask(tokens: torch.Tensor, pad_id: int = PAD) -> torch.Tensor:\n"
                     "    return (tokens != pad_id)[:, None, None, :]\n")
    other = tmp_path / "subs04"  # another notebook: a gradebook (--out) of its own, one assignment each
    other.mkdir()
    _write(pad, other, "04_masking_pad_default")
    _write(solved, folder, "00_welcome_=HYPERLINK(x)")
    odd = os.fsencode(str(folder)) + b"/00_welcome_\xff\xfe.ipynb"
    with open(odd, "wb") as f:
        f.write(nbformat.writes(solved).encode())
    os.mkfifo(folder / "00_welcome_fifo.ipynb")
    out = tmp_path / "out"
    assert main([str(folder), "--out", str(out), "--quiet", "--jobs", "2", "--seed", "3"]) == 0
    assert main([str(other), "--out", str(tmp_path / "out04"), "--quiet", "--seed", "3"]) == 0
    reports = {json.loads(p.read_text())["submission"].rsplit("/", 1)[1]: json.loads(p.read_text())
               for p in [*out.glob("*.json"), *(tmp_path / "out04").glob("*.json")]}
    for name, rep in reports.items():
        if "fifo" in name:
            assert rep["status"] == "unreadable" and "not a regular file" in rep["message"]
        elif name.startswith("04_masking"):
            ex = {e["exercise"]: e for e in rep["exercises"]}
            assert ex["padding_mask"]["status"] == "pass", ex["padding_mask"]
        else:
            assert rep["total"] == rep["max_total"] == 1, (name, rep["exercises"][0]["message"])
        assert rep["flags"] == [], (name, rep["flags"])  # helper cells, a notebook global: nothing to review
    assert "00_welcome_\\xff\\xfe.ipynb" in reports and "04_masking_pad_default.ipynb" in reports
    summary = (out / "summary.csv").read_text(encoding="utf-8")
    assert "'" + str(folder / "00_welcome_=HYPERLINK") not in summary  # the path starts with '/'...
    assert ",=" not in summary and "\n=" not in summary


def test_without_bubblewrap_the_command_refuses_and_says_what_to_install(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        probe()
    stub = _write(load(NB00), tmp_path, "00_welcome_stub")
    assert main([str(stub), "--out", str(tmp_path / "out")]) == 2
    assert "apt-get install bubblewrap" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_without_a_sandbox_every_report_says_so(tmp_path: Path) -> None:
    solved = _write(solve(load(NB00)), tmp_path, "00_welcome_solved")
    assert main([str(solved), "--out", str(tmp_path / "out"), "--unsafe-no-sandbox", "--quiet"]) == 0
    report = json.loads((tmp_path / "out" / "00_welcome_solved.json").read_text())
    assert report["total"] == 1 and report["sandbox"] is False and "WITHOUT a sandbox" in report["message"]
    assert "Graded without a sandbox" in (tmp_path / "out" / "00_welcome_solved.md").read_text()
    assert ",NO," in (tmp_path / "out" / "summary.csv").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("policy", [True, False], ids=["policy", "runtime-only"])
def test_a_reference_reached_through_a_course_model_or_module_earns_nothing(tmp_path: Path, policy: bool) -> None:
    """Notebook 12: BERT builds its head from the withheld ClassificationHead, and
    course_lib.training.pretraining imports the withheld mlm_loss and mask_tokens. Taking them from there gets the
    sandbox's stand-ins (which forward to the learner's own, here itself), never the reference; the static policy
    refuses the lookups first."""
    nb = load(ROOT / "notebooks" / "12_bert.ipynb")
    order = [ex for _, _, ex in exercise_cells(nb)]
    attacks = {
        "classification_head": "from course_lib.models.bert import BERT\n"
                               "ClassificationHead = type(BERT(10, d_model=8, num_heads=2, num_layers=1, max_len=4,"
                               " num_classes=2).head)\n",
        "mlm_loss": "from course_lib.training import pretraining\n"
                    "def mlm_loss(logits, labels):\n    return pretraining.mlm_loss(logits, labels)\n",
        "mask_tokens": "from course_lib.training.pretraining import mlm_batches\n"
                       "def mask_tokens(tokens, mask_id, vocab_size, special_ids, generator=None):\n"
                       "    return mlm_batches.__globals__['mask_tokens'](tokens, mask_id, vocab_size, special_ids)\n",
    }
    sources = {order.index(name): src for name, src in attacks.items()}
    report = grade_submission(_write(_with_exercises(nb, sources), tmp_path, "12_bert_attack"),
                              GradeConfig(**CONFIG, policy=policy))
    assert report.total == 0 and report.max_total == 7, [(r.exercise, r.status, r.message) for r in report.exercises]
    assert {r.status for r in report.exercises} <= {"forbidden", "error"}


# ---------------------------------------------------------------------------------------------------
# The class edition's stand-ins pasted into the exercise cell (tests/grading/grading_fixtures/pasted_stand_ins)
# ---------------------------------------------------------------------------------------------------

PASTED = ROOT / "tests" / "grading" / "grading_fixtures" / "pasted_stand_ins"
PASTED_FILES = sorted(PASTED.glob("*.py"))


def _fixture_header(path: Path) -> dict[str, str]:
    """The ``# key: value`` lines at the top of a fixture: ``notebook``, ``exercise``, ``expect``."""
    header = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# ") or ": " not in line:
            break
        key, _, value = line[2:].partition(": ")
        header[key] = value
    return header


def test_the_pasted_fixtures_are_the_stand_ins_the_class_edition_ships() -> None:
    """Each fixture holds the edition's stand-in verbatim (its normalised AST), so the grader is tested on what a
    student can read in the edition's course_lib; the three routes are the edition's (its manifest names them)."""
    import ast
    import inspect
    import textwrap

    from course_lib.edition.backed import BACKED

    stand_ins = {"causal_mask": "course_lib.models.masking.causal_mask",
                 "label_smoothed_cross_entropy": "course_lib.training.engine.label_smoothed_cross_entropy",
                 "sinusoidal_frequencies": "course_lib.models.positional.sinusoidal_frequencies",
                 "online_softmax_attention": "course_lib.models.flash_attention.online_softmax_attention",
                 "rms_norm_forward": "course_lib.models.llama.RMSNorm.forward"}
    found = set()
    for path in PASTED_FILES:
        header = _fixture_header(path)
        assert header["expect"] == "forbidden" and header["exercise"] in {e.name for e in _course_exercises()}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name in stand_ins:
                shipped = ast.parse(textwrap.dedent(inspect.getsource(BACKED[stand_ins[node.name]].stand_in))).body[0]
                assert ast.dump(node) == ast.dump(shipped), f"{path.name}: {node.name} differs from the edition's"
                found.add(node.name)
    assert found == set(stand_ins)


def _course_exercises() -> list:
    from course_lib.edition.build import course_exercises

    return course_exercises()


@pytest.fixture(scope="module")
def pasted_graded(tmp_path_factory) -> dict:
    """Every pasted stand-in graded through the sandbox (policy OFF: what ran decides), --jobs 2, beside the honest
    solved notebook of its own notebook (03, 04, 07 and 13): one gradebook per notebook, as a class keeps one per
    assignment (a gradebook refuses a run that mixes notebooks)."""
    folder = tmp_path_factory.mktemp("pasted")
    by_notebook: dict[str, list[Path]] = {}
    for path in PASTED_FILES:
        header = _fixture_header(path)
        nb = load(ROOT / "notebooks" / f"{header['notebook']}.ipynb")
        order = [name for _, _, name in exercise_cells(nb)]
        by_notebook.setdefault(header["notebook"], []).append(_write(
            _with_exercises(nb, {order.index(header["exercise"]): path.read_text(encoding="utf-8")}),
            folder, f"{header['notebook']}_pasted_{path.stem}"))
    graded = {}
    for notebook, paths in sorted(by_notebook.items()):
        paths.append(_write(solve(load(ROOT / "notebooks" / f"{notebook}.ipynb")), folder, f"{notebook}_honest"))
        reports = grade_many(paths, GradeConfig(**{**CONFIG, "cell_timeout": 30.0}, policy=False),
                             folder / f"out-{notebook}", jobs=2, quiet=True)
        graded.update({p.stem: r for p, r in zip(paths, reports, strict=True)})
    return graded


@pytest.mark.slow
@pytest.mark.parametrize("fixture", PASTED_FILES, ids=[p.stem for p in PASTED_FILES])
def test_a_pasted_stand_in_earns_nothing_and_says_what_to_build(pasted_graded, fixture: Path) -> None:
    header = _fixture_header(fixture)
    report = pasted_graded[f"{header['notebook']}_pasted_{fixture.stem}"]
    result = next(r for r in report.exercises if r.exercise == header["exercise"])
    assert result.score == 0 and result.status == header["expect"], (result.status, result.message)
    assert "asks you to build yourself" in result.message, result.message
    assert result.hint == get_exercise(header["exercise"]).forbidden_hint, result.hint
    others = [r for r in report.exercises if r.exercise != header["exercise"]]
    assert all(r.status == "not-implemented" for r in others), [(r.exercise, r.status) for r in others]


@pytest.mark.slow
def test_the_honest_neighbours_of_the_pasted_stand_ins_keep_full_marks(pasted_graded) -> None:
    honest = {k: r for k, r in pasted_graded.items() if k.endswith("_honest")}
    notebooks = {_fixture_header(p)["notebook"] for p in PASTED_FILES}
    assert len(honest) == len(notebooks) == 5 and all(r.total == r.max_total > 0 for r in honest.values()), {
        k: [(e.exercise, e.status, e.message[:200]) for e in r.exercises] for k, r in honest.items()}
