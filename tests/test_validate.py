"""The value rules of oxiwork.validate, and that the builder and the JSON loader apply the
same rule with the same words (one rule per kind of value)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, MemcpyDir, validate
from oxiwork.error import InvalidArgument, MalformedFile
from oxiwork.node import KernelConfig

# Values no int rule accepts: the coercions a sloppy check would make ("4" -> 4, 1.5 -> 1,
# True -> 1) and numbers beyond every bound.
NOT_INTS: list[Any] = ["4", 1.5, True, False, None, [4], 4.0, b"4"]


class TestName:
    @pytest.mark.parametrize(
        ("value", "match"),
        [
            ("\ud800", r"not valid Unicode"),
            ("a\udfffb", r"not valid Unicode"),
            ("a\nb", r"control characters"),
            ("a\x7fb", r"control characters"),
            ("a\x85b", r"control characters"),
            ("a\u2028b", r"control characters"),
            ("", r"must not be empty"),
            ("   ", r"must not be empty"),
            ("x" * 257, r"257 characters; keep it to at most 256"),
            (3, r"must be a str, got int"),
            (None, r"must be a str, got NoneType"),
        ],
    )
    def test_raises(self, value: Any, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            validate.name(value, "buffer name")

    @given(st.text(min_size=1, max_size=256))
    def test_accepts_exactly_what_utf8_and_json_carry(self, s: str) -> None:
        try:
            validate.name(s, "name")
        except InvalidArgument:
            ok = False
        else:
            ok = True
        sendable = True
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            sendable = False
        clean = not re.search("[\x00-\x1f\x7f-\x9f\u2028\u2029]", s) and s.strip() != ""
        assert ok == (sendable and clean)


class TestNumbers:
    @pytest.mark.parametrize("value", NOT_INTS)
    @pytest.mark.parametrize(
        "rule", [validate.ident, validate.size, validate.alignment, validate.stream, validate.byte]
    )
    def test_raises_no_coercion(self, rule: Callable[[Any, str], Any], value: Any) -> None:
        with pytest.raises(InvalidArgument, match=r"^thing "):
            rule(value, "thing")

    @pytest.mark.parametrize(
        ("rule", "lo", "hi"),
        [
            (validate.ident, 0, validate.MAX_ID),
            (validate.size, 1, validate.MAX_SIZE_BYTES),
            (validate.stream, 0, validate.MAX_STREAM),
            (validate.byte, 0, 255),
            (validate.shared_mem, 0, validate.MAX_SHARED_MEM_BYTES),
            (validate.offset, 0, validate.MAX_OFFSET),
        ],
    )
    def test_bounds_are_inclusive(self, rule: Callable[[Any, str], Any], lo: int, hi: int) -> None:
        assert rule(lo, "v") == lo
        assert rule(hi, "v") == hi
        for bad in (lo - 1, hi + 1, 10**5000, -(10**5000)):
            with pytest.raises(InvalidArgument):
                rule(bad, "v")

    def test_ids_fit_int32_with_room_for_pass_nodes(self) -> None:
        # The frontend holds ids in Int32Array columns; passes number new nodes after the
        # largest id, so half the range stays free.
        assert 2 * (validate.MAX_ID + 1) <= 2**31

    @pytest.mark.parametrize("value", [3, 48, 0, -4, 2**22, 2**100])
    def test_raises_bad_alignment(self, value: int) -> None:
        with pytest.raises(InvalidArgument):
            validate.alignment(value, "alignment")

    @given(st.integers(0, 21))
    def test_accepts_powers_of_two(self, k: int) -> None:
        assert validate.alignment(2**k, "a") == 2**k

    @pytest.mark.parametrize(
        "value", [float("nan"), float("inf"), -1.0, -1e-300, 1e7, 10**400, True, "1", None]
    )
    def test_raises_bad_cost(self, value: Any) -> None:
        with pytest.raises(InvalidArgument, match=r"^cost of 'k' "):
            validate.cost(value, "cost of 'k'")

    @given(st.floats(0, validate.MAX_COST_SECONDS) | st.integers(0, 10**6))
    def test_cost_is_a_float(self, v: float) -> None:
        out = validate.cost(v, "c")
        assert type(out) is float and math.isfinite(out) and out == v

    @pytest.mark.parametrize(
        "value", [("4",), (1.5,), (True,), (1, 2, 3, 4), (), "4", None, {1: 2}, [1, None]]
    )
    def test_raises_bad_dims(self, value: Any) -> None:
        with pytest.raises(InvalidArgument, match=r"^grid "):
            validate.dims(value, "grid")

    def test_kernel_config_does_not_coerce(self) -> None:
        for bad in (("4", 1, 1), (1.5, 1, 1), (True, 1, 1)):
            with pytest.raises(InvalidArgument, match=r"^grid must be an int"):
                KernelConfig(bad, (32, 1, 1))  # type: ignore[arg-type]


class TestParams:
    @pytest.mark.parametrize(
        ("value", "match"),
        [
            ({"a": float("nan")}, r"parameter 'a' of 'k' must be finite"),
            ({"a": [1]}, r"parameter 'a' of 'k' must be a number, str or bool"),
            ({"a": 2**60}, r"integers up to"),
            ({"a": "\ud800"}, r"not valid Unicode"),
            ({"not an identifier": 1}, r"must be an identifier"),
            ({"é": 1}, r"must be an identifier"),
            ({f"p{i}": 1 for i in range(65)}, r"65 parameters; at most 64"),
            ("alpha=1", r"must be a dict"),
        ],
    )
    def test_raises(self, value: Any, match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            validate.params(value, "'k'")

    def test_keeps_types(self) -> None:
        assert validate.params({"b": 1, "a": 0.5, "c": True}, "'k'") == (
            ("a", 0.5),
            ("b", 1),
            ("c", True),
        )


# ------------------------------------------------------------------ builder == loader
def _graph_dict() -> dict[str, Any]:
    b = GraphBuilder()
    x = b.alloc_buffer("x", 64)
    y = b.alloc_buffer("y", 64)
    b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
    b.add_kernel("scale", 1, 16).inputs([x]).outputs([y]).params(alpha=2.0).cost(0.5).finish()
    b.add_memset("zero", 64, 0, dst=y)
    return json.loads(b.build().to_json())


def _buffer(b: GraphBuilder, **kw: Any) -> None:
    args = {"name": "x", "size_bytes": 64, "alignment": 256, "shape": None, **kw}
    b.alloc_buffer(
        args["name"], args["size_bytes"], shape=args["shape"], alignment=args["alignment"]
    )


# (builder call given a bad value, where the same value goes in the file)
_BOTH: dict[
    str, tuple[Callable[[GraphBuilder, Any], Any], Callable[[dict[str, Any], Any], None]]
] = {
    "buffer name": (
        lambda b, v: _buffer(b, name=v),
        lambda d, v: d["buffers"][0].update(name=v),
    ),
    "buffer size": (
        lambda b, v: _buffer(b, size_bytes=v),
        lambda d, v: d["buffers"][0].update(size_bytes=v),
    ),
    "alignment": (
        lambda b, v: _buffer(b, alignment=v),
        lambda d, v: d["buffers"][0].update(alignment=v),
    ),
    "shape": (
        lambda b, v: _buffer(b, shape=v),
        lambda d, v: d["buffers"][0].update(shape=v),
    ),
    "kernel name": (
        lambda b, v: b.add_kernel(v, 1, 16).finish(),
        lambda d, v: d["nodes"][1].update(name=v),
    ),
    "memcpy size": (
        lambda b, v: b.add_memcpy("up", MemcpyDir.HostToDevice, v),
        lambda d, v: d["nodes"][0].update(size_bytes=v),
    ),
    "memset value": (
        lambda b, v: b.add_memset("zero", 64, v),
        lambda d, v: d["nodes"][2].update(memset_value=v),
    ),
    "cost": (
        lambda b, v: b.add_kernel("scale", 1, 16).cost(v).finish(),
        lambda d, v: d["nodes"][1].update(cost=v),
    ),
    "stream": (
        lambda b, v: b.add_kernel("scale", 1, 16).on_stream(v).finish(),
        lambda d, v: d["nodes"][1].update(stream=v),
    ),
    "param": (
        lambda b, v: b.add_kernel("scale", 1, 16).params(alpha=v).finish(),
        lambda d, v: d["nodes"][1].update(params={"alpha": v}),
    ),
    "grid": (
        lambda b, v: b.add_kernel_3d("scale", v, (16, 1, 1)).finish(),
        lambda d, v: d["nodes"][1]["config"].update(grid=v),
    ),
}
_BAD: dict[str, list[Any]] = {
    "buffer name": ["\ud800", "a\nb", "", "x" * 300, 7],
    "buffer size": [0, -64, "64", 64.0, True, 2**41, 10**5000],
    "alignment": [0, 48, "256", 2**30, True],
    "shape": [[3, 5], [0, 16], ["16"], [1.5], [1] * 9],
    "kernel name": ["\ud800", "\x00", " ", None],
    "memcpy size": [0, "64", 1.5, 2**41],
    "memset value": [256, -1, "0", True, 1.5],
    "cost": [float("inf"), -1, "1", 1e9, True],
    "stream": [-1, 2**40, "0", True, 1.5],
    "param": [[1], float("nan"), 2**60, "\ud800", None],
    "grid": [["4"], [1.5], [True], [0], [2**40], [1, 1, 1, 1]],
}
_CASES = [(k, v) for k, vs in _BAD.items() for v in vs]


@pytest.mark.parametrize(
    ("kind", "value"), _CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(_CASES)]
)
def test_builder_and_loader_refuse_with_the_same_message(kind: str, value: Any) -> None:
    build, edit = _BOTH[kind]
    with pytest.raises(InvalidArgument) as built:
        build(GraphBuilder(), value)
    d = _graph_dict()
    edit(d, value)
    with pytest.raises(MalformedFile) as loaded:
        ComputeGraph.from_dict(d)
    # The loader says where (graph.nodes[1]: ...), then the builder's words exactly.
    where, _, rest = str(loaded.value).partition(": ")
    assert where.startswith("graph.")
    assert rest == str(built.value)
