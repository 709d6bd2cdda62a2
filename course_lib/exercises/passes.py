"""How an implementation reads a row: in tiles, once, before its output, or the whole row at once, or twice.

An online softmax and a two-pass softmax return the same numbers, so no output can tell them apart; the way
they read their input can. :func:`row_reads` calls an implementation once on an input wrapped in a tensor
subclass (:class:`_Row`) that knows, for every element, its column along the reduced axis (``dim``), and
records every *read*: an operation that computes with the input's elements (``amax``, ``-``, ``exp``...), as
opposed to one that only moves them (slicing, ``movedim``, ``split``, ``cat``, a copy with ``.double()``).

Consecutive reads of overlapping columns form one *visit* (a tile's maximum and its exponentials); a read of
columns an earlier visit read is a *revisit*. Two rules, for a row longer than one tile:

- ``whole row``: a first visit reads more than ``tile_size`` columns at once (``x.amax(dim)``, ``torch.softmax``):
  the normaliser is not found tile by tile.
- ``second pass``: what a revisit computed (``exp(x - m)`` once ``m`` is the whole row's maximum) is reduced
  again (``.sum``, ``.amax``, a matmul: any operation with fewer elements out than in): the sum was found in a
  second pass over the data. The output pass, ``exp(x - m) / l``, revisits every column but reduces nothing.

A one-pass answer that walks the tiles backwards, computes each tile's maximum and sum and merges them, or
takes one entry at a time passes; so does a row of one tile, where one pass and two are the same thing.
What is not seen: work done outside PyTorch (``.tolist()``, NumPy) is invisible, and an answer that sums
with a Python loop of additions over single entries of a second pass (no operation with fewer elements out)
is not told apart. The rules judge the access pattern only; the output is judged by the check as ever.

Example:
    >>> def two_pass(x, dim=-1, tile_size=2):
    ...     e = torch.exp(x - x.amax(dim, keepdim=True))
    ...     return e / e.sum(dim, keepdim=True)
    >>> row_reads(two_pass, torch.randn(2, 6), dim=-1, tile_size=2)
    ['whole row: your code read 6 entries of a row at once (amax) before the normaliser was found: tiles of 2']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

__all__ = ["row_reads", "case_row_reads", "ACCESS_CHECKS", "access_check_name", "resolve_access_check", "COPIES",
           "MOVES", "SHAPES"]

#: Calls that copy their input element for element (a new tensor, the same columns): not reads.
COPIES = frozenset({"clone", "contiguous", "to", "double", "float", "half", "bfloat16", "cpu", "detach", "type",
                    "type_as", "requires_grad_", "detach_"})
#: Calls that move elements without computing with them (results may be copies, not views): not reads.
MOVES = frozenset({"__getitem__", "cat", "concat", "concatenate", "stack", "hstack", "vstack", "flip", "roll",
                   "index_select", "gather", "take_along_dim", "narrow", "narrow_copy", "reshape", "view",
                   "flatten", "unflatten", "movedim", "moveaxis", "permute", "transpose", "t", "swapaxes",
                   "swapdims", "squeeze", "unsqueeze", "expand", "expand_as", "repeat", "split", "chunk",
                   "tensor_split", "unbind", "select", "unfold", "view_as", "reshape_as", "broadcast_to", "T", "mT"})
#: Calls that take only a shape, a dtype and a device from their input: not reads.
#: Calls that tell about a tensor without its values (``x.shape`` is a property's ``__get__``) or print it: not
#: reads. Any other call whose result is not a tensor takes the values out of PyTorch, and is a read.
METADATA = frozenset({"__get__", "size", "dim", "ndimension", "numel", "nelement", "__len__", "stride",
                      "storage_offset", "is_contiguous", "data_ptr", "element_size", "is_floating_point",
                      "is_complex", "get_device", "__repr__", "__format__", "__str__", "__hash__"})
SHAPES = frozenset({"full_like", "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "new_full",
                    "new_zeros", "new_ones", "new_empty", "new_tensor"})


@dataclass
class _Reads:
    """What one call read: the current visit's columns, every earlier visit's, and the problems found."""

    tile_size: int
    columns: int  # the row's length
    current: set[int] = field(default_factory=set)
    visited: set[int] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    def read(self, cols: set[int], name: str) -> bool:
        """Record a read of the elements ``cols`` (each ``row * columns + column``); True when it is a revisit of
        one of them (see the module docstring). Rows are kept apart: a loop over rows reads each row once."""
        if not cols:
            return False
        if not cols & self.current:  # another tile: the current visit ends
            self.visited |= self.current
            self.current = set()
        self.current |= cols
        revisit = bool(cols & self.visited)
        widest = max(Counter(c // self.columns for c in cols).values())  # entries of one row read at once
        if not revisit and widest > self.tile_size and self.columns > self.tile_size:
            self._problem(f"whole row: your code read {widest} entries of a row at once ({name}) before the "
                          f"normaliser was found: tiles of {self.tile_size}")
        return revisit

    def unread(self, total: int) -> int:
        """How many of the ``total`` elements no read reached."""
        return total - len(self.visited | self.current)

    def _problem(self, message: str) -> None:
        """Keep the first problem of each kind (the text before the colon)."""
        if all(p.split(":", 1)[0] != message.split(":", 1)[0] for p in self.problems):
            self.problems.append(message)


#: Each live :class:`_Row`'s tag, by ``id``: the row itself (kept alive, so that its id is not reused during
#: the call), its column map, whether it belongs to a second pass, and the record it reports to. The tags live
#: here, not on the tensor: an attribute of the tensor would be one assignment away from the learner's code
#: (``x._reads.problems.clear()`` passed a whole-row softmax), while this module is out of its reach (the
#: grader's policy refuses imports from ``course_lib.exercises`` and dunder attributes such as
#: ``__globals__``). :func:`row_reads` empties it when the call returns.
_TAGS: dict[int, tuple[torch.Tensor, torch.Tensor | None, bool, _Reads]] = {}


def _tag(t: torch.Tensor) -> tuple[torch.Tensor | None, bool, _Reads | None]:
    """A row's column map, second-pass flag and record (None, False, None for a row this module did not tag)."""
    entry = _TAGS.get(id(t))
    if entry is None or entry[0] is not t:
        return None, False, None
    return entry[1], entry[2], entry[3]


