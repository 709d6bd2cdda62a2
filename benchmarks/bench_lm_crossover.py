"""Where the GPT overtakes the n-gram: validation perplexity as the training text and the time budget grow.

Notebook 11's GPT (``bench_lm.CONFIG``, ``bench_lm.TRAIN``) against interpolated Kneser-Ney whose order (1 to 7)
and discount are chosen on held-out text (a development split of the training documents, every ``--dev-every``-th
one, never the validation text), on two training texts, both offline and split by document without copies
(:func:`course_lib.data.python_docs.split_documents` drops every validation paragraph seen in training):

- ``manual``: Python's reference manual (:func:`course_lib.data.python_docs.python_docs_corpus`, ~0.47 M
  characters), the text notebook 11 trains on;
- ``manual+stdlib``: the manual and the running Python's standard-library source (every ``.py`` file under
  ``sysconfig``'s ``stdlib`` path outside test folders and ``site-packages``, identical files once; ~12 M
  characters under Python 3.11), documents named by their path.

For each text and seed, one run of a fixed number of steps (``--steps``: 1400 on the manual, 7000 on the
larger text) with ``train_lm``, notebook 11's trainer (warm-up, then a cosine to 10 % at the last step); the
validation perplexity is measured ``--evaluations`` times along the run. Every model, n-gram and GPT, scores
the same validation tokens: the whole validation text (``--valid-windows 0``, the default), or that many windows
of 128 tokens spread evenly over it (not its first ones: the validation documents are in order, and the first
fifth of the larger text's is mostly one file). Each text gets its own
byte-level BPE of 1024 tokens, trained on its training documents. A point before the last step lies along a
longer run whose rate has not decayed yet: a run planned for that shorter budget would end somewhat lower.

**Budgets are steps, converted to minutes by an idle measurement.** A run's perplexity depends on its steps
and seed, not on how fast the machine ran them (thread counts change only the order of floating-point sums),
so the runs may execute anywhere, in parallel, one thread each; then ``--combine`` merges the per-seed files
and measures, on the idle machine, how many steps per second notebook 11's GPT trains with 2 threads on each
text (``--calibrate`` seconds), which turns every step count into minutes on 2 idle cores. The defaults are
about 3 and 15 minutes on the machine the results were measured on (the combined file says how many).

Target (issue 34): at the largest point (the larger text, about 15 minutes on 2 cores) the GPT's median
perplexity over 3 seeds at most 0.9x the best n-gram's.

Usage::

    for seed in 0 1 2; do python benchmarks/bench_lm_crossover.py --seeds $seed --threads 1 \
        --out /tmp/lmx/seed$seed & done; wait                       # the runs (about 25 CPU-minutes each)
    flock /tmp/bench.lock python benchmarks/bench_lm_crossover.py --combine /tmp/lmx/seed*.json  # idle
    # or calibrate in any idle moment, and combine later anywhere:
    flock /tmp/bench.lock python benchmarks/bench_lm_crossover.py --calibrate-only --out /tmp/lmx/rates
    python benchmarks/bench_lm_crossover.py --combine /tmp/lmx/seed*.json --rates /tmp/lmx/rates.rates.json
    python benchmarks/bench_lm_crossover.py --quick --out /tmp/lmx/quick   # a functional check: seconds

Writes ``benchmarks/results/lm_crossover.json`` (read by notebook 11) and ``lm_crossover.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_lm import CONFIG, SEQ_LEN, TRAIN, VOCAB_SIZE  # noqa: E402
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

from course_lib.data.python_docs import ByteBPE, TextCorpus, encode_documents, python_docs_corpus, split_documents  # noqa: E402
from course_lib.models.gpt import GPT  # noqa: E402
from course_lib.models.ngram import KneserNeyLM, tune_kneser_ney  # noqa: E402
from course_lib.runtime import set_seed  # noqa: E402
from course_lib.training.language_model import evaluate_perplexity, train_lm  # noqa: E402

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


def gpt_run(seed: int, vocab_size: int, train_stream: torch.Tensor, scored: torch.Tensor, steps: int,
            evaluations: int) -> dict:
    """Train notebook 11's GPT for ``steps`` steps with ``train_lm`` (its warm-up and cosine over ``steps``);
    the validation perplexity ``evaluations`` times along the run, the last at the end."""
    set_seed(seed)
    model = GPT(vocab_size, max_len=SEQ_LEN, **CONFIG)
    cpu0 = time.process_time()
    history = train_lm(model, train_stream, steps=steps, seed=seed, valid_stream=scored,
                       eval_every=max(1, steps // evaluations), progress=False, **TRAIN)
    marks = [{"step": step, "perplexity": ppl} for step, ppl in history.valid]
    if not marks or marks[-1]["step"] != history.steps:
        marks.append({"step": history.steps, "perplexity": evaluate_perplexity(model, scored, SEQ_LEN)})
    return {"seed": seed, "steps": history.steps, "wall_seconds": history.seconds,
            "cpu_seconds": time.process_time() - cpu0, "marks": marks}


def step_rate(vocab_size: int, train_stream: torch.Tensor, seconds: float, warmup_steps: int = 10) -> float:
    """Training steps per second of notebook 11's GPT on this machine now (a fresh model, ``seconds`` of
    training after ``warmup_steps`` steps that are not counted)."""
    set_seed(0)
    model = GPT(vocab_size, max_len=SEQ_LEN, **CONFIG)
    train_lm(model, train_stream, steps=warmup_steps, progress=False, **TRAIN)
    history = train_lm(model, train_stream, steps=10**9, max_seconds=seconds, progress=False, **TRAIN)
    return history.steps / history.seconds


def spread_windows(stream: torch.Tensor, windows: int, length: int) -> torch.Tensor:
    """``windows`` windows of ``length`` tokens spread evenly over ``stream``, joined (with one more token so
    that the last window has its target); the whole stream when ``windows`` is 0 or covers it."""
    available = (stream.numel() - 1) // length
    if windows <= 0 or windows >= available:
        return stream
    starts = torch.linspace(0, (available - 1) * length, windows).long()  # (windows,): evenly spaced
    pieces = [stream[start:start + length] for start in starts.tolist()]
    return torch.cat([*pieces, stream[int(starts[-1]) + length:][:1]])  # (windows * length + 1,)


def prepared(corpus: TextCorpus, valid_windows: int) -> tuple[ByteBPE, torch.Tensor, torch.Tensor]:
    """A text's BPE, its training stream and the validation tokens every model scores."""
    bpe = ByteBPE.train(corpus.train, vocab_size=VOCAB_SIZE)
    train_stream, valid_stream = encode_documents(bpe, corpus.train), encode_documents(bpe, corpus.valid)
    return bpe, train_stream, spread_windows(valid_stream, valid_windows, SEQ_LEN)


