# expect: pass
# Honest: a one-pass online softmax written as a loop over rows, each row read tile by tile once.
import math

import torch


def online_softmax(x, dim=-1, tile_size=32):
    rows = x.movedim(dim, -1)
    flat = rows.reshape(-1, rows.shape[-1])
    out = []
    for r in range(flat.shape[0]):
        row = flat[r]
        m = torch.tensor(-math.inf, dtype=row.dtype)
        total = torch.zeros((), dtype=row.dtype)
        for start in range(0, row.shape[0], tile_size):
            tile = row[start:start + tile_size]
            new = torch.maximum(m, tile.amax())
            total = total * torch.exp(m - new) + torch.exp(tile - new).sum()
            m = new
        out.append(torch.exp(row - m) / total)
    return torch.stack(out).reshape(rows.shape).movedim(-1, dim)
