"""Convolution, transposed convolution, pooling, nearest and bilinear upsampling, constant
padding and concatenation: the ops CNNs are made of.

Every op here is ``OUT_ELEMENTWISE`` (TVM's "out-elemwise-fusable" class, like matmul):
each output element is computed on its own from whole input buffers, by C statements that
an ``element=`` generator writes for one output index. A kernel therefore starts with the
op and may continue with any element-wise epilogue on the output's index space: a
convolution followed by inference batch norm, an activation and a residual add is one
kernel (:mod:`oxiwork.optimizer.fusion`), as in cuDNN's fused "conv-bias-activation" or
Inductor's conv epilogues.

Layouts are NCHW (PyTorch's default): ``x`` is ``(N, C, H, W)``, a convolution's weight
``(K, C / groups, R, S)``, its output ``(N, K, P, Q)`` with
``P = (H + pad_top + pad_bottom - dilation_h (R - 1) - 1) // stride_h + 1`` (and ``Q``
likewise). Groups are not a parameter: ``groups = C / weight.shape[1]`` follows from the
shapes (depthwise: ``groups = C``). Padding may differ on each side, so a zero
``constant_pad_nd`` before a convolution (MobileNet's TensorFlow-style "same" padding)
folds into it. ``conv3d`` (``conv3d_bias``) is the same convolution over NCDHW: ``x`` is
``(N, C, D, H, W)``, its weight ``(K, C / groups, T, R, S)``, its output ``(N, K, O, P, Q)``,
with a depth stride, dilation and padding (``pad_front``, ``pad_back``) too; one geometry,
reference and C generator serve both, the 3-d C nesting a loop over the depth taps around
conv2d's. ``conv1d`` (``conv1d_bias``) is the 1-d convolution of an ``(N, C, L)`` input
with a ``(K, C / groups, S)`` weight: conv2d over a height of one (those shapes lie in memory
as ``(N, C, 1, L)`` and ``(K, C / groups, 1, S)`` do), with parameters ``stride``,
``pad_left``, ``pad_right`` and ``dilation``. ``upsample_nearest2d`` repeats each element
``factor_h x factor_w`` times (whole factors; ``upsample_nearest3d``: ``factor_d x factor_h x
factor_w``); ``upsample_bilinear2d`` and ``upsample_trilinear3d`` resize to any size as
torch's CPU kernel does (float32 source indices and weights from a ``ratio`` parameter per
axis, the axes' interpolations nested as torch nests them, so the generated C equals the
reference bit for bit and both are within a few float32 roundings per axis of torch's,
whose vectorised kernel rounds in its own order); ``conv_transpose2d`` (``_bias``) is
ConvTranspose2d, its weight ``(C, K / groups, R, S)`` and ``groups`` a parameter
(``conv_transpose1d``: the same over a height of one); ``conv_transpose3d`` (``_bias``) is
ConvTranspose3d over NCDHW, its weight ``(C, K / groups, T, R, S)``, with ``stride_d``, ``pad_d``, ``dilation_d`` and ``out_pad_d`` too: one
geometry, reference and C generator serve both, the 3-d C nesting a loop over the depth
taps around the 2-d one's.
``max_pool2d``, ``avg_pool2d``, ``adaptive_avg_pool2d`` and ``adaptive_max_pool2d`` have
3-d (NCDHW) twins ``max_pool3d``... with ``kernel_d``, ``stride_d``, ``pad_d``,
``dilation_d`` (``out_d``) parameters, from the same geometry, reference and C generator;
``avg_pool3d`` refuses an input smaller than its window, as torch's does. Integer
hyper-parameters are op parameters (floats holding integers, as every op parameter is a
float); shape rules refuse fractional, negative or zero strides.

References compute in float64 and round once to float32, so they are within one rounding
of the exact result; the generated kernels sum in float32 in a fixed order (channels, then
kernel depths, rows, then columns), within the recursive-summation bound
``|error| <= (n - 1) u sum |x_i w_i|`` of the exact value (Higham, below), ``n = C/groups R
S`` terms (``C/groups T R S`` in 3-d; a transposed convolution's output element sums at most
as many) and ``u = 2**-24``. PyTorch's own kernels sum in
float32 in yet another order, so references and torch agree within that bound too (the
tests check it).

Example
-------
>>> import numpy as np
>>> from oxiwork import ops
>>> conv = ops.get("conv2d")
>>> conv.fusion_class.name
'OUT_ELEMENTWISE'
>>> ops.infer_shape(conv, [(1, 8, 9, 9), (8, 1, 3, 3)], {**conv.defaults, "stride_h": 2,
...     "stride_w": 2, "pad_top": 1, "pad_bottom": 1, "pad_left": 1, "pad_right": 1}, "dw")
(1, 8, 5, 5)
>>> x = np.ones((1, 1, 3, 3), np.float32)
>>> conv.reference([x, np.ones((1, 1, 2, 2), np.float32)], **conv.defaults)[0, 0]
array([[4., 4.],
       [4., 4.]], dtype=float32)

References
----------
T. Chen et al., "TVM: An Automated End-to-End Optimizing Compiler for Deep Learning",
OSDI 2018, section 4.1 (out-element-wise fusion). K. Chellapilla, S. Puri, P. Simard,
"High Performance Convolutional Neural Networks for Document Processing", IWFHR 2006
(convolution as a sum of shifted matrix products, as the references compute it).
V. Dumoulin, F. Visin, "A guide to convolution arithmetic for deep learning", 2016
(output sizes with padding, stride and dilation). N. J. Higham, "Accuracy and Stability of
Numerical Algorithms", 2nd ed., SIAM 2002, section 4.2 (summation error). PyTorch,
``aten/src/ATen/native/AdaptiveAveragePooling.cpp``, ``AveragePool2d.cpp``,
``cpu/AvgPoolKernel.cpp`` and ``Pool.h`` (adaptive window bounds, average-pool divisors,
pool3d_shape_check).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from oxiwork.error import InvalidArgument
from oxiwork.ops import cnames
from oxiwork.ops.table import (
    FLOAT_COMPUTE,
    FusionClass,
    OpDef,
    Shape,
    _ShapeProblem,
    any_dtype,
    float_dtype,
    get,
    register,
)

__all__ = ["CONV_OPS", "cat_op"]

F32 = np.float32
F64 = np.float64
Lines = tuple[list[str], list[tuple[str, int]]]


# ----------------------------------------------------------------------------- parameters
def _int(params: Mapping[str, float], name: str, low: int) -> int:
    """Parameter ``name`` as an int >= ``low``; a fractional or smaller one is refused."""
    v = params[name]
    if not float(v).is_integer() or v < low:
        raise _ShapeProblem(f"parameter {name}={v!r} must be an integer >= {low}")
    return int(v)


class _Axis(NamedTuple):
    """One spatial axis of a window op (convolution, pooling), by the names its sizes take
    in the geometry dicts and the generated C: the input extent, the window extent, the
    output extent; a convolution's padding before and after (pools pad both sides by one
    amount, ``"p" + name``; strides are ``"s" + name``, dilations ``"d" + name``); the C
    variables of the window tap, the input coordinate and the output coordinate; and a
    convolution's padding parameters."""

    name: str
    size: str
    taps: str
    out: str
    lo: str
    hi: str
    tap: str
    coord: str
    index: str
    pads: tuple[str, str]


# Depth, height and width of NCDHW; the 2-d ops use the last two (the names the 2-d code
# always had: a 3-d op adds the depth's without changing theirs).
_DEPTH = _Axis("d", "D", "T", "O", "pf", "pk", "t", "d", "o", ("pad_front", "pad_back"))
_HEIGHT = _Axis("h", "H", "R", "P", "pt", "pb", "r", "h", "p", ("pad_top", "pad_bottom"))
_WIDTH = _Axis("w", "W", "S", "Q", "pl", "pr", "s", "c2", "q", ("pad_left", "pad_right"))


def _axes(dims: int) -> tuple[_Axis, ...]:
    """The last ``dims`` of depth, height and width."""
    return (_DEPTH, _HEIGHT, _WIDTH)[3 - dims :]


def _spatial(ins: Sequence[Shape], what: str, dims: int = 2) -> Shape:
    """Input 0's shape, checked to be ``(N, C)`` and ``dims`` spatial axes."""
    x = ins[0]
    if len(x) != dims + 2:
        names = "".join(a.size for a in _axes(dims))
        raise _ShapeProblem(
            f"{what} needs an NC{names} input of {dims + 2} dimensions, got shape {x}; give "
            f"the buffer shape=(N, C, {', '.join(names)})"
        )
    return x


