"""The view-model sections: shapes the frontend relies on, checked by invariants."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ops
from oxiwork.analysis import dominance, liveness
from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.graph import ComputeGraph
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.widget import viewmodel as vm

GRAPHS = {
    "quick_start": quick_start,
    "transformer": lambda: transformer_block(1),
    "random": lambda: random_op_dag(3, 40),
}


@pytest.fixture(params=sorted(GRAPHS))
def graph(request: pytest.FixtureRequest) -> ComputeGraph:
    return GRAPHS[request.param]()


class TestPack:
    def test_raises_wrong_column_length(self) -> None:
        with pytest.raises(ValueError, match="column 'level'"):
            vm.pack_dag(2, {"level": [0]}, [], [], {})

    def test_raises_not_a_blob(self) -> None:
        with pytest.raises(ValueError):
            vm.unpack_dag(b"\x00" * 64)

    @settings(max_examples=200, deadline=None)
    @given(st.data())
    def test_roundtrip(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(0, 30))
        ints = {c: data.draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n))
                for c in vm.INT_COLUMNS}  # fmt: skip
        m = data.draw(st.integers(0, 40)) if n else 0
        src = data.draw(st.lists(st.integers(0, max(0, n - 1)), min_size=m, max_size=m))
        dst = data.draw(st.lists(st.integers(0, max(0, n - 1)), min_size=m, max_size=m))
        floats = {c: data.draw(st.lists(st.floats(-1e6, 1e6, width=32), min_size=n, max_size=n))
                  for c in vm.FLOAT_COLUMNS}  # fmt: skip
        out = vm.unpack_dag(vm.pack_dag(n, ints, src, dst, floats))
        for c in vm.INT_COLUMNS:
            assert out[c] == ints[c]
        assert out["src"] == src and out["dst"] == dst
        for c in vm.FLOAT_COLUMNS:
            assert out[c] == floats[c]


class TestDagSection:
    def test_columns_describe_the_graph(self, graph: ComputeGraph) -> None:
        meta, blob = vm.dag_section(graph)
        cols = vm.unpack_dag(blob)
        n = graph.num_nodes
        assert meta["num_nodes"] == n == len(cols["id"]) == len(meta["names"])
        ids = cols["id"]
        assert [graph.node(i).name for i in ids] == meta["names"]
        pairs = {(ids[a], ids[b]) for a, b in zip(cols["src"], cols["dst"], strict=True)}
        assert pairs == {(int(a), int(b)) for a, b in graph.edges}
        # ASAP levels: every edge goes to a strictly higher level; sources are level 0.
        for a, b in zip(cols["src"], cols["dst"], strict=True):
            assert cols["level"][b] > cols["level"][a]
        for s in graph.sources():
            assert cols["level"][ids.index(int(s))] == 0
        assert all(k < len(meta["kinds"]) for k in cols["kind"])

    def test_dominator_parents_are_positions(self, graph: ComputeGraph) -> None:
        meta, blob = vm.dag_section(graph)
        cols = vm.unpack_dag(blob)
        assert meta["has_dominance"]
        for c in ("idom", "ipdom"):
            assert all(-1 <= p < len(cols["id"]) for p in cols[c])
        # A node's immediate dominator is one of its ancestors: its level is lower.
        for i, p in enumerate(cols["idom"]):
            if p >= 0:
                assert cols["level"][p] < cols["level"][i]

    def test_critical_nodes_have_zero_slack(self, graph: ComputeGraph) -> None:
        cols = vm.unpack_dag(vm.dag_section(graph)[1])
        assert any(cols["critical"])
        for c, s in zip(cols["critical"], cols["slack"], strict=True):
            if c:
                assert s == 0.0

    def test_failed_analysis_shows_its_error(
        self, graph: ComputeGraph, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An engine failure in an analysis is the colour mode's note; the DAG still draws."""

        def broken(_graph: ComputeGraph) -> None:
            raise RuntimeError("dominators exploded")

        monkeypatch.setattr(dominance, "dominators", broken)
        meta, blob = vm.dag_section(graph)
        assert not meta["has_dominance"] and meta["has_topo"]
        assert "dominators exploded" in meta["notes"]["dominator"]
        assert set(vm.unpack_dag(blob)["idom"]) == {-1}

    def test_fusion_ghosts(self) -> None:
        g = quick_start()
        res = fuse(g)
        after = res.graph
        removed = tuple(sorted({n.id for n in g.nodes} - {n.id for n in after.nodes}))
        created = tuple(sorted({n.id for n in after.nodes} - {n.id for n in g.nodes}))
        meta, blob = vm.dag_section(after, before=g, created=created, removed=removed)
        cols = vm.unpack_dag(blob)
        n = after.num_nodes
        assert meta["num_nodes"] == n
        assert cols["state"][n:] == [vm.STATE_REMOVED] * len(removed)
        assert all(cols["state"][cols["id"].index(int(c))] == vm.STATE_CREATED for c in created)
        # Ghosts share the fusion group of the kernel they were fused into.
        fused = [i for i in range(n) if cols["group"][i] >= 0]
        assert fused and all(
            cols["group"][i] == cols["group"][fused[0]] for i in range(n, len(cols["id"]))
        )
        assert meta["anchors"] and {tuple(a[1]) for a in meta["anchors"]} >= {
            tuple(int(r) for r in removed)
        }


