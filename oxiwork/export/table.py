"""The plan as a table: one row per step, as CSV or markdown.

The columns are :data:`COLUMNS`; ``start_us``/``end_us`` come from the cost-model timeline
in graph-launch mode (:func:`oxiwork.executor.timeline.timeline`), so the table, the trace
and the stream view agree.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> print(plan_csv(ExecutionPlan.build(quick_start())).splitlines()[2].rsplit(",", 2)[0])
1,0,1,kernel,relu+scale,relu; scale,relu_scale,4x1x1,256x1x1,,input@0,output@4096
"""

from __future__ import annotations

import csv
import io
from typing import Any

from oxiwork.executor.plan import BufferArg, ExecutionPlan
from oxiwork.executor.timeline import timeline
from oxiwork.render._style import printable

__all__ = ["COLUMNS", "plan_csv", "plan_markdown", "plan_rows"]

COLUMNS = (
    "step", "stream", "pos", "kind", "name", "fuses", "function", "grid", "block", "event",
    "inputs", "outputs", "start_us", "end_us",
)  # fmt: skip


def _arg(a: BufferArg) -> str:
    return f"{a.name}@{a.where}"


def plan_rows(plan: ExecutionPlan) -> list[dict[str, Any]]:
    """One dict per step, keyed by :data:`COLUMNS` (times in µs, rounded to 0.1 ns)."""
    tl = timeline(plan, mode="graph")
    orig = plan.original
    rows = []
    for st, bar in zip(plan.steps, tl.bars, strict=True):
        cfg = st.config
        rows.append(
            {
                "step": st.index,
                "stream": int(st.stream),
                "pos": st.position,
                "kind": st.kind.value,
                "name": st.name,
                "fuses": "; ".join(
                    orig.node(n).name if orig.has_node(n) else f"#{int(n)}" for n in st.fused_nodes
                )
                if len(st.fused_nodes) > 1
                else "",
                "function": st.function_name or "",
                "grid": "x".join(map(str, cfg.grid)) if cfg else "",
                "block": "x".join(map(str, cfg.block)) if cfg else "",
                "event": "" if st.event is None else st.event,
                "inputs": " ".join(_arg(a) for a in st.inputs),
                "outputs": " ".join(_arg(a) for a in st.outputs),
                "start_us": round(bar.start * 1e6, 4),
                "end_us": round(bar.end * 1e6, 4),
            }
        )
    return rows


def plan_csv(plan: ExecutionPlan) -> str:
    """The plan as CSV (RFC 4180 quoting; a header row of :data:`COLUMNS`)."""
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(plan_rows(plan))
    return out.getvalue()


def _md(value: Any) -> str:
    # Control characters visible, and nothing a markdown renderer would read as syntax
    # or HTML: pipes end cells, backticks/asterisks/brackets format, < and & start HTML.
    text = printable(str(value))
    for ch, rep in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(ch, rep)
    return "".join("\\" + c if c in "\\|`*_[]#" else c for c in text)


def plan_markdown(plan: ExecutionPlan) -> str:
    """The plan as a GitHub-flavoured markdown table, every cell escaped.

    >>> from oxiwork.examples import quick_start
    >>> print(plan_markdown(ExecutionPlan.build(quick_start())).splitlines()[0][:30])
    | step | stream | pos | kind |
    """
    rows = plan_rows(plan)
    lines = ["| " + " | ".join(_md(c) for c in COLUMNS) + " |"]
    lines.append(
        "|"
        + "|".join(
            "---:" if c in ("step", "stream", "pos", "start_us", "end_us") else "---"
            for c in COLUMNS
        )
        + "|"
    )
    for r in rows:
        lines.append("| " + " | ".join(_md(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
