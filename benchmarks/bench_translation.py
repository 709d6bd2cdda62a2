"""Benchmark of notebook 07: time and quality of the default translation run, character vs sub-word targets,
and the training throughput of the course's Transformer beside ``nn.Transformer`` of the same shape.

Run from the repository root (one timing run at a time on a shared machine)::

    flock /tmp/bench.lock python benchmarks/bench_translation.py            # writes benchmarks/results/translation.md
    python benchmarks/bench_translation.py --quick     # one seed, few steps: checks the script, not the targets

What it measures:
1. the notebook's default configuration (``CONFIG`` and ``STEPS`` below, the same as the notebook's) trained
   with several seeds: training seconds, target tokens per second, and on the 2 000 held-out test numbers
   exact match, chrF and character BLEU for greedy decoding and beam search (beam 4, length penalty 1);
   medians over the seeds;
2. character versus BPE targets, the same model trained for the same wall-clock time;
3. tokens per second of one training step, the course's ``Transformer`` and ``nn.Transformer`` with the same
   shape, embeddings and output layer, alternated in one process.

Targets (issue 5): the default run reaches held-out exact match >= 90 % and chrF >= 97 within 180 s of
training (medians over the seeds), and beam search is never worse than greedy decoding on chrF.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

from course_lib.data.translation import (
    BPETokenizer,
    CharTokenizer,
    TranslationDataset,
    Vocab,
    WordTokenizer,
    make_loader,
    make_number_corpus,
)
from course_lib.evaluation.metrics import translation_scores
from course_lib.generation.decoding import translate
from course_lib.models.transformer import Transformer
from course_lib.runtime import set_seed
from course_lib.training.engine import label_smoothed_cross_entropy, make_optimizer, make_scheduler, train
from course_lib.training.lessons import LESSON_07

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402  (not a package)

# The notebook's defaults (notebooks/07_training_and_decoding.ipynb), from the lesson's one configuration.
CONFIG = {**LESSON_07.model, **LESSON_07.train}
STEPS = LESSON_07.steps
TARGET_EXACT, TARGET_CHRF, TARGET_SECONDS = 90.0, 97.0, 180.0


def build(src_vocab: Vocab, tgt_vocab: Vocab, cfg: dict) -> Transformer:
    return Transformer(len(src_vocab), len(tgt_vocab), d_model=cfg["d_model"], num_heads=cfg["num_heads"],
                       num_encoder_layers=cfg["num_layers"], num_decoder_layers=cfg["num_layers"], d_ff=cfg["d_ff"],
                       dropout=cfg["dropout"], max_len=cfg["max_len"], norm_first=cfg["norm_first"])


def setup(corpus, target: str, cfg: dict):
    src_tok = WordTokenizer()
    tgt_tok = (BPETokenizer.train([p.tgt for p in corpus.train], vocab_size=cfg["bpe_vocab_size"])
               if target == "bpe" else CharTokenizer())
    src_vocab = Vocab.build(src_tok.tokenize(p.src) for p in corpus.train)
    tgt_vocab = Vocab.build(tgt_tok.tokenize(p.tgt) for p in corpus.train)
    data = TranslationDataset(corpus.train, src_tok, tgt_tok, src_vocab, tgt_vocab)
    return src_tok, tgt_tok, src_vocab, tgt_vocab, data


def trainer(model, data, cfg, seed):
    opt = make_optimizer(model)
    sched = make_scheduler(opt, cfg["d_model"], cfg["warmup"], cfg["lr_scale"])
    loader = make_loader(data, cfg["batch_size"], seed=seed)
    loss = lambda logits, t: label_smoothed_cross_entropy(logits, t, cfg["smoothing"], 0)  # noqa: E731
    return lambda n, hist=None: train(model, loader, n, opt, sched, loss_fn=loss, progress=False, history=hist)


def default_run(corpus, seed: int, steps: int, n_test: int) -> dict:
    set_seed(seed)
    src_tok, tgt_tok, sv, tv, data = setup(corpus, "bpe", CONFIG)
    model = build(sv, tv, CONFIG)
    hist = trainer(model, data, CONFIG, seed)(steps)
    sources, refs = [p.src for p in corpus.test[:n_test]], [p.tgt for p in corpus.test[:n_test]]
    row = dict(seed=seed, steps=steps, train_s=hist.seconds, tok_s=hist.tokens_per_second)
    for name, kw in (("greedy", dict(method="greedy")), ("beam4", dict(method="beam", beam_size=4))):
        start = time.perf_counter()
        hyps = translate(model, sources, src_tok, sv, tgt_tok, tv, max_len=40, **kw)
        row[f"{name}_s"] = time.perf_counter() - start
        for k, v in translation_scores(hyps, refs).items():
            row[f"{name}_{k}"] = v
    print(row, flush=True)
    return row


def timed_run(corpus, target: str, seconds: float, n_test: int, seed: int = 0) -> dict:
    set_seed(seed)
    src_tok, tgt_tok, sv, tv, data = setup(corpus, target, CONFIG)
    model = build(sv, tv, CONFIG)
    step = trainer(model, data, CONFIG, seed)
    hist = None
    while hist is None or hist.seconds < seconds:
        hist = step(25, hist)
    hyps = translate(model, [p.src for p in corpus.test[:n_test]], src_tok, sv, tgt_tok, tv, max_len=90)
    row = dict(target=target, steps=hist.steps, train_s=hist.seconds,
               **translation_scores(hyps, [p.tgt for p in corpus.test[:n_test]]))
    print(row, flush=True)
    return row


class TorchTransformerModel(nn.Module):
    """nn.Transformer with the course model's embeddings, positions and tied output layer, for timing."""

    def __init__(self, course: Transformer, cfg: dict) -> None:
        super().__init__()
        self.course = course  # borrow embeddings, positions, generator
        self.core = nn.Transformer(cfg["d_model"], cfg["num_heads"], cfg["num_layers"], cfg["num_layers"], cfg["d_ff"],
                                   cfg["dropout"], batch_first=True, norm_first=cfg["norm_first"])

    def forward(self, src, tgt_in):
        c = self.course
        x = c.positional(c.src_embed(src) * c.embed_scale)
        y = c.positional(c.tgt_embed(tgt_in) * c.embed_scale)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], dtype=torch.bool)
        h = self.core(x, y, tgt_mask=causal, src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt_in == 0,
                      memory_key_padding_mask=src == 0)
        return c.generator(h)


