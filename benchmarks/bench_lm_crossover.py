"""Where the GPT overtakes the n-gram: validation perplexity as the training text and the time budget grow.

Notebook 10's GPT (``bench_lm.CONFIG``, ``bench_lm.TRAIN``) against the best interpolated Kneser-Ney order
(1 to 5) on two training texts, both offline and split by document without copies
(:func:`course_lib.data.python_docs.split_documents` drops every validation paragraph seen in training):

- ``manual``: Python's reference manual (:func:`course_lib.data.python_docs.python_docs_corpus`, ~0.47 M
  characters), the text notebook 10 trains on;
- ``manual+stdlib``: the manual and the running Python's standard-library source (every ``.py`` file under
  ``sysconfig``'s ``stdlib`` path outside test folders and ``site-packages``, identical files once; ~12 M
  characters under Python 3.11), documents named by their path.

For each text and seed, one run with a time budget (``--budgets``: 3 minutes on the manual, 15 on the larger
text): the learning rate warms up for ``TRAIN["warmup"]`` steps, then follows a cosine to 10 % *in training
time*, reaching its floor at the budget (so a run uses its whole budget with a finished schedule, whatever
the machine's speed). Validation perplexity is measured at the marks ``--marks`` (minutes of training; the
evaluations do not count towards the budget). A mark before the budget is a point along a longer run whose
rate has not decayed yet: a run planned for that shorter budget would end somewhat lower. Every model,
n-gram and GPT, scores the same validation tokens: the first ``--valid-windows`` windows of 128 tokens.

Each text gets its own byte-level BPE of 1024 tokens, trained on its training documents.

Target (issue 34): at the largest point (the larger text, 15 minutes on 2 cores) the GPT's median perplexity
over 3 seeds at most 0.9x the best n-gram's.

Usage (idle machine; about 55 minutes with the defaults)::

    flock /tmp/bench.lock python benchmarks/bench_lm_crossover.py
    python benchmarks/bench_lm_crossover.py --quick        # a functional check: seconds, not minutes

Writes ``benchmarks/results/lm_crossover.json`` (read by notebook 10) and ``lm_crossover.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_lm import CONFIG, SEQ_LEN, TRAIN, VOCAB_SIZE  # noqa: E402
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

from course_lib.data.python_docs import ByteBPE, TextCorpus, encode_documents, python_docs_corpus, split_documents  # noqa: E402
from course_lib.models.gpt import GPT  # noqa: E402
from course_lib.models.ngram import KneserNeyLM  # noqa: E402
from course_lib.runtime import set_seed  # noqa: E402
from course_lib.training.engine import make_adamw, train, warmup_cosine_factor  # noqa: E402
from course_lib.training.language_model import evaluate_perplexity, lm_batches, lm_step  # noqa: E402

TARGET_RATIO = 0.9
SKIPPED_FOLDERS = {"test", "tests", "idle_test", "site-packages"}


def stdlib_source_documents() -> tuple[list[str], list[str]]:
    """(names, texts) of the running Python's standard-library ``.py`` files, test folders and
    ``site-packages`` left out, each distinct text once (the first path in sorted order names it)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    names, texts, seen = [], [], set()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIPPED_FOLDERS & set(relative.parts):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest not in seen:
            seen.add(digest)
            names.append(f"Lib/{relative.as_posix()}")
            texts.append(text)
    return names, texts


def corpora(quick: bool) -> dict[str, TextCorpus]:
    """The two training texts, by name; ``quick`` takes a small slice of the source instead of all of it."""
    manual = python_docs_corpus()
    names, texts = stdlib_source_documents()
    if quick:
        names, texts = names[:40], texts[:40]
    source = split_documents(names, texts, "the standard library's source")
    larger = TextCorpus(train=[*manual.train, *source.train], valid=[*manual.valid, *source.valid],
                        train_names=[*manual.train_names, *source.train_names],
                        valid_names=[*manual.valid_names, *source.valid_names],
                        source=f"{manual.source} and {source.source}")
    return {"manual": manual, "manual+stdlib": larger}


