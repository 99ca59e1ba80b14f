"""Graphviz renders: DOT text of graphs, plans, dominator trees and lowered CUDA graphs,
and SVG through Debian's ``dot`` binary (via the ``graphviz`` package).

Every name is escaped before it goes into DOT (backslash, quote, control characters), so a
hostile name can neither end a label nor add nodes, edges or attributes; graphviz then
escapes the text for XML in the SVG it writes.

Example
-------
>>> from oxiwork.examples import quick_start
>>> text = graph_dot(quick_start(), color="slack")
>>> text.splitlines()[0], text.count(" -> ")
('digraph oxiwork {', 3)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from oxiwork import cost
from oxiwork.analysis import dominance, topo
from oxiwork.error import BackendUnavailable, GraphError, InvalidArgument
from oxiwork.graph import ComputeGraph
from oxiwork.node import CondKind, GraphNode, NodeId, NodeKind
from oxiwork.render import _style as st

__all__ = [
    "COLOR_MODES",
    "SVG_MAX_NODES",
    "GraphvizMissing",
    "body_title",
    "cuda_graph_dot",
    "domtree_dot",
    "escape",
    "graph_dot",
    "mimebundle",
    "plan_dot",
    "to_svg",
]

SVG_MAX_NODES = 2000
"""Most nodes a notebook display lays out with ``dot`` (beyond, the layout takes minutes);
bigger graphs show as text with a hint to use the aggregated matplotlib views."""

_SHAPES = {
    NodeKind.KernelLaunch: "box",
    NodeKind.Memcpy: "cds",
    NodeKind.Memset: "box3d",
    NodeKind.EventRecord: "diamond",
    NodeKind.EventWait: "diamond",
    NodeKind.HostCallback: "ellipse",
    NodeKind.Barrier: "octagon",
    NodeKind.ChildGraph: "folder",
    NodeKind.Conditional: "hexagon",
    NodeKind.MemAlloc: "invhouse",
    NodeKind.MemFree: "house",
}


class GraphvizMissing(BackendUnavailable):
    """The graphviz ``dot`` program is not installed, so DOT cannot be turned into SVG."""


def escape(text: str) -> str:
    """``text`` as the inside of a DOT double-quoted string: control characters become
    visible escapes (``\\x1b``), ``&`` an entity (graphviz decodes entities), then
    backslashes and quotes are escaped.

    >>> escape('say "hi"\\\\n')
    'say \\\\"hi\\\\"\\\\\\\\n'
    """
    # graphviz decodes HTML entities in labels ("&amp;" -> "&"), so "&" is written as one.
    return st.printable(text).replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"')


def _attrs(**kw: Any) -> str:
    """``k="v"`` pairs; a tuple value is lines of text, joined by DOT's line break (a name's
    own newline is escaped by :func:`escape`, so only ours break lines)."""

    def one(v: Any) -> str:
        if isinstance(v, tuple):
            return "\\n".join(escape(str(x)) for x in v)
        return escape(str(v))

    return ", ".join(f'{k}="{one(v)}"' for k, v in kw.items() if v is not None)


def _plan_maps(plan: Any) -> tuple[dict[NodeId, int], dict[NodeId, int]]:
    """Original node id -> fused group index (groups of 2+ only) and -> stream."""
    group: dict[NodeId, int] = {}
    stream: dict[NodeId, int] = {}
    g = 0
    for step in plan.steps:
        for n in step.fused_nodes:
            stream[n] = int(step.stream)
        if len(step.fused_nodes) > 1:
            for n in step.fused_nodes:
                group[n] = g
            g += 1
    return group, stream


def _colours(
    graph: ComputeGraph, color: str, plan: Any
) -> tuple[dict[NodeId, str], list[tuple[str, str]]]:
    """Fill colour per node and a legend, for colour mode ``color`` (the widget's modes)."""
    ids = graph.node_ids
    if color == "kind":
        fill = {n.id: st.KIND_COLORS.get(n.kind.value, st.MUTED) for n in graph.nodes}
        kinds = sorted({n.kind.value for n in graph.nodes})
        return fill, [(k, st.KIND_COLORS.get(k, st.MUTED)) for k in kinds]
    if color in ("level", "slack"):
        info = topo.analyze(graph, cost.node_costs(graph))
        if color == "level":
            fill = {i: st.PALETTE[info.level[i] % len(st.PALETTE)] for i in ids}
            return fill, [
                (f"level {k} (colours repeat every 10)", st.PALETTE[k])
                for k in range(min(3, len(info.level_widths)))
            ]
        top = max(info.slack.values(), default=0.0)
        fill = {i: st.slack_color(info.slack[i], top) for i in ids}
        return fill, [
            ("no slack (critical)", st.STRONG),
            (f"slack {st.format_time(top)}", st.SLACK_MAX),
        ]
    # group / stream: from the graph itself once a pass has set them, else from a plan.
    if color == "stream" and any(n.stream is not None for n in graph.nodes):
        fill = {n.id: st.stream_color(n.stream) for n in graph.nodes}
        present = sorted({int(n.stream) for n in graph.nodes if n.stream is not None})
        return fill, [(f"stream {s}", st.stream_color(s)) for s in present]
    if color == "group" and any(n.fused_from for n in graph.nodes):
        fill = {
            n.id: st.PALETTE[k % len(st.PALETTE)] if len(n.fused_from) > 1 else st.MUTED
            for k, n in enumerate(graph.nodes)
        }
        return fill, [("fused kernel (colour per kernel)", st.PALETTE[0]), ("not fused", st.MUTED)]
    if plan is None:
        from oxiwork.executor.plan import ExecutionPlan

        plan = ExecutionPlan.build(graph)
    group, stream = _plan_maps(plan)
    if color == "stream":
        fill = {i: st.stream_color(stream.get(i)) for i in ids}
        return fill, [(f"stream {s}", st.stream_color(s)) for s in sorted(set(stream.values()))]
    fill = {i: st.PALETTE[group[i] % len(st.PALETTE)] if i in group else st.MUTED for i in ids}
    return fill, [("fusion group (colour per group)", st.PALETTE[0]), ("not fused", st.MUTED)]


COLOR_MODES: tuple[str, ...] = ("kind", "group", "stream", "level", "slack")
"""Node colourings of :func:`graph_dot`: the widget's modes of the same names."""


def _legend(items: list[tuple[str, str]]) -> list[str]:
    if not items:
        return []
    lines = ['  subgraph cluster_legend { label="legend"; fontsize=10; style=dashed;']
    for k, (label, colour) in enumerate(items):
        lines.append(
            f"    legend{k} [{_attrs(label=label, fillcolor=colour)}, shape=box, style=filled, fontsize=9];"
        )
    lines.append("  }")
    return lines


def graph_dot(
    graph: ComputeGraph,
    *,
    color: str = "kind",
    plan: Any = None,
    legend: bool = True,
) -> str:
    """DOT text of ``graph``, each node filled by colour mode ``color``.

    Parameters
    ----------
    graph
        The graph (any stage).
    color
        One of :data:`COLOR_MODES`: ``"kind"``, ``"group"`` (fused group), ``"stream"``,
        ``"level"`` or ``"slack"`` (cost model). ``group`` and ``stream`` of an input graph
        come from ``plan`` (built with the defaults when not given).
    plan
        The :class:`~oxiwork.executor.plan.ExecutionPlan` of ``graph``, for ``group`` and
        ``stream``.
    legend
        Add a legend cluster.

    Raises
    ------
    InvalidArgument
        Unknown ``color``.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> text = graph_dot(quick_start(), color="group")
    >>> text.count('fillcolor="#4e79a7"') >= 2  # relu and scale share a group colour
    True
    """
    if color not in COLOR_MODES:
        raise InvalidArgument(f"unknown colour mode {color!r}; use one of {', '.join(COLOR_MODES)}")
    fill, items = _colours(graph, color, plan)
    lines = [
        "digraph oxiwork {",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10, style=filled];',
        '  edge [color="#9aa5b4"];',
    ]
    for n in graph.nodes:
        label = (n.name, n.kind.value)
        lines.append(
            f"  n{int(n.id)} [{_attrs(label=label, tooltip=n.name, fillcolor=fill[n.id])}, "
            f"shape={_SHAPES[n.kind]}];"
        )
    lines += [f"  n{int(a)} -> n{int(b)};" for a, b in graph.edges]
    bodies = [line for n in graph.nodes for line in _body_clusters(n, f"n{int(n.id)}", "  ")]
    if bodies:  # an edge may end at a cluster only in a compound graph
        lines.insert(1, "  compound=true;")
        lines += bodies
    if legend:
        lines += _legend(items)
    lines.append("}")
    return "\n".join(lines) + "\n"


