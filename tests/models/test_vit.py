"""The Vision Transformer (course_lib.models.vit) and its data (course_lib.data.digits).

References we did not write: ``F.unfold`` and ``nn.Conv2d`` for patches, PyTorch's
``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` for the encoder and its attention weights, the
ViT paper's Table 1 (86M) and the widely published exact count of ViT-B/16 (86,567,656), scikit-learn for
the split.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.data.digits import (
    digits_loaders,
    digits_split,
    load_digits_tensors,
    random_shift,
)
from course_lib.evaluation.metrics import classifier_accuracy
from course_lib.models.baselines import SmallCNN
from course_lib.models.layers import EncoderLayer
from course_lib.models.vit import (
    VIT_BASE_16,
    PatchEmbedding,
    VisionTransformer,
    add_cls_and_positions,
    attention_maps,
    attention_rollout,
    cls_attention_grid,
    count_parameters,
    patchify,
    position_similarity,
    vit_parameter_count,
)
from course_lib.training.image_classifier import train_classifier


def small_vit(**overrides) -> VisionTransformer:
    cfg = dict(image_size=8, patch_size=2, in_channels=1, num_classes=10, d_model=16, num_heads=4,
               num_layers=2, d_ff=32, dropout=0.0, pool="cls")
    cfg.update(overrides)
    torch.manual_seed(0)
    return VisionTransformer(**cfg).eval()


# --- patchify and the patch embedding -------------------------------------------------------------

def test_patchify_worked_example() -> None:
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    expected = torch.tensor([[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15.0]])
    assert torch.equal(patchify(x, 2)[0], expected)


@pytest.mark.parametrize("shape,p", [((2, 3, 4, 6), 2), ((1, 1, 8, 8), 4), ((3, 2, 6, 9), 3), ((1, 3, 5, 5), 1),
                                     ((2, 3, 4, 4), 4)])
def test_patchify_equals_unfold(shape, p) -> None:
    x = torch.randn(*shape)
    expected = F.unfold(x, kernel_size=p, stride=p).transpose(1, 2)  # PyTorch's im2col: (b, N, C*p*p)
    got = patchify(x, p)
    assert got.shape == (shape[0], (shape[2] // p) * (shape[3] // p), shape[1] * p * p)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("shape,p,match", [
    ((2, 1, 9, 8), 2, r"image height 9 \(dim 2 of images of shape \(2, 1, 9, 8\)\) is not divisible by patch_size 2"),
    ((2, 1, 8, 6), 4, r"image width 6 \(dim 3 .*\) is not divisible by patch_size 4"),
    ((1, 8, 8), 2, r"must have shape \(batch, channels, height, width\), got shape \(1, 8, 8\)"),
])
def test_patchify_errors_say_what_is_wrong(shape, p, match) -> None:
    with pytest.raises(ValueError, match=match):
        patchify(torch.zeros(shape), p)


@pytest.mark.parametrize("channels,p", [(1, 2), (3, 4), (2, 1)])
def test_linear_and_conv_patch_embeddings_are_equal_with_the_same_weights(channels, p) -> None:
    torch.manual_seed(0)
    lin, conv = PatchEmbedding(p, channels, 12, "linear"), PatchEmbedding(p, channels, 12, "conv")
    x = torch.randn(3, channels, 4 * p, 2 * p)
    assert not torch.allclose(lin(x), conv(x))  # different random weights: different outputs
    conv.copy_weights_from(lin)
    torch.testing.assert_close(conv(x), lin(x), atol=1e-5, rtol=1e-5)
    lin2 = PatchEmbedding(p, channels, 12, "linear").copy_weights_from(conv)  # and back
    torch.testing.assert_close(lin2(x), conv(x), atol=1e-5, rtol=1e-5)


def test_linear_patch_embedding_equals_a_plain_conv2d() -> None:
    torch.manual_seed(1)
    conv = nn.Conv2d(3, 8, kernel_size=4, stride=4)  # PyTorch's own module
    lin = PatchEmbedding(4, 3, 8, "linear")
    with torch.no_grad():
        lin.proj.weight.copy_(conv.weight.reshape(8, -1))
        lin.proj.bias.copy_(conv.bias)
    x = torch.randn(2, 3, 8, 12)
    expected = conv(x).flatten(2).transpose(1, 2)  # (2, 6, 8)
    torch.testing.assert_close(lin(x), expected, atol=1e-5, rtol=1e-5)


def test_patch_embedding_rejects_wrong_channels_naming_them() -> None:
    emb = PatchEmbedding(2, 1, 8)
    with pytest.raises(ValueError, match=r"images have 3 channels .*expected in_channels=1"):
        emb(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"images have 8 channels"):  # channels last by mistake
        emb(torch.zeros(2, 8, 8, 1))
    with pytest.raises(ValueError, match="mode"):
        PatchEmbedding(2, 1, 8, mode="pixels")


def test_add_cls_and_positions() -> None:
    patches, cls, pos = torch.randn(2, 4, 3), torch.randn(1, 1, 3), torch.randn(1, 5, 3)
    out = add_cls_and_positions(patches, cls, pos)
    assert out.shape == (2, 5, 3)
    torch.testing.assert_close(out[:, 0], (cls + pos[:, :1]).expand(2, 1, 3)[:, 0])
    torch.testing.assert_close(out[:, 1:], patches + pos[:, 1:])
    with pytest.raises(ValueError, match=r"pos_embedding must be \(1, 5, 3\).*got \(1, 4, 3\)"):
        add_cls_and_positions(patches, cls, pos[:, :4])
    with pytest.raises(ValueError, match=r"cls_token must be \(1, 1, 3\)"):
        add_cls_and_positions(patches, cls.expand(2, 1, 3), pos)


# --- the model ------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool,seq", [("cls", 17), ("mean", 16)])
def test_model_shapes(pool, seq) -> None:
    model = small_vit(pool=pool)
    assert model.pos_embedding.shape == (1, seq, 16)
    assert (model.cls_token is None) == (pool == "mean")
    assert model(torch.rand(5, 1, 8, 8)).shape == (5, 10)
    assert model.tokens(torch.rand(5, 1, 8, 8)).shape == (5, seq, 16)


def test_model_equals_pytorch_encoder_with_copied_weights() -> None:
    """Our ViT forward == the same computation with PyTorch's nn.TransformerEncoderLayer and nn.Conv2d."""
    model = small_vit(patch_embedding="conv")
    torch_layers = []
    for ours in model.encoder.layers:
        theirs = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True,
                                            norm_first=True).eval()
        ours.load_from_torch(theirs)
        torch_layers.append(theirs)
    x = torch.rand(3, 1, 8, 8)
    z = model.patch_embed.proj(x).flatten(2).transpose(1, 2)  # nn.Conv2d, raster order
    z = torch.cat([model.cls_token.expand(3, -1, -1), z], dim=1) + model.pos_embedding
    for layer in torch_layers:
        z = layer(z)
    expected = model.head(model.encoder.norm(z)[:, 0])
    torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)