def _out_size(size: int, lo: int, hi: int, k: int, stride: int, dil: int, ceil: bool) -> int:
    """Output length of a window of ``k`` taps (dilation ``dil``) over ``size`` padded by
    ``lo`` and ``hi`` (Dumoulin & Visin, relationship 15); with ``ceil``, PyTorch's rule: a
    last window must start inside the input or its left padding. A window longer than the
    padded input still gives one output in ceil mode (EfficientNet's pooler: a 2560-wide
    window over 19 positions), so the span is divided rounding down, as torch's ``div_rtn``,
    before anything is clipped; 0 when no window fits."""
    span = size + lo + hi - dil * (k - 1) - 1
    out = (span + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + lo:
        out -= 1
    return max(out, 0)


# ----------------------------------------------------------------------------- C helpers
def _decompose(j: int, var: str, dims: Sequence[tuple[str, str]]) -> list[str]:
    """C lines splitting flat index ``var`` into coordinates, last dimension fastest.

    ``dims`` are ``(coordinate name, size argument name)`` from the first axis to the last;
    the first axis takes what is left (no modulo)."""
    lines = [f"size_t v{j}_rest = {var};"]
    for name, size in reversed(dims[1:]):
        lines += [f"size_t {name} = v{j}_rest % {size};", f"v{j}_rest /= {size};"]
    return [*lines, f"size_t {dims[0][0]} = v{j}_rest;"]


def _horner(terms: Sequence[str], sizes: Sequence[str]) -> str:
    """The C row-major offset of coordinates ``terms`` in extents ``sizes``: ``a * B + b``
    in 2-d, ``(a * B + b) * C + c`` in 3-d."""
    expr = terms[0]
    for term, size in zip(terms[1:], sizes[1:], strict=True):
        expr = f"{f'({expr})' if ' + ' in expr else expr} * {size} + {term}"
    return expr


def _window_loops(
    v: str,
    z: Mapping[str, str],
    axes: Sequence[_Axis],
    lo: Callable[[_Axis], str],
    inner: Callable[[str, str], list[str]],
) -> list[str]:
    """C loops over the window taps of output ``({v}o,) {v}p, {v}q``, one per axis, over
    the taps that read the input only (``lo(axis)`` names the padding before each axis).

    Each loop runs from the first tap inside the input to the last, worked out from the
    output coordinate, rather than over the whole window skipping the taps in the padding:
    a pooling window may be far wider than its input (EfficientNet's pooler, a 2560-wide
    window in ceil mode over a 2x2 map), and a loop over every tap would be that window's
    square per output for the few taps that read anything.

    ``inner(x_index, tap_index)`` writes the innermost statements: ``x_index`` is the tap's
    input element (offset from ``{v}x``, the plane), ``tap_index`` its window position
    (offset from ``{v}w``, a convolution's filter)."""
    coords = [f"(size_t){v}{a.coord}" for a in axes]
    x_index = f"{v}x + {_horner(coords, [z[a.size] for a in axes])}"
    tap_index = f"{v}w + {_horner([v + a.tap for a in axes], [z[a.taps] for a in axes])}"

    def level(k: int) -> list[str]:
        if k == len(axes):
            return inner(x_index, tap_index)
        a = axes[k]
        tap, coord = v + a.tap, v + a.coord
        dil = f"(long long){z['d' + a.name]}"
        # coord = index * stride + tap * dilation - pad is inside [0, size) exactly when
        # tap * dilation lies in [b, b + size), b = pad - index * stride: the taps from
        # ceil(b / dilation) (0 if b <= 0) to before ceil((b + size) / dilation), at most
        # the window's
        return [
            f"long long {tap}b = (long long){z[lo(a)]} - (long long)({v}{a.index} * "
            f"{z['s' + a.name]});",
            f"long long {tap}e = {tap}b + (long long){z[a.size]};",
            f"size_t {tap}0 = {tap}b > 0 ? (size_t)(({tap}b + {dil} - 1) / {dil}) : 0;",
            f"size_t {tap}1 = {tap}e > 0 ? (size_t)(({tap}e + {dil} - 1) / {dil}) : 0;",
            f"if ({tap}1 > (size_t){z[a.taps]}) {tap}1 = (size_t){z[a.taps]};",
            f"for (size_t {tap} = {tap}0; {tap} < {tap}1; ++{tap}) {{",
            f"    long long {coord} = (long long)({tap} * {z['d' + a.name]}) - {tap}b;",
            *[f"    {line}" for line in level(k + 1)],
            "}",
        ]

    return level(0)


# ----------------------------------------------------------------------------- conv2d, conv3d
def _conv_params(dims: int) -> tuple[tuple[str, float], ...]:
    """A ``dims``-d convolution's parameters: strides, padding before and after each axis,
    dilations (conv2d: ``stride_h, stride_w, pad_top, ..., dilation_w``)."""
    axes = _axes(dims)
    return (
        *((f"stride_{a.name}", 1.0) for a in axes),
        *((pad, 0.0) for a in axes for pad in a.pads),
        *((f"dilation_{a.name}", 1.0) for a in axes),
    )


def _conv_geometry(
    ins: Sequence[Shape], params: Mapping[str, float], what: str = "conv2d", dims: int = 2
) -> dict[str, int]:
    """Every size of a ``dims``-d convolution (checked), by the names the C code uses."""
    n, c, *sizes = _spatial(ins, what, dims)
    axes = _axes(dims)
    wt = ins[1]
    if len(wt) != dims + 2:
        taps = ", ".join(a.taps for a in axes)
        raise _ShapeProblem(f"{what} needs a weight of shape (K, C/groups, {taps}), got {wt}")
    k, cg, *taps = wt
    if c % cg:
        raise _ShapeProblem(
            f"the input has {c} channels, which weight {wt} (C/groups = {cg}) does not divide"
        )
    groups = c // cg
    if k % groups:
        raise _ShapeProblem(f"{k} output channels do not split into {groups} groups")
    g = {"N": n, "C": c, "K": k, "Cg": cg, "Kg": k // groups}
    for a, size, tap in zip(axes, sizes, taps, strict=True):
        g |= {a.size: size, a.taps: tap, "s" + a.name: _int(params, f"stride_{a.name}", 1)}
        g |= {a.lo: _int(params, a.pads[0], 0), a.hi: _int(params, a.pads[1], 0)}
        g["d" + a.name] = _int(params, f"dilation_{a.name}", 1)
        g[a.out] = _out_size(size, g[a.lo], g[a.hi], tap, g["s" + a.name], g["d" + a.name], False)
    if min(g[a.out] for a in axes) < 1:
        raise _ShapeProblem(
            f"a {'x'.join(map(str, taps))} kernel (dilation "
            f"{'x'.join(str(g['d' + a.name]) for a in axes)}) does not fit the padded "
            f"{'x'.join(map(str, sizes))} input: the output would be empty"
        )
    if len(ins) == 3 and math.prod(ins[2]) != k:
        raise _ShapeProblem(
            f"{what}'s bias needs {k} elements (one per output channel), got {ins[2]}"
        )
    return g


def _conv_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    g = _conv_geometry(ins, params, f"conv{dims}d", dims)
    return (g["N"], g["K"], *(g[a.out] for a in _axes(dims)))


def _conv_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    # A sum over the kernel taps (R x S, or T x R x S) of (grouped) matrix products of the
    # weight's tap with the input shifted by it (Chellapilla et al. 2006), in float64.
    x, wt = xs[0], xs[1]
    shapes = [x.shape, wt.shape] + ([xs[2].shape] if len(xs) > 2 else [])
    g = _conv_geometry(shapes, params, f"conv{dims}d", dims)
    axes = _axes(dims)
    n, groups, cg, kg = g["N"], g["C"] // g["Cg"], g["Cg"], g["Kg"]
    outs = [g[a.out] for a in axes]
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), *((g[a.lo], g[a.hi]) for a in axes)))
    xp = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = wt.astype(F64).reshape(groups, kg, cg, *(g[a.taps] for a in axes))
    out = np.zeros((n, groups, kg, math.prod(outs)), F64)
    with np.errstate(all="ignore"):
        for tap in itertools.product(*(range(g[a.taps]) for a in axes)):
            win = xp
            for k, (a, t, o) in enumerate(zip(axes, tap, outs, strict=True)):
                start, step = t * g["d" + a.name], g["s" + a.name]
                cut = slice(start, start + step * (o - 1) + 1, step)
                win = win[(slice(None),) * (3 + k) + (cut,)]
            part = wg[(slice(None),) * 3 + tap]
            out += np.matmul(part, win.reshape(n, groups, cg, math.prod(outs)))
        if len(xs) > 2:
            out += xs[2].astype(F64).reshape(1, groups, kg, 1)
        return out.reshape(n, g["K"], *outs).astype(F32)


