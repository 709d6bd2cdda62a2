"""PyTorch CPU threads for the notebooks' training loops: step time with 1, 2 and all threads.

Four loops, as the notebooks run them:

- ``vit``: one training step of notebook 08's Vision Transformer (8x8 digits, 4x4 patches, d_model 64, 2
  layers, batch 128, AdamW), on random images of the same shape;
- ``toy``: one step of notebook 02's neighbour reader (one ``MultiHeadAttention``, d_model 16, 2 heads, an MLP
  readout, batch 64, Adam);
- ``gpt``: one step of notebook 11's language model (byte-level BPE of 1024, d_model 128, 4 heads, 4 layers,
  GELU (tanh), no dropout, 16 windows of 128 tokens, AdamW), on random tokens: the larger kind of model for
  which notebooks 07, 11 and 12 measure whether to use one thread or two (``get_device(threads="measure")``);
- ``gpt_dropout``: the same with dropout 0.1 (on the embeddings, the attention weights, the feed-forward
  hidden layer and both residual branches, as ``nn.TransformerEncoderLayer`` places it): what dropout's
  random numbers cost on a CPU, the reason notebook 11 trains without it.

``--busy`` keeps one logical CPU busy with a spinning process while measuring (a machine shared with other
work) and writes ``threads_busy.md``; without it the results go to ``threads.md``.

One more configuration, ``probe``, starts by measuring the threads to use
(``course_lib.runtime.measure_threads``, as ``get_device(threads="measure")`` in notebooks 07, 11 and 12)
and trains with its choice; the table gives its choices and its step time against the best fixed count.

Each configuration runs in a fresh interpreter with ``torch.set_num_threads(n)`` (as
``course_lib.runtime.configure_threads`` would set it), warms up, then times steps; configurations alternate
(1, 2, all, probe, 1, 2, ...) so that a change in the machine's load hits them alike. The median step time is
reported with the 1-minute load average and the CPU share busy before the run: on a shared machine the
figures are an upper bound, and the point is the ratio between thread counts measured side by side.

Run::

    flock /tmp/bench.lock python benchmarks/bench_threads.py            # 3 rounds x 40 steps
    python benchmarks/bench_threads.py --quick                          # 1 round x 10 steps
    flock /tmp/bench.lock python benchmarks/bench_threads.py --busy     # with one CPU kept busy

Writes ``benchmarks/results/threads.md`` and ``threads.json`` (``threads_busy.*`` with ``--busy``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

CHILD = r"""
import json, sys, time
import torch
import torch.nn.functional as F
from torch import nn
threads, loop, n_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if threads == "probe":  # as a notebook starts: get_device(threads="measure")
    from course_lib.runtime import measure_threads
    threads = measure_threads().threads
torch.set_num_threads(int(threads))
torch.manual_seed(0)
if loop == "vit":
    from course_lib.models.vit import VisionTransformer
    from course_lib.training.lessons import LESSON_08
    model, recipe = VisionTransformer(**LESSON_08.model), LESSON_08.train  # notebook 08's ViT and recipe
    opt = torch.optim.AdamW(model.parameters(), lr=recipe["lr"], weight_decay=recipe["weight_decay"])
    def batch():
        return torch.rand(recipe["batch_size"], 1, 8, 8), torch.randint(0, 10, (recipe["batch_size"],))
    def loss_of(x, y):
        return F.cross_entropy(model(x), y, label_smoothing=recipe["label_smoothing"])
elif loop in ("gpt", "gpt_dropout"):
    from course_lib.models.gpt import GPT
    from course_lib.training.lessons import LESSON_11
    model = GPT(LESSON_11.train["vocab_size"], max_len=LESSON_11.train["seq_len"],  # notebook 11's GPT
                **{**LESSON_11.model, "dropout": 0.1 if loop == "gpt_dropout" else 0.0})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    def batch():
        tokens = torch.randint(0, 1024, (16, 129))
        return tokens[:, :-1], tokens[:, 1:]
    def loss_of(x, y):
        return F.cross_entropy(model(x).reshape(-1, 1024), y.reshape(-1))
