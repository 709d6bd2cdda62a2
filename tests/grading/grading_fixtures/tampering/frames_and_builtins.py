# flag: stack frames
# flag: built-ins rebound or reached (builtins, __builtins__, __import__)
# The caller's frame read and a built-in rebound for the grader's code.
import builtins
import sys

import torch

builtins.sorted = sorted  # a built-in rebound (here to itself)


def stable_softmax(x, dim=-1):
    caller = sys._getframe(1).f_globals
    return torch.softmax(x, dim) if caller is not None else x
