"""Sweep plan settings and mark the Pareto front of makespan against memory.

:func:`sweep` builds an :class:`~oxiwork.executor.plan.ExecutionPlan` for every combination
of the settings given (stream caps, fusion on or off, memory modes, fused-group sizes) and
returns a :class:`SweepTable`: per setting the modelled makespan, the arena, the events and
the kernels, and whether the row is on the Pareto front of the objectives (by default
makespan and arena: no other row is at least as good in both and better in one). Each plan
keeps the stream cap it was given (``weigh_memory=False``), so the table shows what every
setting costs; :meth:`ExecutionPlan.build` with its default rule picks among them.

Example
-------
>>> from oxiwork.examples import transformer_block
>>> table = sweep(transformer_block(), max_streams=[1, 4], fusion=[True])
>>> [(r.max_streams, r.num_streams) for r in table.rows]
[(1, 1), (4, 4)]
>>> [r.pareto for r in table.rows]
[True, True]
>>> print(table.to_markdown().splitlines()[0])
| max_streams | fusion | memory_mode | max_group_size | streams | makespan (us) | arena (B) | lower bound (B) | events | kernels | Pareto |
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.graph import ComputeGraph

__all__ = ["OBJECTIVES", "SweepRow", "SweepTable", "pareto_front", "sweep"]

OBJECTIVES = ("makespan", "arena_bytes", "event_count", "kernel_count")
"""The row fields a Pareto front may be taken over (all minimised)."""


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One setting of a sweep and what its plan costs.

    Attributes
    ----------
    max_streams, fusion, memory_mode, max_group_size
        The setting (the arguments given to :meth:`ExecutionPlan.build`).
    num_streams : int
        Streams the plan uses (at most ``max_streams``).
    makespan : float
        Modelled makespan in seconds (``plan.streams.makespan``).
    arena_bytes, lower_bound : int
        The plan's arena and the memory pass's proven lower bound for it.
    event_count, kernel_count : int
        Cross-stream waits and kernels (after fusion) of the plan.
    pareto : bool
        No other row of the table dominates this one on the table's objectives.
    """

    max_streams: int
    fusion: bool
    memory_mode: str
    max_group_size: int
    num_streams: int
    makespan: float
    arena_bytes: int
    lower_bound: int
    event_count: int
    kernel_count: int
    pareto: bool = False


