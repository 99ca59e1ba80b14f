"""Reductions over any axes (``sum_dims``, ``mean_dims``, ``amax_dims``, ``amin_dims``, and
``any_dims`` / ``all_dims`` to bool) and softmax / log_softmax over any dim (``softmax_dim``,
``log_softmax_dim``) of ``oxiwork.ops.lib_reduce``.

On random shapes (rank 1-4) and random axis subsets: the reference equals numpy's own
formula, the generated CUDA C run on the CPU (the emulated launcher of ``tests/executor``)
equals the reference, alone and with a broadcasting prologue and an epilogue fused into it
(which read the input through the same index terms), and NVRTC compiles it.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source
from oxiwork.ops.lib_reduce import axes_mask
from oxiwork.ops.program import bind
from oxiwork.ops.table import reduction_terms
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

F32 = np.float32
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NP = {"int64": np.dtype(np.int64), "float32": np.dtype(F32), "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}  # fmt: skip
TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}  # one rounding of the result


def _softmax(x: np.ndarray, d: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=d, keepdims=True))
    return e / e.sum(axis=d, keepdims=True)


def _log_softmax(x: np.ndarray, d: int) -> np.ndarray:
    s = x - x.max(axis=d, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=d, keepdims=True))


@st.composite
def cases(draw):
    """(op, input shape, params, numpy's formula of the result on a float64 input)."""
    # sizes of 1 are rarer: they coalesce away, and the strided cases need two sizes > 1
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 3]), min_size=1, max_size=4)))
    rank = len(shape)
    name = draw(st.sampled_from([*ARGS, *SPREADS, "count_dims", "sum_dims", "mean_dims", "amax_dims", "amin_dims", "softmax_dim", "log_softmax_dim"]))  # fmt: skip
    if name.endswith("_dim"):
        d = draw(st.integers(-rank, rank - 1))
        f = _softmax if name == "softmax_dim" else _log_softmax
        return name, shape, {"dim": float(d)}, lambda x: f(x, d)
    axes = draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))  # fmt: skip
    keep = draw(st.booleans())
    params = {"axes": axes_mask(axes or None, rank), "keepdim": float(keep)}
    ax = tuple(a % rank for a in axes) or None
    if name in ARGS:  # over one axis or every one (the flattened index), as torch
        one = draw(st.integers(-rank, rank - 1)) if draw(st.booleans()) else None
        params["axes"] = axes_mask(None if one is None else [one], rank)
        return name, shape, params, lambda x: ARGS[name](x, axis=one, keepdims=keep)
    if name == "count_dims":
        return name, shape, params, lambda x: np.count_nonzero(x, axis=ax, keepdims=keep)
    if name in SPREADS:
        if name.startswith(("var", "std")):
            params["correction"] = float(draw(st.sampled_from([0, 1, 2])))
        return name, shape, params, lambda x: SPREADS[name](x, ax, keep, params.get("correction"))
    np_fn = {"sum_dims": np.sum, "mean_dims": np.mean, "amax_dims": np.max, "amin_dims": np.min}[name]  # fmt: skip
    return name, shape, params, lambda x: np_fn(x, axis=ax, keepdims=keep)


def _var(x, ax, keep, correction):
    # numpy's own: inf (or NaN without spread) where no degree of freedom is left
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.var(x, axis=ax, keepdims=keep, ddof=correction)


ARGS = {"argmax_dims": np.argmax, "argmin_dims": np.argmin}
SPREADS = {
    "var_dims": _var,
    "std_dims": lambda x, ax, keep, c: np.sqrt(_var(x, ax, keep, c)),
    "norm2_dims": lambda x, ax, keep, _: np.sqrt((x * x).sum(axis=ax, keepdims=keep)),
    "norm1_dims": lambda x, ax, keep, _: np.abs(x).sum(axis=ax, keepdims=keep),
}


