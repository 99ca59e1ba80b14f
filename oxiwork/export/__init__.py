"""Files out: a Perfetto / Chrome trace of the simulated timeline, the plan as CSV or
markdown, and a self-contained offline HTML report (graph JSON is
:meth:`ComputeGraph.to_json <oxiwork.graph.ComputeGraph.to_json>`).

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> from oxiwork.export import plan_markdown
>>> plan_markdown(ExecutionPlan.build(quick_start())).count("\\n")
5
"""

from oxiwork.export.html import report_html, save_report
from oxiwork.export.perfetto import perfetto_trace, trace_events
from oxiwork.export.table import plan_csv, plan_markdown, plan_rows

__all__ = [
    "perfetto_trace",
    "plan_csv",
    "plan_markdown",
    "plan_rows",
    "report_html",
    "save_report",
    "trace_events",
]
