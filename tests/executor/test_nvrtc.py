"""Tests for oxiwork.executor.nvrtc: NVRTC compilation, errors, and the cubin cache.

NVRTC needs no GPU, so these run in CI; they skip only when cuda.bindings.nvrtc is not
importable. ``TestCompilesEveryGeneratedKernel`` is the CI check that every kernel the
code generator can emit (each op alone, the quick start, fused groups from random DAGs)
compiles for sm_80 and sm_90.
"""

from __future__ import annotations

import math
import sys
import warnings

import pytest

from oxiwork.error import BackendUnavailable, GraphError, InvalidArgument
from oxiwork.executor import nvrtc as nv
from oxiwork.executor.nvrtc import (
    CI_ARCHS,
    CompileError,
    KernelCache,
    cache_key,
    compile_cuda,
    compile_module,
    compile_options,
    module_source,
)

try:
    from cuda.bindings import nvrtc as _nvrtc  # noqa: F401

    HAVE_NVRTC = True
except ImportError:
    HAVE_NVRTC = False

needs_nvrtc = pytest.mark.skipif(not HAVE_NVRTC, reason="cuda.bindings.nvrtc not importable")

TWICE = (
    'extern "C" __global__ void twice(const float* in0, float* out0, size_t n)\n'
    "{\n"
    "    size_t i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) out0[i] = 2.0f * in0[i];\n"
    "}\n"
)


class _K:
    def __init__(self, function_name: str, source: str) -> None:
        self.function_name = function_name
        self.source = source


class TestOptions:
    def test_raises_on_malformed_arch(self):
        with pytest.raises(InvalidArgument, match="look like 'sm_90'"):
            compile_options("compute_90")

    def test_raises_on_too_old_arch(self):
        with pytest.raises(InvalidArgument, match="sm_75"):
            compile_options("sm_70")

    def test_exact_disables_fmad(self):
        assert "--fmad=false" in compile_options("sm_90", exact=True)
        assert "--fmad=false" not in compile_options("sm_90", exact=False)

    def test_include_dirs_only_when_the_source_includes(self):
        assert not any(o.startswith("-I") for o in nv.unit_options(TWICE, "sm_90"))
        if HAVE_NVRTC:
            opts = nv.unit_options("#include <cuda_fp16.h>\n" + TWICE, "sm_90")
            assert any(o.startswith("-I") for o in opts)

    def test_key_depends_on_every_part(self):
        base = cache_key(TWICE, ("a",), "sm_90")
        assert base != cache_key(TWICE + " ", ("a",), "sm_90")
        assert base != cache_key(TWICE, ("b",), "sm_90")
        assert base != cache_key(TWICE, ("a",), "sm_80")


class TestModuleSource:
    def test_raises_on_same_name_different_code(self):
        with pytest.raises(InvalidArgument, match="'f'"):
            module_source([_K("f", "// one\n"), _K("f", "// two\n")])

    def test_kernel_at_maps_lines_back(self):
        m = module_source([_K("a", "1\n2\n3\n"), _K("b", "4\n5")])
        assert m.source == "1\n2\n3\n4\n5\n"
        assert [m.kernel_at(k) for k in range(1, 6)] == ["a", "a", "a", "b", "b"]