@dataclass(frozen=True, slots=True)
class SweepTable:
    """The rows of a sweep, in setting order, and the objectives their front is over."""

    rows: tuple[SweepRow, ...]
    objectives: tuple[str, ...]

    @property
    def front(self) -> tuple[SweepRow, ...]:
        """The rows on the Pareto front, by makespan."""
        return tuple(sorted((r for r in self.rows if r.pareto), key=lambda r: r.makespan))

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per row (JSON-able; for pandas, the widget or a CSV writer).

        >>> from oxiwork.examples import quick_start
        >>> rec = sweep(quick_start(), max_streams=[1], fusion=[True]).to_records()[0]
        >>> rec["arena_bytes"], rec["kernel_count"], rec["pareto"]
        (8192, 1, True)
        """
        return [asdict(r) for r in self.rows]

    def to_markdown(self) -> str:
        """A markdown table, one line per row; Pareto rows marked ``*``."""
        head = (
            "| max_streams | fusion | memory_mode | max_group_size | streams | makespan (us) | "
            "arena (B) | lower bound (B) | events | kernels | Pareto |"
        )
        lines = [head, "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in self.rows:
            lines.append(
                f"| {r.max_streams} | {r.fusion} | {r.memory_mode} | {r.max_group_size} | "
                f"{r.num_streams} | {r.makespan * 1e6:.3f} | {r.arena_bytes:,} | "
                f"{r.lower_bound:,} | {r.event_count:,} | {r.kernel_count:,} | "
                f"{'*' if r.pareto else ''} |"
            )
        return "\n".join(lines)


def pareto_front(points: Sequence[Sequence[float]]) -> list[bool]:
    """Per point (all coordinates minimised), whether no other point dominates it.

    ``q`` dominates ``p`` when it is no worse in every coordinate and better in one; equal
    points dominate neither, so both stay on the front. ``O(n**2 d)``: sweeps are small.

    >>> pareto_front([(1, 5), (2, 2), (3, 3), (1, 5)])
    [True, True, False, True]
    """
    pts = [tuple(p) for p in points]

    def dominates(q: tuple[float, ...], p: tuple[float, ...]) -> bool:
        return all(a <= b for a, b in zip(q, p, strict=True)) and q != p

    return [not any(dominates(q, p) for q in pts) for p in pts]


def _options(name: str, values: Any, kind: type) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        values = [values]
    out = list(values)
    if not out:
        raise InvalidArgument(f"{name} needs at least one value to sweep, got none")
    for v in out:
        if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
            raise InvalidArgument(f"{name} values must be ints, got {v!r}")
        if kind is bool and not isinstance(v, bool):
            raise InvalidArgument(f"{name} values must be True or False, got {v!r}")
        if kind is str and not isinstance(v, str):
            raise InvalidArgument(f"{name} values must be strings, got {v!r}")
    return out


def sweep(
    graph: ComputeGraph,
    max_streams: Iterable[int] | int = (1, 2, 4, 8),
    fusion: Iterable[bool] | bool = (True, False),
    *,
    memory_mode: Iterable[str] | str = ("auto",),
    max_group_size: Iterable[int] | int = (16,),
    objectives: Sequence[str] = ("makespan", "arena_bytes"),
    verify: bool = True,
) -> SweepTable:
    """Plan ``graph`` under every combination of the settings and mark the Pareto front.

    Parameters
    ----------
    graph : ComputeGraph
        The graph to plan (unchanged).
    max_streams, fusion, memory_mode, max_group_size
        The values to try for each :meth:`ExecutionPlan.build` argument (a single value is
        one choice). Every plan keeps its stream cap (``weigh_memory=False``).
    objectives : sequence of str
        Row fields the front is over, each minimised; some of :data:`OBJECTIVES`.
    verify : bool
        Verify every plan (as :meth:`ExecutionPlan.build` does).

    Returns
    -------
    SweepTable
        One row per setting, in the order of ``itertools.product`` over the arguments.

    Raises
    ------
    InvalidArgument
        An empty or mistyped list of values, or an unknown objective; a bad value itself
        is refused by :meth:`ExecutionPlan.build` (a GraphError naming it).

    References
    ----------
    V. Pareto, "Manuale di economia politica", 1906 (the front); H. T. Kung, F. Luccio and
    F. P. Preparata, "On Finding the Maxima of a Set of Vectors", JACM 1975.

    Examples
    --------
    >>> from oxiwork.examples import transformer_block
    >>> t = sweep(transformer_block(), max_streams=[1, 2], fusion=[True, False])
    >>> len(t.rows), all(r.pareto for r in t.front)
    (4, True)
    """
    if not isinstance(graph, ComputeGraph):
        raise InvalidArgument(f"sweep needs a ComputeGraph, got {type(graph).__name__}")
    objectives = tuple(objectives)
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad or not objectives:
        raise InvalidArgument(
            f"objectives must be some of {', '.join(OBJECTIVES)}, got {list(objectives)!r}"
        )
    grid = itertools.product(
        _options("max_streams", max_streams, int),
        _options("fusion", fusion, bool),
        _options("memory_mode", memory_mode, str),
        _options("max_group_size", max_group_size, int),
    )
    rows = []
    for ms, fu, mode, group in grid:
        plan = ExecutionPlan.build(
            graph,
            max_streams=ms,
            fusion=fu,
            memory_mode=mode,
            max_group_size=group,
            verify=verify,
            weigh_memory=False,
        )
        rows.append(
            SweepRow(
                max_streams=ms,
                fusion=fu,
                memory_mode=mode,
                max_group_size=group,
                num_streams=plan.num_streams,
                makespan=float(plan.streams.makespan),
                arena_bytes=plan.pool_bytes,
                lower_bound=int(plan.memory.lower_bound),
                event_count=plan.event_count,
                kernel_count=plan.kernel_count_fused,
            )
        )
    marks = pareto_front([[getattr(r, o) for o in objectives] for r in rows])
    rows = [SweepRow(**{**asdict(r), "pareto": m}) for r, m in zip(rows, marks, strict=True)]
    return SweepTable(tuple(rows), objectives)
