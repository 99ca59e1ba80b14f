"""The simulated timeline as a Perfetto / Chrome trace (the JSON Trace Event Format).

One process per launch mode, one thread (track) per stream named ``stream N``; every plan
step is a complete event (``"ph": "X"``, times in microseconds) whose ``args`` hold its
details (step index, kind, kernel function, grid, block, shared memory, buffers with their
arena offsets, the nodes it fuses, when it was launched); every event wait is a flow
(``"s"`` on the record's slice, ``"f"`` with ``"bp": "e"`` on the wait's slice, sharing an
``id``), drawn as an arrow from the record to the wait.

Each flow event sits at the start of the slice it belongs to, on that slice's thread, so
both the legacy viewer (which binds a flow event to the slice enclosing it) and Perfetto's
JSON importer attach it to the right step.

Example
-------
>>> import json
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> trace = json.loads(perfetto_trace(ExecutionPlan.build(quick_start())))
>>> [e["name"] for e in trace["traceEvents"] if e["ph"] == "X"]
['upload', 'relu+scale', 'download']

References
----------
"Trace Event Format" (Google, the Chrome tracing document), sections "Complete Events",
"Flow Events" and "Metadata Events".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from oxiwork.cost import DeviceProfile
from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep
from oxiwork.executor.timeline import MODES, timeline
from oxiwork.node import NodeKind

__all__ = ["perfetto_trace", "step_args", "trace_events"]

_US = 1e6


def _buf(a: BufferArg) -> str:
    where = (
        f" ({a.where})"
        if a.base is not None
        else "external"
        if a.offset is None
        else f"@{a.offset}"
    )
    return f"{a.name}{where} ({a.size_bytes} B {a.dtype})"


def step_args(plan: ExecutionPlan, step: PlanStep) -> dict[str, Any]:
    """The details of ``step`` shown in a trace viewer's slice panel (JSON-able).

    >>> from oxiwork.examples import quick_start
    >>> plan = ExecutionPlan.build(quick_start())
    >>> step_args(plan, plan.steps[1])["grid"]
    [4, 1, 1]
    """
    d: dict[str, Any] = {"step": step.index, "kind": step.kind.value, "stream": int(step.stream)}
    if step.function_name:
        d["function"] = step.function_name
    if step.config is not None:
        d["grid"] = list(step.config.grid)
        d["block"] = list(step.config.block)
        d["shared_mem_bytes"] = step.config.shared_mem_bytes
    if step.inputs:
        d["inputs"] = [_buf(a) for a in step.inputs]
    if step.outputs:
        d["outputs"] = [_buf(a) for a in step.outputs]
    if len(step.fused_nodes) > 1:
        orig = plan.original
        d["fuses"] = [
            orig.node(n).name if orig.has_node(n) else f"#{int(n)}" for n in step.fused_nodes
        ]
    if step.size_bytes:
        d["bytes"] = step.size_bytes
    if step.memcpy_dir is not None:
        d["direction"] = step.memcpy_dir.value
    if step.event is not None:
        d["event"] = step.event
    return d


def trace_events(
    plan: ExecutionPlan,
    *,
    modes: Sequence[str] = ("graph",),
    profile: DeviceProfile | None = None,
) -> list[dict[str, Any]]:
    """The trace events of ``plan``'s timeline in each of ``modes`` (one process each).

    Flow ids are unique across processes: ``pid * (number of steps) + wait step``.
    """
    events: list[dict[str, Any]] = []
    n = max(1, len(plan.steps))
    args = [step_args(plan, s) for s in plan.steps]
    for pid, mode in enumerate(modes):
        tl = timeline(plan, profile, mode)
        word = "graph launch" if mode == "graph" else "stream launch"
        events.append(
            {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
             "args": {"name": f"oxiwork plan: {word} (cost model)"}}
        )  # fmt: skip
        for s in range(tl.num_streams):
            events.append(
                {"name": "thread_name", "ph": "M", "pid": pid, "tid": s,
                 "args": {"name": f"stream {s}"}}
            )  # fmt: skip
            events.append(
                {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": s,
                 "args": {"sort_index": s}}
            )  # fmt: skip
        bars = {b.step: b for b in tl.bars}
        for b in tl.bars:
            events.append(
                {
                    "name": b.name,
                    "cat": b.kind,
                    "ph": "X",
                    "pid": pid,
                    "tid": b.stream,
                    "ts": b.start * _US,
                    "dur": (b.end - b.start) * _US,
                    "args": {**args[b.step], "launch_us": b.launch * _US},
                }
            )
        for a in tl.arrows:
            rec, wait = bars[a.record], bars[a.wait]
            common = {"name": f"event {a.event}", "cat": "event", "pid": pid,
                      "id": pid * n + a.wait}  # fmt: skip
            events.append({**common, "ph": "s", "tid": rec.stream, "ts": rec.start * _US})
            events.append(
                {**common, "ph": "f", "bp": "e", "tid": wait.stream, "ts": wait.start * _US}
            )
    return events


def perfetto_trace(
    plan: ExecutionPlan,
    *,
    modes: Sequence[str] = ("graph",),
    profile: DeviceProfile | None = None,
) -> str:
    """The JSON text of :func:`trace_events` (open it in ui.perfetto.dev or chrome://tracing).

    ``modes``: launch modes to include, each as its own process (``("graph", "stream")``
    puts both side by side).
    """
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        from oxiwork.error import InvalidArgument

        raise InvalidArgument(f"modes must be some of {', '.join(MODES)}, got {list(modes)!r}")
    events = trace_events(plan, modes=modes, profile=profile)
    meta = {
        "steps": len(plan.steps),
        "streams": plan.num_streams,
        "event_waits": sum(1 for s in plan.steps if s.kind is NodeKind.EventWait),
        "arena_bytes": plan.pool_bytes,
    }
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns", "otherData": meta})
