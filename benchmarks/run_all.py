"""Run every benchmark of the course with one command and write ``benchmarks/results/README.md``.

Discovers ``benchmarks/bench_*.py`` and runs each in a subprocess of this interpreter, one after the other
(never two timing runs at once), passing ``--quick`` through when asked. Each script writes its own
results file(s) in ``benchmarks/results/``; this runner records which files each script wrote, its exit
status, its wall time and the lines it printed that start with ``RESULT``, and writes one table with the
machine, the versions and the configuration.

Usage (on a shared machine take the benchmark lock, so that no other timing run overlaps)::

    flock /tmp/bench.lock python benchmarks/run_all.py            # full configurations
    flock /tmp/bench.lock python benchmarks/run_all.py --quick    # smaller configurations
    python benchmarks/run_all.py --only training_throughput notebooks      # a subset (names without bench_)

Exit status 1 when any benchmark failed (the table still lists the others).

The helpers :func:`machine_info`, :func:`markdown_machine`, :func:`cpu_model`, :func:`load_average`,
:func:`cpu_busy_share` and :func:`load_note` are shared with the benchmark scripts.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
ROOT = HERE.parent

PACKAGES = ("torch", "numpy", "nbclient", "sacrebleu", "tokenizers", "scikit-learn", "matplotlib")


def cpu_model() -> str:
    """The processor's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15-minute load averages (NaN where the system does not report them)."""
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


IDLE_BUSY = 0.10  # below this share of all CPUs busy just before a run, no other job was using the machine


def cpu_busy_share(seconds: float = 1.0) -> float:
    """Share of all CPUs (0 to 1) that were busy during ``seconds``, read from /proc/stat (NaN elsewhere).

    Taken *before* a benchmark starts, while this process sleeps, it measures the other jobs on the machine.
    The load average cannot do this: it is a decaying mean over minutes, so it still shows the previous
    benchmark of the same run for a minute after that benchmark ended.
    """
    def snapshot() -> tuple[int, int] | None:
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields[:8]), idle  # user nice system idle iowait irq softirq steal

    first = snapshot()
    time.sleep(seconds)
    second = snapshot()
    if first is None or second is None or second[0] == first[0]:
        return float("nan")
    total, idle = second[0] - first[0], second[1] - first[1]
    return max(0.0, min(1.0, 1 - idle / total))


def load_note(busy_before: float) -> str:
    """One sentence for a results file: was the machine idle or shared when the run started?

    ``busy_before`` is :func:`cpu_busy_share` read right before the run, so the sentence is measured, not
    assumed.
    """
    if busy_before != busy_before:  # NaN: no /proc/stat on this system
        return "Whether other jobs were running could not be measured on this system."
    if busy_before < IDLE_BUSY:
        return (f"Measured on an otherwise idle machine ({busy_before:.0%} of the {os.cpu_count()} logical CPUs "
                "busy in the second before the run).")
    return (f"Measured on a shared, noisy machine: other jobs were running ({busy_before:.0%} of the "
            f"{os.cpu_count()} logical CPUs busy in the second before the run), so times are upper bounds; "
            "ratios measured side by side in one run are more trustworthy than absolute times.")


def machine_info() -> dict:
    """The machine, the software versions and the load: what a reader needs to compare numbers."""
    import torch  # imported here so that ``run_all`` itself starts fast

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    load = load_average()
    return {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "load_average_1_5_15": [round(x, 2) for x in load],
        "git_commit": _git_commit(),
    }


def markdown_machine(info: dict) -> str:
    """A short markdown paragraph describing ``info`` (from :func:`machine_info`)."""
    versions = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    load = ", ".join(f"{x:.2f}" for x in info["load_average_1_5_15"])
    return (f"Machine: {info['cpu']}, {info['logical_cpus']} logical CPUs, torch threads "
            f"{info['torch_threads']}; {info['platform']}; Python {info['python']}; {versions}. "
            f"Load average (1/5/15 min) when written: {load}. Commit {info['git_commit']}, {info['date_utc']}.")


def discover(only: list[str] | None = None) -> list[Path]:
    """The benchmark scripts ``bench_*.py`` (sorted), optionally only those named in ``only``."""
    scripts = sorted(HERE.glob("bench_*.py"))
    if only:
        wanted = {name.removeprefix("bench_").removesuffix(".py") for name in only}
        unknown = wanted - {s.stem.removeprefix("bench_") for s in scripts}
        if unknown:
            raise SystemExit(f"run_all: no benchmark called {sorted(unknown)}; found "
                             f"{[s.stem.removeprefix('bench_') for s in scripts]}")
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in wanted]
    return scripts


def _result_files() -> dict[Path, float]:
    return {p: p.stat().st_mtime for p in RESULTS.glob("*") if p.is_file() and p.name != "README.md"}


def run_one(script: Path, quick: bool, timeout: float | None) -> dict:
    """Run one benchmark script in a subprocess; return what happened."""
    before = _result_files()
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    print(f"\n=== {script.name} {'--quick' if quick else ''}", flush=True)
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
        stdout, stderr = proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        status = f"timed out after {timeout:.0f} s"
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        stderr = err.stderr.decode() if isinstance(err.stderr, bytes) else (err.stderr or "")
    seconds = time.perf_counter() - start
    sys.stdout.write(stdout)
    if status != "ok":
        sys.stdout.write(stderr[-3000:])
    after = _result_files()
    written = sorted(p.name for p, mtime in after.items() if before.get(p) != mtime)
    results = [line.removeprefix("RESULT").strip() for line in stdout.splitlines() if line.startswith("RESULT")]
    print(f"=== {script.name}: {status} in {seconds:.0f} s; wrote {written}", flush=True)
    return {"script": script.name, "status": status, "seconds": seconds, "written": written, "results": results,
            "error_tail": "" if status == "ok" else stderr.strip().splitlines()[-1:] }


def to_markdown(runs: list[dict], info: dict, quick: bool, total: float,
                load_before: float) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Written by `python benchmarks/run_all.py{' --quick' if quick else ''}` "
        f"({'quick' if quick else 'full'} configurations) in {total / 60:.1f} min. Each script's own file "
        "holds its configuration and every repeat; medians of repeats are quoted.",
        "",
        load_note(load_before),
        "",
        markdown_machine(info),
        "",
        "| benchmark | status | wall time | results files | headline |",
        "|---|---|---|---|---|",
    ]
    for run in runs:
        files = ", ".join(f"[{name}]({name})" for name in run["written"]) or "none"
        headline = "<br>".join(run["results"]) or (" ".join(run["error_tail"]) or "see its file")
        lines.append(f"| `{run['script']}` | {run['status']} | {run['seconds']:.0f} s | {files} | "
                     f"{headline.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run every benchmark of the course, one after the other.")
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these (e.g. training_throughput notebooks)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds allowed per benchmark")
    parser.add_argument("--out", type=Path, default=RESULTS / "README.md", help="where to write the summary table")
    args = parser.parse_args(argv)
    scripts = discover(args.only)
    if not scripts:
        raise SystemExit("run_all: no benchmarks/bench_*.py found")
    RESULTS.mkdir(exist_ok=True)
    load_before = cpu_busy_share()
    start = time.perf_counter()
    runs = [run_one(script, args.quick, args.timeout) for script in scripts]
    total = time.perf_counter() - start
    args.out.write_text(to_markdown(runs, machine_info(), args.quick, total, load_before))
    print(f"\nwrote {args.out}")
    failed = [run["script"] for run in runs if run["status"] != "ok"]
    if failed:
        print(f"FAILED: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
