"""``course-train``: train a notebook's model from the command line, on one process or many, and resume.

Usage::

    course-train translate|vit|lm|bert|llama [--config FILE.json|FILE.toml] [--steps N] [--batch-size B]
                               [--accumulate K] [--out DIR] [--resume | --force] [--quick] [--checkpoint-every C]
                               [--set KEY=VALUE ...] [--device cpu|cuda|mps]
    torchrun --nproc_per_node N -m course_lib.training.cli vit ...     # the same run on N processes (DDP)
    course-train --list        # every notebook that trains a model, and the task that trains it

What a run writes into ``--out`` (default ``runs/<task>``): ``checkpoints/step-NNNNNN.pt`` every
``checkpoint_every`` steps and at the end (the two newest kept), ``metrics.csv`` (step, loss, learning
rate), ``metrics.png`` (the loss curve and the schedule), ``config.json`` and ``result.json`` (the final
evaluation the notebook prints). A folder that already holds a run is reused only with ``--resume`` (continue
it) or ``--force`` (replace it). ``--resume`` continues from the newest intact checkpoint, skipping a damaged
one, and finishes with the same parameters as a run that was never interrupted; it refuses (exit code 2,
one line saying why) when no checkpoint is intact, when the configuration or the number of processes
differs, or when a new ``steps`` would reshape the learning-rate schedule.

``batch_size`` is per process and per batch: N processes with batch b and ``accumulate`` k train like one
process with batch N*k*b. Configuration and data errors print one line naming the file (and line) or the key
and exit with code 2; a non-finite loss stops every process at the same step (exit code 1).

Every decision the processes must take together (when to save, whether and from where to resume) is taken
from state they share (the step count) or by process 0 and broadcast, never by each process looking at the
disk on its own.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from course_lib.runtime import set_seed
from course_lib.training.cli.checkpoint import (
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from course_lib.training.cli.config import ConfigError, load_config, quick_requested
from course_lib.training.cli.data import ShardedBatches
from course_lib.training.cli.distributed import DistributedContext, init_distributed
from course_lib.training.cli.tasks import NOTEBOOK_MODELS, TASKS
from course_lib.training.engine import TrainHistory, train

__all__ = ["main", "load_config", "run", "write_metrics", "checkpoint_steps", "check_resumable", "ConfigError",
           "notebook_models_table"]

# Keys that may change between a run and its resumption (everything else must match the checkpoint; `steps`
# only for a task whose schedule does not depend on it, see Task.schedule_keys).
RESUMABLE_CHANGES = frozenset({"steps", "checkpoint_every", "keep_checkpoints"})

# What a run writes into its folder besides checkpoints/: reused only with --resume, replaced with --force.
RUN_FILES = ("config.json", "metrics.csv", "metrics.png", "result.json")

T = TypeVar("T")


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


def _decided_by_rank0(ctx: DistributedContext, decide: Callable[[], T]) -> T:
    """``decide()`` run on process 0 only (it may read the disk) and its answer broadcast to every process.

    An exception in ``decide()`` is broadcast too and raised on every process (none is left waiting)."""
    if not ctx.distributed:
        return decide()
    answer: list = [None]
    if ctx.is_main:
        try:
            answer[0] = decide()
        except Exception as error:  # re-raised below, on every process
            answer[0] = error
    torch.distributed.broadcast_object_list(answer, src=0)
    if isinstance(answer[0], Exception):
        raise answer[0]
    return answer[0]


def checkpoint_steps(start: int, steps: int, every: int) -> set[int]:
    """The steps after which a run from ``start`` to ``steps`` saves: every ``every``-th, and the last once.

    Computed from numbers every process shares, so all of them enter each save's collective together.
    """
    return set(range((start // every + 1) * every, steps + 1, every)) | ({steps} if steps > start else set())


@dataclass(frozen=True)
class StartPlan:
    """How a run starts, decided by process 0: from ``checkpoint`` (a path) or from step 0 (None)."""

    checkpoint: str | None = None
    note: str = ""


def check_resumable(task: str, config: dict, state: dict, path: Path, world_size: int) -> None:
    """A ConfigError saying why ``state`` (a checkpoint read from ``path``) cannot continue as ``config``."""
    defaults, trained = TASKS[task].defaults, int(state["history"]["steps"])
    before = {key: state["config"].get(key, defaults[key]) for key in config}
    changed = sorted(k for k in config if k not in RESUMABLE_CHANGES and before[k] != config[k])
    if changed:
        raise ConfigError(f"--resume: {path} was written with a different configuration: "
                          + ", ".join(f"{k}={before[k]!r} there, {config[k]!r} now" for k in changed)
                          + "; resume with the same values, or start again with --force")
    if len(state["rng"]) != world_size:
        raise ConfigError(f"--resume: {path} was written by {len(state['rng'])} process(es), this run has "
                          f"{world_size}; resume with the same number")
    if config["steps"] < trained:
        raise ConfigError(f"--resume: {path} has already trained {trained} steps, more than steps={config['steps']}")
    moved = [k for k in TASKS[task].schedule_keys if before[k] != config[k]]
    if moved:
        raise ConfigError(f"--resume: {task}'s learning-rate schedule is built from "
                          + ", ".join(f"{k} ({before[k]!r} in {path.name}, {config[k]!r} now)" for k in moved)
                          + f": resuming would reshape it (the rate jumps at step {trained}). Resume with "
                          + " ".join(f"--set {k}={before[k]}" for k in moved)
                          + ", or start a longer run from scratch with --force")


def plan_start(task: str, config: dict, out: Path, resume: bool, force: bool, world_size: int) -> StartPlan:
    """Process 0's decision: resume from which checkpoint or start afresh; a ConfigError saying why it refuses."""
    folder = out / "checkpoints"
    found_files = list_checkpoints(folder)
    if resume:
        if not found_files:
            return StartPlan(note=f"no checkpoint in {folder}: starting from step 0")
        found = latest_checkpoint(folder)
        if found is None:
            raise ConfigError(f"--resume: none of the {len(found_files)} checkpoint(s) in {folder} is intact (see "
                              f"the warnings above); nothing to resume from. Restore a checkpoint, or start again "
                              f"with --force")
        path, state = found
        check_resumable(task, config, state, path, world_size)
        return StartPlan(checkpoint=str(path), note=f"resuming from {path} (step {state['history']['steps']})")
    previous = [name for name in RUN_FILES if (out / name).exists()] + [p.name for _, p in found_files]
    if previous and not force:
        raise ConfigError(f"--out {out} already holds a run ({', '.join(previous)}): continue it with --resume, "
                          f"or replace it with --force")
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for _, path in found_files:
        path.unlink()
    return StartPlan(note=f"--force: replaced the run in {out}" if previous else "")


