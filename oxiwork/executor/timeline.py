"""When each step of a plan would run on a device: a timeline from the cost model.

Every step gets a start and an end on its stream by list scheduling in plan order (Graham,
"Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math. 17(2), 1969): a step
starts when its stream is free, when the record its event wait names has finished, and
when it has been launched. Durations come from :func:`oxiwork.cost.node_time`. The two
launch modes differ only in launch overheads (the reason CUDA graphs pay off, see NVIDIA's
"Getting Started with CUDA Graphs", 2019):

- ``"stream"``: one host thread issues every kernel, copy and memset in plan order,
  ``launch_overhead_stream`` each, so launches serialise on the host and short kernels
  wait for their launch;
- ``"graph"``: one graph launch (``launch_overhead_stream`` once) and then
  ``launch_overhead_graph`` of device-side overhead in front of every node.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> tl = timeline(ExecutionPlan.build(quick_start()), mode="stream")
>>> [b.name for b in tl.bars]
['upload', 'relu+scale', 'download']
>>> tl.totals["graph"] < tl.totals["stream"]
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oxiwork.cost import DeviceProfile, node_time
from oxiwork.error import InvalidArgument, InvalidPlan
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.node import NodeKind

__all__ = ["LAUNCHED", "MODES", "Arrow", "Bar", "Timeline", "timeline"]

MODES = ("graph", "stream")
#: Steps that launch device work: each costs a launch from the host in stream mode.
LAUNCHED = frozenset({NodeKind.KernelLaunch, NodeKind.Memcpy, NodeKind.Memset})
_LAUNCHED = LAUNCHED


@dataclass(frozen=True, slots=True)
class Bar:
    """One step on its stream: launched at ``launch``, runs ``[start, end)`` (seconds)."""

    step: int
    name: str
    kind: str
    stream: int
    launch: float
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Arrow:
    """An event: recorded by step ``record`` at ``time``, waited for by step ``wait``."""

    event: int
    record: int
    wait: int
    from_stream: int
    to_stream: int
    time: float


@dataclass(frozen=True, slots=True)
class Timeline:
    """Bars per step (indexed by step index), event arrows, makespan of ``mode``, and
    ``totals``: the makespan of both modes (``{"graph": s, "stream": s}``)."""

    mode: str
    num_streams: int
    bars: tuple[Bar, ...]
    arrows: tuple[Arrow, ...]
    makespan: float
    totals: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``lanes`` (busy time per stream), ``bars``, ``arrows``, totals.

        >>> from oxiwork.examples import quick_start
        >>> d = timeline(ExecutionPlan.build(quick_start())).to_dict()
        >>> sorted(d)
        ['arrows', 'bars', 'lanes', 'makespan', 'mode', 'num_streams', 'totals']
        """
        busy = [0.0] * self.num_streams
        count = [0] * self.num_streams
        for b in self.bars:
            busy[b.stream] += b.end - b.start
            count[b.stream] += 1
        return {
            "mode": self.mode,
            "num_streams": self.num_streams,
            "makespan": self.makespan,
            "totals": dict(self.totals),
            "lanes": [
                {"stream": s, "label": f"stream {s}", "busy": busy[s], "steps": count[s]}
                for s in range(self.num_streams)
            ],
            "bars": [
                {
                    "step": b.step,
                    "name": b.name,
                    "kind": b.kind,
                    "stream": b.stream,
                    "launch": b.launch,
                    "start": b.start,
                    "end": b.end,
                }
                for b in self.bars
            ],
            "arrows": [
                {
                    "event": a.event,
                    "record": a.record,
                    "wait": a.wait,
                    "from_stream": a.from_stream,
                    "to_stream": a.to_stream,
                    "time": a.time,
                }
                for a in self.arrows
            ],
        }


def _schedule(
    plan: ExecutionPlan, durations: list[float], mode: str, p: DeviceProfile
) -> tuple[list[Bar], list[Arrow], float]:
    steps = plan.steps
    nstreams = max([plan.num_streams, *(int(s.stream) + 1 for s in steps)])
    free = [0.0] * nstreams
    # stream mode: the host thread issues launches one after another
    host = 0.0
    graph_mode = mode == "graph"
    per_node = p.launch_overhead_graph if graph_mode else 0.0
    if graph_mode:
        host = p.launch_overhead_stream  # the one cudaGraphLaunch
    recorded: dict[int, tuple[int, float]] = {}
    future = {s.event for s in steps if s.kind is NodeKind.EventRecord}
    bars: list[Bar] = []
    arrows: list[Arrow] = []
    launched = _LAUNCHED
    for st, d in zip(steps, durations, strict=True):
        s = int(st.stream)
        if not graph_mode and st.kind in launched:
            host += p.launch_overhead_stream
        ready = free[s] if free[s] > host else host
        if st.kind is NodeKind.EventWait and st.event is not None:
            rec = recorded.get(st.event)
            if rec is not None:
                ready = max(ready, rec[1])
                arrows.append(
                    Arrow(st.event, rec[0], st.index, int(steps[rec[0]].stream), s, rec[1])
                )
            elif st.event in future:
                raise InvalidPlan(
                    f"step {st.index} {st.name!r} waits for event {st.event} before any step "
                    "records it; a plan must list each record before its waits"
                )
        start = ready + per_node
        end = start + d
        free[s] = end
        if st.kind is NodeKind.EventRecord and st.event is not None:
            recorded[st.event] = (st.index, end)
        bars.append(Bar(st.index, st.name, st.kind.value, s, ready, start, end))
    makespan = max(free, default=0.0)
    return bars, arrows, makespan


def timeline(
    plan: ExecutionPlan, profile: DeviceProfile | None = None, mode: str = "graph"
) -> Timeline:
    """Start and end of every step of ``plan`` under the cost model, in launch ``mode``.

    Parameters
    ----------
    plan
        The plan; its steps run on their streams in plan order, event waits after their
        records.
    profile
        Device throughputs and overheads (default :class:`~oxiwork.cost.DeviceProfile`).
    mode
        ``"graph"`` (one CUDA graph launch) or ``"stream"`` (every launch from the host).

    Returns
    -------
    Timeline
        With ``totals`` giving the makespan of both modes.

    Raises
    ------
    InvalidArgument
        Unknown ``mode``.
    InvalidPlan
        An event wait comes before the record it waits for.

    Examples
    --------
    >>> from oxiwork.examples import random_op_dag
    >>> tl = timeline(ExecutionPlan.build(random_op_dag(0, 20), max_streams=2))
    >>> all(b.start >= b.launch and b.end >= b.start for b in tl.bars)
    True

    References
    ----------
    R. L. Graham, "Bounds on multiprocessing timing anomalies", SIAM J. Appl. Math.
    17(2), 1969 (list scheduling).
    """
    if mode not in MODES:
        raise InvalidArgument(f"unknown mode {mode!r}; choose 'graph' or 'stream'")
    p = profile or DeviceProfile()
    graph = plan.graph
    durations = [node_time(graph, graph.node(st.node), p) for st in plan.steps]
    totals: dict[str, float] = {}
    result: tuple[list[Bar], list[Arrow], float] | None = None
    for m in MODES:
        bars, arrows, makespan = _schedule(plan, durations, m, p)
        totals[m] = makespan
        if m == mode:
            result = bars, arrows, makespan
    assert result is not None
    bars, arrows, makespan = result
    nstreams = max([plan.num_streams, *(b.stream + 1 for b in bars)])
    return Timeline(mode, nstreams, tuple(bars), tuple(arrows), makespan, totals)
