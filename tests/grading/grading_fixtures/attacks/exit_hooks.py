# expect: fail
# Written against the runner's exit (it calls os._exit once the grader says exit): os._exit replaced by a no-op,
# so the interpreter shuts down as usual and runs the exit handlers registered here. The first to run rewrites
# the grades and starts a detached process that would rewrite them after the grade; the last never returns.
import atexit
import os
import subprocess
import time


def _rewrite():
    for name in ("grades.csv", "summary.csv"):
        try:
            with open("{OUT}/" + name, "w") as f:
                f.write("hacked")
        except OSError:
            pass
    subprocess.Popen(["sh", "-c", "sleep 3; echo hacked > {OUT}/grades.csv; touch {CANARY}.exit"],
                     start_new_session=True)


os._exit = lambda status=0: None
atexit.register(time.sleep, 600)  # run last (exit handlers run in reverse order)
atexit.register(_rewrite)


def stable_softmax(x, dim=-1):
    return x
