"""Stream capture (oxiwork/capture.py): the dependencies real capture creates, its errors."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import oxiwork
from oxiwork import ExecutionPlan, GraphBuilder, MemcpyDir, SequentialExecutor, reference
from oxiwork.capture import (
    BakedHostValue,
    CaptureError,
    CaptureInvalidated,
    CaptureIsolation,
    CaptureRace,
    CaptureUnjoined,
    CaptureUnsupported,
    EventNeverRecorded,
    StreamNotCapturing,
)

N = 1024 * 4


def _closure(graph: oxiwork.ComputeGraph) -> set[tuple[str, str]]:
    """The happens-before relation by node name (the transitive closure of the edges)."""
    g = nx.DiGraph()
    g.add_nodes_from(n.id for n in graph.nodes)
    g.add_edges_from(graph.edges)
    tc = nx.transitive_closure_dag(g)
    return {(graph.node(a).name, graph.node(b).name) for a, b in tc.edges}


def _fork_join() -> oxiwork.capture.Capture:
    """upload on main; relu on side and scale on main in parallel; add joins them."""
    with oxiwork.capture() as cap:
        x, y, z, w = (cap.buffer(n, N) for n in ("x", "y", "z", "w"))
        main, side = cap.stream("main"), cap.stream("side")
        main.memcpy("upload", MemcpyDir.HostToDevice, dst=x)
        side.wait(main.record())
        side.launch("relu", 4, 256, inputs=[x], outputs=[y])
        main.launch("scale", 4, 256, inputs=[x], outputs=[z], alpha=3.0)
        main.wait(side.record())
        main.launch("add", 4, 256, inputs=[y, z], outputs=[w])
        main.memcpy("download", MemcpyDir.DeviceToHost, src=w)
    return cap


def _explicit_fork_join() -> oxiwork.ComputeGraph:
    b = GraphBuilder()
    x, y, z, w = (b.alloc_buffer(n, N) for n in ("x", "y", "z", "w"))
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, N, dst=x)
    relu = b.add_kernel("relu", 4, 256).inputs([x]).outputs([y]).finish()
    scale = b.add_kernel("scale", 4, 256).inputs([x]).outputs([z]).params(alpha=3.0).finish()
    add = b.add_kernel("add", 4, 256).inputs([y, z]).outputs([w]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, N, src=w)
    b.fan_out(up, [relu, scale])
    b.fan_in([relu, scale], add)
    b.dep(add, down)
    return b.build()


class TestCaptureEqualsExplicit:
    def test_same_nodes_and_same_happens_before(self) -> None:
        captured, explicit = _fork_join().graph, _explicit_fork_join()
        key = lambda n: (n.name, n.kind, n.inputs, n.outputs, n.params, n.config)  # noqa: E731
        assert sorted(map(key, captured.nodes)) == sorted(map(key, explicit.nodes))
        assert _closure(captured) == _closure(explicit)

    def test_same_values_when_planned_and_run(self) -> None:
        captured, explicit = _fork_join().graph, _explicit_fork_join()
        x = np.linspace(-2, 2, N // 4, dtype=np.float32)
        want = reference.evaluate(explicit, {"x": x})["w"]
        for streams in (1, 2, 4):
            plan = ExecutionPlan.build(captured, max_streams=streams)
            got = SequentialExecutor(plan).run({"x": x}).outputs["w"]
            np.testing.assert_array_equal(got, want)

    def test_events_make_no_nodes_and_streams_are_not_pinned(self) -> None:
        cap = _fork_join()
        assert len(cap.graph.nodes) == 5
        assert all(n.stream is None for n in cap.graph.nodes)
        by_name = {n.name: n.id for n in cap.graph.nodes}
        assert cap.stream_of[by_name["relu"]] == "side"
        assert cap.stream_of[by_name["add"]] == "main"


class TestCaptureErrors:
    def test_raises_not_capturing_for_a_stream_never_forked(self) -> None:
        with (
            pytest.raises(StreamNotCapturing, match=r"'side', which is not capturing.*wait"),
            oxiwork.capture() as cap,
        ):
            x = cap.buffer("x", N)
            cap.stream("side").memset("zero", x)

    def test_raises_unjoined_for_a_fork_never_joined(self) -> None:
        with (
            pytest.raises(CaptureUnjoined, match=r"cudaErrorStreamCaptureUnjoined.*'relu'"),
            oxiwork.capture() as cap,
        ):
            x, y = cap.buffer("x", N), cap.buffer("y", N)
            main, side = cap.stream("main"), cap.stream("side")
            main.memcpy("upload", MemcpyDir.HostToDevice, dst=x)
            side.wait(main.record())
            side.launch("relu", 4, 256, inputs=[x], outputs=[y])
        assert CaptureUnjoined.cuda_error == "cudaErrorStreamCaptureUnjoined"

    def test_raises_isolation_for_an_event_recorded_outside_the_capture(self) -> None:
        with pytest.raises(CaptureIsolation, match="outside the capture"), oxiwork.capture() as cap:
            side = cap.stream("side")  # not capturing: its record is eager work
            ev = side.record("before")
            cap.stream("main").wait(ev)

    def test_raises_never_recorded(self) -> None:
        with pytest.raises(EventNeverRecorded, match="never recorded"), oxiwork.capture() as cap:
            cap.stream("main").wait(cap.event("e"))

    def test_raises_unsupported_for_a_synchronize(self) -> None:
        with (
            pytest.raises(CaptureUnsupported, match="cudaErrorStreamCaptureUnsupported"),
            oxiwork.capture() as cap,
        ):
            cap.stream("main").synchronize()

    @pytest.mark.parametrize(
        "value", [np.array([2.0], dtype=np.float32), np.array(2.0), [2.0], {"a": 1}]
    )
    def test_raises_baked_host_value_for_host_objects(self, value: object) -> None:
        with (
            pytest.raises(BakedHostValue, match=r"parameter 'alpha'.*baked"),
            oxiwork.capture() as cap,
        ):
            x, y = cap.buffer("x", N), cap.buffer("y", N)
            cap.stream("main").launch("scale", 4, 256, inputs=[x], outputs=[y], alpha=value)

    def test_raises_race_for_a_missing_event_between_streams(self) -> None:
        # side writes y; main reads y with no event between: concurrent on a GPU.
        with (
            pytest.raises(
                CaptureRace,
                match=r"'y' is written by 'relu' \(stream 'side'\).*Record an event on 'side' after 'relu'",
            ),
            oxiwork.capture() as cap,
        ):
            x, y, z = cap.buffer("x", N), cap.buffer("y", N), cap.buffer("z", N)
            main, side = cap.stream("main"), cap.stream("side")
            main.memcpy("upload", MemcpyDir.HostToDevice, dst=x)
            side.wait(main.record())
            side.launch("relu", 4, 256, inputs=[x], outputs=[y])
            join = side.record()
            main.launch("scale", 4, 256, inputs=[y], outputs=[z], alpha=2.0)
            main.wait(join)  # too late: scale already read y

    def test_an_error_invalidates_the_capture(self) -> None:
        cap = oxiwork.capture()
        with pytest.raises(CaptureUnsupported):
            cap.stream("main").synchronize()
        with pytest.raises(CaptureInvalidated, match="cudaErrorStreamCaptureInvalidated"):
            cap.stream("main")
        with pytest.raises(CaptureError, match="has not ended"):
            _ = cap.graph

    def test_an_ended_capture_takes_no_more_work(self) -> None:
        cap = _fork_join()
        with pytest.raises(CaptureError, match="has ended"):
            cap.stream("main")
        assert not cap.streams["side"].capturing

    def test_builder_errors_propagate_and_invalidate(self) -> None:
        cap = oxiwork.capture()
        with pytest.raises(oxiwork.GraphError, match="size"):
            cap.buffer("x", 0)
        with pytest.raises(CaptureInvalidated):
            cap.buffer("y", 64)


@st.composite
def _programs(draw: st.DrawFn) -> list[tuple]:
    """A random capture program on up to 3 streams: ops, records and waits."""
    steps: list[tuple] = [("op", 0)]  # the origin stream starts: a graph is never empty
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["op", "op", "op", "fork"]))
        s = draw(st.integers(0, 2))
        if kind == "op":
            steps.append(("op", s))
        else:
            steps.append(("fork", draw(st.integers(0, 2)), s))  # s waits on a record of src
    return steps


@settings(max_examples=150, deadline=None)
@given(_programs())
def test_capture_orders_stream_order_and_waits(program: list[tuple]) -> None:
    """Every stream's ops form a chain, and an op after a wait follows everything that
    was issued on the recording stream before the record."""
    cap = oxiwork.capture("s0")
    streams = [cap.stream(f"s{i}") for i in range(3)]
    issued: dict[int, list] = {0: [], 1: [], 2: []}  # per stream, op ids so far
    must_follow: list[tuple[list, int]] = []  # (ops before a record, stream that waited)
    pending: dict[int, list[list]] = {0: [], 1: [], 2: []}
    k = 0
    for step in program:
        if step[0] == "op":
            s = step[1]
            if not streams[s].capturing:
                continue
            # host callbacks touch no buffer: their edges come from streams and events alone
            nid = streams[s].host_callback(f"k{k}")
            k += 1
            for before in pending[s]:
                must_follow.append((before, nid))
            pending[s] = []
            issued[s].append(nid)
        else:
            _, src, dst = step
            if src == dst or not streams[src].capturing:
                continue
            streams[dst].wait(streams[src].record())
            pending[dst].append(list(issued[src]))
    # join every stream back into s0, then end
    for s in (1, 2):
        if streams[s].capturing:
            streams[0].wait(streams[s].record())
    graph = cap.end()  # every stream that forked was joined back: never unjoined
    hb = {(a, b) for a, b in nx.transitive_closure_dag(nx.DiGraph(graph.edges)).edges}
    for ops in issued.values():
        for a, b in itertools.pairwise(ops):
            assert (a, b) in hb
    for before, nid in must_follow:
        for a in before:
            assert (a, nid) in hb
