"""The ops a mixture-of-experts router exports to: ``histc``, ``cumsum_<dtype>``,
``index_put``, ``scatter_value`` (``oxiwork.ops.lib_dtype``) and ``floor_divide_scalar``,
``trunc_divide_scalar``, ``remainder_int_scalar`` (``oxiwork.ops.lib_elementwise``).

On hypothesis-drawn inputs (the integer divisions and remainder: every pair of a pool of
dividends over the whole int64 and int32 range and of divisors of both signs), each
reference equals torch's op (histc bins on values at and near the bin edges, NaN and
out-of-range ones; cumsum with a dtype over floats, ints and bool; index_put with negative
and repeated indices where torch's result is defined; scatter of a number, an infinity too,
along any dim of an index smaller than the input); the generated CUDA C run on the CPU (the
emulated launcher of ``tests/executor``) equals the reference bit for bit, alone and with an
element-wise epilogue fused after it; NVRTC compiles it; and what each op refuses, it
refuses naming the rule.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.ops.test_dtypes import _bits_equal, _run_c

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)


# ----------------------------------------------------------------------------- cases
@st.composite
def histc_cases(draw):
    """(x, params): float32 values on, between and beside the edges of the bins."""
    bins = draw(st.integers(1, 9))
    lo = draw(st.sampled_from([0.0, -1.0, -3.5, 2.0]))
    hi = lo + draw(st.sampled_from([1.0, 3.0, 7.0, 0.1, 100.0]))
    edges = np.linspace(lo, hi, bins + 1)
    pool = [*edges, *(edges + 1e-6), *(edges - 1e-6), lo - 1, hi + 1, np.nan, np.inf, -np.inf]
    n = draw(st.integers(1, 40))
    x = np.array(draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n)), np.float32)
    if draw(st.booleans()):
        x = x.reshape(-1, 1) if draw(st.booleans()) else x
    return x, {"bins": float(bins), "min": lo, "max": hi}


@st.composite
def cumsum_cases(draw):
    """(x, params, dtype): a cumsum of x along dim with torch's dtype= argument."""
    src = draw(st.sampled_from(["float32", "int64", "int32", "bool"]))
    to = draw(st.sampled_from(["int64", "int32", "float32"]))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    count = math.prod(shape)
    if src == "float32":  # whole numbers and fractions, both signs, within int32
        values = st.sampled_from([0.0, 1.0, 2.5, -2.5, 7.75, -0.0, 1e6, -3e6])
    elif src == "bool":
        values = st.booleans()
    else:  # wrapping around int32 (an int32 result of int64 sums)
        info = I64 if src == "int64" else I32
        values = st.sampled_from([0, 1, -1, 7, info.max, info.min, I32.max, I32.min])
    x = np.array(draw(st.lists(values, min_size=count, max_size=count)), src).reshape(shape)
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    return x, {"dim": float(dim)}, to


@st.composite
def index_put_cases(draw):
    """(x, idx, values): rows of x written, indices negative too and repeated only where
    they write one value (torch leaves which value lands unspecified otherwise)."""
    dtype = draw(st.sampled_from(["float32", "int64", "int32", "bool"]))
    n = draw(st.integers(1, 6))
    rest = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    x = np.arange(n * math.prod(rest)).reshape((n, *rest)).astype(dtype)
    m = draw(st.integers(1, 8))
    idx = np.array(draw(st.lists(st.integers(-n, n - 1), min_size=m, max_size=m)), np.int64)
    vshape = draw(st.sampled_from([(m, *rest), rest or (1,), (1,) * (1 + len(rest)), (1,)]))
    vals = (100 + np.arange(math.prod(vshape))).reshape(vshape).astype(dtype)
    if vshape == (m, *rest):  # repeated rows write one value: the last one's
        rows = np.where(idx < 0, idx + n, idx)
        for q in range(m):
            vals[q] = vals[np.nonzero(rows == rows[q])[0][-1]]
    if draw(st.booleans()):
        idx = idx.astype(np.int32)
    return x, idx, vals


def _divisions() -> list[tuple[np.ndarray, float]]:
    """(x, other): every integer of a pool over the whole range (its ends, around 0), by
    every divisor of a pool of both signs up to the type's range (int64: 2**53, what a
    float parameter holds exactly); all of them, since one missed pair is one wrong op."""
    cases = []
    for info in (I64, I32):
        x = np.array([info.min, info.min + 1, -7, -6, -1, 0, 1, 6, 7, info.max], info.dtype)
        big = (info.max, info.min) if info is I32 else (2**53, -(2**53))
        cases += [(x, float(o)) for o in (1, -1, 2, -2, 3, -7, 1000, *big)]
    return cases


DIVISIONS = _divisions()


