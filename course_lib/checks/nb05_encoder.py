"""Exercises of notebook 05 (the encoder): the feed-forward block, one encoder layer, masked mean pooling.

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).

- ``feed_forward``: the learner writes ``FeedForward.forward`` (the constructor is given, with the
  reference's attribute names so that weights load); reference :class:`course_lib.models.layers.FeedForward`.
- ``encoder_layer``: the learner writes ``EncoderLayer.forward`` for both norm placements (post-LN, the
  paper, and pre-LN); reference :class:`course_lib.models.layers.EncoderLayer`.
- ``mean_pool``: average of a sequence's vectors over its real tokens; reference
  :func:`course_lib.models.layers.mean_pool`.

Weights are random everywhere (LayerNorm gains and biases included) and inputs have a non-zero mean and a
large scale, so that a missing or misplaced LayerNorm, residual or mask changes the output. Dropout is
off in the checks (modules run in eval mode), so the checks do not test where dropout goes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.layers import EncoderLayer, FeedForward, mean_pool

#: PyTorch's own Transformer layers: an encoder or decoder layer exercise that runs them earns nothing.
PYTORCH_LAYERS = ("torch.nn.TransformerEncoderLayer.forward", "torch.nn.TransformerDecoderLayer.forward",
                  "torch.nn.TransformerEncoder.forward", "torch.nn.TransformerDecoder.forward",
                  "torch.nn.Transformer.forward")

#: PyTorch's own feed-forward block (what the class edition's ``FeedForward`` runs): the feed-forward exercise
#: that runs it earns nothing.
PYTORCH_FEED_FORWARD = ("torch.nn.TransformerEncoderLayer._ff_block", "torch.nn.TransformerDecoderLayer._ff_block")

#: PyTorch's own masked mean (what the class edition's ``mean_pool`` runs): the pooling exercise does without it.
PYTORCH_MASKED_MEAN = ("torch.nanmean",)

NOTEBOOK = "05_encoder"


def random_state(module: nn.Module, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """A ``state_dict`` for ``module`` with random values: weight matrices ~ N(0, 1/fan_in), biases ~
    N(0, 0.1^2), LayerNorm gains ~ 1 + N(0, 0.3^2). Plain data (str -> tensor), as cases require."""
    state = {}
    for name, p in module.state_dict().items():
        if p.dim() >= 2:
            value = torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5
        elif "norm" in name and name.endswith("weight"):
            value = 1.0 + 0.3 * torch.randn(p.shape, generator=gen)
        else:
            value = 0.1 * torch.randn(p.shape, generator=gen)
        state[name] = value
    return state


def _padding(gen: torch.Generator, batch: int, seq: int) -> torch.Tensor:
    """A (batch, 1, 1, seq) padding mask: row 0 full, the other rows of random length >= 1."""
    lengths = [seq] + [int(torch.randint(1, seq, (), generator=gen)) for _ in range(batch - 1)]
    real = torch.arange(seq)[None, :] < torch.tensor(lengths)[:, None]  # (batch, seq)
    return real[:, None, None, :]


def _x(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * 2.0 + 0.5


# ---------------------------------------------------------------------------------------------------
# feed_forward
# ---------------------------------------------------------------------------------------------------

def _ffn_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d_model, d_ff = (12, 20) if hidden else (8, 16)
    cases = []
    for label, activation, shape in (
        (f"ReLU, x of shape (2, 5, {d_model})", "relu", (2, 5, d_model)),
        (f"ReLU, x of shape (3, {d_model}) (position-wise: any leading axes)", "relu", (3, d_model)),
        (f"GELU, x of shape (2, 4, {d_model})", "gelu", (2, 4, d_model)),
    ):
        init = {"d_model": d_model, "d_ff": d_ff, "activation": activation}
        cases.append(Case(label, args=(_x(gen, *shape),), init=init,
                          state=random_state(FeedForward(**init), gen)))
    init = {"d_model": d_model, "d_ff": d_ff, "dropout": 0.5}
    cases.append(Case("dropout=0.5 in eval mode (the check calls model.eval(): no dropout may apply)",
                      args=(_x(gen, 2, 3, d_model),), init=init, state=random_state(FeedForward(**init), gen)))
    return cases


class _FfnNoActivation(FeedForward):
    def forward(self, x):
        return self.linear2(self.linear1(x))


class _FfnActivationAfterSecond(FeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.linear1(x)))


class _FfnActivationTwice(FeedForward):
    def forward(self, x):
        return self.activation(self.linear2(self.activation(self.linear1(x))))


class _FfnWithResidual(FeedForward):
    def forward(self, x):
        return x + self.linear2(self.activation(self.linear1(x)))


class _FfnAlwaysRelu(FeedForward):
    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class _FfnNoBias(FeedForward):
    def forward(self, x):
        return F.linear(self.activation(F.linear(x, self.linear1.weight)), self.linear2.weight)


class _FfnDropoutAlwaysOn(FeedForward):
    def forward(self, x):
        return self.linear2(F.dropout(self.activation(self.linear1(x)), self.dropout.p, training=True))


class _FfnLinearsSwapped(FeedForward):
    def forward(self, x):
        return self.linear1(self.activation(self.linear2(x)))


# correct alternatives
class _FfnFunctional(FeedForward):
    def forward(self, x):
        hidden = F.linear(x, self.linear1.weight, self.linear1.bias)
        hidden = F.gelu(hidden) if isinstance(self.activation, nn.GELU) else hidden.clamp(min=0)
        return hidden @ self.linear2.weight.T + self.linear2.bias


class _FfnAsConvolution(FeedForward):
    """Two convolutions with kernel size 1, as the paper describes it."""

    def forward(self, x):
        flat = x.reshape(-1, x.shape[-1])  # (positions, d_model)
        seq = flat.T.unsqueeze(0)  # (1, d_model, positions): Conv1d's (batch, channels, length)
        hidden = self.activation(F.conv1d(seq, self.linear1.weight.unsqueeze(-1), self.linear1.bias))
        out = F.conv1d(hidden, self.linear2.weight.unsqueeze(-1), self.linear2.bias)  # (1, d_model, positions)
        return out.squeeze(0).T.reshape(x.shape)


FEED_FORWARD = register(Exercise(
    name="feed_forward",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=FeedForward,
    summary="FeedForward.forward: linear, activation, dropout, linear (the position-wise FFN)",
    forbidden_calls=PYTORCH_FEED_FORWARD + PYTORCH_LAYERS,
    forbidden_ops=("transformer_encoder_layer", "transformer_decoder"),
    **public_and_hidden(_ffn_cases),
    mistakes=[
        Mistake("no activation", _FfnNoActivation,
                "without the ReLU between them, two linear maps collapse into one linear map: apply "
                "self.activation to the output of linear1."),
        Mistake("dropout applied in eval mode", _FfnDropoutAlwaysOn,
                "use the module self.dropout (nn.Dropout switches off in eval mode), or pass "
                "training=self.training to F.dropout."),
        Mistake("activation after the second linear", _FfnActivationAfterSecond,
                "the activation goes between the two linear maps (max(0, xW1 + b1) W2 + b2), not after the "
                "second one: the block's output must be able to be negative."),
        Mistake("activation twice", _FfnActivationTwice,
                "apply the activation once, after linear1 only; the output of linear2 is returned as it is."),
        Mistake("residual inside the block", _FfnWithResidual,
                "return only the block's output: the residual connection x + FFN(x) belongs to the encoder "
                "layer, not to FeedForward."),
        Mistake("always ReLU", _FfnAlwaysRelu,
                "use self.activation (it is GELU when activation='gelu'), not a hard-coded ReLU."),
        Mistake("biases dropped", _FfnNoBias,
                "call the nn.Linear modules themselves (not only their weight matrices) so that their biases b1 and "
                "b2 are added.",
                detail="self.linear2(...(self.linear1(x))), not x @ self.linear1.weight.T."),
        Mistake("linear maps in the wrong order", _FfnLinearsSwapped,
                "linear1 maps d_model -> d_ff and comes first; linear2 maps d_ff -> d_model."),
    ],
    also_correct=[_FfnFunctional, _FfnAsConvolution],
))


# ---------------------------------------------------------------------------------------------------
# encoder_layer
# ---------------------------------------------------------------------------------------------------

def _encoder_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    d_model, heads, d_ff, batch, seq = (12, 3, 24, 3, 7) if hidden else (8, 2, 16, 2, 5)
    cases = []
    for norm_first in (False, True):
        name = "pre-LN (norm_first=True)" if norm_first else "post-LN (norm_first=False, the paper)"
        init = {"d_model": d_model, "num_heads": heads, "d_ff": d_ff, "norm_first": norm_first}
        for with_mask in (False, True):
            label = f"{name}, x ({batch}, {seq}, {d_model})" + (", padding mask (batch, 1, 1, seq)"
                                                               if with_mask else ", no mask")
            kwargs = {"mask": _padding(gen, batch, seq)} if with_mask else {}
            cases.append(Case(label, args=(_x(gen, batch, seq, d_model),), kwargs=kwargs, init=init,
                              state=random_state(EncoderLayer(**init), gen)))
    return cases


class _EncNoAttentionResidual(EncoderLayer):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.dropout1(self.self_attn(h, h, h, mask=mask)[0])
            return x + self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(self.dropout1(self.self_attn(x, x, x, mask=mask)[0]))
        return self.norm2(x + self.dropout2(self.feed_forward(x)))


class _EncNoFeedForwardResidual(EncoderLayer):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask)[0])
            return self.dropout2(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)[0]))
        return self.norm2(self.dropout2(self.feed_forward(x)))


class _EncAlwaysPreLN(EncoderLayer):
    """LayerNorm before the sub-layer even when norm_first=False."""

    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask=mask)[0]
        return x + self.feed_forward(self.norm2(x))


class _EncAlwaysPostLN(EncoderLayer):
    """norm_first ignored: post-LN always."""

    def forward(self, x, mask=None):
        x = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
        return self.norm2(x + self.feed_forward(x))


class _EncPreLNResidualFromNormalised(EncoderLayer):
    """Pre-LN whose residual adds the normalised input instead of the raw one."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            return EncoderLayer.forward(self, x, mask)
        h = self.norm1(x)
        x = h + self.self_attn(h, h, h, mask=mask)[0]
        h = self.norm2(x)
        return h + self.feed_forward(h)


