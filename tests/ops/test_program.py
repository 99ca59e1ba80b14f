"""Tests for oxiwork.ops.program's per-graph cache of bound programs."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ops
from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.node import Buffer
from oxiwork.ops import program
from oxiwork.ops.program import _bind, bind, share_bound, signature
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


class TestStepMemo:
    """A fused program's steps are looked up by op, parameters, argument kinds, shapes and
    dtypes (program._STEPS); binding by the rules alone is the oracle."""

    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 100_000), st.integers(2, 40), st.booleans())
    def test_memo_equals_rules_alone(self, seed, n, special):
        fused = [
            (res.graph, k)
            for res in [fuse(random_op_dag(seed, n, reductions=special, matmul=special))]
            for k in kernels(res.graph)
            if k.fused is not None
        ]
        memoized = []
        for graph, k in fused:
            try:
                memoized.append(_bind(graph, k))
            except (InvalidArgument, UnsupportedOp):
                memoized.append(None)
        saved, program._STEPS = program._STEPS, None
        try:
            for (graph, k), got in zip(fused, memoized, strict=True):
                try:
                    alone = _bind(graph, k)
                except (InvalidArgument, UnsupportedOp):
                    alone = None
                assert got == alone
        finally:
            program._STEPS = saved

    def test_an_op_registered_again_is_bound_again(self):
        g = fuse(quick_start()).graph
        k = next(n for n in g.nodes if n.fused is not None)
        before = _bind(g, k)
        relu = ops.get("relu")
        ops.custom("relu", expr="fmaxf({0}, 0.0f)", reference=relu.reference, replace=True)
        try:
            after = _bind(g, k)
            assert after.steps[0].op is ops.get("relu") is not before.steps[0].op
        finally:
            ops.register(relu, replace=True)
        assert _bind(g, k).steps[0].op is relu


class TestSignature:
    """Kernels with one signature are bound once and re-labelled (bind's template cache)."""

    def test_twin_kernels_get_their_own_names_and_origins(self):
        g = random_op_dag(7, 40)
        by_sig: dict = {}
        for k in kernels(g):
            by_sig.setdefault(signature(g, k), []).append(k)
        twins = next(ks for ks in by_sig.values() if len(ks) > 1)
        a, b = (bind(g, k) for k in twins[:2])
        assert a.steps[0].shape == b.steps[0].shape and a.steps[0].op is b.steps[0].op
        assert (a.where, b.where) == (_bind(g, twins[0]).where, _bind(g, twins[1]).where)
        assert [st.node for st in b.steps] == [twins[1].id]

    @pytest.mark.parametrize(
        "field",
        [f.name for f in dataclasses.fields(Buffer) if f.name not in ("id", "name", "offset")],
    )
    def test_every_buffer_field_but_identity_and_offset_enters(self, field):
        # A field added to Buffer later (a view's base, strides) must split signatures
        # without anyone editing signature(): it reads the dataclass's fields.
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        out = g.buffer(k.outputs[0])
        # A different value of the field alone (set past validation: a view's base must
        # name a real buffer, and only the signature is under test here).
        changed = copy.copy(out)
        object.__setattr__(changed, field, object())

        class Stub:
            def buffer(self, b):
                return changed if b == out.id else g.buffer(b)

        assert signature(g, k) != signature(Stub(), k)

    def test_identity_and_offset_do_not_enter(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        out = g.buffer(k.outputs[0])
        moved = dataclasses.replace(out, name="renamed", offset=4096)
        h = g.with_changes(buffers=[moved if x.id == out.id else x for x in g.buffers])
        assert signature(g, k) == signature(h, h.node(k.id).replace(name="other"))

    def test_in_place_is_not_out_of_place(self):
        g = quick_start()
        k = next(n for n in g.nodes if n.name == "relu")
        inplace = k.replace(outputs=k.inputs)
        assert signature(g, inplace) != signature(g, k)

    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 100_000), st.integers(2, 40))
    def test_templated_equals_fresh_after_every_pass(self, seed, n):
        # the templates are process-wide: a kernel bound from another kernel's (or another
        # graph's) template equals its own fresh binding, down to names and origins
        from oxiwork.optimizer.stream import assign_streams

        g = random_op_dag(seed, n)
        fg = fuse(g).graph
        for graph in (g, fg, assign_streams(fg, max_streams=3).graph):
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


class TestDtypeMemo:
    """check_dtypes remembers programs that fit, but only for the op definitions it checked."""

    @pytest.mark.parametrize("fused", [False, True])
    def test_an_op_registered_again_with_another_rule_is_checked_again(self, fused):
        from oxiwork import GraphBuilder, verify
        from oxiwork.ops.table import DtypeProblem

        def rule_float16_only(dtypes, params):
            if any(d != "float16" for d in dtypes):
                raise DtypeProblem("this op takes float16 only: cast it first")
            return "float16"

        name = "memo_twice_fused" if fused else "memo_twice"
        ops.custom(name, expr="({0} * 2.0f)", reference=lambda xs: xs[0] * 2, replace=True)
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 64)
        y = b.alloc_buffer("y", 64)
        z = b.alloc_external_buffer("z", 64)
        b.add_kernel("k1", 1, 16).op(name).fusible(True).inputs([x]).outputs([y]).finish()
        b.add_kernel("k2", 1, 16).op("relu").fusible(True).inputs([y]).outputs([z]).finish()
        g = b.build()
        if fused:
            g = fuse(g).graph
            assert any(n.fused is not None for n in g.nodes)
        verify(g)  # float32 fits the first definition: remembered
        ops.custom(name, expr="({0} * 2.0f)", dtype=rule_float16_only, replace=True)
        try:
            with pytest.raises(InvalidArgument, match="float16 only"):
                verify(dataclasses.replace(g))  # a fresh graph: no verdict cached on it
        finally:
            ops.custom(name, expr="({0} * 2.0f)", reference=lambda xs: xs[0] * 2, replace=True)
        verify(dataclasses.replace(g))
