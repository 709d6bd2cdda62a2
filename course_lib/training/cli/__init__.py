"""Train the course's models from the command line: ``course-train translate|vit|lm|bert|llama``.

The notebooks' models with the notebooks' configurations, through ``course_lib`` (the same ``Transformer``,
``VisionTransformer``, loss, schedule and training engine, :func:`course_lib.training.engine.train`), on one
process or many::

    course-train vit --steps 2500 --out runs/vit                       # one process
    torchrun --nproc_per_node 2 -m course_lib.training.cli vit --out runs/vit2   # two processes (DDP)
    course-train vit --out runs/vit --resume                           # continue after a crash
    course-train vit --quick --out runs/try                            # seconds: a tiny model, 30 steps

Pieces, each a small module:

- :mod:`course_lib.training.cli.checkpoint`: atomic checkpoints with a checksum, RNG states, the newest
  readable one found on resume.
- :mod:`course_lib.training.cli.config`: the configuration (defaults, a JSON or TOML file, the command line)
  and :class:`ConfigError`, the one-line error of a mistake the user can fix.
- :mod:`course_lib.training.cli.data`: :class:`ShardedBatches`, a resumable stream of batches sharded across
  processes by ``DistributedSampler``.
- :mod:`course_lib.training.cli.distributed`: process group and device from ``torchrun``'s environment.
- :mod:`course_lib.training.cli.tasks`: what to train (``translate``, ``vit``, ``lm``, ``bert``, ``llama``); register
  a new task in ``TASKS``.
- :mod:`course_lib.training.cli.cli`: the command line.

See docs/scaling.md ("when one laptop is not enough").
"""

from course_lib.training.cli.checkpoint import (
    CorruptCheckpointError,
    latest_checkpoint,
    load_checkpoint,
    restore_rng_state,
    rng_state,
    save_checkpoint,
)
from course_lib.training.cli.config import ConfigError
from course_lib.training.cli.data import ShardedBatches
from course_lib.training.cli.distributed import DistributedContext, init_distributed

__all__ = [
    "CorruptCheckpointError", "save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state",
    "restore_rng_state", "ShardedBatches", "DistributedContext", "init_distributed", "ConfigError",
]
