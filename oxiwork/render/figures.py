"""matplotlib figures of the workbench's views, one function per view.

Each function returns a :class:`matplotlib.figure.Figure` and takes ``ax=`` (an Axes to draw
into) where a view is one panel. Colours and names are the widget's (``_style``). Many
marks of one kind are drawn as one collection (one path per buffer, step, edge or event
wait), which keeps a 5,000-node graph fast; the collections carry a ``gid`` naming what
they hold, so tests and callers can find them. Above ``aggregate_above`` nodes, the DAG and
the dominator trees are drawn aggregated (nodes per level or depth) instead of as an
unreadable hairball.

Figures are made with :class:`matplotlib.figure.Figure` directly, not ``pyplot``, so no GUI
backend or global figure list is involved (a notebook shows a returned Figure as an image).

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> plan = ExecutionPlan.build(quick_start())
>>> fig = memory(plan)
>>> [c.get_gid() for c in fig.axes[0].collections]
['buffers']
>>> len(fig.axes[0].collections[0].get_paths())  # one rectangle per planned buffer
2
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import matplotlib.colors
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path

from oxiwork import cost
from oxiwork.analysis import dominance, topo
from oxiwork.analysis.dominance import DomTree
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.timeline import MODES, timeline
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId
from oxiwork.render import _style as st
from oxiwork.render.summary import COLUMNS, pass_rows

__all__ = [
    "AGGREGATE_ABOVE",
    "VIEWS",
    "buffer_histogram",
    "dag",
    "dominator_tree",
    "memory",
    "output_histograms",
    "pass_summary",
    "streams",
]

AGGREGATE_ABOVE = 1500
"""Above this many nodes the DAG and the trees are drawn aggregated (per level / depth)."""

LABEL_NODES = 400
"""Most nodes whose names are written next to them in the DAG and tree views."""

_INK = "#1b2430"
_FONT = 6.5


BATCH_ABOVE = 1500
"""Above this many rectangles (buffers, steps) or arrows a view draws them as one compound
path per colour instead of one path each: the same geometry in a handful of SVG elements
(a 5,000-node plan's timeline otherwise writes 14,000 SVG paths, several seconds)."""


def _batched_rects(ax: Axes, polys: list[Any], colors: list[str], gid: str, **kw: Any) -> None:
    """Rectangles as one PathPatch per colour, each with gid ``gid``."""
    by_colour: dict[str, list[Any]] = {}
    for poly, c in zip(polys, colors, strict=True):
        by_colour.setdefault(c, []).append(poly)
    for c, ps in by_colour.items():
        path = Path.make_compound_path_from_polys(np.asarray(ps, dtype=float))
        # add_artist, not add_patch: the limits are set by the caller, and add_patch's
        # update of them walks every Bezier segment (seconds for thousands of bars).
        ax.add_artist(PathPatch(path, facecolor=c, edgecolor="none", gid=gid, **kw))


def _batched_lines(ax: Axes, segs: list[Any], gid: str, **kw: Any) -> None:
    """Segments as one Line2D broken by NaNs (one SVG path for all of them)."""
    xy = np.full((3 * len(segs), 2), np.nan)
    if segs:
        arr = np.asarray(segs, dtype=float)
        xy[0::3], xy[1::3] = arr[:, 0], arr[:, 1]
    ax.add_line(Line2D(xy[:, 0], xy[:, 1], gid=gid, **kw))


def new_figure(
    size: tuple[float, float],
    *,
    left: float = 0.9,
    bottom: float = 0.65,
    top: float = 0.45,
    right: float = 0.2,
    wspace: float = 0.35,
) -> Figure:
    """A Figure with fixed margins in inches (matplotlib's constrained layout draws every
    figure twice to measure it: several seconds on a view with hundreds of labels)."""
    w, h = size
    fig = Figure(figsize=size)
    fig.subplots_adjust(left=min(0.4, left / w), right=1 - min(0.2, right / w),
                        bottom=min(0.4, bottom / h), top=1 - min(0.3, top / h), wspace=wspace)  # fmt: skip
    return fig


def _axes(ax: Axes | None, size: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = new_figure(size)
    return fig, fig.add_subplot()


def _unit(max_bytes: float) -> tuple[float, str]:
    for scale, unit in ((1, "B"), (1024, "KiB"), (1024**2, "MiB")):
        if max_bytes < 1024 * scale:
            return float(scale), unit
    return float(1024**3), "GiB"


def _fitter(ax: Axes, fontsize: float) -> Callable[[float, float, str], bool]:
    """``fits(width, height, text)``: whether ``text`` at ``fontsize`` fits in a data-space
    box of ``width`` x ``height`` on ``ax`` (its limits set; measured once per axes, as
    thousands of boxes are tested)."""
    fig = ax.figure
    bbox = ax.get_position()
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    sx = bbox.width * fig.get_figwidth() * fig.dpi / abs(x1 - x0)
    sy = bbox.height * fig.get_figheight() * fig.dpi / abs(y1 - y0)
    char = 0.6 * fontsize * fig.dpi / 72
    line = 1.3 * fontsize * fig.dpi / 72

    def fits(width: float, height: float, text: str) -> bool:
        return width * sx > char * len(text) + 4 and height * sy > line

    return fits


# ---------------------------------------------------------------------- DAG by level
def _dag_positions(
    graph: ComputeGraph, info: topo.TopoInfo
) -> tuple[dict[NodeId, tuple[float, float]], int]:
    """x = level, y = rank within the level; long graphs fold into bands of levels (a
    band below the other, like lines of text), so a 170-level chain stays legible."""
    by_level: dict[int, list[NodeId]] = {}
    for nid in info.order:
        by_level.setdefault(info.level[nid], []).append(nid)
    nlevels = len(info.level_widths)
    width = max(info.level_widths, default=1)
    per_band = nlevels if nlevels <= 48 else max(24, math.ceil(nlevels / math.ceil(nlevels / 48)))
    bands = math.ceil(nlevels / per_band) if nlevels else 1
    pos: dict[NodeId, tuple[float, float]] = {}
    for lvl, ids in by_level.items():
        band, col = divmod(lvl, per_band)
        for k, nid in enumerate(ids):
            pos[nid] = (float(col), -(band * (width + 1.5) + k + (width - len(ids)) / 2))
    return pos, bands


def dag(
    graph: ComputeGraph,
    *,
    ax: Axes | None = None,
    costs: dict[NodeId, float] | None = None,
    aggregate_above: int = AGGREGATE_ABOVE,
) -> Figure:
    """The DAG drawn by level, nodes coloured by slack, the critical path in red.

    Parameters
    ----------
    graph
        The graph (any stage: input, fused, planned).
    ax
        Axes to draw into (a new figure otherwise).
    costs
        Node costs in seconds (default: the cost model, :func:`oxiwork.cost.node_costs`).
    aggregate_above
        Above this many nodes, draw the number of nodes per level instead (split into
        nodes with and without slack).

    Returns
    -------
    Figure
        Collections ``nodes`` (one point per node), ``edges`` (one segment per edge) and
        ``critical path`` (one segment per edge of the path).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> ax = dag(quick_start()).axes[0]
    >>> {c.get_gid(): len(c.get_offsets() if c.get_gid() == "nodes" else c.get_segments())
    ...  for c in ax.collections}
    {'edges': 3, 'critical path': 3, 'nodes': 4}
    """
    info = topo.analyze(graph, costs if costs is not None else cost.node_costs(graph))
    n = graph.num_nodes
    if n > aggregate_above:
        return _dag_aggregated(graph, info, ax)
    pos, bands = _dag_positions(graph, info)
    cols = min(len(info.level_widths), 48) or 1
    width = max(info.level_widths, default=1)
    fig, ax = _axes(
        ax, (min(18.0, max(5.0, 2 + cols * 0.36)), min(24.0, 1.5 + bands * (width + 1.5) * 0.32))
    )

    def faint_across_bands(segs: list[Any], colour: str) -> list[Any]:
        # An edge into the next band runs back across the figure: draw it faintly, so the
        # bands stay readable and the edge can still be followed.
        rgba = matplotlib.colors.to_rgba(colour)
        return [rgba if b[0] >= a[0] else (*rgba[:3], 0.18) for a, b in segs]

    segs = [(pos[a], pos[b]) for a, b in graph.edges]
    ax.add_collection(LineCollection(segs, colors=faint_across_bands(segs, "#9aa5b4"),
                                     linewidths=0.6, gid="edges"))  # fmt: skip
    path = info.critical_path
    crit = [(pos[a], pos[b]) for a, b in itertools.pairwise(path)]
    ax.add_collection(LineCollection(crit, colors=faint_across_bands(crit, st.STRONG),
                                     linewidths=1.8, gid="critical path"))  # fmt: skip
    max_slack = max(info.slack.values(), default=0.0)
    ids = list(info.order)
    xy = np.array([pos[i] for i in ids]) if ids else np.zeros((0, 2))
    ax.scatter(
        xy[:, 0],
        xy[:, 1],
        s=28,
        c=[st.slack_color(info.slack[i], max_slack) for i in ids],
        edgecolors=[st.KIND_COLORS.get(graph.node(i).kind.value, st.MUTED) for i in ids],
        linewidths=1.0,
        zorder=3,
        gid="nodes",
    )
    if n <= LABEL_NODES:
        for i in ids:
            x, y = pos[i]
            # Neighbouring levels label below and above in turn, so names along a chain
            # do not run into each other.
            up = int(x) % 2 == 1
            ax.text(x, y + (0.28 if up else -0.28), st.clip(graph.node(i).name, 14),
                    fontsize=_FONT - 1.5, parse_math=False, ha="center",
                    va="bottom" if up else "top", color=_INK, gid="label")  # fmt: skip
        # The names sit 0.28 above or below their nodes: keep them inside the axes, which a
        # chain (one row of nodes) would otherwise squeeze to a sliver around y = 0.
        lo, hi = ax.get_ylim()
        ax.set_ylim(min(lo, float(xy[:, 1].min()) - 0.7), max(hi, float(xy[:, 1].max()) + 0.7))
    ax.set_xlabel("level (edges from a source)" + (", folded into bands" if bands > 1 else ""))
    ax.set_yticks([])
    ax.margins(0.04)
    ax.set_title(
        f"DAG by level: {st.plural(n, 'node')}, {st.plural(len(info.level_widths), 'level')};\n"
        f"critical path {st.plural(len(path), 'node')}, {st.format_time(info.makespan)} "
        "(cost model, no launch overheads)",
        fontsize=9,
    )
    ax.legend(
        handles=[
            Line2D([], [], color=st.STRONG, lw=1.8, label="critical path"),
            Patch(color=st.STRONG, label="no slack"),
            Patch(color=st.SLACK_MAX, label=f"slack {st.format_time(max_slack)}"),
        ],
        fontsize=7,
        loc="upper right",
    )
    return fig


def _dag_aggregated(graph: ComputeGraph, info: topo.TopoInfo, ax: Axes | None) -> Figure:
    fig, ax = _axes(ax, (12.0, 4.0))
    nl = len(info.level_widths)
    zero = np.zeros(nl)
    for nid, s in info.slack.items():
        if s == 0.0:
            zero[info.level[nid]] += 1
    widths = np.asarray(info.level_widths, dtype=float)
    x = np.arange(nl)
    ax.bar(x, zero, width=1.0, color=st.STRONG, label="no slack (critical)", gid="critical")
    ax.bar(x, widths - zero, bottom=zero, width=1.0, color=st.PALETTE[0],
           label="with slack", gid="with slack")  # fmt: skip
    ax.set_xlabel("level (edges from a source)")
    ax.set_ylabel("nodes")
    ax.set_title(
        f"DAG by level, aggregated ({graph.num_nodes:,} nodes): nodes per level; critical path "
        f"{st.plural(len(info.critical_path), 'node')}, {st.format_time(info.makespan)}",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    return fig


# ---------------------------------------------------------------------- dominator trees
def _tree_layout(
    tree: DomTree, ids: Sequence[NodeId]
) -> tuple[dict[Any, tuple[float, float]], int]:
    """Leaves left to right in depth-first order, a parent centred over its children;
    ``None`` is the virtual root."""
    children = tree.children
    kids: dict[Any, tuple[NodeId, ...]] = dict(children)
    kids[None] = tree.roots
    x: dict[Any, float] = {}
    depth: dict[Any, int] = {None: -1}
    leaves = 0
    stack: list[tuple[Any, bool]] = [(None, False)]
    while stack:
        v, done = stack.pop()
        if done:
            cs = kids[v]
            x[v] = (x[cs[0]] + x[cs[-1]]) / 2
            continue
        cs = kids.get(v, ())
        if not cs:
            x[v] = float(leaves)
            leaves += 1
            continue
        stack.append((v, True))
        for c in reversed(cs):
            depth[c] = depth[v] + 1
            stack.append((c, False))
    return {v: (x[v], -float(depth[v])) for v in x}, leaves


def dominator_tree(
    graph: ComputeGraph,
    *,
    post: bool = False,
    ax: Axes | None = None,
    aggregate_above: int = AGGREGATE_ABOVE,
) -> Figure:
    """The dominator tree (``post=True``: post-dominator tree) of ``graph``.

    The virtual entry (exit) is the root; each node hangs under its immediate dominator.
    Above ``aggregate_above`` nodes it draws the number of nodes per tree depth.

    Returns
    -------
    Figure
        Collections ``tree edges`` (one segment per node) and ``nodes`` (one point per
        node, plus the virtual root).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> ax = dominator_tree(quick_start(), post=True).axes[0]
    >>> len(ax.collections[0].get_segments()), ax.get_title().split(":")[0]
    (4, 'post-dominator tree')
    """
    tree = dominance.post_dominators(graph) if post else dominance.dominators(graph)
    word = "post-dominator tree" if post else "dominator tree"
    root = "virtual exit" if post else "virtual entry"
    n = graph.num_nodes
    if n > aggregate_above:
        fig, ax = _axes(ax, (10.0, 3.5))
        depths = np.bincount(np.fromiter(tree.depth.values(), dtype=np.int64, count=n))
        ax.bar(np.arange(len(depths)), depths, width=0.9, color=st.PALETTE[0], gid="depths")
        ax.set_xlabel("depth below the " + root)
        ax.set_ylabel("nodes")
        ax.set_title(f"{word}, aggregated ({n:,} nodes): nodes per depth", fontsize=9)
        return fig
    pos, leaves = _tree_layout(tree, graph.node_ids)
    levels = 1 - min((y for _, y in pos.values()), default=0)
    fig, ax = _axes(ax, (min(24.0, 2 + leaves * 0.22), min(16.0, 1.5 + levels * 0.55)))
    segs = [(pos[tree.idom[v]], pos[v]) for v in graph.node_ids]  # idom None is the virtual root
    ax.add_collection(LineCollection(segs, colors="#9aa5b4", linewidths=0.8, gid="tree edges"))
    ids: list[Any] = [None, *graph.node_ids]
    xy = np.array([pos[v] for v in ids])
    colors = [st.MUTED] + [st.KIND_COLORS.get(graph.node(v).kind.value, st.MUTED) for v in ids[1:]]
    ax.scatter(xy[:, 0], xy[:, 1], s=22, c=colors, zorder=3, gid="nodes")
    if n <= LABEL_NODES:
        kids = tree.children
        for v in ids:
            x, y = pos[v]
            name = root if v is None else st.clip(graph.node(v).name, 18)
            leaf = v is not None and not kids[v]
            # Leaves are labelled downwards (they have room); inner nodes on a slant up and
            # to the right, so the labels of siblings one leaf apart run parallel instead of
            # overlapping.
            ax.text(x + (0 if leaf else 0.12), y - (0.12 if leaf else -0.08), name,
                    parse_math=False, fontsize=_FONT - 1, rotation=90 if leaf else 35,
                    rotation_mode="anchor", ha="right" if leaf else "left",
                    va="center" if leaf else "bottom", color=_INK, gid="label")  # fmt: skip
    ax.set_yticks([])
    ax.set_xticks([])
    ax.set_ylabel("depth")
    ax.margins(0.05, 0.12)
    ax.set_title(f"{word}: {st.plural(n, 'node')}, rooted at the {root}", fontsize=9)
    return fig


# ---------------------------------------------------------------------- memory Gantt
def memory(plan: ExecutionPlan, *, ax: Axes | None = None) -> Figure:
    """The memory plan as a Gantt chart: one rectangle per arena buffer, x = its
    happens-before-safe interval over the plan's steps, y = its bytes in the arena.

    Lines: the arena size and the memory pass's ``lower_bound`` (the schedule-aware bound,
    :class:`~oxiwork.optimizer.memory_pass.MemoryReport`), and ``liveness_lower_bound``
    when it is lower. Buffer names are written inside the rectangles they fit in. A
    graph-owned buffer (a memory alloc node and, usually, a free node bound its lifetime)
    is marked at the steps of its alloc (``▸``) and free (``◂``) nodes.

    Returns
    -------
    Figure
        Collection ``buffers`` (one rectangle per planned buffer; above
        :data:`BATCH_ABOVE` buffers, one compound patch per colour), ``mem_alloc`` and
        ``mem_free`` (one marker per memory node, when there are any), lines ``arena``,
        ``lower bound`` (and ``liveness lower bound``), texts ``label``.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> ax = memory(ExecutionPlan.build(quick_start())).axes[0]
    >>> [ln.get_gid() for ln in ax.lines], ax.get_ylabel()
    (['arena', 'lower bound'], 'arena offset (KiB)')
    """
    rep = plan.memory
    if rep is None:
        raise InvalidArgument("this plan has no memory report; build it with ExecutionPlan.build")
    rows = rep.to_dict()["buffers"]
    names = {int(b.id): b.name for b in plan.graph.buffers}
    top = max([rep.arena_bytes, rep.lower_bound, *(r["offset"] + r["size"] for r in rows), 1])
    scale, unit = _unit(top)
    steps = max([len(plan.steps), *(r["end"] for r in rows), 1])
    fig, ax = _axes(ax, (11.0, 5.0))
    polys = [
        [(r["start"], r["offset"] / scale), (r["end"], r["offset"] / scale),
         (r["end"], (r["offset"] + r["size"]) / scale), (r["start"], (r["offset"] + r["size"]) / scale)]
        for r in rows
    ]  # fmt: skip
    clique = (
        set(rep.conflict_clique) if rep.conflict_lower_bound > rep.liveness_lower_bound else set()
    )
    colours = [st.buffer_color(r["id"]) for r in rows]
    if len(rows) > BATCH_ABOVE:
        _batched_rects(ax, polys, colours, "buffers", alpha=0.85)
    else:
        ax.add_collection(
            PolyCollection(
                polys,
                facecolors=colours,
                edgecolors=[_INK if r["id"] in clique else "white" for r in rows],
                linewidths=0.6,
                alpha=0.85,
                gid="buffers",
            )
        )
    ax.set_xlim(0, steps)
    ax.set_ylim(0, top / scale * 1.08)
    ax.axhline(rep.arena_bytes / scale, color=_INK, lw=1.2, gid="arena",
               label=f"arena {st.format_bytes(rep.arena_bytes)} ({rep.mode})")  # fmt: skip
    ax.axhline(rep.lower_bound / scale, color=st.STRONG, lw=1.2, ls="--", gid="lower bound",
               label=f"lower bound {st.format_bytes(rep.lower_bound)} (schedule-aware)")  # fmt: skip
    if rep.liveness_lower_bound < rep.lower_bound:
        ax.axhline(rep.liveness_lower_bound / scale, color=st.STRONG, lw=1, ls=":",
                   gid="liveness lower bound",
                   label=f"liveness lower bound {st.format_bytes(rep.liveness_lower_bound)} "
                   "(one order)")  # fmt: skip
    # Graph-owned memory: the alloc and free nodes' steps, at the buffer's bytes.
    # (The view model's definition of where they bound the lifetime, as the widget draws it.)
    from oxiwork.widget.viewmodel import memory_node_marks

    where = {r["id"]: (r["offset"] + r["size"] / 2) / scale for r in rows}
    node_marks = memory_node_marks(plan.graph, [s.node for s in plan.steps])
    for kind, marker, gid, text in (
        ("alloc", ">", "mem_alloc", "memory alloc node"),
        ("free", "<", "mem_free", "memory free node"),
    ):
        marks = [
            (m["step"], where[m["buffer"]])
            for m in node_marks
            if m["kind"] == kind and m["buffer"] in where
        ]
        if marks:
            xs, ys = zip(*marks, strict=True)
            ax.scatter(xs, ys, marker=marker, s=28, color=_INK, zorder=3, gid=gid, label=text)
    fits = _fitter(ax, _FONT)
    for r in rows:
        name = names.get(r["id"], f"#{r['id']}")
        if fits(r["end"] - r["start"], r["size"] / scale, name):
            ax.text(r["start"] + 0.2, (r["offset"] + r["size"] / 2) / scale, name, parse_math=False,
                    fontsize=_FONT, va="center", ha="left", color="white", gid="label",
                    clip_on=True)  # fmt: skip
    ax.set_xlabel("step (plan order)")
    ax.set_ylabel(f"arena offset ({unit})")
    ax.set_title(
        f"memory plan: {st.plural(len(rows), 'buffer')} in an arena of "
        f"{st.format_bytes(rep.arena_bytes)}, {rep.ratio:.3f}x the lower bound "
        f"({rep.strategy})",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper right")
    return fig


# ---------------------------------------------------------------------- stream timeline
def _timeline_panel(plan: ExecutionPlan, mode: str, ax: Axes) -> None:
    tl = timeline(plan, mode=mode)
    us = 1e6
    h = 0.38
    polys = [
        [(b.start * us, b.stream - h), (b.end * us, b.stream - h),
         (b.end * us, b.stream + h), (b.start * us, b.stream + h)]
        for b in tl.bars
    ]  # fmt: skip
    colours = [st.stream_color(b.stream) for b in tl.bars]
    big = len(tl.bars) > BATCH_ABOVE or len(tl.arrows) > BATCH_ABOVE
    if big:
        _batched_rects(ax, polys, colours, "steps")
    else:
        ax.add_collection(
            PolyCollection(
                polys, facecolors=colours, edgecolors="white", linewidths=0.3, gid="steps"
            )
        )
    start = {b.step: b.start for b in tl.bars}
    arrows = [
        ((a.time * us, a.from_stream + (h if a.to_stream > a.from_stream else -h)),
         (start[a.wait] * us, a.to_stream - (h if a.to_stream > a.from_stream else -h)))
        for a in tl.arrows
    ]  # fmt: skip
    if big:
        _batched_lines(ax, arrows, "event arrows", color=st.STRONG, linewidth=0.4, alpha=0.25)
    else:
        ax.add_collection(
            LineCollection(arrows, colors=st.STRONG, linewidths=0.8, alpha=0.6, gid="event arrows")
        )
    if arrows and not big:
        heads = np.array([seg[1] for seg in arrows])
        down = np.array([a.to_stream > a.from_stream for a in tl.arrows])
        for mask, marker in ((down, "v"), (~down, "^")):
            if mask.any():
                ax.scatter(heads[mask, 0], heads[mask, 1], marker=marker, s=14, c=st.STRONG,
                           alpha=0.75, zorder=4, gid="arrow heads")  # fmt: skip
    ax.set_xlim(0, max(tl.makespan * us, 1e-3) * 1.02)
    ax.set_ylim(tl.num_streams - 0.5, -0.5)
    fits = _fitter(ax, _FONT - 0.5)
    for b in tl.bars:
        name = st.clip(b.name, 24)
        if fits((b.end - b.start) * us, 2 * h, name):
            ax.text(b.start * us, b.stream, " " + name, fontsize=_FONT - 0.5, va="center", parse_math=False,
                    ha="left", color="white", gid="label", clip_on=True)  # fmt: skip
    ax.set_yticks(range(tl.num_streams), [f"stream {s}" for s in range(tl.num_streams)])
    ax.set_xlabel("time (µs, cost model)")
    word = "graph launch" if mode == "graph" else "stream launch"
    ax.set_title(
        f"{word}: makespan {st.format_time(tl.makespan)} on "
        f"{st.plural(tl.num_streams, 'stream')}, {st.plural(len(tl.arrows), 'event wait')}",
        fontsize=9,
    )


def streams(
    plan: ExecutionPlan,
    *,
    ax: Axes | Sequence[Axes] | None = None,
    modes: Sequence[str] = MODES,
) -> Figure:
    """The stream timeline of ``plan`` under the cost model, one panel per launch mode
    (graph launch and stream launch side by side by default; see
    :func:`oxiwork.executor.timeline.timeline`), with one red arrow per event wait from
    the end of its record to the start of the wait.

    ``ax``: one Axes per mode in ``modes`` (a single Axes for a single mode).

    Returns
    -------
    Figure
        Per panel: collections ``steps`` (one bar per plan step) and ``event arrows`` (one
        segment per event wait); above :data:`BATCH_ABOVE` of either, patches ``steps``
        (one compound path per stream) and a line ``event arrows`` (segments split by NaN).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> fig = streams(ExecutionPlan.build(quick_start()))
    >>> [a.get_title().split(":")[0] for a in fig.axes]
    ['graph launch', 'stream launch']
    """
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise InvalidArgument(f"modes must be some of {', '.join(MODES)}, got {list(modes)!r}")
    if ax is None:
        lanes = max(plan.num_streams, 1)
        fig = new_figure((7.0 * len(modes), 1.3 + 0.45 * lanes), wspace=0.05)
        axes = list(np.atleast_1d(fig.subplots(1, len(modes), sharey=True)))
    else:
        axes = [ax] if isinstance(ax, Axes) else list(ax)
        if len(axes) != len(modes):
            raise InvalidArgument(f"pass one Axes per mode ({len(modes)}), got {len(axes)}")
        fig = axes[0].figure  # type: ignore[assignment]
    for m, a in zip(modes, axes, strict=True):
        _timeline_panel(plan, m, a)
    return fig


# ---------------------------------------------------------------------- per-pass summary
def pass_summary(plan: ExecutionPlan) -> Figure:
    """What each pass left: one small bar chart per figure of
    :func:`oxiwork.render.summary.pass_rows` (kernels, buffers, bytes without reuse, arena,
    event waits, critical path), one bar per stage.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> fig = pass_summary(ExecutionPlan.build(quick_start()))
    >>> [a.get_title() for a in fig.axes][:2], len(fig.axes[0].patches)
    (['kernels', 'buffers'], 4)
    """
    rows = pass_rows(plan)
    fig = new_figure((2.2 * len(COLUMNS), 2.8), left=0.5, bottom=0.6, top=0.6, wspace=0.55)
    axes = fig.subplots(1, len(COLUMNS))
    stages = [r.stage for r in rows]
    x = np.arange(len(rows))
    for a, (attr, name, unit) in zip(axes, COLUMNS, strict=True):
        raw = [getattr(r, attr) for r in rows]
        vals = [0.0 if v is None else float(v) for v in raw]
        scale, shown = 1.0, unit
        if unit == "B":
            scale, shown = _unit(max(vals, default=0.0) or 1.0)
        elif unit == "s":
            scale, shown = 1e-6, "µs"
        a.bar(x, [v / scale for v in vals], color=st.PALETTE[: len(rows)], gid=attr)
        for xi, v in zip(x, raw, strict=True):
            if v is None:  # (the values are on the y axis and in the report's table)
                a.text(xi, 0, "not planned", rotation=90, ha="center", va="bottom", fontsize=6,
                       color=_INK)  # fmt: skip
        a.set_xticks(x, stages, rotation=30, fontsize=7)
        a.set_title(name, fontsize=8)
        a.set_ylabel(shown or "count", fontsize=7)
        a.tick_params(axis="y", labelsize=6)
    fig.suptitle(
        f"per pass: {st.plural(len(plan.steps), 'step')} on "
        f"{st.plural(plan.num_streams, 'stream')} at the end",
        fontsize=9,
    )
    return fig


# ---------------------------------------------------------------------- buffer histogram
def buffer_histogram(source: Any, name: str | None = None, *, ax: Axes | None = None) -> Figure:
    """Histogram of a buffer's values, binned as the widget's simulator inspector does.

    ``source`` is a :class:`~oxiwork.executor.simulator.Simulator` (with ``name`` the
    buffer to show, its current contents) or an array of values (``name`` a title).

    Examples
    --------
    >>> import numpy as np
    >>> ax = buffer_histogram(np.arange(100.0), "x").axes[0]
    >>> len(ax.patches), ax.get_xlabel()
    (24, 'value')
    """
    # The inspector's statistics are the widget's one definition of this view.
    from oxiwork.widget.viewmodel import inspector_section

    if hasattr(source, "buffer") and hasattr(source, "plan"):
        if name is None:
            raise InvalidArgument("name the buffer to show: buffer_histogram(sim, 'out')")
        values = source.buffer(name)
        dtype = str(values.dtype)
    else:
        values = np.asarray(source)
        dtype = str(values.dtype)
    label = name or "values"
    info, _ = inspector_section(label, -1, dtype, values)
    fig, ax = _axes(ax, (5.0, 2.6))
    hist = info["hist"]
    lo, hi = info["hist_lo"], info["hist_hi"]
    pad = 0.0 if hi > lo else 0.5 * max(1.0, abs(lo))
    edges = np.linspace(lo - pad, hi + pad, len(hist) + 1)
    ax.bar(edges[:-1], hist, width=np.diff(edges), align="edge", color=st.PALETTE[0],
           edgecolor="white", linewidth=0.4, gid="bins")  # fmt: skip
    ax.set_xlabel("value")
    ax.set_ylabel("count")
    stats = f"{info['count']:,} values"
    if info["min"] is not None:
        stats += f", min {info['min']:.4g}, max {info['max']:.4g}, mean {info['mean']:.4g}"
    if info["nan_count"]:
        stats += f", {info['nan_count']:,} NaN"
    ax.set_title(f"{st.clip(label, 40)}: {stats}", fontsize=9, parse_math=False)
    return fig


def output_histograms(plan: ExecutionPlan, *, seed: int = 0, most: int = 3) -> Figure:
    """Value histograms of the plan's downloaded outputs after a simulated run
    (:class:`~oxiwork.executor.simulator.SequentialExecutor`, inputs generated from ``seed``),
    one panel per output, at most ``most`` (by name).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> fig = output_histograms(ExecutionPlan.build(quick_start()))
    >>> [a.get_title().split(":")[0] for a in fig.axes]
    ['output']
    """
    import warnings

    from oxiwork import reference
    from oxiwork.executor.simulator import SequentialExecutor, input_names

    inputs = {
        n: reference.generated_input(plan.original.buffer_by_name(n), seed=seed)
        for n in input_names(plan)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generated inputs: expected here
        outputs = SequentialExecutor(plan).run(inputs, seed=seed).outputs
    if not outputs:
        raise InvalidArgument("the plan has no downloaded outputs with values to show")
    names = sorted(outputs)[:most]
    fig = new_figure((5.0 * len(names), 2.8), wspace=0.3)
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=True):
        buffer_histogram(outputs[name], name, ax=ax)
    return fig


VIEWS = {
    "dag": lambda plan: dag(plan.original),
    "dominators": lambda plan: dominator_tree(plan.original),
    "post-dominators": lambda plan: dominator_tree(plan.original, post=True),
    "memory": memory,
    "streams": streams,
    "passes": pass_summary,
    "histograms": output_histograms,
}
"""Every view that a plan alone determines, by name (the CLI's ``--view`` and the report)."""
