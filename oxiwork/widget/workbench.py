"""The workbench widget: one :class:`anywidget.AnyWidget` over the engine.

Small state is synced in traitlets (the view-model, selection, pass index, simulator
position, errors); the DAG's numeric columns and the inspector's values travel as binary
buffers; requests from the frontend are typed messages, validated by
:mod:`oxiwork.widget.messages`, and their errors come back as ``{"type": "error", ...}``
messages and in the ``errors`` trait, never lost in the kernel log.

The workbench opens progressively: the constructor syncs the input graph's DAG (cheap
analyses only) and marks the views that need the pass pipeline as pending
(``view["pending"]``); the frontend draws, then asks for the rest with a ``load_passes``
message, which runs the pipeline in the kernel and fills those views. Nothing runs in the
background: Python code that needs the pipeline (:attr:`Workbench.plan`,
:meth:`Workbench.chrome_trace`, ``pass_index``, the planner modes, simulator requests) runs
it on the spot, and :meth:`Workbench.load_passes` fills the views from Python.

The pipeline's options (``max_streams``, ``fusion``, ``max_group_size``) are synced traits:
setting one from Python, calling :meth:`Workbench.set_options`, or a ``set_options`` request
from the frontend's pipeline bar rebuilds the engine state like assigning a new graph does,
and every view follows.

The simulator panel is also a race lab: :meth:`Workbench.sim_config` (or a ``sim_config``
request) sets the simulator's interleaving policy and can drop one event of the plan, so a
run shows the races that event prevents and whether the outputs still match the real plan's.

Example
-------
>>> from oxiwork.examples import quick_start
>>> w = Workbench(quick_start())
>>> w.view["dag"]["num_nodes"], w.selection, w.view["pending"]
(4, -1, True)
>>> w.handle_message({"type": "load_passes", "request_id": "r0"})["type"]
'ok'
>>> w.view["pending"], w.view["passes"]["entries"][1]["name"]
(False, 'fusion')
>>> w.handle_message({"type": "select", "request_id": "r1", "node": 1})
{'type': 'ok', 'request_id': 'r1', 'message': 'selected relu'}
>>> w.selection
1
>>> w.handle_message({"type": "set_options", "request_id": "r2", "fusion": False})["message"]
'options: 4 streams, fusion off'
>>> w.view["pending"]  # at the input stage, the new passes run when asked for
True
>>> w.load_passes()
>>> [e["name"] for e in w.view["passes"]["entries"]]
['input', 'streams', 'memory']
"""

from __future__ import annotations

import json
import pathlib
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anywidget
import numpy as np
import traitlets

from oxiwork import explore
from oxiwork.analysis import paused_gc
from oxiwork.budget import Budget, using
from oxiwork.builder import GraphBuilder
from oxiwork.error import (
    ExecutionError,
    GraphError,
    GraphWarning,
    InvalidArgument,
    InvalidPlan,
    MessageError,
    UnknownBuffer,
    UnknownNode,
)
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.timeline import MODES as STREAM_MODES
from oxiwork.explore import SweepTable
from oxiwork.export.perfetto import perfetto_trace
from oxiwork.graph import ComputeGraph
from oxiwork.importers.torch import ImportedModel
from oxiwork.node import BufferId, NodeId, NodeKind
from oxiwork.optimizer.memory import MODES as MEMORY_MODES
from oxiwork.widget import eager
from oxiwork.widget import viewmodel as vm
from oxiwork.widget.edits import EDITS, apply_edit
from oxiwork.widget.messages import validate
from oxiwork.widget.session import (
    KEEP,
    OPTION_DEFAULTS,
    POLICIES,
    Session,
    _Keep,
    check_option,
    output_differences,
)

__all__ = ["InvalidOption", "NotAGraph", "Workbench"]

STATIC = pathlib.Path(__file__).resolve().parent.parent / "static"
MAX_ERRORS = 20
COLOR_MODES = ("kind", "slack", "critical", "stream", "group", "dominator", "postdominator")
#: Shown in the views that need the pass pipeline until it has run.
PENDING = "computing passes…"
#: Up to this many input nodes, a displayed workbench puts every stage's view in its state
#: after the cell (:meth:`Workbench.save_stages`), so a saved notebook switches passes offline.
SAVED_STAGES_MAX_NODES = 5000


# What Workbench._set_graph saves and restores when installing a graph fails.
_SYNCED_STATE = ("view", "dag", "selection", "details", "pass_index", "sim_position",
                 "sim_state", "inspector", "inspector_values", "saved_stages",
                 "sweep_table")  # fmt: skip
_CACHES = ("_dag_cache", "_memory_cache", "_streams_cache", "_summary_cache", "_topo_cache")
_PLAIN_STATE = ("_sim_message", "_sim_verdict", "_view_pending", "_fusion_cache", "_model",
                "_expected", "_values", "_binding_note", "_eager_verdict")  # fmt: skip


def _sendable_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_sendable(state: dict[str, Any]) -> None:
    """Refuse state Jupyter cannot send: its JSON must be strict (no NaN) and UTF-8 (no lone
    surrogates), as ``jupyter_client.session.json_packer`` writes it."""
    try:
        json.dumps(
            {k: v for k, v in state.items() if not isinstance(v, bytes)},
            ensure_ascii=False,
            allow_nan=False,
        ).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        raise InvalidArgument(
            f"the workbench cannot send this graph's views ({type(e).__name__}: {e}); "
            "please report it"
        ) from None


class NotAGraph(InvalidArgument, TypeError):
    """The workbench was given something that is not a graph or a builder (a
    :class:`~oxiwork.error.GraphError`, and a ``TypeError`` as Python code expects)."""


class InvalidOption(InvalidArgument, traitlets.TraitError):
    """A pipeline option set from Python is of the wrong type or out of range.

    An :class:`~oxiwork.error.InvalidArgument` (``except GraphError`` catches it) and a
    :class:`traitlets.TraitError`, so that traitlets rolls back a change made under
    ``hold_trait_notifications`` (as ipywidgets does for state sent by a frontend).
    """


class _PipelineOption(traitlets.TraitType):  # type: ignore[type-arg]
    """A synced pipeline option; its values are checked by :func:`session.check_option`."""

    def validate(self, obj: Any, value: Any) -> Any:
        try:
            return check_option(str(self.name), value)
        except InvalidArgument as e:
            raise InvalidOption(f"Workbench.{e}") from None


