"""Views as aliases: a view buffer aliases its base's bytes and allocates nothing.

IR: the builder's ``view``, the rules a view must meet (validate.view, graph.check_view),
the JSON round trip and its hostile-input checks, and the ordering invariant seeing a view's
accesses as its base's.
"""

from __future__ import annotations

import json

import pytest

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir
from oxiwork.error import GraphError, InvalidArgument, MalformedFile, UnknownBuffer, UnorderedAccess
from oxiwork.node import Buffer, BufferId


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
