"""Exercises of notebook 06 (the decoder and the full model): one decoder layer, and shifting targets right.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

- ``decoder_layer``: the learner writes ``DecoderLayer.forward`` (masked self-attention, encoder-decoder
  attention, feed-forward; post-LN and pre-LN); reference :class:`course_lib.models.layers.DecoderLayer`.
- ``shift_right``: the decoder's input for teacher forcing; reference
  :func:`course_lib.models.transformer.shift_right`.

The first case of each norm placement has ``tgt_len == src_len`` so that the classic mix-ups (queries from
the encoder, the look-ahead mask on the cross-attention) give an output of the right shape and the
learner reads a hint rather than a shape error; the next cases have ``tgt_len != src_len`` and padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.checks.nb05_encoder import PYTORCH_LAYERS, random_state
from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.layers import DecoderLayer
from course_lib.models.masking import causal_mask, decoder_mask, padding_mask
from course_lib.models.transformer import shift_right

NOTEBOOK = "06_decoder"


def _x(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * 2.0 + 0.5


def _tokens(gen: torch.Generator, batch: int, seq: int) -> torch.Tensor:
    """Ids in 3..9 with row 0 full and later rows padded (pad id 0) after a random length >= 1."""
    tokens = torch.randint(3, 10, (batch, seq), generator=gen)
    for b in range(1, batch):
        tokens[b, int(torch.randint(1, seq, (), generator=gen)):] = 0
    return tokens


# ---------------------------------------------------------------------------------------------------
# decoder_layer
# ---------------------------------------------------------------------------------------------------

def _decoder_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d_model, heads, d_ff, batch = (12, 3, 24, 3) if hidden else (8, 2, 16, 2)
    tgt_len, src_len = (4, 7) if hidden else (3, 6)
    cases = []
    for norm_first in (False, True):
        name = "pre-LN" if norm_first else "post-LN (the paper)"
        init = {"d_model": d_model, "num_heads": heads, "d_ff": d_ff, "norm_first": norm_first}
        cases.append(Case(
            f"{name}, tgt_len = src_len = 4, causal self_mask (4, 4), no cross_mask",
            args=(_x(gen, batch, 4, d_model), _x(gen, batch, 4, d_model)),
            kwargs={"self_mask": causal_mask(4)}, init=init, state=random_state(DecoderLayer(**init), gen)))
        src, tgt = _tokens(gen, batch, src_len), _tokens(gen, batch, tgt_len)
        cases.append(Case(
            f"{name}, tgt_len={tgt_len}, src_len={src_len}, self_mask = decoder_mask (batch, 1, {tgt_len}, "
            f"{tgt_len}), cross_mask = padding_mask of the source (batch, 1, 1, {src_len})",
            args=(_x(gen, batch, tgt_len, d_model), _x(gen, batch, src_len, d_model)),
            kwargs={"self_mask": decoder_mask(tgt, 0), "cross_mask": padding_mask(src, 0)},
            init=init, state=random_state(DecoderLayer(**init), gen)))
    return cases


class _DecQueriesFromEncoder(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.cross_attn(m, h, h, mask=cross_mask)[0])


def _generic(layer: DecoderLayer, x, memory, self_attend, cross_attend):
    """A decoder layer with the given sub-layer functions, in the layer's norm placement."""
    if layer.norm_first:
        x = x + self_attend(layer.norm1(x))
        x = x + cross_attend(layer.norm2(x), memory)
        return x + layer.feed_forward(layer.norm3(x))
    x = layer.norm1(x + self_attend(x))
    x = layer.norm2(x + cross_attend(x, memory))
    return layer.norm3(x + layer.feed_forward(x))


class _DecLookAheadOnCross(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.cross_attn(h, m, m, mask=self_mask)[0])


class _DecNoCausalMask(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h)[0],
                        lambda h, m: self.cross_attn(h, m, m, mask=cross_mask)[0])


class _DecCrossKeysFromDecoder(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.cross_attn(h, h, h, mask=self_mask)[0])


class _DecCrossMaskIgnored(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.cross_attn(h, m, m)[0])


class _DecSelfAttnWeightsForCross(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.self_attn(h, m, m, mask=cross_mask)[0])


class _DecMemoryNormalised(DecoderLayer):
    """Pre-LN that also runs the encoder's output through norm2."""

    def forward(self, x, memory, self_mask=None, cross_mask=None):
        if not self.norm_first:
            return DecoderLayer.forward(self, x, memory, self_mask, cross_mask)
        return _generic(self, x, memory, lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
                        lambda h, m: self.cross_attn(h, self.norm2(m), self.norm2(m), mask=cross_mask)[0])


