"""The models self-attention is compared with (notebooks 08 and 09): recurrent and convolutional ones.

The paper's Table 1 compares a self-attention layer with a recurrent and a convolutional layer; this module holds
the models of that comparison, so that notebook 09 and ``benchmarks/`` measure the same things (the table's
analytic columns are :mod:`course_lib.models.complexity`):

- :class:`LSTMClassifier`: tokens -> embedding -> ``nn.LSTM`` -> a prediction read at the last position;
- :class:`LSTMSeq2Seq`: the pre-Transformer translation model (an LSTM encoder whose final state starts an
  LSTM decoder), with the same ``forward(src, tgt_in) -> logits`` interface as the course's Transformer;
- :class:`Conv1dLayer`: a 1-D convolution over a ``(batch, seq, d_model)`` sequence (the paper's
  "convolutional layer"), optionally dilated and causal;
- :class:`SmallCNN`: the convolutional image classifier notebook 08 sets against the Vision Transformer.

Everything is batch first, like the rest of the course.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LSTMClassifier", "LSTMSeq2Seq", "Conv1dLayer", "SmallCNN"]


def _check_tokens(name: str, tokens: torch.Tensor, vocab_size: int) -> None:
    """Raise a clear error unless ``tokens`` is a non-empty (batch, seq) integer tensor of valid ids."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        got = f"{tuple(tokens.shape)} {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"{name} must be an integer tensor of shape (batch, seq), got {got}")
    if tokens.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one token per sequence, got shape {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name} holds token ids outside [0, {vocab_size}): min {int(tokens.min())}, "
                         f"max {int(tokens.max())}")


