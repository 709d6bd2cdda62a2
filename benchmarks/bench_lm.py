"""Notebook 11's language model: validation perplexity against the best n-gram, and the KV cache's speed.

1. Perplexity: on the Python-docs corpus (``course_lib.data.python_docs.python_docs_corpus``, byte-level BPE of 1024),
   the interpolated Kneser-Ney 1- to 5-gram (``--orders``) and, for each seed, notebook 11's GPT trained for
   ``--steps`` steps (stopped early at ``--seconds`` of wall time); validation perplexity on the same tokens.
   Target of issue 19: the GPT's median over 3 seeds at least 25 % below the best n-gram after at most 3
   minutes of training on 2 cores. The CPU time of the process is recorded beside the wall time: on a shared,
   loaded machine it is the better estimate of the time on an idle one (it does not count waiting for a core).
2. KV cache: greedy generation of ``--gen-tokens`` (256) new tokens after an 8-token prompt with a GPT of
   notebook 11's size (``max_len`` 512, weights untrained: speed does not depend on them), with and without
   the cache; tokens per second (median of 3 repeats) and the largest difference between cached and
   uncached logits. Target: >= 3x, logits equal to 1e-5.

Usage (take the benchmark lock on a shared machine)::

    flock /tmp/bench.lock python benchmarks/bench_lm.py            # 3 seeds, 3 minutes each
    flock /tmp/bench.lock python benchmarks/bench_lm.py --quick    # one seed, fewer steps

Writes ``benchmarks/results/lm.md`` and prints ``RESULT`` lines for ``run_all.py``.
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

from course_lib.data.python_docs import ByteBPE, encode_documents, python_docs_corpus  # noqa: E402
from course_lib.generation.sampling import generate  # noqa: E402
from course_lib.models.gpt import GPT  # noqa: E402
from course_lib.models.ngram import KneserNeyLM  # noqa: E402
from course_lib.runtime import set_seed  # noqa: E402
from course_lib.training.language_model import evaluate_perplexity, train_lm  # noqa: E402
from course_lib.training.lessons import LESSON_11  # noqa: E402

# notebooks/11_language_model.ipynb, sections 2-5: the lesson's one configuration
VOCAB_SIZE, SEQ_LEN = LESSON_11.train["vocab_size"], LESSON_11.train["seq_len"]
CONFIG = dict(LESSON_11.model)
TRAIN = {key: LESSON_11.train[key] for key in ("batch_size", "seq_len", "lr", "warmup", "weight_decay")}
TARGET_RATIO, TARGET_SECONDS, TARGET_SPEEDUP = 0.75, 180.0, 3.0


def perplexity_runs(args: argparse.Namespace) -> tuple[dict, list[dict]]:
    corpus = python_docs_corpus()
    bpe = ByteBPE.train(corpus.train, vocab_size=VOCAB_SIZE)
    train_stream, valid_stream = encode_documents(bpe, corpus.train), encode_documents(bpe, corpus.valid)
    scored = valid_stream[: (valid_stream.numel() - 1) // SEQ_LEN * SEQ_LEN + 1]  # the tokens the LM scores
    ngram = {order: KneserNeyLM(train_stream, bpe.vocab_size, order).perplexity(scored) for order in args.orders}
    runs = []
    for seed in args.seeds:
        set_seed(seed)
        model = GPT(bpe.vocab_size, max_len=SEQ_LEN, **{**CONFIG, "dropout": args.dropout})
        cpu0 = time.process_time()
        hist = train_lm(model, train_stream, steps=args.steps, seed=seed, max_seconds=args.seconds,
                        valid_stream=valid_stream, eval_every=args.eval_every, progress=False, **TRAIN)
        runs.append({"seed": seed, "steps": len(hist.losses), "wall": hist.seconds, "cpu": time.process_time() - cpu0,
                     "ppl": evaluate_perplexity(model, valid_stream, SEQ_LEN), "curve": hist.valid})
        print(f"seed {seed}: {runs[-1]}", flush=True)
    return ngram, runs


@torch.no_grad()
def cache_speed(args: argparse.Namespace) -> dict:
    set_seed(0)
    model = GPT(VOCAB_SIZE, max_len=512, **CONFIG).eval()
    prompt = torch.randint(0, VOCAB_SIZE, (1, 8), generator=torch.Generator().manual_seed(0))
    speeds: dict[bool, list[float]] = {False: [], True: []}
    outputs = {}
    for _ in range(args.repeats):
        for use_cache in (False, True):
            start = time.perf_counter()
            outputs[use_cache] = generate(model, prompt, args.gen_tokens, temperature=0.0, use_cache=use_cache)
            speeds[use_cache].append(args.gen_tokens / (time.perf_counter() - start))
    tokens = outputs[True]
    full = model(tokens)  # (1, 8 + gen, vocab)
    cache = model.make_cache()  # one KVCache per layer: the model's own forward, fed the new tokens only
    logits = model(tokens[:, :8], cache=cache)
    worst = (logits - full[:, :8]).abs().max().item()
    for t in range(8, tokens.shape[1]):
        logits = model(tokens[:, t:t + 1], cache=cache)
        worst = max(worst, (logits[:, 0] - full[:, t]).abs().max().item())
    return {"uncached": statistics.median(speeds[False]), "cached": statistics.median(speeds[True]),
            "same_tokens": bool(torch.equal(outputs[True], outputs[False])), "max_logit_diff": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 150 steps, 128 new tokens, 1 repeat")
    parser.add_argument("--steps", type=int, default=1500,
                        help=f"steps of the schedule (notebook 11: {LESSON_11.steps}); about 1500 fit in the 3-min cap "
                             "on 2 idle CPUs")
    parser.add_argument("--seconds", type=float, default=TARGET_SECONDS, help="wall-time cap on training")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--eval-every", type=int, default=0,
                        help="also record the validation perplexity every N steps (the learning curve; costs time)")
    parser.add_argument("--dropout", type=float, default=CONFIG["dropout"],
                        help="dropout of the trained GPT (notebook 11: 0.0; its LONG_RUN: 0.1)")
    parser.add_argument("--orders", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="n-gram orders of the baseline; the best of them is the one to beat")
    parser.add_argument("--gen-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the target's 2 cores)")
    parser.add_argument("--skip-training", action="store_true", help="only the KV-cache speed")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "lm.md")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps, args.gen_tokens, args.repeats = args.seeds[:1], 150, 128, 1
    torch.set_num_threads(args.threads)
    busy = cpu_busy_share()
    info = machine_info()
    speed = cache_speed(args)
    lines = ["# Notebook 11: language-model perplexity and KV-cache speed", "",
             markdown_machine(info), "", load_note(busy), ""]
    if not args.skip_training:
        ngram, runs = perplexity_runs(args)
        best = min(ngram.values())
        median = statistics.median(r["ppl"] for r in runs)
        lines += ["## Validation perplexity (same tokens for every model)", "",
                  "| model | seed | steps | wall s | CPU s | validation perplexity |", "|---|---|---|---|---|---|"]
        lines += [f"| Kneser-Ney {o}-gram | - | - | - | - | {p:.2f} |" for o, p in ngram.items()]
        gpt = f"GPT {CONFIG['num_layers']}x{CONFIG['d_model']}, dropout {args.dropout}"
        lines += [f"| {gpt} | {r['seed']} | {r['steps']} | {r['wall']:.0f} | "
                  f"{r['cpu']:.0f} | {r['ppl']:.2f} |" for r in runs]
        curves = [r for r in runs if r["curve"]]
        if curves:
            lines += ["", "Learning curve (validation perplexity at step):", ""]
            lines += [f"- seed {r['seed']}: " + ", ".join(f"{step}: {ppl:.1f}" for step, ppl in r["curve"])
                      for r in curves]
        ratio = median / best
        met = ratio <= TARGET_RATIO and max(r["wall"] for r in runs) <= TARGET_SECONDS * 1.05
        lines += ["", f"Median GPT perplexity {median:.2f} over seeds {args.seeds} against the best n-gram "
                  f"{best:.2f}: ratio {ratio:.2f} (target <= {TARGET_RATIO} within {TARGET_SECONDS:.0f} s of "
                  f"training on 2 cores): {'met' if met else 'not met'} in this run.", ""]
        print(f"RESULT lm: median validation perplexity {median:.2f} vs best n-gram {best:.2f} "
              f"(ratio {ratio:.2f}, target <= {TARGET_RATIO})")
    ratio_speed = speed["cached"] / speed["uncached"]
    lines += ["## KV cache", "",
              f"Greedy generation of {args.gen_tokens} new tokens after an 8-token prompt (median of "
              f"{args.repeats}): {speed['uncached']:.1f} tokens/s without the cache, {speed['cached']:.1f} with it: "
              f"**{ratio_speed:.1f}x** (target >= {TARGET_SPEEDUP:.0f}x). Same tokens: {speed['same_tokens']}; "
              f"largest |cached - uncached| logit: {speed['max_logit_diff']:.1e} (target <= 1e-5).", ""]
    print(f"RESULT kv_cache: {ratio_speed:.1f}x at {args.gen_tokens} tokens "
          f"({speed['uncached']:.1f} -> {speed['cached']:.1f} tokens/s), max logit diff {speed['max_logit_diff']:.1e}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
