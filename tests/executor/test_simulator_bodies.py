"""The simulator through child graphs, conditionals and graph-owned memory: values equal
the reference evaluator's on random graphs under every policy, stream cap and fusion
setting; conditions read the arena at that point; fusion never crosses a body node."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import build_control_graph

from oxiwork import ComputeGraph, ExecutionPlan, GraphBuilder, MemcpyDir, NodeKind
from oxiwork.executor.simulator import POLICIES, SequentialExecutor, Simulator
from oxiwork.node import BODY_KINDS
from oxiwork.reference import evaluate

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


def assert_equal_to_reference(graph: ComputeGraph, outputs, inputs) -> None:
    ref = evaluate(graph, inputs)
    assert outputs
    for name, value in outputs.items():
        np.testing.assert_allclose(
            value.reshape(-1), ref[name].reshape(-1), rtol=1e-5, atol=1e-5, err_msg=name
        )


def kinds(graph: ComputeGraph) -> set[NodeKind]:
    out = set()
    for n in graph.nodes:
        out.add(n.kind)
        for body in n.bodies:
            out |= kinds(body)
    return out


def test_the_random_graphs_hold_every_new_kind():
    seen: set[NodeKind] = set()
    for seed in range(30):
        seen |= kinds(build_control_graph(seed, 6)[0])
    assert {NodeKind.ChildGraph, NodeKind.Conditional, NodeKind.MemAlloc, NodeKind.MemFree} <= seen


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 8),
    streams=st.integers(1, 4),
    fusion=st.booleans(),
    policy=st.sampled_from(POLICIES),
)
def test_simulator_equals_reference(seed, n, streams, fusion, policy):
    graph, inputs = build_control_graph(seed, n)
    plan = ExecutionPlan.build(graph, max_streams=streams, fusion=fusion)
    sim = Simulator(plan, inputs, policy=policy, seed=seed, check_finite=False)
    assert sim.run().reason == "end"
    assert sim.races == []
    assert_equal_to_reference(graph, sim.outputs, inputs)
    assert_equal_to_reference(graph, SequentialExecutor(plan).run(inputs).outputs, inputs)
    # body nodes stay whole: the plan runs each once, as one step, bodies untouched
    body_nodes = {n.name: n.bodies for n in graph.nodes if n.kind in BODY_KINDS}
    planned = {n.name: n.bodies for n in plan.graph.nodes if n.kind in BODY_KINDS}
    assert planned == body_nodes
    assert sum(s.kind in BODY_KINDS for s in plan.steps) == len(body_nodes)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_json_round_trip_keeps_values(seed):
    graph, inputs = build_control_graph(seed, 6)
    again = ComputeGraph.from_json(graph.to_json())
    assert again == graph
    a, b = evaluate(graph, inputs), evaluate(again, inputs)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_step_back_restores_what_a_conditional_wrote():
    for seed in range(40):  # the first random graph with a conditional after step 0
        graph, inputs = build_control_graph(seed, 8)
        plan = ExecutionPlan.build(graph, max_streams=2)
        idx = next((s.index for s in plan.steps if s.kind is NodeKind.Conditional), 0)
        if idx:
            break
    names = [a.name for a in plan.steps[idx].outputs]
    sim = Simulator(plan, inputs, check_finite=False)  # in_order: plan order
    sim.run(until=idx - 1)
    before = {n: sim.buffer(n) for n in names}
    sim.step()
    after = {n: sim.buffer(n) for n in names}
    assert sim.step_back().index == idx
    for n in names:
        np.testing.assert_array_equal(sim.buffer(n), before[n])
    sim.step()
    for n in names:
        np.testing.assert_array_equal(sim.buffer(n), after[n])


class TestFusion:
    def graph(self) -> ComputeGraph:
        b = GraphBuilder()
        x, y, z, w, flag = (b.alloc_buffer(n, 64) for n in ("x", "y", "z", "w", "flag"))
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_memcpy("up flag", MemcpyDir.HostToDevice, 64, dst=flag)
        b.add_kernel("relu", 1, 16).fusible(True).inputs([x]).outputs([y]).finish()
        then = b.body()
        then.add_kernel("neg", 1, 16).fusible(True).inputs([y]).outputs([z]).finish()
        otherwise = b.body()
        otherwise.add_kernel("tanh", 1, 16).fusible(True).inputs([y]).outputs([z]).finish()
        b.add_if("branch", flag, then, otherwise)
        b.add_kernel("scale", 1, 16).fusible(True).inputs([z]).outputs([w]).finish()
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=w)
        return b.build()

    def test_never_fuses_across_a_conditional(self):
        g = self.graph()
        plan = ExecutionPlan.build(g)
        names = {n.name for n in plan.graph.nodes if n.kind is NodeKind.KernelLaunch}
        assert names == {"relu", "scale"}  # neither merged with the other nor into a body
        branch = next(n for n in plan.graph.nodes if n.kind is NodeKind.Conditional)
        assert branch.bodies == next(n for n in g.nodes if n.name == "branch").bodies
        for flag in (0.0, 1.0):
            data = {
                "x": np.linspace(-1, 1, 16, dtype=np.float32),
                "flag": np.full(16, flag, np.float32),
            }
            out = SequentialExecutor(plan).run(data).outputs["w"]
            np.testing.assert_allclose(out, evaluate(g, data)["w"], rtol=1e-6)

    def test_the_condition_is_read_after_its_writer_on_any_stream(self):
        b = GraphBuilder()
        src, flag, x = (
            b.alloc_buffer("src", 64),
            b.alloc_buffer("flag", 64),
            b.alloc_buffer("x", 64),
        )
        b.add_memcpy("up src", MemcpyDir.HostToDevice, 64, dst=src)
        b.add_memcpy("up x", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_kernel("relu", 1, 16).inputs([src]).outputs([flag]).finish()  # flag = relu(src)
        then = b.body()
        then.add_kernel("neg", 1, 16).inputs([x]).outputs([x]).finish()
        b.add_if("if", flag, then)
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=x)
        g = b.build()
        x0 = np.arange(1, 17, dtype=np.float32)
        for s0, sign in ((-1.0, 1), (2.0, -1)):
            data = {"src": np.full(16, s0, np.float32), "x": x0}
            for policy in POLICIES:
                plan = ExecutionPlan.build(g, max_streams=4)
                sim = Simulator(plan, data, policy=policy)
                sim.run()
                np.testing.assert_array_equal(sim.outputs["x"], sign * x0)
