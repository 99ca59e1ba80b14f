"""The simulated device memory: one byte arena of ``plan.pool_bytes``, every buffer a view.

The simulator must exercise the memory plan, not bypass it: every planned buffer is a
typed numpy view at its planned offset into a single ``uint8`` array, so two buffers the
plan puts on the same bytes really share them, and a wrong plan shows up as wrong numbers.
External buffers (owned by the user, never placed) and buffers the plan left unplaced get
arrays of their own. A view is a numpy strided view of its base's bytes (wherever they
are), so a kernel writing through a view writes the base, and a wrong plan of the base
still shows as wrong numbers in every view of it.

Example
-------
>>> import numpy as np
>>> from oxiwork.executor.plan import BufferArg
>>> from oxiwork.node import BufferId
>>> a = BufferArg(BufferId(0), "a", 0, 16, "float32", (4,), False)
>>> b = BufferArg(BufferId(1), "b", 8, 8, "float32", (2,), False)
>>> arena = Arena(16, [a, b])
>>> arena.view(a)[:] = [1, 2, 3, 4]
>>> arena.view(b)          # b lives on a's last 8 bytes
array([3., 4.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from oxiwork.budget import check_sim_bytes
from oxiwork.error import InvalidPlan
from oxiwork.executor.plan import BufferArg, ExecutionPlan
from oxiwork.node import DTYPES, BufferId, view_bytes

__all__ = ["Arena", "Region", "overlapping_pairs", "overlapping_ranges", "plan_buffers"]


@dataclass(frozen=True, slots=True)
class Region:
    """Where a buffer's bytes are: ``arena`` (the pool) or its own ``private`` array.

    ``start``/``stop`` are byte offsets into the pool for arena buffers.
    """

    buffer: BufferId
    name: str
    in_arena: bool
    start: int
    stop: int


def plan_buffers(plan: ExecutionPlan) -> dict[BufferId, BufferArg]:
    """Every buffer a plan's steps touch, as the steps see it (first occurrence wins).

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.executor.plan import ExecutionPlan
    >>> sorted(a.name for a in plan_buffers(ExecutionPlan.build(quick_start())).values())
    ['input', 'output']
    """
    out: dict[BufferId, BufferArg] = {}
    for step in plan.steps:
        for arg in (*step.inputs, *step.outputs):
            if arg.buffer not in out:
                out[arg.buffer] = arg
    return out


class Arena:
    """One ``uint8`` pool plus private arrays; typed and raw views of every buffer.

    Parameters
    ----------
    pool_bytes
        Size of the pool (``plan.pool_bytes``).
    buffers
        The buffers to map. A non-external buffer with an ``offset`` becomes a view of the
        pool; external buffers and unplaced ones (``offset is None``) get private arrays.

    Raises
    ------
    InvalidPlan
        A buffer lies (partly) outside the pool, or its dtype/shape does not match its size.
    BudgetExceeded
        The pool and private arrays together exceed ``oxiwork.budget.current().sim_bytes``.
    """

    def __init__(self, pool_bytes: int, buffers: Iterable[BufferArg]) -> None:
        if pool_bytes < 0:
            raise InvalidPlan(f"pool_bytes is {pool_bytes}; it must be >= 0")
        buffers = list(buffers)
        # Refused before anything is allocated: a plan's sizes come from the user, and
        # zeroing and filling gigabytes blocks the kernel (oxiwork.budget).
        # A view's base is mapped too, even when no step names it (only views of it).
        unique = {a.buffer: a for a in (*(a.storage for a in buffers), *buffers)}
        buffers = list(unique.values())
        private = sum(
            a.size_bytes for a in buffers if a.base is None and (a.external or a.offset is None)
        )
        check_sim_bytes(pool_bytes + private, "the simulator's arena")
        self.pool = np.zeros(pool_bytes, np.uint8)
        self._raw: dict[BufferId, np.ndarray] = {}
        self._typed: dict[BufferId, np.ndarray] = {}
        self.regions: dict[BufferId, Region] = {}
        self.by_name: dict[str, BufferId] = {}
        for arg in buffers:  # bases first: a view is mapped onto its base's bytes
            if arg.buffer not in self._typed:
                self._map(arg)

    def _map(self, arg: BufferArg) -> None:
        where = f"buffer {arg.name!r} (id {int(arg.buffer)})"
        if arg.dtype not in DTYPES:
            raise InvalidPlan(f"{where} has unknown dtype {arg.dtype!r}")
        itemsize = DTYPES[arg.dtype]
        count = 1
        for s in arg.shape:
            count *= s
        if count * itemsize != arg.size_bytes:
            raise InvalidPlan(
                f"{where} has shape {arg.shape} of {arg.dtype} ({count * itemsize} bytes) but "
                f"size_bytes {arg.size_bytes}; rebuild the plan from a verified graph"
            )
        if arg.base is not None:
            self._map_view(arg, where, itemsize)
            return
        in_arena = not arg.external and arg.offset is not None
        if in_arena:
            assert arg.offset is not None
            start, stop = arg.offset, arg.offset + arg.size_bytes
            if start < 0 or stop > self.pool.size:
                raise InvalidPlan(
                    f"{where} occupies bytes [{start}, {stop}) but the arena has "
                    f"{self.pool.size} bytes; the memory plan is wrong (re-run the memory pass)"
                )
            raw = self.pool[start:stop]
        else:
            start, stop = 0, arg.size_bytes
            raw = np.zeros(arg.size_bytes, np.uint8)
        self._raw[arg.buffer] = raw
        self._typed[arg.buffer] = raw.view(arg.dtype).reshape(arg.shape)
        self.regions[arg.buffer] = Region(arg.buffer, arg.name, in_arena, start, stop)
        self.by_name[arg.name] = arg.buffer

    def _map_view(self, arg: BufferArg, where: str, itemsize: int) -> None:
        base = arg.base
        assert base is not None
        if base.dtype != arg.dtype or base.base is not None:
            raise InvalidPlan(
                f"{where} views {base.name!r} ({base.dtype}); a view must share its base's "
                "dtype and view a buffer that is not a view: rebuild the plan from a verified graph"
            )
        strides = arg.strides or ()
        last = arg.view_offset + sum((d - 1) * s for d, s in zip(arg.shape, strides, strict=True))
        if (
            arg.view_offset < 0
            or min(strides, default=0) < 0
            or (last + 1) * itemsize > base.size_bytes
        ):
            raise InvalidPlan(
                f"{where} reaches past its base {base.name!r} ({base.size_bytes} bytes); "
                "rebuild the plan from a verified graph"
            )
        typed, covered = view_bytes(
            self._raw[base.buffer], arg.dtype, arg.shape, arg.view_offset, strides
        )
        start, stop = arg.view_offset * itemsize, (last + 1) * itemsize
        # Writes through the typed view land in the base; the raw bytes are those the view
        # covers (exactly its own when it is contiguous).
        self._typed[arg.buffer] = typed
        self._raw[arg.buffer] = covered
        region = self.regions[base.buffer]
        self.regions[arg.buffer] = Region(
            arg.buffer,
            arg.name,
            region.in_arena,
            region.start + start if region.in_arena else start,
            region.start + stop if region.in_arena else stop,
        )
        self.by_name[arg.name] = arg.buffer

    def view(self, arg: BufferArg | BufferId) -> np.ndarray:
        """The typed, shaped view of a buffer (writes go to the arena)."""
        return self._typed[arg.buffer if isinstance(arg, BufferArg) else arg]

    def raw(self, arg: BufferArg | BufferId) -> np.ndarray:
        """The buffer's bytes as a ``uint8`` view."""
        return self._raw[arg.buffer if isinstance(arg, BufferArg) else arg]

    def clear(self) -> None:
        """Zero the pool and every private array (a fresh device)."""
        self.pool.fill(0)
        for bid, region in self.regions.items():
            if not region.in_arena:  # a view of a private base clears part of it again
                self._raw[bid].fill(0)


