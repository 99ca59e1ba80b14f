"""conv1d/2d/3d, pooling, constant pad and cat (oxiwork.ops.lib_conv): references against
PyTorch, generated C run on the CPU against the references, fusion of epilogues, NVRTC
compiles.

Parameters are drawn by hypothesis over the valid space (strides, asymmetric padding,
dilation, groups including depthwise, ceil mode...). How closely two sides must agree:

- max pooling, padding and cat move or compare values only: bit for bit;
- sums (convolution, average pooling) differ in their order. The reference sums in float64
  and rounds once, so it is within one float32 rounding of the exact value (checked against
  PyTorch in float64); float32 sums of ``n`` terms in any order are within
  ``(n - 1) u sum |x_i w_i|`` of the exact value (N. J. Higham, "Accuracy and Stability of
  Numerical Algorithms", 2nd ed., 2002, section 4.2), so PyTorch's float32 result and the
  generated kernel's are each within ``(n + 1) u sum |x_i w_i|`` of the reference (one
  rounding more for the reference itself, one for a bias).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.ops import kernel_source
from oxiwork.ops.lib_conv import cat_op
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

torch = pytest.importorskip("torch")
F = torch.nn.functional

U = 2.0**-24
F32 = np.float32
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")


# ------------------------------------------------------------------------------ helpers
def graph_of(op_name: str, shapes, params):
    """A graph holding one kernel applying ``op_name`` to external inputs ``in0..``."""
    op = ops.get(op_name)
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"in{k}", 4 * math.prod(s), shape=s) for k, s in enumerate(shapes)
    ]
    out_shape = ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")
    out = b.alloc_buffer("out", 4 * math.prod(out_shape), shape=out_shape)
    b.add_kernel(op_name, 2, 32).op(op_name).params(**params).inputs(ins).outputs([out]).finish()
    g = b.build()
    return g, g.kernels()[0]


def run_c(graph, node, arrays, so_dir, block=4):
    """``node``'s generated kernel run on the CPU (renamed: equal sources compile once)."""
    ks = kernel_source(graph, node)
    src = re.sub(rf"\b{re.escape(ks.function_name)}\b", "oxk", ks.source)
    outs = list(bind(graph, node).out_shapes)
    return run_kernel(src, "oxk", arrays, outs, ks.scalar_args, so_dir, block=block)


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("conv_kernels")


def randn(seed: int, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(F32) for s in shapes]


def t64(x):
    return torch.from_numpy(np.asarray(x, np.float64))


# ------------------------------------------------------------------------------ conv cases
AXES = {2: "hw", 3: "dhw"}
PADS = {
    "d": ("pad_front", "pad_back"),
    "h": ("pad_top", "pad_bottom"),
    "w": ("pad_left", "pad_right"),
}


@st.composite
def conv_cases(draw, dims=2):
    """(input shapes, params, groups) of a valid ``dims``-d convolution, bias or not (3-d
    extents kept small: the generated C runs on the CPU)."""
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    cg = 1 if groups == "depthwise" else draw(st.integers(1, 3))
    groups = draw(st.integers(1, 4)) if groups == "depthwise" else groups
    kg = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    largest = 9 if dims == 2 else 5
    params, sizes, taps = {}, [], []
    for a in AXES[dims]:
        t, d = draw(st.integers(1, 3)), draw(st.integers(1, 2))
        lo, hi = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        sizes.append(draw(st.integers(max(1, d * (t - 1) + 1 - lo - hi), largest)))
        taps.append(t)
        params |= {f"stride_{a}": draw(st.integers(1, 3)), f"dilation_{a}": d}
        params |= dict(zip(PADS[a], (lo, hi), strict=True))
    shapes = [(n, groups * cg, *sizes), (groups * kg, cg, *taps)]
    if draw(st.booleans()):
        shapes.append((groups * kg,))
    return shapes, params, groups


def torch_conv(xs, params, groups, dtype):
    """PyTorch's 2-d or 3-d convolution of ``xs`` (asymmetric padding through F.pad) in
    ``dtype``."""
    t = [torch.from_numpy(np.asarray(x)).to(dtype) for x in xs]
    axes = AXES[t[0].ndim - 2]
    pad = tuple(params[p] for a in reversed(axes) for p in PADS[a])  # (last axis first)
    conv = F.conv2d if len(axes) == 2 else F.conv3d
    return (
        conv(
            F.pad(t[0], pad),
            t[1],
            t[2] if len(t) > 2 else None,
            stride=tuple(params[f"stride_{a}"] for a in axes),
            dilation=tuple(params[f"dilation_{a}"] for a in axes),
            groups=groups,
        )
        .numpy()
        .astype(np.float64)
    )


def conv_bound(xs, params, groups):
    """``(n + 1) u sum |x_i w_i|`` per output element (see the module docstring)."""
    absolute = [np.abs(x) for x in xs]
    mag = torch_conv(absolute, params, groups, torch.float64)
    taps = math.prod(xs[1].shape[1:]) + len(xs) - 2
    return (taps + 1) * U * mag + 2.0**-126


def conv_name(dims, shapes):
    return f"conv{dims}d_bias" if len(shapes) == 3 else f"conv{dims}d"


class TestConv:
    """conv2d's rules; the properties of conv2d and conv3d (drawn for both)."""

    def test_raises_on_fractional_stride(self):
        op = ops.get("conv2d")
        with pytest.raises(InvalidArgument, match=r"stride_h=1\.5 must be an integer"):
            ops.infer_shape(op, [(1, 2, 5, 5), (2, 2, 3, 3)], {**op.defaults, "stride_h": 1.5}, "c")

    def test_raises_when_groups_do_not_divide(self):
        op = ops.get("conv2d")
        with pytest.raises(InvalidArgument, match="does not divide"):
            ops.infer_shape(op, [(1, 5, 5, 5), (2, 2, 3, 3)], op.defaults, "c")
        with pytest.raises(InvalidArgument, match="do not split into 2 groups"):
            ops.infer_shape(op, [(1, 4, 5, 5), (3, 2, 3, 3)], op.defaults, "c")

    def test_raises_when_the_kernel_does_not_fit(self):
        op = ops.get("conv2d")
        with pytest.raises(InvalidArgument, match="does not fit"):
            ops.infer_shape(op, [(1, 1, 2, 2), (1, 1, 3, 3)], op.defaults, "c")

    def test_raises_on_a_bias_of_the_wrong_size(self):
        op = ops.get("conv2d_bias")
        with pytest.raises(InvalidArgument, match="bias needs 4 elements"):
            ops.infer_shape(op, [(1, 2, 5, 5), (4, 2, 3, 3), (3,)], op.defaults, "c")

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def test_reference_is_one_rounding_from_exact_and_near_torch(self, dims, data, seed):
        shapes, params, groups = data.draw(conv_cases(dims))
        xs = randn(seed, *shapes)
        op = ops.get(conv_name(dims, shapes))
        got = op.reference(xs, **{**op.defaults, **params}).astype(np.float64)
        exact = torch_conv(xs, params, groups, torch.float64)
        assert (
            got.shape == exact.shape == ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")
        )
        # within one rounding of the (float64) exact value
        assert np.all(np.abs(got - exact) <= U * np.abs(exact) + 2.0**-140)
        bound = conv_bound(xs, params, groups)
        assert np.all(np.abs(got - torch_conv(xs, params, groups, torch.float32)) <= bound)

    @needs_cxx
    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 4, 32]))
    def test_generated_c_equals_reference_within_the_summation_bound(
        self, dims, data, seed, block, so_dir
    ):
        shapes, params, groups = data.draw(conv_cases(dims))
        xs = randn(seed, *shapes)
        g, node = graph_of(conv_name(dims, shapes), shapes, params)
        want = evaluate(g, {f"in{k}": x for k, x in enumerate(xs)})["out"]
        (c,) = run_c(g, node, xs, so_dir, block)
        assert c.shape == want.shape
        diff = np.abs(c.astype(np.float64) - want)
        assert np.all(diff <= conv_bound(xs, params, groups))

    def test_cost_counts_two_flops_per_weight_tap(self):
        op = ops.get("conv2d")
        # depthwise 3x3 on 8 channels: weight (8, 1, 3, 3), output (2, 8, 4, 4)
        flops, moved = op.op_cost([(2, 8, 6, 6), (8, 1, 3, 3)], (2, 8, 4, 4))
        assert flops == 2 * 2 * 8 * 1 * 3 * 3 * 4 * 4
        assert moved == 4 * (2 * 8 * 6 * 6 + 8 * 9 + 2 * 8 * 4 * 4)


