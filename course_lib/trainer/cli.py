"""``course-train``: train a notebook's model from the command line, on one process or many, and resume.

Usage::

    course-train translate|vit [--config FILE.json|FILE.toml] [--steps N] [--batch-size B] [--out DIR]
                               [--resume] [--checkpoint-every K] [--set KEY=VALUE ...] [--device cpu|cuda|mps]
    torchrun --nproc_per_node N -m course_lib.trainer vit ...     # the same run on N processes (DDP)

What a run writes into ``--out`` (default ``runs/<task>``): ``checkpoints/step-NNNNNN.pt`` every
``checkpoint_every`` steps and at the end (the two newest kept), ``metrics.csv`` (step, loss, learning
rate), ``metrics.png`` (the loss curve and the schedule), ``config.json`` and ``result.json`` (the final
evaluation the notebook prints). ``--resume`` continues from the newest intact checkpoint, skipping a
damaged one, and finishes with the same parameters as a run that was never interrupted.

``batch_size`` is per process: N processes with batch b train like one process with batch N*b.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path

import torch

from course_lib.runtime import set_seed
from course_lib.trainer.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    prune_checkpoints,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from course_lib.trainer.data import ShardedBatches
from course_lib.trainer.distributed import DistributedContext, init_distributed
from course_lib.trainer.tasks import TASKS
from course_lib.training import TrainHistory, train

__all__ = ["main", "load_config", "run", "write_metrics"]

# Keys that may change between a run and its resumption (everything else must match the checkpoint).
RESUMABLE_CHANGES = frozenset({"steps", "checkpoint_every", "keep_checkpoints"})


def load_config(task: str, path: str | None = None, overrides: dict | None = None) -> dict:
    """The task's defaults, updated from a JSON or TOML file and then from ``overrides``.

    Unknown keys and values of the wrong type raise a ValueError naming the key (a typo never goes unseen).
    """
    if task not in TASKS:
        raise ValueError(f"course-train: unknown task {task!r}; choose one of {sorted(TASKS)}")
    config = dict(TASKS[task].defaults)
    updates: dict = {}
    if path:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith(".toml"):
            import tomllib

            updates.update(tomllib.loads(text))
        elif path.endswith(".json"):
            updates.update(json.loads(text))
        else:
            raise ValueError(f"course-train: --config must end in .json or .toml, got {path!r}")
    updates.update(overrides or {})
    for key, value in updates.items():
        if key not in config:
            raise ValueError(f"course-train {task}: unknown configuration key {key!r}; known keys: "
                             f"{', '.join(sorted(config))}")
        default = config[key]
        if isinstance(default, bool) and isinstance(value, str):
            value = {"true": True, "false": False, "1": True, "0": False}.get(value.lower(), value)
        elif isinstance(default, (int, float)) and not isinstance(default, bool) and isinstance(value, str):
            try:
                value = type(default)(value)
            except ValueError:
                pass
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default):
            raise ValueError(f"course-train {task}: {key} must be a {type(default).__name__} "
                             f"(like the default {default!r}), got {value!r}")
        config[key] = value
    if config["steps"] < 1 or config["batch_size"] < 1 or config["checkpoint_every"] < 1:
        raise ValueError(f"course-train {task}: steps, batch_size and checkpoint_every must be >= 1")
    if config["keep_checkpoints"] < 2:
        raise ValueError(f"course-train {task}: keep_checkpoints must be >= 2 (a fallback for a damaged one)")
    return config


def write_metrics(history: TrainHistory, out: Path, title: str, plot: bool = True) -> None:
    """``metrics.csv`` (one row per step) and, with ``plot``, ``metrics.png`` (loss and learning rate)."""
    with open(out / "metrics.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["step", "loss", "loss_mean_50", "lr"])
        for step, (loss, mean, lr) in enumerate(zip(history.losses, history.smoothed(50), history.lrs,
                                                    strict=True), start=1):
            writer.writerow([step, f"{loss:.6g}", f"{mean:.6g}", f"{lr:.6g}"])
    if not plot:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    steps = range(1, len(history.losses) + 1)
    ax1.plot(steps, history.losses, alpha=0.3, label="every step")
    ax1.plot(steps, history.smoothed(50), label="mean of 50 steps")
    ax1.set_xlabel("step"); ax1.set_ylabel("training loss"); ax1.legend()  # noqa: E702
    ax2.plot(steps, history.lrs)
    ax2.set_xlabel("step"); ax2.set_ylabel("learning rate")  # noqa: E702
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out / "metrics.png", dpi=100)
    plt.close(fig)


def _gather_rng(ctx: DistributedContext) -> list[dict]:
    """Every process's random state, in rank order (each process draws its own dropout and shifts)."""
    if not ctx.distributed:
        return [rng_state()]
    states: list = [None] * ctx.world_size
    torch.distributed.all_gather_object(states, rng_state())
    return states


