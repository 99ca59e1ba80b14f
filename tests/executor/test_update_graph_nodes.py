"""check_update through child graph, conditional and memory nodes: CUDA's rules apply to
the nodes inside bodies; a body that changes shape, a conditional's type or case count,
or a memory node's size needs a new instantiation."""

from __future__ import annotations

import pytest

from oxiwork import ExecutionPlan, GraphBuilder, MemcpyDir
from oxiwork.executor.update import PARAMETERS, SUCCESS, TOPOLOGY, check_update

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


def graph(*, alpha=2.0, cases=2, kind="switch", extra=False, op="relu", scratch=1024):
    b = GraphBuilder()
    k, x, t = (
        b.alloc_buffer("k", 4, "int32"),
        b.alloc_buffer("x", 1024),
        b.alloc_buffer("t", scratch),
    )
    ids = [b.add_memcpy("up k", MemcpyDir.HostToDevice, 4, dst=k)]
    ids.append(b.add_memcpy("up x", MemcpyDir.HostToDevice, 1024, dst=x))
    bodies = []
    for j in range(cases):
        body = b.body()
        body.add_kernel("scale", 1, 256).params(alpha=alpha + j).inputs([x]).outputs([x]).finish()
        if extra and j == 0:
            body.add_kernel(op, 1, 256).inputs([x]).outputs([x]).finish()
        bodies.append(body)
    if kind == "switch":
        ids.append(b.add_switch("pick", k, bodies))
    else:
        ids.append(b.add_if("pick", k, *bodies[:2]))
    ids.append(b.add_mem_alloc("alloc t", t))
    ids.append(b.add_memset("fill t", 4, 0, dst=t))
    ids.append(b.add_mem_free("free t", t))
    ids.append(b.add_memcpy("down", MemcpyDir.DeviceToHost, 1024, src=x))
    b.chain(ids)
    return ExecutionPlan.build(b.build())


def test_a_parameter_inside_a_body_updates_in_place():
    r = check_update(graph(), graph(alpha=3.0))
    assert r.in_place and r.result == SUCCESS
    assert {c.name for c in r.changes} == {"pick/scale"}
    assert all(c.field == "args" for c in r.changes)


def test_same_graph_changes_nothing():
    r = check_update(graph(), graph())
    assert r.in_place and r.changes == ()


def test_a_body_that_changes_shape_needs_a_new_instantiation():
    r = check_update(graph(extra=True), graph(extra=False))
    assert not r.in_place and r.result == TOPOLOGY and "body 0 of 'pick'" in r.reason


def test_a_new_function_in_a_body_updates_but_a_new_case_does_not():
    a, b = graph(extra=True, op="relu"), graph(extra=True, op="neg")
    assert check_update(a, b).in_place  # both kernels: only the function changes
    r = check_update(graph(cases=2), graph(cases=3))
    assert not r.in_place and r.result == PARAMETERS and "bodies (2 -> 3)" in r.reason


def test_a_conditional_cannot_change_its_type():
    r = check_update(graph(kind="switch", cases=1), graph(kind="if", cases=1))
    assert not r.in_place and r.result == PARAMETERS and "cond_type" in r.reason


def test_a_memory_node_cannot_change_its_size():
    r = check_update(graph(scratch=1024), graph(scratch=2048))
    assert not r.in_place and "'alloc t' changes its nbytes" in r.reason
