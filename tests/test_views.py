"""Views as aliases: a view buffer aliases its base's bytes and allocates nothing.

IR: the builder's ``view``, the rules a view must meet (validate.view, graph.check_view),
the JSON round trip and its hostile-input checks, and the ordering invariant seeing a view's
accesses as its base's.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import warnings
from collections.abc import Sequence
from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, GraphWarning, MemcpyDir
from oxiwork.analysis import liveness
from oxiwork.analysis.happens_before import plan_clocks
from oxiwork.error import GraphError, InvalidArgument, MalformedFile, UnknownBuffer, UnorderedAccess
from oxiwork.executor.plan import BufferArg, ExecutionPlan
from oxiwork.executor.races import find_races
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES, Buffer, BufferId
from oxiwork.optimizer.memory_pass import plan_memory
from oxiwork.optimizer.stream import assign_streams
from oxiwork.reference import evaluate


def _transpose_graph() -> tuple[ComputeGraph, BufferId, BufferId, BufferId]:
    """x (2, 3) uploaded, its transpose copied to y (3, 2), y downloaded."""
    b = GraphBuilder()
    x = b.alloc_buffer("x", 24, shape=(2, 3))
    xt = b.view("xT", x, (3, 2), strides=(1, 3))
    y = b.alloc_buffer("y", 24, shape=(3, 2))
    b.add_memcpy("up", MemcpyDir.HostToDevice, 24, dst=x)
    b.add_kernel("copy", 1, 6).inputs([xt]).outputs([y]).finish()
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 24, src=y)
    return b.build(), x, xt, y


class TestBuilderView:
    def test_raises_out_of_bounds(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24, shape=(2, 3))
        with pytest.raises(InvalidArgument, match=r"reaches element 6 of its base, which has 6"):
            b.view("v", x, (2, 3), offset=1)

    def test_raises_negative_stride(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24)
        with pytest.raises(InvalidArgument, match=r"stride of view 'v' must be >= 0"):
            b.view("v", x, (6,), strides=(-1,), offset=5)

    def test_raises_wrong_number_of_strides(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24)
        with pytest.raises(InvalidArgument, match=r"2 dimensions but 1 strides"):
            b.view("v", x, (2, 3), strides=(1,))

    def test_raises_view_of_a_noncontiguous_view(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24, shape=(2, 3))
        xt = b.view("xT", x, (3, 2), strides=(1, 3))
        with pytest.raises(InvalidArgument, match=r"non-contiguous view; view its base 'x'"):
            b.view("v", xt, (6,))

    def test_raises_duplicate_name(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24)
        with pytest.raises(InvalidArgument, match="already exists"):
            b.view("x", x, (6,))

    def test_view_of_contiguous_view_composes_onto_the_base(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 64)  # 16 floats
        row = b.view("row", x, (2, 4), offset=8)  # elements 8..15
        sub = b.view("sub", row, (2,), strides=(4,), offset=1)
        b.add_memset("zero", 64, 0, dst=x)
        b.add_kernel("copy", 1, 2).inputs([sub]).outputs([b.alloc_buffer("y", 8)]).finish()
        g = b.build()
        s = g.buffer(sub)
        assert (s.base, s.view_offset, s.strides) == (x, 9, (4,))
        assert g.storage(sub) == x and g.storage(row) == x

    def test_defaults_are_row_major_and_share_the_dtype(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 48, dtype="int64", shape=(6,))
        v = b.view("v", x, (2, 3))
        b.add_memset("zero", 48, 0, dst=x)
        b.add_kernel("copy", 1, 6).inputs([v]).outputs([b.alloc_buffer("y", 48, "int64")]).finish()
        buf = b.build().buffer(v)
        assert (buf.strides, buf.dtype, buf.size_bytes, buf.is_contiguous) == (
            (3, 1),
            "int64",
            48,
            True,
        )

    def test_expand_stride_zero_is_allowed(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 12, shape=(3,))
        v = b.view("v", x, (4, 3), strides=(0, 1))
        b.add_memset("zero", 12, 0, dst=x)
        b.add_kernel("copy", 1, 12).inputs([v]).outputs([b.alloc_buffer("y", 48)]).finish()
        buf = b.build().buffer(v)
        assert (buf.view_extent, buf.size_bytes, buf.is_contiguous) == (3, 48, False)


class TestGraphChecksViews:
    def _parts(self) -> tuple:
        g, *_ = _transpose_graph()
        return g.nodes, g.buffers, g.edges

    def _with(self, **changes: object) -> ComputeGraph:
        nodes, buffers, edges = self._parts()
        buffers = tuple(
            b if b.name != "xT" else Buffer(**{**_fields(b), **changes}) for b in buffers
        )
        return ComputeGraph(nodes, buffers, edges)

    def test_raises_missing_base(self) -> None:
        with pytest.raises(UnknownBuffer, match=r"views buffer id 99, which is not in this graph"):
            self._with(base=BufferId(99))

    def test_raises_dtype_mismatch(self) -> None:
        with pytest.raises(InvalidArgument, match=r"dtype int32 but its base 'x' holds float32"):
            self._with(dtype="int32")

    def test_raises_view_of_a_view(self) -> None:
        g, _, xt, _ = _transpose_graph()
        v2 = Buffer(BufferId(9), "v2", 4, shape=(1,), base=xt, strides=(1,))
        with pytest.raises(InvalidArgument, match=r"itself a view of buffer id 0; view the base"):
            ComputeGraph(g.nodes, (*g.buffers, v2), g.edges)

    def test_raises_out_of_bounds(self) -> None:
        with pytest.raises(InvalidArgument, match=r"reaches element 6 of its base"):
            self._with(view_offset=1)

    def test_raises_view_with_offset_or_external(self) -> None:
        with pytest.raises(InvalidArgument, match=r"cannot be external or have an arena offset"):
            self._with(external=True)
        with pytest.raises(InvalidArgument, match=r"cannot be external or have an arena offset"):
            self._with(offset=0)

    def test_raises_strides_without_base(self) -> None:
        with pytest.raises(InvalidArgument, match=r"strides but no base"):
            self._with(base=None)

    def test_views_and_storage(self) -> None:
        g, x, xt, y = _transpose_graph()
        assert dict(g.views()) == {xt: x}
        assert (g.storage(xt), g.storage(y)) == (x, y)
        with pytest.raises(TypeError):
            g.views()[y] = x  # type: ignore[index]


def _fields(b: Buffer) -> dict:
    return {f: getattr(b, f) for f in Buffer.__slots__}


class TestJson:
    def test_round_trip(self) -> None:
        g, *_ = _transpose_graph()
        again = ComputeGraph.from_json(g.to_json())
        assert again == g
        assert again.buffer_by_name("xT").strides == (1, 3)

    def test_files_without_views_have_no_view_fields(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 16)
        b.add_memset("zero", 16, 0, dst=x)
        assert "strides" not in json.loads(b.build().to_json())["buffers"][0]

    @pytest.mark.parametrize(
        ("field", "value", "match"),
        [
            ("strides", "13", r"strides of view 'xT' must be a list of ints"),
            ("strides", [1, 3.0], r"stride of view 'xT' must be an int"),
            ("strides", [1, True], r"stride of view 'xT' must be an int"),
            ("strides", [1, -3], r"stride of view 'xT' must be >= 0"),
            ("strides", [1, 2**60], r"stride of view 'xT' is .*; at most"),
            ("view_offset", -1, r"view_offset of view 'xT' must be >= 0"),
            ("view_offset", "0", r"view_offset of view 'xT' must be an int"),
            ("view_offset", 1, r"reaches element 6"),
            ("base", 7, r"views buffer id 7, which is not in this graph"),
            ("base", "0", r"base of buffer 'xT' must be an int"),
            ("base", 1, r"views itself"),
            ("shape", None, r"view without a shape"),
        ],
    )
    def test_raises_hostile_view_fields(self, field: str, value: object, match: str) -> None:
        g, *_ = _transpose_graph()
        data = g.to_dict()
        (entry,) = [b for b in data["buffers"] if b["name"] == "xT"]
        entry[field] = value
        with pytest.raises(GraphError, match=match) as e:
            ComputeGraph.from_json(json.dumps(data))
        assert isinstance(e.value, (MalformedFile, UnknownBuffer, InvalidArgument))


class TestOrdering:
    def test_write_through_view_then_read_of_base_needs_an_edge(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24, shape=(2, 3))
        xt = b.view("xT", x, (3, 2), strides=(1, 3))
        y = b.alloc_buffer("y", 24)
        w = b.add_kernel("fill", 1, 6).inputs([y]).outputs([xt]).finish()
        r = b.add_memcpy("down", MemcpyDir.DeviceToHost, 24, src=x)
        b.add_memset("zero", 24, 0, dst=y)
        g = b.build()
        assert (w, r) in g.edges  # build() ordered the write through the view before the read
        with pytest.raises(UnorderedAccess, match=r"buffer 'x' is written by 'fill'"):
            g.with_changes(edges=[e for e in g.edges if e != (w, r)])


# ---------------------------------------------------------------------- semantics (property)
def _layouts(r: int, c: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], int]]:
    """Views of a row-major (r, c) base: name -> (shape, strides, offset)."""
    return {
        "T": ((c, r), (1, c), 0),
        "row": ((c,), (1,), (r - 1) * c),
        "col": ((r,), (c,), c - 1),
        "expand": ((3, c), (0, 1), 0),
        "flat": ((r * c,), (1,), 0),
    }


@st.composite
def view_graphs(draw: Any) -> ComputeGraph:
    """Random graphs of element-wise kernels over uploaded (r, c) buffers and views of
    them: kernels read bases or views (transposes, rows, columns, expands, reshapes) and
    some write through a view into a base (``copy_`` into a row or column)."""
    b = GraphBuilder()
    bases: list[tuple[BufferId, int, int]] = []
    values: list[tuple[BufferId, tuple[int, ...]]] = []
    count = 0

    def view_of(x: BufferId, r: int, c: int, kinds: Sequence[str]) -> BufferId:
        nonlocal count
        shape, strides, off = _layouts(r, c)[draw(st.sampled_from(kinds))]
        count += 1
        return b.view(f"v{count}", x, shape, strides, off)

    for i in range(draw(st.integers(1, 3))):
        r, c = draw(st.integers(1, 4)), draw(st.integers(2, 4))
        x = b.alloc_buffer(f"x{i}", r * c * 4, shape=(r, c))
        b.add_memcpy(f"up{i}", MemcpyDir.HostToDevice, r * c * 4, dst=x)
        bases.append((x, r, c))
        values.append((x, (r, c)))
    written: list[BufferId] = []
    for k in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(("unary", "binary", "write_view")))
        if draw(st.booleans()):  # read through a fresh view of some base
            x, r, c = draw(st.sampled_from(bases))
            v = view_of(x, r, c, tuple(_layouts(r, c)))
            src = (v, b._buffers[int(v)].shape)
        else:
            src = draw(st.sampled_from(values))
        if kind == "write_view":  # a copy_ into a row or column of a base: writes the base
            x, r, c = draw(st.sampled_from(bases))
            dst = view_of(x, r, c, ("row", "col"))
            shape = b._buffers[int(dst)].shape
            same = [v for v in values if v[1] == shape]
            if same:
                b.add_kernel(f"copy_{k}", 1, 32).op("copy").fusible(True).inputs(
                    [draw(st.sampled_from(same))[0]]
                ).outputs([dst]).finish()
                written.append(x)
            continue
        op = draw(st.sampled_from(("relu", "neg", "copy") if kind == "unary" else ("add", "mul")))
        ins = [src[0]]
        if kind == "binary":
            ins.append(draw(st.sampled_from([src, *(v for v in values if v[1] == src[1])]))[0])
        n = math.prod(src[1])
        out = b.alloc_buffer(f"y{k}", n * 4, shape=src[1])
        b.add_kernel(f"{op}_{k}", 1, 32).op(op).fusible(True).inputs(ins).outputs([out]).finish()
        values.append((out, src[1]))
        written.append(out)
        if len(src[1]) == 2:
            bases.append((out, *src[1]))
    for bid in dict.fromkeys(written):
        buf = b._buffers[int(bid)]
        b.add_memcpy(f"down {buf.name}", MemcpyDir.DeviceToHost, buf.size_bytes, src=bid)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


def _arena_range(a: BufferArg) -> tuple[int, int] | None:
    """The arena bytes a step's argument covers, computed here from the plan alone."""
    s = a.storage
    if s.external or s.offset is None:
        return None
    if a.base is None:
        return a.offset, a.offset + a.size_bytes
    item = DTYPES[a.dtype]
    last = a.view_offset + sum(
        (d - 1) * st_ for d, st_ in zip(a.shape, a.strides or (), strict=True)
    )
    return s.offset + a.view_offset * item, s.offset + (last + 1) * item


