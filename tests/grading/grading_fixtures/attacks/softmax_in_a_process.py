# expect: forbidden
# Written against the witness: PyTorch's softmax computed by a process forked when the cell ran (before any call),
# fed through pipes. No thread is alive and nothing is started during the call, and the witness (a profiler session
# of the runner's process) never sees the child's operators. The backward is written out by hand from the output.
import os
import pickle

import torch

_child_reads, _parent_writes = os.pipe()
_parent_reads, _child_writes = os.pipe()
if os.fork() == 0:  # the child: serve softmax requests until the parent goes away
    with os.fdopen(_child_reads, "rb") as requests, os.fdopen(_child_writes, "wb") as answers:
        while True:
            try:
                x, dim = pickle.load(requests)
            except EOFError:
                os._exit(0)
            pickle.dump(torch.softmax(x, dim), answers)
            answers.flush()
_requests, _answers = os.fdopen(_parent_writes, "wb"), os.fdopen(_parent_reads, "rb")


class _Elsewhere(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        pickle.dump((x.detach(), dim), _requests)
        _requests.flush()
        y = pickle.load(_answers)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(dim=ctx.dim, keepdim=True)), None


def stable_softmax(x, dim=-1):
    return _Elsewhere.apply(x, dim)
