"""The per-pass summary: what each stage of the pipeline left (one row per stage).

One definition per figure, each with its name and unit, so the matplotlib view, the HTML
report and the CLI print the same numbers under the same names:

- ``kernels``: kernel nodes of the stage's graph;
- ``buffers``: every buffer of the graph, external ones included;
- ``bytes without reuse`` (B): the non-external buffers' sizes added up (what an arena
  needs if no two buffers share bytes);
- ``arena`` (B): the memory plan's arena (``plan.pool_bytes``), only once the memory pass
  has run (``None`` before);
- ``event waits``: event-wait nodes (one recorded event may be waited for on several
  streams; ``plan.event_count`` counts the events, i.e. the records);
- ``critical path`` (s): the cost model's longest path through the dependencies,
  launch overheads excluded (:func:`oxiwork.analysis.topo.analyze` on
  :func:`oxiwork.cost.node_costs`).

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> rows = pass_rows(ExecutionPlan.build(quick_start()))
>>> [(r.stage, r.kernels, r.arena) for r in rows]
[('input', 2, None), ('fusion', 1, None), ('streams', 1, None), ('memory', 1, 8192)]
"""

from __future__ import annotations

from dataclasses import dataclass

from oxiwork import cost
from oxiwork.analysis import topo
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeKind

__all__ = ["COLUMNS", "PassRow", "pass_rows"]

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (attribute, name shown, unit)
    ("kernels", "kernels", ""),
    ("buffers", "buffers", ""),
    ("bytes_without_reuse", "bytes without reuse", "B"),
    ("arena", "arena", "B"),
    ("event_waits", "event waits", ""),
    ("critical_path", "critical path", "s"),
)


@dataclass(frozen=True, slots=True)
class PassRow:
    """What one stage's graph holds (see the module docstring for each figure)."""

    stage: str
    kernels: int
    buffers: int
    bytes_without_reuse: int
    arena: int | None
    event_waits: int
    critical_path: float
    seconds: float


def _row(stage: str, g: ComputeGraph, arena: int | None, seconds: float) -> PassRow:
    info = topo.analyze(g, cost.node_costs(g))
    return PassRow(
        stage=stage,
        kernels=len(g.kernels()),
        buffers=len(g.buffers),
        bytes_without_reuse=sum(
            b.size_bytes
            for b in g.buffers
            if not b.external and b.base is None  # views: no bytes
        ),
        arena=arena,
        event_waits=sum(1 for n in g.nodes if n.kind is NodeKind.EventWait),
        critical_path=info.makespan,
        seconds=seconds,
    )


def pass_rows(plan: ExecutionPlan) -> tuple[PassRow, ...]:
    """One row for the input graph and one per pass of ``plan.trace``, in order.

    ``seconds`` is the time the pass took (0 for the input).
    """
    if not plan.trace:
        return (_row("input", plan.graph, plan.pool_bytes, 0.0),)
    rows = [_row("input", plan.trace[0].before, None, 0.0)]
    for t in plan.trace:
        arena = plan.pool_bytes if t.name == "memory" else None
        rows.append(_row(t.name, t.after, arena, t.seconds))
    return tuple(rows)
