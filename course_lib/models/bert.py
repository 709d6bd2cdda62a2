"""The encoder-only Transformer (BERT) and its pre-training objective, masked language modelling.

BERT (Devlin et al. 2019) keeps the Transformer's encoder and drops the decoder. With no causal mask every
position sees the whole sequence, so the model cannot be trained to predict the next token (it would see
it). Instead, 15 % of the positions are **selected** and the model predicts the original token there from
everything else (:func:`mask_tokens`): of the selected positions, 80 % are replaced by ``[MASK]``, 10 % by a
random token and 10 % are left unchanged, so that the model cannot learn that only ``[MASK]`` positions
matter (``[MASK]`` never appears when the model is fine-tuned). The loss is the cross-entropy at the selected
positions only (:func:`mlm_loss`). A classification task then reads the vector at position 0, where every
input starts with ``[CLS]`` (:meth:`BERT.classify`).

The layout, with the course's parts: token embedding + learned positions, a pre-LN
:class:`~course_lib.Encoder` with GELU (the original BERT is post-LN; pre-LN trains more steadily in few
steps, as in :class:`~course_lib.models.gpt.GPT`), BERT's MLM head (dense, GELU, LayerNorm, then the output layer
**tied** to the token embedding, with a bias) and BERT's pooler (dense + tanh on position 0) under the
classifier.

Shapes: ``tokens`` (batch, seq) of ids -> MLM logits (batch, seq, vocab_size); class logits
(batch, num_classes). Labels use PyTorch's ``ignore_index`` convention: -100 where nothing is predicted.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.models.layers import Encoder, normal_init_
from course_lib.models.masking import padding_mask
from course_lib.models.positional import LearnedPositionalEmbedding
from course_lib.validation import check_positive_ints, validated_by

__all__ = ["IGNORE_INDEX", "mask_tokens", "mlm_loss", "ClassificationHead", "BERT"]

#: The label of a position that is not predicted (``nn.CrossEntropyLoss``'s default ``ignore_index``).
IGNORE_INDEX = -100


def _check_ids(name: str, tokens: torch.Tensor) -> None:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError(f"{name}: tokens must be an integer tensor of shape (batch, seq), got "
                         f"{getattr(tokens, 'shape', type(tokens).__name__)}")


def _check_mask_arguments(tokens: torch.Tensor, mask_id: int, vocab_size: int, special_ids: Sequence[int],
                          generator: torch.Generator | None = None, select_prob: float = 0.15,
                          mask_prob: float = 0.8, random_prob: float = 0.1) -> None:
    _check_ids("mask_tokens", tokens)
    if not (0.0 <= select_prob <= 1.0 and mask_prob >= 0.0 and random_prob >= 0.0 and
            mask_prob + random_prob <= 1.0):
        raise ValueError(f"mask_tokens: need 0 <= select_prob <= 1 and mask_prob, random_prob >= 0 with "
                         f"mask_prob + random_prob <= 1, got {select_prob}, {mask_prob}, {random_prob}")
    check_positive_ints("mask_tokens", minimum=2, vocab_size=vocab_size)
    if tokens.numel():
        low, high = (int(v) for v in torch.aminmax(tokens))  # one pass, one read back per batch
        if low < 0 or high >= vocab_size:
            raise ValueError(f"mask_tokens: tokens must hold ids in [0, vocab_size={vocab_size}), got ids from "
                             f"{low} to {high}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_tokens: mask_id must be in [0, vocab_size={vocab_size}), got {mask_id}")
    if any(int(i) < 0 for i in special_ids):
        raise ValueError(f"mask_tokens: special_ids must be ids >= 0, got {list(special_ids)}")
    if len({int(i) for i in (*special_ids, mask_id) if int(i) < vocab_size}) >= vocab_size:
        raise ValueError(f"mask_tokens: every id below vocab_size={vocab_size} is special: nothing to draw "
                         f"a random replacement from")


@validated_by(_check_mask_arguments)
def mask_tokens(tokens: torch.Tensor, mask_id: int, vocab_size: int, special_ids: Sequence[int],
                generator: torch.Generator | None = None, select_prob: float = 0.15, mask_prob: float = 0.8,
                random_prob: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's 80/10/10 masking: the model's input and the labels of masked-language-model pre-training.

    Each position whose token is not special (``special_ids``: padding, ``[CLS]``, ``[SEP]``, ``[MASK]``) is
    selected independently with probability ``select_prob``. A selected position becomes ``[MASK]`` with
    probability ``mask_prob``, a random token with ``random_prob`` (drawn uniformly from the ids that are not
    special: a random ``[PAD]`` or ``[CLS]`` would be a signal no real input has) and stays unchanged
    otherwise. The label is the original token at selected positions and :data:`IGNORE_INDEX` elsewhere.

    Args:
        tokens: (batch, seq) token ids; not modified.
        mask_id: the id of ``[MASK]``.
        vocab_size: the number of ids (random tokens are drawn below it).
        special_ids: ids never selected (``mask_id`` is added to them).
        generator: the random generator (a seeded one gives the same masking every time).

    Returns:
        ``(inputs, labels)``, both (batch, seq) like ``tokens``.

    Example:
        >>> tokens = torch.arange(4, 24).reshape(2, 10)
        >>> inputs, labels = mask_tokens(tokens, mask_id=3, vocab_size=30, special_ids=[0, 1, 2],
        ...                              generator=torch.Generator().manual_seed(0), select_prob=0.5)
        >>> kept = labels == -100  # not selected: input unchanged, nothing to predict
        >>> bool((labels[~kept] == tokens[~kept]).all()), bool((inputs[kept] == tokens[kept]).all())
        (True, True)
    """
    special = torch.tensor([*special_ids, mask_id], device=tokens.device)
    ordinary = torch.ones(vocab_size, dtype=torch.bool, device=tokens.device)
    ordinary[special[special < vocab_size]] = False
    candidates = ordinary.nonzero().squeeze(1)  # (num_ordinary,): the ids a random replacement may take
    selected = (torch.rand(tokens.shape, generator=generator, device=tokens.device) < select_prob) \
        & ~torch.isin(tokens, special)  # (batch, seq)
    action = torch.rand(tokens.shape, generator=generator, device=tokens.device)  # (batch, seq), uniform in [0, 1)
    to_mask = selected & (action < mask_prob)
    to_random = selected & (action >= mask_prob) & (action < mask_prob + random_prob)
    picks = torch.randint(0, candidates.numel(), tokens.shape, generator=generator, device=tokens.device)
    inputs = torch.where(to_mask, mask_id, tokens)
    inputs = torch.where(to_random, candidates[picks], inputs)
    labels = torch.where(selected, tokens, IGNORE_INDEX)
    return inputs, labels


