"""Test helpers for the GPU backend: a fake ``cuda.bindings.driver`` that records calls,
and small plans built by hand (independent of the plan builder, so golden files only
change when the lowering does).

The fake returns ``(CUresult, *values)`` tuples like the real bindings, tracks which
resources are alive (so leaks and teardown order are checkable), hands out real host
memory for ``cuMemAllocHost`` (the executors write inputs there through ctypes), and can
be told to fail a given call with an error code or an exception.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from oxiwork.builder import GraphBuilder
from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep
from oxiwork.graph import ComputeGraph
from oxiwork.node import GraphNode, MemcpyDir, NodeId, NodeKind, StreamId


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910


class CUmemorytype(enum.IntEnum):
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2


class CUdevice_attribute(enum.IntEnum):
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CUstream_flags(enum.IntEnum):
    CU_STREAM_DEFAULT = 0
    CU_STREAM_NON_BLOCKING = 1


class CUevent_flags(enum.IntEnum):
    CU_EVENT_DEFAULT = 0
    CU_EVENT_DISABLE_TIMING = 2


class CUfunction_attribute(enum.IntEnum):
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CUgraphDebugDot_flags(enum.IntEnum):
    CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE = 1


class DynamicLibNotFoundError(RuntimeError):
    """Named like cuda.pathfinder's: the driver layer matches it by class name."""


@dataclass(frozen=True)
class Handle:
    kind: str
    number: int

    def __int__(self) -> int:
        return 0x7F0000000000 + self.number * 0x1000000  # distinct, 16 MiB apart


# create call -> (resource kind, destroy call)
_CREATES = {
    "cuDevicePrimaryCtxRetain": "context",
    "cuMemAlloc": "device_memory",
    "cuMemAllocHost": "host_memory",
    "cuModuleLoadData": "module",
    "cuStreamCreate": "stream",
    "cuEventCreate": "event",
    "cuGraphCreate": "graph",
    "cuGraphInstantiate": "exec",
}
_DESTROYS = {
    "cuDevicePrimaryCtxRelease": "context",
    "cuMemFree": "device_memory",
    "cuMemFreeHost": "host_memory",
    "cuModuleUnload": "module",
    "cuStreamDestroy": "stream",
    "cuEventDestroy": "event",
    "cuGraphDestroy": "graph",
    "cuGraphExecDestroy": "exec",
}


