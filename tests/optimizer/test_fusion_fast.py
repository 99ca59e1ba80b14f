"""The fast fusion pass decides as the member-wise rules do.

Fusion checks a merge from its groups' summaries (``_Fuser.merged``) and classifies
kernels once per bind key; the member-wise checks (``_Fuser.legal``) and a classification
of each kernel on its own are the oracles: with ``CHECK_MERGES`` every merge the summaries
accept is checked member-wise as well, and the summaries may refuse only what the rules
refuse. The result must then be the graph and artefacts fusion gave before.
"""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.analysis import liveness
from oxiwork.examples import random_op_dag, synthetic, transformer_block
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeId
from oxiwork.optimizer import fusion
from oxiwork.optimizer.fusion import fuse, peak_live_bytes, program_order
from tests.strategies import any_dags
from tests.test_views import view_graphs


@pytest.fixture
def check_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "CHECK_MERGES", True)


def assert_classified_alone(graph: ComputeGraph) -> None:
    """Kernels classified with the bind-key memo get what each gets on its own."""
    memo: dict = {}
    keys = fusion._BindKeys(graph)
    for n in graph.nodes:
        assert fusion._classify(graph, n, memo, keys) == fusion._classify(graph, n)


def fuse_checked(graph: ComputeGraph, max_group_size: int = 16) -> None:
    res = fuse(graph, max_group_size=max_group_size)
    assert_classified_alone(graph)
    # the same groups again on a fresh copy of the graph (no caches shared)
    again = fuse(graph.with_changes(), max_group_size=max_group_size)
    assert again.graph == res.graph
    assert again.artefacts["groups"] == res.artefacts["groups"]


@pytest.mark.usefixtures("check_merges")
class TestSameDecisions:
    @settings(max_examples=60, deadline=None)
    @given(
        st.integers(0, 1_000_000),
        st.integers(1, 60),
        st.integers(2, 16),
        st.booleans(),
        st.booleans(),
    )
    def test_random_op_dags(self, seed, n, max_size, reductions, matmul):
        g = random_op_dag(seed, n, reductions=reductions, matmul=matmul)
        fuse_checked(g, max_size)

    @settings(max_examples=20, deadline=None)
    @given(any_dags(max_nodes=30))
    def test_strategy_dags(self, g):
        fuse_checked(g)

    @settings(max_examples=40, deadline=None)
    @given(view_graphs())
    def test_view_graphs(self, g):
        fuse_checked(g)

    @pytest.mark.parametrize("shape", ["chain", "layered", "transformer"])
    def test_synthetic_2k(self, shape):
        fuse_checked(synthetic(2000, shape))

    def test_transformer_block(self):
        fuse_checked(transformer_block(2, tokens=8, d_model=16, d_ff=32))


def assert_rounds_derive_as_swept(graph: ComputeGraph, max_size: int = 16) -> None:
    """A round's fuser derived from the previous one (``_Fuser._derive``) knows what a sweep
    of the fused graph finds and decides the same, over two derived rounds: the first
    applies half of the groups (as undoing the latest ones does), so the next re-forms
    the rest."""
    known: dict = {}
    numbers: dict = {}
    fuser = fusion._Fuser(graph, max_size, known, numbers)
    groups = fuser.run()
    for half in (True, False):
        keep = groups[: len(groups) // 2] if half else groups
        first = int(graph.next_node_id())
        made = [
            fusion._fused_node(graph, NodeId(first + k), group, fuser)
            for k, group in enumerate(keep)
        ]
        graph, _ = fusion._apply(graph, keep, made)
        prev = (fuser, keep, [node for node, _ in made])
        fuser = fusion._Fuser(graph, max_size, known, numbers, prev)
        swept = fusion._Fuser(graph, max_size, dict(known), numbers)
        fuser._same_candidates(swept)
        groups = fuser.run()
        assert groups == swept.run()
        assert (fuser.why, fuser.rejected) == (swept.why, swept.rejected)


class TestDerivedRounds:
    """Later rounds derive their candidates from the previous round (the oracle: a sweep
    of the whole fused graph, as every round made before), and ``fuse`` with derived
    rounds gives what it gives when every round sweeps: graph, artefacts, reasons."""

    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 1_000_000), st.integers(2, 60), st.integers(2, 16), st.booleans())
    def test_random_op_dags(self, seed, n, max_size, special):
        g = random_op_dag(seed, n, reductions=special, matmul=special)
        assert_rounds_derive_as_swept(g, max_size)

    @settings(max_examples=15, deadline=None)
    @given(view_graphs())
    def test_view_graphs(self, g):
        assert_rounds_derive_as_swept(g)

    @pytest.mark.parametrize("shape", ["layered", "transformer"])
    def test_synthetic(self, shape):
        assert_rounds_derive_as_swept(synthetic(600, shape))

    @pytest.mark.parametrize("shape", ["layered", "transformer"])
    def test_fuse_same_as_swept_rounds(self, shape, monkeypatch: pytest.MonkeyPatch) -> None:
        g = synthetic(600, shape)
        derived = fuse(g)
        init = fusion._Fuser.__init__

        def sweep(self, graph, max_group_size, known=None, numbers=None, prev=None):
            init(self, graph, max_group_size, known, numbers)  # never derived

        monkeypatch.setattr(fusion._Fuser, "__init__", sweep)
        swept = fuse(g.with_changes())
        assert derived.graph == swept.graph
        a, b = derived.artefacts, swept.artefacts
        assert a.keys() == b.keys()
        for k in a:
            if k == "not_fused":
                assert dict(a[k]) == dict(b[k]) and a[k].rules() == b[k].rules()
            else:
                assert a[k] == b[k], k


