"""course_lib.training.cli and ``course-train``: atomic checkpoints with a checksum, a damaged newest checkpoint
skipped for the previous one, the sharded resumable batch stream, exact resume after SIGKILL (on 1 and on 2
processes), two processes (torchrun, DDP, gloo) equal to one process with the double batch, gradient
accumulation (DDP's no_sync) equal to the larger batch, a run whose last step is a checkpoint step finishing
on 2 processes, every process stopping together on a non-finite loss, and the refusals: resume without an
intact checkpoint or with a reshaped schedule, a reused output folder, configuration and data errors (one
line naming the file or key, exit code 2)."""

from __future__ import annotations

import gc
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib.training.cli import (
    CorruptCheckpointError,
    ShardedBatches,
    latest_checkpoint,
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from course_lib.training.cli.checkpoint import checkpoint_path, prune_checkpoints
from course_lib.training.cli.cli import load_config

ROOT = Path(__file__).resolve().parents[2]


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((3, 4), value)}, "history": {"losses": [value, 2.0]}, "step": int(value)}


def test_checkpoint_round_trip_and_atomic_write(tmp_path) -> None:
    path = save_checkpoint(_state(1.0), checkpoint_path(tmp_path, 10))
    assert path.name == "step-000010.pt"
    loaded = load_checkpoint(path)
    assert torch.equal(loaded["model"]["w"], torch.full((3, 4), 1.0)) and loaded["history"]["losses"] == [1.0, 2.0]
    save_checkpoint(_state(5.0), path)  # overwriting goes through a temporary file and os.replace
    assert load_checkpoint(path)["step"] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["step-000010.pt"]  # no temporary file left behind


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty"])
def test_damaged_newest_checkpoint_falls_back_to_the_previous(tmp_path, damage) -> None:
    for step in (10, 20, 30):
        save_checkpoint(_state(float(step)), checkpoint_path(tmp_path, step))
    newest = checkpoint_path(tmp_path, 30)
    data = newest.read_bytes()
    newest.write_bytes({"truncate": data[: len(data) // 2], "flip": data[:-10] + bytes([data[-10] ^ 1]) + data[-9:],
                        "header": b"PK" + data[2:], "empty": b""}[damage])
    with pytest.raises(CorruptCheckpointError, match="step-000030.pt"):
        load_checkpoint(newest)
    with pytest.warns(RuntimeWarning, match="skipping a damaged checkpoint"):
        path, state = latest_checkpoint(tmp_path)
    assert path == checkpoint_path(tmp_path, 20) and state["step"] == 20
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000020.pt", "step-000030.pt"]
    assert latest_checkpoint(tmp_path / "nothing-here") is None


def test_rng_state_round_trip() -> None:
    state = rng_state()
    draws = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(5), np.random.rand(7), random.random()  # move every generator on
    restore_rng_state(state)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(draws[0], again[0]) and np.array_equal(draws[1], again[1]) and draws[2] == again[2]


def test_two_shards_make_the_double_batch_and_resume_in_place() -> None:
    data = list(range(23))
    one = iter(ShardedBatches(data, 4, list, seed=3, rank=0, world_size=1))
    ranks = [iter(ShardedBatches(data, 2, list, seed=3, rank=r, world_size=2)) for r in (0, 1)]
    for _ in range(12):  # 5 batches per epoch: crosses two epoch boundaries
        assert sorted(next(one)) == sorted(next(ranks[0]) + next(ranks[1]))
    stream = ShardedBatches(data, 4, list, seed=3)
    it = iter(stream)
    first = [next(it) for _ in range(7)]
    resumed = ShardedBatches(data, 4, list, seed=3)
    resumed.load_state_dict({"epoch": 0, "position": 3})
    assert [next(iter(resumed)) for _ in range(1)] == [first[3]]
    assert stream.state_dict() == {"epoch": 1, "position": 2}
    with pytest.raises(ValueError, match="fewer than one step"):
        ShardedBatches(list(range(3)), 2, list, world_size=2)


def test_accumulated_batches_cut_the_larger_batch_in_order() -> None:
    """k consecutive batches of b are one batch of k*b cut in k, epochs included (an epoch ends on a step)."""
    data = list(range(25))  # 25 // 16 = 1 step of 16 an epoch; 25 // 8 = 3 batches of 8 would break the pairing
    large = iter(ShardedBatches(data, 16, list, seed=1))
    small = ShardedBatches(data, 8, list, seed=1, accumulate=2)
    assert small.batches_per_epoch == 2
    it = iter(small)
    for _ in range(5):
        assert next(large) == next(it) + next(it)


def test_config_errors_name_the_key(tmp_path) -> None:
    (tmp_path / "c.toml").write_text('steps = 7\nlr = 1\n', encoding="utf-8")
    config = load_config("vit", str(tmp_path / "c.toml"), {"max_shift": "0"})
    assert (config["steps"], config["lr"], config["max_shift"]) == (7, 1.0, 0)
    with pytest.raises(ValueError, match="unknown configuration key 'd_modle'"):
        load_config("vit", overrides={"d_modle": 8})
    with pytest.raises(ValueError, match="pool must be a str"):
        load_config("vit", overrides={"pool": 3})
    with pytest.raises(ValueError, match="unknown task"):
        load_config("gpt")


# ------------------------------------------------------------------------------------------------
# Whole runs in subprocesses (tiny models, CPU, float32)
# ------------------------------------------------------------------------------------------------

def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COURSE_DEVICE": "cpu"}


def _command(task: str, config: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "course_lib.training.cli", task, "--config", str(config), "--out", str(out),
            "--no-progress", *extra]


def _torchrun(command: list[str], processes: int = 2) -> list[str]:
    """``command`` (a ``python -m ...`` list) started by torchrun on ``processes`` local processes."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
            *command[1:]]


def _final_parameters(out: Path, steps: int) -> dict:
    return load_checkpoint(checkpoint_path(out / "checkpoints", steps))["model"]


@pytest.mark.slow
def test_sigkill_and_resume_equals_an_uninterrupted_run(tmp_path) -> None:
    """Dropout and random shifts on, so the RNG states and the data position must all be restored."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.1, max_shift=1,
                                      batch_size=16, warmup=5, steps=60, checkpoint_every=10)))
    whole_run = subprocess.Popen(_command("vit", config, tmp_path / "whole"), env=_env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # alongside, for time
    killed = subprocess.Popen(_command("vit", config, tmp_path / "killed"), env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 120
    while not checkpoint_path(folder, 20).exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    still_running = killed.poll() is None
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL and still_running, "the run ended before it could be killed"
    assert not checkpoint_path(folder, 60).exists()
    newest = max(folder.glob("step-*.pt"))
    newest.write_bytes(newest.read_bytes()[:1000])  # and the newest checkpoint is damaged: the one before is used
    resumed = subprocess.run(_command("vit", config, tmp_path / "killed", "--resume"), env=_env(), check=True,
                             capture_output=True, text=True)
    assert "resuming from" in resumed.stdout and "skipping a damaged checkpoint" in resumed.stderr
    assert whole_run.wait() == 0
    whole, again = _final_parameters(tmp_path / "whole", 60), _final_parameters(tmp_path / "killed", 60)
    assert whole.keys() == again.keys()
    for name in whole:
        assert torch.equal(whole[name], again[name]), name
    a = json.loads((tmp_path / "whole" / "result.json").read_text())
    b = json.loads((tmp_path / "killed" / "result.json").read_text())
    assert a["test_accuracy"] == b["test_accuracy"]
    lines = (tmp_path / "killed" / "metrics.csv").read_text().splitlines()
    assert lines == (tmp_path / "whole" / "metrics.csv").read_text().splitlines() and len(lines) == 61
    assert (tmp_path / "killed" / "metrics.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
@pytest.mark.timeout(900)  # distributed: a hang in a process group fails, never stalls
def test_two_processes_equal_one_process_with_the_double_batch(tmp_path) -> None:
    """torchrun, DDP, gloo: 2 processes with batch 8 each against 1 process with batch 16. The translation
    task has padding, so the two processes' token counts differ and the loss rescaling is exercised."""
    from course_lib.data.translation import Batch
    from course_lib.models.transformer import Transformer

    base = dict(n_train=400, n_valid=0, n_test=40, max_number=9999, bpe_vocab_size=60, d_model=16, num_heads=2,
                num_layers=1, d_ff=32, dropout=0.0, warmup=4, steps=12, checkpoint_every=100, eval_size=20)
    # "acc": 2 processes x 2 accumulated batches of 4 (DDP's no_sync on the first of each step): the same batch
    for name, batch, accumulate in (("one", 16, 1), ("two", 8, 1), ("acc", 4, 2)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**base, "batch_size": batch, "accumulate": accumulate}))
    one_process = subprocess.Popen(_command("translate", tmp_path / "one.json", tmp_path / "one"), env=_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for name in ("two", "acc"):
        done = subprocess.run(_torchrun(_command("translate", tmp_path / f"{name}.json", tmp_path / name)),
                              env=_env(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads((tmp_path / name / "result.json").read_text())["processes"] == 2
    assert one_process.wait() == 0, one_process.stderr.read()[-3000:]
    one, two, acc = (_final_parameters(tmp_path / name, 12) for name in ("one", "two", "acc"))
    for name in one:
        if name.endswith("w_k.bias"):
            # The key projection's bias adds q.b_k to every score of a row, which softmax ignores: its gradient
            # is 0 in exact arithmetic, so it holds only rounding noise, which Adam (eps 1e-9) scales up to
            # full-size steps. It does not change the model's output (checked on the logits below).
            continue
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
        torch.testing.assert_close(acc[name], one[name], rtol=0, atol=1e-5, msg=name)
    models = []
    for params in (one, two):
        model = Transformer(params["src_embed.weight"].shape[0], params["tgt_embed.weight"].shape[0], d_model=16,
                            num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0,
                            max_len=128, norm_first=True).eval()
        model.load_state_dict(params)
        models.append(model)
    gen = torch.Generator().manual_seed(0)
    batch = Batch(src=torch.randint(4, 30, (6, 9), generator=gen), tgt_in=torch.randint(4, 40, (6, 7), generator=gen),
                  tgt_out=torch.zeros(6, 7, dtype=torch.long))
    with torch.no_grad():
        logits = [m(batch.src, batch.tgt_in) for m in models]  # (6, 7, vocab)
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-5)
    untrained = Transformer(models[0].src_embed.num_embeddings, models[0].tgt_embed.num_embeddings, d_model=16,
                            num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=32, dropout=0.0)
    assert not torch.allclose(one["generator.weight"], untrained.generator.weight)  # training moved them
    losses = [[float(row.split(",")[1]) for row in (tmp_path / n / "metrics.csv").read_text().splitlines()[1:]]
              for n in ("one", "two", "acc")]
    assert len(losses[0]) == 12 and losses[0][-1] < losses[0][0]
    assert np.allclose(losses[0], losses[1], rtol=1e-5)  # the global loss is logged
    assert np.allclose(losses[0], losses[2], rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# Decisions every process takes together, configuration and data errors, refusals (one process, in-process)
# ------------------------------------------------------------------------------------------------

def test_checkpoint_steps_come_from_the_step_count_alone() -> None:
    """Step counts that are multiples of the checkpoint interval (800 / 100) end on a checkpoint step: one save
    there, not two."""
    from course_lib.training.cli.cli import checkpoint_steps

    assert checkpoint_steps(0, 800, 100) == set(range(100, 801, 100))
    assert checkpoint_steps(0, 12, 100) == {12}
    assert checkpoint_steps(250, 805, 100) == {300, 400, 500, 600, 700, 800, 805}
    assert checkpoint_steps(800, 800, 100) == set()  # resumed at the end: nothing left to save


def _main(capsys, *argv: str) -> tuple[int, str, str]:
    from course_lib.training.cli.cli import main

    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("name, text, where", [
    ("bad.toml", 'steps = 4\nlr = = 3\n', "bad.toml: invalid TOML: Invalid value (at line 2"),
    ("bad.json", '{"steps": 4,\n "lr": }', "bad.json:2: invalid JSON"),
    ("list.json", '[1, 2]', "list.json: expected a table of configuration keys"),
    ("typo.toml", 'steps = 4\nd_modle = 8\n', "typo.toml: unknown configuration key 'd_modle'"),
    ("amp.toml", 'amp = "fp8"\n', "amp.toml: amp must be one of 'auto', 'off', got 'fp8'"),
    ("acc.json", '{"accumulate": 0}', "accumulate must be >= 1, got 0"),
    ("config.yaml", '', "--config"),
])
def test_configuration_errors_are_one_line_naming_the_file_exit_2(tmp_path, capsys, name, text, where) -> None:
    (tmp_path / name).write_text(text, encoding="utf-8")
    code, _, err = _main(capsys, "vit", "--config", str(tmp_path / name), "--out", str(tmp_path / "run"))
    assert code == 2 and where in _one_error_line(err)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("settings, message", [
    (["test_src=a.en"], "test_src = 'a.en' needs test_tgt"),
    (["train_tsv=a.tsv", "train_src=a.en", "train_tgt=a.de"], "train_tsv and train_src/train_tgt both given"),
    (["test_tsv=t.tsv"], "test_tsv/test_src need training files too"),
    (["train_tsv=MISSING.tsv"], "train_tsv: no such file: 'MISSING.tsv'"),
    (["train_src=a.en", "train_tgt=MISSING.de"], "train_src/train_tgt: no such file: 'a.en'"),
    (["train_tsv=BAD.tsv"], "train_tsv: BAD.tsv:2: expected 2 or 3 tab-separated columns"),
    (["num_heads=3"], "d_model (32) must be divisible by num_heads (3)"),
    (["batch_size=5000"], "fewer than one step"),
])
def test_data_and_value_errors_are_one_line_exit_2(tmp_path, capsys, monkeypatch, settings, message) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD.tsv").write_text("one\teins\ntwo zwei\n", encoding="utf-8")
    extra = [item for setting in settings for item in ("--set", setting)]
    code, _, err = _main(capsys, "translate", "--quick", "--device", "cpu", "--no-progress", *extra)
    assert code == 2 and message in _one_error_line(err)


def test_quick_configuration_from_the_flag_or_course_smoke(monkeypatch) -> None:
    from course_lib.training.cli.tasks import VIT_QUICK
    from course_lib.training.lessons import LESSON_08

    monkeypatch.delenv("COURSE_SMOKE", raising=False)
    assert load_config("vit")["steps"] == LESSON_08.steps == 1400  # notebook 08's default run
    assert load_config("vit", quick=True)["steps"] == VIT_QUICK["steps"] == 30
    assert load_config("vit", overrides={"steps": 7}, quick=True)["steps"] == 7  # the command line still wins
    from course_lib.training.cli.config import quick_requested

    assert not quick_requested() and quick_requested(True)
    monkeypatch.setenv("COURSE_SMOKE", "1")
    assert quick_requested()


TINY_VIT = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, batch_size=16, warmup=1, steps=4, checkpoint_every=2)


def _tiny_vit(tmp_path: Path, **changes) -> Path:
    path = tmp_path / f"tiny-{len(list(tmp_path.glob('tiny-*.json')))}.json"
    path.write_text(json.dumps({**TINY_VIT, **changes}))
    return path


def test_output_folder_reused_only_with_resume_or_force(tmp_path, capsys) -> None:
    config, out = _tiny_vit(tmp_path), str(tmp_path / "run")
    args = ("vit", "--config", str(config), "--out", out, "--device", "cpu", "--no-progress")
    assert _main(capsys, *args)[0] == 0
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000002.pt", "step-000004.pt"]
    code, _, err = _main(capsys, *args)
    assert code == 2 and "already holds a run" in _one_error_line(err) and "--force" in err
    (tmp_path / "run" / "checkpoints" / "step-000099.pt").write_bytes(b"an old run's")
    code, out_text, _ = _main(capsys, *args, "--force")
    assert code == 0 and "--force: replaced the run" in out_text
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-000002.pt", "step-000004.pt"]
    code, out_text, _ = _main(capsys, *args, "--resume")  # nothing left to train: evaluates again
    assert code == 0 and "resuming from" in out_text and "(step 4)" in out_text
    with pytest.raises(SystemExit):  # argparse: --resume and --force exclude each other
        _main(capsys, *args, "--resume", "--force")


def test_resume_refuses_damaged_checkpoints_a_reshaped_schedule_and_other_keys(tmp_path, capsys) -> None:
    config, out = _tiny_vit(tmp_path), tmp_path / "run"
    args = ("vit", "--config", str(config), "--out", str(out), "--device", "cpu", "--no-progress")
    assert _main(capsys, *args)[0] == 0
    code, _, err = _main(capsys, *args, "--resume", "--steps", "6")  # the cosine decay ends at `steps`
    assert code == 2 and "schedule is built from steps (4 in step-000004.pt, 6 now)" in err
    assert "--set steps=4" in err
    code, _, err = _main(capsys, *args, "--resume", "--set", "lr=0.01")
    assert code == 2 and "lr=0.003 there, 0.01 now" in _one_error_line(err)
    code, _, err = _main(capsys, *args, "--resume", "--steps", "2")
    assert code == 2 and "already trained 4 steps, more than steps=2" in _one_error_line(err)
    for path in (out / "checkpoints").iterdir():
        path.write_bytes(path.read_bytes()[:500])
    with pytest.warns(RuntimeWarning, match="skipping a damaged checkpoint"):
        code, _, err = _main(capsys, *args, "--resume")
    assert code == 2 and "none of the 2 checkpoint(s)" in _one_error_line(err) and "nothing to resume from" in err


def test_a_diverging_run_stops_with_one_line_and_exit_1(tmp_path, capsys) -> None:
    """A learning rate of 1e30 overflows the weights within a few steps: no traceback, the step named."""
    code, _, err = _main(capsys, "vit", "--config", str(_tiny_vit(tmp_path, lr=1e30, steps=20)), "--out",
                         str(tmp_path / "run"), "--device", "cpu", "--no-progress")
    line = _one_error_line(err)
    assert code == 1 and "train: the loss became nan at step" in line and "every process stopped" in line


def test_translate_may_resume_with_more_steps(tmp_path) -> None:
    """The paper's schedule does not depend on ``steps``: a longer resumed run is allowed (unlike the ViT's)."""
    from course_lib.training.cli.cli import ConfigError, check_resumable

    config = load_config("translate", quick=True)
    state = {"config": dict(config), "rng": [{}], "history": {"steps": 30}}
    check_resumable("translate", {**config, "steps": 60}, state, tmp_path / "step-000030.pt", world_size=1)
    with pytest.raises(ConfigError, match="written by 1 process"):
        check_resumable("translate", config, state, tmp_path / "step-000030.pt", world_size=2)
    vit = load_config("vit", quick=True)
    with pytest.raises(ConfigError, match="schedule is built from steps"):
        check_resumable("vit", {**vit, "steps": 60}, {"config": vit, "rng": [{}], "history": {"steps": 30}},
                        tmp_path / "step-000030.pt", world_size=1)


# ------------------------------------------------------------------------------------------------
# Gradient accumulation
# ------------------------------------------------------------------------------------------------

def _tiny_translation(accumulate: int, batch_size: int, steps: int, model_wrapper=None) -> dict:
    """Parameters after ``steps`` steps of the quick translation setup with ``accumulate`` batches a step."""
    from course_lib.runtime import set_seed
    from course_lib.training.cli.tasks import build_translate
    from course_lib.training.engine import train

    config = load_config("translate", overrides=dict(d_model=16, d_ff=32, n_train=300), quick=True)
    set_seed(0)
    setup = build_translate(config, torch.device("cpu"))
    stream = ShardedBatches(setup.dataset, batch_size, setup.collate_fn, seed=0, accumulate=accumulate)
    model = model_wrapper(setup.model) if model_wrapper else setup.model
    train(model, stream, steps, setup.optimizer, setup.scheduler, loss_fn=setup.loss_fn, progress=False,
          step_fn=setup.step_fn, accumulate=accumulate)
    return {name: p.detach().clone() for name, p in setup.model.named_parameters()}


def test_gradient_accumulation_equals_the_larger_batch() -> None:
    """4 steps of 2 x 8 sentences against 4 steps of 16: padding makes the batches' token counts differ, so each
    batch's loss must be weighted by its tokens (a plain mean of the two means would differ)."""
    large, accumulated = _tiny_translation(1, 16, 4), _tiny_translation(2, 8, 4)
    untrained = _tiny_translation(1, 16, 0)
    for name in large:
        if name.endswith("w_k.bias"):  # a zero gradient in exact arithmetic: rounding noise scaled by Adam
            continue
        torch.testing.assert_close(accumulated[name], large[name], rtol=0, atol=2e-6, msg=name)
    assert all(not torch.equal(large[name], untrained[name]) for name in large)  # every parameter moved
    with pytest.raises(ValueError, match="accumulate must be >= 1"):
        _tiny_translation(0, 8, 1)


@pytest.mark.timeout(120)  # distributed: a hang in a process group fails, never stalls
def test_accumulation_skips_the_gradient_all_reduce_on_all_but_the_last_batch(tmp_path) -> None:
    """DDP's own ``no_sync`` on the micro-steps: its flag seen from inside each forward pass (a group of one)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from course_lib.training.engine import classification_step, train

    seen: list[bool] = []

    def step_fn(model, batch, device):
        seen.append(model.require_backward_grad_sync)
        return classification_step(model, batch, device)

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = DistributedDataParallel(torch.nn.Linear(4, 3))
        batches = [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(6)]
        train(model, batches, 3, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=torch.nn.CrossEntropyLoss(),
              step_fn=step_fn, progress=False, accumulate=2)
    finally:
        model = None  # noqa: F841 - torn down in order: the DDP reducer holds the group, it goes first
        gc.collect()
        dist.destroy_process_group()
    assert seen == [False, True] * 3


# ------------------------------------------------------------------------------------------------
# Two processes: a run ending on a checkpoint step, kill and resume, a non-finite loss on one process
# ------------------------------------------------------------------------------------------------

def _kill_workers(launcher: subprocess.Popen) -> None:
    """SIGKILL torchrun's workers (each in its own session, so not in the launcher's process group)."""
    children = set()
    for task in Path(f"/proc/{launcher.pid}/task").iterdir():
        children |= {int(pid) for pid in (task / "children").read_text().split()}
    assert len(children) == 2, children
    for pid in children:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds torchrun's workers in /proc (Linux)")
@pytest.mark.timeout(900)  # distributed: a hang in a process group fails, never stalls
def test_two_processes_end_on_a_checkpoint_step_and_resume_after_sigkill(tmp_path) -> None:
    """steps a multiple of checkpoint_every (as both tasks' defaults are): the run used to hang at its end,
    rank 0 in a barrier and rank 1 in all_gather_object, each deciding the last save from the disk. Killed
    after its second checkpoint (the newest then damaged) and resumed on 2 processes, the run ends with the
    same parameters, bit for bit, as the uninterrupted one; dropout and shifts differ per process."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(dict(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.1, max_shift=1,
                                      batch_size=16, warmup=5, steps=60, checkpoint_every=10)))
    whole = subprocess.run(_torchrun(_command("vit", config, tmp_path / "whole")), env=_env(), capture_output=True,
                           text=True, timeout=300)  # a hang fails here, long before gloo's 30 minutes
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "whole" / "checkpoints").iterdir()) == ["step-000050.pt",
                                                                                   "step-000060.pt"]
    killed = subprocess.Popen(_torchrun(_command("vit", config, tmp_path / "killed")), env=_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    folder = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while not checkpoint_path(folder, 20).exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert killed.poll() is None, "the run ended before it could be killed"
    _kill_workers(killed)
    assert killed.wait(timeout=120) != 0 and not checkpoint_path(folder, 60).exists()
    newest = max(folder.glob("step-*.pt"))
    newest.write_bytes(newest.read_bytes()[:1000])
    resumed = subprocess.run(_torchrun(_command("vit", config, tmp_path / "killed", "--resume")), env=_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stdout and "skipping a damaged checkpoint" in resumed.stderr
    assert json.loads((tmp_path / "killed" / "result.json").read_text())["processes"] == 2
    a, b = _final_parameters(tmp_path / "whole", 60), _final_parameters(tmp_path / "killed", 60)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert ((tmp_path / "killed" / "metrics.csv").read_text().splitlines()
            == (tmp_path / "whole" / "metrics.csv").read_text().splitlines())


NAN_ON_ONE_PROCESS = """
import datetime
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from course_lib.training.engine import classification_step, train

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))  # a regression fails, never hangs
rank = dist.get_rank()
for accumulate in (1, 2):
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(4, 3))
    calls = 0

    def loss_fn(logits, target):
        global calls
        calls += 1
        loss = torch.nn.functional.cross_entropy(logits, target)
        return loss * float("nan") if rank == 1 and calls == 3 * accumulate else loss  # step 3, rank 1 only

    batches = [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(8)]
    try:
        train(model, batches, 10, torch.optim.SGD(model.parameters(), lr=0.1), loss_fn=loss_fn,
              step_fn=classification_step, progress=False, accumulate=accumulate)
    except FloatingPointError as error:
        print(f"accumulate {accumulate}, rank {rank}: {error}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.timeout(600)  # distributed: a hang in a process group fails, never stalls
def test_a_non_finite_loss_on_one_process_stops_every_process_at_that_step(tmp_path) -> None:
    """Rank 1's loss is NaN at step 3: both processes raise there (before, rank 0 waited in DDP's all-reduce)."""
    script = tmp_path / "nan_on_one.py"
    script.write_text(NAN_ON_ONE_PROCESS)
    done = subprocess.run(_torchrun([sys.executable, str(script)]), env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # two processes print to one pipe: a line may arrive glued to the other's, so the lines are found, not split
    lines = sorted(re.findall(r"accumulate \d, rank \d: train: the loss became nan at step \d+"
                              r"(?: \(on another process\))?", done.stdout))
    assert lines == [f"accumulate {k}, rank {r}: train: the loss became nan at step 3{where}"
                     for k in (1, 2) for r, where in ((0, " (on another process)"), (1, ""))], done.stdout


# ------------------------------------------------------------------------------------------------
# Every notebook's model: the language model (notebook 11) and BERT (notebook 12) through the same engine
# ------------------------------------------------------------------------------------------------

def test_list_and_help_name_every_notebook_that_trains_a_model(capsys) -> None:
    """A notebook trains a model when it builds an optimizer or calls one of the course's trainers."""
    import nbformat

    from course_lib.training.cli.tasks import NOTEBOOK_MODELS, TASKS

    trainers = ("torch.optim.", "make_optimizer(", "train_lm(", "pretrain_mlm(", "fit_classifier",
                "train_classifier(", "train_variant")
    training = {path.stem for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
                if any(word in cell.source for cell in nbformat.read(path, as_version=4).cells
                       if cell.cell_type == "code" for word in trainers)}
    assert {"07_training_and_decoding", "11_language_model", "12_bert"} <= training
    assert training == set(NOTEBOOK_MODELS), "every notebook that trains a model is listed, and only those"
    for how in NOTEBOOK_MODELS.values():
        for task in re.findall(r"course-train (\w+)", how):
            assert task in TASKS, how
    code, out, _ = _main(capsys, "--list")
    assert code == 0 and all(notebook in out for notebook in NOTEBOOK_MODELS) and "course-train lm" in out
    assert "course-train llama" in out and "course-train llama" in NOTEBOOK_MODELS["14_todays_models"]
    with pytest.raises(SystemExit):
        _main(capsys, "--help")
    helped = capsys.readouterr().out
    assert all(name in helped for name in ("lm", "bert", "llama", "11_language_model", "12_bert", "14_todays_models"))


def test_lm_task_trains_notebook_10s_gpt_and_scores_the_validation_perplexity(tmp_path, capsys) -> None:
    code, out, err = _main(capsys, "lm", "--quick", "--device", "cpu", "--no-progress", "--steps", "20",
                           "--out", str(tmp_path / "run"))
    assert code == 0, err
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    untrained = 300  # the vocabulary: the perplexity of a uniform guess
    assert result["task"] == "lm" and result["steps"] == 20 and 1 < result["valid_perplexity"] < untrained
    losses = [float(row.split(",")[1]) for row in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]]
    assert len(losses) == 20 and losses[-1] < losses[0]


