"""The CPU simulator: an interpreter over an ExecutionPlan, in one go or step by step.

The device is one numpy byte arena of ``plan.pool_bytes`` (:mod:`oxiwork.executor.arena`):
every planned buffer is a typed view at its planned offset, so the memory plan is
exercised, not bypassed, and a wrong plan shows up as wrong numbers. Steps dispatch by kind
through a rule table; kernels compute straight into the arena with the op table's in-place
forms, or its numpy references for fused programs (:func:`oxiwork.ops.program.run_into`;
the simulator holds no op code of its own);
any failure is re-raised as :class:`~oxiwork.error.ExecutionError` naming the step, in the
manner of torch.fx's ``Interpreter`` and JAX's ``eval_jaxpr``.

:class:`SequentialExecutor` runs the steps in plan order. :class:`Simulator` is the
step-through debugger: an interleaving policy chooses which stream moves next (only stream
order and events constrain it, as on a GPU; the plan's DAG edges are deliberately *not*
enforced), ``step_back`` undoes steps from an undo log, breakpoints stop ``run``, and
races between unordered steps are recorded as they are observed.

**Inputs.** Host arrays keyed by buffer name, for buffers a HostToDevice copy fills and for
external buffers (:func:`input_names`). Missing ones are generated exactly as the reference
evaluator generates them (:func:`oxiwork.reference.generated_input`, seeded by ``seed`` and
the buffer name), listed in ``generated_inputs`` and announced with a warning.

**Outputs.** ``outputs`` maps buffer names to host arrays:

- every DeviceToHost copy produces the host array it copies, keyed by its source buffer's
  name (a buffer downloaded twice keeps the copy executed last);
- every non-external buffer that is written but never read (a graph output nobody
  downloads) is captured right after its last writer runs: its lifetime ends there, so
  the memory plan may legally reuse its bytes afterwards.

``outputs`` is ``None`` when values are not computed (``values=False``) or some kernel has
no numpy reference (it then runs for timing only and leaves its outputs unchanged).

Example
-------
>>> import numpy as np
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> plan = ExecutionPlan.build(quick_start())
>>> x = np.linspace(-1, 1, 1024, dtype=np.float32)
>>> stats = SequentialExecutor(plan).run({"input": x})
>>> bool(np.allclose(stats.outputs["output"], 2 * np.maximum(x, 0)))
True
>>> sim = Simulator(plan, {"input": x}, policy="round_robin")
>>> sim.step().name
'upload'
>>> sim.run().reason
'end'
>>> _ = sim.step_back()
>>> sim.state.finished
False
"""

from __future__ import annotations

import warnings
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from oxiwork.analysis.liveness import dead_buffers
from oxiwork.error import (
    CheckFailed,
    ExecutionError,
    GraphError,
    GraphWarning,
    InvalidArgument,
    InvalidPlan,
    IterationLimit,
    UnknownBuffer,
    UnknownNode,
    UnsupportedOp,
)
from oxiwork.executor.arena import Arena
from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep, failed_check
from oxiwork.executor.races import find_races
from oxiwork.graph import ComputeGraph
from oxiwork.node import (
    BODY_KINDS,
    FLOAT_DTYPES,
    BufferId,
    GraphNode,
    MemcpyDir,
    NodeId,
    NodeKind,
    StreamId,
    conditional_runs,
)

__all__ = [
    "POLICIES",
    "ExecutionStats",
    "SequentialExecutor",
    "SimState",
    "Simulator",
    "Stop",
    "input_names",
]

POLICIES = ("in_order", "round_robin", "random", "adversarial")
_MISSING: Any = object()
_NO_CHANGES: list[tuple[str, Any]] = []  # shared, never mutated


@dataclass(frozen=True, slots=True)
class _Facts:
    """What every run of a plan needs to know, computed in one pass and cached."""

    args: dict[BufferId, BufferArg]
    inputs: tuple[str, ...]
    unread_writers: dict[BufferId, int]


# A few recent plans' facts, keyed by id with the plan kept alive (plans are frozen and
# slotted, so they cannot carry a cache themselves): repeated runs skip the scan.
_FACTS: dict[int, tuple[ExecutionPlan, _Facts]] = {}


def _facts(plan: ExecutionPlan) -> _Facts:
    hit = _FACTS.get(id(plan))
    if hit is not None and hit[0] is plan:
        return hit[1]
    args: dict[BufferId, BufferArg] = {}
    names: dict[str, None] = {}
    writes: list[BufferArg] = []
    memcpy, h2d = NodeKind.Memcpy, MemcpyDir.HostToDevice
    for st in plan.steps:
        for a in st.inputs:
            if a.buffer not in args:
                if a.base is not None:  # a view's base is bound and loaded as itself
                    args.setdefault(a.base.buffer, a.base)
                args[a.buffer] = a
            if a.storage.external:
                names[a.storage.name] = None
        upload = st.kind is memcpy and st.memcpy_dir is h2d
        for a in st.outputs:
            if a.buffer not in args:
                if a.base is not None:
                    args.setdefault(a.base.buffer, a.base)
                args[a.buffer] = a
            writes.append(a.storage)  # a write through a view writes its base
            if upload or a.storage.external:
                names[a.storage.name] = None
    # Written, never read, not external: liveness's dead buffers (one definition, shared
    # with the GPU lowering's captures), counted by writer so the capture follows the last.
    dead = dead_buffers(plan.graph)
    unread: dict[BufferId, int] = {}
    for a in writes:
        if a.buffer in dead:
            unread[a.buffer] = unread.get(a.buffer, 0) + 1
    facts = _Facts(args, tuple(names), unread)
    if len(_FACTS) >= 8:
        _FACTS.pop(next(iter(_FACTS)))
    _FACTS[id(plan)] = (plan, facts)
    return facts


