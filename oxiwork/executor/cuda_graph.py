"""Run an ExecutionPlan as a real CUDA graph (``cuda.bindings.driver``), built once and
replayed.

:class:`CudaGraphExecutor` lowers the plan (:func:`~oxiwork.executor.lowering.lower`),
compiles every kernel in one NVRTC unit, allocates the arena once (``cuMemAlloc`` of
``plan.pool_bytes``), pinned staging memory for host copies (``cuMemAllocHost``: host
pointers are baked into memcpy nodes, so they must never move), builds the ``CUgraph``
node by node and instantiates it once. :meth:`~CudaGraphExecutor.run` copies inputs into
the pinned buffers, launches, synchronises and returns the downloaded buffers and CUDA
event timings; new inputs need no re-instantiation. Kernel parameters are patched in
place with ``cuGraphExecKernelNodeSetParams``; a whole new plan is applied with
``cuGraphExecUpdate`` when the topology is unchanged, else the graph is re-instantiated.

Nothing touches the driver before the constructor, so this module imports on machines
without a GPU; constructing an executor there raises
:class:`~oxiwork.error.BackendUnavailable` saying what is missing. Every resource is
released in a safe order by :meth:`~CudaGraphExecutor.close` (also after a failure half-way
through construction); the executor is a context manager.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> import numpy as np
>>> plan = ExecutionPlan.build(quick_start())
>>> with CudaGraphExecutor(plan) as ex:  # doctest: +SKIP
...     outputs, timings = ex.run({"input": np.linspace(-1, 1, 1024, dtype=np.float32)})
>>> float(outputs["output"].max())  # doctest: +SKIP
2.0

References
----------
NVIDIA, "CUDA C++ Programming Guide", "CUDA Graphs" (build once, instantiate, replay;
updating instantiated graphs). The structure (build and instantiate in the constructor,
patch only changed parameters, one checked call helper, teardown safe after a partial
build) follows tinygrad's ``runtime/graph/cuda.py``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from oxiwork.error import ExecutionError, InvalidArgument, IterationLimit
from oxiwork.executor.lowering import (
    BodyDesc,
    DescNode,
    GraphDesc,
    HostBuffer,
    KernelArg,
    ModuleDesc,
    PackedArgs,
    Ref,
    lower,
    pack_args,
)
from oxiwork.executor.nvrtc import KernelCache, ModuleSource, compile_cuda
from oxiwork.executor.plan import ExecutionPlan, check_steps, raise_failed_checks
from oxiwork.executor.update import UpdateReport, check_update
from oxiwork.node import KernelConfig
from oxiwork.reference import generated_input

if TYPE_CHECKING:
    from oxiwork.executor.driver import Session

__all__ = ["CudaGraphExecutor", "GpuTimings"]

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_LAUNCH_FIELDS = ("grid", "block", "smem")


@dataclass(frozen=True, slots=True)
class GpuTimings:
    """Timings of one run: ``gpu_ms`` between CUDA events around the launch, and host
    wall-clock seconds for staging inputs, launching, waiting and reading outputs."""

    gpu_ms: float
    wall_s: float
    stage_s: float
    launch_s: float
    sync_s: float
    read_s: float


class DeviceMemory:
    """The device and pinned host memory of one lowered plan, and pointer resolution."""

    def __init__(self, session: Session, desc: GraphDesc) -> None:
        self.session = session
        self.arena = session.alloc(desc.arena_bytes) if desc.arena_bytes else 0
        self.arena_bytes = desc.arena_bytes
        self.buffers = {b.name: session.alloc(b.nbytes) for b in desc.device_buffers}
        self.buffer_info = {b.name: b for b in desc.device_buffers}
        self.scratch = session.alloc(desc.scratch_bytes) if desc.scratch_bytes else 0
        self.host = session.alloc_host(desc.host_bytes) if desc.host_bytes else 0
        self.host_info = {h.name: h for h in desc.host_buffers}
        # One 4-byte iteration counter per WHILE node, read back after every run.
        self.loops = session.alloc(4 * len(desc.loops)) if desc.loops else 0
        self.loop_info = desc.loops
        # Filled while a graph is built: addresses memory alloc nodes returned, by buffer
        # name, and conditional handles, by index.
        self.graph_memory: dict[str, int] = {}
        self.handles: dict[int, int] = {}
        self.layout = _layout(desc)

    def resolve(self, ref: Ref) -> int:
        """The address a reference stands for."""
        kind, where = ref
        if kind == "arena":
            if not self.arena or not 0 <= where < self.arena_bytes:
                raise InvalidArgument(
                    f"arena offset {where} is outside the {self.arena_bytes}-byte arena; "
                    "rebuild the plan (the memory plan and the steps disagree)"
                )
            return self.arena + int(where)
        if kind == "buffer":
            return self.buffers[where]
        if kind == "view":  # a view of a buffer of its own: (the base's name, byte offset)
            return self.buffers[where[0]] + int(where[1])
        if kind == "host":
            return self.host + self.host_info[where].offset
        if kind == "scratch":
            return self.scratch + int(where)
        if kind == "loop":
            return self.loops + 4 * int(where)
        if kind == "graph":
            if where not in self.graph_memory:
                raise InvalidArgument(
                    f"graph-owned buffer {where!r} is used before its memory alloc node was "
                    "added; rebuild the plan (its alloc node must come first)"
                )
            return self.graph_memory[where]
        if kind == "graph_view":  # a view of a graph-owned buffer: (its name, byte offset)
            return self.resolve(("graph", where[0])) + int(where[1])
        if kind == "handle":
            return self.handles[int(where)]
        raise InvalidArgument(f"unknown memory reference {ref!r}")

    def loop_counts(self) -> list[int]:
        """The WHILE nodes' iteration counters after a run (``limit + 1``: the bound hit)."""
        if not self.loops:
            return []
        raw = np.zeros(len(self.loop_info), np.uint32)
        self.session.copy_d2h(raw.ctypes.data, self.loops, raw.nbytes)
        return [int(x) for x in raw]

    def host_bytes(self, hb: HostBuffer) -> np.ndarray:
        """The bytes of a pinned staging region, as a writable ``uint8`` array."""
        raw = (ctypes.c_ubyte * hb.nbytes).from_address(self.host + hb.offset)
        return np.ctypeslib.as_array(raw)

    def host_view(self, hb: HostBuffer) -> np.ndarray:
        """A numpy view of a pinned staging region (typed and shaped like its buffer)."""
        flat = self.host_bytes(hb)
        dtype = np.dtype(hb.dtype)
        view = flat[: hb.nbytes - hb.nbytes % dtype.itemsize].view(dtype)
        return view.reshape(hb.shape) if int(np.prod(hb.shape)) == view.size else view


