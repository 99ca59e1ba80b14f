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

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from oxiwork.error import InvalidPlan
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, KernelConfig, MemcpyDir, NodeId, NodeKind, StreamId

__all__ = ["BufferArg", "ExecutionPlan", "PlanStep", "verify_plan"]


@dataclass(frozen=True, slots=True)
class BufferArg:
    """A buffer as a step sees it: where it lives and how to view it.

    ``offset`` is the arena offset in bytes, or ``None`` for an external buffer (bound by
    the user at run time).
    """

    buffer: BufferId
    name: str
    offset: int | None
    size_bytes: int
    dtype: str
    shape: tuple[int, ...]
    external: bool


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
    memory: Any = None
    streams: Any = None
    trace: tuple[Any, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        graph: ComputeGraph,
        max_streams: int = 4,
        *,
        fusion: bool = True,
        max_group_size: int = 16,
        memory_mode: str = "heuristic",
        memory_time_limit: float | None = None,
        capacity: int | None = None,
        verify: bool = True,
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
        memory_mode : {"heuristic", "exact"}
            The memory planner's mode (``"exact"`` searches with MiniMalloc).
        memory_time_limit : float, optional
            Seconds the exact memory search may take.
        capacity : int, optional
            Arena bytes the memory plan should fit in (reported in ``plan.memory``).
        verify : bool
            Verify the graph after every pass and the finished plan.

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
        from oxiwork.optimizer.memory_pass import plan_memory
        from oxiwork.optimizer.stream import assign_streams
        from oxiwork.pipeline import PassSpec, Pipeline

        passes = []
        if fusion:
            from oxiwork.optimizer.fusion import fuse

            passes.append(PassSpec("fusion", fuse, {"max_group_size": max_group_size}))
        passes.append(PassSpec("streams", assign_streams, {"max_streams": max_streams}))
        passes.append(
            PassSpec(
                "memory",
                plan_memory,
                {"mode": memory_mode, "time_limit": memory_time_limit, "capacity": capacity},
            )
        )
        from oxiwork.analysis import paused_gc

        with paused_gc():  # the passes and the checks between them allocate acyclic data only
            run = Pipeline(passes).run(graph, verify=verify)
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
            },
        )
        if verify:
            verify_plan(plan)
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


def _report(obj: Any) -> Any:
    to_dict = getattr(obj, "to_dict", None)
    return to_dict() if callable(to_dict) else None


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _arg(a: BufferArg) -> str:
    return f"{_clip(a.name, 24)}@{'ext' if a.offset is None else a.offset}"


# ------------------------------------------------------------------------------------------
# Lowering
# ------------------------------------------------------------------------------------------


