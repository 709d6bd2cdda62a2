"""The grader decides, the sandbox answers: verdicts made from observations, whatever ran them.

These tests run the sandbox's side (``observe_cases``, what the runner does with a learner's function) in this
process and judge its answer with the grader's ``judge``, as ``course-grade`` does across the sandbox's pipe.
Routes to PyTorch's own kernels are caught by what ran, whatever name reached them; a cut graph, a write into
an input, an alias, a float64 result and a switched-off record are judged from the data, not by code that ran
beside the learner's.
"""

from __future__ import annotations

import threading
from queue import Queue

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT

import course_lib.checks  # noqa: F401 - registers the course's exercises
from course_lib.exercises import get_exercise
from course_lib.exercises.feedback import run_check
from course_lib.exercises.tracing import thread_idents
from course_lib.exercises.verdict import Rules, inputs_as_plain, reference_observation
from course_lib.grading.course import ExerciseSpec
from course_lib.grading.judging.judge import judge, witness_verdict
from course_lib.grading.sandbox.codec import encode_cases, npz_bytes, witnessed_ops, witnessed_processes
from course_lib.grading.sandbox.sandbox_main import observe_cases, witness_recorder

WITNESSED = witness_recorder()  # the runner's witness, made as the runner makes it (before the learner's code)

SEED = 7


def _spec(name: str) -> ExerciseSpec:
    exercise = get_exercise(name)
    spec = ExerciseSpec(exercise, 0, "", exercise.reference.__name__, [])
    spec.cases = exercise.cases("hidden", seed=SEED)
    spec.expected = [reference_observation(exercise, c) for c in spec.cases]
    spec.inputs = [inputs_as_plain(c) for c in spec.cases]
    spec.arrays, spec.described = encode_cases(spec.cases)
    return spec


def _grade(name: str, impl, baseline: frozenset[int] | None = None) -> tuple:
    """The verdict ``course-grade`` gives ``impl``: observed on the hidden cases, judged from the answer.
    ``baseline``: the threads that play the runner's own (default: those alive now, as other tests left them)."""
    spec = _spec(name)
    exercise = spec.exercise
    from course_lib.exercises.passes import access_check_name

    job = {"differentiable": exercise.differentiable, "train_mode": exercise.train_mode,
           "watch": list(exercise.forbidden_calls), "seed": Rules.from_exercise(exercise).seed,
           "access": access_check_name(exercise.access_check)}
    ignore = thread_idents() if baseline is None else baseline
    (header, arrays), record = WITNESSED("nonce", lambda: observe_cases(job, impl, spec.described, spec.arrays,
                                                                        ignore))
    header["witness"] = witnessed_ops(record, "nonce")  # as the grader's executor accepts it
    return judge(spec, header, npz_bytes(arrays), 1024)


def _own_softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


_captured = torch.softmax  # a reference captured before any tripwire could be set
_alias = F.softmax


SOFTMAX_ROUTES = {
    "captured before the tripwire": lambda x, dim=-1: _captured(x, dim),
    "an alias": lambda x, dim=-1: _alias(x, dim=dim),
    "the private kernel": lambda x, dim=-1: torch._softmax(x, dim, False),
    "log_softmax then exp": lambda x, dim=-1: torch.log_softmax(x, dim).exp(),
    "the operator itself": lambda x, dim=-1: torch.ops.aten._softmax(x, dim, False),
    "the module": lambda x, dim=-1: torch.nn.Softmax(dim)(x),
    "through getattr": lambda x, dim=-1: getattr(torch, "soft" + "max")(x, dim),
}


@pytest.mark.parametrize("route", sorted(SOFTMAX_ROUTES))
def test_a_route_to_pytorchs_softmax_earns_nothing_whatever_its_name(route: str) -> None:
    status, message, *_ = _grade("stable_softmax", SOFTMAX_ROUTES[route])
    assert status == "forbidden" and "softmax" in message, (status, message)
    assert run_check("stable_softmax", SOFTMAX_ROUTES[route]).status == "failed"  # the check agrees


def test_an_honest_softmax_passes_in_the_grader_and_the_check() -> None:
    assert _grade("stable_softmax", _own_softmax)[0] == "pass"
    assert run_check("stable_softmax", _own_softmax).passed


_sdpa = F.scaled_dot_product_attention