# ------------------------------------------------------------------------------ conv3d
class TestConv3d:
    """conv3d's own rules (its values: TestConv's properties, drawn for dims=3)."""

    @pytest.mark.parametrize(
        ("shapes", "params", "match"),
        [
            ([(1, 2, 5, 5), (2, 2, 3, 3)], {}, r"conv3d needs an NCDHW input of 5 dimensions"),
            ([(1, 2, 5, 5, 5), (2, 2, 3, 3)], {}, r"weight of shape \(K, C/groups, T, R, S\)"),
            ([(1, 2, 5, 5, 5), (2, 2, 3, 3, 3)], {"stride_d": 1.5}, r"stride_d=1\.5 must be an"),
            ([(1, 2, 5, 5, 5), (2, 2, 3, 3, 3)], {"dilation_d": 0}, r"dilation_d=0 must be an"),
            ([(1, 2, 5, 5, 5), (2, 2, 3, 3, 3)], {"pad_back": -1}, r"pad_back=-1 must be an"),
            ([(1, 5, 5, 5, 5), (2, 2, 3, 3, 3)], {}, r"which weight .* does not divide"),
            ([(1, 4, 5, 5, 5), (3, 2, 3, 3, 3)], {}, r"3 output channels do not split into 2"),
            ([(1, 2, 2, 5, 5), (2, 2, 3, 3, 3)], {}, r"a 3x3x3 kernel \(dilation 1x1x1\) does"),
            ([(1, 2, 5, 5, 5), (4, 2, 3, 3, 3), (3,)], {}, r"conv3d's bias needs 4 elements"),
        ],
    )
    def test_raises_naming_the_rule(self, shapes, params, match):
        op = ops.get(conv_name(3, shapes))
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")

    @SETTINGS
    @given(case=conv_cases(2), seed=st.integers(0, 2**32 - 1))
    def test_over_a_depth_of_one_it_is_conv2d_bit_for_bit(self, case, seed):
        # a (1, T=1) depth adds no term: the same float64 sums in the same order
        shapes, params, _ = case
        xs = randn(seed, *shapes)
        two = ops.get(conv_name(2, shapes))
        three = ops.get(conv_name(3, shapes))
        deep = [x.reshape((*x.shape[:2], 1, *x.shape[2:])) if x.ndim == 4 else x for x in xs]
        want = two.reference(xs, **{**two.defaults, **params})
        got = three.reference(deep, **{**three.defaults, **params})
        np.testing.assert_array_equal(got[:, :, 0], want)

    def test_cost_counts_two_flops_per_weight_tap(self):
        # weight (4, 2, 3, 3, 3) on 4 channels in 2 groups, output (1, 4, 2, 3, 3), a bias
        flops, moved = ops.get("conv3d_bias").op_cost(
            [(1, 4, 4, 5, 5), (4, 2, 3, 3, 3), (4,)], (1, 4, 2, 3, 3)
        )
        assert flops == 2 * (4 * 2 * 3 * 3) * (2 * 3 * 3 * 3) + 4 * 2 * 3 * 3
        assert moved == 4 * (4 * 4 * 5 * 5 + 4 * 2 * 27 + 4 + 4 * 2 * 3 * 3)


# ------------------------------------------------------------------------------ conv1d
@st.composite
def conv1d_cases(draw):
    """(input shapes, params, groups) of a valid 1-d convolution, bias or not."""
    groups = draw(st.sampled_from([1, 1, 2, 3, "depthwise"]))
    cg = 1 if groups == "depthwise" else draw(st.integers(1, 3))
    groups = draw(st.integers(1, 4)) if groups == "depthwise" else groups
    kg, n, s = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 4))
    dil = draw(st.integers(1, 3))
    pads = [draw(st.integers(0, 3)) for _ in range(2)]
    length = draw(st.integers(max(1, dil * (s - 1) + 1 - sum(pads)), 12))
    params = {"stride": draw(st.integers(1, 3)), "pad_left": pads[0], "pad_right": pads[1]}
    params["dilation"] = dil
    shapes = [(n, groups * cg, length), (groups * kg, cg, s)]
    if draw(st.booleans()):
        shapes.append((groups * kg,))
    return shapes, params, groups


def torch_conv1d(xs, params, groups, dtype):
    """PyTorch's F.conv1d of ``xs`` (asymmetric padding through F.pad) in ``dtype``."""
    t = [torch.from_numpy(np.asarray(x)).to(dtype) for x in xs]
    return (
        F.conv1d(
            F.pad(t[0], (params["pad_left"], params["pad_right"])),
            t[1],
            t[2] if len(t) > 2 else None,
            stride=params["stride"],
            dilation=params["dilation"],
            groups=groups,
        )
        .numpy()
        .astype(np.float64)
    )


class TestConv1d:
    @SETTINGS
    @given(case=conv1d_cases(), seed=st.integers(0, 2**32 - 1))
    def test_reference_is_one_rounding_from_exact_and_near_torch(self, case, seed):
        shapes, params, groups = case
        xs = randn(seed, *shapes)
        op = ops.get("conv1d_bias" if len(shapes) == 3 else "conv1d")
        got = op.reference(xs, **{**op.defaults, **params}).astype(np.float64)
        exact = torch_conv1d(xs, params, groups, torch.float64)
        assert (
            got.shape == exact.shape == ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")
        )
        assert np.all(np.abs(got - exact) <= U * np.abs(exact) + 2.0**-140)
        # (n + 1) u sum |x_i w_i|, as for conv2d (see the module docstring)
        mag = torch_conv1d([np.abs(x) for x in xs], params, groups, torch.float64)
        bound = (math.prod(shapes[1][1:]) + len(xs) - 1) * U * mag + 2.0**-126
        assert np.all(np.abs(got - torch_conv1d(xs, params, groups, torch.float32)) <= bound)

    @needs_cxx
    @SETTINGS
    @given(case=conv1d_cases(), seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 4, 32]))
    def test_generated_c_equals_reference_within_the_summation_bound(
        self, case, seed, block, so_dir
    ):
        shapes, params, groups = case
        xs = randn(seed, *shapes)
        g, node = graph_of("conv1d_bias" if len(shapes) == 3 else "conv1d", shapes, params)
        want = evaluate(g, {f"in{k}": x for k, x in enumerate(xs)})["out"]
        (c,) = run_c(g, node, xs, so_dir, block)
        assert c.shape == want.shape
        mag = torch_conv1d([np.abs(x) for x in xs], params, groups, torch.float64)
        bound = (math.prod(shapes[1][1:]) + len(xs) - 1) * U * mag + 2.0**-126
        assert np.all(np.abs(c.astype(np.float64) - want) <= bound)

    @pytest.mark.parametrize(
        ("shapes", "params", "match"),
        [
            ([(1, 2, 5, 5), (2, 2, 3)], {}, r"conv1d needs an NCL input of 3 dimensions"),
            ([(1, 2, 5), (2, 2, 1, 3)], {}, r"conv1d needs a weight of shape \(K, C/groups, S\)"),
            ([(1, 2, 5), (2, 2, 3)], {"stride": 1.5}, r"stride=1\.5 must be an integer"),
            ([(1, 2, 5), (2, 2, 3)], {"dilation": 0}, r"dilation=0 must be an integer >= 1"),
            ([(1, 2, 2), (2, 2, 3)], {}, r"does not fit"),
            ([(1, 2, 5), (4, 2, 3), (3,)], {}, r"conv1d's bias needs 4 elements"),
        ],
    )
    def test_raises_naming_the_1d_shapes_and_parameters(self, shapes, params, match):
        op = ops.get("conv1d_bias" if len(shapes) == 3 else "conv1d")
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")

    def test_cost_counts_two_flops_per_weight_tap(self):
        flops, moved = ops.get("conv1d").op_cost([(2, 8, 10), (4, 8, 3)], (2, 4, 8))
        assert flops == 2 * 2 * 4 * 8 * 8 * 3
        assert moved == 4 * (2 * 8 * 10 + 4 * 8 * 3 + 2 * 4 * 8)


