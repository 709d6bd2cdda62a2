"""What self-attention is compared with (notebooks 08 and 09): recurrent, convolutional layers and their costs.

The paper's Table 1 compares a self-attention layer with a recurrent and a convolutional layer on three
counts: operations per layer, sequential operations, and the maximum path length between two positions.
This module holds the comparison side of that table, so that notebook 09 and ``benchmarks/`` measure the
same things:

- :class:`LSTMClassifier`: tokens -> embedding -> ``nn.LSTM`` -> a prediction read at the last position;
- :class:`LSTMSeq2Seq`: the pre-Transformer translation model (an LSTM encoder whose final state starts an
  LSTM decoder), with the same ``forward(src, tgt_in) -> logits`` interface as the course's Transformer;
- :class:`Conv1dLayer`: a 1-D convolution over a ``(batch, seq, d_model)`` sequence (the paper's
  "convolutional layer"), optionally dilated and causal;
- :class:`SmallCNN`: the convolutional image classifier notebook 08 sets against the Vision Transformer;
- :func:`max_path_length` and :func:`layer_flops`: the table's two analytic columns, in exact numbers
  (the references of notebook 09's exercises);
- :func:`bag_of_words_accuracy`: a text classifier that sees word counts and nothing else (notebook 11's
  yardstick for what a label's surface words give away).

Everything is batch first, like the rest of the course.
"""

from __future__ import annotations

import torch
from torch import nn

from course_lib.validation import validated_by

__all__ = [
    "LAYER_KINDS",
    "max_path_length",
    "layer_flops",
    "LSTMClassifier",
    "LSTMSeq2Seq",
    "Conv1dLayer",
    "SmallCNN",
    "bag_of_words_accuracy",
]

#: The layer kinds of the paper's Table 1, as accepted by :func:`max_path_length` and :func:`layer_flops`.
LAYER_KINDS = ("self_attention", "recurrent", "convolution", "dilated_convolution", "restricted_self_attention")


def _check_kind_and_sizes(fn: str, layer: str, **sizes: int) -> None:
    """Raise a clear error for an unknown layer kind or a size that is not a positive integer."""
    if layer not in LAYER_KINDS:
        raise ValueError(f"{fn}: layer must be one of {LAYER_KINDS}, got {layer!r}")
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{fn}: {name} must be a positive integer, got {value!r}")


def _check_path_arguments(layer: str, n: int, k: int = 3, r: int = 4) -> None:
    _check_kind_and_sizes("max_path_length", layer, n=n, k=k, r=r)
    if k < 2:
        raise ValueError(f"max_path_length: kernel width k must be >= 2 to connect positions, got {k}")


def _check_flops_arguments(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> None:
    _check_kind_and_sizes("layer_flops", layer, n=n, d=d, k=k, r=r)


@validated_by(_check_path_arguments)
def max_path_length(layer: str, n: int, k: int = 3, r: int = 4) -> int:
    """Fewest layers a signal must cross to connect the first and the last of ``n`` positions.

    The third column of the paper's Table 1, in exact numbers instead of O(.) (a stack of identical layers;
    "a path" is a chain of positions, each computed from the one before it):

    - ``"self_attention"``: every position attends to every other: 1 (0 when ``n == 1``).
    - ``"recurrent"``: h_t depends on h_{t-1}, so position 0 reaches position n-1 after n-1 steps.
    - ``"convolution"`` (kernel ``k``, contiguous): each layer widens the receptive field by k-1 positions;
      L layers see 1 + L(k-1) positions, so L = ceil((n-1) / (k-1)).
    - ``"dilated_convolution"`` (kernel ``k``, dilations 1, k, k^2, ...): L layers see k^L positions, so
      L is the smallest integer with k^L >= n (computed with integers: ``math.log`` rounds badly).
    - ``"restricted_self_attention"`` (each query attends to keys at distance <= ``r``):
      L = ceil((n-1) / r).

    Args:
        layer: one of :data:`LAYER_KINDS`.
        n: sequence length (>= 1).
        k: convolution kernel width (>= 2); used by the convolutions only.
        r: neighbourhood radius (>= 1); used by restricted self-attention only.

    Returns:
        the number of layers (an int).

    Example:
        >>> [max_path_length(kind, 9) for kind in ("self_attention", "recurrent", "convolution",
        ...                                           "dilated_convolution")]
        [1, 8, 4, 2]
    """
    distance = n - 1  # from the first position to the last
    if distance == 0:
        return 0
    if layer == "self_attention":
        return 1
    if layer == "recurrent":
        return distance
    if layer == "convolution":
        return -(-distance // (k - 1))  # ceil((n-1) / (k-1)) with integers
    if layer == "restricted_self_attention":
        return -(-distance // r)
    layers, receptive_field = 0, 1  # dilated convolution: the receptive field is k**layers
    while receptive_field < n:
        layers, receptive_field = layers + 1, receptive_field * k
    return layers


@validated_by(_check_flops_arguments)
def layer_flops(layer: str, n: int, d: int, k: int = 3, r: int = 4) -> int:
    """Multiply-adds of one layer on a sequence of ``n`` vectors of width ``d`` (one sequence, no batch).

    The first column of the paper's Table 1 ("complexity per layer") with exact constants, counting a
    ``(p, q) @ (q, s)`` matrix product as p*q*s multiply-adds and ignoring biases, softmax and
    non-linearities:

    - ``"self_attention"``: the Q, K, V and output projections (4 n d^2), the scores Q K^T (n^2 d) and the
      weighted sum of values (n^2 d): 4 n d^2 + 2 n^2 d. The paper's O(n^2 d) is the part that grows with n^2.
    - ``"restricted_self_attention"``: the same projections, but each query meets only 2r+1 keys:
      4 n d^2 + 2 n (2r+1) d (the paper's O(r n d)).
    - ``"recurrent"``: an LSTM: four gates, each with an input and a hidden d x d matrix, at each of n
      steps: 8 n d^2 (the paper's O(n d^2)).
    - ``"convolution"`` and ``"dilated_convolution"``: k taps, each a d x d matrix, at n positions:
      k n d^2 (the paper's O(k n d^2)).

    Args:
        layer: one of :data:`LAYER_KINDS`.
        n: sequence length; d: width (``d_model``); k: kernel width; r: neighbourhood radius.

    Returns:
        the number of multiply-adds (an int; FLOPs are twice this).

    Example:
        >>> layer_flops("self_attention", n=10, d=4), layer_flops("recurrent", n=10, d=4)
        (1440, 1280)
    """
    if layer == "self_attention":
        return 4 * n * d * d + 2 * n * n * d
    if layer == "restricted_self_attention":
        return 4 * n * d * d + 2 * n * (2 * r + 1) * d
    if layer == "recurrent":
        return 8 * n * d * d
    return k * n * d * d  # convolution, dilated or not


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


def bag_of_words_accuracy(train_texts: list[str], train_labels: list[int], valid_texts: list[str],
                          valid_labels: list[int]) -> float:
    """Validation accuracy of a logistic regression on word counts (scikit-learn), trained on the given texts.

    Words are runs of letters, lower-cased; counts are scaled by TF-IDF. No word order, no knowledge from
    outside the labelled texts: what a label's surface words alone give away.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(token_pattern=r"[A-Za-z]+", lowercase=True)
    features = vectorizer.fit_transform(train_texts)
    classifier = LogisticRegression(max_iter=2000).fit(features, train_labels)
    predicted = classifier.predict(vectorizer.transform(valid_texts))
    return float((predicted == torch.tensor(valid_labels).numpy()).mean())
