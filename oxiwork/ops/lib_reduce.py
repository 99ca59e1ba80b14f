"""Matmul variants and reductions of real networks: mm, bmm, addmm, baddbmm, linear,
grouped_mm, ...

Every matmul variant here is one general batched GEMM, ``out[b, m, n] = beta * c[b, m, n] +
alpha * sum_k a[b, m, k] * b[b, k, n]``, whose operands are *strided*: each is read from
its input buffer at ``offset + b * batch + r * row + col * col`` (in elements), so a
transposed weight (``linear``), a broadcast bias (``addmm``'s ``c`` of shape ``(N,)``) or
the permuted attention heads torch's views describe are read in place, never copied. The
variants differ only in how they derive those strides from their input shapes
(:class:`Gemm`, one rule per op); :func:`strided_gemm` registers a variant whose strides
are fixed (what an importer emits for an operand that is a view of a buffer).

They are ``OUT_ELEMENTWISE`` heads (TVM's "out-elemwise-fusable"): each output element is
computed on its own from whole input buffers, so element-wise epilogues (bias, activation,
residual add, scale) fuse after them into one kernel. So is ``grouped_mm`` (x, w, offs;
``transposed``), the mixture-of-experts matmul (:data:`GROUPED_MM`): rows of ``x`` sorted
by group, group ``g`` (the rows below ``offs[g]``, from ``offs[g - 1]``) times ``w[g]``.

Example
-------
>>> import numpy as np
>>> from oxiwork import ops
>>> lin = ops.get("linear")
>>> x = np.ones((2, 3), np.float32); w = np.arange(12, dtype=np.float32).reshape(4, 3)
>>> lin.reference([x, w, np.zeros(4, np.float32)])
array([[ 3., 12., 21., 30.],
       [ 3., 12., 21., 30.]], dtype=float32)
>>> ops.infer_shape(ops.get("bmm"), [(2, 3, 5), (2, 5, 7)], {}, "kernel 'b'")
(2, 3, 7)

``grouped_mm``: rows 0 and 1-2 in groups 0 and 1 (offsets 1, 3), row 3 in none (0):

>>> w = np.stack([np.eye(2, dtype=np.float32), 2 * np.eye(2, dtype=np.float32)])
>>> x = np.arange(8, dtype=np.float32).reshape(4, 2)
>>> ops.get("grouped_mm").reference([x, w, np.array([1, 3], np.int32)])
array([[ 0.,  1.],
       [ 4.,  6.],
       [ 8., 10.],
       [ 0.,  0.]], dtype=float32)
>>> ops.get("grouped_mm").reference([x, w, np.array([3, 1], np.int32)])
Traceback (most recent call last):
...
ValueError: grouped_mm offsets decrease: offs[1] = 1 < offs[0] = 3; they are cumulative row counts, rows sorted by group

References
----------
J. J. Dongarra, J. Du Croz, S. Hammarling, I. S. Duff, "A set of level 3 basic linear
algebra subprograms", ACM TOMS 16(1), 1990 (GEMM: C <- alpha op(A) op(B) + beta C, with
leading dimensions describing strided operands); PyTorch documentation, ``torch.addmm``
and ``torch.baddbmm`` (``beta = 0`` ignores ``input``, NaN included).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from oxiwork.error import InvalidArgument
from oxiwork.ops.codegen import (
    _NEG_INF,  # -inf as the row kernels write it
    _row_index,  # a reduced element's index, from the terms
)
from oxiwork.ops.lib_dtype import (
    accumulate_dtype,
    wrapping_result,
    wrapping_start,
    wrapping_step,
)
from oxiwork.ops.table import (
    COMPUTE_DTYPES,
    FLOAT_COMPUTE,
    INT_DTYPES,
    DtypeProblem,
    FusionClass,
    OpDef,
    Shape,
    _as_rows,
    _layer_norm,
    _row_max,
    _row_reduce_shape,
    _ShapeProblem,
    _softmax,
    get,
    reduction_terms,
    register,
)

__all__ = [
    "GROUPED_MM",
    "Attention",
    "Gemm",
    "Strided",
    "axes_mask",
    "gemm_of",
    "strided_attention",
    "strided_gemm",
]

F32 = np.float32


@dataclass(frozen=True, slots=True)
class Strided:
    """Where a ``(batch, rows, cols)`` operand's elements lie in its buffer (in elements).

    Element ``[b, r, c]`` is at ``offset + b * batch + r * row + c * col``; a stride of 0
    broadcasts that axis.

    >>> Strided.dense(3, 5)
    Strided(offset=0, batch=0, row=5, col=1)
    """

    offset: int
    batch: int
    row: int
    col: int

    @staticmethod
    def dense(rows: int, cols: int, batched: bool = False) -> Strided:
        """Row-major ``(rows, cols)`` matrices, one after the other if ``batched``."""
        return Strided(0, rows * cols if batched else 0, cols, 1)

    def last(self, dims: tuple[int, int, int]) -> int:
        """The largest element index read for an operand of ``dims`` (batch, rows, cols)."""
        b, r, c = dims
        return self.offset + (b - 1) * self.batch + (r - 1) * self.row + (c - 1) * self.col


@dataclass(frozen=True, slots=True)
class Gemm:
    """One matmul call: sizes, each operand's :class:`Strided` layout, the output shape.

    ``c`` is ``None`` for ops without an added input (mm, bmm). ``inputs`` says which
    kernel input each operand is (a, b[, c]).
    """

    batch: int
    m: int
    n: int
    k: int
    a: Strided
    b: Strided
    c: Strided | None
    out: Shape
    inputs: tuple[int, ...]

    def check(self, in_shapes: Sequence[Shape]) -> Gemm:
        """``self`` if every operand lies inside its buffer, else a shape problem."""
        dims = {
            "a": (self.batch, self.m, self.k),
            "b": (self.batch, self.k, self.n),
            "c": (self.batch, self.m, self.n),
        }
        for name, lay, i in zip("abc", (self.a, self.b, self.c), self.inputs, strict=False):
            assert lay is not None
            size = math.prod(in_shapes[i])
            strides = (lay.batch, lay.row, lay.col)
            if lay.offset < 0 or min(strides) < 0 or lay.last(dims[name]) >= size:
                raise _ShapeProblem(
                    f"operand {name} ({dims[name]} at offset {lay.offset}, strides {strides}) "
                    f"reads past its buffer of shape {tuple(in_shapes[i])}"
                )
        return self


LayoutFn = Callable[[Sequence[Shape]], Gemm]


def _bias(shape: Shape, batch: int, m: int, n: int, batched: bool) -> Strided:
    """Strides reading ``c`` of ``shape`` broadcast to ``(batch, m, n)`` (numpy's rules:
    shapes aligned at the last axis, a size-1 axis read with stride 0)."""
    target = (batch, m, n) if batched else (m, n)
    try:
        ok = np.broadcast_shapes(tuple(shape), target) == target
    except ValueError:
        ok = False
    _need(ok, f"the added input of shape {tuple(shape)} does not broadcast to {target}")
    strides = [0] * len(target)
    step = 1
    for axis, size in zip(range(len(target) - 1, -1, -1), reversed(shape), strict=False):
        if size != 1:
            strides[axis] = step
        step *= size
    if not batched:
        strides = [0, *strides]
    return Strided(0, strides[0], strides[1], strides[2])


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise _ShapeProblem(message)


def _mm_layout(shapes: Sequence[Shape]) -> Gemm:
    # a's leading axes fold into M (as matmul's do): a reshape of a [..., K] buffer to
    # [M, K], what torch hands mm and addmm, is that buffer read whole
    a, b = shapes[-2:]
    _need(len(a) >= 2 and len(b) == 2, f"mm needs a of shape [M, K] and b [K, N], got {a} and {b}")
    _need(a[-1] == b[0], f"mm inner dimensions differ: a {a} and b {b}")
    m, k, n = math.prod(a[:-1]), a[-1], b[1]
    return Gemm(1, m, n, k, Strided.dense(m, k), Strided.dense(k, n), None, (*a[:-1], n), (0, 1))


def _bmm_layout(shapes: Sequence[Shape]) -> Gemm:
    a, b = shapes[-2:]
    _need(
        len(a) == 3 and len(b) == 3 and a[0] == b[0],
        f"bmm needs a of shape [B, M, K] and b [B, K, N], got {a} and {b}",
    )
    _need(a[2] == b[1], f"bmm inner dimensions differ: a {a} and b {b}")
    (bt, m, k), n = a, b[2]
    da, db = Strided.dense(m, k, True), Strided.dense(k, n, True)
    return Gemm(bt, m, n, k, da, db, None, (bt, m, n), (0, 1))


def _addmm_layout(shapes: Sequence[Shape]) -> Gemm:
    g = _mm_layout(shapes)
    c = _bias(shapes[0] if len(shapes[0]) <= 2 else (-1,), 1, g.m, g.n, batched=False)
    return Gemm(g.batch, g.m, g.n, g.k, g.a, g.b, c, g.out, (1, 2, 0))


def _baddbmm_layout(shapes: Sequence[Shape]) -> Gemm:
    g = _bmm_layout(shapes)
    c = _bias(shapes[0], g.batch, g.m, g.n, batched=True)
    return Gemm(g.batch, g.m, g.n, g.k, g.a, g.b, c, g.out, (1, 2, 0))


def _linear_layout(shapes: Sequence[Shape]) -> Gemm:
    x, w, bias = shapes
    _need(
        len(x) >= 1 and len(w) == 2 and x[-1] == w[1],
        f"linear needs x of shape [..., K] and a weight [N, K], got {x} and {w}",
    )
    n, k = w
    _need(math.prod(bias) == n, f"linear needs a bias of {n} elements, got shape {bias}")
    m = math.prod(x[:-1])
    # y = x @ w.T: b[k, n] = w[n, k], so b's rows step by 1 and its columns by K
    return Gemm(
        1, m, n, k, Strided.dense(m, k), Strided(0, 0, 1, k), Strided(0, 0, 0, 1),
        (*x[:-1], n), (0, 1, 2),
    )  # fmt: skip


def _take(x: np.ndarray, lay: Strided, dims: tuple[int, int, int]) -> np.ndarray:
    """The ``dims`` operand ``lay`` describes, as a read-only strided view of ``x``."""
    flat = np.ascontiguousarray(x, F32).reshape(-1)
    size = flat.itemsize
    view = as_strided(
        flat[lay.offset :],
        shape=dims,
        strides=(lay.batch * size, lay.row * size, lay.col * size),
        writeable=False,
    )
    return view


def _gemm_reference(layout: LayoutFn) -> Callable[..., np.ndarray]:
    def reference(xs: Sequence[np.ndarray], beta: float = 1.0, alpha: float = 1.0) -> np.ndarray:
        g = layout([x.shape for x in xs])
        a = _take(xs[g.inputs[0]], g.a, (g.batch, g.m, g.k))
        b = _take(xs[g.inputs[1]], g.b, (g.batch, g.k, g.n))
        out = np.matmul(a, b).astype(F32, copy=False)
        if g.c is not None:
            out = F32(alpha) * out
            if beta != 0:  # torch: beta = 0 ignores the added input, NaNs included
                out = F32(beta) * _take(xs[g.inputs[2]], g.c, (g.batch, g.m, g.n)) + out
        return out.reshape(g.out)

    return reference


def _gemm_element(
    layout: LayoutFn, scaled: bool
) -> Callable[..., tuple[list[str], list[tuple[str, int]]]]:
    def element(
        j: int,
        ptrs: Sequence[str],
        var: str,
        ins: Sequence[Shape],
        out: Shape,
        params: Mapping[str, float] | None = None,
    ) -> tuple[list[str], list[tuple[str, int]]]:
        # One output element per thread; the products are summed in k order, so a fused
        # and an unfused kernel agree bit for bit (compiled with --fmad=false).
        g = layout(ins)
        s = f"s{j}_"
        a, b = ptrs[g.inputs[0]], ptrs[g.inputs[1]]
        sizes = [(f"{s}mn", g.m * g.n), (f"{s}n", g.n), (f"{s}k", g.k)]
        for name, lay in (("a", g.a), ("b", g.b), ("c", g.c)):
            if lay is not None:
                sizes += [(f"{s}{name}{f}", getattr(lay, f)) for f in ("offset", "batch")]
                sizes += [(f"{s}{name}row", lay.row), (f"{s}{name}col", lay.col)]
        bi, mi, ni = f"b{j}", f"m{j}", f"n{j}"
        lines = [
            f"size_t {bi} = {var} / {s}mn;",
            f"size_t {mi} = ({var} % {s}mn) / {s}n;",
            f"size_t {ni} = {var} % {s}n;",
            # element offsets, not pointers: the operands are indexed only (typed_pointers),
            # so half-precision buffers are read through the code generator's ox_wide
            f"size_t pa{j} = {s}aoffset + {bi} * {s}abatch + {mi} * {s}arow;",
            f"size_t pb{j} = {s}boffset + {bi} * {s}bbatch + {ni} * {s}bcol;",
            f"float t{j} = 0.0f;",
            f"for (size_t q{j} = 0; q{j} < {s}k; ++q{j}) {{",
            f"    t{j} += {a}[pa{j} + q{j} * {s}acol] * {b}[pb{j} + q{j} * {s}brow];",
            "}",
        ]
        if g.c is not None:
            c = ptrs[g.inputs[2]]
            lines += [
                f"float c{j} = {c}[{s}coffset + {bi} * {s}cbatch + {mi} * {s}crow + "
                f"{ni} * {s}ccol];",
            ]
            if scaled:  # torch: beta = 0 ignores the added input (a NaN in it too)
                lines.append(
                    f"t{j} = ({{beta}} == 0.0f) ? {{alpha}} * t{j} : "
                    f"{{beta}} * c{j} + {{alpha}} * t{j};"
                )
            else:
                lines.append(f"t{j} = c{j} + t{j};")
        return lines, sizes

    return element


def _gemm_cost(layout: LayoutFn) -> Callable[[Sequence[Shape], Shape], tuple[float, float]]:
    def cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
        g = layout(ins)
        moved = sum(math.prod(s) for s in ins) + math.prod(out)
        return 2.0 * g.batch * g.m * g.n * g.k, 4.0 * moved

    return cost


# op name -> its layout rule (what gemm_of reads)
_LAYOUTS: dict[str, LayoutFn] = {}


def gemm_of(op: str, in_shapes: Sequence[Shape]) -> Gemm:
    """The :class:`Gemm` a matmul op of this module computes on buffers of ``in_shapes``.

    >>> gemm_of("linear", [(8, 4), (16, 4), (16,)]).b     # the weight read transposed
    Strided(offset=0, batch=0, row=1, col=4)
    """
    rule = _LAYOUTS.get(op)
    if rule is None:
        raise InvalidArgument(f"op {op!r} is not a matmul of oxiwork.ops.lib_reduce")
    try:
        return rule(in_shapes)
    except _ShapeProblem as e:
        raise InvalidArgument(f"op {op!r}: {e}") from None


def _gemm_op(name: str, layout: LayoutFn, arity: int, scaled: bool) -> OpDef:
    def checked(shapes: Sequence[Shape]) -> Gemm:
        return layout(shapes).check(shapes)

    _LAYOUTS[name] = checked

    return OpDef(
        name,
        FusionClass.OUT_ELEMENTWISE,
        arity,
        reference=_gemm_reference(checked),
        params=(("beta", 1.0), ("alpha", 1.0)) if scaled else (),
        element=_gemm_element(checked, scaled),
        shape=lambda shapes, params: checked(shapes).out,
        cost=_gemm_cost(checked),
        typed_pointers=True,
    )


_MATMULS: tuple[OpDef, ...] = (
    _gemm_op("mm", _mm_layout, 2, scaled=False),
    _gemm_op("bmm", _bmm_layout, 2, scaled=False),
    _gemm_op("addmm", _addmm_layout, 3, scaled=True),
    _gemm_op("baddbmm", _baddbmm_layout, 3, scaled=True),
    _gemm_op("linear", _linear_layout, 3, scaled=False),
)


def strided_gemm(
    in_shapes: Sequence[Shape],
    batch: int,
    m: int,
    n: int,
    k: int,
    a: Strided,
    b: Strided,
    c: Strided | None = None,
    *,
    out: Shape | None = None,
    inputs: tuple[int, ...] | None = None,
) -> OpDef:
    """The registered GEMM op reading operands laid out as given from buffers of ``in_shapes``.

    ``inputs`` says which kernel input holds a, b (and c); by default ``(0, 1)`` or, with
    ``c``, ``(1, 2, 0)`` (addmm's order). With ``c`` the op has ``beta``/``alpha``
    parameters. The op is named ``gemm_<12 hex digits>`` after its layout, so equal calls
    share one op; its shape rule accepts exactly ``in_shapes``.

    >>> op = strided_gemm([(4, 3)], 1, 3, 3, 4, Strided(0, 0, 1, 3), Strided.dense(4, 3),
    ...                   inputs=(0, 0))            # x.T @ x, both read from one buffer
    >>> import numpy as np
    >>> x = np.arange(12, dtype=np.float32).reshape(4, 3)
    >>> bool(np.array_equal(op.reference([x]), x.T @ x))
    True
    """
    shapes = tuple(tuple(int(d) for d in s) for s in in_shapes)
    if inputs is None:
        inputs = (0, 1) if c is None else (1, 2, 0)
    g = Gemm(
        batch, m, n, k, a, b, c, tuple(out or ((batch, m, n) if batch > 1 else (m, n))), inputs
    )
    if any(not 0 <= i < len(shapes) for i in inputs) or len(inputs) != (2 if c is None else 3):
        raise InvalidArgument(f"strided_gemm: inputs {inputs} do not name {len(shapes)} buffers")
    if math.prod(g.out) != batch * m * n:
        raise InvalidArgument(f"strided_gemm: out {g.out} does not hold {batch}x{m}x{n} elements")
    try:
        g.check(shapes)
    except _ShapeProblem as e:
        raise InvalidArgument(f"strided_gemm: {e}") from None
    name = "gemm_" + hashlib.sha1(repr((shapes, g)).encode()).hexdigest()[:12]
    op = get(name)
    if op is not None and name in _LAYOUTS:
        return op

    def layout(got: Sequence[Shape]) -> Gemm:
        if tuple(tuple(s) for s in got) != shapes:
            raise _ShapeProblem(
                f"this strided matmul reads buffers of shapes {shapes}, got {tuple(got)}; it "
                "was registered for one layout and computes nothing else"
            )
        return g

    return register(_gemm_op(name, layout, len(shapes), scaled=c is not None))


# ----------------------------------------------------------------------------- grouped matmul
# The mixture-of-experts matmul (transformers' grouped_mm_fallback, torch._grouped_mm of a
# 2-d input and a 3-d weight): rows sorted by expert, each group of rows times its expert's
# weight. The groups are data (the offsets buffer), so it is no single Gemm: each output
# element finds its group itself, then computes a dot product as the GEMM element does.
def _grouped_dims(
    shapes: Sequence[Shape], params: Mapping[str, float]
) -> tuple[int, int, int, int]:
    """(S, K, N, E) of a grouped_mm on buffers of ``shapes``, checked."""
    x, w, offs = shapes
    t = params.get("transposed", 0.0)
    _need(
        t in (0.0, 1.0),
        f"transposed={t!r} must be 0 (the weight is [E, K, N]) or 1 (it is [E, N, K], read "
        "transposed)",
    )
    wants = "[E, N, K] (transposed=1)" if t else "[E, K, N]"
    _need(
        len(x) == 2 and len(w) == 3 and len(offs) == 1,
        f"grouped_mm needs x of shape [S, K], a weight {wants} and offsets [E], got "
        f"{tuple(x)}, {tuple(w)} and {tuple(offs)}",
    )
    e, k, n = (w[0], w[2], w[1]) if t else tuple(w)
    _need(
        x[1] == k,
        f"grouped_mm inner dimensions differ: x {tuple(x)} has K = {x[1]}, the weight "
        f"{tuple(w)} read as {wants} K = {k}",
    )
    _need(
        offs[0] == e,
        f"grouped_mm needs one offset per group: the weight {tuple(w)} has {e} groups, the "
        f"offsets {offs[0]}",
    )
    return x[0], k, n, e


def _grouped_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    s, _, n, _ = _grouped_dims(shapes, params)
    return (s, n)


def _grouped_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    x, w, offs = dtypes
    if x not in FLOAT_COMPUTE:
        raise DtypeProblem(
            f"x (input 0) is {x}; grouped_mm multiplies float32, float16 or bfloat16 values: "
            "cast it first (op 'cast_float32')"
        )
    if w != x:
        raise DtypeProblem(
            f"x (input 0) is {x} but the weight (input 1) is {w}; grouped_mm takes one float "
            f"dtype, as torch._grouped_mm: cast the weight first (op 'cast_{x}')"
        )
    if offs not in INT_DTYPES:
        raise DtypeProblem(
            f"the offsets (input 2) are {offs}; grouped_mm takes int32 or int64 offsets: "
            "cast them first (op 'cast_int32')"
        )
    return x


def _grouped_mm(xs: Sequence[np.ndarray], transposed: float = 0.0) -> np.ndarray:
    x, w, offs = xs
    s, _, n, _ = _grouped_dims([x.shape, w.shape, offs.shape], {"transposed": transposed})
    ends = np.asarray(offs).astype(np.int64).tolist()
    # the kernel cannot raise, so these are refused here, as index_select's indices are
    for i, end in enumerate(ends):
        if not 0 <= end <= s:
            raise IndexError(
                f"grouped_mm offset offs[{i}] = {end} is out of range for the {s} rows of x; "
                f"offsets are cumulative row counts in [0, {s}]"
            )
        if i and end < ends[i - 1]:
            raise ValueError(
                f"grouped_mm offsets decrease: offs[{i}] = {end} < offs[{i - 1}] = "
                f"{ends[i - 1]}; they are cumulative row counts, rows sorted by group"
            )
    out = np.zeros((s, n), F32)  # rows past the last offset stay 0
    start = 0
    for g, end in enumerate(ends):
        if end > start:
            wg = w[g].T if transposed else w[g]
            out[start:end] = np.matmul(x[start:end], wg)
        start = end
    return out


def _grouped_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> tuple[list[str], list[tuple[str, int]]]:
    # One output element per thread: a linear scan over the offsets finds the row's group
    # (E is the experts' count, tens to a few hundred, and the threads of a row read the
    # same offsets), then the products are summed in k order as the GEMM element sums them.
    _, k, n, e = _grouped_dims(ins, params)
    x, w, offs = ptrs
    s = f"s{j}_"
    # the weight's element [g, k, n] lies at g * K * N + k * wk + n * wn, either layout
    wk, wn = (1, k) if params.get("transposed", 0.0) else (n, 1)
    sizes = [(f"{s}n", n), (f"{s}k", k), (f"{s}e", e), (f"{s}wg", k * n)]
    sizes += [(f"{s}wk", wk), (f"{s}wn", wn)]
    lines = [
        f"size_t gr{j} = {var} / {s}n;",
        f"size_t gc{j} = {var} % {s}n;",
        # the first group whose end lies past the row; none (ge == E): the row is 0
        f"size_t ge{j} = {s}e;",
        f"for (size_t q{j} = 0; q{j} < {s}e; ++q{j}) {{",
        f"    if ((long long)gr{j} < (long long){offs}[q{j}]) {{",
        f"        ge{j} = q{j};",
        "        break;",
        "    }",
        "}",
        f"float t{j} = 0.0f;",
        f"if (ge{j} < {s}e) {{",
        # element offsets, not pointers (typed_pointers: half operands via ox_wide)
        f"    size_t px{j} = gr{j} * {s}k;",
        f"    size_t pw{j} = ge{j} * {s}wg + gc{j} * {s}wn;",
        f"    for (size_t q{j} = 0; q{j} < {s}k; ++q{j}) {{",
        f"        t{j} += {x}[px{j} + q{j}] * {w}[pw{j} + q{j} * {s}wk];",
        "    }",
        "}",
    ]
    return lines, sizes


def _grouped_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # every row counted (rows past the last offset too: the bound a kernel of S x N
    # threads, each K products long, can reach); bytes as the GEMMs count them
    (s, k), n = ins[0], out[-1]
    moved = sum(math.prod(sh) for sh in ins) + math.prod(out)
    return 2.0 * s * k * n, 4.0 * moved


GROUPED_MM = OpDef(
    "grouped_mm",
    FusionClass.OUT_ELEMENTWISE,
    3,
    reference=_grouped_mm,
    params=(("transposed", 0.0),),
    element=_grouped_element,
    shape=_grouped_shape,
    cost=_grouped_cost,
    dtype=_grouped_dtype,
    typed_pointers=True,
)
"""``grouped_mm(x, w, offs)``: the mixture-of-experts grouped matmul, transformers'
``grouped_mm_fallback`` (and ``torch._grouped_mm(x, w, offs=offs)`` of a 2-d ``x``).

``x`` is ``(S, K)`` with its rows sorted by group, ``w`` ``(E, K, N)`` (or ``(E, N, K)``
with ``transposed=1``: a transposed weight view read in place, ``w[g].T`` used), both of
one float dtype, ``offs`` ``(E,)`` int32 or int64 cumulative row counts. Row ``r``
belongs to group ``g``, the first with ``r < offs[g]``, so group ``g`` holds the rows
``[offs[g - 1], offs[g])`` (``offs[-1]`` taken as 0) and is ``x[rows] @ w[g]``; rows at
or past ``offs[E - 1]`` are 0. The result ``(S, N)`` has ``x``'s dtype (float32 math,
halves widened and the result rounded once). The reference refuses offsets that
decrease, are negative or exceed ``S``; the generated C, which cannot raise, gives each
row the first group whose offset lies past it. Out-element-wise: element-wise epilogues
(an activation, the experts' gating product) fuse after it.

Its example is the module docstring's (doctested there; doctest does not collect a string
after an assignment).