def _graph(name, shape, params, dtype="float32", fused=False):
    """``name`` on external ``x`` (in ``fused``: of ``tanh(x + b)``, b broadcast over axis 0,
    and then ``scale``), one kernel per op, every buffer of ``dtype``."""
    it = DTYPES[dtype]
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", it * math.prod(shape), dtype=dtype, shape=shape)
    ins = [x]
    out_shape = ops.infer_shape(ops.get(name), [shape], params, "t")

    dtypes = {}  # buffer -> dtype (an index reduction writes int64)

    def kernel(op, inputs, out_name, out_shape, **p):
        ins = [dtypes.get(i, dtype) for i in inputs]
        odt = ops.infer_dtype(ops.get(op), ins, {**ops.get(op).defaults, **p}, op)
        out = b.alloc_buffer(out_name, DTYPES[odt] * math.prod(out_shape), dtype=odt, shape=out_shape)  # fmt: skip
        dtypes[out] = odt
        kb = b.add_kernel(out_name, 2, 32).op(op).inputs(inputs).outputs([out]).fusible(True)
        if p:
            kb.params(**p)
        kb.finish()
        return out

    if fused:
        bshape = shape[1:] or (1,)
        bias = b.alloc_external_buffer("b", it * math.prod(bshape), dtype=dtype, shape=bshape)
        ins.append(bias)
        s = kernel("add", [x, bias], "s", shape)
        x = kernel("tanh", [s], "t", shape)
    r = kernel(name, [x], "r" if fused else "out", out_shape, **params)
    if fused:
        kernel("scale", [r], "out", out_shape, alpha=-3.0)
    return b.build(), out_shape


def _run_c(graph, node, arrays, so_dir):
    ks = kernel_source(graph, node)
    bound = bind(graph, node)
    return run_kernel(
        ks.source, ks.function_name, arrays, list(bound.out_shapes), ks.scalar_args, so_dir,
        out_dtypes=[LOOP_NP[d] for d in bound.out_dtypes],
    )  # fmt: skip


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("reduce_axes_kernels")


