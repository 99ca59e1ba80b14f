"""``grouped_mm`` of ``oxiwork.ops.lib_reduce``: the mixture-of-experts grouped matmul
(transformers' ``grouped_mm_fallback``, ``torch._grouped_mm`` of a 2-d input).

On hypothesis-drawn sizes and offsets (non-decreasing, with empty groups and rows past the
last offset) in every float dtype, with int32 and int64 offsets: the reference equals
transformers' loop of ``torch.mm`` calls (within the summation bound: both sides are
float32 sums in different orders), ``transposed=1`` equals the op on the transposed
weight, the generated CUDA C run on the CPU (the emulated launcher of ``tests/executor``)
equals the reference within the same bound, alone and with an element-wise epilogue fused
after it (then the fused C equals the unfused C bit for bit), NaN, infinities, -0.0 and
denormals included; NVRTC compiles it; the reference refuses offsets that decrease, are
negative or exceed the rows, and the shape and dtype rules refuse what they must.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source, lib_reduce
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.ops.test_dtypes import _bits_equal, _c_graph
from tests.ops.test_special_values import SUM_BOUND, U, assert_close, values

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
FLOATS = ("float32", "float16", "bfloat16")
NP = {"float32": np.dtype(F32), "float16": np.dtype(np.float16), "bfloat16": BF16}
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")


@st.composite
def cases(draw, specials: bool = False):
    """(x, w, offs, transposed) with x (S, K), w (E, K, N) or (E, N, K), offs (E,) sorted
    counts in [0, S]: empty groups (equal neighbours, a 0 first) and rows past the last
    offset come up often. ``specials``: float32 values, a third NaN, ±inf, ±0, denormals."""
    dtype = "float32" if specials else draw(st.sampled_from(FLOATS))
    s, k, n, e = (draw(st.integers(1, hi)) for hi in (9, 6, 5, 4))
    ends = sorted(draw(st.lists(st.integers(0, s), min_size=e, max_size=e)))
    offs = np.array(ends, draw(st.sampled_from(["int32", "int64"])))
    transposed = draw(st.booleans())
    el = values(SUM_BOUND) if specials else st.floats(-4, 4, width=32)
    # every element drawn (no fill value): a constant weight would hide a transposed read
    x = draw(hnp.arrays(F32, (s, k), elements=el, fill=st.nothing())).astype(NP[dtype])
    w = draw(
        hnp.arrays(F32, (e, n, k) if transposed else (e, k, n), elements=el, fill=st.nothing())
    )
    return x, w.astype(NP[dtype]), offs, transposed


def _fallback(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """transformers' ``_grouped_mm_fallback`` (integrations/moe.py), as it is written."""
    output = torch.zeros(x.size(0), w.size(2), dtype=x.dtype)
    start = 0
    for i, end in enumerate(offs.tolist()):
        if start == end:
            continue
        torch.mm(x[start:end], w[i], out=output[start:end])
        start = end
    return output


def _t(a: np.ndarray) -> torch.Tensor:
    # bfloat16 through float32 (exact); torch has no numpy bfloat16
    if a.dtype == BF16:
        return torch.from_numpy(a.astype(F32)).to(torch.bfloat16)
    return torch.from_numpy(a)


def _plain(w: np.ndarray, transposed: bool) -> np.ndarray:
    """The weight as (E, K, N), whichever way it is stored."""
    return np.ascontiguousarray(np.swapaxes(w, 1, 2)) if transposed else w


def _group_of(s: int, ends: list[int]) -> np.ndarray:
    """Each row's group, the first ``g`` with ``r < ends[g]``; -1 for none (the spec)."""
    out = np.full(s, -1)
    for r in range(s):
        out[r] = next((g for g, end in enumerate(ends) if r < end), -1)
    return out


def _bound(x: np.ndarray, w: np.ndarray, offs: np.ndarray, transposed: bool) -> np.ndarray:
    """The absolute difference two float32 sums of the same products may show, in any two
    orders: each is within gamma_K sum|x_k w_k| of the exact sum (N. J. Higham, "Accuracy
    and Stability of Numerical Algorithms", 2nd ed., 2002, section 3.1), so twice that
    (2 (K + 2) u: gamma_K's 1 / (1 - K u) generously), and 2**-120 absolute below the
    normal range. Rows in no group are exactly 0 on both sides (tolerance 0)."""
    ax = np.abs(np.where(np.isfinite(x), x, 0).astype(np.float64))
    aw = np.abs(np.where(np.isfinite(w), w, 0).astype(np.float64))
    aw = _plain(aw, transposed)
    groups = _group_of(x.shape[0], offs.astype(np.int64).tolist())
    tol = np.zeros((x.shape[0], aw.shape[2]))
    for r, g in enumerate(groups):
        if g >= 0:
            tol[r] = 2 * (x.shape[1] + 2) * U * (ax[r] @ aw[g]) + 2.0**-120
    return tol


