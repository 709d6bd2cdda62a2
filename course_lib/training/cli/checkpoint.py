"""Checkpoints that survive a kill: written atomically, checked on reading, the newest good one found.

A checkpoint is one file ``step-000120.pt``: a header line, the SHA-256 of the payload, then the payload
(``torch.save`` of a dict of tensors and plain values, loadable with ``weights_only=True``). It is written to
a temporary file in the same folder, flushed and ``fsync``-ed, then renamed over its final name with
``os.replace`` (atomic on POSIX and Windows) and the folder is ``fsync``-ed: a process killed at any moment
leaves either the old set of checkpoints or the new one, never a half-written file under a checkpoint's
name. A file damaged later (a full disk, a truncated copy) fails its checksum; :func:`latest_checkpoint`
then warns and falls back to the previous one.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import warnings
from pathlib import Path

import numpy as np
import torch

__all__ = ["CorruptCheckpointError", "save_checkpoint", "load_checkpoint", "latest_checkpoint", "rng_state",
           "restore_rng_state", "checkpoint_path"]

MAGIC = b"course_lib checkpoint v1\n"
_NAME = re.compile(r"^step-(\d+)\.pt$")


class CorruptCheckpointError(ValueError):
    """A checkpoint file that is truncated, damaged or not a checkpoint at all."""


def checkpoint_path(folder: str | os.PathLike, step: int) -> Path:
    """The file name of the checkpoint after ``step`` steps: ``folder/step-000120.pt``."""
    return Path(folder) / f"step-{step:06d}.pt"


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":  # Windows cannot open a folder; os.replace is still atomic there
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(state: dict, path: str | os.PathLike) -> Path:
    """Write ``state`` to ``path`` atomically (temporary file, fsync, ``os.replace``) with a SHA-256 checksum."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + digest + b"\n" + payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_folder(path.parent)
    return path


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint written by :func:`save_checkpoint`; a CorruptCheckpointError if it is damaged."""
    data = Path(path).read_bytes()
    header_end = len(MAGIC) + 64
    if not data.startswith(MAGIC) or data[header_end:header_end + 1] != b"\n":
        raise CorruptCheckpointError(f"{path}: not a course_lib checkpoint (bad header, {len(data)} bytes)")
    expected, payload = data[len(MAGIC):header_end].decode("ascii", "replace"), data[header_end + 1:]
    actual = hashlib.sha256(payload).hexdigest()
    if actual != expected:
        raise CorruptCheckpointError(f"{path}: checksum mismatch (truncated or damaged: {len(payload)} bytes "
                                     f"of payload, SHA-256 {actual[:12]}... instead of {expected[:12]}...)")
    try:
        return torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as error:  # a payload that hashes right but does not load: report it the same way
        raise CorruptCheckpointError(f"{path}: torch.load failed: {error}") from error


def list_checkpoints(folder: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, path)`` of every checkpoint file in ``folder``, newest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found, reverse=True)


def latest_checkpoint(folder: str | os.PathLike, map_location: str | torch.device = "cpu"
                      ) -> tuple[Path, dict] | None:
    """The newest checkpoint in ``folder`` that reads back intact, as ``(path, state)``; None if there is none.

    A damaged newer file is skipped with a warning naming it and why.
    """
    for _, path in list_checkpoints(folder):
        try:
            return path, load_checkpoint(path, map_location)
        except (CorruptCheckpointError, OSError) as error:
            warnings.warn(f"skipping a damaged checkpoint: {error}", RuntimeWarning, stacklevel=2)
    return None


def prune_checkpoints(folder: str | os.PathLike, keep: int) -> None:
    """Delete all but the ``keep`` newest checkpoints (``keep`` >= 2 leaves a fallback for a damaged one)."""
    for _, path in list_checkpoints(folder)[keep:]:
        path.unlink(missing_ok=True)


def rng_state() -> dict:
    """The state of every random generator a training step may use: PyTorch (CPU and CUDA), NumPy, Python.

    Plain values and tensors only, so that a checkpoint loads with ``weights_only=True``.
    """
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {"torch": torch.get_rng_state(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64),
                        "gauss_next": gauss_next}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """Put back what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    p = state["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["internal"].tolist()), p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