def _synthetic_docstrings() -> list:
    """Docstrings of the task's six packages (each with words of its own) and of other modules: the stand-in for
    the standard library, which takes seconds to read."""
    from course_lib.data.stdlib_docstrings import TASK_PACKAGES, Docstring

    gen = random.Random(0)
    common = "return the value of this object and raise an error when it is missing".split()
    found = []
    for package in (*TASK_PACKAGES, "json", "shutil"):
        own = [f"{package}{i}" for i in range(5)]
        for i in range(24):
            words = gen.choices(common, k=12) + gen.choices(own, k=4)
            gen.shuffle(words)
            found.append(Docstring(package, f"{package}/m.py:f{i}", " ".join(words).capitalize() + "."))
    return found


def test_bert_task_pretrains_and_scores_by_fine_tuning(tmp_path, capsys, monkeypatch) -> None:
    import course_lib.training.pretraining

    monkeypatch.setattr(course_lib.training.pretraining, "stdlib_docstrings", _synthetic_docstrings)
    code, out, err = _main(capsys, "bert", "--quick", "--device", "cpu", "--no-progress", "--steps", "12",
                           "--set", "finetune_steps=6", "--out", str(tmp_path / "run"))
    assert code == 0, err
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["task"] == "bert" and result["labelled_examples"] == 6 * 4
    assert 0 <= result["valid_accuracy"] <= 100 and result["valid_docstrings"] > 0
    losses = [float(row.split(",")[1]) for row in (tmp_path / "run" / "metrics.csv").read_text().splitlines()[1:]]
    assert len(losses) == 12 and all(math.isfinite(loss) for loss in losses)