# ------------------------------------------------------------------------------ conv_transpose2d, 3d
@st.composite
def conv_t_cases(draw, dims=2):
    """(input shapes, params, groups) of a valid ``dims``-d transposed convolution, bias or not
    (3-d extents kept small: the generated C runs on the CPU)."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cg, kg, n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    largest_tap, largest = (4, 6) if dims == 2 else (3, 4)
    params, sizes, taps = {"groups": groups}, [], []
    for a in AXES[dims]:
        t, stride, d = (draw(st.integers(1, b)) for b in (largest_tap, 3, 2))
        size = draw(st.integers(1, largest))
        out_pad = draw(st.integers(0, max(stride, d) - 1))
        # padding that leaves at least one output element along the axis
        full = (size - 1) * stride + d * (t - 1) + out_pad + 1
        params |= {f"stride_{a}": stride, f"dilation_{a}": d, f"out_pad_{a}": out_pad}
        params[f"pad_{a}"] = draw(st.integers(0, (full - 1) // 2))
        sizes.append(size)
        taps.append(t)
    shapes = [(n, groups * cg, *sizes), (groups * cg, kg, *taps)]
    if draw(st.booleans()):
        shapes.append((groups * kg,))
    return shapes, params, groups


def torch_conv_t(xs, params, dtype):
    """PyTorch's F.conv_transpose2d or 3d of ``xs`` in ``dtype``."""
    t = [torch.from_numpy(np.asarray(x)).to(dtype) for x in xs]
    axes = AXES[t[0].ndim - 2]
    conv = F.conv_transpose2d if len(axes) == 2 else F.conv_transpose3d
    return (
        conv(
            t[0],
            t[1],
            t[2] if len(t) > 2 else None,
            stride=tuple(params[f"stride_{a}"] for a in axes),
            padding=tuple(params[f"pad_{a}"] for a in axes),
            output_padding=tuple(params[f"out_pad_{a}"] for a in axes),
            groups=params["groups"],
            dilation=tuple(params[f"dilation_{a}"] for a in axes),
        )
        .numpy()
        .astype(np.float64)
    )


def conv_t_bound(xs, params):
    """``(n + 1) u sum |x_i w_i|`` per output element, n the taps of one output element at
    most (C/groups R S; C/groups T R S in 3-d)."""
    mag = torch_conv_t([np.abs(x) for x in xs], params, torch.float64)
    taps = math.prod(xs[1].shape[:1]) // params["groups"] * math.prod(xs[1].shape[2:])
    return (taps + len(xs) - 1) * U * mag + 2.0**-126


def conv_t_name(dims, shapes):
    return f"conv_transpose{dims}d_bias" if len(shapes) == 3 else f"conv_transpose{dims}d"


class TestConvTranspose:
    """conv_transpose2d's and conv_transpose3d's properties (drawn for both) and rules."""

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def test_reference_is_one_rounding_from_exact_and_near_torch(self, dims, data, seed):
        shapes, params, _ = data.draw(conv_t_cases(dims))
        xs = randn(seed, *shapes)
        op = ops.get(conv_t_name(dims, shapes))
        got = op.reference(xs, **{**op.defaults, **params}).astype(np.float64)
        exact = torch_conv_t(xs, params, torch.float64)
        assert (
            got.shape == exact.shape == ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")
        )
        assert np.all(np.abs(got - exact) <= U * np.abs(exact) + 2.0**-140)
        assert np.all(
            np.abs(got - torch_conv_t(xs, params, torch.float32)) <= conv_t_bound(xs, params)
        )

    @needs_cxx
    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 4, 32]))
    def test_generated_c_equals_reference_within_the_summation_bound(
        self, dims, data, seed, block, so_dir
    ):
        shapes, params, _ = data.draw(conv_t_cases(dims))
        xs = randn(seed, *shapes)
        g, node = graph_of(conv_t_name(dims, shapes), shapes, params)
        want = evaluate(g, {f"in{k}": x for k, x in enumerate(xs)})["out"]
        (c,) = run_c(g, node, xs, so_dir, block)
        assert c.shape == want.shape
        assert np.all(np.abs(c.astype(np.float64) - want) <= conv_t_bound(xs, params))

    @pytest.mark.parametrize(
        ("shapes", "params", "match"),
        [
            ([(1, 4, 3, 3), (2, 2, 3, 3)], {}, r"weight \(2, 2, 3, 3\) needs C = 4 rows"),
            ([(1, 4, 3, 3), (4, 2, 3, 3)], {"groups": 3}, r"must split into groups=3"),
            ([(1, 2, 3, 3), (2, 2, 3, 3)], {"out_pad_h": 1}, r"output padding 1x0 must be smaller"),
            ([(1, 2, 1, 1), (2, 2, 1, 1)], {"pad_h": 1}, r"the output would be empty"),
            ([(1, 2, 3, 3), (2, 2, 3, 3), (3,)], {}, r"bias needs 2 elements"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3)], {}, r"conv_transpose2d needs an NCHW input of 4"),
            ([(1, 2, 3, 3), (2, 2, 3, 3, 3)], {}, r"weight of shape \(C, K/groups, R, S\)"),
        ],
    )
    def test_raises_naming_the_rule(self, shapes, params, match):
        op = ops.get(conv_t_name(2, shapes))
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")

    @pytest.mark.parametrize(
        ("shapes", "params", "match"),
        [
            ([(1, 2, 3, 3), (2, 2, 3, 3)], {}, r"conv_transpose3d needs an NCDHW input of 5"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3)], {}, r"weight of shape \(C, K/groups, T, R, S\)"),
            ([(1, 4, 3, 3, 3), (2, 2, 3, 3, 3)], {}, r"weight \(2, 2, 3, 3, 3\) needs C = 4"),
            ([(1, 4, 3, 3, 3), (4, 2, 3, 3, 3)], {"groups": 3}, r"must split into groups=3"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3, 3)], {"stride_d": 0}, r"stride_d=0 must be an"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3, 3)], {"pad_d": -1}, r"pad_d=-1 must be an integer"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3, 3)], {"dilation_w": 1.5}, r"dilation_w=1\.5 must"),
            (
                [(1, 2, 3, 3, 3), (2, 2, 3, 3, 3)],
                {"stride_d": 2, "out_pad_d": 2},
                r"output padding 2x0x0 must be smaller than the stride or the dilation "
                r"\(2x1x1, 1x1x1\)",
            ),
            ([(1, 2, 1, 3, 3), (2, 2, 1, 3, 3)], {"pad_d": 1}, r"padding 1x0x0 crops the whole"),
            ([(1, 2, 3, 3, 3), (2, 2, 3, 3, 3), (3,)], {}, r"conv_transpose3d's bias needs 2"),
        ],
    )
    def test_3d_raises_naming_the_rule(self, shapes, params, match):
        op = ops.get(conv_t_name(3, shapes))
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "c")

    @SETTINGS
    @given(case=conv_t_cases(2), seed=st.integers(0, 2**32 - 1))
    def test_3d_over_a_depth_of_one_is_2d_bit_for_bit(self, case, seed):
        # a depth of one with one tap adds no term: the same float64 sums in the same order
        shapes, params, _ = case
        xs = randn(seed, *shapes)
        two, three = ops.get(conv_t_name(2, shapes)), ops.get(conv_t_name(3, shapes))
        deep = [x.reshape((*x.shape[:2], 1, *x.shape[2:])) if x.ndim == 4 else x for x in xs]
        want = two.reference(xs, **{**two.defaults, **params})
        got = three.reference(deep, **{**three.defaults, **params})
        np.testing.assert_array_equal(got[:, :, 0], want)

    @needs_cxx
    @SETTINGS
    @given(case=conv_t_cases(), seed=st.integers(0, 2**32 - 1))
    def test_1d_is_the_2d_one_over_a_height_of_one_in_reference_and_c(self, case, seed, so_dir):
        shapes, params, _ = case
        shapes = [(s[0], s[1], s[3]) if len(s) == 4 else s for s in shapes]  # drop the height
        p1 = {"stride": params["stride_w"], "pad": params["pad_w"], "groups": params["groups"]}
        p1 |= {"dilation": params["dilation_w"], "out_pad": params["out_pad_w"]}
        xs = randn(seed, *shapes)
        name = "conv_transpose1d_bias" if len(shapes) == 3 else "conv_transpose1d"
        g, node = graph_of(name, shapes, p1)
        want = evaluate(g, {f"in{k}": x for k, x in enumerate(xs)})["out"]

        def torch_1d(arrays):
            t = [torch.from_numpy(x).double() for x in arrays]
            return F.conv_transpose1d(
                t[0], t[1], t[2] if len(t) > 2 else None, stride=p1["stride"], padding=p1["pad"],
                output_padding=p1["out_pad"], groups=p1["groups"], dilation=p1["dilation"],
            ).numpy()  # fmt: skip

        exact = torch_1d(xs)
        assert want.shape == exact.shape
        assert np.all(np.abs(want - exact) <= U * np.abs(exact) + 2.0**-140)
        (c,) = run_c(g, node, xs, so_dir)
        # the summation bound of conv_t_bound: taps C/groups S per output element
        taps = shapes[1][0] // p1["groups"] * shapes[1][2]
        bound = (taps + len(xs) - 1) * U * torch_1d([np.abs(x) for x in xs]) + 2.0**-126
        assert np.all(np.abs(c - want) <= bound)

    def test_cost_counts_two_flops_per_input_element_and_tap(self):
        flops, _ = ops.get("conv_transpose2d").op_cost([(2, 4, 5, 5), (4, 3, 2, 2)], (2, 3, 10, 10))
        assert flops == 2 * (2 * 4 * 5 * 5) * (3 * 2 * 2)
        # 3-d, a bias: one add per output element more
        flops, moved = ops.get("conv_transpose3d_bias").op_cost(
            [(1, 4, 2, 3, 3), (4, 1, 2, 2, 2), (2,)], (1, 2, 4, 6, 6)
        )
        assert flops == 2 * (4 * 2 * 3 * 3) * (1 * 2 * 2 * 2) + 2 * 4 * 6 * 6
        assert moved == 4 * (4 * 18 + 4 * 8 + 2 + 2 * 4 * 36)


