"""Cost model: roofline invariants, per-kind rules, overrides."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.cost import DeviceProfile, kernel_work, node_costs, node_time
from oxiwork.error import GraphWarning
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.node import NodeKind
from oxiwork.ops.program import buffer_specs, signature, signature_key
from oxiwork.optimizer.fusion import fuse
from tests.test_views import view_graphs


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

    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 10_000))
    def test_costed_once_per_signature_equals_each_on_its_own(self, seed):
        # node_costs costs one kernel per signature; every kernel's own node_time agrees
        g = fuse(random_op_dag(seed, 40)).graph
        costs = node_costs(g)
        assert costs == {n.id: node_time(g, n) for n in g.nodes}

    @settings(max_examples=30, deadline=None)
    @given(
        st.one_of(
            st.integers(0, 10_000).map(lambda s: fuse(random_op_dag(s, 30)).graph), view_graphs()
        )
    )
    def test_signature_from_buffer_specs_is_the_signature(self, g):
        # node_costs takes signatures over the graph's cached buffer specs
        specs = buffer_specs(g)
        assert specs is buffer_specs(g)
        for n in g.nodes:
            assert signature(g, n, specs) == signature(g, n)
            if signature(g, n) is not None:  # the key node_costs looks up, unchecked
                assert signature_key(n, specs.__getitem__) == signature(g, n)

    def test_node_costs_keys(self):
        g = quick_start()
        assert set(node_costs(g)) == set(g.node_ids)

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 10_000), st.integers(1, 4))
    def test_costs_after_passes_equal_costs_of_a_fresh_copy(self, seed, cap):
        # fusion and the stream pass hand their bound programs on to the graphs they make;
        # a copy of each graph (no cache) must get exactly the same costs
        from oxiwork.optimizer.stream import assign_streams

        fg = fuse(random_op_dag(seed, 30)).graph
        sg = assign_streams(fg, max_streams=cap).graph
        for graph in (fg, sg):
            assert node_costs(graph) == node_costs(graph.with_changes())