def run(task: str, config: dict, out: str | os.PathLike, resume: bool = False, progress: bool = True,
        device: str | None = None, force: bool = False) -> dict:
    """Train ``task`` with ``config``, checkpointing into ``out``; the final evaluation (on rank 0) or {}.

    ``out`` may already hold a run only with ``resume`` (continue it) or ``force`` (replace it); a refusal is a
    ConfigError raised on every process. Data and model-shape errors of the configuration are ConfigErrors too.
    """
    from torch.nn.parallel import DistributedDataParallel

    out = Path(out)
    folder = out / "checkpoints"
    ctx = init_distributed(device)
    say = (lambda *a: print(*a, flush=True)) if ctx.is_main else (lambda *a: None)
    model = None
    try:
        plan = _decided_by_rank0(ctx, lambda: plan_start(task, config, out, resume, force, ctx.world_size))
        if plan.note:
            say(plan.note)
        set_seed(config["seed"])
        try:
            setup = TASKS[task].build(config, ctx.device)
            stream = ShardedBatches(setup.dataset, config["batch_size"], setup.collate_fn, seed=config["seed"],
                                    rank=ctx.rank, world_size=ctx.world_size, accumulate=config["accumulate"])
        except (ValueError, OSError) as error:  # a data file, a model shape or a batch the data cannot fill
            raise ConfigError(f"{task}: {error}") from error
        module = setup.model
        model = module
        if ctx.distributed:
            model = DistributedDataParallel(module, device_ids=[ctx.device.index] if ctx.device.type == "cuda"
                                            else None)
        history = TrainHistory()
        set_seed(config["seed"] + ctx.rank)  # dropout and augmentation differ between processes
        if plan.checkpoint is not None:  # every process reads the file process 0 chose and checked
            state = load_checkpoint(plan.checkpoint, map_location=ctx.device)
            module.load_state_dict(state["model"])
            setup.optimizer.load_state_dict(state["optimizer"])
            if setup.scheduler is not None:
                setup.scheduler.load_state_dict(state["scheduler"])
            history.load_state_dict(state["history"])
            stream.load_state_dict(state["data"])
            restore_rng_state(state["rng"][ctx.rank])
        if ctx.is_main:
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.json").write_text(json.dumps({"task": task, **config}, indent=2) + "\n")
        say(f"course-train {task}: {setup.description}; {ctx.world_size} process(es) on {ctx.device}, "
            f"batch {config['batch_size']} per process" + (f" x {config['accumulate']} accumulated"
                                                           if config["accumulate"] > 1 else "")
            + f", {config['steps']} steps")

        def save() -> None:
            rngs = _gather_rng(ctx)  # a collective: every process calls save() at the same steps
            if ctx.is_main:
                state = {"config": config, "model": module.state_dict(), "optimizer": setup.optimizer.state_dict(),
                         "scheduler": setup.scheduler.state_dict() if setup.scheduler is not None else None,
                         "history": history.state_dict(), "data": stream.state_dict(), "rng": rngs,
                         "world_size": ctx.world_size}
                save_checkpoint(state, checkpoint_path(folder, history.steps))
                prune_checkpoints(folder, config["keep_checkpoints"])
                write_metrics(history, out, f"course-train {task}", plot=False)  # the plot once, at the end

        saves = checkpoint_steps(history.steps, config["steps"], config["checkpoint_every"])

        def on_step(hist: TrainHistory, _prediction) -> None:
            if hist.steps in saves:
                save()

        use_bf16 = ctx.device.type == "cuda" and config["amp"] == "auto" and torch.cuda.is_bf16_supported()
        train(model, stream, config["steps"] - history.steps, setup.optimizer, setup.scheduler,
              loss_fn=setup.loss_fn, device=ctx.device, clip_grad_norm=config["clip_grad_norm"] or None,
              progress=progress and ctx.is_main, history=history, step_fn=setup.step_fn,
              desc=f"course-train {task}", on_step=on_step, autocast_dtype=torch.bfloat16 if use_bf16 else None,
              accumulate=config["accumulate"])
        history.epochs = (history.steps * config["batch_size"] * config["accumulate"] * ctx.world_size
                          / len(setup.dataset))
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
        model = None  # noqa: F841 - DDP's reducer holds the process group: it goes first (see DistributedContext.close)
        ctx.close()