# ------------------------------------------------------------------------------ epilogues
def conv_block(depthwise: bool, bn: bool = False, dims: int = 2, transposed: bool = False):
    """x -> conv (2-d or 3-d; transposed or not: a 3x3(x3) window padded by 1, stride 1, keeps
    the shape either way) -> [batch norm (per-channel vectors, broadcast) -> hardtanh ->]
    relu -> add(residual) -> out, every step its own fusible kernel."""
    b = GraphBuilder()
    c = 4
    full = (2, c, 6, 6) if dims == 2 else (2, c, 3, 4, 5)
    nbytes = 4 * math.prod(full)
    x = b.alloc_external_buffer("x", nbytes, shape=full)
    wshape = (c, 1 if depthwise else c, *(3,) * dims)
    w = b.alloc_external_buffer("w", 4 * math.prod(wshape), shape=wshape)
    res = b.alloc_external_buffer("res", nbytes, shape=full)
    names = ("mean", "var", "g", "b") if bn else ()
    vecs = [b.alloc_external_buffer(v, 4 * c, shape=(c,)) for v in names]
    pads = {p: 1 for a in AXES[dims] for p in PADS[a]}
    chain = [(f"conv{dims}d", pads, [x, w])]
    if transposed:  # (its weight is (C, K/groups, ...): the same shape here)
        pads = {f"pad_{a}": 1 for a in AXES[dims]} | {"groups": c if depthwise else 1}
        chain = [(f"conv_transpose{dims}d", pads, [x, w])]
    if bn:
        chain += [("batch_norm", {}, vecs), ("hardtanh", {"min_val": 0.0, "max_val": 6.0}, [])]
    chain += [("relu", {}, []), ("add", {}, [res])]
    cur = None
    for k, (op, params, extra) in enumerate(chain):
        out = b.alloc_buffer("out" if k == len(chain) - 1 else f"t{k}", nbytes, shape=full)
        ins = extra if cur is None else [cur, *extra]
        b.add_kernel(op, 1, 64).op(op).params(**params).inputs(ins).outputs([out]).fusible(
            True
        ).finish()
        cur = out
    g = b.build()
    rng = np.random.default_rng(7)
    inputs = {"x": rng.standard_normal(full), "w": rng.standard_normal(wshape)}
    inputs["res"] = rng.standard_normal(full)
    if bn:
        inputs |= {"mean": rng.standard_normal(c), "var": rng.uniform(0.5, 2, c)}
        inputs |= {"g": rng.standard_normal(c), "b": rng.standard_normal(c)}
    return g, {k: v.astype(F32) for k, v in inputs.items()}, [op for op, _, _ in chain]


class TestEpilogues:
    @pytest.mark.parametrize("transposed", [False, True])
    @pytest.mark.parametrize("dims", [2, 3])
    @pytest.mark.parametrize("bn", [False, True])
    @pytest.mark.parametrize("depthwise", [False, True])
    def test_conv_epilogue_fuses_into_one_kernel_equal_to_unfused(
        self, depthwise, bn, dims, transposed
    ):
        g, inputs, names = conv_block(depthwise, bn, dims, transposed)
        want = evaluate(g, inputs)["out"]
        for streams in (1, 2):
            fused = ExecutionPlan.build(g, max_streams=streams, fusion=True)
            (k,) = fused.graph.kernels()
            assert [s.op for s in k.fused.steps] == names
            got = SequentialExecutor(fused).run(inputs).outputs["out"]
            np.testing.assert_array_equal(got, want)

    @needs_cxx
    @pytest.mark.parametrize("transposed", [False, True])
    @pytest.mark.parametrize("dims", [2, 3])
    @pytest.mark.parametrize("bn", [False, True])
    @pytest.mark.parametrize("depthwise", [False, True])
    def test_fused_c_equals_unfused_c_bit_for_bit(self, depthwise, bn, dims, transposed, so_dir):
        g, inputs, _ = conv_block(depthwise, bn, dims, transposed)
        vals = {g.buffer_by_name(n).id: v for n, v in inputs.items()}
        for nid in g.topological_order():
            node = g.node(nid)
            if node.is_kernel:
                outs = run_c(g, node, [vals[b] for b in node.inputs], so_dir)
                vals.update(zip(node.outputs, outs, strict=True))
        unfused = vals[g.buffer_by_name("out").id]
        fg = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
        (k,) = fg.kernels()
        (fused,) = run_c(fg, k, [inputs[fg.buffer(b).name] for b in k.inputs], so_dir)
        np.testing.assert_array_equal(fused, unfused)


