"""A self-contained, offline HTML report of a plan: summary tables and every view as SVG.

Nothing is fetched: the page has no script, no link, no font and no image from anywhere
(a Content-Security-Policy of ``default-src 'none'`` makes a browser refuse any request),
every view is inline SVG with its names as ``<text>``, and every name is HTML-escaped
(control characters made visible first), so a hostile name is shown, never run.

The views are the workbench's: the graph coloured by fused group, the dominator and
post-dominator trees, the lowered CUDA graph (graphviz); the memory Gantt chart, the
stream timeline (graph and stream launch), the per-pass summary and the simulated
outputs' value histograms (matplotlib). Graphs over
:data:`~oxiwork.render.dot.SVG_MAX_NODES` nodes get the aggregated matplotlib DAG and trees
instead of graphviz layouts.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> page = report_html(ExecutionPlan.build(quick_start()), title="quick start")
>>> page.startswith("<!DOCTYPE html>"), 'id="view-memory"' in page, "<script" in page
(True, True, False)
"""

from __future__ import annotations

import html
import io
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oxiwork.error import GraphError, InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.timeline import timeline
from oxiwork.export.table import COLUMNS, plan_rows
from oxiwork.node import NodeKind
from oxiwork.render import _style as st
from oxiwork.render import dot, figures
from oxiwork.render.summary import COLUMNS as PASS_COLUMNS
from oxiwork.render.summary import pass_rows

__all__ = ["VIEW_IDS", "report_html", "save_report"]

VIEW_IDS = (
    "graph", "dominators", "post-dominators", "cuda-graph", "memory", "streams", "passes",
    "histograms",
)  # fmt: skip
"""The ``id="view-..."`` of every view section, in page order."""

