# expect: fail,forbidden
# Class 2: a detached process outlives the grader, rewrites grades.csv and copies a neighbour's notebook.
import os
import subprocess
import time

subprocess.Popen(["sh", "-c", "sleep 3; echo hacked > {OUT}/grades.csv; echo hacked > {OUT}/summary.csv; "
                  "cp {OUT}/../*.ipynb /tmp/; touch {CANARY}.sh"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        try:
            with open("{CANARY}.fork", "w") as f:
                f.write("outlived")
        finally:
            os._exit(0)
    os._exit(0)


def stable_softmax(x, dim=-1):
    return x
