"""Matmuls and reductions of imported modules map to ``oxiwork.ops.lib_reduce``, not opaque ops.

The modules are tests/importers/test_torch.py's (whose tests check verification and eager's
outputs with fusion on and off on 1-4 streams); here: which ops they became, that the
matmuls read views (transposed weights, permuted heads) in place, and that epilogues fuse
into them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, ops, verify
from oxiwork.importers.torch import from_exported_program, from_module
from oxiwork.ops import lib_reduce
from oxiwork.reference import evaluate
from tests.importers._eager import assert_simulates_exactly, import_with_eager
from tests.importers.test_torch import _assert_matches, _imported

MATMUL_TARGETS = {
    "aten.mm.default",
    "aten.bmm.default",
    "aten.addmm.default",
    "aten.baddbmm.default",
}


def _is_matmul(op_name: str) -> bool:
    return op_name in lib_reduce.MATMULS or op_name.startswith("gemm_")


def _check(module: nn.Module, args: tuple[torch.Tensor, ...], decompose: bool = True):
    module.eval()
    with torch.no_grad():
        eager = module(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    if decompose:
        model = from_module(module, args)
    else:  # core ATen decomposes baddbmm and linear: import the exported program as is
        model = from_exported_program(torch.export.export(module, args))
    for fusion in (False, True):
        for streams in (1, 3):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            verify(plan)
            stats = SequentialExecutor(plan).run(model.inputs)
            _assert_matches(model.outputs_from(stats.outputs), tuple(t.numpy() for t in eager))
    return model


class TestMatmulsMap:
    @pytest.mark.parametrize("name", ["mlp", "attention", "residual", "rms_norm"])
    def test_no_matmul_is_opaque(self, name: str) -> None:
        model, _ = _imported(name)
        assert not [o for o in model.opaque if o.target in MATMUL_TARGETS]
        heads = [n for n in model.graph.kernels() if _is_matmul(n.op)]
        assert heads and all(n.fusible for n in heads)

    def test_linear_layers_are_the_librarys_linear(self) -> None:
        model, _ = _imported("mlp")
        assert [n.op for n in model.graph.kernels() if n.name.endswith("addmm")] == ["linear"] * 3

    def test_attention_reads_heads_in_place(self) -> None:
        # q @ k.T and att @ v read permuted views of the heads: strided matmuls, no copies
        model, _ = _imported("attention")
        bmms = [n for n in model.graph.kernels() if model.targets[n.name] == "aten.bmm.default"]
        assert len(bmms) == 2 and all(n.op.startswith("gemm_") for n in bmms)

    def test_epilogues_fuse_into_matmul_heads(self) -> None:
        model, _ = _imported("mlp")
        plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
        fused = [n for n in plan.graph.kernels() if n.fused is not None]
        firsts = [n.fused.steps[0].op for n in fused]
        assert firsts.count("linear") >= 2, [n.name for n in fused]  # linear+gelu, linear+relu..
        assert len(plan.graph.kernels()) < len(model.graph.kernels())


class TestMatmulModules:
    def test_linear_without_bias_is_a_transposed_gemm(self) -> None:
        torch.manual_seed(0)
        model = _check(nn.Sequential(nn.Linear(6, 5, bias=False), nn.Tanh()), (torch.randn(3, 6),))
        (k,) = [n for n in model.graph.kernels() if n.name.endswith("mm")]
        assert k.op.startswith("gemm_") and model.opaque == ()

    def test_baddbmm_and_addmm_keep_beta_alpha(self) -> None:
        class Scaled(nn.Module):
            def forward(self, c, a, b, c2, x, y):
                return (
                    torch.baddbmm(c, a, b, beta=0.5, alpha=-2.0),
                    torch.addmm(c2, x, y, beta=0.0, alpha=3.0),
                )

        torch.manual_seed(0)
        args = (
            torch.randn(2, 1, 4),
            torch.randn(2, 3, 5),
            torch.randn(2, 5, 4),
            torch.full((4,), float("nan")),  # beta = 0: ignored, NaN included
            torch.randn(3, 6),
            torch.randn(6, 4),
        )
        model = _check(Scaled(), args, decompose=False)
        got = {n.op: dict(n.params) for n in model.graph.kernels()}
        assert got["baddbmm"] == {"beta": 0.5, "alpha": -2.0}
        assert got["addmm"] == {"beta": 0.0, "alpha": 3.0}
        assert model.opaque == ()

    def test_linear_before_decomposition(self) -> None:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3, bias=False))
        model = _check(net, (torch.randn(2, 4, 6),), decompose=False)
        assert [ops.get(n.op) is not None and _is_matmul(n.op) for n in model.graph.kernels()] == [
            True,
            False,
            True,
        ]
        assert model.graph.kernels()[0].op == "linear" and model.opaque == ()

    def test_matmul_of_a_transposed_input(self) -> None:
        class XtX(nn.Module):
            def forward(self, x):
                return torch.relu(x.t() @ x)

        torch.manual_seed(0)
        model = _check(XtX(), (torch.randn(4, 3),))
        (k,) = [n for n in model.graph.kernels() if _is_matmul(n.op)]
        assert ops.get(k.op).arity == 1  # both operands read from x's one buffer
        assert not [o for o in model.opaque if o.target in MATMUL_TARGETS]
        np.testing.assert_equal(len(k.inputs), 1)


class TestNormsMap:
    def test_affine_layer_norm_is_one_library_reduction(self) -> None:
        model, _ = _imported("attention")
        (ln,) = [n for n in model.graph.kernels() if n.name.endswith("native_layer_norm")]
        assert ln.op == "layer_norm_affine" and ln.params == (("eps", 1e-5),)
        assert "aten.native_layer_norm.default" not in model.opaque_counts()

    def test_rms_norm_chain_fuses_into_two_kernels(self) -> None:
        # x * rsqrt(mean(x^2) + eps) * w: pow, mean, add and rsqrt in one row kernel (the
        # pow a prologue, add and rsqrt an epilogue), the two broadcast muls in another
        model, _ = _imported("rms_norm")
        assert model.opaque == ()
        plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
        programs = [[s.op for s in n.fused.steps] for n in plan.graph.kernels() if n.fused]
        assert programs.count(["pow_scalar", "mean", "add_scalar", "rsqrt"]) == 2
        assert len(plan.graph.kernels()) == 5  # 2 per norm, and the linear with its epilogue


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.int64, torch.uint8])
@pytest.mark.parametrize(
    "how",
    [
        ("any", {"dim": 1}),
        ("all", {"dim": -1, "keepdim": True}),  # core ATen: not(any(not x))
        ("any", {"dim": (0, 2)}),
        ("all", {"dim": (0, 1, 2), "keepdim": True}),
    ],
)
def test_any_and_all_map_to_truth_reductions(how, dtype) -> None:
    f, kw = how

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(torch, f)(x, **kw)

    rng = np.random.default_rng(0)
    values = rng.choice([0.0, 0.0, 1.0, 2.0, 1.0, float("nan")], size=(3, 4, 2))
    if dtype != torch.float32:
        values = np.nan_to_num(values, nan=5.0)
    x = torch.from_numpy(values).to(dtype)
    x[0] = 1  # a slice with no zero, so all() is true somewhere
    model = from_module(M(), (x,))
    verify(model.graph)
    (red,) = [k for k in model.graph.kernels() if model.targets[k.name].startswith("aten.any")]
    if dtype == torch.uint8:  # no kernel computes on uint8: opaque, each saying so
        assert model.opaque and all("uint8" in o.reason for o in model.opaque), model.opaque
    else:
        assert not model.opaque and red.op == "any_dims"
    with torch.no_grad():
        want = M()(x).numpy()
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_array_equal(got, want)


def test_torch_transformer_encoder_layers_import_without_opaque_ops() -> None:
    # torch's own MultiheadAttention: a scaled q and k of permuted heads (element-wise ops
    # of permuted views), softmax's guard against fully masked rows (x == -inf, any,
    # full_like, where) and a clone of the permuted heads back
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        want = enc(x).numpy()
    model = from_module(enc, (x,))
    assert not model.opaque, model.opaque_counts()
    for streams in (1, 4):
        plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=True)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class Products(nn.Module):
    """torch.prod over one dim and every element, sums of bool and integer tensors, and
    cumulative products, of floats, bool, int32 and int64 (int64 products wrap around)."""

    def forward(self, x, b, i, big):
        return (
            x.prod(1, keepdim=True),
            torch.prod(x, -1) * 2.0,  # an epilogue fused after the product
            x.prod(),
            b.prod(0),
            i.prod(dim=1),
            big.prod(),  # 2**40 * 2**40 ...: wraps modulo 2**64 as in torch
            i.sum(1),
            i.sum(),
            big.sum((0, 1)),
            b.sum((0,)),
            b.sum(),
            torch.cumprod(x, 1),
            torch.cumprod(i, 0),
            torch.cumprod(b, 1),
            torch.cumprod(big, 1),
            x.half().prod(0),
        )


def _products_args() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    x[0, 1] = float("nan")
    x[2, 0] = -0.0
    b = torch.rand(3, 4) > 0.3
    i = torch.randint(-5, 6, (3, 4), dtype=torch.int32)
    big = torch.tensor([[2**40, 3, -(2**30)], [2**40 + 7, -1, 2**62]])
    return x, b, i, big


def test_prods_cumprods_and_integer_sums_map_to_library_ops() -> None:
    model, eager = import_with_eager(Products(), _products_args())
    assert model.opaque == (), model.opaque_counts()
    used = [n.op for n in model.graph.kernels()]
    assert used.count("prod_dims") == 7 and used.count("cumprod") == 4
    assert used.count("sum_int_dims") == 3 and used.count("count_dims") == 2
    for fusion in (False, True):
        for streams in (1, 3):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            verify(plan)
            got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
            for g, w in zip(got, eager, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype
                if w.dtype.kind in "biu":
                    np.testing.assert_array_equal(g, w)  # exact, wrapped as in torch
                else:
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # NaN where NaN


class IntExtremes(nn.Module):
    """argmax/argmin of integer tensors, as CLIP's text pooler finds its end token."""

    def forward(self, ids: torch.Tensor, big: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            ids.to(torch.int).argmax(dim=-1),
            big.argmin(),  # the flat index
            big.argmax(0, keepdim=True),
            torch.max(big, 1).indices,
            torch.min(ids, 0).indices,
        )