class _DecNoCrossResidual(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.self_attn(h, h, h, mask=self_mask)[0]
            x = self.cross_attn(self.norm2(x), memory, memory, mask=cross_mask)[0]
            return x + self.feed_forward(self.norm3(x))
        x = self.norm1(x + self.self_attn(x, x, x, mask=self_mask)[0])
        x = self.norm2(self.cross_attn(x, memory, memory, mask=cross_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class _DecCrossBeforeSelf(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        if self.norm_first:
            x = x + self.cross_attn(self.norm1(x), memory, memory, mask=cross_mask)[0]
            h = self.norm2(x)
            x = x + self.self_attn(h, h, h, mask=self_mask)[0]
            return x + self.feed_forward(self.norm3(x))
        x = self.norm1(x + self.cross_attn(x, memory, memory, mask=cross_mask)[0])
        x = self.norm2(x + self.self_attn(x, x, x, mask=self_mask)[0])
        return self.norm3(x + self.feed_forward(x))


class _DecAlwaysPostLN(DecoderLayer):
    def forward(self, x, memory, self_mask=None, cross_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask=self_mask)[0])
        x = self.norm2(x + self.cross_attn(x, memory, memory, mask=cross_mask)[0])
        return self.norm3(x + self.feed_forward(x))


# correct alternatives
class _DecWithSublayerHelper(DecoderLayer):
    def _sublayer(self, x, norm, dropout, fn):
        return x + dropout(fn(norm(x))) if self.norm_first else norm(x + dropout(fn(x)))

    def forward(self, x, memory, self_mask=None, cross_mask=None):
        x = self._sublayer(x, self.norm1, self.dropout1, lambda h: self.self_attn(h, h, h, self_mask)[0])
        x = self._sublayer(x, self.norm2, self.dropout2,
                           lambda h: self.cross_attn(h, memory, memory, cross_mask, need_weights=True)[0])
        return self._sublayer(x, self.norm3, self.dropout3, self.feed_forward)


class _DecFunctionalNorm(DecoderLayer):
    def _ln(self, norm, x):
        return F.layer_norm(x, (self.d_model,), norm.weight, norm.bias, norm.eps)

    def forward(self, x, memory, self_mask=None, cross_mask=None):
        sublayers = [
            (self.norm1, lambda h: self.self_attn(query=h, key=h, value=h, mask=self_mask)[0]),
            (self.norm2, lambda h: self.cross_attn(query=h, key=memory, value=memory, mask=cross_mask)[0]),
            (self.norm3, self.feed_forward),
        ]
        for norm, fn in sublayers:
            x = x + fn(self._ln(norm, x)) if self.norm_first else self._ln(norm, x + fn(x))
        return x


DECODER_LAYER = register(Exercise(
    name="decoder_layer",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=DecoderLayer,
    # PyTorch's own layers are what notebooks 05 and 06 compare with: running them is not writing the layer.
    forbidden_calls=PYTORCH_LAYERS,
    forbidden_ops=("transformer_encoder_layer", "transformer_decoder"),
    summary="DecoderLayer.forward: masked self-attention, encoder-decoder attention, feed-forward, with "
            "residuals and LayerNorm (post-LN and pre-LN)",
    **public_and_hidden(_decoder_cases),
    mistakes=[
        Mistake("cross-attention with queries from the encoder", _DecQueriesFromEncoder,
                "in encoder-decoder attention the queries come from the decoder and the keys and values from the "
                "encoder's output (memory).",
                detail="self.cross_attn(x, memory, memory, ...)."),
        Mistake("look-ahead mask on the cross-attention", _DecLookAheadOnCross,
                "the decoder may look at every source position: the cross-attention takes cross_mask (the "
                "source's padding), not the causal self_mask."),
        Mistake("causal mask missing", _DecNoCausalMask,
                "pass self_mask to the self-attention: without it position t reads the targets after t, "
                "the very tokens it must predict."),
        Mistake("cross-attention keys and values from the decoder", _DecCrossKeysFromDecoder,
                "the second attention reads the encoder's output: keys and values are memory, not x."),
        Mistake("source padding not masked", _DecCrossMaskIgnored,
                "pass cross_mask to the cross-attention so that padded source positions get no weight."),
        Mistake("self_attn used for the cross-attention", _DecSelfAttnWeightsForCross,
                "the encoder-decoder attention has its own weights: use self.cross_attn, not self.self_attn."),
        Mistake("pre-LN: memory normalised again", _DecMemoryNormalised,
                "in pre-LN only the decoder's stream is normalised (norm2(x) as queries); memory, already "
                "normalised by the encoder, is used as it is for keys and values."),
        Mistake("no residual around the cross-attention", _DecNoCrossResidual,
                "every sub-layer, the cross-attention included, adds its output to its input (residual)."),
        Mistake("cross-attention before self-attention", _DecCrossBeforeSelf,
                "the order is: masked self-attention (norm1), then cross-attention (norm2), then the "
                "feed-forward block (norm3)."),
        Mistake("norm_first ignored (post-LN always)", _DecAlwaysPostLN,
                "with norm_first=True normalise each sub-layer's input and add its output to the raw x."),
    ],
    also_correct=[_DecWithSublayerHelper, _DecFunctionalNorm],
))


# ---------------------------------------------------------------------------------------------------
# shift_right
# ---------------------------------------------------------------------------------------------------

def _targets(gen: torch.Generator, batch: int, seq: int, eos: int, pad: int, low: int, high: int) -> torch.Tensor:
    """Rows y1 ... yn <eos> <pad> ...: row 0 uses every column (its <eos> is the last), others are shorter."""
    rows = []
    for b in range(batch):
        n = seq - 1 if b == 0 else int(torch.randint(0, seq - 1, (), generator=gen))
        words = torch.randint(low, high, (n,), generator=gen).tolist()
        rows.append(words + [eos] + [pad] * (seq - n - 1))
    return torch.tensor(rows)


def _shift_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("two rows, bos=1, eos=2, pad=0", args=(torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]]),),
             kwargs={"bos_id": 1, "eos_id": 2, "pad_id": 0}),
        Case("random batch of 4, rows of different lengths (bos=1, eos=2, pad=0)",
             args=(_targets(gen, 4, 6, eos=2, pad=0, low=3, high=20),), kwargs={"bos_id": 1, "eos_id": 2, "pad_id": 0}),
        Case("other special ids: bos=5, eos=6, pad=7", args=(_targets(gen, 3, 5, eos=6, pad=7, low=8, high=30),),
             kwargs={"bos_id": 5, "eos_id": 6, "pad_id": 7}),
        Case("targets of length 1 (only <eos>)", args=(torch.tensor([[2], [2]]),),
             kwargs={"bos_id": 1, "eos_id": 2, "pad_id": 0}),
    ]
    if hidden:
        cases.append(Case("larger batch", args=(_targets(gen, 6, 9, eos=3, pad=0, low=4, high=50),),
                          kwargs={"bos_id": 2, "eos_id": 3, "pad_id": 0}))
    return cases


