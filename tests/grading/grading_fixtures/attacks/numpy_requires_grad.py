# expect: fail
# Class 5 (the other way): right numbers computed off the autograd graph, then .requires_grad_().
import numpy as np
import torch


def stable_softmax(x, dim=-1):
    a = x.detach().numpy()
    e = np.exp(a - a.max(axis=dim, keepdims=True))
    return torch.from_numpy(e / e.sum(axis=dim, keepdims=True)).requires_grad_()
