"""Lower an ExecutionPlan to a backend-neutral description of a CUDA graph.

:func:`lower` turns a plan into a :class:`GraphDesc`: nodes (kernel launches with their
packed arguments, copies, memsets, host callbacks, empty nodes) and the dependency edges
a GPU would enforce. No driver is involved, so the description is tested on any machine
(against golden JSON files) and the two GPU executors only translate it one node at a
time into driver calls.

Choices, and why
----------------
- **Edges are exactly stream order plus event pairs.** A plan's ``depends_on`` lists
  every data dependency, but a real GPU only orders work by streams and events, and the
  race detector checks the plan against that; lowering the same relation keeps the CUDA
  graph honest (a missing event shows up as a race on both backends, not only on one).
- **Events become edges** (``events="edges"``, the default for CUDA graphs): a record
  and its waits are removed and every predecessor of a removed node is joined to each of
  its successors (node contraction preserves reachability between the remaining nodes,
  so the ordering is unchanged). Event nodes inside a graph would cost launch time and
  gain nothing, since a graph's edges already order work across its internal streams.
  ``events="nodes"`` keeps them as ``event_record``/``event_wait`` nodes: that is the
  form the stream executor replays with real ``cuEventRecord``/``cuStreamWaitEvent``.
- **Barriers become empty nodes** (a join point with no work).
- **Memory is symbolic.** A pointer is a reference resolved by the executor: ``("arena",
  offset)`` into the one arena allocation of ``plan.pool_bytes``, ``("buffer", name)``
  for buffers with their own allocation (external buffers, and any the memory plan left
  unplaced), ``("host", name)`` for a region of the pinned staging block, and
  ``("scratch", 0)`` for copies and memsets that name no buffer (they run for timing).
- **Kernels are compiled in units** of up to 64 (``kernels_per_module``) in plan order:
  the compile cost of many tiny kernels is dominated by NVRTC's start-up, so one unit per
  kernel would be slow, while one unit per plan would recompile everything after any
  edit and could not use several cores.
- **Opaque kernels** (no op, so no CUDA C) launch an empty kernel with the same pointer
  arguments and launch shape, so timing-only graphs still run; ``opaque="error"`` rejects
  them instead.
- Kernel arguments are typed: pointers as ``np.uint64`` (a ``CUdeviceptr``),
  ``float`` as ``np.float32``, ``size_t`` as ``np.uint64``, ``int`` as ``np.int32``.
  :func:`pack_args` lays them out exactly as ``cuGraphAddKernelNode``'s ``kernelParams``
  (a ``void**``) expects: one array per argument plus an array of their addresses.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> desc = lower(ExecutionPlan.build(quick_start()))
>>> [n.kind for n in desc.nodes]
['memcpy', 'kernel', 'memcpy']
>>> desc.edges
((0, 1), (1, 2))

References
----------
NVIDIA, "CUDA C++ Programming Guide", section "CUDA Graphs" (graph structure, node
types, edges); NVIDIA, "CUDA Driver API" 6.24 Graph Management (``cuGraphAddKernelNode``
and ``CUDA_KERNEL_NODE_PARAMS.kernelParams``).
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from oxiwork import ops
from oxiwork.analysis.liveness import dead_buffers
from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.executor.nvrtc import cache_key, compile_options, module_source, unit_options
from oxiwork.node import MemcpyDir, NodeId, NodeKind
from oxiwork.ops import function_name

if TYPE_CHECKING:
    from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep

__all__ = [
    "CTYPES",
    "DescNode",
    "DeviceBuffer",
    "GraphDesc",
    "HostBuffer",
    "KernelArg",
    "ModuleDesc",
    "PackedArgs",
    "Ref",
    "lower",
    "pack_args",
]

Ref = tuple[str, Any]
HOST_ALIGNMENT = 256

# ctype -> (numpy dtype, size in bytes, ctypes type): one table for packing and checks.
CTYPES: dict[str, tuple[type, int, Any]] = {
    "ptr": (np.uint64, 8, ctypes.c_uint64),
    "float": (np.float32, 4, ctypes.c_float),
    "size_t": (np.uint64, 8, ctypes.c_uint64),
    "int": (np.int32, 4, ctypes.c_int32),
}

_DIRECTION = {
    MemcpyDir.HostToDevice: "h2d",
    MemcpyDir.DeviceToHost: "d2h",
    MemcpyDir.DeviceToDevice: "d2d",
    MemcpyDir.PeerToPeer: "d2d",  # one device: a peer copy is a device copy
}


@dataclass(frozen=True, slots=True)
class KernelArg:
    """One kernel argument: ``ctype`` is a key of :data:`CTYPES`; pointers hold a Ref."""

    name: str
    ctype: str
    value: Any


@dataclass(frozen=True, slots=True)
class DescNode:
    """A node of the graph description. ``kind`` says which fields are meaningful:

    - ``kernel``: ``function_name``, ``module`` (index into ``GraphDesc.modules``),
      ``grid``, ``block``, ``smem``, ``args``;
    - ``memcpy``: ``direction`` (``h2d``/``d2h``/``d2d``), ``src``, ``dst``, ``nbytes``;
    - ``memset``: ``dst``, ``value`` (bit pattern), ``element_size``, ``width``
      (elements), ``nbytes``;
    - ``host``: ``label`` (the callback comes from the plan's graph node);
    - ``event_record``/``event_wait``: ``event`` (only with ``events="nodes"``);
    - ``empty``: nothing.

    ``step`` is the plan step it came from and ``stream`` that step's stream.
    """

    index: int
    kind: str
    name: str
    step: int
    stream: int
    node: int = -1
    function_name: str | None = None
    module: int | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    smem: int = 0
    args: tuple[KernelArg, ...] = ()
    direction: str | None = None
    src: Ref | None = None
    dst: Ref | None = None
    nbytes: int = 0
    value: int = 0
    element_size: int = 0
    width: int = 0
    event: int | None = None
    label: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form, with only the fields meaningful for ``kind``."""
        d: dict[str, Any] = {
            "index": self.index,
            "kind": self.kind,
            "name": self.name,
            "step": self.step,
            "node": self.node,
            "stream": self.stream,
        }
        if self.kind == "kernel":
            d.update(
                function=self.function_name,
                module=self.module,
                grid=list(self.grid or ()),
                block=list(self.block or ()),
                smem=self.smem,
                args=[[a.name, a.ctype, _json_value(a.value)] for a in self.args],
            )
        elif self.kind == "memcpy":
            d.update(
                direction=self.direction,
                src=_json_value(self.src),
                dst=_json_value(self.dst),
                nbytes=self.nbytes,
            )
        elif self.kind == "memset":
            d.update(
                dst=_json_value(self.dst),
                value=self.value,
                element_size=self.element_size,
                width=self.width,
                nbytes=self.nbytes,
            )
        elif self.kind == "host":
            d.update(label=self.label)
        elif self.kind in ("event_record", "event_wait"):
            d.update(event=self.event)
        return d


def _json_value(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


@dataclass(frozen=True, slots=True)
class ModuleDesc:
    """One translation unit: its cache key, compile options and kernels."""

    key: str
    arch: str
    options: tuple[str, ...]
    function_names: tuple[str, ...]
    source: str = field(repr=False)
    starts: tuple[int, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class HostBuffer:
    """A region of the pinned staging block: ``direction`` ``in`` (uploaded from the
    host before a copy reads it) or ``out`` (filled by a DeviceToHost copy)."""

    name: str
    buffer: str | None
    direction: str
    offset: int
    nbytes: int
    dtype: str
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DeviceBuffer:
    """A buffer with its own device allocation (external or unplaced)."""

    name: str
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    external: bool


@dataclass(frozen=True, slots=True)
class GraphDesc:
    """A plan lowered to CUDA-graph form; see the module docstring for the choices.

    ``nodes`` are in plan order (a topological order), so every edge ``(a, b)`` has
    ``a < b``. ``outputs`` maps a downloaded buffer's name to the host region holding
    its value after a run (the last download of that buffer in plan order).
    """

    nodes: tuple[DescNode, ...]
    edges: tuple[tuple[int, int], ...]
    modules: tuple[ModuleDesc, ...]
    host_buffers: tuple[HostBuffer, ...]
    device_buffers: tuple[DeviceBuffer, ...]
    arena_bytes: int
    host_bytes: int
    scratch_bytes: int
    num_streams: int
    event_count: int
    events: str
    arch: str
    exact: bool
    outputs: tuple[tuple[str, str], ...] = ()

    def predecessors(self) -> list[list[int]]:
        """``preds[i]``: the nodes node ``i`` depends on, ascending."""
        preds: list[list[int]] = [[] for _ in self.nodes]
        for a, b in self.edges:
            preds[b].append(a)
        return preds

    def node_for(self, key: Any) -> DescNode:
        """The node lowered from plan node ``key`` (a NodeId), named ``key`` (a str), or
        at description index ``key`` (an int)."""
        for n in self.nodes:
            if (isinstance(key, NodeId) and n.node == int(key)) or (
                isinstance(key, str) and n.name == key
            ):
                return n
        if (
            type(key) is int and 0 <= key < len(self.nodes)  # a plain int, not a NodeId
        ):
            return self.nodes[key]
        names = ", ".join(repr(n.name) for n in self.nodes[:10])
        raise InvalidArgument(
            f"no node {key!r} in this CUDA graph (event nodes become edges); its nodes "
            f"include {names}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A deterministic JSON-able description (sources are left out; keys identify them)."""
        return {
            "format": "oxiwork.cuda_graph_desc",
            "version": 1,
            "arch": self.arch,
            "exact": self.exact,
            "events": self.events,
            "num_streams": self.num_streams,
            "event_count": self.event_count,
            "arena_bytes": self.arena_bytes,
            "host_bytes": self.host_bytes,
            "scratch_bytes": self.scratch_bytes,
            "modules": [
                {
                    "key": m.key,
                    "arch": m.arch,
                    "options": list(m.options),
                    "functions": list(m.function_names),
                }
                for m in self.modules
            ],
            "host_buffers": [
                {
                    "name": h.name,
                    "buffer": h.buffer,
                    "direction": h.direction,
                    "offset": h.offset,
                    "nbytes": h.nbytes,
                    "dtype": h.dtype,
                    "shape": list(h.shape),
                }
                for h in self.host_buffers
            ],
            "device_buffers": [
                {
                    "name": b.name,
                    "nbytes": b.nbytes,
                    "dtype": b.dtype,
                    "shape": list(b.shape),
                    "external": b.external,
                }
                for b in self.device_buffers
            ],
            "outputs": [list(o) for o in self.outputs],
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [list(e) for e in self.edges],
        }

    def to_json(self, indent: int | None = 1) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)


# ---------------------------------------------------------------------------- packing
@dataclass(frozen=True, slots=True)
class PackedArgs:
    """Kernel arguments in the memory layout ``kernelParams`` (a ``void**``) points to.

    ``values[k]`` is a one-element array of argument k's exact dtype; ``addresses`` an
    ``np.uint64`` array of their addresses. Keep the object alive while a launch or a
    node-add call may read it (the driver copies the values during the call).
    """

    values: tuple[np.ndarray, ...]
    addresses: np.ndarray

    @property
    def kernel_params(self) -> int:
        """The ``void**`` to pass as ``kernelParams`` (0 for a kernel without arguments)."""
        return int(self.addresses.ctypes.data) if len(self.values) else 0


def pack_args(args: Sequence[KernelArg], resolve: Callable[[Ref], int]) -> PackedArgs:
    """Pack ``args`` for a launch; pointers are turned into addresses by ``resolve``.

    >>> a = pack_args([KernelArg("in0", "ptr", ("arena", 256)), KernelArg("alpha", "float", 0.5)],
    ...               lambda ref: 4096 + ref[1])
    >>> [v.dtype.name for v in a.values], int(a.values[0][0]), float(a.values[1][0])
    (['uint64', 'float32'], 4352, 0.5)
    """
    values: list[np.ndarray] = []
    for a in args:
        spec = CTYPES.get(a.ctype)
        if spec is None:
            raise InvalidArgument(
                f"kernel argument {a.name!r} has ctype {a.ctype!r}; use one of {', '.join(CTYPES)}"
            )
        dtype = spec[0]
        raw = resolve(a.value) if a.ctype == "ptr" else a.value
        if a.ctype in ("size_t", "int", "ptr"):
            info = np.iinfo(dtype)
            if isinstance(raw, float) and not float(raw).is_integer():
                raise InvalidArgument(f"kernel argument {a.name!r} must be an integer, got {raw!r}")
            if not info.min <= int(raw) <= info.max:
                raise InvalidArgument(
                    f"kernel argument {a.name!r} = {raw} does not fit a {a.ctype}"
                )
            raw = int(raw)
        values.append(np.array([raw], dtype=dtype))
    addresses = np.array([v.ctypes.data for v in values], dtype=np.uint64)
    return PackedArgs(tuple(values), addresses)


# ---------------------------------------------------------------------------- lowering
@dataclass
class _Lowering:
    plan: ExecutionPlan
    arch: str
    exact: bool
    opaque: str
    host: dict[str, HostBuffer] = field(default_factory=dict)
    host_bytes: int = 0
    device: dict[str, DeviceBuffer] = field(default_factory=dict)
    scratch: int = 0
    outputs: dict[str, str] = field(default_factory=dict)
    sources: list[Any] = field(default_factory=list)

    def ref(self, arg: BufferArg | None, nbytes: int) -> Ref:
        if arg is None:
            self.scratch = max(self.scratch, nbytes)
            return ("scratch", 0)
        if arg.base is not None:  # a view: its base's address plus its offset
            skip = arg.view_offset * np.dtype(arg.dtype).itemsize
            kind, where = self.ref(arg.base, arg.base.size_bytes)
            return ("arena", where + skip) if kind == "arena" else ("view", (where, skip))
        if arg.offset is not None and not arg.external:
            return ("arena", int(arg.offset))
        if arg.name not in self.device:
            self.device[arg.name] = DeviceBuffer(
                arg.name, arg.size_bytes, arg.dtype, tuple(arg.shape), arg.external
            )
        return ("buffer", arg.name)

    def host_region(self, name: str, arg: BufferArg | None, direction: str, nbytes: int) -> Ref:
        if name not in self.host:
            dtype = arg.dtype if arg is not None else "uint8"
            shape = tuple(arg.shape) if arg is not None else (nbytes,)
            self.host[name] = HostBuffer(
                name, arg.name if arg else None, direction, self.host_bytes, nbytes, dtype, shape
            )
            self.host_bytes += -(-nbytes // HOST_ALIGNMENT) * HOST_ALIGNMENT
        return ("host", name)

    def kernel(self, step: PlanStep, index: int) -> DescNode:
        graph = self.plan.graph
        node = graph.node(step.node)
        try:
            ks = ops.kernel_source(graph, node)
            scalars = tuple(_scalar(s) for s in ks.scalar_args)
        except UnsupportedOp:
            if self.opaque == "error" or node.op is not None or node.fused is not None:
                raise
            ks = _noop_kernel(node, len(step.inputs), len(step.outputs))
            scalars = ()
        self.sources.append(ks)
        args = [
            KernelArg(f"in{k}", "ptr", self.ref(a, a.size_bytes)) for k, a in enumerate(step.inputs)
        ]
        args += [
            KernelArg(f"out{k}", "ptr", self.ref(a, a.size_bytes))
            for k, a in enumerate(step.outputs)
        ]
        args += [KernelArg(name, ctype, value) for ctype, name, value in scalars]
        cfg = step.config
        if cfg is None:
            raise InvalidArgument(f"kernel step {step.index} ({step.name!r}) has no launch config")
        return DescNode(
            index, "kernel", step.name, step.index, int(step.stream), int(step.node),
            function_name=ks.function_name, module=0, grid=tuple(cfg.grid),
            block=tuple(cfg.block), smem=cfg.shared_mem_bytes, args=tuple(args),
        )  # fmt: skip

    def memcpy(self, step: PlanStep, index: int) -> DescNode:
        direction = _DIRECTION[step.memcpy_dir] if step.memcpy_dir else "d2d"
        nbytes = step.size_bytes
        src_arg = step.inputs[0] if step.inputs else None
        dst_arg = step.outputs[0] if step.outputs else None
        if direction == "h2d":
            # One region per uploaded buffer, as large as the buffer: every upload into it
            # (whatever its size) reads the same input, as in the simulator.
            name = f"in:{dst_arg.name}" if dst_arg else f"in:#{step.index}"
            size = max(nbytes, dst_arg.size_bytes) if dst_arg else nbytes
            src = self.host_region(name, dst_arg, "in", size)
            dst = self.ref(dst_arg, nbytes)
        elif direction == "d2h":
            # Every download has its own region: two downloads of one buffer at different
            # times must not overwrite each other while the graph runs.
            name = f"out:{src_arg.name}@{step.index}" if src_arg else f"out:#{step.index}"
            dst = self.host_region(name, src_arg, "out", nbytes)
            src = self.ref(src_arg, nbytes)
            if src_arg is not None:
                self.outputs[src_arg.name] = name
        else:
            src, dst = self.ref(src_arg, nbytes), self.ref(dst_arg, nbytes)
        return DescNode(
            index, "memcpy", step.name, step.index, int(step.stream), int(step.node),
            direction=direction, src=src, dst=dst, nbytes=nbytes,
        )  # fmt: skip

    def capture(self, step: PlanStep, arg: BufferArg, index: int) -> DescNode:
        name = f"out:{arg.name}@capture"
        dst = self.host_region(name, arg, "out", arg.size_bytes)
        self.outputs[arg.name] = name
        return DescNode(
            index, "memcpy", f"capture:{arg.name}", step.index, int(step.stream),
            int(step.node), direction="d2h", src=self.ref(arg, arg.size_bytes), dst=dst,
            nbytes=arg.size_bytes,
        )  # fmt: skip

    def memset(self, step: PlanStep, index: int) -> DescNode:
        nbytes = step.size_bytes
        dst = self.ref(step.outputs[0] if step.outputs else None, nbytes)
        byte = int(step.memset_value) & 0xFF
        # The widest element size that divides the byte count: fewer, larger stores.
        size, pattern = next(
            (sz, pat) for sz, pat in ((4, 0x01010101), (2, 0x0101), (1, 0x01)) if nbytes % sz == 0
        )
        return DescNode(
            index, "memset", step.name, step.index, int(step.stream), int(step.node),
            dst=dst, value=byte * pattern, element_size=size, width=nbytes // size,
            nbytes=nbytes,
        )  # fmt: skip


def _captures(plan: ExecutionPlan) -> dict[int, list[BufferArg]]:
    """Step index -> buffers to download after it: never-read, non-external buffers,
    after their last writer in plan order (as the simulator's outputs). Which buffers those
    are is liveness's answer (:func:`oxiwork.analysis.liveness.dead_buffers`)."""
    dead = dead_buffers(plan.graph)
    last: dict[Any, tuple[int, BufferArg]] = {}
    for st in plan.steps:
        if st.kind is NodeKind.Memcpy and st.memcpy_dir is MemcpyDir.DeviceToHost:
            continue
        for a in st.outputs:
            if a.buffer in dead:
                last[a.buffer] = (st.index, a)
    out: dict[int, list[BufferArg]] = {}
    for index, arg in last.values():
        out.setdefault(index, []).append(arg)
    return out


def _scalar(arg: Sequence[Any]) -> tuple[str, str, Any]:
    """``(ctype, name, value)``; tolerate the older ``(ctype, value)`` form."""
    if len(arg) == 3:
        ctype, name, value = arg
    else:
        ctype, value = arg
        name = "arg"
    if ctype not in CTYPES or ctype == "ptr":
        raise InvalidArgument(f"scalar kernel argument {name!r} has unsupported ctype {ctype!r}")
    return ctype, name, (float(value) if ctype == "float" else int(value))


@dataclass(frozen=True, slots=True)
class _Source:
    function_name: str
    source: str


def _noop_kernel(node: Any, n_in: int, n_out: int) -> _Source:
    fname = function_name(node)
    params = [f"const float* in{k}" for k in range(n_in)]
    params += [f"float* out{k}" for k in range(n_out)]
    src = (
        f"// opaque kernel {node.name!r}: no op, launched empty for timing\n"
        f'extern "C" __global__ void {fname}({", ".join(params)}) {{}}\n'
    ).replace("'", "")
    return _Source(fname, src)


def _contract(
    n: int, edges: set[tuple[int, int]], drop: set[int]
) -> tuple[list[int], set[tuple[int, int]]]:
    """Remove ``drop`` nodes, joining each one's predecessors to its successors.

    Processing in ascending (topological) order keeps reachability between the kept
    nodes exactly as it was.
    """
    succ: list[set[int]] = [set() for _ in range(n)]
    pred: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        succ[a].add(b)
        pred[b].add(a)
    for v in sorted(drop):
        for p in pred[v]:
            succ[p].discard(v)
            for s in succ[v]:
                succ[p].add(s)
                pred[s].add(p)
        for s in succ[v]:
            pred[s].discard(v)
        pred[v].clear()
        succ[v].clear()
    kept = [i for i in range(n) if i not in drop]
    return kept, {(a, b) for a in kept for b in succ[a]}


def lower(
    plan: ExecutionPlan,
    *,
    arch: str = "sm_90",
    exact: bool = True,
    events: str = "edges",
    opaque: str = "noop",
    capture: bool = True,
    kernels_per_module: int = 64,
) -> GraphDesc:
    """Lower ``plan`` to a :class:`GraphDesc` for ``arch``.

    ``events``: ``"edges"`` (event pairs become edges; for CUDA graphs) or ``"nodes"``
    (kept as event nodes; for stream replay). ``opaque``: ``"noop"`` launches an empty
    kernel for kernels without an op, ``"error"`` raises :class:`UnsupportedOp`.
    ``capture``: download every buffer that is written but never read (and not external)
    right after its last writer, on the writer's stream, exactly when the simulator
    captures it (its bytes may be reused later); such a node is named ``capture:<buffer>``.
    ``kernels_per_module``: kernels are compiled in units of at most this many, in plan
    order (NVRTC's start-up cost is shared within a unit; units compile in parallel and
    are cached separately, so an edit recompiles only the units it touches).

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.executor.plan import ExecutionPlan
    >>> d = lower(ExecutionPlan.build(quick_start(), fusion=False))
    >>> [(n.kind, n.name) for n in d.nodes]
    [('memcpy', 'upload'), ('kernel', 'relu'), ('kernel', 'scale'), ('memcpy', 'download')]
    """
    if events not in ("edges", "nodes"):
        raise InvalidArgument(f"events must be 'edges' or 'nodes', got {events!r}")
    if opaque not in ("noop", "error"):
        raise InvalidArgument(f"opaque must be 'noop' or 'error', got {opaque!r}")
    if (
        isinstance(kernels_per_module, bool)
        or not isinstance(kernels_per_module, int)
        or (kernels_per_module < 1)
    ):
        raise InvalidArgument(f"kernels_per_module must be an int >= 1, got {kernels_per_module!r}")
    compile_options(arch, exact=exact)  # reject a bad arch before any work
    low = _Lowering(plan, arch, exact, opaque)
    nodes: list[DescNode] = []
    edges: set[tuple[int, int]] = set()
    last: dict[int, int] = {}
    records: dict[int, int] = {}
    waits: list[tuple[int, int]] = []
    events_at: set[int] = set()
    captures = _captures(plan) if capture else {}
    for step in plan.steps:
        i = len(nodes)
        nodes.append(_lower_step(low, step, i))
        s = int(step.stream)
        if s in last:
            edges.add((last[s], i))
        last[s] = i
        for arg in captures.get(step.index, ()):
            j = len(nodes)
            nodes.append(low.capture(step, arg, j))
            edges.add((last[s], j))
            last[s] = j
        if step.kind is NodeKind.EventRecord:
            records[_event(step)] = i
            events_at.add(i)
        elif step.kind is NodeKind.EventWait:
            waits.append((_event(step), i))
            events_at.add(i)
    for ev, i in waits:
        if ev not in records or records[ev] > i:
            raise InvalidArgument(
                f"step {nodes[i].step} ({nodes[i].name!r}) waits for event {ev}, which no "
                "earlier step records; rebuild the plan with ExecutionPlan.build"
            )
        edges.add((records[ev], i))
    if events == "edges":
        kept, edges = _contract(len(nodes), edges, events_at)
        renumber = {old: new for new, old in enumerate(kept)}
        nodes = [_reindex(nodes[old], new) for new, old in enumerate(kept)]
        edges = {(renumber[a], renumber[b]) for a, b in edges}
    nodes, modules = _modules(nodes, low.sources, arch, exact, kernels_per_module)
    return GraphDesc(
        nodes=tuple(nodes),
        edges=tuple(sorted(edges)),
        modules=modules,
        host_buffers=tuple(low.host.values()),
        device_buffers=tuple(low.device[k] for k in sorted(low.device)),
        arena_bytes=int(plan.pool_bytes),
        host_bytes=low.host_bytes,
        scratch_bytes=low.scratch,
        num_streams=int(plan.num_streams),
        event_count=int(plan.event_count),
        events=events,
        arch=arch,
        exact=exact,
        outputs=tuple(sorted(low.outputs.items())),
    )


def _modules(
    nodes: list[DescNode], sources: list[Any], arch: str, exact: bool, per_module: int
) -> tuple[list[DescNode], tuple[ModuleDesc, ...]]:
    """Group the kernels (``sources[k]`` is the k-th kernel node's) into translation
    units of at most ``per_module`` kernels in plan order; set each node's ``module``."""
    from dataclasses import replace

    kernel_at = [i for i, n in enumerate(nodes) if n.kind == "kernel"]
    modules: list[ModuleDesc] = []
    for start in range(0, len(kernel_at), per_module):
        chunk = kernel_at[start : start + per_module]
        unit = module_source(sources[start : start + per_module])
        options = unit_options(unit.source, arch, exact=exact)
        key = cache_key(unit.source, options, arch)
        for i in chunk:
            nodes[i] = replace(nodes[i], module=len(modules))
        modules.append(
            ModuleDesc(key, arch, options, unit.function_names, unit.source, unit.starts)
        )
    return nodes, tuple(modules)


def _event(step: PlanStep) -> int:
    if step.event is None:
        raise InvalidArgument(f"event step {step.index} ({step.name!r}) has no event index")
    return int(step.event)


def _reindex(node: DescNode, index: int) -> DescNode:
    from dataclasses import replace

    return replace(node, index=index)


def _lower_step(low: _Lowering, step: PlanStep, index: int) -> DescNode:
    rule = _STEP_RULES.get(step.kind)
    if rule is None:
        raise InvalidArgument(f"step {step.index} ({step.name!r}) has unknown kind {step.kind}")
    return rule(low, step, index)


def _event_node(kind: str) -> Callable[[_Lowering, Any, int], DescNode]:
    def rule(low: _Lowering, step: PlanStep, index: int) -> DescNode:
        return DescNode(
            index, kind, step.name, step.index, int(step.stream), int(step.node), event=step.event
        )

    return rule


# One lowering rule per step kind (a table, not an if-chain).
_STEP_RULES: dict[NodeKind, Callable[[_Lowering, Any, int], DescNode]] = {
    NodeKind.KernelLaunch: _Lowering.kernel,
    NodeKind.Memcpy: _Lowering.memcpy,
    NodeKind.Memset: _Lowering.memset,
    NodeKind.HostCallback: lambda low, s, i: DescNode(
        i, "host", s.name, s.index, int(s.stream), int(s.node), label=s.label
    ),
    NodeKind.Barrier: lambda low, s, i: DescNode(
        i, "empty", s.name, s.index, int(s.stream), int(s.node)
    ),
    NodeKind.EventRecord: _event_node("event_record"),
    NodeKind.EventWait: _event_node("event_wait"),
}


def iter_kernel_sources(plan: ExecutionPlan) -> Iterable[Any]:
    """The KernelSource of every kernel step of ``plan`` (for compile-everything checks)."""
    for step in plan.steps:
        if step.kind is NodeKind.KernelLaunch:
            yield ops.kernel_source(plan.graph, plan.graph.node(step.node))
