"""CUDA C for kernel nodes: single ops and fused programs.

Every generated kernel follows one convention, so the GPU backend needs no per-op code::

    extern "C" __global__ void NAME(const float* __restrict__ in0, ...,
                                    float* __restrict__ out0, ..., <scalar args>)

``in<k>`` are ``node.inputs`` in order, ``out<k>`` are ``node.outputs`` in order, and
``scalar_args`` lists the remaining arguments as ``(ctype, name, value)`` with ctype in
``"float"``, ``"size_t"``, ``"int"``: sizes and op parameters are arguments (not
constants baked into the source) so a CUDA graph can update them without recompiling.

Kernels use the x dimension of the launch only. Element-wise kernels (and fused
element-wise chains) are grid-stride loops (Harris, "CUDA Pro Tip: Write Flexible Kernels
with Grid-Stride Loops", NVIDIA blog 2013), so any launch configuration covers the data.
Reductions over the last axis (sum, max, softmax, layer_norm) run one row per block with a
shared-memory tree reduction (Harris, "Optimizing Parallel Reduction in CUDA", 2007);
element-wise prologue steps are recomputed in each pass over the row and epilogue steps
run on the row's result, so a fused group is still one kernel.

The source is a pure function of the node and its buffers' shapes: the same graph always
gives the same text, so compiled kernels can be cached by its hash.

Example
-------
>>> from oxiwork.examples import quick_start
>>> g = quick_start()
>>> ks = kernel_source(g, next(n for n in g.nodes if n.name == "scale"))
>>> ks.function_name, ks.scalar_args
('scale_2', (('size_t', 'n', 1024), ('float', 'alpha', 2.0)))
>>> "(t0 * alpha)" in ks.source
False
>>> "(in0[i] * alpha)" in ks.source
True
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.node import GraphNode, _c_ident
from oxiwork.ops.program import BoundProgram, BoundStep, bind, describe
from oxiwork.ops.strided import (
    ValueTypes,
    needs_strides,
    strided_kernel,
    strided_view,
    view_index,
    view_scalars,
    writes_strided,
)
from oxiwork.ops.table import INT_DTYPES, Shape, broadcast_terms, reduction_terms

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = ["KernelSource", "function_name", "kernel_source"]

MAX_IDENT = 48  # keep generated names readable; the node id keeps them unique

ScalarArg = tuple[str, str, Any]


@dataclass(frozen=True, slots=True)
class KernelSource:
    """The CUDA C of one kernel node.

    ``scalar_args`` follow the pointer arguments, in order, as ``(ctype, name, value)``.
    """

    function_name: str
    source: str
    scalar_args: tuple[ScalarArg, ...]


def function_name(node: GraphNode) -> str:
    """A valid, per-graph unique C identifier for ``node``'s kernel.

    Derived from the (possibly hostile) node name by keeping ASCII letters, digits and
    ``_``, and suffixed with the node id so two nodes never collide.

    >>> from oxiwork.node import GraphNode, NodeId, NodeKind
    >>> function_name(GraphNode(NodeId(7), "<img src=x onerror=alert(1)>", NodeKind.KernelLaunch))
    'k_img_src_x_onerror_alert_1___7'
    """
    ident = _c_ident(node.name)[:MAX_IDENT]
    if ident.startswith("_"):  # leading underscores are reserved in C
        ident = "k" + ident
    return f"{ident}_{int(node.id)}"


def kernel_source(graph: ComputeGraph, node: GraphNode) -> KernelSource:
    """The CUDA C source of kernel ``node`` of ``graph`` (a single op or a fused program).

    Raises :class:`~oxiwork.error.UnsupportedOp` for opaque kernels and ops without CUDA
    code, :class:`~oxiwork.error.InvalidArgument` for shape errors.

    >>> from oxiwork.examples import quick_start
    >>> from oxiwork.optimizer.fusion import fuse
    >>> g = fuse(quick_start()).graph
    >>> k = next(n for n in g.nodes if n.fused is not None)
    >>> src = kernel_source(g, k).source
    >>> "float t1 = (t0 * alpha)" in src or "float t1 = (t0 * s1_alpha)" in src
    True
    """
    if not node.is_kernel:
        raise InvalidArgument(f"{describe(node)} is not a kernel; only kernels have CUDA source")
    bound = bind(graph, node)
    fname = function_name(node)
    typed = _typed(bound)
    for j, st in enumerate(bound.steps):
        if typed and (st.op.kernel or st.op.element) and not st.op.typed_pointers:
            raise UnsupportedOp(
                f"{bound.where}: op {st.op.name!r} (step {j}) generates float32 C only, and "
                f"this kernel computes {typed}: run it in float32 (cast around it), or "
                "give the op typed_pointers=True once its generator indexes any pointer"
            )
    if writes_strided(graph, node) or (
        needs_strides(graph, node)
        and node.fused is None
        and (bound.steps[0].op.kernel is not None or bound.steps[0].op.source is not None)
    ):  # written through a view, or an op whose own kernel reads whole buffers
        types = _value_types(bound) if typed else None
        return KernelSource(fname, *strided_kernel(graph, node, fname, types))
    if len(bound.steps) == 1:
        op = bound.steps[0].op
        if op.kernel is not None and not (typed and op.element is not None):
            src, scalars = op.kernel(
                fname, bound.in_shapes, bound.steps[0].shape, bound.steps[0].params
            )
            if typed:  # a value-moving kernel (typed_pointers): its pointers take any type
                src = _HALF_PRELUDE * bool(_halves(bound)) + _retype(src, bound)
            return KernelSource(fname, src, tuple(scalars))
        if op.source is not None:
            assert op.function_name is not None
            n = math.prod(bound.out_shapes[0])
            scalars = [("size_t", "n", n)]
            scalars += [("float", p, v) for p, v in bound.steps[0].params.items()]
            return KernelSource(op.function_name, op.source, tuple(scalars))
    for j, st in enumerate(bound.steps):
        if st.op.expr is None and st.op.row is None and st.op.element is None:
            raise UnsupportedOp(
                f"{bound.where}: op {st.op.name!r} (step {j}) has no CUDA code that can be "
                "composed; give it an expr= (element-wise) or run it as its own kernel"
            )
    rows = [j for j, st in enumerate(bound.steps) if st.op.row is not None]
    if len(rows) > 1:
        raise UnsupportedOp(
            f"{bound.where}: a fused kernel may hold at most one reduction, this one has "
            f"{len(rows)}; split it"
        )
    gen = _Gen(bound, node, graph)
    if rows:
        return gen.row_kernel(fname, rows[0])
    return gen.elementwise_kernel(fname)


_BLOCK_REDUCE = """#ifndef OXIWORK_BLOCK_REDUCE
#define OXIWORK_BLOCK_REDUCE
// Tree reduction in shared memory; works for any blockDim.x <= 1024.
__device__ __forceinline__ float ox_block_reduce(float v, float* red, int is_max)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = 1; s < blockDim.x; s <<= 1) {
        if ((threadIdx.x % (2 * s)) == 0 && threadIdx.x + s < blockDim.x) {
            float o = red[threadIdx.x + s];
            float a = red[threadIdx.x];
            // is_max 2: a maximum that propagates NaN (torch.amax), 1: one that skips it
            red[threadIdx.x] = is_max == 2 ? ((a != a || o != o) ? a + o : fmaxf(a, o))
                             : is_max ? fmaxf(a, o) : a + o;
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}
#endif
"""

_NEG_INF = "__int_as_float(0xff800000)"

# C type of each dtype a kernel computes with (ops.table.COMPUTE_DTYPES).
CTYPES = {
    "float32": "float",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "int64": "long long",
    "int32": "int",
    "bool": "bool",
}
# Half-precision values are computed in float: loads widen (exact), each op's result is
# rounded once to its dtype (round to nearest even, as numpy's and ml_dtypes' casts),
# stores write the rounded value (PyTorch's kernels do the same, with float as "opmath").
_HALF = {
    "float16": ("__half2float({})", "ox_rh({})", "__float2half_rn({})"),
    "bfloat16": ("__bfloat162float({})", "ox_rb({})", "__float2bfloat16_rn({})"),
}
_HALF_PRELUDE = """#ifndef OXIWORK_HALF
#define OXIWORK_HALF
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// float16/bfloat16 compute in float: round a value to the dtype (and back), or read an
// array of them as floats (what out-element-wise generators index, e.g. matmul).
__device__ __forceinline__ float ox_rh(float v) { return __half2float(__float2half_rn(v)); }
__device__ __forceinline__ float ox_rb(float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float ox_ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ox_ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> struct ox_wide {
    const T* p;
    __device__ __forceinline__ float operator[](size_t i) const { return ox_ld(p[i]); }
};
#endif
"""


def _typed(bound: BoundProgram) -> str:
    """The first dtype of ``bound`` other than float32 ("" if it is all float32: then the
    source is exactly what it was before dtypes, and so are compiled kernels' cache keys)."""
    for d in (*bound.in_dtypes, *bound.out_dtypes, *(st.dtype for st in bound.steps)):
        if d != "float32":
            return d
    return ""


def _halves(bound: BoundProgram) -> bool:
    return any(
        d in _HALF for d in (*bound.in_dtypes, *bound.out_dtypes, *(s.dtype for s in bound.steps))
    )


def _value_types(bound: BoundProgram) -> ValueTypes:
    """A strided kernel's typing: its buffers' C types, half loads widened to float, the
    value rounded once to the output's dtype (a half) or converted to its type (an int,
    bool), as the fused kernels' ``load``/``define``/``store`` do."""
    out = bound.out_dtypes[0]
    if out in _HALF:
        store = _HALF[out][2]
    elif out == "float32":
        store = "{}"
    else:
        store = f"({CTYPES[out]})({{}})"
    return ValueTypes(
        tuple(CTYPES[d] for d in (*bound.in_dtypes, out)),
        tuple(_HALF[d][0] if d in _HALF else "{}" for d in bound.in_dtypes),
        store,
        _HALF_PRELUDE if _halves(bound) else "",
    )


def _retype(src: str, bound: BoundProgram) -> str:
    """A value-moving full kernel's float pointers as its buffers' types (one dtype)."""
    (dtype,) = set(bound.in_dtypes) | set(bound.out_dtypes)
    return re.sub(r"\bfloat\*", f"{CTYPES[dtype]}*", src)


class _Gen:
    """Source builder for one bound program (one instance per kernel_source call)."""

    def __init__(self, bound: BoundProgram, node: GraphNode, graph: ComputeGraph) -> None:
        self.b = bound
        self.node = node
        self.sizes: dict[str, int] = {}  # size_t args of element steps (matmul), in order
        # broadcast index arguments, in order; and the prefix given to each distinct
        # (input, shape read as, shape broadcast to), so an input read the same way by two
        # steps shares its arguments
        self.bcast: dict[str, int] = {}
        self.prefixes: dict[tuple[int, Shape, Shape], str] = {}
        self.single = len(bound.steps) == 1
        # Inputs that are non-contiguous views, read at their strides (oxiwork.ops.strided).
        self.strided = {
            k: graph.buffer(b) for k, b in enumerate(node.inputs) if strided_view(graph, b)
        }
        # In-place kernels alias an input and an output, and a view may share its base's
        # bytes with another argument: __restrict__ would be a lie.
        aliased = set(node.inputs) & set(node.outputs) or any(
            b in graph.views() for b in (*node.inputs, *node.outputs)
        )
        self.restrict = "" if aliased else " __restrict__"

    # ---------------------------------------------------------------- pieces
    def param_name(self, j: int, p: str) -> str:
        return p if self.single else f"s{j}_{p}"

    def arg(
        self, kind: str, i: int, var: str, space: int, shape: Shape | None = None, out: Shape = ()
    ) -> str:
        """Operand ``i`` (a step value or input buffer ``i``) at output index ``var`` of a
        step computing ``space`` elements of shape ``out``; an input read as ``shape`` is
        broadcast to ``out`` (numpy rules, :func:`~oxiwork.ops.table.broadcast_terms`)."""
        if kind == "step":
            m = math.prod(self.b.steps[i].shape)
            if m != space:
                raise UnsupportedOp(
                    f"{self.b.where}: a step reads step {i} ({m} elements) at {space} "
                    "elements; only kernel inputs broadcast, keep the steps in separate kernels"
                )
            return f"t{i}"
        have = self.b.in_shapes[i] if shape is None else shape
        if math.prod(have) == space:
            return self.load(i, f"in{i}[{self.place(i, var)}]")
        terms = broadcast_terms(have, out) if math.prod(out) == space else None
        if terms is None:
            raise UnsupportedOp(
                f"{self.b.where}: input {i} of shape {have} does not broadcast to the "
                f"{space} elements it is combined with"
            )
        key = (i, tuple(have), tuple(out))
        pre = self.prefixes.get(key)
        if pre is None:
            taken = sum(1 for k in self.prefixes if k[0] == i)
            pre = self.prefixes[key] = f"m{i}" if not taken else f"m{i}v{taken}"
        parts = []
        for t, (div, mod, stride) in enumerate(terms):
            # div is 1 only for the innermost run of axes, stride 1 only for the innermost
            # kept run, and mod * div == space only for the outermost run: leaving those
            # operations out depends on the broadcast pattern, not on the sizes
            e = var
            if div != 1:
                e = f"({e} / {pre}d{t})"
                self.bcast[f"{pre}d{t}"] = div
            if mod * div != space:
                e = f"({e} % {pre}m{t})"
                self.bcast[f"{pre}m{t}"] = mod
            if stride != 1:
                e = f"{e} * {pre}s{t}"
                self.bcast[f"{pre}s{t}"] = stride
            parts.append(e)
        return self.load(i, f"in{i}[{self.place(i, ' + '.join(parts) or '0')}]")

    def place(self, i: int, flat: str) -> str:
        """Where element ``flat`` (row-major in its own shape) of input ``i`` lies: ``flat``
        in a buffer, at its strides in a non-contiguous view (also when it is broadcast:
        Funnel adds a strided slice to a larger tensor)."""
        if i not in self.strided:
            return flat
        return view_index(f"x{i}", len(self.strided[i].array_shape), flat)

    def load(self, i: int, ref: str) -> str:
        """Input ``i``'s element ``ref`` as a compute value (halves widen to float)."""
        half = _HALF.get(self.b.in_dtypes[i]) if self.b.in_dtypes else None
        return half[0].format(ref) if half else ref

    def define(self, j: int, expr: str) -> str:
        """The C statement defining ``t{j}``, step j's value, in its dtype's compute type."""
        dtype = self.b.steps[j].dtype
        if dtype == "float32":
            return f"float t{j} = {expr};"
        if dtype in _HALF:
            return f"float t{j} = {_HALF[dtype][1].format(expr)};"
        ctype = CTYPES[dtype]
        return f"{ctype} t{j} = ({ctype})({expr});"

    def rounding(self, j: int) -> list[str]:
        """Statements rounding a float ``t{j}`` computed by a recipe or generator."""
        half = _HALF.get(self.b.steps[j].dtype)
        return [f"t{j} = {half[1].format(f't{j}')};"] if half else []

    def store(self, k: int, var: str, s: int) -> str:
        half = _HALF.get(self.b.out_dtypes[k]) if self.b.out_dtypes else None
        value = half[2].format(f"t{s}") if half else f"t{s}"
        return f"out{k}[{var}] = {value};"

    def prelude(self) -> str:
        return _HALF_PRELUDE if _halves(self.b) else ""

    def step_lines(self, j: int, var: str, space: int) -> list[str]:
        """C statements defining ``t{j}``, step j's value at index ``var``."""
        st = self.b.steps[j]
        if st.op.element is not None:
            # An out-element-wise step (matmul) reads whole input buffers, so its operands
            # must be kernel inputs, never values of earlier steps.
            if any(kind != "in" for kind, _ in st.args):
                raise UnsupportedOp(
                    f"{self.b.where}: step {j} ({st.op.name}) reads an earlier step; an "
                    f"{st.op.name} can only start a fused kernel, reading its input buffers"
                )
            if any(i in self.strided for _, i in st.args):
                raise UnsupportedOp(
                    f"{self.b.where}: step {j} ({st.op.name}) reads a strided view whole; "
                    "copy the view into a buffer of its own first (op 'copy')"
                )
            # half arrays are handed over as float views (exact widening on every load)
            ptrs = [
                f"ox_wide<{CTYPES[d]}>{{in{i}}}"
                if (d := self.b.in_dtypes[i]) in _HALF
                else f"in{i}"
                for _, i in st.args
            ]
            lines, sizes = st.op.element(j, ptrs, var, list(st.in_shapes), st.shape, st.params)
            self.sizes.update(sizes)
            # ``{p}`` in the lines is parameter p's kernel argument, as in an expr template
            for p in st.params:
                lines = [ln.replace(f"{{{p}}}", self.param_name(j, p)) for ln in lines]
            return [*lines, *self.rounding(j)]
        if st.op.expr is None:
            raise UnsupportedOp(
                f"{self.b.where}: step {j} ({st.op.name}) cannot be computed per element here"
            )
        read = st.op.read_shapes(st.in_shapes, st.params)
        args = [
            self.arg(kind, i, var, space, read[p], st.shape) for p, (kind, i) in enumerate(st.args)
        ]
        names = {p: self.param_name(j, p) for p in st.params}
        return [self.define(j, st.op.expr.format(*args, **names))]

    def signature(
        self, fname: str, sizes: list[tuple[str, int]]
    ) -> tuple[str, tuple[ScalarArg, ...]]:
        r = self.restrict
        ins = self.b.in_dtypes or ("float32",) * len(self.b.in_shapes)
        outs = self.b.out_dtypes or ("float32",) * len(self.b.out_shapes)
        ptrs = [f"const {CTYPES[d]}*{r} in{k}" for k, d in enumerate(ins)]
        ptrs += [f"{CTYPES[d]}*{r} out{k}" for k, d in enumerate(outs)]
        scalars: list[ScalarArg] = [("size_t", name, v) for name, v in sizes]
        scalars += [("size_t", name, v) for name, v in self.sizes.items()]
        scalars += [("size_t", name, v) for name, v in self.bcast.items()]
        for k, b in sorted(self.strided.items()):
            scalars += view_scalars(f"x{k}", b)
        for j, st in enumerate(self.b.steps):
            ctype = self.param_ctype(j)
            conv = float if ctype == "float" else int  # a whole number (the dtype rule)
            scalars += [(ctype, self.param_name(j, p), conv(v)) for p, v in st.params.items()]
        args = ptrs + [f"{c} {n}" for c, n, _ in scalars]
        ops = " -> ".join(st.op.name for st in self.b.steps)
        head = f'// generated by oxiwork: {ops}\nextern "C" __global__ void {fname}(\n    '
        return head + ",\n    ".join(args) + ")\n", tuple(scalars)

    def param_ctype(self, j: int) -> str:
        """The C type step ``j`` takes its parameters in: its inputs' integer type when they
        are all one (an ``int64 + 1`` is exact, never a float round trip), else float."""
        st = self.b.steps[j]
        ins = (
            {self.b.in_dtypes[i] if kind == "in" else self.b.steps[i].dtype for kind, i in st.args}
            if self.b.in_dtypes
            else {"float32"}
        )
        (d,) = ins if len(ins) == 1 else ("float32",)
        return CTYPES[d] if d in INT_DTYPES else "float"

    def check_space(self, steps: list[int], space: int, what: str) -> None:
        for j in steps:
            if math.prod(self.b.steps[j].shape) != space:
                raise UnsupportedOp(
                    f"{self.b.where}: step {j} ({self.b.steps[j].op.name}) has shape "
                    f"{self.b.steps[j].shape}, but the {what} works on {space} elements"
                )

    # ---------------------------------------------------------------- element-wise
    def elementwise_kernel(self, fname: str) -> KernelSource:
        n = math.prod(self.b.steps[self.b.outputs[0]].shape)
        self.check_space(list(range(len(self.b.steps))), n, "element-wise kernel")
        body = [line for j in range(len(self.b.steps)) for line in self.step_lines(j, "i", n)]
        body += [self.store(k, "i", s) for k, s in enumerate(self.b.outputs)]
        sig, scalars = self.signature(fname, [("n", n)])
        loop = (
            "{\n"
            "    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
            "         i += (size_t)gridDim.x * blockDim.x) {\n"
            + "".join(f"        {line}\n" for line in body)
            + "    }\n}\n"
        )
        return KernelSource(fname, self.prelude() + sig + loop, scalars)

    # ---------------------------------------------------------------- row kernels
    def row_kernel(self, fname: str, r: int) -> KernelSource:
        steps = self.b.steps
        red: BoundStep = steps[r]
        pre = list(range(r))
        post = list(range(r + 1, len(steps)))
        # The reduced axes may be any (sum over dims 0 and 2, softmax over dim 1): the input
        # is read in place through index terms (reduction_terms), not permuted first by a
        # transpose kernel, so prologues and epilogues still fuse into the one kernel and
        # no buffer or pass over memory is added; the price, a few divisions per element
        # and uncoalesced loads when the reduced axes are not innermost, is what a
        # transpose would pay too. Reducing the last axis is row * cols + col, as before.
        in_shape = red.in_shapes[0]
        kept, reduced = reduction_terms(in_shape, red.op.reduced_axes(in_shape, red.params))
        full = math.prod(in_shape)
        cols = math.prod(m for _, m, _ in reduced)
        rows = full // cols
        block = cols  # the elements a further input's entries spread over
        groups = red.op.row_groups(in_shape, red.params)
        if groups != 1:
            # group norm: each block of trailing reduced elements splits into consecutive
            # rows, so the input must be read as rows of a row-major array
            if kept not in ((), ((1, rows, cols),)) or reduced not in ((), ((1, cols, 1),)):
                raise UnsupportedOp(
                    f"{self.b.where}: {red.op.name} splits its reduced axes into {groups} "
                    "rows, which needs them to be the trailing axes"
                )
            if groups < 1 or cols % groups:
                raise UnsupportedOp(
                    f"{self.b.where}: {red.op.name} cannot split {cols} elements into "
                    f"{groups} equal rows"
                )
            rows, cols = rows * groups, cols // groups
            kept, reduced = ((1, rows, cols),), ((1, cols, 1),)
        index, index_sizes = _row_index(kept, reduced, rows, cols)
        out_space = math.prod(red.shape)
        self.check_space(pre, full, f"prologue of {red.op.name}")
        self.check_space(post, out_space, f"epilogue of {red.op.name}")
        for j in post:
            for kind, i in steps[j].args:
                if kind == "step" and i < r:
                    raise UnsupportedOp(
                        f"{self.b.where}: epilogue step {j} reads prologue step {i}; a fused "
                        "reduction kernel cannot do that, keep them in separate kernels"
                    )
        for k, s in enumerate(self.b.outputs):
            if s < r:
                raise UnsupportedOp(
                    f"{self.b.where}: output {k} is prologue step {s}; a fused reduction "
                    "kernel writes only the reduction and its epilogue"
                )
        kind, i = red.args[0]
        pre_lines = [line for j in pre for line in self.step_lines(j, "i", full)]
        value = self.arg(kind, i, "i", full)
        entry = _ROW_RECIPES.get(red.op.row or "")
        if entry is None:
            raise UnsupportedOp(f"{self.b.where}: no row recipe named {red.op.row!r}")
        recipe, per_row = entry
        # The recipe, not the sizes, says where the result lives: one value per row
        # (written once per row, where only ``row`` is in scope) or a whole row again
        # (written in a loop over ``i``). Comparing sizes mistook a one-column sum for a
        # row-to-row op and indexed with an ``i`` out of scope.
        out_var = "row" if per_row else "i"
        post_lines = [line for j in post for line in self.step_lines(j, out_var, out_space)]
        writes = [self.store(k, out_var, s) for k, s in enumerate(self.b.outputs)]
        params = {p: self.param_name(r, p) for p in red.params}
        # inputs after the first (an affine norm's weight and bias) are read per column,
        # or per run of block // k columns of the unsplit block (group norm's channels)
        extra = []
        extra_sizes: list[tuple[str, int]] = []
        for kind, i in red.args[1:]:
            if kind != "in":
                raise UnsupportedOp(
                    f"{self.b.where}: {red.op.name}'s input {len(extra) + 1} is computed in "
                    "the kernel; a reduction reads only its first input from a step"
                )
            k = math.prod(self.b.in_shapes[i])
            if k < 1 or block % k:
                raise UnsupportedOp(
                    f"{self.b.where}: {red.op.name}'s input {len(extra) + 1} has {k} "
                    f"elements, which do not divide the {block} reduced elements"
                )
            at = "col" if groups == 1 else "((row % xg) * cols + col)"
            if block != k:
                at = f"({at} / xs{len(extra)})"
                extra_sizes.append((f"xs{len(extra)}", block // k))
            extra.append(self.arg(kind, i, at, k))
        if groups != 1 and extra:
            extra_sizes.append(("xg", groups))
        # every recipe defines t{r} right before the tail: round it there (half dtypes)
        tail = self.rounding(r) + post_lines + writes
        body = recipe(_RowParts(r, pre_lines, value, tail, params, extra, index))
        sig, scalars = self.signature(
            fname, [("rows", rows), ("cols", cols), *index_sizes, *extra_sizes]
        )
        src = (
            self.prelude()
            + _BLOCK_REDUCE
            + sig
            + "{\n    __shared__ float red[1024];\n"
            + "    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {\n"
            + "".join(f"        {line}\n" for line in body)
            + "        __syncthreads();\n    }\n}\n"
        )
        return KernelSource(fname, src, scalars)


@dataclass(frozen=True, slots=True)
class _RowParts:
    """What a row recipe stitches together: prologue lines computing ``value`` at index
    ``i`` of the row, and tail lines (epilogue + writes) run once the result ``t{r}`` is
    known."""

    r: int
    pre: list[str]
    value: str
    tail: list[str]
    params: dict[str, str]
    extra: list[str]  # the reduction's further inputs at column ``col`` (weight, bias)
    index: str = "row * cols + col"  # the input's flat index of (row, col)


def _row_index(
    kept: tuple[tuple[int, int, int], ...],
    reduced: tuple[tuple[int, int, int], ...],
    rows: int,
    cols: int,
    names: tuple[str, str, str, str] = ("row", "col", "cols", ""),
) -> tuple[str, list[tuple[str, int]]]:
    """The C expression of the input's flat index of column ``col`` of row ``row`` from
    :func:`~oxiwork.ops.table.reduction_terms`, and the ``size_t`` arguments it uses.

    As in broadcast indexing, operations are left out by structure (innermost term: no
    division, outermost: no modulo, unit stride: no product), never by a size's value.
    ``names``: the row and column variables, the argument holding ``cols`` and a prefix of
    the arguments' names (an out-element-wise step's own, ``s{j}_``: steps do not collide).
    """
    row, col, ncols, prefix = names
    if kept in ((), ((1, rows, cols),)) and reduced in ((), ((1, cols, 1),)):
        return f"{row} * {ncols} + {col}", []
    parts: list[str] = []
    sizes: list[tuple[str, int]] = []
    for var, terms, total, pre in ((row, kept, rows, "rk"), (col, reduced, cols, "rc")):
        pre = prefix + pre
        for t, (div, mod, stride) in enumerate(terms):
            e = var
            if div != 1:
                e = f"({e} / {pre}{t}d)"
                sizes.append((f"{pre}{t}d", div))
            if mod * div != total:
                e = f"({e} % {pre}{t}m)"
                sizes.append((f"{pre}{t}m", mod))
            if stride != 1:
                e = f"{e} * {pre}{t}s"
                sizes.append((f"{pre}{t}s", stride))
            parts.append(e)
    return " + ".join(parts) or "0", sizes


def _row_loop(parts: _RowParts, inner: list[str]) -> list[str]:
    lines = [
        "for (size_t col = threadIdx.x; col < cols; col += blockDim.x) {",
        f"    size_t i = {parts.index};",
    ]
    lines += [f"    {x}" for x in (*parts.pre, *inner)]
    return [*lines, "}"]


def _reduce_recipe(
    init: str, combine: str, is_max: int, finish: str = "acc"
) -> Callable[[_RowParts], list[str]]:
    def recipe(p: _RowParts) -> list[str]:
        lines = [f"float acc = {init};"]
        lines += _row_loop(p, [f"acc = {combine.format(acc='acc', v=p.value)};"])
        lines += [f"acc = ox_block_reduce(acc, red, {is_max});", "if (threadIdx.x == 0) {"]
        lines += [f"    float t{p.r} = {finish};"] + [f"    {x}" for x in p.tail]
        return [*lines, "}"]

    return recipe


def _softmax_recipe(p: _RowParts) -> list[str]:
    lines = [f"float mx = {_NEG_INF};"]
    lines += _row_loop(p, [f"mx = fmaxf(mx, {p.value});"])
    lines += ["mx = ox_block_reduce(mx, red, 1);", "float sm = 0.0f;"]
    lines += _row_loop(p, [f"sm += expf({p.value} - mx);"])
    lines += ["sm = ox_block_reduce(sm, red, 0);"]
    lines += _row_loop(p, [f"float t{p.r} = expf({p.value} - mx) / sm;", *p.tail])
    return lines


def _log_softmax_recipe(p: _RowParts) -> list[str]:
    # x - max - log(sum(exp(x - max))), torch's log_softmax (no division, no log of 0)
    lines = [f"float mx = {_NEG_INF};"]
    lines += _row_loop(p, [f"mx = fmaxf(mx, {p.value});"])
    lines += ["mx = ox_block_reduce(mx, red, 1);", "float sm = 0.0f;"]
    lines += _row_loop(p, [f"sm += expf({p.value} - mx);"])
    lines += ["sm = logf(ox_block_reduce(sm, red, 0));"]
    lines += _row_loop(p, [f"float t{p.r} = ({p.value} - mx) - sm;", *p.tail])
    return lines


def _layer_norm_recipe(p: _RowParts) -> list[str]:
    # with a weight and bias (p.extra), each normalised value is scaled and shifted; with a
    # weight alone (layer_norm_scale: MPT's LayerNorm without bias), scaled
    norm = f"({p.value} - mean) / den"
    if len(p.extra) == 2:
        norm = f"({norm}) * {p.extra[0]} + {p.extra[1]}"
    elif p.extra:
        norm = f"({norm}) * {p.extra[0]}"
    eps = p.params["eps"]
    lines = ["float mean = 0.0f;"]
    lines += _row_loop(p, [f"mean += {p.value};"])
    lines += ["mean = ox_block_reduce(mean, red, 0) / (float)cols;", "float var = 0.0f;"]
    lines += _row_loop(p, [f"float d = {p.value} - mean;", "var += d * d;"])
    lines += [
        "var = ox_block_reduce(var, red, 0) / (float)cols;",
        f"float den = sqrtf(var + {eps});",
    ]
    lines += _row_loop(p, [f"float t{p.r} = {norm};", *p.tail])
    return lines


def _rms_norm_recipe(p: _RowParts) -> list[str]:
    # x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019, eq. 4)
    lines = ["float ms = 0.0f;"]
    lines += _row_loop(p, [f"float v = {p.value};", "ms += v * v;"])
    lines += [
        "ms = ox_block_reduce(ms, red, 0) / (float)cols;",
        f"float den = sqrtf(ms + {p.params['eps']});",
    ]
    lines += _row_loop(p, [f"float t{p.r} = ({p.value} / den) * {p.extra[0]};", *p.tail])
    return lines


def _spread_recipe(root: bool) -> Callable[[_RowParts], list[str]]:
    # torch.var / torch.std: two passes (the mean, then squared deviations), divided by
    # max(cols - correction, 0): 0 gives inf (or NaN without spread), as torch
    def recipe(p: _RowParts) -> list[str]:
        lines = ["float mean = 0.0f;"]
        lines += _row_loop(p, [f"mean += {p.value};"])
        lines += ["mean = ox_block_reduce(mean, red, 0) / (float)cols;", "float var = 0.0f;"]
        lines += _row_loop(p, [f"float d = {p.value} - mean;", "var += d * d;"])
        corr = p.params["correction"]
        lines += [
            f"var = ox_block_reduce(var, red, 0) / fmaxf((float)cols - {corr}, 0.0f);",
            "if (threadIdx.x == 0) {",
            f"    float t{p.r} = {'sqrtf(var)' if root else 'var'};",
        ]
        return [*lines, *(f"    {x}" for x in p.tail), "}"]

    return recipe


def _arg_recipe(sign: str) -> Callable[[_RowParts], list[str]]:
    # torch.argmax / argmin: the first column holding the row's extreme (of sign * x), a NaN
    # counting as the extreme (the first NaN wins, as in torch). Two passes: the
    # NaN-propagating maximum, then the least column holding it, as a maximum of -col (a
    # column below 2**24 is exact in float; the op's shape rule refuses more).
    def recipe(p: _RowParts) -> list[str]:
        v = f"({sign}({p.value}))"
        lines = [f"float mx = {_NEG_INF};"]
        lines += _row_loop(p, [f"mx = (mx != mx || {v} != {v}) ? mx + {v} : fmaxf(mx, {v});"])
        lines += ["mx = ox_block_reduce(mx, red, 2);", f"float at = {_NEG_INF};"]
        hit = f"({v} == mx || (mx != mx && {v} != {v}))"
        lines += _row_loop(p, [f"if {hit} at = fmaxf(at, -(float)col);"])
        lines += ["at = ox_block_reduce(at, red, 1);", "if (threadIdx.x == 0) {"]
        lines += [f"    float t{p.r} = -at;", *(f"    {x}" for x in p.tail)]
        return [*lines, "}"]

    return recipe


# Row recipe per OpDef.row: how a row of the (prologue-transformed) input becomes t{r},
# and whether that is one value per row (True) or a row again (False).
_ROW_RECIPES: dict[str, tuple[Callable[[_RowParts], list[str]], bool]] = {
    "sum": (_reduce_recipe("0.0f", "{acc} + {v}", 0), True),
    "max": (_reduce_recipe(_NEG_INF, "fmaxf({acc}, {v})", 1), True),
    "softmax": (_softmax_recipe, False),
    "log_softmax": (_log_softmax_recipe, False),
    "layer_norm": (_layer_norm_recipe, False),
    "mean": (_reduce_recipe("0.0f", "{acc} + {v}", 0, "acc / (float)cols"), True),
    "amax": (
        _reduce_recipe(
            _NEG_INF,
            "(({acc}) != ({acc}) || ({v}) != ({v})) ? ({acc}) + ({v}) : fmaxf({acc}, {v})",
            2,
        ),
        True,
    ),
    "rms_norm": (_rms_norm_recipe, False),
    # torch.amin: -amax(-x), exactly (a negation is exact), NaN propagating as amax's
    "amin": (
        _reduce_recipe(
            _NEG_INF,
            "(({acc}) != ({acc}) || ({v}) != ({v})) ? ({acc}) - ({v}) : fmaxf({acc}, -({v}))",
            2,
            "-acc",
        ),
        True,
    ),
    "argmax": (_arg_recipe(""), True),
    "argmin": (_arg_recipe("-"), True),
    "var": (_spread_recipe(False), True),
    "std": (_spread_recipe(True), True),
    "norm2": (_reduce_recipe("0.0f", "{acc} + ({v}) * ({v})", 0, "sqrtf(acc)"), True),
    "norm1": (_reduce_recipe("0.0f", "{acc} + fabsf({v})", 0), True),
    # count_nonzero: a float count of ones, exact below 2**24 (the op's shape rule)
    "count": (_reduce_recipe("0.0f", "{acc} + (({v}) != 0.0f ? 1.0f : 0.0f)", 0), True),
    # torch.any / torch.all: count the non-zero (zero) elements, NaN being non-zero; a
    # float count of ones is 0 exactly when there are none (it never rounds to 0)
    "any": (_reduce_recipe("0.0f", "{acc} + (({v}) != 0.0f ? 1.0f : 0.0f)", 0, "acc > 0.0f"), True),
    "all": (
        _reduce_recipe("0.0f", "{acc} + (({v}) == 0.0f ? 1.0f : 0.0f)", 0, "acc == 0.0f"),
        True,
    ),
}
