"""ExecutionPlan: the ordered, stream-assigned, memory-planned steps every executor runs.

The simulator and the GPU backends consume exactly this object. :meth:`ExecutionPlan.build`
runs the pass pipeline (fusion ▶ streams ▶ memory; memory comes last because a memory plan
is only safe for the schedule it runs under) and lowers the final graph to
:class:`PlanStep` values in issue order; :func:`verify_plan` checks every invariant an
executor relies on.

Example
-------
>>> from oxiwork.examples import quick_start
>>> plan = ExecutionPlan.build(quick_start())
>>> plan.kernel_count_original, plan.kernel_count_fused, plan.num_streams, plan.event_count
(2, 1, 1, 0)
>>> verify_plan(plan)
"""

from __future__ import annotations

import itertools
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from oxiwork.analysis import paused_gc
from oxiwork.analysis.happens_before import ClockArrays, VectorClocks, plan_clocks
from oxiwork.error import CheckFailed, ExecutionError, InvalidPlan, UnorderedAccess, UnsupportedOp
from oxiwork.graph import ComputeGraph, _edges_np, _positional
from oxiwork.node import BufferId, KernelConfig, MemcpyDir, NodeId, NodeKind, StreamId
from oxiwork.ops import get as get_op
from oxiwork.optimizer.fusion import peak_live_bytes
from oxiwork.optimizer.memory_pass import MemoryReport
from oxiwork.optimizer.stream import StreamAssignment, streams_pay
from oxiwork.pipeline import PassSpec, Pipeline, PipelineRun, TraceEntry, plan_passes

__all__ = ["BufferArg", "ExecutionPlan", "PlanStep", "verify_plan"]