def test_mean_pool_reads_the_mean_of_patch_outputs() -> None:
    model = small_vit(pool="mean")
    x = torch.rand(2, 1, 8, 8)
    z = model.tokens(x)
    for layer in model.encoder.layers:
        z = layer(z)
    torch.testing.assert_close(model(x), model.head(model.encoder.norm(z).mean(dim=1)))


class OldLayoutViT(nn.Module):
    """The ViT as it was before its stack became an ``Encoder``: its own ModuleList and final LayerNorm.

    Written out here (constructor order, initialisation and forward as in the old ``course_lib.models.vit``) so that
    its state dict has the old key names, ``layers.N.*`` and ``norm.*``.
    """

    def __init__(self, d_model: int = 16, num_heads: int = 4, num_layers: int = 2, d_ff: int = 32) -> None:
        super().__init__()
        self.patch_embed = PatchEmbedding(2, 1, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embedding = nn.Parameter(torch.zeros(1, 17, d_model))
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff, 0.0, norm_first=True, activation="gelu")
                                     for _ in range(num_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 10)
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = add_cls_and_positions(self.patch_embed(images), self.cls_token, self.pos_embedding)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


def test_same_seed_gives_the_old_layouts_weights_under_the_new_names() -> None:
    torch.manual_seed(0)
    old = OldLayoutViT().eval()
    new = small_vit()  # seeds 0 too
    old_state, new_state = old.state_dict(), new.state_dict()
    assert any(k.startswith("layers.1.") for k in old_state) and "norm.weight" in old_state
    renamed = {("encoder." + k if k.startswith(("layers.", "norm.")) else k): v for k, v in old_state.items()}
    assert list(renamed) == list(new_state)
    for key, value in renamed.items():
        assert torch.equal(value, new_state[key]), key


def test_old_state_dict_loads_and_gives_identical_numbers() -> None:
    torch.manual_seed(1)
    old = OldLayoutViT().eval()
    new = small_vit()
    new.load_state_dict(old.state_dict())  # strict: every old key lands, none is missing
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(new(x), old(x))  # the same operations in the same order: bit for bit
    h = old.layers[0].norm1(add_cls_and_positions(old.patch_embed(x), old.cls_token, old.pos_embedding))
    assert torch.equal(attention_maps(new, x)[0], old.layers[0].self_attn(h, h, h, need_weights=True)[1])
    parent = nn.Sequential()  # inside a parent module the keys carry its prefix ("0.layers.0...")
    parent.add_module("0", small_vit())
    parent.load_state_dict({f"0.{k}": v for k, v in old.state_dict().items()})
    assert torch.equal(parent[0](x), old(x))
    with pytest.raises(RuntimeError, match="Missing key"):
        new.load_state_dict({k: v for k, v in old.state_dict().items() if not k.startswith("norm.")})


