# expect: forbidden
# Work done after the record closes (issue 45): the call returns a Tensor subclass holding the input; its
# __torch_function__ computes PyTorch's softmax only when the grader's observer first touches the result
# (detach, numpy). The grader's witness covers the observation too.
import torch


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def real(value):
            if isinstance(value, Lazy):
                with torch._C.DisableTorchFunctionSubclass():
                    return torch.softmax(value.as_subclass(torch.Tensor), value.softmax_dim)
            return value

        args = tuple(real(a) for a in args)
        kwargs = {k: real(v) for k, v in (kwargs or {}).items()}
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def stable_softmax(x, dim=-1):
    with torch._C.DisableTorchFunctionSubclass():
        out = x.clone().as_subclass(Lazy)
    out.softmax_dim = dim
    return out