def _layout(desc: GraphDesc) -> tuple[Any, ...]:
    """What a memory allocation depends on: equal layouts can share one DeviceMemory."""
    return (
        desc.arena_bytes,
        desc.scratch_bytes,
        desc.host_buffers,
        desc.device_buffers,
        desc.loops,
    )


def load_functions(
    session: Session, desc: GraphDesc, cache: KernelCache | None, skip: frozenset[str] = frozenset()
) -> dict[tuple[str, str], Any]:
    """Compile (or fetch from ``cache``) and load every module of ``desc``.

    Returns ``{(module key, function name): CUfunction}``; modules whose key is in
    ``skip`` (already loaded) are left out. Modules compile in parallel
    threads (NVRTC is thread-safe and most of a compile runs outside the GIL); loading
    into the context stays on this thread.
    """
    from concurrent.futures import ThreadPoolExecutor

    smem = {n.function_name: n.smem for n in desc.nodes if n.kind == "kernel"}

    def build(m: ModuleDesc) -> Any:
        unit = ModuleSource(m.source, m.function_names, m.starts)
        extra = ("--relocatable-device-code=true",) if m.link_devrt else ()
        return compile_cuda(unit, arch=m.arch, exact=desc.exact, cache=cache, extra_options=extra)

    todo = list({m.key: m for m in desc.modules if m.key not in skip}.values())
    workers = max(1, min(len(todo), os.cpu_count() or 1))
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            compiled = list(pool.map(build, todo))
    else:
        compiled = [build(m) for m in todo]
    functions: dict[tuple[str, str], Any] = {}
    for m, c in zip(todo, compiled, strict=True):
        module = (
            session.load_linked_module(c.cubin) if m.link_devrt else session.load_module(c.cubin)
        )
        for name in m.function_names:
            functions[(m.key, name)] = session.function(module, name, smem.get(name, 0))
    return functions


def kernel_function(functions: Mapping[tuple[str, str], Any], desc: GraphDesc, n: DescNode) -> Any:
    """The loaded CUfunction of kernel node ``n``."""
    assert n.module is not None and n.function_name is not None
    return functions[(desc.modules[n.module].key, n.function_name)]