else:
    from course_lib.models.attention import MultiHeadAttention
    class Reader(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = MultiHeadAttention(16, 2)
            self.readout = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 16))
        def forward(self, x):
            out, _ = self.attention(x, x, x, need_weights=True)
            return self.readout(out).view(x.shape[0], 8, 2, 8)[:, 1:-1]
    model = Reader()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    def batch():
        words = torch.randint(0, 8, (64, 8))
        x = torch.cat([torch.eye(8).expand(64, 8, 8), F.one_hot(words, 8).float()], dim=2)
        return x, torch.stack([words[:, :-2], words[:, 2:]], dim=2)
    def loss_of(x, y):
        return F.cross_entropy(model(x).reshape(-1, 8), y.reshape(-1))
times = []
for i in range(n_steps + 5):
    x, y = batch()
    start = time.perf_counter()
    loss = loss_of(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i >= 5:  # warm-up steps are not timed
        times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "threads": torch.get_num_threads()}))
"""


def run(threads: int | str, loop: str, n_steps: int) -> tuple[list[float], int]:
    """Step times of one configuration in a fresh interpreter, and the threads it used (``"probe"``: the
    count :func:`course_lib.runtime.measure_threads` chose at its start)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("COURSE_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(threads), loop, str(n_steps)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=900, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["times"], result["threads"]


def _label(n: int | str) -> str:
    return "probe" if n == "probe" else f"{n} thread{'s' if n > 1 else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 10 steps")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--busy", action="store_true", help="keep one logical CPU busy while measuring")
    parser.add_argument("--out", default=None, help="the results' file stem (default threads, threads_busy)")
    parser.add_argument("--loops", nargs="+", default=["vit", "toy", "gpt", "gpt_dropout"],
                        choices=["vit", "toy", "gpt", "gpt_dropout"])
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    n_steps = args.steps or (10 if args.quick else 40)
    all_threads = os.cpu_count() or 1
    counts: list[int | str] = [*sorted({1, 2, all_threads}), "probe"]
    busy = cpu_busy_share(1.0)
    samples: dict[str, dict[int | str, list[float]]] = {loop: {n: [] for n in counts} for loop in args.loops}
    chosen: dict[str, list[int]] = {loop: [] for loop in args.loops}  # the probe's choice, per run
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        for _ in range(rounds):
            for loop in samples:
                for n in counts:
                    times, used = run(n, loop, n_steps)
                    samples[loop][n] += times
                    if n == "probe":
                        chosen[loop].append(used)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    medians = {loop: {n: statistics.median(v) * 1000 for n, v in by.items()} for loop, by in samples.items()}
    note, info = load_note(busy), machine_info()
    if args.busy:  # the load was read before the spinning process started
        note = "Before the spinning process started: " + note[0].lower() + note[1:]
    stem = args.out or ("threads_busy" if args.busy else "threads")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"median_ms": medians, "probe_threads": chosen, "rounds": rounds, "steps": n_steps, "busy_share": busy,
         "spinner": args.busy, "machine": info}, indent=1))
    condition = (" One logical CPU was kept busy by a spinning process during every measurement (`--busy`)."
                 if args.busy else "")
    lines = ["# CPU threads for the notebooks' training loops" + (", one CPU busy" if args.busy else ""), "",
             f"Median step time in ms ({rounds} round(s) x {n_steps} steps per configuration, each in a fresh "
             f"interpreter, configurations alternating).{condition}", "",
             "| loop | " + " | ".join(_label(n) for n in counts) + " | probe chose | probe against the best "
             "fixed count |", "|---|" + "---|" * (len(counts) + 2)]
    for loop, by in medians.items():
        best = min(by[n] for n in counts if n != "probe")
        lines.append(f"| {loop} | " + " | ".join(f"{by[n]:.1f}" for n in counts) + f" | "
                     f"{', '.join(map(str, chosen[loop]))} | {by['probe'] / best:.2f}x |")
    target = ("Target: the probe's step at most 1.10x one thread's." if args.busy else
              "Target: the probe's step no slower than two threads' (today's default of notebooks 07, 11, 12).")
    lines += ["", "`probe`: each run starts with `course_lib.runtime.measure_threads()` (what "
              "`get_device(threads=\"measure\")` does) and trains with the count it chose. " + target, "",
              note, "", markdown_machine(info), ""]
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    for loop, by in medians.items():
        print(f"RESULT {loop} step ms: " + ", ".join(f"{_label(n)} {by[n]:.1f}" for n in counts)
              + f"; probe chose {chosen[loop]}")
    print(f"RESULT load: {note}")


if __name__ == "__main__":
    main()