class TestReduceAxes:
    def test_raises_on_axes_outside_the_input(self) -> None:
        with pytest.raises(InvalidArgument, match="not a bit mask of the 2 axes"):
            ops.infer_shape(ops.get("sum_dims"), [(2, 3)], {"axes": 4.0, "keepdim": 0.0}, "k")
        with pytest.raises(InvalidArgument, match="not an axis of shape"):
            ops.infer_shape(ops.get("softmax_dim"), [(2, 3)], {"dim": 2.0}, "k")
        with pytest.raises(InvalidArgument, match="out of range"):
            axes_mask([-3], 2)

    @SETTINGS
    @given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
    def test_terms_visit_every_element_once_in_row_order(self, shape, data) -> None:
        # the index terms are a bijection (rows, cols) -> flat input index, rows in the
        # result's row-major order and columns in the reduced axes' row-major order
        rank = len(shape)
        axes = data.draw(st.sets(st.integers(0, rank - 1)))
        kept, reduced = reduction_terms(tuple(shape), sorted(axes))
        rows = math.prod(m for _, m, _ in kept)
        cols = math.prod(m for _, m, _ in reduced)

        def at(v, terms):
            return sum(((v // d) % m) * s for d, m, s in terms)

        got = np.array([[at(r, kept) + at(c, reduced) for c in range(cols)] for r in range(rows)])
        flat = np.arange(math.prod(shape)).reshape(shape)
        order = [a for a in range(rank) if a not in axes] + sorted(axes)
        want = np.transpose(flat, order).reshape(rows, cols)
        assert np.array_equal(got, want)

    @SETTINGS
    @given(case=cases(), seed=st.integers(0, 2**16))
    def test_reference_is_numpys(self, case, seed) -> None:
        name, shape, params, formula = case
        x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(F32)
        got = ops.get(name).reference([x], **params)
        want = formula(x.astype(np.float64))
        assert got.dtype == (np.int64 if name in ARGS or name == "count_dims" else F32)
        assert got.shape == ops.infer_shape(ops.get(name), [shape], params, "t")
        np.testing.assert_allclose(got.reshape(-1), np.reshape(want, -1), rtol=1e-5, atol=1e-5)

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(
        case=cases(),
        seed=st.integers(0, 2**16),
        fused=st.booleans(),
        dtype=st.sampled_from(["float32", "float32", "float16", "bfloat16"]),
    )
    def test_generated_c_equals_reference(self, case, seed, fused, dtype, so_dir) -> None:
        name, shape, params, _ = case
        # (an index of a maximum: a prologue's libm rounding could move a near tie)
        fused = fused and name not in ARGS
        rng = np.random.default_rng(seed)
        g, _ = _graph(name, shape, params, dtype, fused)
        inputs = {"x": rng.uniform(-3, 3, shape).astype(NP[dtype])}
        if fused:
            bshape = g.buffer_by_name("b").array_shape
            inputs["b"] = rng.uniform(-1, 1, bshape).astype(NP[dtype])
        want = evaluate(g, inputs)["out"].astype(F32)
        plan = ExecutionPlan.build(g, max_streams=1, fusion=fused)
        (node,) = plan.graph.kernels() if fused else [g.kernels()[0]]
        arrays = [inputs[plan.graph.buffer(b).name] for b in node.inputs]
        (got,) = _run_c(plan.graph if fused else g, node, arrays, so_dir)
        tol = TOL[dtype] * (4 if fused else 1)  # fused: tanh and scale rounded in C too
        np.testing.assert_allclose(
            got.astype(F32).reshape(-1), want.reshape(-1), rtol=tol, atol=tol, err_msg=f"{name} {shape} {params}"
        )  # fmt: skip

    def test_compiles_with_nvrtc_alone_and_fused(self, nvrtc_compile) -> None:
        # every op over non-trailing axes, in float32 alone and in bfloat16 with its
        # prologue and epilogue fused, as one NVRTC unit (each compile costs a second)
        shape = (2, 3, 4, 5)
        sources = []
        for k, name in enumerate([*ARGS, *SPREADS, "count_dims", "sum_dims", "mean_dims", "amax_dims", "amin_dims", "softmax_dim", "log_softmax_dim"]):  # fmt: skip
            if name.endswith("_dim"):
                params = {"dim": 1.0}
            else:
                params = {"axes": axes_mask([0, 2], 4), "keepdim": 0.0}
            for dtype, fused in (("float32", False), ("bfloat16", True)):
                g, _ = _graph(name, shape, params, dtype, fused)
                g = ExecutionPlan.build(g, max_streams=1, fusion=fused).graph
                for node in g.kernels():
                    ks = kernel_source(g, node)
                    if node.fused is not None or node.op == name:
                        assert "rk0d" in ks.source or "rc0d" in ks.source  # index terms
                    # function names are unique per graph: made unique across them
                    sources.append(ks.source.replace(ks.function_name, f"{ks.function_name}_{k}_{dtype}"))  # fmt: skip
        nvrtc_compile("\n".join(sources), "reduce_axes")


# ---------------------------------------------------------------------- any_dims, all_dims
TRUTH_NP = {
    "bool": np.dtype(bool),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    **NP,
}


@st.composite
def truth_cases(draw):
    """(op, input dtype, input shape, params, numpy's any/all of the result)."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 3]), min_size=1, max_size=4)))
    rank = len(shape)
    name = draw(st.sampled_from(["any_dims", "all_dims"]))
    axes = draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))  # fmt: skip
    keep = draw(st.booleans())
    params = {"axes": axes_mask(axes or None, rank), "keepdim": float(keep)}
    ax = tuple(a % rank for a in axes) or None
    fn = np.any if name == "any_dims" else np.all
    dtype = draw(st.sampled_from(sorted(TRUTH_NP)))
    return name, dtype, shape, params, lambda x: fn(x != 0, axis=ax, keepdims=keep)


def _truth_input(rng, dtype, shape):
    """Mostly non-zero (all_dims sees both answers) with zeros, and NaN for floats."""
    x = rng.choice([0.0, 0.0, 1.0, -2.0, 3.5, 1.0, 1.0, np.nan], size=shape)
    if dtype in ("bool", "int64", "int32"):
        x = np.nan_to_num(x, nan=7.0)
    return x.astype(TRUTH_NP[dtype])


def _truth_graph(name, dtype, shape, params, fused):
    """``name`` of external ``x`` of ``dtype`` (``fused``: of ``logical_not(x)``, then
    ``logical_not`` of the result), one kernel per op."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", DTYPES[dtype] * math.prod(shape), dtype=dtype, shape=shape)
    out_shape = ops.infer_shape(ops.get(name), [shape], params, "t")

    def kernel(op, src, out_name, shape, **p):
        out = b.alloc_buffer(out_name, math.prod(shape), dtype="bool", shape=shape)
        kb = b.add_kernel(out_name, 2, 32).op(op).inputs([src]).outputs([out]).fusible(True)
        if p:
            kb.params(**p)
        kb.finish()
        return out

    src = kernel("logical_not", x, "n", shape) if fused else x
    r = kernel(name, src, "r" if fused else "out", out_shape, **params)
    if fused:
        kernel("logical_not", r, "out", out_shape)
    return b.build()


class TestTruthReductions:
    @SETTINGS
    @given(case=truth_cases(), seed=st.integers(0, 2**16))
    def test_reference_is_numpys_any_and_all(self, case, seed) -> None:
        name, dtype, shape, params, formula = case
        x = _truth_input(np.random.default_rng(seed), dtype, shape)
        op = ops.get(name)
        got = op.reference([x], **params)
        assert got.dtype == np.dtype(bool) and ops.infer_dtype(op, [dtype], params, "t") == "bool"
        assert got.shape == ops.infer_shape(op, [shape], params, "t")
        np.testing.assert_array_equal(got.reshape(-1), np.reshape(formula(x), -1))

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(case=truth_cases(), seed=st.integers(0, 2**16), fused=st.booleans())
    def test_generated_c_equals_reference(self, case, seed, fused, so_dir) -> None:
        name, dtype, shape, params, _ = case
        g = _truth_graph(name, dtype, shape, params, fused)
        x = _truth_input(np.random.default_rng(seed), dtype, shape)
        want = evaluate(g, {"x": x})["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=fused)
        (node,) = plan.graph.kernels() if fused else [g.kernels()[0]]
        ks = kernel_source(plan.graph, node)
        bound = bind(plan.graph, node)
        (got,) = run_kernel(
            ks.source, ks.function_name, [x], list(bound.out_shapes), ks.scalar_args, so_dir,
            out_dtypes=[np.dtype(bool)],
        )  # fmt: skip
        np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1))

    def test_refuses_a_dtype_kernels_do_not_compute_on(self) -> None:
        with pytest.raises(InvalidArgument, match="input 0 is float64"):
            ops.infer_dtype(ops.get("any_dims"), ["float64"], {"axes": 0.0, "keepdim": 0.0}, "t")

    def test_compiles_with_nvrtc_alone_and_fused(self, nvrtc_compile) -> None:
        shape, params = (2, 3, 4, 5), {"axes": axes_mask([0, 2], 4), "keepdim": 0.0}
        sources = []
        cases = [
            ("any_dims", "float32", False),
            ("all_dims", "bfloat16", False),
            ("any_dims", "bool", True),
            ("all_dims", "int64", True),
        ]
        for k, (name, dtype, fused) in enumerate(cases):
            g = _truth_graph(name, dtype, shape, params, fused)
            g = ExecutionPlan.build(g, max_streams=1, fusion=fused).graph
            for node in g.kernels():
                ks = kernel_source(g, node)
                sources.append(ks.source.replace(ks.function_name, f"{ks.function_name}_{k}"))
        nvrtc_compile("\n".join(sources), "truth_reductions")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
def test_count_counts_nan_as_non_zero_and_zero_signs_as_zero_in_c(so_dir) -> None:
    x = np.array([[0.0, -0.0, np.nan, 1.0], [np.inf, 0.0, 0.0, 0.0], [0.0] * 4], F32)
    params = {"axes": axes_mask([1], 2), "keepdim": 1.0}
    g, _ = _graph("count_dims", x.shape, params)
    want = evaluate(g, {"x": x})["out"]
    np.testing.assert_array_equal(want, [[2], [1], [0]])
    (got,) = _run_c(g, g.kernels()[0], [x], so_dir)
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.parametrize("name", ["argmax_dims", "argmin_dims"])
def test_arg_extrema_take_the_first_nan_or_extreme_in_c_as_torch(name, so_dir) -> None:
    torch = pytest.importorskip("torch")
    x = np.array(
        [[1.0, np.nan, 3.0, np.nan], [-np.inf, -np.inf, 2.0, 2.0], [5.0, 5.0, -1.0, -1.0], [np.inf, 0.0, np.inf, -np.inf]],
        F32,
    )  # fmt: skip
    params = {"axes": axes_mask([1], 2), "keepdim": 0.0}
    g, _ = _graph(name, x.shape, params)
    want = evaluate(g, {"x": x})["out"]
    eager = getattr(torch, name.removesuffix("_dims"))(torch.from_numpy(x), dim=1).numpy()
    np.testing.assert_array_equal(want, eager)
    (got,) = _run_c(g, g.kernels()[0], [x], so_dir)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(InvalidArgument, match=r"indices from 2\*\*24 on are not exact"):
        ops.infer_shape(ops.get(name), [(2**24,)], {"axes": 0.0, "keepdim": 0.0}, "k")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.parametrize("name", ["amax_dims", "amin_dims"])
def test_extrema_propagate_nan_and_take_infinities_in_c_as_in_the_reference(name, so_dir) -> None:
    # torch.amax/amin: a NaN anywhere in a row makes it NaN; ±inf are ordinary values
    x = np.array(
        [[1.0, np.nan, -2.0], [np.inf, -np.inf, 0.0], [-0.5, 3.0, -7.0], [np.nan] * 3], F32
    )
    params = {"axes": axes_mask([1], 2), "keepdim": 0.0}
    g, _ = _graph(name, x.shape, params)
    want = evaluate(g, {"x": x})["out"]
    np.testing.assert_array_equal(want, getattr(np, "max" if name == "amax_dims" else "min")(x, 1))
    (got,) = _run_c(g, g.kernels()[0], [x], so_dir)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------- prod_dims, sum_int_dims
LOOP_NP = {"bool": np.dtype(bool), "int32": np.dtype(np.int32), **NP}
# float values whose products are exact in float32 over at most 4**4 elements (powers of
# two) and the IEEE special values: any order of multiplication gives the same bits, so
# torch's (vectorised) order and a float64 formula must agree with the in-order kernel
EXACT_FACTORS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0]
# integers near the int64 ends too: products and sums wrap around modulo 2**64, as in torch
BIG_INTS = [0, 1, -1, 3, -7, 2**31 - 1, -(2**31), 2**40 + 3, -(2**62), 2**63 - 1, -(2**63)]


