"""The benchmark runner: it finds every benchmark, every benchmark takes ``--quick``, and one quick run goes
end to end. Timings themselves are not tested (they depend on the machine); see ``benchmarks/README.md``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))
import run_all  # noqa: E402  (benchmarks/ is not a package)


def test_discover_finds_every_script_and_rejects_unknown_names():
    found = {p.name for p in run_all.discover()}
    assert found == {p.name for p in BENCH.glob("bench_*.py")}
    assert {p.name for p in run_all.discover(["attention", "bench_vit.py"])} == {"bench_attention.py",
                                                                                  "bench_vit.py"}
    with pytest.raises(SystemExit, match="no benchmark called"):
        run_all.discover(["no_such_benchmark"])


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("bench_*.py")))
def test_every_benchmark_accepts_quick(script):
    """run_all passes --quick to every script, so each must accept it (argparse exits 2 otherwise)."""
    proc = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout


def test_load_note_is_measured_not_assumed():
    assert "idle" in run_all.load_note(0.02)
    assert "noisy" in run_all.load_note(0.6)
    assert "could not be measured" in run_all.load_note(float("nan"))


def test_cpu_busy_share_sees_a_busy_cpu():
    """A process spinning on one CPU shows up as at least part of one CPU busy."""
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat on this system")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = run_all.cpu_busy_share(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.0 <= busy <= 1.0
    assert busy >= 0.8 / os.cpu_count()


def test_run_all_quick_subset_end_to_end(tmp_path):
    out = tmp_path / "README.md"
    proc = subprocess.run([sys.executable, str(BENCH / "run_all.py"), "--quick", "--only", "attention",
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    table = out.read_text()
    assert "| `bench_attention.py` | ok |" in table
    assert "Machine:" in table and "torch 2" in table


def test_run_all_reports_a_failing_benchmark(tmp_path, monkeypatch):
    """A script that fails is listed as failed and makes the runner exit 1, with the others still run."""
    fake = tmp_path / "bench_broken.py"
    fake.write_text("import sys\nprint('RESULT never mind')\nsys.exit(3)\n")
    run = run_all.run_one(fake, quick=True, timeout=60)
    assert run["status"] == "failed (exit 3)"
    assert run["results"] == ["never mind"]
    table = run_all.to_markdown([run], {"cpu": "x", "logical_cpus": 2, "torch_threads": 2, "platform": "p",
                                        "python": "3", "versions": {}, "load_average_1_5_15": [0, 0, 0],
                                        "git_commit": "c", "date_utc": "d"}, True, 1.0, 0.0)
    assert "| `bench_broken.py` | failed (exit 3) |" in table
