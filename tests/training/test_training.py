"""course_lib.training.engine: the label-smoothed loss against PyTorch's, the warm-up schedule against the paper's
formula, the optimizer, and the training loop on a tiny copy task."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_lib.data.digits import digits_loaders, digits_split
from course_lib.training.engine import (
    TrainHistory,
    fused_if_supported,
    label_smoothed_cross_entropy,
    make_optimizer,
    make_scheduler,
    teacher_forced_accuracy,
    train,
    transformer_lr,
)
from course_lib.training.image_classifier import train_classifier


def _torch_loss(logits, target, smoothing, ignore_index):
    return nn.CrossEntropyLoss(label_smoothing=smoothing, ignore_index=ignore_index)(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3, 1.0])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 4, 6)])
def test_loss_equals_pytorch(smoothing, shape) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    logits = torch.randn(*shape, 11, generator=gen) * 3
    target = torch.randint(0, 11, shape, generator=gen)
    target.view(-1)[::3] = 0  # some padding
    ours = label_smoothed_cross_entropy(logits, target, smoothing, ignore_index=0)
    torch.testing.assert_close(ours, _torch_loss(logits, target, smoothing, 0))


def test_loss_gradients_equal_pytorch() -> None:
    gen = torch.Generator().manual_seed(1)
    a = (torch.randn(4, 6, 9, generator=gen)).requires_grad_()
    b = a.detach().clone().requires_grad_()
    target = torch.randint(0, 9, (4, 6), generator=gen)
    label_smoothed_cross_entropy(a, target, 0.1, 0).backward()
    _torch_loss(b, target, 0.1, 0).backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_loss_other_ignore_index() -> None:
    logits = torch.randn(10, 5)
    target = torch.tensor([0, 1, 2, 3, 4, -100, 1, -100, 2, 3])
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, target, 0.2, ignore_index=-100),
                               _torch_loss(logits, target, 0.2, -100))


def test_all_padding_batch_is_zero_not_nan() -> None:
    logits = torch.randn(2, 3, 7, requires_grad=True)
    target = torch.zeros(2, 3, dtype=torch.long)
    assert torch.isnan(_torch_loss(logits, target, 0.1, 0))  # PyTorch: 0 / 0
    ours = label_smoothed_cross_entropy(logits, target, 0.1, 0)
    assert ours.item() == 0.0
    ours.backward()
    assert torch.count_nonzero(logits.grad) == 0


def test_no_log_of_zero_for_extreme_logits() -> None:
    logits = torch.tensor([[0.0, -1e4, 1.0, 2.0], [500.0, -500.0, 0.0, 1.0]])
    target = torch.tensor([2, 0])
    naive = -(torch.log(torch.softmax(logits, -1))).mean()  # log(0) = -inf: what log(softmax) would give
    assert torch.isinf(naive)
    ours = label_smoothed_cross_entropy(logits, target, 0.1, ignore_index=-100)
    assert torch.isfinite(ours)
    torch.testing.assert_close(ours, _torch_loss(logits, target, 0.1, -100))


def test_minus_infinity_logit_matches_pytorch() -> None:
    logits = torch.tensor([[0.0, float("-inf"), 1.0, 2.0]])
    target = torch.tensor([2])
    assert label_smoothed_cross_entropy(logits, target, 0.0, -100).isfinite()  # no smoothing: finite
    assert torch.equal(label_smoothed_cross_entropy(logits, target, 0.1, -100), _torch_loss(logits, target, 0.1, -100))


def test_smoothing_zero_is_plain_cross_entropy() -> None:
    logits, target = torch.randn(6, 4), torch.tensor([1, 2, 3, 0, 1, 2])
    torch.testing.assert_close(label_smoothed_cross_entropy(logits, target, 0.0, ignore_index=-1),
                               nn.functional.cross_entropy(logits, target))


@pytest.mark.parametrize("logits, target, smoothing, word", [
    (torch.randn(3, 4), torch.zeros(4, dtype=torch.long), 0.1, "target"),
    (torch.randn(3, 4), torch.zeros(3), 0.1, "LongTensor"),
    (torch.randn(4), torch.zeros((), dtype=torch.long), 0.1, "logits"),
    (torch.randn(3, 4), torch.zeros(3, dtype=torch.long), 1.5, "smoothing"),
])
def test_loss_bad_input(logits, target, smoothing, word) -> None:
    with pytest.raises(ValueError, match=word):
        label_smoothed_cross_entropy(logits, target, smoothing)


def test_schedule_is_the_papers_formula() -> None:
    d_model, warmup = 512, 4000
    for step in (1, 10, 100, 3999, 4000, 4001, 10_000, 100_000):
        expected = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert math.isclose(transformer_lr(step, d_model, warmup), expected, rel_tol=1e-12)
    rates = [transformer_lr(s, d_model, warmup) for s in range(1, 20_000)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == warmup  # peak at step = warmup
    assert math.isclose(max(rates), (d_model * warmup) ** -0.5)
    assert transformer_lr(0, d_model, warmup) == transformer_lr(1, d_model, warmup)  # step 0 is step 1
    with pytest.raises(ValueError, match="warmup"):
        transformer_lr(5, 512, 0)


def test_optimizer_and_scheduler_follow_the_schedule() -> None:
    model = nn.Linear(3, 3)
    opt = make_optimizer(model)
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["eps"] == 1e-9
    sched = make_scheduler(opt, d_model=64, warmup=10, scale=2.0)
    seen = []
    for _ in range(30):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert all(math.isclose(lr, 2.0 * transformer_lr(i + 1, 64, 10)) for i, lr in enumerate(seen))
    with pytest.raises(ValueError, match="base lr"):
        make_scheduler(torch.optim.Adam(model.parameters(), lr=1e-3), 64)


@pytest.mark.parametrize("optimizer_class", [torch.optim.Adam, torch.optim.AdamW])
def test_fused_optimizer_updates_like_the_default_one(optimizer_class) -> None:
    """The fused kernel (used by make_optimizer and the ViT trainer) against PyTorch's default update."""
    torch.manual_seed(0)
    weights = [torch.randn(8, 5), torch.randn(5)]
    grads = [[torch.randn_like(w) for w in weights] for _ in range(6)]
    results = {}
    for name, make in (("fused", fused_if_supported), ("default", lambda cls, ps, **kw: cls(ps, **kw))):
        params = [nn.Parameter(w.clone()) for w in weights]
        groups = [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:], "weight_decay": 0.0}]
        opt = make(optimizer_class, groups, lr=1e-2, betas=(0.9, 0.98), eps=1e-9)
        assert bool(opt.defaults.get("fused")) == (name == "fused")
        for step_grads in grads:
            for p, g in zip(params, step_grads, strict=True):
                p.grad = g.clone()
            opt.step()
        results[name] = params
    for fused, default, start in zip(results["fused"], results["default"], weights, strict=True):
        assert not torch.equal(default, start)  # the steps did move the weights
        torch.testing.assert_close(fused, default, rtol=1e-5, atol=1e-6)


