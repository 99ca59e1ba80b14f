"""The op table: every op oxiwork knows, defined once.

One :class:`OpDef` per op carries everything the rest of the engine needs: how the fusion
pass may treat it (:class:`FusionClass`, after TVM's operator patterns), its numpy
reference, its CUDA C (an expression template for element-wise ops so that fused kernels
compose them, a row recipe for reductions, or a full-kernel generator), its output shape
rule and its cost. Adding an op is adding one entry (``register`` or ``custom``); no
``if op == ...`` chains elsewhere.

Dtypes: every op has a result dtype rule (``OpDef.dtype``, like its shape rule) that
also says which input dtypes it accepts. Floating-point ops compute like PyTorch's
CUDA kernels: float16 and bfloat16 values are widened to float32 for the math (the
"opmath" type, accumulations included) and the result is rounded once per op to its
dtype; mixed float inputs promote to float32 (torch's promotion among these three).
References are written in float32 (``widen``: the op table widens half inputs before
calling them and rounds their result), and the generated C loads every value as
``float`` and rounds when it stores. Casts between dtypes are ops of their own
(:mod:`oxiwork.ops.lib_dtype`), so a fused chain has one dtype per step.

Example
-------
>>> import numpy as np
>>> from oxiwork import ops
>>> relu = ops.get("relu")
>>> relu.fusion_class.name, relu.expr
('ELEMENTWISE', 'fmaxf({0}, 0.0f)')
>>> relu.reference([np.array([-1.0, 2.0], np.float32)])
array([0., 2.], dtype=float32)

References
----------
T. Chen et al., "TVM: An Automated End-to-End Optimizing Compiler for Deep Learning",
OSDI 2018, section 4.1 (operator fusion: injective, reduction, complex-out-fusable and
opaque operators).
"""

from __future__ import annotations

import enum
import math
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.node import DTYPES
from oxiwork.ops import cnames
from oxiwork.validate import MAX_PARAMS

__all__ = [
    "COMPUTE_DTYPES",
    "HALF_DTYPES",
    "INT_DTYPES",
    "REGISTRY",
    "DtypeProblem",
    "DtypeRule",
    "FusionClass",
    "OpDef",
    "Shape",
    "any_dtype",
    "bind_params",
    "broadcast_shape",
    "broadcast_terms",
    "custom",
    "float32_dtype",
    "float_dtype",
    "get",
    "infer_dtype",
    "infer_shape",
    "numeric_dtype",
    "output_dtype",
    "reduction_terms",
    "register",
    "typed_scalar",
    "widen",
]

Shape = tuple[int, ...]
F32 = np.float32


class FusionClass(enum.Enum):
    """How the fusion pass may combine an op with its neighbours (TVM, OSDI 2018, 4.1).

    - ``ELEMENTWISE``: output element i depends on input element i only (relu, add...);
    - ``BROADCAST``: like element-wise, but some input is broadcast by the op's own rule
      (``bias_add``'s bias over the leading axes); element-wise ops broadcast too, by
      numpy's rules, and fuse the same way;
    - ``INJECTIVE``: each output element reads one input element, at another index
      (transpose); not fused here;
    - ``REDUCTION``: a row of the input becomes one value (sum, max) or a row again
      (softmax, layer_norm); element-wise prologues and epilogues fuse into it;
    - ``OUT_ELEMENTWISE``: each output element is computed on its own from whole input
      buffers (matmul); element-wise epilogues fuse after it, nothing fuses before it
      (TVM's "out-elemwise-fusable" class);
    - ``OPAQUE``: never fused (custom kernels).
    """

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    INJECTIVE = "injective"
    REDUCTION = "reduction"
    OUT_ELEMENTWISE = "out_elementwise"
    OPAQUE = "opaque"


class _ShapeProblem(ValueError):
    """Raised by shape rules; :func:`infer_shape` adds the node and buffer names."""


class DtypeProblem(ValueError):
    """Raised by dtype rules; :func:`infer_dtype` adds the node and op names."""


# ----------------------------------------------------------------------------- dtype rules
# Floating-point dtypes ops compute on (float64 has no kernels: GPUs run it at a fraction
# of float32's rate, and no model of the benchmark uses it).
FLOAT_COMPUTE = ("float32", "float16", "bfloat16")
# Every dtype an op may compute with (generated C has a type for each).
COMPUTE_DTYPES: frozenset[str] = frozenset({*FLOAT_COMPUTE, "int64", "int32", "bool"})
# Stored in 2 bytes, computed in float32 (widened on load, rounded once per op).
HALF_DTYPES: frozenset[str] = frozenset({"float16", "bfloat16"})
# Integers compute exactly in their own C type (no float round trip); overflow wraps, as
# in numpy and torch (two's complement, what CUDA's integer units do).
INT_DTYPES: frozenset[str] = frozenset({"int64", "int32"})

DtypeRule = Callable[[Sequence[str], Mapping[str, float]], "str | None"]


def float_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """The default rule: floating-point inputs; their dtype if they agree, else float32.

    PyTorch promotes float16 with bfloat16, and either with float32, to float32; since
    every op computes in float32, that is also what the values are before rounding.

    >>> float_dtype(["float16", "float16"], {}), float_dtype(["float16", "bfloat16"], {})
    ('float16', 'float32')
    >>> float_dtype(["int64"], {})
    Traceback (most recent call last):
    ...
    oxiwork.ops.table.DtypeProblem: input 0 is int64, but the op computes on float32, float16 or bfloat16 values: convert it first with a cast kernel (op 'cast_float32')
    """
    for k, d in enumerate(dtypes):
        if d not in FLOAT_COMPUTE:
            raise DtypeProblem(
                f"input {k} is {d}, but the op computes on float32, float16 or bfloat16 "
                "values: convert it first with a cast kernel (op 'cast_float32')"
            )
    first = dtypes[0]
    return first if all(d == first for d in dtypes) else "float32"


