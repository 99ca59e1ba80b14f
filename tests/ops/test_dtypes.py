"""Dtypes through the op table: result dtype rules, references computing in float32 with
one rounding per op, the simulator's typed arena views, fusion, the cost model, verify.

The semantics checked (PyTorch's): a float16/bfloat16 op widens its inputs to float32,
computes, and rounds its result once to its dtype; a fused chain rounds each step to the
step's dtype, so fused == unfused bit for bit.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.cost import kernel_work
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate

FLOATS = ("float32", "float16", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _np(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-for-bit equal in the array's dtype but for NaN payloads (compared as float32)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=what)


def _ew_graph(name: str, dtype: str, shapes: list[tuple[int, ...]], out_dtype: str | None = None):
    op = ops.get(name)
    b = GraphBuilder()
    it = DTYPES[dtype]
    ins = [
        b.alloc_external_buffer(f"in{k}", it * math.prod(s), dtype=dtype, shape=s)
        for k, s in enumerate(shapes)
    ]
    out_shape = ops.infer_shape(op, shapes, op.defaults, "t")
    od = out_dtype or dtype
    out = b.alloc_buffer("out", DTYPES[od] * math.prod(out_shape), dtype=od, shape=out_shape)
    b.add_kernel(name, 1, 32).op(name).inputs(ins).outputs([out]).finish()
    return b.build()


def _float_ops() -> list[str]:
    """Built-in ops whose rule accepts every float dtype and whose reference computes."""
    return sorted(
        n
        for n in ops.BUILTIN_OPS
        if ops.get(n).reference is not None and ops.get(n).dtype is ops.table.float_dtype
    )


def _shapes(op: ops.OpDef) -> list[tuple[int, ...]]:
    for shapes in ([(2, 5)] * op.arity, [(2, 5), (5,)], [(2, 5), (5, 3)]):
        if len(shapes) != op.arity:
            continue
        try:
            ops.infer_shape(op, shapes, op.defaults, "probe")
        except InvalidArgument:
            continue
        return shapes
    raise AssertionError(f"no shapes for {op.name}")


class TestRules:
    def test_raises_int_input_to_float_op_at_build(self):
        b = GraphBuilder()
        ids = b.alloc_external_buffer("ids", 80, dtype="int64", shape=(10,))
        y = b.alloc_buffer("y", 40, shape=(10,))
        b.add_kernel("r", 1, 32).op("relu").inputs([ids]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=r"input 0 is int64.*cast_float32"):
            b.build()

    def test_raises_store_of_another_dtype(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 20, dtype="float16", shape=(10,))
        y = b.alloc_buffer("y", 40, shape=(10,))
        b.add_kernel("r", 1, 32).op("relu").inputs([x]).outputs([y]).finish()
        with pytest.raises(
            InvalidArgument, match=r"computes float16 .* buffer 'y' of dtype float32"
        ):
            b.build()

    def test_raises_alignment_below_element_size(self):
        b = GraphBuilder()
        with pytest.raises(InvalidArgument, match=r"alignment 4 is smaller than its int64"):
            b.alloc_buffer("x", 64, dtype="int64", alignment=4)

    @pytest.mark.parametrize("a, b, want", [
        ("float16", "float16", "float16"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("float16", "bfloat16", "float32"),
        ("float16", "float32", "float32"),
        ("bfloat16", "float32", "float32"),
    ])  # fmt: skip
    def test_float_promotion_is_torchs(self, a, b, want):
        import torch

        t = {n: getattr(torch, n) for n in FLOATS}
        assert str(torch.promote_types(t[a], t[b])) == f"torch.{want}"
        assert ops.table.float_dtype([a, b], {}) == want


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestFloatMath:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("name", _float_ops())
    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_half_op_is_float32_math_rounded_once(self, name, dtype, data):
        op = ops.get(name)
        shapes = _shapes(op)
        xs = [
            data.draw(hnp.arrays(np.float32, s, elements=st.floats(-50, 50, width=32))).astype(
                dtype
            )
            for s in shapes
        ]
        g = _ew_graph(name, dtype, shapes)
        inputs = {f"in{k}": x for k, x in enumerate(xs)}
        with np.errstate(all="ignore"):
            want = np.asarray(
                op.reference([x.astype(np.float32) for x in xs], **op.defaults), np.float32
            ).astype(dtype)
        ref = evaluate(g, inputs)["out"]
        _same(ref.reshape(want.shape), want, f"{name}/{dtype}: reference")
        sim = SequentialExecutor(ExecutionPlan.build(g, max_streams=1, fusion=False)).run(inputs)
        _same(sim.outputs["out"].reshape(want.shape), want, f"{name}/{dtype}: simulator")

    @pytest.mark.parametrize("dtype", FLOATS)
    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        names=st.lists(st.sampled_from(["relu", "exp", "tanh", "scale", "gelu", "neg", "sigmoid"]),
                       min_size=2, max_size=4),
        data=st.data(),
        streams=st.integers(1, 4),
    )  # fmt: skip
    def test_fused_chain_rounds_each_step(self, dtype, names, data, streams):
        b = GraphBuilder()
        it = DTYPES[dtype]
        cur = b.alloc_external_buffer("x", it * 6, dtype=dtype, shape=(2, 3))
        for j, n in enumerate(names):
            out = b.alloc_buffer(
                "out" if j == len(names) - 1 else f"t{j}", it * 6, dtype=dtype, shape=(2, 3)
            )
            b.add_kernel(f"k{j}", 1, 32).op(n).inputs([cur]).outputs([out]).fusible(True).finish()
            cur = out
        g = b.build()
        x = data.draw(hnp.arrays(np.float32, (2, 3), elements=st.floats(-4, 4, width=32)))
        inputs = {"x": x.astype(dtype)}
        want = evaluate(g, inputs)["out"]
        assert want.dtype == _np(dtype)
        for fusion in (False, True):
            plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
            if fusion and dtype == "float32":  # typed CUDA C comes next: only float32 fuses yet
                assert plan.kernel_count_fused == 1
                fused = plan.graph.kernels()[0]
                assert [st.dtype for st in bind(plan.graph, fused).steps] == [dtype] * len(names)
            got = SequentialExecutor(plan).run(inputs).outputs["out"]
            _same(got, want, f"{names} {dtype} fusion={fusion}")


class TestCost:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("name", ["relu", "sum", "matmul", "softmax"])
    def test_half_kernels_move_half_the_bytes(self, name, dtype):
        shapes = _shapes(ops.get(name))
        g32, gh = _ew_graph(name, "float32", shapes), _ew_graph(name, dtype, shapes)
        f32 = kernel_work(g32, g32.kernels()[0])
        half = kernel_work(gh, gh.kernels()[0])
        assert half[0] == f32[0]
        assert half[1] == f32[1] / 2