def test_translate_task_trains_notebook_09s_recurrent_models(tmp_path, capsys) -> None:
    for architecture in ("gru", "gru_additive"):
        out = tmp_path / architecture
        code, _, err = _main(capsys, "translate", "--quick", "--device", "cpu", "--no-progress", "--steps", "6",
                             "--set", f"architecture={architecture}", "--out", str(out))
        assert code == 0, err
        state = load_checkpoint(checkpoint_path(out / "checkpoints", 6))["model"]
        assert ("attention.v" in state) == (architecture == "gru_additive") and "encoder.weight_hh_l0" in state
    code, _, err = _main(capsys, "translate", "--quick", "--set", "architecture=lstm", "--out", str(tmp_path / "x"))
    assert code == 2 and "architecture must be one of" in err


def test_translate_task_trains_notebook_12s_key_size_and_learned_positions(tmp_path, capsys) -> None:
    out = tmp_path / "row-b-e"
    code, _, err = _main(capsys, "translate", "--quick", "--device", "cpu", "--no-progress", "--steps", "4",
                         "--set", "d_k=4", "--set", "positions=learned", "--out", str(out))
    assert code == 0, err
    state = load_checkpoint(checkpoint_path(out / "checkpoints", 4))["model"]
    d_model = load_config("translate", quick=True)["d_model"]
    assert state["encoder.layers.0.self_attn.w_q.weight"].shape == (2 * 4, d_model)  # 2 heads x d_k = 4
    assert "positional.embedding.weight" in state