def numeric_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """Arithmetic (add, sub, mul and their scalar forms): floats by :func:`float_dtype`, or
    every input the same integer dtype, computed exactly in it. A scalar parameter of an
    integer op must be a whole number (torch computes ``int64 + 0.5`` in float: cast first).

    >>> numeric_dtype(["int64", "int64"], {}), numeric_dtype(["bfloat16"], {"other": 0.5})
    ('int64', 'bfloat16')
    >>> numeric_dtype(["int64", "int32"], {})
    Traceback (most recent call last):
    ...
    oxiwork.ops.table.DtypeProblem: input 0 is int64 but input 1 is int32; integer arithmetic takes one integer dtype: cast one of them first (op 'cast_int64')
    >>> numeric_dtype(["int64"], {"other": 0.5})
    Traceback (most recent call last):
    ...
    oxiwork.ops.table.DtypeProblem: input 0 is int64 but the scalar other=0.5 is not a whole number; torch computes that in float: cast the input first (op 'cast_float32')
    """
    if dtypes[0] not in INT_DTYPES:
        return float_dtype(dtypes, params)
    first = dtypes[0]
    for k, d in enumerate(dtypes):
        if d != first:
            to = "int64" if {first, d} <= INT_DTYPES else "float32"
            raise DtypeProblem(
                f"input 0 is {first} but input {k} is {d}; integer arithmetic takes one "
                f"integer dtype: cast one of them first (op 'cast_{to}')"
            )
    for p, v in params.items():
        if not float(v).is_integer():
            raise DtypeProblem(
                f"input 0 is {first} but the scalar {p}={v!r} is not a whole number; torch "
                "computes that in float: cast the input first (op 'cast_float32')"
            )
    return first


def typed_scalar(x: np.ndarray, v: float) -> Any:
    """The scalar parameter ``v`` in the type an op on ``x`` computes with: ``x``'s own
    integer type (exact, as the generated C passes it), else float32.

    >>> typed_scalar(np.arange(2), 3.0), typed_scalar(np.ones(1, np.float32), 0.1)
    (np.int64(3), np.float32(0.1))
    """
    return x.dtype.type(v) if x.dtype.kind in "iu" else F32(v)


def any_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """Data movement (copy, transpose): any dtype with a C type, all inputs the same.

    >>> any_dtype(["int64"], {})
    'int64'
    """
    first = dtypes[0]
    for k, d in enumerate(dtypes):
        if d not in COMPUTE_DTYPES:
            raise DtypeProblem(
                f"input {k} is {d}, which kernels do not compute on; use one of "
                f"{', '.join(sorted(COMPUTE_DTYPES))} (cast it first)"
            )
        if d != first:
            raise DtypeProblem(
                f"input 0 is {first} but input {k} is {d}; the op moves values of one "
                "dtype: cast one of them first"
            )
    return first


def float32_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """Verbatim CUDA C of a custom op: its signature is ``float*``, so float32 only.

    >>> float32_dtype(["float16"], {})
    Traceback (most recent call last):
    ...
    oxiwork.ops.table.DtypeProblem: input 0 is float16, but the op's CUDA C takes float32 arrays: cast it first (op 'cast_float32')
    """
    for k, d in enumerate(dtypes):
        if d != "float32":
            raise DtypeProblem(
                f"input {k} is {d}, but the op's CUDA C takes float32 arrays: cast it "
                "first (op 'cast_float32')"
            )
    return "float32"


def output_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> None:
    """Reference-only ops (an importer's opaque kernels): whatever their output buffer holds.

    Returning ``None`` means "the dtype of the buffer this step writes"; such a step cannot
    feed another step of a fused kernel (opaque ops are never fused).

    >>> output_dtype(["int64", "float16"], {}) is None
    True
    """
    return None


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def widen(x: np.ndarray) -> np.ndarray:
    """``x`` as float32 if it is float16 or bfloat16 (exact), else ``x`` itself.

    >>> widen(np.array([0.1], np.float16)).tolist()   # the float16 nearest 0.1, exactly
    [0.0999755859375]
    """
    return x.astype(F32) if x.dtype.name in HALF_DTYPES else x


# ----------------------------------------------------------------------------- shape rules
def _same_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    # custom ops with their own CUDA source index every input by the output index, so they
    # keep the equal-shapes rule; element-wise ops broadcast (_broadcast_shape)
    first = shapes[0]
    for k, s in enumerate(shapes[1:], start=1):
        if s != first:
            raise _ShapeProblem(
                f"input 0 has shape {first} but input {k} has shape {s}; this op needs equal shapes"
            )
    return first


def broadcast_shape(shapes: Sequence[Shape]) -> Shape:
    """The shape ``shapes`` broadcast to under numpy's rules, or a :class:`ValueError`.

    Shapes are aligned at their last axis; in each axis the sizes must be equal or 1.

    >>> broadcast_shape([(1, 12, 64, 64), (1, 1, 64, 64)])
    (1, 12, 64, 64)
    >>> broadcast_shape([(2, 3), (3,), (4, 1, 1)])
    (4, 2, 3)

    References
    ----------
    NumPy documentation, "Broadcasting" (the general broadcasting rules).
    """
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for k, s in enumerate(shapes):
        for d, size in enumerate(s, start=rank - len(s)):
            if size != 1 and out[d] not in (1, size):
                shown = " and ".join(str(tuple(x)) for x in shapes)
                raise _ShapeProblem(
                    f"input shapes {shown} do not broadcast (axis {d - rank} has sizes "
                    f"{out[d]} and {size}, input {k}); in each axis, counted from the last, "
                    "the sizes must be equal or 1"
                )
            if size != 1:
                out[d] = size
    return tuple(out)


def _broadcast_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    return broadcast_shape(shapes)


def broadcast_terms(in_shape: Shape, out_shape: Shape) -> tuple[tuple[int, int, int], ...] | None:
    """How an input of ``in_shape``, broadcast to ``out_shape``, is indexed from the output's
    flat (row-major) index ``i``: ``None`` when element for element (equal element counts),
    else ``(div, mod, stride)`` terms, the input index being the sum of
    ``((i / div) % mod) * stride`` over them.

    Axes are coalesced first: neighbouring axes that are both broadcast or both kept merge
    into one, so a kernel carries one term per kept run of axes (GPT-2's mask
    ``(1, 1, 64, 64)`` against ``(1, 12, 64, 64)`` is one term, a batch norm's ``(C, 1, 1)``
    against ``(N, C, H, W)`` one too). ``div`` is 1 for the innermost run, ``stride`` 1 for
    the innermost kept run, and ``mod`` the whole count for the outermost; code generation
    leaves those operations out by these structural facts (never by a size's value), so one
    source serves every shape with the same broadcast pattern. An input of one element has
    no terms (index 0).

    >>> broadcast_terms((8,), (4, 8))          # bias_add's bias: i % 8
    ((1, 8, 1),)
    >>> broadcast_terms((3, 1, 1), (2, 3, 4, 5))  # per-channel: (i / 20) % 3
    ((20, 3, 1),)
    >>> broadcast_terms((2, 1, 5), (2, 3, 5))  # ((i / 15) % 2) * 5 + i % 5
    ((15, 2, 5), (1, 5, 1))
    >>> broadcast_terms((4, 8), (4, 8)) is None
    True

    References
    ----------
    NumPy documentation, "Broadcasting"; the coalescing of contiguous dimensions is that of
    PyTorch's ``TensorIterator`` (``coalesce_dimensions``).
    """
    if _numel(in_shape) == _numel(out_shape):
        return None
    in_shape = tuple(in_shape)[max(0, len(in_shape) - len(out_shape)) :]  # leading 1s
    padded = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    runs: list[list[Any]] = []  # [size, kept] from the outermost axis in
    for size, have in zip(out_shape, padded, strict=True):
        if size == 1:
            continue
        kept = have == size
        if runs and runs[-1][1] == kept:
            runs[-1][0] *= size
        else:
            runs.append([size, kept])
    terms: list[tuple[int, int, int]] = []
    div = stride = 1
    for size, kept in reversed(runs):
        if kept:
            terms.append((div, size, stride))
            stride *= size
        div *= size
    return tuple(reversed(terms))


