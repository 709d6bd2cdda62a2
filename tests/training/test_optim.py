"""The hand-written training pieces (course_lib.training.optim, the schedule's conventions, windows over a
memory-mapped token file) against PyTorch's and Hugging Face's: equal step for step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from transformers import get_cosine_schedule_with_warmup, get_cosine_with_min_lr_schedule_with_warmup

from course_lib.data.python_docs import random_windows
from course_lib.training.engine import warmup_cosine_factor, warmup_cosine_schedule
from course_lib.training.optim import AdamW, clip_grad_norm, load_training_state, save_training_state


def small_model(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.GELU(), nn.Linear(7, 3)).to(dtype)


def run(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(4, 5, generator=gen, dtype=next(model.parameters()).dtype)
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        optimizer.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("options", [dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
                                     dict(lr=1e-2, weight_decay=0.0), dict()])
def test_adamw_equals_pytorch_step_for_step(dtype: torch.dtype, options: dict) -> None:
    mine, theirs = small_model(dtype), small_model(dtype)
    ours_opt, torch_opt = AdamW(mine.parameters(), **options), torch.optim.AdamW(theirs.parameters(), foreach=False,
                                                                                  **options)
    for _ in range(30):
        run(mine, ours_opt, 1), run(theirs, torch_opt, 1)
        for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b)


def test_adamw_parameter_groups_and_parameters_without_gradients() -> None:
    mine, theirs = small_model(), small_model()

    def groups(m: nn.Module) -> list[dict]:
        return [{"params": m[0].parameters(), "weight_decay": 0.5}, {"params": m[2].parameters(), "lr": 1e-2}]

    ours_opt, torch_opt = AdamW(groups(mine), lr=1e-3), torch.optim.AdamW(groups(theirs), lr=1e-3, foreach=False)
    mine[2].bias.requires_grad_(False), theirs[2].bias.requires_grad_(False)
    run(mine, ours_opt, 5), run(theirs, torch_opt, 5)
    for a, b in zip(mine.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_adamw_refuses_bad_hyperparameters() -> None:
    with pytest.raises(ValueError, match="betas"):
        AdamW(small_model().parameters(), betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr"):
        AdamW(small_model().parameters(), lr=-1.0)


@pytest.mark.parametrize("scale,max_norm", [(10.0, 1.0), (0.01, 1.0), (3.0, 0.5)])
def test_clip_grad_norm_equals_pytorch(scale: float, max_norm: float) -> None:
    mine, theirs = small_model(), small_model()
    gen = torch.Generator().manual_seed(0)
    for p, q in zip(mine.parameters(), theirs.parameters(), strict=True):
        p.grad = torch.randn(p.shape, generator=gen) * scale
        q.grad = p.grad.clone()
    mine[0].bias.grad = None  # a parameter without a gradient is left out, as in PyTorch
    theirs[0].bias.grad = None
    norm = clip_grad_norm(mine.parameters(), max_norm)
    torch_norm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), max_norm)
    assert torch.equal(norm, torch_norm)
    for p, q in zip(mine.parameters(), theirs.parameters(), strict=True):
        assert (p.grad is None and q.grad is None) or torch.equal(p.grad, q.grad)


def test_training_state_resumes_exactly(tmp_path) -> None:
    straight, resumed = small_model(), small_model()
    opt = AdamW(straight.parameters(), lr=1e-2)
    run(straight, opt, 5, seed=1), run(straight, opt, 5, seed=2)
    first = AdamW(resumed.parameters(), lr=1e-2)
    run(resumed, first, 5, seed=1)
    save_training_state(tmp_path / "state.pt", resumed, first, step=5)
    fresh = small_model()
    fresh_opt = AdamW(fresh.parameters(), lr=1e-2)
    assert load_training_state(tmp_path / "state.pt", fresh, fresh_opt) == 5
    run(fresh, fresh_opt, 5, seed=2)
    for a, b in zip(straight.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)


def test_training_state_names_a_wrong_file(tmp_path) -> None:
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="other.pt is not a training state"):
        load_training_state(tmp_path / "other.pt", small_model())


@pytest.mark.parametrize("floor", [0.0, 0.1])
def test_zero_start_schedule_equals_hugging_face(floor: float) -> None:
    warmup, steps = 10, 50
    model = small_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    if floor == 0.0:
        hf = get_cosine_schedule_with_warmup(opt, warmup, steps)
    else:
        hf = get_cosine_with_min_lr_schedule_with_warmup(opt, warmup, steps, min_lr_rate=floor)
    for step in range(steps + 1):
        assert warmup_cosine_factor(step, warmup, steps, floor, zero_start=True) == pytest.approx(
            hf.lr_lambdas[0](step), abs=1e-12)


def test_schedule_conventions_differ_only_in_the_warm_up() -> None:
    ours = [warmup_cosine_factor(s, 4, 20) for s in range(25)]
    zero = [warmup_cosine_factor(s, 4, 20, zero_start=True) for s in range(25)]
    assert ours[:4] == [0.25, 0.5, 0.75, 1.0] and zero[:4] == [0.0, 0.25, 0.5, 0.75]
    assert ours[4:] == zero[4:]
    opt = torch.optim.SGD(small_model().parameters(), lr=2.0)
    sched = warmup_cosine_schedule(opt, 4, 20, zero_start=True)
    assert opt.param_groups[0]["lr"] == 0.0
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.5)


def test_random_windows_read_a_memory_mapped_file_like_a_tensor(tmp_path) -> None:
    ids = np.arange(1000, dtype=np.uint16) * 7 % 5003
    ids.tofile(tmp_path / "tokens.bin")
    mapped = np.memmap(tmp_path / "tokens.bin", dtype=np.uint16, mode="r")
    from_file = random_windows(mapped, 8, 16, torch.Generator().manual_seed(3))
    from_tensor = random_windows(torch.from_numpy(ids.astype(np.int64)), 8, 16, torch.Generator().manual_seed(3))
    assert from_file.dtype == torch.long and from_file.shape == (8, 17)
    assert torch.equal(from_file, from_tensor)
    with pytest.raises(ValueError, match="NumPy integer array"):
        random_windows(np.zeros(100, dtype=np.float32), 2, 4)


def test_train_lm_with_the_course_pieces_equals_pytorchs_bit_for_bit() -> None:
    """Notebook 11 trains with notebook 10's update and clipping (the learner's where they pass): with the course's
    references its losses and weights are PyTorch's, so its printed numbers do not move."""
    from course_lib.models.gpt import GPT
    from course_lib.training.language_model import train_lm
    from course_lib.training.optim import adamw_update, clip_by_global_norm

    stream = torch.randint(0, 100, (3000,), generator=torch.Generator().manual_seed(0))
    runs = []
    for pieces in ({}, {"update": adamw_update, "clip": clip_by_global_norm}):
        torch.manual_seed(0)
        model = GPT(100, d_model=32, num_heads=4, num_layers=2, max_len=32, dropout=0.0)
        history = train_lm(model, stream, steps=12, batch_size=4, seq_len=32, lr=2e-3, warmup=4, progress=False,
                           **pieces)
        runs.append((history.losses, [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))


def test_a_given_clipping_function_runs_in_place() -> None:
    model = small_model()
    for p in model.parameters():
        p.grad = torch.full_like(p, 10.0)
    calls = []

    def clip(grads, max_norm, eps=1e-6):
        calls.append(len(grads))
        return [g * 0.0 for g in grads], torch.tensor(1.0)

    assert clip_grad_norm(model.parameters(), 1.0, clip=clip) == 1.0
    assert calls == [4] and all(bool((p.grad == 0).all()) for p in model.parameters())