class TimeCosine:
    """The learning-rate schedule in training time: a linear warm-up over ``warmup`` steps, then a cosine
    from the base rate to ``floor`` of it at ``budget`` seconds of training (``clock()``), constant after.
    It has the ``step()`` that :func:`course_lib.training.engine.train` calls after each optimizer step."""

    def __init__(self, optimizer: torch.optim.Optimizer, warmup: int, budget: float, clock, floor: float = 0.1):
        self.optimizer, self.warmup, self.budget, self.clock, self.floor = optimizer, warmup, budget, clock, floor
        self.base = [group["lr"] for group in optimizer.param_groups]
        self.steps = 0
        self._set(warmup_cosine_factor(0, warmup, 1, floor) if warmup else 1.0)

    def _set(self, factor: float) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base, strict=True):
            group["lr"] = base * factor

    def step(self) -> None:
        self.steps += 1
        if self.steps < self.warmup:
            self._set((self.steps + 1) / self.warmup)
            return
        progress = min(self.clock() / self.budget, 1.0)
        self._set(self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * progress)))


class BudgetMarks:
    """A :func:`~course_lib.training.engine.train` hook and a clock: training seconds without evaluations.

    At each mark (seconds of training) it records ``(mark, step, perplexity)`` in ``scores``; it stops
    training at the last mark. The time spent evaluating is taken off the clock."""

    def __init__(self, marks: list[float], evaluate):
        self.marks, self.evaluate, self.scores = sorted(marks), evaluate, []
        self.start, self.paused = time.perf_counter(), 0.0

    def clock(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def __call__(self, history, prediction) -> bool:
        while self.marks and self.clock() >= self.marks[0]:
            mark = self.marks.pop(0)
            began = time.perf_counter()
            self.scores.append((mark, history.steps, self.evaluate()))
            self.paused += time.perf_counter() - began
            print(f"  {mark / 60:.1f} min, step {history.steps}: perplexity {self.scores[-1][2]:.2f}", flush=True)
        return not self.marks


def gpt_run(seed: int, vocab_size: int, train_stream: torch.Tensor, scored: torch.Tensor,
            marks: list[float]) -> dict:
    """Train notebook 10's GPT for ``max(marks)`` seconds of training; the perplexity at every mark."""
    set_seed(seed)
    model: nn.Module = GPT(vocab_size, max_len=SEQ_LEN, **CONFIG)
    optimizer = make_adamw(model, TRAIN["lr"], 0.1, betas=(0.9, 0.95))  # as train_lm
    hook = BudgetMarks(marks, lambda: evaluate_perplexity(model, scored, SEQ_LEN))
    scheduler = TimeCosine(optimizer, TRAIN["warmup"], max(marks), hook.clock)
    batches = lm_batches(train_stream, TRAIN["batch_size"], SEQ_LEN, torch.Generator().manual_seed(seed))
    cpu0 = time.process_time()
    history = train(model, batches, 10**9, optimizer, scheduler, loss_fn=torch.nn.functional.cross_entropy,
                    device="cpu", clip_grad_norm=1.0, progress=False, step_fn=lm_step, hooks=[hook])
    return {"seed": seed, "steps": history.steps, "train_seconds": hook.clock(),
            "cpu_seconds": time.process_time() - cpu0,
            "marks": [{"minutes": m / 60, "step": s, "perplexity": p} for m, s, p in hook.scores]}


def measure_text(name: str, corpus: TextCorpus, args: argparse.Namespace, budget_minutes: float) -> dict:
    """Tokenise one text, score every n-gram order, and train the GPT once per seed."""
    began = time.perf_counter()
    bpe = ByteBPE.train(corpus.train, vocab_size=VOCAB_SIZE)
    train_stream, valid_stream = encode_documents(bpe, corpus.train), encode_documents(bpe, corpus.valid)
    windows = min(args.valid_windows, (valid_stream.numel() - 1) // SEQ_LEN)
    scored = valid_stream[: windows * SEQ_LEN + 1]  # (windows * seq_len + 1,): every model scores these
    ngram = {}
    for order in args.orders:
        ngram[order] = KneserNeyLM(train_stream, bpe.vocab_size, order).perplexity(scored)
        print(f"{name}: Kneser-Ney {order}-gram {ngram[order]:.2f}", flush=True)
    marks = sorted({m for m in args.marks if m < budget_minutes} | {budget_minutes})
    runs = []
    for seed in args.seeds:
        print(f"{name}: GPT seed {seed}, {budget_minutes} min", flush=True)
        runs.append(gpt_run(seed, bpe.vocab_size, train_stream, scored, [m * 60 for m in marks]))
    return {"text": name, "source": corpus.source, "train_documents": len(corpus.train),
            "train_characters": sum(map(len, corpus.train)), "train_tokens": int(train_stream.numel()),
            "valid_tokens_scored": int(scored.numel() - 1), "budget_minutes": budget_minutes,
            "ngram": {str(o): p for o, p in ngram.items()}, "gpt": runs,
            "setup_seconds": time.perf_counter() - began - sum(r["train_seconds"] for r in runs)}


def summary_rows(result: dict) -> list[dict]:
    """Per mark: the GPT's median over seeds, the best n-gram, their ratio."""
    best_order, best = min(result["ngram"].items(), key=lambda item: item[1])
    rows = []
    for i, mark in enumerate(result["gpt"][0]["marks"]):
        values = [run["marks"][i]["perplexity"] for run in result["gpt"] if len(run["marks"]) > i]
        median = statistics.median(values)
        rows.append({"text": result["text"], "minutes": mark["minutes"], "gpt_median": median,
                     "gpt_values": values, "best_ngram_order": int(best_order), "best_ngram": best,
                     "ratio": median / best, "final": i == len(result["gpt"][0]["marks"]) - 1})
    return rows


def markdown(results: list[dict], rows: list[dict], info: dict, busy: float, args: argparse.Namespace) -> str:
    lines = ["# Notebook 10's GPT against the best n-gram as text and time grow", "",
             markdown_machine(info), "", load_note(busy), "",
             f"Seeds {args.seeds}; GPT {CONFIG['num_layers']}x{CONFIG['d_model']} (notebook 10), batch "
             f"{TRAIN['batch_size']} x {SEQ_LEN} tokens, AdamW lr {TRAIN['lr']}, warm-up {TRAIN['warmup']} steps "
             "then a cosine in training time to 10 % at the budget. Command: `python benchmarks/"
             f"bench_lm_crossover.py {' '.join(sys.argv[1:])}`.", "",
             "| text | training tokens | validation tokens scored | " + " | ".join(f"{o}-gram" for o in args.orders)
             + " |", "|---|---|---|" + "---|" * len(args.orders)]
    for r in results:
        lines.append(f"| {r['text']} | {r['train_tokens']:,} | {r['valid_tokens_scored']:,} | "
                     + " | ".join(f"{r['ngram'][str(o)]:.2f}" for o in args.orders) + " |")
    lines += ["", "| text | minutes of training | GPT perplexity per seed | GPT median | best n-gram | ratio |",
              "|---|---|---|---|---|---|"]
    for row in rows:
        when = f"{row['minutes']:g}" + (" (budget)" if row["final"] else " (along the run)")
        lines.append(f"| {row['text']} | {when} | {', '.join(f'{v:.2f}' for v in row['gpt_values'])} | "
                     f"{row['gpt_median']:.2f} | {row['best_ngram']:.2f} ({row['best_ngram_order']}-gram) | "
                     f"{row['ratio']:.2f}x |")
    largest = [row for row in rows if row["final"]][-1]
    met = largest["ratio"] <= TARGET_RATIO
    steps = {r["text"]: [run["steps"] for run in r["gpt"]] for r in results}
    lines += ["", f"Steps per run: {steps}.", "",
              f"At the largest point ({largest['text']}, {largest['minutes']:g} min) the GPT's median is "
              f"{largest['ratio']:.2f}x the best n-gram (target <= {TARGET_RATIO}x): "
              f"**{'met' if met else 'not met'}** in this run.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budgets", type=float, nargs=2, default=[3.0, 15.0], metavar=("MANUAL", "LARGER"),
                        help="minutes of training per run on each text")
    parser.add_argument("--marks", type=float, nargs="+", default=[1.0, 3.0, 7.0],
                        help="also measure at these minutes of training (below the budget)")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--valid-windows", type=int, default=1024, help="validation windows of 128 tokens scored")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a functional check: tiny text slice, seconds of training")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lm_crossover")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.budgets, args.marks, args.valid_windows = args.seeds[:2], [0.1, 0.2], [0.05], 64
    torch.set_num_threads(args.threads)
    busy, info = cpu_busy_share(), machine_info()
    texts = corpora(args.quick)
    results = [measure_text(name, corpus, args, budget)
               for (name, corpus), budget in zip(texts.items(), args.budgets, strict=True)]
    rows = [row for result in results for row in summary_rows(result)]
    largest = [row for row in rows if row["final"]][-1]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"machine": info, "busy_before": busy, "command": sys.argv[1:], "target_ratio": TARGET_RATIO,
               "config": CONFIG, "train": TRAIN, "results": results, "summary": rows}
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(results, rows, info, busy, args), encoding="utf-8")
    print(f"RESULT lm_crossover: GPT / best n-gram {largest['ratio']:.2f} at {largest['text']}, "
          f"{largest['minutes']:g} min (target <= {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
