# expect: fail,error,forbidden
# Class 1: reach the reference through modules hanging off allowed ones, builtins, stack frames and a fresh
# copy of course_lib loaded from its file.
import importlib.util
import sys
import typing

import torch
from torch import __builtins__ as b  # noqa: F401

candidates = [typing.sys.modules.get("course_lib.models.softmax"), torch.sys.modules.get("course_lib.models.softmax")]
for path in (torch.os.path.join("{REPO}", "course_lib", "basics.py"), sys.modules["course_lib"].__file__):
    try:
        spec = importlib.util.spec_from_file_location("fresh_basics", path.replace("__init__", "basics"))
        fresh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fresh)
        candidates.append(fresh)
    except Exception:
        pass
frame = sys._getframe()
while frame is not None:
    candidates.append(type("F", (), {"stable_softmax": frame.f_globals.get("stable_softmax")}))
    frame = frame.f_back
REFERENCES = [c.stable_softmax for c in candidates if c is not None and getattr(c, "stable_softmax", None)]


def stable_softmax(x, dim=-1):
    for ref in REFERENCES:
        if ref is not stable_softmax:
            try:
                return ref(x, dim)
            except Exception:
                continue
    return x
