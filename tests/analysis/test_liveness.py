"""Buffer liveness: intervals contain every access; peak equals a brute-force sum."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir, NodeId
from oxiwork.analysis import liveness
from oxiwork.error import InvalidArgument
from oxiwork.node import Buffer, BufferId
from tests.strategies import any_dags, build_dag, dag_edges, sparse_ids


@st.composite
def _graph_and_order(draw: st.DrawFn) -> tuple[ComputeGraph, list[NodeId]]:
    """A graph and a random topological order of it (random Kahn tie-breaking)."""
    g = draw(any_dags(max_nodes=50))
    rng = random.Random(draw(st.integers(0, 2**16)))
    indeg = {v: len(g.predecessors(v)) for v in g.node_ids}
    ready = [v for v, d in indeg.items() if d == 0]
    order = []
    while ready:
        v = ready.pop(rng.randrange(len(ready)))
        order.append(v)
        for w in g.successors(v):
            indeg[w] -= 1
            if indeg[w] == 0:
                ready.append(w)
    return g, order


class TestAnalyze:
    def test_raises_unknown_node_in_order(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match=r"order names NodeId\(5\)"):
            liveness.analyze(g, [NodeId(0), NodeId(5)])

    def test_raises_missing_node_in_order(self) -> None:
        g = build_dag(*dag_edges("chain", 3), data=False)
        with pytest.raises(InvalidArgument, match=r"order has 2 entries .* graph has 3 nodes"):
            liveness.analyze(g, [NodeId(0), NodeId(1)])

    def test_raises_duplicate_in_order(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match=r"\(1 distinct\)"):
            liveness.analyze(g, [NodeId(0), NodeId(0)])

    def test_raises_non_topological_order(self) -> None:
        g = build_dag(*dag_edges("chain", 2), data=False)
        with pytest.raises(InvalidArgument, match=r"runs 'k1' .* before its dependency 'k0'"):
            liveness.analyze(g, [NodeId(1), NodeId(0)])

    def test_quick_start_shape(self) -> None:
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 64)
        y, z, spare = b.alloc_buffer("y", 128), b.alloc_buffer("z", 32), b.alloc_buffer("s", 8)
        k0 = b.add_kernel("k0", 1, 32).inputs([x]).outputs([y]).finish()
        k1 = b.add_kernel("k1", 1, 32).inputs([y]).outputs([z]).finish()
        down = b.add_memcpy("down", MemcpyDir.DeviceToHost, 32, src=z)
        info = liveness.analyze(b.build())
        assert info.order == (k0, k1, down)
        assert info.intervals == {x: (0, 1), y: (0, 2), z: (1, 3)}
        assert info.unused == {spare} and info.dead == frozenset()
        assert info.live_bytes == (128, 160, 32)  # external x is not counted
        assert info.max_live_bytes == 160 and info.peak_step == 1
        assert info.live_at(1) == {y, z}

    def test_dead_buffer(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64)
        b.add_memset("zero", 64, 0, dst=x)
        info = liveness.analyze(b.build())
        assert info.dead == {x} and info.intervals[x] == (0, 1) and info.max_live_bytes == 64

    @settings(max_examples=300, deadline=None)
    @given(go=_graph_and_order())
    def test_intervals_contain_every_access(self, go: tuple[ComputeGraph, list[NodeId]]) -> None:
        g, order = go
        info = liveness.analyze(g, order)
        assert info.order == tuple(order)
        accessed: dict = {}
        for step, nid in enumerate(order):
            n = g.node(nid)
            for bid in (*n.inputs, *n.outputs):
                accessed.setdefault(bid, []).append(step)
        assert set(info.intervals) == set(accessed)
        assert info.unused == {b.id for b in g.buffers} - set(accessed)
        for bid, steps in accessed.items():
            start, end = info.intervals[bid]
            # tight: from the first access to just after the last one
            assert (start, end) == (min(steps), max(steps) + 1)
        read = {bid for n in g.nodes for bid in n.inputs}
        written = {bid for n in g.nodes for bid in n.outputs}
        expected_dead = {
            b.id for b in g.buffers if b.id in written and b.id not in read and not b.external
        }
        assert info.dead == expected_dead
        # Sparse buffer ids take the dict-indexed path; the result must not change.
        far = Buffer(BufferId(10**6), "far", 4)
        sparse = liveness.analyze(g.with_changes(buffers=[*g.buffers, far]), order)
        assert sparse.intervals == info.intervals and sparse.dead == info.dead
        assert sparse.unused == info.unused | {far.id} and sparse.live_bytes == info.live_bytes

    @settings(max_examples=300, deadline=None)
    @given(go=_graph_and_order())
    def test_max_live_bytes_is_brute_force_peak(
        self, go: tuple[ComputeGraph, list[NodeId]]
    ) -> None:
        g, order = go
        info = liveness.analyze(g, order)
        brute = tuple(
            sum(
                g.buffer(bid).size_bytes
                for bid, (s, e) in info.intervals.items()
                if s <= step < e and not g.buffer(bid).external
            )
            for step in range(len(order))
        )
        assert info.live_bytes == brute
        assert info.max_live_bytes == max(brute, default=0)
        assert info.live_bytes[info.peak_step] == info.max_live_bytes
        assert liveness.max_live_bytes(g, order) == info.max_live_bytes

    def test_default_order_is_topological_order(self) -> None:
        g = build_dag(*dag_edges("layered", 40, seed=5), seed=5)
        assert liveness.analyze(g) == liveness.analyze(g, g.topological_order())
        assert liveness.max_live_bytes(g) == liveness.analyze(g).max_live_bytes


@settings(max_examples=100, deadline=None)
@given(g=any_dags(max_nodes=40))
def test_sparse_ids(g: ComputeGraph) -> None:
    a, b = liveness.analyze(g), liveness.analyze(sparse_ids(g))
    assert (a.intervals, a.dead, a.unused, a.live_bytes) == (
        b.intervals,
        b.dead,
        b.unused,
        b.live_bytes,
    )
    assert b.order == tuple(NodeId(3 * v + 7) for v in a.order)


class TestReadOnly:
    """One LivenessInfo serves the memory pass, the simulator and the widget: none may change it."""

    def test_intervals_refuse_writes(self):
        g = build_dag(*dag_edges("diamond", 12, seed=3), seed=3)
        info = liveness.analyze(g)
        bid = next(iter(info.intervals))
        with pytest.raises(TypeError):
            info.intervals[bid] = (0, 0)  # type: ignore[index]
        with pytest.raises(AttributeError):
            info.intervals.clear()  # type: ignore[attr-defined]
        assert liveness.analyze(g) == info

    def test_the_rest_is_immutable(self):
        info = liveness.analyze(build_dag(*dag_edges("chain", 8, seed=1), seed=1))
        assert isinstance(info.order, tuple) and isinstance(info.live_bytes, tuple)
        with pytest.raises(AttributeError):
            info.dead.add(BufferId(0))  # type: ignore[attr-defined]
        with pytest.raises(AttributeError):
            info.unused.add(BufferId(0))  # type: ignore[attr-defined]


class TestOneLiveness:
    """The memory pass, the simulator and the GPU lowering take their lifetimes from here."""

    @settings(max_examples=40, deadline=None)
    @given(go=_graph_and_order())
    def test_arena_accesses_index_the_graph_buffers(self, go):
        g, order = go
        for given_order in (tuple(order), list(order), [int(x) for x in order]):
            acc = liveness.arena_accesses(g, given_order)
            assert acc.order == tuple(order)
            assert all(type(x) is NodeId for x in acc.order)
            if isinstance(given_order, tuple):
                assert acc.order is given_order  # no copy of a tuple of ids
        assert [g.buffers[k].id for k in acc.index.tolist()] == list(acc.buffers)
        arena = [not b.external and b.base is None for b in g.buffers]
        assert acc.in_arena.tolist() == arena
        assert all(arena[k] for k in acc.index.tolist())
        for arr in (acc.index, acc.in_arena):
            with pytest.raises(ValueError):
                arr[...] = 0

    @settings(max_examples=40, deadline=None)
    @given(go=_graph_and_order())
    def test_arena_accesses_are_the_intervals_of_analyze(self, go):
        g, order = go
        acc = liveness.arena_accesses(g, order)
        info = liveness.analyze(g, order)
        want = {b: iv for b, iv in info.intervals.items() if not g.buffer(b).external}
        got = {
            b: (int(f), int(e) + 1)
            for b, f, e in zip(acc.buffers, acc.first, acc.last, strict=True)
        }
        assert got == want and list(acc.buffers) == list(want)  # graph order
        assert acc.order == info.order
        # every access of an arena buffer, at its node's step
        step = {nid: i for i, nid in enumerate(info.order)}
        expected = sorted(
            (acc.buffers.index(b), step[n.id])
            for n in g.nodes
            for b in (*n.inputs, *n.outputs)
            if not g.buffer(b).external
        )
        assert sorted(zip(acc.row.tolist(), acc.step.tolist(), strict=True)) == expected
        for a in (acc.first, acc.last, acc.row, acc.step):
            with pytest.raises(ValueError):
                a[:1] = 0

    @settings(max_examples=40, deadline=None)
    @given(go=_graph_and_order())
    def test_order_at_is_the_looked_up_order(self, go):
        # order_at (issue 14: the memory pass hands over the issue order's positions)
        # against the ids looked up one by one: the same order, positions and accesses
        g, order = go
        pos = [g.node_ids.index(x) for x in order]
        got = liveness.order_at(g, pos)
        assert got == tuple(order) and all(type(x) is NodeId for x in got)
        assert liveness.positions_of(g, got).tolist() == pos
        with pytest.raises(ValueError):
            liveness.positions_of(g, got)[:1] = 0
        a, b = liveness.arena_accesses(g, got), liveness.arena_accesses(g, list(order))
        assert a.order is got and a.order == b.order
        for x, y in ((a.first, b.first), (a.last, b.last), (a.row, b.row), (a.step, b.step)):
            assert x.tolist() == y.tolist()
        assert a.buffers == b.buffers

    @settings(max_examples=40, deadline=None)
    @given(go=_graph_and_order())
    def test_dead_buffers_are_analyzes_dead_for_every_order(self, go):
        g, order = go
        dead = liveness.dead_buffers(g)
        assert dead == liveness.analyze(g, order).dead == liveness.analyze(g).dead
        read = {b for n in g.nodes for b in n.inputs}
        written = {b for n in g.nodes for b in n.outputs}
        assert dead == {b for b in written - read if not g.buffer(b).external}

    @pytest.mark.parametrize("streams", [1, 4])
    def test_memory_pass_plain_intervals_are_liveness(self, streams):
        from oxiwork.examples import transformer_block
        from oxiwork.optimizer.memory_pass import buffer_intervals
        from oxiwork.optimizer.stream import assign_streams

        g = assign_streams(transformer_block(1), max_streams=streams).graph
        safe, live, order = buffer_intervals(g)
        info = liveness.analyze(g, order)
        assert live == {b: iv for b, iv in info.intervals.items() if not g.buffer(b).external}
        assert all(safe[b][0] == live[b][0] and safe[b][1] >= live[b][1] for b in live)


@settings(max_examples=60, deadline=None)
@given(any_dags(max_nodes=40))
def test_accesses_are_the_node_loop(g):
    # The flat access arrays (issue 14: built with numpy) against the loop they replaced:
    # node by node in graph order, inputs then outputs, views adding their base.
    from oxiwork.analysis.liveness import _accesses

    index = {b.id: i for i, b in enumerate(g.buffers)}
    pos, buf, read = [], [], []
    for p, node in enumerate(g.nodes):
        for b in node.inputs:
            pos.append(p), buf.append(index[b]), read.append(True)
        for b in node.outputs:
            pos.append(p), buf.append(index[b]), read.append(False)
    views = g.views()
    extra = [(p, index[views[g.buffers[b].id]], r) for p, b, r in zip(pos, buf, read, strict=True)
             if g.buffers[b].id in views]  # fmt: skip
    got = _accesses(g)
    assert got[0].tolist() == pos + [p for p, _, _ in extra]
    assert got[1].tolist() == buf + [b for _, b, _ in extra]
    assert got[2].tolist() == read + [r for _, _, r in extra]


@settings(max_examples=60, deadline=None)
@given(any_dags(max_nodes=40))
def test_accesses_with_sparse_buffer_ids(g):
    # Buffer ids with gaps (as after fusion drops buffers) go to buffer indices by a binary
    # search of the sorted ids (issue 14): the same arrays as the same graph with ids 0..n-1.
    import dataclasses

    from oxiwork.analysis.liveness import _accesses

    def f(b):
        return BufferId(5 * int(b) + 3)

    bufs = [
        dataclasses.replace(b, id=f(b.id), base=None if b.base is None else f(b.base))
        for b in g.buffers
    ]
    nodes = [
        n.replace(
            inputs=tuple(map(f, n.inputs)),
            outputs=tuple(map(f, n.outputs)),
            condition=None if n.condition is None else f(n.condition),
        )
        for n in g.nodes
    ]
    h = ComputeGraph(nodes, bufs, g.edges)
    assert not h.buffers or h.buffers[-1].id != len(h.buffers) - 1  # not 0..n-1
    for x, y in zip(_accesses(g), _accesses(h), strict=True):
        assert x.tolist() == y.tolist()


@settings(max_examples=60, deadline=None)
@given(any_dags(max_nodes=30), st.randoms(use_true_random=False))
def test_orders_are_checked_as_the_successor_loop(g, rnd):
    # The order check runs over the graph's cached edge arrays (issue 14) and names the
    # first backward edge as a loop over the positions' successors meets it.
    order = list(g.node_ids)
    rnd.shuffle(order)
    d = g.dense()
    step = {d.pos[x]: i for i, x in enumerate(order)}
    first = next(((u, v) for u in range(len(d.ids)) for v in d.succ[u] if step[v] < step[u]), None)
    if first is None:
        assert liveness.arena_accesses(g, order).order == tuple(order)
        return
    a, b = first
    with pytest.raises(InvalidArgument) as err:
        liveness.arena_accesses(g, order)
    assert str(err.value) == (
        f"order runs {g.nodes[b].name!r} (step {step[b]}) before its dependency "
        f"{g.nodes[a].name!r} (step {step[a]}); pass a topological order"
    )
