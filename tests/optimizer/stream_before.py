"""The stream pass as it was before issue 14's speed-up: the oracle the fast pass is
compared against (tests/optimizer/test_stream_fast.py). The functions the speed-up
re-implemented (list scheduling, chain merging, the needed events, the realisation with
its stream-order edges, the makespan, the issue order) are kept here verbatim; the
unchanged parts (chain covers, pins) are the pass's own."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oxiwork import cost, validate
from oxiwork.analysis import paused_gc, topo
from oxiwork.graph import ComputeGraph, DenseGraph
from oxiwork.node import GraphNode, NodeId, NodeKind, StreamId
from oxiwork.ops.program import share_bound
from oxiwork.optimizer import PassResult
from oxiwork.optimizer import stream as _stream
from oxiwork.optimizer.stream import (
    _GREEDY_CHAIN_SLACK,
    StreamAssignment,
    _check_cap,
    _costs,
    _exact_chains,
    _from_chains,
    _greedy_chains,
    _path_cover,
    _pins,
    _short,
)
from oxiwork.verify import carry_node_rules


@dataclass(frozen=True, slots=True)
class _Realized:
    graph: ComputeGraph
    events: tuple[tuple[NodeId, NodeId, NodeId, NodeId], ...]
    order: dict[StreamId, tuple[NodeId, ...]]
    issue: tuple[NodeId, ...]


def _list_schedule(
    d: DenseGraph, cost: Sequence[float], prio: Sequence[int], pins: Mapping[int, int], k: int
) -> list[int]:
    """Stream per position by list scheduling in ``prio`` order on ``k`` streams."""
    n = len(d.ids)
    stream = [0] * n
    finish = [0.0] * n
    free = [0.0] * k
    for v in prio:
        ready = 0.0
        pref = -1
        for u in d.pred[v]:
            if finish[u] >= ready:
                ready, pref = finish[u], stream[u]
        if v in pins:
            s = pins[v]
        else:
            s = min(range(k), key=lambda t: (max(ready, free[t]), t != pref, t))
        start = max(ready, free[s])
        stream[v] = s
        finish[v] = start + cost[v]
        free[s] = finish[v]
    return stream


def _merge_chains(
    chains: list[list[int]],
    asap: Sequence[float],
    alap: Sequence[float],
    cost: Sequence[float],
    pins: Mapping[int, int],
    k: int,
) -> list[int]:
    """Stream per position by merging whole chains onto ``k`` streams.

    Chains are taken most urgent first: by the ALAP start of their first node, then by
    their least slack, then by id. Each goes, whole, to the stream on which it would
    finish earliest if appended (its work after ``max(stream free, ASAP of its head)``),
    lowest stream on ties. A chain holding pins goes to its most common pin; pinned nodes
    stay on their own pin regardless.
    """
    n = len(cost)
    stream = [0] * n
    free = [0.0] * k

    def key(i: int) -> tuple[float, float, int]:
        ch = chains[i]
        return (alap[ch[0]], min(alap[p] - asap[p] for p in ch), ch[0])

    for i in sorted(range(len(chains)), key=key):
        ch = chains[i]
        work = sum(cost[p] for p in ch)
        votes: dict[int, int] = {}
        for p in ch:
            if p in pins:
                votes[pins[p]] = votes.get(pins[p], 0) + 1
        if votes:
            s = min(votes, key=lambda x: (-votes[x], x))
        else:
            s = min(range(k), key=lambda t: (max(free[t], asap[ch[0]]) + work, t))
        free[s] = max(free[s], asap[ch[0]]) + work
        for p in ch:
            stream[p] = pins.get(p, s)
    return stream


def _simulate(
    d: DenseGraph, cost: Sequence[float], stream: Sequence[int], issue: Sequence[int]
) -> float:
    """Makespan when each stream runs in ``issue`` order and a node waits for its inputs.

    With the events the pass inserts, happens-before is exactly "dependencies + stream
    order", so this equals the makespan of the realised plan (events cost nothing).
    """
    free: dict[int, float] = {}
    finish = [0.0] * len(cost)
    end = 0.0
    for v in issue:
        s = stream[v]
        t = free.get(s, 0.0)
        for u in d.pred[v]:
            if finish[u] > t:
                t = finish[u]
        finish[v] = free[s] = t + cost[v]
        if finish[v] > end:
            end = finish[v]
    return end


def _needed_events(
    d: DenseGraph, stream: Sequence[int], issue: Sequence[int], free: set[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Cross-stream edges of TR(closure(edges + stream order)) that are not free events.

    Per node v (in issue order) the clock ``c[a]`` is the last position on stream ``a``
    below v. The node ``top_a`` there is an immediate predecessor of v in the reduction
    unless the top of another stream already has it below (its own clock covers
    ``c[a]``): any node strictly between ``top_a`` and v lies on some stream ``b`` and so
    below ``top_b``.
    """
    ids_s = sorted(set(stream))
    sidx = {s: i for i, s in enumerate(ids_s)}
    k = len(ids_s)
    si = [sidx[s] for s in stream]
    members: list[list[int]] = [[] for _ in range(k)]
    posn = [0] * len(stream)
    clock: list[list[int]] = [[]] * len(stream)
    last: list[list[int]] = [[-1] * k for _ in range(k)]
    need: list[tuple[int, int]] = []
    pred = d.pred
    for v in issue:
        s = si[v]
        prev = last[s]
        ps = pred[v]
        c = list(map(max, prev, *[clock[u] for u in ps])) if ps else prev[:]
        # Nothing new from another stream (the common case): every top is below the
        # previous node of v's stream, which covers it.
        if c != prev or prev[s] < 0:
            tops = [(b, clock[members[b][cb]]) for b, cb in enumerate(c) if cb >= 0 and b != s]
            if prev[s] >= 0:
                tops.append((s, prev))
            for a, _ in tops:
                if a == s:
                    continue
                ca = c[a]
                if (
                    not any(b != a and tc[a] >= ca for b, tc in tops)
                    and (
                        (top := members[a][ca]),
                        v,
                    )
                    not in free
                ):
                    need.append((top, v))
        c[s] = posn[v] = len(members[s])
        members[s].append(v)
        clock[v] = last[s] = c
    return need


