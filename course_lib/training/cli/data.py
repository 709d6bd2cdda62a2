"""A resumable stream of batches, sharded across processes by PyTorch's ``DistributedSampler``.

Process ``rank`` of ``world_size`` takes every ``world_size``-th example of each epoch's shuffled order
(``DistributedSampler``, the same permutation on every process for one seed and epoch) and cuts its share
into batches of ``batch_size``. The union of the N processes' k-th batches is then exactly the k-th batch of
one process with batch ``N * batch_size``: the same examples, so the same computation. Incomplete batches at
the end of an epoch are dropped (each process has the same number of batches). With gradient accumulation
(``accumulate`` = k batches a step), an epoch holds a whole number of steps: k consecutive batches are then
exactly one batch of ``k * batch_size`` cut in k.

The stream remembers its position (epoch, batches taken in the epoch); :meth:`ShardedBatches.state_dict`
and :meth:`~ShardedBatches.load_state_dict` let a resumed run continue with the very next batch. Batches
are built in this process (no worker processes, no ``DataLoader``) so that no random number is drawn out
of place: a resumed run draws exactly what the uninterrupted one draws.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch.utils.data import Dataset, DistributedSampler

__all__ = ["ShardedBatches"]


class ShardedBatches:
    """Endless, resumable batches of ``dataset`` for process ``rank`` of ``world_size``.

    Args:
        dataset: indexable examples (``len`` and ``[i]``).
        batch_size: examples per batch *per process* (the global batch is ``world_size * batch_size``).
        collate_fn: a list of examples -> a batch.
        seed: the seed of the shuffle (the same on every process).
        rank, world_size: this process and the number of processes (``torch.distributed``'s).
        shuffle: a new permutation every epoch (False: the dataset's order).
        accumulate: batches per optimizer step (gradient accumulation); an epoch ends on a whole step.

    Example:
        >>> stream = ShardedBatches(list(range(10)), batch_size=2, collate_fn=list, seed=0, shuffle=False)
        >>> it = iter(stream); next(it), next(it), stream.state_dict()
        ([0, 1], [2, 3], {'epoch': 0, 'position': 2})
    """

    def __init__(self, dataset: Dataset | Sequence, batch_size: int, collate_fn: Callable[[list], Any],
                 seed: int = 0, rank: int = 0, world_size: int = 1, shuffle: bool = True, accumulate: int = 1
                 ) -> None:
        if batch_size < 1 or accumulate < 1:
            raise ValueError(f"ShardedBatches: batch_size and accumulate must be >= 1, got {batch_size} and "
                             f"{accumulate}")
        self.dataset, self.batch_size, self.collate_fn = dataset, batch_size, collate_fn
        self.accumulate = accumulate
        self.sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                          drop_last=True)
        if len(self.sampler) < batch_size * accumulate:
            raise ValueError(f"ShardedBatches: {len(dataset)} examples over {world_size} process(es) give "
                             f"{len(self.sampler)} per process, fewer than one step of {accumulate} batch(es) "
                             f"of {batch_size}")
        self.epoch, self.position = 0, 0

    @property
    def batches_per_epoch(self) -> int:
        """Full batches per epoch and process (a multiple of ``accumulate``: an epoch ends on a whole step)."""
        return len(self.sampler) // (self.batch_size * self.accumulate) * self.accumulate

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """The index lists of this process's batches in ``epoch``."""
        self.sampler.set_epoch(epoch)
        indices = list(self.sampler)
        return [indices[i:i + self.batch_size] for i in range(0, self.batches_per_epoch * self.batch_size,
                                                              self.batch_size)]

    def __iter__(self) -> Iterator[Any]:
        while True:
            batches = self.epoch_batches(self.epoch)
            while self.position < len(batches):
                index = batches[self.position]
                self.position += 1  # counted when handed out: a checkpoint after the step resumes after it
                yield self.collate_fn([self.dataset[i] for i in index])
            self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        """Where the stream is: ``{"epoch": e, "position": batches already taken in epoch e}``."""
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a position :meth:`state_dict` returned."""
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