def reduction_terms(
    shape: Shape, axes: Sequence[int]
) -> tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int], ...]]:
    """How a reduction over ``axes`` of a row-major ``shape`` finds its input elements:
    ``(kept, reduced)`` terms, the flat input index of element ``col`` of row ``row``
    being the sum of ``((row / div) % mod) * stride`` over ``kept`` plus that of
    ``((col / div) % mod) * stride`` over ``reduced``.

    Rows enumerate the kept axes row-major (so row ``r``'s result is element ``r`` of the
    reduced array, keepdim or not) and columns the reduced axes row-major. Neighbouring
    axes of one kind coalesce into one term and size-1 axes vanish (as in
    :func:`broadcast_terms`), so reducing the last axis is one term each way, ``row *
    cols + col``, and the rows' and columns' counts are the products of the ``mod``.

    >>> reduction_terms((2, 3, 4), [2])                 # the last axis: row * 4 + col
    (((1, 6, 4),), ((1, 4, 1),))
    >>> reduction_terms((2, 3, 4, 5), [1, 2])           # the middle: ((row / 5) * 60 ...
    (((5, 2, 60), (1, 5, 1)), ((1, 12, 5),))
    >>> reduction_terms((1, 3, 1), [0, 2])              # size-1 axes: nothing to reduce
    (((1, 3, 1),), ())

    References
    ----------
    PyTorch's ``TensorIterator`` (``coalesce_dimensions``) and its reduction kernels
    (``Reduce.cuh``), which split the input's axes into output and reduced ones likewise.
    """
    red = set(axes)
    runs: list[list[Any]] = []  # [size, reduced, stride] from the innermost axis out
    step = 1
    for d in reversed(range(len(shape))):
        size = shape[d]
        if size == 1:
            continue
        if runs and runs[-1][1] == (d in red):
            runs[-1][0] *= size
        else:
            runs.append([size, d in red, step])
        step *= size
    kept: list[tuple[int, int, int]] = []
    reduced: list[tuple[int, int, int]] = []
    div = {False: 1, True: 1}
    for size, r, stride in runs:
        (reduced if r else kept).append((div[r], size, stride))
        div[r] *= size
    return tuple(reversed(kept)), tuple(reversed(reduced))


def _bias_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, b = shapes
    if _numel(b) != x[-1]:
        raise _ShapeProblem(
            f"bias_add needs a bias of {x[-1]} elements (the last axis of x {x}), got shape {b}"
        )
    return x


def _bias_align(shapes: Sequence[Shape], params: Mapping[str, float]) -> list[Shape]:
    # bias_add is the broadcasting add with its bias read as a vector over the last axis
    # (whatever its buffer's shape, (N,) or (1, N))
    x, _ = shapes
    return [x, (x[-1],)]


def _row_reduce_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    return shapes[0][:-1] or (1,)


def _matmul_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    a, b = shapes
    if len(a) < 2 or len(b) != 2:
        raise _ShapeProblem(
            f"matmul needs a of shape [..., M, K] and b of shape [K, N], got {a} and {b}; "
            "give the buffers a shape= when allocating them"
        )
    if a[-1] != b[0]:
        raise _ShapeProblem(f"matmul inner dimensions differ: a {a} and b {b}")
    return (*a[:-1], b[1])


def _transpose_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    (a,) = shapes
    if len(a) != 2:
        raise _ShapeProblem(f"transpose needs a 2-D input, got shape {a}")
    return (a[1], a[0])


# ----------------------------------------------------------------------------- references
def _gelu(x: np.ndarray) -> np.ndarray:
    # tanh approximation (Hendrycks & Gimpel 2016, eq. 2); the CUDA expression below uses
    # the same constants so numpy and GPU agree to float32 rounding.
    c = F32(0.7978845608)
    return F32(0.5) * x * (F32(1.0) + np.tanh(c * (x + F32(0.044715) * x * x * x)))


def _row_max(x: np.ndarray, keepdims: bool = False) -> np.ndarray:
    # CUDA's fmaxf returns the other operand when one is NaN, and the kernels start each
    # row's maximum at -INFINITY: so NaNs are skipped and an all-NaN row gives -inf. numpy's
    # max propagates NaN; fmax with that initial value computes what the GPU computes.
    return np.fmax.reduce(x, axis=-1, keepdims=keepdims, initial=-np.inf).astype(x.dtype)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - _row_max(x, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True, dtype=F32)
    d = x - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=F32)
    return d / np.sqrt(var + F32(eps))


def _as_rows(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1])


# ----------------------------------------------------------------------------- costs
CostFn = Callable[[Sequence[Shape], Shape], tuple[float, float]]
InplaceFn = Callable[..., Any]
ElementFn = Callable[
    [int, Sequence[str], str, Sequence[Shape], Shape, Mapping[str, float]],
    tuple[list[str], list[tuple[str, int]]],
]


def _matmul_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    k = ins[0][-1]
    return 2.0 * _numel(out) * k, 4.0 * (_numel(ins[0]) + _numel(ins[1]) + _numel(out))