def _half_close(got: np.ndarray, want: np.ndarray, tol: np.ndarray, what: str) -> None:
    """float16/bfloat16 results each rounded once from float32 sums within ``tol`` of each
    other: at most one ulp of the dtype apart (half an ulp each way) plus ``tol``."""
    g, w = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{what}: NaNs {got} vs {want}"
    big = np.maximum(np.abs(g), np.abs(w)).astype(F32).astype(want.dtype)
    ulp = np.abs(np.spacing(big).astype(np.float64))
    with np.errstate(invalid="ignore"):
        fine = (g == w) | (np.abs(g - w) <= ulp + tol.reshape(-1)) | np.isnan(w)
    bad = np.flatnonzero(~fine)
    assert bad.size == 0, f"{what}: differs at {bad[:8].tolist()}: {g[bad[:8]]} vs {w[bad[:8]]}"


def _close(got: np.ndarray, want: np.ndarray, tol: np.ndarray, what: str) -> None:
    if want.dtype == F32:
        assert_close(got, want, what, ulps=2, tol=tol)
    else:
        _half_close(got, want, tol, what)


def _reference(x, w, offs, transposed) -> np.ndarray:
    """The op on the float32 values, rounded once to x's dtype (what the op table does)."""
    xs = [x.astype(F32), w.astype(F32), offs]
    with np.errstate(all="ignore"):  # inf - inf is NaN, as on the GPU (compute_into's rule)
        out = ops.get("grouped_mm").reference(xs, transposed=float(transposed))
    return out.astype(x.dtype)


def _graph(x, w, offs, transposed: bool, epilogue: str | None = None):
    """One grouped_mm kernel of external x, w, offs (then ``epilogue`` on its result)."""
    dtype = x.dtype.name
    b = GraphBuilder()
    bufs = [
        b.alloc_external_buffer(name, a.nbytes, dtype=a.dtype.name, shape=a.shape)
        for name, a in (("x", x), ("w", w), ("offs", offs))
    ]
    shape = (x.shape[0], w.shape[1] if transposed else w.shape[2])
    size = DTYPES[dtype] * math.prod(shape)
    mid = b.alloc_buffer("mid" if epilogue else "out", size, dtype=dtype, shape=shape)
    b.add_kernel("gmm", 2, 32).op("grouped_mm").params(transposed=float(transposed)).inputs(
        bufs
    ).outputs([mid]).fusible(True).finish()
    if epilogue:
        out = b.alloc_buffer("out", size, dtype=dtype, shape=shape)
        b.add_kernel(epilogue, 2, 32).op(epilogue).inputs([mid]).outputs([out]).fusible(
            True
        ).finish()
    return b.build()


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("grouped_mm_kernels")


