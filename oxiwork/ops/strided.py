"""CUDA C for element-wise kernels that read or write non-contiguous views.

A view (:attr:`Buffer.base <oxiwork.node.Buffer.base>`) is passed to a kernel as a pointer
to its first element (its base's address plus ``view_offset`` elements). A contiguous view
needs nothing more: the ordinary kernels of :mod:`oxiwork.ops.codegen` index it as a whole
buffer. A non-contiguous one (a transpose, a column, an ``expand``) is indexed through its
strides: for flat element ``i`` the kernel splits ``i`` into the view's coordinates (last
axis fastest, as a row-major buffer would hold them) and sums coordinate times stride. The
dimensions and strides are kernel arguments (``size_t``, named ``x<k>_d<j>``/``x<k>_s<j>``
for the ``k``-th pointer argument, inputs then outputs), like every size in generated code,
so a CUDA graph can update them without recompiling.

Only single-op element-wise kernels (an op with an ``expr``) are generated here: the
torch importer reads a strided view in any other library op through an explicit ``copy``
kernel, and fusion leaves kernels that touch views alone, so this is the whole set.

Example
-------
>>> from oxiwork import GraphBuilder
>>> b = GraphBuilder()
>>> x = b.alloc_external_buffer("x", 24, shape=(2, 3))
>>> y = b.alloc_buffer("y", 24, shape=(3, 2))
>>> _ = b.add_kernel("t", 1, 6).op("copy").inputs([b.view("xT", x, (3, 2), (1, 3))]).outputs([y]).finish()
>>> g = b.build()
>>> src, scalars = strided_kernel(g, g.nodes[0], "t_0")
>>> scalars[:5]
(('size_t', 'n', 6), ('size_t', 'x0_d0', 3), ('size_t', 'x0_d1', 2), ('size_t', 'x0_s0', 1), ('size_t', 'x0_s1', 3))
>>> "in0[a0]" in src and "a0 += (r0 % x0_d1) * x0_s1;" in src
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oxiwork.error import UnsupportedOp
from oxiwork.node import GraphNode
from oxiwork.ops.program import bind

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = [
    "ValueTypes",
    "needs_strides",
    "strided_kernel",
    "strided_view",
    "view_index",
    "view_scalars",
    "writes_strided",
]


def strided_view(graph: ComputeGraph, bid: Any) -> bool:
    """True if buffer ``bid`` is a non-contiguous view (read or written by its strides)."""
    return bid in graph.views() and not graph.buffer(bid).is_contiguous


def writes_strided(graph: ComputeGraph, node: GraphNode) -> bool:
    """True if ``node`` writes a non-contiguous view (only :func:`strided_kernel` does)."""
    return bool(graph.views()) and any(strided_view(graph, b) for b in node.outputs)


def view_scalars(prefix: str, b: Any) -> list[tuple[str, str, Any]]:
    """The ``size_t`` arguments of a strided view: its dimensions, then its strides.

    >>> from oxiwork.node import Buffer, BufferId
    >>> view_scalars("x0", Buffer(BufferId(1), "v", 24, shape=(3, 2), base=BufferId(0), strides=(1, 3)))
    [('size_t', 'x0_d0', 3), ('size_t', 'x0_d1', 2), ('size_t', 'x0_s0', 1), ('size_t', 'x0_s1', 3)]
    """
    shape, strides = b.array_shape, b.strides or ()
    return [("size_t", f"{prefix}_d{j}", d) for j, d in enumerate(shape)] + [
        ("size_t", f"{prefix}_s{j}", s) for j, s in enumerate(strides)
    ]


def view_index(prefix: str, rank: int, var: str) -> str:
    """The C expression of the element of a strided view at flat (row-major) index ``var``.

    >>> view_index("x0", 2, "i")
    '(((i) / x0_d1) % x0_d0) * x0_s0 + ((i) % x0_d1) * x0_s1'
    """
    terms = []
    for j in range(rank):
        divs = "".join(f" / {prefix}_d{q}" for q in range(j + 1, rank))
        inner = f"(({var}){divs})" if divs else f"({var})"
        terms.append(f"({inner} % {prefix}_d{j}) * {prefix}_s{j}")
    return " + ".join(terms)


def needs_strides(graph: ComputeGraph, node: GraphNode) -> bool:
    """True if ``node`` reads or writes a non-contiguous view.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> needs_strides(g, g.nodes[1])
    False
    """
    views = graph.views()
    return bool(views) and any(
        b in views and not graph.buffer(b).is_contiguous for b in (*node.inputs, *node.outputs)
    )


@dataclass(frozen=True, slots=True)
class ValueTypes:
    """How a strided kernel types its values (what :mod:`oxiwork.ops.codegen` knows of
    dtypes): the C type of each pointer argument (inputs, then the output), a template per
    input turning a loaded element into a compute value (``"__half2float({})"`` widens a
    float16; ``"{}"`` keeps it), the template turning the op's value into the stored one
    (rounding to a half dtype once, as every op does), and the source's prelude (headers).
    """

    ctypes: tuple[str, ...]
    loads: tuple[str, ...]
    store: str
    prelude: str = ""


def strided_kernel(
    graph: ComputeGraph, node: GraphNode, fname: str, types: ValueTypes | None = None
) -> tuple[str, tuple[tuple[str, str, Any], ...]]:
    """The source and scalar arguments of element-wise kernel ``node`` indexing its
    non-contiguous views by their strides (see the module docstring); ``types`` for buffers
    other than float32 (default: every pointer a ``float*``, the source exactly as before
    dtypes).

    Raises
    ------
    UnsupportedOp
        ``node`` is not one element-wise op, or its buffers hold different element counts.
    """
    bound = bind(graph, node)
    if len(bound.steps) != 1 or bound.steps[0].op.expr is None or len(node.outputs) != 1:
        raise UnsupportedOp(
            f"{bound.where}: it reads or writes a non-contiguous view, and only a single "
            "element-wise op indexes views by strides; copy the view into a buffer of its "
            "own first (op 'copy')"
        )
    st = bound.steps[0]
    buffers = [graph.buffer(b) for b in (*node.inputs, *node.outputs)]
    n = math.prod(st.shape)
    if any(b.num_elements != n for b in buffers):
        raise UnsupportedOp(
            f"{bound.where}: a view kernel pairs elements by position, but its buffers hold "
            f"{sorted({b.num_elements for b in buffers})} elements"
        )
    scalars: list[tuple[str, str, Any]] = [("size_t", "n", n)]
    index: list[str] = []  # per pointer argument, the C index of element i
    lines: list[str] = []
    for k, b in enumerate(buffers):
        if b.is_contiguous:
            index.append("i")
            continue
        shape, strides = b.array_shape, b.strides or ()
        scalars += [("size_t", f"x{k}_d{j}", d) for j, d in enumerate(shape)]
        scalars += [("size_t", f"x{k}_s{j}", s) for j, s in enumerate(strides)]
        lines.append(f"size_t a{k} = 0, r{k} = i;")
        for j in reversed(range(len(shape))):  # the last axis varies fastest
            lines.append(f"a{k} += (r{k} % x{k}_d{j}) * x{k}_s{j};")
            if j:
                lines.append(f"r{k} /= x{k}_d{j};")
        index.append(f"a{k}")
    ins = len(node.inputs)
    if types is None:
        types = ValueTypes(("float",) * (ins + 1), ("{}",) * ins, "{}")
    args = [types.loads[k].format(f"in{k}[{index[k]}]") for k in range(ins)]
    scalars += [("float", p, v) for p, v in st.params.items()]
    expr = types.store.format(st.op.expr.format(*args, **{p: p for p in st.params}))
    # No __restrict__: a view may share its base's bytes with another argument.
    ptrs = [f"const {types.ctypes[k]}* in{k}" for k in range(ins)] + [f"{types.ctypes[ins]}* out0"]
    sig = ptrs + [f"{c} {name}" for c, name, _ in scalars]
    body = "".join(f"        {line}\n" for line in lines)
    source = (
        types.prelude + f"// generated by oxiwork: {st.op.name} (strided views)\n"
        f'extern "C" __global__ void {fname}(\n    ' + ",\n    ".join(sig) + ")\n{\n"
        "    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
        "         i += (size_t)gridDim.x * blockDim.x) {\n"
        f"{body}"
        f"        out0[{index[ins]}] = {expr};\n"
        "    }\n}\n"
    )
    return source, tuple(scalars)