def _attention_via_pytorch(query, key, value, mask=None, dropout_p=0.0):
    out = _sdpa(query, key, value, attn_mask=mask, dropout_p=dropout_p)
    scores = query @ key.transpose(-2, -1) / query.shape[-1] ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.where(scores.isneginf().all(-1, keepdim=True), 0.0, scores.softmax(-1))
    return out, weights


def test_pytorchs_attention_captured_earns_nothing() -> None:
    status, message, *_ = _grade("scaled_dot_product_attention", _attention_via_pytorch)
    assert status == "forbidden" and "scaled_dot_product" in message, (status, message)


def test_numpy_tied_back_to_the_graph_fails_on_its_gradients() -> None:
    def numpy_softmax(x, dim=-1):
        a = x.detach().numpy()
        e = np.exp(a - a.max(axis=dim, keepdims=True))
        return torch.from_numpy(e / e.sum(axis=dim, keepdims=True)) + 0 * x.sum()

    status, message, hint, *_ = _grade("stable_softmax", numpy_softmax)
    assert status == "fail" and "gradient" in message, (status, message)
    assert run_check("stable_softmax", numpy_softmax).status == "failed"


def test_writing_into_an_input_aliasing_and_float64_fail_from_the_data() -> None:
    def in_place(x, dim=-1):
        x -= x.amax(dim=dim, keepdim=True)
        e = torch.exp(x)
        return e / e.sum(dim, keepdim=True)

    def float64(x, dim=-1):
        return _own_softmax(x.double(), dim)

    assert _grade("stable_softmax", in_place)[0] == "fail"
    status, message, *_ = _grade("stable_softmax", float64)
    assert status == "fail" and "float64" in message, message


def test_switching_the_record_off_earns_nothing() -> None:
    import sys

    def hides(x, dim=-1):
        sys.setprofile(None)
        return torch.softmax(x, dim)

    status, message, *_ = _grade("stable_softmax", hides)
    assert status == "forbidden" and "switched off" in message, message


def test_the_witness_counts_a_process_alive_or_reaped_while_a_request_runs() -> None:
    """Another process's operators are in no profiler session of the runner's
    (``tests/grading/grading_fixtures/attacks/softmax_in_a_process.py``): the witness counts the runner's
    descendants alive at a request's start or end and any child reaped during it, and the grader refuses."""
    import subprocess
    import sys

    witnessed = witness_recorder()
    assert witnessed("n", lambda: None)[1]["processes"] == 0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert witnessed("n", lambda: None)[1]["processes"] >= 1  # started before the request, alive through it
    finally:
        child.kill()
        child.wait()
    assert witnessed("n", lambda: None)[1]["processes"] == 0
    ran = witnessed("n", lambda: subprocess.run([sys.executable, "-c", "pass"], check=True))[1]
    assert ran["processes"] >= 1  # started and reaped inside the request
    spec = ExerciseSpec(get_exercise("stable_softmax"), 0, "", "stable_softmax", [])
    verdict = witness_verdict(spec, witnessed_ops(ran, "n"), witnessed_processes(ran))
    assert verdict is not None and verdict[0] == "forbidden" and "process" in verdict[1], verdict


