"""The pass pipeline: optimisation passes listed once, run in order, each one traced.

A pass is a function ``graph -> PassResult``. :class:`Pipeline` runs a list of them,
verifies the graph after each one (``verify=True``), and records a :class:`TraceEntry`
per pass: the graph before and after, the nodes and buffers created and removed, the
pass's artefacts and the time it took. The widget and the renderers only read traces;
passes never import UI code (the pattern of torch.fx's pass manager and tinygrad's
tracked graph rewrites).

Example
-------
>>> from oxiwork import GraphBuilder
>>> from oxiwork.pipeline import Pipeline, PassResult
>>> b = GraphBuilder()
>>> x = b.alloc_buffer("x", 64)
>>> _ = b.add_memset("zero", 64, 0, dst=x)
>>> def rename(graph):
...     return PassResult(graph.with_changes(nodes=[n.replace(name="z") for n in graph.nodes]))
>>> run = Pipeline([("rename", rename)]).run(b.build())
>>> run.trace[0].name, run.graph.nodes[0].name
('rename', 'z')
"""

from __future__ import annotations

import copy
import itertools
import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from oxiwork.error import GraphError
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, GraphNode, NodeId
from oxiwork.optimizer import PassFn, PassResult
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams
from oxiwork.verify import verify as verify_graph

__all__ = [
    "CONSTRAINTS",
    "Constraint",
    "PassFailed",
    "PassFn",
    "PassOrderError",
    "PassResult",
    "PassSpec",
    "Pipeline",
    "PipelineRun",
    "TraceEntry",
    "plan_passes",
    "this_before_that",
]


@dataclass(frozen=True, slots=True)
class PassSpec:
    """A pass in a pipeline: its name, function and keyword options."""

    name: str
    fn: PassFn
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """What one pass did; the workbench's pass slider reads these."""

    name: str
    before: ComputeGraph
    after: ComputeGraph
    created_nodes: tuple[NodeId, ...]
    removed_nodes: tuple[NodeId, ...]
    created_buffers: tuple[BufferId, ...]
    removed_buffers: tuple[BufferId, ...]
    changed_nodes: tuple[NodeId, ...]
    artefacts: Mapping[str, Any]
    seconds: float

    def summary(self) -> str:
        """One line: counts of what changed and the time taken."""
        return (
            f"{self.name}: +{len(self.created_nodes)}/-{len(self.removed_nodes)} nodes, "
            f"+{len(self.created_buffers)}/-{len(self.removed_buffers)} buffers, "
            f"{len(self.changed_nodes)} changed, {self.seconds * 1e3:.2f} ms"
        )


@dataclass(frozen=True, slots=True)
class PipelineRun:
    """The final graph and the trace of every pass, in order."""

    graph: ComputeGraph
    trace: tuple[TraceEntry, ...]

    def artefact(self, pass_name: str, key: str) -> Any:
        """The artefact ``key`` of the pass named ``pass_name``."""
        for t in self.trace:
            if t.name == pass_name:
                return t.artefacts[key]
        raise KeyError(f"no pass named {pass_name!r} in this run")


class PassFailed(GraphError):
    """A pass raised or produced an invalid graph; names it and the passes before it."""


