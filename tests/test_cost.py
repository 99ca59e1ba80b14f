"""Cost model: roofline invariants, per-kind rules, overrides."""

from __future__ import annotations

import dataclasses
import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir, cost
from oxiwork.builder import GraphWarning
from oxiwork.cost import DeviceProfile, kernel_work, node_costs, node_time
from oxiwork.error import GraphError
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.node import NodeKind
from oxiwork.ops.program import bind
from oxiwork.ops.table import REGISTRY, custom
from oxiwork.optimizer.fusion import fuse


def _copy_graph(size: int, direction: MemcpyDir):
    b = GraphBuilder()
    x = b.alloc_buffer("x", size)
    y = b.alloc_buffer("y", size)
    src = None if direction is MemcpyDir.HostToDevice else x
    dst = None if direction is MemcpyDir.DeviceToHost else y
    b.add_memcpy("c", direction, size, src=src, dst=dst)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


class TestProfile:
    def test_h200_defaults(self):
        p = DeviceProfile()
        assert p.hbm_bandwidth == 4.8e12
        assert p.peak_flops == 67e12
        assert p.host_bandwidth == 55e9
        assert p.launch_overhead_stream > p.launch_overhead_graph

    def test_frozen(self):
        with pytest.raises(dataclasses.FrozenInstanceError):
            DeviceProfile().hbm_bandwidth = 1.0  # type: ignore[misc]


class TestNodeTime:
    def test_every_kind_has_a_rule(self):
        b = GraphBuilder()
        r = b.add_event_record("r")
        b.add_event_wait("w", r)
        b.add_host_callback("cb")
        b.add_barrier()
        g = b.build()
        for n in g.nodes:
            assert node_time(g, n) >= 0

    def test_cost_override_wins(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 64)
        y = b.alloc_buffer("y", 64)
        b.add_kernel("relu", 1, 32).cost(0.25).inputs([x]).outputs([y]).finish()
        g = b.build()
        assert node_time(g, g.nodes[0]) == 0.25

    @settings(max_examples=50, deadline=None)
    @given(st.integers(1, 1 << 30), st.sampled_from(list(MemcpyDir)))
    def test_copies_scale_with_size(self, size, direction):
        size = size // 4 * 4 + 4
        small = _copy_graph(size, direction)
        big = _copy_graph(2 * size, direction)
        assert node_time(big, big.nodes[0]) > node_time(small, small.nodes[0])

    def test_h2d_slower_than_d2d(self):
        h = _copy_graph(1 << 24, MemcpyDir.HostToDevice)
        d = _copy_graph(1 << 24, MemcpyDir.DeviceToDevice)
        assert node_time(h, h.nodes[0]) > 10 * node_time(d, d.nodes[0])

    def test_roofline_is_max_of_compute_and_memory(self):
        g = transformer_block(1, tokens=512, d_model=512, d_ff=2048)
        p = DeviceProfile(min_kernel_time=0.0)
        for n in g.kernels():
            flops, nbytes = kernel_work(g, n)
            assert node_time(g, n, p) == pytest.approx(
                max(flops / p.peak_flops, nbytes / p.hbm_bandwidth)
            )
        mm = [n for n in g.kernels() if n.op == "matmul"]
        assert any(
            kernel_work(g, n)[0] / p.peak_flops > kernel_work(g, n)[1] / p.hbm_bandwidth for n in mm
        )

    def test_opaque_kernel_is_estimated(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4096)
        b.add_kernel("mystery", 4, 256).inputs([x]).outputs([x]).finish()
        g = b.build()
        assert kernel_work(g, g.nodes[0]) == (1024.0, 8192.0)  # read + write

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 10_000))
    def test_fusion_never_increases_total_kernel_time(self, seed):
        g = random_op_dag(seed, 20)
        fg = fuse(g).graph
        p = DeviceProfile(min_kernel_time=0.0)

        def total(graph):
            return sum(
                t
                for nid, t in node_costs(graph, p).items()
                if graph.node(nid).kind is NodeKind.KernelLaunch
            )

        assert total(fg) <= total(g) * (1 + 1e-9)

    def test_node_costs_keys(self):
        g = quick_start()
        assert set(node_costs(g)) == set(g.node_ids)