def _check_mlm_inputs(logits: torch.Tensor, labels: torch.Tensor) -> None:
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"mlm_loss: logits must be (batch, seq, vocab) and labels (batch, seq), got "
                         f"{tuple(logits.shape)} and {tuple(labels.shape)}")


@validated_by(_check_mlm_inputs)
def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the selected positions only (``labels != -100``).

    The unselected positions are not scored: their input is the answer itself, and scoring them would
    reward copying. A batch in which no position was selected gives a loss of zero that still belongs to the
    graph (``F.cross_entropy`` would give NaN and poison the training).

    Shapes: ``logits`` (batch, seq, vocab), ``labels`` (batch, seq) -> a scalar.
    """
    selected = labels != IGNORE_INDEX  # (batch, seq)
    if not bool(selected.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[selected], labels[selected])  # (num_selected, vocab) against (num_selected,)


class ClassificationHead(nn.Module):
    """BERT's sentence classifier: the ``[CLS]`` vector, through the pooler (dense + tanh), dropout and a
    linear layer to the class logits.

    Every input starts with ``[CLS]``; with no causal mask its vector at the last layer has attended to the
    whole sequence, so it can stand for it. Shapes: ``hidden`` (batch, seq, d_model) -> (batch, num_classes).

    Example:
        >>> head = ClassificationHead(d_model=8, num_classes=3).eval()
        >>> head(torch.randn(2, 5, 8)).shape
        torch.Size([2, 3])
    """

    def __init__(self, d_model: int, num_classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        check_positive_ints("ClassificationHead", d_model=d_model, num_classes=num_classes)
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        cls = hidden[:, 0]  # (batch, d_model): the vector at position 0, [CLS]
        pooled = torch.tanh(self.pooler(cls))  # (batch, d_model)
        return self.classifier(self.dropout(pooled))  # (batch, num_classes)


class BERT(nn.Module):
    """An encoder-only Transformer with BERT's two heads, built from the course's layers.

    Args:
        vocab_size: number of token ids.
        d_model, num_heads, num_layers: the stack's width, heads and depth.
        d_ff: feed-forward width (default ``4 * d_model``, as in BERT).
        max_len: the longest input (number of learned positions).
        dropout: dropout on embeddings, attention weights and residual branches.
        activation: ``"gelu"`` (BERT), ``"gelu_tanh"`` or ``"relu"``.
        layer_norm_eps: the LayerNorms' epsilon (1e-12 in BERT).
        pad_id: the padding id, never attended to (``None``: no padding).
        num_classes: outputs of the ``[CLS]`` classifier (0: no classifier).

    Example:
        >>> model = BERT(vocab_size=40, d_model=16, num_heads=2, num_layers=2, max_len=12, pad_id=0,
        ...              num_classes=3).eval()
        >>> tokens = torch.randint(1, 40, (2, 12))
        >>> model(tokens).shape, model.classify(tokens).shape
        (torch.Size([2, 12, 40]), torch.Size([2, 3]))
    """

    def __init__(self, vocab_size: int, d_model: int = 128, num_heads: int = 4, num_layers: int = 2,
                 d_ff: int | None = None, max_len: int = 128, dropout: float = 0.1, activation: str = "gelu",
                 layer_norm_eps: float = 1e-12, pad_id: int | None = None, num_classes: int = 0) -> None:
        super().__init__()
        check_positive_ints("BERT", minimum=2, vocab_size=vocab_size)
        check_positive_ints("BERT", d_model=d_model, num_heads=num_heads, num_layers=num_layers, max_len=max_len)
        check_positive_ints("BERT", minimum=0, num_classes=num_classes)
        if pad_id is not None and (isinstance(pad_id, bool) or not isinstance(pad_id, int)
                                   or not 0 <= pad_id < vocab_size):
            raise ValueError(f"BERT: pad_id must be None or an id in [0, vocab_size={vocab_size}), got {pad_id!r}")
        self.vocab_size, self.d_model, self.max_len, self.pad_id = vocab_size, d_model, max_len, pad_id
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = LearnedPositionalEmbedding(max_len, d_model, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff or 4 * d_model, dropout, norm_first=True,
                               activation=activation, layer_norm_eps=layer_norm_eps)
        # BERT's MLM head: transform, then the tied output layer with its own bias.
        self.mlm_transform = nn.Sequential(nn.Linear(d_model, d_model),
                                           nn.GELU(approximate="tanh" if activation == "gelu_tanh" else "none"),
                                           nn.LayerNorm(d_model, eps=layer_norm_eps))
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))
        self.head = ClassificationHead(d_model, num_classes, dropout) if num_classes else None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """BERT's initialisation: N(0, 0.02^2) for every matrix, zero biases (LayerNorms keep 1 and 0)."""
        normal_init_(self, 0.02)

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        _check_ids("BERT", tokens)
        if not 1 <= tokens.shape[1] <= self.max_len:
            raise ValueError(f"BERT: tokens has seq={tokens.shape[1]}; it must be between 1 and max_len={self.max_len}")
        if tokens.numel():
            low, high = (int(v) for v in torch.aminmax(tokens))  # one pass, one read back
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"BERT: token ids must be in [0, vocab_size={self.vocab_size}), got [{low}, {high}]")

    def padding_mask(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(batch, 1, 1, seq), True where a key may be attended to (not padding); ``None`` without ``pad_id``."""
        if self.pad_id is None:
            return None
        return padding_mask(tokens, self.pad_id)  # (batch, 1, 1, seq): notebook 04's, never a second copy

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """The encoder's output (after its final LayerNorm): (batch, seq) -> (batch, seq, d_model)."""
        self._check_tokens(tokens)
        positions = torch.arange(tokens.shape[1], device=tokens.device)  # (seq,)
        x = self.positions.dropout(self.token_embedding(tokens) + self.positions.embedding(positions))
        return self.encoder(x, self.padding_mask(tokens))

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """BERT's MLM head on hidden vectors: (..., d_model) -> (..., vocab_size), tied to the embedding.

        Pre-training can run it on the selected positions only (``hidden[labels != -100]``): the other 85 %
        of the positions are not scored, and the output layer is the largest matrix product of a small model.
        """
        h = self.mlm_transform(hidden)  # (..., d_model)
        return h @ self.token_embedding.weight.T + self.mlm_bias  # tied: (..., vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """MLM logits at every position: (batch, seq) -> (batch, seq, vocab_size)."""
        return self.mlm_logits(self.hidden_states(tokens))

    def classify(self, tokens: torch.Tensor) -> torch.Tensor:
        """Class logits from the vector at position 0 (``[CLS]``): (batch, seq) -> (batch, num_classes)."""
        if self.head is None:
            raise ValueError("BERT.classify: this model was built with num_classes=0 (no classifier)")
        return self.head(self.hidden_states(tokens))