def tuned_ngram(bpe: ByteBPE, corpus: TextCorpus, args: argparse.Namespace) -> dict:
    """Kneser-Ney's order and discount chosen on a development split of the TRAINING documents (every
    ``dev_every``-th held out, the others counted; at most ``dev_windows`` windows of the held-out text scored),
    never on the validation text the benchmark reports: per order its best discount, and the best order."""
    held_out = [doc for i, doc in enumerate(corpus.train) if i % args.dev_every == args.dev_every - 1]
    fit = [doc for i, doc in enumerate(corpus.train) if i % args.dev_every != args.dev_every - 1]
    dev = spread_windows(encode_documents(bpe, held_out), args.dev_windows, SEQ_LEN)
    tuning = tune_kneser_ney(encode_documents(bpe, fit), dev, bpe.vocab_size, tuple(args.orders),
                             tuple(args.discounts))
    discounts = {order: min(row, key=row.get) for order, row in tuning.dev_perplexity.items()}
    return {"order": tuning.order, "discount": tuning.discount, "discounts": discounts,
            "dev_tokens": int(dev.numel() - 1), "dev_documents": len(held_out),
            "dev_perplexity": {str(o): {str(d): p for d, p in row.items()} for o, row in tuning.dev_perplexity.items()}}


def measure_text(name: str, corpus: TextCorpus, args: argparse.Namespace, steps: int, evaluations: int) -> dict:
    """Tokenise one text, score every n-gram order, and train the GPT once per seed."""
    bpe, train_stream, scored = prepared(corpus, args.valid_windows)
    tuning = tuned_ngram(bpe, corpus, args)
    print(f"{name}: Kneser-Ney chosen on {tuning['dev_tokens']:,} development tokens: order {tuning['order']}, "
          f"discount {tuning['discount']}", flush=True)
    ngram = {}
    for order in args.orders:
        ngram[order] = KneserNeyLM(train_stream, bpe.vocab_size, order,
                                   tuning["discounts"][order]).perplexity(scored)
        print(f"{name}: Kneser-Ney {order}-gram (discount {tuning['discounts'][order]}) {ngram[order]:.2f}",
              flush=True)
    runs = []
    for seed in args.seeds:
        print(f"{name}: GPT seed {seed}, {steps} steps", flush=True)
        runs.append(gpt_run(seed, bpe.vocab_size, train_stream, scored, steps, evaluations))
        print(f"  {runs[-1]['marks']}", flush=True)
    return {"text": name, "source": corpus.source, "train_documents": len(corpus.train),
            "train_characters": sum(map(len, corpus.train)), "train_tokens": int(train_stream.numel()),
            "valid_tokens_scored": int(scored.numel() - 1), "steps": steps,
            "ngram": {str(o): p for o, p in ngram.items()},
            "ngram_tuning": {**tuning, "discounts": {str(o): d for o, d in tuning["discounts"].items()}},
            "gpt": runs}