def _without_views(g: ComputeGraph) -> ComputeGraph:
    """``g`` with every access to a view made an access to its base, the views dropped."""
    root = g.views()
    nodes = [
        n.replace(
            inputs=tuple(root.get(x, x) for x in n.inputs),
            outputs=tuple(root.get(x, x) for x in n.outputs),
        )
        for n in g.nodes
    ]
    return ComputeGraph(tuple(nodes), tuple(b for b in g.buffers if b.base is None), g.edges)


_INPUTS_SEED = 7


class TestSemantics:
    @settings(max_examples=25, deadline=None)
    @given(view_graphs(), st.integers(1, 4))
    def test_views_allocate_nothing(self, g: ComputeGraph, streams: int) -> None:
        staged = assign_streams(g, max_streams=streams).graph
        with_views = plan_memory(staged)
        plain = plan_memory(_without_views(staged))
        report = with_views.artefacts["memory"]
        assert all(b.offset is None for b in with_views.graph.buffers if b.base is not None)
        assert report.arena_bytes == plain.artefacts["memory"].arena_bytes
        assert report.offsets == plain.artefacts["memory"].offsets
        # and the liveness peak counts no view
        assert liveness.max_live_bytes(g) == liveness.max_live_bytes(_without_views(g))

    @settings(max_examples=25, deadline=None)
    @given(view_graphs(), st.integers(1, 4), st.booleans())
    def test_no_overlap_of_concurrent_bytes_counting_views(
        self, g: ComputeGraph, streams: int, fusion: bool
    ) -> None:
        plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
        clocks = plan_clocks(plan)
        touched = [
            [(a, False) for a in st_.inputs] + [(a, True) for a in st_.outputs]
            for st_ in plan.steps
        ]
        for i, j in itertools.combinations(range(len(plan.steps)), 2):
            for a, wa in touched[i]:
                for b_, wb in touched[j]:
                    ra, rb = _arena_range(a), _arena_range(b_)
                    if (wa or wb) and ra and rb and ra[0] < rb[1] and rb[0] < ra[1]:
                        assert clocks.ordered(i, j), (plan.steps[i].name, plan.steps[j].name)
        assert find_races(plan) == []

    @settings(max_examples=25, deadline=None)
    @given(view_graphs())
    def test_dropped_alias_edge_is_caught(self, g: ComputeGraph) -> None:
        root = g.views()
        touched = {
            n.id: [(root.get(x, x), x, False) for x in n.inputs]
            + [(root.get(x, x), x, True) for x in n.outputs]
            for n in g.nodes
        }
        for a, b_ in g.edges:
            # ends that conflict only through an alias: one touches a view of what the other
            # touches, at least one writes, and they share no buffer id directly
            direct = {x for _, x, _ in touched[a]} & {x for _, x, _ in touched[b_]}
            alias = any(
                ra == rb and (wa or wb) and (xa in root or xb in root)
                for ra, xa, wa in touched[a]
                for rb, xb, wb in touched[b_]
            )
            if not alias or direct:
                continue
            edges = [e for e in g.edges if e != (a, b_)]
            dag = nx.DiGraph(edges)
            dag.add_nodes_from(g.node_ids)
            if nx.has_path(dag, a, b_):
                g.with_changes(edges=edges)  # still ordered: accepted
            else:
                with pytest.raises(UnorderedAccess):
                    g.with_changes(edges=edges)

    @settings(max_examples=20, deadline=None)
    @given(view_graphs(), st.integers(1, 4), st.booleans())
    def test_simulator_equals_reference(self, g: ComputeGraph, streams: int, fusion: bool) -> None:
        want = evaluate(g, seed=_INPUTS_SEED)
        plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GraphWarning)
            got = SequentialExecutor(plan).run(seed=_INPUTS_SEED).outputs
        assert got is not None
        for name, value in got.items():
            np.testing.assert_array_equal(value.reshape(-1), want[name].reshape(-1), err_msg=name)


