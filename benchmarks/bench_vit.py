"""Notebook 08's models on the digits split: test accuracy against training time, median of 3 seeds.

Trains, on ``digits_split(seed=0)`` (1257 train / 180 val / 360 test images), for each seed:
the ViT of notebook 08 (patch 4) with ``[CLS]`` pooling and with mean pooling, the same with patch 2,
the small CNN, and scikit-learn's
``SVC``; and records test accuracy, the wall time of training and the CPU time the process used (on a
shared, loaded machine the CPU time is the better estimate of the time on an idle machine: it does not
count the time spent waiting for a core). The target of issue 6: the ViT reaches >= 98% test accuracy
within 60 s of training on 2 CPU cores (median of 3 seeds); stretch: the SVC's 98.9%.

Usage (take the benchmark lock on a shared machine)::

    flock /tmp/bench.lock python benchmarks/bench_vit.py            # notebook defaults, 3 seeds
    flock /tmp/bench.lock python benchmarks/bench_vit.py --quick    # fewer steps
    python benchmarks/bench_vit.py --vit-steps 3000 --threads 1     # a longer run, one thread

Writes ``benchmarks/results/vit.md`` and prints ``RESULT`` lines for ``run_all.py``.
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

from course_lib.data.digits import digits_split  # noqa: E402
from course_lib.evaluation.metrics import classifier_accuracy  # noqa: E402
from course_lib.models.baselines import SmallCNN  # noqa: E402
from course_lib.models.vit import VisionTransformer, count_parameters  # noqa: E402
from course_lib.runtime import set_seed  # noqa: E402
from course_lib.training.image_classifier import train_classifier  # noqa: E402
from course_lib.training.lessons import LESSON_08  # noqa: E402

# The notebook's configuration (notebooks/08_vision_transformer.ipynb, sections 4-7), from the lesson's one place.
VIT_CONFIG = dict(LESSON_08.model)
TRAIN = {**LESSON_08.train, "eval_every": 100}
# Issue 6: >= 98 % test accuracy within 60 s of training on 2 cores; stretch: the SVC's 98.9 %.
TARGET_ACCURACY, TARGET_SECONDS, STRETCH_ACCURACY = 0.98, 60.0, 0.989


def run_model(name: str, build, steps: int, seed: int, split) -> dict:
    set_seed(seed)
    model = build()
    cpu0 = time.process_time()
    hist = train_classifier(model, split, steps=steps, seed=seed, progress=False, desc=name, **TRAIN)
    cpu = time.process_time() - cpu0
    return {"model": name, "seed": seed, "steps": steps, "epochs": hist.epochs, "wall": hist.seconds, "cpu": cpu,
            "test": classifier_accuracy(model, split.test_x, split.test_y), "val": hist.val_acc[-1],
            "params": count_parameters(model)}


def run_svc(seed: int, split) -> dict:
    from sklearn.svm import SVC

    x, y = split.flat("train")
    wall0, cpu0 = time.perf_counter(), time.process_time()
    svc = SVC().fit(x, y)  # deterministic: the seed does not enter
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    xt, yt = split.flat("test")
    return {"model": "SVC (RBF)", "seed": seed, "steps": 0, "epochs": 0.0, "wall": wall, "cpu": cpu,
            "test": float((svc.predict(xt) == yt).mean()), "val": float((svc.predict(split.flat("val")[0])
                                                                          == split.flat("val")[1]).mean()),
            "params": int(len(svc.support_))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps (300 ViT, 150 p=2 and CNN), one seed")
    parser.add_argument("--vit-steps", type=int, default=LESSON_08.steps,
                        help=f"ViT p=4 training steps (notebook: {LESSON_08.steps})")
    parser.add_argument("--p2-steps", type=int, default=1000, help="ViT p=2 training steps (notebook: 1000)")
    parser.add_argument("--cnn-steps", type=int, default=400, help="CNN training steps (notebook: 400)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "vit.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.vit_steps, args.p2_steps, args.cnn_steps, args.seeds = 300, 150, 150, [0]
    if args.threads:
        torch.set_num_threads(args.threads)
    split = digits_split(seed=0)
    busy_before = cpu_busy_share()
    info = machine_info()
    rows = []
    for seed in args.seeds:
        for name, build, n in (
            ("ViT [CLS]", lambda: VisionTransformer(**VIT_CONFIG), args.vit_steps),
            ("ViT mean", lambda: VisionTransformer(**{**VIT_CONFIG, "pool": "mean"}), args.vit_steps),
            ("ViT p=2 [CLS]", lambda: VisionTransformer(**{**VIT_CONFIG, "patch_size": 2}), args.p2_steps),
            ("small CNN", SmallCNN, args.cnn_steps),
        ):
            row = run_model(name, build, n, seed, split)
            rows.append(row)
            print(f"{name:<14} seed {seed}: test {row['test']:.4f} val {row['val']:.4f} "
                  f"{row['wall']:.1f} s wall, {row['cpu']:.1f} s CPU, {n} steps", flush=True)
        rows.append(run_svc(seed, split))
    info_after = machine_info()

    lines = [
        "# Vision Transformer on the digits (notebook 08)",
        "",
        f"Written by `python benchmarks/bench_vit.py {' '.join(argv if argv is not None else sys.argv[1:])}`. "
        f"Split: `digits_split(seed=0)` ({split.sizes['train']} train / {split.sizes['val']} validation / "
        f"{split.sizes['test']} test images, stratified). ViT: {VIT_CONFIG}; training: {TRAIN}. Seeds "
        f"{args.seeds}; each value below is the **median over the seeds** (min-max in brackets).",
        "",
        load_note(busy_before) + " *Wall* is the training time as it happened; *CPU* is the "
        "processor time the process used (all threads), the better estimate of the time on an idle machine "
        "when the machine is overloaded.",
        "",
        "| model | params | steps | epochs | test accuracy | val accuracy | wall s | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary = {}
    for name in dict.fromkeys(r["model"] for r in rows):
        rs = [r for r in rows if r["model"] == name]

        def med(key: str, fmt: str, rs=rs) -> str:
            values = [r[key] for r in rs]
            m = statistics.median(values)
            return fmt.format(m) + (f" ({fmt.format(min(values))}-{fmt.format(max(values))})" if len(rs) > 1 else "")

        summary[name] = statistics.median(r["test"] for r in rs)
        lines.append(f"| {name} | {rs[0]['params']:,} | {rs[0]['steps']} | {rs[0]['epochs']:.0f} | "
                     f"{med('test', '{:.2%}')} | {med('val', '{:.2%}')} | {med('wall', '{:.1f}')} | "
                     f"{med('cpu', '{:.1f}')} |")
        print(f"RESULT {name}: median test accuracy {summary[name]:.2%} over seeds {args.seeds}, "
              f"median wall {statistics.median(r['wall'] for r in rs):.1f} s, "
              f"CPU {statistics.median(r['cpu'] for r in rs):.1f} s")
    vit = [r for r in rows if r["model"] == "ViT [CLS]"]
    vit_acc, vit_wall = statistics.median(r["test"] for r in vit), statistics.median(r["wall"] for r in vit)
    verdict = "not judged (quick mode)" if args.quick else (
        "met" if vit_acc >= TARGET_ACCURACY and vit_wall <= TARGET_SECONDS else "NOT met")
    stretch = "met" if vit_acc >= STRETCH_ACCURACY else "not met"
    lines += ["", f"Target (issue 6): the notebook's ViT ([CLS], p=4) at test accuracy >= {TARGET_ACCURACY:.0%} within "
              f"{TARGET_SECONDS:.0f} s of training: median {vit_acc:.2%} in {vit_wall:.1f} s wall: **{verdict}**. "
              f"Stretch, the SVC's published {STRETCH_ACCURACY:.1%}: {stretch}."]
    print(f"RESULT ViT target (>= {TARGET_ACCURACY:.0%} within {TARGET_SECONDS:.0f} s): {verdict}")
    lines += ["", "Per run:", "", "| model | seed | test | val | wall s | CPU s |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['seed']} | {r['test']:.2%} | {r['val']:.2%} | {r['wall']:.1f} | {r['cpu']:.1f} |"
              for r in rows]
    lines += ["", markdown_machine(info), f"Load average at the end: {info_after['load_average_1_5_15']}.", ""]
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
