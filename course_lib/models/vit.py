"""The Vision Transformer (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words"), built on the
course's own pre-LN encoder (``course_lib.models.layers.Encoder(norm_first=True)``), as Hugging Face's ViT builds
on its encoder.

An image becomes a sequence: cut it into ``p x p`` patches, flatten each patch, project it linearly to
``d_model`` (the same map as a convolution with kernel = stride = ``p``), prepend a learned ``[CLS]``
token, add learned position embeddings, run a stack of pre-LN encoder blocks with GELU MLPs, and classify
from the final ``[CLS]`` vector (or from the mean of the patch vectors, ``pool="mean"``)::

    z_0 = [x_cls; x_p^1 E; ...; x_p^N E] + E_pos        E: (P^2 C, D), E_pos: (N + 1, D)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1},  z_l = MLP(LN(z'_l)) + z'_l,  l = 1..L
    y = head(LN(z_L^0))

Shapes (batch first, as everywhere in the course): images ``(batch, C, H, W)``; patches
``(batch, N, C*p*p)`` with ``N = (H/p) * (W/p)`` in raster order (row by row, left to right); tokens
``(batch, 1 + N, d_model)``; attention weights ``(batch, num_heads, seq, seq)``.

Example::

    model = VisionTransformer(image_size=8, patch_size=2, in_channels=1, num_classes=10)
    logits = model(torch.rand(4, 1, 8, 8))                     # (4, 10)
    maps = attention_maps(model, torch.rand(4, 1, 8, 8))       # one (4, heads, 17, 17) per layer
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from course_lib.models.layers import Encoder
from course_lib.models.transformer import count_parameters  # re-exported: one definition for the course

__all__ = [
    "check_patchable",
    "patchify",
    "PatchEmbedding",
    "add_cls_and_positions",
    "VisionTransformer",
    "attention_maps",
    "attention_rollout",
    "cls_attention_grid",
    "position_similarity",
    "count_parameters",
    "vit_parameter_count",
    "VIT_BASE_16",
]


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    """``8 -> (8, 8)``; ``(8, 6) -> (8, 6)``; anything else is an error naming ``name``."""
    if isinstance(size, int):
        size = (size, size)
    size = tuple(size)
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"{name} must be a positive int or a pair of them, got {size!r}")
    return size  # type: ignore[return-value]


def check_patchable(images: torch.Tensor, patch_size: int, in_channels: int | None = None,
                    where: str = "patchify") -> None:
    """Raise a ``ValueError`` unless ``images`` can be cut into ``patch_size x patch_size`` patches.

    Checks that ``images`` is 4-D ``(batch, channels, height, width)``, that it has ``in_channels``
    channels (when given), and that height and width are divisible by ``patch_size``; the message says
    which dimension is not divisible by what.

    Example:
        >>> check_patchable(torch.zeros(2, 1, 9, 8), 2)
        Traceback (most recent call last):
        ...
        ValueError: patchify: image height 9 (dim 2 of images of shape (2, 1, 9, 8)) is not divisible by patch_size 2
    """
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{where}: images must be a torch.Tensor, got {type(images).__name__}")
    if images.dim() != 4:
        raise ValueError(f"{where}: images must have shape (batch, channels, height, width), "
                         f"got shape {tuple(images.shape)}")
    if not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"{where}: patch_size must be a positive int, got {patch_size!r}")
    shape = tuple(images.shape)
    if in_channels is not None and shape[1] != in_channels:
        raise ValueError(f"{where}: images have {shape[1]} channels (dim 1 of images of shape {shape}), "
                         f"expected in_channels={in_channels} (channels first: (batch, channels, height, width))")
    for dim, label in ((2, "height"), (3, "width")):
        if shape[dim] % patch_size:
            raise ValueError(f"{where}: image {label} {shape[dim]} (dim {dim} of images of shape {shape}) "
                             f"is not divisible by patch_size {patch_size}")


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """Cut images into non-overlapping ``p x p`` patches and flatten each one: an image as a sequence.

    Patches come in raster order (row by row of the patch grid, left to right in each row), and each patch
    is flattened channel first, as ``(C, p, p)``: the order of ``nn.Conv2d``'s weights, so that a linear
    map on these vectors equals a convolution with kernel = stride = ``p`` whose weight is the same
    numbers reshaped (see :class:`PatchEmbedding`).

    Shapes: ``images`` (batch, C, H, W) with H and W divisible by ``p`` ->
    (batch, (H/p) * (W/p), C * p * p).

    Example:
        >>> x = torch.arange(16.0).reshape(1, 1, 4, 4)
        >>> patchify(x, 2)[0, 1]          # the second patch: top right
        tensor([2., 3., 6., 7.])
    """
    check_patchable(images, patch_size)
    batch, channels, height, width = images.shape
    p = patch_size
    grid_h, grid_w = height // p, width // p
    patches = images.reshape(batch, channels, grid_h, p, grid_w, p)  # split H and W into (grid, p)
    patches = patches.permute(0, 2, 4, 1, 3, 5)  # (batch, grid_h, grid_w, C, p, p)
    return patches.reshape(batch, grid_h * grid_w, channels * p * p)  # (batch, num_patches, C*p*p)


class PatchEmbedding(nn.Module):
    """The ViT's first layer: patches to ``d_model``-vectors, either way the paper describes.

    ``mode="linear"``: :func:`patchify`, then ``nn.Linear(C*p*p, d_model)`` (the paper's ``E``).
    ``mode="conv"``: ``nn.Conv2d(C, d_model, kernel_size=p, stride=p)``, then the grid is flattened in
    raster order. Each output position of that convolution sees exactly one patch and takes a dot product
    with each of ``d_model`` filters of shape ``(C, p, p)``: the same numbers as the linear map when
    ``linear.weight == conv.weight.reshape(d_model, C*p*p)`` (:meth:`copy_weights_from` does this).

    Shapes: images (batch, C, H, W) -> (batch, (H/p) * (W/p), d_model).

    Example:
        >>> lin, conv = PatchEmbedding(2, 1, 8, "linear"), PatchEmbedding(2, 1, 8, "conv")
        >>> _ = conv.copy_weights_from(lin)
        >>> x = torch.rand(3, 1, 8, 8)
        >>> torch.allclose(lin(x), conv(x), atol=1e-6)
        True
    """

    def __init__(self, patch_size: int, in_channels: int, d_model: int, mode: str = "linear") -> None:
        super().__init__()
        if mode not in ("linear", "conv"):
            raise ValueError(f"PatchEmbedding: mode must be 'linear' or 'conv', got {mode!r}")
        for name, value in (("patch_size", patch_size), ("in_channels", in_channels), ("d_model", d_model)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PatchEmbedding: {name} must be a positive int, got {value!r}")
        self.patch_size, self.in_channels, self.d_model, self.mode = patch_size, in_channels, d_model, mode
        if mode == "linear":
            self.proj: nn.Module = nn.Linear(in_channels * patch_size * patch_size, d_model)
        else:
            self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_patchable(images, self.patch_size, self.in_channels, where="PatchEmbedding")
        if self.mode == "linear":
            return self.proj(patchify(images, self.patch_size))  # (batch, num_patches, d_model)
        grid = self.proj(images)  # (batch, d_model, H/p, W/p)
        return grid.flatten(2).transpose(1, 2)  # (batch, num_patches, d_model), raster order

    @torch.no_grad()
    def copy_weights_from(self, other: PatchEmbedding) -> PatchEmbedding:
        """Load ``other``'s weights into this embedding, reshaping between the linear and conv forms."""
        if (other.patch_size, other.in_channels, other.d_model) != (self.patch_size, self.in_channels,
                                                                   self.d_model):
            raise ValueError("PatchEmbedding.copy_weights_from: patch_size, in_channels and d_model differ: "
                             f"{(other.patch_size, other.in_channels, other.d_model)} vs "
                             f"{(self.patch_size, self.in_channels, self.d_model)}")
        self.proj.weight.copy_(other.proj.weight.reshape(self.proj.weight.shape))  # (D, C*p*p) <-> (D, C, p, p)
        self.proj.bias.copy_(other.proj.bias)
        return self

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}"


