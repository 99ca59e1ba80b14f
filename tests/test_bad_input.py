"""Junk given to the engine's public entry points raises a GraphError, never a bare
TypeError, KeyError or AttributeError: a notebook user gets a message saying what to fix.

(The builder's calls are covered in ``tests/test_builder.py``, malformed graph files in
``tests/test_graph.py``, frontend messages in ``tests/widget/test_messages.py``.)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from oxiwork import ComputeGraph, ExecutionPlan, SequentialExecutor, Simulator, ops
from oxiwork.analysis import liveness, topo
from oxiwork.error import GraphError
from oxiwork.examples import quick_start
from oxiwork.executor.races import drop_event
from oxiwork.executor.timeline import timeline
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory import plan_buffers
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams

JUNK: list[Any] = [
    None, True, -1, 0, 2**70, 1.5, float("nan"), "", "x", b"x", [], [1], [[1]], [None], {},
    {1: "x"}, {"input": 1}, {"input": "x"}, {"input": None}, {"input": [1, 2]},
    {"input": np.zeros(3)}, {"nope": np.zeros(1024, np.float32)},
    {"input": np.zeros(1024, np.float64)}, {"input": np.zeros((2, 512), np.float32)},
    {"input": np.array(["a"] * 1024)}, {"a": None}, "{0} +", "{1}", object(),
]  # fmt: skip

G = quick_start()
PLAN = ExecutionPlan.build(G)

CALLS: dict[str, Callable[[Any], Any]] = {
    "ExecutionPlan.build graph": lambda j: ExecutionPlan.build(j),
    "ExecutionPlan.build max_streams": lambda j: ExecutionPlan.build(G, max_streams=j),
    "ExecutionPlan.build max_group_size": lambda j: ExecutionPlan.build(G, max_group_size=j),
    "ExecutionPlan.build memory_mode": lambda j: ExecutionPlan.build(G, memory_mode=j),
    "ExecutionPlan.build capacity": lambda j: ExecutionPlan.build(G, capacity=j),
    "ExecutionPlan.build time limit": lambda j: ExecutionPlan.build(
        G, memory_mode="exact", memory_time_limit=j
    ),
    "SequentialExecutor.run inputs": lambda j: SequentialExecutor(PLAN).run(j),
    "SequentialExecutor.run seed": lambda j: SequentialExecutor(PLAN).run(None, seed=j),
    "Simulator inputs": lambda j: Simulator(PLAN, j).run(),
    "Simulator policy": lambda j: Simulator(PLAN, policy=j),
    "Simulator seed": lambda j: Simulator(PLAN, seed=j).run(),
    "Simulator max_undo_bytes": lambda j: Simulator(PLAN, max_undo_bytes=j),
    "Simulator.run until": lambda j: Simulator(PLAN).run(until=j),
    "Simulator.buffer": lambda j: Simulator(PLAN).buffer(j),
    "Simulator.break_on_node": lambda j: Simulator(PLAN).break_on_node(j),
    "Simulator.break_on_write": lambda j: Simulator(PLAN).break_on_write(j),
    "fuse max_group_size": lambda j: fuse(G, max_group_size=j),
    "assign_streams max_streams": lambda j: assign_streams(G, max_streams=j),
    "plan_memory mode": lambda j: plan_memory(G, mode=j),
    "plan_memory capacity": lambda j: plan_memory(G, capacity=j),
    "plan_memory time_limit": lambda j: plan_memory(G, mode="exact", time_limit=j),
    "plan_buffers sizes": lambda j: plan_buffers(j, {}, {1: (0, 1)}),
    "plan_buffers alignments": lambda j: plan_buffers({1: 64}, j, {1: (0, 1)}),
    "plan_buffers lifetimes": lambda j: plan_buffers({1: 64}, {1: 256}, j),
    "topo.analyze costs": lambda j: topo.analyze(G, costs=j),
    "liveness.analyze order": lambda j: liveness.analyze(G, order=j),
    "liveness.max_live_bytes order": lambda j: liveness.max_live_bytes(G, order=j),
    "timeline mode": lambda j: timeline(PLAN, mode=j),
    "drop_event": lambda j: drop_event(PLAN, j),
    "ComputeGraph nodes": lambda j: ComputeGraph(j, (), ()),
    "ComputeGraph buffers": lambda j: ComputeGraph(G.nodes, j, G.edges),
    "ComputeGraph edges": lambda j: ComputeGraph(G.nodes, G.buffers, j),
    "ComputeGraph edge": lambda j: ComputeGraph(G.nodes, G.buffers, (j,)),
    "with_changes nodes": lambda j: G.with_changes(nodes=j),
    "graph.node": lambda j: G.node(j),
    "graph.buffer": lambda j: G.buffer(j),
    "graph.buffer_by_name": lambda j: G.buffer_by_name(j),
    "graph.readers": lambda j: G.readers(j),
}


def _custom(**kw: Any) -> None:
    """Register a throwaway custom op (and remove it again, whatever happens)."""
    try:
        ops.custom("junk_op", **kw)
    finally:
        ops.REGISTRY.pop("junk_op", None)


CALLS.update(
    {
        "ops.custom expr": lambda j: _custom(expr=j),
        "ops.custom source": lambda j: _custom(source=j),
        "ops.custom function_name": lambda j: _custom(source="x", function_name=j),
        "ops.custom arity": lambda j: _custom(expr="({0})", arity=j),
        "ops.custom params": lambda j: _custom(expr="({0})", params=j),
        "ops.custom fusion_class": lambda j: _custom(reference=lambda xs: xs[0], fusion_class=j),
        "ops.custom flops": lambda j: _custom(expr="({0})", flops_per_element=j),
        "ops.custom reference": lambda j: _custom(reference=j),
        "ops.get": lambda j: ops.get(j),
    }
)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_junk_raises_graph_errors_only(call: str) -> None:
    for junk in JUNK:
        try:
            with warnings.catch_warnings():  # generated inputs etc. warn: not the point
                warnings.simplefilter("ignore")
                CALLS[call](junk)
        except GraphError:
            pass
        except Exception as e:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{call}({junk!r}) raised {type(e).__name__}: {e}")
