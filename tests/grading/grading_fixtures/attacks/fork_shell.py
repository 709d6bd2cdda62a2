# expect: fail,error
# Class 2: start a shell (the policy once missed _posixsubprocess) to read the reference and leave a file.
import _posixsubprocess  # noqa: F401 - the low-level way in; subprocess uses it
import subprocess

found = subprocess.run(["sh", "-c",
                        "cat {REPO}/course_lib/models/softmax.py; touch {CANARY}.shell; ls /home /root /etc"],
                       capture_output=True, text=True)
SOURCE = found.stdout


def stable_softmax(x, dim=-1):
    namespace = {}
    exec(SOURCE, namespace)  # the reference, if the shell could read it
    return namespace["stable_softmax"](x, dim)
