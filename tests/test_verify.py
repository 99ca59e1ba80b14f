"""verify(): each broken invariant is rejected with a message naming the node."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir, verify
from oxiwork.error import InvalidArgument
from oxiwork.node import Buffer, FusedProgram, FusedStep, KernelConfig, StreamId
from tests.strategies import any_dags, rich_graphs


def _base() -> ComputeGraph:
    b = GraphBuilder()
    x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
    k = b.add_kernel("k", 1, 16).inputs([x]).outputs([y]).finish()
    down = b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=y)
    rec = b.add_event_record("rec")
    b.add_event_wait("wait", rec)
    b.add_barrier("bar")
    b.chain([up, k, down])
    return b.build()


def _with_node(g: ComputeGraph, name: str, **changes: object) -> ComputeGraph:
    nodes = [n.replace(**changes) if n.name == name else n for n in g.nodes]
    return g.with_changes(nodes=nodes)


def _with_buffer(g: ComputeGraph, name: str, **changes: object) -> ComputeGraph:
    bufs = [dataclasses.replace(b, **changes) if b.name == name else b for b in g.buffers]
    return g.with_changes(buffers=bufs)


class TestVerify:
    def test_raises_not_a_graph(self) -> None:
        with pytest.raises(InvalidArgument, match=r"verify\(\) takes a ComputeGraph or an"):
            verify(42)

    @pytest.mark.parametrize(
        ("changes", "match"),
        [
            ({"size_bytes": 0}, r"size of buffer 'x' must be > 0, got 0"),
            ({"dtype": "float7"}, r"buffer 'x': unknown dtype 'float7'"),
            ({"size_bytes": 66}, r"66 bytes is not a whole number of float32"),
            ({"shape": (3, 5)}, r"shape \(3, 5\) holds 60 bytes of float32, but size_bytes is 64"),
            ({"alignment": 48}, r"alignment of buffer 'x' is 48, which is not a power of two"),
            ({"offset": 100}, r"offset 100 is not a non-negative multiple of its alignment 256"),
            ({"offset": -256}, r"offset of buffer 'x' must be >= 0, got -256"),
            ({"external": True, "offset": 0}, r"external buffers are never placed in the arena"),
        ],
    )
    def test_raises_bad_buffer(self, changes: dict, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            verify(_with_buffer(_base(), "x", **changes))

    @pytest.mark.parametrize(
        ("name", "changes", "match"),
        [
            ("k", {"config": None}, r"node 'k' \(id 1, kernel\).*a kernel needs a KernelConfig"),
            ("up", {"memcpy_dir": None}, r"node 'up' .*a memcpy needs a direction"),
            ("up", {"size_bytes": 0}, r"size of memcpy 'up' must be > 0"),
            ("up", {"size_bytes": 128}, r"copies 128 bytes but buffer 'x' holds 64"),
            ("up", {"inputs": (0,)}, r"a HostToDevice copy reads the host"),
            ("down", {"outputs": (0,)}, r"a DeviceToHost copy writes the host"),
            ("down", {"inputs": (0, 1)}, r"a memcpy has at most one source and one dest"),
            ("rec", {"inputs": (0,)}, r"a event_record node touches no buffers"),
            ("bar", {"outputs": (1,)}, r"node 'bar' .*a barrier node touches no buffers"),
            ("bar", {"stream": StreamId(-1)}, r"stream for 'bar' must be >= 0, got -1"),
            ("bar", {"config": KernelConfig.linear(1, 1)}, r"only kernels have a launch config"),
        ],
    )
    def test_raises_bad_node(self, name: str, changes: dict, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            verify(_with_node(_base(), name, **changes))

    def test_message_shows_neighbourhood(self) -> None:
        with pytest.raises(
            InvalidArgument, match=r"node 'k' \(id 1, kernel\); after: 'up'; before: 'down'"
        ):
            verify(_with_node(_base(), "k", config=None))

    def test_raises_memset_value(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64)
        b.add_memset("set", 64, 0, dst=x)
        g = b.build()
        with pytest.raises(InvalidArgument, match=r"memset 'set': value must be a byte 0..255"):
            verify(_with_node(g, "set", memset_value=300))
        with pytest.raises(InvalidArgument, match=r"sets 128 bytes of a 64-byte buffer"):
            verify(_with_node(g, "set", size_bytes=128))

    def test_raises_wait_without_edge(self) -> None:
        g = _base()
        wait = next(n for n in g.nodes if n.name == "wait")
        edges = [e for e in g.edges if e[1] != wait.id]
        with pytest.raises(InvalidArgument, match=r"waits for 'rec' but does not depend on it"):
            verify(g.with_changes(edges=edges))

    def test_raises_wait_on_non_record(self) -> None:
        g = _base()
        bar = next(n for n in g.nodes if n.name == "bar")
        with pytest.raises(InvalidArgument, match=r"an event wait must name an event record"):
            verify(_with_node(g, "wait", event=bar.id))

    def test_raises_bad_fused_program(self) -> None:
        g = _base()
        k = next(n for n in g.nodes if n.name == "k")
        good = FusedProgram((FusedStep("relu", (), (("in", 0),), k.id),), (0,))
        verify(_with_node(g, "k", fused=good, fused_from=(k.id,)))
        with pytest.raises(InvalidArgument, match=r"fused kernel lists no original nodes"):
            verify(_with_node(g, "k", fused=good))
        bad_arg = FusedProgram((FusedStep("relu", (), (("in", 3),), k.id),), (0,))
        with pytest.raises(InvalidArgument, match=r"fused step 0 \(relu\) reads in 3"):
            verify(_with_node(g, "k", fused=bad_arg, fused_from=(k.id,)))
        forward = FusedProgram((FusedStep("relu", (), (("step", 0),), k.id),), (0,))
        with pytest.raises(InvalidArgument, match=r"reads step 0, which does not exist"):
            verify(_with_node(g, "k", fused=forward, fused_from=(k.id,)))
        outs = FusedProgram((FusedStep("relu", (), (("in", 0),), k.id),), (0, 0))
        with pytest.raises(InvalidArgument, match=r"fused program has 2 outputs for 1 output"):
            verify(_with_node(g, "k", fused=outs, fused_from=(k.id,)))

    @settings(max_examples=100, deadline=None)
    @given(g=rich_graphs())
    def test_built_graphs_verify(self, g: ComputeGraph) -> None:
        verify(g)

    @settings(max_examples=50, deadline=None)
    @given(g=any_dags(max_nodes=30))
    def test_placed_buffers_verify(self, g: ComputeGraph) -> None:
        bufs, off = [], 0
        for b in g.buffers:
            if b.external:
                bufs.append(b)
                continue
            bufs.append(
                Buffer(b.id, b.name, b.size_bytes, b.dtype, b.shape, b.alignment, offset=off)
            )
            off += -(-b.size_bytes // b.alignment) * b.alignment
        verify(g.with_changes(buffers=bufs))
