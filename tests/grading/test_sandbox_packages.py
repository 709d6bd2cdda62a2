"""The grading sandbox shows the course's dependencies and no other installed library.

Notebook 14's answers exist in Hugging Face's ``transformers`` (``repeat_kv``, ``LlamaRMSNorm``, ``rotate_half``),
which the course's environment installs for its tests. A cell can reach an importer without an import statement
(``torch.importlib.import_module``), so the static policy cannot keep a library's answer out; the sandbox does, by
not holding the library at all (``course_lib.grading.sandbox.packages``). Before this, a submission whose
``repeat_kv`` and ``RMSNorm.forward`` called Hugging Face's scored 2 of those 2 exercises' points.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

from course_lib.grading.sandbox import sandbox_main
from course_lib.grading.sandbox.packages import COURSE_REQUIREMENTS, canonical, sandbox_distributions
from course_lib.grading.sandbox.sandbox import SandboxUnavailable, command, probe

ROOT = Path(__file__).resolve().parents[2]


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def test_the_course_requirements_are_pyprojects_dependencies() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = {canonical(line.split(">")[0].split("=")[0].split("<")[0].split("[")[0].strip()) for line in declared}
    assert names == {canonical(n) for n in COURSE_REQUIREMENTS}


def test_the_sandbox_holds_what_the_course_needs_and_no_model_library() -> None:
    shown = sandbox_distributions()
    assert {"torch", "numpy", "ipython", "matplotlib", "tqdm"} <= shown
    assert {"typing-extensions", "sympy"} <= shown  # what those require in turn
    for absent in ("transformers", "safetensors", "pytest", "jupyterlab", "course-lib", "scikit-learn", "scipy"):
        assert absent not in shown, absent


@pytest.mark.skipif(not _installed("pytest"), reason="needs an installed distribution outside the course's needs")
def test_an_allowed_module_brings_its_package_into_the_sandbox() -> None:
    assert "pytest" not in sandbox_distributions()
    assert "pytest" in sandbox_distributions(("pytest",))  # course-grade --allow-module pytest


def _in_sandbox(tmp_path: Path, code: str, extra_modules: tuple[str, ...] = ()) -> dict:
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    (tmp_path / "lib").mkdir(exist_ok=True)
    (tmp_path / "job").mkdir(exist_ok=True)
    cmd = command(tmp_path / "lib", tmp_path / "job", disk_mb=16, channel=1, requests=0, extra_modules=extra_modules)
    prelude = "import json, os, site\n[site.addsitedir(d) for d in os.environ['COURSE_GRADE_SITE'].split(os.pathsep)]\n"
    done = subprocess.run([*cmd[:cmd.index("--") + 2], "-P", "-s", "-S", "-c", prelude + code],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _importable(names: list[str]) -> str:
    return (f"import importlib\nfound = {{}}\nfor name in {names!r}:\n    try:\n"
            "        importlib.import_module(name)\n        found[name] = True\n    except ImportError:\n"
            "        found[name] = False\n"
            "print(json.dumps({'found': found, 'listing': sorted(os.listdir(os.environ['COURSE_GRADE_SITE']"
            ".split(os.pathsep)[0]))}))\n")


def test_inside_the_sandbox_the_course_imports_and_transformers_does_not(tmp_path: Path) -> None:
    if not _installed("transformers"):
        pytest.skip("transformers is not installed here: nothing to hide")
    seen = _in_sandbox(tmp_path, _importable(["torch", "numpy", "IPython", "matplotlib", "sklearn", "tqdm",
                                              "transformers", "safetensors", "pytest"]))
    assert seen["found"] == {"torch": True, "numpy": True, "IPython": True, "matplotlib": True, "sklearn": False,
                             "tqdm": True, "transformers": False, "safetensors": False, "pytest": False}, seen
    assert not [e for e in seen["listing"] if e.startswith(("transformers", "safetensors", "course_lib"))], seen


def test_inside_the_sandbox_an_allowed_module_imports(tmp_path: Path) -> None:
    seen = _in_sandbox(tmp_path, _importable(["pytest"]), extra_modules=("pytest",))
    assert seen["found"] == {"pytest": True}, seen


HF = "torch.importlib.import_module('transformers.models.llama.modeling_llama')"
LIBRARY_ANSWERS = {
    "repeat_kv": f"_hf = {HF}\n\ndef repeat_kv(x, num_groups):\n    return _hf.repeat_kv(x, num_groups)\n",
    "rms_norm": (f"_hf = {HF}\n\nclass RMSNorm(nn.Module):\n    def __init__(self, d_model, eps=1e-6):\n"
                 "        super().__init__()\n        self.d_model, self.eps = d_model, eps\n"
                 "        self.weight = nn.Parameter(torch.ones(d_model))\n\n    def forward(self, x):\n"
                 "        self.variance_epsilon = self.eps\n        return _hf.LlamaRMSNorm.forward(self, x)\n"),
}


@pytest.mark.slow
def test_a_library_answer_reached_past_the_policy_earns_nothing(tmp_path: Path) -> None:
    """Notebook 15's repeat_kv and 14's RMSNorm handed in as calls of Hugging Face's, through an importer the static
    policy lets through: graded with the policy on, as a class is, they score nothing."""
    if not _installed("transformers"):
        pytest.skip("transformers is not installed here")
    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    from course_lib.grading.runner import GradeConfig, grade_submission

    results = {}
    for notebook in ("14_todays_models", "15_inference_at_scale"):  # rms_norm is 14's, repeat_kv 15's
        nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
        for cell in nb.cells:
            name = cell.metadata.get("course", {}).get("exercise")
            if cell.metadata.get("course", {}).get("role") == "exercise" and name in LIBRARY_ANSWERS:
                cell.source = LIBRARY_ANSWERS[name]
        path = tmp_path / f"{notebook}.ipynb"
        nbformat.write(nb, path)
        report = grade_submission(path, GradeConfig())
        results.update({r.exercise: r for r in report.exercises})
        assert report.total == 0, [(r.exercise, r.status) for r in report.exercises]
    for name in LIBRARY_ANSWERS:
        assert results[name].score == 0 and "transformers" in results[name].message, (name, results[name])


def test_scipy_is_absent_inside_the_sandbox(tmp_path: Path) -> None:
    """SciPy's softmax answered notebook 00 (issue 45): it came with scikit-learn, which no graded cell needs."""
    if not _installed("scipy"):
        pytest.skip("scipy is not installed here: nothing to hide")
    seen = _in_sandbox(tmp_path, textwrap.dedent("""
        import importlib.util, torch
        found = {m: importlib.util.find_spec(m) is not None for m in ("scipy", "sklearn", "torch")}
        try:
            torch.importlib.import_module("scipy.special")
            found["reached"] = True
        except ImportError:
            found["reached"] = False
        print(json.dumps(found))
    """))
    assert seen == {"scipy": False, "sklearn": False, "torch": True, "reached": False}, seen


