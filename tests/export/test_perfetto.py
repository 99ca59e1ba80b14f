"""The Perfetto / Chrome trace against the Trace Event Format: required fields per phase,
known phases, flows paired (one "s" and one "f" per id, bound to real slices); one slice
per plan step and one flow per event wait."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.export.perfetto import perfetto_trace
from oxiwork.node import NodeKind

# Trace Event Format: phases and the fields each needs.
REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},  # complete event
    "M": {"name", "ph", "pid", "args"},  # metadata
    "s": {"name", "ph", "ts", "pid", "tid", "id", "cat"},  # flow start
    "t": {"name", "ph", "ts", "pid", "tid", "id", "cat"},  # flow step
    "f": {"name", "ph", "ts", "pid", "tid", "id", "cat"},  # flow end
}
METADATA = {"process_name", "thread_name", "thread_sort_index", "process_sort_index"}


def validate(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Check ``trace`` against the format; return its events."""
    assert set(trace) <= {"traceEvents", "displayTimeUnit", "otherData", "metadata"}
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    events = trace["traceEvents"]
    assert isinstance(events, list)
    for e in events:
        ph = e["ph"]
        assert ph in REQUIRED, e
        missing = REQUIRED[ph] - set(e)
        assert not missing, (missing, e)
        assert isinstance(e["name"], str) and isinstance(e["pid"], int)
        if "tid" in e:
            assert isinstance(e["tid"], int)
        if "ts" in e:
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if ph == "X":
            assert e["dur"] >= 0 and isinstance(e.get("args", {}), dict)
        if ph == "M":
            assert e["name"] in METADATA
        if ph == "f":
            assert e.get("bp", "e") == "e"
    # flows: per (cat, name, id) exactly one start and one end, the start not after the end,
    # each bound to a slice on its thread (a slice starting at the flow event's ts)
    slices = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "X"}
    flows: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for e in events:
        if e["ph"] in "stf":
            flows.setdefault((e["cat"], e["name"], e["id"]), []).append(e)
            assert (e["pid"], e["tid"], e["ts"]) in slices, e
    for key, fl in flows.items():
        phases = Counter(e["ph"] for e in fl)
        assert phases["s"] == 1 and phases["f"] == 1, (key, phases)
        s, f = (next(e for e in fl if e["ph"] == p) for p in "sf")
        assert s["ts"] <= f["ts"]
    return events


PLANS = [
    pytest.param(lambda: ExecutionPlan.build(quick_start()), id="quick_start"),
    pytest.param(lambda: ExecutionPlan.build(random_op_dag(2, 40), max_streams=3), id="random"),
    pytest.param(lambda: ExecutionPlan.build(transformer_block(), max_streams=4), id="transformer"),
]


@pytest.mark.parametrize("make", PLANS)
@pytest.mark.parametrize("modes", [("graph",), ("graph", "stream")])
def test_valid_one_slice_per_step_one_flow_per_wait(make, modes) -> None:
    plan = make()
    events = validate(json.loads(perfetto_trace(plan, modes=modes)))
    waits = sum(1 for s in plan.steps if s.kind is NodeKind.EventWait)
    for pid in range(len(modes)):
        slices = [e for e in events if e["ph"] == "X" and e["pid"] == pid]
        assert sorted(e["args"]["step"] for e in slices) == list(range(len(plan.steps)))
        assert sum(1 for e in events if e["ph"] == "s" and e["pid"] == pid) == waits
        tracks = {e["tid"] for e in slices}
        names = {e["tid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid}  # fmt: skip
        assert tracks <= set(names) and all(names[t] == f"stream {t}" for t in tracks)
        for e in slices:  # each slice on its step's stream
            assert e["tid"] == int(plan.steps[e["args"]["step"]].stream)


def test_298_node_example() -> None:
    g = transformer_block()
    assert g.num_nodes == 298
    plan = ExecutionPlan.build(g)
    events = validate(json.loads(perfetto_trace(plan)))
    assert sum(e["ph"] == "X" for e in events) == len(plan.steps)
    waits = [s for s in plan.steps if s.kind is NodeKind.EventWait]
    assert waits and sum(e["ph"] == "f" for e in events) == len(waits)
    # every flow ends on its wait's slice and starts on the record of the same event
    by_step = {e["args"]["step"]: e for e in events if e["ph"] == "X"}
    records = {s.event: s.index for s in plan.steps if s.kind is NodeKind.EventRecord}
    for f in (e for e in events if e["ph"] == "f"):
        wait = plan.steps[f["id"] % len(plan.steps)]
        assert wait.kind is NodeKind.EventWait and by_step[wait.index]["ts"] == f["ts"]
        (s,) = [e for e in events if e["ph"] == "s" and e["id"] == f["id"]]
        assert by_step[records[wait.event]]["ts"] == s["ts"]


def test_kernel_args_in_slice_details() -> None:
    plan = ExecutionPlan.build(quick_start())
    events = json.loads(perfetto_trace(plan))["traceEvents"]
    (k,) = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
    assert k["args"]["grid"] == [4, 1, 1] and k["args"]["block"] == [256, 1, 1]
    assert k["args"]["fuses"] == ["relu", "scale"]
    assert k["args"]["function"] == plan.steps[1].function_name
    assert k["args"]["inputs"][0].startswith("input@0")


def test_hostile_names_stay_json_strings() -> None:
    from oxiwork import GraphBuilder

    b = GraphBuilder()
    b.add_barrier('"}]}, {"ph": "X"')
    events = validate(json.loads(perfetto_trace(ExecutionPlan.build(b.build()))))
    assert [e["name"] for e in events if e["ph"] == "X"] == ['"}]}, {"ph": "X"']


def test_unknown_mode() -> None:
    with pytest.raises(InvalidArgument, match="modes must be"):
        perfetto_trace(ExecutionPlan.build(quick_start()), modes=("gpu",))
