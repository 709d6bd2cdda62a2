"""Training throughput: course_lib's Transformer against nn.Transformer of the same shape, side by side.

What it measures
- tokens per second of training (target tokens, the ones with a loss) for ``course_lib.models.transformer.
  Transformer`` and for ``nn.Transformer`` wrapped with the same embeddings, positional encoding and tied
  output projection, so that both models have the same parameters and do the same arithmetic;
  a training step is forward + cross-entropy + backward + Adam update (PyTorch's fused kernel, as
  ``course_lib.training.engine.make_optimizer`` uses, for both models), dropout on;
- the machine's float32 matrix-multiply throughput, ``torch.mm`` of two square matrices (FLOP/s), measured
  in the same run before and after the models;
- model FLOPs utilisation (MFU): the model's analytic FLOPs per step (3 x forward: the backward pass costs
  about twice the forward's matrix products) divided by the step time and by the measured mm throughput.

The two models alternate (A B, B A, ...) so that a change in machine load hits both; the mm throughput is
measured again right before each model's steps, and the table reports medians over the repeats of the
step time, of the per-repeat course/torch ratio and of the per-repeat MFU. Targets (issue 8): the course's
model at least as fast per training token as nn.Transformer, and at least half of the measured mm
throughput in model FLOPs.

Run (timing runs on the shared machine go through the lock)::

    flock /tmp/bench.lock python benchmarks/bench_training_throughput.py            # full configuration
    flock /tmp/bench.lock python benchmarks/bench_training_throughput.py --quick    # a smaller one

Writes ``benchmarks/results/throughput.md`` (and ``throughput.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.positional import PositionalEncoding
from course_lib.models.transformer import Transformer
from course_lib.training.engine import fused_if_supported

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_all import cpu_busy_share, load_note, machine_info, markdown_machine  # noqa: E402  (benchmarks/ is not a package)

RESULTS = HERE / "results"


@dataclass
class Config:
    """The shape of both models and of the measurement."""

    d_model: int = 256
    num_heads: int = 8
    num_layers: int = 3  # encoder layers = decoder layers
    d_ff: int = 1024
    vocab_size: int = 1000
    batch: int = 32
    src_len: int = 32
    tgt_len: int = 32
    dropout: float = 0.1
    warmup_steps: int = 2
    timed_steps: int = 3
    repeats: int = 9
    mm_size: int = 1024

    @classmethod
    def quick(cls) -> Config:
        return cls(num_layers=2, batch=16, timed_steps=2, repeats=5)


class TorchTransformerModel(nn.Module):
    """``nn.Transformer`` with the course model's embeddings, positions and tied output projection.

    Post-LN like the course's default, without the final LayerNorms that ``nn.Transformer`` adds to both
    stacks (the paper's post-LN model has none, nor has course_lib's): the two models then have exactly
    the same parameters.
    """

    def __init__(self, cfg: Config, pad_id: int = 0) -> None:
        super().__init__()
        self.d_model, self.pad_id = cfg.d_model, pad_id
        self.src_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.tgt_embedding = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = PositionalEncoding(cfg.d_model, max_len=max(cfg.src_len, cfg.tgt_len), dropout=cfg.dropout)
        self.transformer = nn.Transformer(cfg.d_model, cfg.num_heads, cfg.num_layers, cfg.num_layers, cfg.d_ff,
                                          cfg.dropout, batch_first=True)
        self.transformer.encoder.norm = None
        self.transformer.decoder.norm = None
        self.generator = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.generator.weight = self.tgt_embedding.weight  # tied, as course_lib's tie_embeddings=True

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        scale = math.sqrt(self.d_model)
        src_x = self.positions(self.src_embedding(src) * scale)  # (batch, src_len, d_model)
        tgt_x = self.positions(self.tgt_embedding(tgt_in) * scale)  # (batch, tgt_len, d_model)
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1], device=tgt_in.device,
                                                                dtype=torch.bool)  # True = may NOT attend
        src_pad, tgt_pad = src == self.pad_id, tgt_in == self.pad_id  # True = padding, ignored
        out = self.transformer(src_x, tgt_x, tgt_mask=causal, src_key_padding_mask=src_pad,
                               tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.generator(out)  # (batch, tgt_len, vocab_size)


def course_model(cfg: Config) -> Transformer:
    return Transformer(cfg.vocab_size, cfg.vocab_size, d_model=cfg.d_model, num_heads=cfg.num_heads,
                       num_encoder_layers=cfg.num_layers, num_decoder_layers=cfg.num_layers, d_ff=cfg.d_ff,
                       dropout=cfg.dropout, max_len=max(cfg.src_len, cfg.tgt_len), tie_embeddings=True)


def forward_flops(cfg: Config) -> int:
    """FLOPs (2 per multiply-add) of one forward pass of the batch: the matrix products only."""
    d, n, m, f, v = cfg.d_model, cfg.src_len, cfg.tgt_len, cfg.d_ff, cfg.vocab_size
    encoder_layer = 4 * n * d * d + 2 * n * n * d + 2 * n * d * f  # projections, QK^T and AV, FFN
    decoder_layer = (4 * m * d * d + 2 * m * m * d  # self-attention
                     + 2 * m * d * d + 2 * n * d * d + 2 * m * n * d  # cross: Q, O on tgt; K, V on memory
                     + 2 * m * d * f)  # FFN
    generator = m * d * v
    macs = cfg.num_layers * (encoder_layer + decoder_layer) + generator
    return 2 * macs * cfg.batch


def attention_core_flops(cfg: Config) -> int:
    """The part of :func:`forward_flops` spent in Q K^T and weights @ V (PyTorch's FLOP counter skips it)."""
    d, n, m = cfg.d_model, cfg.src_len, cfg.tgt_len
    macs = cfg.num_layers * (2 * n * n * d + 2 * m * m * d + 2 * m * n * d)
    return 2 * macs * cfg.batch


def check_flop_formula(model: nn.Module, cfg: Config, batch: tuple[torch.Tensor, ...]) -> int:
    """Verify :func:`forward_flops` against ``torch.utils.flop_counter`` on one forward pass; return its count.

    The counter sees every linear layer; whether it also counts the attention kernel depends on which kernel
    PyTorch picks (it does with autograd on, not for every fused inference kernel), so the count must equal
    the whole formula or the formula without :func:`attention_core_flops`.
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        model(batch[0], batch[1])
    counted = counter.get_total_flops()
    if counted not in (forward_flops(cfg), forward_flops(cfg) - attention_core_flops(cfg)):
        raise AssertionError(f"FLOP formula disagrees with FlopCounterMode: counted {counted}, formula "
                             f"{forward_flops(cfg)} ({attention_core_flops(cfg)} of it in attention)")
    return counted


def mm_flops_per_second(size: int, repeats: int = 7, calls: int = 5) -> float:
    """Median float32 ``torch.mm`` throughput (FLOP/s) on two ``size x size`` matrices."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            torch.mm(a, b)
        rates.append(2 * size ** 3 * calls / (time.perf_counter() - start))
    return statistics.median(rates)


def training_step(model: nn.Module, optimizer: torch.optim.Optimizer, src: torch.Tensor, tgt_in: torch.Tensor,
                  tgt_out: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    logits = model(src, tgt_in)  # (batch, tgt_len, vocab)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1), ignore_index=0)
    loss.backward()
    optimizer.step()
    return loss.detach().item()


def time_steps(model: nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...],
               steps: int) -> float:
    """Seconds per training step (mean over ``steps`` consecutive steps)."""
    start = time.perf_counter()
    for _ in range(steps):
        loss = training_step(model, optimizer, *batch)
    elapsed = time.perf_counter() - start
    if not math.isfinite(loss):
        raise FloatingPointError(f"training produced a non-finite loss {loss}")
    return elapsed / steps


def run(cfg: Config) -> dict:
    torch.manual_seed(0)
    models = {"course_lib Transformer": course_model(cfg), "nn.Transformer": TorchTransformerModel(cfg)}
    params = {name: sum(p.numel() for p in m.parameters()) for name, m in models.items()}
    if len(set(params.values())) != 1:
        raise AssertionError(f"the two models must have the same parameters, got {params}")
    optimizers = {name: fused_if_supported(torch.optim.Adam, m.parameters(), lr=1e-4) for name, m in models.items()}
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(1, cfg.vocab_size, (cfg.batch, cfg.src_len), generator=gen)
    tgt = torch.randint(1, cfg.vocab_size, (cfg.batch, cfg.tgt_len + 1), generator=gen)
    batch = (src, tgt[:, :-1], tgt[:, 1:])

    for model in models.values():
        check_flop_formula(model, cfg, batch)
    for name, model in models.items():
        model.train()
        time_steps(model, optimizers[name], batch, cfg.warmup_steps)
    step_flops = 3 * forward_flops(cfg)
    tokens = cfg.batch * cfg.tgt_len
    seconds: dict[str, list[float]] = {name: [] for name in models}
    mm_rates: dict[str, list[float]] = {name: [] for name in models}
    for r in range(cfg.repeats):
        order = list(models) if r % 2 == 0 else list(reversed(models))  # A B, then B A: fair to both
        for name in order:
            # the machine's mm rate right before this model's steps: the MFU of a repeat compares the two
            # under the same load, which on a shared machine changes from one minute to the next
            mm_rates[name].append(mm_flops_per_second(cfg.mm_size, repeats=3, calls=3))
            seconds[name].append(time_steps(models[name], optimizers[name], batch, cfg.timed_steps))
    rows = {}
    for name, times in seconds.items():
        step = statistics.median(times)
        mfus = [step_flops / t / mm for t, mm in zip(times, mm_rates[name], strict=True)]
        rows[name] = {
            "step_seconds_median": step,
            "step_seconds_min": min(times),
            "step_seconds_all": times,
            "mm_flops_per_second_all": mm_rates[name],
            "tokens_per_second": tokens / step,
            "model_tflops_per_second": step_flops / step / 1e12,
            "mfu": statistics.median(mfus),
            "mfu_all": mfus,
            "mfu_at_fastest_step": step_flops / min(times) / max(mm_rates[name]),
            "parameters": params[name],
        }
    course, torch_ = seconds["course_lib Transformer"], seconds["nn.Transformer"]
    paired = [b / a for a, b in zip(course, torch_, strict=True)]  # tokens/s ratio within one repeat
    ratio = statistics.median(paired)
    mm_rate = statistics.median(mm_rates["course_lib Transformer"] + mm_rates["nn.Transformer"])
    return {"config": asdict(cfg), "threads": torch.get_num_threads(), "mm_flops_per_second": mm_rate,
            "step_flops": step_flops, "tokens_per_step": tokens, "models": rows,
            "course_over_torch_tokens_per_second": ratio, "paired_ratios": paired}


def to_markdown(result: dict, machine: dict, quick: bool, load_before: float) -> str:
    cfg = result["config"]
    lines = [
        "# Training throughput: course_lib Transformer vs nn.Transformer",
        "",
        f"Configuration{' (quick)' if quick else ''}: d_model {cfg['d_model']}, {cfg['num_heads']} heads, "
        f"{cfg['num_layers']}+{cfg['num_layers']} layers, d_ff {cfg['d_ff']}, vocabulary {cfg['vocab_size']}, "
        f"batch {cfg['batch']} x {cfg['src_len']} source / {cfg['tgt_len']} target tokens, dropout "
        f"{cfg['dropout']}, Adam (fused); post-LN, tied output projection; {result['threads']} threads. "
        f"Medians of {cfg['repeats']} repeats of {cfg['timed_steps']} steps (after {cfg['warmup_steps']} "
        f"warm-up steps), the two models alternating.",
        "",
        f"Machine float32 `torch.mm` ({cfg['mm_size']}x{cfg['mm_size']}), measured right before each model's "
        f"steps in every repeat: median {result['mm_flops_per_second'] / 1e9:.1f} GFLOP/s. Model FLOPs per "
        f"training step (3 x forward matrix products): {result['step_flops'] / 1e9:.2f} GFLOP. The MFU of a "
        f"repeat divides the model's FLOP/s by the mm rate measured just before it; the table gives medians. "
        f"The FLOP formula was checked in this run against `torch.utils.flop_counter.FlopCounterMode` on a "
        f"forward pass of each model.",
        "",
        "| model | parameters | step (s, median) | step (s, fastest) | target tokens/s (median) | "
        "model GFLOP/s (median) | MFU vs measured mm (median) | MFU at the fastest step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["models"].items():
        lines.append(f"| {name} | {row['parameters']:,} | {row['step_seconds_median']:.3f} | "
                     f"{row['step_seconds_min']:.3f} | {row['tokens_per_second']:,.0f} | "
                     f"{row['model_tflops_per_second'] * 1e3:.1f} | {row['mfu']:.0%} | "
                     f"{row['mfu_at_fastest_step']:.0%} |")
    ratio = result["course_over_torch_tokens_per_second"]
    course_mfu = result["models"]["course_lib Transformer"]["mfu"]
    lines += [
        "",
        f"course_lib / nn.Transformer tokens per second, median of the per-repeat ratios: **{ratio:.2f}** "
        f"(target >= 1.00: {'met' if ratio >= 1.0 else 'NOT met'}; differences of a few per cent are "
        f"within the noise of this machine).",
        f"course_lib MFU: **{course_mfu:.0%}** of measured mm throughput (target >= 50%: "
        f"{'met' if course_mfu >= 0.5 else 'NOT met'}).",
        "",
        "Per repeat: step times (s) " + "; ".join(
            f"{name}: " + ", ".join(f"{t:.3f}" for t in row["step_seconds_all"])
            for name, row in result["models"].items())
        + "; mm GFLOP/s " + "; ".join(
            f"{name}: " + ", ".join(f"{m / 1e9:.0f}" for m in row["mm_flops_per_second_all"])
            for name, row in result["models"].items())
        + "; course/torch ratios " + ", ".join(f"{x:.2f}" for x in result["paired_ratios"]) + ".",
        "",
        load_note(load_before) + " The two models are measured in the same run, alternating, so their ratio "
        "is more trustworthy than the absolute numbers.",
        "",
        markdown_machine(machine),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller configuration (about a minute)")
    parser.add_argument("--repeats", type=int, default=None, help="override the number of repeats")
    args = parser.parse_args(argv)
    cfg = Config.quick() if args.quick else Config()
    if args.repeats:
        cfg.repeats = args.repeats
    load_before = cpu_busy_share()
    result = run(cfg)
    machine = machine_info()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "throughput.md").write_text(to_markdown(result, machine, args.quick, load_before))
    (RESULTS / "throughput.json").write_text(json.dumps({"quick": args.quick, "machine": machine, **result},
                                                        indent=2))
    for name, row in result["models"].items():
        print(f"RESULT {name}: {row['tokens_per_second']:,.0f} target tokens/s, MFU {row['mfu']:.0%}")
    print(f"RESULT course/torch tokens per second: {result['course_over_torch_tokens_per_second']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
