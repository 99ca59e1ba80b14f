"""One ``verify`` for graphs and plans: every IR invariant, checked in one place.

Tests and debug runs call it after every pass (the pipeline does, with ``verify=True``).
Its messages name the node and show its neighbourhood, in the spirit of torch.fx's
``Graph.lint`` and JAX's ``check_jaxpr``.

Example
-------
>>> from oxiwork import GraphBuilder, verify
>>> b = GraphBuilder()
>>> x = b.alloc_buffer("x", 64)
>>> _ = b.add_memset("zero", 64, 0, dst=x)
>>> verify(b.build())
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from oxiwork.error import InvalidArgument
from oxiwork.node import GraphNode, MemcpyDir, NodeId, NodeKind

if TYPE_CHECKING:  # only for annotations: this module sits below graph.py (see pyproject)
    from oxiwork.graph import ComputeGraph

__all__ = ["Verifiable", "context", "verify", "verify_graph"]


@runtime_checkable
class Verifiable(Protocol):
    """What :func:`verify` takes: an object that checks its own invariants.

    :meth:`ComputeGraph.verify <oxiwork.graph.ComputeGraph.verify>` (which calls
    :func:`verify_graph`) and :meth:`ExecutionPlan.verify
    <oxiwork.executor.plan.ExecutionPlan.verify>` (which calls ``verify_plan``). Dispatching
    through the object keeps this module below the graph and the plan: it never imports
    the executor, which sits layers above it.
    """

    def verify(self) -> None: ...


def context(graph: ComputeGraph, nid: NodeId) -> str:
    """A one-line description of a node and its neighbours, for error messages."""
    n = graph.node(nid)

    def names(ids: tuple[NodeId, ...]) -> str:
        shown = [repr(graph.node(i).name) for i in ids[:5]]
        return ", ".join(shown) + (f", … (+{len(ids) - 5})" if len(ids) > 5 else "") or "none"

    return (
        f"node {n.name!r} (id {int(n.id)}, {n.kind.value}); after: "
        f"{names(graph.predecessors(nid))}; before: {names(graph.successors(nid))}"
    )


def verify(obj: Any) -> None:
    """Check every invariant of a :class:`ComputeGraph` or an ``ExecutionPlan``.

    Both are checked once per object (they are immutable; the result is cached on them).
    On a graph: values (sizes, dtypes, alignments, each node kind's rule), event waits
    depending on their records, and the ordering invariant: every two accesses to one
    buffer of which one writes are ordered by a path of edges
    (:meth:`ComputeGraph.check_ordering`). On a plan: :func:`oxiwork.executor.plan.
    verify_plan`, whose ordering is happens-before (stream order plus event pairs), also
    across buffers the memory plan put on the same bytes.

    Raises a :class:`~oxiwork.error.GraphError` subclass naming what is wrong
    (:class:`~oxiwork.error.UnorderedAccess` for the ordering: the buffer, both nodes or
    steps, and the missing edge or event); returns ``None`` when everything holds.

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.graph import ComputeGraph
    >>> g = quick_start()
    >>> bare = ComputeGraph(g.nodes, g.buffers, ())  # the quick start without its edges
    >>> verify(bare)
    Traceback (most recent call last):
    ...
    oxiwork.error.UnorderedAccess: buffer 'input' is written by 'upload' (node 0) and read \
by 'relu' (node 1), ...
    """
    if isinstance(obj, type) or not isinstance(obj, Verifiable):
        raise InvalidArgument(f"verify() takes a ComputeGraph or an ExecutionPlan, not {type(obj)}")
    obj.verify()


def verify_graph(g: ComputeGraph) -> None:
    """Every invariant of a graph (what :func:`verify` checks for a graph, uncached).

    >>> from oxiwork.examples import quick_start
    >>> verify_graph(quick_start())
    """
    # Structure (ids, references, acyclicity) and every value's own rule (sizes, dtypes,
    # shapes, alignments, streams, bytes: oxiwork.validate) were checked when the graph was
    # made; what is left relates values to each other.
    for b in g.buffers:
        where = f"buffer {b.name!r} (id {int(b.id)})"
        if b.offset is not None:
            if b.external:
                raise InvalidArgument(f"{where}: external buffers are never placed in the arena")
            if b.offset < 0 or b.offset % b.alignment:
                raise InvalidArgument(
                    f"{where}: offset {b.offset} is not a non-negative multiple of its "
                    f"alignment {b.alignment}"
                )
    edge_set = set(g.edges)
    for n in g.nodes:
        _RULES[n.kind](g, n, edge_set)
        if n.kind is not NodeKind.KernelLaunch and (n.config is not None or n.fused is not None):
            raise InvalidArgument(f"{context(g, n.id)}: only kernels have a launch config")
    # Use before def: every conflicting pair of accesses is ordered by the edges.
    g.check_ordering()


def _check_kernel(g: ComputeGraph, n: GraphNode, _: set[Any]) -> None:
    if n.config is None:
        raise InvalidArgument(f"{context(g, n.id)}: a kernel needs a KernelConfig")
    if n.fused is not None:
        p = n.fused
        if not n.fused_from:
            raise InvalidArgument(f"{context(g, n.id)}: fused kernel lists no original nodes")
        for j, step in enumerate(p.steps):
            for kind, i in step.args:
                ok = (kind == "in" and 0 <= i < len(n.inputs)) or (kind == "step" and 0 <= i < j)
                if not ok:
                    raise InvalidArgument(
                        f"{context(g, n.id)}: fused step {j} ({step.op}) reads {kind} {i}, "
                        "which does not exist at that point"
                    )
        if len(p.outputs) != len(n.outputs) or any(not 0 <= s < len(p.steps) for s in p.outputs):
            raise InvalidArgument(
                f"{context(g, n.id)}: fused program has {len(p.outputs)} outputs for "
                f"{len(n.outputs)} output buffers"
            )


def _check_memcpy(g: ComputeGraph, n: GraphNode, _: set[Any]) -> None:
    if n.memcpy_dir is None:
        raise InvalidArgument(f"{context(g, n.id)}: a memcpy needs a direction")
    if len(n.inputs) > 1 or len(n.outputs) > 1:
        raise InvalidArgument(f"{context(g, n.id)}: a memcpy has at most one source and one dest")
    if n.memcpy_dir is MemcpyDir.HostToDevice and n.inputs:
        raise InvalidArgument(f"{context(g, n.id)}: a HostToDevice copy reads the host")
    if n.memcpy_dir is MemcpyDir.DeviceToHost and n.outputs:
        raise InvalidArgument(f"{context(g, n.id)}: a DeviceToHost copy writes the host")
    for bid in (*n.inputs, *n.outputs):
        _check_bytes_of(g, n, bid)
        if g.buffer(bid).size_bytes < n.size_bytes:
            raise InvalidArgument(
                f"{context(g, n.id)}: copies {n.size_bytes} bytes but buffer "
                f"{g.buffer(bid).name!r} holds {g.buffer(bid).size_bytes}"
            )


def _check_memset(g: ComputeGraph, n: GraphNode, _: set[Any]) -> None:
    if n.inputs or len(n.outputs) > 1:
        raise InvalidArgument(f"{context(g, n.id)}: a memset writes > 0 bytes into one buffer")
    for bid in n.outputs:
        _check_bytes_of(g, n, bid)
        if g.buffer(bid).size_bytes < n.size_bytes:
            raise InvalidArgument(
                f"{context(g, n.id)}: sets {n.size_bytes} bytes of a "
                f"{g.buffer(bid).size_bytes}-byte buffer"
            )


def _check_bytes_of(g: ComputeGraph, n: GraphNode, bid: Any) -> None:
    """Copies and memsets move bytes, so a view they touch must be contiguous."""
    b = g.buffer(bid)
    if not b.is_contiguous:
        raise InvalidArgument(
            f"{context(g, n.id)}: {n.kind.noun} on {b.name!r}, a non-contiguous view, whose "
            "elements are not one run of bytes; copy it with a kernel (op 'copy') instead"
        )


def _check_wait(g: ComputeGraph, n: GraphNode, edges: set[Any]) -> None:
    rec = g.node(n.event) if n.event is not None else None
    if rec is None or rec.kind is not NodeKind.EventRecord:
        raise InvalidArgument(f"{context(g, n.id)}: an event wait must name an event record")
    if (rec.id, n.id) not in edges:
        raise InvalidArgument(
            f"{context(g, n.id)}: waits for {rec.name!r} but does not depend on it"
        )


def _check_plain(g: ComputeGraph, n: GraphNode, _: set[Any]) -> None:
    if n.inputs or n.outputs:
        raise InvalidArgument(f"{context(g, n.id)}: a {n.kind.value} node touches no buffers")


# One rule per node kind (rule tables, not if-chains).
_RULES = {
    NodeKind.KernelLaunch: _check_kernel,
    NodeKind.Memcpy: _check_memcpy,
    NodeKind.Memset: _check_memset,
    NodeKind.EventRecord: _check_plain,
    NodeKind.EventWait: _check_wait,
    NodeKind.HostCallback: _check_plain,
    NodeKind.Barrier: _check_plain,
}