@st.composite
def scatter_cases(draw):
    """(x, idx, params): a number (an infinity for floats) scattered along dim."""
    dtype = draw(st.sampled_from(["float32", "int64", "int32", "bool"]))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    axis = dim % len(shape)
    ishape = tuple(
        draw(st.integers(1, 5)) if k == axis else draw(st.integers(1, n))
        for k, n in enumerate(shape)
    )
    count = math.prod(ishape)
    flat = draw(st.lists(st.integers(0, shape[axis] - 1), min_size=count, max_size=count))
    idx = np.array(flat).reshape(ishape)
    x = np.arange(math.prod(shape)).reshape(shape).astype(dtype)
    params = {"dim": float(dim), "value": 0.0, "infinite": 0.0}
    if dtype == "float32" and draw(st.booleans()):
        params["infinite"] = draw(st.sampled_from([-1.0, 1.0]))
    elif dtype == "bool":
        params["value"] = float(draw(st.booleans()))
    else:
        params["value"] = float(draw(st.sampled_from([-7, 0, 3, 2**24, -(2**24)])))
    if draw(st.booleans()):
        idx = idx.astype(np.int32)
    return x, idx, params


def _t(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))


# ----------------------------------------------------------------------------- references
class TestReference:
    @SETTINGS
    @given(case=histc_cases())
    def test_histc_is_torchs(self, case):
        x, p = case
        got = ops.get("histc").reference([x], **p)
        want = torch.histc(_t(x), bins=int(p["bins"]), min=p["min"], max=p["max"]).numpy()
        _bits_equal(got, want, "histc vs torch")

    @SETTINGS
    @given(case=cumsum_cases())
    # (found by the hunt profile: float32's cancellation, which torch's double sum avoids)
    @example(case=(np.array([[1], [2**31 - 1], [-(2**31)]]), {"dim": 0.0}, "float32"))
    def test_cumsum_with_a_dtype_is_torchs(self, case):
        x, p, to = case
        got = ops.get(f"cumsum_{to}").reference([x], **p)
        want = torch.cumsum(_t(x), int(p["dim"]), dtype=getattr(torch, to)).numpy()
        if to == "float32":
            # torch sums float32 in double on the CPU, the op in float32 in order: within
            # the float32 summation bound, n u sum|x| along the prefix (cancelling terms,
            # 1 + (2**31 - 1) - 2**31, lose the 1 in float32 and keep it in double)
            assert got.dtype == want.dtype
            axis = int(p["dim"]) % x.ndim
            mags = np.cumsum(np.abs(x.astype(np.float32).astype(np.float64)), axis=axis)
            bound = x.shape[axis] * 2.0**-24 * mags
            assert (np.abs(got.astype(np.float64) - want) <= bound).all()
        else:
            _bits_equal(got, want, f"cumsum to {to} vs torch")

    @SETTINGS
    @given(case=index_put_cases())
    def test_index_put_is_torchs(self, case):
        x, idx, vals = case
        got = ops.get("index_put").reference([x, idx, vals])
        want = torch.index_put(_t(x), (_t(idx).long(),), _t(vals)).numpy()
        _bits_equal(got, want, "index_put vs torch")

    @SETTINGS
    @given(case=scatter_cases())
    def test_scatter_of_a_value_is_torchs(self, case):
        x, idx, p = case
        got = ops.get("scatter_value").reference([x, idx], **p)
        value = p["infinite"] * math.inf if p["infinite"] else p["value"]
        if x.dtype != np.float32:
            value = int(value) if x.dtype != np.bool_ else bool(value)
        want = torch.scatter(_t(x), int(p["dim"]), _t(idx).long(), value).numpy()
        _bits_equal(got, want, "scatter_value vs torch")

    def test_index_put_writes_the_last_of_repeated_indices(self):
        x = np.zeros(3, np.float32)
        got = ops.get("index_put").reference([x, np.array([1, -2, 0]), np.array([5, 6, 7], np.float32)])  # fmt: skip
        assert got.tolist() == [7.0, 6.0, 0.0]

    @pytest.mark.parametrize("case", DIVISIONS, ids=lambda c: f"{c[0].dtype}/{c[1]:g}")
    def test_rounding_divisions_are_torchs(self, case):
        x, other = case
        rem = ops.get("remainder_int_scalar").reference([x], other=other)
        assert rem.dtype == x.dtype
        want = torch.remainder(_t(x), int(other)).numpy()
        if other == -1:  # (torch's CPU kernel traps on the lowest integer there)
            assert (rem == 0).all()
        else:
            np.testing.assert_array_equal(rem, want)
        for mode in ("floor", "trunc"):
            got = ops.get(f"{mode}_divide_scalar").reference([x], other=other)
            assert got.dtype == x.dtype
            for k, (a, q) in enumerate(zip(x.tolist(), got.tolist(), strict=True)):
                if a == np.iinfo(x.dtype).min and other == -1:
                    assert q == a, "the lowest integer by -1 wraps to itself"
                    continue  # (torch's CPU kernel traps there: SIGFPE)
                want = torch.div(_t(x[k : k + 1]), int(other), rounding_mode=mode).item()
                assert q == want, (mode, a, other)

    @pytest.mark.parametrize(
        ("name", "shapes", "params", "match"),
        [
            ("histc", [(4,)], {"bins": 0.0}, r"bins=0\.0 must be a whole number >= 1"),
            ("histc", [(4,)], {"min": 1.0, "max": 1.0}, r"min < max"),
            ("histc", [(2**12, 2**12)], {}, r"exact below 16777216 elements"),
            ("index_put", [(4, 3), (2, 2), (2, 3)], {}, r"a vector of row indices"),
            ("index_put", [(4, 3), (2,), (3, 3)], {}, r"do not broadcast to the rows written"),
            ("index_put", [(), (2,), ()], {}, r"at least one axis"),
            ("cumsum_int32", [(4,)], {"dim": 1.0}, r"dim 1\.0 is not an axis"),
            ("scatter_value", [(4, 3), (2, 4)], {"dim": 0.0}, r"no larger than it but along"),
            ("scatter_value", [(4, 3), (2,)], {"dim": 0.0}, r"with the input's 2 axes"),
        ],
    )
    def test_shape_rules_refuse_naming_the_rule(self, name, shapes, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")

    @pytest.mark.parametrize(
        ("name", "dtypes", "params", "match"),
        [
            ("histc", ["float16"], {}, r"histc counts float32 values"),
            ("index_put", ["float32", "float32", "float32"], {}, r"int64 or int32 indices"),
            ("index_put", ["float32", "int64", "int64"], {}, r"cast them first"),
            ("floor_divide_scalar", ["float32"], {"other": 2.0}, r"take int64 or int32"),
            ("remainder_int_scalar", ["int32"], {"other": 0.0}, r"division by zero"),
            (
                "floor_divide_scalar",
                ["int32"],
                {"other": 2.0**31},
                r"outside the range a int32 divisor",
            ),
            (
                "trunc_divide_scalar",
                ["int64"],
                {"other": 2.0**63},
                r"outside the range a int64 divisor",
            ),
            ("trunc_divide_scalar", ["int64"], {"other": 0.0}, r"division by zero"),
            ("floor_divide_scalar", ["int32"], {"other": 0.5}, r"not a whole number"),
            ("scatter_value", ["int64", "int64"], {"infinite": -1.0}, r"is an infinity"),
            ("scatter_value", ["int32", "int64"], {"value": 2.0**25}, r"at most 16777216"),
            ("scatter_value", ["float32", "int64"], {"infinite": 2.0}, r"must be -1, 0 or 1"),
            ("scatter_value", ["float32", "float32"], {}, r"int64 or int32 indices"),
        ],
    )
    def test_dtype_rules_refuse_naming_the_rule(self, name, dtypes, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_dtype(op, dtypes, {**op.defaults, **params}, "t")

    def test_references_refuse_indices_out_of_range(self):
        with pytest.raises(IndexError, match=r"index 3 is out of range .* \[-3, 3\)"):
            ops.get("index_put").reference([np.zeros(3), np.array([0, 3]), np.zeros(2)])
        scatter = ops.get("scatter_value")
        with pytest.raises(IndexError, match=r"index -1 is out of range .* \[0, 3\)"):
            scatter.reference([np.zeros(3), np.array([-1])], dim=0.0, value=1.0, infinite=0.0)


# ----------------------------------------------------------------------------- generated C
def _dtype(a: np.ndarray) -> str:
    return a.dtype.name


def _graph(name: str, arrays: list[np.ndarray], params: dict, epilogue: str | None = None):
    """One ``name`` kernel on inputs ``x0, x1, ...`` writing ``out`` (or ``mid``, then the
    element-wise ``epilogue`` writing ``out``)."""
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"x{k}", max(1, a.nbytes), dtype=_dtype(a), shape=a.shape)
        for k, a in enumerate(arrays)
    ]
    op = ops.get(name)
    full = {**op.defaults, **params}
    shape = ops.infer_shape(op, [a.shape for a in arrays], full, "t")
    dt = ops.infer_dtype(op, [_dtype(a) for a in arrays], full, "t")
    first = b.alloc_buffer("mid" if epilogue else "out", DTYPES[dt] * math.prod(shape), dtype=dt, shape=shape)  # fmt: skip
    b.add_kernel(name, 1, 32).op(name).params(**params).inputs(ins).outputs([first]).fusible(True).finish()  # fmt: skip
    if epilogue:
        out = b.alloc_buffer("out", DTYPES[dt] * math.prod(shape), dtype=dt, shape=shape)
        kb = b.add_kernel(epilogue, 1, 32).op(epilogue).params(other=3.0).inputs([first])
        kb.outputs([out]).fusible(True).finish()
    return b.build()


