"""Cost model: how long each node takes on a device, by a roofline.

A kernel's time is ``max(flops / peak_flops, bytes / hbm_bandwidth)`` (Williams, Waterman
and Patterson, "Roofline: An Insightful Visual Performance Model for Multicore
Architectures", CACM 52(4), 2009), with flops and bytes from the op table: a fused kernel
moves only its external inputs and outputs, which is exactly why fusion pays off. Copies
run at the link bandwidth, memsets at HBM bandwidth, and synchronisation nodes cost a
small fixed time. A node's explicit ``cost`` (seconds) overrides the model.

Launch overheads are *not* part of :func:`node_time`: they depend on how the plan is
launched (stream launches vs. one CUDA graph), so executors add
``launch_overhead_stream`` or ``launch_overhead_graph`` per kernel themselves.

Example
-------
>>> from oxiwork.examples import quick_start
>>> g = quick_start()
>>> costs = node_costs(g)
>>> costs[g.nodes[0].id] > costs[g.nodes[1].id]   # the PCIe upload beats the relu
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from oxiwork.analysis import paused_gc, topo
from oxiwork.error import GraphError
from oxiwork.node import GraphNode, MemcpyDir, NodeId, NodeKind
from oxiwork.ops.program import bind, buffer_specs, signature_key

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = [
    "DeviceProfile",
    "cached_costs",
    "kernel_work",
    "node_costs",
    "node_time",
    "restreamed_costs",
]


@dataclass(frozen=True, slots=True)
class DeviceProfile:
    """Throughputs and fixed costs of one GPU; the defaults describe an NVIDIA H200 SXM.

    Sources: HBM bandwidth 4.8 TB/s and FP32 (non-tensor) 67 TFLOP/s are from NVIDIA's
    H200 datasheet (2024). The host link (PCIe Gen5 x16, 64 GB/s per direction
    theoretical) is taken as 55 GB/s achieved: an assumption from typical pinned-memory
    copy benchmarks. Peer-to-peer copies use NVLink 4 at 450 GB/s per direction (900 GB/s
    total per the datasheet). Launch overheads (~4 µs per stream launch, ~1 µs per node of
    an instantiated CUDA graph) and the event/callback/barrier costs are assumptions in
    line with NVIDIA's "Getting Started with CUDA Graphs" blog post (2019) measurements;
    calibrate them with the bench scripts on real hardware.

    >>> DeviceProfile().hbm_bandwidth
    4800000000000.0
    """

    name: str = "NVIDIA H200 (defaults)"
    hbm_bandwidth: float = 4.8e12  # bytes/s
    peak_flops: float = 67e12  # fp32 FLOP/s, no tensor cores
    host_bandwidth: float = 55e9  # bytes/s, H2D and D2H (assumption, see docstring)
    peer_bandwidth: float = 450e9  # bytes/s, NVLink one direction
    launch_overhead_stream: float = 4e-6  # s per kernel launched on a stream
    launch_overhead_graph: float = 1e-6  # s per node of an instantiated CUDA graph
    copy_latency: float = 2e-6  # s fixed cost of any memcpy (DMA setup)
    event_time: float = 0.5e-6  # s per event record / wait
    host_callback_time: float = 5e-6  # s per host callback round trip
    barrier_time: float = 0.0  # s; a barrier only orders
    min_kernel_time: float = 1e-6  # s; even an empty kernel occupies the GPU this long


def kernel_work(graph: ComputeGraph, node: GraphNode) -> tuple[float, float]:
    """``(flops, bytes)`` a kernel performs.

    Op and fused kernels sum their steps' flops and move their external inputs and
    outputs once (intermediates of a fused kernel stay in registers). Opaque kernels are
    estimated as reading and writing their buffers once, one flop per thread. An op's
    cost counts bytes as float32 elements; a single-op kernel's bytes are rescaled by
    its buffers' real bytes per element (a float16 kernel moves half the bytes).

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> kernel_work(g, g.nodes[1])  # relu on 1024 floats
    (1024.0, 8192.0)
    """
    moved = float(
        sum(
            graph.buffer(b).size_bytes
            for b in (*dict.fromkeys(node.inputs), *dict.fromkeys(node.outputs))
        )
    )
    if _opaque(node):
        threads = node.config.total_threads if node.config is not None else 0
        return float(threads), moved
    try:
        bound = bind(graph, node)
    except GraphError:
        # cost estimates must not fail on a kernel the evaluator would reject
        return 0.0, moved
    flops = sum(st.op.op_cost(st.in_shapes, st.shape)[0] for st in bound.steps)
    if len(bound.steps) == 1:
        st = bound.steps[0]
        nbytes = st.op.op_cost(st.in_shapes, st.shape)[1]
        as_f32 = 4.0 * sum(
            graph.buffer(b).num_elements
            for b in (*dict.fromkeys(node.inputs), *dict.fromkeys(node.outputs))
        )
        if as_f32 and as_f32 != moved:
            nbytes *= moved / as_f32
        return float(flops), float(nbytes)
    return float(flops), moved


def _kernel_time(graph: ComputeGraph, node: GraphNode, p: DeviceProfile) -> float:
    flops, nbytes = kernel_work(graph, node)
    return max(flops / p.peak_flops, nbytes / p.hbm_bandwidth, p.min_kernel_time)


def _memcpy_time(graph: ComputeGraph, node: GraphNode, p: DeviceProfile) -> float:
    return p.copy_latency + node.size_bytes / _COPY_BANDWIDTH[node.memcpy_dir](p)


def _memset_time(graph: ComputeGraph, node: GraphNode, p: DeviceProfile) -> float:
    return max(node.size_bytes / p.hbm_bandwidth, p.min_kernel_time)


def _body_time(body: ComputeGraph, p: DeviceProfile) -> float:
    """A body graph runs as a graph: its time is its critical path under this model."""
    if not body.nodes:
        return 0.0
    costs = {n.id: node_time(body, n, p) for n in body.nodes}
    return float(topo.analyze(body, costs).makespan)


def _child_time(graph: ComputeGraph, node: GraphNode, p: DeviceProfile) -> float:
    return _body_time(node.bodies[0], p)


def _conditional_time(graph: ComputeGraph, node: GraphNode, p: DeviceProfile) -> float:
    # The kernel that sets the handle from the condition buffer, then the longest body
    # once: the model cannot know the condition's value, nor a WHILE's iteration count,
    # so this is the cost of one pass through the worst body.
    return p.min_kernel_time + max((_body_time(b, p) for b in node.bodies), default=0.0)


# Bandwidth per copy direction: DeviceToDevice reads and writes HBM, so half its bandwidth.
_COPY_BANDWIDTH: dict[MemcpyDir | None, Callable[[DeviceProfile], float]] = {
    MemcpyDir.HostToDevice: lambda p: p.host_bandwidth,
    MemcpyDir.DeviceToHost: lambda p: p.host_bandwidth,
    MemcpyDir.DeviceToDevice: lambda p: p.hbm_bandwidth / 2,
    MemcpyDir.PeerToPeer: lambda p: p.peer_bandwidth,
    None: lambda p: p.host_bandwidth,
}

# One rule per node kind (no if-chains): seconds the node occupies its stream.
_RULES: dict[NodeKind, Callable[[ComputeGraph, GraphNode, DeviceProfile], float]] = {
    NodeKind.KernelLaunch: _kernel_time,
    NodeKind.Memcpy: _memcpy_time,
    NodeKind.Memset: _memset_time,
    NodeKind.EventRecord: lambda g, n, p: p.event_time,
    NodeKind.EventWait: lambda g, n, p: p.event_time,
    NodeKind.HostCallback: lambda g, n, p: p.host_callback_time,
    NodeKind.Barrier: lambda g, n, p: p.barrier_time,
    NodeKind.ChildGraph: _child_time,
    NodeKind.Conditional: _conditional_time,
    # Graph-owned memory is reserved when the graph is instantiated; on a launch the
    # alloc/free nodes only order, like a barrier.
    NodeKind.MemAlloc: lambda g, n, p: p.barrier_time,
    NodeKind.MemFree: lambda g, n, p: p.barrier_time,
}


def node_time(graph: ComputeGraph, node: GraphNode, profile: DeviceProfile | None = None) -> float:
    """Estimated seconds ``node`` of ``graph`` runs (launch overhead excluded).

    ``node.cost`` (seconds), when set, wins over the model.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> t = node_time(g, g.nodes[0])   # 4 KiB upload: latency + 4096 B / 55 GB/s
    >>> round(t * 1e6, 3)
    2.074
    """
    if node.cost is not None:
        return float(node.cost)
    t = _RULES[node.kind](graph, node, profile or DeviceProfile())
    return t if math.isfinite(t) else 0.0


def node_costs(graph: ComputeGraph, profile: DeviceProfile | None = None) -> dict[NodeId, float]:
    """:func:`node_time` of every node, keyed by id (feed it to ``topo.analyze(costs=)``).

    >>> from oxiwork.examples import quick_start
    >>> len(node_costs(quick_start()))
    4
    """
    p = profile or DeviceProfile()
    # A graph is immutable, so its costs under one (frozen, hashable) profile never change;
    # the stream pass, the plan, the timeline and the widget each ask for them.
    key = ("cost.node_costs", p)
    costs = graph._cache.get(key)
    if costs is None:
        with paused_gc():  # binding kernels allocates many acyclic, cached objects
            costs = _costs(graph, p)
        graph._cache[key] = costs
    return dict(costs)


def cached_costs(graph: ComputeGraph) -> Mapping[NodeId, float] | None:
    """:func:`node_costs` of ``graph`` under the default profile if they are cached (read
    only, not copied), else None: for passes that may reuse them but must not pay for them.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> cached_costs(g) is None, len(node_costs(g)), len(cached_costs(g))
    (True, 4, 4)
    """
    costs = graph._cache.get(("cost.node_costs", DeviceProfile()))
    return None if costs is None else MappingProxyType(costs)


def restreamed_costs(src: ComputeGraph, dst: ComputeGraph) -> None:
    """Give ``dst`` the cached costs of ``src`` (default profile), costing only its new nodes.

    For a ``dst`` that is ``src`` with nodes moved to streams and nodes added (the stream
    pass: events and stream-order edges): a node's modelled time does not depend on its
    stream or its edges, so every node id of ``src`` costs the same in ``dst``. Does
    nothing when ``src`` has no cached costs. The memory pass then orders ``dst``'s nodes
    without costing 100k kernels a second time.

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.optimizer.stream import assign_streams
    >>> g = quick_start()
    >>> h = assign_streams(g).graph   # one stream: the same nodes, new objects
    >>> restreamed_costs(g, h)
    >>> node_costs(h) == node_costs(h.with_changes(edges=h.edges))
    True
    """
    p = DeviceProfile()
    key = ("cost.node_costs", p)
    base = src._cache.get(key)
    if base is None or key in dst._cache:
        return
    costs = dict(base)
    # only the new nodes are costed, in id order (dst's node order), found by one set
    # difference instead of a look-up per node
    for nid in sorted(set(dst.dense().ids).difference(base)):
        costs[nid] = node_time(dst, dst.node(nid), p)
    if len(costs) == len(dst.nodes):  # no node of src was dropped
        dst._cache[key] = costs


def _costs(graph: ComputeGraph, p: DeviceProfile) -> dict[NodeId, float]:
    # A kernel's modelled time depends only on what binding reads (its signature: ops,
    # parameters, buffer shapes and dtypes), so kernels sharing one (the layers of a
    # model, the blocks of a synthetic graph) are costed, and bound, once. The key is
    # hashed once, by the look-up (signature() would hash it first to check it can be).
    memo: dict[Hashable, float] = {}
    costs: dict[NodeId, float] = {}
    spec_of = buffer_specs(graph).__getitem__
    kernel = NodeKind.KernelLaunch
    for n in graph.nodes:
        if n.cost is None and n.kind is kernel and not _opaque(n):
            key = signature_key(n, spec_of)
            try:
                t = memo.get(key)
            except TypeError:  # an unhashable parameter: costed on its own
                t = node_time(graph, n, p)
            else:
                if t is None:
                    t = memo[key] = node_time(graph, n, p)
            costs[n.id] = t
            continue
        costs[n.id] = node_time(graph, n, p)
    return costs


def _opaque(node: GraphNode) -> bool:
    """A kernel without a program: costed from its launch configuration, never bound."""
    return node.fused is None and node.op is None
