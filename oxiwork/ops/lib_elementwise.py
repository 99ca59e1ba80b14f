"""Element-wise ops real networks contain: inference batch norm, erf-GELU, SiLU,
hardtanh/ReLU6, rsqrt, pow by a scalar, scalar arithmetic, where and comparisons.

One :class:`~oxiwork.ops.table.OpDef` each (registered on import of :mod:`oxiwork.ops`):
numpy reference, in-place form where one is safe, CUDA C expression (so fused kernels
compose them), fusion class and cost. Every input broadcasts to the output by numpy's
rules (batch norm reads its per-channel vectors at axis 1, see :func:`channel_align`),
so a batch norm after a convolution or a matmul fuses as the head's epilogue, reading
``mean[c]`` by the broadcast index of the output element the head computed.

The ops compute what PyTorch computes, IEEE special values included (a NaN stays NaN
through hardtanh, ``gelu(-0.0)`` is ``+0.0``, ``pow(x, 0.5)`` is ``sqrt`` as torch
specialises it): the importer (:mod:`oxiwork.importers.torch`) maps ATen ops onto them,
and the tests compare them with torch on special values. Every value is float32;
comparisons give 1.0 or 0.0, and ``where`` takes a float condition (non-zero is true),
until the op table carries bool.

Example
-------
>>> import numpy as np
>>> from oxiwork import ops
>>> bn = ops.get("batch_norm")
>>> x = np.ones((1, 2, 1, 2), np.float32)
>>> mean, var = np.array([1, 0], np.float32), np.array([1, 4], np.float32)
>>> w, b = np.array([1, 2], np.float32), np.array([0, 1], np.float32)
>>> bn.reference([x, mean, var, w, b], eps=0.0).reshape(2, 2)
array([[0., 0.],
       [2., 2.]], dtype=float32)
>>> ops.get("hardtanh").reference([np.array([-3, np.nan, 0.5], np.float32)], min_val=-1, max_val=1)
array([-1. ,  nan,  0.5], dtype=float32)

References
----------
S. Ioffe and C. Szegedy, "Batch Normalization", ICML 2015, Algorithm 2 (inference);
D. Hendrycks and K. Gimpel, "Gaussian Error Linear Units (GELUs)", 2016 (the exact erf
form); S. Elfwing et al., "Sigmoid-Weighted Linear Units", Neural Networks 107, 2018
(SiLU); PyTorch's CPU kernels for the special cases of ``pow`` and ``gelu``
(``aten/src/ATen/native/cpu/Pow*.cpp``, ``Activation.cpp``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from oxiwork.ops.table import FusionClass, OpDef, Shape, _ew, _ShapeProblem, register

__all__ = ["ELEMENTWISE_OPS", "channel_align"]

F32 = np.float32
Arrays = Sequence[np.ndarray]


def _into(r: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``r`` as the result, written into ``out`` when given."""
    if out is None:
        return np.asarray(r, F32)
    np.copyto(out, r, casting="unsafe")
    return out


# ----------------------------------------------------------------------------- batch norm
def channel_align(shapes: Sequence[Shape], params: Mapping[str, float]) -> list[Shape]:
    """How batch norm reads its inputs: ``x`` as is, each per-channel vector as
    ``(C, 1, ..., 1)``, so numpy's broadcasting puts it on axis 1 of ``x``.

    >>> channel_align([(8, 3, 4, 4), (3,), (3,), (3,), (3,)], {})[1]
    (3, 1, 1)
    >>> channel_align([(8, 3), (3,), (3,), (3,), (3,)], {})[1]
    (3,)
    """
    x = tuple(shapes[0])
    c = (x[1],) + (1,) * (len(x) - 2)
    return [x, *([c] * (len(shapes) - 1))]


