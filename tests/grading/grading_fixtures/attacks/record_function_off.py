# expect: error,forbidden
# Written against the witness: its profiler session left on and both marks in place, but PyTorch's RecordFunction
# switched off (reached by strings the tampering flags do not read) around the private softmax kernel, which no
# watched name reaches, and back on before the call returns. The backward is written out by hand, so the
# observation of the gradient runs no softmax operator either.
import torch

_switch = getattr(getattr(torch._C, "_auto" + "grad"), "_enable_record" + "_function")
_kernel = getattr(getattr(torch.ops, "at" + "en"), "_soft" + "max")


class _Hidden(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        _switch(False)
        try:
            y = _kernel(x, dim, False)
        finally:
            _switch(True)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(dim=ctx.dim, keepdim=True)), None


def stable_softmax(x, dim=-1):
    return _Hidden.apply(x, dim)
