"""The engine behind one workbench: the input graph, the pipeline stages, the plan, the simulator.

The widget only reads what the engine produces (passes never call the UI). Engine pieces
that are not importable or not implemented yet are recorded in :attr:`Session.notes` and the
matching views say so, instead of showing made-up data.

Example
-------
>>> from oxiwork.examples import quick_start
>>> s = Session(quick_start())
>>> s.stages[0].name
'input'
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from oxiwork.error import GraphError
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


# Passes run when ExecutionPlan.build is not available, in the architecture's order
# (fusion ▶ stream ▶ memory); each is used only if its module and function exist.
_FALLBACK_PASSES: tuple[tuple[str, str, str], ...] = (
    ("fusion", "oxiwork.optimizer.fusion", "fuse"),
    ("stream", "oxiwork.optimizer.stream", "assign_streams"),
    ("memory", "oxiwork.optimizer.memory", "plan_memory"),
)


def _lookup(module: str, attr: str) -> Callable[..., Any] | None:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    fn = getattr(mod, attr, None)
    return fn if callable(fn) else None


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
        The :class:`~oxiwork.executor.plan.ExecutionPlan`, or ``None`` if it could not be built.
    notes
        Why a piece is missing, keyed by ``"plan"``, ``"sim"``...
    """

    graph: ComputeGraph
    max_streams: int = 4
    memory_mode: str = "heuristic"
    stages: list[Stage] = field(default_factory=list)
    plan: Any = None
    notes: dict[str, str] = field(default_factory=dict)
    sim: Any = None

    def __post_init__(self) -> None:
        self.stages = [Stage("input", self.graph)]
        trace: tuple[Any, ...] = ()
        try:
            from oxiwork.executor.plan import ExecutionPlan

            build = getattr(ExecutionPlan, "build", None)
            if build is None:
                raise NotImplementedError("ExecutionPlan.build is not implemented yet")
            self.plan = build(
                self.graph, max_streams=self.max_streams, memory_mode=self.memory_mode
            )
            trace = tuple(getattr(self.plan, "trace", ()) or ())
        except (ImportError, NotImplementedError) as e:
            self.notes["plan"] = f"execution plan not available yet: {e}"
            trace = self._fallback_trace()
        except GraphError as e:
            self.notes["plan"] = f"the pipeline failed on this graph: {e}"
            trace = ()
        except Exception as e:  # a bug in the engine: show it, keep the workbench usable
            self.plan = None
            self.notes["plan"] = f"building the execution plan raised {type(e).__name__}: {e}"
            trace = self._fallback_trace()
        for t in trace:
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
        if self.plan is not None and self.plan.graph is not last and self.plan.graph != last:
            # The plan's own graph (events inserted, buffers placed) is the last slider stop.
            before_ids = {n.id for n in last.nodes}
            after_ids = {n.id for n in self.plan.graph.nodes}
            self.stages.append(
                Stage("plan", self.plan.graph, last, tuple(sorted(after_ids - before_ids)),
                      tuple(sorted(before_ids - after_ids)))
            )  # fmt: skip
        self._make_simulator()

    def _fallback_trace(self) -> tuple[Any, ...]:
        from oxiwork.pipeline import Pipeline

        passes = [(name, fn) for name, mod, attr in _FALLBACK_PASSES if (fn := _lookup(mod, attr))]
        missing = [name for name, mod, attr in _FALLBACK_PASSES if _lookup(mod, attr) is None]
        if missing:
            self.notes["passes"] = f"passes not available yet: {', '.join(missing)}"
        if not passes:
            return ()
        try:
            return Pipeline(passes).run(self.graph).trace
        except Exception as e:  # PassFailed names the pass; anything else is shown too
            self.notes["passes"] = f"the pipeline failed on this graph: {e}"
            return ()

    def _make_simulator(self) -> None:
        if self.plan is None:
            self.notes["sim"] = "simulator needs an execution plan, which is not available yet"
            return
        try:
            from oxiwork.executor.simulator import Simulator
        except ImportError:
            self.notes["sim"] = "simulator not available yet (oxiwork.executor.simulator)"
            return
        try:
            # Inputs are generated from a seed (the simulator warns about it; the widget
            # shows it in the simulator panel instead).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.sim = Simulator(self.plan)
        except Exception as e:
            self.notes["sim"] = f"the simulator could not start: {type(e).__name__}: {e}"

    @property
    def final_graph(self) -> ComputeGraph:
        """The graph the plan runs (the last stage when there is no plan)."""
        if self.plan is not None:
            return self.plan.graph
        return self.stages[-1].graph

    @property
    def step_order(self) -> list[NodeId] | None:
        """The plan's step order (node ids), or None without a plan."""
        if self.plan is None:
            return None
        return [s.node for s in self.plan.steps]