def body_title(n: GraphNode, k: int) -> str:
    """What body ``k`` of a child graph or conditional node is: ``then``, ``case 2``...

    (Also the widget's details panel's words for it.)

    >>> from oxiwork import course
    >>> g = course.countdown_branch()
    >>> body_title(next(n for n in g.nodes if n.name == "count down"), 0)
    'count down: while ≠ 0 (≤ 16×)'
    """
    if n.kind is NodeKind.ChildGraph:
        return f"{n.name}: child graph"
    kind = n.cond_kind
    if kind is CondKind.If:
        return f"{n.name}: {'then' if k == 0 else 'else'}"
    if kind is CondKind.While:
        return f"{n.name}: while ≠ 0 (≤ {n.max_iterations}×)"
    return f"{n.name}: case {k}"


def _body_clusters(n: GraphNode, name: str, indent: str) -> list[str]:
    """One dashed cluster per body of ``n`` (nested bodies inside), its nodes filled by
    kind, and a dotted edge from ``n`` (DOT id ``name``) into it."""
    lines: list[str] = []
    for k, body in enumerate(n.bodies):
        cluster = f"cluster_{name}_b{k}"
        lines.append(
            f"{indent}subgraph {cluster} {{ {_attrs(label=body_title(n, k))}; style=dashed; "
            'color="#9aa5b4"; fontsize=9;'
        )
        ids = {m.id: f"{name}_b{k}_{int(m.id)}" for m in body.nodes}
        if not body.nodes:  # an empty body still shows as a box
            ids = {}
            lines.append(f'{indent}  {name}_b{k}_empty [label="(empty)", shape=plaintext];')
        for m in body.nodes:
            fill = st.KIND_COLORS.get(m.kind.value, st.MUTED)
            lines.append(
                f"{indent}  {ids[m.id]} [{_attrs(label=(m.name, m.kind.value), tooltip=m.name, fillcolor=fill)}, "
                f"shape={_SHAPES[m.kind]}];"
            )
        lines += [f"{indent}  {ids[a]} -> {ids[b]};" for a, b in body.edges]
        for m in body.nodes:
            lines += _body_clusters(m, ids[m.id], indent + "  ")
        lines.append(f"{indent}}}")
        first = ids[body.nodes[0].id] if body.nodes else f"{name}_b{k}_empty"
        lines.append(
            f"{indent}{name} -> {first} [lhead={cluster}, style=dotted, arrowhead=odot, "
            "constraint=false];"
        )
    return lines


