"""executor/update.py: CUDA's rules for updating an instantiated graph in place."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.lowering import lower
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.update import (
    NODE_TYPE,
    PARAMETERS,
    SUCCESS,
    TOPOLOGY,
    check_update,
)
from tests.executor.gpu_fakes import FakeDriver
from tests.strategies import dags


def _with_kernel(graph, name, **changes):
    return graph.with_changes(
        nodes=[n.replace(**changes) if n.name == name else n for n in graph.nodes]
    )


class TestCheckUpdate:
    def test_raises_on_a_non_plan(self) -> None:
        plan = ExecutionPlan.build(quick_start())
        with pytest.raises(InvalidArgument, match="ExecutionPlan or a GraphDesc"):
            check_update(plan, "plan")

    def test_identical_plans_update_in_place_with_nothing_to_patch(self) -> None:
        plan = ExecutionPlan.build(quick_start(), fusion=False)
        r = check_update(plan, plan)
        assert (r.in_place, r.result, r.changes, r.blocking) == (True, SUCCESS, (), ())

    def test_fusion_changes_the_topology(self) -> None:
        g = quick_start()
        r = check_update(ExecutionPlan.build(g, fusion=False), ExecutionPlan.build(g))
        assert (r.in_place, r.result) == (False, TOPOLOGY)
        assert "node count changes from 4 to 3" in r.reason

    def test_a_new_parameter_value_is_patched_in_place(self) -> None:
        g = quick_start()
        g2 = _with_kernel(g, "scale", params=(("alpha", 7.0),))
        r = check_update(
            ExecutionPlan.build(g, fusion=False), ExecutionPlan.build(g2, fusion=False)
        )
        assert r.in_place and r.result == SUCCESS
        assert [(c.name, c.field) for c in r.changes] == [("scale", "args")]
        assert "alpha=7.0" in r.changes[0].new and "1 parameter change" in r.reason

    def test_new_launch_dimensions_are_patched_in_place(self) -> None:
        g = quick_start()
        relu = next(n for n in g.nodes if n.name == "relu")
        g2 = _with_kernel(g, "relu", config=replace(relu.config, grid=(8, 1, 1)))
        r = check_update(
            ExecutionPlan.build(g, fusion=False), ExecutionPlan.build(g2, fusion=False)
        )
        assert r.in_place
        assert ("relu", "grid", "(4, 1, 1)", "(8, 1, 1)") in {
            (c.name, c.field, c.old, c.new) for c in r.changes
        }

    def test_a_changed_edge_is_a_topology_change_naming_it(self) -> None:
        d = lower(ExecutionPlan.build(quick_start(), fusion=False))
        d2 = replace(d, edges=(*d.edges[:-1], (0, 3)))
        r = check_update(d, d2)
        assert r.result == TOPOLOGY
        assert "'upload' -> 'download'" in r.reason and "removed" in r.reason

    def test_a_copy_that_changes_direction_needs_a_new_instance(self) -> None:
        d = lower(ExecutionPlan.build(quick_start(), fusion=False))
        nodes = list(d.nodes)
        nodes[0] = replace(nodes[0], direction="d2d")
        r = check_update(d, replace(d, nodes=tuple(nodes)))
        assert (r.in_place, r.result) == (False, PARAMETERS)
        assert "changes direction (h2d -> d2d)" in r.reason

    def test_a_node_that_changes_type_needs_a_new_instance(self) -> None:
        d = lower(ExecutionPlan.build(quick_start(), fusion=False))
        nodes = list(d.nodes)
        nodes[1] = replace(nodes[1], kind="empty")
        r = check_update(d, replace(d, nodes=tuple(nodes)))
        assert (r.in_place, r.result) == (False, NODE_TYPE)
        assert "'relu'" in r.reason and "kernel to empty" in r.reason


@settings(max_examples=40, deadline=None)
@given(dags(max_nodes=30, data=True), st.data())
def test_new_launch_dimensions_never_need_a_new_instance(graph, data) -> None:
    """Changing only kernels' grids keeps the topology: always in place, and exactly the
    kernels whose grid changed are listed, each with the grid it changed to."""
    plan = ExecutionPlan.build(graph, max_streams=2, fusion=False)
    assert check_update(plan, plan).changes == ()
    names = sorted(k.name for k in graph.kernels())
    picked = set(data.draw(st.lists(st.sampled_from(names), unique=True))) if names else set()
    nodes = [
        n.replace(config=replace(n.config, grid=(n.config.grid[0] + 1, *n.config.grid[1:])))
        if n.name in picked
        else n
        for n in graph.nodes
    ]
    plan2 = ExecutionPlan.build(graph.with_changes(nodes=nodes), max_streams=2, fusion=False)
    r = check_update(plan, plan2)
    assert r.in_place and r.result == SUCCESS
    assert {c.name for c in r.changes} == picked
    assert {c.field for c in r.changes} <= {"grid"}


class TestExecutorUpdate:
    def test_update_keeps_the_report(self) -> None:
        g = quick_start()
        with CudaGraphExecutor(ExecutionPlan.build(g, fusion=False), driver=FakeDriver()) as ex:
            assert ex.last_update is None
            plan2 = ExecutionPlan.build(
                _with_kernel(g, "scale", params=(("alpha", 3.0),)), fusion=False
            )
            assert ex.update(plan2) == "updated"
            assert ex.last_update.in_place and ex.last_update.changes[0].name == "scale"
            assert ex.update(ExecutionPlan.build(g)) == "reinstantiated"
            assert ex.last_update.result == TOPOLOGY