def _shift_drops_first(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], bos_id), tgt_out[:, 1:]], dim=1)
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)


def _shift_no_bos(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], pad_id), tgt_out[:, :-1]], dim=1)
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)


def _shift_left(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.cat([tgt_out[:, 1:], torch.full_like(tgt_out[:, :1], pad_id)], dim=1)
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)


def _shift_keeps_eos(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    return torch.cat([torch.full_like(tgt_out[:, :1], bos_id), tgt_out[:, :-1]], dim=1)


def _shift_roll(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.roll(tgt_out, shifts=1, dims=1)  # the last token wraps around to the front
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)


def _shift_bos_without_dropping(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.cat([torch.full_like(tgt_out[:, :1], bos_id), tgt_out], dim=1)
    return tgt_in.masked_fill(tgt_in == eos_id, pad_id)


def _shift_hard_coded(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    return shift_right(tgt_out, 1, 2, 0)


def _shift_with_roll_fixed(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    tgt_in = torch.roll(tgt_out, shifts=1, dims=1)
    tgt_in[:, 0] = bos_id
    tgt_in[tgt_in == eos_id] = pad_id
    return tgt_in


def _shift_with_lists(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    rows = [[bos_id] + [pad_id if t == eos_id else t for t in row[:-1]] for row in tgt_out.tolist()]
    return torch.tensor(rows, dtype=tgt_out.dtype)


def _shift_with_pad(tgt_out, bos_id=1, eos_id=2, pad_id=0):
    cleaned = torch.where(tgt_out == eos_id, torch.full_like(tgt_out, pad_id), tgt_out)
    return F.pad(cleaned[:, :-1], (1, 0), value=bos_id)


SHIFT_RIGHT = register(Exercise(
    name="shift_right",
    notebook=NOTEBOOK,
    points=1,
    reference=shift_right,
    summary="the decoder input for teacher forcing: <bos> followed by the targets without their last token",
    **public_and_hidden(_shift_cases),
    mistakes=[
        Mistake("drops the first target instead of the last", _shift_drops_first,
                "keep y1 (the decoder must read it to predict y2) and drop the last target instead, after the <bos>.",
                detail="torch.cat([a column of bos_id, tgt_out[:, :-1]], dim=1)."),
        Mistake("no <bos>", _shift_no_bos,
                "position 0 of the decoder input is bos_id: the first target is predicted from <bos> alone."),
        Mistake("shifted left", _shift_left,
                "shift right (later): input position t holds target t-1, so the input starts with <bos>."),
        Mistake("<eos> kept in the input", _shift_keeps_eos,
                "an <eos> that lands in a shorter row's input becomes pad_id: nothing follows <eos>, so it is "
                "never an input."),
        Mistake("torch.roll without fixing position 0", _shift_roll,
                "torch.roll wraps the last column around to position 0; put bos_id there instead."),
        Mistake("<bos> added without dropping the last token", _shift_bos_without_dropping,
                "the decoder input has the same length as tgt_out: prepend <bos> and drop the last column."),
        Mistake("special ids hard-coded", _shift_hard_coded,
                "use the arguments bos_id, eos_id and pad_id, not the values 1, 2 and 0."),
    ],
    also_correct=[_shift_with_roll_fixed, _shift_with_lists, _shift_with_pad],
))
