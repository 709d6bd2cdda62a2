# expect: forbidden
# Shortcut: PyTorch's softmax captured under another name before any tripwire, reached through the private
# kernel and through log_softmax. What ran is PyTorch's softmax operator, whatever name reached it.
import torch

_kernels = [torch.softmax, torch._softmax, torch.log_softmax]


def stable_softmax(x, dim=-1):
    return _kernels[2](x, dim).exp()