class TestSimulatorThroughViews:
    def test_transpose_copy_and_write_through_a_view(self) -> None:
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24, shape=(2, 3))
        y = b.alloc_buffer("y", 24, shape=(3, 2))
        b.add_memcpy("up", MemcpyDir.HostToDevice, 24, dst=x)
        b.add_kernel("t", 1, 6).op("copy").inputs([b.view("xT", x, (3, 2), (1, 3))]).outputs(
            [y]
        ).finish()
        # copy_ y's first column into x's last row: an in-place write to x
        col = b.view("ycol", y, (3,), (2,))
        b.add_kernel("put", 1, 3).op("copy").inputs([col]).outputs(
            [b.view("xrow", x, (3,), (1,), 3)]
        ).finish()
        b.add_memcpy("down x", MemcpyDir.DeviceToHost, 24, src=x)
        b.add_memcpy("down y", MemcpyDir.DeviceToHost, 24, src=y)
        g = b.build()
        x0 = np.arange(6, dtype=np.float32).reshape(2, 3)
        plan = ExecutionPlan.build(g, max_streams=2)
        out = SequentialExecutor(plan).run({"x": x0}).outputs
        assert out is not None
        np.testing.assert_array_equal(out["y"], x0.T)
        np.testing.assert_array_equal(out["x"], [x0[0], x0[0]])
        # the view's bytes are its base's in the arena
        args = {a.name: a for st_ in plan.steps for a in (*st_.inputs, *st_.outputs)}
        assert args["xT"].offset is None and args["xT"].storage.name == "x"

    def test_a_wrong_plan_of_the_base_shows_as_wrong_numbers(self) -> None:
        # x is read through its transpose after relu(x) -> y: a plan that ended x's life
        # at relu (ignoring the view) could put y on x's bytes; the verifier refuses that
        # plan, and the simulator, reading the view from the arena, computes garbage.
        b = GraphBuilder()
        x = b.alloc_buffer("x", 24, shape=(2, 3))
        y, z = b.alloc_buffer("y", 24, shape=(2, 3)), b.alloc_buffer("z", 24, shape=(3, 2))
        b.add_memcpy("up", MemcpyDir.HostToDevice, 24, dst=x)
        b.add_kernel("relu", 1, 6).op("relu").inputs([x]).outputs([y]).finish()
        xt = b.view("xT", x, (3, 2), (1, 3))
        b.add_kernel("t", 1, 6).op("copy").inputs([xt]).outputs([z]).finish()
        b.add_memcpy("down y", MemcpyDir.DeviceToHost, 24, src=y)
        b.add_memcpy("down z", MemcpyDir.DeviceToHost, 24, src=z)
        g = b.build()
        plan = ExecutionPlan.build(g, fusion=False)
        offsets = {b_.name: b_.offset for b_ in plan.graph.buffers}
        assert offsets["y"] != offsets["x"]  # the planner kept x alive for its view
        x0 = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
        good = SequentialExecutor(plan).run({"x": x0}).outputs
        assert good is not None
        np.testing.assert_array_equal(good["z"], x0.T)

        def moved(a: BufferArg) -> BufferArg:
            return dataclasses.replace(a, offset=offsets["x"]) if a.name == "y" else a

        bad = dataclasses.replace(
            plan,
            graph=plan.graph.with_changes(
                buffers=[
                    b_ if b_.name != "y" else dataclasses.replace(b_, offset=offsets["x"])
                    for b_ in plan.graph.buffers
                ]
            ),
            steps=tuple(
                dataclasses.replace(
                    s, inputs=tuple(map(moved, s.inputs)), outputs=tuple(map(moved, s.outputs))
                )
                for s in plan.steps
            ),
        )
        with pytest.raises(UnorderedAccess, match=r"share arena bytes"):
            bad.verify()
        from oxiwork.executor.simulator import _Machine  # runs a plan without verifying it

        m = _Machine(bad, {"x": x0}, 0, True, False)
        for s in bad.steps:
            m.execute(s)
        assert not np.array_equal(m.outputs["z"], x0.T)
        np.testing.assert_array_equal(m.outputs["z"], np.maximum(x0, 0).T)


