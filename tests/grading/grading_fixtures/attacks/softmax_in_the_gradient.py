# expect: forbidden
# Written against the witness: the forward pass written out by hand (the call's record is clean), PyTorch's softmax
# run only by a custom autograd Function's backward, when the grader's observation asks for the gradient. The
# witness covers the observation of the result, the gradient included.
import torch


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        e = torch.exp(x - x.amax(dim=dim, keepdim=True))
        ctx.save_for_backward(x)
        ctx.dim = dim
        return e / e.sum(dim=dim, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        y = torch.softmax(x, ctx.dim)
        return y * (grad - (grad * y).sum(dim=ctx.dim, keepdim=True)), None


def stable_softmax(x, dim=-1):
    return _Softmax.apply(x, dim)
