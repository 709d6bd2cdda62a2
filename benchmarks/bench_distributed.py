"""Many processes on one machine: training tokens per second of ``course-train translate`` on 1 and 2 CPU
processes (torchrun, DistributedDataParallel, gloo), the same global batch in both.

What it measures
- notebook 07's model and recipe (``course_lib.training.lessons.LESSON_07``: d_model 128, 4 heads,
  2 + 2 layers, BPE targets), trained by ``course-train translate`` for a fixed number of steps;
- three launches with the same global batch of 128 sentences per step: one process with one thread
  (batch 128), one process with two threads (batch 128), and two processes with one thread each
  (``torchrun --standalone --nproc_per_node 2``, batch 64 per process);
- target tokens per second of training (padding excluded), as the trainer measures it inside its loop
  (start-up, corpus, evaluation and checkpoints excluded); the headline is the ratio
  2 processes / 1 process.

What it means: on 2 cores the ideal ratio is 2. DDP adds one all-reduce of the gradients per step (about
0.5 M parameters, 2 MB of float32 over gloo's shared-memory path on one machine) and one small all-reduce of
the token count; on more cores (``--nproc_per_node N``) the compute per process shrinks as 1/N while the
all-reduce stays about the size of the model, so the ratio stays near N as long as a step's compute is
large against it (bigger batches, bigger models: the regime of a GPU server). A machine shared with other
jobs gives a lower ratio than an idle one; the results file says how busy it was.

Run::

    flock /tmp/bench.lock python benchmarks/bench_distributed.py           # 150 steps per launch
    flock /tmp/bench.lock python benchmarks/bench_distributed.py --quick   # 20 steps, a smaller corpus

Writes ``benchmarks/results/distributed.md`` (and ``distributed.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402  (benchmarks/ is not a package)

RESULTS = HERE / "results"
GLOBAL_BATCH = 128


def launch(processes: int, threads: int, steps: int, corpus: int, folder: Path) -> dict:
    """One ``course-train translate`` run; its result.json."""
    config = dict(steps=steps, batch_size=GLOBAL_BATCH // processes, n_train=corpus, n_valid=100, n_test=200,
                  eval_size=50, checkpoint_every=10_000)
    name = f"p{processes}t{threads}"
    (folder / f"{name}.json").write_text(json.dumps(config))
    command = ["-m", "course_lib.training.cli", "translate", "--config", str(folder / f"{name}.json"),
               "--out", str(folder / name), "--no-progress"]
    if processes > 1:
        command = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes), *command]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "COURSE_DEVICE": "cpu",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, *command], env=env, check=True, capture_output=True, text=True)
    return json.loads((folder / name / "result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 steps on a 4 000-sentence corpus")
    args = parser.parse_args()
    steps, corpus = (20, 4_000) if args.quick else (150, 40_000)
    busy = cpu_busy_share()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for processes, threads in ((1, 1), (2, 1), (1, 2)):
            runs[(processes, threads)] = launch(processes, threads, steps, corpus, Path(tmp))
    rate = {key: r["items_per_second"] for key, r in runs.items()}
    ratio = rate[(2, 1)] / rate[(1, 1)]
    info = machine_info()
    rows = "\n".join(f"| {p} | {t} | {GLOBAL_BATCH // p} | {runs[(p, t)]['items']:,} | "
                     f"{runs[(p, t)]['train_seconds']:.1f} | {rate[(p, t)]:,.0f} |" for p, t in runs)
    text = f"""# Many processes on one machine: `course-train translate` on 1 and 2 CPU processes

Notebook 07's model and recipe (d_model 128, 4 heads, 2 + 2 layers, BPE targets), {steps} steps, the same
global batch of {GLOBAL_BATCH} sentences per step in every launch, corpus of {corpus:,} numbers. Tokens are
target tokens (padding excluded) per second of the training loop (start-up and evaluation excluded).

| processes | threads each | batch per process | target tokens | seconds | tokens/s |
|---|---|---|---|---|---|
{rows}

**2 processes / 1 process (one thread each): {ratio:.2f}x** (ideal on 2 cores: 2). One process with two
threads: {rate[(1, 2)] / rate[(1, 1)]:.2f}x.

On N cores, N processes each compute 1/N of the batch and exchange one all-reduce of the gradients (the size
of the model) per step: the ratio stays near N while a step's compute is large against that exchange, and
falls below when the per-process batch gets small. The same command line scales to several GPUs or machines
(docs/scaling.md); only the launch changes.

{load_note(busy)}

{markdown_machine(info)}
"""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "distributed.md").write_text(text)
    (RESULTS / "distributed.json").write_text(json.dumps(
        {"steps": steps, "corpus": corpus, "global_batch": GLOBAL_BATCH, "busy_before": busy, "machine": info,
         "runs": {f"{p} processes x {t} threads": r for (p, t), r in runs.items()}, "ratio_2p_over_1p": ratio},
        indent=2) + "\n")
    print(f"RESULT distributed: 2 processes / 1 process = {ratio:.2f}x tokens/s ({rate[(1, 1)]:,.0f} -> "
          f"{rate[(2, 1)]:,.0f}); 1 process x 2 threads = {rate[(1, 2)] / rate[(1, 1)]:.2f}x")


if __name__ == "__main__":
    main()
