"""Element-wise ops real networks contain: inference batch norm (with or without affine
weight and bias), erf-GELU, SiLU, hardtanh/ReLU6, one-sided clamps, leaky ReLU, ELU
(SELU), abs, sqrt, rsqrt, log1p, expm1, pow by a scalar, scalar arithmetic, where and
comparisons.

One :class:`~oxiwork.ops.table.OpDef` each (registered on import of :mod:`oxiwork.ops`):
numpy reference, in-place form where one is safe, CUDA C expression (so fused kernels
compose them), fusion class and cost. Every input broadcasts to the output by numpy's
rules (batch norm reads its per-channel vectors at axis 1, see :func:`channel_align`),
so a batch norm after a convolution or a matmul fuses as the head's epilogue, reading
``mean[c]`` by the broadcast index of the output element the head computed.

The ops compute what PyTorch computes, IEEE special values included (a NaN stays NaN
through hardtanh, ``gelu(-0.0)`` is ``+0.0``, ``pow(x, 0.5)`` is ``sqrt`` as torch
specialises it): the importer (:mod:`oxiwork.importers.torch`) maps ATen ops onto them,
and the tests compare them with torch on special values.

bool and integers (:data:`BOOL_OPS`, and the arithmetic of :mod:`oxiwork.ops.table`):
comparisons (``eq``... ``ge``, and ``<name>_scalar`` against a number) give bool;
``where`` selects by a bool condition (any value: non-zero is true) between branches of
one dtype; ``bitwise_and/or/xor`` take bool or one integer dtype, ``bitwise_not``
integers (the negation of a bool is ``logical_not``); ``logical_*`` take anything and give
bool; ``check`` is a program's run-time check (``OpDef.check``). Integer
``add``/``sub``/``mul`` and the scalar ops compute exactly in the integer's own C type: a
scalar parameter of an integer op is a whole number, passed to the kernel as that type
(``long long``), never through a float.

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
>>> ops.get("ge_scalar").reference([np.array([2**40, -1])], other=0)
array([ True, False])

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
from dataclasses import replace
from typing import Any

import numpy as np

from oxiwork.ops.table import (
    COMPUTE_DTYPES,
    FLOAT_COMPUTE,
    INT_DTYPES,
    DtypeProblem,
    FusionClass,
    OpDef,
    Shape,
    _ew,
    _ShapeProblem,
    float_dtype,
    numeric_dtype,
    register,
    typed_scalar,
)

__all__ = ["BOOL_OPS", "ELEMENTWISE_OPS", "INT_OPS", "MATH_OPS", "channel_align"]

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
    # bit); only the first step reads x, so ``out`` may be x itself. Without weight and
    # bias (``batch_norm_plain``, 3 inputs) it stops after the division.
    shapes = channel_align([a.shape for a in xs], {})
    x, mean, var, *affine = (a.reshape(s) for a, s in zip(xs, shapes, strict=True))
    den = np.sqrt(np.add(var, F32(eps), dtype=F32))
    t = np.subtract(x, mean, out=out, dtype=F32)
    np.divide(t, den, out=t)
    if not affine:
        return t
    w, b = affine
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
    # torch's exact GELU as ATen rounds it, on CUDA and in its own CPU kernel alike:
    # (x * 0.5) * (1 + erf(x / sqrt 2)), so -0.0 at -0.0 and at large negative x, NaN at
    # -inf. (oneDNN's CPU kernel, which eager may use instead, differs by the machine's
    # ISA: +0.0 there with AVX2, NaN at +inf with AVX-512.)
    x = np.asarray(xs[0], F32)
    with np.errstate(invalid="ignore"):  # -inf * 0: NaN, as in C
        return (x * F32(0.5)) * (F32(1.0) + _erf(x * F32(0.70710678118654752)))


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


def _clamp_min(xs: Arrays, out: np.ndarray | None = None, *, min_val: float) -> np.ndarray:
    # x < lo ? lo : x (torch.clamp(x, min=lo)): NaN and -0.0 stay, as in _clamp
    lo32 = F32(min_val)
    return _into(np.where(xs[0] < lo32, lo32, xs[0]), out)


def _clamp_max(xs: Arrays, out: np.ndarray | None = None, *, max_val: float) -> np.ndarray:
    hi32 = F32(max_val)
    return _into(np.where(xs[0] > hi32, hi32, xs[0]), out)


def _leaky_relu(xs: Arrays, out: np.ndarray | None = None, *, negative_slope: float) -> np.ndarray:
    # x > 0 ? x : x * slope, torch's CPU kernel: NaN stays NaN, -0.0 times slope
    x = xs[0]
    return _into(np.where(x > 0, x, x * F32(negative_slope)), out)


def _elu(
    xs: Arrays, out: np.ndarray | None = None, *, alpha: float, scale: float, input_scale: float
) -> np.ndarray:
    # x <= 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale, torch's CPU kernel
    # (SELU is this with its two constants); float32 operations in the C expression's order
    x = xs[0]
    with np.errstate(over="ignore", invalid="ignore"):
        neg = np.expm1(x * F32(input_scale)) * (F32(alpha) * F32(scale))
        return _into(np.where(x <= 0, neg, x * F32(scale)), out)


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
def _value_dtype(dtypes: Sequence[str], params: Mapping[str, float], what: str) -> str:
    """The one dtype ``dtypes`` (values compared or selected) compute in: floats promote
    as :func:`float_dtype`; integers and bool must agree (torch would promote them: cast)."""
    if all(d in FLOAT_COMPUTE for d in dtypes):
        return float_dtype(dtypes, params)
    first = dtypes[0]
    for k, d in enumerate(dtypes):
        if d not in COMPUTE_DTYPES:
            raise DtypeProblem(f"input {k} is {d}, which kernels do not compute on")
        if d != first:
            to = "float32" if {first, d} & set(FLOAT_COMPUTE) else "int64"
            raise DtypeProblem(
                f"{what} {first} and {d} values; torch would promote them: cast them to one "
                f"dtype first (op 'cast_{to}')"
            )
    if first in INT_DTYPES:
        for p, v in params.items():
            if not float(v).is_integer():
                raise DtypeProblem(
                    f"input 0 is {first} but the scalar {p}={v!r} is not a whole number; "
                    "torch compares that in float: cast the input first (op 'cast_float32')"
                )
    return first


def _where_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    # the condition: bool (or any value, non-zero is true); the branches: one dtype
    if dtypes[0] not in COMPUTE_DTYPES:
        raise DtypeProblem(f"the condition (input 0) is {dtypes[0]}; give it as bool")
    return _value_dtype(dtypes[1:], params, "it selects between")


def _compare_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    _value_dtype(dtypes, params, "it compares")
    return "bool"


def _where(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    c, a, b = xs
    r = np.where(c != 0, a, b)  # in the branches' dtype: integers stay exact
    if out is None:
        return r
    np.copyto(out, r, casting="unsafe")
    return out


def _compare(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays) -> np.ndarray:
        return ufunc(xs[0], xs[1])

    return fn


def _compare_scalar(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays, *, other: float) -> np.ndarray:
        return ufunc(xs[0], typed_scalar(xs[0], other))

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


# ----------------------------------------------------------------------------- bool, bits
def _bits_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """bitwise and/or/xor: bool or one integer dtype, the result in it."""
    first = dtypes[0]
    for k, d in enumerate(dtypes):
        if d not in ("bool", *sorted(INT_DTYPES)):
            raise DtypeProblem(
                f"input {k} is {d}; bitwise ops take bool or integers: compare it first "
                "(op 'ne_scalar' with other=0), or cast it (op 'cast_bool')"
            )
        if d != first:
            raise DtypeProblem(
                f"input 0 is {first} but input {k} is {d}; bitwise ops take one dtype: cast "
                "one of them first (op 'cast_int64')"
            )
    return first


def _not_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] == "bool":
        raise DtypeProblem("input 0 is bool; its negation is op 'logical_not' (~ of a bool)")
    if dtypes[0] not in INT_DTYPES:
        raise DtypeProblem(
            f"input 0 is {dtypes[0]}; bitwise_not takes integers: cast it first (op 'cast_int64')"
        )
    return dtypes[0]


def _logical_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    for k, d in enumerate(dtypes):
        if d not in COMPUTE_DTYPES:
            raise DtypeProblem(f"input {k} is {d}, which kernels do not compute on")
    return "bool"


def _bits(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays) -> np.ndarray:
        return ufunc(*xs)

    return fn


def _truth(x: np.ndarray) -> np.ndarray:
    return np.asarray(x) != 0  # NaN is true, as in C and torch


def _logical(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays) -> np.ndarray:
        return ufunc(*(_truth(x) for x in xs))

    return fn


def _bool_op(
    name: str, arity: int, fn: Callable[..., np.ndarray], expr: str, rule: Any, **kw: Any
) -> OpDef:
    # results in the rule's dtype (bool, or the integers'); half inputs widen exactly
    return _ew(name, arity, fn, expr, dtype=rule, inplace=False, **kw)


BOOL_OPS: tuple[OpDef, ...] = (
    *(
        _bool_op(name, 2, _compare(_UFUNCS[name]), f"(({{0}}) {sym} ({{1}}))", _compare_dtype)
        for name, sym in _COMPARISONS.items()
    ),
    # a tensor against a number (``ids >= 0``); an integer input takes a whole number,
    # passed to the kernel in the input's C type so the comparison is exact
    *(
        _bool_op(
            f"{name}_scalar",
            1,
            _compare_scalar(_UFUNCS[name]),
            f"(({{0}}) {sym} ({{other}}))",
            _compare_dtype,
            params=(("other", 0.0),),
        )
        for name, sym in _COMPARISONS.items()
    ),
    _bool_op("bitwise_and", 2, _bits(np.bitwise_and), "(({0}) & ({1}))", _bits_dtype),
    _bool_op("bitwise_or", 2, _bits(np.bitwise_or), "(({0}) | ({1}))", _bits_dtype),
    _bool_op("bitwise_xor", 2, _bits(np.bitwise_xor), "(({0}) ^ ({1}))", _bits_dtype),
    _bool_op("bitwise_not", 1, _bits(np.invert), "(~({0}))", _not_dtype),
    _bool_op(
        "logical_and", 2, _logical(np.logical_and), "(({0}) != 0 && ({1}) != 0)", _logical_dtype
    ),
    _bool_op(
        "logical_or", 2, _logical(np.logical_or), "(({0}) != 0 || ({1}) != 0)", _logical_dtype
    ),
    _bool_op(
        "logical_xor", 2, _logical(np.logical_xor), "((({0}) != 0) != (({1}) != 0))", _logical_dtype
    ),
    _bool_op("logical_not", 1, _logical(np.logical_not), "(({0}) == 0)", _logical_dtype),
    # A program's run-time check (a model's torch._check, which torch.export keeps as an
    # assertion on a value read with .item()): the condition's truth, which must hold in
    # every element (OpDef.check: the executors raise CheckFailed where it does not).
    # Never fused, so the flag reaches memory, where both executors read it.
    replace(
        _bool_op(
            "check",
            1,
            lambda xs: _truth(xs[0]),
            "(({0}) != 0)",
            _logical_dtype,
            fusion_class=FusionClass.OPAQUE,
        ),
        check=True,
    ),
)


# ----------------------------------------------------------------------------- math
def _unary(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):
            return ufunc(xs[0], out=out)

    return fn


def _sign(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    # torch.sign: (0 < x) - (x < 0), so NaN gives 0 (numpy's sign keeps NaN)
    x = xs[0]
    return _into((x > 0).astype(F32) - (x < 0).astype(F32), out)


# NaN-propagating extremes in C (a NaN first operand is the result, a NaN second one fails
# the comparison), a tie keeping the first operand: as _extreme
_MAXIMUM = "((({0}) != ({0}) || ({0}) >= ({1})) ? ({0}) : ({1}))"
_MINIMUM = "((({0}) != ({0}) || ({0}) <= ({1})) ? ({0}) : ({1}))"


def _extreme(larger: bool) -> Callable[..., np.ndarray]:
    # torch.maximum/minimum: a NaN on either side is the result; a tie keeps the first
    # operand (of -0.0 and 0.0, torch's vector and scalar loops choose differently, numpy
    # the second: a fixed rule here, the same in the C)
    def fn(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
        a, b = np.broadcast_arrays(*xs)
        keep = (a >= b) if larger else (a <= b)
        if a.dtype.kind == "f":
            keep = keep | np.isnan(a)
        r = np.where(keep, a, b)
        if out is None:
            return r
        np.copyto(out, r, casting="unsafe")
        return out

    return fn


def _clamp_tensors(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
    # torch.clamp(x, min, max) by tensors: minimum(maximum(x, min), max), torch's own order
    # (a NaN anywhere is the result; min > max gives max, as torch)
    return _extreme(False)([_extreme(True)(xs[:2]), xs[2]], out)


def _remainder(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
    # torch.remainder of floats: fmod, then + other where the signs differ (zero keeps fmod's
    # sign, where numpy's takes the divisor's)
    b = typed_scalar(xs[0], other)
    with np.errstate(all="ignore"):
        m = np.fmod(xs[0], b)
        r = np.where((m != 0) & ((b < 0) != (m < 0)), m + b, m)
    return _into(r, out)


def _fmod(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.fmod(xs[0], typed_scalar(xs[0], other), out=out)


def _int_divide_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    # integers only (torch's float floor division has rounding rules of its own), by a
    # whole number that is not 0 (torch raises on an integer division by zero)
    if dtypes[0] not in INT_DTYPES:
        raise DtypeProblem(
            f"input 0 is {dtypes[0]}; the library's integer divisions take int64 or int32 "
            "(a float floor division stays an opaque kernel; remainder_scalar takes floats)"
        )
    other = params.get("other", 1.0)
    if other == 0:
        raise DtypeProblem("the divisor other=0: integer division by zero (torch raises too)")
    # a divisor the input's type holds, and exactly as a float parameter (int64: 2**53)
    bound = 2**31 if dtypes[0] == "int32" else 2**53
    if not -bound <= other <= bound - (dtypes[0] == "int32"):
        raise DtypeProblem(
            f"the divisor other={other!r} is outside the range a {dtypes[0]} divisor may take here "
            f"([{-bound}, {bound - (dtypes[0] == 'int32')}])"
        )
    return numeric_dtype(dtypes, params)


def _into_exact(r: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``r`` in its own (integer) dtype, written into ``out`` when given (:func:`_into`'s
    result is float32)."""
    if out is None:
        return r
    np.copyto(out, r, casting="unsafe")
    return out