def add_cls_and_positions(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                          pos_embedding: torch.Tensor) -> torch.Tensor:
    """Prepend the learned ``[CLS]`` token to every sequence, then add the learned position embeddings.

    ``z_0 = [x_cls; x_p^1 E; ...; x_p^N E] + E_pos``: the ``[CLS]`` vector is the same for every image (one
    learned parameter, expanded over the batch) and takes position 0; the patches take positions 1..N.
    After the encoder, the output at position 0 is the image's summary that the classifier reads.

    Shapes: ``patch_tokens`` (batch, N, d_model), ``cls_token`` (1, 1, d_model),
    ``pos_embedding`` (1, N + 1, d_model) -> (batch, N + 1, d_model).

    Example:
        >>> out = add_cls_and_positions(torch.zeros(2, 4, 3), torch.ones(1, 1, 3), torch.zeros(1, 5, 3))
        >>> out[:, 0]                      # every sequence starts with [CLS]
        tensor([[1., 1., 1.],
                [1., 1., 1.]])
    """
    if patch_tokens.dim() != 3:
        raise ValueError(f"add_cls_and_positions: patch_tokens must be (batch, N, d_model), "
                         f"got {tuple(patch_tokens.shape)}")
    batch, num_patches, d_model = patch_tokens.shape
    if tuple(cls_token.shape) != (1, 1, d_model):
        raise ValueError(f"add_cls_and_positions: cls_token must be (1, 1, {d_model}), got {tuple(cls_token.shape)}")
    if tuple(pos_embedding.shape) != (1, num_patches + 1, d_model):
        raise ValueError(f"add_cls_and_positions: pos_embedding must be (1, {num_patches + 1}, {d_model}) "
                         f"(one row per patch plus one for [CLS]), got {tuple(pos_embedding.shape)}")
    cls = cls_token.expand(batch, -1, -1)  # (batch, 1, d_model): the same vector for every image
    tokens = torch.cat([cls, patch_tokens], dim=1)  # (batch, 1 + N, d_model), [CLS] at position 0
    return tokens + pos_embedding  # (1, 1 + N, d_model) broadcasts over the batch