def _realize(
    graph: ComputeGraph,
    stream: Sequence[int],
    issue: Sequence[int],
    need: list[tuple[int, int]] | None = None,
) -> _Realized:
    """The new graph: streams set, events inserted, stream-order edges added where needed
    (``need``: :func:`_needed_events` of ``stream`` and ``issue``, when known)."""
    d = graph.dense()
    ids = d.ids
    nodes = graph.nodes
    if need is None:
        free = {
            (d.pos[n.event], d.pos[n.id])
            for n in nodes
            if n.kind is NodeKind.EventWait and n.event is not None
        }
        need = _needed_events(d, stream, issue, free)
    else:
        need = list(need)
    rank = {v: r for r, v in enumerate(issue)}
    need.sort(key=lambda e: (rank[e[0]], rank[e[1]]))

    next_id = int(graph.next_node_id())
    after: dict[int, list[NodeId]] = {}  # position -> records issued right after it
    before: dict[int, list[NodeId]] = {}  # position -> waits issued right before it
    # Streams come from 0..max_streams-1 and the (checked) pins; the graph need not check
    # the nodes' other fields again when every one is a valid stream id (events likewise:
    # a stream and a name made from a checked one, at most 48 characters).
    new_nodes: list[GraphNode] = [
        n if n.stream == stream[p] else n.replace(stream=StreamId(stream[p]))
        for p, n in enumerate(nodes)
    ]
    vouch = all(0 <= s <= validate.MAX_STREAM for s in set(stream))
    new_stream: dict[NodeId, int] = {}
    edges = list(graph.edges)
    events = []
    # One record per producer, however many streams wait for it: a CUDA event recorded
    # once can be waited on by any number of streams (cuStreamWaitEvent), so a record per
    # wait would add launches that order nothing more.
    record_of: dict[int, NodeId] = {}
    for u, v in need:
        un = nodes[u]
        rec = record_of.get(u)
        if rec is None:
            rec = record_of[u] = NodeId(next_id)
            next_id += 1
            new_nodes.append(
                GraphNode(
                    rec,
                    f"record({_short(un.name)})",
                    NodeKind.EventRecord,
                    stream=StreamId(stream[u]),
                )
            )
            new_stream[rec] = stream[u]
            after.setdefault(u, []).append(rec)
            edges.append((ids[u], rec))
        wait = NodeId(next_id)
        next_id += 1
        new_nodes.append(
            GraphNode(
                wait,
                f"wait({_short(un.name)})",
                NodeKind.EventWait,
                stream=StreamId(stream[v]),
                event=rec,
            )
        )
        new_stream[wait] = stream[v]
        before.setdefault(v, []).append(wait)
        edges += [(rec, wait), (wait, ids[v])]
        events.append((rec, wait, ids[u], ids[v]))
    for waits in before.values():  # waits before v in the order of their producers
        waits.sort()

    # Issue order of the new graph and the per-stream orders.
    full: list[NodeId] = []
    for v in issue:
        full += before.get(v, ())
        full.append(ids[v])
        full += after.get(v, ())
    stream_of = {ids[p]: stream[p] for p in range(len(ids))}
    stream_of.update(new_stream)

    # Stream-order edges: consecutive nodes of a stream get an edge unless the edges
    # already order them. Walking the issue order with clocks over "edges + the stream
    # edges added so far", each stream's prefix is a chain, so "the last node of my stream
    # below me is my stream predecessor" is exactly "already ordered".
    preds: dict[NodeId, list[NodeId]] = {}
    for a, b in edges:
        preds.setdefault(b, []).append(a)
    ids_s = sorted(set(stream_of.values()))
    sidx = {s: i for i, s in enumerate(ids_s)}
    k = len(ids_s)
    clock: dict[NodeId, list[int]] = {}
    tail: list[NodeId | None] = [None] * k
    count = [0] * k
    for x in full:
        s = sidx[stream_of[x]]
        ps = preds.get(x)
        if not ps:
            c = [-1] * k
        elif len(ps) == 1:
            c = clock[ps[0]][:]
        else:
            c = list(map(max, *[clock[p] for p in ps]))
        prev = tail[s]
        if prev is not None and c[s] < count[s] - 1:
            edges.append((prev, x))
            c = list(map(max, c, clock[prev]))
        c[s] = count[s]
        count[s] += 1
        tail[s] = x
        clock[x] = c

    order: dict[StreamId, list[NodeId]] = {StreamId(s): [] for s in ids_s}
    for x in full:
        order[StreamId(stream_of[x])].append(x)
    new_graph = graph.with_changes(
        nodes=new_nodes, edges=edges, checked_nodes=new_nodes if vouch else ()
    )
    share_bound(graph, new_graph)  # only streams changed: kernels bind as before
    cost.restreamed_costs(graph, new_graph)  # and cost as before (events are new)
    carry_node_rules(graph, new_graph)  # and pass the node rules as before
    return _Realized(
        new_graph,
        tuple(events),
        {s: tuple(v) for s, v in order.items()},
        tuple(full),
    )


