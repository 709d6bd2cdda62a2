"""Reading what a sandbox sent, as untrusted data: hard limits checked before anything is loaded.

A frame is a small JSON header and, for a result, the bytes of an ``.npz``. :func:`parse_header` refuses
JSON over 1 MB or nested too deeply; :func:`load_arrays` opens the ``.npz`` with :mod:`zipfile` and checks,
before loading, the number of members, each member's declared size, then streams each member with a cap
(a deflate bomb that lies about its size stops at the cap), and loads it with ``allow_pickle=False`` and
only boolean, integer and floating dtypes with at most 8 dimensions. Any violation makes the whole frame
count as missing; the grader's memory stays bounded by the caps, whatever the sandbox sent.

Example:
    >>> import io, numpy as np
    >>> blob = io.BytesIO(); np.savez(blob, a0=np.arange(3))
    >>> load_arrays(blob.getvalue())["a0"].tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

__all__ = ["UntrustedData", "parse_header", "load_arrays", "MAX_HEADER", "MAX_MEMBERS", "MAX_ARRAY_BYTES"]

MAX_HEADER = 1 << 20
MAX_MEMBERS = 4096
MAX_ARRAY_BYTES = 32 << 20
MAX_TOTAL_BYTES = 64 << 20
_DTYPE_KINDS = "biuf"


class UntrustedData(ValueError):
    """What the sandbox sent breaks one of the limits (the result counts as missing)."""


def parse_header(data: bytes) -> dict[str, Any]:
    """The JSON header of a frame, as a dict; raises :class:`UntrustedData` for anything else."""
    if len(data) > MAX_HEADER:
        raise UntrustedData(f"a message of {len(data)} bytes, over {MAX_HEADER}")
    try:
        value = json.loads(data.decode("utf-8", "strict"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise UntrustedData(f"not JSON ({type(err).__name__})") from None
    if not isinstance(value, dict):
        raise UntrustedData("not a JSON object")
    return value


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, budget: int) -> np.ndarray:
    """One member, streamed with a cap of ``budget`` bytes, loaded without pickles, dtype checked."""
    if info.file_size > budget:
        raise UntrustedData(f"member {info.filename[:40]!r} declares {info.file_size} bytes")
    with archive.open(info) as stream:
        raw = stream.read(budget + 1)
    if len(raw) > budget:
        raise UntrustedData(f"member {info.filename[:40]!r} expands beyond {budget} bytes")
    buffer = io.BytesIO(raw)
    version = np.lib.format.read_magic(buffer)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    if version not in readers:
        raise UntrustedData(f"member {info.filename[:40]!r} has .npy format {version}")
    shape, _, dtype = readers[version](buffer)
    if dtype.kind not in _DTYPE_KINDS or dtype.hasobject or len(shape) > 8:
        raise UntrustedData(f"member {info.filename[:40]!r} has dtype {dtype} and {len(shape)} dimensions")
    buffer.seek(0)
    return np.lib.format.read_array(buffer, allow_pickle=False)


def load_arrays(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` sent by a sandbox (see the module docstring for the limits)."""
    if not data:
        return {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
            if len(infos) > MAX_MEMBERS:
                raise UntrustedData(f"{len(infos)} arrays, over {MAX_MEMBERS}")
            arrays, budget = {}, MAX_TOTAL_BYTES
            for info in infos:
                array = _member(archive, info, min(MAX_ARRAY_BYTES, budget))
                budget -= array.nbytes
                arrays[info.filename.removesuffix(".npy")] = array
            return arrays
    except UntrustedData:
        raise
    except Exception as err:  # noqa: BLE001 - a corrupt archive is untrusted data like any other
        raise UntrustedData(f"not a valid .npz ({type(err).__name__})") from None
