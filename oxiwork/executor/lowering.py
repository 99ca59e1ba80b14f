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
- **Child graphs, conditionals and graph-owned memory keep their CUDA form.** A child
  graph node carries its body (``BodyDesc``: nodes and edges, lowered by the same rules);
  a conditional node carries one body per case and the index of its conditional handle,
  and is preceded by a one-thread kernel that sets the handle from the condition buffer's
  first element (``cudaGraphSetConditional``, by :meth:`~oxiwork.node.CondKind.chooses`'s
  rule); a WHILE body ends with the same kernel, which also counts the iterations in a
  device word (``("loop", k)``) and stops the loop at ``max_iterations`` with the word set
  to ``max_iterations + 1``, which the executor reports as
  :class:`~oxiwork.error.IterationLimit`. Alloc and free nodes become memory alloc/free
  nodes, and their buffer lives at the address the alloc node returns (``("graph",
  name)``), not in the arena.
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
from oxiwork.node import BODY_KINDS, CondKind, GraphNode, MemcpyDir, NodeId, NodeKind, StreamId
from oxiwork.ops import function_name

if TYPE_CHECKING:
    from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep
    from oxiwork.graph import ComputeGraph

__all__ = [
    "CTYPES",
    "BodyDesc",
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
    # an int64 op's scalar parameter (``ids + 1`` computed exactly)
    "long long": (np.int64, 8, ctypes.c_int64),
    # a cudaGraphConditionalHandle (unsigned long long); its value is a ("handle", k) Ref
    "handle": (np.uint64, 8, ctypes.c_uint64),
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
    - ``child_graph``: ``bodies`` (one :class:`BodyDesc`);
    - ``conditional``: ``cond_type`` (``if``/``while``/``switch``), ``handle`` (its
      conditional handle, ``0..GraphDesc.handles-1``), ``bodies`` (one per case);
    - ``mem_alloc``/``mem_free``: ``dst`` (a ``("graph", name)`` Ref), ``nbytes``;
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
    bodies: tuple[BodyDesc, ...] = ()
    cond_type: str | None = None
    handle: int | None = None

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
        elif self.kind in ("mem_alloc", "mem_free"):
            d.update(dst=_json_value(self.dst), nbytes=self.nbytes)
        if self.kind == "conditional":
            d.update(cond_type=self.cond_type, handle=self.handle)
        if self.bodies:
            d["bodies"] = [b.to_dict() for b in self.bodies]
        return d


@dataclass(frozen=True, slots=True)
class BodyDesc:
    """The body graph of a child graph or conditional node: nodes in a topological order
    (indices local to the body) and edges ``(a, b)`` with ``a < b``."""

    nodes: tuple[DescNode, ...]
    edges: tuple[tuple[int, int], ...]

    def predecessors(self) -> list[list[int]]:
        """``preds[i]``: the body nodes node ``i`` depends on, ascending."""
        preds: list[list[int]] = [[] for _ in self.nodes]
        for a, b in self.edges:
            preds[b].append(a)
        return preds

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able form."""
        return {"nodes": [n.to_dict() for n in self.nodes], "edges": [list(e) for e in self.edges]}


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
    #: compiled relocatable and linked with libcudadevrt (the set-condition kernels)
    link_devrt: bool = False


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
    #: conditional handles to create (one per conditional node, bodies included)
    handles: int = 0
    #: WHILE nodes, each with an iteration counter word (``("loop", k)``), by name
    loops: tuple[tuple[str, int], ...] = ()
    #: graph-owned buffers (allocated by mem_alloc nodes), by name
    graph_buffers: tuple[str, ...] = ()

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
            **(
                {
                    "handles": self.handles,
                    "loops": [list(x) for x in self.loops],
                    "graph_buffers": list(self.graph_buffers),
                }
                if self.handles or self.graph_buffers
                else {}
            ),
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
        raw = resolve(a.value) if a.ctype in ("ptr", "handle") else a.value
        if a.ctype in ("size_t", "int", "long long", "ptr", "handle"):
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
    handles: int = 0
    body_kernels: int = 0
    loops: list[tuple[str, int]] = field(default_factory=list)
    graph_owned: frozenset[Any] = frozenset()

    def ref(self, arg: BufferArg | None, nbytes: int) -> Ref:
        if arg is None:
            self.scratch = max(self.scratch, nbytes)
            return ("scratch", 0)
        if arg.buffer in self.graph_owned:  # at the address its alloc node returns
            return ("graph", arg.name)
        if arg.base is not None:  # a view: its base's address plus its offset
            skip = arg.view_offset * np.dtype(arg.dtype).itemsize
            kind, where = self.ref(arg.base, arg.base.size_bytes)
            if kind == "arena":
                return ("arena", where + skip)
            return ("graph_view" if kind == "graph" else "view", (where, skip))
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

    def kernel(self, step: PlanStep, index: int, graph: ComputeGraph | None = None) -> DescNode:
        node = (graph or self.plan.graph).node(step.node)
        if graph is not None and graph is not self.plan.graph:
            # A body numbers its nodes from 0: its kernels take ids past the outer graph's,
            # so their generated function names (name + id) stay unique in a module.
            self.body_kernels += 1
            node = node.replace(id=NodeId(int(self.plan.graph.next_node_id()) + self.body_kernels))
        graph = graph or self.plan.graph
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

    def memcpy(self, step: PlanStep, index: int, graph: ComputeGraph | None = None) -> DescNode:
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

    def memset(self, step: PlanStep, index: int, graph: ComputeGraph | None = None) -> DescNode:
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

    def memory_node(self, step: PlanStep, index: int, graph: Any = None) -> DescNode:
        arg = step.outputs[0]
        return DescNode(
            index, step.kind.value, step.name, step.index, int(step.stream), int(step.node),
            dst=("graph", arg.name), nbytes=arg.size_bytes,
        )  # fmt: skip

    def body_step(self, outer: PlanStep, node: GraphNode) -> PlanStep:
        """A step for a node of a body graph: the outer step's place, the node's fields."""
        from oxiwork.executor.plan import PlanStep

        args = {a.buffer: a for a in (*outer.inputs, *outer.outputs)}
        return PlanStep(
            index=outer.index, kind=node.kind, node=node.id, name=node.name,
            stream=StreamId(outer.stream), position=outer.position, fused_nodes=(node.id,),
            function_name=node.function_name if node.is_kernel else None, config=node.config,
            inputs=tuple(args[b] for b in node.inputs),
            outputs=tuple(args[b] for b in node.outputs), size_bytes=node.size_bytes,
            memcpy_dir=node.memcpy_dir, memset_value=node.memset_value, label=node.label,
        )  # fmt: skip

    def body(self, outer: PlanStep, body: ComputeGraph, loop: tuple[Any, ...] = ()) -> BodyDesc:
        """Lower a body graph (nodes in its topological order); ``loop`` (WHILE) appends the
        kernel that re-evaluates the condition after everything else."""
        nodes: list[DescNode] = []
        edges: set[tuple[int, int]] = set()
        first: dict[NodeId, int] = {}
        last: dict[NodeId, int] = {}
        for nid in body.topological_order():
            expanded = self.expand(self.body_step(outer, body.node(nid)), len(nodes), body)
            first[nid] = len(nodes)
            for k, d in enumerate(expanded):
                if k:
                    edges.add((len(nodes) - 1, len(nodes)))
                nodes.append(d)
            last[nid] = len(nodes) - 1
        edges |= {(last[a], first[b]) for a, b in body.edges}
        if loop:
            j = len(nodes)
            nodes.append(self.set_condition(outer, j, *loop))
            edges |= {(i, j) for i in range(j)}  # after the whole iteration
        return BodyDesc(tuple(nodes), tuple(sorted(edges)))

    def set_condition(
        self, step: PlanStep, index: int, node: GraphNode, handle: int, loop: int, first: bool
    ) -> DescNode:
        """The one-thread kernel that sets ``node``'s handle from its condition buffer."""
        assert node.condition is not None and node.cond_kind is not None
        args = {a.buffer: a for a in step.inputs}
        cond = args[node.condition]
        src = _condition_kernel(node.cond_kind, cond.dtype)
        self.sources.append(src)
        kargs = [
            KernelArg("handle", "handle", ("handle", handle)),
            KernelArg("cond", "ptr", self.ref(cond, cond.size_bytes)),
        ]
        if node.cond_kind is CondKind.Switch:
            kargs.append(KernelArg("cases", "int", len(node.bodies)))
        elif node.cond_kind is CondKind.While:
            kargs += [
                KernelArg("count", "ptr", ("loop", loop)),
                KernelArg("limit", "int", node.max_iterations),
                KernelArg("first", "int", int(first)),
            ]
        return DescNode(
            index, "kernel", f"set_condition:{node.name}", step.index, int(step.stream),
            int(step.node), function_name=src.function_name, module=0, grid=(1, 1, 1),
            block=(1, 1, 1), args=tuple(kargs),
        )  # fmt: skip

    def expand(self, step: PlanStep, index: int, graph: Any = None) -> list[DescNode]:
        """The description nodes of one step, in order (a conditional: the kernel setting
        its handle, then the conditional node; everything else: one node)."""
        g = graph or self.plan.graph
        if step.kind not in BODY_KINDS:
            return [_lower_step(self, step, index, graph)]
        node = g.node(step.node)
        if step.kind is NodeKind.ChildGraph:
            return [
                DescNode(
                    index,
                    "child_graph",
                    step.name,
                    step.index,
                    int(step.stream),
                    int(step.node),
                    bodies=(self.body(step, node.bodies[0]),),
                )
            ]
        assert node.cond_kind is not None
        handle = self.handles
        self.handles += 1
        loop = -1
        if node.cond_kind is CondKind.While:
            loop = len(self.loops)
            self.loops.append((node.name, node.max_iterations))
        setter = self.set_condition(step, index, node, handle, loop, True)
        again = (node, handle, loop, False) if node.cond_kind is CondKind.While else ()
        bodies = tuple(self.body(step, b, again) for b in node.bodies)
        return [
            setter,
            DescNode(
                index + 1,
                "conditional",
                step.name,
                step.index,
                int(step.stream),
                int(step.node),
                bodies=bodies,
                cond_type=node.cond_kind.value,
                handle=handle,
            ),
        ]


# C type of a condition buffer's element, by dtype (the set-condition kernel reads one).
_COND_CTYPES = {
    "float32": "float",
    "float64": "double",
    "int32": "int",
    "int64": "long long",
    "uint8": "unsigned char",
    "bool": "bool",
}


def _condition_kernel(kind: CondKind, dtype: str) -> _Source:
    """CUDA C of the kernel that sets a conditional handle from ``cond[0]``.

    IF and WHILE set 1 for a non-zero value (``cond[0] != 0``: NaN too); SWITCH sets the
    truncated value when it is a case and ``cases`` (no body) otherwise; a WHILE's kernel
    also counts iterations in ``count[0]`` and ends the loop at ``limit`` with ``count[0]
    = limit + 1`` (the executor raises). :meth:`~oxiwork.node.CondKind.chooses` is the same
    rule in Python. ``cudaGraphSetConditional`` comes from libcudadevrt: the module is
    compiled relocatable (``-rdc=true``) and linked against it when loaded.
    """
    ctype = _COND_CTYPES.get(dtype)
    if ctype is None:
        raise UnsupportedOp(
            f"a condition buffer of dtype {dtype} has no CUDA C reader; use one of "
            f"{', '.join(_COND_CTYPES)}"
        )
    fname = f"oxi_condition_{kind.value}_{dtype}"
    decl = (
        "extern __device__ void cudaGraphSetConditional(unsigned long long handle, "
        "unsigned int value);\n"
    )
    head = f'extern "C" __global__ void {fname}(unsigned long long handle, const {ctype}* cond'
    if kind is CondKind.Switch:
        body = (
            f"{head}, int cases) {{\n"
            "  double v = (double)cond[0];\n"
            "  unsigned int k = (unsigned int)cases;\n"
            "  if (isfinite(v) && v > -1.0 && trunc(v) < (double)cases) k = (unsigned int)trunc(v);\n"
            "  cudaGraphSetConditional(handle, k);\n}\n"
        )
    elif kind is CondKind.While:
        body = (
            f"{head}, unsigned int* count, int limit, int first) {{\n"
            "  unsigned int done = first ? 0u : count[0] + 1u;\n"
            "  int more = cond[0] != 0;\n"
            "  if (more && done >= (unsigned int)limit) {\n"
            "    count[0] = (unsigned int)limit + 1u;\n"
            "    cudaGraphSetConditional(handle, 0u);\n"
            "    return;\n  }\n"
            "  count[0] = done;\n"
            "  cudaGraphSetConditional(handle, more ? 1u : 0u);\n}\n"
        )
    else:
        body = f"{head}) {{\n  cudaGraphSetConditional(handle, cond[0] != 0 ? 1u : 0u);\n}}\n"
    return _Source(fname, decl + body)


#: Prefix of the set-condition kernels' names: their module links libcudadevrt.
CONDITION_PREFIX = "oxi_condition_"


def _captures(plan: ExecutionPlan) -> dict[int, list[BufferArg]]:
    """Step index -> buffers to download after it: never-read, non-external buffers,
    after their last writer in plan order (as the simulator's outputs). Which buffers those
    are is liveness's answer (:func:`oxiwork.analysis.liveness.dead_buffers`)."""
    dead = dead_buffers(plan.graph)
    last: dict[Any, tuple[int, BufferArg]] = {}
    for st in plan.steps:
        if st.kind is NodeKind.Memcpy and st.memcpy_dir is MemcpyDir.DeviceToHost:
            continue
        if st.kind is NodeKind.MemAlloc or st.kind is NodeKind.MemFree:
            continue  # they write no value (and after a free the bytes are gone)
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
    owned = frozenset(n.outputs[0] for n in plan.graph.nodes if n.kind is NodeKind.MemAlloc)
    low = _Lowering(plan, arch, exact, opaque, graph_owned=owned)
    nodes: list[DescNode] = []
    edges: set[tuple[int, int]] = set()
    last: dict[int, int] = {}
    records: dict[int, int] = {}
    waits: list[tuple[int, int]] = []
    events_at: set[int] = set()
    captures = _captures(plan) if capture else {}
    for step in plan.steps:
        s = int(step.stream)
        for desc_node in low.expand(step, len(nodes)):
            i = len(nodes)
            nodes.append(desc_node)
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
        handles=low.handles,
        loops=tuple(low.loops),
        graph_buffers=tuple(sorted(plan.graph.buffer(b).name for b in owned)),
    )


