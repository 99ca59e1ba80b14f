"""Element-wise ATen ops through the importer: broadcasting operands, batch norm,
activations, scalars, where and comparisons map to library ops (not opaque), and the
simulator computes eager's outputs with fusion on and off, on 1 to 4 streams."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, ops, verify
from oxiwork.importers.torch import ImportedModel, from_exported_program, from_module
from oxiwork.reference import evaluate
from tests.importers._eager import assert_simulates_exactly, import_with_eager


class MaskAdd(nn.Module):
    """Attention scores plus an additive mask broadcast over the heads, then softmax."""

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores + mask, dim=-1)


class RMSScale(nn.Module):
    """An RMS-norm-like scale: a per-row factor (..., 1) and a (hidden,) weight."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x: torch.Tensor, rms: torch.Tensor) -> torch.Tensor:
        return (x * rms) * self.weight


class BNBlock(nn.Module):
    """Inference batch norm over (N, C, H, W), then the activations of CNNs and MLPs."""

    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.act = nn.SiLU()
        self.clip = nn.Hardtanh(-0.5, 2.0)
        self.relu6 = nn.ReLU6()
        self.gelu = nn.GELU()  # approximate='none': the erf form

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gelu(self.relu6(self.clip(self.act(self.bn(x))) * 4.0))


