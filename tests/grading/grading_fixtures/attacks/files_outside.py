# expect: error
# Class 2: write, rename, create, read and list outside the work folder (the repository, --out, /tmp of the
# host). The repository's own files are the secret; its folder itself may exist in the sandbox when the
# Python environment lives inside it (the README's `make lab` makes `.venv` there), and then holds only that.
import os


def list_repository():
    """Succeeds ("done") only if the repository folder shows anything beyond the Python environment."""
    extra = sorted(set(os.listdir("{REPO}")) - {".venv"})
    if not extra:
        raise LookupError("only the Python environment")
    return extra


done = []
for action in (lambda: open("{CANARY}.w", "w").write("x"), lambda: os.rename("{REPO}/README.md", "{CANARY}.r"),
               lambda: os.mkdir("{CANARY}.d"), lambda: os.listdir("{OUT}"), lambda: open("{REPO}/README.md").read(),
               lambda: os.listdir("{REPO}/course_lib"), list_repository,
               lambda: open("/x", "w"), lambda: open("/dev/shm/big", "wb").write(b"x" * (8 << 20))):
    try:
        action()
        done.append("done")
    except Exception as err:
        done.append(type(err).__name__)
raise RuntimeError(" ".join(done))


def stable_softmax(x, dim=-1):
    return x