def _modules(
    nodes: list[DescNode], sources: list[Any], arch: str, exact: bool, per_module: int
) -> tuple[list[DescNode], tuple[ModuleDesc, ...]]:
    """Group the kernels (``sources[k]`` is the k-th kernel node's, in the order they were
    lowered: bodies right after the node holding them) into translation units of at most
    ``per_module`` kernels; set each node's ``module``. The set-condition kernels go into
    their own unit, compiled relocatable (``-rdc=true``) to be linked with libcudadevrt."""
    from dataclasses import replace

    kernels: list[tuple[tuple[int, ...], Any]] = []  # (path to the node, its source)
    order = iter(sources)

    def walk(ns: Sequence[DescNode], path: tuple[int, ...]) -> None:
        for i, n in enumerate(ns):
            if n.kind == "kernel":
                kernels.append(((*path, i), next(order)))
            for k, b in enumerate(n.bodies):
                walk(b.nodes, (*path, i, k))

    walk(nodes, ())
    plain = [(p, s) for p, s in kernels if not s.function_name.startswith(CONDITION_PREFIX)]
    cond = [(p, s) for p, s in kernels if s.function_name.startswith(CONDITION_PREFIX)]
    modules: list[ModuleDesc] = []
    where: dict[tuple[int, ...], int] = {}
    units = [plain[i : i + per_module] for i in range(0, len(plain), per_module)]
    if cond:
        unique = list({s.function_name: s for _, s in cond}.values())
        units.append([(p, None) for p, _ in cond] + [((), s) for s in unique])
    for chunk in units:
        rdc = any(s is None for _, s in chunk)
        srcs = [s for _, s in chunk if s is not None]
        unit = module_source(srcs)
        options = unit_options(unit.source, arch, exact=exact)
        if rdc:
            options = (*options, "--relocatable-device-code=true")
        key = cache_key(unit.source, options, arch)
        for path, _ in chunk:
            if path:
                where[path] = len(modules)
        modules.append(
            ModuleDesc(key, arch, options, unit.function_names, unit.source, unit.starts, rdc)
        )

    def assign(ns: Sequence[DescNode], path: tuple[int, ...]) -> list[DescNode]:
        out = []
        for i, n in enumerate(ns):
            if n.kind == "kernel":
                n = replace(n, module=where[(*path, i)])
            if n.bodies:
                n = replace(
                    n,
                    bodies=tuple(
                        BodyDesc(tuple(assign(b.nodes, (*path, i, k))), b.edges)
                        for k, b in enumerate(n.bodies)
                    ),
                )
            out.append(n)
        return out

    return assign(nodes, ()), tuple(modules)


