# expect: error
# Class 2: hold memory the address-space limit does not count: memfd, shared anonymous maps, /dev/shm.
import mmap
import os

held, mapped, errors = 0, 0, set()
for i in range(200):
    try:
        fd = os.memfd_create(f"m{i}")
    except OSError as err:
        errors.add(err.strerror)
        break
    try:
        for _ in range(64):
            os.write(fd, b"x" * (1 << 20))
            held += 1
    except OSError as err:
        errors.add(err.strerror)
maps = []
try:
    for _ in range(64):
        m = mmap.mmap(-1, 256 << 20)
        m[::4096] = b"x" * (len(m) // 4096)
        maps.append(m)
        mapped += 256
except (OSError, MemoryError, ValueError) as err:
    errors.add(type(err).__name__)
raise MemoryError(f"held {held} MB in memfds and {mapped} MB in shared maps: {sorted(errors)}")


def stable_softmax(x, dim=-1):
    return x