class PassOrderError(GraphError):
    """A pipeline lists two passes against a declared :class:`Constraint`."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """A declared order between two passes: ``before`` must run before ``after`` whenever
    a pipeline has both (torch.fx's ``this_before_that_pass_constraint``)."""

    before: str
    after: str
    why: str

    def check(self, names: Sequence[str]) -> None:
        """Raise :class:`PassOrderError` if ``names`` runs ``after`` before ``before``."""
        both = self.before in names and self.after in names
        if both and names.index(self.before) > names.index(self.after):
            raise PassOrderError(
                f"pass {self.after!r} runs before {self.before!r}, but {self.why}; "
                f"list {self.before!r} first"
            )


def this_before_that(before: str, after: str, why: str) -> Constraint:
    """The constraint "``before`` runs before ``after``" (see :class:`Constraint`).

    >>> this_before_that("streams", "memory", "why").check(["memory", "streams"])
    Traceback (most recent call last):
    ...
    oxiwork.pipeline.PassOrderError: pass 'memory' runs before 'streams', but why; list ...
    """
    return Constraint(before, after, why)


CONSTRAINTS: tuple[Constraint, ...] = (
    this_before_that(
        "streams",
        "memory",
        "a memory plan is only safe for the schedule it runs under (two buffers may share "
        "bytes only if happens-before orders them, which the streams decide)",
    ),
    this_before_that("fusion", "streams", "fusion changes the nodes the streams are assigned to"),
)
"""The pass-order constraints every :class:`Pipeline` checks."""


def plan_passes(
    *,
    fusion: bool = True,
    max_group_size: int = 16,
    max_streams: int = 4,
    memory_mode: str = "auto",
    memory_time_limit: float | None = None,
    capacity: int | None = None,
) -> tuple[PassSpec, ...]:
    """The pass list of :meth:`ExecutionPlan.build <oxiwork.executor.plan.ExecutionPlan.
    build>`: fusion ▶ streams ▶ memory (fusion optional), listed here once.

    >>> [p.name for p in plan_passes()], [p.name for p in plan_passes(fusion=False)]
    (['fusion', 'streams', 'memory'], ['streams', 'memory'])
    """
    passes = [PassSpec("fusion", fuse, {"max_group_size": max_group_size})] if fusion else []
    passes.append(PassSpec("streams", assign_streams, {"max_streams": max_streams}))
    passes.append(
        PassSpec(
            "memory",
            plan_memory,
            {"mode": memory_mode, "time_limit": memory_time_limit, "capacity": capacity},
        )
    )
    return tuple(passes)


class Pipeline:
    """Runs passes in order and traces each one.

    ``constraints`` (default :data:`CONSTRAINTS`, "fusion before streams before memory")
    are checked when the pipeline is made: a list that breaks one is refused with
    :class:`PassOrderError` before any pass runs.

    >>> Pipeline([p for p in reversed(plan_passes())])
    Traceback (most recent call last):
    ...
    oxiwork.pipeline.PassOrderError: pass 'memory' runs before 'streams', but a memory plan \
is only safe for the schedule it runs under ...
    """

    def __init__(
        self,
        passes: Iterable[PassSpec | tuple[str, PassFn]],
        constraints: Iterable[Constraint] = CONSTRAINTS,
    ) -> None:
        self.passes: tuple[PassSpec, ...] = tuple(
            p if isinstance(p, PassSpec) else PassSpec(p[0], p[1]) for p in passes
        )
        self.constraints = tuple(constraints)
        names = [p.name for p in self.passes]
        for c in self.constraints:
            c.check(names)

    def run(self, graph: ComputeGraph, *, verify: bool = True) -> PipelineRun:
        """Run every pass on ``graph``; verify the input and the graph after each pass if
        ``verify``."""
        trace: list[TraceEntry] = []
        current = graph
        if verify:  # a pass must not be blamed for what its input already got wrong
            try:
                verify_graph(graph)
            except GraphError as e:
                err = copy.copy(e)
                err.args = (f"the input graph, before any pass: {e}",)
                raise err from e
        for spec in self.passes:
            t0 = time.perf_counter()
            try:
                result = spec.fn(current, **spec.options)
                if not isinstance(result, PassResult):
                    raise TypeError(f"returned {type(result).__name__}, not PassResult")
                if verify:
                    verify_graph(result.graph)
            except GraphError as e:
                done = ", ".join(t.name for t in trace) or "none"
                # Same class and attributes (e.g. CycleError.cycle), message with context.
                err = copy.copy(e)
                err.args = (f"pass {spec.name!r} failed (passes before it: {done}): {e}",)
                raise err from e
            except Exception as e:  # a bug in a pass: still say which pass
                done = ", ".join(t.name for t in trace) or "none"
                raise PassFailed(
                    f"pass {spec.name!r} raised {type(e).__name__}: {e} (passes before it: {done})"
                ) from e
            seconds = time.perf_counter() - t0
            trace.append(_diff(spec.name, current, result, seconds))
            current = result.graph
        return PipelineRun(current, tuple(trace))


def _diff(name: str, before: ComputeGraph, result: PassResult, seconds: float) -> TraceEntry:
    after = result.graph
    # The graphs' own id -> node and id -> buffer indexes (made when they were built).
    bn, an = before._cache["node_index"], after._cache["node_index"]
    bb, ab = before._cache["buf_index"], after._cache["buf_index"]
    # A pass hands on the nodes it keeps as the very objects: only the others are compared
    # (field by field, as ==, but in one C call per node).
    changed: tuple[NodeId, ...] = ()
    if after.nodes is not before.nodes:
        new, old = list(an.values()), list(map(bn.get, an))
        other = map(operator.is_not, new, old)
        # (the stream, which the stream pass sets, first: a differing stream is a change
        # without building both field tuples)
        changed = tuple(
            k
            for k, x, y in itertools.compress(zip(an, new, old, strict=True), other)
            if y is not None and (x.stream != y.stream or _FIELDS(x) != _FIELDS(y))
        )
    return TraceEntry(
        name=name,
        before=before,
        after=after,
        created_nodes=_added(bn, an),
        removed_nodes=_added(an, bn),
        created_buffers=_added(bb, ab),
        removed_buffers=_added(ab, bb),
        changed_nodes=changed,  # in id order: the index is in the graph's (id) order
        artefacts=dict(result.artefacts),
        seconds=seconds,
    )


def _added(before: Mapping[Any, Any], after: Mapping[Any, Any]) -> tuple[Any, ...]:
    """The keys of ``after`` that ``before`` lacks, sorted; none when both are the very
    same index (a graph made from another's very nodes or buffers shares its index)."""
    return () if after is before else tuple(sorted(after.keys() - before.keys()))


# The fields GraphNode's == compares (a host callback's fn is not one of them).
_FIELDS = operator.attrgetter(*(f.name for f in fields(GraphNode) if f.compare))