def _makespan(graph: ComputeGraph, issue: Sequence[NodeId], cost: Mapping[NodeId, float]) -> float:
    """Finish time when streams run in order and waits hold their stream (zero-cost events)."""
    free: dict[int, float] = {}
    finish: dict[NodeId, float] = {}
    end = 0.0
    for x in issue:
        node = graph.node(x)
        s = int(node.stream or 0)
        start = free.get(s, 0.0)
        if node.kind is NodeKind.EventWait and node.event is not None:
            start = max(start, finish[node.event])
        t = start + cost.get(x, 0.0)
        finish[x] = free[s] = t
        end = max(end, t)
    return end


def issue_order(
    graph: ComputeGraph, costs: Mapping[NodeId, float] | None = None
) -> tuple[NodeId, ...]:
    """The order a plan issues the nodes in: by simulated start time, then topologically.

    Each stream runs in order, a node starts when its stream is free and its dependencies
    (edges, and the record of a wait) have finished; nodes are sorted by that start time,
    ties broken by ``graph.topological_order()``. Since a node never starts before a
    predecessor or an earlier node of its stream, this is a topological order consistent
    with every stream; sorting by time keeps the streams abreast, which keeps the memory
    pass's happens-before-safe lifetimes short.

    >>> from oxiwork.examples import quick_start
    >>> [quick_start().node(n).name for n in issue_order(quick_start())]
    ['upload', 'relu', 'scale', 'download']
    """
    cost = _costs(graph, costs)
    d = graph.dense()
    topo_ids = graph.topological_order()
    free: dict[int, float] = {}
    finish = [0.0] * len(d.ids)
    start = [0.0] * len(d.ids)
    pos = d.pos
    for nid in topo_ids:
        p = pos[nid]
        node = graph.nodes[p]
        s = int(node.stream or 0)
        t = free.get(s, 0.0)
        for u in d.pred[p]:
            if finish[u] > t:
                t = finish[u]
        start[p] = t
        finish[p] = free[s] = t + float(cost.get(nid, 0.0))
    ranked = sorted(range(len(topo_ids)), key=lambda r: (start[pos[topo_ids[r]]], r))
    return tuple(topo_ids[r] for r in ranked)


