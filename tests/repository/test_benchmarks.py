"""The benchmark runner: it finds every benchmark, every benchmark takes ``--quick``, and one quick run goes
end to end. Timings themselves are not tested (they depend on the machine); see ``benchmarks/README.md``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
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


def test_lm_crossover_scores_windows_spread_over_the_whole_validation_text():
    """The validation windows are spread evenly over the text (not its first ones), joined with one target token;
    0 windows, or as many as the text holds, is the whole text."""
    import bench_lm_crossover

    stream = torch.arange(1001)
    picked = bench_lm_crossover.spread_windows(stream, 4, 100)
    assert picked.numel() == 4 * 100 + 1
    assert picked[::100][:4].tolist() == [0, 300, 600, 900] and int(picked[-1]) == 1000
    assert torch.equal(bench_lm_crossover.spread_windows(stream, 0, 100), stream)
    assert torch.equal(bench_lm_crossover.spread_windows(stream, 50, 100), stream)


def test_lm_crossover_tunes_the_ngram_on_held_out_training_documents_only():
    """The n-gram's order and discount come from a development split of the training documents: the validation
    text is never read by the tuning (a corpus whose validation documents would change the choice changes nothing)."""
    import argparse

    import bench_lm_crossover

    from course_lib.data.python_docs import ByteBPE, TextCorpus

    train = [f"def f{i}(x):\n    return x + {i % 7}\n" * 3 for i in range(40)]
    args = argparse.Namespace(dev_every=4, dev_windows=4, orders=[1, 2, 3], discounts=[0.5, 0.9])
    bpe = ByteBPE.train(train, vocab_size=300)
    results = [bench_lm_crossover.tuned_ngram(bpe, TextCorpus(train=train, valid=valid, train_names=[],
                                                              valid_names=[], source="test"), args)
               for valid in (["x = 1\n"], ["zzzz " * 500])]
    assert results[0] == results[1] and results[0]["dev_documents"] == 10
    tuning = results[0]
    best = min(p for row in tuning["dev_perplexity"].values() for p in row.values())
    assert tuning["dev_perplexity"][str(tuning["order"])][str(tuning["discount"])] == best
    assert set(tuning["discounts"]) == {1, 2, 3}


@pytest.mark.slow
def test_lm_crossover_quick_run_goes_end_to_end(tmp_path):
    """--quick: both texts, the tuned n-gram (chosen on the development split), two short GPT runs, a summary."""
    import json

    proc = subprocess.run([sys.executable, str(BENCH / "bench_lm_crossover.py"), "--quick", "--threads", "1",
                           "--out", str(tmp_path / "quick")], capture_output=True, text=True, cwd=ROOT,
                          timeout=1800, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads((tmp_path / "quick.json").read_text())
    for result in payload["results"]:
        tuning = result["ngram_tuning"]
        assert tuning["dev_tokens"] > 0 and str(tuning["order"]) in result["ngram"]
    final = [row for row in payload["summary"] if row["final"]]
    assert {row["best_ngram_order"] for row in final} == {r["ngram_tuning"]["order"] for r in payload["results"]}
    assert "chosen there" in (tmp_path / "quick.md").read_text()