def _raw_columns(rows: list[torch.Tensor]) -> set[int]:
    """The columns of the row that these tagged tensors' elements come from."""
    maps = [cols for cols in (_tag(t)[0] for t in rows) if cols is not None]
    return {int(c) for cols in maps for c in cols.unique().tolist() if c >= 0}


class _Row(torch.Tensor):
    """A tensor whose elements know their column (a map of the same shape, -1 for none) or, once a revisit
    computed with them, that they belong to a second pass; both kept in :data:`_TAGS`."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **kwargs)
        leaves, _ = tree_flatten((args, kwargs))
        ours = [t for t in leaves if isinstance(t, _Row)]
        results = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        name = getattr(func, "__name__", str(func))
        reads = next((r for r in (_tag(t)[2] for t in ours) if r is not None), None)
        if ours and not results and reads is not None and name not in METADATA:
            # the values leave PyTorch (.numpy(), .tolist(), .item()): what is computed from them is out of sight
            if _raw_columns(ours):
                reads._problem(f"outside PyTorch: your code took values of the row out of PyTorch ({name}); "
                               "compute with tensor operations, tile by tile")
        if not ours or not results:
            return out  # .shape, .dim(), an operation on other tensors
        if reads is None:
            return _plain(out)
        second = any(_tag(t)[1] for t in ours)
        if name in SHAPES:
            return _plain(out)
        if name in COPIES or name in MOVES:
            if second:
                return _wrap(out, reads, None, second=True)
            return _wrap_moved(out, _replay(func, args, kwargs) if name in MOVES else _columns(args[0]), reads)
        revisit = reads.read(_raw_columns(ours), name)
        if second and max(t.numel() for t in results) < max(t.numel() for t in ours if _tag(t)[1]):
            reads._problem(f"second pass: your code reduced ({name}) values it computed in a second pass over "
                           f"the row: the sum is found in the same pass as the maximum")
        return _wrap(out, reads, None, second=True) if second or revisit else _plain(out)


def _columns(value: Any) -> Any:
    """The column map standing in for a tensor when a move is replayed on the columns (-1: no column)."""
    if isinstance(value, _Row):
        cols = _tag(value)[0]
        return cols if cols is not None else torch.full(value.shape, -1, dtype=torch.long)
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return torch.full(value.shape, -1, dtype=torch.long)
    return value


def _replay(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The same move applied to the column maps (None when the maps' layout refuses it: the result is then
    not followed, which only loses sight of reads)."""
    for prepare in (_columns, lambda v: c.contiguous() if isinstance(c := _columns(v), torch.Tensor) else c):
        try:
            return func(*tree_map(prepare, args), **tree_map(prepare, kwargs))
        except (RuntimeError, TypeError, ValueError, IndexError):
            continue
    return None


def _plain(out: Any) -> Any:
    return tree_map(lambda t: t.as_subclass(torch.Tensor) if isinstance(t, torch.Tensor) else t, out)