def test_the_runner_starts_from_the_graders_font_list(tmp_path: Path) -> None:
    """The grader makes Matplotlib's font list once (sandbox.font_list, in a container of its own); the runner
    copies it where Matplotlib looks (sandbox_main.seed_font_list), so a notebook's figure imports load it instead of
    building a new one, and every font it names is a file inside the sandbox."""
    (tmp_path / "lib").mkdir()
    shutil.copyfile(Path(sandbox_main.__file__), tmp_path / "lib" / "sandbox_main.py")
    seen = _in_sandbox(tmp_path, textwrap.dedent("""
        import importlib.util, logging
        spec = importlib.util.spec_from_file_location("runner", "/grader/lib/sandbox_main.py")
        runner = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runner)
        runner.seed_font_list()
        said = []
        handler = logging.Handler()
        handler.emit = lambda record: said.append(record.getMessage())
        logging.getLogger("matplotlib.font_manager").addHandler(handler)
        logging.getLogger("matplotlib.font_manager").setLevel(logging.INFO)
        from matplotlib import font_manager
        fonts = font_manager.fontManager.ttflist
        try:  # a learner's line: the grader's list is read-only (another sandbox starts from it too)
            open(os.path.join(os.environ["COURSE_GRADE_FONTS"], "fontlist-tampered.json"), "w").close()
            written = True
        except OSError:
            written = False
        print(json.dumps({"given": os.listdir(os.environ["COURSE_GRADE_FONTS"]), "said": said, "fonts": len(fonts),
                          "written": written,
                          "missing": [f.fname for f in fonts if not os.path.isfile(f.fname)]}))
    """))
    assert [name for name in seen["given"] if name.startswith("fontlist-")], seen["given"]
    assert "generated new fontManager" not in seen["said"], seen["said"]
    assert seen["fonts"] > 0 and seen["missing"] == [], seen
    assert not seen["written"], "a sandbox could write into the grader's font list"