def _event(step: PlanStep) -> int:
    if step.event is None:
        raise InvalidArgument(f"event step {step.index} ({step.name!r}) has no event index")
    return int(step.event)


def _reindex(node: DescNode, index: int) -> DescNode:
    from dataclasses import replace

    return replace(node, index=index)


def _lower_step(low: _Lowering, step: PlanStep, index: int, graph: Any = None) -> DescNode:
    rule = _STEP_RULES.get(step.kind)
    if rule is None:
        raise InvalidArgument(f"step {step.index} ({step.name!r}) has unknown kind {step.kind}")
    return rule(low, step, index, graph)


def _event_node(kind: str) -> Callable[..., DescNode]:
    def rule(low: _Lowering, step: PlanStep, index: int, graph: Any = None) -> DescNode:
        return DescNode(
            index, kind, step.name, step.index, int(step.stream), int(step.node), event=step.event
        )

    return rule


# One lowering rule per step kind (a table, not an if-chain).
# (Child graphs and conditionals expand to more than one node: _Lowering.expand.)
_STEP_RULES: dict[NodeKind, Callable[..., DescNode]] = {
    NodeKind.KernelLaunch: _Lowering.kernel,
    NodeKind.Memcpy: _Lowering.memcpy,
    NodeKind.Memset: _Lowering.memset,
    NodeKind.HostCallback: lambda low, s, i, g=None: DescNode(
        i, "host", s.name, s.index, int(s.stream), int(s.node), label=s.label
    ),
    NodeKind.Barrier: lambda low, s, i, g=None: DescNode(
        i, "empty", s.name, s.index, int(s.stream), int(s.node)
    ),
    NodeKind.EventRecord: _event_node("event_record"),
    NodeKind.EventWait: _event_node("event_wait"),
    NodeKind.MemAlloc: _Lowering.memory_node,
    NodeKind.MemFree: _Lowering.memory_node,
}


def iter_kernel_sources(plan: ExecutionPlan) -> Iterable[Any]:
    """The KernelSource of every kernel step of ``plan`` (for compile-everything checks)."""
    for step in plan.steps:
        if step.kind is NodeKind.KernelLaunch:
            yield ops.kernel_source(plan.graph, plan.graph.node(step.node))
