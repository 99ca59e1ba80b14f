"""Lowering child graphs, conditionals and graph-owned memory to the CUDA-graph
description: the node kinds, the set-condition kernels, the handles and loop counters,
graph memory references; the stream executor's refusal."""

from __future__ import annotations

import json
import warnings

import pytest
from strategies import build_control_graph

from oxiwork import ExecutionPlan, GraphBuilder, MemcpyDir
from oxiwork.error import UnsupportedOp
from oxiwork.executor.lowering import CONDITION_PREFIX, DescNode, lower
from oxiwork.executor.streams import StreamExecutor

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


def walk(nodes, depth=0):
    for n in nodes:
        yield n, depth
        for b in n.bodies:
            yield from walk(b.nodes, depth + 1)


def control_plan(seed: int, streams: int = 2) -> ExecutionPlan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ExecutionPlan.build(build_control_graph(seed, 6)[0], max_streams=streams)


@pytest.mark.parametrize("seed", range(8))
def test_every_body_node_is_lowered_as_one_cuda_node(seed):
    plan = control_plan(seed)
    desc = lower(plan)
    by_name = {s.name: s for s in plan.steps}
    for n, _ in walk(desc.nodes):
        if n.kind in ("child_graph", "conditional"):
            node = plan.graph.node(by_name[n.name].node) if n.name in by_name else None
            if node is not None:
                assert len(n.bodies) == len(node.bodies)
        for body in n.bodies:
            assert all(a < b < len(body.nodes) for a, b in body.edges)
    json.dumps(desc.to_dict())  # JSON-able, bodies included


@pytest.mark.parametrize("seed", range(8))
def test_conditionals_are_preceded_by_their_set_condition_kernel(seed):
    desc = lower(control_plan(seed))
    handles = []

    def check(nodes, edges):
        for i, n in enumerate(nodes):
            if n.kind == "conditional":
                setter = nodes[i - 1]
                assert setter.kind == "kernel" and setter.function_name.startswith(CONDITION_PREFIX)
                assert (i - 1, i) in edges
                (h,) = [a.value for a in setter.args if a.ctype == "handle"]
                assert h == ("handle", n.handle)
                handles.append(n.handle)
                if n.cond_type == "switch":
                    assert dict((a.name, a.value) for a in setter.args)["cases"] == len(n.bodies)
                if n.cond_type == "while":
                    (body,) = n.bodies
                    last = body.nodes[-1]
                    assert last.function_name == setter.function_name
                    assert {a for a, b in body.edges if b == len(body.nodes) - 1} == set(
                        range(len(body.nodes) - 1)
                    )
            for b in n.bodies:
                check(b.nodes, set(b.edges))

    check(desc.nodes, set(desc.edges))
    assert sorted(handles) == list(range(desc.handles))
    assert len(desc.loops) == sum(
        n.cond_type == "while" for n, _ in walk(desc.nodes) if n.kind == "conditional"
    )
    # the set-condition kernels are compiled apart, relocatable, to link libcudadevrt
    for m in desc.modules:
        assert m.link_devrt == any(f.startswith(CONDITION_PREFIX) for f in m.function_names)
        assert m.link_devrt == ("--relocatable-device-code=true" in m.options)


def scratch_graph():
    b = GraphBuilder()
    x, t = b.alloc_buffer("x", 1024), b.alloc_buffer("t", 1024)
    ids = [b.add_memcpy("up", MemcpyDir.HostToDevice, 1024, dst=x)]
    ids.append(b.add_mem_alloc("alloc t", t))
    ids.append(b.add_kernel("tanh", 1, 256).inputs([x]).outputs([t]).finish())
    ids.append(b.add_kernel("add", 1, 256).inputs([x, t]).outputs([x]).finish())
    ids.append(b.add_mem_free("free t", t))
    ids.append(b.add_memcpy("down", MemcpyDir.DeviceToHost, 1024, src=x))
    b.chain(ids)
    return b.build()


def test_graph_owned_memory_lives_at_the_alloc_nodes_address():
    desc = lower(ExecutionPlan.build(scratch_graph(), fusion=False))
    kinds = [n.kind for n in desc.nodes]
    assert kinds == ["memcpy", "mem_alloc", "kernel", "kernel", "mem_free", "memcpy"]
    alloc, free = desc.nodes[1], desc.nodes[4]
    assert alloc.dst == free.dst == ("graph", "t") and alloc.nbytes == 1024
    refs = [a.value for n in desc.nodes if n.kind == "kernel" for a in n.args if a.ctype == "ptr"]
    assert ("graph", "t") in refs and all(r[0] != "arena" or r[1] == 0 for r in refs)
    assert desc.graph_buffers == ("t",)


def test_no_capture_reads_a_freed_buffer():
    b = GraphBuilder()
    x, t = b.alloc_buffer("x", 64), b.alloc_buffer("t", 64)
    ids = [b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x), b.add_mem_alloc("a", t)]
    ids.append(b.add_kernel("neg", 1, 16).inputs([x]).outputs([t]).finish())  # never read
    ids.append(b.add_mem_free("f", t))
    b.chain(ids)
    desc = lower(ExecutionPlan.build(b.build()))
    names = [n.name for n in desc.nodes]
    assert names.index("capture:t") < names.index("f")


def test_stream_executor_refuses_graph_only_nodes():
    plan = ExecutionPlan.build(scratch_graph())
    with pytest.raises(UnsupportedOp, match="run it with CudaGraphExecutor"):
        StreamExecutor(plan)


def test_set_condition_kernel_reads_the_condition_dtype():
    b = GraphBuilder()
    k, x = b.alloc_buffer("k", 8, "int64"), b.alloc_buffer("x", 64)
    b.add_memcpy("up", MemcpyDir.HostToDevice, 8, dst=k)
    case = b.body()
    case.add_memset("m", 64, 1, dst=x)
    b.add_switch("s", k, [case])
    desc = lower(ExecutionPlan.build(b.build()))
    (setter,) = [n for n in desc.nodes if n.kind == "kernel"]
    src = desc.modules[setter.module].source
    assert "const long long* cond" in src and "cudaGraphSetConditional" in src
    assert isinstance(setter, DescNode) and setter.grid == setter.block == (1, 1, 1)