def overlapping_ranges(
    start: np.ndarray, stop: np.ndarray, tie: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(i, j)`` of half-open ranges ``[start, stop)`` that overlap, in sweep order.

    Sorting the ranges by ``(start, stop, tie)``, range ``i`` pairs with every later range
    ``j`` that starts before ``i`` stops: the pairs a sweep over the sorted ranges reports
    (Shamos & Hoey, "Geometric intersection problems", FOCS 1976), listed as the sweep meets
    them (by ``j``'s rank, then ``i``'s). Starts are sorted, so the partners of ``i`` are
    one contiguous run of ranks ending at a ``searchsorted`` of its stop: O(n log n + pairs)
    in numpy. The shared bytes are ``[start[j], min(stop[i], stop[j]))``.

    >>> i, j = overlapping_ranges(np.array([0, 4, 16]), np.array([8, 12, 24]), np.arange(3))
    >>> i.tolist(), j.tolist()
    ([0], [1])
    """
    rank = np.lexsort((tie, stop, start))
    lo, hi = start[rank], stop[rank]
    # Ranks ``r + 1 .. end[r] - 1`` start before range ``r`` stops.
    end = np.searchsorted(lo, hi, side="left")
    count = np.maximum(end - np.arange(1, len(lo) + 1), 0)
    ri = np.repeat(np.arange(len(lo)), count)
    # Within each run the partner ranks count up from ``ri + 1``.
    run_start = np.cumsum(count) - count
    rj = ri + 1 + np.arange(len(ri)) - np.repeat(run_start, count)
    # ``ri`` is already ascending, so a stable sort by ``rj`` alone gives the sweep order.
    by_sweep = np.argsort(rj, kind="stable")
    return rank[ri[by_sweep]], rank[rj[by_sweep]]


def overlapping_pairs(buffers: Iterable[BufferArg]) -> list[tuple[BufferId, BufferId, int, int]]:
    """Pairs of distinct arena buffers sharing bytes, with the shared ``[lo, hi)`` range.

    External and unplaced buffers have memory of their own and never overlap. The pairs of
    :func:`overlapping_ranges` over the regions, tie-broken by buffer id, in its order.

    >>> mk = lambda i, off: BufferArg(BufferId(i), f"b{i}", off, 8, "float32", (2,), False)
    >>> overlapping_pairs([mk(0, 0), mk(1, 4), mk(2, 16)])
    [(BufferId(0), BufferId(1), 4, 8)]
    """
    placed = [a for a in buffers if not a.external and a.offset is not None]
    start = np.array([a.offset for a in placed], dtype=np.int64)
    stop = start + np.array([a.size_bytes for a in placed], dtype=np.int64)
    i, j = overlapping_ranges(start, stop, np.array([int(a.buffer) for a in placed], np.int64))
    return [
        (placed[a].buffer, placed[b].buffer, lo, hi)
        for a, b, lo, hi in zip(
            i.tolist(),
            j.tolist(),
            start[j].tolist(),
            np.minimum(stop[i], stop[j]).tolist(),
            strict=True,
        )
    ]
