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

import itertools
import operator
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from oxiwork import validate
from oxiwork.error import InvalidArgument, InvalidLifetime
from oxiwork.node import (
    BODY_KINDS,
    MEMORY_KINDS,
    Buffer,
    BufferId,
    CondKind,
    GraphNode,
    MemcpyDir,
    NodeId,
    NodeKind,
)

if TYPE_CHECKING:  # only for annotations: this module sits below graph.py (see pyproject)
    from oxiwork.graph import ComputeGraph

__all__ = [
    "BODY_NODE_KINDS",
    "KERNEL_CHECKS",
    "Verifiable",
    "body_depth",
    "carry_node_rules",
    "context",
    "verify",
    "verify_graph",
]

#: What a body graph (of a child graph or a conditional) may hold: CUDA allows kernels,
#: device copies, memsets, empty nodes, child graphs and conditionals in conditional
#: bodies; event, host and memory nodes (and host copies) would need the outer graph's
#: streams, the host or the graph's memory pool, so they stay in the outer graph.
BODY_NODE_KINDS = frozenset(
    {
        NodeKind.KernelLaunch,
        NodeKind.Memcpy,
        NodeKind.Memset,
        NodeKind.Barrier,
        NodeKind.ChildGraph,
        NodeKind.Conditional,
    }
)
_HOST_COPIES = frozenset({MemcpyDir.HostToDevice, MemcpyDir.DeviceToHost})
# How many bodies each conditional takes (inclusive bounds).
_BODY_COUNTS = {
    CondKind.If: (1, 2),
    CondKind.While: (1, 1),
    CondKind.Switch: (1, validate.MAX_BODIES),
}

# Checks of a kernel against the op it names. The op table sits above this module (it
# imports graph.py), so it installs its checks here when imported (oxiwork.ops.program:
# the dtypes a kernel reads and writes fit its ops); each raises a GraphError. A check
# reads only the node and the buffers it names: verify_graph does not check again a node
# that passed over the same buffers (_unchanged_nodes).
KERNEL_CHECKS: list[Callable[[ComputeGraph, GraphNode], None]] = []


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
    """Every invariant of a graph (what :func:`verify` checks for a graph, uncached but for
    the per-node rules, checked once per graph and carried over to a graph that only
    differs in arena offsets).

    >>> from oxiwork.examples import quick_start
    >>> verify_graph(quick_start())
    """
    # Structure (ids, references, acyclicity) and every value's own rule (sizes, dtypes,
    # shapes, alignments, streams, bytes: oxiwork.validate) were checked when the graph was
    # made; what is left relates values to each other.
    for b in g.buffers:
        if b.offset is not None:
            where = f"buffer {b.name!r} (id {int(b.id)})"
            if b.external:
                raise InvalidArgument(f"{where}: external buffers are never placed in the arena")
            if b.offset < 0 or b.offset % b.alignment:
                raise InvalidArgument(
                    f"{where}: offset {b.offset} is not a non-negative multiple of its "
                    f"alignment {b.alignment}"
                )
    # The node rules read the nodes, the edges and the buffers but not their offsets: a
    # graph that differs from a checked one only in offsets (the memory pass's) carries
    # the verdict over (ComputeGraph.with_changes), so 100k kernels are not checked again.
    if not g._cache.get("node_rules"):
        _check_nodes(g)
        g._cache["node_rules"] = True
    # Use before def: every conflicting pair of accesses is ordered by the edges.
    g.check_ordering()
    _check_lifetimes(g)


def carry_node_rules(src: ComputeGraph, dst: ComputeGraph) -> None:
    """Let :func:`verify_graph` of ``dst`` skip the node rules of the nodes ``src`` passed.

    For a ``dst`` made from ``src`` by the stream pass: ``src``'s very buffers, its edges
    and more, and every node of ``src`` (same id) at most moved to another stream. The node
    rules read a node's fields but its stream, its buffers and, for a wait, whether an edge
    joins it to its record, which more edges keep; so a node that passed in ``src`` passes
    in ``dst``, and only the new nodes (events) are checked. Does nothing unless ``src``'s
    node rules were checked and the buffers are the same tuple.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> verify_graph(g)
    >>> h = g.with_changes(edges=g.edges)
    >>> carry_node_rules(g, h)
    >>> verify_graph(h)  # the node rules of g's nodes are not checked again
    """
    if src._cache.get("node_rules") and dst.buffers is src.buffers:
        dst._cache["node_rules_of"] = frozenset(n.id for n in src.nodes)


