"""verify(): each broken invariant is rejected with a message naming the node."""

from __future__ import annotations

import dataclasses
import importlib
import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, ExecutionPlan, GraphBuilder, MemcpyDir, verify
from oxiwork.error import GraphError, GraphWarning, InvalidArgument, InvalidPlan, UnorderedAccess
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.plan import BufferArg
from oxiwork.executor.races import drop_event, find_races
from oxiwork.executor.simulator import SequentialExecutor, Simulator
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
    # The constructor, not with_changes: a node given a buffer it should not touch would be
    # refused there for its unordered access, before verify() gets to the node's own rule.
    return ComputeGraph(tuple(nodes), g.buffers, g.edges)


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

    @pytest.mark.parametrize(
        ("first", "second", "match"),
        [
            # (two bad nodes: the first in id order is named, whatever its kind)
            (("k", {"config": None}), ("rec", {"inputs": (0,)}), r"node 'k' .*KernelConfig"),
            (("k", {"config": None}), ("bar", {"label": "x", "fused_from": ()}), r"'k' .*Kernel"),
            (("rec", {"inputs": (0,)}), ("bar", {"outputs": (1,)}), r"node 'rec' .*touches no"),
            (
                ("rec", {"inputs": (0,)}),
                ("bar", {"config": KernelConfig.linear(1, 1)}),
                r"node 'rec' .*touches no buffers",
            ),
            (
                ("up", {"size_bytes": 128}),
                ("bar", {"config": KernelConfig.linear(1, 1)}),
                r"node 'up' .*copies 128 bytes",
            ),
        ],
    )
    def test_names_the_first_bad_node(
        self, first: tuple[str, dict], second: tuple[str, dict], match: str
    ) -> None:
        g = _with_node(_with_node(_base(), first[0], **first[1]), second[0], **second[1])
        with pytest.raises(InvalidArgument, match=match):
            verify(g)

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


