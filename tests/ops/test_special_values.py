"""NaN, ±inf, -0.0 and denormals: reference == simulator == generated C (on the CPU) == fused.

Every registered op with a numpy reference and CUDA code, and random small chains of them
(fused by the fusion pass), are fed arrays mixing the IEEE special values with ordinary
floats, and computed four ways:

- the **reference** evaluator (the op table's numpy references, unfused graph);
- the **simulator** (the op table's in-place forms, straight into the planned arena);
- the **generated CUDA C**, compiled as C++ and run on the CPU by the emulated driver's
  launcher (``tests/executor/emulated_driver.py``), several threads per block;
- the **fused** kernel of the chain, in the simulator and as generated C.

How exactly they must agree is decided per op (``EXACT`` / ``LIBM`` / ``SUMS`` below, each
with its reason). NaN positions must always match: a NaN on one side and a number on the
other is exactly the silent disagreement this file exists to catch. Zero signs are compared
wherever the result is exact, since ``1 / relu(-0.0)`` is ``+inf`` or ``-inf`` by it.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.ops import kernel_source, lib_conv, lib_dtype, lib_elementwise, lib_reduce
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C"),
    pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning"),
]

F32 = np.float32
TINY = float(np.finfo(F32).smallest_subnormal)
BIG_DENORMAL = float(np.finfo(F32).smallest_normal) - TINY
U = 2.0**-24  # float32 unit roundoff

# How the numpy side and the generated C must agree, per op, and why:
# - EXACT: one correctly rounded IEEE operation per element (or a bit copy, or a maximum):
#   numpy and C compute the same bits, zero signs included.
EXACT = {
    "relu",
    "relu_nan",
    "scale",
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "copy",
    "bias_add",
    "max",
    "transpose",
    # oxiwork.ops.lib_elementwise: batch norm's sqrtf and division are correctly rounded
    # too, rsqrt is 1 / sqrtf (not the approximate rsqrtf), and the rest are selections
    "batch_norm",
    "batch_norm_plain",
    "hardtanh",
    "relu6",
    "rsqrt",
    # abs and sqrt are correctly rounded, the clamps selections, leaky_relu one product
    "abs",
    "sqrt",
    "clamp_min",
    "clamp_max",
    "leaky_relu",
    # MATH_OPS: roundings to integers, sign, 1 / x and fmod are exact; maximum and minimum
    # selections; remainder one correctly rounded addition after fmod
    "floor",
    "ceil",
    "trunc",
    "round",
    "sign",
    "reciprocal",
    "maximum",
    "minimum",
    "clamp_tensors",
    "fmod_scalar",
    "remainder_scalar",
    "add_scalar",
    "sub_scalar",
    "rsub_scalar",
    "div_scalar",
    "where",
    "amax",
}
# - LIBM: transcendental functions. numpy's float32 exp/log/tanh (SIMD implementations) and
#   the C library's expf/logf/tanhf (as CUDA's) are each faithful to a few ulp but not
#   bit-identical; numpy documents a maximum error of 4 ulp for them (NEP 38 / the umath
#   accuracy tests), so 4 ulp per transcendental call, plus one per rounding after it.
LIBM_ULPS = {"exp": 4, "log": 4, "tanh": 4, "sigmoid": 6, "gelu": 8}
# lib_elementwise: erf (numpy side: the C library's double erf rounded; C side: erff, within
# 2 ulp), silu's exp, and pow (np.power and powf, each within a few ulp of the true value)
LIBM_ULPS |= {"gelu_erf": 8, "silu": 6, "pow_scalar": 4}
# log1p (np.log1p / log1pf), expm1 and elu's expm1 (np.expm1 / expm1f), then two products
LIBM_ULPS |= {"log1p": 4, "expm1": 4, "elu": 6}
# lib_elementwise.MATH_OPS: numpy's float32 ufuncs (SIMD sin/cos within 1.5 ulp, the rest
# the C library's) against the C library's single precision functions; erf as gelu_erf's
LIBM_ULPS |= dict.fromkeys(
    ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "log2", "log10", "exp2"), 4
)
LIBM_ULPS |= {"erf": 4, "pow": 4, "atan2": 4}
# hypot: numpy's float32 hypot and the C library's hypotf measured equal (0 ulp over 2e5
# random pairs spanning the float32 range, both correctly rounded there); 1 ulp for a
# libm that is only faithful (CUDA documents hypotf within 3 ulp of the true value)
LIBM_ULPS |= {"hypot": 1}
# - SUMS: sums over a row (sum, softmax, layer_norm, matmul) whose order differs: numpy sums
#   pairwise (BLAS for matmul), the kernel per thread then as a tree. The difference is
#   bounded by the classic error bound of recursive summation, |error| <= (n-1) u sum|x_i|
#   on each side (N. J. Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed.,
#   2002, section 4.2), propagated through the op's formula in ``_sum_tolerance``. Finite
#   inputs of these ops stay within 1e4 so that no partial sum overflows in one order and
#   not the other (an inf on one side only would be an artefact of the order, not a bug).
SUMS = {"sum", "softmax", "layer_norm", "matmul", *lib_reduce.MATMULS}
SUMS |= {"mean", "layer_norm_affine", "layer_norm_scale", "rms_norm"}
SUM_BOUND = 1e4


def _specials(bound: float | None) -> list[float]:
    out = [math.nan, math.inf, -math.inf, 0.0, -0.0, TINY, -TINY, BIG_DENORMAL, 1.0, -1.0]
    if bound is None:
        out += [float(np.finfo(F32).max), -float(np.finfo(F32).max)]
    return out


def values(bound: float | None = None) -> st.SearchStrategy[float]:
    """float32 values, a third of them special; finite ones within ``bound`` if given."""
    lim = {} if bound is None else {"min_value": -bound, "max_value": bound}
    return st.one_of(
        st.sampled_from(_specials(bound)),
        st.floats(width=32, allow_subnormal=True, **lim),  # NaN and ±inf included when unbounded
    )


def param_values() -> st.SearchStrategy[float]:
    """Op parameters: finite (graphs refuse NaN/inf parameters), -0.0 and denormals included."""
    return st.one_of(
        st.sampled_from([v for v in _specials(None) if math.isfinite(v)]),
        st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True),
    )


def arrays(shape: tuple[int, ...], bound: float | None = None) -> st.SearchStrategy[np.ndarray]:
    return hnp.arrays(F32, shape, elements=values(bound))


# ------------------------------------------------------------------------------ helpers
def input_shapes(op: ops.OpDef, rows: int, cols: int) -> list[tuple[int, ...]] | None:
    """Input shapes ``op`` accepts, from its own shape rule (so a new op is covered too)."""
    for shapes in (
        [(rows, cols)] * op.arity,
        [(rows, cols), (cols,)],
        [(rows, cols), (cols, 3)],
        [(2, rows, cols), (2, cols, 3)],  # bmm
        [(3,), (rows, cols), (cols, 3)],  # addmm
        [(rows, 3), (2, rows, cols), (2, cols, 3)],  # baddbmm
        [(rows, cols), (3, cols), (3,)],  # linear
        [(rows, cols)] + [(cols,)] * (op.arity - 1),  # per-channel vectors (batch_norm)
    ):
        if len(shapes) != op.arity:
            continue
        try:
            ops.infer_shape(op, shapes, op.defaults, "probe")
        except Exception:
            continue
        return shapes
    return None


def ordered(x: np.ndarray) -> np.ndarray:
    """float32 bits as integers ordered like the floats (±0 both 0, inf next to max)."""
    i = np.ascontiguousarray(x, F32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def assert_same(got: np.ndarray, want: np.ndarray, what: str, *, zeros: bool = True) -> None:
    """Bit-for-bit equal but for NaN payloads; ``zeros``: the signs of zeros too."""
    got, want = np.asarray(got, F32).reshape(-1), np.asarray(want, F32).reshape(-1)
    np.testing.assert_array_equal(got, want, err_msg=what)  # NaN == NaN here
    if zeros:
        z = (want == 0) & (got == 0)
        bad = np.flatnonzero(z & (np.signbit(got) != np.signbit(want)))
        assert bad.size == 0, (
            f"{what}: zero signs differ at {bad.tolist()}: {got[bad]} vs {want[bad]}"
        )


def assert_close(
    got: np.ndarray, want: np.ndarray, what: str, *, ulps: int = 0, tol: np.ndarray | float = 0.0
) -> None:
    """Same NaN positions; elsewhere within ``ulps`` ulp or within the absolute ``tol``."""
    got, want = np.asarray(got, F32).reshape(-1), np.asarray(want, F32).reshape(-1)
    gn, wn = np.isnan(got), np.isnan(want)
    bad = np.flatnonzero(gn != wn)
    assert bad.size == 0, (
        f"{what}: NaN on one side only at {bad.tolist()}: {got[bad]} vs {want[bad]}"
    )
    ok = ~wn
    dist = np.abs(ordered(got) - ordered(want))
    with np.errstate(all="ignore"):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    tol = np.broadcast_to(np.asarray(tol, np.float64).reshape(-1), got.shape)
    fine = (dist <= ulps) | (diff <= tol) | (got == want)
    bad = np.flatnonzero(ok & ~fine)
    assert bad.size == 0, (
        f"{what}: differs at {bad[:8].tolist()}: {got[bad[:8]]} vs {want[bad[:8]]} "
        f"({dist[bad[:8]].tolist()} ulp; tolerance {tol[bad[:8]]})"
    )


def _gemm_tolerance(name: str, xs: list[np.ndarray], params: dict) -> np.ndarray:
    """Absolute tolerance of a strided GEMM: the summation bound on |alpha| |A| |B|, one
    rounding of alpha * sum, one of beta * c and one of their sum."""
    g = lib_reduce.gemm_of(name, [x.shape for x in xs])

    def mag(k: int, lay, dims) -> np.ndarray:
        x = np.abs(np.where(np.isfinite(xs[k]), xs[k], 0).astype(np.float64))
        v = lib_reduce._take(x.astype(F32), lay, dims)
        return np.asarray(v, np.float64)

    a = mag(g.inputs[0], g.a, (g.batch, g.m, g.k))
    b = mag(g.inputs[1], g.b, (g.batch, g.k, g.n))
    alpha = abs(params.get("alpha", 1.0))
    prod = alpha * (a @ b)
    tol = 2 * (g.k + 2) * U * prod
    if g.c is not None:
        c = abs(params.get("beta", 1.0)) * mag(g.inputs[2], g.c, (g.batch, g.m, g.n))
        tol = tol + 4 * U * (c + prod)
    return tol.reshape(-1)


def _sum_tolerance(
    name: str, xs: list[np.ndarray], out: np.ndarray, params: dict | None = None
) -> np.ndarray:
    """Absolute tolerance for an op that sums in a different order (see ``SUMS``)."""
    x = xs[0].astype(np.float64)
    ax = np.where(np.isfinite(x), np.abs(x), 0.0)
    n = x.shape[-1]
    floor = 2.0**-120  # below the normal range an ulp is absolute (denormal results)
    if name == "sum":
        return 2 * n * U * ax.reshape(-1, n).sum(axis=-1) + floor
    if name == "matmul":
        b = np.abs(np.where(np.isfinite(xs[1]), xs[1], 0).astype(np.float64))
        return (2 * (n + 1) * U * (ax @ b)).reshape(-1) + floor
    if name in lib_reduce.MATMULS:  # |alpha| |A| |B| bounds the sum's error, then beta c
        return _gemm_tolerance(name, xs, params or {}) + floor
    eps = (params or {}).get("eps", ops.get("layer_norm").defaults["eps"])
    if name == "mean":  # the sum's bound, divided by n, and the division's rounding
        mean_out = np.abs(np.where(np.isfinite(out), out, 0).astype(np.float64)).reshape(-1)
        return 2 * U * ax.reshape(-1, n).sum(axis=-1) + 2 * U * mean_out + floor
    if name == "rms_norm":
        # mean(x^2) is a sum of non-negative terms (relative bound on both sides); its
        # error moves sqrt(ms + eps), cancelling against a negative eps included
        ms = (np.where(np.isfinite(x), x, 0) ** 2).mean(axis=-1, keepdims=True)
        den2 = np.abs(ms + eps)
        with np.errstate(all="ignore"):
            rel = (2 * (n + 1) * U * ms + U * den2) / (2 * den2) + 4 * U
        o = np.abs(np.where(np.isfinite(out), out, 0).astype(np.float64)).reshape(-1, n)
        return (np.nan_to_num(rel * o, nan=np.inf, posinf=np.inf) + floor).reshape(-1)
    if name in ("layer_norm_affine", "layer_norm_scale"):
        # the plain norm's bound scaled by |w|, then w (and b)
        w = np.abs(np.where(np.isfinite(xs[1]), xs[1], 0).astype(np.float64)).reshape(-1)
        b = 0.0
        if len(xs) > 2:
            b = np.abs(np.where(np.isfinite(xs[2]), xs[2], 0).astype(np.float64)).reshape(-1)
        with np.errstate(all="ignore"):
            plain = ops.get("layer_norm").reference([xs[0]], eps=eps)
        tol = _sum_tolerance("layer_norm", xs[:1], plain, params).reshape(-1, n) * w
        p = np.abs(np.where(np.isfinite(plain), plain, 0).astype(np.float64)).reshape(-1, n)
        return (tol + 4 * U * (p * w + b) + floor).reshape(-1)
    o = np.abs(np.where(np.isfinite(out), out, 0).astype(np.float64)).reshape(-1, n)
    if name == "softmax":  # exp differs by LIBM ulps, the row sum by the summation bound
        return ((2 * LIBM_ULPS["exp"] + 2 * n + 4) * U * o + floor).reshape(-1)
    # layer_norm: the mean's error (both sides) moves every d = x - mean, and the variance's
    # relative error moves the scale 1/sqrt(var + eps).
    rows = x.reshape(-1, n)
    axr = ax.reshape(-1, n)
    mean = np.where(np.isfinite(rows), rows, 0).mean(axis=-1, keepdims=True)
    var = ((np.where(np.isfinite(rows), rows, 0) - mean) ** 2).mean(axis=-1, keepdims=True)
    sigma = np.sqrt(var + eps)
    dmax = 2 * axr.max(axis=-1, keepdims=True)
    d_err = 2 * (n + 1) * U * axr.max(axis=-1, keepdims=True) + U * dmax
    var_err = 2 * dmax * d_err + 4 * n * U * var
    rel = var_err / (2 * sigma**2) + 4 * U
    return (2 * d_err / sigma + o * rel + floor).reshape(-1)


def compare_with_c(
    name: str, xs: list[np.ndarray], c: np.ndarray, want: np.ndarray, params: dict | None = None
) -> None:
    what = f"{name}: generated C vs numpy"
    if name in EXACT:
        assert_same(c, want, what)
    elif name in LIBM_ULPS:
        ulps = LIBM_ULPS[name]
        # gelu's 1 + tanh(..) cancels for negative x: tanh's absolute error (<= 4 ulp of 1)
        # times 0.5|x| is what is left of it.
        gelus = ("gelu", "gelu_erf")
        tol = 0.5 * np.abs(xs[0].astype(np.float64)) * 8 * U if name in gelus else 0.0
        assert_close(c, want, what, ulps=ulps, tol=tol)
    else:
        assert name in SUMS, f"op {name!r} has no agreement class in this test: add it"
        assert_close(c, want, what, ulps=2, tol=_sum_tolerance(name, xs, want, params))


_FNAME = re.compile(r"\b(\w+)\b")


def run_c(graph, node, arrays, so_dir, block):
    """The node's generated kernel run on ``arrays``. The function is renamed to a fixed
    name first: the name (derived from the node's id) changes no arithmetic, and equal
    sources then share one compiled library."""
    ks = kernel_source(graph, node)
    bound = bind(graph, node)
    src = re.sub(rf"\b{re.escape(ks.function_name)}\b", "oxk", ks.source)
    return run_kernel(
        src, "oxk", arrays, list(bound.out_shapes), ks.scalar_args, so_dir, block=block
    )


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("special_values_kernels")


# ------------------------------------------------------------------------------ single ops
# Ops whose parameters are sizes (strides, windows, pads, an axis), not free floats, and
# whose inputs are NCL/NCHW/NCDHW tensors: tests/ops/test_conv.py draws valid cases for them and
# checks the same agreements (reference, generated C on the CPU, fused).
OWN_TESTS = {op.name for op in lib_conv.CONV_OPS} | {f"cat_{k}" for k in range(1, 65)}
# Casts and embedding change dtypes or take integer indices: tests/ops/test_dtypes.py
# (sorts and top-k, among them, take a dim and k and give int64 indices: test_sort.py;
# histc, cumsum_<dtype> and index_put, a router's ops: test_routing.py).
OWN_TESTS |= {op.name for op in lib_dtype.DTYPE_OPS}
# Comparisons, bitwise and logical ops give bool or take integers: tests/ops/test_bool_int.py.
OWN_TESTS |= {op.name for op in lib_elementwise.BOOL_OPS}
# integer divisions: tests/ops/test_routing.py, over the int64 and int32 range
OWN_TESTS |= {op.name for op in lib_elementwise.INT_OPS}
# Reductions over any axes take axis masks and dims: tests/ops/test_reduce_axes.py.
OWN_TESTS |= lib_reduce.ANY_AXES
# isnan gives bool: tests/ops/test_lib_elementwise.py.
OWN_TESTS |= {"isnan"}
# Group norms take structural groups and dims: tests/ops/test_group_norm.py.
OWN_TESTS |= lib_reduce.GROUP_NORMS
# grouped_mm takes int offsets (structural: sorted row counts) and a 3-d weight:
# tests/ops/test_grouped_mm.py draws them, NaN, ±inf, -0.0 and denormals in x and w included.
OWN_TESTS |= {lib_reduce.GROUPED_MM.name}


def _computable() -> list[str]:
    return sorted(
        name
        for name, op in ops.REGISTRY.items()
        if op.reference is not None and op.has_cuda and name not in OWN_TESTS
    )


def _graph(op: ops.OpDef, shapes, params):
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"in{k}", 4 * math.prod(s), shape=s) for k, s in enumerate(shapes)
    ]
    out_shape = ops.infer_shape(op, shapes, params, "t")
    out = b.alloc_buffer("out", 4 * math.prod(out_shape), shape=out_shape)
    kb = b.add_kernel(op.name, 2, 32).op(op.name).inputs(ins).outputs([out])
    if params:
        kb.params(**params)
    kb.finish()
    g = b.build()
    return g, g.kernels()[0]


@pytest.mark.parametrize("name", _computable())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    rows=st.integers(1, 3),
    cols=st.integers(1, 9),
    block=st.sampled_from([1, 4, 32]),
)
def test_one_op_four_ways(name, so_dir, data, rows, cols, block):
    op = ops.get(name)
    shapes = input_shapes(op, rows, cols)
    assert shapes is not None, f"no input shapes found for op {name!r}"
    bound = SUM_BOUND if name in SUMS else None
    xs = [data.draw(arrays(s, bound), label=f"in{k}") for k, s in enumerate(shapes)]
    params = {p: data.draw(param_values(), label=p) for p in op.defaults}
    g, node = _graph(op, shapes, {**op.defaults, **params})
    inputs = {f"in{k}": x for k, x in enumerate(xs)}

    want = evaluate(g, inputs)["out"]
    plan = ExecutionPlan.build(g, max_streams=1, fusion=False)
    sim = SequentialExecutor(plan).run(inputs).outputs["out"]
    assert_same(sim, want, f"{name}: simulator (in-place form) vs reference")

    (c,) = run_c(g, node, xs, so_dir, block)
    compare_with_c(name, xs, c, want, {**op.defaults, **params})


def test_every_builtin_op_has_an_agreement_class():
    ours = set(ops.BUILTIN_OPS) | {op.name for op in lib_elementwise.ELEMENTWISE_OPS}
    assert ours <= EXACT | set(LIBM_ULPS) | SUMS
    assert set(_computable()) >= ours


@pytest.mark.parametrize("name", [n for n in _computable() if ops.get(n).inplace is not None])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_inplace_form_writing_over_its_input_equals_the_reference(name, data):
    # A kernel whose output shares its input's bytes (an in-place plan) must still compute
    # the reference: the in-place form may not read what it already overwrote.
    op = ops.get(name)
    shapes = input_shapes(op, 3, 5)
    xs = [data.draw(arrays(s), label=f"in{k}") for k, s in enumerate(shapes)]
    params = {p: data.draw(param_values(), label=p) for p in op.defaults}
    with np.errstate(all="ignore"):
        want = np.asarray(op.reference([x.copy() for x in xs], **params), F32)
    alias = xs[0]
    op.compute_into(xs, alias, params)
    assert_same(alias, want, f"{name} in place over input 0")


# ------------------------------------------------------------------------------ fused chains
ELEMENTWISE = sorted(
    n
    for n in (*ops.BUILTIN_OPS, *(op.name for op in lib_elementwise.ELEMENTWISE_OPS))
    if ops.get(n).fusion_class in (ops.FusionClass.ELEMENTWISE, ops.FusionClass.BROADCAST)
)
ROWS = sorted(n for n in ops.BUILTIN_OPS if ops.get(n).fusion_class is ops.FusionClass.REDUCTION)


@st.composite
def chains(draw):
    """A chain x -> op -> op -> ... of element-wise ops with at most one row op, maybe
    starting with a matmul; binary ops take a fresh external input as second operand."""
    names = draw(st.lists(st.sampled_from(ELEMENTWISE), min_size=1, max_size=4))
    if draw(st.booleans()):
        names.insert(draw(st.integers(0, len(names))), draw(st.sampled_from(ROWS)))
    if draw(st.booleans()):
        names.insert(0, "matmul")
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    params = [{p: draw(param_values()) for p in ops.get(n).defaults} for n in names]
    return names, rows, cols, params


def _chain_graph(names, rows, cols, params):
    b = GraphBuilder()
    shapes: dict[str, tuple[int, ...]] = {}

    def ext(shape):
        name = f"x{len(shapes)}"
        shapes[name] = shape
        return b.alloc_external_buffer(name, 4 * math.prod(shape), shape=shape)

    cur_shape = (rows, cols)
    cur = ext(cur_shape)
    for j, (name, p) in enumerate(zip(names, params, strict=True)):
        op = ops.get(name)
        if name == "matmul":
            ins_shapes = [cur_shape, (cols, cols)]
        else:
            ins_shapes = [cur_shape]
            if name in (
                "bias_add",
                "batch_norm",
                "batch_norm_plain",
            ):  # vectors over the last axis / channels
                ins_shapes += [(cur_shape[-1],)] * (op.arity - 1)
            else:
                ins_shapes += [cur_shape] * (op.arity - 1)
        ins = [cur] + [ext(s) for s in ins_shapes[1:]]
        out_shape = ops.infer_shape(op, ins_shapes, {**op.defaults, **p}, "t")
        last = j == len(names) - 1
        out = b.alloc_buffer("out" if last else f"t{j}", 4 * math.prod(out_shape), shape=out_shape)
        kb = b.add_kernel(f"k{j}", 2, 32).op(name).inputs(ins).outputs([out]).fusible(True)
        if p:
            kb.params(**p)
        kb.finish()
        cur, cur_shape = out, out_shape
    return b.build(), shapes


def _c_chain(graph, inputs, so_dir, block):
    """Every kernel of ``graph`` as generated C, in topological order; the buffers' values."""
    vals = {graph.buffer_by_name(n).id: v for n, v in inputs.items()}
    for nid in graph.topological_order():
        node = graph.node(nid)
        if not node.is_kernel:
            continue
        outs = run_c(graph, node, [vals[b] for b in node.inputs], so_dir, block)
        vals.update(zip(node.outputs, outs, strict=True))
    return vals[graph.buffer_by_name("out").id]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), data=st.data(), block=st.sampled_from([1, 4, 32]))