def _int_divide(floor: bool) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
        x, b = xs[0], typed_scalar(xs[0], other)
        with np.errstate(all="ignore"):  # the lowest integer by -1 wraps to itself
            q = np.floor_divide(x, b)
            if not floor:  # toward zero: one more where a remainder has the other sign
                q = q + ((np.remainder(x, b) != 0) & ((x < 0) != (b < 0))).astype(x.dtype)
        return _into_exact(q, out)

    return fn


# x / -1 negates in unsigned arithmetic: the lowest integer wraps to itself (a signed
# division traps there on x86, torch's CPU kernel included)
_NEGATED = "(0ull - (unsigned long long)({0}))"
_FLOOR_DIVIDE = (
    f"(({{other}}) == -1 ? {_NEGATED} : ({{0}}) / ({{other}}) - "
    "(({0}) % ({other}) != 0 && (({0}) < 0) != (({other}) < 0)))"
)
_TRUNC_DIVIDE = f"(({{other}}) == -1 ? {_NEGATED} : ({{0}}) / ({{other}}))"
# torch.remainder of integers: C's remainder (the dividend's sign) moved to the divisor's; by
# -1 always 0 (C's lowest-integer % -1 traps on x86 as its division does)
_REMAINDER = (
    "(({other}) == -1 ? 0 : (({0}) % ({other}) != 0 && (({0}) % ({other}) < 0) != "
    "(({other}) < 0)) ? ({0}) % ({other}) + ({other}) : ({0}) % ({other}))"
)