@dataclass(frozen=True, slots=True)
class BufferArg:
    """A buffer as a step sees it: where it lives and how to view it.

    ``offset`` is the arena offset in bytes, or ``None`` for an external buffer (bound by
    the user at run time) and for a view. A view (``base`` set) holds no bytes of its own:
    element ``i`` is element ``view_offset + sum(i[k] * strides[k])`` of ``base``'s bytes;
    its accesses are its base's (:attr:`storage`).
    """

    buffer: BufferId
    name: str
    offset: int | None
    size_bytes: int
    dtype: str
    shape: tuple[int, ...]
    external: bool
    base: BufferArg | None = None
    view_offset: int = 0
    strides: tuple[int, ...] | None = None

    @property
    def where(self) -> str:
        """Where its bytes are, for tables and traces: the arena offset, ``ext`` for a
        user-owned (or unplaced) buffer, ``view of <base>`` for a view."""
        if self.base is not None:
            return f"view of {self.base.name}"
        return "ext" if self.offset is None else str(self.offset)

    @property
    def storage(self) -> BufferArg:
        """The buffer whose bytes this one occupies: ``base`` for a view, else itself."""
        return self if self.base is None else self.base


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan.

    ``index`` is the position in ``plan.steps`` (a topological order of ``plan.graph``
    in which each stream's steps appear in stream order); ``position`` is the position
    within its stream. ``event`` is the event index (``0..plan.event_count-1``) that an
    EventRecord step records or an EventWait step waits for. ``depends_on`` lists the
    indices of the steps this one directly depends on in ``plan.graph`` (edges); executors
    must NOT enforce them: only stream order and event pairs order a real GPU, which is
    what the race detector checks against.
    """

    index: int
    kind: NodeKind
    node: NodeId
    name: str
    stream: StreamId
    position: int
    fused_nodes: tuple[NodeId, ...]
    function_name: str | None = None
    config: KernelConfig | None = None
    inputs: tuple[BufferArg, ...] = ()
    outputs: tuple[BufferArg, ...] = ()
    size_bytes: int = 0
    memcpy_dir: MemcpyDir | None = None
    memset_value: int = 0
    event: int | None = None
    label: str = ""
    depends_on: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    """The result of the pipeline, ready to execute.

    ``graph`` is the final graph (fused, streams assigned, event nodes inserted, buffers
    placed); ``original`` the graph it was built from.
    """

    steps: tuple[PlanStep, ...]
    num_streams: int
    pool_bytes: int
    kernel_count_original: int
    kernel_count_fused: int
    event_count: int
    graph: ComputeGraph
    original: ComputeGraph
    memory: MemoryReport | None = None
    streams: StreamAssignment | None = None
    trace: tuple[TraceEntry, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    # Results worked out once per plan (the plan is immutable): {"verified": True}.
    _cache: dict[str, Any] = field(
        default_factory=dict, init=False, compare=False, repr=False, hash=False
    )

    def verify(self) -> None:
        """:func:`verify_plan`, once per plan: the executors call it before they run one.

        A plan is immutable, so a plan that passed stays valid; ``dataclasses.replace``
        makes a new plan, which is checked again.

        Raises
        ------
        InvalidPlan
            The first broken invariant (:class:`~oxiwork.error.UnorderedAccess` for two
            accesses nothing orders).

        Examples
        --------
        >>> import dataclasses
        >>> from oxiwork.examples import quick_start
        >>> plan = ExecutionPlan.build(quick_start())
        >>> plan.verify()  # already checked by build(): free
        >>> up, kernel, down = plan.steps
        >>> swapped = [dataclasses.replace(s, index=i, position=i) for i, s in
        ...            enumerate([kernel, up, down])]  # compute before the upload
        >>> bad = dataclasses.replace(plan, steps=tuple(swapped))
        >>> bad.verify()
        Traceback (most recent call last):
        ...
        oxiwork.error.InvalidPlan: step 0 (kernel 'relu+scale', node 4, stream 0) depends on \
step 1 (memcpy 'upload', node 0, stream 0), ...
        """
        if not self._cache.get("verified"):
            verify_plan(self)
            self._cache["verified"] = True

    @classmethod
    def build(
        cls,
        graph: ComputeGraph,
        max_streams: int = 4,
        *,
        fusion: bool = True,
        max_group_size: int = 16,
        memory_mode: str = "auto",
        memory_time_limit: float | None = None,
        capacity: int | None = None,
        verify: bool = True,
        weigh_memory: bool = True,
        memory_budget: int | None = None,
    ) -> ExecutionPlan:
        """Run fusion ▶ streams ▶ memory on ``graph`` and lower the result to steps.

        Parameters
        ----------
        graph : ComputeGraph
            The graph to plan (left unchanged).
        max_streams : int
            Most CUDA streams the plan may use.
        fusion : bool
            Run the fusion pass first.
        max_group_size : int
            Most kernels one fused kernel may replace.
        memory_mode : {"auto", "heuristic", "exact"}
            The memory planner's mode (``"exact"`` searches with MiniMalloc; ``"auto"``, the
            default, searches within a budget that grows with the graph, see
            :func:`oxiwork.optimizer.memory_pass.plan_memory`).
        memory_time_limit : float, optional
            Seconds the exact (or auto) memory search may take.
        capacity : int, optional
            Arena bytes the memory plan should fit in (reported in ``plan.memory``).
        verify : bool
            Verify the graph after every pass and the finished plan.
        weigh_memory : bool
            Keep a plan on several streams only if it pays for its memory
            (:func:`oxiwork.optimizer.stream.streams_pay`: its arena within 1.05x of one
            stream's, or a modelled makespan at least 10% shorter); otherwise plan again
            with half the streams, down to one. ``plan.options["streams_tried"]`` lists the
            caps tried. False keeps ``max_streams`` whatever the memory.
        memory_budget : int, optional
            Arena bytes the plan should stay within: the most streams (halving from
            ``max_streams``) whose arena fits are kept (one stream if none fits).

        Returns
        -------
        ExecutionPlan

        Raises
        ------
        GraphError
            A pass failed (the message names it) or the plan breaks an invariant.

        Examples
        --------
        >>> from oxiwork.examples import quick_start
        >>> plan = ExecutionPlan.build(quick_start(), fusion=False)
        >>> [s.name for s in plan.steps]
        ['upload', 'relu', 'scale', 'download']
        """
        # The pass list and its order constraints are the pipeline's (pipeline.py).
        passes = list(
            plan_passes(
                fusion=fusion,
                max_group_size=max_group_size,
                max_streams=max_streams,
                memory_mode=memory_mode,
                memory_time_limit=memory_time_limit,
                capacity=capacity,
            )
        )
        with paused_gc():  # the passes, checks and lowering allocate acyclic data only
            run = Pipeline(passes).run(graph, verify=verify)
            tried = [max_streams]
            if weigh_memory or memory_budget is not None:
                run, tried = _weigh_streams(run, passes, max_streams, memory_budget, verify)
            memory = run.artefact("memory", "memory")
            streams = run.artefact("streams", "streams")
            plan = _lower(
                run.graph,
                graph,
                memory.order,
                memory=memory,
                streams=streams,
                trace=run.trace,
                options={
                    "max_streams": max_streams,
                    "fusion": fusion,
                    "max_group_size": max_group_size,
                    "memory_mode": memory_mode,
                    "memory_time_limit": memory_time_limit,
                    "capacity": capacity,
                    "weigh_memory": weigh_memory,
                    "memory_budget": memory_budget,
                    "streams_tried": tried,
                },
            )
        if verify:
            plan.verify()
        return plan

    # ------------------------------------------------------------------ reports
    def summary(self) -> str:
        """A readable table of the steps: stream, position, kind, name, fused nodes, buffers.

        >>> from oxiwork.examples import quick_start
        >>> print(ExecutionPlan.build(quick_start()).summary())  # doctest: +NORMALIZE_WHITESPACE
        ExecutionPlan: 3 steps on 1 stream, 0 events; 1 kernel (2 before fusion); arena 8,192 B
        step  stream  pos  kind    name        fuses        buffers (name@offset)
           0       0    0  memcpy  upload                   -> input@0
           1       0    1  kernel  relu+scale  relu, scale  input@0 -> output@4096
           2       0    2  memcpy  download                 output@4096 ->
        """
        original = self.original
        rows = [("step", "stream", "pos", "kind", "name", "fuses", "buffers (name@offset)")]
        for st in self.steps:
            kind = st.kind.value
            if st.event is not None:
                kind = f"{'record' if st.kind is NodeKind.EventRecord else 'wait'} e{st.event}"
            fuses = ""
            if len(st.fused_nodes) > 1:
                fuses = ", ".join(
                    original.node(n).name if original.has_node(n) else f"#{int(n)}"
                    for n in st.fused_nodes
                )
            bufs = ""
            if st.inputs or st.outputs:
                bufs = " ".join(
                    x
                    for x in (
                        ", ".join(_arg(a) for a in st.inputs),
                        "->",
                        ", ".join(_arg(a) for a in st.outputs),
                    )
                    if x
                )
            rows.append(
                (
                    str(st.index),
                    str(int(st.stream)),
                    str(st.position),
                    kind,
                    _clip(st.name, 32),
                    _clip(fuses, 40),
                    bufs,
                )
            )
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        right = (True, True, True, False, False, False, False)
        lines = [self._headline()]
        for r in rows:
            cells = [
                v.rjust(w) if ra else v.ljust(w) for v, w, ra in zip(r, widths, right, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
        return "\n".join(lines)

    def _headline(self) -> str:
        def plural(k: int, word: str) -> str:
            return f"{k} {word}{'' if k == 1 else 's'}"

        head = (
            f"ExecutionPlan: {plural(len(self.steps), 'step')} on "
            f"{plural(self.num_streams, 'stream')}, {plural(self.event_count, 'event')}; "
            f"{plural(self.kernel_count_fused, 'kernel')}"
        )
        if self.kernel_count_fused != self.kernel_count_original:
            head += f" ({self.kernel_count_original} before fusion)"
        head += f"; arena {self.pool_bytes:,} B"
        lb = getattr(self.memory, "lower_bound", None)
        if lb is not None and lb != self.pool_bytes:
            head += f" (lower bound {lb:,} B)"
        return head

    def __str__(self) -> str:
        return self.summary()

    def to_dot(self) -> str:
        """Graphviz DOT text: one cluster per stream, event waits as dashed edges
        (:func:`oxiwork.render.dot.plan_dot`)."""
        from oxiwork.render.dot import plan_dot  # renderers sit above the plan

        return plan_dot(self)

    def to_svg(self) -> str:
        """SVG of :meth:`to_dot` laid out by graphviz's ``dot``."""
        from oxiwork.render.dot import plan_dot, to_svg

        return to_svg(plan_dot(self))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # Jupyter shows a plan as SVG without the widget (text when dot is missing).
        from oxiwork.render.dot import mimebundle, plan_dot

        return dict(mimebundle(self, lambda: plan_dot(self), self._headline(), len(self.steps)))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the steps, the counts, and the passes' reports.

        >>> import json
        >>> from oxiwork.examples import quick_start
        >>> d = ExecutionPlan.build(quick_start()).to_dict()
        >>> d["pool_bytes"], len(d["steps"]), bool(json.dumps(d))
        (8192, 3, True)
        """

        def arg(a: BufferArg) -> dict[str, Any]:
            return {
                "buffer": int(a.buffer),
                "name": a.name,
                "offset": a.offset,
                "size_bytes": a.size_bytes,
                "dtype": a.dtype,
                "shape": list(a.shape),
                "external": a.external,
                **(
                    {}
                    if a.base is None
                    else {
                        "base": int(a.base.buffer),
                        "view_offset": a.view_offset,
                        "strides": list(a.strides or ()),
                    }
                ),
            }

        steps = []
        for st in self.steps:
            cfg = st.config
            steps.append(
                {
                    "index": st.index,
                    "kind": st.kind.value,
                    "node": int(st.node),
                    "name": st.name,
                    "stream": int(st.stream),
                    "position": st.position,
                    "fused_nodes": [int(n) for n in st.fused_nodes],
                    "function_name": st.function_name,
                    "config": None
                    if cfg is None
                    else {
                        "grid": list(cfg.grid),
                        "block": list(cfg.block),
                        "shared_mem_bytes": cfg.shared_mem_bytes,
                    },
                    "inputs": [arg(a) for a in st.inputs],
                    "outputs": [arg(a) for a in st.outputs],
                    "size_bytes": st.size_bytes,
                    "memcpy_dir": None if st.memcpy_dir is None else st.memcpy_dir.value,
                    "memset_value": st.memset_value,
                    "event": st.event,
                    "label": st.label,
                    "depends_on": list(st.depends_on),
                }
            )
        return {
            "num_streams": self.num_streams,
            "pool_bytes": self.pool_bytes,
            "kernel_count_original": self.kernel_count_original,
            "kernel_count_fused": self.kernel_count_fused,
            "event_count": self.event_count,
            "steps": steps,
            "memory": _report(self.memory),
            "streams": _report(self.streams),
            "trace": [
                {"name": t.name, "summary": t.summary(), "seconds": t.seconds} for t in self.trace
            ],
            "options": {k: v for k, v in self.options.items()},
        }


def _weigh_streams(
    run: PipelineRun, passes: list[PassSpec], max_streams: int, budget: int | None, verify: bool
) -> tuple[PipelineRun, list[int]]:
    """The run to keep under :func:`oxiwork.optimizer.stream.streams_pay`, and the stream
    caps tried: halving from ``max_streams`` until a plan pays (one stream always does).
    Fusion runs once; the stream and memory passes run again on its result."""
    fusion = run.trace[:1] if passes[0].name == "fusion" else ()
    fused = run.trace[0].after if fusion else run.trace[0].before
    one_arena = None
    tried, cap = [max_streams], max_streams
    while True:
        sa, mem = run.artefact("streams", "streams"), run.artefact("memory", "memory")
        if sa.num_streams <= 1:
            return run, tried
        if one_arena is None:  # one stream needs at least the peak in program order
            peak = fusion[0].artefacts.get("peak_bytes_after") if fusion else None
            one_arena = peak_live_bytes(fused) if peak is None else peak
        if streams_pay(
            mem.arena_bytes, sa.makespan, one_arena, sa.total_work, memory_budget=budget
        ):
            return run, tried
        cap = min(cap // 2, sa.num_streams - 1)
        tried.append(cap)
        rest = [
            PassSpec(p.name, p.fn, {**p.options, "max_streams": cap}) if p.name == "streams" else p
            for p in passes[len(fusion) :]
        ]
        again = Pipeline(rest).run(fused, verify=verify)
        run = PipelineRun(again.graph, (*fusion, *again.trace))


def _report(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    return to_dict() if callable(to_dict) else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arg(a: BufferArg) -> str:
    return f"{_clip(a.name, 24)}@{a.where}"


# ------------------------------------------------------------------------------------------
# Lowering
# ------------------------------------------------------------------------------------------


_PlanStep = _positional(PlanStep)
_BufferArg = _positional(BufferArg)


# Field getters: one C-level pass over the steps, buffers or accesses per field.
_ID = operator.attrgetter("id")
_OFFSET = operator.attrgetter("offset")
_SIZE = operator.attrgetter("size_bytes")
_EXTERNAL = operator.attrgetter("external")
_KIND = operator.attrgetter("kind")
_STREAM = operator.attrgetter("stream")
_INPUTS = operator.attrgetter("inputs")
_OUTPUTS = operator.attrgetter("outputs")
_NODE = operator.attrgetter("node")
_INDEX = operator.attrgetter("index")
_EVENT = operator.attrgetter("event")
_POSITION = operator.attrgetter("position")
_BASE = operator.attrgetter("base")
_STORAGE = operator.attrgetter("storage")
_BUFFER = operator.attrgetter("buffer")
_ALIGNMENT = operator.attrgetter("alignment")


def _lower(
    graph: ComputeGraph,
    original: ComputeGraph,
    order: tuple[NodeId, ...],
    *,
    memory: MemoryReport,
    streams: StreamAssignment,
    trace: tuple[TraceEntry, ...],
    options: dict[str, Any],
) -> ExecutionPlan:
    """The steps of ``graph`` in issue ``order`` (a topological order consistent with streams)."""
    # One positional constructor call per buffer and per step (_positional); a loop over
    # the nodes, each read once, beats building the steps column by column (measured).
    args = {
        b.id: _BufferArg(
            b.id, b.name, b.offset, b.size_bytes, b.dtype, b.array_shape, b.external, None, 0, None
        )
        for b in graph.buffers
    }
    for b in graph.buffers:
        if b.base is not None:  # bases are never views, so their args are complete
            args[b.id] = replace(
                args[b.id], base=args[b.base], view_offset=b.view_offset, strides=b.strides
            )
    node_of = graph._cache["node_index"]  # id -> node (ComputeGraph.node without its checks)
    nodes = [node_of[nid] for nid in order]
    record, wait = NodeKind.EventRecord, NodeKind.EventWait
    event_of: dict[NodeId, int] = {}
    for n in nodes:
        if n.kind is record:
            event_of[n.id] = len(event_of)
    deps = _depends_on(graph, order)
    arg = args.__getitem__
    count: dict[int, int] = {}
    steps = []
    # PlanStep positionally (its fields in order; one call per step of 100k-node plans)
    for i, (nid, n) in enumerate(zip(order, nodes, strict=True)):
        s = n.stream
        if s is None or type(s) is not StreamId:  # (interned: StreamId() costs a call)
            s = StreamId(s or 0)
        position = count.get(s, 0)
        count[s] = position + 1
        kind = n.kind
        event = None
        if kind is record:
            event = event_of[nid]
        elif kind is wait and n.event is not None:
            event = event_of[n.event]
        steps.append(
            _PlanStep(
                i,
                kind,
                nid,
                n.name,
                s,
                position,
                n.fused_from or (nid,),
                n.function_name if kind is NodeKind.KernelLaunch else None,
                n.config,
                tuple(map(arg, n.inputs)),
                tuple(map(arg, n.outputs)),
                n.size_bytes,
                n.memcpy_dir,
                n.memset_value,
                event,
                n.label,
                deps[i],
            )
        )
    return ExecutionPlan(
        steps=tuple(steps),
        num_streams=max(count, default=0) + 1,
        pool_bytes=int(memory.arena_bytes),
        kernel_count_original=list(map(_KIND, original.nodes)).count(NodeKind.KernelLaunch),
        kernel_count_fused=list(map(_KIND, graph.nodes)).count(NodeKind.KernelLaunch),
        event_count=len(event_of),
        graph=graph,
        original=original,
        memory=memory,
        streams=streams,
        trace=trace,
        options=options,
    )


def check_steps(plan: ExecutionPlan) -> list[PlanStep]:
    """The plan's run-time checks: its kernel steps whose op is a check (``OpDef.check``).

    Each writes one bool buffer that nothing reads, so every executor has it among its
    outputs. Raises :class:`~oxiwork.error.UnsupportedOp` for a check inside a body graph
    (a child graph's or a conditional's), which a GPU executor would not read back.

    >>> from oxiwork import GraphBuilder
    >>> b = GraphBuilder()
    >>> x = b.alloc_external_buffer("x", 4, dtype="bool")
    >>> ok = b.alloc_buffer("ok", 4, dtype="bool")
    >>> _ = b.add_kernel("x is true", 1, 32).op("check").inputs([x]).outputs([ok]).finish()
    >>> [s.name for s in check_steps(ExecutionPlan.build(b.build()))]
    ['x is true']
    """

    def is_check(n: Any) -> bool:
        op = get_op(n.op) if n.kind is NodeKind.KernelLaunch and n.op is not None else None
        return op is not None and op.check

    def refuse_in_bodies(n: Any) -> None:
        for body in n.bodies:
            for inner in body.nodes:
                if is_check(inner):
                    raise UnsupportedOp(
                        f"the check {inner.name!r} lies in a body graph of {n.name!r}; a GPU "
                        "executor reads back only the checks of the top-level graph: move it "
                        "out of the body"
                    )
                refuse_in_bodies(inner)

    node = plan.graph.node
    found = []
    for st in plan.steps:
        n = node(st.node)
        if is_check(n):
            found.append(st)
        refuse_in_bodies(n)
    return found


def failed_check() -> str:
    """What :class:`~oxiwork.error.CheckFailed` says after naming the check's step."""
    return (
        "the run-time check is false: the inputs break a condition the program itself "
        "checks (an imported model's torch._check, which eager PyTorch raises on too); give "
        "inputs that meet it"
    )


def raise_failed_checks(checks: Sequence[PlanStep], outputs: dict[str, np.ndarray]) -> None:
    """Raise :class:`~oxiwork.error.CheckFailed` for the first of ``checks`` (from
    :func:`check_steps`) whose result in ``outputs`` (an executor's, by buffer name) is not
    true everywhere; :class:`~oxiwork.error.ExecutionError` if a result is missing."""
    for st in checks:
        flag = outputs.get(st.outputs[0].name)
        if flag is None:
            raise ExecutionError(
                f"the result of the run-time check {st.name!r} (buffer "
                f"{st.outputs[0].name!r}) was not read back, so the run cannot be vouched for"
            )
        if not np.all(flag):
            raise CheckFailed(f"step {st.index} {st.name!r}: {failed_check()}")


def _step_at(graph: ComputeGraph, nodes: Sequence[NodeId]) -> np.ndarray:
    """Per node position of ``graph.dense()``, the index of its step (``nodes[k]`` is step
    ``k``'s node), -1 for a node without a step.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> _step_at(g, g.node_ids[:0:-1]).tolist()
    [-1, 2, 1, 0]
    """
    d = graph.dense()
    at = np.full(len(d.ids), -1, dtype=np.int64)
    at[np.fromiter(map(d.pos.__getitem__, nodes), dtype=np.int64, count=len(nodes))] = np.arange(
        len(nodes)
    )
    return at


def _depends_on(graph: ComputeGraph, order: tuple[NodeId, ...]) -> list[tuple[int, ...]]:
    """Per step of issue ``order`` (every node of ``graph`` once), the indices of the steps
    its node depends on directly, ascending: all at once from the graph's edge arrays
    (sorted by (dependent step, step) and cut into runs), not a sort per step.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> _depends_on(g, g.topological_order())
    [(), (0,), (1,), (2,)]
    """
    d = graph.dense()
    n = len(order)
    at = _step_at(graph, order)
    if n != len(d.ids) or (at < 0).any():
        raise InvalidPlan(
            f"the issue order lists {n} steps for the {len(d.ids)} nodes of the graph; it "
            "must list every node once"
        )
    _, _, pa, pb = _edges_np(graph)
    src, dst = at[pa], at[pb]
    srt = np.lexsort((src, dst))
    values = src[srt].tolist()
    ends = np.cumsum(np.bincount(dst, minlength=n)).tolist()
    return list(map(tuple, map(values.__getitem__, map(slice, [0, *ends[:-1]], ends))))


# ------------------------------------------------------------------------------------------
# Verification
# ------------------------------------------------------------------------------------------


def _where(plan: ExecutionPlan, k: int) -> str:
    st = plan.steps[k]
    return f"step {k} ({st.kind.value} {st.name!r}, node {int(st.node)}, stream {int(st.stream)})"


def verify_plan(plan: ExecutionPlan) -> None:
    """Check every invariant of a plan; raise :class:`~oxiwork.error.InvalidPlan` if one fails.

    Checked, in order:

    1. steps are numbered ``0..n-1``, name distinct nodes of ``plan.graph``, use streams
       ``0..num_streams-1`` with positions ``0, 1, ...`` in step order, and every
       non-event node of the graph has a step;
    2. event indices are ``0..event_count-1``, each recorded once, every wait after its
       record;
    3. what the steps touch is ordered: every two accesses of one buffer of which one
       writes are ordered by happens-before, stream order plus event pairs (vector clocks
       of :mod:`oxiwork.analysis.happens_before`). Per buffer the accesses are walked in
       step order as runs of readers between writers, so each check is one O(1) clock
       test (the walk of :meth:`~oxiwork.graph.ComputeGraph.check_ordering`);
    4. ``plan.graph`` orders its own conflicting accesses by edges
       (:meth:`~oxiwork.graph.ComputeGraph.check_ordering`, cached per graph), and every
       dependency of the graph is ordered by happens-before (through event nodes the plan
       dropped too): one clock test per edge;
    5. every arena buffer has an offset that is aligned, inside ``pool_bytes`` and the same
       in every step and in the graph; and any two buffers sharing bytes are ordered: every
       access of one happens before every access of the other. The pairs are found by a
       sweep over the buffers in order of first access that keeps, per address range,
       the buffer that last occupied it; "ordered" is transitive, so checking each buffer
       against the previous occupants of its range covers every overlapping pair. Each
       test compares two per-buffer clocks (:meth:`~oxiwork.analysis.happens_before.
       ClockArrays.bounds`, the test the memory pass places buffers with).

    Unordered accesses (3, and 5 for two buffers on the same bytes) raise
    :class:`~oxiwork.error.UnorderedAccess` naming the buffer(s), both steps and the event
    that would order them. The executors call this once per plan (:meth:`ExecutionPlan.
    verify`, cached).

    >>> from oxiwork.examples import quick_start
    >>> verify_plan(ExecutionPlan.build(quick_start()))
    """
    with paused_gc():  # many acyclic allocations: a GC pass would rescan them all
        _check_structure(plan)
        vc = plan_clocks(plan)
        ca = vc.arrays()
        acc = _Accesses.of(plan)
        _check_accesses(plan, ca, acc)
        plan.graph.check_ordering()
        _check_dependencies(plan, vc, ca)
        _check_memory(plan, vc, ca, acc)


def _check_structure(plan: ExecutionPlan) -> None:
    # All steps at once first; the walk below, which names the first broken step, only
    # runs when something is wrong.
    if not _structure_holds(plan):
        _find_structure_error(plan)


_EVENT_KINDS = (NodeKind.EventRecord, NodeKind.EventWait)


def _structure_holds(plan: ExecutionPlan) -> bool:
    """Does every invariant :func:`_find_structure_error` checks hold? (numpy, no messages)"""
    steps, graph = plan.steps, plan.graph
    n = len(steps)
    node_index = graph._cache["node_index"]
    ids = list(map(_NODE, steps))
    if len(set(ids)) != n or not all(map(node_index.__contains__, ids)):
        return False
    index = np.fromiter(map(_INDEX, steps), dtype=np.int64, count=n)
    stream = np.fromiter(map(_STREAM, steps), dtype=np.int64, count=n)
    position = np.fromiter(map(_POSITION, steps), dtype=np.int64, count=n)
    if not (index == np.arange(n)).all():
        return False
    if n and not ((stream >= 0).all() and (stream < plan.num_streams).all()):
        return False
    # positions count 0, 1, ... per stream in step order
    by = np.argsort(stream, kind="stable")
    s_by = stream[by]
    start = np.r_[0, np.flatnonzero(s_by[1:] != s_by[:-1]) + 1] if n else np.zeros(0, int)
    first = np.repeat(start, np.diff(np.r_[start, n]))
    if not (position[by] == np.arange(n) - first).all():
        return False
    # events: each in range, recorded once, every wait after its event's (one) record
    kinds = list(map(_KIND, steps))
    rec_k, wait_k = (
        list(itertools.compress(range(n), map(operator.is_, kinds, itertools.repeat(kind))))
        for kind in _EVENT_KINDS
    )
    rec_e, wait_e = (list(map(_EVENT, map(steps.__getitem__, ks))) for ks in (rec_k, wait_k))
    count = plan.event_count
    if not all(e is not None and 0 <= e < count for e in itertools.chain(rec_e, wait_e)):
        return False
    recorded = dict(zip(rec_e, rec_k, strict=True))
    if len(recorded) != len(rec_e) or not all(
        map(operator.lt, map(recorded.get, wait_e, itertools.repeat(n)), wait_k)
    ):
        return False

    # every node that is not an event has a step (the steps' nodes are distinct nodes)
    def plain(kinds: list[NodeKind]) -> int:
        return len(kinds) - sum(map(kinds.count, _EVENT_KINDS))

    return plain(list(map(_KIND, map(node_index.__getitem__, ids)))) == plain(
        list(map(_KIND, graph.nodes))
    )


def _find_structure_error(plan: ExecutionPlan) -> None:
    graph = plan.graph
    seen: dict[NodeId, int] = {}
    count: dict[int, int] = {}
    recorded: dict[int, int] = {}
    for k, st in enumerate(plan.steps):
        if st.index != k:
            raise InvalidPlan(f"step {k} ({st.name!r}) says it is step {st.index}; renumber")
        if not graph.has_node(st.node):
            raise InvalidPlan(f"{_where(plan, k)}: node {int(st.node)} is not in plan.graph")
        if st.node in seen:
            raise InvalidPlan(
                f"{_where(plan, k)}: node {int(st.node)} already ran as step {seen[st.node]}; "
                "each node is issued once"
            )
        seen[st.node] = k
        s = int(st.stream)
        if not 0 <= s < plan.num_streams:
            raise InvalidPlan(f"{_where(plan, k)}: stream {s} is outside 0..{plan.num_streams - 1}")
        if st.position != count.get(s, 0):
            raise InvalidPlan(
                f"{_where(plan, k)}: position {st.position} on stream {s}, expected "
                f"{count.get(s, 0)} (positions count 0, 1, ... in step order)"
            )
        count[s] = count.get(s, 0) + 1
        if st.kind in (NodeKind.EventRecord, NodeKind.EventWait):
            if st.event is None or not 0 <= st.event < plan.event_count:
                raise InvalidPlan(
                    f"{_where(plan, k)}: event index {st.event} is outside "
                    f"0..{plan.event_count - 1}"
                )
            if st.kind is NodeKind.EventRecord:
                if st.event in recorded:
                    raise InvalidPlan(
                        f"{_where(plan, k)}: event {st.event} is already recorded by step "
                        f"{recorded[st.event]}"
                    )
                recorded[st.event] = k
            elif st.event not in recorded:
                raise InvalidPlan(
                    f"{_where(plan, k)}: waits for event {st.event}, but no earlier step "
                    "records it; issue the record first"
                )
    for n in graph.nodes:
        if n.id not in seen and n.kind not in (NodeKind.EventRecord, NodeKind.EventWait):
            raise InvalidPlan(
                f"node {n.name!r} (id {int(n.id)}, {n.kind.value}) of plan.graph has no step"
            )


NONE = np.iinfo(np.int64).min  # "no offset" in the int64 arrays below
# ``_NONE.get(o, o)``: NONE for None, else the offset itself (one C call per offset).
_NONE = {None: NONE}


def _off(x: Any) -> int | None:
    return None if x == NONE else int(x)


@dataclass(frozen=True, slots=True)
class _Accesses:
    """Every buffer access of a plan's steps as numpy arrays, sorted by (buffer, step).

    A step listing a buffer more than once counts once, as a write if it writes it.
    ``buffer`` holds buffer ids, ``offset`` the offset the step sees (``NONE``: none).
    """

    step: np.ndarray
    buffer: np.ndarray
    write: np.ndarray
    offset: np.ndarray

    @classmethod
    def of(cls, plan: ExecutionPlan) -> _Accesses:
        steps = plan.steps
        n = len(steps)
        ins, outs = list(map(_INPUTS, steps)), list(map(_OUTPUTS, steps))
        counts = np.empty(2 * n, dtype=np.int64)
        counts[0::2] = np.fromiter(map(len, ins), dtype=np.int64, count=n)
        counts[1::2] = np.fromiter(map(len, outs), dtype=np.int64, count=n)
        args = list(
            itertools.chain.from_iterable(
                itertools.chain.from_iterable(zip(ins, outs, strict=True))
            )
        )
        if any(map(operator.is_not, map(_BASE, args), itertools.repeat(None))):
            args = list(map(_STORAGE, args))  # an access to a view is an access to its base
        m = len(args)
        step = np.repeat(np.repeat(np.arange(n, dtype=np.int64), 2), counts)
        write = np.repeat(np.tile(np.array([False, True]), n), counts)
        buffer = np.fromiter(map(_BUFFER, args), dtype=np.int64, count=m)
        offs = list(map(_OFFSET, args))
        offset = np.fromiter(map(_NONE.get, offs, offs), dtype=np.int64, count=m)
        # By buffer, then step, writes first.
        srt = np.lexsort((~write, step, buffer))
        step, buffer, write, offset = step[srt], buffer[srt], write[srt], offset[srt]
        same = buffer[1:] == buffer[:-1]
        moved = np.flatnonzero(same & (offset[1:] != offset[:-1]))
        if len(moved):
            i = int(moved[0]) + 1
            k, name = int(step[i]), _arg_name(plan.steps[int(step[i])], BufferId(int(buffer[i])))
            raise InvalidPlan(
                f"{_where(plan, k)}: buffer {name!r} is at offset {_off(offset[i])}, but an "
                f"earlier step has it at {_off(offset[i - 1])}"
            )
        # A step's repeats of a buffer count once (as the write, sorted first).
        keep = np.r_[True, ~same | (step[1:] != step[:-1])][:m]
        return cls(step[keep], buffer[keep], write[keep], offset[keep])


def _check_accesses(plan: ExecutionPlan, ca: ClockArrays, acc: _Accesses) -> None:
    """Every two accesses of one buffer, one a write, are ordered by happens-before.

    Per buffer (a run of the sorted table) the accesses form runs of reads between
    writes; the pairs to test are: each read after the write before it, each read before
    the write after it, and each write after the write right before it. All pairs are
    tested at once on the clocks as arrays.
    """
    step, buffer, write = acc.step, acc.buffer, acc.write
    m = len(step)
    if m < 2:
        return
    idx = np.arange(m)
    new = np.r_[True, buffer[1:] != buffer[:-1]]  # first access of its buffer
    start = np.maximum.accumulate(np.where(new, idx, 0))
    end = np.r_[np.flatnonzero(new)[1:], m][np.cumsum(new) - 1]  # one past its buffer's last
    # The last write strictly before i / the first write strictly after i, same buffer.
    last_w = np.r_[-1, np.maximum.accumulate(np.where(write, idx, -1))[:-1]]
    first_w = np.r_[np.minimum.accumulate(np.where(write, idx, m)[::-1])[::-1][1:], m]
    read = ~write
    r1 = read & (last_w >= start)  # read after a write
    r2 = read & (first_w < end)  # read before a write
    ww = write & ~new & np.r_[False, write[:-1]]  # write right after a write
    a = np.concatenate([last_w[r1], idx[r2], idx[ww] - 1])
    b = np.concatenate([idx[r1], first_w[r2], idx[ww]])
    bad = ~ca.happens_before(step[a], step[b])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        x, y = int(a[k]), int(b[k])
        bid = BufferId(int(buffer[x]))
        _raise_unordered(
            plan, (bid, bid), int(step[x]), int(step[y]), bool(write[x]), bool(write[y])
        )


def _raise_unordered(
    plan: ExecutionPlan,
    bids: tuple[BufferId, BufferId],
    a: int,
    b: int,
    a_writes: bool,
    b_writes: bool,
    detail: str = "",
) -> None:
    """Raise :class:`UnorderedAccess` for steps ``a < b`` touching ``bids[0]``/``bids[1]``."""
    if a > b:
        a, b, a_writes, b_writes, bids = b, a, b_writes, a_writes, (bids[1], bids[0])
    sa, sb = plan.steps[a], plan.steps[b]
    na, nb = (_arg_name(st, x) for st, x in ((sa, bids[0]), (sb, bids[1])))
    how = {True: "written", False: "read"}
    what = f"buffer {na!r}" if na == nb else f"buffers {na!r} and {nb!r}"
    missing = (
        f"event recorded after step {a} on stream {int(sa.stream)} and waited for before step "
        f"{b} on stream {int(sb.stream)}"
    )
    raise UnorderedAccess(
        f"{what}{detail}{' is ' if na == nb else f': {na!r} is '}{how[a_writes]} by "
        f"{_where(plan, a)} and {'' if na == nb else f'{nb!r} is '}{how[b_writes]} by "
        f"{_where(plan, b)}, but "
        "neither stream order nor an event orders them, so the GPU may run them in either "
        f"order; record an event after step {a} on stream {int(sa.stream)} and wait for it "
        f"before step {b} on stream {int(sb.stream)}"
        + ("" if na == nb else ", or give the two buffers disjoint offsets"),
        buffers=(na, nb),
        first=a,
        second=b,
        first_name=sa.name,
        second_name=sb.name,
        first_access="write" if a_writes else "read",
        second_access="write" if b_writes else "read",
        missing=missing,
        in_plan=True,
    )


def _arg_name(st: PlanStep, bid: BufferId) -> str:
    return next((a.name for a in (*st.inputs, *st.outputs) if a.buffer == bid), f"#{int(bid)}")


def _check_dependencies(plan: ExecutionPlan, vc: VectorClocks, ca: ClockArrays) -> None:
    """Every dependency (transitively) is ordered by stream order + events.

    An edge between two steps is one clock test. A node without a step (an event node
    the plan dropped) passes on ``need``: per stream, the last position of a step it
    depends on, which every step depending on it must have seen.
    """
    graph = plan.graph
    d = graph.dense()
    steps = plan.steps
    at = _step_at(graph, list(map(_NODE, steps)))  # (_check_structure: each node once)
    clocks, sidx, position = vc.clocks, vc.stream_index, vc.position
    width = len(vc.streams)
    need: dict[int, list[int]] = {}  # only for nodes without a step

    def fail(j: int, k: int) -> None:
        raise InvalidPlan(
            f"{_where(plan, k)} depends on {_where(plan, j)}, but neither stream "
            "order nor any event pair orders them; record an event after step "
            f"{j} on stream {int(plan.steps[j].stream)} and wait for it before step {k}"
        )

    if not (at < 0).any():  # every node has a step: one clock test per edge, all at once
        # (the graph's edge arrays: by source position, then target, as d.succ lists them)
        _, _, src, dst = _edges_np(graph)
        bad = np.flatnonzero(~ca.happens_before(at[src], at[dst]))
        if len(bad):
            e = int(bad[0])
            fail(int(at[src[e]]), int(at[dst[e]]))
        return

    step_at = at.tolist()
    for p in d.topo:
        k = step_at[p]
        if k < 0:
            c = [-1] * width
            for u in d.pred[p]:
                ku = step_at[u]
                if ku >= 0:
                    s = sidx[ku]
                    c[s] = max(c[s], position[ku])
                else:
                    c = list(map(max, c, need[u]))
            need[p] = c
            continue
        row = clocks[k]
        own = sidx[k]
        for u in d.pred[p]:
            ku = step_at[u]
            if ku >= 0:
                if row[sidx[ku]] < position[ku] or ku == k:
                    fail(ku, k)
                continue
            for a, c_a in enumerate(need[u]):
                if c_a >= 0 and (c_a >= position[k] if a == own else c_a > row[a]):
                    fail(vc.members[a][c_a], k)


def _check_memory(plan: ExecutionPlan, vc: VectorClocks, ca: ClockArrays, acc: _Accesses) -> None:
    graph = plan.graph
    bufs = graph.buffers
    nb = len(bufs)
    ids = np.fromiter(map(_ID, bufs), dtype=np.int64, count=nb)  # ascending
    external = np.fromiter(map(_EXTERNAL, bufs), dtype=bool, count=nb)
    offs = list(map(_OFFSET, bufs))
    declared = np.fromiter(map(_NONE.get, offs, offs), dtype=np.int64, count=nb)
    align = np.fromiter(map(_ALIGNMENT, bufs), dtype=np.int64, count=nb)
    size = np.fromiter(map(_SIZE, bufs), dtype=np.int64, count=nb)
    # What the steps see of each buffer: its first access and the offset they use.
    first_of = np.flatnonzero(np.r_[True, acc.buffer[1:] != acc.buffer[:-1]])
    first_of = first_of[first_of < len(acc.step)]
    where = np.searchsorted(ids, acc.buffer[first_of]).clip(0, max(nb - 1, 0))
    known = (ids[where] == acc.buffer[first_of]) if nb else np.zeros(0, dtype=bool)
    where, first_of = where[known], first_of[known]
    touched = np.zeros(nb, dtype=bool)
    touched[where] = True
    first_step = np.full(nb, -1, dtype=np.int64)
    first_step[where] = acc.step[first_of]
    off = declared.copy()
    off[where] = acc.offset[first_of]
    has = off != NONE
    inside = ~external
    bad = inside & (
        (touched & (off != declared))
        | (touched & ~has)
        | (has & ((off < 0) | (off % np.maximum(align, 1) != 0)))
        | (has & (off + size > plan.pool_bytes))
    )
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        _raise_bad_offset(plan, bufs[r], _off(off[r]), int(first_step[r]) if touched[r] else None)
    rows = np.flatnonzero(inside & has & touched)
    if len(rows) < 2:
        return

    # Rank the placed buffers by first access; per buffer, the two clocks that decide
    # "every access of one before every access of the other" (ClockArrays.bounds).
    rows = rows[np.argsort(first_step[rows], kind="stable")]
    rank_of = np.full(int(max(ids.max(), acc.buffer.max())) + 1, -1, dtype=np.int64)
    rank_of[ids[rows]] = np.arange(len(rows))
    group = rank_of[acc.buffer]
    mask = group >= 0
    last, floor = ca.bounds(group[mask], acc.step[mask], len(rows))
    lo, hi = off[rows], off[rows] + size[rows]
    prev, nxt = _successive_occupants(lo, hi)
    ok = (last[prev] <= floor[nxt]).all(axis=1)
    if not ok.all():
        k = int(np.flatnonzero(~ok)[0])
        a, b = (BufferId(int(ids[rows[x]])) for x in (prev[k], nxt[k]))
        _raise_overlap(plan, vc, acc, a, b)


def _successive_occupants(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pairs ``(i, j)``, ``i < j``, of ranges ``[lo, hi)`` (indexed in the order they
    occupy the arena) where ``i`` is the last range before ``j`` on some shared byte.

    "Ordered" is transitive, so checking these pairs checks every overlapping pair: the
    ranges over one byte form a chain in occupation order. The bytes are cut into the
    elementary segments between all range ends; a range covers a run of them, and within
    a segment the pairs are consecutive occupants. That is one sort over the (range,
    segment) incidences, usually a few per range; when they would explode (many long
    ranges over many short ones) the same pairs come from a sweep that keeps, per segment,
    its last occupant.
    """
    cuts = np.unique(np.concatenate([lo, hi]))
    first = np.searchsorted(cuts, lo)
    span = np.searchsorted(cuts, hi) - first
    total = int(span.sum())
    if total <= 8 * len(lo) + 1_000_000:
        row = np.repeat(np.arange(len(lo)), span)
        seg = np.repeat(first - np.cumsum(span) + span, span) + np.arange(total)
        srt = np.lexsort((row, seg))
        row, seg = row[srt], seg[srt]
        same = seg[1:] == seg[:-1]
        pairs = np.unique(np.stack([row[:-1][same], row[1:][same]], axis=1), axis=0)
        return pairs[:, 0], pairs[:, 1]
    starts: list[int] = [0]
    owners: list[int] = [-1]
    found: set[tuple[int, int]] = set()
    for r, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        _split(starts, owners, a)
        _split(starts, owners, b)
        i, j = bisect_left(starts, a), bisect_left(starts, b)
        found.update((p, r) for p in set(owners[i:j]) if p >= 0)
        starts[i:j] = [a]
        owners[i:j] = [r]
    pairs = np.array(sorted(found), dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _raise_bad_offset(plan: ExecutionPlan, b: Any, off: int | None, first: int | None) -> None:
    who = f"buffer {b.name!r} (id {int(b.id)})"
    if first is not None and off != b.offset:
        raise InvalidPlan(f"{who}: steps use offset {off}, plan.graph says {b.offset}")
    if off is None:
        raise InvalidPlan(f"{who} is used by {_where(plan, first or 0)} but has no arena offset")
    if off < 0 or off % b.alignment:
        raise InvalidPlan(f"{who}: offset {off} is not a multiple of its alignment {b.alignment}")
    raise InvalidPlan(
        f"{who}: bytes {off}..{off + b.size_bytes} run past the arena of {plan.pool_bytes} bytes"
    )


def _split(starts: list[int], owners: list[Any], at: int) -> None:
    i = bisect_right(starts, at) - 1
    if starts[i] != at:
        starts.insert(i + 1, at)
        owners.insert(i + 1, owners[i])


def _raise_overlap(
    plan: ExecutionPlan, vc: VectorClocks, acc: _Accesses, a: BufferId, b: BufferId
) -> None:
    ba, bb = plan.graph.buffer(a), plan.graph.buffer(b)
    lo = max(ba.offset or 0, bb.offset or 0)
    hi = min((ba.offset or 0) + ba.size_bytes, (bb.offset or 0) + bb.size_bytes)
    of_a, of_b = (np.flatnonzero(acc.buffer == int(x)) for x in (a, b))
    for i in of_a.tolist():
        for j in of_b.tolist():
            x, y = int(acc.step[i]), int(acc.step[j])
            if not vc.happens_before(min(x, y), max(x, y)):
                _raise_unordered(
                    plan, (a, b), x, y, bool(acc.write[i]), bool(acc.write[j]),
                    f" share arena bytes [{lo}, {hi})",
                )  # fmt: skip
    # Every pair is ordered both ways round, but not all of one before all of the other:
    # the accesses interleave (one buffer used before and after the other).
    i, j = int(of_a[-1]), int(of_b[0])
    _raise_unordered(
        plan, (a, b), int(acc.step[i]), int(acc.step[j]), bool(acc.write[i]),
        bool(acc.write[j]), f" share arena bytes [{lo}, {hi}) and their uses interleave",
    )  # fmt: skip