def combine(parts: list[dict]) -> list[dict]:
    """One result per text from per-seed files; the n-grams must agree (they are deterministic)."""
    results = []
    for i, first in enumerate(parts[0]["results"]):
        others = [part["results"][i] for part in parts[1:]]
        for other in others:
            if other["text"] != first["text"] or other["ngram"] != first["ngram"] or other["steps"] != first["steps"]:
                raise SystemExit(f"--combine: the files disagree on {first['text']} (text, n-grams or steps)")
        results.append({**first, "gpt": sorted((run for r in [first, *others] for run in r["gpt"]),
                                              key=lambda run: run["seed"])})
    return results


def summary_rows(result: dict) -> list[dict]:
    """Per evaluation step: the GPT's median over seeds, the best n-gram, their ratio, minutes on 2 idle cores."""
    if "ngram_tuning" in result:  # the order chosen on the development split, not on the scored text
        best_order = str(result["ngram_tuning"]["order"])
        best = result["ngram"][best_order]
    else:  # a file from before the tuning: the best order on the scored text
        best_order, best = min(result["ngram"].items(), key=lambda item: item[1])
    rows = []
    marks = result["gpt"][0]["marks"]
    for i, mark in enumerate(marks):
        values = [run["marks"][i]["perplexity"] for run in result["gpt"]]
        median = statistics.median(values)
        rows.append({"text": result["text"], "step": mark["step"],
                     "minutes": mark["step"] / result["steps_per_second"] / 60, "gpt_median": median,
                     "gpt_values": values, "best_ngram_order": int(best_order), "best_ngram": best,
                     "ratio": median / best, "final": i == len(marks) - 1})
    return rows