# Largest finite float32: kernels receive parameters as float.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True, slots=True)
class OpDef:
    """One op: fusion class, numpy reference, CUDA C, shape rule and cost.

    Parameters
    ----------
    name
        The op name; a kernel named like a registered op computes it.
    fusion_class
        How fusion treats the op (:class:`FusionClass`).
    arity
        Number of inputs (the op has exactly one output).
    reference
        ``reference(inputs: list[np.ndarray], **params) -> np.ndarray`` in float32, or
        ``None`` if the op has no reference (then its values cannot be computed on CPU).
    inplace
        ``inplace(inputs, out, **params)``: the reference computed straight into the
        float32 array ``out`` (shaped like the result; it may share memory with an
        input). Optional: without it :func:`compute_into` evaluates the reference into a
        temporary and copies (the default rule). Built-in element-wise ops define both
        from one numpy ufunc call (``out=None`` for the reference), so they cannot
        disagree.
    params
        ``(name, default)`` pairs; every parameter is a float passed to the kernel as an
        argument, so a GPU graph can update it without recompiling.
    expr
        CUDA expression template for element-wise and broadcast ops: ``{0}``, ``{1}`` are
        the inputs, ``{alpha}`` a parameter. Fused kernels compose these.
    row
        Row recipe name for reductions over the last axis (``"sum"``, ``"max"``,
        ``"softmax"``, ``"layer_norm"``); see :mod:`oxiwork.ops.codegen`.
    kernel
        Full-kernel generator ``kernel(function_name, in_shapes, out_shape, params) ->
        (source, scalar_args)`` for ops that are neither (matmul, transpose).
    element
        For ``OUT_ELEMENTWISE`` ops: ``element(j, pointers, var, in_shapes, out_shape,
        params) -> (lines, sizes)``, C statements that define ``float t{j}``, the output
        element at index ``var``, reading the input buffers named by ``pointers``; ``sizes``
        are the ``(name, value)`` size_t arguments the lines use (named after ``j`` so that
        steps do not collide); ``params`` are the step's bound parameters (a convolution's
        strides and padding become sizes; ``{p}`` in a line names parameter p's kernel
        argument, as in ``expr``). A fused kernel starts with these lines and applies its
        element-wise epilogue to ``t{j}``.
    source, function_name
        Verbatim CUDA C of a custom kernel and the ``extern "C"`` function it defines.
    shape
        Output shape rule ``shape(in_shapes, params) -> out_shape``. Element-wise ops
        broadcast their inputs to the output under numpy's rules (:func:`broadcast_shape`);
        the numpy reference, the simulator and the generated C all index them so.
    align
        For element-wise ops whose inputs broadcast other than by numpy's rules:
        ``align(in_shapes, params) -> shapes``, the shape each input is read as, then
        numpy-broadcast against the output (``bias_add`` reads its bias as ``(N,)``, a
        batch norm its per-channel vectors as ``(C, 1, 1)``). Default: the inputs' own
        shapes. The reference applies the same function, so the two cannot disagree.
    flops_per_element
        Floating-point operations per output element (used when ``cost`` is None).
    cost
        ``cost(in_shapes, out_shape) -> (flops, bytes)``; default: ``flops_per_element``
        per output element and every input and output element moved once. Bytes are
        counted as if every element were float32 (4 bytes); the cost model rescales
        them by the kernel's real bytes per element (:func:`oxiwork.cost.kernel_work`).
    dtype
        Result dtype rule ``dtype(in_dtypes, params) -> dtype`` (like ``shape``); it
        raises :class:`DtypeProblem` for input dtypes the op does not accept, and may
        return ``None`` for "whatever the output buffer holds" (reference-only ops).
        Default :func:`float_dtype`: float32/float16/bfloat16 in, the common dtype out.
    widen
        The reference computes in float32: float16/bfloat16 inputs are widened to
        float32 before it runs and its result is rounded once to the result dtype (what
        PyTorch's kernels do). ``False`` for references that handle every dtype
        themselves (casts, gathers, an importer's torch references).
    typed_pointers
        For ``element``/``kernel`` generators: the C they write only indexes its input
        pointers (``ptr[index]``: no pointer arithmetic, no ``float*`` declarations), so
        the code generator may hand an ``element`` generator half-precision arrays read
        as float (``ox_wide``), and a ``kernel`` of an op that only moves values
        (``dtype=any_dtype``) pointers of its buffers' type. Without it those kernels
        are generated for float32 only (other dtypes: :class:`UnsupportedOp`); ops with
        ``expr`` or ``row`` need nothing: the generator converts their loads and stores.
    axes
        For reductions (``row``): ``axes(in_shape, params) -> axes``, the axes of input 0
        the row recipe reduces (sorted, non-negative). Default: the last axis. The
        generated C reads the input through :func:`reduction_terms` of them.
    groups
        For reductions whose ``axes`` are the trailing ones: ``groups(in_shape, params) ->
        g``, the elements each row would reduce split into ``g`` consecutive equal rows
        (group norm's groups of channels). Default: 1. Further inputs (a norm's weight and
        bias, of ``k`` elements) are read per element of the unsplit block: its element
        ``j`` reads entry ``j // (block // k)`` (``k`` = the block: per element; the
        channels of an ``(N, C, H, W)`` block: per channel).
    check
        The op is a run-time check: its result (bool) must be true in every element, else
        the run fails with :class:`~oxiwork.error.CheckFailed`, raised by the simulator at
        the kernel's step and by a GPU executor's ``run`` after the run (the result is a
        buffer nothing reads, so both have it among the outputs). Such an op must never
        fuse (``OPAQUE``): its result has to reach memory.

    Examples
    --------
    >>> OpDef("twice", FusionClass.ELEMENTWISE, 1, lambda xs: xs[0] * 2, expr="({0} * 2.0f)")
    OpDef(name='twice', fusion_class=<FusionClass.ELEMENTWISE: 'elementwise'>, arity=1)
    """

    name: str
    fusion_class: FusionClass
    arity: int
    reference: Callable[..., np.ndarray] | None = field(default=None, repr=False)
    inplace: InplaceFn | None = field(default=None, repr=False)
    params: tuple[tuple[str, float], ...] = field(default=(), repr=False)
    expr: str | None = field(default=None, repr=False)
    row: str | None = field(default=None, repr=False)
    kernel: Callable[..., tuple[str, list[tuple[str, str, Any]]]] | None = field(
        default=None, repr=False
    )
    element: ElementFn | None = field(default=None, repr=False)
    source: str | None = field(default=None, repr=False)
    function_name: str | None = field(default=None, repr=False)
    shape: Callable[[Sequence[Shape], Mapping[str, float]], Shape] = field(
        default=_same_shape, repr=False
    )
    align: Callable[[Sequence[Shape], Mapping[str, float]], Sequence[Shape]] | None = field(
        default=None, repr=False
    )
    flops_per_element: float = field(default=1.0, repr=False)
    cost: CostFn | None = field(default=None, repr=False)
    dtype: DtypeRule = field(default=float_dtype, repr=False)
    widen: bool = field(default=True, repr=False)
    typed_pointers: bool = field(default=False, repr=False)
    axes: Callable[[Shape, Mapping[str, float]], tuple[int, ...]] | None = field(
        default=None, repr=False
    )
    groups: Callable[[Shape, Mapping[str, float]], int] | None = field(default=None, repr=False)
    check: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise InvalidArgument(
                f"op name {self.name!r} must be a Python/C identifier (letters, digits, _)"
            )
        if not isinstance(self.fusion_class, FusionClass):
            raise InvalidArgument(f"op {self.name!r}: fusion_class must be a FusionClass")
        if self.check and self.fusion_class is not FusionClass.OPAQUE:
            raise InvalidArgument(
                f"op {self.name!r}: a check's result must reach memory, so it is OPAQUE "
                "(never fused)"
            )
        if isinstance(self.arity, bool) or not isinstance(self.arity, int) or self.arity < 1:
            raise InvalidArgument(f"op {self.name!r}: arity must be an int >= 1")
        for p, v in self.params:
            if not p.isidentifier() or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise InvalidArgument(
                    f"op {self.name!r}: parameter {p!r} needs an identifier name and a "
                    f"numeric default, got {v!r}"
                )
        if self.expr is not None:
            self._check_expr()
        if self.fusion_class in (FusionClass.ELEMENTWISE, FusionClass.BROADCAST) and not (
            self.expr
        ):
            raise InvalidArgument(
                f"op {self.name!r} is {self.fusion_class.name} but has no expr; element-wise "
                "ops need a CUDA expression template such as 'fmaxf({0}, 0.0f)'"
            )
        if self.inplace is not None and self.reference is None:
            raise InvalidArgument(
                f"op {self.name!r} has an inplace form but no reference; the in-place form "
                "is the reference written into an output array, give the reference too"
            )
        if self.fusion_class is FusionClass.REDUCTION and self.row is None:
            raise InvalidArgument(f"op {self.name!r} is a REDUCTION but names no row recipe")
        if self.fusion_class is FusionClass.OUT_ELEMENTWISE and self.element is None:
            raise InvalidArgument(
                f"op {self.name!r} is OUT_ELEMENTWISE but has no element= generator; give "
                "it one, or make it OPAQUE"
            )

    def _check_expr(self) -> None:
        assert self.expr is not None
        names = {p for p, _ in self.params}
        for _, fname, _, _ in string.Formatter().parse(self.expr):
            if fname is None:
                continue
            if fname.isdigit():
                if int(fname) >= self.arity:
                    raise InvalidArgument(
                        f"op {self.name!r}: expr uses {{{fname}}} but the op has only "
                        f"{self.arity} input(s)"
                    )
            elif fname not in names:
                raise InvalidArgument(
                    f"op {self.name!r}: expr uses {{{fname}}}, which is neither an input "
                    f"index nor a parameter ({', '.join(sorted(names)) or 'none'})"
                )

    @property
    def defaults(self) -> dict[str, float]:
        """Parameter defaults as a dict."""
        return {p: float(v) for p, v in self.params}

    @property
    def has_cuda(self) -> bool:
        """True if :func:`oxiwork.ops.kernel_source` can generate this op's kernel."""
        return any(
            x is not None for x in (self.expr, self.row, self.kernel, self.element, self.source)
        )

    def reduced_axes(self, in_shape: Shape, params: Mapping[str, float]) -> tuple[int, ...]:
        """The axes of ``in_shape`` a reduction reduces (see ``axes``; default the last).

        >>> get("sum").reduced_axes((2, 3, 4), {})
        (2,)
        """
        if self.axes is None:
            return (len(in_shape) - 1,)
        return tuple(self.axes(in_shape, params))

    def row_groups(self, in_shape: Shape, params: Mapping[str, float]) -> int:
        """How many rows each block of reduced elements splits into (see ``groups``).

        >>> get("sum").row_groups((2, 3, 4), {})
        1
        """
        return 1 if self.groups is None else int(self.groups(in_shape, params))

    def read_shapes(self, in_shapes: Sequence[Shape], params: Mapping[str, float]) -> list[Shape]:
        """The shape each input is read as, broadcast against the output (see ``align``).

        >>> get("bias_add").read_shapes([(4, 8), (1, 8)], {})
        [(4, 8), (8,)]
        """
        if self.align is None:
            return [tuple(s) for s in in_shapes]
        return [tuple(s) for s in self.align(in_shapes, params)]

    def compute_into(
        self, inputs: Sequence[np.ndarray], out: np.ndarray, params: Mapping[str, float]
    ) -> None:
        """Write the op's result on ``inputs`` into the array ``out``.

        ``out`` has the result's shape and dtype and may share memory with an input. On
        float32 the op's ``inplace`` form writes it directly; the default rule, for ops
        without one and for other dtypes, evaluates the reference into a temporary
        (half inputs widened to float32 when the op has ``widen``) and copies it, rounded
        to ``out``'s dtype. IEEE results throughout (overflow, log of negatives, 0/0: no
        warnings), as on the GPU.

        >>> import numpy as np
        >>> x = np.array([-1.0, np.nan, 3.0], np.float32)
        >>> get("relu").compute_into([x], x, {})   # in place, NaN -> 0 as CUDA's fmaxf
        >>> x
        array([0., 0., 3.], dtype=float32)
        >>> y = np.empty(1, np.float32)
        >>> get("sum").compute_into([x.reshape(1, 3)], y, {})   # the default rule
        >>> y
        array([3.], dtype=float32)
        >>> h = np.array([1.0, 2049.0], np.float16)   # 2049 is not a float16: 2048
        >>> z = np.empty(2, np.float16)
        >>> get("add").compute_into([h, h], z, {})   # float32 math, one rounding
        >>> z.tolist()
        [2.0, 4096.0]
        """
        if self.reference is None:
            raise UnsupportedOp(
                f"op {self.name!r} has CUDA code but no numpy reference; register it with "
                f"oxiwork.ops.custom({self.name!r}, reference=..., replace=True) to compute "
                "it on the CPU"
            )
        with np.errstate(all="ignore"):
            if (
                self.inplace is not None
                and out.dtype == F32
                and all(x.dtype == F32 for x in inputs)
            ):
                self.inplace(inputs, out, **params)
                return
            # Other dtypes keep their own: int64 indices past 2**24 would not survive a
            # round trip through float32. Half inputs of float math are widened.
            args = [widen(x) for x in inputs] if self.widen else list(inputs)
            result = np.asarray(self.reference(args, **params))
            if result.dtype != out.dtype:
                result = result.astype(out.dtype)
        if result.size != out.size:
            raise InvalidArgument(
                f"op {self.name!r} produced {result.size} elements for an output of "
                f"{out.size}; its shape rule and its reference disagree"
            )
        np.copyto(out, result.reshape(out.shape), casting="unsafe")

    def op_cost(self, in_shapes: Sequence[Shape], out_shape: Shape) -> tuple[float, float]:
        """``(flops, bytes)`` of one application, bytes counted as float32 data."""
        if self.cost is not None:
            return self.cost(in_shapes, out_shape)
        moved = sum(_numel(s) for s in in_shapes) + _numel(out_shape)
        return self.flops_per_element * _numel(out_shape), 4.0 * moved


