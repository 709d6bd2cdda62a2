# expect: fail
# The access record's tags cleared before a two-pass softmax: nothing is recorded after that.
import torch


def online_softmax(x, dim=-1, tile_size=32):
    torch.sys.modules["course_lib.exercises.passes"]._TAGS.clear()
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)