class LSTMClassifier(nn.Module):
    """Read a token sequence with an LSTM and classify it from the state at the last position.

    tokens (batch, seq) -> embedding (batch, seq, d_model) -> ``nn.LSTM`` -> the last position's output
    (batch, d_model) -> ``nn.Linear`` -> logits (batch, num_classes).

    What reaches the prediction from position t has passed through seq - 1 - t recurrent steps: this is
    the baseline that notebook 09's long-range recall task trains against a Transformer encoder.

    Args:
        vocab_size: number of token ids; d_model: embedding and hidden width;
        num_classes: number of outputs; num_layers: stacked LSTM layers; dropout: between LSTM layers.

    Example:
        >>> model = LSTMClassifier(vocab_size=20, d_model=16, num_classes=5)
        >>> model(torch.randint(0, 20, (3, 7))).shape
        torch.Size([3, 5])
    """

    def __init__(self, vocab_size: int, d_model: int, num_classes: int, num_layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.lstm = nn.LSTM(d_model, d_model, num_layers=num_layers, batch_first=True,
                            dropout=dropout if num_layers > 1 else 0.0)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (batch, seq) -> logits (batch, num_classes), read from the last position."""
        _check_tokens("LSTMClassifier: tokens", tokens, self.vocab_size)
        outputs, _ = self.lstm(self.embedding(tokens))  # (batch, seq, d_model)
        return self.head(outputs[:, -1])  # (batch, num_classes)


class LSTMSeq2Seq(nn.Module):
    """The recurrent encoder-decoder that the Transformer replaced (Sutskever et al., 2014, without attention).

    The encoder LSTM reads ``src``; its final (h, c) state starts the decoder LSTM, which reads the shifted
    target ``tgt_in`` (teacher forcing) and predicts the next token at every position. The whole source
    must pass through one fixed-size state: the bottleneck that attention removed.

    Same interface as ``course_lib.models.transformer.Transformer``: ``forward(src, tgt_in) -> logits``.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes; d_model: embedding and hidden width;
        num_layers: stacked LSTM layers (encoder and decoder alike); dropout: between LSTM layers;
        pad_id: the padding id (its embedding stays zero). Source padding should sit at the *start* of a
        sequence (left padding) if it is used, so that the final state is that of the last real token.

    Example:
        >>> model = LSTMSeq2Seq(src_vocab_size=12, tgt_vocab_size=9, d_model=16)
        >>> model(torch.randint(1, 12, (2, 5)), torch.randint(1, 9, (2, 4))).shape
        torch.Size([2, 4, 9])
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int, num_layers: int = 1,
                 dropout: float = 0.0, pad_id: int = 0) -> None:
        super().__init__()
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.src_embedding = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        lstm_dropout = dropout if num_layers > 1 else 0.0
        self.encoder = nn.LSTM(d_model, d_model, num_layers=num_layers, batch_first=True, dropout=lstm_dropout)
        self.decoder = nn.LSTM(d_model, d_model, num_layers=num_layers, batch_first=True, dropout=lstm_dropout)
        self.generator = nn.Linear(d_model, tgt_vocab_size)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (batch, src_len) -> the encoder's final state (h, c), each (num_layers, batch, d_model)."""
        _check_tokens("LSTMSeq2Seq: src", src, self.src_vocab_size)
        _, state = self.encoder(self.src_embedding(src))
        return state

    def decode(self, tgt_in: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """tgt_in (batch, tgt_len) and a state from :meth:`encode` -> logits (batch, tgt_len, tgt_vocab_size)."""
        _check_tokens("LSTMSeq2Seq: tgt_in", tgt_in, self.tgt_vocab_size)
        outputs, _ = self.decoder(self.tgt_embedding(tgt_in), state)  # (batch, tgt_len, d_model)
        return self.generator(outputs)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src (batch, src_len), tgt_in (batch, tgt_len) -> logits (batch, tgt_len, tgt_vocab_size)."""
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(f"LSTMSeq2Seq: src and tgt_in must have the same batch size, got "
                             f"{tuple(src.shape)} and {tuple(tgt_in.shape)}")
        return self.decode(tgt_in, self.encode(src))


class Conv1dLayer(nn.Module):
    """A 1-D convolution over a sequence of vectors: the paper's "convolutional layer", batch first.

    x (batch, seq, d_model) -> ``nn.Conv1d(d_model, d_model, kernel_size)`` along seq -> (batch, seq,
    d_model). Zero padding keeps the length; with ``causal=True`` all padding goes on the left, so that
    position t sees only positions <= t (as in WaveNet or ByteNet's decoder). ``dilation`` spaces the taps:
    stacking dilations 1, k, k^2, ... widens the receptive field exponentially (the paper's O(log_k n) path).

    Args:
        d_model: width; kernel_size: number of taps k (>= 1); dilation: spacing of the taps;
        causal: pad on the left only; activation: apply a ReLU after the convolution.

    Example:
        >>> Conv1dLayer(d_model=8, kernel_size=3)(torch.randn(2, 10, 8)).shape
        torch.Size([2, 10, 8])
    """

    def __init__(self, d_model: int, kernel_size: int = 3, dilation: int = 1, causal: bool = False,
                 activation: bool = False) -> None:
        super().__init__()
        if kernel_size < 1 or dilation < 1:
            raise ValueError(f"Conv1dLayer: kernel_size and dilation must be >= 1, got {kernel_size}, {dilation}")
        self.d_model = d_model
        self.causal = causal
        self.total_padding = dilation * (kernel_size - 1)  # positions lost by a convolution without padding
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, dilation=dilation)
        self.activation = nn.ReLU() if activation else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (batch, seq, d_model) -> (batch, seq, d_model)."""
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"Conv1dLayer: x must have shape (batch, seq, {self.d_model}), got {tuple(x.shape)}")
        left = self.total_padding if self.causal else self.total_padding // 2
        right = self.total_padding - left
        channels_first = x.transpose(1, 2)  # (batch, d_model, seq): Conv1d wants channels before length
        padded = nn.functional.pad(channels_first, (left, right))  # (batch, d_model, seq + total_padding)
        return self.activation(self.conv(padded)).transpose(1, 2)  # (batch, seq, d_model)


class SmallCNN(nn.Module):
    """The convolutional baseline of notebook 08: three 3x3 convolutions, pooling, a linear classifier.

    Its priors are exactly what a ViT lacks: locality (3x3 kernels) and translation equivariance (shared
    weights, pooling). About 56k parameters.

    Shapes: images (batch, in_channels, 8, 8) -> logits (batch, num_classes); any H, W divisible by 2.

    Example:
        >>> tuple(SmallCNN()(torch.rand(2, 1, 8, 8)).shape)
        (2, 10)
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),  # (batch, width, H, W)
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),  # (batch, 2 width, H, W)
            nn.MaxPool2d(2),  # (batch, 2 width, H/2, W/2)
            nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),  # (batch, 2 width, 1, 1)
        )
        self.head = nn.Linear(2 * width, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images).flatten(1))  # (batch, num_classes)