# ----------------------------------------------------------------------------- registry
REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef, *, replace: bool = False) -> OpDef:
    """Add ``op`` to the registry and return it.

    Raises :class:`~oxiwork.error.InvalidArgument` if the name is taken (pass
    ``replace=True`` to override on purpose).

    >>> import numpy as np
    >>> _ = register(OpDef("halve", FusionClass.ELEMENTWISE, 1,
    ...                    lambda xs: xs[0] * np.float32(0.5), expr="({0} * 0.5f)"))
    >>> get("halve").name
    'halve'
    """
    if not isinstance(op, OpDef):
        raise InvalidArgument(f"register() needs an OpDef, got {type(op).__name__}")
    if op.name in REGISTRY and not replace:
        raise InvalidArgument(
            f"an op named {op.name!r} is already registered; pick another name or pass replace=True"
        )
    REGISTRY[op.name] = op
    return op


def get(name: str | None) -> OpDef | None:
    """The op named ``name``, or ``None`` if there is none.

    >>> get("relu").arity, get("no_such_op")
    (1, None)
    """
    if not isinstance(name, str):
        return None
    return REGISTRY.get(name)


def custom(
    name: str,
    *,
    reference: Callable[..., np.ndarray] | None = None,
    source: str | None = None,
    function_name: str | None = None,
    expr: str | None = None,
    arity: int = 1,
    params: Mapping[str, float] | None = None,
    fusion_class: FusionClass | None = None,
    shape: Callable[[Sequence[Shape], Mapping[str, float]], Shape] | None = None,
    flops_per_element: float = 1.0,
    replace: bool = False,
    dtype: DtypeRule | None = None,
) -> OpDef:
    """Register a user op: its own CUDA C and/or numpy reference.

    A custom kernel with ``source`` must define ``extern "C" __global__ void
    <function_name>(const float* in0, ..., float* out0, size_t n, float <param>...)``
    (``function_name`` defaults to ``name``; ``n`` is the output's element count). With
    ``expr`` instead, the op is element-wise and fuses like a built-in one. Without
    ``reference`` its values cannot be computed on the CPU (the evaluator raises
    :class:`~oxiwork.error.UnsupportedOp`).

    ``dtype`` is the result dtype rule (see :class:`OpDef`); by default a ``source`` op
    takes float32 (:func:`float32_dtype`), an ``expr`` op floats (:func:`float_dtype`),
    and a reference-only op any dtype, writing its output buffer's
    (:func:`output_dtype`; its reference sees the inputs in their own dtypes).

    >>> import numpy as np
    >>> op = custom("cube", expr="({0} * {0} * {0})", reference=lambda xs: xs[0] ** 3)
    >>> op.fusion_class.name
    'ELEMENTWISE'
    >>> _ = REGISTRY.pop("cube")
    """
    # Everything is checked before the op exists (oxiwork.ops.cnames): names that the
    # generated C would shadow, expressions that are not one C expression, unbounded sizes.
    where = f"custom op {name!r}"[:80]
    cnames.check_function_name(name, where)
    if reference is None and source is None and expr is None:
        raise InvalidArgument(
            f"custom op {name!r} needs a numpy reference, a CUDA source or an expr; "
            "without any of them nothing can run it"
        )
    if source is not None and expr is not None:
        raise InvalidArgument(f"custom op {name!r}: give either source= or expr=, not both")
    for what, text in (("source", source), ("expr", expr), ("function_name", function_name)):
        if text is not None and not isinstance(text, str):
            raise InvalidArgument(
                f"custom op {name!r}: {what} must be a str, got {type(text).__name__}"
            )
    if reference is not None and not callable(reference):
        raise InvalidArgument(f"{where}: reference must be a function of the input arrays")
    if isinstance(arity, bool) or not isinstance(arity, int) or not 1 <= arity <= cnames.MAX_ARITY:
        raise InvalidArgument(
            f"{where}: arity must be an int from 1 to {cnames.MAX_ARITY}, got {arity!r:.40}"
        )
    if params is not None and not isinstance(params, Mapping):
        raise InvalidArgument(
            f"custom op {name!r}: params must be a dict of name -> default, got "
            f"{type(params).__name__}"
        )
    if len(params or {}) > MAX_PARAMS:
        raise InvalidArgument(f"{where}: at most {MAX_PARAMS} parameters are allowed")
    for k, v in (params or {}).items():
        cnames.check_param_name(k, where)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgument(
                f"custom op {name!r}: the default of parameter {k!r} must be a number, got {v!r}"
            )
        # Kernels take parameters as float: the default must be a finite float32.
        if (isinstance(v, int) and abs(v) >= 2**128) or not abs(float(v)) <= _FLOAT32_MAX:
            raise InvalidArgument(
                f"{where}: the default of parameter {k!r} must be a finite float32, got {v!r:.40}"
            )
    fpe = flops_per_element
    if isinstance(fpe, bool) or not isinstance(fpe, (int, float)) or not 0 <= fpe <= 1e6:
        raise InvalidArgument(
            f"{where}: flops_per_element must be a number from 0 to 1e6, got {flops_per_element!r:.40}"
        )
    if expr is not None:
        cnames.check_expr(expr, arity, list(params or {}), where)
    if fusion_class is None:
        fusion_class = FusionClass.ELEMENTWISE if expr is not None else FusionClass.OPAQUE
    if dtype is not None and not callable(dtype):
        raise InvalidArgument(f"{where}: dtype must be a rule (in_dtypes, params) -> dtype")
    reference_only = source is None and expr is None
    if dtype is None:
        dtype = (
            float32_dtype
            if source is not None
            else (output_dtype if reference_only else float_dtype)
        )
    if source is not None:
        cnames.check_source(source, where)
        function_name = cnames.check_function_name(function_name or name, where)
        if f"{function_name}(" not in source.replace(" (", "("):
            raise InvalidArgument(
                f"custom op {name!r}: the source does not define function "
                f'{function_name!r}; pass function_name= naming its extern "C" kernel'
            )
    op = OpDef(
        name,
        fusion_class,
        arity,
        reference=reference,
        params=tuple((k, float(v)) for k, v in (params or {}).items()),
        expr=expr,
        source=source,
        function_name=function_name,
        # an expr op is element-wise: the generated C broadcasts its inputs (numpy rules);
        # a custom source indexes every input by the output index, so it needs equal shapes
        shape=shape or (_broadcast_shape if expr is not None else _same_shape),
        flops_per_element=flops_per_element,
        dtype=dtype,
        widen=not reference_only,
    )
    return register(op, replace=replace)


