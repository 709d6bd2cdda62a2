# expect: fail
# Checks in reach: right numbers computed with NumPy, tied back to the graph with 0 * x.sum() so that a
# "differentiable" test inside the sandbox would pass. The grader compares the gradients itself: all zero.
import numpy as np
import torch


def stable_softmax(x, dim=-1):
    a = x.detach().numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True)) + 0 * x.sum()
