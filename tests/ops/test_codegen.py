"""CUDA code generation: conventions, safety, determinism, and NVRTC compiles (no GPU)."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest

from oxiwork import GraphBuilder, MemcpyDir, ops
from oxiwork.error import GraphWarning, InvalidArgument, UnsupportedOp
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.ops import kernel_source
from oxiwork.ops.program import bind, run
from oxiwork.optimizer.fusion import fuse
from oxiwork.reference import generated_input
from tests.executor.emulated_driver import CXX, run_kernel

ARCHS = ("sm_80", "sm_90")

# op -> input shapes for a one-kernel graph
SHAPES = {
    "relu": [(4, 8)],
    "scale": [(4, 8)],
    "add": [(4, 8), (4, 8)],
    "sub": [(4, 8), (4, 8)],
    "mul": [(4, 8), (4, 8)],
    "div": [(4, 8), (4, 8)],
    "neg": [(4, 8)],
    "exp": [(4, 8)],
    "log": [(4, 8)],
    "tanh": [(4, 8)],
    "sigmoid": [(4, 8)],
    "gelu": [(4, 8)],
    "copy": [(4, 8)],
    "bias_add": [(4, 8), (8,)],
    "sum": [(4, 8)],
    "max": [(4, 8)],
    "softmax": [(4, 8)],
    "layer_norm": [(4, 8)],
    "matmul": [(4, 8), (8, 3)],
    "transpose": [(4, 8)],
}


def single(op_name: str, name: str | None = None, **params):
    """A graph with one kernel applying ``op_name`` to external inputs; returns (graph, node)."""
    op = ops.get(op_name)
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"in{k}", 4 * math.prod(s), shape=s)
        for k, s in enumerate(SHAPES[op_name])
    ]
    out_shape = ops.infer_shape(op, SHAPES[op_name], op.defaults, "t")
    out = b.alloc_buffer("out", 4 * math.prod(out_shape), shape=out_shape)
    kb = b.add_kernel(name or op_name, 1, 128).op(op_name).inputs(ins).outputs([out])
    if params:
        kb.params(**params)
    kb.finish()
    g = b.build()
    return g, g.kernels()[0]


def fused_kernels():
    """Fused nodes from example graphs: chains, diamonds, reduction prologue/epilogue."""
    out = []
    for g in [quick_start(), transformer_block(1), *(random_op_dag(s, 40) for s in range(12))]:
        fg = fuse(g).graph
        out += [(fg, n) for n in fg.kernels() if n.fused is not None]
    return out


class TestConventions:
    def test_raises_on_opaque_kernel(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 64)
        b.add_kernel("mystery", 1, 32).inputs([x]).outputs([x]).finish()
        g = b.build()
        with pytest.raises(UnsupportedOp, match=r"kernel 'mystery' \(id 0\) has no op.*\.op\("):
            kernel_source(g, g.nodes[0])

    def test_raises_on_non_kernel(self):
        g = quick_start()
        with pytest.raises(InvalidArgument, match="not a kernel"):
            kernel_source(g, g.nodes[0])

    def test_raises_on_reference_only_custom_op(self):
        ops.custom("ref_only_t", reference=lambda xs: xs[0])
        try:
            b = GraphBuilder()
            x = b.alloc_external_buffer("x", 64)
            y = b.alloc_buffer("y", 64)
            b.add_kernel("ref_only_t", 1, 32).inputs([x]).outputs([y]).finish()
            g = b.build()
            with pytest.raises(UnsupportedOp, match="no CUDA code"):
                kernel_source(g, g.kernels()[0])
        finally:
            ops.REGISTRY.pop("ref_only_t")

    @pytest.mark.parametrize("op_name", sorted(SHAPES))
    def test_signature_convention(self, op_name):
        g, node = single(op_name)
        ks = kernel_source(g, node)
        head = ks.source[ks.source.index('extern "C"') :]
        ptrs = re.findall(r"(const float\*|float\*)(?: __restrict__)? (in\d+|out\d+)", head)
        assert [p[1] for p in ptrs] == [f"in{k}" for k in range(len(node.inputs))] + ["out0"]
        for ctype, name, value in ks.scalar_args:
            assert ctype in {"float", "size_t", "int"}
            assert f"{ctype} {name}" in head
            assert isinstance(value, (int, float))
        assert ks.function_name == f"{op_name}_{int(node.id)}"

    def test_params_are_arguments_not_constants(self):
        g, node = single("scale", alpha=0.125)
        ks = kernel_source(g, node)
        assert ("float", "alpha", 0.125) in ks.scalar_args
        assert "0.125" not in ks.source

    def test_hostile_names_make_valid_identifiers(self):
        g, node = single("relu", name="<img src=x onerror=alert(1)>")
        ks = kernel_source(g, node)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", ks.function_name)
        assert "<img" not in ks.source and "alert(" not in ks.source

    def test_deterministic(self):
        a = [kernel_source(g, n).source for g, n in fused_kernels()[:20]]
        b = [kernel_source(g, n).source for g, n in fused_kernels()[:20]]
        assert a == b

    def test_function_names_unique_per_graph(self):
        g = transformer_block(2)
        names = [kernel_source(g, n).function_name for n in g.kernels()]
        assert len(set(names)) == len(names)

    def test_fused_quick_start_composes_expressions(self):
        g = fuse(quick_start()).graph
        (node,) = [n for n in g.kernels() if n.fused is not None]
        ks = kernel_source(g, node)
        assert "float t0 = fmaxf(in0[i], 0.0f);" in ks.source
        assert "float t1 = (t0 * s1_alpha);" in ks.source
        assert "out0[i] = t1;" in ks.source
        assert ("float", "s1_alpha", 2.0) in ks.scalar_args

    def test_broadcast_input_indexed_modulo(self):
        g, node = single("bias_add")
        ks = kernel_source(g, node)
        assert "in1[(i % m1m0)]" in ks.source
        assert ("size_t", "m1m0", 8) in ks.scalar_args


class TestNvrtc:
    @pytest.mark.parametrize("arch", ARCHS)
    @pytest.mark.parametrize("op_name", sorted(SHAPES))
    def test_every_op_compiles(self, nvrtc_compile, op_name, arch):
        g, node = single(op_name)
        ks = kernel_source(g, node)
        assert nvrtc_compile(ks.source, ks.function_name, arch)

    @pytest.mark.parametrize("arch", ARCHS)
    def test_fused_kernels_compile(self, nvrtc_compile, arch):
        kernels = fused_kernels()
        rows = [n for _, n in kernels if any(ops.get(s.op).row for s in n.fused.steps)]
        assert rows, "the examples should produce fused reduction kernels"
        heads = [(g, n) for g, n in kernels if n.fused.steps[0].op == "matmul"]
        assert heads, "the examples should produce matmul kernels with fused epilogues"
        seen = set()
        for g, node in heads + kernels:
            ks = kernel_source(g, node)
            shape = tuple(s.op for s in node.fused.steps)
            if shape in seen and len(seen) > 25:
                continue
            seen.add(shape)
            assert nvrtc_compile(ks.source, ks.function_name, arch)

    def test_whole_graph_compiles_as_one_unit(self, nvrtc_compile):
        # backends may join every kernel of a graph into one module: helpers must not clash
        g = fuse(transformer_block(1)).graph
        sources = [kernel_source(g, n) for n in g.kernels()]
        assert len({ks.function_name for ks in sources}) == len(sources)
        assert nvrtc_compile("".join(ks.source for ks in sources), "unit", "sm_90")

    def test_custom_source_compiles(self, nvrtc_compile):
        src = (
            'extern "C" __global__ void my_twice(const float* in0, float* out0, size_t n)'
            " { size_t i = blockIdx.x * blockDim.x + threadIdx.x;"
            " if (i < n) out0[i] = 2.0f * in0[i]; }"
        )
        ops.custom("twice_t", source=src, function_name="my_twice", reference=lambda xs: 2 * xs[0])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", GraphWarning)
                b = GraphBuilder()
                x = b.alloc_buffer("x", 64)
                y = b.alloc_buffer("y", 64)
                up = b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
                k = b.add_kernel("twice_t", 1, 32).inputs([x]).outputs([y]).finish()
                b.dep(up, k)
                g = b.build()
            ks = kernel_source(g, g.node(k))
            assert ks.function_name == "my_twice"
            assert ks.scalar_args == (("size_t", "n", 16),)
            assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
        finally:
            ops.REGISTRY.pop("twice_t")


# ---------------------------------------------------------------------------------------
# Run the generated CUDA C on the CPU and compare with the numpy references.
#
# There may be no GPU in CI, but the kernels' arithmetic and indexing can still be
# checked: the emulated driver's C++ build of the CUDA C (tests/executor/emulated_driver.py,
# threads of a synchronising block run as coroutines) runs each kernel on a grid of three
# blocks of four threads, so grid-stride loops take several trips and block reductions
# combine several threads. Skipped without a C++ compiler.
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler to emulate kernels")

GRID = 3


def emulate(graph, node, tmp_path, arrays, block=4):
    """Run ``node``'s generated kernel on ``arrays`` on the CPU; returns (outputs, numpy's)."""
    ks = kernel_source(graph, node)
    bound = bind(graph, node)
    ins = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
    outs = run_kernel(
        ks.source, ks.function_name, ins, list(bound.out_shapes), ks.scalar_args, tmp_path,
        grid=GRID, block=block,
    )  # fmt: skip
    return outs, run(bound, ins)


def inputs_for(graph, node):
    arrays = []
    for bid in node.inputs:
        a = generated_input(graph.buffer(bid), seed=int(bid))
        arrays.append(np.abs(a) + 0.5 if node.op in ("log", "div") else a)
    return arrays


@needs_cxx
@pytest.mark.parametrize("op_name", sorted(SHAPES))
def test_single_op_kernels_match_numpy(op_name, tmp_path):
    params = {"alpha": -1.5} if op_name == "scale" else {}
    g, node = single(op_name, **params)
    got, want = emulate(g, node, tmp_path, inputs_for(g, node))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def _fused_cases():
    seen = {}
    for g in [quick_start(), transformer_block(1, tokens=4, d_model=8, d_ff=16)] + [
        random_op_dag(s, 30, reductions=True) for s in range(8)
    ]:
        fg = fuse(g).graph
        for n in fg.kernels():
            if n.fused is None:
                continue
            key = tuple((s.op, s.args) for s in n.fused.steps)
            seen.setdefault(key, (fg, n))
    return list(seen.values())[:30]


@needs_cxx
def test_fused_kernels_match_numpy(tmp_path):
    cases = _fused_cases()
    assert any(any(ops.get(s.op).row for s in n.fused.steps) for _, n in cases)
    assert any(n.fused.steps[0].op == "matmul" for _, n in cases)
    for g, node in cases:
        arrays = [np.abs(a) + 0.5 for a in inputs_for(g, node)]  # keep log/div finite
        got, want = emulate(g, node, tmp_path, arrays)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=node.name)


@needs_cxx
@pytest.mark.parametrize("op_name", ["relu", "max", "softmax"])
def test_nan_handling_matches_the_generated_kernels(op_name, tmp_path):
    # CUDA's fmaxf skips a NaN operand where np.maximum propagates it: the references must
    # compute what the kernels compute, or a GPU run and the simulator disagree on any NaN
    # (found by the emulated driver on random DAGs with log of negative numbers).
    g, node = single(op_name)
    x = inputs_for(g, node)[0].copy()
    x[0, 3] = np.nan  # one NaN in a row
    x[1, :] = np.nan  # a row of NaNs
    got, want = emulate(g, node, tmp_path, [x])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, equal_nan=True)
    if op_name != "softmax":  # softmax of a row holding a NaN is NaN on both sides
        assert not np.isnan(want[0]).all()


@needs_cxx
@pytest.mark.parametrize("op_name", ["sum", "max", "softmax", "layer_norm"])
def test_one_column_rows(op_name, tmp_path):
    # A row of one element: sum/max still write one value per row. The generator used to
    # tell "one value per row" from "a row again" by comparing sizes, which are equal here,
    # and emitted out0[i] outside the loop that declares i (found by test_special_values).
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", 16, shape=(4, 1))
    shape = (4,) if op_name in ("sum", "max") else (4, 1)
    y = b.alloc_buffer("y", 16, shape=shape)
    b.add_kernel(op_name, 1, 4).op(op_name).inputs([x]).outputs([y]).finish()
    g = b.build()
    arr = np.array([[1.5], [-2.0], [0.25], [3.0]], np.float32)
    got, want = emulate(g, g.kernels()[0], tmp_path, [arr])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