def _int_remainder(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
    # numpy's integer remainder takes the divisor's sign, as torch's
    with np.errstate(all="ignore"):
        return _into_exact(np.remainder(xs[0], typed_scalar(xs[0], other)), out)


def _binary_math(ufunc: np.ufunc) -> Callable[..., np.ndarray]:
    def fn(xs: Arrays, out: np.ndarray | None = None) -> np.ndarray:
        with np.errstate(all="ignore"):
            return _into(ufunc(xs[0], xs[1]), out)

    return fn


def _isnan_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] not in COMPUTE_DTYPES:
        raise DtypeProblem(f"input 0 is {dtypes[0]}, which kernels do not compute on")
    return "bool"


MATH_OPS: tuple[OpDef, ...] = (
    # libm functions (numpy's float32 ufuncs on the reference side, the CUDA single
    # precision functions in the C: each within a few ulp of the true value)
    *(
        _ew(name, 1, _unary(ufunc), f"{c}({{0}})", flops=8.0)
        for name, ufunc, c in (
            ("sin", np.sin, "sinf"),
            ("cos", np.cos, "cosf"),
            ("tan", np.tan, "tanf"),
            ("asin", np.arcsin, "asinf"),
            ("acos", np.arccos, "acosf"),
            ("atan", np.arctan, "atanf"),
            ("sinh", np.sinh, "sinhf"),
            ("cosh", np.cosh, "coshf"),
            ("log2", np.log2, "log2f"),
            ("log10", np.log10, "log10f"),
            ("exp2", np.exp2, "exp2f"),
        )
    ),
    _ew("erf", 1, lambda xs, out=None: _into(_erf(xs[0]), out), "erff({0})", flops=8.0),
    # exact: rounding to integers (torch.round: half to even, rintf), sign, 1 / x
    *(
        _ew(name, 1, _unary(ufunc), f"{c}({{0}})")
        for name, ufunc, c in (
            ("floor", np.floor, "floorf"),
            ("ceil", np.ceil, "ceilf"),
            ("trunc", np.trunc, "truncf"),
            ("round", np.rint, "rintf"),
        )
    ),
    _ew("sign", 1, _sign, "((float)(0.0f < ({0})) - (float)(({0}) < 0.0f))"),
    _ew("reciprocal", 1, _unary(np.reciprocal), "(1.0f / ({0}))"),
    _bool_op("isnan", 1, lambda xs: np.isnan(xs[0]), "(({0}) != ({0}))", _isnan_dtype),
    # binary, broadcasting: NaN propagating extremes (integers exact), pow, atan2
    _ew(
        "maximum",
        2,
        _extreme(True),
        _MAXIMUM,
        dtype=numeric_dtype,
    ),
    _ew(
        "minimum",
        2,
        _extreme(False),
        _MINIMUM,
        dtype=numeric_dtype,
    ),
    # clamp by two tensors: minimum's expression around maximum's, as _clamp_tensors
    _ew(
        "clamp_tensors",
        3,
        _clamp_tensors,
        _MINIMUM.replace("{1}", "{2}").replace("{0}", _MAXIMUM),
        dtype=numeric_dtype,
    ),
    _ew("pow", 2, _binary_math(np.power), "powf({0}, {1})", flops=8.0, inplace=False),
    _ew("atan2", 2, _binary_math(np.arctan2), "atan2f({0}, {1})", flops=8.0, inplace=False),
    # sqrt(x^2 + y^2) without overflow or underflow on the way; an infinity wins over a NaN
    # (C99's hypot, numpy's and torch's): hypot(inf, NaN) is inf
    _ew("hypot", 2, _binary_math(np.hypot), "hypotf({0}, {1})", flops=8.0, inplace=False),
    # x fmod / remainder a number (fmod is exact; remainder one addition after it)
    _ew("fmod_scalar", 1, _fmod, "fmodf({0}, {other})", params=(("other", 1.0),)),
    _ew(
        "remainder_scalar",
        1,
        _remainder,
        "((fmodf({0}, {other}) != 0.0f && (({other}) < 0.0f) != (fmodf({0}, {other}) < 0.0f))"
        " ? fmodf({0}, {other}) + ({other}) : fmodf({0}, {other}))",
        params=(("other", 1.0),),
        inplace=False,
    ),
)
"""Math functions: libm ones (sin ... exp2, erf), roundings, sign, reciprocal, isnan (bool),
maximum/minimum (NaN propagating as torch, a tie keeping the first operand) and clamp by
two tensors (their composition), pow, atan2 and hypot of two tensors, fmod and remainder
by a number (torch's sign rules)."""

