"""Generated CUDA C for kernels on non-contiguous views: strides as arguments, the C run on
the CPU (the emulated driver) equals the numpy reference, and NVRTC compiles it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from oxiwork import ComputeGraph, GraphBuilder, GraphWarning, MemcpyDir
from oxiwork.error import UnsupportedOp
from oxiwork.ops import kernel_source
from oxiwork.ops.strided import needs_strides
from oxiwork.optimizer.fusion import fuse
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import run_kernel

# name -> (shape, strides, offset) of a view of a row-major (r, c) base
LAYOUTS = {
    "T": lambda r, c: ((c, r), (1, c), 0),
    "col": lambda r, c: ((r,), (c,), c - 1),
    "expand": lambda r, c: ((3, c), (0, 1), (r - 1) * c),
    "T_slice": lambda r, c: ((c - 1, r), (1, c), 1),
}
OPS = {"copy": 1, "relu": 1, "neg": 1, "scale": 1, "add": 2, "mul": 2}


def _graph(op: str, layout: str, r: int, c: int, write: bool) -> ComputeGraph:
    """One ``op`` kernel reading a view of x (or, with ``write``, writing it)."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", r * c * 4, shape=(r, c))
    shape, strides, off = LAYOUTS[layout](r, c)
    v = b.view("v", x, shape, strides, off)
    n = int(np.prod(shape))
    other = b.alloc_external_buffer("other", n * 4, shape=shape)
    kb = b.add_kernel(op, 1, 32).op(op)
    if op == "scale":
        kb.params(alpha=-1.5)
    if write:  # op(other[, other]) -> the view: a write into x
        kb.inputs([other] * OPS[op]).outputs([v]).finish()
    else:
        y = b.alloc_buffer("y", n * 4, shape=shape)
        kb.inputs([v, other][: OPS[op]]).outputs([y]).finish()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


