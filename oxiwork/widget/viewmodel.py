"""The workbench view-model: plain JSON-able dicts computed kernel-side, one section per view.

The frontend (``widget_js/src``) is a pure function of these sections, so everything the
user sees comes from the engine, and a section with nothing to show (no plan for a graph the
pipeline rejected, no streams before the stream pass) is an explicit
``{"available": False, "reason": ...}`` that the view shows instead of data. The TypeScript
mirror of these shapes is ``widget_js/src/types.ts``.

Sections (keys of :func:`view_model`):

``dag``
    Per-node columns for the DAG view. Names, kinds and ops travel as JSON lists; the numeric
    columns (ids, ASAP levels, streams, critical flags, fusion groups, dominator parents,
    slack, cost) travel as one binary buffer packed by :func:`pack_dag` so that 10k-node
    graphs stay cheap.
``passes``
    One entry per point of the pass slider: the input graph, then the graph after each pass.
``memory``
    The memory Gantt chart of the memory pass's plan (for the plan's own stream schedule):
    one rectangle per planned buffer (steps x arena bytes), the arena size and the pass's
    lower bounds.
``streams``
    The plan's stream timeline (:mod:`oxiwork.executor.timeline`): one bar per step on its
    stream's lane, from the cost model, the event arrows between lanes, and the totals of the
    two launch modes (one CUDA graph launch versus a launch per kernel).
``sim``
    The simulator's steps, position, race reports, and what to highlight in the other views.

Example
-------
>>> from oxiwork.examples import quick_start
>>> meta, blob = dag_section(quick_start())
>>> meta["num_nodes"], meta["names"]
(4, ['upload', 'relu', 'scale', 'download'])
>>> unpack_dag(blob)["level"]
[0, 1, 2, 3]
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from oxiwork import cost, ops
from oxiwork.analysis import dominance, topo
from oxiwork.analysis.dominance import DomTree
from oxiwork.analysis.topo import TopoInfo
from oxiwork.error import GraphError
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.timeline import LAUNCHED, timeline
from oxiwork.executor.timeline import MODES as TIMELINE_MODES
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, GraphNode, NodeId, NodeKind
from oxiwork.optimizer import memory
from oxiwork.optimizer.memory_pass import MemoryReport, plan_memory
from oxiwork.render.dot import body_title

MAX_FUSION_ROWS = 24
"""Most "why not fused" rows the details panel gets for one node (a wide fan-out has many)."""

__all__ = [
    "FLOAT_COLUMNS",
    "INT_COLUMNS",
    "KINDS",
    "MAGIC",
    "NO_STREAMS",
    "STATE_CREATED",
    "STATE_NORMAL",
    "STATE_REMOVED",
    "body_sections",
    "buffers_section",
    "dag_section",
    "fusion_index",
    "has_streams",
    "inspector_section",
    "memory_node_marks",
    "memory_section",
    "node_details",
    "ops_section",
    "pack_dag",
    "plan_figures",
    "replan_memory",
    "streams_section",
    "summary_section",
    "topo_analysis",
    "topo_info",
    "unavailable",
    "unpack_dag",
    "value_summary",
]

# Binary layout shared with widget_js/src/dagdata.ts (keep both in step).
MAGIC = 0x4F584457  # "OXDW"
VERSION = 1
INT_COLUMNS = ("id", "level", "kind", "stream", "critical", "group", "idom", "ipdom", "state")
FLOAT_COLUMNS = ("slack", "cost", "asap")
STATE_NORMAL, STATE_CREATED, STATE_REMOVED = 0, 1, 2
KINDS: tuple[str, ...] = tuple(k.value for k in NodeKind)
_KIND_CODE = {k: i for i, k in enumerate(NodeKind)}

# Histogram bins and the number of values shipped to the buffer inspector.
HIST_BINS = 24
INSPECT_VALUES = 4096


def unavailable(reason: str) -> dict[str, Any]:
    """A section the engine cannot provide; the view shows ``reason`` instead of data.

    >>> unavailable("no stream assignment yet")
    {'available': False, 'reason': 'no stream assignment yet'}
    """
    return {"available": False, "reason": reason}


def pack_dag(
    n: int,
    ints: Mapping[str, Sequence[int] | np.ndarray],
    src: Sequence[int] | np.ndarray,
    dst: Sequence[int] | np.ndarray,
    floats: Mapping[str, Sequence[float] | np.ndarray],
) -> bytes:
    """Pack the DAG columns: an Int32 header, Int32 columns, the edges, Float32 columns.

    Missing columns default to the same values as the TypeScript encoder.

    >>> blob = pack_dag(2, {"level": [0, 1]}, [0], [1], {})
    >>> unpack_dag(blob)["dst"]
    [1]
    """
    defaults = {"id": None, "level": 0, "kind": 0, "stream": -1, "critical": 0, "group": -1,
                "idom": -1, "ipdom": -1, "state": 0}  # fmt: skip
    m = len(src)
    parts = [np.array([MAGIC, VERSION, n, m, len(INT_COLUMNS), len(FLOAT_COLUMNS), 0, 0], "<i4")]
    for c in INT_COLUMNS:
        if c in ints:
            col = np.asarray(ints[c], dtype="<i4")
        elif c == "id":
            col = np.arange(n, dtype="<i4")
        else:
            col = np.full(n, defaults[c], dtype="<i4")
        if col.shape != (n,):
            raise ValueError(f"column {c!r} has {col.shape[0]} entries, expected {n}")
        parts.append(col)
    parts.append(np.asarray(src, dtype="<i4").reshape(m))
    parts.append(np.asarray(dst, dtype="<i4").reshape(m))
    for c in FLOAT_COLUMNS:
        col = np.asarray(floats[c], dtype="<f4") if c in floats else np.zeros(n, "<f4")
        parts.append(col.reshape(n))
    return b"".join(p.tobytes() for p in parts)


def unpack_dag(blob: bytes) -> dict[str, list[Any]]:
    """Inverse of :func:`pack_dag` (for tests and debugging).

    >>> unpack_dag(pack_dag(1, {}, [], [], {"slack": [0.5]}))["slack"]
    [0.5]
    """
    magic, version, n, m, ni, nf, _, _ = struct.unpack_from("<8i", blob, 0)
    if magic != MAGIC or version != VERSION or ni != len(INT_COLUMNS) or nf != len(FLOAT_COLUMNS):
        raise ValueError("not an oxiwork DAG blob of this version")
    off = 32
    out: dict[str, list[Any]] = {}
    for c in INT_COLUMNS:
        out[c] = np.frombuffer(blob, "<i4", n, off).tolist()
        off += 4 * n
    out["src"] = np.frombuffer(blob, "<i4", m, off).tolist()
    off += 4 * m
    out["dst"] = np.frombuffer(blob, "<i4", m, off).tolist()
    off += 4 * m
    for c in FLOAT_COLUMNS:
        out[c] = np.frombuffer(blob, "<f4", n, off).tolist()
        off += 4 * n
    return out


def _levels(graph: ComputeGraph) -> list[int]:
    """ASAP level per dense position (:func:`oxiwork.analysis.topo.level_positions`), as a
    list the caller may extend with ghosts."""
    return list(topo.level_positions(graph))


# An engine bug in an analysis must not take the drawing down: the view draws without it
# and the colour modes that need it show the error instead.
def _guarded(what: str, fn: Callable[[], Any]) -> tuple[Any, str]:
    try:
        return fn(), ""
    except Exception as e:
        return None, f"{what} failed: {type(e).__name__}: {e}"


def _topo(graph: ComputeGraph) -> tuple[TopoInfo | None, str]:
    """Topological analysis under the cost model (the nodes' own costs if the model fails)."""
    costs, _ = _guarded("cost model", lambda: cost.node_costs(graph))
    return _guarded("topological analysis", lambda: topo.analyze(graph, costs=costs))


def _dominance(graph: ComputeGraph) -> tuple[tuple[DomTree, DomTree] | None, str]:
    return _guarded(
        "dominance analysis",
        lambda: (dominance.dominators(graph), dominance.post_dominators(graph)),
    )


def dag_section(
    graph: ComputeGraph,
    *,
    before: ComputeGraph | None = None,
    created: Iterable[NodeId] = (),
    removed: Iterable[NodeId] = (),
    title: str = "",
    pass_index: int = 0,
    analysis: tuple[TopoInfo | None, str] | None = None,
) -> tuple[dict[str, Any], bytes]:
    """The DAG view's columns for ``graph`` (and ghosts of the nodes a pass removed).

    Parameters
    ----------
    graph
        The graph to draw.
    before
        The graph before the pass (needed to draw the ``removed`` nodes as ghosts).
    created, removed
        Node ids the pass created (in ``graph``) and removed (from ``before``).
    title, pass_index
        Shown in the header; which slider position this is.
    analysis
        :func:`topo_analysis` of ``graph`` if the caller has it (the cost model is the
        expensive part of a big graph's view: computed once per graph, not per section).

    Returns
    -------
    (meta, blob)
        ``meta`` is the JSON part (names, kinds, ops, counts, anchors), ``blob`` the packed
        numeric columns (:func:`pack_dag`). Positions ``0..n-1`` are ``graph``'s nodes in id
        order; removed ghosts follow.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> meta, blob = dag_section(quick_start())
    >>> meta["has_topo"], unpack_dag(blob)["src"]
    (True, [0, 1, 2])
    """
    d = graph.dense()
    ids = list(d.ids)
    pos = dict(d.pos)
    nodes = [graph.node(i) for i in ids]
    level = _levels(graph)
    info, topo_error = analysis if analysis is not None else _topo(graph)
    doms, dom_error = _dominance(graph)
    created_set = set(created)
    state = [STATE_CREATED if i in created_set else STATE_NORMAL for i in ids]

    # Fusion groups: one colour per fused kernel; its ghosts (the originals) share it.
    group_of_fused: dict[NodeId, int] = {}
    for n in nodes:
        if n.fused is not None or n.fused_from:
            group_of_fused[n.id] = len(group_of_fused)
    group = [group_of_fused.get(i, -1) for i in ids]
    origin_group = {
        o: group_of_fused[n.id] for n in nodes if n.id in group_of_fused for o in n.fused_from
    }
    anchors = [[pos[n.id], [int(x) for x in n.fused_from]] for n in nodes if n.fused_from]

    names = [n.name for n in nodes]
    kinds = [_KIND_CODE[n.kind] for n in nodes]
    ops = [n.op or ("fused" if n.fused is not None else "") for n in nodes]
    streams = [int(n.stream) if n.stream is not None else -1 for n in nodes]
    src = [pos[a] for a, _ in graph.edges]
    dst = [pos[b] for _, b in graph.edges]
    if info is not None:
        critical_set = info.critical_nodes
        critical = [1 if i in critical_set else 0 for i in ids]
        slack = [info.slack[i] for i in ids]
        asap = [info.asap[i] for i in ids]
        cost_col = [info.cost[i] for i in ids]
    else:
        critical, slack, asap = [0] * len(ids), [0.0] * len(ids), [0.0] * len(ids)
        cost_col = [n.cost or 1.0 for n in nodes]
    if doms is not None:
        dom, post = doms
        idom = [pos[p] if (p := dom.idom.get(i)) is not None else -1 for i in ids]
        ipdom = [pos[p] if (p := post.idom.get(i)) is not None else -1 for i in ids]
    else:
        idom, ipdom = [-1] * len(ids), [-1] * len(ids)

    # Ghosts: removed nodes of `before`, at their old level, with no edges.
    if before is not None:
        blevel = _levels(before)
        bpos = before.dense().pos
        for rid in sorted(set(removed)):
            if not before.has_node(rid):
                continue
            rn = before.node(rid)
            ids.append(rid)
            names.append(rn.name)
            kinds.append(_KIND_CODE[rn.kind])
            ops.append(rn.op or "")
            streams.append(int(rn.stream) if rn.stream is not None else -1)
            level.append(blevel[bpos[rid]])
            state.append(STATE_REMOVED)
            group.append(origin_group.get(rid, -1))
            critical.append(0)
            slack.append(0.0)
            asap.append(0.0)
            cost_col.append(0.0)
            idom.append(-1)
            ipdom.append(-1)

    n = len(ids)
    blob = pack_dag(
        n,
        {"id": [int(i) for i in ids], "level": level, "kind": kinds, "stream": streams,
         "critical": critical, "group": group, "idom": idom, "ipdom": ipdom, "state": state},
        src,
        dst,
        {"slack": slack, "cost": cost_col, "asap": asap},
    )  # fmt: skip
    notes = {}
    if all(s < 0 for s in streams[: len(d.ids)]):
        notes["stream"] = "no stream assigned at this point of the pipeline"
    if not group_of_fused:
        notes["group"] = "no fused kernels at this point of the pipeline"
    if info is None:
        notes["slack"] = notes["critical"] = topo_error
    if doms is None:
        notes["dominator"] = notes["postdominator"] = dom_error
    # One list for all holders, so a nested body's ``parent`` indexes this list.
    bodies: list[dict[str, Any]] = []
    for n in nodes:
        _add_bodies(n, pos[n.id], -1, bodies)
    meta = {
        "available": True,
        "names": names,
        "kinds": list(KINDS),
        "ops": ops,
        "num_nodes": len(d.ids),
        "num_edges": len(graph.edges),
        # The header's count: the buffers of the graph on screen, as in the details panel.
        "num_buffers": len(graph.buffers),
        "num_streams": len({s for s in streams[: len(d.ids)] if s >= 0}),
        "num_groups": len(group_of_fused),
        "has_topo": info is not None,
        "has_dominance": doms is not None,
        "title": title,
        "anchors": anchors,
        "pass_index": pass_index,
        "notes": notes,
        "bodies": bodies,
    }
    return meta, blob


def body_sections(n: GraphNode, at: int, parent: int = -1) -> list[dict[str, Any]]:
    """The body graphs of a child graph or conditional node ``n`` (at DAG position ``at``)
    for the DAG view, which draws each collapsed into ``n`` by default and expanded as a
    framed cluster: per body its title (:func:`oxiwork.render.dot.body_title`), its nodes'
    names and kinds (codes into ``KINDS``) and its edges as index pairs into them. Nested
    bodies follow their parent's, with ``parent`` its index in this list plus ``node``, the
    index inside the parent body of the node that holds them (``at`` for outer bodies).

    >>> from oxiwork import course
    >>> g = course.countdown_branch()
    >>> n = next(n for n in g.nodes if n.bodies)
    >>> [b["title"] for b in body_sections(n, 0)][:1] == [body_title(n, 0)]
    True
    """
    out: list[dict[str, Any]] = []
    _add_bodies(n, at, parent, out)
    return out


def _add_bodies(n: GraphNode, at: int, parent: int, out: list[dict[str, Any]]) -> None:
    for k, body in enumerate(n.bodies):
        index = {m.id: i for i, m in enumerate(body.nodes)}
        me = len(out)
        out.append(
            {
                "node": at,
                "parent": parent,
                "title": body_title(n, k),
                "names": [m.name for m in body.nodes],
                "kinds": [_KIND_CODE[m.kind] for m in body.nodes],
                "edges": [[index[a], index[b]] for a, b in body.edges],
            }
        )
        for m in body.nodes:
            _add_bodies(m, index[m.id], me, out)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


def _fmt_time(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    return f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.3f} s"


def _plural(n: int, word: str) -> str:
    """``"1 stream"``, ``"3 streams"``.

    >>> _plural(1, "stream"), _plural(3, "step")
    ('1 stream', '3 steps')
    """
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def summary_section(
    graph: ComputeGraph,
    plan: ExecutionPlan | None = None,
    notes: Mapping[str, str] | None = None,
    analysis: tuple[TopoInfo | None, str] | None = None,
) -> list[list[str]]:
    """Graph-level facts for the details panel when nothing is selected: ``[label, value]``.

    >>> from oxiwork.examples import quick_start
    >>> dict(summary_section(quick_start()))["nodes"]
    '4 (2 copies, 2 kernels)'
    """
    counts: dict[str, int] = {}
    for n in graph.nodes:
        counts[n.kind.value] = counts.get(n.kind.value, 0) + 1
    words = {"kernel": "kernels", "memcpy": "copies", "memset": "memsets",
             "event_record": "event records", "event_wait": "event waits",
             "host_callback": "host callbacks", "barrier": "barriers",
             "child_graph": "child graphs", "conditional": "conditionals",
             "mem_alloc": "memory allocs", "mem_free": "memory frees"}  # fmt: skip
    parts = ", ".join(f"{c} {words.get(k, k)}" for k, c in counts.items())
    rows = [
        ["nodes", f"{graph.num_nodes} ({parts})"],
        [
            "buffers",
            f"{len(graph.buffers)} · "
            f"{_fmt_bytes(sum(b.size_bytes for b in graph.buffers if b.base is None))}",
        ],
    ]
    info, _ = analysis if analysis is not None else _topo(graph)
    if info is not None:
        rows.append(
            [
                "critical path",
                f"{len(info.critical_path)} nodes · {_fmt_time(info.makespan)}"
                " (dependencies only, no launch overheads)",
            ]
        )
    if plan is not None:
        rows.append(
            [
                "plan",
                f"{_plural(len(plan.steps), 'step')} on {_plural(plan.num_streams, 'stream')}"
                f" · pool {_fmt_bytes(plan.pool_bytes)}",
            ]
        )
    for key, text in sorted((notes or {}).items()):
        rows.append([key, text])
    return rows


def buffers_section(graph: ComputeGraph) -> list[dict[str, Any]]:
    """The buffer list for the build panel and the inspector.

    >>> from oxiwork.examples import quick_start
    >>> [b["name"] for b in buffers_section(quick_start())]
    ['input', 'mid', 'output']
    """
    return [
        {
            "id": int(b.id),
            "name": b.name,
            "size_bytes": int(b.size_bytes),
            "dtype": b.dtype,
            "shape": list(b.shape) if b.shape is not None else None,
            "external": bool(b.external),
        }
        for b in graph.buffers
    ]


def ops_section() -> list[dict[str, Any]]:
    """The op library for the "add kernel" form: name, arity, default params, fusion class.

    >>> any(o["name"] == "relu" for o in ops_section())
    True
    """
    return [
        {
            "name": name,
            "arity": int(op.arity),
            "params": {k: _jsonable(v) for k, v in op.params},
            "fusion_class": op.fusion_class.value,
        }
        for name, op in sorted(ops.REGISTRY.items())
    ]


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    return str(v)


def topo_analysis(graph: ComputeGraph) -> tuple[TopoInfo | None, str]:
    """The topological analysis under the cost model and, if the engine failed, why.

    >>> from oxiwork.examples import quick_start
    >>> info, error = topo_analysis(quick_start())
    >>> info.makespan > 0, error
    (True, '')
    """
    return _topo(graph)


def topo_info(graph: ComputeGraph) -> TopoInfo | None:
    """The topological analysis under the cost model, or ``None`` if the engine failed on it.

    >>> from oxiwork.examples import quick_start
    >>> topo_info(quick_start()).makespan > 0
    True
    """
    return _topo(graph)[0]


def fusion_index(
    original: ComputeGraph, not_fused: Mapping[tuple[NodeId, NodeId], str]
) -> dict[NodeId, list[list[str]]]:
    """Per original node, why it was not fused with each kernel it shares an edge with:
    ``[direction, other kernel's name, reason]`` rows (direction ``"after"`` for a
    producer, ``"before"`` for a consumer), from the fusion pass's ``not_fused``.

    >>> from oxiwork.examples import random_op_dag
    >>> from oxiwork.optimizer.fusion import fuse
    >>> g = random_op_dag(4, 13, reductions=True)
    >>> idx = fusion_index(g, fuse(g).artefacts["not_fused"])
    >>> all(row[0] in ("after", "before") and row[2] for rows in idx.values() for row in rows)
    True
    """
    out: dict[NodeId, list[list[str]]] = {}
    for (a, b), reason in not_fused.items():
        out.setdefault(a, []).append(["before", original.node(b).name, reason])
        out.setdefault(b, []).append(["after", original.node(a).name, reason])
    return out


def node_details(
    graph: ComputeGraph,
    nid: NodeId,
    costs: Mapping[NodeId, float] | None = None,
    info: TopoInfo | None = None,
    fusion: Mapping[NodeId, list[list[str]]] | None = None,
) -> dict[str, Any]:
    """Everything the details panel shows about one node.

    ``fusion`` is a :func:`fusion_index`: with it, ``details["fusion"]`` lists why the node
    (or, for a fused kernel, each of its members) was not fused with its neighbouring
    kernels. ``details["source"]`` is the generated CUDA C of a kernel that has one.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> d = node_details(g, g.nodes[1].id)
    >>> d["name"], d["inputs"], d["successors"]
    ('relu', ['input'], ['scale'])
    >>> d["source"].splitlines()[1].startswith('extern "C" __global__ void relu')
    True
    """
    n = graph.node(nid)
    if info is None:
        info = (
            _topo(graph)[0]
            if costs is None
            else _guarded("topological analysis", lambda: topo.analyze(graph, costs=costs))[0]
        )
    bname = {b.id: b.name for b in graph.buffers}
    cfg = None
    if n.config is not None:
        c = n.config
        cfg = f"grid {c.grid} · block {c.block}" + (
            f" · smem {c.shared_mem_bytes} B" if c.shared_mem_bytes else ""
        )
    fused_from = []
    for f in n.fused_from:
        fused_from.append(f"#{int(f)}")
    if n.fused is not None:
        fused_from = [f"{s.op} (#{int(s.node)})" for s in n.fused.steps]
    return {
        "id": int(n.id),
        "name": n.name,
        "kind": n.kind.value,
        "op": n.op or ("fused" if n.fused is not None else None),
        "stream": int(n.stream) if n.stream is not None else None,
        "inputs": [bname.get(b, f"#{int(b)}") for b in n.inputs],
        "outputs": [bname.get(b, f"#{int(b)}") for b in n.outputs],
        "predecessors": [graph.node(p).name for p in graph.predecessors(n.id)],
        "successors": [graph.node(s).name for s in graph.successors(n.id)],
        "config": cfg,
        "params": [[k, str(v)] for k, v in n.params] + _graph_node_rows(graph, n),
        "fused_from": fused_from,
        "cost": info.cost[n.id] if info is not None else n.cost,
        "asap": info.asap[n.id] if info is not None else None,
        "alap": info.alap[n.id] if info is not None else None,
        "slack": info.slack[n.id] if info is not None else None,
        "critical": (n.id in info.critical_nodes) if info is not None else None,
        "fusion": _fusion_rows(n, fusion),
        "source": _source(graph, n),
    }


def _graph_node_rows(graph: ComputeGraph, n: GraphNode) -> list[list[str]]:
    """Rows for the details panel of a child graph, conditional or memory node: the
    condition, each body and the nodes in it, or the buffer whose lifetime it bounds."""
    rows: list[list[str]] = []
    if n.condition is not None:
        rows.append(["condition", f"{graph.buffer(n.condition).name} (its first element)"])
    for k, body in enumerate(n.bodies):
        names = ", ".join(m.name for m in body.nodes[:8]) + (", …" if len(body.nodes) > 8 else "")
        rows.append([body_title(n, k), f"{_plural(len(body.nodes), 'node')}: {names or 'none'}"])
    if n.kind is NodeKind.MemAlloc or n.kind is NodeKind.MemFree:
        buf = graph.buffer(n.outputs[0])
        what = "allocates" if n.kind is NodeKind.MemAlloc else "frees"
        rows.append(["lifetime", f"{what} {buf.name} ({_fmt_bytes(buf.size_bytes)}, graph-owned)"])
    return rows


def _fusion_rows(n: GraphNode, fusion: Mapping[NodeId, list[list[str]]] | None) -> list[list[str]]:
    """The node's rows of a :func:`fusion_index` (its members' for a fused kernel; the
    edges between members were fused, so they have none), at most
    :data:`MAX_FUSION_ROWS`."""
    if not fusion:
        return []
    rows = [row for m in (n.fused_from or (n.id,)) for row in fusion.get(m, ())]
    return rows[:MAX_FUSION_ROWS]


def _source(graph: ComputeGraph, n: GraphNode) -> str | None:
    """The CUDA C a kernel launches, or None (not a kernel, opaque, or no CUDA code)."""
    if not n.is_kernel or (n.op is None and n.fused is None):
        return None
    try:
        return ops.kernel_source(graph, n).source
    except GraphError:
        return None


def memory_section(graph: ComputeGraph, report: MemoryReport) -> dict[str, Any]:
    """The memory Gantt chart of a memory-pass ``report`` (buffer names from ``graph``).

    Only plans made by the memory pass (:func:`oxiwork.optimizer.memory_pass.plan_memory`)
    for the plan's own stream schedule are drawn: a plan over one order's liveness can put
    two buffers of concurrent streams on the same bytes (below the pass's proven bound, and
    racing). Each rectangle is a buffer's safe interval over the pass's issue order (steps)
    by its arena bytes; external buffers are user-owned, not in the arena, so not drawn.

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.optimizer.memory_pass import plan_memory
    >>> g = quick_start()
    >>> m = memory_section(g, plan_memory(g).artefacts["memory"])
    >>> len(m["buffers"]), m["arena_bytes"] >= m["lower_bound_bytes"]
    (3, True)
    """
    d = report.to_dict()
    names = {b.id: b.name for b in graph.buffers}
    rects = [
        {
            "id": r["id"],
            "name": names.get(BufferId(r["id"]), f"#{r['id']}"),
            "start": r["start"],
            "end": r["end"],
            "offset": r["offset"],
            "size": r["size"],
        }
        for r in d["buffers"]
    ]
    rects += _view_rects(graph, report, {r["id"]: r for r in rects})
    drawn = {r["id"] for r in rects}
    marks = [m for m in memory_node_marks(graph, report.order) if m["buffer"] in drawn]
    num_steps = max([len(report.order), *(r["end"] for r in rects)])
    return {
        "available": True,
        "mode": report.mode,
        "modes": list(memory.MODES),
        "arena_bytes": int(d["arena_bytes"]),
        "lower_bound_bytes": int(d["lower_bound"]),
        # The plan's bound on several streams is the heavier of plain liveness over one
        # order and a set of buffers no event orders (``conflict_clique``): show both.
        "liveness_bound_bytes": int(d.get("liveness_lower_bound", d["lower_bound"])),
        "bound_buffers": [int(b) for b in d.get("conflict_clique", ())]
        if d.get("conflict_lower_bound", 0) > d.get("liveness_lower_bound", d["lower_bound"])
        else [],
        "num_steps": int(num_steps),
        "buffers": rects,
        "strategy": d.get("strategy", ""),
        "optimal": bool(d.get("optimal", False)),
        # Graph-owned buffers: where their memory alloc and free nodes bound the bar.
        "marks": marks,
    }


def memory_node_marks(graph: ComputeGraph, order: Sequence[NodeId]) -> list[dict[str, Any]]:
    """Where memory alloc and free nodes bound a graph-owned buffer's lifetime, in steps
    of ``order`` (an issue order of ``graph``'s nodes): an alloc at the start of its step,
    a free at the end of its step (every use of the buffer lies between the two).

    The one definition both the widget's memory chart and
    :func:`oxiwork.render.figures.memory` draw.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> t = b.alloc_buffer("scratch", 64)
    >>> a = b.add_mem_alloc("alloc", t)
    >>> _ = b.add_memset("fill", 64, 0, dst=t)
    >>> f = b.add_mem_free("free", t)
    >>> [(m["kind"], m["step"]) for m in memory_node_marks(b.build(), [a, 1, f])]
    [('alloc', 0), ('free', 3)]
    """
    out = []
    for i, nid in enumerate(order):
        if not graph.has_node(nid):
            continue
        n = graph.node(nid)
        if n.kind is NodeKind.MemAlloc and n.outputs:
            out.append({"kind": "alloc", "buffer": int(n.outputs[0]), "step": i, "node": int(nid)})
        elif n.kind is NodeKind.MemFree and n.outputs:
            out.append(
                {"kind": "free", "buffer": int(n.outputs[0]), "step": i + 1, "node": int(nid)}
            )
    return out


def _view_rects(
    graph: ComputeGraph, report: MemoryReport, placed: Mapping[int, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """A rectangle per view of a drawn base, inside the base's bar: the bytes of the base it
    covers, over the steps it is used (views hold no bytes of their own, so the memory
    pass drew none). Listed after the bases, so they are drawn, and hovered, on top."""
    views = graph.views()
    if not views:
        return []
    steps: dict[BufferId, list[int]] = {}
    for i, nid in enumerate(report.order):
        if graph.has_node(nid):
            n = graph.node(nid)
            for b in (*n.inputs, *n.outputs):
                if b in views:
                    steps.setdefault(b, []).append(i)
    out = []
    for v, at in steps.items():
        base = placed.get(int(views[v]))
        if base is None:
            continue
        b = graph.buffer(v)
        out.append(
            {
                "id": int(v),
                "name": b.name,
                "start": min(at),
                "end": max(at) + 1,
                "offset": base["offset"] + b.view_offset * b.itemsize,
                "size": (b.view_extent - b.view_offset) * b.itemsize,
                "view_of": base["id"],
            }
        )
    return out


def replan_memory(pass_input: ComputeGraph, mode: str, time_limit: float = 2.0) -> MemoryReport:
    """The memory pass re-run on its own input (the stream pass's output) in another ``mode``.

    The pass derives its issue order from the graph's streams, so this plans the same
    schedule as the plan's own memory pass: switching the planner changes the placement,
    never the schedule it must be safe for.

    >>> from oxiwork.examples import transformer_block
    >>> plan = ExecutionPlan.build(transformer_block(1), max_streams=4)
    >>> before = next(t.before for t in plan.trace if t.name == "memory")
    >>> r = replan_memory(before, "exact")
    >>> r.mode, r.arena_bytes >= plan.memory.lower_bound == r.lower_bound
    ('exact', True)
    """
    limit = time_limit if mode == "exact" else None
    return plan_memory(pass_input, mode=mode, time_limit=limit).artefacts["memory"]


NO_STREAMS = "no stream assignment yet: move the pass slider past the stream pass"


def has_streams(graph: ComputeGraph) -> bool:
    """Whether the stream pass has run on ``graph`` (some node has a stream).

    >>> from oxiwork.examples import quick_start
    >>> has_streams(quick_start())
    False
    """
    return any(n.stream is not None for n in graph.nodes)


def streams_section(
    plan: ExecutionPlan, *, mode: str = "graph", profile: cost.DeviceProfile | None = None
) -> dict[str, Any]:
    """The stream timeline of ``plan``: :func:`oxiwork.executor.timeline.timeline`, for drawing.

    One lane per stream, one bar per step (``step`` is its index in ``plan.steps``, ``node``
    the node it runs), event ``arrows`` from a record to its wait, the makespan of ``mode``
    and ``totals`` of both launch modes. ``work`` (every step back to back on one stream,
    launch overheads excluded) and ``critical_path`` (dependencies only, launch overheads
    excluded) bound the makespan from above and below for comparison.

    Raises
    ------
    InvalidArgument
        Unknown ``mode``.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> s = streams_section(ExecutionPlan.build(quick_start()), mode="stream")
    >>> [b["name"] for b in s["bars"]], s["totals"]["graph"] < s["totals"]["stream"]
    (['upload', 'relu+scale', 'download'], True)
    """
    p = profile or cost.DeviceProfile()
    d = timeline(plan, p, mode).to_dict()
    node_of = {st.index: int(st.node) for st in plan.steps}
    for b in d["bars"]:
        b["node"] = node_of[b["step"]]
    costs, _ = _guarded("cost model", lambda: cost.node_costs(plan.graph, p))
    info, _ = _guarded("topological analysis", lambda: topo.analyze(plan.graph, costs=costs))
    return {
        "available": True,
        "mode": d["mode"],
        "modes": list(TIMELINE_MODES),
        "num_streams": d["num_streams"],
        "lanes": d["lanes"],
        "bars": d["bars"],
        "arrows": d["arrows"],
        "makespan": d["makespan"],
        "totals": d["totals"],
        "work": sum(b["end"] - b["start"] for b in d["bars"]),
        "critical_path": info.makespan if info is not None else None,
        # The stream pass's own list schedule (no events, no launch overheads), which the
        # tour prints as the "schedule" of a plan.
        "schedule": float(plan.streams.makespan) if plan.streams is not None else None,
        # Steps the host launches one by one in stream mode: with short kernels that mode is
        # host-bound (launches x overhead), whatever the number of streams.
        "launches": sum(1 for st in plan.steps if st.kind in LAUNCHED),
        "overheads": {"stream": p.launch_overhead_stream, "graph": p.launch_overhead_graph},
        "time_unit": "s",
    }


MAX_COMPARED_NAMES = 2000
"""Most kernels whose names :func:`plan_figures` lists (the compare view diffs them)."""


def plan_figures(plan: ExecutionPlan, profile: cost.DeviceProfile | None = None) -> dict[str, Any]:
    """The figures the compare view sets side by side for a plan: its options, kernels,
    steps, streams, events, arena and the modelled times (each named as in the stream view).

    >>> from oxiwork.examples import quick_start
    >>> f = plan_figures(ExecutionPlan.build(quick_start()))
    >>> f["kernels"], f["events"], f["kernel_names"]
    (1, 0, ['relu+scale'])
    """
    p = profile or cost.DeviceProfile()
    tl = timeline(plan, p, "graph")
    costs, _ = _guarded("cost model", lambda: cost.node_costs(plan.graph, p))
    info, _ = _guarded("topological analysis", lambda: topo.analyze(plan.graph, costs=costs))
    kernels = sorted(n.name for n in plan.graph.nodes if n.is_kernel)
    mem = plan.memory
    return {
        "options": {k: plan.options[k] for k in ("max_streams", "fusion", "max_group_size")},
        "kernels": len(kernels),
        "kernels_before_fusion": int(plan.kernel_count_original),
        # For the diff of kernels (none listed for huge plans: the counts still compare).
        "kernel_names": kernels if len(kernels) <= MAX_COMPARED_NAMES else [],
        "steps": len(plan.steps),
        "streams": int(plan.num_streams),
        "events": int(plan.event_count),
        "arena_bytes": int(plan.pool_bytes),
        "lower_bound_bytes": int(mem.lower_bound) if mem is not None else None,
        "graph_launch": float(tl.totals["graph"]),
        "stream_launches": float(tl.totals["stream"]),
        "critical_path": float(info.makespan) if info is not None else None,
    }


def inspector_section(
    name: str, buffer_id: int, dtype: str, value: np.ndarray | None
) -> tuple[dict[str, Any], bytes]:
    """Statistics and a value sample of one buffer for the inspector.

    Returns the JSON part and the first :data:`INSPECT_VALUES` values as float64 bytes.

    >>> info, raw = inspector_section("x", 0, "float32", np.array([1.0, np.nan, 3.0]))
    >>> info["min"], info["max"], info["nan_count"], len(raw)
    (1.0, 3.0, 1, 24)
    """
    if value is None:
        return (
            {"available": True, "buffer": int(buffer_id), "name": name, "dtype": dtype,
             "shape": [], "count": 0, "shown": 0, "min": None, "max": None, "mean": None,
             "nan_count": 0, "hist": [], "hist_lo": 0.0, "hist_hi": 0.0, "written": False},
            b"",
        )  # fmt: skip
    arr = np.asarray(value)
    flat = arr.astype(np.float64, copy=False).ravel()
    finite = flat[np.isfinite(flat)]
    stats = _value_stats(flat)
    if finite.size:
        lo, hi = stats["min"], stats["max"]
        # A constant buffer gets a window around its value, scaled to its magnitude so the
        # bins stay representable for huge values.
        pad = 0.0 if hi > lo else 0.5 * max(1.0, abs(lo))
        hist, _ = np.histogram(finite, bins=HIST_BINS, range=(lo - pad, hi + pad))
    else:
        lo = hi = 0.0
        hist = np.zeros(HIST_BINS, dtype=int)
    shown = flat[:INSPECT_VALUES]
    info = {
        "available": True,
        "buffer": int(buffer_id),
        "name": name,
        "dtype": str(arr.dtype) if dtype == "" else dtype,
        "shape": [int(s) for s in arr.shape],
        "count": int(flat.size),
        "shown": int(shown.size),
        **stats,
        "hist": [int(h) for h in hist],
        "hist_lo": lo,
        "hist_hi": hi,
        "written": True,
    }
    return info, shown.astype("<f8").tobytes()


def _value_stats(arr: np.ndarray) -> dict[str, Any]:
    """Min/max/mean of the finite values (``None`` without any) and the NaN count: what
    the inspector and a step's buffer rows show.

    float32 and float64 are read in place when every value is finite (a step of a real
    model touches weights of hundreds of MB: no float64 copy, no gather of the finite ones);
    the mean accumulates in float64 either way."""
    flat = arr.ravel()
    if flat.dtype not in (np.float32, np.float64):
        flat = flat.astype(np.float64)
    ok = np.isfinite(flat)
    every = bool(ok.all())
    finite = flat if every else flat[ok]
    some = bool(finite.size)
    return {
        "min": float(finite.min()) if some else None,
        "max": float(finite.max()) if some else None,
        "mean": float(finite.mean(dtype=np.float64)) if some else None,
        "nan_count": 0 if every else int(np.isnan(flat).sum()),
    }


#: Leading values a step's buffer row shows (the inspector shows up to INSPECT_VALUES).
HEAD_VALUES = 6


def value_summary(name: str, buffer_id: int, role: str, value: np.ndarray) -> dict[str, Any]:
    """One buffer a simulator step touched, as its row in the simulator panel: shape,
    dtype, min/max/mean (finite values), NaN count and the first :data:`HEAD_VALUES` values
    (a non-finite one as the string ``"nan"``, ``"inf"`` or ``"-inf"``: the state is strict
    JSON).

    >>> row = value_summary("y", 3, "write", np.array([[1.0, np.inf], [3.0, -1.0]], np.float32))
    >>> row["shape"], row["dtype"], row["min"], row["max"], row["head"]
    ([2, 2], 'float32', -1.0, 3.0, [1.0, 'inf', 3.0, -1.0])
    """
    arr = np.asarray(value)
    stats = _value_stats(arr)
    first = arr.ravel()[:HEAD_VALUES].astype(np.float64)
    head = [float(v) if np.isfinite(v) else str(v) for v in first.tolist()]
    return {
        "buffer": int(buffer_id), "name": name, "role": role, "dtype": arr.dtype.name,
        "shape": [int(s) for s in arr.shape], "count": int(arr.size), **stats, "head": head,
    }  # fmt: skip


def fused_origin(graph: ComputeGraph, node: GraphNode) -> tuple[NodeId, ...]:
    """Ids a node stands for: itself, plus the originals if it is a fused kernel.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> fused_origin(g, g.nodes[0])
    (NodeId(0),)
    """
    return (node.id, *node.fused_from)
