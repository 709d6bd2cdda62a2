# expect: forbidden
# Checks in reach: hand PyTorch's softmax to a thread started and joined inside the call, so that no other
# thread is alive when the call starts or ends, and the record (which follows one thread) never sees the
# operator; autograd follows the thread, so the gradients are right. Starting the thread is itself recorded.
import threading

import torch


def stable_softmax(x, dim=-1):
    out = []
    worker = threading.Thread(target=lambda: out.append(torch.softmax(x, dim)))
    worker.start()
    worker.join()
    return out[0]
