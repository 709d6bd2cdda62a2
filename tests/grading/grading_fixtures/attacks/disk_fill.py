# expect: error
# Class 2: fill the disk with many files (each under the per-file limit).

written = 0
try:
    for i in range(10_000):
        with open(f"fill{i}", "wb") as f:
            f.write(b"x" * (4 << 20))
        written += 4
except OSError as err:
    raise OSError(f"wrote {written} MB: {err.strerror}") from None


def stable_softmax(x, dim=-1):
    return x