# ------------------------------------------------------------------------------ pooling
@st.composite
def pool_cases(draw, kind, dims=2):
    """(input shape, params) of a valid ``dims``-d max or average pooling (3-d extents kept
    small: the generated C runs on the CPU)."""
    largest = 8 if dims == 2 else 5
    params, sizes = {"ceil_mode": int(draw(st.booleans()))}, []
    for a in AXES[dims]:
        r = draw(st.integers(1, 3))
        d = draw(st.integers(1, 2)) if kind == "max" else 1
        p = draw(st.integers(0, r // 2))
        # (torch's avg_pool3d refuses an input smaller than the window, padding or not)
        least = r if (kind, dims) == ("avg", 3) else d * (r - 1) + 1 - 2 * p
        sizes.append(draw(st.integers(max(1, least), largest)))
        params |= {f"kernel_{a}": r, f"stride_{a}": draw(st.integers(1, 3)), f"pad_{a}": p}
        if kind == "max":
            params[f"dilation_{a}"] = d
    if kind == "avg":
        params["count_include_pad"] = int(draw(st.booleans()))
        params["divisor_override"] = draw(st.sampled_from([0, 0, 0, 2]))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *sizes)
    return shape, params


def torch_pool(kind, x, p, dtype=torch.float32):
    """PyTorch's 2-d or 3-d max or average pooling of ``x`` with op parameters ``p``."""
    t = torch.from_numpy(x).to(dtype)
    axes = AXES[x.ndim - 2]
    k, st_, pad = ([p[f"{name}_{a}"] for a in axes] for name in ("kernel", "stride", "pad"))
    if kind == "max":
        d = [p[f"dilation_{a}"] for a in axes]
        pool = F.max_pool2d if len(axes) == 2 else F.max_pool3d
        return pool(t, k, st_, pad, d, ceil_mode=bool(p["ceil_mode"])).numpy()
    return (F.avg_pool2d if len(axes) == 2 else F.avg_pool3d)(
        t,
        k,
        st_,
        pad,
        ceil_mode=bool(p["ceil_mode"]),
        count_include_pad=bool(p["count_include_pad"]),
        divisor_override=p["divisor_override"] or None,
    ).numpy()


def with_specials(seed, shape):
    """Normal values with some NaN and infinities (max pooling must propagate NaN)."""
    (x,) = randn(seed, shape)
    rng = np.random.default_rng(seed + 1)
    mask = rng.random(shape)
    x[mask < 0.05] = np.nan
    x[(mask >= 0.05) & (mask < 0.1)] = np.inf
    x[(mask >= 0.1) & (mask < 0.15)] = -np.inf
    return x


def adaptive_cases(dims):
    """(input shape, output size) of a ``dims``-d adaptive pooling."""
    largest = 9 if dims == 2 else 5
    spatial = st.tuples(*[st.integers(1, largest)] * dims)
    shape = st.tuples(st.integers(1, 2), st.integers(1, 3), spatial).map(lambda t: (*t[:2], *t[2]))
    return st.tuples(shape, st.tuples(*[st.integers(1, 4)] * dims))


def adaptive_params(out):
    return {f"out_{a}": o for a, o in zip(AXES[len(out)], out, strict=True)}


class TestPooling:
    def test_raises_on_padding_over_half_the_window(self):
        op = ops.get("max_pool2d")
        params = {**op.defaults, "kernel_h": 2, "kernel_w": 2, "pad_h": 2}
        with pytest.raises(InvalidArgument, match="more than half"):
            ops.infer_shape(op, [(1, 1, 8, 8)], params, "p")

    def test_raises_on_a_non_nchw_input(self):
        op = ops.get("avg_pool2d")
        with pytest.raises(InvalidArgument, match="NCHW input of 4 dimensions"):
            ops.infer_shape(op, [(8, 8)], op.defaults, "p")

    @pytest.mark.parametrize(
        ("name", "shape", "params", "match"),
        [
            ("max_pool3d", (1, 2, 5, 5), {}, r"max_pool3d needs an NCDHW input of 5 dimensions"),
            ("avg_pool3d", (1, 2, 5, 5, 5), {"kernel_d": 2, "pad_d": 2}, r"padding 2x0x0 is"),
            ("max_pool3d", (1, 2, 5, 5, 5), {"stride_d": 0}, r"stride_d=0 must be an integer"),
            ("max_pool3d", (1, 2, 5, 5, 5), {"dilation_d": 1.5}, r"dilation_d=1\.5 must be"),
            ("avg_pool3d", (1, 2, 2, 5, 5), {"kernel_d": 3}, r"a 3x1x1 window does not fit"),
            ("avg_pool3d", (1, 2, 2, 5, 5), {"kernel_d": 3, "pad_d": 1}, r"smaller than the 3x1x1"),
            ("avg_pool3d", (1, 2, 5, 5, 5), {"divisor_override": -1}, r"divisor_override=-1"),
            ("adaptive_avg_pool3d", (1, 2, 5, 5), {}, r"NCDHW input of 5 dimensions"),
            ("adaptive_max_pool3d", (1, 2, 5, 5, 5), {"out_d": 0}, r"out_d=0 must be an"),
        ],
    )
    def test_3d_raises_naming_the_rule(self, name, shape, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, [shape], {**op.defaults, **params}, "p")

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**31))
    def test_max_pool_reference_equals_torch_with_nan_and_inf(self, dims, data, seed):
        shape, params = data.draw(pool_cases("max", dims))
        x = with_specials(seed, shape)
        op = ops.get(f"max_pool{dims}d")
        got = op.reference([x], **{**op.defaults, **params})
        np.testing.assert_array_equal(got, torch_pool("max", x, params))

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**31))
    def test_avg_pool_reference_is_one_rounding_from_torch_float64(self, dims, data, seed):
        shape, params = data.draw(pool_cases("avg", dims))
        (x,) = randn(seed, shape)
        op = ops.get(f"avg_pool{dims}d")
        got = op.reference([x], **{**op.defaults, **params}).astype(np.float64)
        exact = torch_pool("avg", x, params, torch.float64)
        assert got.shape == exact.shape
        assert np.all(np.abs(got - exact) <= U * np.abs(exact) + 2.0**-140)

    @needs_cxx
    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(
        kind=st.sampled_from(["max", "avg"]),
        data=st.data(),
        seed=st.integers(0, 2**31),
        block=st.sampled_from([1, 4, 32]),
    )
    def test_generated_c_equals_reference(self, dims, kind, data, seed, block, so_dir):
        shape, params = data.draw(pool_cases(kind, dims))
        x = with_specials(seed, shape) if kind == "max" else randn(seed, shape)[0]
        g, node = graph_of(f"{kind}_pool{dims}d", [shape], params)
        want = evaluate(g, {"in0": x})["out"]
        (c,) = run_c(g, node, [x], so_dir, block)
        if kind == "max":
            np.testing.assert_array_equal(c, want)
        else:  # a float32 sum of the window (at most 3**dims terms), then one division
            window = math.prod(params[f"kernel_{a}"] for a in AXES[dims])
            mag = torch_pool("avg", np.abs(x), params, torch.float64)
            np.testing.assert_array_less(np.abs(c - want), (window + 2) * U * mag * 2 + 1e-30)

    @needs_cxx
    @SETTINGS
    @given(
        kind=st.sampled_from(["max", "avg"]),
        size=st.tuples(st.integers(1, 3), st.integers(1, 3)),
        step=st.integers(1, 5),
        pad=st.tuples(st.integers(0, 4), st.integers(0, 4)),
        seed=st.integers(0, 2**31),
    )
    def test_a_window_far_wider_than_the_input_reads_only_the_input(
        self, kind, size, step, pad, seed, so_dir
    ):
        # AlignModel's EfficientNet pooler: avg_pool2d with a 2560-wide window (its hidden
        # size) over a 2x2 map, in ceil mode. The reference once padded the input to the
        # window (a 2**20 window: 2**40 elements per plane) and the C looped over every tap;
        # both now visit the taps inside the input only, and agree with torch.
        shape = (1, 2, *size)
        x = with_specials(seed, shape) if kind == "max" else randn(seed, shape)[0]
        for wide in (2**20, 4096):
            # padding near the window's half (the most torch allows) and stride 1 too: the
            # first taps inside the input come late, and there are many outputs
            params = {"ceil_mode": 1, "count_include_pad": 0, "divisor_override": 0}
            for a, p in zip("hw", pad, strict=True):
                params |= {f"kernel_{a}": wide, f"stride_{a}": wide if step == 5 else step}
                params |= {f"pad_{a}": wide // 2 - p, f"dilation_{a}": 1}
            if kind == "avg":
                del params["dilation_h"], params["dilation_w"]
            else:
                del params["count_include_pad"], params["divisor_override"]
            op = ops.get(f"{kind}_pool2d")
            try:
                want = torch_pool(
                    kind, x, params, torch.float64 if kind == "avg" else torch.float32
                )
            except RuntimeError:  # no output (a window starting in the padding only)
                with pytest.raises(InvalidArgument):
                    ops.infer_shape(op, [shape], {**op.defaults, **params}, "p")
                continue
            got = op.reference([x], **{**op.defaults, **params})
            if kind == "max":
                np.testing.assert_array_equal(got, want)
            else:
                assert np.all(np.abs(got - want) <= U * np.abs(want) + 2.0**-140)
            if wide == 4096 and want.size <= 64:  # the C, on outputs of a window's width
                g, node = graph_of(f"{kind}_pool2d", [shape], params)
                (c,) = run_c(g, node, [x], so_dir)
                if kind == "max":
                    np.testing.assert_array_equal(c, got)
                else:  # each output sums at most the input's 9 values in float32
                    mag = torch_pool("avg", np.abs(x), params, torch.float64)
                    np.testing.assert_array_less(np.abs(c - got), 11 * U * mag * 2 + 1e-30)

    @needs_cxx
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**31))
    def test_a_window_longer_than_the_input_agrees_with_torch(self, data, seed, so_dir):
        # EfficientNet's pooler: a window wider than the (padded) input, in ceil mode one
        # output; out of it none, and torch refuses. Shape, refusal and values agree.
        kind = data.draw(st.sampled_from(["max", "avg"]))
        dims = 3 if kind == "max" and data.draw(st.booleans()) else 2  # (avg_pool3d refuses)
        params = {"ceil_mode": int(data.draw(st.booleans()))}
        sizes = []
        for a in AXES[dims]:
            r = data.draw(st.integers(1, 7))
            params |= {f"kernel_{a}": r, f"stride_{a}": data.draw(st.integers(1, 8))}
            params[f"pad_{a}"] = data.draw(st.integers(0, r // 2))
            if kind == "max":
                params[f"dilation_{a}"] = data.draw(st.integers(1, 2))
            sizes.append(data.draw(st.integers(1, 4)))
        if kind == "avg":
            params |= {"count_include_pad": int(data.draw(st.booleans())), "divisor_override": 0}
        shape = (1, 2, *sizes)
        x = with_specials(seed, shape) if kind == "max" else randn(seed, shape)[0]
        op = ops.get(f"{kind}_pool{dims}d")
        try:
            want = torch_pool(kind, x, params, torch.float64 if kind == "avg" else torch.float32)
        except RuntimeError:
            with pytest.raises(InvalidArgument, match="output would be empty"):
                ops.infer_shape(op, [shape], {**op.defaults, **params}, "p")
            return
        got = op.reference([x], **{**op.defaults, **params})
        assert got.shape == want.shape
        g, node = graph_of(f"{kind}_pool{dims}d", [shape], params)
        (c,) = run_c(g, node, [x], so_dir)
        if kind == "max":
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(c, got)
        else:
            assert np.all(np.abs(got - want) <= U * np.abs(want) + 2.0**-140)
            window = math.prod(params[f"kernel_{a}"] for a in AXES[dims])
            mag = torch_pool("avg", np.abs(x), params, torch.float64)
            np.testing.assert_array_less(np.abs(c - got), (window + 2) * U * mag * 2 + 1e-30)

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**31))
    def test_adaptive_avg_pool_reference_and_c(self, dims, data, seed, tmp_path_factory):
        shape, out = data.draw(adaptive_cases(dims))
        (x,) = randn(seed, shape)
        params = adaptive_params(out)
        op = ops.get(f"adaptive_avg_pool{dims}d")
        got = op.reference([x], **params).astype(np.float64)
        pool = F.adaptive_avg_pool2d if dims == 2 else F.adaptive_avg_pool3d
        exact = pool(t64(x), out).numpy()
        assert np.all(np.abs(got - exact) <= U * np.abs(exact) + 2.0**-140)
        if CXX is not None:
            g, node = graph_of(f"adaptive_avg_pool{dims}d", [shape], params)
            (c,) = run_c(g, node, [x], tmp_path_factory.mktemp("adaptive"))
            mag = pool(t64(np.abs(x)), out).numpy()
            window = math.prod(math.ceil(s / o + 1) for s, o in zip(shape[2:], out, strict=True))
            assert np.all(np.abs(c - got) <= (window + 2) * U * mag + 1e-30)