def throughput(corpus, repeats: int = 5, steps: int = 20) -> dict:
    set_seed(0)
    _, _, sv, tv, data = setup(corpus, "bpe", CONFIG)
    course = build(sv, tv, CONFIG)
    ref = TorchTransformerModel(build(sv, tv, CONFIG), CONFIG)
    runs = {"course Transformer": trainer(course, data, CONFIG, 0), "nn.Transformer": trainer(ref, data, CONFIG, 0)}
    rates: dict[str, list[float]] = {k: [] for k in runs}
    for k in runs:
        runs[k](3)  # warm-up
    for _ in range(repeats):
        for k, run in runs.items():
            rates[k].append(run(steps).tokens_per_second)
    out = {k: statistics.median(v) for k, v in rates.items()}
    print(out, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--compare-seconds", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "translation.md")
    parser.add_argument("--quick", action="store_true",
                        help="seed 0, 60 steps, 10 s comparison, no results file: checks the script, not the targets")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.steps, args.compare_seconds, args.out = [0], 60, 10.0, None
    n_test, n_compare = (100, 100) if args.quick else (2000, 1000)
    load_before = cpu_busy_share()
    corpus = make_number_corpus(CONFIG["n_train"], CONFIG["n_valid"], CONFIG["n_test"], max_number=CONFIG["max_number"],
                                seed=0)
    rows = [default_run(corpus, s, args.steps, n_test) for s in args.seeds]
    comparison = [timed_run(corpus, t, args.compare_seconds, n_compare) for t in ("char", "bpe")]
    speed_repeats = 2 if args.quick else 5
    speed = throughput(corpus, repeats=speed_repeats)
    machine = machine_info()

    med = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
    lines = [
        "# Translation benchmark (notebook 07)",
        "",
        f"Measured by `benchmarks/bench_translation.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"{load_note(load_before)} Step counts and scores do not depend on the load; seconds do.",
        "",
        markdown_machine(machine),
        "",
        f"Configuration (the notebook's default): {CONFIG}, {args.steps} steps; corpus: 40 000 training "
        f"numbers below one million, 2 000 test numbers never seen in training; BPE targets.",
        "",
        "## Default run, per seed (" + (f"the first {n_test:,} of the {len(corpus.test):,} test numbers)"
                                         if n_test < len(corpus.test) else f"all {n_test:,} test numbers)"),
        "",
        "| seed | steps | training s | target tok/s | greedy exact % | greedy chrF | greedy BLEU(char) "
        "| beam-4 exact % | beam-4 chrF | beam-4 BLEU(char) | beam chrF - greedy chrF |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['seed']} | {r['steps']} | {r['train_s']:.0f} | {r['tok_s']:,.0f} "
                     f"| {r['greedy_exact']:.2f} | {r['greedy_chrF']:.2f} | {r['greedy_BLEU(char)']:.2f} "
                     f"| {r['beam4_exact']:.2f} | {r['beam4_chrF']:.2f} | {r['beam4_BLEU(char)']:.2f} "
                     f"| {r['beam4_chrF'] - r['greedy_chrF']:+.3f} |")
    lines += [
        f"| **median** | {args.steps} | **{med('train_s'):.0f}** | {med('tok_s'):,.0f} "
        f"| **{med('greedy_exact'):.2f}** | **{med('greedy_chrF'):.2f}** | {med('greedy_BLEU(char)'):.2f} "
        f"| {med('beam4_exact'):.2f} | {med('beam4_chrF'):.2f} | {med('beam4_BLEU(char)'):.2f} | |",
        "",
        f"Beam search never worse than greedy on chrF: "
        f"{'yes' if all(r['beam4_chrF'] >= r['greedy_chrF'] for r in rows) else 'NO'} "
        f"({sum(r['beam4_chrF'] >= r['greedy_chrF'] for r in rows)} of {len(rows)} seeds).",
        "",
        f"## Character vs sub-word targets, the same model for the same time "
        f"({args.compare_seconds:.0f} s of training, seed 0, first {n_compare} test numbers)",
        "",
        "| targets | steps done | training s | exact % | chrF | BLEU(char) |",
        "|---|---|---|---|---|---|",
    ]
    for c in comparison:
        lines.append(f"| {c['target']} | {c['steps']} | {c['train_s']:.0f} | {c['exact']:.2f} | {c['chrF']:.2f} | "
                     f"{c['BLEU(char)']:.2f} |")
    lines += [
        "",
        "## Training throughput, the course's Transformer beside nn.Transformer (same shape, embeddings, output layer)",
        "",
        f"| model | target tokens/s (median of {speed_repeats} x 20 steps, alternated) |",
        "|---|---|",
    ] + [f"| {k} | {v:,.0f} |" for k, v in speed.items()]
    ratio = speed["course Transformer"] / speed["nn.Transformer"]
    quality_met = (med("greedy_exact") >= TARGET_EXACT and med("greedy_chrF") >= TARGET_CHRF
                   and med("train_s") <= TARGET_SECONDS)
    beam_met = all(r["beam4_chrF"] >= r["greedy_chrF"] for r in rows)
    judged = not args.quick
    lines += [
        "",
        f"course / nn.Transformer: {ratio:.2f}x.",
        "",
        "## Targets",
        "",
        f"- Greedy exact match >= {TARGET_EXACT:.0f} % and chrF >= {TARGET_CHRF:.0f} within {TARGET_SECONDS:.0f} s "
        f"of training (medians over seeds {args.seeds}): exact {med('greedy_exact'):.2f} %, chrF "
        f"{med('greedy_chrF'):.2f}, {med('train_s'):.0f} s: "
        f"**{('met' if quality_met else 'NOT met') if judged else 'not judged (quick mode)'}**.",
        f"- Beam search never worse than greedy on chrF: **{'met' if beam_met else 'NOT met'}**.",
        "",
    ]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"RESULT default run (median of {len(rows)} seed(s), {args.steps} steps): greedy exact "
          f"{med('greedy_exact'):.1f} %, chrF {med('greedy_chrF'):.1f}, {med('train_s'):.0f} s of training")
    print(f"RESULT beam 4 minus greedy chrF (median): "
          f"{statistics.median(r['beam4_chrF'] - r['greedy_chrF'] for r in rows):+.2f}")
    print(f"RESULT course / nn.Transformer training tokens per second: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
