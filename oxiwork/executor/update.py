"""Can an instantiated CUDA graph be updated in place, or must it be instantiated anew?

Instantiating a CUDA graph is costly (tens of µs to ms); ``cudaGraphExecUpdate`` patches an
executable graph from a new graph of the same topology instead. :func:`check_update`
applies CUDA's documented rules to two lowered graphs (:class:`~oxiwork.executor.lowering.
GraphDesc`, or plans, which it lowers) and says which applies and why, naming each node:

- the topology must be identical: the same number of nodes, in the same order, with the
  same edges (else ``cudaGraphExecUpdateErrorTopologyChanged``);
- each node keeps its type (else ``cudaGraphExecUpdateErrorNodeTypeChanged``);
- a copy keeps the memory types of its source and destination, so its direction
  (host-to-device, device-to-host, device-to-device) cannot change (else
  ``cudaGraphExecUpdateErrorParametersChanged``); its addresses and size may;
- everything else this IR can express may change in place: a kernel's function (same
  context), grid, block, shared memory and arguments; a 1-D memset's value and width;
  host functions; events. Those changes are listed, so a lesson can show what an update
  patches.

:class:`~oxiwork.executor.cuda_graph.CudaGraphExecutor.update` consults this check before
asking the driver, and keeps the report as ``last_update``.

Reference: NVIDIA, *CUDA Runtime API*, ``cudaGraphExecUpdate`` (limitations and the
``cudaGraphExecUpdateResult`` codes); *CUDA C++ Programming Guide*, "Updating Instantiated
Graphs".

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> a = ExecutionPlan.build(quick_start(), fusion=False)
>>> b = ExecutionPlan.build(quick_start(), fusion=True)
>>> check_update(a, a).in_place
True
>>> r = check_update(a, b)
>>> r.in_place, r.result
(False, 'cudaGraphExecUpdateErrorTopologyChanged')
>>> print(r.reason)
the node count changes from 4 to 3: re-instantiate the graph
"""

from __future__ import annotations

from dataclasses import dataclass

from oxiwork.error import InvalidArgument
from oxiwork.executor.lowering import DescNode, GraphDesc, lower
from oxiwork.executor.plan import ExecutionPlan

__all__ = ["UpdateChange", "UpdateReport", "check_update"]

SUCCESS = "cudaGraphExecUpdateSuccess"
TOPOLOGY = "cudaGraphExecUpdateErrorTopologyChanged"
NODE_TYPE = "cudaGraphExecUpdateErrorNodeTypeChanged"
PARAMETERS = "cudaGraphExecUpdateErrorParametersChanged"

# What each node kind of the lowered graph may change in place, field by field; a field
# not listed for a kind is not compared (it cannot differ in this IR, or does not matter).
_ALLOWED: dict[str, tuple[str, ...]] = {
    "kernel": ("function_name", "module", "grid", "block", "smem", "args"),
    "memcpy": ("src", "dst", "nbytes"),
    "memset": ("dst", "value", "element_size", "width"),
    "host": ("label",),
    "event_record": ("event",),
    "event_wait": ("event",),
}


@dataclass(frozen=True, slots=True)
class UpdateChange:
    """One difference between the old and the new graph at node ``index``."""

    index: int
    name: str
    field: str
    old: str
    new: str

    def __str__(self) -> str:
        return f"node {self.index} ({self.name!r}): {self.field} {self.old} -> {self.new}"


@dataclass(frozen=True, slots=True)
class UpdateReport:
    """The verdict of :func:`check_update`.

    ``in_place``: ``cudaGraphExecUpdate`` can apply the new graph; ``result``: the
    ``cudaGraphExecUpdateResult`` a driver returns; ``reason``: one sentence;
    ``changes``: what an in-place update patches; ``blocking``: what forbids it.
    """

    in_place: bool
    result: str
    reason: str
    changes: tuple[UpdateChange, ...] = ()
    blocking: tuple[UpdateChange, ...] = ()

    def __str__(self) -> str:
        lines = [f"{'update in place' if self.in_place else 're-instantiate'}: {self.reason}"]
        lines += [f"  blocks: {c}" for c in self.blocking]
        lines += [f"  patches: {c}" for c in self.changes]
        return "\n".join(lines)