def test_fused_chain_four_ways(chain, data, block, so_dir):
    names, rows, cols, params = chain
    g, shapes = _chain_graph(names, rows, cols, params)
    inputs = {n: data.draw(arrays(s), label=n) for n, s in shapes.items()}

    want = evaluate(g, inputs)["out"]
    unfused = ExecutionPlan.build(g, max_streams=1, fusion=False)
    fused = ExecutionPlan.build(g, max_streams=1, fusion=True)
    if len(names) > 1 and set(names) <= set(ELEMENTWISE):  # these always fuse into one
        assert [k.fused is not None for k in fused.graph.kernels()] == [True], names
    # numpy on both sides: bit for bit
    assert_same(evaluate(fused.graph, inputs)["out"], want, f"{names}: fused reference")
    assert_same(SequentialExecutor(unfused).run(inputs).outputs["out"], want, f"{names}: simulator")
    assert_same(
        SequentialExecutor(fused).run(inputs).outputs["out"], want, f"{names}: fused simulator"
    )
    # C on both sides (one libm, one block size, no contraction): bit for bit
    c_unfused = _c_chain(g, inputs, so_dir, block)
    assert_same(_c_chain(fused.graph, inputs, so_dir, block), c_unfused, f"{names}: fused C vs C")
    # numpy vs C: exact when every op is; otherwise each op's own tolerance is checked by
    # test_one_op_four_ways, and a chain can amplify it without bound (exp then sub), so a
    # chain-wide tolerance would be a guess.
    if set(names) <= EXACT:
        assert_same(c_unfused, want, f"{names}: generated C vs numpy")