class TestOrdering:
    """The misleading cases of issue 11: unordered accesses fail loudly, with the buffer,
    both nodes or steps and the missing edge or event named."""

    def test_raises_quick_start_without_edges(self) -> None:
        g = quick_start()
        bare = ComputeGraph(g.nodes, g.buffers, ())  # what "edges": [] in a file gave
        with pytest.raises(UnorderedAccess) as e:
            verify(bare)
        assert str(e.value).startswith(
            "buffer 'input' is written by 'upload' (node 0) and read by 'relu' (node 1), but "
            "no path of edges leads from one to the other, so an executor may run them in "
            "either order and the result is not defined; add the edge 'upload' -> 'relu'"
        )
        with pytest.raises(UnorderedAccess, match=r"^the input graph, before any pass: buffer"):
            ExecutionPlan.build(bare)

    def test_passes_refuse_a_graph_without_edges(self) -> None:
        # Even unverified, the passes cannot make a plan of it: with_changes refuses.
        g = quick_start()
        bare = ComputeGraph(g.nodes, g.buffers, ())
        with pytest.raises(UnorderedAccess, match=r"pass 'fusion' failed .* buffer 'input'"):
            ExecutionPlan.build(bare, verify=False)

    def test_executors_refuse_a_plan_that_downloads_before_computing(self) -> None:
        plan = ExecutionPlan.build(quick_start(), fusion=False)
        up, relu, scale, down = plan.steps
        steps = tuple(
            dataclasses.replace(s, index=i, position=i)
            for i, s in enumerate([up, down, relu, scale])
        )
        bad = dataclasses.replace(plan, steps=steps)
        # The order is wrong, not missing: "download depends on scale" is what breaks.
        with pytest.raises(InvalidPlan, match=r"step 1 \(memcpy 'download'.* depends on step 3"):
            verify(bad)
        for run in (SequentialExecutor, Simulator):
            with pytest.raises(InvalidPlan, match=r"'download'.* depends on step 3 \(kernel"):
                run(bad)
        assert SequentialExecutor(plan).run().outputs is not None  # the real plan runs

    def test_raises_plan_with_a_dropped_event(self) -> None:
        plan = ExecutionPlan.build(transformer_block(1), max_streams=4)
        assert plan.event_count > 0
        bad = drop_event(plan, 0)
        with pytest.raises(UnorderedAccess) as e:
            verify(bad)
        err = e.value
        a, b = bad.steps[err.first], bad.steps[err.second]
        assert err.in_plan and a.stream != b.stream and err.first < err.second
        assert "write" in (err.first_access, err.second_access)
        assert err.buffer in {x.name for x in (*a.inputs, *a.outputs)}
        assert err.buffer in {x.name for x in (*b.inputs, *b.outputs)}
        assert str(err).startswith(f"buffer {err.buffer!r} is ")
        assert str(err).endswith(
            f"record an event after step {err.first} on stream {int(a.stream)} and wait for "
            f"it before step {err.second} on stream {int(b.stream)}"
        )
        with pytest.raises(UnorderedAccess):
            SequentialExecutor(bad)

    def test_raises_plan_reusing_bytes_it_does_not_order(self) -> None:
        # Two independent chains on two streams: put a buffer of one chain on the bytes
        # of a buffer of the other (in the graph and the steps alike).
        b = GraphBuilder()
        bufs = [b.alloc_buffer(n, 256) for n in ("x0", "y0", "x1", "y1")]
        for i in range(2):
            x, y = bufs[2 * i], bufs[2 * i + 1]
            up = b.add_memcpy(f"up{i}", MemcpyDir.HostToDevice, 256, dst=x)
            k = b.add_kernel(f"relu{i}", 1, 64).op("relu").inputs([x]).outputs([y]).finish()
            down = b.add_memcpy(f"down{i}", MemcpyDir.DeviceToHost, 256, src=y)
            b.chain([up, k, down])
        plan = ExecutionPlan.build(b.build(), max_streams=2, fusion=False)
        assert plan.num_streams == 2 and find_races(plan) == []
        off = {a.name: a.offset for s in plan.steps for a in (*s.inputs, *s.outputs)}
        target = off["x0"]

        def move(a: BufferArg) -> BufferArg:
            return dataclasses.replace(a, offset=target) if a.name == "y1" else a

        steps = tuple(
            dataclasses.replace(
                s, inputs=tuple(map(move, s.inputs)), outputs=tuple(map(move, s.outputs))
            )
            for s in plan.steps
        )
        graph = plan.graph.with_changes(
            buffers=[
                dataclasses.replace(x, offset=target) if x.name == "y1" else x
                for x in plan.graph.buffers
            ]
        )
        bad = dataclasses.replace(plan, steps=steps, graph=graph)
        with pytest.raises(UnorderedAccess) as e:
            verify(bad)
        assert set(e.value.buffers) == {"x0", "y1"}
        assert "share arena bytes" in str(e.value)
        assert any(r.kind == "overlap" for r in find_races(bad))


def _unordered_pairs(g: ComputeGraph) -> set[tuple[int, int, int]]:
    """Every (buffer, node, node) pair of conflicting accesses that no path of edges
    orders, by brute force over networkx's reachability (an oracle independent of
    check_ordering's walk)."""
    h = g.to_networkx()
    below = {v: nx.descendants(h, v) for v in h}
    bad = set()
    for b in g.buffers:
        readers, writers = set(g.readers(b.id)), set(g.writers(b.id))
        for w in writers:
            for x in (readers | writers) - {w}:
                if x not in below[w] and w not in below[x]:
                    bad.add((int(b.id), *sorted((int(w), int(x)))))
    return bad


def _outputs(plan: ExecutionPlan, sim: Simulator | None = None) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)  # generated inputs, same seed
        if sim is None:
            return SequentialExecutor(plan).run(seed=3).outputs or {}
        sim.run()
        return sim.outputs or {}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6, equal_nan=True) for k in a
    )


