"""Exercises of notebook 08 (the Vision Transformer): cutting images into patches, and the [CLS] token

Declarations, not logic to share: its mistakes are whole wrong answers, as a learner writes them, so
``duplicates`` pairs this module with the other checks modules by shape (:mod:`course_lib.checks` says why).
with position embeddings.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_lib.exercises import Case, Exercise, Mistake, register
from course_lib.exercises.cases import public_and_hidden
from course_lib.models.vit import add_cls_and_positions, patchify

NOTEBOOK = "08_vision_transformer"


# --- patchify -------------------------------------------------------------------------------------

def _patchify_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    cases = [
        Case("a 4x6 grey image holding 0..23 (a 2x3 grid of patches), patch_size=2",
             args=(torch.arange(24.0).reshape(1, 1, 4, 6), 2)),
        Case("two RGB images of 4x6 (a 2x3 grid of patches), patch_size=2",
             args=(torch.randn(2, 3, 4, 6, generator=gen), 2)),
        Case("three digit-sized 8x8 images, patch_size=4", args=(torch.rand(3, 1, 8, 8, generator=gen), 4)),
        Case("patch_size=1: every pixel is a patch", args=(torch.randn(1, 2, 3, 3, generator=gen), 1)),
        Case("patch_size = image size: one patch per image", args=(torch.randn(2, 3, 4, 4, generator=gen), 4)),
    ]
    if hidden:
        for i in range(3):  # random shapes: channels 1..3, patch 1..4, grids up to 4x4 (never square twice)
            channels = int(torch.randint(1, 4, (), generator=gen))
            p = int(torch.randint(1, 5, (), generator=gen))
            gh = int(torch.randint(1, 5, (), generator=gen))
            gw = gh + 1 if i % 2 == 0 else int(torch.randint(1, 5, (), generator=gen))
            batch = int(torch.randint(1, 4, (), generator=gen))
            cases.append(Case(f"random images ({batch}, {channels}, {gh * p}, {gw * p}), patch_size={p}",
                              args=(torch.randn(batch, channels, gh * p, gw * p, generator=gen), p)))
        cases.append(Case("three RGB images of 6x9, patch_size=3",
                          args=(torch.randn(3, 3, 6, 9, generator=gen), 3)))
    return cases


def _grid(images: torch.Tensor, p: int) -> torch.Tensor:
    b, c, h, w = images.shape
    return images.reshape(b, c, h // p, p, w // p, p)  # (b, C, gh, p, gw, p)


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], -1)


def _reshape_only(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    b, c, h, w = images.shape
    return images.reshape(b, (h // patch_size) * (w // patch_size), c * patch_size * patch_size)


def _column_order(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return _flat(_grid(images, patch_size).permute(0, 4, 2, 1, 3, 5))  # (b, gw, gh, C, p, p)


def _pixels_transposed(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return _flat(_grid(images, patch_size).permute(0, 2, 4, 1, 5, 3))  # (b, gh, gw, C, p_w, p_h)


def _channels_last(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return _flat(_grid(images, patch_size).permute(0, 2, 4, 3, 5, 1))  # (b, gh, gw, p, p, C)


def _grid_split_pixel_first(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    b, c, h, w = images.shape
    p = patch_size
    x = images.reshape(b, c, p, h // p, p, w // p)  # (b, C, p, gh, p, gw): every gh-th row, not a block
    return _flat(x.permute(0, 3, 5, 1, 2, 4))  # (b, gh, gw, C, p, p)


def _grid_axes_last(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    b, c, h, w = images.shape
    x = _grid(images, patch_size).permute(0, 1, 3, 5, 2, 4)  # (b, C, p, p, gh, gw): grid axes last
    return x.reshape(b, (h // patch_size) * (w // patch_size), -1)  # (b, N, C*p*p), rows mixed


def _unfold_not_transposed(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return F.unfold(images, kernel_size=patch_size, stride=patch_size)  # (b, C*p*p, N)


def _overlapping(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return F.unfold(images, kernel_size=patch_size, stride=1).transpose(1, 2)  # stride 1: overlapping


def _grid_sides_swapped(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    b, c, h, w = images.shape
    p = patch_size
    x = images.reshape(b, c, w // p, p, h // p, p)  # splits with the width's grid size first
    return _flat(x.permute(0, 2, 4, 1, 3, 5))


def _with_unfold(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    return F.unfold(images, kernel_size=patch_size, stride=patch_size).transpose(1, 2)  # (b, N, C*p*p)


def _with_tensor_unfold(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    p = patch_size
    x = images.unfold(2, p, p).unfold(3, p, p)  # (b, C, gh, gw, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)  # (b, gh*gw, C*p*p)


def _with_loops(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    b, _, h, w = images.shape
    p = patch_size
    patches = []
    for row in range(h // p):
        for col in range(w // p):
            patches.append(images[:, :, row * p:(row + 1) * p, col * p:(col + 1) * p].reshape(b, -1))
    return torch.stack(patches, dim=1)


PATCHIFY = register(Exercise(
    name="patchify",
    notebook=NOTEBOOK,
    points=2,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=patchify,
    summary="cut images (batch, C, H, W) into flattened p x p patches (batch, N, C*p*p) in raster order",
    **public_and_hidden(_patchify_cases),
    mistakes=[
        Mistake("reshape without permute", _reshape_only,
                "a plain reshape cuts the image row by row into runs of C*p*p pixels, which are not squares: "
                "reshape to (batch, C, H/p, p, W/p, p), move the two grid axes to the front with permute, "
                "then flatten."),
        Mistake("patches in column order", _column_order,
                "your patches go down the columns first: the second patch must be the one to the RIGHT of "
                "the first (raster order: row by row of the patch grid, left to right in each row)."),
        Mistake("pixels inside a patch transposed", _pixels_transposed,
                "inside each patch, flatten row by row: pixel (i, j) of a patch goes to position i*p + j, not "
                "j*p + i (check the order of the two p axes in your permute)."),
        Mistake("channels last", _channels_last,
                "flatten each patch channel first, as (C, p, p), the layout of nn.Conv2d's weights; you "
                "flattened it as (p, p, C) (channels last). With one channel both agree, so the RGB case "
                "shows it."),
        Mistake("reshape splits each side as (p, H/p)", _grid_split_pixel_first,
                "your reshape splits the height as (p, H/p): that picks every (H/p)-th row, not a block of p "
                "neighbouring rows. Split each side with the grid axis first, (batch, C, H/p, p, W/p, p), then "
                "permute the two grid axes to the front: (batch, H/p, W/p, C, p, p)."),
        Mistake("grid axes moved last before the reshape", _grid_axes_last,
                "after splitting each side as (grid, p), move the two grid axes (H/p, W/p) to the FRONT, so that "
                "each patch's C*p*p pixels are contiguous; with the grid axes last, the final reshape mixes pixels "
                "of different patches.",
                detail="reshape(batch, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)."),
        Mistake("F.unfold without the transpose", _unfold_not_transposed,
                "one row per patch: F.unfold returns (batch, C*p*p, num_patches), so swap its last two axes.",
                detail="F.unfold(...).transpose(1, 2)."),
        Mistake("overlapping patches", _overlapping,
                "patches do not overlap: step by the patch size (stride = patch_size), not by one pixel."),
        Mistake("height and width grids swapped", _grid_sides_swapped,
                "split the height into H/p rows of patches and the width into W/p columns: you used W/p for the "
                "height (this only shows when the image is not square).",
                detail="reshape(batch, C, H // p, p, W // p, p)."),
    ],
    also_correct=[_with_unfold, _with_tensor_unfold, _with_loops],
))


# --- add_cls_and_positions ------------------------------------------------------------------------

def _cls_cases(gen: torch.Generator, hidden: bool) -> list[Case]:
    def case(label: str, batch: int, num_patches: int, d_model: int) -> Case:
        return Case(label, args=(torch.randn(batch, num_patches, d_model, generator=gen),
                                 torch.randn(1, 1, d_model, generator=gen),
                                 torch.randn(1, num_patches + 1, d_model, generator=gen)))

    cases = [
        case("a batch of 2, 4 patches, d_model=3", 2, 4, 3),
        case("one image of 16 patches, d_model=8", 1, 16, 8),
        case("a batch of 3, a single patch, d_model=4", 3, 1, 4),
    ]
    if hidden:
        for _ in range(3):
            batch = int(torch.randint(1, 5, (), generator=gen))
            n = int(torch.randint(2, 20, (), generator=gen))
            d = int(torch.randint(2, 17, (), generator=gen))
            cases.append(case(f"random: batch {batch}, {n} patches, d_model={d}", batch, n, d))
    return cases


def _missing_cls(patch_tokens: torch.Tensor, cls_token: torch.Tensor, pos_embedding: torch.Tensor) -> torch.Tensor:
    return patch_tokens + pos_embedding[:, 1:]


def _cls_last(patch_tokens: torch.Tensor, cls_token: torch.Tensor, pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.expand(patch_tokens.shape[0], -1, -1)
    return torch.cat([patch_tokens, cls], dim=1) + pos_embedding


def _positions_on_patches_only(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                               pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.expand(patch_tokens.shape[0], -1, -1)
    return torch.cat([cls, patch_tokens + pos_embedding[:, 1:]], dim=1)


def _cls_replaces_first_patch(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                              pos_embedding: torch.Tensor) -> torch.Tensor:
    tokens = patch_tokens.clone()
    tokens[:, 0] = cls_token[:, 0]
    return tokens + pos_embedding[:, :-1]


def _cls_added_to_patches(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                          pos_embedding: torch.Tensor) -> torch.Tensor:
    return patch_tokens + cls_token + pos_embedding[:, 1:]


def _positions_multiplied(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                          pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.expand(patch_tokens.shape[0], -1, -1)
    return torch.cat([cls, patch_tokens], dim=1) * pos_embedding


def _first_position_only(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                         pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.expand(patch_tokens.shape[0], -1, -1)
    return torch.cat([cls, patch_tokens], dim=1) + pos_embedding[:, :1]


def _positions_left_out(patch_tokens: torch.Tensor, cls_token: torch.Tensor,
                        pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.expand(patch_tokens.shape[0], -1, -1)
    return torch.cat([cls, patch_tokens], dim=1)  # no position information at all


def _with_repeat(patch_tokens: torch.Tensor, cls_token: torch.Tensor, pos_embedding: torch.Tensor) -> torch.Tensor:
    cls = cls_token.repeat(patch_tokens.shape[0], 1, 1)
    return torch.cat((cls, patch_tokens), 1) + pos_embedding


def _filled_in(patch_tokens: torch.Tensor, cls_token: torch.Tensor, pos_embedding: torch.Tensor) -> torch.Tensor:
    batch, n, d = patch_tokens.shape
    out = patch_tokens.new_empty(batch, n + 1, d)
    out[:, 0] = cls_token[0, 0] + pos_embedding[0, 0]
    out[:, 1:] = patch_tokens + pos_embedding[:, 1:]
    return out


CLS_AND_POSITIONS = register(Exercise(
    name="add_cls_and_positions",
    notebook=NOTEBOOK,
    points=1,
    differentiable=True,  # trained through in the notebooks: gradients must flow
    reference=add_cls_and_positions,
    summary="prepend the learned [CLS] token to every sequence and add the learned position embeddings",
    **public_and_hidden(_cls_cases),
    mistakes=[
        Mistake("missing [CLS]", _missing_cls,
                "prepend the [CLS] token: the output has N + 1 tokens per image, [CLS] first, then the N "
                "patches."),
        Mistake("[CLS] appended at the end", _cls_last,
                "[CLS] goes first, at position 0 (the classifier reads output 0), before the patches.",
                detail="torch.cat([cls, patches], dim=1)."),
        Mistake("positions added to the patches only", _positions_on_patches_only,
                "add the position embeddings to every token, [CLS] included: all N + 1 rows of "
                "pos_embedding are used, row 0 for [CLS]."),
        Mistake("[CLS] overwrites the first patch", _cls_replaces_first_patch,
                "[CLS] is an extra token: keep all N patches and put one more token in front of them."),
        Mistake("[CLS] added to every patch", _cls_added_to_patches,
                "concatenate [CLS] as a separate token along the sequence axis (dim=1); do not add it to the "
                "patches."),
        Mistake("position embeddings left out", _positions_left_out,
                "add the position embeddings after prepending [CLS]: tokens + pos_embedding. Without them "
                "self-attention cannot tell where a patch is: shuffling the patches would only shuffle the "
                "outputs."),
        Mistake("positions multiplied", _positions_multiplied,
                "position embeddings are added to the tokens, not multiplied."),
        Mistake("only the first position row added", _first_position_only,
                "add the whole position embedding (1, N + 1, d_model), one row per position; you added row 0 to "
                "every token.",
                detail="tokens + pos_embedding, not pos_embedding[:, :1]."),
    ],
    also_correct=[_with_repeat, _filled_in],
))