# ------------------------------------------------------------------------------------------------
# Notebook 14's Llama-layout language model: one process, exact resume, errors, two processes (slow)
# ------------------------------------------------------------------------------------------------

def _losses(out: Path) -> list[float]:
    return [float(row.split(",")[1]) for row in (out / "metrics.csv").read_text().splitlines()[1:]]


def test_llama_task_trains_notebook_13s_model_and_weighs_its_cache(tmp_path, capsys) -> None:
    """RMSNorm, SwiGLU, RoPE and grouped-query attention through the one engine: the quick model has 2 query heads
    sharing 1 key/value head of d_k = 16 in 1 layer, so its cache holds 2 x 1 x 1 x 16 x 4 = 128 bytes a token."""
    from course_lib.training.cli.tasks import LLAMA_QUICK

    code, out, err = _main(capsys, "llama", "--quick", "--device", "cpu", "--no-progress", "--steps", "20",
                           "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert "2 query heads, 1 key/value head(s)" in out
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    untrained = LLAMA_QUICK["vocab_size"]  # the perplexity of a uniform guess
    assert result["task"] == "llama" and result["steps"] == 20 and 1 < result["valid_perplexity"] < untrained
    assert result["kv_cache_bytes_per_token"] == 2 * 1 * 1 * 16 * 4
    losses = _losses(tmp_path / "run")
    assert len(losses) == 20 and losses[-1] < losses[0]
    state = load_checkpoint(checkpoint_path(tmp_path / "run" / "checkpoints", 20))["model"]
    assert state["layers.0.self_attn.w_q.weight"].shape == (2 * 16, 32)   # 2 query heads
    assert state["layers.0.self_attn.w_k.weight"].shape == (1 * 16, 32)   # 1 shared key/value head
    assert "layers.0.feed_forward.w_gate.weight" in state and "norm.weight" in state and "norm.bias" not in state
    assert not any("position" in name for name in state)  # positions live in the rotations


def test_llama_task_resumed_equals_an_uninterrupted_run(tmp_path, capsys) -> None:
    """6 steps at once against 3 steps, then --resume to 6 (the warm-up-then-constant schedule lets steps grow):
    the same parameters bit for bit and the same losses; the optimizer, schedule, data position and generators
    all come back from the checkpoint. (A sliding window and interleaved RoPE, to carry those keys too.)"""
    args = ("llama", "--quick", "--device", "cpu", "--no-progress", "--checkpoint-every", "3", "--set", "window=8",
            "--set", "rope_layout=interleaved")
    assert _main(capsys, *args, "--steps", "6", "--out", str(tmp_path / "whole"))[0] == 0
    assert _main(capsys, *args, "--steps", "3", "--out", str(tmp_path / "parts"))[0] == 0
    code, out, err = _main(capsys, *args, "--steps", "6", "--out", str(tmp_path / "parts"), "--resume")
    assert code == 0 and "resuming from" in out and "(step 3)" in out, err
    whole, parts = (_final_parameters(tmp_path / name, 6) for name in ("whole", "parts"))
    assert whole.keys() == parts.keys() and all(torch.equal(whole[name], parts[name]) for name in whole)
    assert _losses(tmp_path / "whole") == _losses(tmp_path / "parts") and len(_losses(tmp_path / "whole")) == 6
    untrained = load_checkpoint(checkpoint_path(tmp_path / "parts" / "checkpoints", 3))["model"]
    assert not torch.equal(untrained["lm_head.weight"], parts["lm_head.weight"])  # the resumed steps trained
    code, _, err = _main(capsys, *args, "--steps", "6", "--out", str(tmp_path / "parts"), "--resume",
                         "--set", "num_kv_heads=2")
    assert code == 2 and "num_kv_heads=1 there, 2 now" in _one_error_line(err)


@pytest.mark.parametrize("settings, message", [
    (["window=-4"], "window must be >= 0 (0: full causal attention), got -4"),
    (["rope_layout=complex"], "rope_layout must be one of 'half', 'interleaved', got 'complex'"),
    (["num_kv_heads=3"], "llama: GroupedQueryAttention: num_kv_heads=3 must divide num_heads=2"),
])
def test_llama_configuration_errors_are_one_line_exit_2(tmp_path, capsys, settings, message) -> None:
    extra = [item for setting in settings for item in ("--set", setting)]
    code, _, err = _main(capsys, "llama", "--quick", "--device", "cpu", "--no-progress", *extra,
                         "--out", str(tmp_path / "run"))
    assert code == 2 and message in _one_error_line(err)
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)  # distributed: a hang in a process group fails, never stalls
def test_llama_on_two_processes_equals_one_process_with_the_double_batch(tmp_path) -> None:
    """torchrun, DDP, gloo: notebook 14's model (multi-query, a sliding window) on 2 processes with batch 4 each
    against 1 process with batch 8: the same parameters within 1e-5 and the same logged losses."""
    from course_lib.models.llama import Llama

    config = dict(steps=8, checkpoint_every=4, window=8)
    for name, batch in (("one", 8), ("two", 4)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**config, "batch_size": batch}))
    one_process = subprocess.Popen(_command("llama", tmp_path / "one.json", tmp_path / "one", "--quick"), env=_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    two = subprocess.run(_torchrun(_command("llama", tmp_path / "two.json", tmp_path / "two", "--quick")), env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert one_process.wait() == 0, one_process.stderr.read()[-3000:]
    assert json.loads((tmp_path / "two" / "result.json").read_text())["processes"] == 2
    one, two_params = _final_parameters(tmp_path / "one", 8), _final_parameters(tmp_path / "two", 8)
    for name in one:
        torch.testing.assert_close(two_params[name], one[name], rtol=0, atol=1e-5, msg=name)
    models = []
    for params in (one, two_params):
        model = Llama(params["token_embedding.weight"].shape[0], d_model=32, num_heads=2, num_kv_heads=1,
                      num_layers=1, max_len=32, window=8).eval()
        model.load_state_dict(params)
        models.append(model)
    tokens = torch.randint(0, models[0].vocab_size, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(models[1](tokens), models[0](tokens), rtol=0, atol=1e-5)
    assert np.allclose(_losses(tmp_path / "one"), _losses(tmp_path / "two"), rtol=1e-5)
    assert len(_losses(tmp_path / "one")) == 8