def _lower(
    graph: ComputeGraph,
    original: ComputeGraph,
    order: tuple[NodeId, ...],
    *,
    memory: Any,
    streams: Any,
    trace: tuple[Any, ...],
    options: dict[str, Any],
) -> ExecutionPlan:
    """The steps of ``graph`` in issue ``order`` (a topological order consistent with streams)."""
    index = {nid: i for i, nid in enumerate(order)}
    args = {
        b.id: BufferArg(b.id, b.name, b.offset, b.size_bytes, b.dtype, b.array_shape, b.external)
        for b in graph.buffers
    }
    event_of: dict[NodeId, int] = {}
    for nid in order:
        if graph.node(nid).kind is NodeKind.EventRecord:
            event_of[nid] = len(event_of)
    count: dict[int, int] = {}
    steps = []
    for i, nid in enumerate(order):
        n = graph.node(nid)
        s = int(n.stream or 0)
        position = count.get(s, 0)
        count[s] = position + 1
        event = None
        if n.kind is NodeKind.EventRecord:
            event = event_of[nid]
        elif n.kind is NodeKind.EventWait and n.event is not None:
            event = event_of[n.event]
        steps.append(
            PlanStep(
                index=i,
                kind=n.kind,
                node=nid,
                name=n.name,
                stream=StreamId(s),
                position=position,
                fused_nodes=n.fused_from or (nid,),
                function_name=n.function_name if n.is_kernel else None,
                config=n.config,
                inputs=tuple(args[b] for b in n.inputs),
                outputs=tuple(args[b] for b in n.outputs),
                size_bytes=n.size_bytes,
                memcpy_dir=n.memcpy_dir,
                memset_value=n.memset_value,
                event=event,
                label=n.label,
                depends_on=tuple(sorted(index[p] for p in graph.predecessors(nid))),
            )
        )
    return ExecutionPlan(
        steps=tuple(steps),
        num_streams=max(count, default=0) + 1,
        pool_bytes=int(memory.arena_bytes),
        kernel_count_original=len(original.kernels()),
        kernel_count_fused=len(graph.kernels()),
        event_count=len(event_of),
        graph=graph,
        original=original,
        memory=memory,
        streams=streams,
        trace=trace,
        options=options,
    )


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
    3. every dependency of the graph, transitively (also through event nodes the plan
       dropped), is ordered by stream order plus event pairs (vector clocks of
       :mod:`oxiwork.executor.happens_before`);
    4. every arena buffer has an offset that is aligned, inside ``pool_bytes`` and the same
       in every step and in the graph; and any two buffers sharing bytes are ordered: every
       access of one happens before every access of the other. The pairs are found by a
       sweep over the buffers in order of first access that keeps, per address range,
       the buffer that last occupied it; "ordered" is transitive, so checking each buffer
       against the previous occupants of its range covers every overlapping pair.

    >>> from oxiwork.examples import quick_start
    >>> verify_plan(ExecutionPlan.build(quick_start()))
    """
    from oxiwork.analysis import paused_gc
    from oxiwork.executor.happens_before import plan_clocks

    with paused_gc():  # many acyclic allocations: a GC pass would rescan them all
        _check_structure(plan)
        vc = plan_clocks(plan)
        _check_dependencies(plan, vc)
        _check_memory(plan, vc)


def _check_structure(plan: ExecutionPlan) -> None:
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


def _check_dependencies(plan: ExecutionPlan, vc: Any) -> None:
    """Every dependency (transitively) is ordered by stream order + events."""
    graph = plan.graph
    d = graph.dense()
    step_of = {st.node: k for k, st in enumerate(plan.steps)}
    width = len(vc.streams)
    # need[p][a]: the last position on stream a of a step the node at p depends on
    # (itself included); dependencies pass through nodes without a step.
    need: list[list[int]] = [[]] * len(d.ids)
    empty = [-1] * width
    for p in d.topo:
        c = empty
        for u in d.pred[p]:
            c = list(map(max, c, need[u]))
        k = step_of.get(d.ids[p])
        if k is not None:
            have = vc.clocks[k]
            a_own = vc.stream_index[k]
            for a in range(width):
                bad = c[a] >= vc.position[k] if a == a_own else c[a] > have[a]
                if bad:
                    j = vc.members[a][c[a]]
                    raise InvalidPlan(
                        f"{_where(plan, k)} depends on {_where(plan, j)}, but neither stream "
                        "order nor any event pair orders them; record an event after step "
                        f"{j} on stream {vc.streams[a]} and wait for it before step {k}"
                    )
            c = c[:] if c is not empty else empty[:]
            c[a_own] = max(c[a_own], vc.position[k])
        need[p] = c


def _check_memory(plan: ExecutionPlan, vc: Any) -> None:
    graph = plan.graph
    accesses: dict[BufferId, list[int]] = {}
    offset: dict[BufferId, int | None] = {}
    for k, st in enumerate(plan.steps):
        for a in (*st.inputs, *st.outputs):
            accesses.setdefault(a.buffer, []).append(k)
            if a.buffer in offset and offset[a.buffer] != a.offset:
                raise InvalidPlan(
                    f"{_where(plan, k)}: buffer {a.name!r} is at offset {a.offset}, but an "
                    f"earlier step has it at {offset[a.buffer]}"
                )
            offset[a.buffer] = a.offset
    placed: list[tuple[int, int, BufferId]] = []
    for b in graph.buffers:
        if b.external:
            continue
        off = offset.get(b.id, b.offset)
        who = f"buffer {b.name!r} (id {int(b.id)})"
        if b.id in offset and off != b.offset:
            raise InvalidPlan(f"{who}: steps use offset {off}, plan.graph says {b.offset}")
        if off is None:
            if b.id in accesses:
                k = accesses[b.id][0]
                raise InvalidPlan(f"{who} is used by {_where(plan, k)} but has no arena offset")
            continue
        if off < 0 or off % b.alignment:
            raise InvalidPlan(
                f"{who}: offset {off} is not a multiple of its alignment {b.alignment}"
            )
        if off + b.size_bytes > plan.pool_bytes:
            raise InvalidPlan(
                f"{who}: bytes {off}..{off + b.size_bytes} run past the arena of "
                f"{plan.pool_bytes} bytes"
            )
        if b.id in accesses:
            placed.append((accesses[b.id][0], off, b.id))

    # Sweep in order of first access; `starts`/`owners` map address segments
    # [starts[i], starts[i+1]) to the buffer that last occupied them (None: never).
    placed.sort()
    starts: list[int] = [0]
    owners: list[BufferId | None] = [None]
    clock_of: dict[BufferId, list[int]] = {}
    for _, off, bid in placed:
        end = off + graph.buffer(bid).size_bytes
        _split(starts, owners, off)
        _split(starts, owners, end)
        lo, hi = bisect_left(starts, off), bisect_left(starts, end)
        for prev in {owners[i] for i in range(lo, hi)} - {None}:
            if not _before(vc, accesses[prev], accesses[bid], clock_of, prev):
                _raise_overlap(plan, vc, prev, bid, accesses)
        starts[lo:hi] = [off]
        owners[lo:hi] = [bid]


def _split(starts: list[int], owners: list[Any], at: int) -> None:
    i = bisect_right(starts, at) - 1
    if starts[i] != at:
        starts.insert(i + 1, at)
        owners.insert(i + 1, owners[i])


def _before(
    vc: Any, first: list[int], second: list[int], cache: dict[BufferId, list[int]], key: BufferId
) -> bool:
    """Every step of ``first`` happens strictly before every step of ``second``."""
    clock = cache.get(key)
    if clock is None:
        clock = cache[key] = vc.access_clock(first)
    if set(first) & set(second):
        return False
    return all(vc.dominates(k, clock) for k in second)


def _raise_overlap(
    plan: ExecutionPlan, vc: Any, a: BufferId, b: BufferId, accesses: dict[BufferId, list[int]]
) -> None:
    ba, bb = plan.graph.buffer(a), plan.graph.buffer(b)
    for x in accesses[a]:
        for y in accesses[b]:
            if not vc.happens_before(x, y):
                raise InvalidPlan(
                    f"buffers {ba.name!r} (bytes {ba.offset}..{ba.offset + ba.size_bytes}) and "
                    f"{bb.name!r} (bytes {bb.offset}..{bb.offset + bb.size_bytes}) share arena "
                    f"bytes, but {_where(plan, x)} (uses {ba.name!r}) does not happen before "
                    f"{_where(plan, y)} (uses {bb.name!r}); give them disjoint offsets or "
                    "order the steps with an event"
                )