def input_names(plan: ExecutionPlan) -> tuple[str, ...]:
    """Names of the buffers whose data comes from the host: HostToDevice destinations and
    external buffers, in plan order.

    >>> from oxiwork.examples import quick_start
    >>> input_names(ExecutionPlan.build(quick_start()))
    ('input',)
    """
    return _facts(plan).inputs


@dataclass(frozen=True, slots=True)
class ExecutionStats:
    """What a run did. ``outputs``: see the module docstring (``None`` without values)."""

    kernels_launched: int
    bytes_copied: int
    bytes_set: int
    events_recorded: int
    events_waited: int
    host_callbacks: int
    barriers: int
    steps_per_stream: tuple[int, ...]
    generated_inputs: tuple[str, ...]
    outputs: dict[str, np.ndarray] | None

    @property
    def steps(self) -> int:
        """Steps executed in total."""
        return sum(self.steps_per_stream)


def _stats(
    plan: ExecutionPlan,
    executed: list[int] | range,
    generated: tuple[str, ...],
    outputs: dict[str, np.ndarray] | None,
) -> ExecutionStats:
    steps = plan.steps
    chosen = (
        steps
        if isinstance(executed, range) and len(executed) == len(steps)
        else [steps[i] for i in executed]
    )
    # enum hashing is slow in Python: count by the members' interned names instead
    names = Counter(st.kind._name_ for st in chosen)
    counts = {k: names.get(k.name, 0) for k in NodeKind}
    copied = sum(st.size_bytes for st in chosen if st.kind is NodeKind.Memcpy)
    set_ = sum(st.size_bytes for st in chosen if st.kind is NodeKind.Memset)
    per_stream = [0] * plan.num_streams
    for s, c in Counter(st.stream for st in chosen).items():
        if s >= len(per_stream):
            per_stream.extend([0] * (s + 1 - len(per_stream)))
        per_stream[s] = c
    return ExecutionStats(
        kernels_launched=counts[NodeKind.KernelLaunch],
        bytes_copied=copied,
        bytes_set=set_,
        events_recorded=counts[NodeKind.EventRecord],
        events_waited=counts[NodeKind.EventWait],
        host_callbacks=counts[NodeKind.HostCallback],
        barriers=counts[NodeKind.Barrier],
        steps_per_stream=tuple(per_stream),
        generated_inputs=generated,
        outputs=outputs,
    )


def _finite(view: np.ndarray) -> bool:
    """True if every element is finite. A sum is NaN/Inf whenever an element is, so one
    cheap reduction decides the common case; only a non-finite sum (which may be a mere
    overflow) pays for the exact check."""
    if view.dtype.name not in FLOAT_DTYPES:
        return True
    with np.errstate(all="ignore"):
        if np.isfinite(np.add.reduce(view, axis=None)):
            return True
    return bool(np.isfinite(view).all())


