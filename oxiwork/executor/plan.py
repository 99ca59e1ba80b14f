"""ExecutionPlan: the ordered, stream-assigned, memory-planned steps every executor runs.

The simulator and the GPU backends consume exactly this object.

(Skeleton of the data types by the lead; ``ExecutionPlan.build`` and ``verify_plan`` are
implemented by the stream/plan work.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, KernelConfig, MemcpyDir, NodeId, NodeKind, StreamId

__all__ = ["BufferArg", "ExecutionPlan", "PlanStep", "verify_plan"]


@dataclass(frozen=True, slots=True)
class BufferArg:
    """A buffer as a step sees it: where it lives and how to view it.

    ``offset`` is the arena offset in bytes, or ``None`` for an external buffer (bound by
    the user at run time).
    """

    buffer: BufferId
    name: str
    offset: int | None
    size_bytes: int
    dtype: str
    shape: tuple[int, ...]
    external: bool


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan.

    ``index`` is the position in ``plan.steps`` (a topological order of ``plan.graph``
    in which each stream's steps appear in stream order); ``position`` is the position
    within its stream. ``event`` is the event index (``0..plan.event_count-1``) that an
    EventRecord step records or an EventWait step waits for. ``depends_on`` lists the
    indices of the steps this one directly depends on in ``plan.graph`` (edges); executors
    must NOT enforce them: only stream order and event pairs order a real GPU, which is
    what the race detector checks against.
    """

    index: int
    kind: NodeKind
    node: NodeId
    name: str
    stream: StreamId
    position: int
    fused_nodes: tuple[NodeId, ...]
    function_name: str | None = None
    config: KernelConfig | None = None
    inputs: tuple[BufferArg, ...] = ()
    outputs: tuple[BufferArg, ...] = ()
    size_bytes: int = 0
    memcpy_dir: MemcpyDir | None = None
    memset_value: int = 0
    event: int | None = None
    label: str = ""
    depends_on: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    """The result of the pipeline, ready to execute.

    ``graph`` is the final graph (fused, streams assigned, event nodes inserted, buffers
    placed); ``original`` the graph it was built from.
    """

    steps: tuple[PlanStep, ...]
    num_streams: int
    pool_bytes: int
    kernel_count_original: int
    kernel_count_fused: int
    event_count: int
    graph: ComputeGraph
    original: ComputeGraph
    memory: Any = None
    streams: Any = None
    trace: tuple[Any, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)


def verify_plan(plan: ExecutionPlan) -> None:
    """Check every invariant of a plan (implemented by the plan work)."""
    raise NotImplementedError
