"""Pipeline: traces of created/removed nodes, failing passes named, verify after each."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from oxiwork import ComputeGraph, GraphBuilder
from oxiwork.error import CycleError, GraphError, InvalidArgument
from oxiwork.node import GraphNode, NodeKind
from oxiwork.pipeline import (
    CONSTRAINTS,
    PassFailed,
    PassOrderError,
    PassResult,
    PassSpec,
    Pipeline,
    plan_passes,
    this_before_that,
)
from tests.strategies import any_dags


def _graph() -> ComputeGraph:
    b = GraphBuilder()
    x, y, z = (b.alloc_buffer(n, 64) for n in "xyz")
    b.add_memset("init", 64, 0, dst=x)
    b.add_kernel("a", 1, 16).inputs([x]).outputs([y]).finish()
    b.add_kernel("b", 1, 16).inputs([y]).outputs([z]).finish()
    b.add_barrier("end")
    return b.build()


def merge_ab(graph: ComputeGraph) -> PassResult:
    """Replace kernels 'a' and 'b' by one new kernel 'ab' reading x and writing z."""
    a = next(n for n in graph.nodes if n.name == "a")
    b = next(n for n in graph.nodes if n.name == "b")
    nid = graph.next_node_id()
    merged = a.replace(id=nid, name="ab", outputs=b.outputs, fused_from=())
    nodes = [n for n in graph.nodes if n.id not in (a.id, b.id)] + [merged]
    remap = {a.id: nid, b.id: nid}
    edges = {
        (remap.get(u, u), remap.get(v, v))
        for u, v in graph.edges
        if remap.get(u, u) != remap.get(v, v)
    }
    buffers = [buf for buf in graph.buffers if buf.name != "y"]
    return PassResult(graph.with_changes(nodes=nodes, buffers=buffers, edges=edges), {"merged": 2})


def identity(graph: ComputeGraph) -> PassResult:
    return PassResult(graph)


def add_barrier(graph: ComputeGraph, name: str = "extra") -> PassResult:
    n = GraphNode(graph.next_node_id(), name, NodeKind.Barrier)
    return PassResult(graph.with_changes(nodes=[*graph.nodes, n]), {"name": name})


def break_config(graph: ComputeGraph) -> PassResult:
    # Valid as a ComputeGraph, but verify() rejects a kernel without a config.
    nodes = [n.replace(config=None) if n.is_kernel else n for n in graph.nodes]
    return PassResult(graph.with_changes(nodes=nodes))


def crash(graph: ComputeGraph) -> PassResult:
    return {}["missing"]


def make_cycle(graph: ComputeGraph) -> PassResult:
    first, last = graph.topological_order()[0], graph.topological_order()[-1]
    return PassResult(graph.with_changes(edges=[*graph.edges, (last, first)]))


def not_a_result(graph: ComputeGraph) -> PassResult:
    return graph  # type: ignore[return-value]


class TestPipeline:
    def test_trace_of_merge(self) -> None:
        g = _graph()
        run = Pipeline([("identity", identity), ("merge", merge_ab)]).run(g)
        t0, t1 = run.trace
        assert (t0.name, t0.created_nodes, t0.removed_nodes, t0.changed_nodes) == (
            "identity",
            (),
            (),
            (),
        )
        a, b = (n.id for n in g.nodes if n.name in ("a", "b"))
        assert t1.removed_nodes == (a, b)
        assert t1.created_nodes == (g.next_node_id(),)
        assert t1.removed_buffers == (g.buffer_by_name("y").id,) and t1.created_buffers == ()
        assert t1.before is g and t1.after is run.graph
        assert t1.artefacts == {"merged": 2} and run.artefact("merge", "merged") == 2
        assert t1.seconds >= 0.0 and "merge: +1/-2 nodes" in t1.summary()
        assert [n.name for n in run.graph.nodes] == ["init", "end", "ab"]

    def test_options_and_specs(self) -> None:
        run = Pipeline([PassSpec("add", add_barrier, {"name": "x1"})]).run(_graph())
        assert run.trace[0].artefacts == {"name": "x1"}
        assert run.graph.nodes[-1].name == "x1"
        with pytest.raises(KeyError, match="no pass named 'nope'"):
            run.artefact("nope", "name")

    def test_raises_failing_pass_named_with_passes_before(self) -> None:
        p = Pipeline([("first", identity), ("second", identity), ("crash", crash)])
        with pytest.raises(
            PassFailed,
            match=r"pass 'crash' raised KeyError: 'missing' \(passes before it: first, second\)",
        ):
            p.run(_graph())

    def test_raises_graph_error_keeps_type(self) -> None:
        p = Pipeline([("first", identity), ("cyclic", make_cycle)])
        with pytest.raises(
            CycleError, match=r"pass 'cyclic' failed \(passes before it: first\): the dependencies"
        ) as info:
            p.run(_graph())
        assert len(info.value.cycle) >= 2  # the cycle's names survive the added context

    def test_raises_not_a_pass_result(self) -> None:
        with pytest.raises(PassFailed, match=r"pass 'bad' raised TypeError: returned ComputeGraph"):
            Pipeline([("bad", not_a_result)]).run(_graph())

    def test_verify_runs_after_each_pass(self) -> None:
        p = Pipeline([("break", break_config), ("after", identity)])
        with pytest.raises(
            InvalidArgument,
            match=r"pass 'break' failed \(passes before it: none\): .*needs a KernelConfig",
        ):
            p.run(_graph())
        # without verification the broken graph goes through
        run = p.run(_graph(), verify=False)
        assert [t.name for t in run.trace] == ["break", "after"]

    def test_verify_catches_a_later_pass(self) -> None:
        calls: list[str] = []

        def spy(graph: ComputeGraph) -> PassResult:
            calls.append("spy")
            return PassResult(graph)

        p = Pipeline([("ok", identity), ("break", break_config), ("spy", spy)])
        with pytest.raises(GraphError, match=r"pass 'break' failed \(passes before it: ok\)"):
            p.run(_graph())
        assert calls == []  # the pass after the broken one never ran


class TestPassOrder:
    """The pipeline owns the pass list and checks its declared order constraints."""

    def test_plan_passes_is_the_build_pass_list(self) -> None:
        from oxiwork.examples import quick_start
        from oxiwork.executor.plan import ExecutionPlan

        assert [p.name for p in plan_passes()] == ["fusion", "streams", "memory"]
        assert [p.name for p in plan_passes(fusion=False)] == ["streams", "memory"]
        plan = ExecutionPlan.build(quick_start(), weigh_memory=False)
        assert [t.name for t in plan.trace] == [p.name for p in plan_passes()]

    @pytest.mark.parametrize(
        ("order", "match"),
        [
            (["memory", "streams"], r"pass 'memory' runs before 'streams', but a memory plan"),
            (["streams", "fusion"], r"pass 'streams' runs before 'fusion', but fusion changes"),
        ],
    )
    def test_raises_pass_order(self, order: list[str], match: str) -> None:
        by_name = {p.name: p for p in plan_passes()}
        ran = []

        def spy(spec: PassSpec) -> PassSpec:
            def fn(graph: ComputeGraph, **options: object) -> PassResult:
                ran.append(spec.name)
                return spec.fn(graph, **options)

            return PassSpec(spec.name, fn, spec.options)

        with pytest.raises(PassOrderError, match=match):
            Pipeline([spy(by_name[n]) for n in order])
        assert ran == []  # refused before any pass ran

    def test_constraints_hold_only_between_present_passes(self) -> None:
        c = this_before_that("a", "b", "b reads what a writes")
        c.check(["b"])  # without "a" there is nothing to order
        c.check(["a", "x", "b"])
        with pytest.raises(PassOrderError, match="b reads what a writes; list 'a' first"):
            c.check(["b", "a"])
        # A pipeline with its own constraints; the default ones are then not applied.
        Pipeline([("b", merge_ab), ("a", merge_ab)], constraints=())
        assert {(x.before, x.after) for x in CONSTRAINTS} == {
            ("streams", "memory"),
            ("fusion", "streams"),
        }


@settings(max_examples=15, deadline=None)
@given(g=any_dags(max_nodes=30))
def test_trace_diff_is_the_plain_set_and_equality_diff(g: ComputeGraph) -> None:
    # _diff skips shared indexes and compares only replaced nodes: the same answer as
    # comparing every id and every node with ==
    pinned = [int(n.stream) for n in g.nodes if n.stream is not None]
    run = Pipeline(plan_passes(max_streams=max([2, *(s + 1 for s in pinned)]))).run(g)
    for t in run.trace:
        bn = {n.id: n for n in t.before.nodes}
        an = {n.id: n for n in t.after.nodes}
        bb = {b.id for b in t.before.buffers}
        ab = {b.id for b in t.after.buffers}
        assert t.created_nodes == tuple(sorted(an.keys() - bn.keys()))
        assert t.removed_nodes == tuple(sorted(bn.keys() - an.keys()))
        assert t.created_buffers == tuple(sorted(ab - bb))
        assert t.removed_buffers == tuple(sorted(bb - ab))
        assert t.changed_nodes == tuple(k for k in an if k in bn and an[k] != bn[k])