def _wrap(out: Any, reads: _Reads, cols: torch.Tensor | None, second: bool) -> Any:
    def one(t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            return t
        row = t.as_subclass(_Row)
        _TAGS[id(row)] = (row, cols, second, reads)
        return row
    return tree_map(one, out)


def _wrap_moved(out: Any, cols: Any, reads: _Reads) -> Any:
    """The results of a move, each with the columns the same move gives the column map."""
    outs, spec = tree_flatten(out)
    maps, _ = tree_flatten(cols)
    if len(maps) != len(outs):
        return _plain(out)
    wrapped = [_wrap(o, reads, m if isinstance(m, torch.Tensor) and m.shape == getattr(o, "shape", None) else None,
                     second=False) for o, m in zip(outs, maps, strict=True)]
    return tree_unflatten(wrapped, spec)


def row_reads(impl: Callable[..., Any], x: torch.Tensor, dim: int = -1, tile_size: int = 32,
              **kwargs: Any) -> list[str]:
    """Call ``impl(x, dim=dim, tile_size=tile_size, **kwargs)`` on a copy of ``x`` that records its reads; return
    the problems found, each ``"kind: message"`` (``whole row``, ``second pass``; none for a one-pass answer).

    Shapes: ``x`` any shape with ``dim`` an axis of it. Exceptions of ``impl`` propagate.
    """
    problems, _ = _instrumented_call(impl, x, dim, tile_size, **kwargs)
    return problems


def _instrumented_call(impl: Callable[..., Any], x: torch.Tensor, dim: int, tile_size: int,
                       **kwargs: Any) -> tuple[list[str], Any]:
    """:func:`row_reads`'s call: its problems and the call's output."""
    n = x.shape[dim]
    moved = x.movedim(dim, -1).shape
    keys = torch.arange(x.numel()).reshape(moved).movedim(-1, dim).contiguous()  # each element: row * n + column
    reads = _Reads(tile_size=tile_size, columns=n)
    row = _wrap(x.detach().clone(), reads, keys, second=False)
    try:
        out = impl(row, dim=dim, tile_size=tile_size, **kwargs)
    finally:
        _TAGS.clear()
    problems = list(reads.problems)
    unread = reads.unread(x.numel())
    if unread and not problems:
        problems.append(f"record: the record of your code's reads saw {x.numel() - unread} of the {x.numel()} "
                        f"entries read (the record was cleared, or the input's type was tested and the check's "
                        f"copy answered otherwise)")
    return problems, _plain(out)


def case_row_reads(impl: Callable[..., Any], case: Any) -> list[str]:
    """:func:`row_reads` on an exercise case of a softmax ``f(x, dim=-1, tile_size=32)`` (notebook 14's
    ``online_softmax``): ``x`` its first argument, ``dim`` and ``tile_size`` its keyword arguments, and the
    instrumented call's output judged too: it must be the softmax of ``x`` along ``dim`` (PyTorch's, taken when
    this module was imported), so that code telling the instrumented copy apart (``type(x) is not torch.Tensor``)
    and answering it otherwise earns a problem, not a pass. An ``Exercise.access_check``; it lives here, not
    beside the exercise, because the grader's sandbox runs it and the sandbox cannot see the checks (they hold
    the answers)."""
    x, dim = case.args[0], case.kwargs.get("dim", -1)
    problems, out = _instrumented_call(impl, x, dim, case.kwargs.get("tile_size", 32))
    if not problems and not _same_softmax(out, x, dim):
        problems.append("output: under the check of how it reads its input, your code returned something else than "
                        "the softmax it returns otherwise (compute the same way whatever the input's type)")
    return problems


_SOFTMAX = torch.softmax  # taken at import, before any learner code: a later rebinding of torch.softmax is not it


def _same_softmax(out: Any, x: torch.Tensor, dim: int) -> bool:
    """Whether ``out`` is a plain tensor equal to the softmax of ``x`` along ``dim`` (float64 tolerance)."""
    if type(out) is not torch.Tensor or out.shape != x.shape:
        return False
    expected = _SOFTMAX(x.detach().double(), dim)
    return bool(torch.allclose(out.detach().double(), expected, atol=1e-5, rtol=1e-4, equal_nan=True))


#: The access checks an exercise can name, by the name the grader's sandbox and the class edition's stored data use.
ACCESS_CHECKS: dict[str, Callable[..., list[str]]] = {"row_reads": case_row_reads}


def access_check_name(function: Callable[..., Any] | None) -> str | None:
    """The name of an exercise's access check in :data:`ACCESS_CHECKS` (None: none). A function that is not
    there raises: the sandbox and the class edition could not run it."""
    if function is None:
        return None
    for name, known in ACCESS_CHECKS.items():
        if known is function:
            return name
    raise ValueError(f"access_check_name: {function!r} is not in course_lib.exercises.passes.ACCESS_CHECKS "
                     f"(add it there, so that the sandbox and the class edition can run it)")


def resolve_access_check(name: Any) -> Callable[..., Any] | None:
    """The access check called ``name`` (:func:`access_check_name`), or None for anything else."""
    return ACCESS_CHECKS.get(name) if isinstance(name, str) else None
