"""The grading command, attacked: every submission is graded as it should be, and a report is always written.

Fixtures are built here from the committed ``notebooks/00_welcome.ipynb`` (one exercise) and from the
five-exercise assignment in ``tests/grading_fixtures/fx_assignment/`` (to prove that one attacked exercise
costs only its own points). Tests that start kernels are marked ``slow``; they share runs where they can
(a kernel start costs seconds: grading runs ~13 kernels in all).
"""

from __future__ import annotations

import copy
import csv
import json
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest
from conftest import NOTEBOOKS, ROOT
from nbtools import load

from course_lib.basics import stable_softmax
from course_lib.exercises.notebooks import exercise_cells, solve
from course_lib.grading import harness as H
from course_lib.grading.cli import grade_many, main
from course_lib.grading.policy import check_source, setup_namespace
from course_lib.grading.runner import STANDARD_IMPORTS, GradeConfig, grade_submission, read_submission

NB00 = ROOT / "notebooks" / "00_welcome.ipynb"
FX = ROOT / "tests" / "grading_fixtures" / "fx_assignment" / "fx_assignment.ipynb"
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
    "from course_lib.basics import stable_softmax as ref\n" + HDR + "    return ref(x, dim)\n",
    "from course_lib import stable_softmax as s\n" + HDR + "    return s(x, dim)\n",
    "import course_lib.basics\n" + HDR + "    return course_lib.basics.stable_softmax(x, dim)\n",
    "from course_lib import basics\n" + HDR + "    return basics.stable_softmax(x, dim)\n",
]


@pytest.mark.parametrize("source", REFERENCE_CALLS, ids=range(len(REFERENCE_CALLS)))
def test_policy_refuses_calling_the_reference(source: str) -> None:
    violations = check_source(source, stable_softmax, NAMESPACE)
    assert violations and violations[0].kind == "reference", violations


def test_policy_sees_a_reference_bound_by_the_setup_and_a_subclass_of_a_reference_class() -> None:
    namespace = setup_namespace(STANDARD_IMPORTS + ["from course_lib.basics import stable_softmax as softmax_ref"])
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


def test_outputs_need_the_nonce_and_are_never_unpickled(tmp_path: Path) -> None:
    (tmp_path / "s.result.json").write_text(json.dumps({"nonce": "right", "cases": [
        {"status": "ok", "output": {"t": "ndarray", "key": "a0"}}]}))
    np.savez(tmp_path / "s.out.npz", a0=np.arange(3))
    assert H.read_outputs(tmp_path, "s", "wrong") is None
    got = H.read_outputs(tmp_path, "s", "right")
    assert np.array_equal(got["cases"][0]["output"], np.arange(3))
    np.savez(tmp_path / "s.out.npz", a0=np.array([object()], dtype=object))  # a pickle inside the npz
    assert H.read_outputs(tmp_path, "s", "right") is None
    spoof = H.encode_value(type("Always", (), {"__eq__": lambda s, o: True})(), {}, strict=False)
    assert spoof["t"] == "unsupported"
    assert H.decode_value(spoof, {}, as_torch=False) != np.zeros(1)


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
    assert "over the grader's limit" in read_submission(big, 1 << 20)[3]