def _conv_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    g = _conv_geometry(ins, params, f"conv{dims}d", dims)
    axes = _axes(dims)
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    coords = [(f"{v}{a.index}", z[a.out]) for a in axes]
    lines = _decompose(j, var, [(f"{v}n", ""), (f"{v}k", z["K"]), *coords])
    loops = _window_loops(
        v,
        z,
        axes,
        lambda a: a.lo,
        lambda x, w: [f"t{j} += {ptrs[0]}[{x}] * {ptrs[1]}[{w}];"],
    )
    lines += [
        f"size_t {v}g = {v}k / {z['Kg']};",
        f"float t{j} = 0.0f;",
        f"for (size_t {v}c = 0; {v}c < {z['Cg']}; ++{v}c) {{",
        # element offsets, not pointers: the inputs are indexed only (typed_pointers), so
        # float16/bfloat16 buffers are read as floats through the generator's ox_wide
        f"    size_t {v}x = (({v}n * {z['C']}) + {v}g * {z['Cg']} + {v}c) * "
        f"{' * '.join(z[a.size] for a in axes)};",
        f"    size_t {v}w = ({v}k * {z['Cg']} + {v}c) * {' * '.join(z[a.taps] for a in axes)};",
        *[f"    {line}" for line in loops],
        "}",
    ]
    if len(ptrs) > 2:  # the bias is added last, as the reference adds it to the sum
        lines.append(f"t{j} += {ptrs[2]}[{v}k];")
    used = (
        "C",
        *(a.size for a in axes),
        "K",
        "Cg",
        "Kg",
        *(a.taps for a in axes),
        *(a.out for a in axes),
        *("s" + a.name for a in axes),
        *(a.lo for a in axes),
        *("d" + a.name for a in axes),
    )
    return lines, [(z[name], g[name]) for name in used]


def _conv_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # 2 N K (C/g) R S P Q: a multiply and an add per weight tap of every output element
    # (the weight holds K (C/g) R S taps), plus one add per element for a bias.
    taps = math.prod(ins[1][1:])
    flops = 2.0 * math.prod(out) * taps + (math.prod(out) if len(ins) > 2 else 0)
    return flops, 4.0 * (sum(math.prod(s) for s in ins) + math.prod(out))


# ----------------------------------------------------------------------------- conv1d
# A 1-d convolution is the 2-d one over a height of one: an (N, C, L) input and a
# (K, C/groups, S) weight lie in memory exactly as (N, C, 1, L) and (K, C/groups, 1, S), its
# (N, K, Q) output as (N, K, 1, Q). So conv1d is conv2d's geometry, reference, C and cost
# over those shapes, with its own (1-d) parameters.
_CONV1D_PARAMS = (("stride", 1.0), ("pad_left", 0.0), ("pad_right", 0.0), ("dilation", 1.0))


def _as_conv2d(
    ins: Sequence[Shape], params: Mapping[str, float]
) -> tuple[list[Shape], dict[str, float]]:
    """conv1d's shapes and parameters as conv2d's (checked: NCL input, (K, C/groups, S)
    weight, integer parameters)."""
    x, wt = ins[0], ins[1]
    if len(x) != 3:
        raise _ShapeProblem(
            f"conv1d needs an NCL input of 3 dimensions, got shape {x}; give the buffer "
            "shape=(N, C, L)"
        )
    if len(wt) != 3:
        raise _ShapeProblem(f"conv1d needs a weight of shape (K, C/groups, S), got {wt}")
    shapes = [(x[0], x[1], 1, x[2]), (wt[0], wt[1], 1, wt[2]), *ins[2:]]
    return shapes, {
        "stride_h": 1.0,
        "stride_w": float(_int(params, "stride", 1)),
        "pad_top": 0.0,
        "pad_bottom": 0.0,
        "pad_left": float(_int(params, "pad_left", 0)),
        "pad_right": float(_int(params, "pad_right", 0)),
        "dilation_h": 1.0,
        "dilation_w": float(_int(params, "dilation", 1)),
    }


