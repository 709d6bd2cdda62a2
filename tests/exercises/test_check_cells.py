"""A check never passes an exercise cell that failed, and never raises (issue 33).

In a kernel, the check machinery records how each exercise cell last ran (``course_lib.exercises.cells``, an
IPython ``post_run_cell`` hook). Here: the record itself (fake IPython results), the check reading it through
a fake shell, and the whole chain in IPython's real ``InteractiveShell`` running cells as a notebook would
(a fresh interpreter, so that no other test runs inside an IPython shell).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from conftest import ROOT

from course_lib.exercises import cells, check, get_exercise
from course_lib.models.softmax import stable_softmax

GOOD = '''def stable_softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
'''
BROKEN = "def stable_softmax(x, dim=-1:\n    return x\n"  # a SyntaxError: the cell defines nothing


def _result(source: str, error: BaseException | None = None, before: bool = False, cell_id: str | None = None):
    """What IPython hands ``post_run_cell``: an ExecutionResult with its ExecutionInfo (the fields read)."""
    return SimpleNamespace(info=SimpleNamespace(raw_cell=source, cell_id=cell_id), success=error is None,
                           error_before_exec=error if before else None, error_in_exec=None if before else error)


class FakeShell:
    """An IPython shell as far as the tracker needs one: an event manager holding callbacks."""

    def __init__(self) -> None:
        self.events = SimpleNamespace(callbacks={"post_run_cell": []})
        self.events.register = lambda event, fn: self.events.callbacks[event].append(fn)

    def run(self, source: str, error: BaseException | None = None, **kwargs) -> None:
        for callback in self.events.callbacks["post_run_cell"]:
            callback(_result(source, error, **kwargs))


def test_defined_names_reads_cells_that_do_not_parse() -> None:
    assert cells.defined_names(BROKEN) == ["stable_softmax"]
    assert cells.defined_names("import torch\nclass MHA(nn.Module):\n    def forward(self):\n        pass\n"
                               "async def f(:\n") == ["MHA", "f"]  # methods are not the cell's names
    assert cells.defined_names("x = 1\n  def indented(): pass\n") == []


def test_the_tracker_records_each_names_last_run() -> None:
    shell = FakeShell()
    tracker = cells.install(shell)
    assert tracker is not None and cells.install(shell) is tracker  # registered once
    assert len(shell.events.callbacks["post_run_cell"]) == 1
    assert cells.last_run("stable_softmax", shell) is None  # never seen: nothing known
    shell.run(GOOD)
    assert cells.last_run("stable_softmax", shell).succeeded
    shell.run(BROKEN, SyntaxError("invalid syntax"), before=True)
    run = cells.last_run("stable_softmax", shell)
    assert not run.succeeded and isinstance(run.error, SyntaxError)
    shell.run(GOOD + "stable_softmax(1)\n", TypeError("no amax"))  # defined, then the cell raised
    assert isinstance(cells.last_run("stable_softmax", shell).error, TypeError)
    shell.run("print(1)")  # another cell: the exercise's record stays
    assert isinstance(cells.last_run("stable_softmax", shell).error, TypeError)
    shell.run(GOOD)
    assert cells.last_run("stable_softmax", shell).succeeded


def test_a_renamed_definition_leaves_the_old_name_stale() -> None:
    """JupyterLab sends each cell's id: the same cell run again without the name means the name is stale."""
    shell = FakeShell()
    cells.install(shell)
    shell.run(GOOD, cell_id="c1")
    shell.run(GOOD.replace("def stable_softmax", "def stable_sofmax"), cell_id="c1")
    assert cells.last_run("stable_softmax", shell).removed
    assert cells.last_run("stable_sofmax", shell).succeeded


def test_outside_ipython_nothing_is_installed() -> None:
    assert cells.install(SimpleNamespace()) is None
    assert cells.last_run("stable_softmax", SimpleNamespace()) is None


@pytest.fixture
def shell(monkeypatch) -> FakeShell:
    fake = FakeShell()
    cells.install(fake)
    monkeypatch.setattr(cells, "_current_shell", lambda: fake)
    return fake


def test_check_after_a_failed_run_is_failed_never_a_stale_tick(shell, capsys) -> None:
    """A correct answer, then a syntax error in the same cell: the name still holds the old answer."""
    shell.run(GOOD)
    assert check("stable_softmax") is stable_softmax  # (this module's stable_softmax stands for the answer)
    assert "stable_softmax: passed" in capsys.readouterr().out
    shell.run(BROKEN, SyntaxError("invalid syntax", ("<cell>", 1, 29, BROKEN.splitlines()[0])), before=True)
    for form in (lambda: check("stable_softmax"), lambda: check("stable_softmax", stable_softmax)):
        got = form()  # both forms
        out = capsys.readouterr().out
        assert "passed" not in out and "✅" not in out
        assert "❌ stable_softmax: failed" in out and "your exercise cell raised SyntaxError when it last ran" in out
        # the line of code on its own line, so that no parenthesis of the message reads as part of it
        assert "line 1: invalid syntax\n       def stable_softmax(x, dim=-1:\n" in out and "(line" not in out
        assert got is get_exercise("stable_softmax").reference  # the cells below go on with the reference
    shell.run(GOOD)
    assert check("stable_softmax") is stable_softmax and "passed" in capsys.readouterr().out