def run(task: str, config: dict, out: str | os.PathLike, resume: bool = False, progress: bool = True,
        device: str | None = None) -> dict:
    """Train ``task`` with ``config``, checkpointing into ``out``; the final evaluation (on rank 0) or {}."""
    from torch.nn.parallel import DistributedDataParallel

    out = Path(out)
    folder = out / "checkpoints"
    ctx = init_distributed(device)
    say = (lambda *a: print(*a, flush=True)) if ctx.is_main else (lambda *a: None)
    try:
        set_seed(config["seed"])
        setup = TASKS[task].build(config, ctx.device)
        module = setup.model
        model = module
        if ctx.distributed:
            model = DistributedDataParallel(module, device_ids=[ctx.device.index] if ctx.device.type == "cuda"
                                            else None)
        stream = ShardedBatches(setup.dataset, config["batch_size"], setup.collate_fn, seed=config["seed"],
                                rank=ctx.rank, world_size=ctx.world_size)
        history = TrainHistory()
        set_seed(config["seed"] + ctx.rank)  # dropout and augmentation differ between processes
        if resume and (found := latest_checkpoint(folder, map_location=ctx.device)) is not None:
            path, state = found
            changed = sorted(k for k in config if k not in RESUMABLE_CHANGES and state["config"].get(k) != config[k])
            if changed:
                raise ValueError(f"course-train --resume: {path} was written with a different configuration: "
                                 + ", ".join(f"{k}={state['config'].get(k)!r} there, {config[k]!r} now"
                                             for k in changed))
            if len(state["rng"]) != ctx.world_size:
                raise ValueError(f"course-train --resume: {path} was written by {len(state['rng'])} process(es), "
                                 f"this run has {ctx.world_size}; resume with the same number")
            module.load_state_dict(state["model"])
            setup.optimizer.load_state_dict(state["optimizer"])
            if setup.scheduler is not None:
                setup.scheduler.load_state_dict(state["scheduler"])
            history.load_state_dict(state["history"])
            stream.load_state_dict(state["data"])
            restore_rng_state(state["rng"][ctx.rank])
            say(f"resuming from {path} (step {history.steps})")
        elif resume:
            say(f"no checkpoint in {folder}: starting from step 0")
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text(json.dumps({"task": task, **config}, indent=2) + "\n")
        say(f"course-train {task}: {setup.description}; {ctx.world_size} process(es) on {ctx.device}, "
            f"batch {config['batch_size']} per process, {config['steps']} steps")

        def save() -> None:
            rngs = _gather_rng(ctx)
            if ctx.is_main:
                state = {"config": config, "model": module.state_dict(), "optimizer": setup.optimizer.state_dict(),
                         "scheduler": setup.scheduler.state_dict() if setup.scheduler is not None else None,
                         "history": history.state_dict(), "data": stream.state_dict(), "rng": rngs,
                         "world_size": ctx.world_size}
                save_checkpoint(state, checkpoint_path(folder, history.steps))
                prune_checkpoints(folder, config["keep_checkpoints"])
                write_metrics(history, out, f"course-train {task}", plot=False)  # the plot once, at the end

        def on_step(hist: TrainHistory, _prediction) -> None:
            if hist.steps % config["checkpoint_every"] == 0:
                save()

        use_bf16 = (ctx.device.type == "cuda" and config["amp"] != "off" and torch.cuda.is_bf16_supported())
        train(model, stream, max(0, config["steps"] - history.steps), setup.optimizer, setup.scheduler,
              loss_fn=setup.loss_fn, device=ctx.device, clip_grad_norm=config["clip_grad_norm"] or None,
              progress=progress and ctx.is_main, history=history, step_fn=setup.step_fn,
              desc=f"course-train {task}", on_step=on_step, autocast_dtype=torch.bfloat16 if use_bf16 else None)
        history.epochs = history.steps * config["batch_size"] * ctx.world_size / len(setup.dataset)
        if not checkpoint_path(folder, history.steps).exists():
            save()
        result: dict = {}
        if ctx.is_main:
            write_metrics(history, out, f"course-train {task}")
            result = {"task": task, "steps": history.steps, "processes": ctx.world_size, "device": str(ctx.device),
                      "final_loss_mean_50": history.smoothed(50)[-1] if history.losses else None,
                      "epochs": history.epochs, "train_seconds": history.seconds, "items": history.items,
                      "items_per_second": history.items / history.seconds if history.seconds else None,
                      **setup.evaluate(module, ctx.device)}
            (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
            say("result: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in result.items()))
        if ctx.distributed:
            torch.distributed.barrier()
        return result
    finally:
        ctx.close()


def main(argv: list[str] | None = None) -> int:
    """The ``course-train`` command."""
    parser = argparse.ArgumentParser(prog="course-train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=sorted(TASKS), help="; ".join(f"{t.name}: {t.help}" for t in TASKS.values()))
    parser.add_argument("--config", help="a JSON or TOML file of configuration keys (the defaults are the notebook's)")
    parser.add_argument("--steps", type=int, help="total optimizer steps")
    parser.add_argument("--batch-size", type=int, help="examples per step and process")
    parser.add_argument("--checkpoint-every", type=int, help="steps between checkpoints")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any configuration key")
    parser.add_argument("--out", help="output folder (default runs/<task>)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in --out")
    parser.add_argument("--device", help="cpu, cuda or mps (default: as the notebooks choose, COURSE_DEVICE)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    overrides = {key: value for key, value in (("steps", args.steps), ("batch_size", args.batch_size),
                                               ("checkpoint_every", args.checkpoint_every), ("seed", args.seed))
                 if value is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = value
    try:
        config = load_config(args.task, args.config, overrides)
    except (ValueError, OSError) as error:
        parser.error(str(error))
    run(args.task, config, args.out or f"runs/{args.task}", resume=args.resume, progress=not args.no_progress,
        device=args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
