"""GraphBuilder: every rejected input, edge inference, copy binding."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, GraphWarning, MemcpyDir, NodeId
from oxiwork.error import (
    CycleError,
    EmptyGraph,
    GraphError,
    InvalidArgument,
    UnknownBuffer,
    UnknownNode,
)
from oxiwork.node import MAX_SHARED_MEM_BYTES, BufferId


def _quick_start() -> tuple[GraphBuilder, dict[str, object]]:
    b = GraphBuilder()
    buf_in, buf_mid, buf_out = (b.alloc_buffer(n, 4096) for n in ("input", "mid", "output"))
    upload = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096)
    k0 = b.add_kernel("relu", 4, 256).fusible(True).inputs([buf_in]).outputs([buf_mid]).finish()
    k1 = b.add_kernel("scale", 4, 256).fusible(True).inputs([buf_mid]).outputs([buf_out]).finish()
    download = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096)
    b.chain([upload, k0, k1, download])
    return b, dict(locals())


class TestRejects:
    def test_raises_cycle_named(self) -> None:
        b = GraphBuilder()
        x, y, z = (b.add_barrier(n) for n in "xyz")
        b.chain([x, y, z])
        with pytest.raises(
            CycleError,
            match=r"dependency 'z' -> 'x' would close the cycle 'x' -> 'y' -> 'z' -> 'x'",
        ) as e:
            b.dep(z, x)
        assert e.value.cycle == ("x", "y", "z")

    def test_raises_self_loop(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        with pytest.raises(CycleError, match=r"node 'x' cannot depend on itself"):
            b.dep(x, x)

    def test_raises_foreign_node_id(self) -> None:
        a, b = GraphBuilder(), GraphBuilder()
        a.add_barrier("x")
        foreign = b.add_barrier("y")
        other = a.add_barrier("z")
        with pytest.raises(UnknownNode, match=r"NodeId\(0\) was not issued by this builder"):
            a.dep(foreign, other)

    def test_raises_unknown_node_id(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        with pytest.raises(UnknownNode, match=r"NodeId\(7\) is not a node of this builder"):
            b.dep(x, NodeId(7))

    def test_raises_buffer_id_as_node(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        buf = b.alloc_buffer("buf", 4)
        with pytest.raises(InvalidArgument, match=r"got BufferId\(0\) \(that is a BufferId\)"):
            b.dep(x, buf)  # type: ignore[arg-type]

    def test_raises_node_id_as_buffer(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        with pytest.raises(InvalidArgument, match=r"got NodeId\(0\) \(that is a NodeId\)"):
            b.add_kernel("k", 1, 1).inputs([x])  # type: ignore[list-item]

    def test_raises_unfinished_kernel_as_node(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        kb = b.add_kernel("k", 1, 1)
        with pytest.raises(InvalidArgument, match=r"did you forget \.finish\(\)\?"):
            b.dep(x, kb)  # type: ignore[arg-type]

    def test_raises_foreign_buffer(self) -> None:
        a, b = GraphBuilder(), GraphBuilder()
        foreign = b.alloc_buffer("x", 4)
        a.alloc_buffer("y", 4)
        with pytest.raises(UnknownBuffer, match=r"uses BufferId\(0\), which is not a buffer"):
            a.add_memset("set", 4, 0, dst=foreign)

    @pytest.mark.parametrize("size", [0, -4])
    def test_raises_buffer_size(self, size: int) -> None:
        with pytest.raises(InvalidArgument, match=rf"size of buffer 'x' must be > 0, got {size}"):
            GraphBuilder().alloc_buffer("x", size)

    def test_raises_copy_size(self) -> None:
        with pytest.raises(InvalidArgument, match=r"size of memcpy 'c' must be > 0, got -1"):
            GraphBuilder().add_memcpy("c", MemcpyDir.HostToDevice, -1)

    def test_raises_memset_size(self) -> None:
        with pytest.raises(InvalidArgument, match=r"size of memset 's' must be > 0, got 0"):
            GraphBuilder().add_memset("s", 0, 0)

    def test_raises_copy_larger_than_buffer(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 16)
        with pytest.raises(InvalidArgument, match=r"copies 64 bytes but buffer 'x' holds 16"):
            b.add_memcpy("c", MemcpyDir.HostToDevice, 64, dst=x)

    def test_raises_size_not_multiple_of_dtype(self) -> None:
        with pytest.raises(InvalidArgument, match=r"6 bytes is not a whole number of float32"):
            GraphBuilder().alloc_buffer("x", 6)

    def test_raises_shape_mismatch(self) -> None:
        with pytest.raises(InvalidArgument, match=r"shape \(2, 3\) holds 24 bytes"):
            GraphBuilder().alloc_buffer("x", 16, shape=(2, 3))

    def test_raises_unknown_dtype(self) -> None:
        with pytest.raises(InvalidArgument, match=r"unknown dtype 'bfloat3'"):
            GraphBuilder().alloc_buffer("x", 16, dtype="bfloat3")

    @pytest.mark.parametrize(
        ("blocks", "threads", "match"),
        [
            (0, 32, r"grid\.x is 0; every grid dimension must be >= 1"),
            (1, 0, r"block\.x is 0; every block dimension must be >= 1"),
            (1, 1025, r"block\.x is 1025; CUDA allows at most 1024"),
            (-3, 32, r"grid\.x is -3"),
        ],
    )
    def test_raises_linear_dims(self, blocks: int, threads: int, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            GraphBuilder().add_kernel("k", blocks, threads)

    @pytest.mark.parametrize(
        ("grid", "block", "match"),
        [
            ((1, 65536, 1), (32, 1, 1), r"grid\.y is 65536; CUDA allows at most 65535"),
            ((1, 1, 65536), (32, 1, 1), r"grid\.z is 65536; CUDA allows at most 65535"),
            (
                (1, 1, 1),
                (32, 32, 2),
                r"block \(32, 32, 2\) has 2048 threads; CUDA allows at most 1024",
            ),
            ((1, 1, 1), (1, 1, 65), r"block\.z is 65; CUDA allows at most 64"),
            ((1, 0, 1), (1, 1, 1), r"grid\.y is 0"),
        ],
    )
    def test_raises_3d_dims(self, grid: tuple, block: tuple, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            GraphBuilder().add_kernel_3d("k", grid, block)

    def test_raises_shared_memory(self) -> None:
        with pytest.raises(InvalidArgument, match=r"shared_mem_bytes is 232449; at most 232448"):
            GraphBuilder().add_kernel("k", 1, 32, MAX_SHARED_MEM_BYTES + 1)
        GraphBuilder().add_kernel("k", 1, 32, MAX_SHARED_MEM_BYTES)  # the limit itself is fine

    def test_raises_duplicate_buffer_name(self) -> None:
        b = GraphBuilder()
        b.alloc_buffer("x", 4)
        with pytest.raises(InvalidArgument, match=r"a buffer named 'x' already exists"):
            b.alloc_buffer("x", 8)

    def test_raises_unfinished_kernel_at_build(self) -> None:
        b = GraphBuilder()
        b.add_barrier("x")
        b.add_kernel("late", 1, 1)
        with pytest.raises(InvalidArgument, match=r"kernel\(s\) 'late' were started but never"):
            b.build()

    def test_raises_empty_graph(self) -> None:
        with pytest.raises(EmptyGraph, match=r"the graph has no nodes"):
            GraphBuilder().build()

    def test_raises_finish_twice(self) -> None:
        kb = GraphBuilder().add_kernel("k", 1, 1)
        kb.finish()
        with pytest.raises(InvalidArgument, match=r"kernel 'k' was already finished"):
            kb.finish()

    def test_raises_bad_names(self) -> None:
        with pytest.raises(InvalidArgument, match=r"buffer name must not be empty"):
            GraphBuilder().alloc_buffer("  ", 4)
        with pytest.raises(InvalidArgument, match=r"contains control characters"):
            GraphBuilder().add_barrier("a\nb")

    def test_raises_wait_on_non_record(self) -> None:
        b = GraphBuilder()
        x = b.add_barrier("x")
        with pytest.raises(InvalidArgument, match=r"must wait for an event record, but 'x'"):
            b.add_event_wait("w", x)

    def test_raises_bad_cost_and_params(self) -> None:
        kb = GraphBuilder().add_kernel("k", 1, 1)
        assert kb.cost(0.0) is kb  # a free node: finite and >= 0 (oxiwork.validate.cost)
        with pytest.raises(InvalidArgument, match=r"cost of 'k' must be finite and >= 0"):
            kb.cost(-1e-9)
        with pytest.raises(InvalidArgument, match=r"parameter 'alpha' of 'k' must be a number"):
            kb.params(alpha=[1])
        with pytest.raises(
            InvalidArgument, match=r"parameter 'beta' of 'k' must be finite, got nan"
        ):
            kb.params(beta=float("nan"))

    def test_raises_unknown_op(self) -> None:
        with pytest.raises(InvalidArgument, match=r"unknown op 'warp_drive'"):
            GraphBuilder().add_kernel("k", 1, 1).op("warp_drive")

    def test_warns_read_of_unwritten_buffer(self) -> None:
        b = GraphBuilder()
        x, y = b.alloc_buffer("x", 4), b.alloc_buffer("y", 4)
        b.add_kernel("k", 1, 1).inputs([x]).outputs([y]).finish()
        with pytest.warns(GraphWarning, match=r"buffer 'x' is read by 'k' but nothing writes it"):
            b.build()
        assert any("'x'" in w for w in b.warnings)

    def test_no_warning_for_external_read(self) -> None:
        b = GraphBuilder()
        x, y = b.alloc_external_buffer("x", 4), b.alloc_buffer("y", 4)
        b.add_kernel("k", 1, 1).inputs([x]).outputs([y]).finish()
        with warnings.catch_warnings():
            warnings.simplefilter("error", GraphWarning)
            b.build()


class TestEdgeInference:
    def test_raw_war_waw(self) -> None:
        b = GraphBuilder()
        x, y = b.alloc_buffer("x", 4), b.alloc_buffer("y", 4)
        w1 = b.add_memset("w1", 4, 0, dst=x)  # writes x
        r = b.add_kernel("r", 1, 1).inputs([x]).outputs([y]).finish()  # RAW on x
        w2 = b.add_memset("w2", 4, 1, dst=x)  # WAR after r, WAW after w1
        r2 = b.add_kernel("r2", 1, 1).inputs([x, y]).finish()
        g = b.build()
        assert set(g.edges) == {(w1, r), (r, w2), (w1, w2), (w2, r2), (r, r2)}

    def test_explicit_order_decides_direction(self) -> None:
        # Created in one order, chained in the other: the dependency wins.
        b = GraphBuilder()
        x = b.alloc_buffer("x", 4)
        reader = b.add_kernel("reader", 1, 1).inputs([x]).finish()
        writer = b.add_memset("writer", 4, 0, dst=x)
        b.dep(writer, reader)
        assert b.build().edges == ((writer, reader),)

    @settings(max_examples=150, deadline=None)
    @given(
        accesses=st.lists(
            st.tuples(
                st.sets(st.integers(0, 3), max_size=2), st.sets(st.integers(0, 3), max_size=2)
            ),
            min_size=1,
            max_size=10,
        )
    )
    def test_every_conflict_is_ordered(self, accesses: list[tuple[set[int], set[int]]]) -> None:
        b = GraphBuilder()
        bufs = [b.alloc_external_buffer(f"b{i}", 4) for i in range(4)]
        ids = [
            b.add_kernel(f"k{i}", 1, 1)
            .inputs([bufs[j] for j in sorted(ins)])
            .outputs([bufs[j] for j in sorted(outs)])
            .finish()
            for i, (ins, outs) in enumerate(accesses)
        ]
        g = b.build()
        import networkx as nx

        closure = nx.transitive_closure_dag(g.to_networkx())
        for i in range(len(ids)):
            for j in range(i + 1, len(ids)):
                (ri, wi), (rj, wj) = accesses[i], accesses[j]
                if wi & (rj | wj) or ri & wj:
                    assert closure.has_edge(ids[i], ids[j]), (i, j)
        # and no edge without a conflict or dependency
        for a, c in g.edges:
            (ra, wa), (rc, wc) = accesses[int(a)], accesses[int(c)]
            assert wa & (rc | wc) or ra & wc


class TestCopyBinding:
    def test_quick_start_binds_copies(self) -> None:
        b, v = _quick_start()
        g = b.build()
        assert g.node(v["upload"]).outputs == (v["buf_in"],)
        assert g.node(v["download"]).inputs == (v["buf_out"],)
        assert len(g.edges) == 3 and g.num_nodes == 4
        assert any("'upload' writes 'input' (inferred)" in n for n in b.notes)

    @pytest.mark.filterwarnings("ignore:buffer .[xy]. is read")
    def test_ambiguous_copy_stays_unbound(self) -> None:
        b = GraphBuilder()
        x, y, z = (b.alloc_buffer(n, 64) for n in "xyz")
        up = b.add_memcpy("up", MemcpyDir.HostToDevice, 64)
        k = b.add_kernel("k", 1, 1).inputs([x, y]).outputs([z]).finish()
        b.dep(up, k)
        with pytest.warns(GraphWarning, match=r"copy 'up' names no destination and 2 buffers"):
            g = b.build()
        assert g.node(up).outputs == ()

    def test_bound_copies_kept(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64)
        up = b.add_memcpy("up", MemcpyDir.HostToDevice, 32, dst=x)
        g = b.build()
        assert g.node(up).outputs == (x,) and g.node(up).size_bytes == 32

    def test_from_graph_round_trip(self) -> None:
        b, _ = _quick_start()
        g = b.build()
        b2 = GraphBuilder.from_graph(g)
        extra = b2.add_barrier("after")
        b2.dep(g.sinks()[0], extra)
        g2 = b2.build()
        assert g2.num_nodes == 5 and extra == NodeId(4) and g2.buffers == g.buffers
        assert b2.alloc_buffer("new", 4) == BufferId(3)


# ---------------------------------------------------------------------------------------
# Every public builder call given junk: it works or raises a GraphError naming the problem,
# never a bare TypeError/KeyError (a notebook user gets a message saying what to fix).
_JUNK = [None, True, -1, 0, 1, 2**70, 1.5, float("nan"), "", "x" * 300, "a\nb", "<img>",
         [], [1], {}, (), (1, 2, 3), b"x", object(), MemcpyDir.HostToDevice, NodeId(999),
         BufferId(999)]  # fmt: skip


def _fresh():
    b = GraphBuilder()
    x, y = b.alloc_buffer("x", 4096), b.alloc_buffer("y", 4096)
    k = b.add_kernel("relu", 4, 256).inputs([x]).outputs([y]).finish()
    return b, x, y, k


_CALLS = {
    "alloc_buffer name": lambda b, x, y, k, j: b.alloc_buffer(j, 4096),
    "alloc_buffer size": lambda b, x, y, k, j: b.alloc_buffer("z", j),
    "alloc_buffer dtype": lambda b, x, y, k, j: b.alloc_buffer("z", 4096, dtype=j),
    "alloc_buffer shape": lambda b, x, y, k, j: b.alloc_buffer("z", 4096, shape=j),
    "alloc_buffer alignment": lambda b, x, y, k, j: b.alloc_buffer("z", 4096, alignment=j),
    "add_kernel name": lambda b, x, y, k, j: b.add_kernel(j, 1, 32).finish(),
    "add_kernel blocks": lambda b, x, y, k, j: b.add_kernel("k", j, 32).finish(),
    "add_kernel threads": lambda b, x, y, k, j: b.add_kernel("k", 1, j).finish(),
    "add_kernel smem": lambda b, x, y, k, j: b.add_kernel("k", 1, 32, j).finish(),
    "add_kernel_3d grid": lambda b, x, y, k, j: b.add_kernel_3d("k", j, (32, 1, 1), 0).finish(),
    "inputs": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).inputs(j).finish(),
    "inputs element": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).inputs([j]).finish(),
    "outputs": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).outputs(j).finish(),
    "params": lambda b, x, y, k, j: (
        b.add_kernel("scale", 1, 32).params(alpha=j).inputs([x]).outputs([y]).finish()
    ),
    "on_stream": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).on_stream(j).finish(),
    "cost": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).cost(j).finish(),
    "op": lambda b, x, y, k, j: b.add_kernel("k", 1, 32).op(j).finish(),
    "memcpy dir": lambda b, x, y, k, j: b.add_memcpy("m", j, 4096),
    "memcpy size": lambda b, x, y, k, j: b.add_memcpy("m", MemcpyDir.HostToDevice, j),
    "memcpy src": lambda b, x, y, k, j: b.add_memcpy("m", MemcpyDir.DeviceToHost, 4096, src=j),
    "memset value": lambda b, x, y, k, j: b.add_memset("s", 4096, j, dst=x),
    "dep": lambda b, x, y, k, j: b.dep(k, j),
    "chain": lambda b, x, y, k, j: b.chain(j),
    "fan_in": lambda b, x, y, k, j: b.fan_in(j, k),
    "fan_out": lambda b, x, y, k, j: b.fan_out(k, j),
    "host callback": lambda b, x, y, k, j: b.add_host_callback(j, fn=j),
    "event record": lambda b, x, y, k, j: b.add_event_record(j),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_junk_arguments_raise_graph_errors_only(call: str) -> None:
    for junk in _JUNK:
        b, x, y, k = _fresh()
        try:
            with warnings.catch_warnings():  # unbound copies etc. warn: not the point here
                warnings.simplefilter("ignore", GraphWarning)
                _CALLS[call](b, x, y, k, junk)
                b.build()
        except GraphError:
            pass
        except Exception as e:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{call}({junk!r}) raised {type(e).__name__}: {e}")
