"""``bench/plan_fingerprint.py``: the hash that speed changes compare plans by must see a
changed plan and must not see a rebuilt one."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

from oxiwork.examples import random_op_dag, synthetic
from oxiwork.executor.plan import ExecutionPlan

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "plan_fingerprint.py"


def _load():
    spec = importlib.util.spec_from_file_location("plan_fingerprint", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_same_graph_same_hash_and_a_moved_buffer_changes_it() -> None:
    fp = _load().fingerprint
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
    labels = [label for label, _ in _load().cases()]
    assert len(labels) == len(set(labels)) == 9 + 2 + 12