def test_fused_only_where_a_kernel_exists() -> None:
    cpu = nn.Parameter(torch.zeros(3))
    assert make_optimizer(nn.Linear(3, 3)).defaults["fused"] is True
    assert fused_if_supported(torch.optim.Adam, [cpu]).defaults["fused"] is True
    for odd in (torch.zeros(3, device="meta", requires_grad=True),
                torch.zeros(3, dtype=torch.complex64, requires_grad=True)):
        opt = fused_if_supported(torch.optim.Adam, [cpu, odd])
        assert not opt.defaults.get("fused")  # the default update, not a failure at the first step
    model = nn.Linear(3, 2)  # a group's params may be a generator, read only once
    opt = fused_if_supported(torch.optim.AdamW, [{"params": model.parameters(), "weight_decay": 0.1}])
    assert opt.defaults["fused"] is True and len(opt.param_groups[0]["params"]) == 2


class _Copy(nn.Module):
    """A tiny stand-in model: predicts tgt_out from tgt_in's position-aligned source token."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.out = nn.Linear(16, vocab)

    def forward(self, src, tgt_in):
        return self.out(self.embed(src[:, : tgt_in.shape[1]]))


def _copy_batches(n: int):
    from course_lib.data.translation import Batch

    gen = torch.Generator().manual_seed(0)
    for _ in range(n):
        src = torch.randint(3, 10, (16, 5), generator=gen)
        yield Batch(src=src, tgt_in=torch.ones(16, 5, dtype=torch.long), tgt_out=src.clone())


def test_train_loop_learns_and_records() -> None:
    torch.manual_seed(0)
    model = _Copy(10)
    opt = make_optimizer(model)
    sched = make_scheduler(opt, d_model=16, warmup=20, scale=2.0)
    batches = list(_copy_batches(8))
    hist = train(model, batches, steps=150, optimizer=opt, scheduler=sched, progress=False)
    assert isinstance(hist, TrainHistory) and hist.steps == 150 and len(hist.losses) == len(hist.lrs) == 150
    assert hist.tokens == 150 * 16 * 5 and hist.seconds > 0 and hist.tokens_per_second > 0
    assert sum(hist.losses[-10:]) < 0.5 * sum(hist.losses[:10])
    assert teacher_forced_accuracy(model, batches) > 0.95
    more = train(model, batches, steps=5, optimizer=opt, scheduler=sched, progress=False, history=hist)
    assert more is hist and hist.steps == 155 and len(hist.smoothed(10)) == 155


def test_train_stops_on_non_finite_loss() -> None:
    model = _Copy(10)
    opt = make_optimizer(model)
    with pytest.raises(FloatingPointError, match="step 1"):
        train(model, list(_copy_batches(2)), 3, opt, loss_fn=lambda logits, t: logits.sum() * float("nan"),
              progress=False)


def test_train_empty_loader() -> None:
    model = _Copy(10)
    with pytest.raises(ValueError, match="no batches"):
        train(model, [], 3, make_optimizer(model), progress=False)

# The one engine against plain written-out loops: the loops course_lib had before the engine (training.train
# for translation batches, train_classifier, now in course_lib.training.image_classifier, for images), written the
# way the notebooks teach them. The engine must give bit-identical losses and parameters for the same seed, so
# moving a notebook or a trainer onto it changes no number. The two loops share their last eight lines on purpose
# (``duplicates`` pairs them): each is an oracle that must read whole, independent of the engine and of the other.

def _padded_batches(n: int) -> list:
    from course_lib.data.translation import Batch

    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        src = torch.randint(3, 10, (8, 5), generator=gen)
        tgt_out = src.clone()
        tgt_out[:, 3:] = 0  # padding the loss ignores
        out.append(Batch(src=src, tgt_in=torch.ones(8, 5, dtype=torch.long), tgt_out=tgt_out))
    return out


def _reference_translation_loop(model, batches, steps, optimizer, scheduler) -> list[float]:
    losses = []
    for step in range(steps):
        batch = batches[step % len(batches)]
        logits = model(batch.src, batch.tgt_in)
        loss = label_smoothed_cross_entropy(logits, batch.tgt_out, 0.1, ignore_index=batch.pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def test_engine_equals_the_written_out_translation_loop() -> None:
    runs = {}
    for name in ("reference", "engine"):
        torch.manual_seed(0)
        model = _Copy(10)
        opt = make_optimizer(model)
        sched = make_scheduler(opt, d_model=16, warmup=5, scale=2.0)
        if name == "reference":
            losses = _reference_translation_loop(model, _padded_batches(3), 25, opt, sched)
        else:
            hist = train(model, _padded_batches(3), 25, opt, sched, progress=False)
            assert isinstance(hist, TrainHistory) and hist.tokens == 25 * 8 * 3
            losses = hist.losses
        runs[name] = (losses, [p.detach().clone() for p in model.parameters()])
    assert runs["engine"][0] == runs["reference"][0]
    for a, b in zip(runs["engine"][1], runs["reference"][1], strict=True):
        assert torch.equal(a, b)
    assert runs["engine"][0][-1] < runs["engine"][0][0]  # it did learn


def _reference_classifier_loop(model, split, steps, batch_size, lr, weight_decay, warmup, max_shift,
                               label_smoothing, seed) -> list[float]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.dim() < 2 or "token" in name or "pos" in name else decay).append(p)
    optimizer = fused_if_supported(torch.optim.AdamW, [{"params": decay, "weight_decay": weight_decay},
                                                       {"params": no_decay, "weight_decay": 0.0}], lr=lr)

    def schedule(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=label_smoothing)
    train_loader, _, _ = digits_loaders(split, batch_size=batch_size, max_shift=max_shift, seed=seed)

    def endless():
        while True:
            yield from train_loader

    batches, losses = endless(), []
    model.train()
    for _ in range(steps):
        images, labels = next(batches)
        loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def test_train_classifier_equals_the_written_out_loop() -> None:
    from course_lib.models.vit import VisionTransformer

    split = digits_split()
    config = dict(batch_size=32, lr=3e-3, weight_decay=0.05, warmup=5, max_shift=1, label_smoothing=0.1, seed=0)
    runs = {}
    for name in ("reference", "engine"):
        torch.manual_seed(0)
        model = VisionTransformer(image_size=8, patch_size=4, in_channels=1, num_classes=10, d_model=16,
                                  num_heads=2, num_layers=1, d_ff=32, dropout=0.1)
        if name == "reference":
            losses = _reference_classifier_loop(model, split, 30, **config)
        else:
            losses = train_classifier(model, split, 30, eval_every=10, progress=False, **config).loss
        runs[name] = (losses, [p.detach().clone() for p in model.parameters()])
    assert runs["engine"][0] == runs["reference"][0]
    for a, b in zip(runs["engine"][1], runs["reference"][1], strict=True):
        assert torch.equal(a, b)