class _Machine:
    """The interpreter's environment: the arena, host data, bound kernels, outputs."""

    def __init__(
        self,
        plan: ExecutionPlan,
        inputs: Mapping[str, np.ndarray] | None,
        seed: int,
        values: bool,
        check_finite: bool,
    ) -> None:
        if not isinstance(plan, ExecutionPlan):
            raise InvalidArgument(
                f"expected an ExecutionPlan, got {type(plan).__name__}; build one with "
                "ExecutionPlan.build(graph)"
            )
        self.plan = plan
        self.steps = plan.steps
        self.values = values
        self.check_finite = check_finite
        self.seed = seed
        facts = _facts(plan)
        self.args = facts.args
        if inputs is not None and not isinstance(inputs, Mapping):
            raise InvalidArgument(
                f"inputs must be a dict of buffer name -> array, got {type(inputs).__name__}"
            )
        self.inputs = dict(inputs or {})
        names = facts.inputs
        unknown = [n for n in self.inputs if n not in names]
        if unknown:
            raise UnknownBuffer(
                f"inputs names {unknown[0]!r}, which no HostToDevice copy fills and which is "
                f"not external in this plan; inputs are: {', '.join(map(repr, names)) or 'none'}"
            )
        self.generated = tuple(n for n in names if n not in self.inputs)
        if self.generated:
            shown = ", ".join(map(repr, self.generated[:8]))
            more = f" (+{len(self.generated) - 8} more)" if len(self.generated) > 8 else ""
            warnings.warn(
                f"no data given for input(s) {shown}{more}: generated from seed {seed}; pass "
                "them in inputs= to choose the values",
                GraphWarning,
                stacklevel=4,
            )
        self.opaque: list[str] = []
        self.kernels: dict[int, Any] = {}
        # Kernels inside body graphs, by (id of the body graph, node id): bound once.
        self.body_kernels: dict[tuple[int, NodeId], Any] = {}
        self.arena: Arena | None = None
        self.views: dict[BufferId, np.ndarray] = {}
        self.raws: dict[BufferId, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}
        # Never-read, non-external buffers: captured after their last writer runs.
        self.writers_total = facts.unread_writers
        self.writers_left = dict(self.writers_total)
        if values:
            self._prepare_values()

    def _prepare_values(self) -> None:
        from oxiwork.ops.program import bind

        self.arena = Arena(self.plan.pool_bytes, self.args.values())
        self.views = {b: self.arena.view(b) for b in self.args}
        self.raws = {b: self.arena.raw(b) for b in self.args}
        graph = self.plan.graph

        def bound_kernel(g: ComputeGraph, node: GraphNode) -> Any:
            try:
                bound = bind(g, node)
            except UnsupportedOp as e:
                self.opaque.append(f"{node.name!r}: {e}")
                return None
            except GraphError as e:  # a shape mismatch: reported when the step runs
                return e
            if any(s.op.reference is None for s in bound.steps):
                self.opaque.append(f"{node.name!r}: an op has no numpy reference")
                return None
            return bound

        def bind_bodies(node: GraphNode) -> None:
            for body in node.bodies:
                for inner in body.nodes:
                    if inner.kind is NodeKind.KernelLaunch:
                        self.body_kernels[(id(body), inner.id)] = bound_kernel(body, inner)
                    bind_bodies(inner)

        for st in self.steps:
            if st.kind is NodeKind.KernelLaunch:
                self.kernels[st.index] = bound_kernel(graph, graph.node(st.node))
            elif st.kind in BODY_KINDS:
                bind_bodies(graph.node(st.node))
        if self.opaque:
            warnings.warn(
                f"{len(self.opaque)} kernel(s) cannot be computed on the CPU and run for timing "
                f"only, leaving their outputs unchanged (outputs will be None): {self.opaque[0]}",
                GraphWarning,
                stacklevel=5,
            )
        self.load_external()

    def load_external(self) -> None:
        for bid, arg in self.args.items():
            if arg.external:
                data = self.host_bytes(arg)
                if data.size < arg.size_bytes:
                    raise InvalidArgument(
                        f"input {arg.name!r} has {data.size} bytes but external buffer "
                        f"{arg.name!r} holds {arg.size_bytes} ({arg.dtype}, shape {arg.shape}); "
                        "pass an array of that size"
                    )
                self.raws[bid][:] = data[: arg.size_bytes]

    def host_bytes(self, arg: BufferArg) -> np.ndarray:
        """The host data for an input buffer, as flat bytes in the buffer's dtype."""
        data = self.inputs.get(arg.name, _MISSING)
        if data is _MISSING:
            from oxiwork.reference import generated_input

            data = generated_input(self.plan.graph.buffer(arg.buffer), self.seed)
        arr = np.ascontiguousarray(np.asarray(data).astype(arg.dtype, copy=False))
        if arr.size * arr.itemsize != arg.size_bytes:
            raise InvalidArgument(
                f"input {arg.name!r} has {arr.size} elements but buffer {arg.name!r} holds "
                f"{arg.size_bytes // arr.itemsize} {arg.dtype} elements (shape {arg.shape}); "
                "pass an array of that size"
            )
        return arr.reshape(-1).view(np.uint8)

    @property
    def computable(self) -> bool:
        return self.values and not self.opaque

    # ------------------------------------------------------------------ execution
    def execute(self, st: PlanStep) -> list[tuple[str, Any]]:
        """Run one step; returns the (key, previous value) pairs it set in ``outputs``."""
        try:
            if self.values:
                _RULES[st.kind](self, st)
                if self.check_finite and st.kind is NodeKind.KernelLaunch:
                    for a in st.outputs:
                        if not _finite(self.views[a.buffer]):
                            v = self.views[a.buffer]
                            raise FloatingPointError(
                                f"produced {int(np.isnan(v).sum())} NaN and "
                                f"{int(np.isinf(v).sum())} Inf value(s) in {a.name!r}; inspect "
                                "its inputs, or pass check_finite=False to allow them"
                            )
            elif st.kind is NodeKind.HostCallback:
                _host_callback(self, st)
        except Exception as e:
            raise _error(st, e) from e
        return self._capture(st)

    def _capture(self, st: PlanStep) -> list[tuple[str, Any]]:
        changed: list[tuple[str, Any]] = []
        if not self.values:
            return changed
        if st.kind is NodeKind.Memcpy and st.memcpy_dir is MemcpyDir.DeviceToHost and st.inputs:
            a = st.inputs[0]
            changed.append((a.name, self.outputs.get(a.name, _MISSING)))
            self.outputs[a.name] = self._download(a, st.size_bytes)
        for a in (o.storage for o in st.outputs):  # a write through a view writes its base
            left = self.writers_left.get(a.buffer)
            if left is None:
                continue
            self.writers_left[a.buffer] = left - 1
            if left == 1:
                changed.append((a.name, self.outputs.get(a.name, _MISSING)))
                self.outputs[a.name] = self.views[a.buffer].copy()
        return changed

    def uncapture(self, st: PlanStep, changed: list[tuple[str, Any]]) -> None:
        for a in (o.storage for o in st.outputs):
            if a.buffer in self.writers_left:
                self.writers_left[a.buffer] += 1
        for key, old in reversed(changed):
            if old is _MISSING:
                self.outputs.pop(key, None)
            else:
                self.outputs[key] = old

    def _download(self, a: BufferArg, n: int) -> np.ndarray:
        raw = self.raws[a.buffer][:n].copy()
        itemsize = np.dtype(a.dtype).itemsize
        if n == a.size_bytes:
            return raw.view(a.dtype).reshape(a.shape)
        return raw[: n - n % itemsize].view(a.dtype)


def _error(st: PlanStep, e: BaseException) -> ExecutionError:
    writing = f" writing buffer {st.outputs[0].name!r}" if st.outputs else ""
    if len(st.outputs) > 1:
        writing += f" (and {', '.join(repr(a.name) for a in st.outputs[1:])})"
    cause = str(e) if isinstance(e, GraphError) else f"{type(e).__name__}: {e}"
    # A WHILE node's bound and a failed check keep their own types, so callers can catch
    # them.
    err = (type(e) if isinstance(e, (IterationLimit, CheckFailed)) else ExecutionError)(
        f"while executing step {st.index} {st.name!r} (node {int(st.node)}, stream "
        f"{int(st.stream)}){writing}: {cause}"
    )
    err.step = st.index  # type: ignore[attr-defined]
    err.node = st.node  # type: ignore[attr-defined]
    err.stream = int(st.stream)  # type: ignore[attr-defined]
    err.buffer = st.outputs[0].name if st.outputs else None  # type: ignore[attr-defined]
    return err