def test_integer_argmax_and_argmin_compare_exactly() -> None:
    # int64 values 1 apart past 2**53 and ties (the first extreme wins, as in torch)
    ids = torch.tensor([[3, 9, 9, 1], [4, 4, 0, 2]])
    big = torch.tensor([[2**62, 2**62 + 1, -(2**63)], [2**62 + 1, 2**62 + 1, -(2**63) + 1]])
    model, eager = import_with_eager(IntExtremes(), (ids, big))
    assert model.opaque == (), model.opaque_counts()
    used = sorted(n.op for n in model.graph.kernels() if "arg" in (n.op or ""))
    assert used == ["argmax_int_dims"] * 3 + ["argmin_int_dims"] * 2
    assert_simulates_exactly(model, eager)


class IntMaxima(nn.Module):
    """The values: torch.max/min of an integer tensor (XLM's lengths.max()), over every
    element or a dim, amax and amin."""

    def forward(self, ids: torch.Tensor, big: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.max(big),
            ids.to(torch.int).min(),
            big.amax(0, keepdim=True),
            torch.max(big, 1).values,
            torch.min(ids.to(torch.int), 0).values,
            ids.amin(dim=(0, 1)),
        )


def test_integer_max_and_min_are_exact_in_their_dtype() -> None:
    # int64 values 1 apart past 2**53: float32 block reductions could not tell them apart
    ids = torch.tensor([[3, 9, 9, 1], [4, 4, 0, 2]])
    big = torch.tensor([[2**62, 2**62 + 1, -(2**63)], [2**62 + 1, 2**62 + 3, -(2**63) + 1]])
    model, eager = import_with_eager(IntMaxima(), (ids, big))
    assert model.opaque == (), model.opaque_counts()
    used = sorted(n.op for n in model.graph.kernels() if "_int_dims" in (n.op or ""))
    assert used == ["amax_int_dims"] * 3 + ["amin_int_dims"] * 3
    assert_simulates_exactly(model, eager)