class _EncMaskIgnored(EncoderLayer):
    def forward(self, x, mask=None):
        return EncoderLayer.forward(self, x, None)


class _EncNormsSwapped(EncoderLayer):
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm2(x)
            x = x + self.self_attn(h, h, h, mask=mask)[0]
            return x + self.feed_forward(self.norm1(x))
        x = self.norm2(x + self.self_attn(x, x, x, mask=mask)[0])
        return self.norm1(x + self.feed_forward(x))


class _EncFeedForwardOnLayerInput(EncoderLayer):
    """The feed-forward block reads the layer's input instead of the attention sub-layer's output."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            y = x + self.self_attn(h, h, h, mask=mask)[0]
            return y + self.feed_forward(self.norm2(x))
        y = self.norm1(x + self.self_attn(x, x, x, mask=mask)[0])
        return self.norm2(y + self.feed_forward(x))


class _EncPreLNKeysNotNormalised(EncoderLayer):
    """Pre-LN that normalises the queries only: keys and values from the raw residual stream."""

    def forward(self, x, mask=None):
        if not self.norm_first:
            return EncoderLayer.forward(self, x, mask)
        h = self.norm1(x)
        x = x + self.self_attn(h, x, x, mask=mask)[0]
        return x + self.feed_forward(self.norm2(x))


# correct alternatives
class _EncWithSublayerHelper(EncoderLayer):
    """One helper for the residual-and-norm wrapper, as The Annotated Transformer's SublayerConnection."""

    def _sublayer(self, x, norm, dropout, fn):
        if self.norm_first:
            return x + dropout(fn(norm(x)))
        return norm(x + dropout(fn(x)))

    def forward(self, x, mask=None):
        x = self._sublayer(x, self.norm1, self.dropout1, lambda h: self.self_attn(h, h, h, mask, True)[0])
        return self._sublayer(x, self.norm2, self.dropout2, self.feed_forward)