# ---------------------------------------------------------------------- one rule per kind
def _kernel(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    from oxiwork.ops.program import run_into

    bound = m.kernels[st.index]
    if bound is None:  # no numpy reference: timing only, outputs left as they are
        return
    if isinstance(bound, Exception):
        raise bound
    views = m.views
    # Straight into the arena views, with each op's in-place form from the op table (or
    # its default rule): a result array and a copy would cost as much as a cheap op.
    # IEEE results, as the reference; check_finite reports non-finite ones.
    ins = [views[a.buffer] for a in st.inputs]
    outs = [views[a.buffer] for a in st.outputs]
    if any(a.base is not None for a in st.outputs):
        # A view may be strided, so no reshape of it is a view of it: compute into
        # temporaries, then write them through the views into the base's bytes.
        temps = [np.empty(o.shape, o.dtype) for o in outs]
        run_into(bound, ins, temps)
        for o, t in zip(outs, temps, strict=True):
            o[...] = t
    else:
        run_into(bound, ins, outs)
    if bound.steps[0].op.check and not np.all(outs[0]):  # (checks never fuse: one step)
        raise CheckFailed(failed_check())


def _memcpy(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    n = st.size_bytes
    if st.memcpy_dir is MemcpyDir.HostToDevice:
        for a in st.outputs:
            data = m.host_bytes(a)
            if data.size < n:
                raise InvalidArgument(f"host data has {data.size} bytes; the copy moves {n}")
            m.raws[a.buffer][:n] = data[:n]
    elif st.inputs and st.outputs:  # device or peer to device: bytes
        src, dst = m.raws[st.inputs[0].buffer], m.raws[st.outputs[0].buffer]
        np.copyto(dst[:n], src[:n])
    # DeviceToHost only reads: _Machine._capture stores the host copy.


def _memset(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    for a in st.outputs:
        m.raws[a.buffer][: st.size_bytes] = st.memset_value


def _host_callback(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    fn = m.plan.graph.node(st.node).fn
    if fn is not None:
        fn()


def _order_only(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    """Events, barriers and graph-owned memory's alloc/free nodes order work and change no
    bytes (an allocation's bytes are whatever the arena held, as on a GPU; the memory plan
    orders every use after it)."""


def _body_node(m: _Machine, graph: ComputeGraph, node: GraphNode) -> None:
    """Run one node of a body graph on the arena (the body shares the plan's buffers)."""
    if node.kind is NodeKind.KernelLaunch:
        from oxiwork.ops.program import run_into

        bound = m.body_kernels[(id(graph), node.id)]
        if bound is None:
            return
        if isinstance(bound, Exception):
            raise bound
        views = m.views
        run_into(bound, [views[b] for b in node.inputs], [views[b] for b in node.outputs])
        return
    # Every other kind runs through the plan's own rules, on a step made for the node.
    args = m.args
    _RULES[node.kind](
        m,
        PlanStep(
            index=-1,
            kind=node.kind,
            node=node.id,
            name=node.name,
            stream=StreamId(0),
            position=0,
            fused_nodes=(node.id,),
            inputs=tuple(args[b] for b in node.inputs),
            outputs=tuple(args[b] for b in node.outputs),
            size_bytes=node.size_bytes,
            memcpy_dir=node.memcpy_dir,
            memset_value=node.memset_value,
        ),
        graph,
    )


def _run_body(m: _Machine, body: ComputeGraph) -> None:
    for nid in body.topological_order():
        _body_node(m, body, body.node(nid))


def _child_graph(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    node = (graph or m.plan.graph).node(st.node)
    _run_body(m, node.bodies[0])


def _conditional(m: _Machine, st: PlanStep, graph: ComputeGraph | None = None) -> None:
    """Read the condition from the arena when the node runs (a WHILE before every
    iteration), then run the chosen bodies (:func:`~oxiwork.node.conditional_runs`)."""
    node = (graph or m.plan.graph).node(st.node)
    assert node.condition is not None  # verify's rule
    cond = m.args[node.condition]
    view = m.views[node.condition].reshape(-1)
    for k in conditional_runs(node, lambda: view[0], cond.name):
        _run_body(m, node.bodies[k])


# Rules take the step and, for a node of a body graph, that graph (None: plan.graph).
_RULES: dict[NodeKind, Callable[..., None]] = {
    NodeKind.KernelLaunch: _kernel,
    NodeKind.Memcpy: _memcpy,
    NodeKind.Memset: _memset,
    NodeKind.HostCallback: _host_callback,
    NodeKind.EventRecord: _order_only,
    NodeKind.EventWait: _order_only,
    NodeKind.Barrier: _order_only,
    NodeKind.ChildGraph: _child_graph,
    NodeKind.Conditional: _conditional,
    NodeKind.MemAlloc: _order_only,
    NodeKind.MemFree: _order_only,
}


def _verified(plan: Any) -> None:
    """Refuse what is not a plan, or a plan that fails ``verify_plan`` (once per plan)."""
    if not isinstance(plan, ExecutionPlan):
        raise InvalidArgument(
            f"expected an ExecutionPlan, got {type(plan).__name__}; build one with "
            "ExecutionPlan.build(graph)"
        )
    plan.verify()


class SequentialExecutor:
    """Runs a plan's steps in plan order on the CPU (values via the ops' numpy references).

    Parameters
    ----------
    plan
        The plan to run.
    values
        Compute buffer contents (default). ``False`` only walks the steps and counts.
    check_finite
        Raise :class:`~oxiwork.error.ExecutionError` when a kernel produces NaN or Inf.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> plan = ExecutionPlan.build(quick_start())
    >>> stats = SequentialExecutor(plan, values=False).run({"input": np.ones(1024, np.float32)})
    >>> stats.kernels_launched, stats.bytes_copied, stats.outputs is None
    (1, 8192, True)
    """

    def __init__(
        self, plan: ExecutionPlan, *, values: bool = True, check_finite: bool = False
    ) -> None:
        _verified(plan)
        self.plan = plan
        self.values = values
        self.check_finite = check_finite

    def run(
        self, inputs: Mapping[str, np.ndarray] | None = None, *, seed: int = 0
    ) -> ExecutionStats:
        """Execute every step once, in plan order; see the module docstring for
        ``inputs`` and ``outputs``.

        Raises
        ------
        ExecutionError
            A step failed (an op raised, a shape mismatch, NaN/Inf with ``check_finite``):
            the message says "while executing step N 'name' (node, stream) writing buffer X".
        UnknownBuffer
            ``inputs`` names a buffer that is not an input of the plan.
        """
        m = _Machine(self.plan, inputs, seed, self.values, self.check_finite)
        if self.values or any(s.kind is NodeKind.HostCallback for s in self.plan.steps):
            execute = m.execute
            for st in self.plan.steps:
                execute(st)
        outputs = dict(m.outputs) if m.computable else None
        return _stats(self.plan, range(len(self.plan.steps)), m.generated, outputs)


# ---------------------------------------------------------------------- step-through
@dataclass(frozen=True, slots=True)
class Stop:
    """Why :meth:`Simulator.run` returned: ``"end"``, ``"breakpoint"`` or ``"until"``."""

    reason: str
    step: int | None
    message: str


@dataclass(frozen=True, slots=True)
class SimState:
    """A snapshot of where a :class:`Simulator` is.

    ``positions[s]``: steps stream ``s`` has executed; ``next_steps[s]``: the plan index of
    its next step (``None`` when done); ``blocked``: streams whose next step is an event
    wait whose record has not run; ``fired_events``: events recorded so far;
    ``live_buffers``: buffers holding a value that is still needed (written, or external,
    and read by a step that has not run, or never read at all); ``executed``: step indices
    in execution order; ``failed_step``: the step that raised, if any.
    """

    positions: tuple[int, ...]
    next_steps: tuple[int | None, ...]
    blocked: tuple[int, ...]
    fired_events: frozenset[int]
    live_buffers: frozenset[str]
    executed: tuple[int, ...]
    failed_step: int | None
    finished: bool


class Simulator:
    """Step-through execution of a plan under an interleaving policy, with time travel.

    Parameters
    ----------
    plan
        The plan.
    inputs, seed
        Host inputs by buffer name; missing ones are generated (see the module docstring).
    policy
        Which ready stream moves next. A stream is ready unless its next step is an event
        wait whose record has not executed (DAG edges are not enforced, as on a GPU):

        - ``"in_order"``: the ready step earliest in plan order (reproduces plan order);
        - ``"round_robin"``: streams take turns;
        - ``"random"``: a seeded random ready stream;
        - ``"adversarial"``: delay producers as long as the events allow, to expose
          missing events. Among ready steps it prefers (1) a step with a DAG predecessor
          that has not run yet (only a missing event lets it be ready: running it now makes
          the race manifest), then (2) a step with no DAG successor on another stream
          (running it cannot unblock anyone, so producers for other streams are held back),
          then (3) the step latest in plan order. A consumer on stream B therefore runs
          before an unsynchronised producer on stream A whenever B can get there.
    values
        Compute buffer contents (``False``: positions and events only, much faster).
    check_finite
        Raise when a kernel produces NaN/Inf (default on here).
    max_undo_bytes
        Bytes of buffer contents the undo log keeps; older entries are dropped, and
        ``step_back`` past them raises.
    detect_races
        Record races between unordered steps as they execute (see :attr:`races`).
    verify
        Refuse a plan that fails :func:`~oxiwork.executor.plan.verify_plan` (checked once
        per plan), as every executor does. ``False`` steps through it anyway: the race
        lab's plans with a dropped event (:func:`~oxiwork.executor.races.drop_event`),
        whose races the detector then reports.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> plan = ExecutionPlan.build(quick_start())
    >>> sim = Simulator(plan, {"input": np.ones(1024, np.float32)})
    >>> sim.break_on_write("output")
    >>> sim.run().message.endswith("wrote 'output'")
    True
    >>> float(sim.buffer("output")[0])
    2.0
    """

    def __init__(
        self,
        plan: ExecutionPlan,
        inputs: Mapping[str, np.ndarray] | None = None,
        *,
        policy: str = "in_order",
        seed: int = 0,
        values: bool = True,
        check_finite: bool = True,
        max_undo_bytes: int = 256 * 2**20,
        detect_races: bool = True,
        verify: bool = True,
    ) -> None:
        if verify:
            _verified(plan)
        if not isinstance(policy, str) or policy not in _POLICY_RULES:
            raise InvalidArgument(
                f"unknown policy {policy!r}; choose one of {', '.join(map(repr, POLICIES))}"
            )
        if isinstance(max_undo_bytes, bool) or not isinstance(max_undo_bytes, int):
            raise InvalidArgument(f"max_undo_bytes must be an int, got {max_undo_bytes!r}")
        if max_undo_bytes < 0:
            raise InvalidArgument(f"max_undo_bytes must be >= 0, got {max_undo_bytes}")
        self.plan = plan
        self.policy = policy
        self.seed = seed
        self.max_undo_bytes = max_undo_bytes
        self._machine = _Machine(plan, inputs, seed, values, check_finite)
        steps = plan.steps
        nstreams = max([plan.num_streams, *(int(s.stream) + 1 for s in steps)])
        lanes: list[list[PlanStep]] = [[] for _ in range(nstreams)]
        for st in steps:
            lanes[int(st.stream)].append(st)
        for lane in lanes:
            lane.sort(key=lambda s: s.position)
        self._lanes = [[s.index for s in lane] for lane in lanes]
        self._stream_of = [int(s.stream) for s in steps]
        self._steps = steps
        self._recorded = {
            s.event for s in steps if s.kind is NodeKind.EventRecord and s.event is not None
        }
        # Adversarial priorities: does a step feed another stream (a DAG successor there)?
        self._feeds_other = [False] * len(steps)
        for st in steps:
            for d in st.depends_on:
                if steps[d].stream != st.stream:
                    self._feeds_other[d] = True
        self._race_index: dict[int, list[Any]] = {}
        self.static_races: list[Any] = []
        if detect_races:
            try:
                self.static_races = find_races(plan)
            except InvalidPlan as e:  # still worth stepping through: that is how to debug it
                warnings.warn(
                    f"race detection is off for this plan: {e}", GraphWarning, stacklevel=2
                )
            for r in self.static_races:
                self._race_index.setdefault(r.first, []).append(r)
                self._race_index.setdefault(r.second, []).append(r)
        self._node_breaks: set[int] = set()
        self._write_breaks: set[BufferId] = set()
        self._conditions: list[tuple[str, Callable[[Simulator], bool]]] = []
        self._reset_state()

    # ------------------------------------------------------------------ state
    def _reset_state(self) -> None:
        self._pos = [0] * len(self._lanes)
        self._fired: dict[int, int] = {}
        self._done = bytearray(len(self.plan.steps))
        self._executed: list[int] = []
        self._undo: deque[tuple[Any, ...]] = deque()
        self._undo_bytes = 0
        self._dropped = 0
        self._pending: int | None = None
        self._cursor = 0
        self._rr = -1
        self._chooser_state: Any = -1
        self.races: list[Any] = []
        self.error: ExecutionError | None = None
        self._failed: tuple[Any, ...] | None = None
        m = self._machine
        m.outputs.clear()
        m.writers_left = dict(m.writers_total)
        if m.values:
            assert m.arena is not None
            m.arena.clear()
            m.load_external()

    def reset(self) -> None:
        """Back to the start: zeroed device, inputs reloaded, no step executed, no error."""
        self._reset_state()

    @property
    def state(self) -> SimState:
        """Where every stream is, which events fired, which buffers are live."""
        steps = self.plan.steps
        nxt: list[int | None] = []
        blocked: list[int] = []
        for s, lane in enumerate(self._lanes):
            p = self._pos[s]
            nxt.append(lane[p] if p < len(lane) else None)
            if p < len(lane) and not self._ready(steps[lane[p]]):
                blocked.append(s)
        return SimState(
            positions=tuple(self._pos),
            next_steps=tuple(nxt),
            blocked=tuple(blocked),
            fired_events=frozenset(e for e, c in self._fired.items() if c),
            live_buffers=self._live(),
            executed=tuple(self._executed),
            failed_step=getattr(self.error, "step", None),
            finished=len(self._executed) == len(steps),
        )

    def _live(self) -> frozenset[str]:
        # Not liveness intervals: those are over one order, and the simulator runs any
        # interleaving the streams allow; this is the state after the steps done so far.
        done = self._done
        written: set[BufferId] = set()
        pending_read: set[BufferId] = set()
        ever_read: set[BufferId] = set()
        for st in self.plan.steps:
            for a in st.inputs:
                ever_read.add(a.buffer)
                if not done[st.index]:
                    pending_read.add(a.buffer)
            if done[st.index]:
                written.update(a.buffer for a in st.outputs)
        args = self._machine.args
        return frozenset(
            args[b].name
            for b in args
            if (b in written or args[b].external)
            and (b in pending_read or (b not in ever_read and b in written))
        )

    @property
    def history(self) -> tuple[PlanStep, ...]:
        """Executed steps, in execution order."""
        return tuple(self.plan.steps[i] for i in self._executed)

    @property
    def stats(self) -> ExecutionStats:
        """Counts of what has executed so far (``outputs`` as in :attr:`outputs`)."""
        return _stats(self.plan, self._executed, self._machine.generated, self.outputs)

    @property
    def outputs(self) -> dict[str, np.ndarray] | None:
        """Host outputs produced so far (module docstring), ``None`` without values."""
        m = self._machine
        return dict(m.outputs) if m.computable else None

    @property
    def generated_inputs(self) -> tuple[str, ...]:
        """Input names whose data was generated from the seed."""
        return self._machine.generated

    def buffer(self, name: str) -> np.ndarray:
        """A copy of buffer ``name``'s current contents (as its dtype and shape)."""
        m = self._machine
        bid = self._buffer_id(name)
        if not m.values:
            raise InvalidArgument(
                "this Simulator was made with values=False, so buffers have no contents; "
                "make one with values=True to inspect them"
            )
        return m.views[bid].copy()

    def _buffer_id(self, name: str) -> BufferId:
        for bid, a in self._machine.args.items():
            if a.name == name:
                return bid
        known = ", ".join(repr(a.name) for a in list(self._machine.args.values())[:12])
        hint = ""
        try:
            self.plan.original.buffer_by_name(name)
            hint = " (it exists in the original graph: fusion removed it)"
        except GraphError:
            pass
        raise UnknownBuffer(
            f"no step of the plan touches a buffer named {name!r}{hint}; buffers are: {known}"
        )

    # ------------------------------------------------------------------ scheduling
    def _ready(self, st: PlanStep) -> bool:
        return not (
            st.kind is NodeKind.EventWait
            and st.event in self._recorded
            and not self._fired.get(st.event)  # type: ignore[arg-type]
        )

    def _ready_streams(self) -> list[int]:
        steps = self.plan.steps
        out = []
        for s, lane in enumerate(self._lanes):
            p = self._pos[s]
            if p < len(lane) and self._ready(steps[lane[p]]):
                out.append(s)
        return out

    def _choose(self) -> int | None:
        if self._pending is not None:
            return self._pending
        if self.policy == "in_order":
            # Fast path: the earliest unexecuted step is the answer whenever it is at the
            # head of its stream and ready (always, for a plan whose order is valid).
            done, k, n = self._done, self._cursor, len(self._stream_of)
            while k < n and done[k]:
                k += 1
            self._cursor = k
            if k < n:
                s = self._stream_of[k]
                lane = self._lanes[s]
                p = self._pos[s]
                if p < len(lane) and lane[p] == k and self._ready(self.plan.steps[k]):
                    self._chooser_state = self._rr
                    self._pending = s
                    return s
        ready = self._ready_streams()
        if not ready:
            if len(self._executed) < len(self.plan.steps):
                raise self._deadlock()
            return None
        # the policy's own state before it chose, so step_back can make it choose again
        self._chooser_state = self._rr
        self._pending = _POLICY_RULES[self.policy](self, ready)
        return self._pending

    def _deadlock(self) -> ExecutionError:
        steps = self.plan.steps
        parts = []
        for s, lane in enumerate(self._lanes):
            p = self._pos[s]
            if p < len(lane):
                st = steps[lane[p]]
                parts.append(
                    f"stream {s} waits at step {st.index} {st.name!r} for event {st.event}"
                )
        return ExecutionError(
            "deadlock: no stream can move (" + "; ".join(parts) + "); each of these events "
            "is recorded by a step that cannot run first: check the plan's events"
        )

    # ------------------------------------------------------------------ stepping
    def step(self) -> PlanStep | None:
        """Execute the next step the policy chooses; return it (``None`` at the end).

        Raises :class:`~oxiwork.error.ExecutionError` if the step fails; the simulator
        stays at that step (``state.failed_step``, :attr:`error`, buffers as the step left
        them) until :meth:`step_back` or :meth:`reset`.
        """
        if self.error is not None:
            raise ExecutionError(
                f"the simulator stopped at an error; call step_back() or reset() first "
                f"({self.error})"
            )
        s = self._choose()
        if s is None:
            return None
        return self._execute(s)

    def _execute(self, s: int) -> PlanStep:
        m = self._machine
        idx = self._lanes[s][self._pos[s]]
        st = self._steps[idx]
        self._pending = None
        saved: list[tuple[np.ndarray, np.ndarray]] | None = None
        nbytes = 0
        if m.values:
            if st.outputs:
                saved = [(m.raws[a.buffer], m.raws[a.buffer].copy()) for a in st.outputs]
                nbytes = sum(a.size_bytes for a in st.outputs)
            changed = self._run_step(m, st, [st, s, saved, nbytes, None, self._chooser_state])
        elif st.kind is NodeKind.HostCallback:
            changed = self._run_step(m, st, [st, s, None, 0, None, self._chooser_state])
        else:
            changed = _NO_CHANGES
        self._pos[s] += 1
        self._done[idx] = 1
        self._executed.append(idx)
        if st.kind is NodeKind.EventRecord:
            self._fired[st.event] = self._fired.get(st.event, 0) + 1  # type: ignore[index]
        races = self._race_index.get(idx)
        nraces = len(self.races)
        if races:
            for r in races:
                other = r.first if r.second == idx else r.second
                if self._done[other]:
                    self.races.append(replace(r, observed=(other, idx)))
        self._undo.append((st, s, saved, nbytes, changed, self._chooser_state, nraces))
        if nbytes:
            self._undo_bytes += nbytes
            if self._undo_bytes > self.max_undo_bytes:
                self._trim_undo()
        return st

    def _run_step(self, m: _Machine, st: PlanStep, entry: list[Any]) -> list[tuple[str, Any]]:
        try:
            return m.execute(st)
        except ExecutionError as e:
            entry.append(len(self.races))
            self.error = e
            self._failed = tuple(entry)
            raise

    def _trim_undo(self) -> None:
        while self._undo_bytes > self.max_undo_bytes and self._undo:
            old = self._undo.popleft()
            self._undo_bytes -= old[3]
            self._dropped += 1

    def step_back(self) -> PlanStep:
        """Undo the last executed step (or the failed one); return it.

        Restores the bytes it wrote, the stream positions, fired events, outputs and
        recorded races exactly. Raises :class:`~oxiwork.error.InvalidArgument` when nothing
        executed, or when the undo log dropped the entry (raise ``max_undo_bytes``).
        """
        if self._failed is not None:
            st, _s, saved, *_ = self._failed
            self._restore(saved)
            self._failed = None
            self.error = None
            return st
        if not self._undo:
            if self._executed:
                raise InvalidArgument(
                    f"cannot step back past step {self._executed[-1]}: the undo log keeps at "
                    f"most max_undo_bytes={self.max_undo_bytes} bytes of buffer contents and "
                    f"dropped the {self._dropped} oldest step(s); raise max_undo_bytes, or "
                    "reset() and run(until=...) to get there"
                )
            raise InvalidArgument("nothing to step back: no step has executed yet")
        st, s, saved, nbytes, changed, policy_state, nraces = self._undo.pop()
        self._undo_bytes -= nbytes
        self._restore(saved)
        if self._machine.values:
            self._machine.uncapture(st, changed)
        self._pos[s] -= 1
        self._done[st.index] = 0
        self._cursor = min(self._cursor, st.index)
        self._executed.pop()
        if st.kind is NodeKind.EventRecord and st.event is not None:
            self._fired[st.event] -= 1
        del self.races[nraces:]
        self._rr = policy_state
        self._pending = None
        return st

    @staticmethod
    def _restore(saved: list[tuple[np.ndarray, np.ndarray]] | None) -> None:
        for raw, old in reversed(saved or ()):
            raw[:] = old

    # ------------------------------------------------------------------ breakpoints
    def break_on_node(self, node: int | str) -> None:
        """Stop :meth:`run` *before* a step running ``node`` (a node id or name, of the
        plan's graph or of the original graph: a fused kernel matches its parts)."""
        steps = self.plan.steps
        if isinstance(node, str):
            ids = {
                n.id
                for g in (self.plan.graph, self.plan.original)
                for n in g.nodes
                if n.name == node
            }
        elif isinstance(node, int) and not isinstance(node, bool):
            ids = {NodeId(node)}
        else:
            raise InvalidArgument(f"break_on_node takes a node id or name, got {node!r}")
        hits = {st.index for st in steps if st.node in ids or ids & set(st.fused_nodes)}
        if not hits:
            raise UnknownNode(
                f"no step of the plan runs node {node!r}; pass a node id or name of the "
                "plan's graph or the original graph"
            )
        self._node_breaks |= hits

    def break_on_write(self, buffer: str) -> None:
        """Stop :meth:`run` right after a step writes buffer ``buffer`` (by name)."""
        self._write_breaks.add(self._buffer_id(buffer))

    def break_on_condition(self, fn: Callable[[Simulator], bool], label: str = "") -> None:
        """Stop :meth:`run` after any step once ``fn(sim)`` is true."""
        if not callable(fn):
            raise InvalidArgument("break_on_condition needs a callable fn(sim) -> bool")
        self._conditions.append((label or getattr(fn, "__name__", "condition"), fn))

    def break_on_nan(self) -> None:
        """Stop after a step that leaves NaN in a buffer it wrote (with check_finite=False
        the run would otherwise go on)."""

        def nan_written(sim: Simulator) -> bool:
            m = sim._machine
            if not m.values or not sim._executed:
                return False
            st = sim.plan.steps[sim._executed[-1]]
            return any(
                m.views[a.buffer].dtype.name in FLOAT_DTYPES
                and bool(np.isnan(m.views[a.buffer]).any())
                for a in st.outputs
            )

        self._conditions.append(("NaN written", nan_written))

    def clear_breakpoints(self) -> None:
        """Remove every breakpoint."""
        self._node_breaks.clear()
        self._write_breaks.clear()
        self._conditions.clear()

    def run(self, until: int | None = None) -> Stop:
        """Step until the end, a breakpoint, or until step index ``until`` has executed.

        A node breakpoint stops before its step, except for the first step of this call
        (so ``run()`` again continues past it).
        """
        steps = self.plan.steps
        if until is not None and (
            isinstance(until, bool) or not isinstance(until, int) or not 0 <= until < len(steps)
        ):
            raise InvalidArgument(
                f"until={until} is not a step index of this plan (0..{len(steps) - 1})"
            )
        first = True
        has_breaks = bool(self._node_breaks or self._write_breaks or self._conditions)
        while True:
            if until is not None and self._done[until]:
                return Stop("until", until, f"step {until} {steps[until].name!r} executed")
            if self.error is not None:
                self.step()  # raises, with the hint
            s = self._choose()
            if s is None:
                return Stop("end", None, "every step executed")
            if has_breaks:
                idx = self._lanes[s][self._pos[s]]
                if idx in self._node_breaks and not first:
                    return Stop(
                        "breakpoint", idx, f"before step {idx} {steps[idx].name!r} (break_on_node)"
                    )
            st = self._execute(s)
            first = False
            if has_breaks:
                stop = self._after(st)
                if stop is not None:
                    return stop

    def _after(self, st: PlanStep) -> Stop | None:
        for a in st.outputs:
            if a.buffer in self._write_breaks:
                return Stop("breakpoint", st.index, f"step {st.index} {st.name!r} wrote {a.name!r}")
        for label, fn in self._conditions:
            if fn(self):
                return Stop("breakpoint", st.index, f"after step {st.index} {st.name!r}: {label}")
        return None


# ---------------------------------------------------------------------- policies
def _in_order(sim: Simulator, ready: list[int]) -> int:
    return min(ready, key=lambda s: sim._lanes[s][sim._pos[s]])


def _round_robin(sim: Simulator, ready: list[int]) -> int:
    n = len(sim._lanes)
    for k in range(1, n + 1):
        s = (sim._rr + k) % n
        if s in ready:
            sim._rr = s
            return s
    raise AssertionError("ready is not empty")


_M64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators",
    OOPSLA 2014): a stateless hash, so the k-th choice depends only on (seed, k) and
    stepping back needs no generator state."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _random(sim: Simulator, ready: list[int]) -> int:
    if len(ready) == 1:
        return ready[0]
    h = _splitmix64((sim.seed * 0x2545F4914F6CDD1D + len(sim._executed)) & _M64)
    return ready[h % len(ready)]


def _adversarial(sim: Simulator, ready: list[int]) -> int:
    steps, done, feeds = sim.plan.steps, sim._done, sim._feeds_other

    def key(s: int) -> tuple[bool, bool, int]:
        i = sim._lanes[s][sim._pos[s]]
        early = any(not done[d] for d in steps[i].depends_on)
        return (early, not feeds[i], i)

    return max(ready, key=key)


_POLICY_RULES: dict[str, Callable[[Simulator, list[int]], int]] = {
    "in_order": _in_order,
    "round_robin": _round_robin,
    "random": _random,
    "adversarial": _adversarial,
}