INT_OPS: tuple[OpDef, ...] = (
    # integer division by a number, rounded down (x // n, torch.div(rounding_mode="floor"))
    # or toward zero (rounding_mode="trunc", C's own division)
    _ew(
        "floor_divide_scalar",
        1,
        _int_divide(True),
        _FLOOR_DIVIDE,
        params=(("other", 1.0),),
        dtype=_int_divide_dtype,
    ),
    _ew(
        "trunc_divide_scalar",
        1,
        _int_divide(False),
        _TRUNC_DIVIDE,
        params=(("other", 1.0),),
        dtype=_int_divide_dtype,
    ),
    # x % n of integers (torch.remainder: the divisor's sign; CANINE hashes its ids so)
    _ew(
        "remainder_int_scalar",
        1,
        _int_remainder,
        _REMAINDER,
        params=(("other", 1.0),),
        dtype=_int_divide_dtype,
    ),
)
"""Integer division by a number, rounded down (``floor_divide_scalar``: ``x // n``,
``torch.div(rounding_mode="floor")``) or toward zero (``trunc_divide_scalar``:
``rounding_mode="trunc"``, C's own division), int64 or int32 by a whole number other than
0; the lowest integer divided by -1 wraps to itself (where torch's CPU kernel traps); and
their remainder by a number (``remainder_int_scalar``: torch.remainder's, of the divisor's
sign)."""