@st.composite
def loop_cases(draw, exact: bool = True):
    """(op, dtype, x, axes, keepdim): prod_dims of any dtype or sum_int_dims of bool and
    integers, over a random axis subset (none: every axis)."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 3]), min_size=1, max_size=4)))
    rank = len(shape)
    name = draw(st.sampled_from(["prod_dims", "sum_int_dims"]))
    kinds = sorted(LOOP_NP) if name == "prod_dims" else ["bool", "int32", "int64"]
    dtype = draw(st.sampled_from(kinds))
    if dtype == "bool":
        x = draw(hnp.arrays(bool, shape))
    elif dtype in ("int32", "int64"):
        lim = np.iinfo(dtype)
        el = st.one_of(st.sampled_from(BIG_INTS), st.integers(-9, 9))
        x = draw(hnp.arrays(dtype, shape, elements=el.filter(lambda v: lim.min <= v <= lim.max)))
    else:
        el = st.sampled_from(EXACT_FACTORS) if exact else st.floats(-4, 4, width=32)
        x = draw(hnp.arrays(F32, shape, elements=el)).astype(LOOP_NP[dtype])
    axes = draw(st.lists(st.integers(0, rank - 1), max_size=rank, unique=True))
    return name, dtype, x, sorted(axes), draw(st.booleans())


def _loop_formula(name: str, x: np.ndarray, axes: list[int], keep: bool) -> np.ndarray:
    """numpy's own result in float64 (exact here), or in Python integers wrapped to int64."""
    ax = tuple(axes) or None
    if x.dtype.kind == "f" or x.dtype == ml_dtypes.bfloat16:
        with np.errstate(all="ignore"):
            return np.prod(x.astype(np.float64), axis=ax, keepdims=keep)
    fn = math.prod if name == "prod_dims" else sum
    objs = np.asarray(x.astype(np.int64), dtype=object)
    kept = [d for d in range(x.ndim) if ax is not None and d not in ax]
    rows = np.transpose(objs, kept + [d for d in range(x.ndim) if d not in kept])
    rows = rows.reshape(math.prod(x.shape[d] for d in kept), -1)
    wrapped = [(int(fn(r)) + 2**63) % 2**64 - 2**63 for r in rows]
    shape = (
        [1 if ax is None or d in ax else s for d, s in enumerate(x.shape)]
        if keep
        else [s for d, s in enumerate(x.shape) if d in kept]
    )
    return np.array(wrapped, np.int64).reshape(shape)