class Workbench(anywidget.AnyWidget):
    """Interactive workbench for a compute graph: DAG, passes, memory, streams, simulator.

    Parameters
    ----------
    graph_or_builder
        A :class:`~oxiwork.graph.ComputeGraph`, or a :class:`~oxiwork.builder.GraphBuilder`
        (built on the spot).
    max_streams
        Most streams the execution plan may use (1 to 32).
    fusion
        Run the fusion pass.
    max_group_size
        Most kernels one fused kernel may replace (1 to 64).
    memory_mode
        The memory planner (``"auto"``, the planner's default: the exact search within a
        budget that grows with the graph; ``"heuristic"``; ``"exact"``).
    progressive
        Open with the input graph's DAG and run the pass pipeline when the frontend asks
        for it after its first draw (or when Python needs it). ``False`` runs it in the
        constructor, so the first synced state is complete (for headless runs whose saved
        widget state should hold every view).
    budget
        The :class:`~oxiwork.budget.Budget` of this workbench's requests: how many bytes the
        simulator may allocate, how many nodes and buffers edits may grow the graph to
        (``None``: :func:`oxiwork.budget.current`).
    expected
        For an :class:`~oxiwork.importers.torch.ImportedModel`: the outputs to compare the
        simulation with (a tuple of arrays or tensors in torch's order, or a dict by output
        buffer name); default: the model's
        :attr:`~oxiwork.importers.torch.ImportedModel.eager_outputs`, which
        :func:`~oxiwork.importers.torch.from_module` computes (a model from
        ``from_exported_program`` has none: pass them here).
    tolerance
        ``(rtol, atol)`` of that comparison for every output; default: per output dtype,
        :data:`oxiwork.widget.eager.TOLERANCES` (``torch.testing.assert_close``'s).

    An imported model is *bound*: the simulator starts from its real input and weight
    values (:attr:`~oxiwork.importers.torch.ImportedModel.inputs`), and a run to the end
    (or :meth:`compare_eager`) shows, per output, the max |Δ| against eager and whether it
    is allclose. An edit in the UI, or assigning another graph, drops the binding (the
    simulator panel says so): the edited graph is no longer the module.

    Attributes
    ----------
    graph
        The current input graph; assigning a new one redraws every view.
    session
        The engine state (:class:`~oxiwork.widget.session.Session`).
    max_streams, fusion, max_group_size
        The pipeline's options (synced traits); setting one re-plans, see :meth:`set_options`.

    Raises
    ------
    InvalidOption
        A pipeline option is of the wrong type or out of range, or ``expected`` /
        ``tolerance`` is given without an imported model or is malformed.
    """

    _esm = STATIC / "widget.js"
    _css = STATIC / "widget.css"

    view = traitlets.Dict().tag(sync=True)
    dag = traitlets.Bytes(b"").tag(sync=True)
    selection = traitlets.Int(-1).tag(sync=True)
    details = traitlets.Dict().tag(sync=True)
    pass_index = traitlets.Int(0).tag(sync=True)
    sim_position = traitlets.Int(-1).tag(sync=True)
    color_mode = traitlets.Unicode("kind").tag(sync=True)
    memory_mode = traitlets.Enum(MEMORY_MODES, default_value="auto").tag(sync=True)
    #: Launch mode of the stream timeline: ``"graph"`` (one CUDA graph launch) or ``"stream"``.
    stream_mode = traitlets.Enum(STREAM_MODES, default_value="graph").tag(sync=True)
    sim_state = traitlets.Dict().tag(sync=True)
    errors = traitlets.List(traitlets.Dict()).tag(sync=True)
    inspector = traitlets.Dict().tag(sync=True)
    inspector_values = traitlets.Bytes(b"").tag(sync=True)
    #: A pinned plan's figures (:meth:`pin`), compared with the current plan's in the Compare tab.
    pinned = traitlets.Dict().tag(sync=True)
    #: Every pass stage's view, for a notebook saved as HTML (:meth:`save_stages`): the
    #: saved page's pass slider switches between them with no kernel.
    saved_stages = traitlets.Dict().tag(sync=True)
    #: The last :meth:`sweep` of this graph (the Sweep tab's chart); {} before one.
    sweep_table = traitlets.Dict().tag(sync=True)
    # Options of ExecutionPlan.build. Three traits rather than one dict: each is a plain
    # attribute in Python (``w.fusion = False``), checked on its own, and the frontend reads
    # them without unpacking; set_options changes several with one rebuild.
    max_streams = _PipelineOption(OPTION_DEFAULTS["max_streams"]).tag(sync=True)
    fusion = _PipelineOption(OPTION_DEFAULTS["fusion"]).tag(sync=True)
    max_group_size = _PipelineOption(OPTION_DEFAULTS["max_group_size"]).tag(sync=True)

    def __init__(
        self,
        graph_or_builder: ComputeGraph | GraphBuilder | ImportedModel,
        *,
        max_streams: int = 4,
        fusion: bool = True,
        max_group_size: int = 16,
        memory_mode: str = "auto",
        progressive: bool = True,
        budget: Budget | None = None,
        expected: Any = None,
        tolerance: tuple[float, float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidOption(f"Workbench budget must be a Budget, got {type(budget).__name__}")
        #: Work limits of this workbench's requests (oxiwork.budget; None: the default).
        self.budget = budget
        # No session yet, so these only check the values (see _on_option).
        self.max_streams = max_streams
        self.fusion = fusion
        self.max_group_size = max_group_size
        self._progressive = progressive
        if memory_mode not in MEMORY_MODES:  # before traitlets says it less helpfully
            raise InvalidOption(
                f"Workbench memory_mode must be one of {', '.join(map(repr, MEMORY_MODES))}, "
                f"got {memory_mode!r}"
            )
        self.memory_mode = memory_mode
        self._graph = self._coerce(graph_or_builder)
        self._tolerance = _check_tolerance(tolerance)
        self._model, self._expected = _binding(graph_or_builder, expected)
        #: The input values the simulator starts from: the bound model's; after an edit, those
        #: of its buffers the edited graph still has alike (None: generated from the seed).
        self._values = self._model.inputs if self._model is not None else None
        t0 = time.perf_counter()
        self.session = self._new_session(self._graph, lazy=progressive)
        t1 = time.perf_counter()
        self._dag_cache: dict[int, tuple[dict[str, Any], bytes]] = {}
        self._memory_cache: dict[str, dict[str, Any]] = {}
        # The plan's timeline per launch mode: the same at every slider stop that shows it.
        self._streams_cache: dict[str, dict[str, Any]] = {}
        self._summary_cache: dict[int, list[list[str]]] = {}
        self._topo_cache: dict[int, Any] = {}
        self._fusion_cache: tuple[Any, dict[NodeId, list[list[str]]]] = (None, {})
        self.on_msg(self._on_msg)
        self._refresh(reset=True)
        #: Seconds the constructor's engine part (the whole pipeline unless progressive) and
        #: view-model took; :meth:`load_passes` adds ``passes_s`` and ``passes_view_s``.
        self.timings = {"engine_s": t1 - t0, "view_s": time.perf_counter() - t1}

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """Displayed in a notebook: the widget view, and the passes after the cell (see
        :meth:`_fill_after_cell`)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if self._progressive and not self.passes_loaded:
            self._fill_after_cell()
        return bundle

    _fill_pending = False

    def _fill_after_cell(self) -> None:
        """In IPython, run the passes once the cell that displayed this workbench has finished.

        The cell's output (the input DAG) has been sent by then, so the frontend still draws
        first; the passes then fill the views whether or not a frontend asks for them, so a
        notebook executed headless (nbconvert, nbclient) saves the full pipeline's views in
        its widget state, not only the input DAG. The frontend's ``load_passes`` request
        finds them computed. A workbench that is never displayed, or runs outside IPython,
        is left as it is.
        """
        if self._fill_pending:
            return
        try:
            from IPython import get_ipython
        except ImportError:  # pragma: no cover (IPython comes with ipywidgets)
            return
        ip = get_ipython()
        if ip is None or not hasattr(ip, "events"):
            return
        events = ip.events

        def fill(*_args: Any) -> None:
            events.unregister("post_run_cell", fill)
            self._fill_pending = False
            try:
                self.load_passes()
                if self._graph.num_nodes <= SAVED_STAGES_MAX_NODES:
                    self.save_stages()
            except Exception as e:  # the views show the engine's errors; never break the cell
                self._error("", e, internal=not isinstance(e, GraphError))

        events.register("post_run_cell", fill)
        self._fill_pending = True

    # ------------------------------------------------------------------ public API
    @staticmethod
    def _coerce(obj: Any) -> ComputeGraph:
        if isinstance(obj, GraphBuilder):
            return obj.build()
        if isinstance(obj, ComputeGraph):
            return obj
        # A model from oxiwork.importers.torch: its graph (kernels named by module path,
        # which the DAG groups). The importer module itself does not import torch.
        if isinstance(obj, ImportedModel):
            return obj.graph
        hint = (
            " (for a torch module, import it first: "
            "Workbench(oxiwork.importers.torch.from_module(module, (x,))))"
            if any(c.__module__.split(".")[0] == "torch" for c in type(obj).__mro__)
            else ""
        )
        raise NotAGraph(
            "Workbench needs a ComputeGraph, a GraphBuilder or an ImportedModel, got "
            f"{type(obj).__name__}{hint}"
        )

    @property
    def graph(self) -> ComputeGraph:
        """The current input graph (edits in the UI replace it)."""
        return self._graph

    @graph.setter
    def graph(self, value: ComputeGraph | GraphBuilder | ImportedModel) -> None:
        graph = self._coerce(value)
        model, expected = _binding(value, None)
        note = ""
        if model is None and self._model is not None:
            note = (
                f"model binding dropped: w.graph was set to another graph, so the simulator's "
                f"inputs are generated and nothing is compared with {self._model.name}'s "
                "PyTorch eager outputs"
            )
        values = model.inputs if model is not None else None
        self._set_graph(graph, model=model, expected=expected, values=values, note=note)

    @property
    def model(self) -> ImportedModel | None:
        """The imported model this workbench simulates (its values, its eager outputs), or
        ``None``: a plain graph, or the binding was dropped by an edit (the simulator panel
        says why, as does :attr:`binding_note`)."""
        return self._model

    @property
    def binding_note(self) -> str:
        """Why the workbench no longer simulates the imported model's values (``""`` while
        it does, or if it never did)."""
        return self._binding_note

    _binding_note = ""

    def compare_eager(self) -> dict[str, Any]:
        """Run the plan in plan order on the model's values and compare its outputs with
        PyTorch eager; show the verdict in the simulator panel and return it.

        The verdict (``sim_state["eager"]``): ``match``, a line of ``text``, and per output
        its name, shape, dtype, ``max_abs_diff``, the ``rtol`` / ``atol`` used and
        ``allclose``. A simulation run to the end sets it too, from its own outputs (so a
        dropped event that changes the model's result shows as a mismatch).

        Raises
        ------
        InvalidArgument
            No imported model is bound (a plain graph, or an edit dropped the binding), or
            it has no eager outputs to compare with (pass ``expected=``).
        InvalidPlan
            The pipeline failed on the graph.

        Examples
        --------
        >>> import torch
        >>> from oxiwork.importers.torch import from_module
        >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
        >>> w = Workbench(from_module(net, (torch.randn(2, 4),)))
        >>> v = w.compare_eager()
        >>> v["match"], v["outputs"][0]["shape"], v["outputs"][0]["rtol"]
        (True, [2, 3], 1.3e-06)
        """
        self._check_comparable()
        self.load_passes()
        s = self.session
        if s.plan is None:
            raise InvalidPlan(f"nothing to compare: {s.notes['plan']}; fix the graph")
        verdict = self._eager_check(s.expected_outputs(), "plan run in order")
        with self.hold_sync():
            self._eager_verdict = verdict
            self.sim_state = self._sim_state()
        return verdict

    def _check_comparable(self) -> None:
        if self._model is None:
            why = self._binding_note or "this workbench shows a plain graph, not an imported model"
            raise InvalidArgument(f"nothing to compare with PyTorch eager: {why}")
        if self._expected is None:
            raise InvalidArgument(
                f"{self._model.name} carries no eager outputs (imported with "
                "from_exported_program?): pass them as Workbench(model, expected=(y,))"
            )

    def _eager_check(self, outputs: dict[str, np.ndarray] | None, source: str) -> dict[str, Any]:
        """The bound model's ``outputs`` (a run's buffer values) against its eager ones."""
        model, expected = self._model, self._expected
        assert model is not None and expected is not None  # _check_comparable / callers
        if outputs is None:
            text = "not compared with PyTorch eager: the run computed no values"
            return {"match": None, "text": text, "source": source, "outputs": []}
        got = model.outputs_from(outputs)
        matches = eager.compare(model.outputs, got, expected, self._tolerance)
        return eager.eager_section(matches, source)

    def _model_section(self) -> dict[str, Any] | None:
        """What the simulator panel says about the imported model (``None``: never one)."""
        if self._model is None:
            if not self._binding_note:
                return None
            kept = len(self._values) if self._values is not None else 0
            return {"bound": False, "name": "", "note": self._binding_note, "eager": False,
                    "values": kept}  # fmt: skip
        m = self._model
        return {
            "bound": True, "name": m.name, "note": "", "eager": self._expected is not None,
            "values": len(m.inputs), "user_inputs": list(m.user_inputs),
            "outputs": len(m.outputs),
        }  # fmt: skip

    @property
    def plan(self) -> ExecutionPlan | None:
        """The execution plan of the current graph, or ``None`` if the pipeline failed on it
        (the simulator panel and ``session.notes["plan"]`` say why). Runs the pipeline first
        if it has not run yet."""
        self.load_passes()
        return self.session.plan

    @property
    def passes_loaded(self) -> bool:
        """Whether the pass pipeline of the current graph has run and its views are synced."""
        return self.session.loaded and not self._view_pending

    def load_passes(self) -> None:
        """Run the pass pipeline now if it has not run, and fill the views that wait for it.

        The frontend asks for this (a ``load_passes`` message) after its first draw; call it
        from Python to get the complete view-model without a frontend. Idempotent.

        Examples
        --------
        >>> from oxiwork.examples import quick_start
        >>> w = Workbench(quick_start())
        >>> w.passes_loaded, w.view["memory"]["reason"]
        (False, 'computing passes…')
        >>> w.load_passes()
        >>> w.passes_loaded, w.view["passes"]["available"]
        (True, True)
        """
        if not self.session.loaded:
            self.session.load()
            self.timings["passes_s"] = self.session.seconds
        if self._view_pending:
            t0 = time.perf_counter()
            self._refresh()
            self.timings["passes_view_s"] = time.perf_counter() - t0

    def save_stages(self) -> None:
        """Put every pass stage's view into the synced state (:attr:`saved_stages`).

        A notebook saved with its widget state then holds the whole pipeline, not only the
        stage on screen, and its HTML export (:mod:`oxiwork.export.notebook`) switches
        passes without a kernel. A displayed workbench of up to
        :data:`SAVED_STAGES_MAX_NODES` nodes does this after its cell; any change of the
        graph or the options clears it. Runs the passes if they have not run.

        Examples
        --------
        >>> from oxiwork.examples import quick_start
        >>> w = Workbench(quick_start())
        >>> w.save_stages()
        >>> [st["dag"]["title"] for st in w.saved_stages["stages"]]
        ['input graph', 'after fusion', 'after streams', 'after memory']
        >>> len(w.saved_stages["dags"]) == len(w.session.stages)
        True
        """
        self.load_passes()
        with paused_gc():
            stages, dags, sections = [], [], []
            index: dict[int, int] = {}

            def ref(section: dict[str, Any]) -> int:
                # One copy of the memory and stream sections, which most stages share.
                if id(section) not in index:
                    index[id(section)] = len(sections)
                    sections.append(section)
                return index[id(section)]

            for i in range(self._num_stages()):
                staged, blob = self._stage_view(i)
                staged["memory"] = ref(staged["memory"])
                staged["streams"] = ref(staged["streams"])
                stages.append(staged)
                dags.append(blob)
            self.saved_stages = {"stages": stages, "dags": dags, "sections": sections}

    def chrome_trace(self, mode: str | None = None) -> str:
        """The plan's timeline as a Chrome trace (JSON for chrome://tracing or Perfetto),
        made by :func:`oxiwork.export.perfetto_trace`.

        ``mode`` is ``"graph"`` or ``"stream"`` (default: :attr:`stream_mode`). Write it to a
        file and open it there: ``pathlib.Path("plan.json").write_text(w.chrome_trace())``.

        Raises
        ------
        InvalidPlan
            The pipeline failed on the graph, so there is no plan to trace.
        InvalidArgument
            Unknown ``mode``.

        Examples
        --------
        >>> import json
        >>> from oxiwork.examples import quick_start
        >>> trace = json.loads(Workbench(quick_start()).chrome_trace("stream"))
        >>> [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
        ['upload', 'relu+scale', 'download']
        """
        if self.plan is None:
            raise InvalidPlan(f"no plan to trace: {self.session.notes['plan']}; fix the graph")
        return perfetto_trace(self.session.plan, modes=(mode or self.stream_mode,))

    def save_html(self, path: str | pathlib.Path, *, title: str | None = None) -> pathlib.Path:
        """Save a self-contained offline HTML report of the plan (summary tables and every
        view as SVG; :func:`oxiwork.export.html.report_html`); returns the path.

        Raises
        ------
        InvalidPlan
            The pipeline failed on the graph, so there is no plan to report.
        """
        from oxiwork.export.html import save_report

        if self.plan is None:
            raise InvalidPlan(f"no plan to report: {self.session.notes['plan']}; fix the graph")
        return save_report(self.session.plan, path, title=title)

    @property
    def options(self) -> dict[str, int | bool]:
        """The pipeline options the current plan was built with.

        >>> from oxiwork.examples import quick_start
        >>> Workbench(quick_start(), max_streams=2).options
        {'max_streams': 2, 'fusion': True, 'max_group_size': 16}
        """
        return self.session.options

    def set_options(
        self,
        *,
        max_streams: int | None = None,
        fusion: bool | None = None,
        max_group_size: int | None = None,
    ) -> bool:
        """Change pipeline options (``None`` keeps one) and re-plan once; return whether any
        option changed.

        Every view follows, as after assigning a new :attr:`graph`: at the input stage of a
        progressive workbench the passes run when asked for; past it they run now, and the
        pass slider stays on the same pass if the new pipeline has it (else the nearest
        position that exists). The simulator restarts; a selection the graph on screen no
        longer has is cleared.

        Raises
        ------
        InvalidOption
            A value is of the wrong type or out of range; nothing changes.

        Examples
        --------
        >>> from oxiwork.examples import transformer_block
        >>> w = Workbench(transformer_block(1))
        >>> w.set_options(max_streams=1, fusion=False)
        True
        >>> w.plan.num_streams, w.plan.kernel_count_fused == w.plan.kernel_count_original
        (1, True)
        >>> w.set_options(max_streams=1)
        False
        """
        given = {"max_streams": max_streams, "fusion": fusion, "max_group_size": max_group_size}
        wanted = {}
        for name, value in given.items():
            if value is not None:
                try:
                    wanted[name] = check_option(name, value)
                except InvalidArgument as e:  # before anything changes
                    raise InvalidOption(f"Workbench.{e}") from None
        changed = {k: v for k, v in wanted.items() if getattr(self, k) != v}
        if not changed:
            return False
        with self.hold_sync():
            self._set_option_traits(changed)
            self._apply_options()
        return True

    def _set_option_traits(self, values: dict[str, Any]) -> None:
        """Set option traits without re-planning for each one (the caller re-plans once)."""
        self._setting_options = True
        try:
            for name, value in values.items():
                setattr(self, name, value)
        finally:
            self._setting_options = False

    def sweep(
        self,
        max_streams: Iterable[int] | int = (1, 2, 4, 8),
        fusion: Iterable[bool] | bool = (True, False),
        max_group_size: Iterable[int] | int | None = None,
    ) -> SweepTable:
        """Plan this graph under every combination of the settings; show the table as a chart.

        Runs :func:`oxiwork.explore.sweep` on :attr:`graph` (with this workbench's memory
        planner, and its group size unless others are given) and syncs the rows to the
        Sweep tab: modelled makespan against arena, the Pareto front marked, the current
        setting ringed. Clicking a point there sets those options (as :meth:`set_options`),
        so the workbench then plans that setting; its plan may use fewer streams than the
        point's cap, since the workbench weighs memory against speed the way
        :meth:`ExecutionPlan.build` does by default and the sweep does not.

        Raises
        ------
        InvalidArgument
            An empty or mistyped list of values (from :func:`oxiwork.explore.sweep`).
        GraphError
            The pipeline failed on the graph for some setting (it names the pass).

        Examples
        --------
        >>> from oxiwork.examples import transformer_block
        >>> w = Workbench(transformer_block(1))
        >>> t = w.sweep(max_streams=[1, 4], fusion=[True])
        >>> [r["max_streams"] for r in w.sweep_table["rows"]], any(r.pareto for r in t.rows)
        ([1, 4], True)
        """
        groups = self.max_group_size if max_group_size is None else max_group_size
        with using(self.budget):
            table = explore.sweep(
                self._graph, max_streams=max_streams, fusion=fusion,
                memory_mode=(self.memory_mode,), max_group_size=groups,
            )  # fmt: skip
        self.sweep_table = {
            "rows": table.to_records(),
            "objectives": list(table.objectives),
            "nodes": self._graph.num_nodes,
        }
        return table

    def pin(self) -> dict[str, Any]:
        """Pin the current plan's figures, to compare other settings against; return them.

        The Compare tab sets them beside the current plan's (:func:`viewmodel.plan_figures`:
        kernels, steps, streams, events, arena, modelled times) and lists the kernels only one
        of the two has. Change an option (``w.max_streams = 1``, ``w.fusion = False``) and
        the comparison follows; the pin stays until :meth:`unpin` or another :meth:`pin`.

        Raises
        ------
        InvalidPlan
            The pipeline failed on the graph: there is no plan to pin.

        Examples
        --------
        >>> from oxiwork.examples import transformer_block
        >>> w = Workbench(transformer_block(1))
        >>> w.pin()["options"]["max_streams"]
        4
        >>> w.set_options(max_streams=1)
        True
        >>> w.load_passes()
        >>> w.pinned["streams"], w.view["figures"]["streams"]
        (4, 1)
        """
        self.load_passes()
        if self.session.plan is None:
            raise InvalidPlan(f"no plan to pin: {self.session.notes['plan']}; fix the graph")
        self.pinned = self._figures() or {}
        return dict(self.pinned)

    def unpin(self) -> None:
        """Forget the pinned plan (:meth:`pin`)."""
        self.pinned = {}

    def _figures(self) -> dict[str, Any] | None:
        s = self.session
        if not s.loaded or s.plan is None:
            return None
        if self._figures_cache[0] is not s.plan:
            figures = _section("plan figures", lambda: vm.plan_figures(s.plan))
            self._figures_cache = (s.plan, figures)
        return self._figures_cache[1]

    _figures_cache: tuple[Any, dict[str, Any] | None] = (None, None)

    @property
    def sim_settings(self) -> dict[str, Any]:
        """The simulator's settings: ``{"policy": ..., "drop_event": ...}`` (see
        :meth:`sim_config`).

        >>> from oxiwork.examples import quick_start
        >>> Workbench(quick_start()).sim_settings
        {'policy': 'in_order', 'drop_event': None}
        """
        return {"policy": self.session.policy, "drop_event": self.session.dropped_event}

    def sim_config(self, policy: str | _Keep = KEEP, drop_event: int | _Keep | None = KEEP) -> str:
        """Set the simulator's policy and/or drop one event of the plan; return what it did.

        Rebuilds only the simulator (the pipeline does not run again) and resets it: on
        :func:`~oxiwork.executor.races.drop_event` of the plan when ``drop_event`` is an
        event id, on the plan itself when it is ``None``, under ``policy`` (one of
        :data:`~oxiwork.executor.simulator.POLICIES`). An argument left out keeps its
        setting. Re-planning (a new graph, new options) resets both to the defaults,
        ``"in_order"`` and no event dropped: an event id of the old plan means nothing in
        the new one.

        The views keep drawing the real plan: the simulator's position
        (:attr:`sim_position`, ``sim_state["position"]``) and its races name steps of the
        real plan (matched by node), and the dropped record/wait steps are listed in
        ``sim_state["dropped_steps"]``. Once a run finishes, ``sim_state["verdict"]`` says
        whether the outputs still match the real plan's (run in plan order on the same
        inputs) and, if not, which buffers differ and by how much.

        Raises
        ------
        InvalidArgument
            Unknown policy, or an event id the plan does not have; nothing changes.
        InvalidPlan
            The pipeline failed on the graph, so there is nothing to simulate.

        Examples
        --------
        >>> from oxiwork.examples import transformer_block
        >>> w = Workbench(transformer_block(1), max_streams=4)
        >>> print(w.sim_config(policy="adversarial", drop_event=0)[:61])
        simulator: adversarial policy, event 0 dropped (e0: record(L0
        >>> w.handle_message({"type": "sim", "action": "run"})["type"]
        'ok'
        >>> len(w.sim_state["races"]) > 0, w.sim_state["verdict"]["match"]
        (True, False)
        >>> w.sim_config(drop_event=None)
        'simulator: adversarial policy, every event kept; reset'
        """
        self.session.configure_sim(policy, drop_event)  # checks first: may raise, changes nothing
        s = self.session
        e = s.dropped_event
        dropped = (
            f"event {e} dropped ({self._event_label(e, s.events[e])})" if e is not None else None
        )
        text = f"simulator: {s.policy} policy, {dropped or 'every event kept'}; reset"
        with self.hold_sync():
            self.load_passes()  # a progressive workbench shows the views of the pipeline it ran
            self._sim_message = text
            self._sim_verdict = None
            self._after_sim()
        return text

    def _event_label(self, event: int, idx: tuple[int, ...]) -> str:
        """``"e3: record(x) s0 → wait s1"``: an event (its record and wait steps ``idx``) as
        the drop-event menu names it."""
        steps = self.session.plan.steps if self.session.plan is not None else ()
        rec = [steps[i] for i in idx if steps[i].kind is NodeKind.EventRecord]
        waits = [f"s{int(steps[i].stream)}" for i in idx if steps[i].kind is NodeKind.EventWait]
        head = f"{rec[0].name} s{int(rec[0].stream)}" if rec else "no record"
        return f"e{event}: {head} → wait {', '.join(waits) or 'nowhere'}"

    def _new_session(
        self, graph: ComputeGraph, *, lazy: bool, values: Mapping[str, Any] | _Keep | None = KEEP
    ) -> Session:
        """A session of ``graph`` with the option traits, simulating with input ``values``
        (:data:`KEEP`: the workbench's)."""
        values = self._values if isinstance(values, _Keep) else values
        return Session(
            graph,
            self.max_streams,
            self.memory_mode,
            fusion=self.fusion,
            max_group_size=self.max_group_size,
            lazy=lazy,
            budget=self.budget,
            inputs=values,
        )

    def _set_graph(
        self,
        graph: ComputeGraph,
        *,
        model: ImportedModel | None = None,
        expected: tuple[np.ndarray, ...] | None = None,
        values: Mapping[str, Any] | None = None,
        note: str = "",
    ) -> None:
        """Show ``graph``, bound to ``model`` (``expected`` its eager outputs) or to nothing,
        simulated from input ``values``; ``note`` says why a binding was dropped."""
        # Past the input on the slider, the stages must exist to stay there (as before an
        # edit); at the input, the new graph is drawn first and its passes follow.
        lazy = self._progressive and self.pass_index == 0
        session = self._new_session(graph, lazy=lazy, values=values)
        # Commit only after the engine accepted the graph, and all or nothing: if drawing
        # the new views or sending them fails, the workbench goes back to the old graph.
        saved = self._snapshot()
        try:
            with self.hold_sync():
                self._graph = graph
                self._model, self._expected, self._binding_note = model, expected, note
                self._values = values
                self.sweep_table = {}  # a sweep of the old graph
                self._install(session)
                _check_sendable({k: getattr(self, k) for k in _SYNCED_STATE})
        except BaseException:
            self._restore(saved)
            raise

    def _snapshot(self) -> tuple[Any, ...]:
        """What :meth:`_install` changes, to put back with :meth:`_restore`."""
        caches = {k: dict(getattr(self, k)) for k in _CACHES}
        extra = {k: getattr(self, k) for k in _PLAIN_STATE}
        traits = {k: getattr(self, k) for k in _SYNCED_STATE}
        return self._graph, self.session, caches, extra, traits

    def _restore(self, saved: tuple[Any, ...]) -> None:
        graph, session, caches, extra, traits = saved
        self._graph, self.session = graph, session
        for k, v in caches.items():
            getattr(self, k).clear()
            getattr(self, k).update(v)
        for k, v in extra.items():
            setattr(self, k, v)
        # Straight into the trait store: these values were valid and on screen, and going
        # through the observers would redraw (and could fail) again.
        for k, v in traits.items():
            self._trait_values[k] = v
        self.send_state(list(traits))

    def _apply_options(self) -> None:
        """Re-plan the current graph with the option traits, if they differ from the plan's."""
        old = self.session.options
        if {k: getattr(self, k) for k in old} == old:
            return
        # The pass on screen, to stay on it if the new pipeline has it (fusion off removes
        # the "fusion" stage and shifts the others).
        shown = self._stage(self._stage_index()).name if self.pass_index > 0 else None
        try:
            session = self._new_session(self._graph, lazy=self._progressive and not shown)
        except BaseException:
            # Interrupted (Ctrl-C): the traits go back to the options of the plan on screen.
            self._set_option_traits(old)
            raise
        names = [st.name for st in session.stages] if shown else []
        # Ids of nodes a pass creates (fused kernels, events) are only unique within one
        # pipeline run: the selection stays only if it names the same node in the new one.
        g = self._graph_shown()
        selected = g.node(NodeId(self.selection)).name if g.has_node(self.selection) else None
        with self.hold_sync():
            self._install(session, names.index(shown) if shown in names else None)
            g = self._graph_shown()
            if self.selection >= 0 and g.node(NodeId(self.selection)).name != selected:
                self.selection = -1

    def _install(self, session: Session, pass_index: int | None = None) -> None:
        """Show ``session``: drop what was computed for the old one and redraw every view."""
        self.session = session
        self._dag_cache.clear()
        self._memory_cache.clear()
        self._streams_cache.clear()
        self._summary_cache.clear()
        self._topo_cache.clear()
        self._refresh(reset=True, pass_index=pass_index)

    # ------------------------------------------------------------------ trait changes
    # Python code may set these traits too (``w.pass_index = 2``); the views follow.
    @traitlets.validate("color_mode")
    def _valid_color_mode(self, proposal: Any) -> str:
        value = proposal["value"]
        return value if value in COLOR_MODES else "kind"

    @traitlets.validate("pass_index")
    def _valid_pass_index(self, proposal: Any) -> int:
        if not hasattr(self, "session"):
            n = 1
        elif proposal["value"] == 0:
            n = self._num_stages()  # the input is always there: no need for the pipeline
        else:
            n = len(self.session.stages)  # runs the pipeline if it has not run yet
        if not 0 <= proposal["value"] < n:
            raise traitlets.TraitError(
                f"pass_index is {proposal['value']}; the pipeline has positions 0..{n - 1}"
            )
        return proposal["value"]

    @traitlets.observe("pass_index", "memory_mode", "stream_mode")
    def _redraw(self, change: Any) -> None:
        if hasattr(self, "_summary_cache"):  # not during __init__
            if change["name"] != "pass_index":
                self.session.load()  # a planner mode is a question about the passes
            self._refresh()

    _setting_options = False

    @traitlets.observe("max_streams", "fusion", "max_group_size")
    def _on_option(self, _change: Any) -> None:
        # Not during __init__ (no session yet) nor while set_options sets several at once.
        if hasattr(self, "_summary_cache") and not self._setting_options:
            self._apply_options()

    @traitlets.observe("selection")
    def _on_selection(self, _change: Any) -> None:
        if hasattr(self, "_summary_cache"):
            self._update_details()

    # ------------------------------------------------------------------ view-model
    # Until the pipeline has run, the views see one stage (the input graph) and the sections
    # that need the passes are pending; nothing here runs the pipeline by reading the session.
    def _num_stages(self) -> int:
        return len(self.session.stages) if self.session.loaded else 1

    def _stage(self, index: int) -> Any:
        return self.session.stages[index] if index else self.session.input_stage

    def _stage_index(self) -> int:
        return max(0, min(self.pass_index, self._num_stages() - 1))

    def _dag_for(self, index: int) -> tuple[dict[str, Any], bytes]:
        if index not in self._dag_cache:
            st = self._stage(index)
            title = "input graph" if index == 0 else f"after {st.name}"
            self._dag_cache[index] = vm.dag_section(
                st.graph, before=st.before, created=st.created, removed=st.removed,
                title=title, pass_index=index, analysis=self._analysis(index),
            )  # fmt: skip
        return self._dag_cache[index]

    def _passes(self) -> dict[str, Any]:
        if not self.session.loaded:
            return _pending()
        stages = self.session.stages
        entries = []
        for st in stages:
            entries.append(
                {
                    "name": st.name,
                    "nodes_before": st.before.num_nodes
                    if st.before is not None
                    else st.graph.num_nodes,
                    "nodes_after": st.graph.num_nodes,
                    "created": len(st.created),
                    "removed": len(st.removed),
                    "removed_names": [st.before.node(r).name for r in st.removed[:50]]
                    if st.before is not None
                    else [],
                    "seconds": st.seconds,
                }
            )
        return {"available": True, "entries": entries}

    def _memory(self, index: int) -> dict[str, Any]:
        """The memory chart: the memory pass's plan for the plan's own stream schedule.

        Before the memory pass on the slider it says so; another planner mode re-runs the
        pass on its own input (:func:`~oxiwork.widget.viewmodel.replan_memory`), never a
        one-order liveness plan, which would race on several streams."""
        s = self.session
        if not s.loaded:
            return _pending()
        if s.plan is None:
            return vm.unavailable(f"no memory plan: {s.notes['plan']}")
        at = next((i for i, st in enumerate(s.stages) if st.name == "memory"), None)
        if at is None or s.plan.memory is None:
            return vm.unavailable("no memory plan: the pipeline has no memory pass")
        if index < at:
            return vm.unavailable(
                f"not planned yet: the memory pass is pipeline position {at}; move the pass "
                "slider to 'memory' to see the arena"
            )
        mode = self.memory_mode
        if mode not in self._memory_cache:
            plan, before = s.plan, s.stages[at].before

            def build() -> dict[str, Any]:
                own = plan.memory.mode == mode or before is None
                report = plan.memory if own else vm.replan_memory(before, mode)
                return vm.memory_section(plan.graph, report)

            self._memory_cache[mode] = _section("memory planning", build)
        return self._memory_cache[mode]

    def _streams(self, index: int) -> dict[str, Any]:
        s = self.session
        if not s.loaded:
            return _pending()
        # Lanes appear once the slider is at or past the stream pass; from there on the view
        # draws the plan's timeline (the graph the stream pass made, plus events and placed
        # buffers), so its bars are the plan's steps, which the simulator walks.
        if not vm.has_streams(self._stage(index).graph):
            return vm.unavailable(vm.NO_STREAMS)
        if s.plan is None:
            return vm.unavailable(s.notes["plan"])
        mode = self.stream_mode
        if mode not in self._streams_cache:
            plan = s.plan
            self._streams_cache[mode] = _section(
                "stream timeline", lambda: vm.streams_section(plan, mode=mode)
            )
        return self._streams_cache[mode]

    def _sim(self) -> dict[str, Any]:
        """The simulator's static part (the steps); the moving part is :meth:`_sim_state`."""
        s = self.session
        if not s.loaded:
            return _pending()
        if s.sim is None or s.plan is None:
            return vm.unavailable(s.notes["sim"])
        steps = [
            {"index": i, "node": int(st.node), "name": st.name, "kind": st.kind.value,
             "stream": int(st.stream)}
            for i, st in enumerate(s.plan.steps)
        ]  # fmt: skip
        events = [
            {"event": e, "label": self._event_label(e, idx), "steps": list(idx)}
            for e, idx in s.events.items()
        ]
        return {"available": True, "steps": steps, "policies": list(POLICIES), "events": events}

    def _sim_state(self) -> dict[str, Any]:
        """Where the simulator is; synced on its own so a step does not resend the graph."""
        s = self.session
        if not s.loaded or s.sim is None or s.plan is None:
            return {}
        sim = s.sim
        state = sim.state
        # Indices of the simulated plan (fewer steps when an event is dropped) mapped to the
        # real plan's, which every view draws: the highlighted step is the one that ran.
        executed = [s.plan_step(i) for i in state.executed]
        current = executed[-1] if executed else -1
        if state.failed_step is not None:
            current = s.plan_step(state.failed_step)
        shown = s.stages[self._stage_index()].graph
        highlight: list[int] = []
        if current >= 0:
            step = s.plan.steps[current]
            # The step's node, or the original nodes of a fused kernel when an earlier
            # pass is on screen.
            pg = s.plan.graph
            fused_from = pg.node(step.node).fused_from if pg.has_node(step.node) else ()
            for nid in (step.node, *step.fused_nodes, *fused_from):
                if shown.has_node(nid) and int(nid) not in highlight:
                    highlight.append(int(nid))
        names = {b.name: int(b.id) for b in s.final_graph.buffers}
        steps = s.plan.steps
        races = []
        for r in [*sim.races, *sim.static_races][:MAX_RACES]:  # synced on every step
            a, b = s.plan_step(r.first), s.plan_step(r.second)
            races.append({
                # Both steps of the pair (real-plan indices), so the views mark them.
                "step": b, "node": int(steps[b].node), "first": a,
                "first_node": int(steps[a].node), "buffer": names.get(r.buffers[0], -1),
                "message": r.describe(s.plan_step),
                "observed": r.observed is not None, "manifested": bool(r.manifested),
            })  # fmt: skip
        e = s.dropped_event
        return {
            "position": current,
            "executed": len(executed),
            # Real-plan indices in the order they ran (the panel marks them done).
            "executed_steps": executed,
            "finished": bool(state.finished),
            "races": races,
            "races_total": len(sim.races) + len(sim.static_races),
            "message": self._sim_message,
            "highlight": highlight,
            "live_buffers": sorted(names[n] for n in state.live_buffers if n in names),
            "policy": s.policy,
            "drop_event": e,
            "dropped_steps": list(s.events.get(e, ())) if e is not None else [],
            "verdict": self._sim_verdict,
            "eager": self._eager_verdict,
            # Inputs the simulator made up (none for a bound model: all are its values).
            "generated": len(sim.generated_inputs),
            "touched": _touched(s, state),
        }

    _sim_message = ""
    #: Whether the finished run's outputs match the real plan's (see _verdict); None before.
    _sim_verdict: dict[str, Any] | None = None
    #: The last comparison with PyTorch eager (see compare_eager); None before one.
    _eager_verdict: dict[str, Any] | None = None
    # Whether the synced view still shows the pending sections (see load_passes).
    _view_pending = True

    def _refresh(self, *, reset: bool = False, pass_index: int | None = None) -> None:
        # The view-model is O(n) acyclic lists and dicts (50,000 buffer rows, the DAG's
        # columns); with the collector running, each few hundred of them trigger a
        # collection that rescans the whole graph: a third of a big graph's first view.
        with paused_gc():
            self._refresh_now(reset=reset, pass_index=pass_index)

    def _refresh_now(self, *, reset: bool, pass_index: int | None) -> None:
        loaded = self.session.loaded
        if reset:
            last = self._num_stages() - 1
            self.pass_index = min(self.pass_index if pass_index is None else pass_index, last)
            if self.selection >= 0 and not self._graph_shown().has_node(self.selection):
                self.selection = -1
            self.sim_position = -1
            self._sim_message = ""
            self._sim_verdict = None
            self._eager_verdict = None  # of the old plan (or graph)
            self.inspector = {}
            self.inspector_values = b""
            self.saved_stages = {}  # views of the graph and options before
        staged, blob = self._stage_view(self._stage_index())
        view = {
            "version": 1,
            # The pass pipeline has not run yet: the frontend asks for it ("load_passes").
            "pending": not loaded,
            **staged,
            "passes": self._passes(),
            "sim": self._sim(),
            "buffers": vm.buffers_section(self._graph),
            "ops": vm.ops_section(),
            # The imported model the simulator computes, or why it no longer does.
            "model": self._model_section(),
            # The current plan's figures, for the Compare tab (None until the passes ran).
            "figures": self._figures(),
        }  # fmt: skip
        with self.hold_sync():
            self.dag = blob
            self.view = view
            self.sim_state = self._sim_state()
            self._update_details()
        self._view_pending = not loaded

    def _stage_view(self, i: int) -> tuple[dict[str, Any], bytes]:
        """The part of the view that the pass slider changes (the DAG's columns apart)."""
        meta, blob = self._dag_for(i)
        return {
            "dag": meta,
            "memory": self._memory(i),
            "streams": self._streams(i),
            "summary": self._summary(i),
            "editable": i == 0,
            "edit_reason": "" if i == 0 else
            "Edits apply to the input graph: move the pass slider back to 'input' to build.",
        }, blob  # fmt: skip

    def _summary(self, i: int) -> list[list[str]]:
        s = self.session
        if not s.loaded:
            # Not cached: the same stage gets its plan row once the passes have run.
            graph = s.input_stage.graph
            return vm.summary_section(graph, None, {"plan": PENDING}, self._analysis(0))
        if i not in self._summary_cache:
            self._summary_cache[i] = vm.summary_section(
                s.stages[i].graph, s.plan, s.notes, self._analysis(i)
            )
        return self._summary_cache[i]

    def _analysis(self, index: int) -> tuple[Any, str]:
        """The topological analysis of stage ``index``'s graph, once per session and stage
        (the DAG columns, the summary and the details all read it)."""
        if index not in self._topo_cache:
            self._topo_cache[index] = vm.topo_analysis(self._stage(index).graph)
        return self._topo_cache[index]

    def _graph_shown(self) -> ComputeGraph:
        return self._stage(self._stage_index()).graph

    def _update_details(self) -> None:
        g = self._graph_shown()
        if self.selection >= 0 and g.has_node(self.selection):
            self.details = vm.node_details(
                g,
                NodeId(self.selection),
                info=self._analysis(self._stage_index())[0],
                fusion=self._fusion_index(),
            )
        else:
            self.details = {}

    def _fusion_index(self) -> dict[NodeId, list[list[str]]] | None:
        """Why-not-fused rows per original node, once the passes have run (not before:
        selecting a node must not run the pipeline)."""
        s = self.session
        if not s.loaded or s.plan is None:
            return None
        plan = s.plan
        if self._fusion_cache[0] is not plan:
            # The fusion pass's artefact; none when fusion was switched off.
            not_fused = next(
                (t.artefacts["not_fused"] for t in plan.trace if t.name == "fusion"), {}
            )
            self._fusion_cache = (plan, vm.fusion_index(plan.original, not_fused))
        return self._fusion_cache[1]

    # ------------------------------------------------------------------ messages
    def _on_msg(self, _widget: Any, content: Any, buffers: list[Any]) -> None:
        reply = self.handle_message(content, buffers)
        self.send(reply)

    def handle_message(self, content: Any, buffers: list[Any] | None = None) -> dict[str, Any]:
        """Validate and execute one frontend request; return the reply message.

        Errors (malformed requests, unknown ids, invalid edits) leave every trait except
        ``errors`` unchanged and come back as ``{"type": "error", "request_id", "message"}``.
        """
        rid = content.get("request_id", "") if isinstance(content, dict) else ""
        # Echoed in the reply, so only if it can be sent back (validate refuses the rest).
        rid = rid if isinstance(rid, str) and _sendable_text(rid[:64]) else ""
        try:
            msg = validate(content, buffers)
            # One sync message per request, so the frontend never sees half an update
            # (a new simulator position with the old highlight).
            with self.hold_sync():
                text = _HANDLERS[msg["type"]](self, msg)
                if self._view_pending and self.session.loaded:
                    # The request ran the pipeline (a simulator step...): show its views too.
                    # Only on success, so a refused request changes nothing but `errors`.
                    self._refresh()
        except GraphError as e:
            return self._error(rid[:64], e)
        except Exception as e:  # a bug: still report it in the widget, never lose it
            return self._error(rid[:64], e, internal=True)
        return {"type": "ok", "request_id": rid, "message": text}

    def _error(self, rid: str, e: Exception, internal: bool = False) -> dict[str, Any]:
        kind = type(e).__name__
        message = str(e) if not internal else f"internal error ({kind}): {e}; please report it"
        self.errors = [*self.errors, {"request_id": rid, "message": message, "kind": kind}][
            -MAX_ERRORS:
        ]
        return {"type": "error", "request_id": rid, "message": message, "kind": kind}

    def _h_select(self, m: dict[str, Any]) -> str:
        nid = m["node"]
        if nid is None or nid < 0:
            self.selection = -1
            return "selection cleared"
        g = self._graph_shown()
        if not g.has_node(nid):
            raise UnknownNode(f"there is no node with id {nid} in the graph on screen")
        self.selection = nid  # updates the details (see _on_selection)
        return f"selected {g.node(NodeId(nid)).name}"

    def _h_set_pass(self, m: dict[str, Any]) -> str:
        i = m["index"]
        n = len(self.session.stages)
        if not 0 <= i < n:
            raise MessageError(f"set_pass.index is {i}; the pipeline has positions 0..{n - 1}")
        self.pass_index = i  # redraws (see _redraw)
        return f"showing {self.session.stages[i].name}"

    def _h_set_memory_mode(self, m: dict[str, Any]) -> str:
        self.memory_mode = m["mode"]  # redraws (see _redraw)
        return f"memory planner: {m['mode']}"

    def _h_set_stream_mode(self, m: dict[str, Any]) -> str:
        self.stream_mode = m["mode"]  # redraws (see _redraw)
        return f"stream timeline: {m['mode']} launch"

    def _h_set_options(self, m: dict[str, Any]) -> str:
        changed = self.set_options(**{k: m[k] for k in OPTION_DEFAULTS if k in m})
        o = self.options
        fusion = f"fusion on (groups ≤ {o['max_group_size']})" if o["fusion"] else "fusion off"
        text = f"{o['max_streams']} stream{'s' if o['max_streams'] != 1 else ''}, {fusion}"
        return f"options: {text}" if changed else f"options unchanged: {text}"

    def _h_plan_memory(self, m: dict[str, Any]) -> str:
        self.session.load()
        self._refresh()
        return "memory planned"

    def _h_load_passes(self, m: dict[str, Any]) -> str:
        if self.passes_loaded:
            # Already run (after the cell, or by Python code): the same answer as a first run.
            return f"passes computed in {self.session.seconds:.2f} s"
        self.load_passes()
        s = self.session
        done = f"passes computed in {s.seconds:.2f} s"
        return done if s.plan is not None else f"{done}; {s.notes['plan']}"

    def _h_edit(self, m: dict[str, Any]) -> str:
        if self._stage_index() != 0:
            raise MessageError(
                "edits apply to the input graph: move the pass slider back to 'input' first"
            )
        # Builder warnings (a buffer read before any write...) are shown in the widget.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GraphWarning)
            with using(self.budget):  # how far an edit may grow the graph
                new = apply_edit(self._graph, m)
        # The edited graph is no longer the module: its eager outputs (and, for a changed
        # buffer, its values) would be compared against something else.
        note, dropped = self._binding_note, self._model is not None
        if dropped:
            note = (
                f"model binding dropped: the graph was edited, so it is no longer "
                f"{self._model.name} as imported and nothing is compared with its PyTorch "
                "eager outputs; buffers the edit left alike keep the model's values, others "
                "are generated (w.graph = model binds the module again)"
            )
        self._set_graph(new, values=_kept_values(self._values, new), note=note)
        notes = "; ".join(str(c.message) for c in caught if issubclass(c.category, GraphWarning))
        done = f"{m['type'].replace('_', ' ')}: done"
        if dropped:
            done = f"{done}; {note}"
        return f"{done} (warning: {notes})" if notes else done

    def _h_compare_eager(self, m: dict[str, Any]) -> str:
        v = self.compare_eager()
        return str(v["text"])

    def _h_sim(self, m: dict[str, Any]) -> str:
        s = self.session
        if s.sim is None or s.plan is None:
            raise MessageError(s.notes["sim"])
        sim = s.sim
        action = m["action"]
        bp = m.get("breakpoint")
        if action == "run" and bp is not None:
            runs = [st for st in s.sim_plan.steps if st.node == bp or bp in st.fused_nodes]
            if (
                not runs
                and s.dropped_event is not None
                and any(st.node == bp for st in s.plan.steps)
            ):
                raise UnknownNode(
                    f"breakpoint: node id {bp} is a step of event {s.dropped_event}, which the "
                    "simulator drops; pick another node, or restore the event"
                )
            if not runs:
                raise UnknownNode(f"breakpoint: no step of the plan runs node id {bp}")
        if action == "step" and sim.state.finished:
            raise MessageError("the simulation is finished; reset to start again")
        if action == "back" and not sim.state.executed and sim.state.failed_step is None:
            raise MessageError("already at the start; nothing to step back over")
        try:
            text = _SIM_ACTIONS[action](s, bp)
        except ExecutionError as e:
            # The simulator stays at the failed step: show it, then report the error.
            self._sim_message = f"stopped: {e}"
            self._after_sim()
            raise
        self._sim_message = text
        self._after_sim()
        return text

    def _after_sim(self) -> None:
        s = self.session
        sim = s.sim
        state = sim.state
        executed = state.executed
        self.sim_position = s.plan_step(executed[-1]) if executed else -1
        self._sim_verdict = self._verdict() if state.finished else None
        if state.finished and self._model is not None and self._expected is not None:
            self._eager_verdict = self._eager_check(sim.outputs, self._sim_source())
        self.sim_state = self._sim_state()
        if self.inspector.get("buffer") is not None:
            self._inspect(int(self.inspector["buffer"]))

    def _sim_source(self) -> str:
        """What the simulator ran, for the eager verdict's text."""
        s = self.session
        e = s.dropped_event
        return f"simulation, {s.policy} policy" + (f", event {e} dropped" if e is not None else "")

    def _verdict(self) -> dict[str, Any] | None:
        """Whether the finished run's outputs are the real plan's (run in plan order).

        ``None`` for a plain run (the plan itself, in plan order): that run *is* the
        reference, so there is nothing to compare. A match despite races says why."""
        s = self.session
        if s.dropped_event is None and s.policy == "in_order":
            return None
        expected = s.expected_outputs()
        actual = s.sim.outputs
        if expected is None or actual is None:
            text = "outputs not compared: some kernel has no numpy reference"
            return {"match": None, "text": text, "buffers": []}
        diff = output_differences(expected, actual)
        if not diff:
            races = len(s.sim.races) + len(s.sim.static_races)
            text = "outputs still match the correct plan"
            if races:
                reversed_ = sum(1 for r in s.sim.races if r.manifested)
                text += (
                    f", but only by luck: {races} race{'s' if races != 1 else ''} remain (pairs "
                    "of steps touching the same bytes that no event orders); this interleaving "
                    f"ran {reversed_} of them in reverse without changing a value, and another "
                    "order, or a real GPU, can"
                )
            return {"match": True, "text": text, "buffers": []}
        parts = [
            f"{name} ({'missing or not comparable' if d is None else f'max |Δ| {d:.3g}'})"
            for name, d in diff[:6]
        ]
        more = f" and {len(diff) - 6} more" if len(diff) > 6 else ""
        return {
            "match": False,
            "text": f"outputs differ from the correct plan: {', '.join(parts)}{more}",
            "buffers": [{"name": n, "max_abs_diff": d} for n, d in diff[:50]],
        }

    def _h_sim_config(self, m: dict[str, Any]) -> str:
        return self.sim_config(m.get("policy", KEEP), m.get("drop_event", KEEP))

    def _h_sweep(self, m: dict[str, Any]) -> str:
        rows = self.sweep().rows
        front = sum(r.pareto for r in rows)
        return f"swept {len(rows)} settings: {front} on the Pareto front; click a point to plan it"

    def _h_pin(self, m: dict[str, Any]) -> str:
        if m.get("clear"):
            self.unpin()
            return "unpinned"
        f = self.pin()
        o = f["options"]
        return (
            f"pinned the plan with {o['max_streams']} stream(s), fusion "
            f"{'on' if o['fusion'] else 'off'}: change an option to compare"
        )

    def _h_inspect(self, m: dict[str, Any]) -> str:
        self._inspect(m["buffer"])
        return f"inspecting {self.inspector.get('name', '')}"

    def _inspect(self, bid: int) -> None:
        g = self.session.final_graph if self.session.plan is not None else self._graph
        if not any(b.id == bid for b in g.buffers):
            raise UnknownBuffer(f"there is no buffer with id {bid} in the plan's graph")
        buf = g.buffer(BufferId(bid))
        value = _sim_value(self.session.sim, buf) if self.session.sim is not None else None
        info, raw = vm.inspector_section(buf.name, bid, buf.dtype, value)
        with self.hold_sync():
            self.inspector = info
            self.inspector_values = raw


_HANDLERS: dict[str, Callable[[Workbench, dict[str, Any]], str]] = {
    "select": Workbench._h_select,
    "set_pass": Workbench._h_set_pass,
    "set_memory_mode": Workbench._h_set_memory_mode,
    "set_stream_mode": Workbench._h_set_stream_mode,
    "set_options": Workbench._h_set_options,
    "sweep": Workbench._h_sweep,
    "plan_memory": Workbench._h_plan_memory,
    "load_passes": Workbench._h_load_passes,
    "sim": Workbench._h_sim,
    "sim_config": Workbench._h_sim_config,
    "inspect": Workbench._h_inspect,
    "pin": Workbench._h_pin,
    "compare_eager": Workbench._h_compare_eager,
    **dict.fromkeys(EDITS, Workbench._h_edit),
}


MAX_RACES = 200
"""Most races the simulator panel gets (``races_total`` counts them all): a plan missing an
event on a big graph can have thousands, and the state is synced on every step."""


def _pending() -> dict[str, Any]:
    """A section that waits for the pass pipeline (``pending`` tells the frontend so)."""
    return {**vm.unavailable(PENDING), "pending": True}


# ---------------------------------------------------------------------- simulator actions
def _section(what: str, build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``build()``, or an unavailable section saying why it failed: an engine error must
    not take the whole widget down."""
    try:
        return build()
    except Exception as e:
        return vm.unavailable(f"{what} failed: {type(e).__name__}: {e}")


# Step numbers in every message are indices in the real plan's steps (``plan.steps[i]``,
# from 0), as in the simulator panel's list, its header, the timeline's tooltips and the race
# reports: with an event dropped the simulated plan has fewer steps, so its indices are
# mapped back (Session.plan_step).
def _step_name(s: Session, sim_index: int) -> str:
    i = s.plan_step(sim_index)
    return f"step {i} ({s.plan.steps[i].name})"


def _sim_step(s: Session, _bp: int | None) -> str:
    st = s.sim.step()
    return f"ran {_step_name(s, st.index)}" if st is not None else "finished"


def _sim_back(s: Session, _bp: int | None) -> str:
    st = s.sim.step_back()
    return f"undid {_step_name(s, st.index)}"


def _sim_reset(s: Session, _bp: int | None) -> str:
    s.sim.reset()
    return "reset"


def _sim_run(s: Session, bp: int | None) -> str:
    sim = s.sim
    sim.clear_breakpoints()
    if bp is not None:
        sim.break_on_node(bp)
    try:
        stop = sim.run()
    finally:
        sim.clear_breakpoints()
    # Formatted from the stop's fields (the simulator's own message names its API).
    if stop.reason == "end":
        return "ran to the end: every step executed"
    if stop.reason == "breakpoint" and stop.step is not None:
        return f"stopped before {_step_name(s, stop.step)}: the selected node"
    return str(stop.message)


_SIM_ACTIONS: dict[str, Callable[[Session, int | None], str]] = {
    "step": _sim_step,
    "back": _sim_back,
    "reset": _sim_reset,
    "run": _sim_run,
}


#: Most buffers of one step the simulator panel summarises (a fused kernel can touch many).
MAX_TOUCHED = 8


def _touched(s: Session, state: Any) -> list[dict[str, Any]]:
    """The buffers the step on screen read and wrote, with their values now
    (:func:`viewmodel.value_summary`): what a step-through of a real model shows."""
    sim = s.sim
    if state.failed_step is not None:
        index = state.failed_step
    elif state.executed:
        index = state.executed[-1]
    else:
        return []
    step = s.sim_plan.steps[index]
    roles: dict[str, tuple[int, str]] = {}
    for role, args in (("read", step.inputs), ("write", step.outputs)):
        for a in args:
            was = roles.get(a.name)
            roles[a.name] = (int(a.buffer), "read+write" if was and was[1] != role else role)
    rows = []
    for name, (bid, role) in list(roles.items())[:MAX_TOUCHED]:
        try:
            value = sim.buffer(name)
        except GraphError:  # a buffer the simulator does not hold (values=False)
            continue
        rows.append(vm.value_summary(name, bid, role, value))
    return rows


def _kept_values(
    values: Mapping[str, Any] | None, graph: ComputeGraph
) -> dict[str, np.ndarray] | None:
    """The ``values`` whose buffer ``graph`` still has with the same dtype and size."""
    if not values:
        return None
    by_name = {b.name: b for b in graph.buffers}
    kept = {}
    for name, v in values.items():
        b = by_name.get(name)
        arr = np.asarray(v)
        if b is not None and b.dtype == arr.dtype.name and b.size_bytes == arr.nbytes:
            kept[name] = v
    return kept or None


def _binding(obj: Any, expected: Any) -> tuple[ImportedModel | None, tuple[np.ndarray, ...] | None]:
    """The model ``obj`` binds a workbench to, and the outputs to compare with: ``expected``
    checked (:func:`eager.check_expected`), else the model's eager outputs."""
    if not isinstance(obj, ImportedModel):
        if expected is not None:
            raise InvalidOption(
                "Workbench expected= compares an imported model's outputs with PyTorch "
                f"eager; {type(obj).__name__} is not one (open "
                "Workbench(oxiwork.importers.torch.from_module(module, (x,))))"
            )
        return None, None
    if expected is None:
        return obj, obj.eager_outputs
    try:
        return obj, eager.check_expected(expected, obj.outputs)
    except InvalidArgument as e:
        raise InvalidOption(f"Workbench {e}") from None


def _check_tolerance(tol: Any) -> tuple[float, float] | None:
    """``tol`` as ``(rtol, atol)``: two finite numbers >= 0, or ``None``."""
    if tol is None:
        return None
    ok = (
        isinstance(tol, (tuple, list))
        and len(tol) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in tol)
        and all(np.isfinite(v) and v >= 0 for v in tol)
    )
    if not ok:
        raise InvalidOption(
            f"Workbench tolerance must be (rtol, atol), two finite numbers >= 0, got {tol!r:.60}"
        )
    return float(tol[0]), float(tol[1])


def _sim_value(sim: Any, buf: Any) -> np.ndarray | None:
    try:
        return np.asarray(sim.buffer(buf.name))
    except GraphError:
        return None
