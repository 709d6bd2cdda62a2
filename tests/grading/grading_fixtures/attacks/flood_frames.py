# expect: timeout,error
# Protocol: a thread keeps sending frames ("cell" events, guessed answers) while the cell runs past the per-cell
# limit. The grader's clock is its own and only an answer carrying the request's random id counts: timeout.
import json
import os
import struct
import threading
import time


def _frame(header):
    data = json.dumps(header).encode()
    payload = struct.pack(">I", len(data)) + data
    return struct.pack(">Q", len(payload)) + payload


def _flood():
    fd = int(os.environ.get("COURSE_GRADE_CHANNEL", "3"))
    n = 0
    while True:
        n += 1
        for header in ({"event": "cell", "exercise": 0}, {"id": n, "exercise": 0, "ran": True},
                       {"event": "ready"}, {"id": str(n), "exercise": 0, "cases": []}):
            try:
                os.write(fd, _frame(header))
            except OSError:
                return
        time.sleep(0.02)


threading.Thread(target=_flood, daemon=True).start()
time.sleep(40)


def stable_softmax(x, dim=-1):
    e = (x - x.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)
