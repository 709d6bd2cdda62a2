"""course_lib.trainer and ``course-train``: atomic checkpoints with a checksum, a damaged newest checkpoint
skipped for the previous one, the sharded resumable batch stream, exact resume after SIGKILL, and two
processes (torchrun, DDP, gloo) equal to one process with the double batch."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from course_lib.trainer import (
    CorruptCheckpointError,
    ShardedBatches,
    latest_checkpoint,
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from course_lib.trainer.checkpoint import checkpoint_path, prune_checkpoints
from course_lib.trainer.cli import load_config

ROOT = Path(__file__).resolve().parent.parent


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
    with pytest.raises(ValueError, match="fewer than one batch"):
        ShardedBatches(list(range(3)), 2, list, world_size=2)


def test_config_errors_name_the_key(tmp_path) -> None:
    assert load_config("vit")["steps"] == 2500 and load_config("translate")["d_model"] == 128  # the notebooks'
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
    return [sys.executable, "-m", "course_lib.trainer", task, "--config", str(config), "--out", str(out),
            "--no-progress", *extra]


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
def test_two_processes_equal_one_process_with_the_double_batch(tmp_path) -> None:
    """torchrun, DDP, gloo: 2 processes with batch 8 each against 1 process with batch 16. The translation
    task has padding, so the two processes' token counts differ and the loss rescaling is exercised."""
    from course_lib.text import Batch
    from course_lib.transformer import Transformer

    base = dict(n_train=400, n_valid=0, n_test=40, max_number=9999, bpe_vocab_size=60, d_model=16, num_heads=2,
                num_layers=1, d_ff=32, dropout=0.0, warmup=4, steps=12, checkpoint_every=100, eval_size=20)
    for name, batch in (("one", 16), ("two", 8)):
        (tmp_path / f"{name}.json").write_text(json.dumps({**base, "batch_size": batch}))
    one_process = subprocess.Popen(_command("translate", tmp_path / "one.json", tmp_path / "one"), env=_env(),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    two = _command("translate", tmp_path / "two.json", tmp_path / "two")
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *two[1:]]
    done = subprocess.run(launch, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert one_process.wait() == 0, one_process.stderr.read()[-3000:]
    assert json.loads((tmp_path / "two" / "result.json").read_text())["processes"] == 2
    one, two = _final_parameters(tmp_path / "one", 12), _final_parameters(tmp_path / "two", 12)
    for name in one:
        if name.endswith("w_k.bias"):
            # The key projection's bias adds q.b_k to every score of a row, which softmax ignores: its gradient
            # is 0 in exact arithmetic, so it holds only rounding noise, which Adam (eps 1e-9) scales up to
            # full-size steps. It does not change the model's output (checked on the logits below).
            continue
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-5, msg=name)
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
              for n in ("one", "two")]
    assert len(losses[0]) == 12 and losses[0][-1] < losses[0][0]
    assert np.allclose(losses[0], losses[1], rtol=1e-5)  # the global loss is logged