def _finish(
    graph: ComputeGraph,
    stream: list[int],
    issue: list[int],
    info: topo.TopoInfo,
    *,
    max_streams: int,
    width: int,
    width_exact: bool,
    chains: int,
    method: str,
    t0: float,
    need: list[tuple[int, int]] | None = None,
) -> PassResult:
    real = _realize(graph, stream, issue, need)
    total = sum(info.cost.values())
    p = min(max_streams, width) if width_exact else max_streams
    lower = max(info.makespan, total / max(p, 1))
    makespan = _makespan(real.graph, real.issue, info.cost)
    stream_of = {n.id: StreamId(int(n.stream or 0)) for n in real.graph.nodes}
    sa = StreamAssignment(
        stream_of=stream_of,
        order=real.order,
        num_streams=max((int(s) for s in real.order), default=0) + 1,
        events=real.events,
        event_count=len(real.events),
        min_event_count=len(real.events),
        record_count=len({e[0] for e in real.events}),
        width=width,
        width_exact=width_exact,
        chains=chains,
        method=method,
        makespan=makespan,
        lower_bound=lower,
        critical_path=info.makespan,
        total_work=total,
        seconds=time.perf_counter() - t0,
    )
    return PassResult(real.graph, {"streams": sa})


def assign_streams(
    graph: ComputeGraph,
    *,
    max_streams: int = 4,
    costs: Mapping[NodeId, float] | None = None,
) -> PassResult:
    """The stream pass before the speed-up."""
    with paused_gc():
        return _assign_streams(graph, max_streams, costs)


def _assign_streams(
    graph: ComputeGraph, max_streams: int, costs: Mapping[NodeId, float] | None
) -> PassResult:
    t0 = time.perf_counter()
    max_streams = _check_cap(max_streams)
    pins = _pins(graph, max_streams)
    cost_map = _costs(graph, costs)
    info = topo.analyze(graph, cost_map)
    d = graph.dense()
    n = len(d.ids)
    lb_width = max(info.level_widths, default=0)
    chains: list[list[int]] | None = None
    width, exact = lb_width, False
    if n <= _stream.EXACT_CHAIN_LIMIT:  # read at call time: tests lower it
        chains = _exact_chains(d)
        width, exact = len(chains), True
    elif lb_width <= max_streams:
        chains = _greedy_chains(d, max_streams + _GREEDY_CHAIN_SLACK)
        if chains is not None and len(chains) == lb_width:
            exact = True  # a chain cover meeting an antichain is optimal (Dilworth)
    if chains is not None and len(chains) <= max_streams:
        stream = _from_chains(chains, pins, max_streams, n)
        if stream is not None:
            return _finish(
                graph,
                stream,
                list(d.topo),
                info,
                max_streams=max_streams,
                width=width,
                width_exact=exact,
                chains=len(chains),
                method="chains",
                t0=t0,
            )
    # Over the cap: two candidates on the same issue order (ALAP priority), the one with
    # the shorter simulated makespan wins; within 0.1% the one needing fewer events.
    pos = d.pos
    ids = d.ids
    prio = [pos[nid] for nid in info.priority]
    cost = [info.cost[nid] for nid in ids]
    asap = [info.asap[nid] for nid in ids]
    alap = [info.alap[nid] for nid in ids]
    merged_from = chains if chains is not None else _path_cover(d)
    free = {
        (pos[x.event], pos[x.id])
        for x in graph.nodes
        if x.kind is NodeKind.EventWait and x.event is not None
    }
    candidates = []
    for method, stream in (
        ("list_schedule", _list_schedule(d, cost, prio, pins, max_streams)),
        ("merged_chains", _merge_chains(merged_from, asap, alap, cost, pins, max_streams)),
    ):
        candidates.append((_simulate(d, cost, stream, prio), method, stream))
    best = min(candidates, key=lambda c: c[0])
    # Only the candidates within 0.1% of the best makespan compete on events, so only
    # theirs are counted (an O(E x streams) walk each).
    close = [
        (makespan, len(need), method, stream, need)
        for makespan, method, stream in candidates
        if makespan <= best[0] * 1.001
        for need in (_needed_events(d, stream, prio, free),)
    ]
    _, _, method, stream, need = min(close, key=lambda c: (c[1], c[0]))
    return _finish(
        graph,
        stream,
        prio,
        info,
        need=need,
        max_streams=max_streams,
        width=width,
        width_exact=exact,
        chains=len(merged_from),
        method=method,
        t0=t0,
    )
