"""The engine behind one workbench: the input graph, the pipeline stages, the plan, the simulator.

The widget only reads what the engine produces (passes never call the UI). When the pipeline
rejects a graph, or the engine fails on it, the error is recorded in :attr:`Session.notes`
and the views that need the plan show it instead of data; the workbench stays usable, so the
user can fix the graph.

A lazy session (``lazy=True``) holds only the input graph until something asks for the
pipeline: :attr:`Session.stages`, :attr:`Session.plan`, :attr:`Session.notes` and
:attr:`Session.sim` run it on first access (:meth:`Session.load`), so a reader never sees a
half-built session. The workbench uses this to draw the input graph before the passes run.

Example
-------
>>> from oxiwork.examples import quick_start
>>> s = Session(quick_start())
>>> [st.name for st in s.stages][:2], s.notes
(['input', 'fusion'], {})
>>> lazy = Session(quick_start(), lazy=True)
>>> lazy.loaded, lazy.input_stage.name
(False, 'input')
>>> lazy.plan is not None, lazy.loaded
(True, True)
>>> [st.name for st in Session(quick_start(), fusion=False).stages]
['input', 'streams', 'memory']
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from oxiwork.error import GraphError, InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import Simulator
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId

__all__ = ["OPTION_DEFAULTS", "OPTION_LIMITS", "Session", "Stage", "check_option"]

#: Inclusive bounds of the pipeline's integer options. A form in the widget can ask for any of
#: these; more streams than CUDA's practical concurrency or fusion groups bigger than a
#: generated kernel should get are refused rather than planned for seconds.
OPTION_LIMITS: dict[str, tuple[int, int]] = {"max_streams": (1, 32), "max_group_size": (1, 64)}
#: The pipeline options a workbench exposes, with their defaults (those of ExecutionPlan.build).
OPTION_DEFAULTS: dict[str, int | bool] = {"max_streams": 4, "fusion": True, "max_group_size": 16}


def check_option(name: str, value: object) -> int | bool:
    """``value`` if it is a valid pipeline option ``name``; raise otherwise.

    Raises
    ------
    InvalidArgument
        Unknown option, wrong type (a bool is not an int here) or out of range; the message
        names the option and the values allowed.

    Examples
    --------
    >>> check_option("max_streams", 2), check_option("fusion", False)
    (2, False)
    >>> try:
    ...     check_option("max_streams", 0)
    ... except InvalidArgument as e:
    ...     print(e)
    max_streams is 0; choose an integer from 1 to 32
    """
    if name == "fusion":
        if not isinstance(value, bool):
            raise InvalidArgument(f"fusion must be True or False, got {value!r:.60}")
        return value
    if name not in OPTION_LIMITS:
        raise InvalidArgument(
            f"unknown pipeline option {name!r:.60}; the options are: {', '.join(OPTION_DEFAULTS)}"
        )
    lo, hi = OPTION_LIMITS[name]
    # bool is an int subclass: True streams is a mistake, not 1.
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer from {lo} to {hi}, got {value!r:.60}")
    if not lo <= value <= hi:
        raise InvalidArgument(f"{name} is {value}; choose an integer from {lo} to {hi}")
    return value


@dataclass(frozen=True, slots=True)
class Stage:
    """One point of the pass slider: the graph after pass ``name`` (``"input"`` first)."""

    name: str
    graph: ComputeGraph
    before: ComputeGraph | None = None
    created: tuple[NodeId, ...] = ()
    removed: tuple[NodeId, ...] = ()
    seconds: float = 0.0


class Session:
    """Engine state for a graph; rebuilt whenever the graph changes.

    Parameters
    ----------
    graph
        The input graph (what edits change).
    max_streams, memory_mode, fusion, max_group_size
        Options of :meth:`~oxiwork.executor.plan.ExecutionPlan.build` (the integers within
        :data:`OPTION_LIMITS`).
    lazy
        Run the pipeline on first access to :attr:`stages`, :attr:`plan`, :attr:`notes` or
        :attr:`sim` (or on :meth:`load`) instead of now.

    Attributes
    ----------
    graph
        The input graph.
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
    seconds
        Wall time :meth:`load` took (0 until it ran).

    Raises
    ------
    InvalidArgument
        An option is out of range or of the wrong type (see :func:`check_option`).
    """

    __slots__ = ("_loaded", "_notes", "_plan", "_sim", "_stages", "fusion", "graph",
                 "max_group_size", "max_streams", "memory_mode", "seconds")  # fmt: skip

    def __init__(
        self,
        graph: ComputeGraph,
        max_streams: int = 4,
        memory_mode: str = "heuristic",
        *,
        fusion: bool = True,
        max_group_size: int = 16,
        lazy: bool = False,
    ) -> None:
        # Checked here, not in the pipeline: a bad option is the caller's mistake, to raise,
        # while the pipeline's errors are about the graph and end up in notes.
        self.max_streams = int(check_option("max_streams", max_streams))
        self.fusion = bool(check_option("fusion", fusion))
        self.max_group_size = int(check_option("max_group_size", max_group_size))
        self.graph = graph
        self.memory_mode = memory_mode
        self.seconds = 0.0
        self._stages: list[Stage] = [Stage("input", graph)]
        self._plan: ExecutionPlan | None = None
        self._notes: dict[str, str] = {}
        self._sim: Simulator | None = None
        self._loaded = False
        if not lazy:
            self.load()

    @property
    def loaded(self) -> bool:
        """Whether the pipeline has run (always true for a session made with ``lazy=False``)."""
        return self._loaded

    @property
    def options(self) -> dict[str, int | bool]:
        """The pipeline options this session plans with (keys of ``OPTION_DEFAULTS``).

        >>> from oxiwork.examples import quick_start
        >>> Session(quick_start(), 2, fusion=False, lazy=True).options
        {'max_streams': 2, 'fusion': False, 'max_group_size': 16}
        """
        return {
            "max_streams": self.max_streams,
            "fusion": self.fusion,
            "max_group_size": self.max_group_size,
        }

    @property
    def input_stage(self) -> Stage:
        """``stages[0]`` without running the pipeline."""
        return self._stages[0]

    @property
    def stages(self) -> list[Stage]:
        self.load()
        return self._stages

    @property
    def plan(self) -> ExecutionPlan | None:
        self.load()
        return self._plan

    @property
    def notes(self) -> dict[str, str]:
        self.load()
        return self._notes

    @property
    def sim(self) -> Simulator | None:
        self.load()
        return self._sim

    def load(self) -> Session:
        """Run the pipeline, build the plan and start the simulator, once; return ``self``.

        >>> from oxiwork.examples import quick_start
        >>> s = Session(quick_start(), lazy=True).load()
        >>> s.loaded, s.stages[0].name, len(s.stages) > 1
        (True, 'input', True)
        """
        if self._loaded:
            return self
        t0 = time.perf_counter()
        try:
            self._build()  # records the engine's errors in notes; they are not retried
        except BaseException:
            # Interrupted (Ctrl-C in the kernel): leave the session as it was, so the next
            # access runs the pipeline again instead of finding half of it.
            del self._stages[1:]
            self._plan, self._sim = None, None
            self._notes.clear()
            raise
        self._loaded = True
        self.seconds = time.perf_counter() - t0
        return self

    def _build(self) -> None:
        try:
            self._plan = ExecutionPlan.build(
                self.graph,
                max_streams=self.max_streams,
                fusion=self.fusion,
                max_group_size=self.max_group_size,
                memory_mode=self.memory_mode,
            )
        except GraphError as e:  # the user's graph: PassFailed names the pass
            self._notes["plan"] = f"the pipeline failed on this graph: {e}"
        except Exception as e:  # a bug in the engine: show it, keep the workbench usable
            self._notes["plan"] = f"building the execution plan raised {type(e).__name__}: {e}"
        if self._plan is None:
            self._notes["sim"] = f"no execution plan to simulate: {self._notes['plan']}"
            return
        plan = self._plan
        for t in plan.trace:
            self._stages.append(
                Stage(
                    t.name,
                    t.after,
                    t.before,
                    tuple(t.created_nodes),
                    tuple(t.removed_nodes),
                    float(t.seconds),
                )
            )
        last = self._stages[-1].graph
        if plan.graph is not last and plan.graph != last:
            # The plan's own graph (events inserted, buffers placed) is the last slider stop.
            before_ids = {n.id for n in last.nodes}
            after_ids = {n.id for n in plan.graph.nodes}
            self._stages.append(
                Stage("plan", plan.graph, last, tuple(sorted(after_ids - before_ids)),
                      tuple(sorted(before_ids - after_ids)))
            )  # fmt: skip
        try:
            # Inputs are generated from a seed (the simulator warns about it; the widget
            # shows it in the simulator panel instead).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._sim = Simulator(plan)
        except Exception as e:  # GraphError or an engine bug: the panel shows it
            self._notes["sim"] = f"the simulator could not start: {type(e).__name__}: {e}"

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
