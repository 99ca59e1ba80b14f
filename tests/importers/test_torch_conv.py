"""The importer's CNN rules over drawn parameters: every convolution and pooling maps to a
library op, and the imported graph computes eager's outputs with fusion on and off.

tests/ops/test_conv.py checks the ops themselves against PyTorch; this file checks that the
importer hands each ATen call's stride, padding, dilation, groups, window and ceil mode to
them unchanged (a wrong one changes the output's shape or values).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import from_exported_program, from_module
from oxiwork.reference import evaluate

CNN = ("convolution", "pool", "pad", "cat", "mean")


class Drawn(nn.Module):
    """pad? -> conv (drawn) -> relu -> pool (drawn) -> cat with itself -> mean over H, W."""

    def __init__(self, conv: dict, pad: tuple[int, ...] | None, pool: tuple[str, dict]) -> None:
        super().__init__()
        self.conv = nn.Conv2d(**conv)
        self.pad = pad
        kind, kw = pool
        self.pool = nn.MaxPool2d(**kw) if kind == "max" else nn.AvgPool2d(**kw)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pad is not None:
            x = nn.functional.pad(x, self.pad)
        y = self.pool(torch.relu(self.conv(x)))
        return torch.cat([y, -y], dim=1), y.mean((2, 3))


@st.composite
def blocks(draw):
    groups = draw(st.sampled_from([1, 2, "depthwise"]))
    c_in = 4 if groups == "depthwise" else groups * draw(st.integers(1, 2))
    groups = c_in if groups == "depthwise" else groups
    k = draw(st.integers(1, 3))
    conv = {
        "in_channels": c_in,
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": (k, draw(st.integers(1, 3))),
        "stride": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        "padding": (draw(st.integers(0, 1)), draw(st.integers(0, 1))),
        "dilation": (draw(st.integers(1, 2)), 1),
        "groups": groups,
        "bias": draw(st.booleans()),
    }
    pad = draw(st.one_of(st.none(), st.tuples(*[st.integers(0, 1)] * 4)))
    r = draw(st.integers(1, 2))
    kw = {"kernel_size": r, "stride": draw(st.integers(1, 2)), "ceil_mode": draw(st.booleans())}
    kind = draw(st.sampled_from(["max", "avg"]))
    if kind == "avg":
        kw["count_include_pad"] = draw(st.booleans())
    kw["padding"] = draw(st.integers(0, r // 2))
    return conv, pad, (kind, kw)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=blocks(), seed=st.integers(0, 2**31))
def test_drawn_cnn_blocks_import_as_library_ops_and_match_eager(block, seed):
    torch.manual_seed(seed)
    module = Drawn(*block).eval()
    x = torch.randn(1, module.conv.in_channels, 9, 8)
    with torch.no_grad():
        want = [t.numpy() for t in module(x)]
    model = from_module(module, (x,))
    verify(model.graph)
    assert not [o for o in model.opaque if any(w in o.target for w in CNN)], model.opaque
    # a zero pad read only by the convolution is folded into it: no kernel computes it
    assert "aten.constant_pad_nd.default" not in model.targets.values()
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    fused = ExecutionPlan.build(model.graph, max_streams=1, fusion=True).graph
    heads = [k.fused.steps[0].op for k in fused.kernels() if k.fused is not None]
    assert any(h.startswith("conv2d") for h in heads)  # the relu joined the convolution


@pytest.mark.parametrize(("value", "folded"), [(0.0, True), (0.5, False)])
def test_only_a_zero_pad_folds_into_the_convolution(value, folded):
    conv = nn.Conv2d(2, 3, 3).eval()

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return conv(nn.functional.pad(x, (1, 0, 2, 1), value=value))

    x = torch.randn(1, 2, 5, 4)
    model = from_module(M(), (x,))
    op_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert op_of["aten.convolution.default"] == "conv2d_bias" and not model.opaque
    assert ("aten.constant_pad_nd.default" not in op_of) == folded
    if not folded:
        assert op_of["aten.constant_pad_nd.default"] == "constant_pad"
    with torch.no_grad():
        want = M()(x).numpy()
    plan = ExecutionPlan.build(model.graph, fusion=True)
    (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_conv_batch_norm_activation_is_one_kernel_per_convolution():
    block = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU6(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),  # depthwise
        nn.BatchNorm2d(8),
        nn.ReLU(),
    )
    for mod in block:
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    block.eval()
    x = torch.randn(1, 3, 9, 9)
    with torch.no_grad():
        want = block(x).numpy()
    model = from_module(block, (x,))
    assert not model.opaque
    for streams in (1, 4):
        plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=True)
        steps = [tuple(st.op for st in k.fused.steps) for k in plan.graph.kernels()]
        assert steps == [("conv2d", "batch_norm", "relu6"), ("conv2d", "batch_norm", "relu_nan")]
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


class Drawn1d(nn.Module):
    """pad? -> conv1d (drawn) -> batch norm -> GELU -> max pool 1d: a 1-d CNN block."""

    def __init__(self, conv: dict, pad: tuple[int, int] | None, pool: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(**conv)
        self.norm = nn.BatchNorm1d(conv["out_channels"])
        self.norm.running_mean.uniform_(-0.5, 0.5)
        self.norm.running_var.uniform_(0.5, 2.0)
        self.pad, self.pool = pad, nn.MaxPool1d(pool)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pad is not None:
            x = nn.functional.pad(x, self.pad)
        return self.pool(nn.functional.gelu(self.norm(self.conv(x))))


@st.composite
def blocks_1d(draw):
    groups = draw(st.sampled_from([1, 2, "depthwise"]))
    c_in = 4 if groups == "depthwise" else groups * draw(st.integers(1, 2))
    groups = c_in if groups == "depthwise" else groups
    padding = draw(st.sampled_from([0, 1, 2, "same"]))
    conv = {
        "in_channels": c_in,
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": draw(st.integers(1, 4)),
        "stride": 1 if padding == "same" else draw(st.integers(1, 2)),
        "padding": padding,
        "dilation": draw(st.integers(1, 2)),
        "groups": groups,
        "bias": draw(st.booleans()),
    }
    pad = draw(st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 2))))
    return conv, pad, draw(st.integers(1, 2))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=blocks_1d(), seed=st.integers(0, 2**31))
def test_drawn_1d_cnn_blocks_import_as_library_ops_and_match_eager(block, seed):
    torch.manual_seed(seed)
    module = Drawn1d(*block).eval()
    x = torch.randn(2, module.conv.in_channels, 11)
    with torch.no_grad():
        want = module(x).numpy()
    model = from_module(module, (x,))
    verify(model.graph)
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert ops_of["aten.convolution.default"] in ("conv1d", "conv1d_bias")
    assert "aten.constant_pad_nd.default" not in ops_of  # a zero pad folds into conv1d
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    fused = ExecutionPlan.build(model.graph, max_streams=1, fusion=True).graph
    (head,) = [
        k for k in fused.kernels() if k.fused is not None and "conv1d" in k.fused.steps[0].op
    ]
    assert [s.op for s in head.fused.steps][1:3] == ["batch_norm", "gelu_erf"]  # epilogue joined


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_zero_pads_of_zero_pads_fold_into_the_convolution(dims):
    # padding="same" with an even kernel pads the input once more (torch's F.pad): both
    # zero pads fold into the convolution's padding
    conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dims - 1](3, 2, 4, padding="same", bias=False)
    conv.eval()

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return conv(nn.functional.pad(x, (2, 1) * dims))

    x = torch.randn(1, 3, *(7,) * dims)
    model = from_module(M(), (x,))
    assert [model.targets[n.name] for n in model.graph.kernels()] == ["aten.convolution.default"]
    assert not model.opaque
    with torch.no_grad():
        want = M()(x).numpy()
    (y,) = model.outputs_from(
        SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs).outputs
    )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_a_zero_pad_of_a_transpose_is_a_kernel_the_convolution_reads():
    # CANINE's (batch, length, channels) -> transpose -> pad -> Conv1d: the pad of a view is
    # a constant_pad kernel of its own (which reads the transpose), not the convolution's
    # padding (the convolution takes a whole buffer); before, the convolution was opaque
    conv = nn.Conv1d(4, 3, 3).eval()

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return conv(nn.functional.pad(x.transpose(1, 2), (1, 2)))

    x = torch.randn(2, 6, 4)
    model = from_module(M(), (x,))
    assert not model.opaque, [(o.target, o.reason) for o in model.opaque]
    op_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert op_of["aten.constant_pad_nd.default"] == "constant_pad"
    assert op_of["aten.convolution.default"] == "conv1d_bias"
    with torch.no_grad():
        want = M()(x).numpy()
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("upsample", "library"),
    [
        (nn.Upsample(scale_factor=2), True),
        (nn.Upsample(scale_factor=(2, 3)), True),
        (nn.Upsample(size=(10, 12)), True),  # whole factors from the sizes
        (nn.Upsample(scale_factor=1.5), False),
        (nn.Upsample(size=(7, 9)), False),
    ],
)
def test_nearest_upsampling_by_whole_factors_is_a_library_op(upsample, library) -> None:
    # a U-Net's decoder step: upsample, concatenate the skip, convolve
    conv = nn.Conv2d(6, 2, 3, padding=1)

    class Up(nn.Module):
        def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
            y = upsample(x)
            return conv(torch.cat([y, skip], dim=1))

    x = torch.randn(1, 3, 5, 4)
    with torch.no_grad():
        skip = torch.randn(1, 3, *upsample(x).shape[-2:])
        want = Up()(x, skip).numpy()
    model = from_module(Up().eval(), (x, skip))
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    (target,) = [t for t in ops_of if "upsample" in t]
    if library:
        assert ops_of[target] == "upsample_nearest2d" and not model.opaque
    else:
        (o,) = model.opaque
        assert o.target == target and ("whole factors" in o.reason or "p // factor" in o.reason)
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


class Drawn3d(nn.Module):
    """pad? -> Conv3d (drawn) -> BatchNorm3d -> ReLU -> MaxPool3d or AvgPool3d (drawn): a
    3-D U-Net's or a video network's convolution block."""

    def __init__(self, conv: dict, pad: tuple[int, ...] | None, pool: tuple[str, dict]) -> None:
        super().__init__()
        self.conv = nn.Conv3d(**conv)
        self.norm = nn.BatchNorm3d(conv["out_channels"])
        self.norm.running_mean.uniform_(-0.5, 0.5)
        self.norm.running_var.uniform_(0.5, 2.0)
        self.pad = pad
        kind, kw = pool
        with torch.no_grad():  # windows no larger than the convolution's output (torch's rule)
            sizes = self.convolve(torch.zeros(X3D)).shape[2:]
        kw = dict(kw)
        kw["kernel_size"] = tuple(min(k, s) for k, s in zip(kw["kernel_size"], sizes, strict=True))
        kw["padding"] = tuple(
            min(p, k // 2) for p, k in zip(kw["padding"], kw["kernel_size"], strict=True)
        )
        if kind == "max":
            kw["dilation"] = tuple(
                d if d * (k - 1) + 1 <= s + 2 * p else 1
                for d, k, s, p in zip(
                    kw["dilation"], kw["kernel_size"], sizes, kw["padding"], strict=True
                )
            )
        self.pool = nn.MaxPool3d(**kw) if kind == "max" else nn.AvgPool3d(**kw)

    def convolve(self, x: torch.Tensor) -> torch.Tensor:
        if self.pad is not None:
            x = nn.functional.pad(x, self.pad)
        return self.conv(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.norm(self.convolve(x))))


X3D = (2, 4, 5, 6, 5)  # the drawn blocks' input: N, C (4: every drawn in_channels), D, H, W


@st.composite
def blocks_3d(draw):
    groups = draw(st.sampled_from([1, 2, 4]))  # (4: depthwise)
    padding = draw(st.sampled_from([0, 1, (1, 0, 2), "same"]))
    same = padding == "same"
    conv = {
        "in_channels": 4,
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": tuple(draw(st.integers(1, 3)) for _ in range(3)),
        "stride": 1 if same else tuple(draw(st.integers(1, 2)) for _ in range(3)),
        "padding": padding,
        "dilation": (draw(st.integers(1, 2)), 1, draw(st.integers(1, 2))),
        "groups": groups,
        "bias": draw(st.booleans()),
    }
    pad = draw(st.one_of(st.none(), st.tuples(*[st.integers(0, 1)] * 6)))
    kind = draw(st.sampled_from(["max", "avg"]))
    kw = {
        "kernel_size": tuple(draw(st.integers(1, 2)) for _ in range(3)),
        "stride": tuple(draw(st.integers(1, 2)) for _ in range(3)),
        "padding": tuple(draw(st.integers(0, 1)) for _ in range(3)),
        "ceil_mode": draw(st.booleans()),
    }
    if kind == "max":
        kw["dilation"] = (draw(st.integers(1, 2)), 1, 1)
    else:
        kw["count_include_pad"] = draw(st.booleans())
        kw["divisor_override"] = draw(st.sampled_from([None, None, 3]))
    return conv, pad, (kind, kw)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block=blocks_3d(), seed=st.integers(0, 2**31))
def test_drawn_3d_cnn_blocks_import_as_library_ops_and_match_eager(block, seed):
    torch.manual_seed(seed)
    module = Drawn3d(*block).eval()
    x = torch.randn(*X3D)
    with torch.no_grad():
        want = module(x).numpy()
    model = from_module(module, (x,))
    verify(model.graph)
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    conv = "conv3d_bias" if module.conv.bias is not None else "conv3d"
    assert ops_of["aten.convolution.default"] == conv
    pool = "max_pool3d" if isinstance(module.pool, nn.MaxPool3d) else "avg_pool3d"
    assert pool in ops_of.values()
    # zero pads (drawn, and padding="same" with an even kernel) fold into the convolution
    assert "aten.constant_pad_nd.default" not in ops_of
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    fused = ExecutionPlan.build(model.graph, max_streams=1, fusion=True).graph
    steps = [tuple(s.op for s in k.fused.steps) for k in fused.kernels() if k.fused is not None]
    assert (conv, "batch_norm", "relu_nan") in steps  # conv + bn + relu: one kernel


@pytest.mark.parametrize(
    ("dims", "pad", "folded"),
    [
        (3, (1, 0, 0, 2, 1, 1), True),  # width, height and depth: conv3d slides over all
        (2, (1, 0, 2, 1, 0, 0, 0, 0), True),  # (zero amounts for the leading axes)
        (2, (0, 0, 0, 0, 1, 1), False),  # the channel axis: no convolution pads it
        (1, (1, 2, 1, 0), False),  # conv1d slides over the length only
    ],
)
def test_a_zero_pad_folds_only_over_the_axes_the_convolution_slides(dims, pad, folded):
    channels = 3 + sum(pad[2 * dims : 2 * dims + 2])  # (a pad of C adds channels)
    conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[dims - 1](channels, 2, 2, bias=False).eval()

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return conv(nn.functional.pad(x, pad))

    x = torch.randn(1, 3, *(4,) * dims)
    with torch.no_grad():
        want = M()(x).numpy()
    model = from_module(M(), (x,))
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert ops_of["aten.convolution.default"] == f"conv{dims}d"
    assert ("aten.constant_pad_nd.default" not in ops_of) == folded
    (y,) = model.outputs_from(
        SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs).outputs
    )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("shape", "pad", "op"),
    [
        ((2, 5, 6, 3), (0, 0, 1, 2, 0, 3), "constant_pad3d"),  # Swin: H and W of NHWC
        ((2, 7, 4), (0, 0, 0, 1, 0, 0), "constant_pad"),  # MobileBERT: the batch by nothing
        ((1, 2, 3, 4, 5), (1, 0, -1, 2, 2, 1), "constant_pad3d"),  # NCDHW, with a crop
        ((2, 3, 4, 5), (1, 1, 0, 0, 0, 0, 0, 0), "constant_pad"),
    ],
)
def test_a_pad_of_up_to_three_axes_is_a_library_kernel(shape, pad, op):
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(nn.functional.pad(x, pad, value=1.5)) * 2.0

    x = torch.randn(*shape)
    with torch.no_grad():
        want = M()(x).numpy()
    model = from_module(M(), (x,))
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert ops_of["aten.constant_pad_nd.default"] == op
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_array_equal(y, want)


def test_a_zero_pad_before_a_transposed_convolution_stays_a_library_kernel():
    # the transposed convolution cannot apply it (its padding crops the output): the pad is
    # constant_pad, not a view the convolution would have to read
    conv = nn.ConvTranspose2d(2, 3, 3).eval()

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return conv(nn.functional.pad(x, (1, 1, 0, 2)))

    x = torch.randn(1, 2, 4, 4)
    with torch.no_grad():
        want = M()(x).numpy()
    model = from_module(M(), (x,))
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert ops_of["aten.constant_pad_nd.default"] == "constant_pad"
    assert ops_of["aten.convolution.default"] == "conv_transpose2d_bias"
    (y,) = model.outputs_from(
        SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs).outputs
    )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


class DrawnT3d(nn.Module):
    """ConvTranspose3d (drawn) -> ReLU -> + 1: a 3-D U-Net's or a video decoder's upsampling
    step with an epilogue."""

    def __init__(self, conv: dict) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose3d(**conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) + 1.0


@st.composite
def blocks_t3d(draw):
    groups = draw(st.sampled_from([1, 2, 4]))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(3))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(3))
    conv = {
        "in_channels": 4,
        "out_channels": groups * draw(st.integers(1, 2)),
        "kernel_size": tuple(draw(st.integers(1, 3)) for _ in range(3)),
        "stride": stride,
        "padding": tuple(draw(st.integers(0, 1)) for _ in range(3)),
        # (torch's rule: smaller than the stride or the dilation, on each axis)
        "output_padding": tuple(
            draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation, strict=True)
        ),
        "dilation": dilation,
        "groups": groups,
        "bias": draw(st.booleans()),
    }
    return conv


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv=blocks_t3d(), seed=st.integers(0, 2**31))
def test_drawn_conv_transpose3d_imports_as_a_library_op_and_matches_eager(conv, seed):
    torch.manual_seed(seed)
    module = DrawnT3d(conv).eval()
    x = torch.randn(2, 4, 3, 2, 3)
    with torch.no_grad():
        want = module(x).numpy()
    model = from_module(module, (x,))
    verify(model.graph)
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    want_op = "conv_transpose3d_bias" if conv["bias"] else "conv_transpose3d"
    assert ops_of["aten.convolution.default"] == want_op
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        (y,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert y.shape == want.shape
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    fused = ExecutionPlan.build(model.graph, max_streams=1, fusion=True).graph
    steps = [tuple(s.op for s in k.fused.steps) for k in fused.kernels() if k.fused is not None]
    assert steps and steps[0][0] == want_op  # the relu and the add joined it


def _simulate(model, fusion: bool) -> list[np.ndarray]:
    plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
    return model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)


class Resize3d(nn.Module):
    """A 3-D U-Net's decoder step: resize (drawn), add 1 (an epilogue), cat the skip."""

    def __init__(self, upsample: nn.Module) -> None:
        super().__init__()
        self.up = upsample

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.up(x) + 1.0, skip], dim=1)