class VisionTransformer(nn.Module):
    """ViT: patch embedding, ``[CLS]`` token, learned positions, pre-LN encoder, classification head.

    Args:
        image_size: H = W, or a pair (H, W); each must be divisible by ``patch_size``.
        patch_size: p, the side of the square patches (16 in ViT-Base/16).
        in_channels: C (1 for the grey digits, 3 for RGB).
        num_classes: the number of outputs of the head.
        d_model, num_heads, num_layers, d_ff, dropout: as in the course's encoder (paper: D, heads, L,
            MLP size); the stack is ``course_lib.models.layers.Encoder(num_layers, ..., norm_first=True,
            activation="gelu")``: pre-LN layers followed by a final LayerNorm.
        pool: ``"cls"`` classifies from the ``[CLS]`` output (the paper's default); ``"mean"`` has no
            ``[CLS]`` token and classifies from the mean of the patch outputs (global average pooling,
            the paper's Appendix D.3).
        patch_embedding: ``"linear"`` or ``"conv"`` (the same map; see :class:`PatchEmbedding`).
        layer_norm_eps: the LayerNorms' epsilon; 1e-5 (PyTorch's default) by default, 1e-6 in the paper's
            released models and Hugging Face's ``ViTConfig``.

    Attributes: ``patch_embed``, ``cls_token`` (1, 1, d_model) or None, ``pos_embedding``
    (1, seq, d_model) with seq = N + 1 (cls) or N (mean), ``encoder`` (:class:`course_lib.models.layers.Encoder`:
    ``encoder.layers``, ``encoder.norm``), ``head``.

    State dicts saved before the stack became an ``Encoder`` (keys ``layers.N.*`` and ``norm.*``) still
    load: a load hook renames them to ``encoder.layers.N.*`` and ``encoder.norm.*``.

    Shapes: images (batch, C, H, W) -> logits (batch, num_classes).

    Example:
        >>> model = VisionTransformer(8, 2, 1, 10, d_model=32, num_heads=4, num_layers=2, d_ff=64)
        >>> tuple(model(torch.rand(5, 1, 8, 8)).shape)
        (5, 10)
    """

    def __init__(self, image_size: int | Sequence[int] = 8, patch_size: int = 2, in_channels: int = 1,
                 num_classes: int = 10, d_model: int = 64, num_heads: int = 4, num_layers: int = 4,
                 d_ff: int = 128, dropout: float = 0.0, pool: str = "cls",
                 patch_embedding: str = "linear", layer_norm_eps: float = 1e-5) -> None:
        super().__init__()
        height, width = _pair(image_size, "VisionTransformer: image_size")
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f"VisionTransformer: patch_size must be a positive int, got {patch_size!r}")
        for label, size in (("height", height), ("width", width)):
            if size % patch_size:
                raise ValueError(f"VisionTransformer: image {label} {size} (image_size={image_size!r}) is not "
                                 f"divisible by patch_size {patch_size}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"VisionTransformer: pool must be 'cls' or 'mean', got {pool!r}")
        if d_model % num_heads:
            raise ValueError(f"VisionTransformer: d_model {d_model} is not divisible by num_heads {num_heads}")
        if num_layers < 1 or num_classes < 1:
            raise ValueError(f"VisionTransformer: num_layers and num_classes must be >= 1, got "
                             f"{num_layers} and {num_classes}")
        self.image_size, self.patch_size, self.in_channels = (height, width), patch_size, in_channels
        self.grid_size = (height // patch_size, width // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.pool, self.d_model = pool, d_model
        self.patch_embed = PatchEmbedding(patch_size, in_channels, d_model, mode=patch_embedding)
        seq_len = self.num_patches + (1 if pool == "cls" else 0)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model)) if pool == "cls" else None
        self.pos_embedding = nn.Parameter(torch.zeros(1, seq_len, d_model))  # (1, seq, d_model)
        self.pos_dropout = nn.Dropout(dropout)
        # L pre-LN layers with GELU MLPs and the final LayerNorm a pre-LN stack ends with (the paper's LN(z_L)).
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, norm_first=True, activation="gelu",
                               layer_norm_eps=layer_norm_eps)
        self.head = nn.Linear(d_model, num_classes)
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)  # small random positions, as in the paper's code
        if self.cls_token is not None:
            nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.register_load_state_dict_pre_hook(_rename_old_encoder_keys)

    def _check(self, images: torch.Tensor) -> None:
        check_patchable(images, self.patch_size, self.in_channels, where="VisionTransformer")
        if tuple(images.shape[2:]) != self.image_size:
            raise ValueError(f"VisionTransformer: expected images of size {self.image_size[0]}x{self.image_size[1]} "
                             f"(image_size; the position embeddings have one row per patch of that grid), got "
                             f"{images.shape[2]}x{images.shape[3]} in images of shape {tuple(images.shape)}")

    def tokens(self, images: torch.Tensor) -> torch.Tensor:
        """The encoder's input ``z_0``: (batch, C, H, W) -> (batch, seq, d_model)."""
        self._check(images)
        x = self.patch_embed(images)  # (batch, N, d_model)
        if self.cls_token is not None:
            x = add_cls_and_positions(x, self.cls_token, self.pos_embedding)  # (batch, 1 + N, d_model)
        else:
            x = x + self.pos_embedding  # (batch, N, d_model)
        return self.pos_dropout(x)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """The image representation the head reads: (batch, C, H, W) -> (batch, d_model)."""
        x = self.encoder(self.tokens(images))  # (batch, seq, d_model), after the final LayerNorm
        return x[:, 0] if self.pool == "cls" else x.mean(dim=1)  # (batch, d_model)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))  # (batch, num_classes)


