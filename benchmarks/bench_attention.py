"""Benchmark: the course's attention (explicit and fused paths) against F.scaled_dot_product_attention.

For each sequence length, times forward and forward+backward (median of repeats, after a warm-up) and measures
peak memory allocated by PyTorch during one call (replayed from the profiler's allocation events), for:

- ``explicit``: :func:`course_lib.models.attention.scaled_dot_product_attention` (writes the score matrix out);
- ``fused``: :func:`course_lib.models.attention.fused_attention` (the course's checks, then PyTorch's fused kernel);
- ``torch``: ``torch.nn.functional.scaled_dot_product_attention`` called directly.

Writes a Markdown table with the machine, versions and configuration (default
``benchmarks/results/attention.md``). Not a test: timings depend on the machine and its load. On a shared
machine run it under ``flock /tmp/bench.lock`` so that timing runs do not overlap::

    flock /tmp/bench.lock python benchmarks/bench_attention.py
    python benchmarks/bench_attention.py --quick        # a smoke run: short lengths, 2 repeats, no file
    python benchmarks/bench_attention.py --masked       # a causal (1, 1, n, n) mask, as the course's models pass
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from course_lib.models.attention import fused_attention, scaled_dot_product_attention

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from run_all import cpu_busy_share, cpu_model, load_note  # noqa: E402  (benchmarks/ is not a package)

PATHS: dict[str, Callable[..., torch.Tensor]] = {
    "explicit": lambda q, k, v, mask: scaled_dot_product_attention(q, k, v, mask)[0],
    "fused": lambda q, k, v, mask: fused_attention(q, k, v, mask),
    "torch": lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, mask),
}


def peak_memory_mib(run: Callable[[], object]) -> float:
    """Peak bytes allocated by PyTorch on the CPU while ``run()`` executes (MiB), from profiler events.

    Allocations and frees are replayed in time order: per-operator net allocations plus the frees recorded
    outside operators. Tensors alive before ``run()`` (the inputs) are not counted.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run()
    events = [e for e in prof.events() if e.name == "[memory]" or e.self_cpu_memory_usage != 0]
    events.sort(key=lambda e: e.time_range.start)
    current = peak = 0
    for e in events:
        current += e.cpu_memory_usage if e.name == "[memory]" else e.self_cpu_memory_usage
        peak = max(peak, current)
    return peak / 2**20


def _inputs(batch: int, heads: int, n: int, d_k: int, grad: bool, masked: bool = False) -> tuple:
    """Query, key, value ``(batch, heads, n, d_k)`` and the mask: None, or causal ``(1, 1, n, n)`` (``masked``)."""
    gen = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(batch, heads, n, d_k, generator=gen).requires_grad_(grad) for _ in range(3))
    return q, k, v, torch.ones(n, n, dtype=torch.bool).tril()[None, None] if masked else None


def _call(path: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          backward: bool) -> None:
    out = PATHS[path](q, k, v, mask)
    if backward:
        out.sum().backward()
        for t in (q, k, v):
            t.grad = None


