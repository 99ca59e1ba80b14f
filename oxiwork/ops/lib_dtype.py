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
  int64/int32 indices, an input of any dtype (BERT gathers its int64 token types); the
  out-of-range rule of ``embedding`` (NaN for floats, 0 for integers in the C); ``dim`` is
  a parameter.
- ``index_<k>`` (:func:`index_op`, ``x[i0, ..., ik-1]``, ``aten.index.Tensor``): the
  leading ``k`` axes indexed by integer tensors broadcast together (GPT-2's mask builder
  reads position ids so), out-element-wise like ``gather``; ``index_<k>_after_<n>`` the
  same after ``n`` whole axes (``x[:, :, rows, cols]``, as bicubic resizing reads).
- ``index_select`` (``torch.index_select(x, dim, index)``, roll's decomposition), ``flip``
  (``axes``, a bit mask) and ``repeat`` (``Tensor.repeat``: ``lead`` new leading axes and
  ``times{k}``, the repeats of the k-th axis from the last): each output element copies
  one input element, of any dtype; ``index_select`` takes indices in ``[0, n)`` (as torch),
  refused by the reference and NaN or 0 in the C outside it.
- ``slice_scatter`` (``torch.slice_scatter(x, src, dim, start, end, step)``: ``dim``,
  ``start``, ``step``; the end is where ``src``'s elements end): ``x`` with that slice
  replaced by ``src``, of any dtype, out-element-wise (ViT-MAE and Funnel write slices so).
- ``cumsum`` along parameter ``dim``: bool and integers sum exactly in int64, floats in
  float32 in order (GPT-2 numbers its tokens so); each output element sums its prefix.
  ``cumprod`` likewise multiplies it: bool and integers in int64, wrapping around as
  torch's int64 does, floats in float32 in order.
- ``cumsum_<dtype>`` (``torch.cumsum(x, dim, dtype=...)``, for int64, int32 and float32):
  each element converted to the dtype first (C's conversion, as the casts), summed in
  order (integers in int64, wrapping into int32 as torch's; floats in float32).
- ``histc`` (``torch.histc(x, bins, min, max)``): float32 counts of the float32 elements
  per bin of ``[min, max]`` (the last bin closed; NaN and elements outside not counted),
  the bin torch's CPU one computed in float32; inputs of fewer than 2**24 elements (the
  counts are exact). Each bin counts over the whole input (``bins * n`` reads).
- ``index_put`` (``x[idx] = values`` with one index tensor on the leading axis, torch's
  ``index_put`` without accumulate): rows of ``x`` replaced by ``values`` (broadcast to
  the rows written), negative indices from the end; a repeated index takes its last value
  (torch leaves which one unspecified); an index outside ``[-n, n)`` is refused by the
  reference and never matches in the C. Each output element scans the indices.
- ``scatter_value`` (``torch.scatter(x, dim, index, value)``: ``dim``, ``value``, and
  ``infinite`` +1/-1 for an infinite value, which no parameter holds): ``x`` with the
  positions ``index`` names along ``dim`` set to the value; an integer or bool input takes
  a whole number of magnitude at most 2**24. Indices outside ``[0, n)``: refused by the
  reference, never matched in the C.
- ``sort_values``/``sort_indices`` (``torch.sort``, ``argsort``: ``dim``, ``descending``)
  and ``topk_values``/``topk_indices`` (``torch.topk``: ``k``, ``dim``, ``largest``; its
  sorted order): the values (the input's dtype, any) or their indices (int64) in torch's
  order on the CPU: NaN above every number (last ascending, first descending), -0.0 equal
  to 0.0, and equal elements lower index first. That is the stable sort's order; torch's
  unstable sort and its topk leave the order of equal elements unspecified (its topk
  returns them in other orders), and these ops take lower index first there too.
  Out-element-wise: output element ``j`` of a row of ``n`` is the element of rank ``j``,
  found by a radix select over the row (one pass per 4-bit digit of a 32-bit key, 64-bit
  for int64, and one for the ties): ``9 n`` reads per thread (``17 n`` for int64), O(1)
  registers (16 counters), no shared memory; a whole sort is ``9 n**2`` reads per row, a
  top-k ``9 n k``.

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
>>> x = np.array([[1.0, np.nan, -0.0, 0.0, 3.0]], np.float32)
>>> ops.get("sort_indices").reference([x], dim=-1.0, descending=1.0)   # NaN first, ties in order
array([[1, 4, 0, 2, 3]])
>>> ops.get("topk_values").reference([x], k=2.0, dim=-1.0, largest=0.0)
array([[-0.,  0.]], dtype=float32)
>>> experts = np.array([0.0, 3.0, 1.0, 3.0], np.float32)
>>> counts = ops.get("histc").reference([experts], bins=4.0, min=0.0, max=3.0)
>>> counts, ops.get("cumsum_int32").reference([counts], dim=0.0)
(array([1., 1., 0., 2.], dtype=float32), array([1, 2, 2, 4], dtype=int32))
>>> ops.get("index_put").reference([np.zeros(3, np.int64), np.array([2, 0]), np.array([7, 8])])
array([8, 0, 7])

References
----------
T. Alabi, J. D. Blanchard, B. Gordon and R. Steinbach, "Fast k-Selection Algorithms for
Graphics Processing Units", ACM Journal of Experimental Algorithmics 17 (2012), radix
select; PyTorch's ``aten/src/ATen/native/cuda/SortingRadixSelect.cuh``, whose
``TopKTypeConfig`` maps values to order-preserving unsigned keys as ``sort_*`` and
``topk_*`` do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from oxiwork.error import InvalidArgument
from oxiwork.ops import cnames
from oxiwork.ops.table import (
    COMPUTE_DTYPES,
    HALF_DTYPES,
    DtypeProblem,
    FusionClass,
    OpDef,
    Shape,
    _ShapeProblem,
    any_dtype,
    broadcast_shape,
    float_dtype,
    get,
    register,
)

__all__ = [
    "CASTS",
    "CUMPROD",
    "CUMSUM",
    "CUMSUM_DTYPES",
    "CUMSUM_TO",
    "DTYPE_OPS",
    "EMBEDDING",
    "FLIP",
    "GATHER",
    "HISTC",
    "INDEX_PUT",
    "INDEX_SELECT",
    "REPEAT",
    "SCATTER_VALUE",
    "SORT_OPS",
    "accumulate_dtype",
    "cast_name",
    "index_op",
    "typed_value",
    "wrapping_result",
    "wrapping_start",
    "wrapping_step",
]

_FLOATS = ("float32", "float16", "bfloat16")
_INDEX = ("int64", "int32")


def _require_index(dtype: str, says: str, what: str = "them") -> None:
    """Refuse ``dtype`` for index tensors unless int64/int32; ``says`` opens the message."""
    if dtype not in _INDEX:
        raise DtypeProblem(f"{says}: cast {what} first (op 'cast_int64')")


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
    _require_index(idx, f"the indices (input 1) are {idx}; lookups take int64 or int32 indices")
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
def typed_value(j: int, ptr: str, ok: str, at: str) -> list[str]:
    """C lines defining ``t{j}``, element ``at`` of ``ptr`` when ``ok`` holds, in the type
    the pointer's elements compute in (``T{j}``: float for float and half arrays, the
    integer type for integers, int for bool); otherwise NaN for floats and 0 for integers
    (generated code cannot raise where the reference refuses an index).

    >>> typed_value(0, "in0", "ok0", "o0")[1]
    'T0 t0 = (ok0) ? (T0)in0[o0] : (T0)((T0)0.5f == (T0)0 ? 0.0f : __int_as_float(0x7fc00000));'
    """
    # (T)0.5f == (T)0 only for an integer T: the NaN branch is never taken for it
    return [
        f"typedef decltype(+{ptr}[0]) T{j};",
        f"T{j} t{j} = ({ok}) ? (T{j}){ptr}[{at}] : "
        f"(T{j})((T{j})0.5f == (T{j})0 ? 0.0f : __int_as_float(0x7fc00000));",
    ]


def _gather_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    x, idx = dtypes
    if x not in COMPUTE_DTYPES:
        raise DtypeProblem(f"the input (input 0) is {x}, which kernels do not compute on")
    _require_index(idx, f"the indices (input 1) are {idx}; gathers take int64 or int32 indices")
    return x


def _gather_axis(shapes: Sequence[Shape], params: Mapping[str, float]) -> int:
    x = shapes[0]
    d = params["dim"]
    if d != int(d) or not -len(x) <= d < len(x):
        raise _ShapeProblem(f"dim {d} is not an axis of the input {x}")
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
    lines += typed_value(j, x, f"{r} >= 0 && {r} < (long long)s{j}_n", off)
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
    dtype=_gather_dtype,
    widen=False,
    typed_pointers=True,
)


# ----------------------------------------------------------------------------- index
def _index_shape(shapes: Sequence[Shape], params: Mapping[str, float], lead: int = 0) -> Shape:
    x, *idx = shapes
    if lead + len(idx) > len(x):
        raise _ShapeProblem(
            f"{len(idx)} index tensors after {lead} whole axes index an input of {len(x)} axes {x}"
        )
    return (*x[:lead], *broadcast_shape(idx), *x[lead + len(idx) :])


def _index(xs: Sequence[np.ndarray], lead: int = 0) -> np.ndarray:
    x, *idx = xs
    for k, ix in enumerate(idx, start=lead):
        n = x.shape[k]
        bad = (ix < -n) | (ix >= n)
        if bad.any():
            first = int(np.asarray(ix)[bad].reshape(-1)[0])
            raise IndexError(
                f"index {first} is out of range for axis {k} of extent {n}; indices must be "
                f"in [-{n}, {n})"
            )
    # numpy's advanced indexing of adjacent axes after whole ones is torch's: the index
    # tensors broadcast together in their place, a negative index counts from the end
    return x[(slice(None),) * lead + tuple(ix.astype(np.int64) for ix in idx)]


def _row_major(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def _coords(j: int, var: str, out: Shape, sizes: list[tuple[str, int]]) -> list[str]:
    """C lines splitting ``var`` into ``c{j}_{a}`` for every axis a of ``out``."""
    lines = [f"size_t q{j} = {var};"]
    for a in range(len(out) - 1, -1, -1):
        e = f"s{j}_e{a}"
        sizes.append((e, out[a]))
        lines += [f"size_t c{j}_{a} = q{j} % {e};", f"q{j} /= {e};"]
    return lines


def _index_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    lead: int = 0,
) -> tuple[list[str], list[tuple[str, int]]]:
    # out = (x's ``lead`` whole axes) + (broadcast index shape B) + (x's axes after the
    # indexed ones): split the output index into coordinates; each index tensor is read at
    # its broadcast position in B, and x at (the whole axes' coordinates, the indices read,
    # then the remaining coordinates)
    x, *ix = ptrs
    xshape, idx = ins[0], ins[1:]
    nb = len(out) - (len(xshape) - len(idx))
    xst = _row_major(xshape)
    sizes: list[tuple[str, int]] = []
    lines = _coords(j, var, out, sizes)
    ok, off = f"ok{j}", f"o{j}"
    lines += [f"bool {ok} = true;", f"size_t {off} = 0;"]
    for p, (ptr, shape) in enumerate(zip(ix, idx, strict=True)):
        pad = nb - len(shape)  # an index tensor aligns at the last axis of B
        ist = _row_major(shape)
        terms = []
        for a, (d, st) in enumerate(zip(shape, ist, strict=True)):
            if d != 1:
                name = f"s{j}_i{p}s{a}"
                sizes.append((name, st))
                terms.append(f"c{j}_{lead + pad + a} * {name}")
        n, xa = f"s{j}_n{p}", lead + p  # (the index's axis of x)
        sizes += [(n, xshape[xa]), (f"s{j}_x{xa}", xst[xa])]
        r = f"r{j}_{p}"
        lines += [
            f"long long {r} = (long long){ptr}[{' + '.join(terms) or '0'}];",
            f"if ({r} < 0) {r} += (long long){n};",
            f"{ok} = {ok} && {r} >= 0 && {r} < (long long){n};",
            f"{off} += (size_t)({ok} ? {r} : 0) * s{j}_x{xa};",
        ]
    for a in range(lead):  # the whole axes before the indexed ones
        sizes.append((f"s{j}_x{a}", xst[a]))
        lines.append(f"{off} += c{j}_{a} * s{j}_x{a};")
    for a in range(lead + nb, len(out)):
        k = len(idx) + a - nb
        name = f"s{j}_x{k}"
        sizes.append((name, xst[k]))
        lines.append(f"{off} += c{j}_{a} * {name};")
    lines += typed_value(j, x, ok, off)
    return lines, sizes


def _index_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    x, *idx = dtypes
    if x not in COMPUTE_DTYPES:
        raise DtypeProblem(f"the input (input 0) is {x}, which kernels do not compute on")
    for k, d in enumerate(idx, start=1):
        _require_index(
            d,
            f"index {k} is {d}; advanced indexing here takes int64 or int32 index tensors (a "
            "bool mask has a data-dependent shape)",
            "it",
        )
    return x


def index_op(count: int, lead: int = 0) -> OpDef:
    """The op indexing ``count`` adjacent axes of its input by ``count`` integer index
    tensors after ``lead`` whole axes (``x[i0, i1]``; ``x[:, :, i0, i1]`` with ``lead=2``:
    ``aten.index.Tensor`` with leading ``None`` only), ``index_<count>`` (``lead`` 0) or
    ``index_<count>_after_<lead>``, registered on first use (an op has a fixed number of
    inputs, and its whole axes are part of what it is).

    Out-element-wise, like :data:`GATHER`: the output element reads the index tensors at
    its broadcast position and the input where they point; a negative index counts from
    the end; the reference refuses one out of range (as torch does), the C gives NaN or 0.

    >>> import numpy as np
    >>> x = np.arange(6).reshape(2, 3)
    >>> index_op(2).reference([x, np.array([[1], [0]]), np.array([0, -1])])
    array([[3, 5],
           [0, 2]])
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count < cnames.MAX_ARITY:
        raise InvalidArgument(
            f"index_op needs 1 to {cnames.MAX_ARITY - 1} index tensors, got {count!r}"
        )
    if isinstance(lead, bool) or not isinstance(lead, int) or not 0 <= lead <= 8:
        raise InvalidArgument(f"index_op takes 0 to 8 whole leading axes, got {lead!r}")
    name = f"index_{count}" if lead == 0 else f"index_{count}_after_{lead}"
    op = get(name)
    if op is None:

        def element(*args: Any) -> tuple[list[str], list[tuple[str, int]]]:
            return _index_element(*args, lead=lead)

        op = register(
            OpDef(
                name,
                FusionClass.OUT_ELEMENTWISE,
                count + 1,
                reference=lambda xs: _index(xs, lead),
                element=element,
                shape=lambda shapes, params: _index_shape(shapes, params, lead),
                flops_per_element=0.0,
                cost=lambda ins, out: (0.0, 4.0 * (1 + len(ins)) * int(np.prod(out))),
                dtype=_index_dtype,
                widen=False,
                typed_pointers=True,
            )
        )
    return op


# ----------------------------------------------------------------------------- cumsum
def accumulate_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """torch's result dtype of a sum or product of ``dtypes[0]`` (cumsum, cumprod, prod):
    bool and integers accumulate in int64, floats in their own dtype (float32 math).

    >>> accumulate_dtype(["bool"], {}), accumulate_dtype(["bfloat16"], {})
    ('int64', 'bfloat16')
    """
    if dtypes[0] in ("bool", *_INDEX):
        return "int64"
    return float_dtype(dtypes, params)


def wrapping_step(j: int, x: str, acc: str, at: str, op: str) -> str:
    """The C statement combining ``acc`` (declared by :func:`wrapping_start`) with
    ``x[at]`` by ``op`` (``"*"`` or ``"+"``), in the accumulator's type.

    >>> wrapping_step(0, "in0", "a0", "q0", "*")
    'a0 *= (U0)in0[q0];'
    """
    return f"{acc} {op}= (U{j}){x}[{at}];"


def wrapping_start(j: int, x: str, acc: str, init: int) -> list[str]:
    """C lines declaring the accumulator ``acc`` = ``init`` of a product or sum of the
    elements of ``x`` (cumprod, prod_dims, sum_int_dims): ``float`` for float arrays
    (halves are read as float), ``unsigned long long`` for bool and integers, whose
    products wrap around modulo 2**64 there as in torch's int64 (a signed overflow is
    undefined behaviour in C; an unsigned one is defined, and the bits are the same two's
    complement ones).

    >>> wrapping_start(0, "in0", "a0", 1)[1]
    'U0 a0 = (U0)1;'
    """
    return [f"typedef decltype({x}[0] * 0ull) U{j};", f"U{j} {acc} = (U{j}){init};"]


def wrapping_result(j: int, x: str, acc: str) -> list[str]:
    """C lines defining ``t{j}`` from the accumulator of :func:`wrapping_start`: ``float``
    for floats, ``long long`` (the int64 result, the same bits) for bool and integers."""
    return [
        f"typedef decltype({x}[0] * (long long)0) T{j};",
        f"T{j} t{j} = (T{j}){acc};",
    ]


def _cumsum_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    _gather_axis(shapes, params)  # dim must be an axis
    return tuple(shapes[0])


def _cumulative(scan: Any) -> Any:
    def reference(xs: Sequence[np.ndarray], dim: float) -> np.ndarray:
        # np.cumsum / np.cumprod accumulate in order (out[k] = out[k - 1] op x[k]), the
        # kernel's order; int64 wraps around on overflow, as in torch
        x = xs[0]
        out = np.int64 if x.dtype.kind in "biu" else np.float32
        r = scan(x, axis=int(dim) % max(1, x.ndim), dtype=out)
        if scan is np.cumsum and out is np.float32:
            # the kernel (and torch) starts the sum at 0, and 0 + -0.0 is +0.0: a prefix
            # of zeros sums to +0.0 there, where numpy's first element is x[0] itself
            r += np.float32(0)
        return r

    return reference


def _scan_head(
    j: int, var: str, ins: Sequence[Shape], out: Shape, params: Mapping[str, float]
) -> tuple[list[str], list[tuple[str, int]]]:
    """C lines placing output element ``var`` of a scan along ``dim``: its coordinate
    ``c{j}`` along the axis and ``b{j}``, the offset of the axis's first element."""
    axis = _gather_axis(ins, params)
    n, sin = f"s{j}_n", f"s{j}_inner"
    lines = [
        f"size_t c{j} = ({var} / {sin}) % {n};",
        f"size_t b{j} = {var} - c{j} * {sin};",
    ]
    return lines, [(n, out[axis]), (sin, math.prod(out[axis + 1 :]))]


def _cumsum_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # the output element at coordinate c along the axis sums the input from 0 to c, in
    # order (numpy's cumsum order); integers in long long, floats in float
    return _prefix_sum(j, ptrs[0], var, ins, out, params, None)


def _prefix_sum(
    j: int,
    x: str,
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    ctype: str | None,
) -> tuple[list[str], list[tuple[str, int]]]:
    """C lines summing the prefix of ``x`` up to output element ``var``'s coordinate, each
    element converted to ``ctype`` first where one is given (cumsum_<dtype>): integers
    accumulate in long long, floats in float."""
    head, sizes = _scan_head(j, var, ins, out, params)
    if ctype is None:
        acc, read = f"decltype({x}[0] + (long long)0)", f"{x}[b{j} + q{j} * s{j}_inner]"
    else:
        acc = "float" if ctype == "float" else f"decltype(({ctype})0 + (long long)0)"
        read = f"({ctype}){x}[b{j} + q{j} * s{j}_inner]"
    lines = [
        f"typedef {acc} T{j};",
        *head,
        f"T{j} t{j} = 0;",
        f"for (size_t q{j} = 0; q{j} <= c{j}; ++q{j}) {{",
        f"    t{j} += {read};",
        "}",
    ]
    return lines, sizes


def _cumprod_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # the product of the prefix, in order; bool and integers wrap around in int64
    (x,) = ptrs
    head, sizes = _scan_head(j, var, ins, out, params)
    lines = [
        *head,
        *wrapping_start(j, x, f"a{j}", 1),
        f"for (size_t q{j} = 0; q{j} <= c{j}; ++q{j}) {{",
        f"    {wrapping_step(j, x, f'a{j}', f'b{j} + q{j} * s{j}_inner', '*')}",
        "}",
        *wrapping_result(j, x, f"a{j}"),
    ]
    return lines, sizes


def _cumsum_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # each output element sums its prefix: (n + 1) / 2 additions on average along the axis
    n = max(ins[0]) if ins[0] else 1
    return float(np.prod(out)) * (n + 1) / 2, 4.0 * 2 * int(np.prod(out))


CUMSUM = OpDef(
    "cumsum",
    FusionClass.OUT_ELEMENTWISE,
    1,
    reference=_cumulative(np.cumsum),
    params=(("dim", -1.0),),
    element=_cumsum_element,
    shape=_cumsum_shape,
    cost=_cumsum_cost,
    dtype=accumulate_dtype,
    typed_pointers=True,
)

# torch.cumprod: cumsum's structure and rules, a product (float products in order, so the
# reference's and the kernel's roundings are the same ones)
CUMPROD = OpDef(
    "cumprod",
    FusionClass.OUT_ELEMENTWISE,
    1,
    reference=_cumulative(np.cumprod),
    params=(("dim", -1.0),),
    element=_cumprod_element,
    shape=_cumsum_shape,
    cost=_cumsum_cost,
    dtype=accumulate_dtype,
    typed_pointers=True,
)


# torch.cumsum(x, dim, dtype=d): x converted to d first (C's conversion, as the cast ops),
# then summed in order (integers in int64, the result wrapping into d as torch's int32
# cumsum does; floats in float32). One op per result dtype: the dtype is the op's, not a
# parameter, so cumsum's own kernels keep their arguments. (MoE layers count tokens per
# expert in float and number them cumsum(counts, dtype=torch.int32).)
CUMSUM_DTYPES = ("int64", "int32", "float32")


def _cumsum_to(target: str) -> Any:
    cast = _cast_reference(target)
    total = _cumulative(np.cumsum)

    def reference(xs: Sequence[np.ndarray], dim: float) -> np.ndarray:
        # (int64 -> int32 wraps in numpy's astype, as the C's store)
        return total([cast(xs)], dim).astype(target)

    return reference


def _cumsum_to_element(target: str) -> Any:
    ctype = {"int64": "long long", "int32": "int", "float32": "float"}[target]

    def element(
        j: int,
        ptrs: Sequence[str],
        var: str,
        ins: Sequence[Shape],
        out: Shape,
        params: Mapping[str, float],
    ) -> tuple[list[str], list[tuple[str, int]]]:
        return _prefix_sum(j, ptrs[0], var, ins, out, params, ctype)

    return element


CUMSUM_TO: tuple[OpDef, ...] = tuple(
    OpDef(
        f"cumsum_{d}",
        FusionClass.OUT_ELEMENTWISE,
        1,
        reference=_cumsum_to(d),
        params=(("dim", -1.0),),
        element=_cumsum_to_element(d),
        shape=_cumsum_shape,
        cost=_cumsum_cost,
        dtype=_cast_rule(d),  # (it converts its elements as the cast to d does)
        widen=False,
        typed_pointers=True,
    )
    for d in CUMSUM_DTYPES
)


# torch.histc(x, bins, min, max): counts of the float32 elements in [min, max] per bin of
# width (max - min) / bins, the last bin closed; NaN and elements outside are not counted.
# The bin is torch's CPU one (aten/src/ATen/native/cpu/HistogramKernel.cpp, histc's linear
# interpolation), computed in float32: (x - min) * bins / (max - min) truncated, bins
# itself moved into the last bin. Counts are float32 (torch's: the input's dtype), exact
# while the input holds fewer than 2**24 elements (refused from there). Each output element
# counts its bin over the whole input (bins * n reads: MoE layers count tokens over a few
# dozen experts so).
HISTC_MAX_ELEMENTS = 2**24


def _histc_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] != "float32":
        raise DtypeProblem(
            f"input 0 is {dtypes[0]}; histc counts float32 values: cast it first (op "
            "'cast_float32')"
        )
    return "float32"


def _histc_params(params: Mapping[str, float]) -> tuple[int, np.float32, np.float32]:
    bins, lo, hi = params["bins"], np.float32(params["min"]), np.float32(params["max"])
    if bins != int(bins) or bins < 1:
        raise _ShapeProblem(f"bins={bins!r} must be a whole number >= 1")
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise _ShapeProblem(
            f"min={params['min']!r} and max={params['max']!r} must be finite float32 values "
            "with min < max (torch's data-dependent range of min == max is not computed)"
        )
    return int(bins), lo, hi


def _histc_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    bins, _, _ = _histc_params(params)
    n = math.prod(shapes[0])
    if n >= HISTC_MAX_ELEMENTS:
        raise _ShapeProblem(
            f"histc counts in float32, exact below {HISTC_MAX_ELEMENTS} elements; the input "
            f"{tuple(shapes[0])} holds {n}"
        )
    return (bins,)


def _histc(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    bins, lo, hi = _histc_params(params)
    x = np.asarray(xs[0], dtype=np.float32).reshape(-1)
    x = x[(x >= lo) & (x <= hi)]  # (NaN compares false: not counted)
    with np.errstate(all="ignore"):
        pos = ((x - lo) * np.float32(bins) / (hi - lo)).astype(np.int64)
    pos = np.minimum(pos, bins - 1)  # the last bin holds max (and what rounds up to it)
    return np.bincount(pos, minlength=bins).astype(np.float32)


def _histc_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    (x,) = ptrs
    n = f"s{j}_n"
    lines = [
        f"float t{j} = 0.0f;",
        f"for (size_t q{j} = 0; q{j} < {n}; ++q{j}) {{",
        f"    float e{j} = {x}[q{j}];",
        f"    if (!(e{j} >= {{min}} && e{j} <= {{max}})) continue;",
        f"    long long p{j} = (long long)((e{j} - {{min}}) * {{bins}} / ({{max}} - {{min}}));",
        f"    if (p{j} > (long long){{bins}} - 1) p{j} = (long long){{bins}} - 1;",
        f"    if (p{j} == (long long){var}) t{j} += 1.0f;",
        "}",
    ]
    return lines, [(n, math.prod(ins[0]))]


HISTC = OpDef(
    "histc",
    FusionClass.OUT_ELEMENTWISE,
    1,
    reference=_histc,
    params=(("bins", 100.0), ("min", 0.0), ("max", 1.0)),
    element=_histc_element,
    shape=_histc_shape,
    # each bin reads every element: bins * n reads and comparisons
    cost=lambda ins, out: (
        4.0 * math.prod(ins[0]) * math.prod(out),
        4.0 * (math.prod(ins[0]) * math.prod(out) + math.prod(out)),
    ),
    dtype=_histc_dtype,
    widen=False,
    typed_pointers=True,
)


# index_put (x[idx] = values, torch.Tensor.index_put_ with one index tensor on the leading
# axis, accumulate=False): x with row idx[q] replaced by values[q] (values broadcast to
# (len(idx), *x.shape[1:])). A negative index counts from the end (torch's rule); an index
# outside [-n, n) is refused by the reference (as torch) and never matches in the C. Where
# idx repeats a row, torch leaves which value lands unspecified; here the last one does
# (its CPU loop's order). Each output element scans idx from the end for its row (len(idx)
# reads): MoE layers invert their routing permutation so.
def _index_put_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    x, idx, values = dtypes
    if x not in COMPUTE_DTYPES:
        raise DtypeProblem(f"the input (input 0) is {x}, which kernels do not compute on")
    _require_index(idx, f"the indices (input 1) are {idx}; index_put takes int64 or int32 indices")
    if values != x:
        raise DtypeProblem(
            f"the values (input 2) are {values} but the input is {x}: cast them first "
            f"(op '{cast_name(x)}')"
        )
    return x


def _index_put_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, idx, values = shapes
    if not x:
        raise _ShapeProblem("index_put writes rows of a tensor of at least one axis, got a 0-d one")
    if len(idx) != 1:
        raise _ShapeProblem(f"index_put needs a vector of row indices, got shape {idx}")
    rows = (idx[0], *x[1:])
    try:
        fits = broadcast_shape([values, rows]) == rows
    except ValueError:
        fits = False
    if not fits:
        raise _ShapeProblem(f"the values {values} do not broadcast to the rows written, {rows}")
    return tuple(x)


def _index_put(xs: Sequence[np.ndarray]) -> np.ndarray:
    x, idx, values = xs
    n, m = x.shape[0], idx.shape[0]
    idx = np.asarray(idx).astype(np.int64)
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(
            f"index_put index {int(idx[bad][0])} is out of range for axis 0 of extent {n}; "
            f"indices must be in [-{n}, {n})"
        )
    rows = np.where(idx < 0, idx + n, idx)
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, rows, np.arange(m))  # the last value written to each row
    out = np.array(x, copy=True)
    hit = last >= 0
    out[hit] = np.broadcast_to(values, (m, *x.shape[1:]))[last[hit]]
    return out


def _index_put_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    x, ix, v = ptrs
    vshape = ins[2]
    target = (ins[1][0], *out[1:])
    # the values' stride along each axis of the rows written (0 where they broadcast)
    lead = len(target) - len(vshape)
    vst = _row_major(vshape)
    strides = [0] * len(target)
    for a in range(lead, len(target)):
        if vshape[a - lead] != 1:
            strides[a] = vst[a - lead]
    sizes: list[tuple[str, int]] = [(f"s{j}_n", out[0]), (f"s{j}_m", ins[1][0])]
    lines = _coords(j, var, out, sizes)
    lines += [
        f"long long w{j} = -1;",
        f"for (size_t q{j} = s{j}_m; q{j}-- > 0;) {{",
        f"    long long i{j} = (long long){ix}[q{j}];",
        f"    if (i{j} < 0) i{j} += (long long)s{j}_n;",
        f"    if (i{j} == (long long)c{j}_0) {{ w{j} = (long long)q{j}; break; }}",
        "}",
        f"size_t o{j} = w{j} >= 0 ? (size_t)w{j} * s{j}_v0 : 0;",
    ]
    sizes.append((f"s{j}_v0", strides[0]))
    for a in range(1, len(out)):
        if strides[a]:
            sizes.append((f"s{j}_v{a}", strides[a]))
            lines.append(f"o{j} += c{j}_{a} * s{j}_v{a};")
    lines += [
        f"typedef decltype(+{x}[0]) T{j};",
        f"T{j} t{j} = w{j} >= 0 ? (T{j}){v}[o{j}] : (T{j}){x}[{var}];",
    ]
    return lines, sizes


INDEX_PUT = OpDef(
    "index_put",
    FusionClass.OUT_ELEMENTWISE,
    3,
    reference=_index_put,
    element=_index_put_element,
    shape=_index_put_shape,
    flops_per_element=0.0,
    # each output element scans the indices: len(idx) reads, then one element
    cost=lambda ins, out: (0.0, 4.0 * int(np.prod(out)) * (ins[1][0] + 2)),
    dtype=_index_put_dtype,
    widen=False,
    typed_pointers=True,
)


# scatter of a number (torch.scatter(x, dim, index, value), aten.scatter.value): x with
# x[p with p[dim] = index[p]] = value for every position p of index (index no larger than
# x but along dim). The value is the parameter ``value``, or an infinity where ``infinite``
# is +1 or -1 (a parameter is a finite number; PhiMoE's router masks its top expert with
# -inf so). Each output element looks along dim in the index at its own other coordinates
# (index.shape[dim] reads); an index outside [0, n) is refused by the reference (as torch)
# and never matches in the C.
_SCATTER_EXACT = 2**24  # integers every parameter type (float, the integer's own) holds


def _scatter_value_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    x, idx = dtypes
    if x not in COMPUTE_DTYPES:
        raise DtypeProblem(f"the input (input 0) is {x}, which kernels do not compute on")
    _require_index(idx, f"the indices (input 1) are {idx}; scatter takes int64 or int32 indices")
    value, inf = params.get("value", 0.0), params.get("infinite", 0.0)
    if inf not in (-1.0, 0.0, 1.0):
        raise DtypeProblem(f"infinite={inf!r} must be -1, 0 or 1 (the value -inf, value, +inf)")
    if x not in _FLOATS and (inf or not float(value).is_integer() or abs(value) > _SCATTER_EXACT):
        raise DtypeProblem(
            f"the input is {x} but the value is {'an infinity' if inf else repr(value)}: an "
            f"integer or bool input takes a whole number of magnitude at most {_SCATTER_EXACT}"
        )
    return x


def _scatter_value_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, idx = shapes
    axis = _gather_axis(shapes, params)
    if len(idx) != len(x) or any(i > n for k, (n, i) in enumerate(zip(x, idx, strict=True)) if k != axis):  # fmt: skip
        raise _ShapeProblem(
            f"scatter needs indices with the input's {len(x)} axes, no larger than it but along "
            f"axis {axis}: got {tuple(idx)} for {tuple(x)}"
        )
    return tuple(x)


def _scatter_value(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    x, idx = xs
    axis = _gather_axis([x.shape, idx.shape], params)
    n = x.shape[axis]
    idx = np.asarray(idx).astype(np.int64)
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        raise IndexError(
            f"scatter index {int(idx[bad][0])} is out of range for axis {axis} of extent {n}; "
            f"indices must be in [0, {n})"
        )
    inf = params["infinite"]
    value = np.float32(inf * np.inf if inf else params["value"])  # (the kernel's argument)
    out = np.array(x, copy=True)
    corner = tuple(slice(None) if k == axis else slice(0, s) for k, s in enumerate(idx.shape))
    with np.errstate(all="ignore"):
        np.put_along_axis(out[corner], idx, value.astype(x.dtype), axis=axis)
    return out


def _scatter_value_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    x, ix = ptrs
    axis = _gather_axis(ins, params)
    ist = _row_major(ins[1])
    sizes: list[tuple[str, int]] = [(f"s{j}_m", ins[1][axis]), (f"s{j}_i{axis}", ist[axis])]
    lines = _coords(j, var, out, sizes)
    lines += [f"bool within{j} = true;", f"size_t o{j} = 0;"]
    for a in range(len(out)):
        if a != axis:
            sizes += [(f"s{j}_l{a}", ins[1][a]), (f"s{j}_i{a}", ist[a])]
            lines += [
                f"within{j} = within{j} && c{j}_{a} < s{j}_l{a};",
                f"o{j} += c{j}_{a} * s{j}_i{a};",
            ]
    lines += [
        f"typedef decltype(+{x}[0]) T{j};",
        f"T{j} t{j} = (T{j}){x}[{var}];",
        f"for (size_t q{j} = 0; within{j} && q{j} < s{j}_m; ++q{j}) {{",
        f"    if ((long long){ix}[o{j} + q{j} * s{j}_i{axis}] == (long long)c{j}_{axis}) {{",
        # (an integer T takes the whole number; a float one the value or the infinity)
        f"        t{j} = (T{j})0.5f == (T{j})0 ? (T{j}){{value}} : (T{j})({{infinite}} != 0 ? "
        f"(float){{infinite}} * __int_as_float(0x7f800000) : (float){{value}});",
        "        break;",
        "    }",
        "}",
    ]
    return lines, sizes


SCATTER_VALUE = OpDef(
    "scatter_value",
    FusionClass.OUT_ELEMENTWISE,
    2,
    reference=_scatter_value,
    params=(("dim", 0.0), ("value", 0.0), ("infinite", 0.0)),
    element=_scatter_value_element,
    shape=_scatter_value_shape,
    flops_per_element=0.0,
    # each output element reads along the index's axis, then one element
    cost=lambda ins, out: (0.0, 4.0 * int(np.prod(out)) * (max(ins[1]) + 2)),
    dtype=_scatter_value_dtype,
    widen=False,
    typed_pointers=True,
)


# ----------------------------------------------------------------------------- moves
# index_select, flip and repeat: each output element copies one input element, found from
# its coordinates (out-element-wise, so element-wise epilogues fuse after them).
def _select_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, idx = shapes
    axis = _gather_axis(shapes, params)
    if len(idx) > 1:
        raise _ShapeProblem(f"index_select needs a vector of indices, got shape {idx}")
    return (*x[:axis], math.prod(idx), *x[axis + 1 :])


def _select(xs: Sequence[np.ndarray], dim: float) -> np.ndarray:
    x, idx = xs
    axis = int(dim) % x.ndim
    n = x.shape[axis]
    idx = np.asarray(idx).reshape(-1)
    bad = (idx < 0) | (idx >= n)  # (torch.index_select refuses negative indices too)
    if bad.any():
        raise IndexError(
            f"index {int(idx[bad][0])} is out of range for axis {axis} of extent {n}; indices "
            f"must be in [0, {n})"
        )
    return np.take(x, idx.astype(np.int64), axis=axis)


def _select_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # the input offset of the output's coordinates, the selected axis's one replaced by the
    # index read at it (out of [0, n), a negative one too: NaN or 0)
    x, ix = ptrs
    axis = _gather_axis(ins, params)
    xst = _row_major(ins[0])
    sizes: list[tuple[str, int]] = [(f"s{j}_n", ins[0][axis])]
    lines = _coords(j, var, out, sizes)
    r = f"r{j}"
    lines += [
        f"long long {r} = (long long){ix}[c{j}_{axis}];",
        f"bool ok{j} = {r} >= 0 && {r} < (long long)s{j}_n;",
        f"size_t o{j} = (size_t)(ok{j} ? {r} : 0) * s{j}_x{axis};",
    ]
    for a in range(len(out)):
        sizes.append((f"s{j}_x{a}", xst[a]))
        if a != axis:
            lines.append(f"o{j} += c{j}_{a} * s{j}_x{a};")
    return [*lines, *typed_value(j, x, f"ok{j}", f"o{j}")], sizes


INDEX_SELECT = OpDef(
    "index_select",
    FusionClass.OUT_ELEMENTWISE,
    2,
    reference=_select,
    params=(("dim", 0.0),),
    element=_select_element,
    shape=_select_shape,
    flops_per_element=0.0,
    cost=lambda ins, out: (0.0, 4.0 * 3 * int(np.prod(out))),
    dtype=_gather_dtype,
    widen=False,
    typed_pointers=True,
)


def _flip_axes(shape: Shape, params: Mapping[str, float]) -> list[int]:
    mask, rank = params["axes"], len(shape)
    if mask != int(mask) or not 0 <= mask < 2**rank:
        raise _ShapeProblem(
            f"axes={mask!r} is not a bit mask of the {rank} axes of shape {tuple(shape)} "
            "(bit d flips axis d)"
        )
    return [d for d in range(rank) if int(mask) >> d & 1]


def _flip_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    _flip_axes(shapes[0], params)
    return tuple(shapes[0])


def _flip(xs: Sequence[np.ndarray], axes: float) -> np.ndarray:
    flipped = _flip_axes(xs[0].shape, {"axes": axes})
    return np.flip(xs[0], axis=tuple(flipped)).copy() if flipped else xs[0].copy()


def _flip_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    flipped = _flip_axes(ins[0], params)
    xst = _row_major(ins[0])
    sizes: list[tuple[str, int]] = []
    lines = [*_coords(j, var, out, sizes), f"size_t o{j} = 0;"]
    for a in range(len(out)):
        c = f"(s{j}_e{a} - 1 - c{j}_{a})" if a in flipped else f"c{j}_{a}"
        sizes.append((f"s{j}_x{a}", xst[a]))
        lines.append(f"o{j} += {c} * s{j}_x{a};")
    return [*lines, *typed_value(j, ptrs[0], "true", f"o{j}")], sizes


FLIP = OpDef(
    "flip",
    FusionClass.OUT_ELEMENTWISE,
    1,
    reference=_flip,
    params=(("axes", 0.0),),
    element=_flip_element,
    shape=_flip_shape,
    flops_per_element=0.0,
    dtype=any_dtype,
    widen=False,
    typed_pointers=True,
)


# slice_scatter (torch.slice_scatter(x, src, dim, start, end, step)): x with the slice
# start::step along dim (as many elements as src has there) replaced by src. Each output
# element reads src where its coordinate along dim falls on the slice, else x.
def _scatter_geometry(shapes: Sequence[Shape], params: Mapping[str, float]) -> tuple[int, int, int]:
    """(axis, start, step), checked: src is x's shape but along the axis, where its
    elements fall at start, start + step, ... inside x."""
    x, src = shapes
    axis = _gather_axis(shapes, params)
    start, step = params["start"], params["step"]
    if start != int(start) or start < 0 or step != int(step) or step < 1:
        raise _ShapeProblem(
            f"start={start!r} and step={step!r} must be whole numbers, start >= 0 and step >= 1"
        )
    start, step = int(start), int(step)
    if len(src) != len(x) or any(
        a != b for k, (a, b) in enumerate(zip(x, src, strict=True)) if k != axis
    ):
        raise _ShapeProblem(
            f"slice_scatter's source {src} must be the input {x} but on axis {axis}"
        )
    if start + step * (src[axis] - 1) >= x[axis]:
        raise _ShapeProblem(
            f"{src[axis]} elements from {start} by {step} do not fit axis {axis} of the input {x}"
        )
    return axis, start, step


def _scatter_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    _scatter_geometry(shapes, params)
    return tuple(shapes[0])


def _slice_scatter(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    x, src = xs
    axis, start, step = _scatter_geometry([x.shape, src.shape], params)
    out = x.copy()
    out[(slice(None),) * axis + (slice(start, start + step * src.shape[axis], step),)] = src
    return out


def _slice_scatter_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    x, src = ptrs
    axis, start, step = _scatter_geometry(ins, params)
    sst = _row_major(ins[1])
    sizes: list[tuple[str, int]] = [
        (f"s{j}_b", start),
        (f"s{j}_k", step),
        (f"s{j}_m", ins[1][axis]),
    ]
    c = f"c{j}_{axis}"
    lines = _coords(j, var, out, sizes)
    lines += [
        f"bool hit{j} = {c} >= s{j}_b && ({c} - s{j}_b) % s{j}_k == 0 && "
        f"({c} - s{j}_b) / s{j}_k < s{j}_m;",
        f"size_t o{j} = 0;",
    ]
    for a in range(len(out)):
        sizes.append((f"s{j}_y{a}", sst[a]))
        at = f"(({c} - s{j}_b) / s{j}_k)" if a == axis else f"c{j}_{a}"
        lines.append(f"if (hit{j}) o{j} += {at} * s{j}_y{a};")
    return [
        *lines,
        f"typedef decltype(+{x}[0]) T{j};",
        f"T{j} t{j} = hit{j} ? (T{j}){src}[o{j}] : (T{j}){x}[{var}];",
    ], sizes


SLICE_SCATTER = OpDef(
    "slice_scatter",
    FusionClass.OUT_ELEMENTWISE,
    2,
    reference=_slice_scatter,
    params=(("dim", 0.0), ("start", 0.0), ("step", 1.0)),
    element=_slice_scatter_element,
    shape=_scatter_shape,
    flops_per_element=0.0,
    dtype=any_dtype,
    widen=False,
    typed_pointers=True,
)

MAX_REPEAT_AXES = 6
_REPEAT_PARAMS = (("lead", 0.0), *((f"times{k}", 1.0) for k in range(MAX_REPEAT_AXES)))


def _repeats(shape: Shape, params: Mapping[str, float]) -> tuple[Shape, list[int]]:
    """The input's shape with ``lead`` leading axes of 1 added, and the repeats of each of
    its axes (``times{k}``: the k-th axis from the last)."""
    lead = params["lead"]
    if lead != int(lead) or lead < 0 or len(shape) + lead > MAX_REPEAT_AXES:
        raise _ShapeProblem(
            f"lead={lead!r} must be a whole number of new leading axes, at most "
            f"{MAX_REPEAT_AXES} axes in all (the input has {len(shape)})"
        )
    padded = (1,) * int(lead) + tuple(shape)
    times = []
    for k in range(MAX_REPEAT_AXES):
        t = params[f"times{k}"]
        if t != int(t) or t < 1 or (k >= len(padded) and t != 1):
            raise _ShapeProblem(
                f"times{k}={t!r} must be a whole number >= 1 (1 past the {len(padded)} axes)"
            )
        times.append(int(t))
    return padded, times[: len(padded)][::-1]


def _repeat_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    padded, times = _repeats(shapes[0], params)
    return tuple(s * t for s, t in zip(padded, times, strict=True))


def _repeat(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    padded, times = _repeats(xs[0].shape, params)
    return np.tile(xs[0].reshape(padded), times)


def _repeat_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    padded, _ = _repeats(ins[0], params)
    xst = _row_major(padded)
    sizes: list[tuple[str, int]] = []
    lines = [*_coords(j, var, out, sizes), f"size_t o{j} = 0;"]
    for a in range(len(out)):
        if padded[a] != 1:  # (a repeated axis of one element reads its only one)
            sizes += [(f"s{j}_m{a}", padded[a]), (f"s{j}_x{a}", xst[a])]
            lines.append(f"o{j} += (c{j}_{a} % s{j}_m{a}) * s{j}_x{a};")
    return [*lines, *typed_value(j, ptrs[0], "true", f"o{j}")], sizes


REPEAT = OpDef(
    "repeat",
    FusionClass.OUT_ELEMENTWISE,
    1,
    reference=_repeat,
    params=_REPEAT_PARAMS,
    element=_repeat_element,
    shape=_repeat_shape,
    flops_per_element=0.0,
    dtype=any_dtype,
    widen=False,
    typed_pointers=True,
)


# ----------------------------------------------------------------------------- sort, topk
# torch.sort / argsort / topk (the module docstring has their order): each output element
# is the element of one rank in its row along ``dim``, its value or its index (int64).
def _order(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """The stable order of ``x`` along ``axis`` (int64 indices, moved to the last axis):
    ascending or descending, NaN greatest, -0.0 equal to 0.0, ties lower index first."""
    x = np.moveaxis(x, axis, -1)
    if x.dtype.kind == "f" or x.dtype.name in HALF_DTYPES:
        v = x.astype(np.float32)  # (halves exactly)
        nan = np.isnan(v)
        v = np.where(nan, np.float32(0), v)
        # np.lexsort is stable; its last key is the primary one: NaN or not, then the value
        # (negated for descending: exact, and -0.0 still equals 0.0)
        keys = (-v, ~nan) if descending else (v, nan)
        return np.lexsort(keys, axis=-1).astype(np.int64)
    v = x.astype(np.int64)
    # ~v = -v - 1 reverses the order without overflowing at the lowest int64 (as -v would)
    return np.argsort(~v if descending else v, axis=-1, kind="stable").astype(np.int64)


def _sort_axis(shapes: Sequence[Shape], params: Mapping[str, float]) -> int:
    if not shapes[0]:
        raise _ShapeProblem("the input is 0-d; sort along an axis of an input with one")
    return _gather_axis(shapes, params)


def _sort_k(shapes: Sequence[Shape], params: Mapping[str, float]) -> int:
    """The elements each row keeps: ``k`` for topk (1 to the row's length), else all."""
    n = shapes[0][_sort_axis(shapes, params)]
    if "k" not in params:
        return n
    k = params["k"]
    if k != int(k) or not 1 <= k <= n:
        raise _ShapeProblem(
            f"k={k!r} must be a whole number from 1 to {n}, the length of dim "
            f"{int(params['dim'])} of the input {tuple(shapes[0])}"
        )
    return int(k)


def _sort_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    axis = _sort_axis(shapes, params)
    return (*shapes[0][:axis], _sort_k(shapes, params), *shapes[0][axis + 1 :])


def _descending(params: Mapping[str, float]) -> str:
    """The parameter naming the direction: sort's ``descending``, topk's ``largest``."""
    return "largest" if "largest" in params else "descending"


def _sorted(values: bool) -> Callable[..., np.ndarray]:
    def reference(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
        x = xs[0]
        axis = _sort_axis([x.shape], params)
        k = _sort_k([x.shape], params)
        order = _order(x, axis, params[_descending(params)] != 0)[..., :k]
        if values:
            order = np.take_along_axis(np.moveaxis(x, axis, -1), order, axis=-1)
        return np.ascontiguousarray(np.moveaxis(order, -1, axis))

    return reference


# The key of a value: an unsigned integer whose order is the values' (NaN greatest, -0.0
# as 0.0): a float's bits with the sign bit flipped, or all of them flipped when negative;
# an integer with its sign bit flipped. Descending order flips every bit of the key.
_KEY = (
    "T{j} v{j} = {x}[b{j} + q{j} * s{j}_in];",
    "float f{j} = (float)v{j};",
    "unsigned u{j} = (unsigned)__float_as_int(f{j} == 0.0f ? 0.0f : f{j});",
    "unsigned long long k{j} = (fl{j} ? (f{j} != f{j} ? 0xffffffffull : (u{j} >> 31) ? "
    "(unsigned long long)~u{j} : (unsigned long long)(u{j} | 0x80000000u)) : "
    "(((unsigned long long)(long long)v{j} ^ (1ull << (nb{j} - 1))) & mask{j})) ^ flip{j};",
)


def _sort_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    values: bool,
) -> tuple[list[str], list[tuple[str, int]]]:
    # The output element of rank ``want`` in its row of n: a radix select, one pass over
    # the row per 4-bit digit of the key from the top (a histogram of that digit among the
    # elements agreeing with the digits found so far; the sought key's digit is the bucket
    # holding rank ``left``), then one pass for the ``left``-th element holding that key in
    # index order (ties lower index first). The key's bits: 32 for float32, float16,
    # bfloat16 (widened exactly), int32 and bool; 64 for int64. Per thread, (bits / 4 + 1)
    # * n reads of the row (9 n, or 17 n for int64) and O(1) registers (16 counters).
    (x,) = ptrs
    axis = _sort_axis(ins, params)
    n, m, inner = ins[0][axis], out[axis], math.prod(out[axis + 1 :])
    key = [ln.format(j=j, x=x) for ln in _KEY]
    desc = "{" + _descending(params) + "}"
    lines = [
        f"typedef decltype(+{x}[0]) T{j};",
        f"const bool fl{j} = (T{j})0.5f != (T{j})0;  // a float: keys from its bits",
        f"const int nb{j} = fl{j} || sizeof(T{j}) < 8 ? 32 : 64;",
        f"const unsigned long long mask{j} = nb{j} == 64 ? ~0ull : 0xffffffffull;",
        f"const unsigned long long flip{j} = {desc} != 0 ? mask{j} : 0ull;",
        f"size_t want{j} = ({var} / s{j}_in) % s{j}_m;",
        f"size_t b{j} = ({var} / s{j}_in / s{j}_m) * s{j}_n * s{j}_in + {var} % s{j}_in;",
        f"unsigned long long pre{j} = 0;",
        f"size_t left{j} = want{j};",
        f"for (int sh{j} = nb{j} - 4; sh{j} >= 0; sh{j} -= 4) {{",
        # (the digits above this one; none above the first: a shift by 64 is undefined)
        f"    const unsigned long long hi{j} = sh{j} + 4 >= 64 ? 0ull : ~0ull << (sh{j} + 4);",
        f"    size_t cnt{j}[16] = {{0}};",
        f"    for (size_t q{j} = 0; q{j} < s{j}_n; ++q{j}) {{",
        *(f"        {ln}" for ln in key),
        f"        if (((k{j} ^ pre{j}) & hi{j}) == 0) ++cnt{j}[(k{j} >> sh{j}) & 15];",
        "    }",
        f"    unsigned long long dig{j} = 0;",
        f"    while (left{j} >= cnt{j}[dig{j}]) left{j} -= cnt{j}[dig{j}++];",
        f"    pre{j} |= dig{j} << sh{j};",
        "}",
        f"size_t at{j} = 0;",
        f"for (size_t q{j} = 0; q{j} < s{j}_n; ++q{j}) {{",
        *(f"    {ln}" for ln in key),
        f"    if (k{j} == pre{j} && left{j}-- == 0) {{",
        f"        at{j} = q{j};",
        "        break;",
        "    }",
        "}",
    ]
    if values:
        lines.append(f"T{j} t{j} = {x}[b{j} + at{j} * s{j}_in];")
    else:
        lines.append(f"long long t{j} = (long long)at{j};")
    return lines, [(f"s{j}_n", n), (f"s{j}_m", m), (f"s{j}_in", inner)]


def _sort_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # 9 passes over the row per output element (8 digits of a 32-bit key and the ties;
    # int64's 64-bit keys take 17): counted as key comparisons. The rule sees shapes only:
    # the row is the axis topk shortened, else (a sort) the longest axis, an upper bound
    # (as cumsum's rule).
    changed = [a for a, (i, o) in enumerate(zip(ins[0], out, strict=True)) if i != o]
    n = ins[0][changed[0]] if changed else max(ins[0])
    return 9.0 * n * math.prod(out), 4.0 * (math.prod(ins[0]) + math.prod(out))


def _sort_op(name: str, values: bool, params: tuple[tuple[str, float], ...]) -> OpDef:
    """The op giving a row's elements in order (``values``) or their indices (int64), the
    whole row (sort's ``params``) or its first ``k`` (topk's); any input dtype."""

    def element(*args: Any) -> tuple[list[str], list[tuple[str, int]]]:
        return _sort_element(*args, values=values)

    def dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
        moved = any_dtype(dtypes, params)  # (its check of the input's dtype)
        return moved if values else "int64"

    return OpDef(
        name,
        FusionClass.OUT_ELEMENTWISE,
        1,
        reference=_sorted(values),
        params=params,
        element=element,
        shape=_sort_shape,
        cost=_sort_cost,
        dtype=dtype,
        widen=False,
        typed_pointers=True,
    )


_SORT_PARAMS = (("dim", -1.0), ("descending", 0.0))
_TOPK_PARAMS = (("k", 1.0), ("dim", -1.0), ("largest", 1.0))
SORT_OPS: tuple[OpDef, ...] = (
    _sort_op("sort_values", True, _SORT_PARAMS),
    _sort_op("sort_indices", False, _SORT_PARAMS),
    _sort_op("topk_values", True, _TOPK_PARAMS),
    _sort_op("topk_indices", False, _TOPK_PARAMS),
)

DTYPE_OPS: tuple[OpDef, ...] = (
    *CASTS,
    EMBEDDING,
    GATHER,
    CUMSUM,
    CUMPROD,
    INDEX_SELECT,
    FLIP,
    REPEAT,
    SLICE_SCATTER,
    *SORT_OPS,
    *CUMSUM_TO,
    HISTC,
    INDEX_PUT,
    SCATTER_VALUE,
)

for _op in DTYPE_OPS:
    register(_op)