def input_targets(desc: GraphDesc) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """Buffers that take host data: name -> (dtype, shape, bytes). Uploaded buffers and
    external device buffers both qualify."""
    targets: dict[str, tuple[str, tuple[int, ...], int]] = {}
    for h in desc.host_buffers:
        if h.direction == "in" and h.buffer is not None:
            targets[h.buffer] = (h.dtype, h.shape, h.nbytes)
    for b in desc.device_buffers:
        if b.external:
            targets.setdefault(b.name, (b.dtype, b.shape, b.nbytes))
    return targets


def prepare_inputs(
    plan: ExecutionPlan, desc: GraphDesc, inputs: Mapping[str, Any], seed: int = 0
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """Every input as flat bytes, and the names that were generated.

    ``inputs`` maps buffer names to arrays (cast to the buffer's dtype; the element count
    must match). Missing inputs are generated exactly as the simulator and the reference
    evaluator generate them (:func:`oxiwork.reference.generated_input` with ``seed``), so
    a GPU run and a simulator run on the same ``inputs`` and ``seed`` see the same data.
    """
    targets = input_targets(desc)
    unknown = sorted(set(inputs) - set(targets))
    if unknown:
        known = ", ".join(sorted(targets)) or "none"
        raise InvalidArgument(
            f"input {unknown[0]!r} is not an uploaded or external buffer of this plan; "
            f"inputs it takes: {known}"
        )
    out: dict[str, np.ndarray] = {}
    generated: list[str] = []
    for name, (dtype, shape, _) in targets.items():
        if name in inputs:
            value = inputs[name]
        else:
            value = generated_input(plan.graph.buffer_by_name(name), seed)
            generated.append(name)
        arr = np.ascontiguousarray(np.asarray(value).astype(dtype, copy=False)).reshape(-1)
        want = int(np.prod(shape))
        if arr.size != want:
            raise InvalidArgument(
                f"input {name!r} has {arr.size} elements but the buffer holds {want} "
                f"({dtype}, shape {shape}); pass an array of that size"
            )
        out[name] = arr.view(np.uint8)
    return out, tuple(generated)


def stage_inputs(
    session: Session, memory: DeviceMemory, desc: GraphDesc, data: Mapping[str, np.ndarray],
    stream: Any,
) -> None:  # fmt: skip
    """Put input bytes where the graph reads them: pinned regions for uploads (copied by
    the graph's own memcpy nodes) and device buffers directly (an async copy on
    ``stream``, ordered before the launch; ``data`` must stay alive until it completes)."""
    for h in desc.host_buffers:
        if h.direction == "in":
            region = memory.host_bytes(h)
            value = data.get(h.buffer) if h.buffer is not None else None
            if value is None:
                region[...] = 0
            else:
                region[...] = value[: h.nbytes]
    for b in desc.device_buffers:
        value = data.get(b.name)
        if value is not None:
            session.copy_async("h2d", memory.buffers[b.name], value.ctypes.data, b.nbytes, stream)


def read_outputs(memory: DeviceMemory, desc: GraphDesc) -> dict[str, np.ndarray]:
    """Copies of the downloaded buffers' final values, by buffer name."""
    return {buf: memory.host_view(memory.host_info[region]).copy() for buf, region in desc.outputs}


def host_callbacks(
    plan: ExecutionPlan, desc: GraphDesc, errors: list[BaseException]
) -> dict[int, Any]:
    """C function pointers for host nodes, by description index.

    The wrappers must outlive the graph (the caller keeps the dict). An exception in a
    callback cannot cross the C boundary: it is stored in ``errors`` and re-raised after
    synchronisation.
    """
    wrappers: dict[int, Any] = {}
    for n in desc.nodes:
        if n.kind != "host":
            continue
        fn = plan.graph.node(n.node).fn if n.node >= 0 else None

        def call(_user_data: Any, fn: Any = fn) -> None:
            if fn is None:
                return
            try:
                fn()
            except BaseException as e:  # must not unwind into the driver
                errors.append(e)

        wrappers[n.index] = _HOST_FN(call)
    return wrappers


def pack_node(node: DescNode, memory: DeviceMemory) -> PackedArgs:
    """Packed kernel arguments of a kernel node."""
    return pack_args(node.args, memory.resolve)


_E = TypeVar("_E", bound="_PlanExecutor")


class _PlanExecutor:
    """What both GPU executors share: the lifecycle and the run template over a lowered
    plan. Subclasses say how the plan's work is put on the GPU.

    The constructor opens a :class:`~oxiwork.executor.driver.Session`, lowers the plan
    with the subclass's ``_EVENTS`` mode, loads every kernel, allocates the memory, asks
    :meth:`_create_streams` for the streams (and any events of its own), creates the two
    timing events and the host callbacks, then calls :meth:`_prepare` (build a graph,
    prepare a program). Any failure closes what was made so far and re-raises. Subclasses
    set their own attributes before calling ``super().__init__`` so that ``close`` works
    after a failure at any call.
    """

    _EVENTS: str  # lower()'s ``events`` mode: how the plan's ordering reaches the driver

    def __init__(
        self,
        plan: ExecutionPlan,
        *,
        device: int,
        exact: bool,
        arch: str | None,
        cache: KernelCache | None,
        driver: Any,
        opaque: str,
        capture: bool,
    ) -> None:
        from oxiwork.executor.driver import Session

        self.plan = plan
        self._session: Session | None = None
        self._packed: dict[int, PackedArgs] = {}
        self._callback_errors: list[BaseException] = []
        self._callbacks: dict[int, Any] = {}
        self.generated_inputs: tuple[str, ...] = ()
        if not isinstance(plan, ExecutionPlan):
            raise InvalidArgument(
                f"expected an ExecutionPlan, got {type(plan).__name__}; build one with "
                "ExecutionPlan.build(graph)"
            )
        plan.verify()  # refuse a plan that is not safe to run (checked once per plan)
        self._checks = check_steps(plan)  # read back after every run
        # Host seconds of each set-up phase, in order (CudaGraphExecutor's docstring).
        self.setup_s: dict[str, float] = {}
        try:
            self._session = s = Session(device, driver)
            self.arch = arch or s.device.arch
            with self._phase("lower_s"):
                self.desc = lower(
                    plan, arch=self.arch, exact=exact, events=self._EVENTS, opaque=opaque,
                    capture=capture,
                )  # fmt: skip
            with self._phase("load_s"):
                self._functions = load_functions(s, self.desc, cache)
            with self._phase("alloc_s"):
                self._memory = DeviceMemory(s, self.desc)
            # The main stream: inputs are staged, timed and waited for on it.
            self._stream = self._create_streams(s)
            self._start = s.event()
            self._stop = s.event()
            self._callbacks = host_callbacks(plan, self.desc, self._callback_errors)
            self._prepare(s)
        except BaseException:
            self._close_quietly()
            raise

    def _phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Add the host seconds of the ``with`` body to ``setup_s[name]``."""
        return _timed(self.setup_s, name)

    # ------------------------------------------------------------------ subclass hooks
    def _create_streams(self, s: Session) -> Any:
        """Create the streams (and any events besides the timing pair); return the main
        stream."""
        raise NotImplementedError

    def _prepare(self, s: Session) -> None:
        """Make the plan launchable (after memory, events and host callbacks exist)."""
        raise NotImplementedError

    def _launch(self, s: Session) -> None:
        """Put one replay of every step on the GPU after the work on the main stream."""
        raise NotImplementedError

    def _require(self) -> Session:
        if self._session is None or self._session.closed:
            raise ExecutionError(f"this {type(self).__name__} is closed; create a new one")
        return self._session

    # ------------------------------------------------------------------ running
    def run(
        self, inputs: Mapping[str, Any] | None = None, *, seed: int = 0
    ) -> tuple[dict[str, np.ndarray], GpuTimings]:
        """Run every step once on ``inputs`` (buffer name -> array).

        Returns the outputs (by buffer name: every downloaded buffer, and every buffer
        written but never read, as the simulator's ``outputs``) and :class:`GpuTimings`.
        Inputs not given are generated from ``seed`` as the simulator does. Raises
        :class:`~oxiwork.error.CheckFailed` after the run where a run-time check of the plan
        (a kernel of an ``OpDef.check`` op) is false; ``launch`` and ``timed_launches``, for
        benchmarks, read nothing back and so check nothing.
        """
        s = self._require()
        t0 = time.perf_counter()
        data, self.generated_inputs = prepare_inputs(self.plan, self.desc, inputs or {}, seed)
        s.synchronize(self._stream)  # an earlier launch may still read the pinned inputs
        stage_inputs(s, self._memory, self.desc, data, self._stream)
        if self._memory.loops:  # a WHILE in a body that does not run leaves its word at 0
            s.memset_async(self._memory.loops, 0, 4, len(self.desc.loops), self._stream)
        t1 = time.perf_counter()
        s.record(self._start, self._stream)
        self._launch(s)
        s.record(self._stop, self._stream)
        t2 = time.perf_counter()
        s.synchronize(self._stream)
        t3 = time.perf_counter()
        if self._callback_errors:
            err = self._callback_errors[0]
            self._callback_errors.clear()
            raise ExecutionError(f"a host callback raised {err!r}") from err
        for (name, limit), count in zip(self.desc.loops, self._memory.loop_counts(), strict=True):
            if count > limit:
                raise IterationLimit(
                    f"WHILE node {name!r} ran its max_iterations={limit} iterations on the GPU "
                    "and its condition was still non-zero: its body never sets it to 0 (the "
                    "set-condition kernel ended the loop); fix the body, or raise "
                    "max_iterations if the loop really needs more"
                )
        outputs = read_outputs(self._memory, self.desc)
        raise_failed_checks(self._checks, outputs)  # (the plan's torch._check conditions)
        t4 = time.perf_counter()
        gpu_ms = s.elapsed_ms(self._start, self._stop)
        return outputs, GpuTimings(gpu_ms, t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3)

    def synchronize(self) -> None:
        """Wait for all work put on the GPU so far."""
        self._require().synchronize(self._stream)

    def timed_launches(self, reps: int) -> float:
        """GPU milliseconds per replay over ``reps`` back-to-back replays (CUDA events
        around the whole batch; inputs are not staged)."""
        s = self._require()
        s.record(self._start, self._stream)
        for _ in range(reps):
            self._launch(s)
        s.record(self._stop, self._stream)
        s.synchronize(self._stream)
        return s.elapsed_ms(self._start, self._stop) / max(1, reps)

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` device memory in bytes."""
        return self._require().memory_info()

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Release every driver resource and the context. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            session.close()
        self._packed.clear()
        self._callbacks = {}

    def _close_quietly(self) -> None:
        # The construction error is the one worth reporting.
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A last resort only; close() or a with-block is the supported way.
        if getattr(self, "_session", None) is not None:
            self._close_quietly()


class CudaGraphExecutor(_PlanExecutor):
    """A plan as one instantiated CUDA graph: build once, replay with new inputs.

    Parameters
    ----------
    plan : ExecutionPlan
    device : int
        CUDA device ordinal.
    exact : bool
        Compile with ``--fmad=false`` so results match numpy (the simulator).
    arch : str, optional
        NVRTC target; default: the device's (``sm_90`` on an H100/H200).
    cache : KernelCache, optional
        Cubin cache (default: the process-wide in-memory cache).
    driver : module, optional
        A ``cuda.bindings.driver``-like module; tests pass a fake.
    opaque : {"noop", "error"}
        What to do with kernels without an op (see :func:`~oxiwork.executor.lowering.lower`).
    capture : bool
        Download never-read buffers as the simulator reports them (see ``lower``); turn
        off for benchmarks, where those copies would be measured too.

    Attributes
    ----------
    setup_s : dict[str, float]
        Host seconds of each set-up phase, in order: ``lower_s`` (the plan to a
        ``GraphDesc``), ``load_s`` (NVRTC compiles, or cache hits, and module loads),
        ``alloc_s`` (device and pinned memory), ``build_s`` (the graph's nodes added),
        ``instantiate_s`` (``cuGraphInstantiate``), ``upload_s`` (``cuGraphUpload`` and
        waiting for it). :class:`~oxiwork.executor.streams.StreamExecutor` has the first
        three.
    last_update_s : dict[str, float]
        Host seconds of the last :meth:`update`: ``lower_s`` (lowering the new plan,
        loading new kernels, memory and callbacks), ``build_s`` (the new template graph),
        ``exec_update_s`` (``cuGraphExecUpdate``; about 0 when CUDA's rules refuse the
        update before the driver is asked) and, after a re-instantiation,
        ``instantiate_s``.
    """

    _EVENTS = "edges"  # one graph edge per plan dependency

    def __init__(
        self,
        plan: ExecutionPlan,
        *,
        device: int = 0,
        exact: bool = True,
        arch: str | None = None,
        cache: KernelCache | None = None,
        driver: Any = None,
        opaque: str = "noop",
        capture: bool = True,
    ) -> None:
        self.exact = exact
        self._cache = cache
        self._opaque = opaque
        self._capture = capture
        self._exec: Any = None
        # The graph the executable was instantiated from (its node handles are the ones
        # cuGraphExecKernelNodeSetParams accepts) and the latest template graph (after an
        # in-place cuGraphExecUpdate the two differ; to_dot shows the latest).
        self._exec_graph: Any = None
        self._exec_handles: list[Any] = []
        self._graph: Any = None
        self._handles: list[Any] = []
        self._building: GraphDesc | None = None
        self.instantiations = 0
        # Why the last update() updated in place or re-instantiated (None before one), and
        # the host seconds of its phases (see the class docstring).
        self.last_update: UpdateReport | None = None
        self.last_update_s: dict[str, float] = {}
        super().__init__(
            plan, device=device, exact=exact, arch=arch, cache=cache, driver=driver,
            opaque=opaque, capture=capture,
        )  # fmt: skip

    def _create_streams(self, s: Session) -> Any:
        return s.stream()

    def _prepare(self, s: Session) -> None:
        with self._phase("build_s"):
            self._graph, self._handles = self._build_graph(self.desc, self._memory)
        with self._phase("instantiate_s"):
            self._exec = s.instantiate(self._graph)
        self._exec_graph, self._exec_handles = self._graph, self._handles
        self.instantiations += 1
        with self._phase("upload_s"):
            s.upload(self._exec, self._stream)
            s.synchronize(self._stream)

    # ------------------------------------------------------------------ building
    def _build_graph(self, desc: GraphDesc, memory: DeviceMemory) -> tuple[Any, list[Any]]:
        s = self._require()
        self._building = desc  # the description whose modules the kernel rules look up
        graph = s.create_graph()
        packed: dict[int, PackedArgs] = {}
        self._body_packed: list[PackedArgs] = []
        memory.graph_memory.clear()
        memory.handles.clear()
        handles = self._add_nodes(graph, desc.nodes, desc.predecessors(), memory, packed)
        self._packed = packed
        return graph, handles

    def _add_nodes(
        self, graph: Any, nodes: tuple[DescNode, ...], preds: list[list[int]],
        memory: DeviceMemory, packed: dict[int, PackedArgs], entry: list[Any] | None = None,
    ) -> list[Any]:  # fmt: skip
        """Add ``nodes`` (a topological order, ``preds`` by index) to ``graph``; nodes
        without predecessors depend on ``entry`` (nothing by default)."""
        handles: list[Any] = []
        for n in nodes:
            deps = [handles[p] for p in preds[n.index]] or list(entry or ())
            handles.append(self._add_node(graph, deps, n, memory, packed))
        return handles

    def _add_body(
        self, graph: Any, body: BodyDesc, memory: DeviceMemory, entry: list[Any] | None = None
    ) -> list[Any]:
        """Fill a body graph (of a child graph or conditional node), or add a body to
        ``graph`` itself after ``entry`` (an inlined child graph); returns the handles."""
        packed: dict[int, PackedArgs] = {}
        handles = self._add_nodes(graph, body.nodes, body.predecessors(), memory, packed, entry)
        self._body_packed.extend(packed.values())  # alive as long as the graph
        return handles

    def _add_node(
        self, graph: Any, deps: list[Any], n: DescNode, memory: DeviceMemory,
        packed: dict[int, PackedArgs],
    ) -> Any:  # fmt: skip
        rule = _NODE_RULES.get(n.kind, _add_empty)
        return rule(self, self._require(), graph, deps, n, memory, packed)

    # ------------------------------------------------------------------ running
    def _launch(self, s: Session) -> None:
        s.launch_graph(self._exec, self._stream)

    def launch(self, times: int = 1) -> None:
        """Launch the graph ``times`` times without staging or waiting (for benchmarks)."""
        s = self._require()
        for _ in range(times):
            self._launch(s)

    def read_buffer(self, name: str) -> np.ndarray:
        """The current device contents of buffer ``name`` (synchronous copy to the host).

        Buffers that share arena bytes with later ones may have been overwritten; the
        downloaded buffers returned by :meth:`run` are always safe.
        """
        s = self._require()
        arg = _buffer_arg(self.plan, name)
        if arg.offset is not None and not arg.external:
            src = self._memory.resolve(("arena", arg.offset))
        else:
            src = self._memory.buffers[name]
        out = np.empty(arg.size_bytes // np.dtype(arg.dtype).itemsize, dtype=arg.dtype)
        s.synchronize(self._stream)
        s.copy_d2h(out.ctypes.data, src, arg.size_bytes)
        return out.reshape(arg.shape)

    # ------------------------------------------------------------------ updating
    def update_params(self, node: Any, **params: Any) -> DescNode:
        """Change one kernel's scalar arguments (by name, e.g. ``alpha=3.0``) or its
        ``grid``/``block``/``smem`` in the instantiated graph, without re-instantiating.

        ``node`` is the plan's NodeId, the node's name or a description index. Returns
        the updated description node.
        """
        s = self._require()
        n = self.desc.node_for(node)
        if n.kind != "kernel":
            raise InvalidArgument(f"{n.name!r} is a {n.kind} node; only kernels have parameters")
        scalars = {a.name: a for a in n.args if a.ctype != "ptr"}
        unknown = sorted(set(params) - set(scalars) - set(_LAUNCH_FIELDS))
        if unknown:
            known = ", ".join([*scalars, *_LAUNCH_FIELDS])
            raise InvalidArgument(
                f"kernel {n.name!r} has no parameter {', '.join(map(repr, unknown))}; "
                f"it has: {known}"
            )
        args = tuple(
            KernelArg(a.name, a.ctype, params[a.name]) if a.name in params else a for a in n.args
        )
        launch = {k: _launch_value(k, params[k]) for k in _LAUNCH_FIELDS if k in params}
        new = replace(n, args=args, **launch)
        packed = pack_node(new, self._memory)
        assert new.function_name is not None and new.grid is not None and new.block is not None
        kp = s.kernel_params(
            kernel_function(self._functions, self.desc, new), new.grid, new.block, new.smem,
            packed.kernel_params,
        )  # fmt: skip
        s.exec_kernel_set_params(self._exec, self._exec_handles[n.index], kp)
        s.kernel_node_set_params(self._handles[n.index], kp)  # keep to_dot in step
        self._packed[n.index] = packed
        nodes = list(self.desc.nodes)
        nodes[n.index] = new
        self.desc = replace(self.desc, nodes=tuple(nodes))
        return new

    def update(self, plan: ExecutionPlan) -> str:
        """Switch to ``plan``: ``"updated"`` in place through ``cuGraphExecUpdate`` when
        CUDA's rules allow it (:func:`~oxiwork.executor.update.check_update`), else
        ``"reinstantiated"``; ``last_update`` keeps the report saying why."""
        s = self._require()
        checks = check_steps(plan)  # (refused before anything changes)
        times: dict[str, float] = {}
        with _timed(times, "lower_s"):
            desc = lower(
                plan, arch=self.arch, exact=self.exact, events="edges", opaque=self._opaque,
                capture=self._capture,
            )  # fmt: skip
            old_memory = self._memory
            memory = old_memory if _layout(desc) == old_memory.layout else DeviceMemory(s, desc)
            functions = dict(self._functions)
            loaded = frozenset(key for key, _ in functions)
            functions.update(load_functions(s, desc, self._cache, skip=loaded))
            old_functions, self._functions = self._functions, functions
            callbacks = host_callbacks(plan, desc, self._callback_errors)
            old_callbacks, self._callbacks = self._callbacks, callbacks
        with _timed(times, "build_s"):
            try:
                graph, handles = self._build_graph(desc, memory)
            except BaseException:
                self._functions, self._callbacks = old_functions, old_callbacks
                raise
        s.synchronize(self._stream)
        report = check_update(self.desc, desc)
        with _timed(times, "exec_update_s"):
            if report.in_place and not s.exec_update(self._exec, graph):
                report = replace(
                    report,
                    in_place=False,
                    reason=f"{report.reason}, but the driver refused the update: re-instantiated",
                )
        self.last_update = report
        if report.in_place:
            how = "updated"
            if self._graph is not self._exec_graph:
                s.destroy("graph", self._graph)
        else:
            s.destroy("exec", self._exec)
            self._exec = None
            for g in {
                id(self._graph): self._graph,
                id(self._exec_graph): self._exec_graph,
            }.values():
                s.destroy("graph", g)
            with _timed(times, "instantiate_s"):
                self._exec = s.instantiate(graph)
            self._exec_graph, self._exec_handles = graph, handles
            self.instantiations += 1
            how = "reinstantiated"
        if memory is not old_memory:
            _free_memory(s, old_memory)
        self._graph, self._handles, self._memory = graph, handles, memory
        self.plan, self.desc, self._checks = plan, desc, checks
        self.last_update_s = times
        return how

    # ------------------------------------------------------------------ inspection
    def to_dot(self, path: str) -> None:
        """Write the driver's own view of the graph (``cuGraphDebugDotPrint``) to ``path``."""
        self._require().dot_print(self._graph, path)


# ---------------------------------------------------------------------- one rule per kind
# Each rule adds description node ``n`` to ``graph`` after ``deps`` and returns its handle;
# anything without work (barriers) becomes an empty node.
def _add_kernel(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    for a in n.args:  # a set-condition kernel: its handle belongs to the graph it is in
        if a.ctype == "handle" and int(a.value[1]) not in memory.handles:
            memory.handles[int(a.value[1])] = int(s.conditional_handle(graph))
    args = pack_node(n, memory)
    packed[n.index] = args  # the driver copies the values, but keep them anyway
    assert n.function_name is not None and n.grid is not None and n.block is not None
    params = s.kernel_params(
        kernel_function(ex._functions, ex._building or ex.desc, n),
        n.grid,
        n.block,
        n.smem,
        args.kernel_params,
    )
    return s.add_kernel_node(graph, deps, params)


def _add_memcpy(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    assert n.src is not None and n.dst is not None and n.direction is not None
    dst, src = memory.resolve(n.dst), memory.resolve(n.src)
    return s.add_memcpy_node(graph, deps, n.direction, dst, src, n.nbytes)


def _add_memset(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    assert n.dst is not None
    return s.add_memset_node(graph, deps, memory.resolve(n.dst), n.value, n.element_size, n.width)


def _add_host(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    fn_ptr = ctypes.cast(ex._callbacks[n.index], ctypes.c_void_p).value or 0
    return s.add_host_node(graph, deps, fn_ptr)


def _add_empty(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    return s.add_empty_node(graph, deps)


@contextlib.contextmanager
def _timed(times: dict[str, float], name: str) -> Iterator[None]:
    """Add the host seconds of the ``with`` body to ``times[name]``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        times[name] = times.get(name, 0.0) + time.perf_counter() - t0


#: Node kinds CUDA refuses in a (cloned) child graph: CUDA_CHILD_GRAPH_NODE_PARAMS says
#: the child "must not contain conditional nodes", and memory alloc/free nodes only when
#: its ownership moves to the parent. Found on the first H200 run: cuGraphAddChildGraphNode
#: answered CUDA_ERROR_NOT_SUPPORTED for a child graph holding an IF node.
_NOT_IN_CHILD_GRAPHS = frozenset({"conditional", "mem_alloc", "mem_free"})


def must_inline(body: BodyDesc) -> bool:
    """True if a child graph of ``body`` cannot be a CUDA child graph node: it holds a
    conditional or memory node, directly or in a child graph that is itself inlined.

    >>> must_inline(BodyDesc(nodes=(), edges=()))
    False
    """
    return any(
        n.kind in _NOT_IN_CHILD_GRAPHS or (n.kind == "child_graph" and must_inline(n.bodies[0]))
        for n in body.nodes
    )


def _add_child_graph(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    body = n.bodies[0]
    if must_inline(body):
        # The body's nodes go into ``graph`` itself: its roots after ``deps``, then an
        # empty node after all of them that stands for the child node, so whatever
        # depended on the child depends on its whole body (the child node's semantics).
        handles = ex._add_body(graph, body, memory, entry=deps)
        return s.add_empty_node(graph, handles or deps)
    child = s.create_graph()  # owned: destroyed at close (the driver adds a clone)
    ex._add_body(child, body, memory)
    return s.add_child_graph_node(graph, deps, child)


def _add_conditional(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    assert n.handle is not None and n.cond_type is not None
    node, bodies = s.add_conditional_node(
        graph, deps, memory.handles[n.handle], n.cond_type, len(n.bodies)
    )
    for body_graph, body in zip(bodies, n.bodies, strict=True):
        ex._add_body(body_graph, body, memory)
    return node


def _add_mem_alloc(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    assert n.dst is not None
    node, dptr = s.add_mem_alloc_node(graph, deps, n.nbytes)
    memory.graph_memory[n.dst[1]] = dptr
    return node


def _add_mem_free(
    ex: CudaGraphExecutor, s: Session, graph: Any, deps: list[Any], n: DescNode,
    memory: DeviceMemory, packed: dict[int, PackedArgs],
) -> Any:  # fmt: skip
    assert n.dst is not None
    return s.add_mem_free_node(graph, deps, memory.resolve(n.dst))


_NODE_RULES: dict[str, Any] = {
    "kernel": _add_kernel,
    "memcpy": _add_memcpy,
    "memset": _add_memset,
    "host": _add_host,
    "empty": _add_empty,
    "child_graph": _add_child_graph,
    "conditional": _add_conditional,
    "mem_alloc": _add_mem_alloc,
    "mem_free": _add_mem_free,
}


def _launch_value(key: str, value: Any) -> Any:
    if key == "smem":
        return KernelConfig((1, 1, 1), (1, 1, 1), value).shared_mem_bytes
    dims = KernelConfig(value, (1, 1, 1)).grid if key == "grid" else KernelConfig(1, value).block
    return tuple(dims)


def _free_memory(s: Session, memory: DeviceMemory) -> None:
    for ptr in (memory.arena, memory.scratch, memory.loops, *memory.buffers.values()):
        if ptr:
            s.destroy("device_memory", ptr)
    if memory.host:
        s.destroy("host_memory", memory.host)


def _buffer_arg(plan: ExecutionPlan, name: str) -> Any:
    for step in plan.steps:
        for a in (*step.inputs, *step.outputs):
            if a.name == name:
                return a
    raise InvalidArgument(f"no step of this plan uses a buffer named {name!r}")
