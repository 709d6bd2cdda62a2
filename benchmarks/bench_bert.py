"""Notebook 12's claim, measured: pre-train then fine-tune against the same model trained from scratch.

The labelled task of notebook 12 (``course_lib.data.stdlib_docstrings``: which of six standard-library packages a
docstring comes from), with the same small labelled budget for both models (``--per-class`` docstrings of
each package, drawn with the seed) and the same fine-tuning recipe (``--finetune-steps`` steps of AdamW at
``--finetune-lr``). The pre-trained model first reads the library's other docstrings for
``--pretrain-steps`` steps of masked language modelling (BERT's 80/10/10 masking); the scratch model starts
from a random initialisation. Each seed pre-trains its own model, draws its own labelled subset and
initialises its own scratch model. Validation accuracy on the held-out docstrings of the six packages,
which pre-training never read. A bag-of-words logistic regression on the same labelled subset shows what
word counts alone reach.

Usage (take the benchmark lock on a shared machine)::

    flock /tmp/bench.lock python benchmarks/bench_bert.py            # 3 seeds, notebook 12's LONG_RUN budget
    flock /tmp/bench.lock python benchmarks/bench_bert.py --quick    # one seed, a few steps

Writes ``benchmarks/results/bert.md`` and prints ``RESULT`` lines for ``run_all.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402

from course_lib.evaluation.bag_of_words import bag_of_words_accuracy  # noqa: E402
from course_lib.evaluation.metrics import classifier_accuracy  # noqa: E402
from course_lib.models.bert import BERT  # noqa: E402
from course_lib.runtime import set_seed  # noqa: E402
from course_lib.training.lessons import LESSON_12  # noqa: E402
from course_lib.training.pretraining import (  # noqa: E402
    DocstringData,
    fine_tune,
    labelled_subset,
    pretrain_mlm,
)

# notebooks/12_bert.ipynb, sections 2-7
CONFIG = dict(LESSON_12.model)  # notebook 12 (no dropout: see its section 5)


def one_seed(data: DocstringData, seed: int, args: argparse.Namespace) -> dict:
    """Pre-train, fine-tune, and train from scratch with one seed; accuracies and times."""
    chosen = labelled_subset(data.train_labels, args.per_class, seed)
    tokens, labels = data.train_tokens[chosen], data.train_labels[chosen]
    set_seed(seed)
    model = BERT(data.bpe.vocab_size, max_len=data.seq_len, pad_id=data.pad_id, num_classes=len(data.classes),
                 **CONFIG)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    history = pretrain_mlm(model, data.stream, args.pretrain_steps, data.cls_id, data.mask_id, data.special_ids,
                           seq_len=data.seq_len, batch_size=LESSON_12.train["batch_size"], lr=LESSON_12.train["lr"],
                           warmup=LESSON_12.train["warmup"], seed=seed, progress=False)
    pretrain_wall, pretrain_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    set_seed(seed)
    fine_tune(model, tokens, labels, args.finetune_steps, lr=args.finetune_lr, seed=seed, progress=False)
    set_seed(1000 + seed)
    scratch = BERT(data.bpe.vocab_size, max_len=data.seq_len, pad_id=data.pad_id, num_classes=len(data.classes),
                   **CONFIG)
    fine_tune(scratch, tokens, labels, args.finetune_steps, lr=args.finetune_lr, seed=seed, progress=False)
    return {"seed": seed, "pretrained": classifier_accuracy(model, data.valid_tokens, data.valid_labels,
                                                         classify=model.classify),
            "scratch": classifier_accuracy(scratch, data.valid_tokens, data.valid_labels, classify=scratch.classify),
            "bag_of_words": bag_of_words_accuracy([data.train_texts[i] for i in chosen.tolist()], labels.tolist(),
                                                  data.valid_texts, data.valid_labels.tolist()),
            "mlm_loss": statistics.mean(history.losses[-50:]), "pretrain_wall": pretrain_wall,
            "pretrain_cpu": pretrain_cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 20 pre-training and 10 fine-tuning steps")
    parser.add_argument("--pretrain-steps", type=int, default=LESSON_12.long_steps,
                        help=f"MLM steps (notebook 12: {LESSON_12.steps}; its LONG_RUN: "
                             f"{LESSON_12.long_steps})")
    parser.add_argument("--finetune-steps", type=int, default=LESSON_12.train["finetune_steps"])
    parser.add_argument("--finetune-lr", type=float, default=LESSON_12.train["finetune_lr"])
    parser.add_argument("--per-class", type=int, default=LESSON_12.train["per_class"],
                        help="labelled docstrings of each package")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (notebook 12 asks for 2)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "bert.md")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.pretrain_steps, args.finetune_steps = args.seeds[:1], 20, 10
    torch.set_num_threads(args.threads)
    busy = cpu_busy_share()
    info = machine_info()
    data = DocstringData.build(vocab_size=LESSON_12.train["vocab_size"], seq_len=LESSON_12.train["seq_len"])
    runs = []
    for seed in args.seeds:
        runs.append(one_seed(data, seed, args))
        print(f"seed {seed}: {runs[-1]}", flush=True)
    gaps = [r["pretrained"] - r["scratch"] for r in runs]
    med = {k: statistics.median(r[k] for r in runs) for k in ("pretrained", "scratch", "bag_of_words")}
    lines = ["# Notebook 12: pre-trained then fine-tuned, against the same model from scratch", "",
             markdown_machine(info), "", load_note(busy), "",
             f"Task: {len(data.classes)} packages ({', '.join(data.classes)}); {args.per_class} labelled docstrings "
             f"per package for training, {len(data.valid_labels)} held-out docstrings for validation. Model: BERT "
             f"{CONFIG['num_layers']}x{CONFIG['d_model']}, {CONFIG['num_heads']} heads, inputs of {data.seq_len} "
             f"tokens, byte-level BPE of {data.bpe.vocab_size}. Pre-training: {args.pretrain_steps} MLM steps of "
             f"32 windows on {data.stream.numel():,} tokens of docstrings. Fine-tuning (both models): "
             f"{args.finetune_steps} steps of 16 at lr {args.finetune_lr:g}. Threads: {args.threads}.", "",
             "| seed | MLM loss (last 50 steps) | pre-training wall s | CPU s | pre-trained + fine-tuned | "
             "from scratch | gap | bag of words |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['mlm_loss']:.2f} | {r['pretrain_wall']:.0f} | {r['pretrain_cpu']:.0f} | "
              f"{r['pretrained']:.3f} | {r['scratch']:.3f} | {r['pretrained'] - r['scratch']:+.3f} | "
              f"{r['bag_of_words']:.3f} |" for r in runs]
    lines += ["", f"Median validation accuracy: pre-trained {med['pretrained']:.3f}, "
              f"from scratch {med['scratch']:.3f}, "
              f"bag of words {med['bag_of_words']:.3f}. Gap (pre-trained - scratch) per seed: "
              f"{', '.join(f'{g:+.3f}' for g in gaps)}; median {statistics.median(gaps):+.3f}, range "
              f"{min(gaps):+.3f} to {max(gaps):+.3f}.", ""]
    print(f"RESULT bert: validation accuracy pre-trained {med['pretrained']:.3f} vs scratch {med['scratch']:.3f} "
          f"(median gap {statistics.median(gaps):+.3f} over seeds {args.seeds}, {args.pretrain_steps} MLM steps)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
