"""Pictures of graphs and plans: matplotlib figures (one function per view) and DOT/SVG
renders through graphviz.

matplotlib views (each returns a ``Figure``; ``ax=`` where a view is one panel):
:func:`dag`, :func:`dominator_tree`, :func:`memory`, :func:`streams`, :func:`pass_summary`,
:func:`buffer_histogram`. DOT/SVG (:mod:`oxiwork.render.dot`): :func:`graph_dot`,
:func:`plan_dot`, :func:`domtree_dot`, :func:`cuda_graph_dot`, :func:`to_svg`.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.render import dag
>>> dag(quick_start()).axes[0].get_xlabel()
'level (edges from a source)'
"""

from oxiwork.render.dot import (
    COLOR_MODES,
    GraphvizMissing,
    cuda_graph_dot,
    domtree_dot,
    graph_dot,
    plan_dot,
    to_svg,
)
from oxiwork.render.figures import (
    VIEWS,
    buffer_histogram,
    dag,
    dominator_tree,
    memory,
    pass_summary,
    streams,
)
from oxiwork.render.summary import PassRow, pass_rows

__all__ = [
    "COLOR_MODES",
    "VIEWS",
    "GraphvizMissing",
    "PassRow",
    "buffer_histogram",
    "cuda_graph_dot",
    "dag",
    "dominator_tree",
    "domtree_dot",
    "graph_dot",
    "memory",
    "pass_rows",
    "pass_summary",
    "plan_dot",
    "streams",
    "to_svg",
]