class _EncFunctionalNorm(EncoderLayer):
    """LayerNorm written out with F.layer_norm and the modules' parameters."""

    def _norm(self, norm, x):
        return F.layer_norm(x, (self.d_model,), norm.weight, norm.bias, norm.eps)

    def forward(self, x, mask=None):
        residual = x
        if self.norm_first:
            h = self._norm(self.norm1, x)
            x = residual + self.self_attn(query=h, key=h, value=h, mask=mask)[0]
            x = x + self.feed_forward(self._norm(self.norm2, x))
            return x
        attended = self.self_attn(query=x, key=x, value=x, mask=mask)[0]
        x = self._norm(self.norm1, residual + attended)
        return self._norm(self.norm2, x + self.feed_forward(x))


ENCODER_LAYER = register(Exercise(
    name="encoder_layer",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=EncoderLayer,
    # PyTorch's own layers are what notebooks 05 and 06 compare with: running them is not writing the layer.
    forbidden_calls=PYTORCH_LAYERS,
    forbidden_ops=("transformer_encoder_layer", "transformer_decoder"),
    summary="EncoderLayer.forward: self-attention and feed-forward sub-layers with residuals and LayerNorm, "
            "post-LN and pre-LN",
    **public_and_hidden(_encoder_cases),
    mistakes=[
        Mistake("no residual around attention", _EncNoAttentionResidual,
                "each sub-layer's output is added to its input (the residual connection around self-attention).",
                detail="x + self.dropout1(self.self_attn(x, x, x, mask=mask)[0]), inside norm1 in post-LN."),
        Mistake("no residual around the feed-forward block", _EncNoFeedForwardResidual,
                "the feed-forward sub-layer needs its residual connection too.",
                detail="x + self.dropout2(self.feed_forward(x)), inside norm2 in post-LN."),
        Mistake("LayerNorm before the sub-layer in post-LN", _EncAlwaysPreLN,
                "with norm_first=False (the paper) the LayerNorm comes after the residual sum; normalising the "
                "sub-layer's input is pre-LN.",
                detail="x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)[0]))."),
        Mistake("norm_first ignored (post-LN always)", _EncAlwaysPostLN,
                "with norm_first=True, normalise the sub-layer's input and add its output to the raw x: "
                "x = x + attention(norm1(x)), and do not normalise the sum."),
        Mistake("pre-LN residual from the normalised input", _EncPreLNResidualFromNormalised,
                "in pre-LN the residual adds the raw x, not norm1(x): x = x + attention(norm1(x))."),
        Mistake("mask not passed to attention", _EncMaskIgnored,
                "pass the mask on to the self-attention: padded positions must not be attended to.",
                detail="self.self_attn(..., mask=mask)."),
        Mistake("norm1 and norm2 swapped", _EncNormsSwapped,
                "norm1 belongs to the attention sub-layer, norm2 to the feed-forward sub-layer (their "
                "weights differ)."),
        Mistake("feed-forward applied to the layer's input", _EncFeedForwardOnLayerInput,
                "the feed-forward sub-layer takes the output of the attention sub-layer, not the layer's input."),
        Mistake("pre-LN: keys and values not normalised", _EncPreLNKeysNotNormalised,
                "self-attention attends from norm1(x) to norm1(x): queries, keys and values are all the "
                "normalised input."),
    ],
    also_correct=[_EncWithSublayerHelper, _EncFunctionalNorm],
))


