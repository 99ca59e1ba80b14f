"""Helpers shared by the analyses.

>>> with paused_gc():
...     xs = [[i] for i in range(3)]
>>> xs
[[0], [1], [2]]
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from oxiwork.graph import ComputeGraph

__all__ = ["paused_gc", "positions_topological"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while an analysis builds its results.

    The analyses allocate O(n) acyclic containers (lists, tuples, dicts keyed by id);
    each few hundred allocations trigger a collection, and the older generations then
    traverse the whole graph (100k frozen nodes) again and again: on a 100k-node DAG
    that doubles the run time. Nothing allocated here forms a cycle, so pausing is safe;
    the collector is restored (only if it was enabled) on the way out.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def positions_topological(graph: ComputeGraph) -> bool:
    """True if every edge goes from a lower to a higher position (cached per graph).

    Builders number nodes in creation order and a consumer is created after its
    producers, so this holds for most graphs; passes then use positions directly as a
    topological numbering instead of renumbering the adjacency.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder(); x, y = b.add_barrier("x"), b.add_barrier("y"); b.dep(y, x)
    >>> positions_topological(b.build())
    False
    """
    # The graph is frozen, but its ``_cache`` dict may hold derived data under
    # namespaced keys; this flag costs one O(E) scan per graph.
    flag = graph._cache.get("analysis.positions_topological")
    if flag is None:
        flag = all(a < b for a, sv in enumerate(graph.dense().succ) for b in sv)
        graph._cache["analysis.positions_topological"] = flag
    return flag