def check_update(old: GraphDesc | ExecutionPlan, new: GraphDesc | ExecutionPlan) -> UpdateReport:
    """Whether an executable graph made from ``old`` can be updated in place to ``new``.

    Plans are lowered as :class:`~oxiwork.executor.cuda_graph.CudaGraphExecutor` lowers
    them (event pairs as edges), so both must be plans or both descriptions.
    """
    a, b = _desc(old, "old"), _desc(new, "new")
    if len(a.nodes) != len(b.nodes):
        return UpdateReport(
            False,
            TOPOLOGY,
            f"the node count changes from {len(a.nodes)} to {len(b.nodes)}: "
            "re-instantiate the graph",
        )
    if a.edges != b.edges:
        gone, added = sorted(set(a.edges) - set(b.edges)), sorted(set(b.edges) - set(a.edges))

        def show(edges: list[tuple[int, int]], desc: GraphDesc) -> str:
            shown = [f"{desc.nodes[s].name!r} -> {desc.nodes[d].name!r}" for s, d in edges[:3]]
            return ", ".join(shown) + (f" (+{len(edges) - 3} more)" if len(edges) > 3 else "")

        parts = ([f"removed {show(gone, a)}"] if gone else []) + (
            [f"added {show(added, b)}"] if added else []
        )
        why = "; ".join(parts) or "the edges are listed in another order"
        return UpdateReport(False, TOPOLOGY, f"the edges change ({why}): re-instantiate the graph")
    changes: list[UpdateChange] = []
    blocking: list[UpdateChange] = []
    shape = _compare(a.nodes, b.nodes, changes, blocking)
    if shape is not None:
        return UpdateReport(False, TOPOLOGY, f"{shape}: re-instantiate the graph")
    if blocking:
        kinds = any(c.field == "kind" for c in blocking)
        first = blocking[0]
        reason = (
            f"node {first.index} ({first.name!r}) changes type from {first.old} to "
            f"{first.new}: re-instantiate the graph"
            if kinds
            else f"copy {first.name!r} changes direction ({first.old} -> {first.new}), "
            "which changes the memory types of its ends: re-instantiate the graph"
            if first.field == "direction"
            else f"{first.name!r} changes its {first.field} ({first.old} -> {first.new}), "
            "which cudaGraphExecUpdate cannot patch: re-instantiate the graph"
        )
        return UpdateReport(
            False, NODE_TYPE if kinds else PARAMETERS, reason, tuple(changes), tuple(blocking)
        )
    n = len(changes)
    reason = (
        "same topology and nothing changes: launch the graph as it is"
        if n == 0
        else f"same topology; {n} parameter change{'s' if n != 1 else ''} on "
        f"{len({c.index for c in changes})} node(s), all allowed in place"
    )
    return UpdateReport(True, SUCCESS, reason, tuple(changes))


def _compare(
    old: tuple[DescNode, ...],
    new: tuple[DescNode, ...],
    changes: list[UpdateChange],
    blocking: list[UpdateChange],
    where: str = "",
) -> str | None:
    """Collect the parameter changes and the blocking ones of two node lists of the same
    length (bodies of child graph and conditional nodes recursively, named ``outer/inner``);
    return why the topology differs inside a body, or None."""
    for x, y in zip(old, new, strict=True):
        name = f"{where}{x.name}"
        if x.kind != y.kind:
            blocking.append(UpdateChange(x.index, name, "kind", x.kind, y.kind))
            continue
        if x.kind == "memcpy" and x.direction != y.direction:
            blocking.append(
                UpdateChange(x.index, name, "direction", str(x.direction), str(y.direction))
            )
        for f in _ALLOWED.get(x.kind, ()):
            if getattr(x, f) != getattr(y, f):
                changes.append(UpdateChange(x.index, name, f, _show(x, f), _show(y, f)))
        # CUDA: a conditional node's own parameters (type, number of bodies) cannot change;
        # oxiwork is as strict with a memory node's size (its reservation is fixed when the
        # graph is instantiated).
        for f in _FIXED.get(x.kind, ()):
            if getattr(x, f) != getattr(y, f):
                blocking.append(UpdateChange(x.index, name, f, _show(x, f), _show(y, f)))
        if len(x.bodies) != len(y.bodies):
            blocking.append(
                UpdateChange(x.index, name, "bodies", str(len(x.bodies)), str(len(y.bodies)))
            )
            continue
        for k, (bx, by) in enumerate(zip(x.bodies, y.bodies, strict=True)):
            if len(bx.nodes) != len(by.nodes) or bx.edges != by.edges:
                return (
                    f"body {k} of {name!r} changes shape ({len(bx.nodes)} -> {len(by.nodes)} "
                    "nodes, or other edges)"
                )
            inner = _compare(bx.nodes, by.nodes, changes, blocking, f"{name}/")
            if inner is not None:
                return inner
    return None


# Parameters CUDA cannot update in place, by node kind.
_FIXED: dict[str, tuple[str, ...]] = {
    "conditional": ("cond_type",),
    "mem_alloc": ("nbytes",),
}


def _desc(obj: GraphDesc | ExecutionPlan, what: str) -> GraphDesc:
    if isinstance(obj, GraphDesc):
        return obj
    if isinstance(obj, ExecutionPlan):
        return lower(obj, events="edges")
    raise InvalidArgument(
        f"check_update: {what} must be an ExecutionPlan or a GraphDesc, not {type(obj).__name__}"
    )


def _show(n: DescNode, field: str) -> str:
    v = getattr(n, field)
    if field == "args":
        return "(" + ", ".join(f"{a.name}={a.value!r}" for a in v) + ")"
    return repr(v)