# ------------------------------------------------------------------------------ bilinear
def bilinear_ratio(size: int, out: int, align: bool, factor: float | None) -> float:
    """The float32 ratio torch's kernel uses (what the importer passes)."""
    if align:
        return float(np.float32(size - 1) / np.float32(out - 1)) if out > 1 else 0.0
    if factor is not None:
        return float(np.float32(1.0 / factor))
    return float(np.float32(size) / np.float32(out))


def linear_name(dims):
    return "upsample_bilinear2d" if dims == 2 else "upsample_trilinear3d"


class TestBilinear:
    """upsample_bilinear2d and upsample_trilinear3d (drawn for both)."""

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), align=st.booleans(), seed=st.integers(0, 2**31))
    def test_reference_near_torch_and_c_equal_to_it(self, dims, data, align, seed, so_dir):
        largest, out_largest = (7, 12) if dims == 2 else (4, 7)  # (3-d: C on the CPU)
        sizes = [data.draw(st.integers(1, largest), label="size") for _ in range(dims)]
        shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *sizes)
        (x,) = randn(seed, shape)
        mode = "bilinear" if dims == 2 else "trilinear"
        if data.draw(st.booleans(), label="by factor"):
            shrink = [0.5] if min(shape[2:]) >= 2 else []  # (a size of 1 halves to nothing)
            factor = data.draw(st.sampled_from([*shrink, 1.0, 1.5, 2.0, 2.5, 3.0]), label="factor")
            want = F.interpolate(
                torch.from_numpy(x), scale_factor=factor, mode=mode, align_corners=align
            ).numpy()
            out = want.shape[2:]
        else:
            factor = None
            out = tuple(data.draw(st.integers(1, out_largest), label="out") for _ in range(dims))
            want = F.interpolate(
                torch.from_numpy(x), size=out, mode=mode, align_corners=align
            ).numpy()
        params = {"align_corners": float(align)}
        for a, size, o in zip(AXES[dims], shape[2:], out, strict=True):
            params |= {f"out_{a}": o, f"ratio_{a}": bilinear_ratio(size, o, align, factor)}
        got = ops.get(linear_name(dims)).reference([x], **params)
        assert got.shape == want.shape
        # torch's vectorised kernel rounds its sums in another order: a few float32 roundings
        # per interpolated axis, of values no larger than the input's
        assert np.all(np.abs(got - want) <= 4 * dims * U * np.abs(x).max() + 1e-30)
        if CXX is not None:  # the same float32 operations in the same order: bit for bit
            block = data.draw(st.sampled_from([1, 4, 32]), label="block")
            g, node = graph_of(linear_name(dims), [shape], params)
            (c,) = run_c(g, node, [x], so_dir, block)
            np.testing.assert_array_equal(c, got)

    def test_raises_on_a_negative_ratio_or_a_fractional_size(self):
        op = ops.get("upsample_bilinear2d")
        base = {"out_h": 4.0, "out_w": 4.0, "ratio_h": 0.5, "ratio_w": 0.5, "align_corners": 0.0}
        with pytest.raises(InvalidArgument, match=r"ratio_w=-1\.0 must be in \[0, 2\*\*24\)"):
            ops.infer_shape(op, [(1, 1, 2, 2)], {**base, "ratio_w": -1.0}, "u")
        with pytest.raises(InvalidArgument, match=r"out_h=2\.5 must be an integer >= 1"):
            ops.infer_shape(op, [(1, 1, 2, 2)], {**base, "out_h": 2.5}, "u")
        with pytest.raises(InvalidArgument, match=r"align_corners=2\.0 must be 0 or 1"):
            ops.infer_shape(op, [(1, 1, 2, 2)], {**base, "align_corners": 2.0}, "u")

    @pytest.mark.parametrize(
        ("shape", "params", "match"),
        [
            ((1, 1, 2, 2), {}, r"upsample_trilinear3d needs an NCDHW input of 5 dimensions"),
            ((1, 1, 2, 2, 2), {"ratio_d": -0.5}, r"ratio_d=-0\.5 must be in \[0, 2\*\*24\)"),
            ((1, 1, 2, 2, 2), {"out_d": 0}, r"out_d=0 must be an integer >= 1"),
            ((1, 1, 2, 2, 2), {"align_corners": 0.5}, r"align_corners=0\.5 must be 0 or 1"),
        ],
    )
    def test_3d_raises_naming_the_rule(self, shape, params, match):
        op = ops.get("upsample_trilinear3d")
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, [shape], {**op.defaults, **params}, "u")

    @SETTINGS
    @given(
        shape=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 5), st.integers(1, 5)),
        out=st.tuples(st.integers(1, 8), st.integers(1, 8)),
        align=st.booleans(),
        seed=st.integers(0, 2**31),
    )
    def test_trilinear_over_a_depth_kept_is_bilinear_bit_for_bit(self, shape, out, align, seed):
        # a depth copied (out_d == D) weighs its one source by 1 and its copy by 0: the same
        # float32 values as the 2-d interpolation, for any ratio_d
        (x,) = randn(seed, (shape[0], shape[1], 2, *shape[2:]))
        p2 = {"out_h": out[0], "out_w": out[1], "align_corners": float(align)}
        p2 |= {f"ratio_{a}": bilinear_ratio(s, o, align, None) for a, s, o in
               zip("hw", shape[2:], out, strict=True)}  # fmt: skip
        two = ops.get("upsample_bilinear2d").reference([x[:, :, 1]], **p2)
        three = ops.get("upsample_trilinear3d").reference([x], **p2, out_d=2, ratio_d=0.75)
        np.testing.assert_array_equal(three[:, :, 1], two)