class TestMemorySection:
    def test_plan_on_streams_shows_both_bounds_and_the_clique(self) -> None:
        plan = ExecutionPlan.build(transformer_block(2), max_streams=4)
        mem = vm.memory_section(plan.graph, plan.memory)
        report = plan.memory
        assert mem["lower_bound_bytes"] == report.lower_bound
        assert mem["liveness_bound_bytes"] == report.liveness_lower_bound
        if report.conflict_lower_bound > report.liveness_lower_bound:
            # the outlined buffers are exactly the clique, and they add up to the bound
            assert sorted(mem["bound_buffers"]) == sorted(int(b) for b in report.conflict_clique)
            sizes = {r["id"]: r["size"] for r in mem["buffers"]}
            assert sum(sizes[b] for b in mem["bound_buffers"]) == mem["lower_bound_bytes"]
        else:
            assert mem["bound_buffers"] == []
        one = ExecutionPlan.build(transformer_block(2), max_streams=1)
        m1 = vm.memory_section(one.graph, one.memory)
        assert m1["bound_buffers"] == [] and m1["liveness_bound_bytes"] == m1["lower_bound_bytes"]

    def test_invariants(self, graph: ComputeGraph) -> None:
        mem = vm.memory_section(graph, plan_memory(graph).artefacts["memory"])
        rects = mem["buffers"]
        live = liveness.analyze(graph)
        # The memory pass places every arena buffer a node touches (a dead one too: its
        # writer still needs the bytes).
        expect = {int(b) for b in live.intervals if not graph.buffer(b).external}
        assert {r["id"] for r in rects} == expect
        assert mem["arena_bytes"] >= mem["lower_bound_bytes"] > 0
        for i, a in enumerate(rects):
            assert 0 <= a["start"] < a["end"] <= mem["num_steps"]
            assert a["offset"] + a["size"] <= mem["arena_bytes"]
            for b in rects[i + 1 :]:
                time = a["start"] < b["end"] and b["start"] < a["end"]
                space = (
                    a["offset"] < b["offset"] + b["size"] and b["offset"] < a["offset"] + a["size"]
                )
                assert not (time and space), (a, b)


class TestStreamsSection:
    def test_has_streams(self) -> None:
        from oxiwork.optimizer.stream import assign_streams

        g = fuse(transformer_block(1)).graph
        assert not vm.has_streams(g)
        assert vm.has_streams(assign_streams(g).graph)

    def test_unknown_mode(self) -> None:
        with pytest.raises(InvalidArgument, match="mode"):
            vm.streams_section(ExecutionPlan.build(quick_start()), mode="warp")

    @settings(max_examples=25, deadline=None)
    @given(
        st.integers(0, 10_000),
        st.integers(2, 40),
        st.integers(1, 4),
        st.sampled_from(["graph", "stream"]),
    )
    def test_bars_are_the_plan_steps_on_their_streams(
        self, seed: int, n: int, streams: int, mode: str
    ) -> None:
        plan = ExecutionPlan.build(random_op_dag(seed, n), max_streams=streams)
        s = vm.streams_section(plan, mode=mode)
        bars = s["bars"]
        # One bar per step, in step order, keyed by step and node (the simulator highlight
        # and the click-to-select rely on both).
        assert [b["step"] for b in bars] == list(range(len(plan.steps)))
        assert [b["node"] for b in bars] == [int(st.node) for st in plan.steps]
        assert all(0 <= b["stream"] < s["num_streams"] for b in bars)
        assert len(s["lanes"]) == s["num_streams"]
        for lane in s["lanes"]:
            on = [b for b in bars if b["stream"] == lane["stream"]]
            assert lane["steps"] == len(on)
            # A stream runs its steps in plan order, one at a time.
            for a, b in itertools.pairwise(on):
                assert b["start"] >= a["end"] - 1e-15
        for a in s["arrows"]:
            assert bars[a["wait"]]["start"] >= a["time"] - 1e-15
            assert bars[a["record"]]["stream"] == a["from_stream"]
            assert bars[a["wait"]]["stream"] == a["to_stream"]
        assert s["mode"] == mode and set(s["totals"]) == {"graph", "stream"}
        assert s["makespan"] == s["totals"][mode] >= max(b["end"] for b in bars) - 1e-15
        # Launch overheads only delay steps: the dependency-only bound stays below.
        assert s["critical_path"] <= min(s["totals"].values()) + 1e-12
        assert s["critical_path"] <= s["work"] + 1e-12


class TestInspector:
    @settings(max_examples=100, deadline=None)
    @given(
        st.lists(
            st.floats(allow_nan=True, allow_infinity=False, width=32), min_size=1, max_size=300
        )
    )
    def test_stats(self, values: list[float]) -> None:
        arr = np.array(values, dtype=np.float32)
        info, raw = vm.inspector_section("b", 3, "float32", arr)
        finite = arr[np.isfinite(arr)].astype(np.float64)
        assert info["nan_count"] == int(np.isnan(arr).sum())
        assert sum(info["hist"]) == finite.size
        if finite.size:
            assert info["min"] == finite.min() and info["max"] == finite.max()
        np.testing.assert_array_equal(np.frombuffer(raw, "<f8"), arr.astype(np.float64))

    def test_unwritten(self) -> None:
        info, raw = vm.inspector_section("b", 3, "float32", None)
        assert not info["written"] and raw == b""


class TestOpsSection:
    def test_mirrors_the_op_table(self) -> None:
        section = vm.ops_section()
        assert [o["name"] for o in section] == sorted(ops.REGISTRY)
        for o in section:
            op = ops.REGISTRY[o["name"]]
            # The "add kernel" form pre-fills the op's default parameters.
            assert o["params"] == dict(op.params)
            assert o["arity"] == op.arity and o["fusion_class"] == op.fusion_class.value
