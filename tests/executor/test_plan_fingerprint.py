"""``bench/plan_fingerprint.py``: the hash that speed changes compare plans by must see a
changed plan and must not see a rebuilt one."""

from __future__ import annotations

import dataclasses

from oxiwork.examples import random_op_dag, synthetic
from oxiwork.executor.plan import ExecutionPlan
from tests.bench_scripts import load


def test_same_graph_same_hash_and_a_moved_buffer_changes_it() -> None:
    fp = load("plan_fingerprint").fingerprint
    plan = ExecutionPlan.build(synthetic(300, "layered"), max_streams=4)
    assert fp(plan) == fp(ExecutionPlan.build(synthetic(300, "layered"), max_streams=4))
    # one buffer moved in the arena: the same steps, another plan
    placed = [b for b in plan.graph.buffers if b.offset is not None]
    moved = dataclasses.replace(placed[0], offset=placed[0].offset + 256)
    graph = plan.graph.with_changes(
        buffers=[moved if b.id == moved.id else b for b in plan.graph.buffers]
    )
    assert fp(dataclasses.replace(plan, graph=graph)) != fp(plan)
    # other streams: other steps
    assert fp(ExecutionPlan.build(synthetic(300, "layered"), max_streams=1)) != fp(plan)
    assert fp(ExecutionPlan.build(random_op_dag(0, 40))) != fp(plan)


def test_cases_have_distinct_labels() -> None:
    labels = [label for label, _ in load("plan_fingerprint").cases()]
    assert len(labels) == len(set(labels)) == 9 + 2 + 12