class TestRules:
    @pytest.mark.parametrize(
        "offs, match",
        [
            ([2, 1], r"offsets decrease: offs\[1\] = 1 < offs\[0\] = 2"),
            ([1, 5], r"offs\[1\] = 5 is out of range for the 4 rows of x.*\[0, 4\]"),
            ([-1, 2], r"offs\[0\] = -1 is out of range for the 4 rows of x"),
        ],
    )
    def test_raises_on_offsets_the_reference_cannot_group(self, offs, match):
        x, w = np.ones((4, 3), F32), np.ones((2, 3, 5), F32)
        with pytest.raises((ValueError, IndexError), match=match):
            ops.get("grouped_mm").reference([x, w, np.array(offs, np.int32)])

    def test_raises_on_decreasing_offsets_in_the_simulator(self):
        x, w, offs = np.ones((4, 3), F32), np.ones((2, 3, 5), F32), np.array([3, 1])
        plan = ExecutionPlan.build(_graph(x, w, offs, False))
        with pytest.raises(Exception, match=r"grouped_mm offsets decrease"):
            SequentialExecutor(plan).run({"x": x, "w": w, "offs": offs})

    @pytest.mark.parametrize(
        "shapes, params, match",
        [
            ([(4, 3, 1), (2, 3, 5), (2,)], {}, r"needs x of shape \[S, K\], a weight \[E, K, N\]"),
            ([(4, 3), (3, 5), (2,)], {}, r"got \(4, 3\), \(3, 5\) and \(2,\)"),
            ([(4, 3), (2, 3, 5), (2, 1)], {}, r"offsets \[E\]"),
            (
                [(4, 3), (2, 4, 5), (2,)],
                {},
                r"x \(4, 3\) has K = 3, the weight \(2, 4, 5\) read as \[E, K, N\] K = 4",
            ),
            ([(4, 3), (2, 3, 5), (3,)], {}, r"weight \(2, 3, 5\) has 2 groups, the offsets 3"),
            (
                [(4, 3), (2, 3, 5), (2,)],
                {"transposed": 1.0},
                r"as \[E, N, K\] \(transposed=1\) K = 5",
            ),
            ([(4, 3), (2, 5, 3), (2,)], {"transposed": 0.5}, r"transposed=0.5 must be 0"),
        ],
    )
    def test_raises_naming_the_shape_problem(self, shapes, params, match):
        op = ops.get("grouped_mm")
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")

    @pytest.mark.parametrize(
        "dtypes, match",
        [
            (["float32", "float32", "float32"], r"offsets \(input 2\) are float32.*cast_int32"),
            (["float16", "float32", "int32"], r"weight \(input 1\) is float32.*cast_float16"),
            (["int64", "int64", "int64"], r"x \(input 0\) is int64"),
        ],
    )
    def test_raises_naming_the_dtype_problem(self, dtypes, match):
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_dtype(ops.get("grouped_mm"), dtypes, {"transposed": 0.0}, "t")

    @pytest.mark.parametrize("d", FLOATS)
    @pytest.mark.parametrize("i", ["int32", "int64"])
    def test_result_is_xs_dtype_and_shape_s_by_n(self, d, i):
        op = ops.get("grouped_mm")
        assert ops.infer_dtype(op, [d, d, i], op.defaults, "t") == d
        assert ops.infer_shape(op, [(7, 3), (2, 3, 5), (2,)], op.defaults, "t") == (7, 5)
        assert ops.infer_shape(op, [(7, 3), (2, 5, 3), (2,)], {"transposed": 1.0}, "t") == (7, 5)

    def test_is_an_out_elementwise_head_costing_two_s_k_n_flops(self):
        op = ops.get("grouped_mm")
        assert op is lib_reduce.GROUPED_MM and op.fusion_class is ops.FusionClass.OUT_ELEMENTWISE
        assert op.defaults == {"transposed": 0.0} and "grouped_mm" not in lib_reduce.MATMULS
        flops, moved = op.op_cost([(7, 3), (2, 3, 5), (2,)], (7, 5))
        assert flops == 2 * 7 * 3 * 5 and moved == 4 * (21 + 30 + 2 + 35)


class TestReference:
    @SETTINGS
    @given(case=cases())
    def test_equals_transformers_fallback(self, case):
        x, w, offs, transposed = case
        want = _fallback(_t(x), _t(_plain(w, transposed)), torch.from_numpy(offs))
        got = _reference(x, w, offs, transposed)
        assert got.dtype == x.dtype and got.shape == tuple(want.shape)
        tol = _bound(x, w, offs, transposed)
        theirs = want.float().numpy().astype(x.dtype)
        # float32: two float32 sums (BLAS's orders) within the bound; halves: torch's CPU
        # mm of float16/bfloat16 accumulates in float32 and rounds once, as the op does
        _close(got, theirs, tol, f"{x.dtype}: reference vs transformers' fallback")
        none = _group_of(x.shape[0], offs.tolist()) < 0
        _bits_equal(got[none], np.zeros_like(got[none]), "rows in no group are +0.0")

    def test_is_transformers_own_fallback(self):
        moe = pytest.importorskip("transformers.integrations.moe")
        rng = np.random.default_rng(0)
        x, w = rng.normal(size=(9, 4)).astype(F32), rng.normal(size=(3, 4, 5)).astype(F32)
        offs = np.array([2, 2, 7], np.int32)
        theirs = moe._grouped_mm_fallback(_t(x), _t(w), torch.from_numpy(offs)).numpy()
        tol = _bound(x, w, offs, False)
        assert_close(_reference(x, w, offs, False), theirs, "vs transformers", ulps=2, tol=tol)
        assert np.array_equal(_fallback(_t(x), _t(w), torch.from_numpy(offs)).numpy(), theirs)

    @SETTINGS
    @given(case=cases())
    def test_transposed_is_the_op_on_the_transposed_weight(self, case):
        x, w, offs, transposed = case
        w = _plain(w, transposed)
        stored = np.ascontiguousarray(np.swapaxes(w, 1, 2))  # (E, N, K) of the same values
        got = _reference(x, stored, offs, True)
        want = _reference(x, w, offs, False)
        # numpy hands BLAS the transposed view with a transpose flag: its order may differ
        _close(got, want, _bound(x, w, offs, False), "transposed=1 vs plain")