def _unmemoised_work(g, node):
    """kernel_work as it was before the memo: bind every time (the reference)."""
    moved = float(
        sum(
            g.buffer(b).size_bytes
            for b in (*dict.fromkeys(node.inputs), *dict.fromkeys(node.outputs))
        )
    )
    if node.fused is None and node.op is None:
        threads = node.config.total_threads if node.config is not None else 0
        return float(threads), moved
    try:
        bound = bind(g, node)
    except GraphError:
        return 0.0, moved
    flops = sum(s.op.op_cost(s.in_shapes, s.shape)[0] for s in bound.steps)
    if len(bound.steps) == 1:
        s = bound.steps[0]
        return float(flops), float(s.op.op_cost(s.in_shapes, s.shape)[1])
    return float(flops), moved


def _one_kernel(op: str, params=(), out_elems: int = 256):
    """A graph with one kernel ``op`` reading x (256 floats) into y, and that kernel."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", 4 * 256)
    y = b.alloc_buffer("y", 4 * out_elems)
    b.add_kernel(op, 1, 256).op(op).inputs([x]).outputs([y]).finish()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        g = b.build()
    return g, g.nodes[0].replace(params=tuple(params))


class TestWorkMemo:
    """kernel_work memoises bind's answer across graphs; it must never change a result."""

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 10_000), st.booleans())
    def test_memo_matches_bind_every_time(self, seed, cold):
        if cold:
            cost._WORK.clear()
        g = random_op_dag(seed, 30)
        for graph in (g, fuse(g).graph):
            for n in graph.kernels():
                assert kernel_work(graph, n) == _unmemoised_work(graph, n)
                assert kernel_work(graph, n) == _unmemoised_work(graph, n)  # now a hit

    def test_replacing_an_op_is_seen(self):
        try:
            custom("memo_probe", expr="({0})", reference=lambda xs: xs[0], flops_per_element=1)
            g, n = _one_kernel("memo_probe")
            assert kernel_work(g, n)[0] == 256.0
            custom(
                "memo_probe",
                expr="({0})",
                reference=lambda xs: xs[0],
                flops_per_element=3,
                replace=True,
            )
            assert kernel_work(g, n)[0] == 768.0
            REGISTRY.pop("memo_probe")
            assert kernel_work(g, n) == (0.0, 2048.0)  # unregistered: bind fails
        finally:
            REGISTRY.pop("memo_probe", None)

    def test_equal_but_different_params_are_not_confused(self):
        g, one = _one_kernel("scale", [("alpha", 1)])
        assert kernel_work(g, one)[0] == 256.0
        # True == 1, but bind rejects a bool parameter
        _, true = _one_kernel("scale", [("alpha", True)])
        assert kernel_work(g, true) == _unmemoised_work(g, true) == (0.0, 2048.0)
        # -0.0 == 0.0, but a shape rule may read the sign: here it halves the output
        try:
            custom(
                "signed_probe",
                expr="({0} * {a})",
                reference=lambda xs, a: xs[0] * a,
                params={"a": 0.0},
                shape=lambda ins, p: (ins[0][0] // 2,) if math.copysign(1, p["a"]) < 0 else ins[0],
            )
            g, pos = _one_kernel("signed_probe", [("a", 0.0)])
            _, neg = _one_kernel("signed_probe", [("a", -0.0)])
            assert kernel_work(g, pos)[0] == 256.0
            assert kernel_work(g, neg) == _unmemoised_work(g, neg) == (0.0, 2048.0)
        finally:
            REGISTRY.pop("signed_probe", None)

    def test_memo_is_bounded(self, monkeypatch):
        monkeypatch.setattr(cost, "_WORK_MAX", 4)
        cost._WORK.clear()
        for k in range(10):
            g, n = _one_kernel("scale", [("alpha", float(k))])  # a new key each time
            assert kernel_work(g, n) == _unmemoised_work(g, n)
            assert len(cost._WORK) == min(k + 1, 4)