# ---------------------------------------------------------------------------------------------------
# mean_pool
# ---------------------------------------------------------------------------------------------------

def _pool_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    batch, seq, d = (4, 7, 5) if hidden else (3, 6, 4)
    real = _padding(gen, batch, seq)[:, 0, 0, :]  # (batch, seq)
    x = _x(gen, batch, seq, d)
    x_padded_large = x.masked_fill(~real[..., None], 100.0)
    return [
        Case("no padding", args=(_x(gen, 2, 3, d), torch.ones(2, 3, dtype=torch.bool))),
        Case(f"rows of different lengths, x ({batch}, {seq}, {d})", args=(x, real)),
        Case("padding positions hold large values (they must not count)", args=(x_padded_large, real)),
        Case("one token per row", args=(_x(gen, 2, seq, d), torch.arange(seq)[None, :].expand(2, seq) < 1)),
        Case("padding on the left and in the middle (use the mask, not a length)",
             args=(_x(gen, 2, seq, d), torch.arange(seq)[None, :].expand(2, seq) % torch.tensor([[2], [3]]) > 0)),
    ]


def _pool_includes_padding(x, mask):
    return x.mean(dim=1)


def _pool_divides_by_seq(x, mask):
    return (x * mask.unsqueeze(-1)).sum(dim=1) / x.shape[1]


def _pool_wrong_axis(x, mask):
    return (x * mask.unsqueeze(-1)).sum(dim=2) / mask.sum(dim=1, keepdim=True)


def _pool_inverted_mask(x, mask):
    keep = (~mask).unsqueeze(-1).float()
    return (x * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)


def _pool_first_token(x, mask):
    return x[:, 0]


def _pool_masked_max(x, mask):
    return x.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)


def _pool_loop(x, mask):
    return torch.stack([x[b][mask[b]].mean(dim=0) for b in range(x.shape[0])])


def _pool_einsum(x, mask):
    m = mask.to(x.dtype)
    return torch.einsum("bsd,bs->bd", x, m) / m.sum(dim=1, keepdim=True)


MEAN_POOL = register(Exercise(
    name="mean_pool",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=mean_pool,
    summary="average of the encoder's outputs over each sequence's real tokens",
    forbidden_calls=PYTORCH_MASKED_MEAN,
    forbidden_ops=("nanmean",),
    **public_and_hidden(_pool_cases),
    mistakes=[
        Mistake("padding included", _pool_includes_padding,
                "a plain mean over the sequence averages the padding too: zero the padded positions with the mask "
                "first, and count only the real tokens.",
                detail="(x * mask[..., None]).sum(dim=1) / mask.sum(dim=1, keepdim=True)."),
        Mistake("divided by the padded length", _pool_divides_by_seq,
                "divide by the number of real tokens in each row, not by the padded length seq.",
                detail="mask.sum(dim=1, keepdim=True)."),
        Mistake("summed over the wrong axis", _pool_wrong_axis,
                "average over the sequence axis (dim=1), keeping the d_model features."),
        Mistake("mask inverted", _pool_inverted_mask,
                "mask is True at the real tokens (the course's convention): keep those, drop the False ones."),
        Mistake("first token only", _pool_first_token,
                "that is [CLS]-style pooling; mean pooling averages every real position."),
        Mistake("max instead of mean", _pool_masked_max,
                "this is max pooling: sum the real positions and divide by their number."),
    ],
    also_correct=[_pool_loop, _pool_einsum],
))
