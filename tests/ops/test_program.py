"""Tests for oxiwork.ops.program's per-graph cache of bound programs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ops
from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.node import Buffer
from oxiwork.ops.program import _bind, bind, share_bound
from oxiwork.optimizer.fusion import fuse


def kernels(g):
    return [n for n in g.nodes if n.is_kernel and (n.op is not None or n.fused is not None)]


class TestBindCache:
    def test_raises_are_not_cached(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        bad = k.replace(op="no_such_op")
        for _ in range(2):  # the second call raises too: failures are not remembered
            with pytest.raises(UnsupportedOp, match="no_such_op"):
                bind(g, bad)
        assert bind(g, k).steps[0].op.name == "relu"

    def test_same_node_hits(self):
        g = quick_start()
        k = kernels(g)[0]
        assert bind(g, k) is bind(g, k)

    def test_changed_node_with_same_id_misses(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "scale")
        assert bind(g, k).steps[0].params == {"alpha": 2.0}
        other = k.replace(params=(("alpha", 3.0),))
        assert bind(g, other).steps[0].params == {"alpha": 3.0}
        assert bind(g, k).steps[0].params == {"alpha": 2.0}

    def test_reregistered_op_takes_effect(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        before = bind(g, k).steps[0].op
        ops.custom("relu", expr="fmaxf({0}, 0.0f)", reference=before.reference, replace=True)
        try:
            after = bind(g, k).steps[0].op
            assert after is ops.get("relu") and after is not before
        finally:
            ops.register(before, replace=True)
        assert bind(g, k).steps[0].op is before

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 100_000), st.integers(2, 30))
    def test_cached_equals_fresh(self, seed, n):
        g = random_op_dag(seed, n)
        res = fuse(g)  # binds through the cache and shares it with the fused graph
        for graph in (g, res.graph):
            for k in kernels(graph):
                try:
                    fresh = _bind(graph, k)
                except (InvalidArgument, UnsupportedOp):
                    continue
                assert bind(graph, k) == fresh


class TestShareBound:
    def test_moves_entries_of_unchanged_nodes(self):
        g = quick_start()
        k = kernels(g)[0]
        b = bind(g, k)
        h = g.with_changes(nodes=[n.replace(stream=0) for n in g.nodes])
        share_bound(g, h)
        assert bind(h, h.node(k.id)) is b

    def test_changed_buffer_is_not_shared(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        b = bind(g, k)
        out = g.buffer(k.outputs[0])
        bigger = Buffer(out.id, out.name, out.size_bytes * 2, shape=(2 * out.num_elements,))
        h = g.with_changes(buffers=[bigger if x.id == out.id else x for x in g.buffers])
        share_bound(g, h)
        with pytest.raises(InvalidArgument, match="holds 2048"):
            bind(h, h.node(k.id))  # bound afresh against the new buffer, not reused
        assert bind(g, k) is b

    def test_placed_buffers_are_shared(self):
        # a memory plan only sets offsets, which binding never reads
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        b = bind(g, k)
        h = g.with_changes(
            buffers=[dataclasses.replace(x, offset=0) if not x.external else x for x in g.buffers]
        )
        share_bound(g, h)
        assert bind(h, h.node(k.id)) is b
