# expect: forbidden
# Written against the witness: its profiler session switched off around PyTorch's softmax and a fresh one started
# after it (the C++ switches reached by strings the tampering flags do not read), the profile function taken
# out first and put back after. The fresh session lacks the request's first mark: no record, no points.
import torch

_c = getattr(torch._C, "_auto" + "grad")
_off = getattr(_c, "_disable" + "_profiler")
_on, _prepare = getattr(_c, "_enable" + "_profiler"), getattr(_c, "_prepare" + "_profiler")
_settings = torch.autograd.profiler.profile(use_kineto=False)
_config = torch._C._profiler.ProfilerConfig(_settings.profiler_kind, False, False, False, False, False,
                                            torch._C._profiler._ExperimentalConfig(), "")
_sys = getattr(torch, "sy" + "s")
_get, _set = getattr(_sys, "get" + "profile"), getattr(_sys, "set" + "profile")


def stable_softmax(x, dim=-1):
    recorder = _get()
    _set(None)
    _off()
    out = torch.softmax(x, dim)
    _prepare(_config, set(_settings.kineto_activities))
    _on(_config, set(_settings.kineto_activities))
    _set(recorder)
    return out