def test_a_bool_sum_of_2_to_the_24_elements_is_exact() -> None:
    # count_dims counts in float (exact below 2**24): from there on sum_int_dims, in int64
    class Count(nn.Module):
        def forward(self, b):
            return b.sum(), b[:8].sum()

    b = torch.ones(2**24 + 1, dtype=torch.bool)
    model, eager = import_with_eager(Count(), (b,))
    assert model.opaque == ()
    assert sorted(n.op for n in model.graph.kernels()) == ["count_dims", "sum_int_dims"]
    got = model.outputs_from(evaluate(model.graph, model.inputs))
    assert [int(g) for g in got] == [2**24 + 1, 8] == [int(w) for w in eager]


def test_a_dtype_naming_the_plain_result_dtype_is_the_plain_op() -> None:
    # sum/prod/mean/cumsum/cumprod/vector_norm with dtype= torch's result has anyway: the
    # library op
    class M(nn.Module):
        def forward(self, i, x, y):
            return (
                i.sum(1, dtype=torch.int64),
                i.prod(dtype=torch.int64),
                torch.cumsum(i, 0, dtype=torch.int64),
                x.mean(0, dtype=torch.float32),
                torch.cumprod(x, 1, dtype=torch.float32),
                torch.linalg.vector_norm(x, 2, 1, dtype=torch.float32),
                y.mean((2, 3), dtype=torch.float32),  # a pooler
            )

    i = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
    model, eager = import_with_eager(M(), (i, torch.randn(3, 4), torch.randn(2, 3, 4, 5)))
    assert model.opaque == (), model.opaque
    got = model.outputs_from(evaluate(model.graph, model.inputs))
    for g, w in zip(got, eager, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_an_op_whose_shape_a_library_rule_refuses_stays_opaque_saying_why() -> None:
    # argmax counts its index in float (exact below 2**24): over more elements the library's
    # shape rule refuses it, so the import leaves it opaque with that reason (it used to map
    # it anyway, to a kernel that failed only when a plan bound it) and eager's answer holds
    class Arg(nn.Module):
        def forward(self, x):
            return x.argmax(), x[:16].argmax()

    x = torch.zeros(2**24 + 3, dtype=torch.float16)
    x[2**24 + 1] = 1.0  # the answer needs the index's low bits
    model, eager = import_with_eager(Arg(), (x,))
    (why,) = [o.reason for o in model.opaque]
    assert why.startswith("its operands' shapes do not fit the library's argmax_dims")
    assert "indices from 2**24 on are not exact" in why
    assert [n.op for n in model.graph.kernels()].count("argmax_dims") == 1  # the short one
    got = model.outputs_from(evaluate(model.graph, model.inputs))
    assert [int(g) for g in got] == [2**24 + 1, 0] == [int(w) for w in eager]


def test_prods_and_sums_torch_computes_otherwise_stay_opaque_saying_why() -> None:
    class M(nn.Module):
        def forward(self, x, u):
            return (
                x.prod(1, dtype=torch.float64),
                u.sum(0),
                torch.cumprod(x, 0, dtype=torch.float64),
            )

    model, eager = import_with_eager(M(), (torch.randn(2, 3), torch.ones(2, 3, dtype=torch.uint8)))
    reasons = sorted(o.reason for o in model.opaque)
    assert len(reasons) == 3, reasons
    # (a dtype= torch's own result would not have: the library op's differs)
    assert sum("it computes float64; the library's" in r for r in reasons) == 2
    assert any("input 0 is uint8; sum_int_dims sums bool, int32 and int64" in r for r in reasons)
    got = model.outputs_from(evaluate(model.graph, model.inputs))
    for g, w in zip(got, eager, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("decomposed", [True, False])
def test_max_and_min_over_a_dim_are_extremes_and_their_indices_as_torch(decomposed) -> None:
    # torch.max/min(x, dim): values NaN-propagating (amax/amin), indices of the first
    # extreme with a NaN counting as one (argmax/argmin), ties of -0.0 and 0.0 too; one
    # kernel per output used (a program not decomposed keeps the unused getitem: no kernel)
    class M(nn.Module):
        def forward(self, x):
            v, i = torch.max(x, 1)
            w, j = torch.min(x, -1, keepdim=True)
            return v, i, w, j, torch.max(x, 0)[1], x.max(dim=-1).values * 2

    s = torch.tensor([float("nan"), 1.0, 1.0, -0.0, 0.0, -2.0, float("inf"), -float("inf"), 1.0])
    x = torch.stack([s, s.flip(0), torch.ones(9), s.roll(3), torch.tensor([0.0, -0.0] * 4 + [0.0])])
    if decomposed:
        model, eager = import_with_eager(M(), (x,))
    else:
        model = from_exported_program(torch.export.export(M(), (x,)))
        with torch.no_grad():
            eager = [t.numpy() for t in M()(x)]
    assert model.opaque == (), model.opaque
    ops_used = sorted(k.op for k in model.graph.kernels())
    assert ops_used == sorted(
        ["amax", "argmax_dims", "amin_dims", "argmin_dims", "argmax_dims", "amax", "scale"]
    )
    got = model.outputs_from(evaluate(model.graph, model.inputs))
    for g, w in zip(got, eager, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)  # (NaN == NaN here)
