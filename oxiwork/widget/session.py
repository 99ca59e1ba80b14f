"""The engine behind one workbench: the input graph, the pipeline stages, the plan, the simulator.

The widget only reads what the engine produces (passes never call the UI). When the pipeline
rejects a graph, or the engine fails on it, the error is recorded in :attr:`Session.notes`
and the views that need the plan show it instead of data; the workbench stays usable, so the
user can fix the graph.

Example
-------
>>> from oxiwork.examples import quick_start
>>> s = Session(quick_start())
>>> [st.name for st in s.stages][:2], s.notes
(['input', 'fusion'], {})
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

from oxiwork.error import GraphError
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import Simulator
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId

__all__ = ["Session", "Stage"]


@dataclass(frozen=True, slots=True)
class Stage:
    """One point of the pass slider: the graph after pass ``name`` (``"input"`` first)."""

    name: str
    graph: ComputeGraph
    before: ComputeGraph | None = None
    created: tuple[NodeId, ...] = ()
    removed: tuple[NodeId, ...] = ()
    seconds: float = 0.0


@dataclass
class Session:
    """Engine state for a graph; rebuilt whenever the graph changes.

    Attributes
    ----------
    graph
        The input graph (what edits change).
    stages
        ``stages[0]`` is the input graph, then one stage per pass of the pipeline.
    plan
        The :class:`~oxiwork.executor.plan.ExecutionPlan`, or ``None`` if the pipeline
        failed on the graph (``notes["plan"]`` says why).
    notes
        Why a piece is missing, keyed by ``"plan"``, ``"sim"``.
    sim
        The :class:`~oxiwork.executor.simulator.Simulator` over the plan, or ``None``
        (``notes["sim"]`` says why).
    """

    graph: ComputeGraph
    max_streams: int = 4
    memory_mode: str = "heuristic"
    stages: list[Stage] = field(default_factory=list)
    plan: ExecutionPlan | None = None
    notes: dict[str, str] = field(default_factory=dict)
    sim: Simulator | None = None

    def __post_init__(self) -> None:
        self.stages = [Stage("input", self.graph)]
        try:
            self.plan = ExecutionPlan.build(
                self.graph, max_streams=self.max_streams, memory_mode=self.memory_mode
            )
        except GraphError as e:  # the user's graph: PassFailed names the pass
            self.notes["plan"] = f"the pipeline failed on this graph: {e}"
        except Exception as e:  # a bug in the engine: show it, keep the workbench usable
            self.notes["plan"] = f"building the execution plan raised {type(e).__name__}: {e}"
        if self.plan is None:
            self.notes["sim"] = f"no execution plan to simulate: {self.notes['plan']}"
            return
        for t in self.plan.trace:
            self.stages.append(
                Stage(
                    t.name,
                    t.after,
                    t.before,
                    tuple(t.created_nodes),
                    tuple(t.removed_nodes),
                    float(t.seconds),
                )
            )
        last = self.stages[-1].graph
        if self.plan.graph is not last and self.plan.graph != last:
            # The plan's own graph (events inserted, buffers placed) is the last slider stop.
            before_ids = {n.id for n in last.nodes}
            after_ids = {n.id for n in self.plan.graph.nodes}
            self.stages.append(
                Stage("plan", self.plan.graph, last, tuple(sorted(after_ids - before_ids)),
                      tuple(sorted(before_ids - after_ids)))
            )  # fmt: skip
        try:
            # Inputs are generated from a seed (the simulator warns about it; the widget
            # shows it in the simulator panel instead).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.sim = Simulator(self.plan)
        except Exception as e:  # GraphError or an engine bug: the panel shows it
            self.notes["sim"] = f"the simulator could not start: {type(e).__name__}: {e}"

    @property
    def final_graph(self) -> ComputeGraph:
        """The graph the plan runs (the input graph when there is no plan)."""
        if self.plan is not None:
            return self.plan.graph
        return self.stages[-1].graph

    @property
    def step_order(self) -> list[NodeId] | None:
        """The plan's step order (node ids), or None without a plan."""
        if self.plan is None:
            return None
        return [s.node for s in self.plan.steps]