@needs_nvrtc
class TestCompile:
    def test_cubin_is_an_elf_image(self):
        mod = compile_cuda(TWICE, arch="sm_90", cache=KernelCache())
        assert mod.cubin.startswith(b"\x7fELF")
        assert mod.key == cache_key(TWICE, mod.options, "sm_90")

    def test_raises_compile_error_with_log_and_numbered_lines(self):
        bad = [
            _K("good", TWICE.replace("twice", "good")),
            _K("bad", TWICE.replace("twice", "bad").replace("2.0f * in0[i]", "undefined_thing")),
        ]
        with pytest.raises(CompileError) as info:
            compile_module(bad, arch="sm_80", cache=KernelCache())
        e = info.value
        assert isinstance(e, GraphError)
        assert "undefined_thing" in e.log
        assert e.kernels == ("bad",)
        assert e.lines == (9,)  # line 4 of the second kernel, which starts at line 6
        assert ">  9 |     if (i < n) out0[i] = undefined_thing;" in str(e)
        assert "sm_80" in str(e)

    def test_memory_cache_hits(self):
        cache = KernelCache()
        a = compile_cuda(TWICE, arch="sm_80", cache=cache)
        b = compile_cuda(TWICE, arch="sm_80", cache=cache)
        assert a.cubin == b.cubin
        assert (cache.hits, cache.misses) == (1, 1)

    def test_disk_cache_round_trip_and_corruption(self, tmp_path):
        first = compile_cuda(TWICE, arch="sm_90", cache=KernelCache(tmp_path))
        files = list(tmp_path.rglob("*.cubin"))
        assert [f.name for f in files] == [f"{first.key}.cubin"]
        assert files[0].parent.name.startswith("nvrtc-")
        fresh = KernelCache(tmp_path)
        assert compile_cuda(TWICE, arch="sm_90", cache=fresh).cubin == first.cubin
        assert fresh.hits == 1
        files[0].write_bytes(b"not a cubin")  # corrupted: ignored and rebuilt
        again = KernelCache(tmp_path)
        assert compile_cuda(TWICE, arch="sm_90", cache=again).cubin == first.cubin
        assert again.misses == 1
        assert files[0].read_bytes() == first.cubin

    def test_missing_nvrtc_raises_backend_unavailable(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
        with pytest.raises(BackendUnavailable, match=r"pip install 'oxiwork\[nvrtc\]'"):
            compile_cuda(TWICE + "// new text, not cached\n", arch="sm_90", cache=KernelCache())


# ------------------------------------------------------------------ every generated kernel
def _accepts(op, shapes) -> bool:
    from oxiwork import ops
    from oxiwork.error import InvalidArgument

    try:
        ops.infer_shape(op, shapes, op.defaults, op.name)
    except InvalidArgument:
        return False
    return True


def _single_op_graphs():
    """One graph per registered op with CUDA code: a kernel on [4, 8] float inputs."""
    from oxiwork import ops
    from oxiwork.builder import GraphBuilder
    from oxiwork.error import GraphError
    from oxiwork.node import DTYPES

    for name, op in sorted(ops.REGISTRY.items()):
        if not op.has_cuda:  # an importer's opaque op (a torch reference only)
            continue
        b = GraphBuilder()
        rows, cols = 4, 8
        nchw = (1, rows, cols, cols)  # conv2d, pooling, pad (oxiwork.ops.lib_conv)
        ncdhw = (1, rows, 3, cols, cols)  # conv3d, 3-d pooling
        # input shapes for each op: the first of these candidates its shape rule accepts
        candidates = [
            [(rows, cols), (cols,)],  # bias_add
            [(rows, cols), (cols, cols)],  # matmul, mm
            [nchw, (rows, rows, 3, 3)],  # conv2d
            [nchw, (rows, rows, 3, 3), (rows,)],  # conv2d_bias
            [ncdhw, (rows, rows, 3, 3, 3)],  # conv3d
            [ncdhw, (rows, rows, 3, 3, 3), (rows,)],  # conv3d_bias
            [(1, rows, cols), (rows, rows, 3)],  # conv1d
            [(1, rows, cols), (rows, rows, 3), (rows,)],  # conv1d_bias
            [(2, rows, cols), (2, cols, 3)],  # bmm
            [(3,), (rows, cols), (cols, 3)],  # addmm
            [(rows, 3), (2, rows, cols), (2, cols, 3)],  # baddbmm
            [(rows, cols), (3, cols), (3,)],  # linear
            [nchw, (rows,), (rows,), (rows,), (rows,)],  # batch_norm (x, mean, var, w, b)
            [(rows, cols), (cols,), (cols,)],  # layer_norm_affine, group_norm_affine
            [(rows, cols), (3,), (3, cols)],  # index_put (x, row indices, values)
        ]
        candidates = [c for c in candidates if len(c) == op.arity]
        candidates += [[(rows, cols)] * op.arity, [nchw] * op.arity, [ncdhw] * op.arity]
        shapes = next((c for c in candidates if _accepts(op, c)), None)
        if shapes is None:  # an importer's op for one call site (gemm_<hash>): its shapes only
            continue
        # float32 inputs if the op takes them, else the first of: int64 indices last
        # (embedding, gather), a bool condition first (where), all bool or all int64
        # (bitwise and logical ops); the result in the dtype the op's rule gives
        n = op.arity
        for dtypes in (
            ["float32"] * n,
            ["float32"] * (n - 1) + ["int64"],
            ["float32", "int64", "float32"][:n],  # (index_put)
            ["bool"] + ["float32"] * (n - 1),
            ["bool"] * n,
            ["int64"] * n,
        ):
            try:
                out_dt = ops.infer_dtype(op, dtypes, op.defaults, name) or "float32"
                break
            except GraphError:
                continue
        else:
            raise AssertionError(f"op {name!r} takes none of the dtype lists tried here")
        ins = [
            b.alloc_external_buffer(f"in{k}", DTYPES[d] * math.prod(s), dtype=d, shape=s)
            for k, (s, d) in enumerate(zip(shapes, dtypes, strict=True))
        ]
        out_shape = ops.infer_shape(op, shapes, op.defaults, name)
        out = b.alloc_buffer(
            "out", DTYPES[out_dt] * math.prod(out_shape), dtype=out_dt, shape=out_shape
        )
        b.add_kernel(name, 1, 128).op(name).inputs(ins).outputs([out]).finish()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield name, b.build()


def _plan_kernels():
    """KernelSources of the quick start and of random DAGs, fused and not."""
    from oxiwork.examples import quick_start, random_op_dag
    from oxiwork.executor.lowering import iter_kernel_sources
    from tests.executor.gpu_fakes import build_plan

    graphs = [("quick_start", quick_start())]
    graphs += [(f"random_{seed}", random_op_dag(seed, 24)) for seed in range(4)]
    for name, g in graphs:
        for fusion in (True, False):
            yield (
                f"{name}-{'fused' if fusion else 'unfused'}",
                list(iter_kernel_sources(build_plan(g, fusion=fusion))),
            )


@needs_nvrtc
class TestCompilesEveryGeneratedKernel:
    @pytest.mark.parametrize("arch", CI_ARCHS)
    def test_each_op_alone(self, arch):
        from oxiwork import ops
        from oxiwork.ops import lib_conv, lib_dtype, lib_elementwise, lib_reduce

        sources, names = [], set()
        for name, g in _single_op_graphs():
            (k,) = g.kernels()
            sources.append(ops.kernel_source(g, k))
            names.add(name)
        # every op the libraries ship is covered (ops an importer registered for one call
        # site are skipped when no candidate shape fits them)
        shipped = set(ops.BUILTIN_OPS) | {op.name for op in lib_conv.CONV_OPS}
        shipped |= {op.name for op in lib_dtype.DTYPE_OPS}
        shipped |= {op.name for op in lib_elementwise.ELEMENTWISE_OPS}
        shipped |= {op.name for op in lib_elementwise.BOOL_OPS}
        shipped |= {op.name for op in lib_elementwise.INT_OPS}
        assert shipped | set(lib_reduce.MATMULS) | set(lib_reduce.REDUCTIONS) <= names
        mod = compile_module(sources, arch=arch, cache=KernelCache())
        assert mod.cubin.startswith(b"\x7fELF")
        assert len(mod.function_names) == len(sources)

    @pytest.mark.parametrize("arch", CI_ARCHS)
    def test_plans_fused_and_unfused(self, arch):
        fused_seen = 0
        for name, sources in _plan_kernels():
            mod = compile_module(sources, arch=arch, cache=KernelCache())
            assert mod.cubin.startswith(b"\x7fELF"), name
            fused_seen += sum("->" in s.source.split("\n", 1)[0] for s in sources)
        assert fused_seen > 0  # the fused groups really were compiled