@needs_cxx
@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestGeneratedC:
    @SETTINGS
    @given(
        case=st.one_of(cases(), cases(specials=True)),
        epilogue=st.sampled_from(["relu", "silu"]),
    )
    def test_c_equals_the_reference_alone_and_fused(self, case, epilogue, so_dir):
        # The C sums each dot product in k order, numpy's BLAS in its own: float32 results
        # agree within the summation bound (a few ulp unless the sum cancels), halves
        # within one ulp of theirs more. The epilogue fused after the head computes what
        # its own kernel computes from the head's rounded value: bit for bit.
        x, w, offs, transposed = case
        inputs = {"x": x, "w": w, "offs": offs}
        g = _graph(x, w, offs, transposed)
        want = evaluate(g, inputs)["out"]
        _bits_equal(want, _reference(x, w, offs, transposed), "evaluator vs reference")
        sim = SequentialExecutor(ExecutionPlan.build(g, max_streams=1)).run(inputs)
        _bits_equal(sim.outputs["out"], want, "simulator")
        alone = _c_graph(g, inputs, so_dir)
        _close(alone, want, _bound(x, w, offs, transposed), f"{x.dtype}: C vs reference")
        none = _group_of(x.shape[0], offs.tolist()) < 0
        _bits_equal(alone[none], np.zeros_like(alone[none]), "C: rows in no group are +0.0")

        chain = _graph(x, w, offs, transposed, epilogue)
        plan = ExecutionPlan.build(chain, max_streams=1, fusion=True)
        (kernel,) = plan.graph.kernels()
        assert kernel.fused is not None, "the epilogue fused after the grouped_mm head"
        fused = _c_graph(plan.graph, inputs, so_dir)
        _bits_equal(fused, _c_graph(chain, inputs, so_dir), f"fused vs unfused C ({epilogue})")
        if epilogue == "relu":  # exact and 1-Lipschitz: the head's tolerance carries over
            ref = evaluate(chain, inputs)["out"]
            _close(fused, ref, _bound(x, w, offs, transposed), "fused C vs reference")

    @SETTINGS
    @given(case=cases())
    def test_transposed_c_is_the_plain_c_bit_for_bit(self, case, so_dir):
        # the same products summed in the same order, the weight read at other strides
        x, w, offs, transposed = case
        plain = _plain(w, transposed)
        stored = np.ascontiguousarray(np.swapaxes(plain, 1, 2))
        a = _c_graph(_graph(x, plain, offs, False), {"x": x, "w": plain, "offs": offs}, so_dir)
        b = _c_graph(_graph(x, stored, offs, True), {"x": x, "w": stored, "offs": offs}, so_dir)
        _bits_equal(b, a, "transposed=1 vs plain, generated C")

    def test_c_gives_each_row_the_first_group_past_it_whatever_the_offsets(self, so_dir):
        # offsets the reference refuses still give defined C (it cannot raise): row r takes
        # the first group g with r < offs[g], none: 0
        rng = np.random.default_rng(1)
        x = rng.integers(-3, 4, (6, 2)).astype(F32)  # small integers: every sum is exact
        w = rng.integers(-3, 4, (4, 2, 3)).astype(F32)
        offs = np.array([-2, 4, 1, 99], np.int64)
        c = _c_graph(_graph(x, w, offs, False), {"x": x, "w": w, "offs": offs}, so_dir)
        groups = _group_of(6, offs.tolist())
        assert groups.tolist() == [1, 1, 1, 1, 3, 3]
        want = np.stack([x[r] @ w[g] for r, g in enumerate(groups)])
        _bits_equal(c, want.astype(F32), "C on unsorted offsets")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("idtype", ["int32", "int64"])
def test_nvrtc_compiles_alone_transposed_and_fused(nvrtc_compile, dtype, idtype):
    for transposed in (False, True):
        x = np.zeros((5, 3), NP[dtype])
        w = np.zeros((2, 4, 3) if transposed else (2, 3, 4), NP[dtype])
        offs = np.array([2, 4], idtype)
        for epilogue in (None, "silu"):
            g = _graph(x, w, offs, transposed, epilogue)
            g = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
            for node in g.kernels():
                ks = kernel_source(g, node)
                assert "grouped_mm" in ks.source
                nvrtc_compile(ks.source, f"grouped_mm_{dtype}_{idtype}_{epilogue}")