def test_memory_chart_draws_views_inside_their_base() -> None:
    from oxiwork.widget.viewmodel import memory_section

    g, x, xt, _ = _transpose_graph()
    plan = ExecutionPlan.build(g)
    assert plan.memory is not None
    m = memory_section(plan.graph, plan.memory)
    rect = {r["id"]: r for r in m["buffers"]}
    base, view = rect[int(x)], rect[int(xt)]
    assert view["view_of"] == base["id"] and "view_of" not in base
    assert base["offset"] <= view["offset"] < view["offset"] + view["size"]
    assert view["offset"] + view["size"] <= base["offset"] + base["size"]
    assert base["start"] <= view["start"] < view["end"] <= base["end"]
    # views come last: drawn, and hovered, on top of the bases
    assert [r.get("view_of") is not None for r in m["buffers"]][-1]


@settings(max_examples=20, deadline=None)
@given(view_graphs())
def test_random_view_graphs_round_trip_through_json(g: ComputeGraph) -> None:
    again = ComputeGraph.from_json(g.to_json())
    assert again == g and dict(again.views()) == dict(g.views())
    plan = ExecutionPlan.build(g)
    assert json.dumps(plan.to_dict())  # views' base, offset and strides included
    shown = {a.name: a.where for st_ in plan.steps for a in (*st_.inputs, *st_.outputs)}
    for v, base in g.views().items():
        name = g.buffer(v).name
        assert shown.get(name, f"view of {g.buffer(base).name}") == f"view of {g.buffer(base).name}"
