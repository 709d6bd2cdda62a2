# expect: error
# Class 2: fill the machine's process table (RLIMIT_NPROC does not hold for a grader run as root; the
# sandbox's control group does). Bounded, so that a grader without either limit is not brought down by
# its own test: at most 3000 children, each asleep until the sandbox ends and takes it along.
import os
import time

started = 0
try:
    for _ in range(3000):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        started += 1
except OSError as err:
    raise RuntimeError(f"forked {started} children, then {err.strerror}") from None
raise RuntimeError(f"forked {started} children, then no limit")


def stable_softmax(x, dim=-1):
    return x
