"""The op table: references against hand-written values, registry and parameter checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import ops
from oxiwork.error import InvalidArgument
from oxiwork.ops import FusionClass, OpDef

F = np.float32
X = np.array([[-1.0, 0.0, 2.0], [3.0, -4.0, 0.5]], dtype=F)
Y = np.array([[2.0, 1.0, -1.0], [0.5, 2.0, 4.0]], dtype=F)


def _gelu(v: float) -> float:
    return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


# op, inputs, params, expected (written out by hand, not with the op's own formula)
CASES = [
    ("relu", [X], {}, [[0, 0, 2], [3, 0, 0.5]]),
    ("scale", [X], {}, [[-2, 0, 4], [6, -8, 1]]),  # default alpha = 2
    ("scale", [X], {"alpha": -0.5}, [[0.5, 0, -1], [-1.5, 2, -0.25]]),
    ("add", [X, Y], {}, [[1, 1, 1], [3.5, -2, 4.5]]),
    ("sub", [X, Y], {}, [[-3, -1, 3], [2.5, -6, -3.5]]),
    ("mul", [X, Y], {}, [[-2, 0, -2], [1.5, -8, 2]]),
    ("div", [X, Y], {}, [[-0.5, 0, -2], [6, -2, 0.125]]),
    ("neg", [X], {}, [[1, 0, -2], [-3, 4, -0.5]]),
    ("exp", [np.array([0.0, 1.0], F)], {}, [1, math.e]),
    ("log", [np.array([1.0, math.e], F)], {}, [0, 1]),
    ("tanh", [np.array([0.0, 1.0], F)], {}, [0, math.tanh(1)]),
    ("sigmoid", [np.array([0.0, 2.0], F)], {}, [0.5, 1 / (1 + math.exp(-2))]),
    ("gelu", [np.array([-1.0, 0.0, 1.5], F)], {}, [_gelu(-1), 0, _gelu(1.5)]),
    ("copy", [X], {}, X.tolist()),
    ("bias_add", [X, np.array([10, 20, 30], F)], {}, [[9, 20, 32], [13, 16, 30.5]]),
    ("sum", [X], {}, [1, -0.5]),
    ("max", [X], {}, [2, 3]),
    ("softmax", [np.array([[0.0, 0.0], [0.0, math.log(3)]], F)], {}, [[0.5, 0.5], [0.25, 0.75]]),
    ("layer_norm", [np.array([[1.0, 3.0]], F)], {"eps": 0.0}, [[-1, 1]]),
    ("layer_norm", [np.array([[1.0, 3.0]], F)], {"eps": 3.0}, [[-0.5, 0.5]]),
    (
        "matmul",
        [np.array([[1, 2], [3, 4]], F), np.array([[1, 0], [1, 1]], F)],
        {},
        [[3, 2], [7, 4]],
    ),
    ("transpose", [np.array([[1, 2, 3]], F)], {}, [[1], [2], [3]]),
]


class TestReferences:
    @pytest.mark.parametrize(("name", "inputs", "params", "expected"), CASES)
    def test_reference_matches_hand_values(self, name, inputs, params, expected):
        op = ops.get(name)
        got = op.reference(inputs, **ops.bind_params(op, params, "test"))
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, np.array(expected, dtype=F), rtol=1e-6, atol=1e-6)

    @pytest.mark.parametrize(("name", "inputs", "params", "expected"), CASES)
    def test_shape_rule_matches_reference(self, name, inputs, params, expected):
        op = ops.get(name)
        shape = ops.infer_shape(op, [a.shape for a in inputs], op.defaults, "test")
        assert math.prod(shape) == np.array(expected).size

    def test_required_ops_present(self):
        required = {
            "relu", "scale", "add", "sub", "mul", "div", "neg", "exp", "log", "tanh",
            "sigmoid", "gelu", "copy", "bias_add", "sum", "max", "softmax", "layer_norm",
            "matmul",
        }  # fmt: skip
        assert required <= set(ops.REGISTRY)
        for name in required:
            assert ops.get(name).has_cuda

    @pytest.mark.parametrize(
        ("name", "cls"),
        [
            ("relu", FusionClass.ELEMENTWISE),
            ("bias_add", FusionClass.BROADCAST),
            ("softmax", FusionClass.REDUCTION),
            ("matmul", FusionClass.OUT_ELEMENTWISE),
            ("transpose", FusionClass.INJECTIVE),
        ],
    )
    def test_fusion_classes(self, name, cls):
        assert ops.get(name).fusion_class is cls


class TestParams:
    def test_raises_on_unknown_param(self):
        with pytest.raises(InvalidArgument, match=r"op 'scale' has no parameter 'beta'.*alpha"):
            ops.bind_params(ops.get("scale"), {"beta": 1.0}, "kernel 'k'")

    def test_raises_on_param_of_paramless_op(self):
        with pytest.raises(InvalidArgument, match=r"'relu' has no parameter 'alpha'.*none"):
            ops.bind_params(ops.get("relu"), {"alpha": 1.0}, "kernel 'k'")

    def test_raises_on_non_numeric_param(self):
        with pytest.raises(InvalidArgument, match="must be a number"):
            ops.bind_params(ops.get("scale"), {"alpha": "big"}, "kernel 'k'")

    def test_defaults_and_override(self):
        assert ops.bind_params(ops.get("layer_norm"), {}, "k") == {"eps": 1e-5}
        assert ops.bind_params(ops.get("scale"), [("alpha", 3)], "k") == {"alpha": 3.0}


class TestShapes:
    def test_raises_on_shapes_that_do_not_broadcast(self):
        with pytest.raises(InvalidArgument, match=r"kernel 'a' \(op 'add'\).*do not broadcast"):
            ops.infer_shape(ops.get("add"), [(2, 3), (3, 2)], {}, "kernel 'a'")

    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def test_elementwise_shapes_broadcast_as_numpy(self, data):
        out = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, max_side=4), label="out")
        shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, base_shape=out))
        for name in ("add", "sub", "mul", "div"):
            got = ops.infer_shape(ops.get(name), list(shapes.input_shapes), {}, "k")
            assert got == np.broadcast_shapes(*shapes.input_shapes)

    def test_custom_source_ops_keep_equal_shapes(self):
        src = 'extern "C" __global__ void two_in(const float* in0, const float* in1, float* out0, size_t n) {}'
        op = ops.custom("two_in", source=src, arity=2, reference=lambda xs: xs[0] + xs[1])
        try:
            with pytest.raises(InvalidArgument, match="equal shapes"):
                ops.infer_shape(op, [(2, 3), (3,)], {}, "k")
        finally:
            ops.REGISTRY.pop("two_in")

    def test_raises_on_wrong_bias(self):
        with pytest.raises(InvalidArgument, match="bias of 3 elements"):
            ops.infer_shape(ops.get("bias_add"), [(2, 3), (2,)], {}, "kernel 'b'")

    def test_raises_on_matmul_mismatch(self):
        with pytest.raises(InvalidArgument, match="inner dimensions"):
            ops.infer_shape(ops.get("matmul"), [(2, 3), (2, 3)], {}, "kernel 'm'")

    def test_raises_on_wrong_arity(self):
        with pytest.raises(InvalidArgument, match="takes 2"):
            ops.infer_shape(ops.get("add"), [(2, 3)], {}, "kernel 'a'")

    def test_reductions_drop_last_axis(self):
        assert ops.infer_shape(ops.get("sum"), [(2, 3, 4)], {}, "k") == (2, 3)
        assert ops.infer_shape(ops.get("max"), [(5,)], {}, "k") == (1,)


class TestRegistry:
    def test_raises_on_duplicate_name(self):
        with pytest.raises(InvalidArgument, match="already registered"):
            ops.register(ops.get("relu"))

    def test_raises_on_bad_expr_placeholder(self):
        with pytest.raises(InvalidArgument, match=r"uses \{1\}"):
            OpDef("bad", FusionClass.ELEMENTWISE, 1, expr="({0} + {1})")
        with pytest.raises(InvalidArgument, match=r"uses \{beta\}"):
            OpDef("bad", FusionClass.ELEMENTWISE, 1, expr="({0} * {beta})")

    def test_raises_on_elementwise_without_expr(self):
        with pytest.raises(InvalidArgument, match="no expr"):
            OpDef("bad", FusionClass.ELEMENTWISE, 1)

    def test_raises_on_non_identifier_name(self):
        with pytest.raises(InvalidArgument, match="identifier"):
            OpDef("bad name", FusionClass.OPAQUE, 1)

    def test_get_unknown_is_none(self):
        assert ops.get("nope") is None
        assert ops.get(None) is None

    def test_custom_requires_something(self):
        with pytest.raises(InvalidArgument, match="needs a numpy reference"):
            ops.custom("nothing_at_all")

    def test_custom_source_must_define_function(self):
        with pytest.raises(InvalidArgument, match="does not define function"):
            ops.custom("k1", source='extern "C" __global__ void other(float* out0) {}')

    def test_custom_elementwise_is_fusible_class(self):
        op = ops.custom("triple_t", expr="({0} * 3.0f)", reference=lambda xs: xs[0] * 3)
        try:
            assert op.fusion_class is FusionClass.ELEMENTWISE
            assert ops.get("triple_t") is op
            with pytest.raises(InvalidArgument, match="already registered"):
                ops.custom("triple_t", expr="({0} * 3.0f)")
            ops.custom("triple_t", expr="({0} * 4.0f)", replace=True)
            assert ops.get("triple_t").expr == "({0} * 4.0f)"
        finally:
            ops.REGISTRY.pop("triple_t", None)

    def test_default_cost_counts_elements(self):
        flops, nbytes = ops.get("add").op_cost([(4,), (4,)], (4,))
        assert (flops, nbytes) == (4.0, 48.0)
        flops, _ = ops.get("matmul").op_cost([(2, 3), (3, 5)], (2, 5))
        assert flops == 2 * 2 * 5 * 3