def bind_params(
    op: OpDef, given: Mapping[str, Any] | Sequence[tuple[str, Any]], where: str
) -> dict[str, float]:
    """``op``'s defaults updated with ``given``; unknown names and non-numbers raise.

    ``where`` names the node for the message.

    >>> bind_params(get("scale"), {"alpha": 3}, "kernel 'k'")
    {'alpha': 3.0}
    >>> bind_params(get("scale"), {"beta": 1}, "kernel 'k'")
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: kernel 'k': op 'scale' has no parameter 'beta'; its parameters are: alpha
    """
    out = op.defaults
    items = given.items() if isinstance(given, Mapping) else given
    for k, v in items:
        if k not in out:
            known = ", ".join(sorted(out)) or "none"
            raise InvalidArgument(
                f"{where}: op {op.name!r} has no parameter {k!r}; its parameters are: {known}"
            )
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InvalidArgument(
                f"{where}: parameter {k!r} of op {op.name!r} must be a number, got {v!r}"
            )
        out[k] = float(v)
    return out


def infer_shape(
    op: OpDef, in_shapes: Sequence[Shape], params: Mapping[str, float], where: str
) -> Shape:
    """The output shape of ``op`` on ``in_shapes``, or a clear error naming ``where``.

    >>> infer_shape(get("bias_add"), [(2, 3), (3,)], {}, "kernel 'b'")
    (2, 3)
    >>> infer_shape(get("add"), [(2, 3), (3, 2)], {}, "kernel 'a'")
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: kernel 'a' (op 'add'): input shapes (2, 3) and (3, 2) do not broadcast (axis -2 has sizes 2 and 3, input 1); in each axis, counted from the last, the sizes must be equal or 1
    """
    if len(in_shapes) != op.arity:
        raise InvalidArgument(
            f"{where} (op {op.name!r}) has {len(in_shapes)} input(s) but the op takes "
            f"{op.arity}; pass exactly {op.arity} buffer(s) to .inputs([...])"
        )
    try:
        return tuple(op.shape(list(in_shapes), params))
    except _ShapeProblem as e:
        raise InvalidArgument(f"{where} (op {op.name!r}): {e}") from None