def calls_per_sample(n: int) -> int:
    """Calls timed together in one sample: enough that a short call is not lost in the clock's and the loop's
    own cost (32 at n = 64, halving as n doubles, at least one)."""
    return max(1, 2048 // n)


def time_ms(n: int, backward: bool, args: argparse.Namespace) -> dict[str, float]:
    """Median wall time (ms) of one call for every path.

    Each repeat times every path once (``calls_per_sample(n)`` calls in a row, divided); the order of the
    paths rotates from one repeat to the next (explicit, fused, torch; fused, torch, explicit; ...), so that
    a burst of load from other jobs hits every path alike. Every sample starts with one untimed call of its
    own path: the rotation alone still put the fused path right after the explicit one in two repeats of
    three (the torch path in one), and a call that follows the explicit path's large score matrices finds
    the caches and the allocator cold (2-6 % slower at n = 256-512 in CPU time, measured beside other work).
    One warm-up sample each first.
    """
    q, k, v, mask = _inputs(args.batch, args.heads, n, args.d_k, backward, args.masked)
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    repeats = args.repeats if n <= 1024 else max(3, args.repeats // 2)
    calls = calls_per_sample(n)
    order = list(PATHS)
    with torch.enable_grad() if backward else torch.no_grad():
        for path in order:
            _call(path, q, k, v, mask, backward)  # warm-up
        for repeat in range(repeats):
            shift = repeat % len(order)
            for path in order[shift:] + order[:shift]:
                _call(path, q, k, v, mask, backward)  # untimed: what the previous path left is not charged here
                start = time.perf_counter()
                for _ in range(calls):
                    _call(path, q, k, v, mask, backward)
                times[path].append((time.perf_counter() - start) * 1e3 / calls)
    return {path: statistics.median(values) for path, values in times.items()}


def memory_mib(path: str, n: int, backward: bool, args: argparse.Namespace) -> float:
    q, k, v, mask = _inputs(args.batch, args.heads, n, args.d_k, backward, args.masked)
    ctx = torch.enable_grad() if backward else torch.no_grad()
    with ctx:
        return peak_memory_mib(lambda: _call(path, q, k, v, mask, backward))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--d-k", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7, help="timed calls per measurement (median)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: PyTorch's choice); 1 is steadier on a crowded machine")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attention.md")
    parser.add_argument("--quick", action="store_true", help="lengths 64 and 128, 2 repeats, print only")
    parser.add_argument("--masked", action="store_true",
                        help="pass a causal (1, 1, n, n) boolean mask to every path, as the course's models do")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.repeats, args.out = [64, 128], 2, None

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = cpu_busy_share()
    started = time.time()
    rows = []
    for n in args.lengths:
        row: dict[str, float] = {"n": n}
        for backward in (False, True):
            mode = "fwd+bwd" if backward else "fwd"
            for path, ms in time_ms(n, backward, args).items():
                row[f"{path} {mode} ms"] = ms
            for path in PATHS:
                row[f"{path} {mode} MiB"] = memory_mib(path, n, backward, args)
        rows.append(row)
        print(f"n={n:5d}  " + "  ".join(f"{key}={value:.2f}" for key, value in row.items() if key != "n"),
              flush=True)
    elapsed = time.time() - started

    lines = [
        "# Attention benchmark: explicit vs fused vs `F.scaled_dot_product_attention`",
        "",
        f"Generated by `benchmarks/bench_attention.py` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC "
        f"in {elapsed:.0f} s.",
        "",
        f"{load_note(load_before)} Times are **medians** of {args.repeats} samples "
        f"({max(3, args.repeats // 2)} for lengths above 1024) after one warm-up call; a sample times "
        f"{calls_per_sample(64)} calls in a row at n = 64 (2048 / n, at least one) and divides, after one untimed "
        "call of the same path (so that the caches left cold by the explicit path are charged to no one). The "
        "three paths are timed in turn within each repeat, in an order that rotates from one repeat to the "
        "next, so that bursts of load hit them alike; compare the ratios more than the absolute numbers.",
        "",
        "| | |",
        "|---|---|",
        f"| machine | {cpu_model()}, {os.cpu_count()} logical CPUs, torch threads {torch.get_num_threads()} |",
        f"| software | Python {platform.python_version()}, torch {torch.__version__}, {platform.system()} "
        f"{platform.release()} |",
        f"| configuration | float32, batch {args.batch}, heads {args.heads}, d_k = d_v = {args.d_k}, "
        f"{'a causal (1, 1, n, n) mask' if args.masked else 'no mask'}, "
        "self-attention (seq_q = seq_k = n) |",
        "| explicit | `course_lib.models.attention.scaled_dot_product_attention` (scores and weights written out) |",
        "| fused | `course_lib.models.attention.fused_attention` (input checks, `F.scaled_dot_product_attention`, then "
        "a finiteness test of the query and the output below 16 keys only) |",
        "| torch | `F.scaled_dot_product_attention` called directly |",
        "| memory | peak bytes allocated by PyTorch during one call (inputs excluded), replayed from "
        "`torch.profiler` allocation events |",
        "",
    ]
    for mode in ("fwd", "fwd+bwd"):
        title = "forward" if mode == "fwd" else "forward + backward"
        lines += [
            f"## {title}",
            "",
            "| n | explicit ms | fused ms | torch ms | explicit / torch | fused / torch | "
            "explicit MiB | fused MiB | torch MiB |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            e, f, t = (r[f"{p} {mode} ms"] for p in PATHS)
            em, fm, tm = (r[f"{p} {mode} MiB"] for p in PATHS)
            lines.append(f"| {r['n']} | {e:.2f} | {f:.2f} | {t:.2f} | {e / t:.2f}x | {f / t:.2f}x | "
                         f"{em:.1f} | {fm:.1f} | {tm:.1f} |")
        lines.append("")
    ratios = [r["fused fwd+bwd ms"] / r["torch fwd+bwd ms"] for r in rows] + \
             [r["fused fwd ms"] / r["torch fwd ms"] for r in rows]
    big = [r for r in rows if r["n"] >= 512]
    lines += [
        "## Reading",
        "",
        f"- fused / torch time ratio: median {statistics.median(ratios):.3f}x, largest {max(ratios):.3f}x over all "
        f"lengths and both modes (target: within 1.05x at every length). The course's fused path adds shape "
        "checks on Python ints to PyTorch's kernel (a couple of microseconds; one lookup for shapes it has seen), "
        "and a finiteness test (a sum of the query and of the output) only below 16 keys, where the kernel alone "
        "could zero a NaN query's row; none of it runs at this table's lengths"
        + (", mask or not." if args.masked else "."),
    ]
    if big:
        last = big[-1]
        lines.append(
            f"- at n = {last['n']}, forward + backward: explicit is "
            f"{last['explicit fwd+bwd ms'] / last['torch fwd+bwd ms']:.1f}x "
            f"slower than the fused kernel and allocates {last['explicit fwd+bwd MiB']:.0f} MiB against "
            f"{last['torch fwd+bwd MiB']:.0f} MiB.")
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        lines.append(
            f"- memory growth from n = {a['n']} to {b['n']}: "
            f"explicit x{b['explicit fwd+bwd MiB'] / a['explicit fwd+bwd MiB']:.1f}, "
            f"fused x{b['fused fwd+bwd MiB'] / a['fused fwd+bwd MiB']:.1f} (quadratic vs linear: the explicit path "
            "stores the (batch, heads, n, n) score and weight matrices, the fused kernel never does).")
    lines.append("")
    text = "\n".join(lines)
    if args.out is None:
        print(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
