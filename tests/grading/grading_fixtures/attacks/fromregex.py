# expect: fail,error
# Class 2: read files without open(): np.fromregex, np.loadtxt, torch.load of the repository's reference.
import numpy as np

lines = np.fromregex("{REPO}/course_lib/models/softmax.py", r"(.*)\n", [("line", "U200")])
SOURCE = "\n".join(str(s) for s in lines["line"])


def stable_softmax(x, dim=-1):
    namespace = {}
    exec(SOURCE, namespace)
    return namespace["stable_softmax"](x, dim)