class TestDroppedDependencies:
    """Drop one edge of a valid graph or one event of a valid plan: verify must catch
    every drop that leaves a race or changes an output, and accept everything valid."""

    @settings(max_examples=150, deadline=None)
    @given(g=st.one_of(any_dags(max_nodes=24), rich_graphs()), data=st.data())
    def test_dropping_an_edge(self, g: ComputeGraph, data: st.DataObject) -> None:
        verify(g)  # never rejects a valid graph
        assume(g.edges)
        edge = data.draw(st.sampled_from(g.edges))
        dropped = ComputeGraph(g.nodes, g.buffers, tuple(e for e in g.edges if e != edge))
        races = _unordered_pairs(dropped)
        try:
            verify(dropped)
        except UnorderedAccess as e:
            # Rejected: only for a real race, and the one named is one of them.
            assert races, "verify rejected a graph whose accesses are all ordered"
            buf = dropped.buffer_by_name(e.buffer).id
            assert (int(buf), *sorted((e.first, e.second))) in races
            return
        except InvalidArgument as e:  # an event wait lost the edge to its record
            assert "does not depend on it" in str(e)
            return
        assert not races, f"verify accepted unordered accesses: {sorted(races)[:3]}"

    @settings(max_examples=40, deadline=None)
    @given(seed=st.integers(0, 10**6), n=st.integers(4, 24), data=st.data())
    def test_dropping_an_edge_of_a_computing_graph(self, seed: int, n: int, data) -> None:
        g = random_op_dag(seed, n)
        edge = data.draw(st.sampled_from(g.edges))
        dropped = ComputeGraph(g.nodes, g.buffers, tuple(e for e in g.edges if e != edge))
        try:
            verify(dropped)
        except UnorderedAccess:
            assert _unordered_pairs(dropped)
            return
        # Accepted: the edge ordered nothing the buffers need, so any order of the rest
        # computes what the original does.
        ref = _outputs(ExecutionPlan.build(g, fusion=False))
        for streams in (1, 3):
            assert _same(_outputs(ExecutionPlan.build(dropped, max_streams=streams)), ref)

    @settings(max_examples=100, deadline=None)
    @given(
        seed=st.integers(0, 10**6), n=st.integers(6, 30), streams=st.integers(2, 4), data=st.data()
    )
    def test_dropping_an_event(self, seed: int, n: int, streams: int, data) -> None:
        plan = ExecutionPlan.build(random_op_dag(seed, n), max_streams=streams)
        verify(dataclasses.replace(plan))  # never rejects a valid plan (checked afresh)
        assume(plan.event_count > 0)
        bad = drop_event(plan, data.draw(st.integers(0, plan.event_count - 1)))
        try:
            verify(bad)
        except InvalidPlan:
            return
        # Accepted: then nothing races and every interleaving computes the same values.
        assert find_races(bad) == []
        ref = _outputs(plan)
        for policy in ("adversarial", "random", "round_robin"):
            sim = Simulator(bad, policy=policy, seed=3, check_finite=False, verify=False)
            assert _same(_outputs(bad, sim), ref)


def _outcome(g: ComputeGraph) -> tuple[type, str] | None:
    """What verify_graph says of ``g``: None, or the error's class and message."""
    from oxiwork.verify import verify_graph

    try:
        verify_graph(g)
    except GraphError as e:
        return type(e), str(e)
    return None


_OTHER_DTYPE = {"float32": "int32", "int32": "float32", "float16": "bfloat16"}


