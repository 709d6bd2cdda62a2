# expect: fail
# Class 2: under --jobs 2, find the neighbour's work folder and rename its files (its grade must not change).
import glob
import os

for pattern in ("/tmp/course-grade-*/**", "{OUT}/../**", "/proc/*/cwd/*", "/proc/*/root/tmp/*"):
    for path in glob.glob(pattern, recursive=True):
        try:
            os.rename(path, path + ".moved")
        except OSError:
            pass


def stable_softmax(x, dim=-1):
    return x
