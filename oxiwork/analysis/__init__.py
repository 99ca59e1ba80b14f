"""Analyses of a ComputeGraph: pure functions returning plain data keyed by id.

- :mod:`~oxiwork.analysis.topo`: levels, ASAP/ALAP, slack, critical path, priorities;
- :mod:`~oxiwork.analysis.liveness`: buffer lifetimes over an order, peak live bytes;
- :mod:`~oxiwork.analysis.dominance`: dominator and post-dominator trees;
- :mod:`~oxiwork.analysis.happens_before`: vector clocks of a stream schedule (stream
  order plus event pairs), shared by the memory pass, the plan verifier and the race
  detector;
- :func:`paused_gc`: a context manager that pauses the cyclic garbage collector while a
  pass allocates O(n) acyclic results (import it from here, not from ``_util``).

Example
-------
>>> from oxiwork import GraphBuilder
>>> from oxiwork import analysis
>>> b = GraphBuilder(); x, y = b.add_barrier("x"), b.add_barrier("y"); b.dep(x, y)
>>> g = b.build()
>>> analysis.topo.analyze(g).makespan, analysis.dominators(g).idom[y]
(2.0, NodeId(0))
"""

from oxiwork.analysis import dominance, happens_before, liveness, topo
from oxiwork.analysis._util import paused_gc
from oxiwork.analysis.dominance import DomTree, dominators, post_dominators
from oxiwork.analysis.liveness import LivenessInfo
from oxiwork.analysis.topo import TopoInfo, critical_path, levels

__all__ = [
    "DomTree",
    "LivenessInfo",
    "TopoInfo",
    "critical_path",
    "dominance",
    "dominators",
    "happens_before",
    "levels",
    "liveness",
    "paused_gc",
    "post_dominators",
    "topo",
]