def _scalar(
    name: str, ufunc: np.ufunc, expr: str, *, swap: bool = False, ints: bool = True
) -> OpDef:
    # a tensor and a Python number: the number is the parameter ``other`` (a kernel
    # argument), not lost and not a buffer; on integers it is a whole number in the
    # input's type (the kernel takes it as that C type), so the result is exact
    def fn(xs: Arrays, out: np.ndarray | None = None, *, other: float) -> np.ndarray:
        o = typed_scalar(xs[0], other)
        return ufunc(o, xs[0], out=out) if swap else ufunc(xs[0], o, out=out)

    return _ew(
        name, 1, fn, expr, params=(("other", 1.0),), dtype=numeric_dtype if ints else float_dtype
    )


def _batch_norm_op(name: str, affine: bool) -> OpDef:
    """Inference batch norm: ``(x - mean) / sqrt(var + eps)``, then ``* weight + bias``
    where ``affine`` (5 inputs, else 3)."""
    norm = "(({0} - {1}) / sqrtf({2} + {eps}))"
    return OpDef(
        name,
        FusionClass.BROADCAST,
        5 if affine else 3,
        reference=lambda xs, eps: _batch_norm(xs, eps=eps),
        inplace=_batch_norm,
        params=(("eps", 1e-5),),
        expr=f"({norm} * {{3}} + {{4}})" if affine else norm,
        shape=_batch_norm_shape,
        align=channel_align,
        flops_per_element=5.0 if affine else 3.0,
    )


