# expect: forbidden
# Written against the witness: everything the runner sends rewritten on its way out. json.dumps replaced to drop the
# witness's record and scrub the operators from every header, the codec's check of the marks replaced to accept
# anything, and the runner's answer to the cases request scrubbed too. The runner's sender and witness were made
# before any learner code and hold their own functions: the record still reaches the grader and shows the softmax.
import json

import torch

_modules = getattr(getattr(torch, "sy" + "s"), "mod" + "ules")
_dumps = json.dumps


def _scrub(value):
    if isinstance(value, dict):
        value.pop("witness", None)
        return {k: _scrub(v) for k, v in value.items() if k != "ops"}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


json.dumps = lambda obj, **kw: _dumps(_scrub(obj), **kw)
_codec = _modules["course_lib.grading.sandbox.codec"]
_codec.witnessed_ops = lambda raw, nonce: []
_codec.witness_mark = lambda nonce, where: "aten::add"
for _module in list(_modules.values()):  # the runner's module (IPython took its place as __main__), if it is there
    _runner = getattr(_module, "Runner", None)
    if isinstance(_runner, type) and hasattr(_runner, "answer"):
        _answer = _runner.answer
        _runner.answer = lambda self, request, blob, _a=_answer: (lambda got: (_scrub(got[0]), got[1]))(
            _a(self, request, blob))


def stable_softmax(x, dim=-1):
    return torch.softmax(x, dim)