def markdown(payload: dict) -> str:
    results, rows, orders = payload["results"], payload["summary"], list(payload["results"][0]["ngram"])
    seeds = [run["seed"] for run in results[0]["gpt"]]
    lines = ["# Notebook 11's GPT against the best n-gram as text and time grow", "",
             "Calibration (steps per second with 2 threads):", "", markdown_machine(payload["machine"]), "",
             load_note(payload["busy_before"]), "",
             f"Seeds {seeds}; GPT {CONFIG['num_layers']}x{CONFIG['d_model']} (notebook 11), batch "
             f"{TRAIN['batch_size']} x {SEQ_LEN} tokens, AdamW lr {TRAIN['lr']}, warm-up {TRAIN['warmup']} steps then "
             "a cosine to 10 % at the last step (`train_lm`). The runs: " + payload["runs_note"], "",
             "| text | training tokens | validation tokens scored | steps per s (2 idle cores) | "
             + " | ".join(f"{o}-gram" for o in orders) + " |", "|---|---|---|---|" + "---|" * len(orders)]
    for r in results:
        lines.append(f"| {r['text']} | {r['train_tokens']:,} | {r['valid_tokens_scored']:,} | "
                     f"{r['steps_per_second']:.2f} | " + " | ".join(f"{r['ngram'][o]:.2f}" for o in orders) + " |")
    for r in results:
        tuning = r.get("ngram_tuning")
        if tuning:
            lines += ["", f"{r['text']}: each order's discount chosen on {tuning['dev_tokens']:,} tokens of "
                      f"{tuning['dev_documents']} held-out training documents ("
                      + ", ".join(f"{o}-gram {d}" for o, d in tuning["discounts"].items())
                      + f"); the order chosen there, {tuning['order']}, is the n-gram compared below."]
    lines += ["", "| text | step | minutes on 2 idle cores | GPT perplexity per seed | GPT median | best n-gram | "
              "GPT / n-gram |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        when = f"{row['minutes']:.1f}" + (" (end of the run)" if row["final"] else "")
        lines.append(f"| {row['text']} | {row['step']} | {when} | {', '.join(f'{v:.2f}' for v in row['gpt_values'])} "
                     f"| {row['gpt_median']:.2f} | {row['best_ngram']:.2f} ({row['best_ngram_order']}-gram) | "
                     f"{row['ratio']:.2f}x |")
    largest = [row for row in rows if row["final"]][-1]
    met = largest["ratio"] <= TARGET_RATIO
    lines += ["", f"At the largest point ({largest['text']}, {largest['step']} steps = {largest['minutes']:.1f} min "
              f"on 2 idle cores) the GPT's median is {largest['ratio']:.2f}x the best n-gram (target <= "
              f"{TARGET_RATIO}x): **{'met' if met else 'not met'}**.", ""]
    return "\n".join(lines)


def calibration(texts: dict[str, TextCorpus], args: argparse.Namespace) -> dict:
    """Each text's steps per second (2 threads, now), with the machine and its load before."""
    torch.set_num_threads(2)
    busy, info = cpu_busy_share(), machine_info()
    rates = {}
    for name, corpus in texts.items():
        bpe, train_stream, _ = prepared(corpus, args.valid_windows)
        rates[name] = step_rate(bpe.vocab_size, train_stream, args.calibrate, 2 if args.quick else 10)
        print(f"{name}: {rates[name]:.2f} steps/s", flush=True)
    return {"machine": info, "busy_before": busy, "seconds": args.calibrate, "steps_per_second": rates}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, nargs=2, default=[1400, 7000], metavar=("MANUAL", "LARGER"),
                        help="training steps per run on each text")
    parser.add_argument("--evaluations", type=int, nargs=2, default=[4, 10], metavar=("MANUAL", "LARGER"),
                        help="validation perplexities measured along each run")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6, 7])
    parser.add_argument("--discounts", type=float, nargs="+", default=[0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95],
                        help="Kneser-Ney discounts tried on the development split")
    parser.add_argument("--dev-every", type=int, default=10,
                        help="every N-th training document is held out to choose the n-gram's order and discount")
    parser.add_argument("--dev-windows", type=int, default=512,
                        help="development windows of 128 tokens scored per (order, discount), spread evenly")
    parser.add_argument("--valid-windows", type=int, default=0,
                        help="validation windows of 128 tokens scored, spread evenly (0: the whole validation text)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the runs (the result does not "
                        "depend on them); the calibration always uses 2")
    parser.add_argument("--combine", type=Path, nargs="+", default=None,
                        help="merge these per-seed JSON files and calibrate the minutes (on an idle machine)")
    parser.add_argument("--calibrate", type=float, default=60.0, help="seconds of training per text to calibrate")
    parser.add_argument("--calibrate-only", action="store_true",
                        help="only measure the steps per second (idle machine) and write them to OUT.rates.json")
    parser.add_argument("--rates", type=Path, default=None,
                        help="with --combine: take the steps per second from this --calibrate-only file")
    parser.add_argument("--quick", action="store_true", help="a functional check: a slice of the text, few steps")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lm_crossover")
    args = parser.parse_args()
    if args.quick:
        # A functional check, not a measurement: every stage runs, each as briefly as it can (two seeds so that
        # the median and the per-seed columns are exercised; two evaluations per run so that a curve has points).
        args.seeds, args.steps, args.evaluations, args.valid_windows = args.seeds[:2], [4, 6], [2, 2], 16
        args.orders, args.discounts, args.dev_windows = [1, 2, 3], [0.6, 0.9], 16
        args.calibrate = min(args.calibrate, 1.0)
    texts = corpora(args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.calibrate_only:
        rates = calibration(texts, args)
        args.out.with_suffix(".rates.json").write_text(json.dumps(rates, indent=1), encoding="utf-8")
        return 0
    if args.combine is None:
        torch.set_num_threads(args.threads)
        results = [measure_text(name, corpus, args, steps, evaluations) for (name, corpus), steps, evaluations
                   in zip(texts.items(), args.steps, args.evaluations, strict=True)]
        part = {"results": results, "threads": args.threads, "command": sys.argv[1:], "machine": machine_info()}
        part_path = args.out.with_suffix(".part.json" if args.quick else ".json")
        part_path.write_text(json.dumps(part, indent=1), encoding="utf-8")
        if not args.quick:
            return 0
        args.combine = [part_path]  # --quick: combined and calibrated at once
    parts = [json.loads(path.read_text(encoding="utf-8")) for path in args.combine]
    results = combine(parts)
    measured = (json.loads(args.rates.read_text(encoding="utf-8")) if args.rates is not None
                else calibration(texts, args))
    for result in results:
        result["steps_per_second"] = measured["steps_per_second"][result["text"]]
    info, busy = measured["machine"], measured["busy_before"]
    rows = [row for result in results for row in summary_rows(result)]
    runs_note = "; ".join(f"{' '.join(part['command'])} ({part['threads']} thread(s), on "
                          f"{part['machine']['cpu']})" for part in parts)
    payload = {"machine": info, "busy_before": busy, "target_ratio": TARGET_RATIO, "config": CONFIG, "train": TRAIN,
               "runs_note": runs_note, "results": results, "summary": rows}
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
    args.out.with_suffix(".md").write_text(markdown(payload), encoding="utf-8")
    largest = [row for row in rows if row["final"]][-1]
    print(f"RESULT lm_crossover: GPT / best n-gram {largest['ratio']:.2f} at {largest['text']}, "
          f"{largest['minutes']:.1f} min (target <= {TARGET_RATIO})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
