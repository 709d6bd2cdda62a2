# expect: forbidden
# The record rewritten (issue 45): the tracer's Trace.as_plain replaced through torch.sys.modules, so that the record
# the sandbox sends shows no operator, then PyTorch's softmax. The grader's witness (a profiler session the runner
# opened before any learner code, marked with the request's id) still shows aten::_softmax.
import torch

_tracing = torch.sys.modules["course_lib.exercises.tracing"]
_plain = _tracing.Trace.as_plain


def _clean(self):
    record = _plain(self)
    record["ops"] = [op for op in record["ops"] if "softmax" not in op]
    record["calls"] = []
    return record


_tracing.Trace.as_plain = _clean


def stable_softmax(x, dim=-1):
    return torch.softmax(x, dim)