@pytest.mark.parametrize("dims", [2, 3])
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**31))
def test_adaptive_max_pool_reference_and_c_equal_torch_with_nan_and_inf(
    dims, data, seed, tmp_path_factory
):
    shape, out = data.draw(adaptive_cases(dims))
    x = with_specials(seed, shape)
    params = adaptive_params(out)
    got = ops.get(f"adaptive_max_pool{dims}d").reference([x], **params)
    pool = F.adaptive_max_pool2d if dims == 2 else F.adaptive_max_pool3d
    eager = pool(torch.from_numpy(x), out).numpy()
    np.testing.assert_array_equal(got, eager)  # (NaN == NaN here)
    if CXX is not None:
        g, node = graph_of(f"adaptive_max_pool{dims}d", [shape], params)
        (c,) = run_c(g, node, [x], tmp_path_factory.mktemp("adaptive_max"))
        np.testing.assert_array_equal(c, got)


# ------------------------------------------------------------------------------ pad and cat
class TestPadAndCat:
    @needs_cxx
    @pytest.mark.parametrize("dims", [2, 3])
    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        data=st.data(), value=st.sampled_from([0.0, -0.0, 1.5, -3e38]), seed=st.integers(0, 2**31)
    )
    def test_constant_pad_equals_torch_and_c(self, dims, data, value, seed, so_dir):
        # the last ``dims`` axes padded (negative amounts crop), 0 to 2 axes before them
        lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
        shape = (*lead, *data.draw(st.tuples(*[st.integers(3, 5)] * dims)))
        pads = data.draw(st.tuples(*[st.integers(-1, 2)] * (2 * dims)))  # F.pad's order
        x = with_specials(seed, shape)
        names = ("pad_left", "pad_right", "pad_top", "pad_bottom", "pad_front", "pad_back")
        params = {**dict(zip(names, pads, strict=False)), "value": value}
        name = "constant_pad" if dims == 2 else "constant_pad3d"
        got = ops.get(name).reference([x], **params)
        want = F.pad(torch.from_numpy(x), pads, value=value).numpy()
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
        g, node = graph_of(name, [shape], params)
        (c,) = run_c(g, node, [x], so_dir)
        np.testing.assert_array_equal(c, want)
        assert np.array_equal(np.signbit(c), np.signbit(want))

    def test_pad_value_is_a_kernel_argument_not_source(self):
        sources = []
        for value in (1.5, -2.0):
            g, node = graph_of("constant_pad", [(1, 1, 3, 3)], {"pad_left": 1, "value": value})
            ks = kernel_source(g, node)
            assert ("float", "value", value) in ks.scalar_args
            sources.append(ks.source.replace(ks.function_name, "k"))
        assert sources[0] == sources[1]

    def test_raises_when_cat_inputs_differ_off_the_axis(self):
        with pytest.raises(InvalidArgument, match="other than the concatenation axis 1"):
            ops.infer_shape(cat_op(2), [(2, 3), (3, 3)], {"axis": 1}, "cat")

    @needs_cxx
    @SETTINGS
    @given(
        k=st.integers(1, 4),
        base=st.lists(st.integers(1, 3), min_size=1, max_size=3),
        data=st.data(),
        seed=st.integers(0, 2**31),
    )
    def test_cat_equals_torch_and_c(self, k, base, data, seed, so_dir):
        axis = data.draw(st.integers(-len(base), len(base) - 1))
        sizes = data.draw(st.lists(st.integers(1, 3), min_size=k, max_size=k))
        shapes = []
        for d in sizes:
            s = list(base)
            s[axis] = d
            shapes.append(tuple(s))
        xs = randn(seed, *shapes)
        op = cat_op(k)
        want = torch.cat([torch.from_numpy(x) for x in xs], dim=axis).numpy()
        np.testing.assert_array_equal(op.reference(xs, axis=axis), want)
        g, node = graph_of(op.name, shapes, {"axis": axis})
        (c,) = run_c(g, node, xs, so_dir)
        np.testing.assert_array_equal(c, want)


# ------------------------------------------------------------------------------ upsample
class TestUpsampleNearest:
    """upsample_nearest2d and upsample_nearest3d (drawn for both)."""

    @pytest.mark.parametrize("dims", [2, 3])
    @SETTINGS
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1), block=st.sampled_from([1, 4, 32]))
    def test_reference_and_generated_c_equal_torch_bit_for_bit(
        self, dims, data, seed, block, so_dir
    ):
        shape = data.draw(st.tuples(*[st.integers(1, 4 if dims == 2 else 3)] * (dims + 2)))
        factors = data.draw(st.tuples(*[st.integers(1, 3)] * dims))
        (x,) = randn(seed, shape)
        x.reshape(-1)[0] = np.nan  # moved, never computed: NaN and all
        params = {f"factor_{a}": f for a, f in zip(AXES[dims], factors, strict=True)}
        want = F.interpolate(torch.from_numpy(x), scale_factor=factors, mode="nearest").numpy()
        op = ops.get(f"upsample_nearest{dims}d")
        np.testing.assert_array_equal(op.reference([x], **params), want)
        g, node = graph_of(f"upsample_nearest{dims}d", [shape], params)
        (c,) = run_c(g, node, [x], so_dir, block)
        np.testing.assert_array_equal(c, want)

    @pytest.mark.parametrize(
        ("name", "shape", "params", "match"),
        [
            ("upsample_nearest2d", (1, 2, 3, 3), {"factor_h": 1.5}, r"factor_h=1\.5 must be an"),
            ("upsample_nearest3d", (1, 2, 3, 3, 3), {"factor_d": 0}, r"factor_d=0 must be an"),
            ("upsample_nearest3d", (1, 2, 3, 3), {}, r"NCDHW input of 5 dimensions"),
        ],
    )
    def test_raises_naming_the_rule(self, name, shape, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, [shape], {**op.defaults, **params}, "u")


