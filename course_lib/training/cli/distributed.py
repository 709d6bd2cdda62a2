"""One process or many: the process group and the device from ``torchrun``'s environment.

``torchrun`` starts N copies of the same command and tells each its ``RANK``, ``LOCAL_RANK`` and
``WORLD_SIZE`` (and where to meet: ``MASTER_ADDR``/``MASTER_PORT``). :func:`init_distributed` reads them,
picks the device the way every notebook does (:func:`course_lib.runtime.get_device`: CUDA, then MPS, then
CPU; ``COURSE_DEVICE`` overrides), one GPU per process (``cuda:LOCAL_RANK``), and joins the group with
NCCL on CUDA and gloo otherwise. Started without ``torchrun``, it is one process and no group at all.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch

from course_lib.runtime import get_device

__all__ = ["DistributedContext", "init_distributed"]


@dataclass(frozen=True)
class DistributedContext:
    """This process's place: ``rank`` of ``world_size`` (``local_rank`` on its machine) and its ``device``."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """True on the process that writes files and shows progress (rank 0)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when several processes train together."""
        return self.world_size > 1

    def close(self) -> None:
        """Leave the process group (when there is one), after what still refers to it is collected.

        Teardown in order: a ``DistributedDataParallel`` model's reducer holds the group, and a gloo group
        destroyed under it can hang in its destructor when the reducer goes later (the hang of issue 47). The
        caller drops its model first; this collects the garbage, then destroys the group."""
        if self.distributed and torch.distributed.is_initialized():
            gc.collect()
            torch.distributed.destroy_process_group()


def init_distributed(prefer_device: str | None = None) -> DistributedContext:
    """Join the process group that ``torchrun`` set up (if any) and choose this process's device."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    device = get_device(prefer_device)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank if world_size > 1 else (device.index or 0))
        torch.cuda.set_device(device)
    if world_size > 1:
        if device.type == "mps":
            raise RuntimeError("init_distributed: several processes on Apple MPS are not supported by "
                               "torch.distributed; use COURSE_DEVICE=cpu")
        backend = "nccl" if device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistributedContext(rank, world_size, local_rank, device)