class TestStridedKernels:
    def test_raises_for_a_matmul_reading_a_view_whole(self) -> None:
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 24, shape=(2, 3))
        v = b.view("xT", x, (3, 2), (1, 3))
        y = b.alloc_buffer("y", 36, shape=(3, 3))
        b.add_kernel("mm", 1, 32).op("matmul").inputs([v, x]).outputs([y]).finish()
        g = b.build()
        with pytest.raises(UnsupportedOp, match=r"copy the view into a buffer of its own"):
            kernel_source(g, g.nodes[0])

    @pytest.mark.parametrize("op", ["sum", "softmax", "max"])
    def test_row_kernels_read_a_strided_view(self, tmp_path, nvrtc_compile, op: str) -> None:
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4 * 20, shape=(4, 5))
        v = b.view("xT", x, (5, 4), (1, 5))
        y = b.alloc_buffer("y", 4 * (20 if op == "softmax" else 5))
        b.add_kernel(op, 1, 32).op(op).inputs([v]).outputs([y]).finish()
        g = b.build()
        ks = kernel_source(g, g.nodes[0])
        x0 = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
        shape = g.buffer(y).array_shape
        (out,) = run_kernel(ks.source, ks.function_name, [x0], [shape], ks.scalar_args, tmp_path)
        np.testing.assert_allclose(out, evaluate(g, {"x": x0})["y"], rtol=1e-5, atol=1e-6)
        assert nvrtc_compile(ks.source, ks.function_name, "sm_90")

    def test_a_fused_chain_reads_a_strided_view(self, tmp_path, nvrtc_compile) -> None:
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4 * 12, shape=(3, 4))
        v = b.view("xT", x, (4, 3), (1, 4))
        t, y = b.alloc_buffer("t", 48, shape=(4, 3)), b.alloc_buffer("y", 48, shape=(4, 3))
        b.add_kernel("relu", 1, 32).op("relu").fusible(True).inputs([v]).outputs([t]).finish()
        b.add_kernel("scale", 1, 32).op("scale").params(alpha=3.0).fusible(True).inputs(
            [t]
        ).outputs([y]).finish()
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 48, src=y)
        g = b.build()
        fused = fuse(g).graph
        (k,) = [n for n in fused.nodes if n.fused is not None]
        ks = kernel_source(fused, k)
        assert "__restrict__" not in ks.source  # a view may share bytes with another argument
        x0 = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
        (out,) = run_kernel(ks.source, ks.function_name, [x0], [(4, 3)], ks.scalar_args, tmp_path)
        np.testing.assert_array_equal(out, evaluate(g, {"x": x0})["y"])
        assert nvrtc_compile(ks.source, ks.function_name, "sm_90")

    @settings(max_examples=25, deadline=None)
    @given(
        layout=st.sampled_from(["T", "col", "T_slice"]),
        r=st.integers(2, 4),
        c=st.integers(2, 4),
        lead=st.integers(1, 3),
        op=st.sampled_from(["add", "mul"]),
        first=st.booleans(),
    )
    def test_a_strided_view_broadcasts_in_c(self, tmp_path_factory, layout, r, c, lead, op, first):
        # Funnel adds a strided slice to a tensor with more axes: the view's element at the
        # broadcast index, read at its strides (the C refused it before)
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", r * c * 4, shape=(r, c))
        shape, strides, off = LAYOUTS[layout](r, c)
        v = b.view("v", x, shape, strides, off)
        big = (lead, *shape)
        other = b.alloc_external_buffer("other", 4 * int(np.prod(big)), shape=big)
        y = b.alloc_buffer("y", 4 * int(np.prod(big)), shape=big)
        ins = [v, other] if first else [other, v]
        b.add_kernel(op, 1, 32).op(op).inputs(ins).outputs([y]).finish()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GraphWarning)
            g = b.build()
        ks = kernel_source(g, g.nodes[0])
        rng = np.random.default_rng(r * 100 + c * 10 + lead)
        x0 = rng.standard_normal((r, c)).astype(np.float32)
        o0 = rng.standard_normal(big).astype(np.float32)
        # kernel inputs in order; the view's pointer is its base's plus its offset
        arrays = [x0.reshape(-1)[off:] if i == v else o0 for i in ins]
        (out,) = run_kernel(
            ks.source, ks.function_name, arrays, [big], ks.scalar_args, tmp_path_factory.mktemp("b")
        )
        np.testing.assert_array_equal(out, evaluate(g, {"x": x0, "other": o0})["y"])

    def test_contiguous_views_use_the_ordinary_kernel(self) -> None:
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 48, shape=(4, 3))
        v = b.view("rows", x, (2, 3), offset=3)
        b.add_kernel("relu", 1, 32).op("relu").inputs([v]).outputs(
            [b.alloc_buffer("y", 24, shape=(2, 3))]
        ).finish()
        g = b.build()
        assert not needs_strides(g, g.nodes[0])
        assert "strided" not in kernel_source(g, g.nodes[0]).source

    @settings(max_examples=30, deadline=None)
    @given(
        st.sampled_from(sorted(OPS)),
        st.sampled_from(sorted(LAYOUTS)),
        st.integers(2, 4),
        st.integers(2, 5),
        st.booleans(),
    )
    def test_generated_c_equals_the_reference(
        self, tmp_path_factory, op: str, layout: str, r: int, c: int, write: bool
    ) -> None:
        assume(not (write and layout == "expand"))  # a write through a zero stride races
        g = _graph(op, layout, r, c, write)
        node = g.nodes[0]
        ks = kernel_source(g, node)
        assert needs_strides(g, node) and "x" in ks.source
        rng = np.random.default_rng([r, c])
        x0 = rng.standard_normal((r, c)).astype(np.float32)
        view = g.buffer_by_name("v")
        other = rng.standard_normal(view.array_shape).astype(np.float32)
        want = evaluate(g, {"x": x0, "other": other})
        flat = x0.reshape(-1)
        tmp = tmp_path_factory.mktemp("strided")
        if write:
            extent = view.view_extent - view.view_offset
            ins = [other] * OPS[op]
            (out,) = run_kernel(ks.source, ks.function_name, ins, [(extent,)], ks.scalar_args, tmp)
            got = np.lib.stride_tricks.as_strided(
                out, view.array_shape, tuple(4 * s for s in view.strides or ())
            )
            np.testing.assert_array_equal(got, want["v"])
        else:
            ins = [flat[view.view_offset :], other][: OPS[op]]
            (out,) = run_kernel(
                ks.source, ks.function_name, ins, [view.array_shape], ks.scalar_args, tmp
            )
            np.testing.assert_array_equal(out, want["y"])

    @pytest.mark.parametrize("layout", sorted(LAYOUTS))
    @pytest.mark.parametrize("op", sorted(OPS))
    def test_compiles_with_nvrtc(self, nvrtc_compile, op: str, layout: str) -> None:
        for write in (False, True):
            g = _graph(op, layout, 3, 4, write)
            ks = kernel_source(g, g.nodes[0])
            assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