def plan_dot(plan: Any) -> str:
    """DOT text of a plan's final graph: steps filled by stream colour (the widget's),
    dependency edges grey, each event wait a red dashed edge from its record.

    (No cluster per stream: ``dot`` takes minutes on clusters plus cross edges at a few
    hundred steps, seconds without.)

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.executor.plan import ExecutionPlan
    >>> text = plan_dot(ExecutionPlan.build(quick_start()))
    >>> 'label="0: upload' in text, "stream 0" in text
    (True, True)
    """
    lines = [
        "digraph plan {",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10, style=filled, shape=box];',
        '  edge [color="#9aa5b4"];',
    ]
    records = {s.event: s.index for s in plan.steps if s.kind is NodeKind.EventRecord}
    for step in plan.steps:
        kind = step.kind.value if step.event is None else f"{step.kind.value} e{step.event}"
        label = (f"{step.index}: {step.name}", f"{kind} · stream {int(step.stream)}")
        attrs = _attrs(label=label, tooltip=step.name, fillcolor=st.stream_color(int(step.stream)))
        lines.append(f"  s{step.index} [{attrs}, shape={_SHAPES[step.kind]}];")
    index = {s.node: s.index for s in plan.steps}
    for a, b in plan.graph.edges:
        if a in index and b in index:
            lines.append(f"  s{index[a]} -> s{index[b]};")
    for step in plan.steps:
        if step.kind is NodeKind.EventWait and step.event in records:
            lines.append(
                f"  s{records[step.event]} -> s{step.index} "
                f'[color="{st.STRONG}", style=dashed, constraint=false];'
            )
    lines.append("}")
    return "\n".join(lines) + "\n"