def _torch_loop(name: str, x: np.ndarray, axes: list[int], keep: bool) -> np.ndarray:
    """torch.prod (one dim at a time: it takes one) or torch.sum over ``axes``."""
    import torch

    t = torch.from_numpy(x.astype(np.float32) if x.dtype == ml_dtypes.bfloat16 else x)
    if x.dtype == ml_dtypes.bfloat16:
        t = t.to(torch.bfloat16)
    axes = axes or list(range(x.ndim))
    if name == "sum_int_dims":
        r = torch.sum(t, dim=axes, keepdim=keep)
    else:
        r = t
        for d in axes:
            r = torch.prod(r, d, keepdim=True)
        r = r if keep else r.reshape([s for d, s in enumerate(x.shape) if d not in axes])
    return r.float().numpy() if r.dtype == torch.bfloat16 else r.numpy()


def _loop_graph(name, dtype, shape, params, epilogue=False):
    """``name`` of external ``x`` (``epilogue``: then ``neg``, fused into its kernel)."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", DTYPES[dtype] * math.prod(shape), dtype=dtype, shape=shape)
    op = ops.get(name)
    odt = ops.infer_dtype(op, [dtype], params, name)
    out_shape = ops.infer_shape(op, [shape], params, name)
    size = DTYPES[odt] * math.prod(out_shape)
    r = b.alloc_buffer("r" if epilogue else "out", size, dtype=odt, shape=out_shape)
    b.add_kernel("red", 2, 32).op(name).params(**params).inputs([x]).outputs([r]).fusible(
        True
    ).finish()
    if epilogue:
        out = b.alloc_buffer("out", size, dtype=odt, shape=out_shape)
        ints = odt in ("int32", "int64")  # (neg computes on floats; scale by -1 on ints)
        b.add_kernel("neg", 2, 32).op("scale" if ints else "neg").params(
            **({"alpha": -1.0} if ints else {})
        ).inputs([r]).outputs([out]).fusible(True).finish()
    return b.build()


def _bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal bit for bit: integers exactly, floats with NaN positions and zero signs."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, want.dtype)
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = got.astype(F32), want.astype(F32)
    np.testing.assert_array_equal(g, w, err_msg=what)  # NaN == NaN here
    assert np.array_equal(np.signbit(g), np.signbit(w)) or np.isnan(w).any(), what
    ok = ~np.isnan(w)
    assert np.array_equal(np.signbit(g[ok]), np.signbit(w[ok])), f"{what}: zero signs"


# ------------------------------------------------------------ argmax_int_dims, argmin_int_dims
@st.composite
def int_arg_cases(draw):
    """(op, dtype, x, axes, keepdim), as loop_cases: an argmax, argmin, max or min of int32
    or int64 over one axis or every one, values near the int64 ends (which float32 cannot
    tell apart) and many ties."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    name = draw(st.sampled_from(sorted(INT_EXTREMA)))
    dtype = draw(st.sampled_from(["int32", "int64"]))
    lim = np.iinfo(dtype)
    el = st.one_of(st.sampled_from([*BIG_INTS, 2**62 + 1, 2**62]), st.integers(-2, 2))
    x = draw(hnp.arrays(dtype, shape, elements=el.filter(lambda v: lim.min <= v <= lim.max)))
    axes = draw(st.one_of(st.just([]), st.integers(0, len(shape) - 1).map(lambda d: [d])))
    return name, str(x.dtype), x, axes, draw(st.booleans())