X5D = (2, 3, 2, 3, 4)


@pytest.mark.parametrize("decomposed", [True, False])
@pytest.mark.parametrize(
    ("upsample", "library"),
    [
        (nn.Upsample(scale_factor=2), True),
        (nn.Upsample(scale_factor=(1, 2, 3)), True),
        (nn.Upsample(size=(6, 3, 8)), True),  # whole factors from the sizes
        (nn.Upsample(scale_factor=1.5), False),
        (nn.Upsample(size=(3, 5, 6)), False),
    ],
)
def test_3d_nearest_upsampling_by_whole_factors_is_a_library_op(upsample, library, decomposed):
    # from_module keeps upsample_nearest3d from torch's decomposition where the library op
    # computes it, and leaves other factors to it (a gather, no opaque kernel); a program
    # not decomposed holds the call itself, opaque with the reason where no op computes it
    x = torch.randn(*X5D)
    with torch.no_grad():
        skip = torch.randn(X5D[0], 2, *upsample(x).shape[2:])
        want = Resize3d(upsample)(x, skip).numpy()
    if decomposed:
        model = from_module(Resize3d(upsample).eval(), (x, skip))
    else:
        model = from_exported_program(torch.export.export(Resize3d(upsample).eval(), (x, skip)))
    verify(model.graph)
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    if library:
        assert ops_of["aten.upsample_nearest3d.vec"] == "upsample_nearest3d"
        assert not model.opaque, model.opaque
    elif decomposed:
        assert "aten.upsample_nearest3d.vec" not in ops_of and not model.opaque, model.opaque
    else:
        (o,) = model.opaque
        assert o.target == "aten.upsample_nearest3d.vec" and "whole factors" in o.reason
    for fusion in (False, True):
        (y,) = _simulate(model, fusion)
        np.testing.assert_array_equal(y, want)  # moved, never computed: bit for bit


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    resize=st.one_of(
        st.tuples(
            st.sampled_from([0.5, 1.0, 1.5, 2.0, 2.5, 3.0]),
            st.sampled_from([1.0, 2.0, 1.7]),
            st.sampled_from([2.0, 0.75]),
        ).map(lambda f: {"scale_factor": f}),
        st.tuples(*[st.integers(1, 7)] * 3).map(lambda s: {"size": s}),
    ),
    align=st.booleans(),
    decomposed=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_trilinear_resizing_imports_as_a_library_op_and_matches_eager(
    resize, align, decomposed, seed
):
    torch.manual_seed(seed)
    upsample = nn.Upsample(**resize, mode="trilinear", align_corners=align)
    x = torch.randn(*X5D)
    with torch.no_grad():
        skip = torch.randn(X5D[0], 2, *upsample(x).shape[2:])
        want = Resize3d(upsample)(x, skip).numpy()
    module = Resize3d(upsample).eval()
    if decomposed:
        model = from_module(module, (x, skip))
    else:
        model = from_exported_program(torch.export.export(module, (x, skip)))
    verify(model.graph)
    assert not model.opaque, model.opaque
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert ops_of["aten.upsample_trilinear3d.vec"] == "upsample_trilinear3d"
    for fusion in (False, True):
        (y,) = _simulate(model, fusion)
        assert y.shape == want.shape
        # torch's kernel rounds in its own order: a few float32 roundings per axis (as
        # tests/ops/test_conv.py bounds it), then the add
        np.testing.assert_allclose(
            y, want, rtol=0, atol=16 * 2.0**-24 * x.abs().max().item() + 1e-6
        )