@torch.no_grad()
def attention_maps(model: VisionTransformer, images: torch.Tensor) -> list[torch.Tensor]:
    """The self-attention weights of every encoder layer on ``images``, in eval mode (no dropout).

    Returns a list of ``num_layers`` tensors (batch, num_heads, seq, seq); row ``i`` of a map is where
    token ``i`` looks (it sums to 1), and with ``pool="cls"`` token 0 is ``[CLS]``. The model's
    train/eval mode is restored afterwards.

    Example:
        >>> model = VisionTransformer(8, 2, 1, 10, d_model=32, num_heads=4, num_layers=2, d_ff=64)
        >>> [tuple(m.shape) for m in attention_maps(model, torch.rand(3, 1, 8, 8))]
        [(3, 4, 17, 17), (3, 4, 17, 17)]
    """
    was_training = model.training
    model.eval()
    try:
        maps = model.encoder.attention_weights(model.tokens(images))  # per layer (batch, heads, seq, seq)
    finally:
        model.train(was_training)
    return maps


def attention_rollout(maps: Sequence[torch.Tensor], residual: bool = True) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each input token flows into each output token.

    Each layer's weights are averaged over heads; with ``residual`` the skip connection is accounted for
    as ``0.5 * A + 0.5 * I`` (rows renormalised); the layers are then chained by matrix products,
    ``R = A_L ... A_2 A_1``. Row 0 of ``R`` (with ``[CLS]``) says which patches the classifier's token
    draws on through all layers, which a single layer's map does not show.

    Shapes: a list of (batch, num_heads, seq, seq) -> (batch, seq, seq); rows sum to 1.

    Example:
        >>> maps = [torch.softmax(torch.randn(2, 4, 5, 5), -1) for _ in range(3)]
        >>> torch.allclose(attention_rollout(maps).sum(-1), torch.ones(2, 5))
        True
    """
    if len(maps) == 0:
        raise ValueError("attention_rollout: maps is empty (expected one (batch, heads, seq, seq) per layer)")
    rollout = None
    for i, weights in enumerate(maps):
        if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
            raise ValueError(f"attention_rollout: maps[{i}] must be (batch, heads, seq, seq), "
                             f"got {tuple(weights.shape)}")
        a = weights.mean(dim=1)  # (batch, seq, seq): heads averaged
        if residual:
            a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
            a = a / a.sum(dim=-1, keepdim=True)
        rollout = a if rollout is None else a @ rollout  # (batch, seq, seq)
    return rollout


def cls_attention_grid(weights: torch.Tensor, grid_size: Sequence[int]) -> torch.Tensor:
    """The ``[CLS]`` row of attention weights, patches only, as an image of the patch grid.

    Shapes: ``weights`` (batch, seq, seq) or (batch, heads, seq, seq) with seq = 1 + gh * gw ->
    (batch, gh, gw) or (batch, heads, gh, gw).

    Example:
        >>> cls_attention_grid(torch.rand(2, 17, 17), (4, 4)).shape
        torch.Size([2, 4, 4])
    """
    gh, gw = grid_size
    if weights.shape[-1] != 1 + gh * gw:
        raise ValueError(f"cls_attention_grid: weights must have 1 + {gh}*{gw} = {1 + gh * gw} keys "
                         f"([CLS] first), got shape {tuple(weights.shape)}")
    row = weights[..., 0, 1:]  # (..., N): from [CLS] to each patch
    return row.reshape(*row.shape[:-1], gh, gw)  # (..., gh, gw), raster order


@torch.no_grad()
def position_similarity(model: VisionTransformer) -> torch.Tensor:
    """Cosine similarity between the learned position embeddings of the patches (the paper's Figure 7).

    Returns (gh, gw, gh, gw): entry ``[i, j]`` is a (gh, gw) map of how similar the embedding of the patch
    at row i, column j is to every patch's embedding. The ``[CLS]`` position is left out.

    Example:
        >>> model = VisionTransformer(8, 2, 1, 10, d_model=32, num_heads=4, num_layers=1, d_ff=64)
        >>> position_similarity(model).shape
        torch.Size([4, 4, 4, 4])
    """
    pos = model.pos_embedding[0]  # (seq, d_model)
    if model.cls_token is not None:
        pos = pos[1:]  # (N, d_model): patches only
    unit = pos / pos.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sim = unit @ unit.T  # (N, N)
    gh, gw = model.grid_size
    return sim.reshape(gh, gw, gh, gw).cpu()


# ViT-Base/16 (the paper's Table 1: 12 layers, D = 768, MLP 3072, 12 heads, 86M parameters) on 224 x 224
# RGB images with the 1000 ImageNet classes.
VIT_BASE_16: dict[str, int | float | str] = dict(
    image_size=224, patch_size=16, in_channels=3, num_classes=1000, d_model=768, num_heads=12, num_layers=12,
    d_ff=3072, dropout=0.0, pool="cls",
)


def vit_parameter_count(image_size: int = 224, patch_size: int = 16, in_channels: int = 3,
                        num_classes: int = 1000, d_model: int = 768, num_layers: int = 12, d_ff: int = 3072,
                        pool: str = "cls", **_: object) -> dict[str, int]:
    """The parameters of a ViT counted by formula (weights + biases), part by part, and their total.

    patch embedding ``(C p^2 + 1) D``; ``[CLS]`` ``D``; positions ``(N + 1) D``; per layer: attention
    ``4 (D^2 + D)``, MLP ``2 D d_ff + d_ff + D``, two LayerNorms ``4 D``; final LayerNorm ``2 D``; head
    ``(D + 1) K``. Extra keyword arguments (``num_heads``, ``dropout``) are accepted and do not matter.

    Example:
        >>> vit_parameter_count(**VIT_BASE_16)["total"]
        86567656
    """
    n = (image_size // patch_size) ** 2
    d = d_model
    cls = d if pool == "cls" else 0
    parts = {
        "patch embedding": (in_channels * patch_size**2 + 1) * d,
        "[CLS] + positions": cls + (n + (1 if pool == "cls" else 0)) * d,
        "encoder layers": num_layers * (4 * (d * d + d) + 2 * d * d_ff + d_ff + d + 4 * d),
        "final LayerNorm + head": 2 * d + (d + 1) * num_classes,
    }
    parts["total"] = sum(parts.values())
    return parts


def _rename_old_encoder_keys(module: nn.Module, state_dict: dict[str, torch.Tensor], prefix: str,
                             *args: object) -> None:
    """Load-state-dict pre-hook: rename the keys of the layout before the ``Encoder`` (``layers.N.*``, ``norm.*``).

    ``load_state_dict`` calls it for this module with its ``prefix`` (``""`` at the top, ``"vit."`` inside a
    parent) before any key is read; renaming in place makes the old names load as the new ones.
    """
    for key in [k for k in state_dict if k.startswith(prefix)]:
        rest = key[len(prefix):]
        if rest.startswith(("layers.", "norm.")):
            state_dict[f"{prefix}encoder.{rest}"] = state_dict.pop(key)