class FakeDriver:
    """A stand-in for ``cuda.bindings.driver``.

    ``fail={"cuGraphInstantiate": CUresult.CUDA_ERROR_OUT_OF_MEMORY}`` makes that call
    return the code; an exception instance is raised instead. ``fail_at=k`` fails the
    k-th call (0-based) whatever it is.
    """

    CUresult = CUresult
    CUmemorytype = CUmemorytype
    CUdevice_attribute = CUdevice_attribute
    CUstream_flags = CUstream_flags
    CUevent_flags = CUevent_flags
    CUfunction_attribute = CUfunction_attribute
    CUgraphDebugDot_flags = CUgraphDebugDot_flags

    def __init__(
        self,
        *,
        devices: int = 1,
        cc: tuple[int, int] = (9, 0),
        fail: dict[str, Any] | None = None,
        fail_at: int | None = None,
        update_ok: bool = True,
        free_bytes: int = 100 << 30,
    ) -> None:
        self.devices = devices
        self.cc = cc
        self.fail = dict(fail or {})
        self.fail_at = fail_at
        self.update_ok = update_ok
        self.free_bytes = free_bytes
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.live: dict[Any, str] = {}
        self.graph_nodes: dict[Any, list[tuple[str, Any, list[Any], Any]]] = {}
        self.destroyed: list[str] = []
        self._ids = itertools.count(1)
        self._host: dict[int, Any] = {}

    # structs are plain namespaces: the executor only sets attributes on them
    def CUDA_KERNEL_NODE_PARAMS(self) -> SimpleNamespace:
        return SimpleNamespace(_struct="CUDA_KERNEL_NODE_PARAMS")

    def CUDA_MEMCPY3D(self) -> SimpleNamespace:
        return SimpleNamespace(_struct="CUDA_MEMCPY3D")

    def CUDA_MEMSET_NODE_PARAMS(self) -> SimpleNamespace:
        return SimpleNamespace(_struct="CUDA_MEMSET_NODE_PARAMS")

    def CUDA_HOST_NODE_PARAMS(self) -> SimpleNamespace:
        return SimpleNamespace(_struct="CUDA_HOST_NODE_PARAMS")

    def names(self) -> list[str]:
        """Names of the calls made, in order."""
        return [c for c, _ in self.calls]

    def live_kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for kind in self.live.values():
            out[kind] = out.get(kind, 0) + 1
        return out

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("cu"):
            raise AttributeError(name)

        def call(*args: Any) -> tuple[Any, ...]:
            index = len(self.calls)
            self.calls.append((name, args))
            failure = self.fail.get(name)
            if failure is None and self.fail_at is not None and index == self.fail_at:
                failure = CUresult.CUDA_ERROR_LAUNCH_FAILED
            if isinstance(failure, BaseException):
                raise failure
            if failure is not None:
                return (failure, None)
            return (CUresult.CUDA_SUCCESS, *self._result(name, args))

        return call

    def _new(self, kind: str) -> Handle:
        h = Handle(kind, next(self._ids))
        self.live[h] = kind
        return h

    def _result(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if name == "cuInit":
            return ()
        if name == "cuDeviceGetCount":
            return (self.devices,)
        if name == "cuDeviceGet":
            return (Handle("device", args[0]),)
        if name == "cuDeviceGetAttribute":
            major = args[0] == CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
            return (self.cc[0] if major else self.cc[1],)
        if name == "cuDeviceGetName":
            return (b"Fake GPU\x00\x00",)
        if name == "cuMemGetInfo":
            return (self.free_bytes, 141 << 30)
        if name == "cuEventElapsedTime":
            return (0.5,)
        if name == "cuMemAllocHost":
            buf = (ctypes.c_ubyte * max(1, args[0]))()
            addr = ctypes.addressof(buf)
            self._host[addr] = buf
            self.live[addr] = "host_memory"
            return (addr,)
        if name == "cuMemAlloc":
            h = self._new("device_memory")
            return (h,)
        if name in _CREATES:
            return (self._new(_CREATES[name]),)
        if name in _DESTROYS:
            key = args[0] if name != "cuDevicePrimaryCtxRelease" else self._context()
            if key not in self.live:
                raise AssertionError(f"{name} of {key!r}, which is not alive")
            del self.live[key]
            self.destroyed.append(_DESTROYS[name])
            if name == "cuMemFreeHost":
                self._host.pop(key, None)
            return ()
        if name == "cuModuleGetFunction":
            return (Handle("function", hash(args[1]) % 10_000),)
        if name.startswith("cuGraphAdd"):
            graph, deps, ndeps, *rest = args
            assert ndeps == len(deps), f"{name}: numDependencies {ndeps} != {len(deps)}"
            for d in deps:
                assert d.kind == "node", f"{name}: dependency {d!r} is not a graph node"
            node = Handle("node", next(self._ids))
            self.graph_nodes.setdefault(graph, []).append((name, node, list(deps), rest))
            return (node,)
        if name == "cuGraphExecUpdate":
            return (SimpleNamespace(result=0 if self.update_ok else 2),)
        return ()

    def _context(self) -> Any:
        for h, kind in self.live.items():
            if kind == "context":
                return h
        return None


# ---------------------------------------------------------------------------- plans
def _arg(graph: ComputeGraph, bid: Any, offsets: dict[Any, int]) -> BufferArg:
    b = graph.buffer(bid)
    off = None if b.external else offsets[b.id]
    return BufferArg(b.id, b.name, off, b.size_bytes, b.dtype, b.array_shape, b.external)


def simple_plan(graph: ComputeGraph, streams: dict[str, int] | None = None) -> ExecutionPlan:
    """A plan by hand: topological order, every non-external buffer at its own 256-aligned
    offset, steps on the streams named in ``streams`` (node name -> stream, default 0);
    a node with a successor on another stream records an event right after it, which the
    successor's stream waits for just before the successor."""
    streams = streams or {}
    offsets: dict[Any, int] = {}
    pool = 0
    for b in graph.buffers:
        if not b.external:
            offsets[b.id] = pool
            pool += -(-b.size_bytes // 256) * 256
    steps: list[PlanStep] = []
    index_of: dict[NodeId, int] = {}
    position: dict[int, int] = {}
    events = 0
    next_id = int(graph.next_node_id())

    def add(**kw: Any) -> int:
        s = int(kw["stream"])
        step = PlanStep(index=len(steps), position=position.get(s, 0), **kw)
        position[s] = position.get(s, 0) + 1
        steps.append(step)
        return step.index

    recorded: dict[NodeId, int] = {}  # node -> event recorded right after it
    # plan.graph holds what the steps run: streams, placed buffers and the event nodes.
    record_node: dict[NodeId, NodeId] = {}
    extra: list[GraphNode] = []
    extra_edges: list[tuple[NodeId, NodeId]] = []
    stream_of = {n.id: StreamId(streams.get(n.name, 0)) for n in graph.nodes}
    for nid in graph.topological_order():
        n = graph.node(nid)
        s = stream_of[nid]
        for p in graph.predecessors(nid):
            if stream_of[p] != s:
                add(kind=NodeKind.EventWait, node=NodeId(next_id), name=f"wait_{recorded[p]}",
                    stream=s, fused_nodes=(), event=recorded[p])  # fmt: skip
                rec = record_node[p]
                extra.append(GraphNode(NodeId(next_id), f"wait_{recorded[p]}",
                                       NodeKind.EventWait, stream=s, event=rec))  # fmt: skip
                extra_edges += [(rec, NodeId(next_id)), (NodeId(next_id), nid)]
                next_id += 1
        index_of[nid] = add(
            kind=n.kind, node=nid, name=n.name, stream=s, fused_nodes=(nid,),
            function_name=n.function_name if n.is_kernel else None, config=n.config,
            inputs=tuple(_arg(graph, b, offsets) for b in n.inputs),
            outputs=tuple(_arg(graph, b, offsets) for b in n.outputs),
            size_bytes=n.size_bytes, memcpy_dir=n.memcpy_dir, memset_value=n.memset_value,
            label=n.label,
            depends_on=tuple(index_of[p] for p in graph.predecessors(nid)),
        )  # fmt: skip
        if any(stream_of[c] != s for c in graph.successors(nid)):
            add(kind=NodeKind.EventRecord, node=NodeId(next_id), name=f"record_{events}",
                stream=s, fused_nodes=(), event=events)  # fmt: skip
            extra.append(GraphNode(NodeId(next_id), f"record_{events}", NodeKind.EventRecord,
                                   stream=s))  # fmt: skip
            extra_edges.append((nid, NodeId(next_id)))
            record_node[nid] = NodeId(next_id)
            recorded[nid] = events
            next_id += 1
            events += 1
    planned = graph.with_changes(
        nodes=[*(n.replace(stream=stream_of[n.id]) for n in graph.nodes), *extra],
        buffers=[replace(b, offset=offsets.get(b.id)) for b in graph.buffers],
        edges=[*graph.edges, *extra_edges],
    )
    return ExecutionPlan(
        steps=tuple(steps),
        num_streams=max((int(st.stream) for st in steps), default=0) + 1,
        pool_bytes=pool,
        kernel_count_original=len(graph.kernels()),
        kernel_count_fused=len(graph.kernels()),
        event_count=events,
        graph=planned,
        original=graph,
    )


def diamond_graph() -> ComputeGraph:
    """upload -> relu -> (scale | neg) -> add -> download, 1024 floats."""
    b = GraphBuilder()
    x, left, r1, r2, y = (b.alloc_buffer(n, 4096) for n in ("x", "left", "r1", "r2", "y"))
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096, dst=x)
    k0 = b.add_kernel("relu", 4, 256).inputs([x]).outputs([left]).finish()
    k1 = b.add_kernel("scale", 4, 256).params(alpha=3.0).inputs([left]).outputs([r1]).finish()
    k2 = b.add_kernel("neg", 4, 256).inputs([left]).outputs([r2]).finish()
    k3 = b.add_kernel("add", 4, 256).inputs([r1, r2]).outputs([y]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096, src=y)
    b.chain([up, k0, k1, k3, down])
    b.chain([k0, k2, k3])
    return b.build()


def diamond_plan() -> ExecutionPlan:
    """The diamond on two streams: ``neg`` runs on stream 1."""
    return simple_plan(diamond_graph(), {"neg": 1})


def build_plan(graph: ComputeGraph, **options: Any) -> ExecutionPlan:
    """``ExecutionPlan.build`` if the plan builder is there, else :func:`simple_plan`
    (after fusion when ``fusion=True``)."""
    build = getattr(ExecutionPlan, "build", None)
    if build is not None:
        try:
            return build(graph, **options)
        except NotImplementedError:
            pass
    if options.get("fusion", True):
        from oxiwork.optimizer.fusion import fuse

        graph = fuse(graph).graph
    return simple_plan(graph)


def read_kernel_params(kernel_params: int, ctypes_types: list[Any]) -> list[Any]:
    """Read a ``void**`` argument array back: value k through pointer k as its ctype."""
    values = []
    for k, ct in enumerate(ctypes_types):
        ptr = ctypes.c_void_p.from_address(kernel_params + k * ctypes.sizeof(ctypes.c_void_p))
        values.append(ct.from_address(ptr.value).value)
    return values


def as_float32(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def kitchen_sink_plan() -> ExecutionPlan:
    """Every step kind the backends lower: an external input, an upload, a memset, kernels
    on two streams (so events), a device copy, a host callback and a download."""
    b = GraphBuilder()
    w = b.alloc_external_buffer("w", 4096)
    x, y, z, c = (b.alloc_buffer(n, 4096) for n in ("x", "y", "z", "c"))
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096, dst=x)
    ms = b.add_memset("zero", 4096, 0, dst=z)
    k0 = b.add_kernel("add", 4, 256).inputs([x, w]).outputs([y]).finish()
    k1 = b.add_kernel("relu", 4, 256).inputs([y]).outputs([z]).finish()
    cp = b.add_memcpy("d2d", MemcpyDir.DeviceToDevice, 4096, src=z, dst=c)
    cb = b.add_host_callback("tick", lambda: None)
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096, src=c)
    b.chain([up, k0, k1, cp, cb, down])
    b.chain([ms, k1])
    return simple_plan(b.build(), {"zero": 1, "relu": 1})
