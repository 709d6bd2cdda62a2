# expect: error
# Class 3: send the grader a deflate bomb as the output .npz (a 512 MB array in a small archive), ahead of
# the runner, on the runner's own pipe.
import io
import json
import os
import struct
import zipfile

import numpy as np

header = io.BytesIO()
np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (1 << 26,)})
archive = io.BytesIO()
with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as z:
    with z.open("a0.npy", "w", force_zip64=True) as f:
        f.write(header.getvalue())
        for _ in range(8):
            f.write(bytes(16 << 20))
cases = [{"status": "ok", "output": {"t": "ndarray", "key": "a0"}}] * 7
head = json.dumps({"event": "result", "exercise": 0, "cases": cases}).encode()
payload = struct.pack(">I", len(head)) + head + archive.getvalue()
channel = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))
os.write(channel, struct.pack(">Q", len(payload)))
view = memoryview(payload)
while view:
    view = view[os.write(channel, view):]


def stable_softmax(x, dim=-1):
    return x
