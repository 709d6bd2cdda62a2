"""A check judges with what the kernel has already imported: its first run in a fresh kernel imports nothing heavy.

A forbidden-call list names functions such as ``torch.nn.attention.bias.CausalBias._upper_left``; resolving them
by importing their module pulled ``torch._dynamo`` and SymPy into the learner's kernel at the first
``causal_mask`` check (1.2 s idle, 9 s on a loaded machine). Such names are now watched by file and qualified
name until their module is imported (``course_lib.exercises.tracing.unimported_key``): still caught when the
learner's code imports and calls them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import NOTEBOOKS, ROOT

EVERY_FIRST_CHECK = """
import contextlib, importlib, io, json, sys, time
import nbformat
HEAVY = ("torch._dynamo", "torch._inductor", "sympy")
from course_lib.exercises import get_exercise
from course_lib.exercises.feedback import check
found = []
for path in sys.argv[1:]:
    nb = nbformat.read(path, as_version=4)
    importlib.import_module(nb.metadata["course"]["checks"])
    for cell in nb.cells:
        if cell.metadata.get("course", {}).get("role") != "check":
            continue
        name = cell.metadata["course"]["exercise"]
        before, start = set(sys.modules), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            check(name, get_exercise(name).reference)
        heavy = sorted(m for m in set(sys.modules) - before if m.startswith(HEAVY))
        found.append([name, "passed" in out.getvalue(), heavy[:3], round(time.process_time() - start, 2)])
print(json.dumps(found))
"""


def _run(code: str, *args: str) -> str:
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                            timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_no_check_imports_torch_dynamo_or_sympy() -> None:
    """Every exercise's check, in notebook order in one fresh interpreter: none imports a heavy module."""
    found = json.loads(_run(EVERY_FIRST_CHECK, *map(str, NOTEBOOKS)).splitlines()[-1])
    assert len(found) >= 30 and all(passed for _, passed, _, _ in found), found
    heavy = {name: modules for name, _, modules, _ in found if modules}
    assert not heavy, f"checks that import heavy modules into the learner's kernel: {heavy}"


def test_a_forbidden_function_of_a_module_not_imported_yet_is_still_caught() -> None:
    """causal_mask through PyTorch's CausalBias, imported inside the learner's function: refused as before."""
    code = """
import sys
import course_lib.checks.nb04_masking
from course_lib.exercises.feedback import run_check
assert "torch.nn.attention.bias" not in sys.modules
def causal_mask(seq_len, device=None):
    from torch.nn.attention.bias import causal_upper_left
    return causal_upper_left(seq_len, seq_len)._materialize(device)
result = run_check("causal_mask", causal_mask)
print(result.status, "|", result.message.replace(chr(10), " "))
"""
    out = _run(code).strip().splitlines()[-1]
    assert out.startswith("failed |") and "CausalBias" in out, out
