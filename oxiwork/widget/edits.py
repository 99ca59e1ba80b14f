"""Graph edits requested from the workbench, each a pure ``(graph, request) -> graph``.

Every edit goes through :class:`~oxiwork.builder.GraphBuilder` (``from_graph`` then the
builder's own checks and ``build()``, which verifies the graph), so an invalid edit raises the
builder's :class:`~oxiwork.error.GraphError` and the caller keeps the old graph. A rule table
maps each message type to its edit.

Example
-------
>>> from oxiwork.examples import quick_start
>>> g = quick_start()
>>> g2 = apply_edit(g, {"type": "add_buffer", "name": "tmp", "size_bytes": 1024})
>>> [b.name for b in g2.buffers][-1], len(g.buffers)
('tmp', 3)
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from oxiwork.budget import check_growth
from oxiwork.builder import GraphBuilder
from oxiwork.error import InvalidArgument, MessageError, UnknownBuffer, UnknownNode, UnsupportedOp
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, MemcpyDir, NodeId
from oxiwork.ops.program import bind

__all__ = ["EDITS", "apply_edit"]

_DIRECTION = {
    "h2d": MemcpyDir.HostToDevice,
    "d2h": MemcpyDir.DeviceToHost,
    "d2d": MemcpyDir.DeviceToDevice,
}


def _node(graph: ComputeGraph, nid: int) -> NodeId:
    if not graph.has_node(nid):
        raise UnknownNode(f"there is no node with id {nid} in the current graph; refresh and retry")
    # The builder accepts only the id objects it issued (from_graph issues the graph's own).
    return graph.node(nid).id


def _buffer(graph: ComputeGraph, ref: int | str, what: str) -> BufferId:
    if isinstance(ref, str):
        try:
            return graph.buffer_by_name(ref).id
        except (UnknownBuffer, KeyError):
            known = ", ".join(b.name for b in graph.buffers[:12])
            raise UnknownBuffer(
                f"{what}: no buffer named {ref!r}; known buffers: {known}"
            ) from None
    for b in graph.buffers:
        if b.id == ref:
            return b.id
    raise UnknownBuffer(f"{what}: there is no buffer with id {ref} in the current graph")


def _append(
    g: ComputeGraph, b: GraphBuilder, nid: NodeId, ins: list[BufferId], outs: list[BufferId]
) -> None:
    """Order a node added in the UI after every existing access it conflicts with.

    The builder orders unrelated accesses by creation order only among nodes it cannot order
    otherwise, so a new kernel reading ``output`` could be placed before ``output``'s writer.
    A node added from the UI means "append to the program": it reads what the existing
    writers produced and overwrites only after the existing readers and writers.
    """
    before: set[NodeId] = set()
    for bid in ins:
        before.update(g.writers(bid))
    for bid in outs:
        before.update(g.writers(bid))
        before.update(g.readers(bid))
    for p in sorted(before):
        b.dep(g.node(p).id, nid)


def _add_buffer(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    b = GraphBuilder.from_graph(g)
    b.alloc_buffer(m["name"], m["size_bytes"], m.get("dtype", "float32"))
    return b.build()


def _add_kernel(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    name = m["name"]
    ins = [_buffer(g, r, f"kernel {name!r} input") for r in m["inputs"]]
    outs = [_buffer(g, r, f"kernel {name!r} output") for r in m["outputs"]]
    if not outs:
        raise InvalidArgument(f"kernel {name!r} writes no buffer; give it at least one output")
    b = GraphBuilder.from_graph(g)
    kb = b.add_kernel_3d(name, tuple(m["grid"]), tuple(m["block"]))  # type: ignore[arg-type]
    op = m.get("op")
    if op:
        kb.op(op)
        from oxiwork import ops

        od = ops.get(op)
        # Element-wise ops are fusible by construction; the others keep the default.
        fc = getattr(getattr(od, "fusion_class", None), "value", "")
        kb.fusible(fc == "elementwise")
    kb.inputs(ins).outputs(outs)
    if m.get("params"):
        kb.params(**m["params"])
    nid = kb.finish()
    _append(g, b, nid, ins, outs)
    new = b.build()
    node = new.node(nid)
    if node.op is not None:
        # A kernel of a known op must fit it (arity, parameter names and types, shapes)
        # now, not when the simulator reaches it; an opaque kernel has nothing to check.
        with contextlib.suppress(UnsupportedOp):
            bind(new, node)
    return new


def _add_memcpy(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    name = m["name"]
    direction = _DIRECTION[m["direction"]]
    src = (
        None
        if m.get("src") in (None, "") or direction is MemcpyDir.HostToDevice
        else _buffer(g, m["src"], f"copy {name!r} source")
    )
    dst = (
        None
        if m.get("dst") in (None, "") or direction is MemcpyDir.DeviceToHost
        else _buffer(g, m["dst"], f"copy {name!r} destination")
    )
    size = m.get("size_bytes")
    if size is None:
        sizes = [g.buffer(x).size_bytes for x in (src, dst) if x is not None]
        if not sizes:
            raise InvalidArgument(
                f"copy {name!r} names no device buffer; pick a source or destination"
            )
        size = min(sizes)
    b = GraphBuilder.from_graph(g)
    nid = b.add_memcpy(name, direction, size, src=src, dst=dst)
    _append(g, b, nid, [src] if src is not None else [], [dst] if dst is not None else [])
    return b.build()


def _add_dependency(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    a, c = _node(g, m["src"]), _node(g, m["dst"])
    b = GraphBuilder.from_graph(g)
    b.dep(a, c)
    return b.build()


def _delete(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    if "node" in m:
        nid = _node(g, m["node"])
        waits = [n.name for n in g.nodes if n.event == nid]
        if waits:
            raise InvalidArgument(
                f"{g.node(nid).name!r} is the event record that {', '.join(map(repr, waits))} "
                "wait for; delete the waits first"
            )
        nodes = tuple(n for n in g.nodes if n.id != nid)
        edges = tuple(e for e in g.edges if nid not in e)
        reduced = g.with_changes(nodes=nodes, edges=edges)
    else:
        bid = _buffer(g, m["buffer"], "delete")
        users = [n.name for n in g.nodes if bid in n.inputs or bid in n.outputs]
        if users:
            raise InvalidArgument(
                f"buffer {g.buffer(bid).name!r} is used by {', '.join(map(repr, users[:5]))}; "
                "delete or change those nodes first"
            )
        reduced = g.with_changes(buffers=tuple(x for x in g.buffers if x.id != bid))
    # Rebuild so that data edges are inferred again and the result is verified.
    return GraphBuilder.from_graph(reduced).build()


def _rename(g: ComputeGraph, m: dict[str, Any]) -> ComputeGraph:
    new = m["name"]
    # The name rule (oxiwork.validate.name) is applied by with_changes to the renamed node
    # or buffer, with the builder's message.
    if "node" in m:
        nid = _node(g, m["node"])
        nodes = tuple(n.replace(name=new) if n.id == nid else n for n in g.nodes)
        renamed = g.with_changes(nodes=nodes)
    else:
        bid = _buffer(g, m["buffer"], "rename")
        if any(x.name == new and x.id != bid for x in g.buffers):
            raise InvalidArgument(f"a buffer named {new!r} already exists; pick another name")
        bufs = tuple(dataclasses.replace(x, name=new) if x.id == bid else x for x in g.buffers)
        renamed = g.with_changes(buffers=bufs)
    return GraphBuilder.from_graph(renamed).build()


EDITS: dict[str, Callable[[ComputeGraph, dict[str, Any]], ComputeGraph]] = {
    "add_buffer": _add_buffer,
    "add_kernel": _add_kernel,
    "add_memcpy": _add_memcpy,
    "add_dependency": _add_dependency,
    "delete": _delete,
    "rename": _rename,
}


def apply_edit(graph: ComputeGraph, message: dict[str, Any]) -> ComputeGraph:
    """Apply one validated edit request to ``graph`` and return the new, verified graph.

    Raises the builder's :class:`~oxiwork.error.GraphError` for an invalid edit (the caller
    keeps ``graph``), :class:`~oxiwork.error.BudgetExceeded` for an edit growing the graph
    past :func:`oxiwork.budget.current`, or :class:`~oxiwork.error.MessageError` for a type
    that is not an edit.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> try:
    ...     apply_edit(g, {"type": "add_dependency", "src": 3, "dst": 0})
    ... except Exception as e:
    ...     print(type(e).__name__)
    CycleError
    """
    fn = EDITS.get(message.get("type", ""))
    if fn is None:
        raise MessageError(f"{message.get('type')!r} is not an edit")
    new = fn(graph, message)
    check_growth(graph, new)  # nodes, buffers and bytes within oxiwork.budget.current()
    return new