class Scalars(nn.Module):
    """Python numbers in arithmetic: each becomes a parameter of a scalar op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.rsqrt(x.pow(2) + 1.0)  # pow by a scalar, add a scalar
        return (1.0 - y) / 3.0 - 0.25 * x.pow(3) - 0.5


def _make(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "mask_add":
        mask = torch.zeros(1, 1, 6, 6).masked_fill(torch.ones(6, 6).triu(1).bool(), -1e4)
        return MaskAdd(), (torch.randn(1, 3, 6, 6), mask)
    if name == "rms_scale":
        return RMSScale(), (torch.randn(2, 5, 16), torch.rand(2, 5, 1) + 0.5)
    if name == "bn_block":
        m = BNBlock()
        m.bn.running_mean.uniform_(-0.5, 0.5)  # non-trivial statistics
        m.bn.running_var.uniform_(0.5, 2.0)
        m.bn.weight.data.uniform_(0.5, 1.5)
        m.bn.bias.data.uniform_(-0.2, 0.2)
        return m, (torch.randn(2, 4, 5, 5),)
    if name == "scalars":
        return Scalars(), (torch.randn(3, 7),)
    raise KeyError(name)


MODELS = ("mask_add", "rms_scale", "bn_block", "scalars")
_CACHE: dict[str, tuple[ImportedModel, tuple[np.ndarray, ...]]] = {}


def _imported(name: str) -> tuple[ImportedModel, tuple[np.ndarray, ...]]:
    if name not in _CACHE:
        _CACHE[name] = import_with_eager(*_make(name))
    return _CACHE[name]


@pytest.mark.parametrize("name", MODELS)
class TestElementwiseImport:
    def test_graph_verifies_and_nothing_is_opaque(self, name: str) -> None:
        model, _ = _imported(name)
        verify(model.graph)
        assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]

    def test_reference_equals_eager(self, name: str) -> None:
        model, want = _imported(name)
        got = model.outputs_from(evaluate(model.graph, model.inputs))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("streams", [1, 2, 4])
    @pytest.mark.parametrize("fusion", [False, True])
    def test_simulator_equals_eager(self, name: str, fusion: bool, streams: int) -> None:
        model, want = _imported(name)
        plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    def test_fusion_merges_the_broadcasting_chain(self, name: str) -> None:
        model, _ = _imported(name)
        plan = ExecutionPlan.build(model.graph, fusion=True)
        assert plan.kernel_count_fused < plan.kernel_count_original
        if name != "scalars":  # chains (scalars is a DAG reading x twice)
            assert plan.kernel_count_fused == 1


def test_scalars_are_kept_as_parameters() -> None:
    model, _ = _imported("scalars")
    params = {n.op: dict(n.params) for n in model.graph.nodes if n.is_kernel}
    assert params["add_scalar"] == {"other": 1.0}
    assert params["rsub_scalar"] == {"other": 1.0}
    assert params["div_scalar"] == {"other": 3.0}
    assert params["sub_scalar"] == {"other": 0.5}
    assert {"exponent": 2.0} in [dict(n.params) for n in model.graph.nodes if n.op == "pow_scalar"]


def test_batch_norm_and_activations_map_to_library_ops() -> None:
    model, _ = _imported("bn_block")
    got = [n.op for n in model.graph.nodes if n.is_kernel]
    # core ATen decomposes SiLU into x * sigmoid(x); the rest stay one op each
    assert got == ["batch_norm", "sigmoid", "mul", "hardtanh", "scale", "relu6", "gelu_erf"]
    ht = next(n for n in model.graph.nodes if n.op == "hardtanh")
    assert dict(ht.params) == {"min_val": -0.5, "max_val": 2.0}


def test_silu_maps_when_not_decomposed() -> None:
    x = torch.randn(2, 6)
    model = from_exported_program(torch.export.export(nn.SiLU(), (x,)))
    assert model.opaque == () and next(n.op for n in model.graph.nodes) == "silu"
    (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
    np.testing.assert_allclose(got, nn.SiLU()(x).numpy(), rtol=1e-6, atol=1e-7)


def test_comparisons_give_bool_and_where_reads_it() -> None:
    # torch's bool results are bool buffers now (no float 0/1), and where selects by them
    class Where(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.where((x > y) & (x < 1.5), x, y * 2.0)

    x, y = torch.randn(3, 4), torch.randn(4)
    model = from_module(Where(), (x, y))
    assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]
    ops_ = [n.op for n in model.graph.nodes if n.is_kernel]
    assert {"gt", "lt_scalar", "bitwise_and", "where"} <= set(ops_)
    assert {model.graph.buffer_by_name(n.name).dtype for n in model.graph.nodes
            if n.op in ("gt", "lt_scalar")} == {"bool"}  # fmt: skip
    (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
    np.testing.assert_array_equal(got, Where()(x, y).numpy())


# ----------------------------------------------------------------------------- torch semantics
_SPECIAL = torch.tensor(
    [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0,
     6.5, -20.0, 100.0, -100.0, 3.4e38, -3.4e38],
    dtype=torch.float32,
)  # fmt: skip
F = torch.nn.functional
# (library op, its params, what torch computes, exact: bit for bit incl. zero signs)
_SEMANTICS = [
    ("gelu_erf", {}, F.gelu, False),
    ("silu", {}, F.silu, False),
    ("hardtanh", {"min_val": -1.0, "max_val": 1.0}, F.hardtanh, True),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}, lambda x: F.hardtanh(x, -0.5, 2.0), True),
    ("relu6", {}, F.relu6, True),
    ("rsqrt", {}, torch.rsqrt, True),
    *[
        ("pow_scalar", {"exponent": e}, lambda x, e=e: torch.pow(x, e), e != 1.7)
        for e in (2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 0.0, 1.0, 1.7)
    ],
    ("add_scalar", {"other": 0.25}, lambda x: x + 0.25, True),
    ("sub_scalar", {"other": 0.25}, lambda x: x - 0.25, True),
    ("rsub_scalar", {"other": 1.0}, lambda x: 1.0 - x, True),
    ("div_scalar", {"other": 3.0}, lambda x: x / 3.0, False),
    ("abs", {}, torch.abs, True),
    ("sqrt", {}, torch.sqrt, True),
    ("clamp_min", {"min_val": -0.5}, lambda x: torch.clamp(x, min=-0.5), True),
    ("clamp_min", {"min_val": 0.0}, lambda x: torch.clamp(x, min=0.0), True),
    ("clamp_max", {"max_val": 2.0}, lambda x: torch.clamp(x, max=2.0), True),
    ("leaky_relu", {"negative_slope": 0.01}, F.leaky_relu, True),
    ("leaky_relu", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2), True),
    ("elu", {"alpha": 1.0, "scale": 1.0, "input_scale": 1.0}, F.elu, False),
    ("elu", {"alpha": 0.5, "scale": 1.0, "input_scale": 1.0}, lambda x: F.elu(x, 0.5), False),
    (
        "elu",
        {"alpha": 1.6732632423543772, "scale": 1.0507009873554805, "input_scale": 1.0},
        F.selu,
        False,
    ),
]


@pytest.mark.parametrize(("op", "params", "fn", "exact"), _SEMANTICS)
def test_special_values_as_torch_computes_them(op, params, fn, exact) -> None:
    # ATen's own CPU kernels (what torch computes on CUDA too): oneDNN's, which eager may
    # pick instead, gives other special values on other ISAs (gelu at +inf: NaN with
    # AVX-512, inf with AVX2; at -100: +0.0 with AVX2)
    with torch.backends.mkldnn.flags(enabled=False):
        want = fn(_SPECIAL).numpy()
    got = ops.get(op).reference([_SPECIAL.numpy()], **params)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    finite = ~np.isnan(want)
    zeros = finite & (want == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros])), (got, want)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        # gelu's 0.5x + 0.5x erf(..) cancels for negative x: absolute error ~ ulp(x) each side
        x = np.abs(_SPECIAL.numpy().astype(np.float64))
        err = np.abs(got.astype(np.float64) - want)
        with np.errstate(invalid="ignore"):
            ok = (got == want) | (err <= 2e-6 * np.abs(want) + 4e-7 * x)
        assert ok[finite].all(), (got[~ok], want[~ok])


def test_log1p_special_values_as_torch_but_for_denormals() -> None:
    # torch's CPU log1p (vectorised) gives +0.0 for a denormal x, where log1p(x) rounds to x
    # itself; the library keeps x, as C's log1pf and torch's CUDA kernel (log1pf) do
    x = _SPECIAL.numpy()
    want = torch.log1p(_SPECIAL).numpy()
    got = ops.get("log1p").reference([x])
    denormal = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(got[denormal], x[denormal])
    keep = ~denormal
    assert np.array_equal(np.isnan(got[keep]), np.isnan(want[keep]))
    zeros = keep & (want == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))
    np.testing.assert_allclose(got[keep], want[keep], rtol=2e-7, atol=0)


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_special_values_as_torch(affine: bool) -> None:
    x = _SPECIAL.reshape(1, 1, -1).repeat(1, 3, 1)
    mean, var = torch.tensor([0.0, 1.0, -2.0]), torch.tensor([1.0, 0.25, 4.0])
    w, b = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.0, 0.5, -1.0])
    if not affine:
        w = b = None
    want = F.batch_norm(x, mean, var, w, b, training=False, eps=1e-5).numpy()
    args = [t.numpy() for t in (x, mean, var, w, b) if t is not None]
    got = ops.get("batch_norm" if affine else "batch_norm_plain").reference(args, eps=1e-5)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-30)


# x <op> ±inf: the comparisons the library computes exactly (as x <op'> ±FLT_MAX) and
# those it leaves opaque (always false, or true but for NaN)
INF_MAPPED = {
    ("eq", False): "lt_scalar",
    ("le", False): "lt_scalar",
    ("gt", False): "ge_scalar",
    ("eq", True): "gt_scalar",
    ("ge", True): "gt_scalar",
    ("lt", True): "le_scalar",
}
F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("positive", [False, True])
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_comparisons_with_an_infinity(op, positive, dtype) -> None:
    inf = math.inf if positive else -math.inf
    f = getattr(torch, op)

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return f(x, inf)

    big = torch.finfo(dtype).max
    x = torch.tensor([-math.inf, math.inf, math.nan, -big, big, 0.0, -1.5, 2.0], dtype=dtype)
    model, (want,) = import_with_eager(M(), (x,))
    (k,) = model.graph.kernels()
    lib = INF_MAPPED.get((op, positive)) if dtype != torch.float64 else None
    if lib is None:
        (o,) = model.opaque
        assert f"with {inf}; no library op does" in o.reason
    else:
        assert not model.opaque and k.op == lib
        assert k.params == (("other", F32_MAX if positive else -F32_MAX),)
    plan = ExecutionPlan.build(model.graph)
    (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    np.testing.assert_array_equal(got, want)


def test_ops_of_an_input_shape_only_fold_into_constants() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            t = x.t()  # zeros_like keeps the transposed layout, and the add after it too
            return torch.full_like(x, 3.0) * x, (torch.zeros_like(t) + t) @ x

    x = torch.randn(3, 4)
    model, want = import_with_eager(M(), (x,))
    assert sorted(model.targets.values()).count("aten.full_like.default") == 0
    assert len(model.folded) == 2 and not model.opaque
    folded = [model.inputs[name] for name in model.folded]
    assert sorted(float(np.unique(v)[0]) for v in folded) == [0.0, 3.0]
    plan = ExecutionPlan.build(model.graph)
    got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ATen op -> (module body, the library op it must map to)
_ACTIVATIONS = {
    "clamp both": (lambda x: torch.clamp(x, -0.5, 2.0), "hardtanh"),
    "clamp min": (lambda x: torch.clamp(x, min=0.0), "clamp_min"),
    "clamp max": (lambda x: x.clamp(max=-1.0), "clamp_max"),
    "clamp_min": (lambda x: torch.clamp_min(x, 0.5), "clamp_min"),
    # an infinite bound on its own side bounds nothing (Falcon-H1's clamp(x, 0, inf))
    "clamp min, max inf": (lambda x: torch.clamp(x, 0.0, math.inf), "clamp_min"),
    "clamp min -inf, max": (lambda x: torch.clamp(x, -math.inf, 1.5), "clamp_max"),
    "hardswish": (F.hardswish, "clamp_min"),  # x * min(max(x + 3, 0), 6) / 6 in core ATen
    "abs": (torch.abs, "abs"),
    "sqrt": (lambda x: torch.sqrt(x.abs()), "sqrt"),
    "log1p": (lambda x: torch.log1p(x.abs()), "log1p"),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), "leaky_relu"),
    "elu": (lambda x: F.elu(x, 0.7), "elu"),
    "selu": (F.selu, "elu"),
    "celu": (lambda x: F.celu(x, 2.0), "expm1"),  # where(x > 0, x, a * expm1(x / a))
}


@pytest.mark.parametrize("name", sorted(_ACTIVATIONS))
def test_clamps_and_activations_map_to_library_ops(name) -> None:
    body, lib = _ACTIVATIONS[name]

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return body(x)

    x = torch.cat([_SPECIAL[_SPECIAL.abs() < 1e30], torch.linspace(-4, 4, 17)]).reshape(1, -1)
    model, (want,) = import_with_eager(M(), (x,))
    assert not model.opaque, model.opaque
    assert lib in {k.op for k in model.graph.kernels()}
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("lo", "hi", "why"),
    [
        (-math.inf, math.inf, "its bounds are -inf and inf"),  # (bounds nothing: no library op)
        (math.inf, None, "its bounds are inf and None"),  # inf everywhere but NaN
        (None, -math.inf, "its bounds are None and -inf"),
        (math.nan, 1.0, "its bounds are nan and 1.0"),
    ],
)
def test_a_clamp_to_an_infinite_or_nan_bound_stays_opaque(lo, hi, why) -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.clamp(x, lo, hi)

    x = torch.cat([torch.linspace(-2, 2, 9), torch.tensor([math.nan, -math.inf, math.inf])])
    model, (want,) = import_with_eager(M(), (x,))
    (o,) = model.opaque
    assert why in o.reason
    (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16])
def test_a_clamp_with_an_infinite_bound_keeps_torchs_dtype(dtype) -> None:
    # (an integer input clamped by float bounds is float in torch, as without the inf)
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.clamp(x, 1.0, math.inf), torch.clamp(x, -math.inf, 2.0)

    x = torch.arange(-4, 5).to(dtype)
    model, want = import_with_eager(M(), (x,))
    assert not model.opaque, model.opaque
    assert_simulates_exactly(model, want)


def test_a_clamp_whose_min_exceeds_its_max_stays_opaque() -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.clamp(x, 1.0, -1.0)  # torch: max everywhere

    x = torch.linspace(-2, 2, 9)
    model, (want,) = import_with_eager(M(), (x,))
    (o,) = model.opaque
    assert "its min 1.0 exceeds its max -1.0" in o.reason
    (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
    np.testing.assert_array_equal(got, want)


class Rotary(nn.Module):
    """Rotary position embeddings (LLaMA's): cos/sin of positions times frequencies, the
    halves rotated; and the math ops models use around it (floor, round, extremes, pow,
    atan2, remainder, isnan, reciprocal, sign, erf)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        d = x.shape[-1]
        freqs = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        pos = torch.arange(x.shape[-2]).float()
        ang = torch.outer(pos, freqs)
        emb = torch.cat([ang, ang], -1)
        half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
        rot = x * torch.cos(emb) + half * torch.sin(emb)
        return (
            rot,
            torch.sin(x) * torch.cos(y) + torch.tan(x * 0.1),
            torch.floor(x) + torch.ceil(y) - torch.trunc(x) + torch.round(y * 3.0),
            torch.maximum(x, y) - torch.minimum(x, 0.5 * y),
            torch.pow(y.abs() + 0.5, x) + torch.atan2(x, y),
            torch.remainder(x, 1.5) + torch.fmod(y, -0.75),
            torch.isnan(torch.log(x)) & (y > 0),
            torch.reciprocal(y + 3.0) * torch.sign(x) + torch.erf(x),
            torch.log2(y.abs() + 1.0) + torch.log10(x.abs() + 1.0) + torch.exp2(x),
            torch.sinh(x)
            - torch.cosh(y)
            + torch.atan(x)
            + torch.asin(x * 0.3)
            + torch.acos(y * 0.3),
        )


def test_rotary_embeddings_and_math_ops_map_to_library_ops() -> None:
    torch.manual_seed(3)
    x, y = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    model, eager = import_with_eager(Rotary(), (x, y))
    assert model.opaque == (), model.opaque_counts()
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, eager, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _import_any_dtype(module: nn.Module, args: tuple[torch.Tensor, ...]):
    """``module`` imported, its eager output as float32 and its dtype's name (numpy has
    no bfloat16: import_with_eager cannot keep one)."""
    with torch.no_grad():
        eager = module(*args)
    return from_module(module, args), eager.float().numpy(), str(eager.dtype).split(".")[-1]


# clamp by tensors: (module body, the library op)
_GRID = _SPECIAL[_SPECIAL.abs() < 1e30]  # (3.4e38 overflows float16)
_CLAMP_BY_TENSOR = {
    "clamp min": (lambda x, b: torch.clamp(x, min=b), "maximum"),
    "clamp max": (lambda x, b: torch.clamp(x, max=b), "minimum"),
    "clamp_min": (lambda x, b: torch.clamp_min(x, b), "maximum"),
    "clamp_max": (lambda x, b: torch.clamp_max(x, b), "minimum"),
    "Tensor.clamp min": (lambda x, b: x.clamp(b), "maximum"),
}


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),  # promoted to float32, as torch
        (torch.int64, torch.int64),
    ],
)
@pytest.mark.parametrize("name", sorted(_CLAMP_BY_TENSOR))
def test_clamp_by_one_tensor_is_maximum_or_minimum_as_torch(name, dtypes) -> None:
    # every special value against every one (x a row, the bound a column: broadcast both
    # ways): NaN in x or in the bound gives NaN, infinities are ordinary values
    body, lib = _CLAMP_BY_TENSOR[name]

    class M(nn.Module):
        def forward(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return body(x, b)

    dx, db = dtypes
    grid = _GRID if dx.is_floating_point else torch.tensor([0, 1, -1, 7, -(2**40), 2**62, -(2**63)])
    x, b = grid.reshape(1, -1).to(dx), grid.reshape(-1, 1).to(db)
    model, want, dtype = _import_any_dtype(M(), (x, b))
    assert not model.opaque, model.opaque
    assert [k.op for k in model.graph.kernels()] == [lib]
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert got.dtype.name == dtype and got.shape == want.shape
        # bit for bit but for the zero sign of a tie of -0.0 and 0.0 (torch's vector loop
        # keeps the bound, its scalar loop x, as in torch.maximum)
        np.testing.assert_array_equal(got.astype(want.dtype), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_clamp_by_two_tensors_is_clamp_tensors_as_torch(dtype) -> None:
    # every value against every pair of bounds (x, min and max along three axes, broadcast),
    # min > max included (torch gives max), NaN anywhere the result
    class M(nn.Module):
        def forward(self, x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
            return torch.clamp(x, lo, hi)

    grid = _GRID if dtype.is_floating_point else torch.tensor([0, 1, -1, 7, -(2**40), -(2**63)])
    n = len(grid)
    x, lo, hi = (grid.to(dtype).reshape(s) for s in ((n, 1, 1), (1, n, 1), (n,)))
    model, want, name = _import_any_dtype(M(), (x, lo, hi))
    assert not model.opaque, model.opaque
    assert [k.op for k in model.graph.kernels()] == ["clamp_tensors"]
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert got.dtype.name == name and got.shape == want.shape
        # bit for bit but for the zero sign of a tie of -0.0 and 0.0, as maximum's
        np.testing.assert_array_equal(got.astype(want.dtype), want)


def test_clamp_by_tensors_of_two_dtypes_casts_first_as_torch_promotes() -> None:
    # int64 and float32 operands: torch converts the int64 one to float32 and compares in
    # float32, so a cast kernel comes first (2**40 + 1 and 2**62 + 1 round as torch rounds
    # them; the bound lies between two of the values float32 holds)
    class M(nn.Module):
        def forward(self, x, lo, i):
            return torch.clamp(i, min=lo), torch.clamp(x, max=i)

    lo = torch.tensor([-0.5, 1.5, 2.0**40 + 70000.0, 4.6e18])
    i = torch.tensor([[-6, 7, 2**40 + 1, 2**62 + 1], [0, 1, -(2**63), 2**63 - 1]])
    x = torch.tensor([[float("nan"), float("inf"), 2.0**40, 4.6e18], [-0.0, 0.5, -1.0, 3.0]])
    model, want = import_with_eager(M(), (x, lo, i))
    assert not model.opaque, model.opaque
    ops = sorted(k.op for k in model.graph.kernels())
    assert ops == ["cast_float32", "maximum", "minimum"]  # one cast of i serves both
    assert_simulates_exactly(model, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_hypot_maps_to_the_librarys_hypot(dtype) -> None:
    class M(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.hypot(x, y)

    grid = _SPECIAL if dtype == torch.float32 else _GRID
    x, y = grid.reshape(1, -1).to(dtype), grid.reshape(-1, 1).to(dtype)
    model, w, name = _import_any_dtype(M(), (x, y))
    assert not model.opaque and [k.op for k in model.graph.kernels()] == ["hypot"]
    want = w.astype(ml_dtypes.bfloat16 if name == "bfloat16" else name)
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        assert got.dtype.name == name
        g = got.astype(np.float32)
        # NaN only where both are (hypot(inf, NaN) is inf), infinities alike, and finite
        # values within one ulp of the dtype (torch's CPU loop is within 1 ulp of the
        # correctly rounded result that C's hypotf gives; halves round that once)
        assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(np.isinf(g), np.isinf(w))
        ok = np.isfinite(w)
        ulp = np.spacing(np.abs(want[ok])).astype(np.float32)  # (in the dtype)
        assert (np.abs(g[ok] - w[ok]) <= ulp).all(), (g[ok], w[ok])