class TestIncrementalNodeRules:
    """A graph made by with_changes from a verified graph re-checks only the nodes that are
    not the very same objects over the same buffers: it must say exactly what the full
    check of the same parts says."""

    @settings(max_examples=40, deadline=None)
    @given(
        g=st.one_of(
            rich_graphs(),
            st.builds(random_op_dag, st.integers(0, 10**6), st.integers(2, 12)),
            st.builds(lambda n: transformer_block(n, tokens=4, d_model=4, d_ff=8), st.just(1)),
        ),
        data=st.data(),
    )
    def test_same_verdict_as_the_full_check(self, g: ComputeGraph, data: st.DataObject) -> None:
        assume(_outcome(g) is None)  # only a verified graph's verdict is carried
        bufs = []
        for b in g.buffers:
            how = data.draw(st.sampled_from(("keep", "keep", "offset", "dtype", "size")))
            if how == "offset" and not b.external and b.base is None:
                b = dataclasses.replace(b, offset=b.alignment * data.draw(st.integers(0, 3)))
            elif how == "dtype" and b.dtype in _OTHER_DTYPE:
                b = dataclasses.replace(b, dtype=_OTHER_DTYPE[b.dtype])
            elif how == "size" and b.base is None and b.shape is None and b.size_bytes > 8:
                b = dataclasses.replace(b, size_bytes=8)
            bufs.append(b)
        nodes = []
        for n in g.nodes:
            how = data.draw(st.sampled_from(("keep", "keep", "keep", "copy", "break")))
            if how == "copy":  # an equal node, but a new object
                n = n.replace(label=n.label)
            elif how == "break" and n.config is not None:
                n = n.replace(config=None)  # a kernel without a launch config
            elif how == "break" and n.size_bytes > 1:
                n = n.replace(size_bytes=n.size_bytes * 1000)  # more than its buffer
            nodes.append(n)
        try:
            h = g.with_changes(nodes=nodes, buffers=bufs)
        except GraphError:
            assume(False)  # refused when made: verify never sees it
        full = ComputeGraph(h.nodes, h.buffers, h.edges)  # nothing carried: every rule
        assert "node_rules_base" in h._cache and "node_rules_base" not in full._cache
        assert _outcome(h) == _outcome(full)

    def test_a_dtype_change_under_the_same_kernel_is_checked_again(self) -> None:
        g = transformer_block(1, tokens=4, d_model=4, d_ff=8)
        g.verify()
        out = next(n.outputs[0] for n in g.kernels() if n.op == "relu" or n.op == "gelu")
        bufs = [dataclasses.replace(b, dtype="int32") if b.id == out else b for b in g.buffers]
        with pytest.raises(InvalidArgument, match="dtype"):
            g.with_changes(buffers=bufs).verify()

    def test_unchanged_nodes_are_not_checked_again(self, monkeypatch: pytest.MonkeyPatch) -> None:
        V = importlib.import_module("oxiwork.verify")  # the module (oxiwork.verify is the function)
        g = transformer_block(1, tokens=4, d_model=4, d_ff=8)
        g.verify()
        k = g.kernels()[0]
        h = g.with_changes(nodes=[n.replace(label="x") if n is k else n for n in g.nodes])
        seen: list[object] = []
        rule = V._RULES[k.kind]
        monkeypatch.setitem(V._RULES, k.kind, lambda g, n: (seen.append(n.id), rule(g, n)))
        h.verify()
        assert seen == [k.id]  # only the new object


@pytest.mark.parametrize("names", [("r", "other"), ("a", "b")])
def test_a_dtype_error_names_its_own_kernel_each_time(names: tuple[str, str]) -> None:
    # check_dtypes remembers what passes across graphs, never a message naming a node
    for name in names:
        b = GraphBuilder()
        ids = b.alloc_external_buffer("ids", 32, dtype="int64")
        y = b.alloc_buffer("y", 16)
        b.add_kernel(name, 1, 32).op("relu").inputs([ids]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=f"kernel '{name}'"):
            b.build()


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(["layered", "transformer"]),
    st.integers(0, 10**6),
    st.sampled_from(["none", "not_record", "no_edge"]),
)
def test_waits_checked_at_once_as_one_by_one(shape: str, seed: int, how: str) -> None:
    """verify_graph tests the waits' rule for all of them at once (verify._waits_hold): it
    passes exactly when the rule passes for each wait, broken waits included."""
    from oxiwork.examples import synthetic
    from oxiwork.node import NodeKind
    from oxiwork.optimizer.stream import assign_streams

    vmod = importlib.import_module("oxiwork.verify")
    g = assign_streams(synthetic(120, shape, seed=seed % 7)).graph
    waits = [n for n in g.nodes if n.kind is NodeKind.EventWait]
    assume(waits)
    w = waits[seed % len(waits)]
    if how == "not_record":  # the wait names a node that is no event record
        other = next(n for n in g.nodes if n.kind is not NodeKind.EventRecord)
        g = g.with_changes(nodes=[n.replace(event=other.id) if n is w else n for n in g.nodes])
    elif how == "no_edge":  # the edge record -> wait is gone
        g = g.with_changes(edges=[e for e in g.edges if e != (w.event, w.id)])
    waits = [n for n in g.nodes if n.kind is NodeKind.EventWait]
    each = True
    for n in waits:
        try:
            vmod._check_wait(g, n)
        except InvalidArgument:
            each = False
    assert vmod._waits_hold(g, waits) == each
    assert each == (how == "none")
    if not each:  # and the graph is refused with the wait's own message
        with pytest.raises(InvalidArgument, match=r"an event wait must name|does not depend on"):
            vmod.verify_graph(g)
