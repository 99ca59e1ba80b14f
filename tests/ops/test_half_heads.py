"""float16 and bfloat16 GEMM heads, convolutions, pooling, pad, cat and strided copies in C.

Their element generators index their inputs only (``typed_pointers``), so half buffers are
read as floats (``ox_wide``), accumulated in float32 and rounded once per op; a strided
copy of a half view loads, widens and rounds back (exact). The generated C, run on the CPU
(the emulated launcher of ``tests/executor``), equals the simulator's reference: exactly
for ops that move or compare values, within one rounding of the dtype for sums (the
reference sums in numpy's order, the kernel in its own).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from oxiwork import GraphBuilder, ops
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source
from oxiwork.ops.lib_reduce import Strided, strided_gemm
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the C")

NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
ULP = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
CONV = {"stride_h": 2.0, "stride_w": 1.0, "pad_top": 1.0, "pad_bottom": 1.0,
        "pad_left": 1.0, "pad_right": 0.0}  # fmt: skip
POOL = {"kernel_h": 2.0, "kernel_w": 2.0, "stride_h": 2.0, "stride_w": 2.0}

# (op, input shapes, params, exact?)
CASES = {
    "linear": ("linear", [(2, 3, 8), (5, 8), (5,)], {}, False),
    "bmm": ("bmm", [(2, 3, 6), (2, 6, 4)], {}, False),
    "addmm": ("addmm", [(4,), (3, 6), (6, 4)], {"beta": 0.5, "alpha": 2.0}, False),
    "depthwise": ("conv2d", [(1, 4, 6, 5), (4, 1, 3, 3)], CONV, False),
    "conv_bias": ("conv2d_bias", [(2, 3, 5, 5), (4, 3, 3, 3), (4,)], CONV, False),
    "max_pool": ("max_pool2d", [(1, 2, 5, 6)], POOL, True),
    "avg_pool": ("avg_pool2d", [(1, 2, 4, 6)], POOL, False),
    "adaptive": ("adaptive_avg_pool2d", [(2, 3, 5, 4)], {"out_h": 2.0, "out_w": 3.0}, False),
    "pad": ("constant_pad", [(2, 3, 4)], {"pad_left": 1.0, "pad_top": 2.0, "value": 0.5}, True),
    "cat": ("cat_2", [(2, 3), (2, 5)], {"axis": 1.0}, True),
}


def _run_c(graph, node, arrays, so_dir):
    ks = kernel_source(graph, node)
    bound = bind(graph, node)
    outs = [NP[d] for d in bound.out_dtypes]
    return run_kernel(
        ks.source, ks.function_name, arrays, list(bound.out_shapes), ks.scalar_args, so_dir,
        out_dtypes=outs,
    )  # fmt: skip


def _graph(op_name, shapes, params, dtype, epilogue=None, view=None):
    """``op_name`` on external inputs of ``dtype`` (then ``epilogue``); with ``view`` =
    (shape, strides), input 0 is read through that view of its buffer."""
    it = DTYPES[dtype]
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"in{k}", it * math.prod(s), dtype=dtype, shape=s)
        for k, s in enumerate(shapes)
    ]
    read = list(ins)
    if view is not None:
        read[0] = b.view("v", ins[0], view[0], view[1])
        shapes = [view[0], *shapes[1:]]
    op = ops.get(op_name)
    out_shape = ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")
    size = it * math.prod(out_shape)
    mid = b.alloc_buffer("mid" if epilogue else "out", size, dtype=dtype, shape=out_shape)
    kb = b.add_kernel(op_name, 2, 32).op(op_name).inputs(read).outputs([mid]).fusible(True)
    if params:
        kb.params(**params)
    kb.finish()
    if epilogue:
        out = b.alloc_buffer("out", size, dtype=dtype, shape=out_shape)
        kb = b.add_kernel(epilogue, 2, 32).op(epilogue).inputs([mid]).outputs([out])
        kb.fusible(True).finish()
    return b.build()


def _inputs(graph, dtype, seed):
    rng = np.random.default_rng(seed)
    names = [b.name for b in graph.buffers if b.external]
    return {n: rng.uniform(-2, 2, graph.buffer_by_name(n).array_shape).astype(NP[dtype]) for n in names}  # fmt: skip


def _check(graph, dtype, exact, so_dir, fusion=False):
    inputs = _inputs(graph, dtype, 0)
    want = evaluate(graph, inputs)["out"]
    g = ExecutionPlan.build(graph, max_streams=1, fusion=fusion).graph if fusion else graph
    vals = {g.buffer_by_name(n).id: v for n, v in inputs.items()}
    for nid in g.topological_order():
        node = g.node(nid)
        if node.is_kernel:
            # a view is passed as its base's elements (its offset is 0 here)
            args = [vals[b if g.buffer(b).base is None else g.buffer(b).base] for b in node.inputs]
            vals.update(zip(node.outputs, _run_c(g, node, args, so_dir), strict=True))
    got = vals[g.buffer_by_name("out").id]
    assert got.dtype == want.dtype == NP[dtype]
    got, want = got.astype(np.float32).reshape(-1), want.astype(np.float32).reshape(-1)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:  # one rounding apart at most (the sums' orders differ), scaled by the values
        tol = ULP[dtype] * max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=ULP[dtype], atol=tol)


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("half_heads")


# each op in one of the two dtypes, alternating (both share the ox_wide loads and the
# rounding stores; each C build costs about a second), linear and conv in both
PAIRS = [(c, sorted(NP)[k % 2]) for k, c in enumerate(sorted(CASES))]
PAIRS += [(c, d) for c in ("linear", "conv_bias") for d in NP if (c, d) not in PAIRS]


@pytest.mark.parametrize("case, dtype", PAIRS)
def test_head_in_c_equals_reference(case, dtype, so_dir) -> None:
    op_name, shapes, params, exact = CASES[case]
    fusion = case in ("linear", "conv_bias")  # with a fused epilogue, rounded in the kernel
    g = _graph(op_name, shapes, params, dtype, epilogue="gelu" if fusion else None)
    _check(g, dtype, exact, so_dir, fusion)


@pytest.mark.parametrize("dtype", sorted(NP))
def test_strided_gemm_and_copy_of_a_view_in_c(dtype, so_dir) -> None:
    # x.T @ x read in place from one (4, 3) buffer, and a copy of x's transposed view
    op = strided_gemm([(4, 3)], 1, 3, 3, 4, Strided(0, 0, 1, 3), Strided.dense(4, 3), inputs=(0, 0))  # fmt: skip
    _check(_graph(op.name, [(4, 3)], {}, dtype), dtype, False, so_dir)
    _check(_graph("copy", [(4, 3)], {}, dtype, view=((3, 4), (1, 3))), dtype, True, so_dir)


@pytest.mark.parametrize("dtype", sorted(NP))
def test_copy_into_a_strided_view_in_c(dtype, so_dir) -> None:
    # out.T = x: the kernel writes through a transposed view (oxiwork.ops.strided)
    it = DTYPES[dtype]
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", it * 12, dtype=dtype, shape=(3, 4))
    out = b.alloc_buffer("out", it * 12, dtype=dtype, shape=(4, 3))
    view = b.view("outT", out, (3, 4), (1, 3))
    b.add_kernel("t", 2, 32).op("copy").inputs([x]).outputs([view]).finish()
    g = b.build()
    ks = kernel_source(g, g.kernels()[0])
    assert "(strided views)" in ks.source and f"{'__half' if dtype == 'float16' else '__nv_bfloat16'}* out0" in ks.source  # fmt: skip
    xv = _inputs(g, dtype, 1)["x"]
    want = evaluate(g, {"x": xv})["out"]
    (got,) = _run_c(g, g.kernels()[0], [xv], so_dir)
    assert np.array_equal(got.reshape(-1).view(np.uint16), want.reshape(-1).view(np.uint16))
    assert np.array_equal(want.astype(np.float32), xv.astype(np.float32).T)