def _check_c(name: str, arrays: list[np.ndarray], params: dict, so_dir) -> None:
    g = _graph(name, arrays, params)
    feeds = {f"x{k}": a for k, a in enumerate(arrays)}
    want = evaluate(g, feeds)["out"]
    (got,) = _run_c(g, next(iter(g.kernels())), arrays, so_dir)
    _bits_equal(got, want, f"{name} generated C")
    sim = SequentialExecutor(ExecutionPlan.build(g)).run(feeds).outputs["out"]
    _bits_equal(sim, want, f"{name} simulator")


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("routing_kernels")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestGeneratedC:
    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=histc_cases())
    def test_histc(self, case, so_dir):
        x, p = case
        _check_c("histc", [x], p, so_dir)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=cumsum_cases())
    def test_cumsum_with_a_dtype(self, case, so_dir):
        x, p, to = case
        _check_c(f"cumsum_{to}", [x], p, so_dir)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=index_put_cases())
    def test_index_put(self, case, so_dir):
        _check_c("index_put", list(case), {}, so_dir)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=scatter_cases())
    def test_scatter_value(self, case, so_dir):
        x, idx, p = case
        _check_c("scatter_value", [x, idx], p, so_dir)

    @pytest.mark.parametrize("case", DIVISIONS, ids=lambda c: f"{c[0].dtype}/{c[1]:g}")
    def test_rounding_divisions(self, case, so_dir):
        x, other = case
        for name in ("floor_divide_scalar", "trunc_divide_scalar", "remainder_int_scalar"):
            _check_c(name, [x], {"other": other}, so_dir)

    @pytest.mark.parametrize(
        ("name", "arrays", "params", "epilogue"),
        [
            (
                "histc",
                [np.array([0, 3, 1, 3, 2.5], np.float32)],
                {"bins": 4.0, "max": 3.0},
                "add_scalar",
            ),
            ("floor_divide_scalar", [np.array([-7, 7, 5], np.int64)], {"other": 2.0}, "add_scalar"),
            (
                "index_put",
                [np.zeros((3, 2), np.int64), np.array([2, 0]), np.array([[1, 2], [3, 4]])],
                {},
                "add_scalar",
            ),
            (
                "cumsum_int32",
                [np.array([1.0, 2.0, 0.0, 3.0], np.float32)],
                {"dim": 0.0},
                "add_scalar",
            ),
            (
                "scatter_value",
                [np.zeros((2, 3), np.float32), np.array([[2], [0]])],
                {"dim": 1.0, "infinite": -1.0},
                "add_scalar",
            ),
        ],
    )
    def test_an_epilogue_fuses_after_it(self, name, arrays, params, epilogue, so_dir):
        g = _graph(name, arrays, params, epilogue)
        feeds = {f"x{k}": a for k, a in enumerate(arrays)}
        want = evaluate(g, feeds)["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
        (node,) = plan.graph.kernels()  # the op and its epilogue: one kernel
        assert node.fused is not None
        (got,) = _run_c(plan.graph, node, arrays, so_dir)
        _bits_equal(got, want, f"{name} fused generated C")


def test_compiles_with_nvrtc(nvrtc_compile):
    cases = [
        ("histc", [np.zeros(5, np.float32)], {"bins": 4.0, "max": 3.0}),
        *(
            ("scatter_value", [np.zeros((2, 3), d), np.zeros((2, 1), np.int64)], {"dim": 1.0})
            for d in (np.float16, np.int32, np.bool_)
        ),
        (
            "index_put",
            [np.zeros((3, 2), np.float32), np.zeros(2, np.int32), np.zeros(2, np.float32)],
            {},
        ),
        *(
            (f"cumsum_{d}", [np.zeros((2, 3), np.float16)], {"dim": 1.0})
            for d in ("int64", "int32", "float32")
        ),
        *(
            (name, [np.zeros(4, d)], {"other": 3.0})
            for name in ("floor_divide_scalar", "trunc_divide_scalar", "remainder_int_scalar")
            for d in (np.int64, np.int32)
        ),
    ]
    sources = []
    for k, (name, arrays, params) in enumerate(cases):
        plain = name == "index_put" or arrays[0].dtype == np.bool_  # (add_scalar takes numbers)
        g = _graph(name, arrays, params, epilogue=None if plain else "add_scalar")
        plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
        for n in plan.graph.kernels():
            ks = kernel_source(plan.graph, n)
            sources.append(ks.source.replace(ks.function_name, f"{ks.function_name}_{k}"))
    assert nvrtc_compile("\n".join(sources), "routing")