def _check_nodes(g: ComputeGraph) -> None:
    passed = g._cache.get("node_rules_of", frozenset())
    base = g._cache.pop("node_rules_base", None)
    same = _unchanged_nodes(g, *base) if base is not None else frozenset()
    # The nodes to check, in node order, picked out by C-level passes: a graph made by a
    # pass skips most of its nodes, and a Python test per skipped node cost as much as
    # the checks of the others.
    todo: Any = g.nodes
    for skip in (passed, same):
        if skip:
            todo = list(
                itertools.compress(todo, map(operator.not_, map(skip.__contains__, map(_ID, todo))))
            )
    kernel, conditional, wait = NodeKind.KernelLaunch, NodeKind.Conditional, NodeKind.EventWait
    # (the stream pass's 18k waits: their rule for all at once; each again only if one fails)
    waits_hold = _waits_hold(
        g,
        list(itertools.compress(todo, map(operator.is_, map(_KIND, todo), itertools.repeat(wait)))),
    )
    for n in todo:
        kind = n.kind
        if kind is not wait or not waits_hold:
            _RULES[kind](g, n)
        if kind is not kernel and (n.config is not None or n.fused is not None):
            raise InvalidArgument(f"{context(g, n.id)}: only kernels have a launch config")
        if kind is not conditional and (
            n.cond_kind is not None or n.condition is not None or n.max_iterations
        ):
            raise InvalidArgument(f"{context(g, n.id)}: only conditionals have a condition")
        # (bodies first: a kind's hash is a Python call, and almost no node has bodies)
        if n.bodies and kind not in BODY_KINDS:
            raise InvalidArgument(
                f"{context(g, n.id)}: only child graphs and conditionals have body graphs"
            )


# Kinds whose rules read more than the node and its buffers (a wait: the edges and its
# record; bodies: other graphs): never carried over, always checked again.
# (a tuple: its test compares by identity in C, where a set would call the enum's __hash__)
_READS_MORE = (NodeKind.EventWait, *BODY_KINDS)
_ID = operator.attrgetter("id")
_KIND = operator.attrgetter("kind")
_EVENT = operator.attrgetter("event")
_MEMORY_KINDS = tuple(MEMORY_KINDS)
# Every field of a buffer but its arena offset.
_BUT_OFFSET = operator.attrgetter(*(f for f in Buffer.__slots__ if f != "offset"))


def _unchanged_nodes(
    g: ComputeGraph, nodes: dict[NodeId, GraphNode], buffers: dict[BufferId, Any]
) -> set[NodeId]:
    """The nodes of ``g`` whose node rules must pass because they passed in the graph
    ``g`` was made from (its id -> node and id -> buffer indexes ``nodes``, ``buffers``):
    the very same node object, of a kind whose rules read only the node's own fields and
    the buffers it names (:data:`KERNEL_CHECKS` read only those too), each of those
    buffers the same object or equal to the old one but for its arena offset, which no
    node rule reads. Rechecking such a node would run the same rule on the same values.
    """
    index, bufs = g._cache["node_index"], g._cache["buf_index"]
    other = itertools.compress(
        bufs.items(), map(operator.is_not, bufs.values(), map(buffers.get, bufs))
    )
    changed = {
        bid for bid, b in other if bid not in buffers or _BUT_OFFSET(b) != _BUT_OFFSET(buffers[bid])
    }
    kept = itertools.compress(
        index.items(), map(operator.is_, index.values(), map(nodes.get, index))
    )
    same = {nid for nid, n in kept if n.kind not in _READS_MORE}
    if changed:
        same = {
            nid
            for nid in same
            if changed.isdisjoint(index[nid].inputs) and changed.isdisjoint(index[nid].outputs)
        }
    return same


def body_depth(g: ComputeGraph) -> int:
    """How deep body graphs nest in ``g`` (0: no child graph or conditional), cached.

    >>> from oxiwork.examples import quick_start
    >>> body_depth(quick_start())
    0
    """
    depth = g._cache.get("body_depth")
    if depth is None:
        depth = max((1 + body_depth(b) for n in g.nodes for b in n.bodies), default=0)
        g._cache["body_depth"] = depth
    return depth