def infer_dtype(
    op: OpDef, in_dtypes: Sequence[str], params: Mapping[str, float], where: str
) -> str | None:
    """The result dtype of ``op`` on ``in_dtypes`` (``None``: the output buffer's), or a
    clear error naming ``where``.

    >>> infer_dtype(get("relu"), ["bfloat16"], {}, "kernel 'r'")
    'bfloat16'
    >>> infer_dtype(get("relu"), ["bool"], {}, "kernel 'r'")
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: kernel 'r' (op 'relu'): input 0 is bool, but the op computes on float32, float16 or bfloat16 values: convert it first with a cast kernel (op 'cast_float32')
    """
    try:
        out = op.dtype(list(in_dtypes), params)
    except DtypeProblem as e:
        raise InvalidArgument(f"{where} (op {op.name!r}): {e}") from None
    if out is not None and out not in DTYPES:
        raise InvalidArgument(
            f"{where} (op {op.name!r}): its dtype rule gave {out!r}, which is not a dtype "
            f"of oxiwork.node.DTYPES; fix the op's dtype= rule"
        )
    return out


# ----------------------------------------------------------------------------- full kernels
def _matmul_kernel(
    fname: str, ins: Sequence[Shape], out: Shape, params: Mapping[str, float]
) -> tuple[str, list[tuple[str, str, Any]]]:
    # One thread per output element, grid-stride; batch dims fold into M because b is 2-D.
    k = ins[0][-1]
    n = out[-1]
    m = _numel(out) // n
    src = f"""extern "C" __global__ void {fname}(const float* __restrict__ in0,
    const float* __restrict__ in1, float* __restrict__ out0, size_t m, size_t n, size_t k)
{{
    size_t total = m * n;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (size_t)gridDim.x * blockDim.x) {{
        size_t row = o / n;
        size_t col = o % n;
        float acc = 0.0f;
        for (size_t j = 0; j < k; ++j) {{
            acc += in0[row * k + j] * in1[j * n + col];
        }}
        out0[o] = acc;
    }}
}}
"""
    return src, [("size_t", "m", m), ("size_t", "n", n), ("size_t", "k", k)]


def _matmul_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # The same products summed in the same order as _matmul_kernel, so fused and unfused
    # results agree bit for bit when compiled with --fmad=false.
    a, b = ptrs
    n, k = f"s{j}_n", f"s{j}_k"
    lines = [
        f"float t{j} = 0.0f;",
        f"for (size_t q{j} = 0; q{j} < {k}; ++q{j}) {{",
        f"    t{j} += {a}[({var} / {n}) * {k} + q{j}] * {b}[q{j} * {n} + {var} % {n}];",
        "}",
    ]
    return lines, [(n, out[-1]), (k, ins[0][-1])]


def _transpose_kernel(
    fname: str, ins: Sequence[Shape], out: Shape, params: Mapping[str, float]
) -> tuple[str, list[tuple[str, str, Any]]]:
    rows, cols = ins[0]
    src = f"""extern "C" __global__ void {fname}(const float* __restrict__ in0,
    float* __restrict__ out0, size_t rows, size_t cols)
{{
    size_t total = rows * cols;
    for (size_t o = (size_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
         o += (size_t)gridDim.x * blockDim.x) {{
        size_t r = o / cols;
        size_t c = o % cols;
        out0[c * rows + r] = in0[o];
    }}
}}
"""
    return src, [("size_t", "rows", rows), ("size_t", "cols", cols)]


# ----------------------------------------------------------------------------- the table
def _ew(
    name: str,
    arity: int,
    fn: Callable[..., np.ndarray],
    expr: str,
    flops: float = 1.0,
    params: tuple[tuple[str, float], ...] = (),
    fusion_class: FusionClass = FusionClass.ELEMENTWISE,
    shape: Callable[[Sequence[Shape], Mapping[str, float]], Shape] = _broadcast_shape,
    inplace: bool = True,
    align: Callable[[Sequence[Shape], Mapping[str, float]], Sequence[Shape]] | None = None,
    dtype: DtypeRule = float_dtype,
    widen: bool = True,
) -> OpDef:
    # ``fn(xs, out=None, **params)`` is both forms: the reference is ``fn`` with ``out=None``
    # and the in-place form the very same call with ``out`` given, so they cannot differ.
    return OpDef(
        name,
        fusion_class,
        arity,
        reference=fn,
        inplace=fn if inplace else None,
        params=params,
        expr=expr,
        shape=shape,
        align=align,
        flops_per_element=flops,
        dtype=dtype,
        widen=widen,
    )