def test_model_errors_name_the_dimension() -> None:
    model = small_vit()
    with pytest.raises(ValueError, match=r"images have 3 channels .*in_channels=1"):
        model(torch.rand(2, 3, 8, 8))
    with pytest.raises(ValueError, match=r"image width 7 .* is not divisible by patch_size 2"):
        model(torch.rand(2, 1, 8, 7))
    with pytest.raises(ValueError, match=r"expected images of size 8x8 .*got 16x16"):
        model(torch.rand(2, 1, 16, 16))
    with pytest.raises(ValueError, match=r"image height 9 .*not divisible by patch_size 2"):
        VisionTransformer(image_size=(9, 8), patch_size=2)
    with pytest.raises(ValueError, match="pool"):
        VisionTransformer(pool="max")
    with pytest.raises(ValueError, match="num_heads"):
        VisionTransformer(d_model=30, num_heads=4)


def test_gradients_reach_cls_token_positions_and_patch_embedding() -> None:
    model = small_vit().train()
    loss = F.cross_entropy(model(torch.rand(4, 1, 8, 8)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    for name in ("cls_token", "pos_embedding", "patch_embed.proj.weight", "head.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_vit_base_16_parameter_count_matches_the_paper() -> None:
    with torch.device("meta"):  # nothing allocated: 86M parameters would be 350 MB
        model = VisionTransformer(**VIT_BASE_16)
    counted = count_parameters(model)
    assert counted == vit_parameter_count(**VIT_BASE_16)["total"] == 86_567_656
    assert int(counted / 1e6) == 86  # the paper's Table 1: "86M" (86.57M, truncated)


# --- attention maps, rollout, position similarity ---------------------------------------------------

def test_attention_maps_equal_pytorch_multihead_attention_weights() -> None:
    model = small_vit()
    x = torch.rand(2, 1, 8, 8)
    maps = attention_maps(model, x)
    assert len(maps) == 2 and all(m.shape == (2, 4, 17, 17) for m in maps)
    for m in maps:
        torch.testing.assert_close(m.sum(-1), torch.ones(2, 4, 17))
    theirs = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True,
                                        norm_first=True).eval()
    layer0 = model.encoder.layers[0]
    with torch.no_grad():
        w = torch.cat([layer0.self_attn.w_q.weight, layer0.self_attn.w_k.weight, layer0.self_attn.w_v.weight])
        b = torch.cat([layer0.self_attn.w_q.bias, layer0.self_attn.w_k.bias, layer0.self_attn.w_v.bias])
        theirs.self_attn.in_proj_weight.copy_(w)
        theirs.self_attn.in_proj_bias.copy_(b)
    h = layer0.norm1(model.tokens(x))
    _, expected = theirs.self_attn(h, h, h, need_weights=True, average_attn_weights=False)
    torch.testing.assert_close(maps[0], expected, atol=1e-5, rtol=1e-5)


def test_attention_maps_restore_training_mode() -> None:
    model = small_vit().train()
    attention_maps(model, torch.rand(1, 1, 8, 8))
    assert model.training


def test_attention_rollout_formula() -> None:
    torch.manual_seed(0)
    maps = [torch.softmax(torch.randn(2, 3, 5, 5), -1) for _ in range(3)]
    eye = torch.eye(5)
    expected = None
    for m in maps:  # the formula written out, layer by layer
        a = 0.5 * m.mean(1) + 0.5 * eye
        a = a / a.sum(-1, keepdim=True)
        expected = a if expected is None else torch.bmm(a, expected)
    torch.testing.assert_close(attention_rollout(maps), expected)
    torch.testing.assert_close(attention_rollout(maps[:1], residual=False), maps[0].mean(1))
    identity = [torch.eye(5).expand(2, 3, 5, 5)] * 4
    torch.testing.assert_close(attention_rollout(identity), torch.eye(5).expand(2, 5, 5))
    with pytest.raises(ValueError, match="empty"):
        attention_rollout([])
    with pytest.raises(ValueError, match=r"maps\[0\] must be \(batch, heads, seq, seq\)"):
        attention_rollout([torch.rand(2, 5, 5)])


def test_cls_attention_grid_is_the_cls_row_in_raster_order() -> None:
    w = torch.rand(2, 17, 17)
    grid = cls_attention_grid(w, (4, 4))
    assert grid.shape == (2, 4, 4)
    assert grid[1, 2, 3] == w[1, 0, 1 + 2 * 4 + 3]
    with pytest.raises(ValueError, match="17"):
        cls_attention_grid(torch.rand(2, 16, 16), (4, 4))


def test_position_similarity() -> None:
    model = small_vit()
    sim = position_similarity(model)
    assert sim.shape == (4, 4, 4, 4)
    flat = sim.reshape(16, 16)
    torch.testing.assert_close(flat.diagonal(), torch.ones(16))
    torch.testing.assert_close(flat, flat.T)
    pos = model.pos_embedding[0, 1:].detach()
    assert math.isclose(float(flat[1, 6]), float(F.cosine_similarity(pos[1], pos[6], dim=0)), abs_tol=1e-6)


def test_small_cnn_shapes() -> None:
    assert SmallCNN()(torch.rand(3, 1, 8, 8)).shape == (3, 10)


# --- the data -------------------------------------------------------------------------------------

def test_digits_are_loaded_without_download() -> None:
    images, labels = load_digits_tensors()
    assert images.shape == (1797, 1, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0 and images.max() == 1 and labels.unique().tolist() == list(range(10))


def test_split_is_fixed_stratified_and_disjoint() -> None:
    a, b = digits_split(), digits_split()
    assert a.sizes == {"train": 1257, "val": 180, "test": 360}
    assert torch.equal(a.test_x, b.test_x) and torch.equal(a.train_y, b.train_y)
    images, labels = load_digits_tensors()
    total = torch.bincount(labels, minlength=10).float()
    for part in ("train", "val", "test"):
        counts = torch.bincount(getattr(a, f"{part}_y"), minlength=10).float()
        expected = total * len(getattr(a, f"{part}_y")) / len(labels)
        assert (counts - expected).abs().max() <= 1.5, part  # stratified: proportions kept

    def rows(x: torch.Tensor, y: torch.Tensor) -> list[tuple]:
        return sorted(tuple(r.tolist()) + (int(c),) for r, c in zip(x.reshape(len(x), -1), y, strict=True))

    parts = rows(torch.cat([a.train_x, a.val_x, a.test_x]), torch.cat([a.train_y, a.val_y, a.test_y]))
    assert parts == rows(images, labels)  # the three parts are a partition of the 1,797 digits
    assert digits_split(seed=1).test_y.tolist() != a.test_y.tolist()
    x, y = a.flat("test")
    assert x.shape == (360, 64) and y.shape == (360,)


def test_random_shift_is_a_translation_with_zero_fill() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.zeros(64, 1, 6, 6)
    x[:, 0, 2:4, 2:4] = torch.rand(64, 2, 2)  # content away from the border
    moved = random_shift(x, 1, generator=gen)
    assert moved.shape == x.shape
    torch.testing.assert_close(moved.sum((1, 2, 3)), x.sum((1, 2, 3)))  # nothing lost
    seen = set()
    for i in range(64):  # each image equals its original rolled by some (dy, dx) in [-1, 1]
        match = [(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
                 if torch.equal(moved[i], torch.roll(x[i], (dy, dx), dims=(1, 2)))]
        assert match, i
        seen.add(match[0])
    assert len(seen) == 9  # all nine shifts occur
    edge = torch.zeros(1, 1, 3, 3)
    edge[0, 0, :, 0] = 1.0
    assert torch.equal(random_shift(edge, 0), edge)
    with pytest.raises(ValueError, match=r"\(batch, channels, height, width\)"):
        random_shift(torch.zeros(3, 3), 1)


def test_loaders_shuffle_and_shift_training_batches_only() -> None:
    split = digits_split()
    train, val, test = digits_loaders(split, batch_size=32, max_shift=1, seed=0)
    images, labels = next(iter(train))
    assert images.shape == (32, 1, 8, 8) and labels.shape == (32,)
    val_images, _ = next(iter(val))
    assert torch.equal(val_images, split.val_x[:len(val_images)])  # neither shuffled nor shifted
    assert sum(len(b[1]) for b in test) == 360


@pytest.mark.slow  # trains a ViT and a CNN (~30 s on 2 busy cores)
def test_training_learns_and_reports() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    split = digits_split()
    before = classifier_accuracy(model, split.val_x, split.val_y)
    hist = train_classifier(model, split, steps=150, lr=1e-2, warmup=10, eval_every=50, max_shift=0,
                            progress=False)  # a linear model cannot undo shifts: none here
    assert len(hist.loss) == 150 and hist.eval_steps == [50, 100, 150] and len(hist.val_acc) == 3
    assert hist.val_acc[-1] > 0.9 > 0.5 > before
    assert hist.epochs == pytest.approx(150 * 64 / 1257)


def test_training_stops_on_a_non_finite_loss() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(1))

        def forward(self, x):
            return torch.full((len(x), 10), float("nan")) + self.w

    with pytest.raises(FloatingPointError, match="loss became nan at step 0"):
        train_classifier(Broken(), digits_split(), steps=5, progress=False)