def _check_bodies(g: ComputeGraph, n: GraphNode) -> None:
    """Each body verifies, holds only what a body may hold, uses the outer graph's buffers,
    and the node declares exactly the union of its bodies' accesses."""
    where = context(g, n.id)
    if 1 + max(body_depth(b) for b in n.bodies) > validate.MAX_BODY_DEPTH:
        raise InvalidArgument(
            f"{where}: body graphs nest more than {validate.MAX_BODY_DEPTH} deep "
            "(oxiwork.validate.MAX_BODY_DEPTH); flatten the inner ones into their parents"
        )
    reads: set[BufferId] = set()
    writes: set[BufferId] = set()
    for k, body in enumerate(n.bodies):
        body.verify()
        for m in body.nodes:
            if m.kind not in BODY_NODE_KINDS:
                raise InvalidArgument(
                    f"{where}: body {k} holds the {m.kind.noun} {m.name!r}; a body holds only "
                    "kernels, copies, memsets, barriers, child graphs and conditionals (as in "
                    "CUDA): move it into the outer graph, before or after this node"
                )
            if m.kind is NodeKind.Memcpy and m.memcpy_dir in _HOST_COPIES:
                raise InvalidArgument(
                    f"{where}: body {k} holds the host copy {m.name!r}; copies in a body stay "
                    "on the device (as CUDA requires of conditional bodies): copy to or from "
                    "the host in the outer graph"
                )
            reads.update(m.inputs)
            writes.update(m.outputs)
        for b in body.buffers:
            outer = g._cache["buf_index"].get(b.id)
            # The same buffer but for its arena offset, which the memory pass gives the
            # outer graph's buffers only (bodies run on the outer graph's placement).
            same = outer is not None and replace(outer, offset=None) == replace(b, offset=None)
            if not same:
                raise InvalidArgument(
                    f"{where}: body {k} uses buffer {b.name!r} (id {int(b.id)}), which the "
                    "outer graph does not hold as the same buffer; build bodies with "
                    "GraphBuilder.body() so they share the outer graph's buffers"
                )
    if n.condition is not None:
        reads.add(n.condition)
    if set(n.inputs) != reads or set(n.outputs) != writes:

        def names(ids: set[BufferId]) -> str:
            return ", ".join(sorted(repr(g.buffer(b).name) for b in ids)) or "none"

        raise InvalidArgument(
            f"{where}: declares reads {names(set(n.inputs))} and writes "
            f"{names(set(n.outputs))}, but its bodies read {names(reads)} and write "
            f"{names(writes)}; a {n.kind.noun} node lists exactly its bodies' accesses (the "
            "builder does this for you) so that ordering and races see them"
        )


def _check_child(g: ComputeGraph, n: GraphNode) -> None:
    if len(n.bodies) != 1:
        raise InvalidArgument(
            f"{context(g, n.id)}: a child graph node holds one body graph, not {len(n.bodies)}"
        )
    _check_bodies(g, n)


def _check_conditional(g: ComputeGraph, n: GraphNode) -> None:
    where = context(g, n.id)
    if n.cond_kind is None or n.condition is None:
        raise InvalidArgument(f"{where}: a conditional needs a cond_kind and a condition buffer")
    lo, hi = _BODY_COUNTS[n.cond_kind]
    if not lo <= len(n.bodies) <= hi:
        want = f"{lo}" if lo == hi else f"{lo} to {hi}"
        raise InvalidArgument(
            f"{where}: {n.cond_kind.name.upper()} nodes hold {want} bodies, not {len(n.bodies)}"
        )
    if (n.cond_kind is CondKind.While) != (n.max_iterations > 0):
        raise InvalidArgument(
            f"{where}: max_iterations bounds WHILE nodes only (1..{validate.MAX_ITERATIONS}), "
            f"got {n.max_iterations} on a {n.cond_kind.name.upper()} node"
        )
    _check_bodies(g, n)


def _check_memory_node(g: ComputeGraph, n: GraphNode) -> None:
    if n.inputs or len(n.outputs) != 1:
        raise InvalidArgument(
            f"{context(g, n.id)}: a {n.kind.noun} node names exactly one buffer, in outputs"
        )
    buf = g.buffer(n.outputs[0])
    if buf.external or buf.base is not None:
        what = "external (the user owns it)" if buf.external else "a view (it owns no memory)"
        raise InvalidArgument(
            f"{context(g, n.id)}: buffer {buf.name!r} is {what}; only graph-owned buffers "
            "are allocated and freed by the graph"
        )