def test_the_switches_that_pause_the_witness_are_gone_from_every_module() -> None:
    """RecordFunction's switch and the profiler's collection toggle hide operators with the witness's session
    and marks intact (``record_function_off``, ``collection_paused``): the runner takes them out of every loaded
    module before learner code runs. Run in a fresh interpreter (it changes the process for good)."""
    import subprocess
    import sys

    code = (
        "import torch, torch.autograd.profiler as P\n"
        "from course_lib.grading.sandbox.sandbox_main import DISARMED, disarm, witness_recorder\n"
        "from course_lib.grading.sandbox.codec import witnessed_ops\n"
        "witnessed = witness_recorder()\n"
        "places = disarm()\n"
        "assert {f'torch._C._autograd.{n}' for n in DISARMED} <= set(places), places\n"
        "for owner in (torch._C._autograd, P, torch.autograd):\n"
        "    for name in DISARMED:\n"
        "        f = getattr(owner, name, None)\n"
        "        if f is not None:\n"
        "            try:\n"
        "                f(False)\n"
        "            except RuntimeError:\n"
        "                continue\n"
        "            raise SystemExit(f'{owner.__name__}.{name} still works')\n"
        "_, record = witnessed('n', lambda: torch.softmax(torch.randn(2, 3), -1))\n"
        "assert 'aten::_softmax' in witnessed_ops(record, 'n'), record\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_work_handed_to_a_background_thread_earns_nothing() -> None:
    jobs: Queue = Queue()
    results: Queue = Queue()

    def worker() -> None:
        while True:
            x, dim = jobs.get()
            if x is None:
                return
            results.put(torch.softmax(x, dim))

    before = thread_idents()  # the learner's thread starts after the runner's setup, as in the sandbox
    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        def delegated(x, dim=-1):
            jobs.put((x, dim))
            return results.get() + 0 * x

        status, message, *_ = _grade("stable_softmax", delegated, before)
    finally:
        jobs.put((None, None))
        thread.join(5)
    assert status == "forbidden" and "thread" in message, message


def test_right_outputs_without_the_computation_fail_on_the_gradients() -> None:
    """A module whose outputs are right but detached from its weights and inputs (tied back with
    ``0 * query.sum()``) fails: the grader compares the gradients its own reference gives."""
    reference = get_exercise("multi_head_attention").reference

    class Detached(reference):  # the right numbers, computed off the graph
        def forward(self, query, key, value, mask=None, need_weights=True):
            with torch.no_grad():
                out, weights = super().forward(query, key, value, mask, need_weights)
            return out + 0 * query.sum(), weights

    Detached.__name__ = "MultiHeadAttention"
    status, message, *_ = _grade("multi_head_attention", Detached)
    assert status == "fail" and "gradient" in message, (status, message)
    assert _grade("multi_head_attention", reference)[0] == "pass"


def test_scratch_folders_of_a_dead_run_are_removed_and_live_ones_kept(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from course_lib.grading.sandbox.scratch import remove_stale

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f"course-grade-lib-{int(dead.stdout)}-abc"
    live = tmp_path / f"course-grade-job-{os.getpid()}-def"
    other = tmp_path / "course-grade-notes"
    for folder in (stale, live, other):
        (folder / "course_lib").mkdir(parents=True)
    assert remove_stale(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and other.exists()


def test_a_sandbox_group_gets_one_cpus_worth_of_time_where_the_host_allows() -> None:
    """cgroup v1 ``cpu.cfs_quota_us`` / v2 ``cpu.max``: one CPU per sandbox (--jobs 2 on 2 cores stay fair)."""
    import os
    from pathlib import Path

    from course_lib.grading.sandbox.cgroups import SandboxCgroup

    group = SandboxCgroup(64, 2048, cpus=1.0)
    try:
        if not group.active or not group.cpu_limited:
            pytest.skip("this host does not let the grader make CPU control groups (not root, or no cpu controller)")
        folder = group.dirs.get("cpu", group.dirs["pids"])
        if (folder / "cpu.max").exists():
            assert (folder / "cpu.max").read_text().split()[:2] == ["100000", "100000"]
        else:
            assert (folder / "cpu.cfs_quota_us").read_text().strip() == "100000"
            assert (folder / "cpu.cfs_period_us").read_text().strip() == "100000"
        assert any(str(folder / "cgroup.procs") in part for part in group.wrap(["true"]))
        assert os.geteuid() == 0 and Path(folder).is_dir()
    finally:
        group.remove()


def test_a_thread_or_process_started_inside_the_call_earns_nothing() -> None:
    """No other thread is alive when the call starts or ends, the gradients are right: starting it is recorded.

    The thread is the sandbox test's attack itself
    (``tests/grading/grading_fixtures/attacks/thread_inside_the_call.py``),
    judged here in-process: one copy of the attack, two depths of test."""
    import os
    import runpy

    attack = ROOT / "tests" / "grading" / "grading_fixtures" / "attacks" / "thread_inside_the_call.py"
    in_a_thread = runpy.run_path(str(attack))["stable_softmax"]

    def forks(x, dim=-1):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return _own_softmax(x, dim)

    for impl in (in_a_thread, forks):
        status, message, *_ = _grade("stable_softmax", impl)
        assert status == "forbidden" and "thread or a process" in message, (impl.__name__, status, message)


def test_running_pytorchs_own_layer_in_a_layer_exercise_earns_nothing() -> None:
    """Notebooks 05 and 06 compare the learner's layers with nn.TransformerEncoderLayer/DecoderLayer: a forward
    that runs PyTorch's layer (here beside the right answer, whose numbers are then right) is forbidden."""
    reference = get_exercise("encoder_layer").reference

    class EncoderLayer(reference):
        def forward(self, x, mask=None):
            torch.nn.TransformerEncoderLayer(x.shape[-1], 1, batch_first=True)(x)
            return super().forward(x, mask)

    status, message, *_ = _grade("encoder_layer", EncoderLayer)
    assert status == "forbidden" and "TransformerEncoderLayer" in message, (status, message)
    assert _grade("encoder_layer", reference)[0] == "pass"


@pytest.mark.slow
def test_a_torch_compiled_softmax_earns_nothing() -> None:
    """Compiled (dynamic shapes, warmed up before the call): its kernels are not dispatcher operators, so the
    record sees no softmax on a warm shape; entering compiled code is recorded instead (15 s to compile)."""
    compiled = torch.compile(lambda x, dim: torch.softmax(x, dim), dynamic=True)
    for n in (3, 4, 5):
        compiled(torch.randn(2, n), -1)

    def stable_softmax(x, dim=-1):
        return compiled(x, dim)

    status, message, *_ = _grade("stable_softmax", stable_softmax)
    assert status == "forbidden" and "torch.compile" in message, (status, message)


@pytest.mark.parametrize("layout", ["neutral base", "base at its host paths"])
def test_inside_the_sandbox_no_path_names_the_host(tmp_path, monkeypatch, layout: str) -> None:
    """Python runs at neutral paths in the sandbox: its executable, prefix, import path, environment and the
    packages' files name neither the checkout nor the environment's folder on the host. Also where the base
    installation cannot move (a system Python under /usr, the layout taken here by a pyenv Python too): the base
    keeps its host paths, the virtual environment's folder is still named nowhere."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from course_lib.grading.sandbox import sandbox
    from course_lib.grading.sandbox.sandbox import SandboxUnavailable, command, probe

    try:
        probe()
    except SandboxUnavailable as err:
        pytest.skip(str(err))
    base_moves = layout == "neutral base" and not os.path.realpath(sys.base_prefix).startswith("/usr")
    if layout != "neutral base":
        monkeypatch.setattr(sandbox, "python_layout", sandbox.host_paths_layout)
    (tmp_path / "lib").mkdir()
    (tmp_path / "job").mkdir()
    cmd = command(tmp_path / "lib", tmp_path / "job", disk_mb=16, channel=1, requests=0)
    code = ("import json, os, site, sys\n"
            "[site.addsitedir(d) for d in os.environ['COURSE_GRADE_SITE'].split(os.pathsep) if d]\n"
            "import numpy, torch, IPython\n"
            "print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, 'base': sys.base_prefix,\n"
            "    'path': sys.path, 'env': dict(os.environ), 'files': [numpy.__file__, torch.__file__,\n"
            "    IPython.__file__], 'cwd': os.getcwd(), 'top': sorted(os.listdir('/'))}))\n")
    interpreter = cmd[cmd.index("--") + 1]
    done = subprocess.run([*cmd[:cmd.index("--") + 1], interpreter, "-P", "-s", "-S", "-c", code],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    host = {str(Path(__file__).resolve().parents[2])}
    if sys.prefix != sys.base_prefix:  # a virtual environment: its folder
        host |= {sys.prefix, os.path.realpath(sys.prefix)}
    if base_moves:
        host |= {sys.base_prefix, os.path.realpath(sys.base_prefix)}
    text = json.dumps(seen)
    assert not [h for h in host if h in text], (host, seen)
    allowed = ("/grader/python/", "/usr/") if base_moves else ("/grader/python/", "/usr/",
                                                               os.path.realpath(sys.base_prefix) + "/")
    assert seen["executable"].startswith(allowed), seen["executable"]
    assert all(f.startswith(allowed) for f in seen["files"]), seen["files"]
    private = {"root", "home", "work", "etc"} - ({os.path.realpath(sys.base_prefix).split("/")[1]} if not base_moves
                                                 else set())  # a base bound at its host path shows its top folder
    assert seen["cwd"] == "/tmp" and not private & set(seen["top"]), seen["top"]


def _pasted(key: str, name: str, extra: str = ""):
    """The class edition's stand-in for graded part ``key`` as a student would paste it into the cell (its
    source, run in a fresh namespace), and ``name``, the function the cell defines, from it."""
    import inspect
    import textwrap

    from course_lib.edition.backed import BACKED

    namespace: dict = {"torch": torch}
    exec(textwrap.dedent(inspect.getsource(BACKED[key].stand_in)) + extra, namespace)  # noqa: S102 - the course's own
    return namespace[name]


#: The exercises whose answer the class edition computes through PyTorch: (exercise, the stand-in pasted).
PASTED = {
    "causal_mask": lambda: _pasted("course_lib.models.masking.causal_mask", "causal_mask"),
    "label_smoothed_cross_entropy": lambda: _pasted("course_lib.training.engine.label_smoothed_cross_entropy",
                                                    "label_smoothed_cross_entropy"),
    "sinusoidal_table": lambda: _pasted(
        "course_lib.models.positional.sinusoidal_frequencies", "sinusoidal_table",
        "\n\ndef sinusoidal_table(max_len, d_model):\n"
        "    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * sinusoidal_frequencies(d_model).double()\n"
        "    return torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(max_len, d_model).float()\n"),
    "rms_norm": lambda: _pasted(
        "course_lib.models.llama.RMSNorm.forward", "RMSNorm",
        "\n\nclass RMSNorm(torch.nn.Module):\n"
        "    def __init__(self, d_model, eps=1e-6):\n"
        "        super().__init__()\n"
        "        self.d_model, self.eps = d_model, eps\n"
        "        self.weight = torch.nn.Parameter(torch.ones(d_model))\n\n"
        "    forward = rms_norm_forward\n"),
    "online_softmax": lambda: _pasted(
        "course_lib.models.flash_attention.online_softmax_attention", "online_softmax",
        "\n\ndef online_softmax(x, dim=-1, tile_size=32):\n"
        "    rows = x.movedim(dim, -1)\n"
        "    n = rows.shape[-1]\n"
        "    ones = torch.ones(*rows.shape[:-1], 1, 1, dtype=x.dtype)\n"
        "    identity = torch.eye(n, dtype=x.dtype).expand(*rows.shape[:-1], n, n)\n"
        "    return online_softmax_attention(ones, rows[..., None], identity)[..., 0, :].movedim(-1, dim)\n"),
}


@pytest.mark.parametrize("name", sorted(PASTED))
def test_the_class_editions_stand_in_pasted_earns_nothing_with_a_hint_that_says_what_to_build(name: str) -> None:
    """Right numbers through PyTorch's own code: refused by the grader and by the check, with the exercise's hint."""
    pasted = PASTED[name]()
    exercise = get_exercise(name)
    assert run_case_output_equals_reference(name, pasted)  # the numbers are right: only what ran refuses it
    status, message, hint, *_ = _grade(name, pasted)
    assert status == "forbidden" and "asks you to build yourself" in message, (status, message)
    assert hint == exercise.forbidden_hint and hint, hint
    result = run_check(name, pasted)
    assert result.status == "failed" and result.hint == exercise.forbidden_hint, result


@pytest.mark.parametrize("name", sorted(PASTED))
def test_every_honest_alternative_of_those_exercises_still_passes_in_the_grader(name: str) -> None:
    exercise = get_exercise(name)
    assert exercise.also_correct
    for alternative in (exercise.reference, *exercise.also_correct):
        status, message, *_ = _grade(name, alternative)
        assert status == "pass", (alternative.__name__, status, message)


def run_case_output_equals_reference(name: str, impl) -> bool:
    """Whether ``impl`` gives the reference's outputs on every hidden case within the exercise's tolerance (no
    tripwire, nothing traced)."""
    from course_lib.exercises.core import run_case

    exercise = get_exercise(name)
    cases = exercise.cases("hidden", seed=SEED)
    outputs = [(run_case(impl, case), run_case(exercise.reference, case)) for case in cases]
    return all(torch.allclose(torch.as_tensor(got), torch.as_tensor(expected), atol=exercise.atol, rtol=exercise.rtol,
                              equal_nan=True) for got, expected in outputs)
