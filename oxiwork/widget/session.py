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

The simulator can run a broken copy of the plan (:meth:`Session.configure_sim`): one event
dropped, under another interleaving policy, to show what that event prevents.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from oxiwork.budget import Budget, using
from oxiwork.error import GraphError, InvalidArgument, InvalidPlan
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import drop_event as _drop_event
from oxiwork.executor.simulator import POLICIES, SequentialExecutor, Simulator
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId, NodeKind

__all__ = [
    "KEEP",
    "OPTION_DEFAULTS",
    "OPTION_LIMITS",
    "POLICIES",
    "Session",
    "Stage",
    "check_option",
    "output_differences",
]

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


class _Keep:
    """The type of :data:`KEEP`."""

    def __repr__(self) -> str:
        return "KEEP"


#: "Leave this setting as it is" for :meth:`Session.configure_sim` (``None`` means "no event
#: dropped" there, so it cannot mean "unchanged" too).
KEEP = _Keep()


def output_differences(
    expected: Mapping[str, np.ndarray], actual: Mapping[str, np.ndarray]
) -> list[tuple[str, float | None]]:
    """The outputs of ``actual`` that differ from ``expected``: ``(name, max |difference|)``.

    Exact comparison (NaN equal to NaN): the same plan run in another valid order computes
    every value the same way, so any difference is a race, not rounding. The difference is
    ``None`` when it has no size: an output missing from ``actual``, a shape that changed,
    or a NaN/Inf where the values differ.

    Examples
    --------
    >>> a = {"y": np.array([1.0, 2.0]), "z": np.zeros(2)}
    >>> output_differences(a, {"y": np.array([1.0, 3.5]), "z": np.zeros(2)})
    [('y', 1.5)]
    >>> output_differences(a, {"y": a["y"]})
    [('z', None)]
    >>> output_differences(a, a)
    []
    """
    out: list[tuple[str, float | None]] = []
    for name in sorted(expected):
        want = np.asarray(expected[name])
        if name not in actual:
            out.append((name, None))
            continue
        got = np.asarray(actual[name])
        if want.shape != got.shape:
            out.append((name, None))
            continue
        if np.array_equal(want, got, equal_nan=want.dtype.kind in "fc"):
            continue
        w64, g64 = want.astype(np.float64), got.astype(np.float64)
        differs = ~((w64 == g64) | (np.isnan(w64) & np.isnan(g64)))
        with np.errstate(all="ignore"):
            delta = np.abs(w64 - g64)[differs]
        # A difference involving NaN or Inf has no size.
        out.append((name, float(delta.max()) if np.isfinite(delta).all() else None))
    return out


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
    budget
        The :class:`~oxiwork.budget.Budget` the simulator and the reference run allocate
        under (``None``: the one in force, see :func:`oxiwork.budget.current`).
    inputs
        Values of input buffers by name (an imported model's
        :attr:`~oxiwork.importers.torch.ImportedModel.inputs`): the simulator and the
        reference run start from those the plan touches; inputs not given are generated
        from the seed.

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
        The :class:`~oxiwork.executor.simulator.Simulator` over :attr:`sim_plan`, or
        ``None`` (``notes["sim"]`` says why).
    seconds
        Wall time :meth:`load` took (0 until it ran).

    Raises
    ------
    InvalidArgument
        An option is out of range or of the wrong type (see :func:`check_option`).
    """

    __slots__ = ("_dropped", "_events", "_loaded", "_notes", "_plan", "_policy", "_reference",
                 "_sim", "_sim_plan", "_stages", "_to_plan", "_used_inputs", "budget", "fusion", "graph",
                 "inputs", "max_group_size", "max_streams", "memory_mode", "seconds")  # fmt: skip

    def __init__(
        self,
        graph: ComputeGraph,
        max_streams: int = 4,
        memory_mode: str = "auto",
        *,
        fusion: bool = True,
        max_group_size: int = 16,
        lazy: bool = False,
        budget: Budget | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        # Checked here, not in the pipeline: a bad option is the caller's mistake, to raise,
        # while the pipeline's errors are about the graph and end up in notes.
        self.max_streams = int(check_option("max_streams", max_streams))
        self.fusion = bool(check_option("fusion", fusion))
        self.max_group_size = int(check_option("max_group_size", max_group_size))
        self.graph = graph
        #: The work budget the simulators run under (oxiwork.budget; None: the default).
        self.budget = budget
        #: The input values the simulator starts from (None: all generated from the seed).
        self.inputs = inputs
        self._used_inputs: dict[str, np.ndarray] | None = None  # those the plan touches
        self.memory_mode = memory_mode
        self.seconds = 0.0
        self._stages: list[Stage] = [Stage("input", graph)]
        self._plan: ExecutionPlan | None = None
        self._events: dict[int, tuple[int, ...]] | None = None  # of the plan, made once
        self._notes: dict[str, str] = {}
        self._sim: Simulator | None = None
        # The simulator's settings (configure_sim): a new session, made for a new graph or
        # new options, starts from the defaults, since an event id of the old plan names
        # nothing, or something else, in the new one.
        self._policy = "in_order"
        self._dropped: int | None = None
        self._sim_plan: ExecutionPlan | None = None
        # Index in plan.steps of each step of sim_plan (None: sim_plan is the plan).
        self._to_plan: tuple[int, ...] | None = None
        self._reference: dict[str, np.ndarray] | str | None = None
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
            self._plan, self._sim, self._sim_plan, self._events = None, None, None, None
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
            # Inputs not given are generated from a seed (the simulator warns about it; the
            # widget shows it in the simulator panel instead).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with using(self.budget):
                    self._sim = Simulator(plan, inputs=self._plan_inputs())
            self._sim_plan = plan
        except Exception as e:  # GraphError or an engine bug: the panel shows it
            self._notes["sim"] = f"the simulator could not start: {type(e).__name__}: {e}"

    def _plan_inputs(self) -> dict[str, np.ndarray] | None:
        """:attr:`inputs` of the buffers the plan's steps touch (an edit may leave a value
        of the model no step reads, which a simulator refuses as an unknown input)."""
        if self.inputs is None or self._plan is None:
            return None
        if self._used_inputs is None:
            touched = {a.name for st in self._plan.steps for a in (*st.inputs, *st.outputs)}
            self._used_inputs = {k: v for k, v in self.inputs.items() if k in touched}
        return self._used_inputs

    # ------------------------------------------------------------------ simulator settings
    @property
    def policy(self) -> str:
        """The simulator's interleaving policy (one of :data:`POLICIES`)."""
        return self._policy

    @property
    def dropped_event(self) -> int | None:
        """The event the simulated plan lacks (see :meth:`configure_sim`), or ``None``."""
        return self._dropped

    @property
    def sim_plan(self) -> ExecutionPlan | None:
        """The plan the simulator runs: :attr:`plan`, or a copy without
        :attr:`dropped_event`'s record and wait steps (its steps re-indexed)."""
        self.load()
        return self._sim_plan

    @property
    def events(self) -> dict[int, tuple[int, ...]]:
        """The plan's events: event id -> indices in ``plan.steps`` of its record and waits.

        >>> from oxiwork.examples import quick_start, transformer_block
        >>> Session(quick_start()).events
        {}
        >>> s = Session(transformer_block(1), 4)
        >>> [s.plan.steps[i].kind.value for i in s.events[0]]
        ['event_record', 'event_wait', 'event_wait', 'event_wait']
        """
        if self.plan is None:
            return {}
        if self._events is None:  # the plan is immutable: one scan of its steps
            out: dict[int, list[int]] = {}
            for st in self.plan.steps:
                if st.kind in (NodeKind.EventRecord, NodeKind.EventWait) and st.event is not None:
                    out.setdefault(int(st.event), []).append(st.index)
            self._events = {e: tuple(out[e]) for e in sorted(out)}
        return self._events

    def plan_step(self, index: int) -> int:
        """The index in ``plan.steps`` of step ``index`` of :attr:`sim_plan`.

        Both plans run the same nodes (dropping an event removes steps, it does not change
        the others), so a step is matched by its node; the views, which draw the real plan,
        highlight what the simulator ran through this.

        >>> from oxiwork.examples import transformer_block
        >>> s = Session(transformer_block(1), 4)
        >>> s.configure_sim(drop_event=0)
        >>> s.plan_step(2), s.plan.steps[3].node == s.sim_plan.steps[2].node
        (3, True)
        """
        return index if self._to_plan is None else self._to_plan[index]

    def configure_sim(
        self, policy: str | _Keep = KEEP, drop_event: int | _Keep | None = KEEP
    ) -> None:
        """Rebuild the simulator, reset, with another policy and/or one event dropped.

        Only the simulator changes (the pipeline does not run again). A new session, made
        for a new graph or new options, starts from the defaults (``"in_order"``, no event
        dropped).

        Parameters
        ----------
        policy
            One of :data:`POLICIES` (:class:`~oxiwork.executor.simulator.Simulator`
            explains them); :data:`KEEP` leaves it.
        drop_event
            An event id of the plan (:attr:`events`): simulate
            :func:`~oxiwork.executor.races.drop_event` of the plan, so the dependency that
            event enforces across streams is not enforced; ``None`` simulates the plan
            itself; :data:`KEEP` leaves it.

        Raises
        ------
        InvalidArgument
            Unknown policy, or an event id the plan does not have (a bool is not an id);
            nothing changes.
        InvalidPlan
            There is no plan to simulate (``notes["sim"]`` says why).

        Examples
        --------
        >>> from oxiwork.examples import transformer_block
        >>> s = Session(transformer_block(1), 4)
        >>> s.configure_sim("adversarial", 0)
        >>> len(s.plan.steps) - len(s.sim_plan.steps), s.sim.policy
        (4, 'adversarial')
        >>> _ = s.sim.run()
        >>> diff = output_differences(s.expected_outputs(), s.sim.outputs)
        >>> len(s.sim.races) > 0, [name for name, _ in diff]
        (True, ['L0_resid2_59'])
        >>> try:
        ...     s.configure_sim(drop_event=99)
        ... except InvalidArgument as e:
        ...     print(e)
        drop_event is 99, which is not an event of this plan; its events are 0 to 5
        """
        new_policy = self._policy if isinstance(policy, _Keep) else policy
        new_drop = self._dropped if isinstance(drop_event, _Keep) else drop_event
        if not isinstance(new_policy, str) or new_policy not in POLICIES:
            raise InvalidArgument(
                f"the simulator's policy is {new_policy!r:.60}; choose one of: "
                f"{', '.join(POLICIES)}"
            )
        plan = self.plan
        if plan is None or self._sim is None:
            raise InvalidPlan(self.notes["sim"])
        events = self.events
        if new_drop is not None:
            if isinstance(new_drop, bool) or not isinstance(new_drop, int):
                raise InvalidArgument(
                    f"drop_event must be an event id (an integer) or None, got {new_drop!r:.60}"
                )
            if new_drop not in events:
                have = (
                    f"its events are {min(events)} to {max(events)}"
                    if events and len(events) == max(events) - min(events) + 1
                    else f"its events are: {', '.join(map(str, events))}"
                    if events
                    else "it has none (it runs on one stream): there is nothing to drop"
                )
                raise InvalidArgument(
                    f"drop_event is {new_drop}, which is not an event of this plan; {have}"
                )
        sim_plan = plan if new_drop is None else _drop_event(plan, new_drop)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # generated inputs, as in _build
            # A dropped event breaks the plan on purpose: step through it anyway.
            with using(self.budget):
                sim = Simulator(
                    sim_plan, inputs=self._plan_inputs(), policy=new_policy, seed=self._sim.seed,
                    verify=sim_plan is plan,
                )  # fmt: skip
        to_plan = None
        if sim_plan is not plan:
            index = {st.node: st.index for st in plan.steps}
            to_plan = tuple(index[st.node] for st in sim_plan.steps)
        # Commit only now: every check above leaves the session as it was.
        self._policy, self._dropped = new_policy, new_drop
        self._sim, self._sim_plan, self._to_plan = sim, sim_plan, to_plan

    def expected_outputs(self) -> dict[str, np.ndarray] | None:
        """The real plan's outputs, run in plan order on the simulator's inputs (cached).

        What a simulation must produce if no race changed a value; ``None`` without a plan,
        without values (an op with no numpy reference) or if the plan's own run fails.

        >>> from oxiwork.examples import quick_start
        >>> list(Session(quick_start()).expected_outputs())
        ['output']
        """
        if self._reference is None:
            if self.plan is None or self._sim is None:
                return None
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # generated inputs
                    with using(self.budget):
                        run = SequentialExecutor(self.plan).run
                        ref = run(self._plan_inputs(), seed=self._sim.seed).outputs
            except Exception as e:  # GraphError or an engine bug: no reference to compare
                self._reference = f"{type(e).__name__}: {e}"
                return None
            self._reference = ref if ref is not None else "no values"
        return None if isinstance(self._reference, str) else self._reference

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