def domtree_dot(graph: ComputeGraph, *, post: bool = False) -> str:
    """DOT text of the (post-)dominator tree of ``graph``: the virtual entry (exit) on
    top, an edge from each node's immediate dominator.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> text = domtree_dot(quick_start(), post=True)
    >>> 'label="virtual exit"' in text, text.count(" -> ")
    (True, 4)
    """
    tree = dominance.post_dominators(graph) if post else dominance.dominators(graph)
    root = "virtual exit" if post else "virtual entry"
    lines = [
        "digraph domtree {" if not post else "digraph postdomtree {",
        '  node [fontname="Helvetica", fontsize=10, style=filled];',
        f"  root [{_attrs(label=root, fillcolor=st.MUTED)}, shape=point, width=0.15];",
    ]
    for n in graph.nodes:
        lines.append(
            f"  n{int(n.id)} [{_attrs(label=n.name, fillcolor=st.KIND_COLORS.get(n.kind.value, st.MUTED))}, "
            f"shape={_SHAPES[n.kind]}];"
        )
    for n in graph.nodes:
        parent = tree.idom[n.id]
        lines.append(f"  {'root' if parent is None else f'n{int(parent)}'} -> n{int(n.id)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


_DESC_COLORS = {
    "kernel": st.KIND_COLORS["kernel"],
    "memcpy": st.KIND_COLORS["memcpy"],
    "memset": st.KIND_COLORS["memset"],
    "host": st.KIND_COLORS["host_callback"],
    "event_record": st.KIND_COLORS["event_record"],
    "event_wait": st.KIND_COLORS["event_wait"],
    "empty": st.MUTED,
}


def _desc_label(n: Any) -> tuple[str, ...]:
    head = (f"{n.index}: {n.kind.upper()}", n.name)
    if n.kind == "kernel":
        grid = ",".join(str(v) for v in n.grid or ())
        block = ",".join(str(v) for v in n.block or ())
        return (*head, str(n.function_name), f"grid ({grid}) block ({block})",
                f"smem {n.smem} B, {len(n.args)} args")  # fmt: skip
    if n.kind == "memcpy":
        return (*head, f"{n.direction} {n.nbytes:,} B")
    if n.kind == "memset":
        return (*head, f"value 0x{n.value:x} x {n.width:,} ({n.element_size} B each)")
    if n.kind in ("event_record", "event_wait"):
        return (*head, f"event {n.event}")
    if n.kind == "conditional":
        return (*head, f"{n.cond_type} · handle {n.handle} · {len(n.bodies)} body graph(s)")
    if n.kind in ("mem_alloc", "mem_free"):
        return (*head, f"{n.dst[1] if n.dst else '?'} {n.nbytes:,} B")
    return head


def _desc_bodies(n: Any, name: str, indent: str) -> list[str]:
    """The body graphs of a lowered child graph / conditional node as dashed clusters."""
    lines: list[str] = []
    for k, body in enumerate(n.bodies):
        cluster = f"cluster_{name}_b{k}"
        title = "child graph" if n.kind == "child_graph" else f"{n.cond_type} body {k}"
        lines.append(f"{indent}subgraph {cluster} {{ {_attrs(label=title)}; style=dashed;")
        ids = [f"{name}_b{k}_{m.index}" for m in body.nodes]
        for m, i in zip(body.nodes, ids, strict=True):
            fill = _DESC_COLORS.get(m.kind, st.MUTED)
            lines.append(
                f"{indent}  {i} [{_attrs(label=_desc_label(m), tooltip=m.name, fillcolor=fill)}];"
            )
        lines += [f"{indent}  {ids[a]} -> {ids[b]};" for a, b in body.edges]
        for m, i in zip(body.nodes, ids, strict=True):
            lines += _desc_bodies(m, i, indent + "  ")
        if not body.nodes:
            ids = [f"{name}_b{k}_empty"]
            lines.append(f'{indent}  {ids[0]} [label="(empty)", shape=plaintext];')
        lines.append(f"{indent}}}")
        lines.append(
            f"{indent}{name} -> {ids[0]} [lhead={cluster}, style=dotted, constraint=false];"
        )
    return lines


def cuda_graph_dot(desc: Any) -> str:
    """DOT text of a lowered CUDA graph (:class:`~oxiwork.executor.lowering.GraphDesc`, or a
    plan, lowered with :func:`~oxiwork.executor.lowering.lower`), in the style of
    ``cudaGraphDebugDotPrint``: one box per graph node with its kind, name, kernel function,
    launch dimensions and bytes; the graph's dependency edges.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.executor.plan import ExecutionPlan
    >>> text = cuda_graph_dot(ExecutionPlan.build(quick_start()))
    >>> "KERNEL" in text and "grid (4,1,1) block (256,1,1)" in text
    True
    """
    if hasattr(desc, "steps"):
        from oxiwork.executor.lowering import lower

        desc = lower(desc)
    lines = [
        "digraph cuda_graph {",
        f"  {_attrs(label=f'CUDA graph: {len(desc.nodes)} nodes, {len(desc.edges)} edges, {desc.arch}')};",
        '  node [fontname="Courier", fontsize=9, style=filled, shape=box];',
    ]
    for n in desc.nodes:
        lines.append(
            f"  g{n.index} [{_attrs(label=_desc_label(n), tooltip=n.name, fillcolor=_DESC_COLORS.get(n.kind, st.MUTED))}];"
        )
    lines += [f"  g{a} -> g{b};" for a, b in desc.edges]
    bodies = [line for n in desc.nodes for line in _desc_bodies(n, f"g{n.index}", "  ")]
    if bodies:
        lines.insert(1, "  compound=true;")
        lines += bodies
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(dot_source: str, *, engine: str = "dot") -> str:
    """Lay out ``dot_source`` with graphviz and return the SVG text.

    Raises
    ------
    GraphvizMissing
        The ``dot`` program is not installed (with how to install it).
    GraphError
        graphviz refused the input.

    Examples
    --------
    >>> to_svg("digraph { a -> b }").lstrip().startswith("<?xml")
    True
    """
    import graphviz

    try:
        return graphviz.Source(dot_source, engine=engine).pipe(format="svg", encoding="utf-8")
    except graphviz.ExecutableNotFound:
        raise GraphvizMissing(
            f"graphviz's {engine!r} program was not found on PATH, so DOT cannot be drawn as "
            "SVG; install it (Debian/Ubuntu: `apt-get install graphviz`, macOS: `brew install "
            "graphviz`, conda: `conda install graphviz`), or use to_dot() and the matplotlib "
            "views of oxiwork.render"
        ) from None
    except graphviz.CalledProcessError as e:
        raise GraphError(f"graphviz could not lay the graph out: {e}") from None


def mimebundle(obj: Any, dot: Callable[[], str], text: str, nodes: int) -> Mapping[str, str]:
    """Jupyter's display bundle of ``obj``: SVG (from ``dot()``) and plain text; text only
    (saying why) when ``dot`` is missing or the graph has over :data:`SVG_MAX_NODES` nodes."""
    if nodes > SVG_MAX_NODES:
        return {"text/plain": f"{text}\n(too big to lay out with dot: use oxiwork.render.dag)"}
    try:
        return {"image/svg+xml": to_svg(dot()), "text/plain": text}
    except GraphError as e:
        return {"text/plain": f"{text}\n({e})"}