References
----------
Hugging Face transformers, ``integrations/moe.py`` (``_grouped_mm_fallback``); PyTorch,
``torch._grouped_mm``; N. Shazeer et al., "Outrageously Large Neural Networks: The
Sparsely-Gated Mixture-of-Experts Layer", ICLR 2017.
"""


# ----------------------------------------------------------------------------- attention
@dataclass(frozen=True, slots=True)
class Attention:
    """One attention call, ``softmax(q @ kt * alpha / divisor + mask) @ v`` per batch, with
    each operand's :class:`Strided` layout (q: ``(batch, m, k)``, kt: ``(batch, k, n)``,
    v: ``(batch, n, d)``, mask: ``(batch, m, n)`` or ``None``), the output shape and, in
    ``perm``, where output element ``i`` finds its result: ``None`` when the output is the
    row-major ``(batch, m, d)`` result, else ``(offset, ((size, stride), ...))`` over the
    output's axes (element ``i`` of the output, ``i`` split row-major over the sizes, is
    result element ``offset + sum(i_k * stride_k)``: a permuted write such as the heads'
    ``permute(0, 2, 1, 3)`` before the output projection)."""

    batch: int
    m: int
    n: int
    k: int
    d: int
    q: Strided
    kt: Strided
    v: Strided
    mask: Strided | None
    out: Shape
    inputs: tuple[int, ...]
    perm: tuple[int, tuple[tuple[int, int], ...]] | None = None

    def result_index(self) -> np.ndarray:
        """For each output element (row-major), the flat index of its result element."""
        total = self.batch * self.m * self.d
        if self.perm is None:
            return np.arange(total)
        offset, axes = self.perm
        idx = np.full((1,) * len(axes), offset, dtype=np.int64)
        for k, (size, stride) in enumerate(axes):
            shape = [1] * len(axes)
            shape[k] = size
            idx = idx + (np.arange(size) * stride).reshape(shape)
        return idx.reshape(-1)


def _attention_reference(a: Attention) -> Callable[..., np.ndarray]:
    softmax = get("softmax")
    assert softmax is not None and softmax.reference is not None

    def reference(xs: Sequence[np.ndarray], alpha: float = 1.0, divisor: float = 1.0) -> np.ndarray:
        # the unfused chain's steps, each rounded to float32 as its kernel rounds it
        q = _take(xs[a.inputs[0]], a.q, (a.batch, a.m, a.k))
        kt = _take(xs[a.inputs[1]], a.kt, (a.batch, a.k, a.n))
        v = _take(xs[a.inputs[2]], a.v, (a.batch, a.n, a.d))
        s = np.matmul(q, kt).astype(F32, copy=False) * F32(alpha) / F32(divisor)
        if a.mask is not None:
            s = s + _take(xs[a.inputs[3]], a.mask, (a.batch, a.m, a.n))
        p = softmax.reference([s.astype(F32, copy=False)]).astype(F32, copy=False)
        r = np.matmul(p, v).astype(F32, copy=False).reshape(-1)
        return r[a.result_index()].reshape(a.out)

    return reference


def _attention_element(a: Attention) -> Callable[..., tuple[list[str], list[tuple[str, int]]]]:
    def element(
        j: int,
        ptrs: Sequence[str],
        var: str,
        ins: Sequence[Shape],
        out: Shape,
        params: Mapping[str, float] | None = None,
    ) -> tuple[list[str], list[tuple[str, int]]]:
        # One output element per thread: the scores of its row are computed three times
        # (row maximum, sum of exponentials, weighted sum of v), each as the unfused GEMM
        # computes them (products summed in k order), then the softmax as the row kernel
        # computes it: expf(s - max) / sum.
        s = f"s{j}_"
        sizes = [(f"{s}md", a.m * a.d), (f"{s}d", a.d), (f"{s}n", a.n), (f"{s}k", a.k)]
        lays = [("q", a.q), ("k", a.kt), ("v", a.v)] + ([("m", a.mask)] if a.mask else [])
        for name, lay in lays:
            sizes += [(f"{s}{name}{f}", getattr(lay, f)) for f in ("offset", "batch", "row", "col")]
        g = f"g{j}"
        lines = []
        if a.perm is None:
            lines.append(f"size_t {g} = {var};")
        else:
            offset, axes = a.perm
            sizes.append((f"{s}po", offset))
            terms, div = [], 1
            for k in range(len(axes) - 1, -1, -1):
                size, stride = axes[k]
                sizes += [(f"{s}pd{k}", div), (f"{s}pm{k}", size), (f"{s}ps{k}", stride)]
                terms.append(f"(({var} / {s}pd{k}) % {s}pm{k}) * {s}ps{k}")
                div *= size
            lines.append(f"size_t {g} = {s}po + {' + '.join(terms)};")
        q, kt, v = (ptrs[i] for i in a.inputs[:3])
        lines += [
            f"size_t b{j} = {g} / {s}md;",
            f"size_t m{j} = ({g} % {s}md) / {s}d;",
            f"size_t e{j} = {g} % {s}d;",
            # element offsets, not pointers (typed_pointers: half operands via ox_wide)
            f"size_t pq{j} = {s}qoffset + b{j} * {s}qbatch + m{j} * {s}qrow;",
            f"size_t pk{j} = {s}koffset + b{j} * {s}kbatch;",
            f"size_t pv{j} = {s}voffset + b{j} * {s}vbatch + e{j} * {s}vcol;",
        ]
        if a.mask is not None:
            mk = ptrs[a.inputs[3]]
            lines.append(f"size_t pm{j} = {s}moffset + b{j} * {s}mbatch + m{j} * {s}mrow;")
        mask = f" + {mk}[pm{j} + c{j} * {s}mcol]" if a.mask is not None else ""

        def score(body: list[str]) -> list[str]:
            return [
                f"for (size_t c{j} = 0; c{j} < {s}n; ++c{j}) {{",
                f"    float x{j} = 0.0f;",
                f"    for (size_t q{j} = 0; q{j} < {s}k; ++q{j}) {{",
                f"        x{j} += {q}[pq{j} + q{j} * {s}qcol] * "
                f"{kt}[pk{j} + q{j} * {s}krow + c{j} * {s}kcol];",
                "    }",
                f"    x{j} = ((x{j} * {{alpha}}) / {{divisor}}){mask};",
                *(f"    {ln}" for ln in body),
                "}",
            ]

        lines += [f"float mx{j} = {_NEG_INF};", *score([f"mx{j} = fmaxf(mx{j}, x{j});"])]
        lines += [f"float sm{j} = 0.0f;", *score([f"sm{j} += expf(x{j} - mx{j});"])]
        lines += [
            f"float t{j} = 0.0f;",
            *score([f"t{j} += (expf(x{j} - mx{j}) / sm{j}) * {v}[pv{j} + c{j} * {s}vrow];"]),
        ]
        return lines, sizes

    return element


def strided_attention(
    in_shapes: Sequence[Shape],
    batch: int,
    m: int,
    n: int,
    k: int,
    d: int,
    q: Strided,
    kt: Strided,
    v: Strided,
    mask: Strided | None = None,
    *,
    out: Shape | None = None,
    inputs: tuple[int, ...] | None = None,
    perm: tuple[int, tuple[tuple[int, int], ...]] | None = None,
) -> OpDef:
    """The registered attention op ``softmax(q @ kt * alpha / divisor + mask) @ v`` reading
    operands laid out as given from buffers of ``in_shapes`` (see :class:`Attention`).

    Eager attention (matmul, scale, mask add, softmax over the last axis, matmul) as one
    out-element-wise head: each output element computes its row of scores itself, so no
    score or probability buffer exists, and ``perm`` writes the result permuted (the
    heads' transpose before the output projection). ``inputs`` says which kernel input
    holds q, kt, v (and the mask); default ``(0, 1, 2[, 3])``. Parameters ``alpha`` and
    ``divisor`` (both 1.0 by default) scale the scores as ``scale`` and ``div_scalar`` do.
    The op is named ``attn_<12 hex digits>`` after its layout; equal calls share it.

    >>> import numpy as np
    >>> op = strided_attention([(2, 3), (3, 4), (4, 5)], 1, 2, 4, 3, 5,
    ...     Strided.dense(2, 3), Strided.dense(3, 4), Strided.dense(4, 5))
    >>> q, kt, v = (np.ones(s, np.float32) for s in [(2, 3), (3, 4), (4, 5)])
    >>> op.reference([q, kt, v], alpha=0.5).tolist()[0]
    [1.0, 1.0, 1.0, 1.0, 1.0]

    References
    ----------
    A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017 (scaled dot-product
    attention); T. Dao et al., "FlashAttention", NeurIPS 2022 (attention as one kernel that
    never writes the score matrix).
    """
    shapes = tuple(tuple(int(x) for x in s) for s in in_shapes)
    n_ops = 3 if mask is None else 4
    if inputs is None:
        inputs = tuple(range(n_ops))
    shape_out = tuple(out or ((batch, m, d) if batch > 1 else (m, d)))
    a = Attention(batch, m, n, k, d, q, kt, v, mask, shape_out, tuple(inputs), perm)
    if len(inputs) != n_ops or any(not 0 <= i < len(shapes) for i in inputs):
        raise InvalidArgument(
            f"strided_attention: inputs {inputs} do not name {n_ops} of {len(shapes)} buffers"
        )
    if math.prod(shape_out) != batch * m * d:
        raise InvalidArgument(
            f"strided_attention: out {shape_out} does not hold {batch}x{m}x{d} elements"
        )
    idx = a.result_index()
    if idx.size != batch * m * d or idx.min() < 0 or idx.max() >= batch * m * d:
        raise InvalidArgument(f"strided_attention: perm {perm} reads outside the result")
    dims = [(batch, m, k), (batch, k, n), (batch, n, d), (batch, m, n)]
    for name, lay, i, dm in zip(
        ("q", "kt", "v", "mask"), (q, kt, v, mask), inputs, dims, strict=False
    ):
        assert lay is not None
        size = math.prod(shapes[i])
        if lay.offset < 0 or min(lay.batch, lay.row, lay.col) < 0 or lay.last(dm) >= size:
            raise InvalidArgument(
                f"strided_attention: operand {name} ({dm} at {lay}) reads past its buffer of "
                f"shape {shapes[i]}"
            )
    name = "attn_" + hashlib.sha1(repr((shapes, a)).encode()).hexdigest()[:12]
    op = get(name)
    if op is not None:
        return op

    def shape(got: Sequence[Shape], params: Mapping[str, float]) -> Shape:
        if tuple(tuple(s) for s in got) != shapes:
            raise _ShapeProblem(
                f"this attention op reads buffers of shapes {shapes}, got {tuple(got)}; it was "
                "registered for one layout and computes nothing else"
            )
        return a.out

    def cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
        moved = sum(math.prod(s) for s in ins) + math.prod(out)
        # per output element: its scores three times (2k flops each) and the softmax
        return float(batch * m * d) * n * (6.0 * k + 6.0), 4.0 * moved

    return register(
        OpDef(
            name,
            FusionClass.OUT_ELEMENTWISE,
            len(shapes),
            reference=_attention_reference(a),
            params=(("alpha", 1.0), ("divisor", 1.0)),
            element=_attention_element(a),
            shape=shape,
            cost=cost,
            typed_pointers=True,
        )
    )


# ----------------------------------------------------------------------------- reductions
# Over the last axis, one row per block (the row recipes of oxiwork.ops.codegen); element-wise
# prologues (x * x before a mean) and epilogues (+ eps, rsqrt) fuse into them.
def _mean(xs: Sequence[np.ndarray]) -> np.ndarray:
    # the row's float32 sum, then one division by its length: what the kernel computes
    rows = _as_rows(xs[0])
    return (rows.sum(axis=-1, dtype=F32) / F32(rows.shape[-1])).astype(F32)


def _amax(xs: Sequence[np.ndarray]) -> np.ndarray:
    # torch.amax propagates NaN (the library's max skips it, as CUDA's fmaxf)
    rows = _as_rows(xs[0])
    return np.where(np.isnan(rows).any(axis=-1), F32(np.nan), _row_max(rows)).astype(F32)


def _affine_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, *per_col = shapes
    for k, s in enumerate(per_col, start=1):
        _need(
            math.prod(s) == x[-1],
            f"input {k} (shape {tuple(s)}) needs {x[-1]} elements, one per column of x {x}",
        )
    return x


def _layer_norm_affine(xs: Sequence[np.ndarray], eps: float) -> np.ndarray:
    """layer_norm_affine (x, weight, bias) and layer_norm_scale (x, weight)."""
    x, w, *bias = xs
    n = x.shape[-1]
    out = _layer_norm(x, eps) * w.reshape(n)
    return (out + bias[0].reshape(n) if bias else out).astype(F32)


def _rms_norm(xs: Sequence[np.ndarray], eps: float) -> np.ndarray:
    # x / sqrt(mean(x^2) + eps) * weight, one float32 operation at a time as the kernel
    x, w = xs
    ms = (x * x).sum(axis=-1, keepdims=True, dtype=F32) / F32(x.shape[-1])
    return ((x / np.sqrt(ms + F32(eps))) * w.reshape(x.shape[-1])).astype(F32)


def _row_cost(flops: float) -> Callable[[Sequence[Shape], Shape], tuple[float, float]]:
    def cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
        moved = sum(math.prod(s) for s in ins) + math.prod(out)
        return flops * math.prod(ins[0]), 4.0 * moved

    return cost


_REDUCTIONS: tuple[OpDef, ...] = (
    OpDef(
        "mean",
        FusionClass.REDUCTION,
        1,
        reference=_mean,
        row="mean",
        shape=_row_reduce_shape,
        cost=_row_cost(1.0),
    ),
    OpDef(
        "amax",
        FusionClass.REDUCTION,
        1,
        reference=_amax,
        row="amax",
        shape=_row_reduce_shape,
        cost=_row_cost(1.0),
    ),
    OpDef(
        "layer_norm_affine",
        FusionClass.REDUCTION,
        3,
        reference=lambda xs, eps: _layer_norm_affine(xs, eps),
        params=(("eps", 1e-5),),
        row="layer_norm",
        shape=_affine_shape,
        cost=_row_cost(10.0),
    ),
    OpDef(
        "layer_norm_scale",
        FusionClass.REDUCTION,
        2,
        reference=lambda xs, eps: _layer_norm_affine(xs, eps),
        params=(("eps", 1e-5),),
        row="layer_norm",
        shape=_affine_shape,
        cost=_row_cost(9.0),
    ),
    OpDef(
        "rms_norm",
        FusionClass.REDUCTION,
        2,
        reference=lambda xs, eps: _rms_norm(xs, eps),
        params=(("eps", 1e-6),),
        row="rms_norm",
        shape=_affine_shape,
        cost=_row_cost(6.0),
    ),
)
"""Reductions over the last axis: ``mean``, ``amax`` (NaN-propagating, as torch's),
``layer_norm_affine`` (x, weight, bias), ``layer_norm_scale`` (x, weight: a LayerNorm
without bias) and ``rms_norm`` (x, weight), each with ``eps``.

References: J. L. Ba, J. R. Kiros, G. E. Hinton, "Layer Normalization", 2016; B. Zhang,
R. Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019."""


# ----------------------------------------------------------------------------- group norm
# Normalisation over the trailing ``dims`` axes, each block of them split into ``groups``
# consecutive rows: GroupNorm (an (N, C, H, W) input, dims 3, a row per group of C/groups
# channels), InstanceNorm (a row per channel), LayerNorm over several axes (groups 1). The
# row kernel is layer norm's; the weight and bias are read per channel (or per element).
def _norm_block(shape: Shape, params: Mapping[str, float]) -> tuple[int, int]:
    """(dims, groups) of a group norm of input ``shape``, checked."""
    dims, groups = params["dims"], params["groups"]
    _need(
        dims == int(dims) and 1 <= dims <= len(shape),
        f"dims={dims!r} must count 1..{len(shape)} trailing axes of shape {tuple(shape)}",
    )
    block = math.prod(shape[len(shape) - int(dims) :])
    _need(
        groups == int(groups) and groups >= 1 and block % int(groups) == 0,
        f"groups={groups!r} must split the {block} elements of the trailing {int(dims)} "
        f"axes of shape {tuple(shape)} into equal rows",
    )
    return int(dims), int(groups)


def _norm_axes(shape: Shape, params: Mapping[str, float]) -> tuple[int, ...]:
    dims, _ = _norm_block(shape, params)
    return tuple(range(len(shape) - dims, len(shape)))


def _norm_groups(shape: Shape, params: Mapping[str, float]) -> int:
    return _norm_block(shape, params)[1]


def _group_norm_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x, *per = shapes
    dims, _ = _norm_block(x, params)
    block = math.prod(x[len(x) - dims :])
    for k, s in enumerate(per, start=1):
        n = math.prod(s)
        _need(
            n >= 1 and block % n == 0,
            f"input {k} (shape {tuple(s)}) has {n} elements, which must divide the {block} "
            f"normalised elements of x {tuple(x)} (one per channel, or one per element)",
        )
    return x


def _group_norm(xs: Sequence[np.ndarray], groups: float, dims: float, eps: float) -> np.ndarray:
    x, *per = xs
    _, g = _norm_block(x.shape, {"groups": groups, "dims": dims})
    d = int(dims)
    block = math.prod(x.shape[x.ndim - d :])
    rows = x.reshape(-1, block // g)
    y = _layer_norm(rows, eps).reshape(-1, block)
    if per:
        w, b = (np.repeat(v.reshape(-1), block // v.size) for v in per)
        y = y * w + b
    return y.reshape(x.shape).astype(F32)


_GROUP_NORMS: tuple[OpDef, ...] = tuple(
    OpDef(
        name,
        FusionClass.REDUCTION,
        arity,
        reference=lambda xs, groups, dims, eps: _group_norm(xs, groups, dims, eps),
        params=(("groups", 1.0), ("dims", 1.0), ("eps", 1e-5)),
        row="layer_norm",
        shape=_group_norm_shape,
        cost=_row_cost(10.0),
        axes=_norm_axes,
        groups=_norm_groups,
    )
    for name, arity in (("group_norm", 1), ("group_norm_affine", 3))
)
"""``group_norm`` (x) and ``group_norm_affine`` (x, weight, bias): layer norm of each of
``groups`` equal consecutive parts of x's trailing ``dims`` axes, then (affine) each
element scaled and shifted by the weight and bias entry of its channel: with ``k``
entries, element ``j`` of the ``block`` trailing elements takes entry ``j // (block // k)``.

References: Y. Wu, K. He, "Group Normalization", ECCV 2018; D. Ulyanov, A. Vedaldi,
V. Lempitsky, "Instance Normalization", 2016.

>>> import numpy as np
>>> x = np.arange(8, dtype=np.float32).reshape(1, 4, 2)  # (N, C, L)
>>> y = get("group_norm").reference([x], 2.0, 2.0, 0.0)  # two groups of two channels
>>> np.round(y.reshape(2, 4), 3).tolist()
[[-1.342, -0.447, 0.447, 1.342], [-1.342, -0.447, 0.447, 1.342]]
"""


# ----------------------------------------------------------------------------- any axes
# sum/mean/amax over any set of axes and softmax/log_softmax over any dim. The axes are
# parameters (as a convolution's strides are): ``axes`` is a bit mask over input 0's axes
# (bit d: axis d is reduced; 0: every axis, torch's ``dim=None``), ``keepdim`` 1 keeps
# them as size 1; ``dim`` may be negative. The generated C reads the input in place
# through index terms (oxiwork.ops.codegen's row kernels, :func:`reduction_terms`).
def axes_mask(dims: Sequence[int] | int | None, rank: int) -> float:
    """The ``axes`` parameter reducing ``dims`` (negative ones count from the end; ``None``
    or empty: every axis) of a rank-``rank`` input.

    >>> axes_mask([0, -1], 3), axes_mask(None, 2)
    (5.0, 0.0)
    >>> axes_mask([3], 3)
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: dim 3 is out of range for a rank-3 input
    """
    if dims is None:
        return 0.0
    mask = 0
    for d in [dims] if isinstance(dims, int) else dims:
        if not -rank <= d < rank:
            raise InvalidArgument(f"dim {d} is out of range for a rank-{rank} input")
        mask |= 1 << (d % rank)
    return float(mask)


def _mask_axes(shape: Shape, params: Mapping[str, float]) -> tuple[int, ...]:
    mask, rank = params["axes"], len(shape)
    _need(
        mask == int(mask) and 0 <= mask < 2**rank,
        f"axes={mask!r} is not a bit mask of the {rank} axes of shape {tuple(shape)} "
        "(bit d reduces axis d; oxiwork.ops.lib_reduce.axes_mask builds it)",
    )
    m = int(mask)
    return tuple(d for d in range(rank) if m == 0 or m >> d & 1)


def _dim_axis(shape: Shape, params: Mapping[str, float]) -> tuple[int, ...]:
    d, rank = params["dim"], len(shape)
    _need(
        d == int(d) and -rank <= d < rank,
        f"dim={d!r} is not an axis of shape {tuple(shape)}",
    )
    return (int(d) % rank,)


def _dims_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    x = shapes[0]
    axes = _mask_axes(x, params)
    if params["keepdim"]:
        return tuple(1 if d in axes else s for d, s in enumerate(x))
    return tuple(s for d, s in enumerate(x) if d not in axes) or (1,)


def _dim_shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    _dim_axis(shapes[0], params)
    return shapes[0]


def _rows_of(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``x`` as (kept elements, reduced elements): row r holds the values reducing to
    element r of the result, in the order the kernel's columns read them."""
    kept = [d for d in range(x.ndim) if d not in axes]
    cols = math.prod(x.shape[d] for d in axes)
    return np.transpose(x, kept + list(axes)).reshape(-1, cols)


def _dims_reference(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def reference(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        rows = _rows_of(xs[0], _mask_axes(xs[0].shape, params))
        return fn(rows).astype(F32).reshape(_dims_shape([xs[0].shape], params))

    return reference


def _log_softmax(x: np.ndarray) -> np.ndarray:
    # x - max - log(sum(exp(x - max))), as the kernel: one float32 operation at a time
    s = x - _row_max(x, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True, dtype=F32))


def _dim_reference(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def reference(xs: Sequence[np.ndarray], dim: float) -> np.ndarray:
        (d,) = _dim_axis(xs[0].shape, {"dim": dim})
        return np.moveaxis(fn(np.moveaxis(xs[0], d, -1)), -1, d).astype(F32)

    return reference


def _any_axes_op(name: str, row: str, fn: Callable[[np.ndarray], np.ndarray]) -> OpDef:
    return OpDef(
        name,
        FusionClass.REDUCTION,
        1,
        reference=_dims_reference(fn),
        params=(("axes", 0.0), ("keepdim", 0.0)),
        row=row,
        shape=_dims_shape,
        cost=_row_cost(1.0),
        axes=_mask_axes,
    )


def _nan_amax(rows: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(rows).any(axis=-1), F32(np.nan), _row_max(rows))


def _truth_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    """``any``/``all``: a value of any dtype kernels compute on is true if non-zero (NaN
    too); the result is bool."""
    if dtypes[0] not in COMPUTE_DTYPES:
        raise DtypeProblem(f"input 0 is {dtypes[0]}, which kernels do not compute on")
    return "bool"


def _truth_op(name: str, reduce: Callable[..., np.ndarray]) -> OpDef:
    """``any_dims``/``all_dims``: is any (every) element over ``axes`` non-zero, as
    ``torch.any``/``torch.all`` with ``dim``/``keepdim``; the C counts the non-zero (zero)
    elements in float, a count that is 0 exactly when none is."""

    def reference(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        rows = _rows_of(xs[0], _mask_axes(xs[0].shape, params))
        return reduce(rows != 0, axis=-1).reshape(_dims_shape([xs[0].shape], params))

    return OpDef(
        name,
        FusionClass.REDUCTION,
        1,
        reference=reference,
        params=(("axes", 0.0), ("keepdim", 0.0)),
        row=name.removesuffix("_dims"),
        shape=_dims_shape,
        cost=_row_cost(1.0),
        axes=_mask_axes,
        dtype=_truth_dtype,
        widen=False,
    )


def _spread(rows: np.ndarray, correction: float) -> np.ndarray:
    """Each row's variance with ``correction`` (Bessel's is 1), as the kernel computes it:
    the float32 mean, the float32 sum of squared deviations, over max(cols - correction, 0)
    (0 gives inf, or NaN for a row without spread, as in torch)."""
    n = rows.shape[-1]
    mean = rows.sum(axis=-1, keepdims=True, dtype=F32) / F32(n)
    d = rows - mean
    with np.errstate(divide="ignore", invalid="ignore"):
        return (d * d).sum(axis=-1, dtype=F32) / F32(max(n - correction, 0.0))


def _spread_op(name: str, root: bool) -> OpDef:
    """``var_dims``/``std_dims``: torch.var/torch.std over ``axes`` with ``correction``."""

    def reference(
        xs: Sequence[np.ndarray], axes: float, keepdim: float, correction: float
    ) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        var = _spread(_rows_of(xs[0], _mask_axes(xs[0].shape, params)), correction)
        shape = _dims_shape([xs[0].shape], params)
        return (np.sqrt(var) if root else var).astype(F32).reshape(shape)

    return OpDef(
        name,
        FusionClass.REDUCTION,
        1,
        reference=reference,
        params=(("axes", 0.0), ("keepdim", 0.0), ("correction", 1.0)),
        row=name.removesuffix("_dims"),
        shape=_dims_shape,
        cost=_row_cost(4.0),
        axes=_mask_axes,
    )


def _arg_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] not in FLOAT_COMPUTE:
        raise DtypeProblem(
            f"input 0 is {dtypes[0]}; argmax/argmin compare float32, float16 or bfloat16 values"
        )
    return "int64"


def _counted_shape(
    what: str, values: str
) -> Callable[[Sequence[Shape], Mapping[str, float]], Shape]:
    """The shape rule of a reduction whose int64 result the kernel counts in float (an
    index, a count): ``_dims_shape``, refusing rows of 2**24 elements or more."""

    def shape(shapes: Sequence[Shape], params: Mapping[str, float]) -> Shape:
        cols = math.prod(shapes[0][d] for d in _mask_axes(shapes[0], params))
        _need(
            cols < 2**24,
            f"{what} over {cols} elements: {values} from 2**24 on are not exact in the "
            "kernel's float arithmetic",
        )
        return _dims_shape(shapes, params)

    return shape


def _arg_op(name: str, sign: float) -> OpDef:
    """``argmax_dims``/``argmin_dims``: the index (int64) of the first extreme over
    ``axes`` (one axis, or every one: the flat index), a NaN counting as the extreme."""

    def reference(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        rows = sign * _rows_of(xs[0].astype(F32), _mask_axes(xs[0].shape, params))
        nan = np.isnan(rows)
        at = np.where(
            nan.any(axis=-1), nan.argmax(axis=-1), np.argmax(np.where(nan, 0, rows), axis=-1)
        )
        return at.astype(np.int64).reshape(_dims_shape([xs[0].shape], params))

    return OpDef(
        name,
        FusionClass.REDUCTION,
        1,
        reference=reference,
        params=(("axes", 0.0), ("keepdim", 0.0)),
        row=name.removesuffix("_dims"),
        shape=_counted_shape("argmax/argmin", "indices"),
        cost=_row_cost(2.0),
        axes=_mask_axes,
        dtype=_arg_dtype,
        widen=False,
    )


def _count_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] not in COMPUTE_DTYPES:
        raise DtypeProblem(f"input 0 is {dtypes[0]}, which kernels do not compute on")
    return "int64"


def _count(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
    params = {"axes": axes, "keepdim": keepdim}
    rows = _rows_of(xs[0], _mask_axes(xs[0].shape, params))
    return (rows != 0).sum(axis=-1, dtype=np.int64).reshape(_dims_shape([xs[0].shape], params))


# ----------------------------------------------------------------------------- element loops
# prod_dims (torch.prod) and sum_int_dims (sums of bool and integer tensors) over ``axes``:
# one thread per output element combines its reduced elements in order, out-element-wise
# as cumsum. A float product then rounds as the reference's in-order product does, and
# bool and integers combine exactly in int64, wrapping around as torch's int64 does, which
# the row kernels' float arithmetic (ox_block_reduce, shared by every block reduction)
# cannot give. The price: one thread walks a whole row (x.prod() is one thread's loop).
def _sum_int_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    if dtypes[0] not in ("bool", "int64", "int32"):
        raise DtypeProblem(
            f"input 0 is {dtypes[0]}; sum_int_dims sums bool, int32 and int64 exactly in "
            "int64 (float sums: sum_dims)"
        )
    return "int64"


def _element_loop(
    name: str,
    reference: Callable[..., np.ndarray],
    body: Callable[[int, str, str, str], list[str]],
    dtype: Callable[[Sequence[str], Mapping[str, float]], str],
) -> OpDef:
    """An out-element-wise reduction over ``axes`` (``keepdim``): output element ``var`` is
    row ``var`` of the reduction's (row, col) terms (rows are the result's elements in
    row-major order) and walks its reduced elements in order. ``body(j, x, at, n)`` gives the
    C lines defining ``t{j}`` from input pointer ``x``, the index ``at`` of column ``q{j}``
    and the column count argument ``n``."""

    def element(
        j: int,
        ptrs: Sequence[str],
        var: str,
        ins: Sequence[Shape],
        out: Shape,
        params: Mapping[str, float],
    ) -> tuple[list[str], list[tuple[str, int]]]:
        (x,) = ptrs
        kept, reduced = reduction_terms(ins[0], _mask_axes(ins[0], params))
        rows = math.prod(m for _, m, _ in kept)
        cols = math.prod(m for _, m, _ in reduced)
        n = f"s{j}_n"
        at, sizes = _row_index(kept, reduced, rows, cols, (var, f"q{j}", n, f"s{j}_"))
        return body(j, x, at, n), [(n, cols), *sizes]

    return OpDef(
        name,
        FusionClass.OUT_ELEMENTWISE,
        1,
        reference=reference,
        params=(("axes", 0.0), ("keepdim", 0.0)),
        element=element,
        shape=_dims_shape,
        cost=_row_cost(1.0),
        dtype=dtype,
        typed_pointers=True,
    )


def _loop_op(name: str, op: str, init: int, ufunc: np.ufunc) -> OpDef:
    """An element-loop reduction over ``axes`` (``keepdim``): ``acc = acc op x`` from
    ``init`` over the reduced elements in row-major order (``ufunc``: np.multiply, np.add)."""

    def reference(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        rows = _rows_of(xs[0], _mask_axes(xs[0].shape, params))
        if rows.dtype.kind in "biu":  # exact modulo 2**64: any order gives the same bits
            acc = ufunc.reduce(rows, axis=-1, dtype=np.int64)
        else:  # the last of the in-order partial results: the kernel's roundings
            acc = ufunc.accumulate(rows, axis=-1, dtype=F32)[:, -1]
        return acc.reshape(_dims_shape([xs[0].shape], params))

    def body(j: int, x: str, at: str, n: str) -> list[str]:
        return [
            *wrapping_start(j, x, f"a{j}", init),
            f"for (size_t q{j} = 0; q{j} < {n}; ++q{j}) {{",
            f"    {wrapping_step(j, x, f'a{j}', at, op)}",
            "}",
            *wrapping_result(j, x, f"a{j}"),
        ]

    return _element_loop(name, reference, body, accumulate_dtype if op == "*" else _sum_int_dtype)


def _int_extreme_dtype(index: bool) -> Callable[[Sequence[str], Mapping[str, float]], str]:
    """The dtype rule of the integer extrema: int32 or int64 in; the int64 index out, or the
    extreme in the input's dtype."""
    which = "argmax_int/argmin_int" if index else "amax_int_dims/amin_int_dims"
    floats = "argmax_dims, argmin_dims" if index else "amax_dims, amin_dims"

    def rule(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
        if dtypes[0] not in INT_DTYPES:
            raise DtypeProblem(
                f"input 0 is {dtypes[0]}; {which} compare int32 and int64 values (floats: {floats})"
            )
        return "int64" if index else dtypes[0]

    return rule


def _int_extreme_op(name: str, cmp: str, index: bool) -> OpDef:
    """An element-loop extreme of integers over ``axes`` (``keepdim``), compared exactly as
    ``long long`` (the block reductions compare floats, which cannot tell int64s 2**24
    apart): with ``index`` the int64 index of the first extreme over one axis or every one
    (the flat index: argmax_int_dims), else the extreme itself in the input's dtype
    (amax_int_dims: torch.max(lengths) of int64 lengths). ``cmp``: ``>`` (max) or ``<``."""
    if index:
        pick: Callable[..., np.ndarray] = np.argmax if cmp == ">" else np.argmin
    else:
        pick = np.max if cmp == ">" else np.min

    def reference(xs: Sequence[np.ndarray], axes: float, keepdim: float) -> np.ndarray:
        params = {"axes": axes, "keepdim": keepdim}
        rows = _rows_of(xs[0], _mask_axes(xs[0].shape, params))
        found = pick(rows, axis=-1)  # (arg: the first extreme, as the strict comparison)
        if index:
            found = found.astype(np.int64)
        return found.reshape(_dims_shape([xs[0].shape], params))

    def body(j: int, x: str, at: str, n: str) -> list[str]:
        # a strict comparison keeps the first extreme; t is its index or its value
        return [
            f"long long t{j} = 0;",
            f"long long b{j} = 0;",
            f"for (size_t q{j} = 0; q{j} < {n}; ++q{j}) {{",
            f"    long long v{j} = (long long){x}[{at}];",
            f"    if (q{j} == 0 || v{j} {cmp} b{j}) {{",
            f"        b{j} = v{j};",
            f"        t{j} = {f'(long long)q{j}' if index else f'v{j}'};",
            "    }",
            "}",
        ]

    return _element_loop(name, reference, body, _int_extreme_dtype(index))


_LOOPS: tuple[OpDef, ...] = (
    _loop_op("prod_dims", "*", 1, np.multiply),
    _loop_op("sum_int_dims", "+", 0, np.add),
    _int_extreme_op("argmax_int_dims", ">", index=True),
    _int_extreme_op("argmin_int_dims", "<", index=True),
    _int_extreme_op("amax_int_dims", ">", index=False),
    _int_extreme_op("amin_int_dims", "<", index=False),
)
"""``prod_dims`` (torch.prod: float dtypes in float32 math, in order, rounded once to their
dtype; bool and integers in int64) and ``sum_int_dims`` (bool and integers only, int64)
over ``axes`` with ``keepdim``, as ``sum_dims``; ``argmax_int_dims``, ``argmin_int_dims``
(int32 and int64: the int64 index of the first extreme over one axis or every one, as
torch.argmax of an integer tensor: CLIP's text pooler finds its end token so);
``amax_int_dims``, ``amin_int_dims`` (int32 and int64, in their dtype: torch.max and
torch.amax of an integer tensor, exact where the float block reductions are not).

>>> import numpy as np
>>> x = np.array([[2**40, 2**30], [3, -4]])
>>> get("prod_dims").reference([x], axes=axes_mask([1], 2), keepdim=0.0).tolist()  # 2**70 wraps
[0, -12]
>>> get("sum_int_dims").reference([x > 0], axes=0.0, keepdim=0.0).tolist()
[3]
>>> get("amax_int_dims").reference([x + 1], axes=0.0, keepdim=0.0).tolist()  # 2**40 + 1: exact
[1099511627777]
"""


_ANY_AXES: tuple[OpDef, ...] = (
    # torch.count_nonzero, and the sum of a bool tensor (int64, NaN counting as non-zero)
    OpDef(
        "count_dims",
        FusionClass.REDUCTION,
        1,
        reference=_count,
        params=(("axes", 0.0), ("keepdim", 0.0)),
        row="count",
        shape=_counted_shape("a count", "counts"),
        cost=_row_cost(1.0),
        axes=_mask_axes,
        dtype=_count_dtype,
        widen=False,
    ),
    _arg_op("argmax_dims", 1.0),
    _arg_op("argmin_dims", -1.0),
    _spread_op("var_dims", False),
    _spread_op("std_dims", True),
    # torch.linalg.vector_norm with ord 2 and 1 (F.normalize divides by the first)
    _any_axes_op(
        "norm2_dims", "norm2", lambda rows: np.sqrt((rows * rows).sum(axis=-1, dtype=F32))
    ),
    _any_axes_op("norm1_dims", "norm1", lambda rows: np.abs(rows).sum(axis=-1, dtype=F32)),
    _any_axes_op("sum_dims", "sum", lambda rows: rows.sum(axis=-1, dtype=F32)),
    _truth_op("any_dims", np.any),
    _truth_op("all_dims", np.all),
    _any_axes_op(
        "mean_dims", "mean", lambda rows: rows.sum(axis=-1, dtype=F32) / F32(rows.shape[-1])
    ),
    _any_axes_op("amax_dims", "amax", _nan_amax),
    _any_axes_op("amin_dims", "amin", lambda rows: -_nan_amax(-rows)),
    OpDef(
        "softmax_dim",
        FusionClass.REDUCTION,
        1,
        reference=_dim_reference(_softmax),
        params=(("dim", -1.0),),
        row="softmax",
        shape=_dim_shape,
        flops_per_element=8.0,
        axes=_dim_axis,
    ),
    OpDef(
        "log_softmax_dim",
        FusionClass.REDUCTION,
        1,
        reference=_dim_reference(_log_softmax),
        params=(("dim", -1.0),),
        row="log_softmax",
        shape=_dim_shape,
        flops_per_element=8.0,
        axes=_dim_axis,
    ),
)
"""``sum_dims``, ``any_dims``, ``all_dims``, ``mean_dims``, ``amax_dims``, ``amin_dims``,
``norm2_dims`` (the Euclidean norm), ``norm1_dims`` (the sum of magnitudes) (``axes``,
``keepdim``), ``count_dims`` (int64: the non-zero elements), ``argmax_dims``,
``argmin_dims`` (int64), ``var_dims``, ``std_dims`` (also ``correction``) and ``softmax_dim``,
``log_softmax_dim`` (``dim``): the reductions above over any axes.

>>> import numpy as np
>>> from oxiwork import ops
>>> x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
>>> ops.get("sum_dims").reference([x], axes=axes_mask([0, 2], 3), keepdim=1.0).tolist()
[[[60.0], [92.0], [124.0]]]
>>> ops.get("softmax_dim").reference([x], dim=0.0)[:, 0, 0].round(4).tolist()
[0.0, 1.0]

References: PyTorch documentation, ``torch.sum``, ``torch.amax``, ``torch.softmax``,
``torch.log_softmax`` (``dim``, ``keepdim``)."""

for _op in (*_MATMULS, GROUPED_MM, *_REDUCTIONS, *_GROUP_NORMS, *_ANY_AXES, *_LOOPS):
    register(_op)

REDUCTIONS: frozenset[str] = frozenset(
    op.name for op in (*_REDUCTIONS, *_GROUP_NORMS, *_ANY_AXES, *_LOOPS)
)
#: The reductions over any axes (their ``axes``/``dim`` parameters are axis masks and
#: indices, not free numbers; tests/ops/test_reduce_axes.py draws valid ones), the
#: element-loop ones (prod_dims, sum_int_dims: out-element-wise) included.
ANY_AXES: frozenset[str] = frozenset(op.name for op in (*_ANY_AXES, *_LOOPS))
#: The group norms (their ``groups``/``dims`` are structural; tests/ops/test_group_norm.py).
GROUP_NORMS: frozenset[str] = frozenset(op.name for op in _GROUP_NORMS)

MATMULS: frozenset[str] = frozenset(op.name for op in _MATMULS)
"""The matmul variants this module registers (strided ones, registered later, aside), each
one :class:`Gemm` (:func:`gemm_of`); :data:`GROUPED_MM`, whose groups are data, is not."""