MAX_TABLE_ROWS = 2000
"""Most plan steps listed in the step table (a note says how many were left out)."""

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1b2430; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 12px; }
td, th { border: 1px solid #d5d9e0; padding: 2px 6px; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
section.view { overflow-x: auto; border-top: 1px solid #d5d9e0; }
section.view svg { max-width: 100%; height: auto; }
.note { color: #5a687d; font-size: 12px; }
"""


def _e(text: Any) -> str:
    return html.escape(st.printable(str(text)), quote=True)


def _svg_inline(svg: str) -> str:
    """SVG text ready to inline in HTML: no XML declaration, no DOCTYPE, no comments."""
    svg = re.sub(r"<\?xml[^>]*\?>", "", svg)
    svg = re.sub(r"<!DOCTYPE[^>]*>", "", svg, flags=re.S)
    return re.sub(r"<!--.*?-->", "", svg, flags=re.S).strip()


def _mpl_svg(fig: Any, salt: str) -> str:
    import matplotlib

    # Text as <text> (names are searchable, selectable text, not glyph paths); a salt per
    # view keeps the clip-path ids of the figures on one page apart.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": salt}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return _svg_inline(buf.getvalue())


def _table(head: list[str], rows: list[list[Any]], numeric: set[int] | None = None) -> str:
    numeric = numeric or set()
    out = ["<table><thead><tr>"]
    out += [f"<th{' class=n' if i in numeric else ''}>{_e(h)}</th>" for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for r in rows:
        cells = [f"<td{' class=n' if i in numeric else ''}>{_e(v)}</td>" for i, v in enumerate(r)]
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _summary(plan: ExecutionPlan) -> str:
    rep = plan.memory
    tl = timeline(plan, mode="graph")
    waits = sum(1 for s in plan.steps if s.kind is NodeKind.EventWait)
    rows: list[list[Any]] = [
        ["steps", f"{len(plan.steps):,}", "", "entries of plan.steps"],
        ["streams", plan.num_streams, "", "CUDA streams the plan uses"],
        ["kernels", f"{plan.kernel_count_fused:,} ({plan.kernel_count_original:,} before fusion)",
         "", "kernel launches"],
        ["events", plan.event_count, "", "events recorded (plan.event_count)"],
        ["event waits", waits, "", "waits on recorded events (one event may be waited for on several streams)"],
        ["arena", f"{plan.pool_bytes:,}", "B", "bytes the memory plan needs (plan.pool_bytes)"],
    ]  # fmt: skip
    if rep is not None:
        rows += [
            ["lower_bound", f"{rep.lower_bound:,}", "B",
             "schedule-aware lower bound on any safe arena: max(liveness_lower_bound, conflict_lower_bound)"],
            ["liveness_lower_bound", f"{rep.liveness_lower_bound:,}", "B",
             "most bytes live at once over the issue order"],
            ["conflict_lower_bound", f"{rep.conflict_lower_bound:,}", "B",
             "total size of buffers no event orders (they need disjoint bytes)"],
            ["arena / lower_bound", f"{rep.ratio:.3f}", "", f"placement: {rep.strategy}"],
        ]  # fmt: skip
    rows += [
        ["makespan, graph launch", f"{tl.totals['graph'] * 1e6:,.1f}", "µs",
         "cost model: one CUDA graph launch"],
        ["makespan, stream launch", f"{tl.totals['stream'] * 1e6:,.1f}", "µs",
         "cost model: every kernel and copy launched from the host"],
    ]  # fmt: skip
    return _table(["figure", "value", "unit", "definition"], rows, {1})


def _passes(plan: ExecutionPlan) -> str:
    rows = pass_rows(plan)
    shown = {"s": "µs"}  # times are shown in µs
    head = ["stage"] + [
        f"{name} ({shown.get(unit, unit)})" if unit else name for _, name, unit in PASS_COLUMNS
    ]
    head.append("pass time (ms)")
    body = []
    for r in rows:
        cells: list[Any] = [r.stage]
        for attr, _, unit in PASS_COLUMNS:
            v = getattr(r, attr)
            if v is None:
                cells.append("not planned")
            elif unit == "s":
                cells.append(f"{v * 1e6:,.1f}")
            else:
                cells.append(f"{v:,}")
        cells.append(f"{r.seconds * 1e3:.1f}")
        body.append(cells)
    return _table(head, body, set(range(1, len(head))))


def _steps(plan: ExecutionPlan) -> str:
    rows = plan_rows(plan)
    shown = rows[:MAX_TABLE_ROWS]
    numeric = {COLUMNS.index(c) for c in ("step", "stream", "pos", "start_us", "end_us")}
    out = _table(list(COLUMNS), [[r[c] for c in COLUMNS] for r in shown], numeric)
    if len(rows) > len(shown):
        out += f'<p class="note">{len(rows) - len(shown):,} more steps not listed.</p>'
    return out


def _histograms(plan: ExecutionPlan) -> str:
    try:
        fig = figures.output_histograms(plan)
    except InvalidArgument as e:
        return f'<p class="note">{_e(e)}</p>'
    note = "simulated outputs (inputs generated from seed 0)"
    return f'<p class="note">{_e(note)}</p>' + _mpl_svg(fig, "histograms")


def _views(plan: ExecutionPlan) -> list[tuple[str, str, Callable[[], str]]]:
    g = plan.original
    big = g.num_nodes > dot.SVG_MAX_NODES
    graph: Callable[[], str]
    if big:

        def graph() -> str:
            return _mpl_svg(figures.dag(g), "dag")

        def dom() -> str:
            return _mpl_svg(figures.dominator_tree(g), "dom")

        def pdom() -> str:
            return _mpl_svg(figures.dominator_tree(g, post=True), "pdom")
    else:

        def graph() -> str:
            return _svg_inline(dot.to_svg(dot.graph_dot(g, color="group", plan=plan)))

        def dom() -> str:
            return _svg_inline(dot.to_svg(dot.domtree_dot(g)))

        def pdom() -> str:
            return _svg_inline(dot.to_svg(dot.domtree_dot(g, post=True)))

    def cuda() -> str:
        if len(plan.steps) > dot.SVG_MAX_NODES:
            return '<p class="note">too many nodes to lay out; see the plan table.</p>'
        return _svg_inline(dot.to_svg(dot.cuda_graph_dot(plan)))

    return [
        ("graph", "DAG, coloured by fused group" + (" (aggregated)" if big else ""), graph),
        ("dominators", "dominator tree", dom),
        ("post-dominators", "post-dominator tree", pdom),
        ("cuda-graph", "lowered CUDA graph (cudaGraphDebugDotPrint style)", cuda),
        ("memory", "memory plan", lambda: _mpl_svg(figures.memory(plan), "memory")),
        ("streams", "stream timeline", lambda: _mpl_svg(figures.streams(plan), "streams")),
        ("passes", "per-pass summary", lambda: _mpl_svg(figures.pass_summary(plan), "passes")),
        ("histograms", "simulated output values", lambda: _histograms(plan)),
    ]


def report_html(plan: ExecutionPlan, *, title: str = "oxiwork plan report") -> str:
    """The report of ``plan`` as one HTML page (see the module docstring).

    A view that cannot be drawn (e.g. no ``dot`` installed, or a kernel the simulator
    cannot compute) is replaced by a sentence saying why; the rest of the page stands.
    """
    t0 = time.perf_counter()
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No request of any kind: the report must open offline exactly as it was saved.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">{_e(plan._headline())}</p>',
        "<h2>summary</h2>",
        _summary(plan),
        "<h2>per pass</h2>",
        _passes(plan),
    ]
    for vid, heading, make in _views(plan):
        try:
            body = make()
        except GraphError as e:
            body = f'<p class="note">not drawn: {_e(e)}</p>'
        parts.append(
            f'<section class="view" id="view-{vid}"><h2>{_e(heading)}</h2>{body}</section>'
        )
    parts += ["<h2>plan steps</h2>", _steps(plan)]
    took = time.perf_counter() - t0
    parts.append(f'<p class="note">made by oxiwork in {took:.2f} s; opens offline.</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def save_report(plan: ExecutionPlan, path: str | Path, *, title: str | None = None) -> Path:
    """Write :func:`report_html` of ``plan`` to ``path`` (UTF-8); returns the path."""
    p = Path(path)
    p.write_text(report_html(plan, title=title or f"oxiwork report: {p.stem}"), encoding="utf-8")
    return p