def test_cli_writes_reports_for_malformed_huge_and_stub_submissions(tmp_path: Path, capsys) -> None:
    """No kernel is needed: a stub is recognised as such, broken files get reports saying why."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "00_welcome_malformed.ipynb").write_text("{ this is not json")
    (subs / "00_welcome_huge.ipynb").write_bytes(b"{" + b" " * (300 << 10) + b"}")
    _write(load(NB00), subs, "00_welcome_stub")
    out = tmp_path / "out"
    assert main([str(subs), "--out", str(out), "--max-mb", "0.25", "--quiet", "--jobs", "2"]) == 0
    reports = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
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
    assert len(rows) == 3 and {r["status"] for r in rows} == {"missing", "not-implemented"}
    assert (out / "summary.csv").read_text().count("\n") == 4
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
    "calls_the_reference": ("from course_lib.basics import stable_softmax as ref\n" + HDR + "    return ref(x, dim)\n",
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
    assert rep["exercises"][0]["cases_passed"] == rep["exercises"][0]["cases_total"] == 7


OTHER_NOTEBOOKS = [p for p in NOTEBOOKS if p.stem != "00_welcome"]


@pytest.mark.slow
@pytest.mark.parametrize("path", OTHER_NOTEBOOKS, ids=[p.stem for p in OTHER_NOTEBOOKS])
def test_every_solved_course_notebook_earns_full_marks(path: Path, tmp_path: Path) -> None:
    report = grade_submission(_write(solve(load(path)), tmp_path, f"{path.stem}_solved"), GradeConfig(**CONFIG))
    assert report.max_total > 0 and report.total == report.max_total, [
        (r.exercise, r.status, r.message) for r in report.exercises]


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
    """Policy OFF: the kernel must be restarted after each attack, and the clean exercises still graded."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources.update({n: src for n, (src, _) in RUNTIME_ATTACKS.items()})
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_runtime", policy=False)
    assert got["fx_scaled_scores"][:2] == ("pass", 1.0) and got["fx_masked_mean"][:2] == ("pass", 1.0), got
    assert got["fx_causal_mask"][:2] == ("timeout", 0.0)
    assert got["fx_attend"][:2] == ("error", 0.0) and "stopped the kernel" in got["fx_attend"][2]
    assert got["fx_scale"][:2] == ("error", 0.0) and "harness" in got["fx_scale"][2]
    assert got["total"] == 2 and got["starts"] == 4, got


@pytest.mark.slow
def test_runtime_defences_alone_contain_patches_reference_calls_memory_files_and_spoofs(fx_nb, tmp_path) -> None:
    """Policy OFF, one kernel: nothing the kernel does can make a wrong answer pass."""
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
    assert got["fx_causal_mask"][:2] == ("forbidden", 0.0) and "reference" in got["fx_causal_mask"][2]
    assert got["fx_attend"][:2] == ("error", 0.0) and "memory limit" in got["fx_attend"][2]
    assert got["fx_scale"][:2] == ("error", 0.0) and "does not allow reading" in got["fx_scale"][2]
    assert got["fx_masked_mean"][:2] == ("fail", 0.0)
    assert got["total"] == 0 and got["starts"] == 1


@pytest.mark.slow
def test_runtime_defences_alone_stop_module_shadowing_and_answers_computed_by_the_reference(fx_nb, tmp_path) -> None:
    """Policy OFF (found by a red-team review): a numpy.py written into the working folder before a forced
    restart must not shadow NumPy for the grader's setup, and the reference is disabled while its own
    exercise cell runs (so a table of its answers cannot be computed ahead of the hidden cases)."""
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources[0] = ("def fx_scaled_scores(q, k):\n    return q\n"
                  "with open('numpy.py', 'w') as f:\n    f.write('raise ImportError(\"shadowed\")')\n"
                  "while True:\n    pass\n")
    sources[1] = ("from fx_checks import fx_causal_mask as ref\n_T = {n: ref(n) for n in range(1, 64)}\n"
                  "def fx_causal_mask(n):\n    return _T[n]\n")
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_shadow", policy=False)
    assert got["fx_scaled_scores"][:2] == ("timeout", 0.0), got
    assert got["fx_causal_mask"][:2] == ("error", 0.0) and "disabled" in got["fx_causal_mask"][2], got
    for name in ("fx_attend", "fx_scale", "fx_masked_mean"):  # graded after the restart: setup was not shadowed
        assert got[name][0] == "pass", got
    assert got["starts"] == 2


@pytest.mark.slow
def test_with_the_policy_on_only_the_refused_exercises_lose_points(fx_nb, tmp_path: Path) -> None:
    solved = solve(fx_nb)
    sources = {n: cell.source for n, (_, cell, _) in enumerate(exercise_cells(solved))}
    sources[1] = "import os\n" + sources[1]
    sources[2] = "import fx_checks\n" + sources[2]
    got = _fx_grade(_with_exercises(fx_nb, sources), tmp_path, "fx_policy")
    assert got["fx_causal_mask"][0] == "forbidden" and got["fx_attend"][0] == "forbidden", got
    assert got["total"] == 3 and got["starts"] == 1