@pytest.mark.parametrize("shape", ["layered", "transformer"])
def test_positions_as_ids_hand_on_ids(shape: str) -> None:
    # a built graph's ids are its dense positions, so the fuser walks the dense view's
    # tuples of positions: what it hands on (groups, fused kernels, records) holds the
    # NodeIds themselves, and a graph with other ids (the fused one, swept) decides alike
    g = synthetic(600, shape)
    assert [int(i) for i in g.dense().ids] == list(range(g.num_nodes))
    res = fuse(g)
    fused = [n for n in res.graph.nodes if n.fused is not None]
    held = [m for group in res.artefacts["groups"] for m in group]
    held += [m for n in fused for m in n.fused_from] + [
        st.node for n in fused for st in n.fused.steps
    ]
    held += [m for key in res.artefacts["not_fused"] for m in key]
    assert held and all(type(m) is NodeId for m in held)
    moved = ComputeGraph(
        [n.replace(id=NodeId(2 * n.id + 1)) for n in g.nodes],
        list(g.buffers),
        [(NodeId(2 * a + 1), NodeId(2 * b + 1)) for a, b in g.edges],
    )
    again = fuse(moved).artefacts["groups"]
    assert again == [[NodeId(2 * m + 1) for m in group] for group in res.artefacts["groups"]]


def test_check_merges_catches_a_wrong_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # the oracle is live: a summary check that accepts everything is caught
    monkeypatch.setattr(fusion, "CHECK_MERGES", True)
    real = fusion._Fuser.merged

    def accept_all(self, roots):
        got = real(self, roots)
        # a refusal turned into an acceptance
        return got if isinstance(got, fusion._Group) else self.single(next(iter(roots)))

    monkeypatch.setattr(fusion._Fuser, "merged", accept_all)
    with pytest.raises(AssertionError):
        fuse(synthetic(200, "chain"))


def test_check_merges_catches_wrong_internal_buffers(monkeypatch: pytest.MonkeyPatch) -> None:
    # the fused kernel takes its internal buffers from the group's summary: checked live
    monkeypatch.setattr(fusion, "CHECK_MERGES", True)
    real = fusion._Fuser.merged

    def forget_internal(self, roots):
        got = real(self, roots)
        if isinstance(got, fusion._Group):
            got.internal = set()  # a legal merge whose summary lost its internal buffers
        return got

    monkeypatch.setattr(fusion._Fuser, "merged", forget_internal)
    with pytest.raises(AssertionError, match="internal"):
        fuse(synthetic(200, "chain"))


def test_check_merges_catches_a_wrong_memo_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kernel classified by a memo hit is checked against its classification alone
    monkeypatch.setattr(fusion, "CHECK_MERGES", True)
    real = fusion._classify

    def alone_differs(graph, n, memo=None, keys=None):
        got = real(graph, n, memo, keys)
        return "classified otherwise" if memo is None and n.op == "relu" else got

    monkeypatch.setattr(fusion, "_classify", alone_differs)
    with pytest.raises(AssertionError, match="classification"):
        fuse(synthetic(200, "chain"))


def heap_program_order(graph: ComputeGraph) -> list:
    """program_order as its docstring defines it: Kahn's algorithm releasing the ready
    node of least (origin, id), by ids and edges only."""
    origin = {n.id: min(n.fused_from) if n.fused_from else n.id for n in graph.nodes}
    indeg = {n.id: 0 for n in graph.nodes}
    succ: dict = {n.id: [] for n in graph.nodes}
    for a, b in graph.edges:
        indeg[b] += 1
        succ[a].append(b)
    heap = [(origin[v], v) for v, k in indeg.items() if k == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, v = heapq.heappop(heap)
        out.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (origin[w], w))
    return out


def assert_peaks_as_defined(graph: ComputeGraph) -> None:
    order = heap_program_order(graph)
    assert program_order(graph) == order
    assert peak_live_bytes(graph) == liveness.max_live_bytes(graph, order)


class TestProgramOrderAndPeak:
    """The order and peak fusion compares (fast paths: an id order that is already
    topological, the fused graph's peak from the input graph's accesses) are the ones
    the plain definitions give, before and after fusion."""

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 1_000_000), st.integers(1, 60), st.booleans())
    def test_random_op_dags(self, seed, n, reversed_ids):
        g = random_op_dag(seed, n)
        if reversed_ids:  # ids against the edges: the heap path
            top = int(g.next_node_id())
            g = ComputeGraph(
                [n.replace(id=type(n.id)(top - n.id)) for n in g.nodes],
                list(g.buffers),
                [(type(a)(top - a), type(b)(top - b)) for a, b in g.edges],
            )
        assert_peaks_as_defined(g)
        assert_peaks_as_defined(fuse(g).graph)

    @settings(max_examples=20, deadline=None)
    @given(view_graphs())
    def test_view_graphs(self, g):
        assert_peaks_as_defined(g)
        assert_peaks_as_defined(fuse(g).graph)

    @pytest.mark.usefixtures("check_merges")  # asserts the fused peak is the full one
    @pytest.mark.parametrize("shape", ["layered", "transformer"])
    def test_synthetic(self, shape):
        g = synthetic(1500, shape)
        res = fuse(g)
        assert res.artefacts["peak_bytes_before"] == liveness.max_live_bytes(
            g, heap_program_order(g)
        )
        new = res.graph
        assert res.artefacts["peak_bytes_after"] == liveness.max_live_bytes(
            new, heap_program_order(new)
        )