def _check_lifetimes(g: ComputeGraph) -> None:
    """Graph-owned memory: one alloc before every use, at most one free after every use.

    Runs after :meth:`~ComputeGraph.check_ordering`: alloc and free nodes list their buffer
    as written, so every other access is ordered against them by a path, and the
    topological rank says which way the path goes.
    """
    # Most graphs hold no alloc or free node: found by two C-level counts (a set test of
    # each node's kind would call the enum's Python-level __hash__ per node).
    kinds = list(map(_KIND, g.nodes))
    if not any(map(kinds.count, _MEMORY_KINDS)):
        return
    allocs: dict[BufferId, GraphNode] = {}
    frees: dict[BufferId, GraphNode] = {}
    for n in g.nodes:
        if n.kind not in MEMORY_KINDS:
            continue
        bid = n.outputs[0]
        seen = allocs if n.kind is NodeKind.MemAlloc else frees
        if bid in seen:
            what = "allocated" if n.kind is NodeKind.MemAlloc else "freed"
            raise InvalidLifetime(
                f"buffer {g.buffer(bid).name!r} is {what} twice, by {seen[bid].name!r} (node "
                f"{int(seen[bid].id)}) and {n.name!r} (node {int(n.id)})"
                + ("; a double free: remove one" if what == "freed" else "; remove one"),
                buffer=g.buffer(bid).name,
                node=int(n.id),
            )
        seen[bid] = n
    if not allocs and not frees:
        return
    rank = {nid: k for k, nid in enumerate(g.topological_order())}
    aliases: dict[BufferId, list[BufferId]] = {}
    for view, base in g.views().items():  # a view's accesses use its base's memory
        aliases.setdefault(base, []).append(view)
    for bid, free in frees.items():
        if bid not in allocs:
            raise InvalidLifetime(
                f"{free.name!r} (node {int(free.id)}) frees buffer {g.buffer(bid).name!r}, "
                "which no alloc node of this graph allocates; add one with add_mem_alloc",
                buffer=g.buffer(bid).name,
                node=int(free.id),
            )
    for bid, alloc in allocs.items():
        name = g.buffer(bid).name
        free = frees.get(bid)
        users = [u for v in (bid, *aliases.get(bid, ())) for u in (*g.readers(v), *g.writers(v))]
        for user in users:
            if user == alloc.id or (free is not None and user == free.id):
                continue
            u = g.node(user)
            if rank[user] < rank[alloc.id]:
                raise InvalidLifetime(
                    f"buffer {name!r} is used by {u.name!r} (node {int(user)}) before its "
                    f"alloc node {alloc.name!r} (node {int(alloc.id)}) runs; make "
                    f"{alloc.name!r} come first (the edge {alloc.name!r} -> {u.name!r})",
                    buffer=name,
                    node=int(user),
                )
            if free is not None and rank[user] > rank[free.id]:
                raise InvalidLifetime(
                    f"buffer {name!r} is used by {u.name!r} (node {int(user)}) after its free "
                    f"node {free.name!r} (node {int(free.id)}), a use after free; make "
                    f"{free.name!r} come last (the edge {u.name!r} -> {free.name!r})",
                    buffer=name,
                    node=int(user),
                )


def _check_kernel(g: ComputeGraph, n: GraphNode) -> None:
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
    for check in KERNEL_CHECKS:
        check(g, n)


def _check_memcpy(g: ComputeGraph, n: GraphNode) -> None:
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


def _check_memset(g: ComputeGraph, n: GraphNode) -> None:
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


def _check_wait(g: ComputeGraph, n: GraphNode) -> None:
    rec = g.node(n.event) if n.event is not None else None
    if rec is None or rec.kind is not NodeKind.EventRecord:
        raise InvalidArgument(f"{context(g, n.id)}: an event wait must name an event record")
    d = g.dense()  # the edge rec -> n: rec among n's predecessors (no set of all edges)
    if d.pos[rec.id] not in d.pred[d.pos[n.id]]:
        raise InvalidArgument(
            f"{context(g, n.id)}: waits for {rec.name!r} but does not depend on it"
        )


def _waits_hold(g: ComputeGraph, waits: list[GraphNode]) -> bool:
    """Does :func:`_check_wait` pass for every node of ``waits``? (C-level passes over
    them all: each names a node that is an event record and an edge joins the two.)"""
    if not waits:
        return True
    events = list(map(_EVENT, waits))
    if any(map(operator.is_, events, itertools.repeat(None))):
        return False
    index = g._cache["node_index"]
    recs = list(map(index.get, events))
    if any(map(operator.is_, recs, itertools.repeat(None))) or not all(
        map(operator.is_, map(_KIND, recs), itertools.repeat(NodeKind.EventRecord))
    ):
        return False
    d = g.dense()
    pos = d.pos.__getitem__
    # the record's position among the wait's predecessors' (what _check_wait tests)
    preds = map(d.pred.__getitem__, map(pos, map(_ID, waits)))
    return all(map(tuple.__contains__, preds, map(pos, events)))


def _check_plain(g: ComputeGraph, n: GraphNode) -> None:
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
    NodeKind.ChildGraph: _check_child,
    NodeKind.Conditional: _check_conditional,
    NodeKind.MemAlloc: _check_memory_node,
    NodeKind.MemFree: _check_memory_node,
}
