"""Conditional nodes (IF, IF/else, WHILE, SWITCH): which body runs for a value, the value
read when the node runs, the WHILE bound, the builder and verify's rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, CondKind, ExecutionPlan, GraphBuilder, MemcpyDir, NodeKind
from oxiwork.error import InvalidArgument, IterationLimit
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.reference import evaluate


def marker_graph(kind: CondKind, cases: int, dtype: str = "float32") -> ComputeGraph:
    """Body ``j`` memsets ``out`` to the byte ``j + 1``; nothing running leaves 0."""
    b = GraphBuilder()
    cond = b.alloc_buffer("cond", DTYPES[dtype], dtype)  # one element
    out = b.alloc_buffer("out", 4, "uint8")
    b.add_memcpy("up", MemcpyDir.HostToDevice, DTYPES[dtype], dst=cond)
    b.add_memset("clear", 4, 0, dst=out)
    bodies = []
    for j in range(cases):
        body = b.body()
        body.add_memset(f"mark{j}", 4, j + 1, dst=out)
        bodies.append(body)
    if kind is CondKind.If:
        b.add_if("cond node", cond, *bodies)
    elif kind is CondKind.Switch:
        b.add_switch("cond node", cond, bodies)
    return b.build()


def ran(graph: ComputeGraph, value) -> int | None:
    """Which body ran (by its marker), from the reference evaluator."""
    dt = graph.buffer_by_name("cond").dtype
    out = evaluate(graph, {"cond": np.array([value], dtype=dt)})["out"]
    return None if out[0] == 0 else int(out[0]) - 1


class TestChooses:
    @given(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(1, 2))
    def test_if_runs_then_exactly_when_non_zero(self, v, n):
        k = CondKind.If.chooses(v, n)
        assert (k == 0) == (v != 0 or math.isnan(v))
        assert k in ((0, 1) if n == 2 else (0, None))

    @given(st.floats(allow_nan=True, width=32), st.integers(1, 8))
    def test_switch_truncates_and_ignores_out_of_range(self, v, n):
        k = CondKind.Switch.chooses(v, n)
        if k is None:
            assert not math.isfinite(v) or not 0 <= math.trunc(v) < n
        else:
            assert k == math.trunc(v) and 0 <= k < n

    def test_while_is_if_without_else(self):
        for v in (0.0, 1.0, -2.5, float("nan")):
            assert CondKind.While.chooses(v, 1) == CondKind.If.chooses(v, 1)


class TestIfAndSwitch:
    @pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "bool"])
    @pytest.mark.parametrize("cases", [1, 2])
    def test_if_in_the_reference_follows_chooses(self, dtype, cases):
        g = marker_graph(CondKind.If, cases, dtype)
        for v in (0, 1, 3):
            if dtype == "bool" and v > 1:
                continue
            assert ran(g, v) == CondKind.If.chooses(v, cases)

    @settings(max_examples=25, deadline=None)
    @given(st.integers(1, 5), st.integers(-3, 8))
    def test_switch_in_reference_and_simulator_follows_chooses(self, cases, v):
        g = marker_graph(CondKind.Switch, cases, "int32")
        assert ran(g, v) == CondKind.Switch.chooses(v, cases)
        out = SequentialExecutor(ExecutionPlan.build(g)).run({"cond": np.array([v], np.int32)})
        final = evaluate(g, {"cond": np.array([v], np.int32)})["out"]
        np.testing.assert_array_equal(out.outputs["out"], final)

    def test_condition_is_read_when_the_node_runs(self):
        # flag is 0 when uploaded, 1 when the IF runs (a memset in between), 0 afterwards:
        # only the value at that point decides.
        b = GraphBuilder()
        flag, x = b.alloc_buffer("flag", 4, "uint8"), b.alloc_buffer("x", 64)
        b.add_memcpy("up flag", MemcpyDir.HostToDevice, 4, dst=flag)
        b.add_memcpy("up x", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_memset("set flag", 4, 1, dst=flag)
        then = b.body()
        then.add_kernel("neg", 1, 16).inputs([x]).outputs([x]).finish()
        node = b.add_if("if", flag, then)
        b.add_memset("clear flag", 4, 0, dst=flag)
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=x)
        g = b.build()
        names = {g.node(a).name: g.node(c).name for a, c in g.edges if c == node}
        assert "set flag" in names
        x0 = np.arange(16, dtype=np.float32)
        data = {"flag": np.zeros(4, np.uint8), "x": x0}
        np.testing.assert_array_equal(evaluate(g, data)["x"], -x0)
        for streams in (1, 4):
            plan = ExecutionPlan.build(g, max_streams=streams)
            np.testing.assert_array_equal(SequentialExecutor(plan).run(data).outputs["x"], -x0)


class TestWhile:
    def countdown(self, max_iterations: int) -> ComputeGraph:
        b = GraphBuilder()
        c, one, d, acc = (b.alloc_buffer(n, 4) for n in ("c", "one", "d", "acc"))
        for name, buf in (("c", c), ("one", one), ("acc", acc)):
            b.add_memcpy(f"up {name}", MemcpyDir.HostToDevice, 4, dst=buf)
        loop = b.body()
        loop.add_kernel("sub", 1, 1).inputs([c, one]).outputs([d]).finish()
        loop.add_kernel("relu", 1, 1).inputs([d]).outputs([c]).finish()
        loop.add_kernel("add", 1, 1).inputs([acc, one]).outputs([acc]).finish()
        b.add_while("loop", c, loop, max_iterations=max_iterations)
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 4, src=acc)
        return b.build()

    @settings(max_examples=20, deadline=None)
    @given(st.floats(0, 20, width=32))
    def test_runs_ceil_c_times(self, c0):
        g = self.countdown(32)
        data = {"c": np.float32([c0]), "one": np.float32([1]), "acc": np.float32([0])}
        # counted by another route: iterate the condition's rule in Python
        c, want = np.float32(c0), 0
        while CondKind.While.chooses(c, 1) is not None:
            c, want = max(c - np.float32(1), np.float32(0)), want + 1
        assert want == math.ceil(c0)
        assert evaluate(g, data)["acc"][0] == want
        plan = ExecutionPlan.build(g, max_streams=2)
        assert SequentialExecutor(plan).run(data).outputs["acc"][0] == want

    def test_raises_when_the_bound_is_hit(self):
        g = self.countdown(5)
        data = {"c": np.float32([9]), "one": np.float32([1]), "acc": np.float32([0])}
        with pytest.raises(IterationLimit, match=r"max_iterations=5.*still 4"):
            evaluate(g, data)
        with pytest.raises(IterationLimit, match=r"step .* 'loop'.*max_iterations=5"):
            SequentialExecutor(ExecutionPlan.build(g)).run(data)
        # exactly at the bound is fine: 5 iterations bring 5 to 0
        data["c"] = np.float32([5])
        assert evaluate(g, data)["acc"][0] == 5


class TestBuilderAndVerify:
    def setup_graph(self):
        b = GraphBuilder()
        c, x = b.alloc_buffer("c", 4, "int32"), b.alloc_buffer("x", 64)
        b.add_memcpy("up", MemcpyDir.HostToDevice, 4, dst=c)
        body = b.body()
        body.add_memset("m", 64, 1, dst=x)
        return b, c, x, body

    def test_raises_no_cases(self):
        b, c, _, _ = self.setup_graph()
        with pytest.raises(InvalidArgument, match="SWITCH node 's' needs at least one body"):
            b.add_switch("s", c, [])

    @pytest.mark.parametrize("bad", [0, -1, 10**7, 1.5, True])
    def test_raises_bad_max_iterations(self, bad):
        b, c, _, body = self.setup_graph()
        with pytest.raises(InvalidArgument, match="max_iterations of 'w'"):
            b.add_while("w", c, body, max_iterations=bad)

    def test_raises_condition_not_a_buffer(self):
        b, _, _, body = self.setup_graph()
        with pytest.raises(InvalidArgument, match="expected a BufferId"):
            b.add_if("i", 3, body)  # type: ignore[arg-type]

    def test_condition_is_an_input(self):
        b, c, x, body = self.setup_graph()
        node = b.add_if("i", c, body)
        g = b.build()
        assert g.node(node).inputs == (c,) and g.node(node).outputs == (x,)
        assert g.node(node).kind is NodeKind.Conditional
        assert ComputeGraph.from_json(g.to_json()) == g

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"cond_kind": None}, "needs a cond_kind and a condition buffer"),
            ({"max_iterations": 3}, "max_iterations bounds WHILE nodes only"),
            ({"cond_kind": CondKind.While}, "max_iterations bounds WHILE nodes only"),
            ({"bodies": ()}, "IF nodes hold 1 to 2 bodies, not 0"),
        ],
    )
    def test_raises_broken_conditional(self, change, message):
        b, c, _, body = self.setup_graph()
        node = b.add_if("i", c, body)
        g = b.build()
        bad = [n.replace(**change) if n.id == node else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match=message):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()

    def test_raises_three_bodies_on_an_if(self):
        b, c, _, body = self.setup_graph()
        node = b.add_if("i", c, body)
        g = b.build()
        three = g.node(node).bodies * 3
        bad = [n.replace(bodies=three) if n.id == node else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="hold 1 to 2 bodies, not 3"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()

    def test_raises_condition_on_a_child_graph(self):
        b, c, _, body = self.setup_graph()
        node = b.add_child_graph("cg", body)
        g = b.build()
        bad = [n.replace(condition=c, inputs=(c,)) if n.id == node else n for n in g.nodes]
        with pytest.raises(InvalidArgument, match="only conditionals have a condition"):
            ComputeGraph(tuple(bad), g.buffers, g.edges).verify()
