"""Memory alloc/free nodes (graph-owned memory): verify's lifetime rules, liveness bounded
by the nodes, memory plans that reuse the bytes after a free, values unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from oxiwork import ComputeGraph, ExecutionPlan, GraphBuilder, MemcpyDir, NodeKind
from oxiwork.analysis import liveness
from oxiwork.error import InvalidArgument, InvalidLifetime
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.reference import evaluate


def scratch_chain(n: int, size: int = 4096, *, ordered: bool = True) -> tuple[GraphBuilder, list]:
    """``n`` stages, each with its own graph-owned scratch buffer allocated, used and freed.

    With ``ordered``, the nodes are chained in creation order, so each free comes before
    the next alloc, which is what CUDA needs to give the next allocation the freed
    addresses.
    """
    b = GraphBuilder()
    x = b.alloc_buffer("x", size)
    ids = [b.add_memcpy("up", MemcpyDir.HostToDevice, size, dst=x)]
    scratch = []
    for i in range(n):
        t = b.alloc_buffer(f"t{i}", size)
        ids.append(b.add_mem_alloc(f"alloc t{i}", t))
        ids.append(b.add_kernel("tanh", 1, 256).inputs([x]).outputs([t]).finish())
        ids.append(b.add_kernel("add", 1, 256).inputs([x, t]).outputs([x]).finish())
        ids.append(b.add_mem_free(f"free t{i}", t))
        scratch.append(t)
    ids.append(b.add_memcpy("down", MemcpyDir.DeviceToHost, size, src=x))
    if ordered:
        b.chain(ids)
    return b, scratch


class TestVerify:
    def test_raises_use_before_alloc(self):
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64)
        b.add_memset("early", 64, 0, dst=t)
        b.add_mem_alloc("alloc", t)
        with pytest.raises(InvalidLifetime, match=r"used by 'early'.*before its alloc node") as e:
            b.build()
        assert (e.value.buffer, e.value.node) == ("t", 0)

    def test_raises_use_after_free(self):
        b = GraphBuilder()
        t, y = b.alloc_buffer("t", 64), b.alloc_buffer("y", 64)
        b.add_mem_alloc("alloc", t)
        b.add_memset("set", 64, 0, dst=t)
        b.add_mem_free("free", t)
        b.add_kernel("neg", 1, 16).inputs([t]).outputs([y]).finish()
        with pytest.raises(InvalidLifetime, match=r"'neg'.*after its free node 'free'.*use after"):
            b.build()

    def test_raises_double_free(self):
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64)
        b.add_mem_alloc("alloc", t)
        b.add_mem_free("free", t)
        b.add_mem_free("free again", t)
        with pytest.raises(InvalidLifetime, match=r"freed twice.*double free"):
            b.build()

    def test_raises_double_alloc(self):
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64)
        b.add_mem_alloc("a1", t)
        b.add_mem_alloc("a2", t)
        with pytest.raises(InvalidLifetime, match="allocated twice"):
            b.build()

    def test_raises_free_without_alloc(self):
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64)
        b.add_memset("set", 64, 0, dst=t)
        b.add_mem_free("free", t)
        with pytest.raises(InvalidLifetime, match="which no alloc node of this graph allocates"):
            b.build()

    def test_raises_external_buffer(self):
        b = GraphBuilder()
        e = b.alloc_external_buffer("e", 64)
        with pytest.raises(InvalidArgument, match="'e' is external"):
            b.add_mem_alloc("alloc", e)

    def test_raises_memory_node_with_two_buffers(self):
        b, (_t, *_) = scratch_chain(1)
        g = b.build()
        bad = [
            n.replace(outputs=(*n.outputs, g.buffer_by_name("x").id))
            if n.kind is NodeKind.MemAlloc
            else n
            for n in g.nodes
        ]
        with pytest.raises(InvalidArgument, match="names exactly one buffer"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()

    def test_edges_follow_program_order(self):
        b, (t,) = scratch_chain(1)
        g = b.build()
        alloc = next(n.id for n in g.nodes if n.kind is NodeKind.MemAlloc)
        free = next(n.id for n in g.nodes if n.kind is NodeKind.MemFree)
        users = [u for u in (*g.readers(t), *g.writers(t)) if u not in (alloc, free)]
        nx = pytest.importorskip("networkx")
        dg = g.to_networkx()
        assert users and all(nx.has_path(dg, alloc, u) and nx.has_path(dg, u, free) for u in users)
        assert ComputeGraph.from_json(g.to_json()) == g


class TestLifetimes:
    @pytest.mark.parametrize("n", [1, 3, 6])
    def test_liveness_is_bounded_by_alloc_and_free(self, n):
        b, scratch = scratch_chain(n)
        g = b.build()
        order = g.topological_order()
        info = liveness.analyze(g)
        for t in scratch:
            start, end = info.intervals[t]
            assert g.node(order[start]).kind is NodeKind.MemAlloc
            assert g.node(order[end - 1]).kind is NodeKind.MemFree
            assert g.node(order[start]).outputs == (t,) == g.node(order[end - 1]).outputs

    @pytest.mark.parametrize("streams", [1, 2, 4])
    def test_freed_bytes_are_reused_and_values_unchanged(self, streams):
        n, size = 5, 4096
        b, scratch = scratch_chain(n, size)
        g = b.build()
        plan = ExecutionPlan.build(g, max_streams=streams)
        # each free happens before the next alloc, so every scratch buffer may take the
        # bytes the one before freed: x and one scratch buffer's worth
        assert plan.pool_bytes == 2 * size == plan.memory.lower_bound
        assert len({plan.graph.buffer(t).offset for t in scratch}) == 1
        x = np.random.default_rng(1).standard_normal(size // 4).astype(np.float32)
        got = SequentialExecutor(plan).run({"x": x}).outputs["x"]
        np.testing.assert_allclose(got, evaluate(g, {"x": x})["x"], rtol=1e-6)
        # the reference computed the same thing without the memory nodes
        flat = x.copy()
        for _ in range(n):
            flat = flat + np.tanh(flat)
        np.testing.assert_allclose(got, flat, rtol=1e-5)

    def test_alloc_without_free_lives_to_the_end(self):
        b = GraphBuilder()
        t, y = b.alloc_buffer("t", 64), b.alloc_buffer("y", 64)
        a = b.add_mem_alloc("alloc", t)
        b.add_memset("set", 64, 2, dst=t)
        b.add_memcpy("d2d", MemcpyDir.DeviceToDevice, 64, src=t, dst=y)
        g = b.build()
        start, end = liveness.analyze(g).intervals[t]
        order = g.topological_order()
        assert order[start] == a and end == order.index(g.readers(t)[-1]) + 1


class TestViews:
    def view_graph(self, free_before_use: bool) -> GraphBuilder:
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64, shape=(4, 4))
        tt = b.view("tT", t, (4, 4), strides=(1, 4))
        y = b.alloc_buffer("y", 64, shape=(4, 4))
        b.add_mem_alloc("alloc", t)
        b.add_memset("set", 64, 1, dst=t)
        if free_before_use:
            b.add_mem_free("free", t)
            b.add_kernel("copy", 1, 16).inputs([tt]).outputs([y]).finish()
        else:
            b.add_kernel("copy", 1, 16).inputs([tt]).outputs([y]).finish()
            b.add_mem_free("free", t)
        return b

    def test_raises_use_of_a_view_after_its_base_is_freed(self):
        with pytest.raises(InvalidLifetime, match=r"'t' is used by 'copy'.*after its free"):
            self.view_graph(free_before_use=True).build()
        self.view_graph(free_before_use=False).build()

    def test_raises_alloc_of_a_view(self):
        b = GraphBuilder()
        t = b.alloc_buffer("t", 64, shape=(4, 4))
        tt = b.view("tT", t, (4, 4), strides=(1, 4))
        with pytest.raises(InvalidArgument, match="'tT' is a view"):
            b.add_mem_alloc("alloc", tt)

    def test_a_body_reading_a_view_carries_its_base(self):
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64, shape=(4, 4))
        xt = b.view("xT", x, (4, 4), strides=(1, 4))
        y = b.alloc_buffer("y", 64, shape=(4, 4))
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        inner = b.body()
        inner.add_kernel("copy", 1, 16).inputs([xt]).outputs([y]).finish()
        child = b.add_child_graph("c", inner)
        g = b.build()
        assert {bf.name for bf in g.node(child).bodies[0].buffers} == {"x", "xT", "y"}
        assert ComputeGraph.from_json(g.to_json()) == g
