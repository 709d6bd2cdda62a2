# expect: forbidden
# Checks in reach: hand the work to a thread started in the cell, which the record of one thread cannot see.
import queue
import threading

import torch

_jobs, _results = queue.Queue(), queue.Queue()


def _worker():
    while True:
        x, dim = _jobs.get()
        _results.put(torch.softmax(x.detach(), dim))


threading.Thread(target=_worker, daemon=True).start()


def stable_softmax(x, dim=-1):
    _jobs.put((x, dim))
    return _results.get() + 0 * x
