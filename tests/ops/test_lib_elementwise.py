"""oxiwork.ops.lib_elementwise: shape rules, NVRTC compiles, and batch norm fused as the
epilogue of a matmul or convolution head (values in tests/ops/test_special_values.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source, lib_elementwise
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.ops.test_special_values import assert_same, run_c

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")

NAMES = sorted(op.name for op in (*lib_elementwise.ELEMENTWISE_OPS, *lib_elementwise.MATH_OPS))
F32 = np.float32


SPECIALS = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2.5, 3.0, -7.25, 1e-40, 1e30],
    F32,
)


@pytest.mark.parametrize(
    "name", ["maximum", "minimum", "sign", "round", "remainder_scalar", "isnan", "floor"]
)
def test_math_ops_follow_torchs_nan_zero_and_tie_rules_in_reference_and_c(name, tmp_path):
    # torch's choices where numpy's differ: sign(NaN) = 0, maximum/minimum propagate NaN,
    # remainder's zero keeps fmod's sign
    torch = pytest.importorskip("torch")
    x = SPECIALS.reshape(1, -1).repeat(len(SPECIALS), 0)
    y = x.T.copy()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    args, eager = {
        "maximum": ([x, y], torch.maximum(tx, ty)),
        "minimum": ([x, y], torch.minimum(tx, ty)),
        "sign": ([x], torch.sign(tx)),
        "round": ([x], torch.round(tx)),
        "floor": ([x], torch.floor(tx)),
        "remainder_scalar": ([x], torch.remainder(tx, -1.5)),
        "isnan": ([x], torch.isnan(tx)),
    }[name]
    params = {"other": -1.5} if name == "remainder_scalar" else {}
    want = ops.get(name).reference(args, **params)
    np.testing.assert_array_equal(want, eager.numpy())
    # zero signs too, but for the extremes' ties of -0.0 and 0.0, where torch's own choice
    # differs between its vector and scalar loops
    if want.dtype == F32 and name not in ("maximum", "minimum"):
        zero = want == 0
        assert np.array_equal(np.signbit(want[zero]), np.signbit(eager.numpy()[zero]))
    if CXX is not None and name != "isnan":
        net = _Net()
        ins = [net.input(a.shape) for a in args]
        net.kernel(name, ins, "out", **params)
        g = net.b.build()
        (got,) = run_c(g, g.kernels()[0], args, tmp_path, 32)
        assert_same(got, want, f"{name}: C")


def _shapes(name: str) -> list[tuple[int, ...]]:
    op = ops.get(name)
    if name in ("batch_norm", "batch_norm_plain"):
        return [(2, 3, 4, 5)] + [(3,)] * (op.arity - 1)
    return [(4, 8)] * op.arity


class _Net:
    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.n = 0

    def input(self, shape):
        buf = self.b.alloc_external_buffer(f"x{self.n}", 4 * math.prod(shape), shape=shape)
        self.n += 1
        return buf, shape

    def kernel(self, op_name, ins, out_name=None, **params):
        op = ops.get(op_name)
        shape = ops.infer_shape(op, [s for _, s in ins], {**op.defaults, **params}, "t")
        name = out_name or f"t{self.n}"
        self.n += 1
        dtype = ops.infer_dtype(op, ["float32"] * len(ins), {**op.defaults, **params}, name)
        out = self.b.alloc_buffer(name, DTYPES[dtype] * math.prod(shape), dtype=dtype, shape=shape)
        kb = self.b.add_kernel(f"k_{name}", 2, 32).op(op_name).inputs([b for b, _ in ins])
        kb = kb.outputs([out]).fusible(True)
        if params:
            kb.params(**params)
        kb.finish()
        return out, shape


class TestShapes:
    def test_raises_on_batch_norm_vectors_of_the_wrong_size(self):
        with pytest.raises(InvalidArgument, match=r"needs 3 elements, one per channel"):
            ops.infer_shape(ops.get("batch_norm"), [(2, 3, 4)] + [(4,)] * 4, {}, "k")

    def test_raises_on_batch_norm_without_a_channel_axis(self):
        with pytest.raises(InvalidArgument, match=r"\(N, C, \.\.\.\)"):
            ops.infer_shape(ops.get("batch_norm"), [(3,)] * 5, {}, "k")

    def test_where_and_comparisons_broadcast(self):
        assert ops.infer_shape(ops.get("where"), [(1, 4), (3, 1), (4,)], {}, "k") == (3, 4)
        assert ops.infer_shape(ops.get("lt"), [(2, 1), (5,)], {}, "k") == (2, 5)

    def test_scalars_are_parameters(self):
        assert ops.get("add_scalar").defaults == {"other": 1.0}
        assert ops.get("pow_scalar").defaults == {"exponent": 2.0}
        assert ops.get("hardtanh").defaults == {"min_val": -1.0, "max_val": 1.0}


@pytest.mark.parametrize("name", NAMES)
def test_every_op_compiles_alone_and_after_a_matmul(name, nvrtc_compile):
    net = _Net()
    ins = [net.input(s) for s in _shapes(name)]
    net.kernel(name, ins, "out")
    g = net.b.build()
    ks = kernel_source(g, g.kernels()[0])
    assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
    # as the epilogue of a matmul head: the other inputs broadcast per column
    net = _Net()
    a, w = net.input((4, 6)), net.input((6, 8))
    mm = net.kernel("matmul", [a, w])
    rest = [net.input((8,)) for _ in range(ops.get(name).arity - 1)]
    net.kernel(name, [mm, *rest], "out")
    fused = ExecutionPlan.build(net.b.build(), max_streams=1, fusion=True).graph
    (k,) = fused.kernels()
    ks = kernel_source(fused, k)
    assert "matmul -> " + name in ks.source
    assert nvrtc_compile(ks.source, ks.function_name, "sm_90")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.parametrize("head", ["matmul", "conv2d"])
def test_batch_norm_relu_fuse_into_the_head(head, tmp_path):
    rng = np.random.default_rng(0)
    net = _Net()
    if head == "matmul":
        x, w = net.input((6, 5)), net.input((5, 4))
        h = net.kernel("matmul", [x, w])
        c = 4
    else:
        x, w = net.input((2, 3, 6, 6)), net.input((4, 3, 3, 3))
        h = net.kernel("conv2d", [x, w], pad_top=1, pad_bottom=1, pad_left=1, pad_right=1)
        c = 4
    vecs = [net.input((c,)) for _ in range(4)]
    y = net.kernel("batch_norm", [h, *vecs])
    net.kernel("relu_nan", [y], "out")
    g = net.b.build()
    values = {}
    for b in g.buffers:
        if b.external:
            values[b.name] = rng.standard_normal(b.array_shape).astype(F32)
    values["x4"] = np.abs(values["x4"]) + F32(0.1)  # the variance
    fused = ExecutionPlan.build(g, max_streams=1, fusion=True)
    (k,) = fused.graph.kernels()
    assert k.fused is not None and [g.node(m).op for m in k.fused_from] == [
        head,
        "batch_norm",
        "relu_nan",
    ]
    want = evaluate(g, values)["out"]
    assert_same(SequentialExecutor(fused).run(values).outputs["out"], want, "fused sim")
    (c_out,) = run_c(fused.graph, k, [values[fused.graph.buffer(b).name] for b in k.inputs],
                     tmp_path, 4)  # fmt: skip
    np.testing.assert_allclose(c_out.reshape(want.shape), want, rtol=1e-5, atol=1e-5)