def _conv1d_shape(ins: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    g = _conv_geometry(*_as_conv2d(ins, params), what="conv1d")
    return (g["N"], g["K"], g["Q"])


def _conv1d_reference(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    shapes, p2 = _as_conv2d([x.shape for x in xs], params)
    out = _conv_reference([x.reshape(s) for x, s in zip(xs, shapes, strict=True)], **p2)
    return out.reshape(out.shape[0], out.shape[1], out.shape[3])


def _conv1d_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> Lines:
    shapes, p2 = _as_conv2d(ins, params)
    return _conv_element(j, ptrs, var, shapes, (out[0], out[1], 1, out[2]), p2)


# ----------------------------------------------------------------------------- conv_transpose2d, 3d
# The transposed (fractionally strided) convolution, the gradient of the convolution with
# respect to its input: input element (h, w) of channel c adds x * weight[c, k, r, s] to
# output (h sh - pad_h + r dh, w sw - pad_w + s dw) of channel k (Dumoulin & Visin, section
# 4), and likewise over a depth in 3-d. The weight is (C, K/groups, R, S) ((C, K/groups, T,
# R, S) in 3-d), as torch's ConvTranspose2d/3d hold it; each output extent is
# P = (H - 1) sh - 2 pad_h + dh (R - 1) + out_pad_h + 1. Each output element gathers the taps
# that land on it (the C below), so no two threads write one element.
# (each kind's default is also its least value: strides and dilations 1, paddings 0)
_CONV_T_KINDS = (("stride", 1.0), ("pad", 0.0), ("dilation", 1.0), ("out_pad", 0.0))


def _conv_t_params(dims: int) -> tuple[tuple[str, float], ...]:
    """A ``dims``-d transposed convolution's parameters: strides, paddings (one per axis, both
    sides, as torch's), dilations, output paddings, groups (2-d: ``stride_h, stride_w, pad_h,
    pad_w, dilation_h, dilation_w, out_pad_h, out_pad_w, groups``)."""
    axes = _axes(dims)
    return (
        *((f"{kind}_{a.name}", default) for kind, default in _CONV_T_KINDS for a in axes),
        ("groups", 1.0),
    )


def _conv_t_geometry(
    ins: Sequence[Shape],
    params: Mapping[str, float],
    what: str = "conv_transpose2d",
    dims: int = 2,
) -> dict[str, int]:
    """Every size of a ``dims``-d transposed convolution (checked), by the names the C code
    uses (per axis: extent, taps, output; ``s``, ``p``, ``d``, ``o`` + the axis's name for
    its stride, padding, dilation and output padding)."""
    n, c, *sizes = _spatial(ins, what, dims)
    axes = _axes(dims)
    wt = ins[1]
    if len(wt) != dims + 2:
        taps = ", ".join(a.taps for a in axes)
        raise _ShapeProblem(f"{what} needs a weight of shape (C, K/groups, {taps}), got {wt}")
    groups = _int(params, "groups", 1)
    if wt[0] != c or c % groups:
        raise _ShapeProblem(
            f"the input has {c} channels; weight {wt} needs C = {c} rows, and C must split "
            f"into groups={groups}"
        )
    _, kg, *taps = wt
    g = {"N": n, "C": c, "K": kg * groups, "Cg": c // groups, "Kg": kg}
    for a, size, tap in zip(axes, sizes, taps, strict=True):
        g |= {a.size: size, a.taps: tap}
        for kind, least in _CONV_T_KINDS:  # (g keys sh, ph, dh, oh for the height...)
            g[kind[0] + a.name] = _int(params, f"{kind}_{a.name}", int(least))

    def each(kind: str) -> str:
        return "x".join(str(g[kind + a.name]) for a in axes)

    if any(g["o" + a.name] >= max(g["s" + a.name], g["d" + a.name]) for a in axes):
        raise _ShapeProblem(
            f"output padding {each('o')} must be smaller than the stride or the dilation "
            f"({each('s')}, {each('d')}), as in torch"
        )
    for a in axes:
        g[a.out] = (
            (g[a.size] - 1) * g["s" + a.name]
            - 2 * g["p" + a.name]
            + g["d" + a.name] * (g[a.taps] - 1)
            + g["o" + a.name]
            + 1
        )
    if min(g[a.out] for a in axes) < 1:
        raise _ShapeProblem(
            f"padding {each('p')} crops the whole {'x'.join(map(str, sizes))} input's "
            "transposed convolution: the output would be empty"
        )
    if len(ins) == 3 and math.prod(ins[2]) != g["K"]:
        raise _ShapeProblem(
            f"{what}'s bias needs {g['K']} elements (one per output channel), got {ins[2]}"
        )
    return g


def _conv_t_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    g = _conv_t_geometry(ins, params, f"conv_transpose{dims}d", dims)
    return (g["N"], g["K"], *(g[a.out] for a in _axes(dims)))


def _conv_t_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    # Scatter each tap's (grouped) matrix product into the uncropped output, in float64,
    # then crop the padding (Dumoulin & Visin 2016, section 4).
    x, wt = xs[0], xs[1]
    shapes = [x.shape, wt.shape] + ([xs[2].shape] if len(xs) > 2 else [])
    g = _conv_t_geometry(shapes, params, f"conv_transpose{dims}d", dims)
    axes = _axes(dims)
    n, groups, cg, kg = g["N"], g["C"] // g["Cg"], g["Cg"], g["Kg"]
    sizes = [g[a.size] for a in axes]
    # (every tap fits: out + 2 pad is the span of the last tap, plus the output padding)
    full = np.zeros((n, groups, kg, *(g[a.out] + 2 * g["p" + a.name] for a in axes)), F64)
    xg = x.astype(F64).reshape(n, groups, cg, math.prod(sizes))
    wg = wt.astype(F64).reshape(groups, cg, kg, *(g[a.taps] for a in axes))
    with np.errstate(all="ignore"):
        for tap in itertools.product(*(range(g[a.taps]) for a in axes)):
            part = np.matmul(wg[(slice(None),) * 3 + tap].transpose(0, 2, 1), xg)
            cut = []  # input element i of this tap lands on uncropped i stride + t dilation
            for a, t, size in zip(axes, tap, sizes, strict=True):
                start, step = t * g["d" + a.name], g["s" + a.name]
                cut.append(slice(start, start + step * (size - 1) + 1, step))
            full[(Ellipsis, *cut)] += part.reshape(n, groups, kg, *sizes)
        crop = tuple(slice(g["p" + a.name], g["p" + a.name] + g[a.out]) for a in axes)
        out = full[(Ellipsis, *crop)]
        if len(xs) > 2:
            out = out + xs[2].astype(F64).reshape(1, groups, kg, *(1,) * dims)
        return out.reshape(n, g["K"], *(g[a.out] for a in axes)).astype(F32)


def _conv_t_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    g = _conv_t_geometry(ins, params, f"conv_transpose{dims}d", dims)
    axes = _axes(dims)
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    coords = [(f"{v}{a.index}", z[a.out]) for a in axes]
    lines = _decompose(j, var, [(f"{v}n", ""), (f"{v}k", z["K"]), *coords])
    x_index = _horner([f"(size_t){v}{a.coord}" for a in axes], [z[a.size] for a in axes])
    w_index = _horner([v + a.tap for a in axes], [z[a.taps] for a in axes])

    def level(k: int) -> list[str]:
        # one loop per axis over its taps, the depth's outermost
        if k == len(axes):
            return [f"t{j} += {ptrs[0]}[{v}x + {x_index}] * {ptrs[1]}[{v}w + {w_index}];"]
        a = axes[k]
        tap, shifted, coord = v + a.tap, f"{v}{a.name}s", v + a.coord
        return [
            f"for (size_t {tap} = 0; {tap} < {z[a.taps]}; ++{tap}) {{",
            # the input coordinate whose tap lands on this output one: (p + pad - r dh) / sh,
            # exactly (a remainder: no input lands there)
            f"    long long {shifted} = (long long)({v}{a.index} + {z['p' + a.name]}) - "
            f"(long long)({tap} * {z['d' + a.name]});",
            f"    if ({shifted} < 0 || {shifted} % (long long){z['s' + a.name]} != 0) continue;",
            f"    long long {coord} = {shifted} / (long long){z['s' + a.name]};",
            f"    if ({coord} >= (long long){z[a.size]}) continue;",
            *[f"    {line}" for line in level(k + 1)],
            "}",
        ]

    lines += [
        f"size_t {v}g = {v}k / {z['Kg']};",
        f"size_t {v}kk = {v}k % {z['Kg']};",
        f"float t{j} = 0.0f;",
        f"for (size_t {v}c = 0; {v}c < {z['Cg']}; ++{v}c) {{",
        f"    size_t {v}ci = {v}g * {z['Cg']} + {v}c;",
        f"    size_t {v}x = ({v}n * {z['C']} + {v}ci) * {' * '.join(z[a.size] for a in axes)};",
        f"    size_t {v}w = ({v}ci * {z['Kg']} + {v}kk) * {' * '.join(z[a.taps] for a in axes)};",
        *[f"    {line}" for line in level(0)],
        "}",
    ]
    if len(ptrs) > 2:  # the bias is added last, as the reference adds it to the sum
        lines.append(f"t{j} += {ptrs[2]}[{v}k];")
    used = (
        "C",
        *(a.size for a in axes),
        "K",
        "Cg",
        "Kg",
        *(a.taps for a in axes),
        *(a.out for a in axes),
        *("s" + a.name for a in axes),
        *("p" + a.name for a in axes),
        *("d" + a.name for a in axes),
    )
    return lines, [(z[name], g[name]) for name in used]


# ConvTranspose1d: the 2-d one over a height of one, as conv1d is conv2d's.
_CONV_T1D_PARAMS = (
    ("stride", 1.0),
    ("pad", 0.0),
    ("dilation", 1.0),
    ("out_pad", 0.0),
    ("groups", 1.0),
)


def _as_conv_t2d(
    ins: Sequence[Shape], params: Mapping[str, float]
) -> tuple[list[Shape], dict[str, float]]:
    x, wt = ins[0], ins[1]
    if len(x) != 3 or len(wt) != 3:
        raise _ShapeProblem(
            f"conv_transpose1d needs an NCL input and a (C, K/groups, S) weight, got {x} and {wt}"
        )
    shapes = [(x[0], x[1], 1, x[2]), (wt[0], wt[1], 1, wt[2]), *ins[2:]]
    return shapes, {
        "stride_h": 1.0,
        "stride_w": float(_int(params, "stride", 1)),
        "pad_h": 0.0,
        "pad_w": float(_int(params, "pad", 0)),
        "dilation_h": 1.0,
        "dilation_w": float(_int(params, "dilation", 1)),
        "out_pad_h": 0.0,
        "out_pad_w": float(_int(params, "out_pad", 0)),
        "groups": float(_int(params, "groups", 1)),
    }


def _conv_t1d_shape(ins: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    g = _conv_t_geometry(*_as_conv_t2d(ins, params), what="conv_transpose1d")
    return (g["N"], g["K"], g["Q"])


def _conv_t1d_reference(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    shapes, p2 = _as_conv_t2d([x.shape for x in xs], params)
    out = _conv_t_reference([x.reshape(s) for x, s in zip(xs, shapes, strict=True)], **p2)
    return out.reshape(out.shape[0], out.shape[1], out.shape[3])


def _conv_t1d_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> Lines:
    shapes, p2 = _as_conv_t2d(ins, params)
    return _conv_t_element(j, ptrs, var, shapes, (out[0], out[1], 1, out[2]), p2)


def _conv_t_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # 2 N C H W (K/g) R S: every input element meets every tap of its group's K/g filters
    flops = 2.0 * math.prod(ins[0]) * math.prod(ins[1][1:])
    flops += math.prod(out) if len(ins) > 2 else 0
    return flops, 4.0 * (sum(math.prod(s) for s in ins) + math.prod(out))


# ----------------------------------------------------------------------------- pooling
def _pool_params(dims: int, *extra: tuple[str, float]) -> tuple[tuple[str, float], ...]:
    """A ``dims``-d pooling's parameters: window, strides, padding (one amount per axis, both
    sides, as torch), ceil mode, then ``extra`` (max_pool2d: ``kernel_h, kernel_w, stride_h,
    stride_w, pad_h, pad_w, ceil_mode, dilation_h, dilation_w``)."""
    axes = _axes(dims)
    return (
        *((f"{kind}_{a.name}", default) for kind, default in _POOL_KINDS for a in axes),
        ("ceil_mode", 0.0),
        *extra,
    )


_POOL_KINDS = (("kernel", 1.0), ("stride", 1.0), ("pad", 0.0))


def _dilations(dims: int) -> tuple[tuple[str, float], ...]:
    return tuple((f"dilation_{a.name}", 1.0) for a in _axes(dims))


_AVG_EXTRA = (("count_include_pad", 1.0), ("divisor_override", 0.0))


def _pool_geometry(
    ins: Sequence[Shape], params: Mapping[str, float], what: str, dims: int = 2
) -> dict[str, int]:
    n, c, *sizes = _spatial(ins, what, dims)
    axes = _axes(dims)
    g = {"N": n, "C": c}
    for a, size in zip(axes, sizes, strict=True):
        g |= {a.size: size, a.taps: _int(params, f"kernel_{a.name}", 1)}
        g |= {"s" + a.name: _int(params, f"stride_{a.name}", 1)}
        g |= {"p" + a.name: _int(params, f"pad_{a.name}", 0)}
        dil = f"dilation_{a.name}"  # (average pooling has none)
        g["d" + a.name] = _int(params, dil, 1) if dil in params else 1
    ceil = _int(params, "ceil_mode", 0) > 0
    if any(2 * g["p" + a.name] > g[a.taps] for a in axes):
        raise _ShapeProblem(
            f"padding {'x'.join(str(g['p' + a.name]) for a in axes)} is more than half the "
            f"{'x'.join(str(g[a.taps]) for a in axes)} window (PyTorch refuses it too)"
        )
    for a in axes:
        pad = g["p" + a.name]
        g[a.out] = _out_size(g[a.size], pad, pad, g[a.taps], g["s" + a.name], g["d" + a.name], ceil)
    if min(g[a.out] for a in axes) < 1:
        raise _ShapeProblem(
            f"a {'x'.join(str(g[a.taps]) for a in axes)} window does not fit the padded "
            f"{'x'.join(map(str, sizes))} input: the output would be empty"
        )
    return g


def _pool_windows(
    x: np.ndarray, g: Mapping[str, int], dims: int = 2
) -> list[tuple[tuple[slice, ...], np.ndarray]]:
    """Per window tap that reads the input for some output (first axis slowest): the
    outputs it reads it for, as slices of the output, and the strided view of ``x`` it
    reads for them.

    Taps in the padding add nothing (a zero to a sum, ``-inf`` to a maximum), so they are
    left out rather than read from a padded copy: a window may be far wider than its input
    (EfficientNet's pooler, 2560 wide over a 2x2 map in ceil mode), whose padded copy would
    be the window's square per plane and its taps as many.
    """
    per_axis = []
    for a in _axes(dims):
        size, out, pad = g[a.size], g[a.out], g["p" + a.name]
        step, dil = g["s" + a.name], g["d" + a.name]
        reads = []
        # tap t reads input o * step + t * dil - pad for output o: inside [0, size) for the
        # outputs from ceil((pad - t * dil) / step) to floor((size - 1 + pad - t * dil) / step)
        for t in range(min(g[a.taps], (size - 1 + pad) // dil + 1)):
            first = max(0, -((t * dil - pad) // step))
            last = min(out - 1, (size - 1 + pad - t * dil) // step)
            if first <= last:
                start = first * step + t * dil - pad
                reads.append(
                    (slice(first, last + 1), slice(start, start + (last - first) * step + 1, step))
                )
        per_axis.append(reads)
    taps = []
    for tap in itertools.product(*per_axis):
        outs = tuple(o for o, _ in tap)
        taps.append(
            ((slice(None), slice(None), *outs), x[(slice(None), slice(None), *(i for _, i in tap))])
        )
    return taps


def _pool_out(g: Mapping[str, int], dims: int) -> Shape:
    return (g["N"], g["C"], *(g[a.out] for a in _axes(dims)))


def _max_pool_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    return _pool_out(_pool_geometry(ins, params, f"max_pool{dims}d", dims), dims)


def _max_pool_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    # np.maximum propagates NaN, as PyTorch's max pooling does (``val > max || isnan(val)``);
    # a tap in the padding, -inf there, never wins, so _pool_windows leaves it out.
    g = _pool_geometry([xs[0].shape], params, f"max_pool{dims}d", dims)
    out = np.full(_pool_out(g, dims), -np.inf, F32)
    for at, win in _pool_windows(xs[0].astype(F32), g, dims):
        np.maximum(out[at], win, out=out[at])
    return out


def _pool_loops(v: str, z: Mapping[str, str], ptr: str, dims: int, body: list[str]) -> list[str]:
    """C loops over a pooling window (padding skipped) reading each tap of input ``ptr`` into
    ``{v}val``, then running ``body``."""
    return _window_loops(
        v,
        z,
        _axes(dims),
        lambda a: "p" + a.name,
        lambda x, _: [f"float {v}val = {ptr}[{x}];", *body],
    )


def _pool_sizes(dims: int) -> tuple[str, ...]:
    """The size arguments of a pooling kernel, in order (2-d: ``C, H, W, R, S, P, Q, sh,
    sw, ph, pw, dh, dw``)."""
    axes = _axes(dims)
    return (
        "C",
        *(a.size for a in axes),
        *(a.taps for a in axes),
        *(a.out for a in axes),
        *("s" + a.name for a in axes),
        *("p" + a.name for a in axes),
        *("d" + a.name for a in axes),
    )


def _pool_head(j: int, var: str, z: Mapping[str, str], dims: int = 2) -> list[str]:
    # the (n, c) plane's element offset (inputs are indexed only: typed_pointers)
    v = f"v{j}_"
    axes = _axes(dims)
    coords = [(f"{v}{a.index}", z[a.out]) for a in axes]
    lines = _decompose(j, var, [(f"{v}nc", ""), *coords])
    return [*lines, f"size_t {v}x = {v}nc * {' * '.join(z[a.size] for a in axes)};"]


def _max_pool_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    g = _pool_geometry(ins, params, f"max_pool{dims}d", dims)
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    lines = _pool_head(j, var, z, dims)
    lines += [f"float t{j} = __int_as_float(0xff800000u);"]
    # NaN wins and stays (v != v), as in PyTorch and the reference.
    lines += _pool_loops(
        v, z, ptrs[0], dims, [f"if ({v}val > t{j} || {v}val != {v}val) t{j} = {v}val;"]
    )
    return lines, [(z[name], g[name]) for name in _pool_sizes(dims)]


def _avg_divisors(
    g: Mapping[str, int], include_pad: bool, override: int, dims: int = 2
) -> np.ndarray:
    """PyTorch's divisor of each output of an average pooling, shape ``(P, Q)`` (``(O, P,
    Q)`` in 3-d): the window clipped to the padded input (``count_include_pad``) or to the
    input, or ``divisor_override``."""

    def axis(out: int, size: int, pad: int, k: int, stride: int) -> np.ndarray:
        start = np.arange(out) * stride - pad
        end = np.minimum(start + k, size + pad)
        if include_pad:
            return end - start
        return np.minimum(end, size) - np.maximum(start, 0)

    axes = _axes(dims)
    if override:
        return np.full([g[a.out] for a in axes], override, F64)
    lengths = [axis(g[a.out], g[a.size], g["p" + a.name], g[a.taps], g["s" + a.name]) for a in axes]
    return functools.reduce(np.multiply.outer, lengths).astype(F64)


def _avg_geometry(ins: Sequence[Shape], params: Mapping[str, float], dims: int) -> dict[str, int]:
    """An average pooling's geometry (checked as torch checks it)."""
    g = _pool_geometry(ins, params, f"avg_pool{dims}d", dims)
    _int(params, "divisor_override", 0)
    axes = _axes(dims)
    # torch's avg_pool3d (pool3d_shape_check with check_input_size) refuses an input smaller
    # than the window on any axis, padding or not; avg_pool2d and max pooling do not
    if dims == 3 and any(g[a.size] < g[a.taps] for a in axes):
        raise _ShapeProblem(
            f"the {'x'.join(str(g[a.size]) for a in axes)} input is smaller than the "
            f"{'x'.join(str(g[a.taps]) for a in axes)} window on some axis, which PyTorch's "
            "avg_pool3d refuses: give a window no larger than the input"
        )
    return g


def _avg_pool_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    return _pool_out(_avg_geometry(ins, params, dims), dims)


def _avg_pool_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    g = _avg_geometry([xs[0].shape], params, dims)
    include = _int(params, "count_include_pad", 0) > 0
    div = _avg_divisors(g, include, _int(params, "divisor_override", 0), dims)
    out = np.zeros(_pool_out(g, dims), F64)
    with np.errstate(all="ignore"):
        for at, win in _pool_windows(xs[0].astype(F64), g, dims):
            out[at] += win
        return (out / div).astype(F32)


def _avg_pool_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    g = _avg_geometry(ins, params, dims)
    include = _int(params, "count_include_pad", 0) > 0
    override = _int(params, "divisor_override", 0)
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    axes = _axes(dims)
    lines = _pool_head(j, var, z, dims)
    lines += [f"float t{j} = 0.0f;"]
    lines += _pool_loops(v, z, ptrs[0], dims, [f"t{j} += {v}val;"])
    if override:
        lines.append(f"t{j} /= (float){override};")
    else:
        # the divisor as PyTorch's AveragePool2d.cpp (and AvgPoolKernel.cpp's 3-d) computes it
        for a in axes:
            b, size, pad, k, st = v + a.name, z[a.size], z["p" + a.name], z[a.taps], z["s" + a.name]
            lines += [
                f"long long {b}0 = (long long)({v}{a.index} * {st}) - (long long){pad};",
                f"long long {b}1 = {b}0 + (long long){k};",
                f"if ({b}1 > (long long)({size} + {pad})) {b}1 = (long long)({size} + {pad});",
            ]
            if not include:
                lines += [
                    f"if ({b}0 < 0) {b}0 = 0;",
                    f"if ({b}1 > (long long){size}) {b}1 = (long long){size};",
                ]
        count = " * ".join(f"({v}{a.name}1 - {v}{a.name}0)" for a in axes)
        lines.append(f"t{j} /= (float)({count});")
    return lines, [(z[name], g[name]) for name in _pool_sizes(dims)]


# ----------------------------------------------------------------------------- adaptive pool
def _adaptive_params(dims: int) -> tuple[tuple[str, float], ...]:
    return tuple((f"out_{a.name}", 1.0) for a in _axes(dims))


def _adaptive_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    n, c, *_ = _spatial(ins, f"adaptive_avg_pool{dims}d", dims)
    return (n, c, *(_int(params, f"out_{a.name}", 1) for a in _axes(dims)))


def _adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    # PyTorch's start_index / end_index: floor(i size / out) .. ceil((i + 1) size / out)
    return [(i * size // out, -((-(i + 1) * size) // out)) for i in range(out)]


def _adaptive_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    spatial = tuple(range(2, 2 + dims))
    return _adaptive_windows(xs[0], params, dims, lambda w: w.astype(F64).mean(axis=spatial))


def _adaptive_max_reference(
    xs: Sequence[np.ndarray], *, dims: int = 2, **params: float
) -> np.ndarray:
    # np.max propagates NaN, as torch's adaptive max pooling (``val > max || isnan(val)``)
    spatial = tuple(range(2, 2 + dims))
    return _adaptive_windows(xs[0], params, dims, lambda w: w.astype(F32).max(axis=spatial))


def _adaptive_windows(x: np.ndarray, params: Mapping[str, float], dims: int, f: Any) -> np.ndarray:
    """``f`` of every adaptive window of ``x`` (NCHW or NCDHW), as float32."""
    shape = _adaptive_shape([x.shape], params, dims=dims)
    out = np.empty(shape, F32)
    bounds = [_adaptive_bounds(size, o) for size, o in zip(x.shape[2:], shape[2:], strict=True)]
    with np.errstate(all="ignore"):
        for window in itertools.product(*(enumerate(b) for b in bounds)):
            at = tuple(i for i, _ in window)
            cut = tuple(slice(lo, hi) for _, (lo, hi) in window)
            out[(slice(None), slice(None), *at)] = f(x[(slice(None), slice(None), *cut)])
    return out


def _adaptive_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    return _adaptive_lines(j, ptrs, var, ins, out, maximum=False, dims=dims)


def _adaptive_max_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    return _adaptive_lines(j, ptrs, var, ins, out, maximum=True, dims=dims)


def _adaptive_lines(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    maximum: bool,
    dims: int = 2,
) -> Lines:
    """The mean (or NaN-propagating maximum) of output element ``var``'s adaptive window."""
    axes = _axes(dims)
    g = {a.size: size for a, size in zip(axes, ins[0][2:], strict=True)}
    g |= {a.out: size for a, size in zip(axes, out[2:], strict=True)}
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    coords = [v + a.coord for a in axes]
    val = f"{ptrs[0]}[{v}x + {_horner(coords, [z[a.size] for a in axes])}]"
    lines = _pool_head(j, var, z, dims)
    for a in axes:
        b, i, size, o = v + a.name, v + a.index, z[a.size], z[a.out]
        lines += [
            f"size_t {b}0 = {i} * {size} / {o};",
            f"size_t {b}1 = (({i} + 1) * {size} + {o} - 1) / {o};",
        ]
    lines.append(f"float t{j} = {'__int_as_float(0xff800000u)' if maximum else '0.0f'};")

    def level(k: int) -> list[str]:
        if k == len(axes):
            # NaN wins and stays, as in max_pool2d
            return [
                f"float {v}val = {val};",
                f"if ({v}val > t{j} || {v}val != {v}val) t{j} = {v}val;"
                if maximum
                else f"t{j} += {v}val;",
            ]
        a = axes[k]
        c, b = v + a.coord, v + a.name
        return [
            f"for (size_t {c} = {b}0; {c} < {b}1; ++{c}) {{",
            *[f"    {line}" for line in level(k + 1)],
            "}",
        ]

    lines += level(0)
    if not maximum:
        count = " * ".join(f"({v}{a.name}1 - {v}{a.name}0)" for a in axes)
        lines.append(f"t{j} /= (float)({count});")
    return lines, [(z[a.size], g[a.size]) for a in axes] + [(z[a.out], g[a.out]) for a in axes]


def _adaptive_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    return float(math.prod(ins[0])), 4.0 * (math.prod(ins[0]) + math.prod(out))


# ----------------------------------------------------------------------------- constant pad
# constant_pad pads the last two axes, constant_pad3d the last three (F.pad's 4 and 6
# amounts: Swin's NHWC windows, 3-d convolutions); the amounts are per axis, before and after.
def _pad_params(dims: int) -> tuple[tuple[str, float], ...]:
    """``pad_left, pad_right, pad_top, pad_bottom(, pad_front, pad_back), value``: the last
    axis first, as F.pad lists them."""
    return (*((name, 0.0) for a in reversed(_axes(dims)) for name in a.pads), ("value", 0.0))


def _pad_amounts(params: Mapping[str, float], dims: int = 2) -> list[tuple[int, int]]:
    """(before, after) per padded axis, outermost first."""
    amounts = []
    for a in _axes(dims):
        pair = []
        for name in a.pads:
            v = params[name]
            if not float(v).is_integer():
                raise _ShapeProblem(f"parameter {name}={v!r} must be an integer")
            pair.append(int(v))
        amounts.append((pair[0], pair[1]))
    return amounts


def _pad_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    x = ins[0]
    if len(x) < dims:
        raise _ShapeProblem(
            f"{_pad_name(dims)} pads the last {('two', 'three')[dims - 2]} axes; the input {x} "
            "has fewer"
        )
    lead = len(x) - dims
    out = (
        *x[:lead],
        *(d + lo + hi for d, (lo, hi) in zip(x[lead:], _pad_amounts(params, dims), strict=True)),
    )
    if min(out) < 1:
        raise _ShapeProblem(f"negative padding crops {x} to nothing ({out})")
    return out


def _pad_name(dims: int) -> str:
    return "constant_pad" if dims == 2 else f"constant_pad{dims}d"


def _pad_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    # Negative amounts crop, as in torch.nn.functional.pad.
    x = xs[0]
    amounts = _pad_amounts(params, dims)
    out = np.full(_pad_shape([x.shape], params, dims=dims), F32(params["value"]), F32)
    lead = x.ndim - dims
    src = x[
        (
            Ellipsis,
            *(
                slice(max(0, -lo), x.shape[lead + k] - max(0, -hi))
                for k, (lo, hi) in enumerate(amounts)
            ),
        )
    ]
    at = [max(0, lo) for lo, _ in amounts]
    out[(Ellipsis, *(slice(s, s + n) for s, n in zip(at, src.shape[lead:], strict=True)))] = src
    return out


def _pad_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    axes = _axes(dims)
    amounts = _pad_amounts(params, dims)
    g = {a.size: ins[0][k - dims] for k, a in enumerate(axes)}
    g |= {a.out: out[k - dims] for k, a in enumerate(axes)}
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    rest = f"{v}o" if dims == 2 else f"{v}nc"  # the leading axes, flattened
    lines = _decompose(j, var, [(rest, ""), *((f"{v}{a.index}", z[a.out]) for a in axes)])
    # the pad amounts may be negative (a crop): signed literals, not size_t arguments
    lines += [
        f"long long {v}{a.coord} = (long long){v}{a.index} - ({lo}LL);"
        for a, (lo, _) in zip(axes, amounts, strict=True)
    ]
    inside = " && ".join(
        f"{v}{a.coord} >= 0 && {v}{a.coord} < (long long){z[a.size]}" for a in axes
    )
    at = _horner([rest, *(f"(size_t){v}{a.coord}" for a in axes)], ["", *(z[a.size] for a in axes)])
    lines += [
        # the fill value is the kernel's float argument (a CUDA graph can update it)
        f"float t{j} = {{value}};",
        f"if ({inside}) {{",
        f"    t{j} = {ptrs[0]}[{at}];",
        "}",
    ]
    return lines, [(z[name], g[name]) for name in g]


def _pad_op(dims: int) -> OpDef:
    """The constant pad of the last ``dims`` axes (its reference, C and shape rule bound)."""
    return OpDef(
        _pad_name(dims),
        FusionClass.OUT_ELEMENTWISE,
        1,
        reference=functools.partial(_pad_reference, dims=dims),
        params=_pad_params(dims),
        element=functools.partial(_pad_element, dims=dims),
        shape=functools.partial(_pad_shape, dims=dims),
        flops_per_element=0.0,
        typed_pointers=True,
    )


# ----------------------------------------------------------------------------- upsample
# Nearest upsampling by whole factors, 2-d (NCHW) and 3-d (NCDHW): output (o,) p, q reads
# input (o / factor_d,) p / factor_h, q / factor_w (an exact integer division).
def _upsample_params(dims: int) -> tuple[tuple[str, float], ...]:
    return tuple((f"factor_{a.name}", 1.0) for a in _axes(dims))


def _upsample_factors(params: Mapping[str, float], dims: int = 2) -> list[int]:
    return [_int(params, f"factor_{a.name}", 1) for a in _axes(dims)]


def _upsample_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    n, c, *sizes = _spatial(ins, f"upsample_nearest{dims}d", dims)
    factors = _upsample_factors(params, dims)
    return (n, c, *(s * f for s, f in zip(sizes, factors, strict=True)))


def _upsample_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    out = xs[0]
    for axis, factor in enumerate(_upsample_factors(params, dims), start=2):
        out = np.repeat(out, factor, axis=axis)
    return out


def _upsample_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    # out[n, c, (o,) p, q] = x[n, c, (o / factor_d,) p / factor_h, q / factor_w]: a copy of
    # the element the output's nearest source is (integer factors: an exact integer division)
    axes = _axes(dims)
    factors = _upsample_factors(params, dims)
    g = {a.size: size for a, size in zip(axes, ins[0][2:], strict=True)}
    g |= {a.out: size for a, size in zip(axes, out[2:], strict=True)}
    g |= {"F" + a.size: f for a, f in zip(axes, factors, strict=True)}
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    sources = [f"{v}{a.index} / {z['F' + a.size]}" for a in axes]
    # (a bracketed source but the last: _horner adds bracket around sums only)
    index = _horner([f"({s})" for s in sources[:-1]] + sources[-1:], [z[a.size] for a in axes])
    lines = _pool_head(j, var, z, dims)
    lines.append(f"float t{j} = {ptrs[0]}[{v}x + {index}];")
    return lines, [(z[name], g[name]) for name in g]


# ----------------------------------------------------------------------------- bilinear
# Bilinear (2-d) and trilinear (3-d) resizing as torch's CPU kernel computes it
# (aten/src/ATen/native/UpSample.h, area_pixel_compute_source_index, and
# UpSampleKernel.cpp, guard_index_and_lambda and Interpolate), in float32: along each axis,
# output row p reads rows h0 and h1 = h0 + (h0 < H - 1) with weights 1 - l and l, where
# src = ratio p (align_corners) or max(ratio (p + 0.5) - 0.5, 0), h0 = min(floor(src), H - 1)
# and l = min(max(src - h0, 0), 1); an output axis as large as the input's copies it. The
# axes combine as torch's Interpolate does, the first outermost: (lerp over the remaining
# axes at h0) (1 - l) + (the same at h1) l. The ratio is a parameter, the float32 value
# torch computes from the sizes or the scale factor it was given (the importer works it
# out), so no size decides it twice.
def _bilinear_params(dims: int) -> tuple[tuple[str, float], ...]:
    """Output sizes, ratios, align_corners (2-d: ``out_h, out_w, ratio_h, ratio_w,
    align_corners``)."""
    axes = _axes(dims)
    return (
        *((f"out_{a.name}", 1.0) for a in axes),
        *((f"ratio_{a.name}", 1.0) for a in axes),
        ("align_corners", 0.0),
    )


def _bilinear_name(dims: int) -> str:
    return "upsample_bilinear2d" if dims == 2 else "upsample_trilinear3d"


def _bilinear_shape(ins: Sequence[Shape], params: Mapping[str, float], *, dims: int = 2) -> Shape:
    n, c, *_ = _spatial(ins, _bilinear_name(dims), dims)
    axes = _axes(dims)
    for name in (f"ratio_{a.name}" for a in axes):
        if not 0 <= params[name] < 2**24:
            raise _ShapeProblem(f"parameter {name}={params[name]!r} must be in [0, 2**24)")
    if params["align_corners"] not in (0, 1):
        raise _ShapeProblem(f"parameter align_corners={params['align_corners']!r} must be 0 or 1")
    return (n, c, *(_int(params, f"out_{a.name}", 1) for a in axes))


def _bilinear_taps(
    size: int, out: int, ratio: float, align: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per output index along one axis: the two source indices and their weights."""
    p = np.arange(out)
    if out == size:  # torch copies: no arithmetic on the indices
        return p, p, np.ones(out, F32), np.zeros(out, F32)
    r = F32(ratio)
    src = (
        r * p.astype(F32)
        if align
        else np.maximum(r * (p.astype(F32) + F32(0.5)) - F32(0.5), F32(0))
    )
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    lam = np.minimum(np.maximum(src - i0.astype(F32), F32(0)), F32(1))
    i1 = i0 + (i0 < size - 1)
    return i0, i1, (F32(1) - lam).astype(F32), lam.astype(F32)


def _bilinear_reference(xs: Sequence[np.ndarray], *, dims: int = 2, **params: float) -> np.ndarray:
    x = xs[0].astype(F32)
    outs = _bilinear_shape([x.shape], params, dims=dims)[2:]
    align = bool(params["align_corners"])
    taps = [
        _bilinear_taps(size, out, params[f"ratio_{a.name}"], align)
        for a, size, out in zip(_axes(dims), x.shape[2:], outs, strict=True)
    ]

    def lerp(part: np.ndarray, k: int) -> np.ndarray:
        # axis 2 + k of ``part`` interpolated, the axes after it first (as the C nests them)
        if k == dims:
            return part
        i0, i1, l0, l1 = taps[k]
        shape = (-1,) + (1,) * (dims - 1 - k)  # (the weights broadcast along axis 2 + k)
        lo = lerp(np.take(part, i0, axis=2 + k), k + 1)
        hi = lerp(np.take(part, i1, axis=2 + k), k + 1)
        return lo * l0.reshape(shape) + hi * l1.reshape(shape)

    with np.errstate(all="ignore"):
        return lerp(x, 0).astype(F32)


def _bilinear_axis(
    v: str, axis: str, out: str, size: str, out_size: str, ratio: str, align: bool
) -> list[str]:
    """C lines giving ``{v}{axis}0``, ``{v}{axis}1`` and weights ``{v}{axis}l0``/``l1`` of
    output index ``{v}{out}`` (of ``out_size``) along one axis of ``size`` inputs."""
    a = f"{v}{axis}"
    src = (
        f"{ratio} * (float){v}{out}"
        if align
        else f"fmaxf({ratio} * ((float){v}{out} + 0.5f) - 0.5f, 0.0f)"
    )
    return [
        f"size_t {a}0 = {v}{out}, {a}1 = {v}{out};",
        f"float {a}l0 = 1.0f, {a}l1 = 0.0f;",
        f"if ({out_size} != {size}) {{",
        f"    float {a}s = {src};",
        f"    long long {a}f = (long long)floorf({a}s);",
        f"    if ({a}f > (long long){size} - 1) {a}f = (long long){size} - 1;",
        f"    {a}0 = (size_t){a}f;",
        f"    {a}l1 = fminf(fmaxf({a}s - (float){a}f, 0.0f), 1.0f);",
        f"    {a}1 = {a}0 + ({a}0 < {size} - 1 ? 1 : 0);",
        f"    {a}l0 = 1.0f - {a}l1;",
        "}",
    ]


def _bilinear_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
    *,
    dims: int = 2,
) -> Lines:
    axes = _axes(dims)
    align = bool(_int(params, "align_corners", 0))
    g = {a.size: size for a, size in zip(axes, ins[0][2:], strict=True)}
    g |= {a.out: size for a, size in zip(axes, out[2:], strict=True)}
    z = {name: f"s{j}_{name}" for name in g}
    v = f"v{j}_"
    lines = _pool_head(j, var, z, dims)
    for a in axes:
        ratio = f"{{ratio_{a.name}}}"  # (the kernel's float argument)
        lines += _bilinear_axis(v, a.name, a.index, z[a.size], z[a.out], ratio, align)

    def lerp(k: int, at: list[str]) -> str:
        # the same nesting as the reference: axis k's two sources, the later axes inside
        if k == dims:
            return f"{ptrs[0]}[{v}x + {_horner(at, [z[a.size] for a in axes])}]"
        b = v + axes[k].name
        lo, hi = lerp(k + 1, [*at, f"{b}0"]), lerp(k + 1, [*at, f"{b}1"])
        if k + 1 < dims:  # (a sum: bracketed before its weight multiplies it)
            lo, hi = f"({lo})", f"({hi})"
        return f"{lo} * {b}l0 + {hi} * {b}l1"

    lines.append(f"float t{j} = {lerp(0, [])};")
    return lines, [(z[name], g[name]) for name in g]


# ----------------------------------------------------------------------------- cat
def _cat_axis(ins: Sequence[Shape], params: Mapping[str, float]) -> int:
    nd = len(ins[0])
    a = params["axis"]
    if not float(a).is_integer() or not -nd <= a < nd:
        raise _ShapeProblem(f"axis={a!r} is not an axis of the {nd}-d inputs")
    return int(a) % nd


def _cat_shape(ins: Sequence[Shape], params: Mapping[str, float]) -> Shape:
    a = _cat_axis(ins, params)
    first = ins[0]
    for k, s in enumerate(ins[1:], start=1):
        if len(s) != len(first) or s[:a] != first[:a] or s[a + 1 :] != first[a + 1 :]:
            raise _ShapeProblem(
                f"input {k} has shape {s}, which differs from input 0's {first} on an axis "
                f"other than the concatenation axis {a}"
            )
    return (*first[:a], sum(s[a] for s in ins), *first[a + 1 :])


def _cat_reference(xs: Sequence[np.ndarray], **params: float) -> np.ndarray:
    # values are moved, not computed: every dtype as it is (int64 position ids too)
    a = _cat_axis([x.shape for x in xs], params)
    return np.concatenate(list(xs), axis=a)


def _cat_dtype(dtypes: Sequence[str], params: Mapping[str, float]) -> str:
    # floats promote as element-wise ops do; other dtypes are moved as they are, one dtype
    if all(d in FLOAT_COMPUTE for d in dtypes):
        return float_dtype(dtypes, params)
    return any_dtype(dtypes, params)


def _cat_element(
    j: int,
    ptrs: Sequence[str],
    var: str,
    ins: Sequence[Shape],
    out: Shape,
    params: Mapping[str, float],
) -> Lines:
    a = _cat_axis(ins, params)
    inner = math.prod(out[a + 1 :])
    v = f"v{j}_"
    sizes = [(f"s{j}_inner", inner), (f"s{j}_D", out[a])]
    lines = _decompose(j, var, [(f"{v}o", ""), (f"{v}c", f"s{j}_D"), (f"{v}i", f"s{j}_inner")])
    # in the type the inputs compute in (float for float and half arrays, else theirs)
    lines += [f"typedef decltype(+{ptrs[0]}[0]) T{j};", f"T{j} t{j};"]
    start = 0
    for k, (ptr, s) in enumerate(zip(ptrs, ins, strict=True)):
        d = f"s{j}_d{k}"
        sizes.append((d, s[a]))
        cond = "if" if k == 0 else "else if"
        test = f"({v}c < {start + s[a]}u)" if k < len(ptrs) - 1 else ""
        head = f"{cond} {test} {{" if test else "else {"
        if len(ptrs) == 1:
            head = "{"
        lines += [
            head,
            f"    t{j} = {ptr}[({v}o * {d} + ({v}c - {start}u)) * s{j}_inner + {v}i];",
            "}",
        ]
        start += s[a]
    return lines, sizes


def cat_op(arity: int) -> OpDef:
    """The op concatenating ``arity`` inputs along parameter ``axis`` (``cat_<arity>``),
    registered on first use: an op has a fixed number of inputs.

    >>> from oxiwork.ops.table import infer_shape
    >>> op = cat_op(3)
    >>> op.name, infer_shape(op, [(2, 1), (2, 3), (2, 2)], {"axis": 1}, "cat")
    ('cat_3', (2, 6))
    """
    if isinstance(arity, bool) or not isinstance(arity, int) or not 1 <= arity <= cnames.MAX_ARITY:
        raise InvalidArgument(f"cat_op needs an arity from 1 to {cnames.MAX_ARITY}, got {arity!r}")
    name = f"cat_{arity}"
    op = get(name)
    if op is None:
        op = register(
            OpDef(
                name,
                FusionClass.OUT_ELEMENTWISE,
                arity,
                reference=_cat_reference,
                params=(("axis", 0.0),),
                element=_cat_element,
                shape=_cat_shape,
                flops_per_element=0.0,
                dtype=_cat_dtype,
                widen=False,
                typed_pointers=True,
            )
        )
    return op


# ----------------------------------------------------------------------------- the table
def _pool_cost(ins: Sequence[Shape], out: Shape) -> tuple[float, float]:
    # The window size is a parameter the cost rule does not see: the input's elements per
    # output element stand for it (exact for non-overlapping windows), one compare or add
    # per element read.
    taps = max(1, math.prod(ins[0]) // math.prod(out))
    return float(math.prod(out) * taps), 4.0 * (math.prod(ins[0]) + math.prod(out))


def _spatial_op(
    name: str,
    dims: int,
    arity: int,
    rules: tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]],
    params: tuple[tuple[str, float], ...],
    **cost: Any,
) -> OpDef:
    """An out-element-wise op over ``dims`` spatial axes (2: NCHW, 3: NCDHW) whose
    reference, C generator and shape rule (``rules``) take ``dims``; ``cost``: its
    ``cost=`` or ``flops_per_element=``."""
    reference, element, shape = (functools.partial(f, dims=dims) for f in rules)
    return OpDef(
        name,
        FusionClass.OUT_ELEMENTWISE,
        arity,
        reference=reference,
        params=params,
        element=element,
        shape=shape,
        typed_pointers=True,
        **cost,
    )


_CONV_RULES = (_conv_reference, _conv_element, _conv_shape)
_CONV_T_RULES = (_conv_t_reference, _conv_t_element, _conv_t_shape)

CONV_OPS: tuple[OpDef, ...] = (
    # the convolution, 2-d (NCHW) and 3-d (NCDHW, Conv3d), with and without a bias per
    # output channel (one OpDef per arity)
    *(
        _spatial_op(
            f"conv{dims}d{suffix}", dims, arity, _CONV_RULES, _conv_params(dims), cost=_conv_cost
        )
        for dims in (2, 3)
        for suffix, arity in (("", 2), ("_bias", 3))
    ),
    # a 1-d convolution (NCL) as conv2d over a height of one, with and without a bias
    *(
        OpDef(
            name,
            FusionClass.OUT_ELEMENTWISE,
            arity,
            reference=_conv1d_reference,
            params=_CONV1D_PARAMS,
            element=_conv1d_element,
            shape=_conv1d_shape,
            cost=_conv_cost,
            typed_pointers=True,
        )
        for name, arity in (("conv1d", 2), ("conv1d_bias", 3))
    ),
    # the transposed convolution, 2-d (ConvTranspose2d, NCHW) and 3-d (ConvTranspose3d,
    # NCDHW), with and without a bias: one geometry, reference and C generator
    *(
        _spatial_op(
            f"conv_transpose{dims}d{suffix}",
            dims,
            arity,
            _CONV_T_RULES,
            _conv_t_params(dims),
            cost=_conv_t_cost,
        )
        for dims in (2, 3)
        for suffix, arity in (("", 2), ("_bias", 3))
    ),
    *(
        OpDef(
            name,
            FusionClass.OUT_ELEMENTWISE,
            arity,
            reference=_conv_t1d_reference,
            params=_CONV_T1D_PARAMS,
            element=_conv_t1d_element,
            shape=_conv_t1d_shape,
            cost=_conv_t_cost,
            typed_pointers=True,
        )
        for name, arity in (("conv_transpose1d", 2), ("conv_transpose1d_bias", 3))
    ),
    # max and average pooling, 2-d (NCHW) and 3-d (NCDHW): one geometry, reference and C
    # generator over the spatial axes
    *(
        entry
        for dims in (2, 3)
        for entry in (
            _spatial_op(
                f"max_pool{dims}d",
                dims,
                1,
                (_max_pool_reference, _max_pool_element, _max_pool_shape),
                _pool_params(dims, *_dilations(dims)),
                cost=_pool_cost,
            ),
            _spatial_op(
                f"avg_pool{dims}d",
                dims,
                1,
                (_avg_pool_reference, _avg_pool_element, _avg_pool_shape),
                _pool_params(dims, *_AVG_EXTRA),
                cost=_pool_cost,
            ),
            _spatial_op(
                f"adaptive_avg_pool{dims}d",
                dims,
                1,
                (_adaptive_reference, _adaptive_element, _adaptive_shape),
                _adaptive_params(dims),
                cost=_adaptive_cost,
            ),
            _spatial_op(
                f"adaptive_max_pool{dims}d",
                dims,
                1,
                (_adaptive_max_reference, _adaptive_max_element, _adaptive_shape),
                _adaptive_params(dims),
                cost=_adaptive_cost,
            ),
        )
    ),
    # nearest-neighbour upsampling by whole factors (nn.Upsample(scale_factor=2)), 2-d and
    # 3-d
    *(
        _spatial_op(
            f"upsample_nearest{dims}d",
            dims,
            1,
            (_upsample_reference, _upsample_element, _upsample_shape),
            _upsample_params(dims),
            flops_per_element=0.0,
        )
        for dims in (2, 3)
    ),
    # bilinear and trilinear resizing to any size (nn.Upsample(mode="bilinear" or
    # "trilinear"), F.interpolate): per output element 2**dims - 1 lerps of 3 flops (two
    # products, a sum) and a weight 1 - l per axis (11 in 2-d, 24 in 3-d)
    *(
        _spatial_op(
            _bilinear_name(dims),
            dims,
            1,
            (_bilinear_reference, _bilinear_element, _bilinear_shape),
            _bilinear_params(dims),
            flops_per_element=3.0 * (2**dims - 1) + dims,
        )
        for dims in (2, 3)
    ),
    _pad_op(2),
    _pad_op(3),
)

for _op in CONV_OPS:
    register(_op)
for _k in (2, 3, 4):
    cat_op(_k)