def _copy(xs: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    # a bit copy (NaN payloads and -0.0 kept), as the CUDA expression "{0}"
    if out is None:
        return np.array(xs[0], copy=True)
    np.copyto(out, xs[0])
    return out


def _relu_nan(xs: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    # torch.relu keeps a NaN (clamp_min propagates it), where relu's fmaxf maps it to 0.
    x = xs[0]
    r = np.where((x > 0) | np.isnan(x), x, F32(0)).astype(F32, copy=False)
    if out is None:
        return r
    np.copyto(out, r)
    return out


def _sigmoid(xs: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    # 1 / (1 + exp(-x)), one float32 operation at a time as the CUDA expression; only the
    # first step reads x, so ``out`` may be x itself.
    t = np.negative(xs[0], out=out)
    np.exp(t, out=t)
    np.add(F32(1), t, out=t)
    return np.divide(F32(1), t, out=t)


_BUILTINS: tuple[OpDef, ...] = (
    # np.fmax, like CUDA's fmaxf, maps NaN to 0 (np.maximum would keep the NaN)
    _ew("relu", 1, lambda xs, out=None: np.fmax(xs[0], F32(0), out=out), "fmaxf({0}, 0.0f)"),
    # PyTorch's relu (what imported models compute): NaN stays NaN, -0.0 gives +0.0.
    _ew("relu_nan", 1, _relu_nan, "((({0}) > 0.0f || ({0}) != ({0})) ? ({0}) : 0.0f)"),
    # alpha defaults to 2.0 so that the quick start's relu -> scale visibly changes the
    # values (1.0 would make scale an identity).
    _ew(
        "scale",
        1,
        lambda xs, out=None, *, alpha: np.multiply(xs[0], typed_scalar(xs[0], alpha), out=out),
        "({0} * {alpha})",
        params=(("alpha", 2.0),),
        dtype=numeric_dtype,
    ),
    # integers too (exact, in their own type): position ids, index arithmetic
    _ew(
        "add",
        2,
        lambda xs, out=None: np.add(xs[0], xs[1], out=out),
        "({0} + {1})",
        dtype=numeric_dtype,
    ),
    _ew(
        "sub",
        2,
        lambda xs, out=None: np.subtract(xs[0], xs[1], out=out),
        "({0} - {1})",
        dtype=numeric_dtype,
    ),
    _ew(
        "mul",
        2,
        lambda xs, out=None: np.multiply(xs[0], xs[1], out=out),
        "({0} * {1})",
        dtype=numeric_dtype,
    ),
    _ew("div", 2, lambda xs, out=None: np.divide(xs[0], xs[1], out=out), "({0} / {1})"),
    _ew("neg", 1, lambda xs, out=None: np.negative(xs[0], out=out), "(-{0})", flops=1.0),
    _ew("exp", 1, lambda xs, out=None: np.exp(xs[0], out=out), "expf({0})", flops=4.0),
    _ew("log", 1, lambda xs, out=None: np.log(xs[0], out=out), "logf({0})", flops=4.0),
    _ew("tanh", 1, lambda xs, out=None: np.tanh(xs[0], out=out), "tanhf({0})", flops=6.0),
    _ew("sigmoid", 1, _sigmoid, "(1.0f / (1.0f + expf(-{0})))", flops=6.0),
    # gelu reads x after its first step, so an in-place form would need a temporary
    # anyway: it takes the default rule (reference into a temporary, then a copy).
    _ew(
        "gelu",
        1,
        lambda xs: _gelu(xs[0]),
        "(0.5f * {0} * (1.0f + tanhf(0.7978845608f * ({0} + 0.044715f * {0} * {0} * {0}))))",
        flops=12.0,
        inplace=False,
    ),
    _ew("copy", 1, _copy, "{0}", flops=0.0, dtype=any_dtype, widen=False),
    _ew(
        "bias_add",
        2,
        lambda xs, out=None: np.add(xs[0], xs[1].reshape(-1), out=out),
        "({0} + {1})",
        fusion_class=FusionClass.BROADCAST,
        shape=_bias_shape,
        align=_bias_align,
    ),
    # Reductions, matmul and transpose take the default rule: their copy is small next to
    # the work, and numpy's out= for them is not guaranteed safe when out aliases an input.
    OpDef(
        "sum",
        FusionClass.REDUCTION,
        1,
        reference=lambda xs: _as_rows(xs[0]).sum(axis=-1, dtype=F32),
        row="sum",
        shape=_row_reduce_shape,
        cost=lambda ins, out: (float(_numel(ins[0])), 4.0 * (_numel(ins[0]) + _numel(out))),
    ),
    OpDef(
        "max",
        FusionClass.REDUCTION,
        1,
        reference=lambda xs: _row_max(_as_rows(xs[0])),
        row="max",
        shape=_row_reduce_shape,
        cost=lambda ins, out: (float(_numel(ins[0])), 4.0 * (_numel(ins[0]) + _numel(out))),
    ),
    OpDef(
        "softmax",
        FusionClass.REDUCTION,
        1,
        reference=lambda xs: _softmax(xs[0]),
        row="softmax",
        flops_per_element=8.0,
    ),
    OpDef(
        "layer_norm",
        FusionClass.REDUCTION,
        1,
        reference=lambda xs, eps: _layer_norm(xs[0], eps),
        params=(("eps", 1e-5),),
        row="layer_norm",
        flops_per_element=8.0,
    ),
    OpDef(
        "matmul",
        FusionClass.OUT_ELEMENTWISE,
        2,
        reference=lambda xs: np.matmul(xs[0], xs[1]).astype(F32, copy=False),
        kernel=_matmul_kernel,
        element=_matmul_element,
        shape=_matmul_shape,
        cost=_matmul_cost,
        typed_pointers=True,
    ),
    OpDef(
        "transpose",
        FusionClass.INJECTIVE,
        1,
        reference=lambda xs: np.ascontiguousarray(xs[0].T),
        kernel=_transpose_kernel,
        shape=_transpose_shape,
        flops_per_element=0.0,
        dtype=any_dtype,
        widen=False,
        typed_pointers=True,
    ),
)

for _op in _BUILTINS:
    register(_op)

BUILTIN_OPS: frozenset[str] = frozenset(op.name for op in _BUILTINS)