class TestLoopReductions:
    @SETTINGS
    @given(case=loop_cases())
    def test_reference_is_torchs_and_the_exact_formula(self, case) -> None:
        name, dtype, x, axes, keep = case
        op = ops.get(name)
        params = {"axes": axes_mask(axes or None, x.ndim), "keepdim": float(keep)}
        odt = ops.infer_dtype(op, [dtype], params, "t")
        g = _loop_graph(name, dtype, x.shape, params)
        got = evaluate(g, {"x": x})["out"]  # the reference, half inputs widened
        assert got.dtype == np.dtype(LOOP_NP[odt])
        assert odt == (dtype if dtype in ("float32", "float16", "bfloat16") else "int64")
        assert got.shape == ops.infer_shape(op, [x.shape], params, "t")
        want = _loop_formula(name, x, axes, keep).reshape(got.shape)  # (a 0-d result is (1,))
        # (floats: the exact float64 product rounded once to the dtype, as torch's CUDA
        # kernels compute it in float; torch's CPU prod of float16 accumulates in float16)
        _bits(got, want.astype(got.dtype), f"{name} {dtype} {axes} vs formula")
        eager = _torch_loop(name, x, axes, keep).reshape(got.shape)
        if dtype not in ("float16", "bfloat16"):
            _bits(got, eager.astype(got.dtype), f"{name} {dtype} {axes} vs torch")

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(
        case=st.one_of(loop_cases(), loop_cases(exact=False), int_arg_cases()),
        epilogue=st.booleans(),
    )
    def test_generated_c_equals_reference_bit_for_bit(self, case, epilogue, so_dir) -> None:
        # the kernel multiplies (adds, compares) in the reference's order: the same roundings
        name, dtype, x, axes, keep = case
        params = {"axes": axes_mask(axes or None, x.ndim), "keepdim": float(keep)}
        g = _loop_graph(name, dtype, x.shape, params, epilogue)
        want = evaluate(g, {"x": x})["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=epilogue)
        (node,) = plan.graph.kernels() if epilogue else [g.kernels()[0]]
        (got,) = _run_c(plan.graph if epilogue else g, node, [x], so_dir)
        _bits(got.reshape(want.shape), want, f"{name} {dtype} {x.shape} {axes} fused={epilogue}")

    def test_sum_int_refuses_floats_and_prod_refuses_float64(self) -> None:
        p = {"axes": 0.0, "keepdim": 0.0}
        with pytest.raises(
            InvalidArgument, match=r"input 0 is float32; sum_int_dims sums bool, int32"
        ):
            ops.infer_dtype(ops.get("sum_int_dims"), ["float32"], p, "t")
        with pytest.raises(InvalidArgument, match=r"input 0 is float64"):
            ops.infer_dtype(ops.get("prod_dims"), ["float64"], p, "t")

    def test_sums_are_exact_past_two_to_the_24(self) -> None:
        # no float count: a bool sum over 2**24 + 1 elements is exact (count_dims refuses it)
        op = ops.get("sum_int_dims")
        x = np.ones(2**24 + 1, bool)
        assert ops.infer_shape(op, [x.shape], {"axes": 0.0, "keepdim": 0.0}, "t") == (1,)
        assert op.reference([x], axes=0.0, keepdim=0.0).tolist() == [2**24 + 1]

    def test_compiles_with_nvrtc_alone_and_fused(self, nvrtc_compile) -> None:
        shape, params = (2, 3, 4, 5), {"axes": axes_mask([0, 2], 4), "keepdim": 0.0}
        sources = []
        cases = [("prod_dims", d, e) for d in sorted(LOOP_NP) for e in (False, True)]
        cases += [("sum_int_dims", d, e) for d in ("bool", "int32", "int64") for e in (False, True)]
        cases += [
            (n, d, e)
            for n in sorted(INT_EXTREMA)
            for d in ("int32", "int64")
            for e in (False, True)
        ]
        for k, (name, dtype, epilogue) in enumerate(cases):
            g = _loop_graph(name, dtype, shape, params, epilogue)
            g = ExecutionPlan.build(g, max_streams=1, fusion=epilogue).graph
            for node in g.kernels():
                ks = kernel_source(g, node)
                assert "s0_rk0d" in ks.source or "s0_rc0d" in ks.source  # index terms
                sources.append(ks.source.replace(ks.function_name, f"{ks.function_name}_{k}"))
        nvrtc_compile("\n".join(sources), "loop_reductions")


# the integer extrema -> the torch function each computes
INT_EXTREMA = {
    "argmax_int_dims": "argmax",
    "argmin_int_dims": "argmin",
    "amax_int_dims": "amax",
    "amin_int_dims": "amin",
}


class TestIntArgExtrema:
    @SETTINGS
    @given(case=int_arg_cases())
    def test_reference_is_torchs(self, case) -> None:
        # the index of the first extreme (int64), or the extreme itself in the input's dtype
        import torch

        name, dtype, x, axes, keep = case
        params = {"axes": axes_mask(axes or None, x.ndim), "keepdim": float(keep)}
        got = evaluate(_loop_graph(name, dtype, x.shape, params), {"x": x})["out"]
        fn = getattr(torch, INT_EXTREMA[name])
        if name.startswith("arg"):
            want = fn(torch.from_numpy(x), dim=axes[0] if axes else None, keepdim=keep).numpy()
            assert got.dtype == np.int64
        else:
            want = fn(torch.from_numpy(x), dim=tuple(axes), keepdim=keep).numpy()
            assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, want.reshape(got.shape))

    def test_refuses_floats_and_bool(self) -> None:
        p = {"axes": 0.0, "keepdim": 0.0}
        for name in ("argmax_int", "amax_int", "amin_int"):
            for dtype in ("float32", "bool"):
                with pytest.raises(InvalidArgument, match=rf"input 0 is {dtype}; .*{name}"):
                    ops.infer_dtype(ops.get(f"{name}_dims"), [dtype], p, "t")