def _batch_norm_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x = tuple(shapes[0])
    if len(x) < 2:
        raise _ShapeProblem(
            f"batch_norm needs an input of shape (N, C, ...), got {x}; give the buffer a shape="
        )
    for k, s in enumerate(shapes[1:], start=1):
        if math.prod(s) != x[1]:
            raise _ShapeProblem(
                f"batch_norm's input {k} (mean, var, weight, bias) needs {x[1]} elements, one "
                f"per channel of x {x}, got shape {tuple(s)}"
            )
    return x


def _batch_norm(xs: Arrays, out: np.ndarray | None = None, *, eps: float) -> np.ndarray:
    # (x - mean) / sqrt(var + eps) * weight + bias, one float32 operation at a time in the
    # order of the CUDA expression (all correctly rounded, so numpy and C agree bit for
    # bit); only the first step reads x, so ``out`` may be x itself.
    shapes = channel_align([a.shape for a in xs], {})
    x, mean, var, w, b = (a.reshape(s) for a, s in zip(xs, shapes, strict=True))
    den = np.sqrt(np.add(var, F32(eps), dtype=F32))
    t = np.subtract(x, mean, out=out, dtype=F32)
    np.divide(t, den, out=t)
    np.multiply(t, w, out=t)
    return np.add(t, b, out=t)


# ----------------------------------------------------------------------------- activations
_SQRT1_2 = "0.70710678118654752f"
# numpy has no erf: math.erf (the C library's double erf) per element, rounded to float32
# as CUDA's erff (within 2 ulp of the true value) rounds.
_erf64 = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.asarray(_erf64(x.astype(np.float64)), np.float64).astype(F32)


def _gelu_erf(xs: Arrays) -> np.ndarray:
    # torch's exact GELU as its CPU kernel rounds it: 0.5x + 0.5x * erf(x / sqrt 2), which
    # gives +0.0 at -0.0 and at large negative x (0.5x * (1 + erf) would give -0.0)
    x = np.asarray(xs[0], F32)
    h = x * F32(0.5)
    return h + h * _erf(x * F32(0.70710678118654752))


