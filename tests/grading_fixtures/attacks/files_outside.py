# expect: error
# Class 2: write, rename, create and list outside the work folder (the repository, --out, /tmp of the host).
import os

done = []
for action in (lambda: open("{CANARY}.w", "w").write("x"), lambda: os.rename("{REPO}/README.md", "{CANARY}.r"),
               lambda: os.mkdir("{CANARY}.d"), lambda: os.listdir("{OUT}"), lambda: os.listdir("{REPO}"),
               lambda: open("/x", "w"), lambda: open("/dev/shm/big", "wb").write(b"x" * (8 << 20))):
    try:
        action()
        done.append("done")
    except Exception as err:
        done.append(type(err).__name__)
raise RuntimeError(" ".join(done))


def stable_softmax(x, dim=-1):
    return x