def test_a_syntax_errors_line_stands_on_its_own_with_a_caret(shell, capsys) -> None:
    """Quoted inside "(line N: ...)", a line missing its closing parenthesis read as complete (issue 43)."""
    source = "def stable_softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim\n"
    with pytest.raises(SyntaxError) as raised:
        compile(source, "<cell>", "exec")
    shell.run(source, raised.value, before=True)
    check("stable_softmax")
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if "was never closed" in line)
    assert lines[at].strip() == "line 2: '(' was never closed"
    assert lines[at + 1] == "       return torch.softmax(x, dim=dim"  # no parenthesis of the message after it
    assert lines[at + 2] == "       " + " " * "return torch.softmax(x, dim=dim".index("(") + "^"


def test_check_of_a_missing_name_is_not_implemented_yet(shell, capsys) -> None:
    got = check("patchify")  # nothing called patchify here, and no cell defining it ran
    out = capsys.readouterr().out
    assert "⏳ patchify: not implemented yet" in out and "`patchify` is not defined yet" in out
    assert got is get_exercise("patchify").reference


def test_instructors_form_with_another_object_is_checked_as_given(shell, capsys) -> None:
    """check(name, impl) with an object that is not what the failed cell's name holds is judged on its own."""
    shell.run(BROKEN, SyntaxError("invalid syntax"), before=True)
    assert check("stable_softmax", lambda x, dim=-1: stable_softmax(x, dim)) is not None
    assert "stable_softmax: passed" in capsys.readouterr().out


SESSION = r'''
import sys
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
def run(source):
    print("=== " + source.splitlines()[0], flush=True)
    shell.run_cell(source)
    sys.stdout.flush()

run("import torch\nfrom course_lib.checks import check")
run({broken!r})          # a fresh kernel: the exercise cell fails first
run('fn = check("stable_softmax")')
run({good!r})
run('fn = check("stable_softmax")')
run({broken!r})          # a correct answer, then a syntax error
run('fn = check("stable_softmax")')
run('fn = check("stable_softmax", stable_softmax)')
run("from course_lib.exercises import cells; import importlib; importlib.reload(cells); cells.install()")
run("print('post_run_cell callbacks:', sum(type(c).__name__ == 'CellTracker' "
    "for c in get_ipython().events.callbacks['post_run_cell']))")
run('print("fn is the reference:", fn is __import__("course_lib.models.softmax").models.softmax.stable_softmax)')
'''


def test_in_ipythons_own_shell_a_failed_cell_never_passes_and_never_raises() -> None:
    """IPython's InteractiveShell runs the cells: a fresh kernel, then a correct answer, then a syntax error."""
    code = textwrap.dedent(SESSION).format(good=GOOD, broken=BROKEN)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    blocks = proc.stdout.split("=== ")[1:]
    checks = [b for b in blocks if b.startswith("fn = check(")]
    assert len(checks) == 4, proc.stdout
    fresh, passed, stale, stale_given = checks
    assert "NameError" not in proc.stdout and "Traceback" not in proc.stdout, proc.stdout
    for block in (fresh, stale, stale_given):
        assert "❌ stable_softmax: failed" in block and "raised SyntaxError when it last ran" in block, block
        assert "passed" not in block, block
    assert "✅ stable_softmax: passed" in passed, passed
    assert "post_run_cell callbacks: 1" in proc.stdout  # a reloaded module registers no second tracker
    assert "fn is the reference: True" in proc.stdout


def test_check_earlier_runs_the_earlier_notebooks_exercise_cell(tmp_path, capsys) -> None:
    """Notebook 11 trains with notebook 10's answers: read from the learner's file, checked, else the reference."""
    import nbformat

    from course_lib.exercises import check_earlier
    from course_lib.exercises.notebooks import solve

    reference = get_exercise("clip_by_global_norm").reference
    assert check_earlier("clip_by_global_norm", tmp_path) is reference  # no file: the reference, with a word
    assert "is not there" in capsys.readouterr().out
    student = nbformat.read(ROOT / "notebooks" / "10_tokeniser_and_training_loop.ipynb", as_version=4)
    path = tmp_path / "10_tokeniser_and_training_loop.ipynb"
    nbformat.write(student, path)
    assert check_earlier("clip_by_global_norm", tmp_path) is reference  # the stub: not implemented yet
    nbformat.write(solve(student), path)
    mine = check_earlier("clip_by_global_norm", tmp_path)
    assert mine is not reference and mine.__module__ == "earlier_10_tokeniser_and_training_loop"
    assert "passed" in capsys.readouterr().out
    broken = solve(student)
    for cell in broken.cells:
        if cell.metadata.get("course", {}).get("exercise") == "clip_by_global_norm" and \
                cell.metadata["course"]["role"] == "exercise":
            cell.source = cell.source.replace("total =", "total = 1 / 0 +", 1)
    nbformat.write(broken, path)
    assert check_earlier("clip_by_global_norm", tmp_path) is reference  # wrong: the reference stands in