def _silu(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    # x / (1 + exp(-x)) as torch computes it (silu(-inf) is NaN, silu(-0.0) is -0.0); the
    # last step reads x and the temporary only, element for element, so out may be x
    x = xs[0]
    t = np.exp(np.negative(x))
    np.add(F32(1), t, out=t)
    return np.divide(x, t, out=out)


def _clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    # x < lo ? lo : (x > hi ? hi : x): NaN fails both tests and stays NaN, and -0.0 is kept,
    # as torch's hardtanh (a clamp) does; fminf/fmaxf would map NaN to a bound
    lo32, hi32 = F32(lo), F32(hi)
    return np.where(x < lo32, lo32, np.where(x > hi32, hi32, x)).astype(F32, copy=False)


def _hardtanh(
    xs: Arrays, out: np.ndarray | None = None, *, min_val: float, max_val: float
) -> np.ndarray:
    return _into(_clamp(xs[0], min_val, max_val), out)


def _relu6(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    return _into(_clamp(xs[0], 0.0, 6.0), out)


_CLAMP_EXPR = "(({0}) < {lo} ? {lo} : (({0}) > {hi} ? {hi} : ({0})))"


def _rsqrt(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    # 1 / sqrt(x): two correctly rounded operations (rsqrtf is an approximation)
    t = np.sqrt(xs[0], out=out)
    return np.divide(F32(1), t, out=t)


# torch computes these exponents with plain arithmetic instead of pow (its CPU and CUDA
# kernels): the results, and their special values, differ from powf's (pow(-0.0, 0.5) is
# +0.0, sqrt(-0.0) is -0.0). The expression tests the exponent at run time, so it stays a
# kernel argument.
_POW_CASES: tuple[tuple[float, Callable[[np.ndarray], np.ndarray], str], ...] = (
    (2.0, lambda x: x * x, "({0} * {0})"),
    (3.0, lambda x: x * x * x, "({0} * {0} * {0})"),
    (0.5, np.sqrt, "sqrtf({0})"),
    (-0.5, lambda x: F32(1) / np.sqrt(x), "(1.0f / sqrtf({0}))"),
    (-1.0, lambda x: F32(1) / x, "(1.0f / {0})"),
    (-2.0, lambda x: F32(1) / (x * x), "(1.0f / ({0} * {0}))"),
)


def _pow_expr() -> str:
    expr = "powf({0}, {exponent})"
    for e, _, c in reversed(_POW_CASES):
        expr = f"({{exponent}} == {e!r}f ? {c} : {expr})"
    return expr


def _pow(xs: Arrays, *, exponent: float) -> np.ndarray:
    x = np.asarray(xs[0], F32)
    for e, fn, _ in _POW_CASES:
        if F32(exponent) == F32(e):
            return np.asarray(fn(x), F32)
    return np.power(x, F32(exponent))


# ----------------------------------------------------------------------------- where, compare
def _where(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    c, a, b = xs
    return _into(np.where(c != 0, a, b), out)


def _compare(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
        return _into(ufunc(xs[0], xs[1]).astype(F32), out)

    return fn


_COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_UFUNCS = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _scalar(name: str, ufunc: np.ufunc, expr: str, *, swap: bool = False) -> OpDef:
    # a tensor and a Python number: the number is the parameter ``other`` (a kernel
    # argument), not lost and not a buffer
    def fn(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
        o = F32(other)
        return ufunc(o, xs[0], out=out) if swap else ufunc(xs[0], o, out=out)

    return _ew(name, 1, fn, expr, params=(("other", 1.0),))


ELEMENTWISE_OPS: tuple[OpDef, ...] = (
    OpDef(
        "batch_norm",
        FusionClass.BROADCAST,
        5,
        reference=lambda xs, eps: _batch_norm(xs, eps=eps),
        inplace=_batch_norm,
        params=(("eps", 1e-5),),
        expr="((({0} - {1}) / sqrtf({2} + {eps})) * {3} + {4})",
        shape=_batch_norm_shape,
        align=channel_align,
        flops_per_element=5.0,
    ),
    # gelu_erf and its two reads of 0.5x: the default rule (a temporary, then a copy)
    _ew(
        "gelu_erf",
        1,
        _gelu_erf,
        f"(0.5f * {{0}} + 0.5f * {{0}} * erff({{0}} * {_SQRT1_2}))",
        flops=14.0,
        inplace=False,
    ),
    _ew("silu", 1, _silu, "({0} / (1.0f + expf(-{0})))", flops=6.0),
    _ew(
        "hardtanh",
        1,
        _hardtanh,
        _CLAMP_EXPR.replace("{lo}", "{min_val}").replace("{hi}", "{max_val}"),
        flops=2.0,
        params=(("min_val", -1.0), ("max_val", 1.0)),
    ),
    _ew("relu6", 1, _relu6, _CLAMP_EXPR.replace("{lo}", "0.0f").replace("{hi}", "6.0f"), 2.0),
    _ew("rsqrt", 1, _rsqrt, "(1.0f / sqrtf({0}))", flops=2.0),
    _ew("pow_scalar", 1, _pow, _pow_expr(), flops=4.0, params=(("exponent", 2.0),), inplace=False),
    _scalar("add_scalar", np.add, "({0} + {other})"),
    _scalar("sub_scalar", np.subtract, "({0} - {other})"),
    _scalar("rsub_scalar", np.subtract, "({other} - {0})", swap=True),
    _scalar("div_scalar", np.divide, "({0} / {other})"),
    _ew("where", 3, _where, "(({0}) != 0.0f ? ({1}) : ({2}))"),
    *(
        _ew(name, 2, _compare(_UFUNCS[name]), f"(({{0}}) {sym} ({{1}}) ? 1.0f : 0.0f)")
        for name, sym in _COMPARISONS.items()
    ),
)

for _op in ELEMENTWISE_OPS:
    register(_op)
