# expect: error
# Class 2: write into the sandbox's course_lib, which every later submission of the same week now shares (one
# library per week and grader process): a poisoned __init__ would end every neighbour's grading.
import os

import course_lib

done = []
folder = os.path.dirname(course_lib.__file__)
for target in (os.path.join(folder, "__init__.py"), os.path.join(folder, "evil.py"),
               os.path.join(os.path.dirname(folder), "evil.py")):
    try:
        with open(target, "w") as f:
            f.write("raise SystemExit('poisoned')\n")
        done.append("done")
    except Exception as err:
        done.append(type(err).__name__)
raise RuntimeError(" ".join(done))


def stable_softmax(x, dim=-1):
    return x