# ------------------------------------------------------------------------------ NVRTC
NVRTC_CASES = {
    "conv2d": ([(1, 4, 8, 8), (6, 2, 3, 3)], {"stride_h": 2, "pad_top": 1, "pad_left": 1}),
    "conv2d_bias": ([(1, 4, 8, 8), (4, 1, 3, 3), (4,)], {"dilation_w": 2}),
    "conv3d": (
        [(1, 4, 5, 6, 6), (6, 2, 3, 3, 3)],
        {"stride_d": 2, "pad_front": 1, "pad_back": 0, "pad_top": 1, "dilation_w": 2},
    ),
    "conv3d_bias": ([(2, 4, 3, 5, 5), (4, 1, 2, 3, 3), (4,)], {"dilation_d": 2, "stride_w": 2}),
    "conv1d": ([(1, 4, 16), (6, 2, 3)], {"stride": 2, "pad_left": 1}),
    "conv1d_bias": ([(2, 4, 9), (4, 1, 3), (4,)], {"dilation": 2, "pad_right": 2}),
    "conv_transpose1d": ([(2, 4, 7), (4, 3, 3)], {"stride": 2, "pad": 1, "out_pad": 1}),
    "conv_transpose1d_bias": ([(1, 4, 7), (4, 1, 3), (2,)], {"groups": 2, "dilation": 2}),
    "conv_transpose2d": ([(1, 4, 5, 5), (4, 3, 4, 4)], {"stride_h": 2, "stride_w": 2, "pad_h": 1}),
    "conv_transpose2d_bias": ([(1, 4, 5, 5), (4, 1, 3, 3), (2,)], {"groups": 2, "out_pad_w": 0}),
    "conv_transpose3d": (
        [(1, 4, 3, 4, 4), (4, 3, 2, 3, 3)],
        {"stride_d": 2, "stride_h": 2, "pad_w": 1, "out_pad_d": 1, "dilation_w": 2},
    ),
    "conv_transpose3d_bias": (
        [(2, 4, 2, 3, 3), (4, 1, 3, 2, 2), (2,)],
        {"groups": 2, "dilation_d": 2, "pad_h": 1, "stride_w": 3, "out_pad_w": 2},
    ),
    "max_pool2d": ([(1, 2, 9, 9)], {"kernel_h": 3, "kernel_w": 3, "stride_h": 2, "pad_h": 1}),
    "avg_pool2d": ([(1, 2, 9, 9)], {"kernel_h": 3, "kernel_w": 2, "count_include_pad": 0}),
    "adaptive_avg_pool2d": ([(1, 2, 9, 7)], {"out_h": 2, "out_w": 3}),
    "adaptive_max_pool2d": ([(1, 2, 9, 7)], {"out_h": 4, "out_w": 3}),
    "max_pool3d": (
        [(1, 2, 5, 7, 7)],
        {"kernel_d": 2, "kernel_h": 3, "kernel_w": 3, "stride_d": 2, "pad_h": 1, "dilation_w": 2},
    ),
    "avg_pool3d": (
        [(1, 2, 5, 6, 6)],
        {"kernel_d": 3, "kernel_h": 2, "kernel_w": 2, "pad_d": 1, "count_include_pad": 0},
    ),
    "adaptive_avg_pool3d": ([(1, 2, 5, 9, 7)], {"out_d": 2, "out_h": 2, "out_w": 3}),
    "adaptive_max_pool3d": ([(1, 2, 5, 9, 7)], {"out_d": 3, "out_h": 4, "out_w": 1}),
    "constant_pad": ([(1, 2, 5, 5)], {"pad_left": 1, "pad_bottom": -1, "value": 2.0}),
    "constant_pad3d": (
        [(2, 3, 4, 5)],
        {"pad_left": 1, "pad_bottom": 2, "pad_front": 2, "pad_back": -1, "value": 2.0},
    ),
    "upsample_nearest2d": ([(1, 2, 3, 5)], {"factor_h": 2, "factor_w": 3}),
    "upsample_bilinear2d": (
        [(1, 2, 3, 5)],
        {"out_h": 7, "out_w": 10, "ratio_h": 3 / 7, "ratio_w": 0.5, "align_corners": 0},
    ),
    "upsample_nearest3d": ([(1, 2, 2, 3, 5)], {"factor_d": 3, "factor_h": 2, "factor_w": 1}),
    "upsample_trilinear3d": (
        [(1, 2, 2, 3, 5)],
        {
            "out_d": 4,
            "out_h": 2,
            "out_w": 10,
            "ratio_d": 1 / 3,
            "ratio_h": 1.5,
            "ratio_w": 0.5,
            "align_corners": 0,
        },
    ),
    "cat_3": ([(2, 1, 3), (2, 2, 3), (2, 4, 3)], {"axis": 1}),
}


class TestNvrtc:
    def test_every_lib_conv_op_has_a_case(self):
        from oxiwork.ops.lib_conv import CONV_OPS

        assert {op.name for op in CONV_OPS} <= set(NVRTC_CASES)

    @pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
    @pytest.mark.parametrize("name", sorted(NVRTC_CASES))
    def test_compiles(self, nvrtc_compile, name, arch):
        shapes, params = NVRTC_CASES[name]
        g, node = graph_of(name, shapes, params)
        ks = kernel_source(g, node)
        assert nvrtc_compile(ks.source, ks.function_name, arch)

    @pytest.mark.parametrize("name", ["upsample_bilinear2d", "upsample_trilinear3d"])
    def test_resizing_with_align_corners_compiles_fused_with_an_epilogue(self, nvrtc_compile, name):
        # (NVRTC_CASES resize without align_corners, alone)
        shapes, params = NVRTC_CASES[name]
        params = {**params, "align_corners": 1}
        out_shape = ops.infer_shape(ops.get(name), shapes, params, "u")
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4 * math.prod(shapes[0]), shape=shapes[0])
        y = b.alloc_buffer("y", 4 * math.prod(out_shape), shape=out_shape)
        out = b.alloc_buffer("out", 4 * math.prod(out_shape), shape=out_shape)
        b.add_kernel("up", 1, 64).op(name).params(**params).inputs([x]).outputs([y]).fusible(
            True
        ).finish()
        b.add_kernel("act", 1, 64).op("relu").inputs([y]).outputs([out]).fusible(True).finish()
        fg = ExecutionPlan.build(b.build(), max_streams=1, fusion=True).graph
        (k,) = fg.kernels()
        assert [s.op for s in k.fused.steps] == [name, "relu"]
        ks = kernel_source(fg, k)
        assert "{v}" not in ks.source and nvrtc_compile(ks.source, ks.function_name, "sm_90")

    @pytest.mark.parametrize("transposed", [False, True])
    @pytest.mark.parametrize("dims", [2, 3])
    @pytest.mark.parametrize("bn", [False, True])
    @pytest.mark.parametrize("depthwise", [False, True])
    def test_fused_conv_block_compiles(self, nvrtc_compile, depthwise, bn, dims, transposed):
        g, _, _ = conv_block(depthwise, bn, dims, transposed)
        fg = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
        (k,) = fg.kernels()
        ks = kernel_source(fg, k)
        assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