@st.composite
def any_convs(draw):
    """A Conv1d/2d/3d or ConvTranspose1d/2d/3d module of drawn stride, padding, dilation,
    groups, output padding and bias, and an input for it."""
    dims, transposed = draw(st.integers(1, 3)), draw(st.booleans())
    groups = draw(st.sampled_from([1, 2]))
    size = st.lists(st.integers(1, 2), min_size=dims, max_size=dims).map(tuple)
    kernel, stride, dilation = draw(size), draw(size), draw(size)
    padding = tuple(draw(st.integers(0, 1)) for _ in range(dims))
    options = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    options["bias"] = draw(st.booleans())
    if transposed:
        options["output_padding"] = tuple(
            draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation, strict=True)
        )
    cls = (
        (nn.Conv1d, nn.Conv2d, nn.Conv3d),
        (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d),
    )
    module = cls[transposed][dims - 1](2, 4, kernel, **options)
    return module, (1, 2, *(4,) * dims)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=any_convs(), seed=st.integers(0, 2**31))
def test_undecomposed_convolutions_map_as_the_decomposed_ones(case, seed):
    # torch.export without decompositions keeps aten.conv{1,2,3}d and conv_transpose{1,2,3}d:
    # each maps to the very library op, parameters and all, that from_module's
    # aten.convolution maps to, and computes eager's values
    module, shape = case
    torch.manual_seed(seed)
    module.eval()
    x = torch.randn(*shape)
    with torch.no_grad():
        want = module(x).numpy()
    raw = from_exported_program(torch.export.export(module, (x,)))
    decomposed = from_module(module, (x,))
    assert not raw.opaque and not decomposed.opaque, (raw.opaque, decomposed.opaque)
    kernels = [(k.op, k.params) for k in raw.graph.kernels()]
    assert kernels == [(k.op, k.params) for k in decomposed.graph.kernels()]
    (y,) = raw.outputs_from(evaluate(raw.graph, raw.inputs))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