def _parser() -> argparse.ArgumentParser:
    """The command line of ``course-train``."""
    parser = argparse.ArgumentParser(prog="course-train", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=notebook_models_table())
    parser.add_argument("task", nargs="?", choices=sorted(TASKS),
                        help="; ".join(f"{t.name}: {t.help}" for t in TASKS.values()))
    parser.add_argument("--list", action="store_true",
                        help="list every notebook that trains a model and the task that trains it, then exit")
    parser.add_argument("--config", help="a JSON or TOML file of configuration keys (the defaults are the notebook's)")
    parser.add_argument("--steps", type=int, help="total optimizer steps")
    parser.add_argument("--batch-size", type=int, help="examples per batch and process")
    parser.add_argument("--accumulate", type=int, help="batches per optimizer step (gradient accumulation)")
    parser.add_argument("--checkpoint-every", type=int, help="steps between checkpoints")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any configuration key")
    parser.add_argument("--out", help="output folder (default runs/<task>)")
    again = parser.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue from the newest intact checkpoint in --out")
    again.add_argument("--force", action="store_true", help="replace the run already in --out")
    parser.add_argument("--quick", action="store_true",
                        help="a run of seconds (tiny model, 30 steps); also with COURSE_SMOKE=1")
    parser.add_argument("--device", help="cpu, cuda or mps (default: as the notebooks choose, COURSE_DEVICE)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def notebook_models_table() -> str:
    """What ``course-train --list`` prints: each task, then every notebook that trains a model and how."""
    lines = ["tasks:"] + [f"  {t.name:10} {t.help}" for t in TASKS.values()] + ["", "notebooks:"]
    lines += [f"  {notebook:26} {how}" for notebook, how in NOTEBOOK_MODELS.items()]
    return "\n".join(lines)


def _fail(message: str, code: int) -> int:
    """Print one error line (prefixed with the process's rank when there are several) and return ``code``."""
    rank = f"[rank {os.environ['RANK']}] " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
    print(f"{rank}course-train: error: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """The ``course-train`` command: 0 when trained, 2 for a configuration, data or resume error, 1 on a
    non-finite loss."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.list:
        print(notebook_models_table())
        return 0
    if args.task is None:
        parser.error(f"the task is required (one of {', '.join(sorted(TASKS))}; --list shows the notebooks')")
    overrides = {key: value for key, value in (("steps", args.steps), ("batch_size", args.batch_size),
                                               ("accumulate", args.accumulate),
                                               ("checkpoint_every", args.checkpoint_every), ("seed", args.seed))
                 if value is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            return _fail(f"--set expects KEY=VALUE, got {item!r}", 2)
        overrides[key] = value
    try:
        config = load_config(args.task, args.config, overrides, quick=quick_requested(args.quick))
        run(args.task, config, args.out or f"runs/{args.task}", resume=args.resume, progress=not args.no_progress,
            device=args.device, force=args.force)
    except ConfigError as error:
        return _fail(str(error), 2)
    except FloatingPointError as error:
        return _fail(f"{error}; every process stopped there (try a lower learning rate, or clip_grad_norm)", 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
