"""Ops that change or index by dtype: casts between dtypes and embedding lookups.

- ``cast_<dtype>`` for every dtype kernels compute with (``cast_float32``,
  ``cast_float16``, ``cast_bfloat16``, ``cast_int64``, ``cast_int32``, ``cast_bool``):
  element-wise, so a cast fuses with its neighbours and a fused chain keeps one dtype per
  step. Conversions are C's (and PyTorch's ``Tensor.to``): float to int truncates toward
  zero, anything to bool is ``!= 0`` (NaN is true), int64 to int32 wraps, floats round to
  nearest even; an integer becomes float16/bfloat16 through float32 (one rounding to
  float32, then one to the half type), as the generated C converts it. A NaN, an infinity
  or a value out of the integer's range cast to an integer is undefined in C (CUDA gives
  0 for NaN and saturates; x86 gives the lowest integer, as numpy and torch on the CPU).
- ``embedding``: ``out[..., d] = weight[indices[...], d]``, indices int64 or int32, a
  float table (float32/float16/bfloat16). Out-element-wise: each output element reads
  the row its index chooses, so element-wise epilogues (a scale, a cast, a position add)
  fuse after it. The reference refuses an index outside ``[0, rows)`` (as torch does);
  the generated C, which cannot raise, writes NaN there.
- ``gather`` (``torch.gather(x, dim, index)``): ``out[i] = x[i with i[dim] = index[i]]``,
  the same dtypes and out-of-range rule as ``embedding``; ``dim`` is a parameter.

Example
-------
>>> import numpy as np
>>> from oxiwork import ops
>>> ops.get("cast_float16").reference([np.array([1.0, 65520.0, -2.5], np.float32)])
array([ 1. ,  inf, -2.5], dtype=float16)
>>> w = np.arange(6, dtype=np.float32).reshape(3, 2)
>>> ops.get("embedding").reference([w, np.array([[2, 0]])])
array([[[4., 5.],
        [0., 1.]]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from oxiwork.ops.table import (
    COMPUTE_DTYPES,
    HALF_DTYPES,
    DtypeProblem,
    FusionClass,
    OpDef,
    Shape,
    _ShapeProblem,
    register,
)

__all__ = ["CASTS", "DTYPE_OPS", "EMBEDDING", "GATHER", "cast_name"]

_FLOATS = ("float32", "float16", "bfloat16")
_INDEX = ("int64", "int32")


def cast_name(dtype: str) -> str:
    """The name of the op casting to ``dtype``.

    >>> cast_name("bfloat16")
    'cast_bfloat16'
    """
    return f"cast_{dtype}"


# ----------------------------------------------------------------------------- casts
def _cast_rule(target: str):
    def rule(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
        if dtypes[0] not in COMPUTE_DTYPES:
            raise DtypeProblem(
                f"input 0 is {dtypes[0]}, which kernels do not compute on; casts take "
                f"{', '.join(sorted(COMPUTE_DTYPES))}"
            )
        return target

    return rule


def _cast_reference(target: str):
    def reference(xs: Sequence[np.ndarray]) -> np.ndarray:
        x = np.asarray(xs[0])
        if target in HALF_DTYPES and x.dtype.name not in _FLOATS:
            x = x.astype(np.float32)  # an integer rounds to float32 first, as in the C
        elif target in HALF_DTYPES and x.dtype.name in HALF_DTYPES:
            x = x.astype(np.float32)  # float16 <-> bfloat16 through float32 (exact widening)
        with np.errstate(all="ignore"):  # overflow to inf, NaN to int: IEEE / C results
            return x.astype(target)

    return reference


CASTS: tuple[OpDef, ...] = tuple(
    OpDef(
        cast_name(d),
        FusionClass.ELEMENTWISE,
        1,
        reference=_cast_reference(d),
        # the C conversion is the step's own: `ctype t = (ctype)(x)` or a half rounding
        expr="{0}",
        flops_per_element=0.0,
        dtype=_cast_rule(d),
        widen=False,
    )
    for d in sorted(COMPUTE_DTYPES)
)


# ----------------------------------------------------------------------------- embedding
def _embedding_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    weight, idx = dtypes
    if weight not in _FLOATS:
        raise DtypeProblem(
            f"the table (input 0) is {weight}; lookups read a float32, float16 or bfloat16 "
            "table: cast it first"
        )
    if idx not in _INDEX:
        raise DtypeProblem(
            f"the indices (input 1) are {idx}; lookups take int64 or int32 indices: cast "
            "them first (op 'cast_int64')"
        )
    return weight


def _embedding_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    weight, idx = shapes
    if len(weight) != 2:
        raise _ShapeProblem(
            f"embedding needs a table of shape [rows, dim], got {weight}; give the buffer a "
            "shape= when allocating it"
        )
    return (*idx, weight[1])


def _embedding(xs: Sequence[np.ndarray]) -> np.ndarray:
    weight, idx = xs
    rows = weight.shape[0]
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        first = int(np.asarray(idx)[bad].reshape(-1)[0])
        raise IndexError(
            f"embedding index {first} is out of range for a table of {rows} rows; indices "
            f"must be in [0, {rows})"
        )
    return weight[idx.astype(np.int64)]


def _embedding_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # the output's row var / dim is the index's element; its column the table's column
    w, ix = ptrs
    d, v = f"s{j}_d", f"s{j}_v"
    lines = [
        f"long long r{j} = (long long){ix}[{var} / {d}];",
        f"float t{j} = (r{j} >= 0 && r{j} < (long long){v}) ? "
        f"{w}[(size_t)r{j} * {d} + {var} % {d}] : __int_as_float(0x7fc00000);",
    ]
    return lines, [(d, ins[0][1]), (v, ins[0][0])]


EMBEDDING = OpDef(
    "embedding",
    FusionClass.OUT_ELEMENTWISE,
    2,
    reference=_embedding,
    element=_embedding_element,
    shape=_embedding_shape,
    flops_per_element=0.0,
    # bytes: the rows read (one table element per output element), the indices, the output
    cost=lambda ins, out: (0.0, 4.0 * (2 * int(np.prod(out)) + int(np.prod(ins[1])))),
    dtype=_embedding_dtype,
    widen=False,
    typed_pointers=True,
)


# ----------------------------------------------------------------------------- gather
def _gather_axis(shapes: Sequence[Shape], params: Mapping[str, float]) -> int:
    x = shapes[0]
    d = params["dim"]
    if d != int(d) or not -len(x) <= d < len(x):
        raise _ShapeProblem(f"gather's dim {d} is not an axis of the input {x}")
    return int(d) % len(x)


def _gather_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, idx = shapes
    if len(idx) != len(x):
        raise _ShapeProblem(f"gather needs indices with the input's {len(x)} axes, got {idx}")
    axis = _gather_axis(shapes, params)
    for k, (a, b) in enumerate(zip(x, idx, strict=True)):
        if k != axis and b > a:
            raise _ShapeProblem(
                f"gather's indices {idx} are larger than the input {x} along axis {k}"
            )
    return tuple(idx)


def _gather(xs: Sequence[np.ndarray], dim: float) -> np.ndarray:
    x, idx = xs
    axis = int(dim) % x.ndim
    n = x.shape[axis]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        first = int(np.asarray(idx)[bad].reshape(-1)[0])
        raise IndexError(
            f"gather index {first} is out of range for axis {axis} of extent {n}; indices "
            f"must be in [0, {n})"
        )
    # torch.gather reads the leading corner of the input along the other axes
    corner = tuple(slice(None) if k == axis else slice(0, s) for k, s in enumerate(idx.shape))
    return np.take_along_axis(x[corner], idx.astype(np.int64), axis=axis)


def _gather_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # the output index var is split into coordinates (last axis fastest); the input offset
    # uses them, with the gathered axis's coordinate replaced by the index read at var
    x, ix = ptrs
    axis = _gather_axis(ins, params)
    strides = [1] * len(ins[0])
    for k in range(len(ins[0]) - 2, -1, -1):
        strides[k] = strides[k + 1] * ins[0][k + 1]
    rest, off, r = f"q{j}", f"o{j}", f"r{j}"
    lines = [
        f"long long {r} = (long long){ix}[{var}];",
        f"size_t {rest} = {var};",
        f"size_t {off} = 0;",
    ]
    sizes: list[tuple[str, int]] = [(f"s{j}_n", ins[0][axis])]
    for k in range(len(out) - 1, -1, -1):
        e, t = f"s{j}_e{k}", f"s{j}_t{k}"
        coord = f"(size_t){r}" if k == axis else f"({rest} % {e})"
        lines += [f"{off} += {coord} * {t};", f"{rest} /= {e};"]
        sizes += [(e, out[k]), (t, strides[k])]
    lines.append(
        f"float t{j} = ({r} >= 0 && {r} < (long long)s{j}_n) ? {x}[{off}] : "
        "__int_as_float(0x7fc00000);"
    )
    return lines, sizes


GATHER = OpDef(
    "gather",
    FusionClass.OUT_ELEMENTWISE,
    2,
    reference=_gather,
    params=(("dim", 0.0),),
    element=_gather_element,
    shape=_gather_shape,
    flops_per_element=0.0,
    cost=lambda ins, out: (0.0, 4.0 * 3 * int(np.prod(out))),
    dtype=_embedding_dtype,
    widen=False,
    typed_pointers=True,
)

DTYPE_OPS: tuple[OpDef, ...] = (*CASTS, EMBEDDING, GATHER)

for _op in DTYPE_OPS:
    register(_op)