ELEMENTWISE_OPS: tuple[OpDef, ...] = (
    _batch_norm_op("batch_norm", affine=True),
    # batch norm without affine weight and bias (BatchNorm(affine=False), InstanceNorm with
    # running statistics): the same expression, stopped before the scale and shift, so no
    # multiplication by 1 or addition of 0 (which would turn a -0.0 result into +0.0)
    _batch_norm_op("batch_norm_plain", affine=False),
    # gelu_erf and its two reads of x: the default rule (a temporary, then a copy)
    _ew(
        "gelu_erf",
        1,
        _gelu_erf,
        f"({{0}} * 0.5f * (1.0f + erff({{0}} * {_SQRT1_2})))",
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
    _ew("abs", 1, lambda xs, out=None: np.abs(xs[0], out=out), "fabsf({0})", flops=1.0),
    _ew("sqrt", 1, lambda xs, out=None: np.sqrt(xs[0], out=out), "sqrtf({0})", flops=1.0),
    _ew("log1p", 1, lambda xs, out=None: np.log1p(xs[0], out=out), "log1pf({0})", flops=4.0),
    _ew("expm1", 1, lambda xs, out=None: np.expm1(xs[0], out=out), "expm1f({0})", flops=4.0),
    # one-sided clamps (torch.clamp with one bound), NaN kept like hardtanh's
    _ew(
        "clamp_min",
        1,
        _clamp_min,
        "(({0}) < {min_val} ? {min_val} : ({0}))",
        params=(("min_val", 0.0),),
    ),
    _ew(
        "clamp_max",
        1,
        _clamp_max,
        "(({0}) > {max_val} ? {max_val} : ({0}))",
        params=(("max_val", 0.0),),
    ),
    _ew(
        "leaky_relu",
        1,
        _leaky_relu,
        "(({0}) > 0.0f ? ({0}) : ({0}) * {negative_slope})",
        flops=1.0,
        params=(("negative_slope", 0.01),),
    ),
    _ew(
        "elu",
        1,
        _elu,
        "(({0}) <= 0.0f ? expm1f(({0}) * {input_scale}) * ({alpha} * {scale}) : ({0}) * {scale})",
        flops=6.0,
        params=(("alpha", 1.0), ("scale", 1.0), ("input_scale", 1.0)),
        inplace=False,
    ),
    _ew("pow_scalar", 1, _pow, _pow_expr(), flops=4.0, params=(("exponent", 2.0),), inplace=False),
    _scalar("add_scalar", np.add, "({0} + {other})"),
    _scalar("sub_scalar", np.subtract, "({0} - {other})"),
    _scalar("rsub_scalar", np.subtract, "({other} - {0})", swap=True),
    _scalar("div_scalar", np.divide, "({0} / {other})", ints=False),
    # the condition is bool (any value: non-zero is true, NaN included); the branches of one
    # dtype (floats promote), integers selected exactly
    _ew("where", 3, _where, "(({0}) != 0 ? ({1}) : ({2}))", dtype=_where_dtype),
)

for _op in (*ELEMENTWISE_OPS, *BOOL_OPS, *MATH_OPS, *INT_OPS):
    register(_op)
