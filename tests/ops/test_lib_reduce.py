"""The matmul variants and reductions of ``oxiwork.ops.lib_reduce``.

Each op's reference is checked against numpy's own formula on random shapes (and, for the
strided GEMM, random layouts read with ``as_strided``), its generated CUDA C is compiled
with NVRTC and run on the CPU (the emulated launcher of ``tests/executor``) against the
reference, and an element-wise epilogue fused into it gives the unfused chain's values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.ops import kernel_source, lib_reduce
from oxiwork.ops.lib_reduce import Strided, strided_gemm
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

F32 = np.float32
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
dims = st.integers(1, 5)


def _rand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-2, 2, shape).astype(F32)


@st.composite
def matmul_cases(draw):
    """(op name, input shapes, params, numpy formula of the result)."""
    name = draw(st.sampled_from(sorted(lib_reduce.MATMULS)))
    b, m, n, k = draw(dims), draw(dims), draw(dims), draw(dims)
    beta = draw(st.sampled_from([1.0, 0.0, 0.5, -2.0]))
    alpha = draw(st.sampled_from([1.0, 0.25, -1.5]))
    if name == "mm":
        lead = draw(st.sampled_from([(m,), (1, m), (2, m)]))  # leading axes fold into M
        return name, [(*lead, k), (k, n)], {}, lambda x, y: x @ y
    if name == "bmm":
        return name, [(b, m, k), (b, k, n)], {}, lambda x, y: x @ y
    if name == "linear":
        lead = draw(st.sampled_from([(m,), (2, m)]))
        return name, [(*lead, k), (n, k), (n,)], {}, lambda x, w, c: x @ w.T + c
    p = {"beta": beta, "alpha": alpha}
    if name == "addmm":
        c = draw(st.sampled_from([(n,), (1, n), (m, n), (m, 1), (1,)]))
        shapes = [c, (m, k), (k, n)]
    else:
        c = draw(st.sampled_from([(n,), (m, n), (b, 1, n), (b, m, n), (1, m, 1)]))
        shapes = [c, (b, m, k), (b, k, n)]

    def formula(c, x, y):
        prod = F32(alpha) * (x @ y)
        return prod if beta == 0 else F32(beta) * c + prod

    return name, shapes, p, formula


def _graph(op_name: str, shapes, params, epilogue: str | None = None):
    """One kernel applying ``op_name`` to external inputs (then ``epilogue`` on its result)."""
    op = ops.get(op_name)
    b = GraphBuilder()
    ins = [
        b.alloc_external_buffer(f"in{k}", 4 * math.prod(s), shape=s) for k, s in enumerate(shapes)
    ]
    out_shape = ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")
    mid = b.alloc_buffer("mid" if epilogue else "out", 4 * math.prod(out_shape), shape=out_shape)
    kb = b.add_kernel(op_name, 2, 32).op(op_name).inputs(ins).outputs([mid]).fusible(True)
    if params:
        kb.params(**params)
    kb.finish()
    if epilogue:
        out = b.alloc_buffer("out", 4 * math.prod(out_shape), shape=out_shape)
        b.add_kernel(epilogue, 2, 32).op(epilogue).inputs([mid]).outputs([out]).fusible(
            True
        ).finish()
    return b.build(), out_shape


def _run_c(graph, node, xs, so_dir):
    ks = kernel_source(graph, node)
    return run_kernel(
        ks.source, ks.function_name, xs, list(bind(graph, node).out_shapes), ks.scalar_args, so_dir
    )


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("lib_reduce_kernels")


class TestMatmuls:
    def test_raises_on_mismatched_shapes(self) -> None:
        with pytest.raises(InvalidArgument, match="inner dimensions"):
            ops.infer_shape(ops.get("bmm"), [(2, 3, 4), (2, 5, 6)], {}, "kernel 'b'")
        with pytest.raises(InvalidArgument, match="does not broadcast"):
            ops.infer_shape(ops.get("addmm"), [(3,), (2, 4), (4, 5)], {}, "kernel 'a'")
        with pytest.raises(InvalidArgument, match="bias of 5 elements"):
            ops.infer_shape(ops.get("linear"), [(2, 4), (5, 4), (4,)], {}, "kernel 'l'")

    def test_raises_on_strided_operand_past_its_buffer(self) -> None:
        with pytest.raises(InvalidArgument, match="reads past its buffer"):
            strided_gemm([(4, 3), (3, 2)], 1, 4, 2, 3, Strided(1, 0, 3, 1), Strided.dense(3, 2))

    def test_every_variant_is_an_out_elementwise_head_with_cuda(self) -> None:
        for name in lib_reduce.MATMULS:
            op = ops.get(name)
            assert op.fusion_class is ops.FusionClass.OUT_ELEMENTWISE and op.element is not None
        assert ops.get("addmm").defaults == {"beta": 1.0, "alpha": 1.0}

    @SETTINGS
    @given(case=matmul_cases(), seed=st.integers(0, 2**16))
    def test_reference_is_numpys_formula(self, case, seed) -> None:
        name, shapes, params, formula = case
        rng = np.random.default_rng(seed)
        xs = [_rand(rng, s) for s in shapes]
        got = ops.get(name).reference(xs, **params)
        want = formula(*xs)
        assert got.dtype == F32
        assert got.shape == ops.infer_shape(ops.get(name), shapes, params, "t")
        np.testing.assert_allclose(got.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)

    def test_beta_zero_ignores_nan_in_the_added_input(self) -> None:
        # torch.addmm: with beta = 0 the input is ignored, a NaN in it included
        c = np.full(3, np.nan, F32)
        x, y = np.ones((2, 4), F32), np.ones((4, 3), F32)
        got = ops.get("addmm").reference([c, x, y], beta=0.0, alpha=2.0)
        assert np.array_equal(got, np.full((2, 3), 8.0, F32))

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(case=matmul_cases(), seed=st.integers(0, 2**16), fuse=st.booleans())
    def test_generated_c_equals_reference_fused_or_not(self, case, seed, fuse, so_dir) -> None:
        name, shapes, params, _ = case
        rng = np.random.default_rng(seed)
        xs = [_rand(rng, s) for s in shapes]
        g, _ = _graph(name, shapes, params, epilogue="tanh" if fuse else None)
        inputs = {f"in{k}": x for k, x in enumerate(xs)}
        want = evaluate(g, inputs)["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=fuse)
        kernels = plan.graph.kernels()
        if fuse:  # the epilogue fused into the matmul head
            assert len(kernels) == 1 and kernels[0].fused is not None
        sim = SequentialExecutor(plan).run(inputs).outputs["out"]
        np.testing.assert_allclose(sim.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)
        node = kernels[-1] if fuse else kernels[0]
        if fuse:
            (c,) = _run_c(plan.graph, node, xs, so_dir)
        else:
            (c,) = _run_c(g, node, xs, so_dir)
        np.testing.assert_allclose(c.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("name", sorted(lib_reduce.MATMULS))
    def test_compiles_with_nvrtc_alone_and_fused(self, name, nvrtc_compile) -> None:
        shapes = {
            "mm": [(2, 3, 4), (4, 5)],
            "bmm": [(2, 3, 4), (2, 4, 5)],
            "addmm": [(5,), (3, 4), (4, 5)],
            "baddbmm": [(2, 1, 5), (2, 3, 4), (2, 4, 5)],
            "linear": [(2, 3, 4), (5, 4), (5,)],
        }[name]
        for epilogue in (None, "gelu"):
            g, _ = _graph(name, shapes, {}, epilogue)
            g = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
            for node in g.kernels():
                nvrtc_compile(kernel_source(g, node).source, f"{name}_{epilogue}")


@st.composite
def layouts(draw):
    """A strided GEMM: sizes, one buffer per operand, and layouts that fit in them."""
    bt, m, n, k = draw(st.integers(1, 3)), draw(dims), draw(dims), draw(dims)

    def operand(rows: int, cols: int) -> tuple[Strided, int]:
        order = draw(st.permutations([0, 1, 2]))  # which axis varies fastest
        sizes = {0: bt, 1: rows, 2: cols}
        broadcast = {ax for ax in (0, 1, 2) if draw(st.integers(0, 5)) == 0}  # stride 0
        strides, step = [0, 0, 0], 1
        for ax in reversed(order):
            if ax not in broadcast:
                strides[ax] = step
                step *= sizes[ax] + draw(st.integers(0, 1))  # maybe a gap (a slice)
        off = draw(st.integers(0, 3))
        lay = Strided(off, *strides)
        return lay, lay.last((bt, rows, cols)) + 1 + draw(st.integers(0, 2))

    (a, na), (b, nb), (c, nc) = operand(m, k), operand(k, n), operand(m, n)
    added = draw(st.booleans())
    return bt, m, n, k, a, b, c if added else None, [na, nb] + ([nc] if added else [])


class TestStridedGemm:
    @SETTINGS
    @given(case=layouts(), seed=st.integers(0, 2**16))
    def test_reference_reads_the_layouts(self, case, seed) -> None:
        bt, m, n, k, a, b, c, sizes = case
        rng = np.random.default_rng(seed)
        bufs = [_rand(rng, (s,)) for s in sizes]

        def view(x, lay, d):
            return as_strided(x[lay.offset :], d, [4 * s for s in (lay.batch, lay.row, lay.col)])

        inputs = (0, 1) if c is None else (0, 1, 2)
        op = strided_gemm([(s,) for s in sizes], bt, m, n, k, a, b, c, inputs=inputs)
        params = {} if c is None else {"beta": 0.5, "alpha": 2.0}
        got = op.reference(bufs, **params)
        want = view(bufs[0], a, (bt, m, k)) @ view(bufs[1], b, (bt, k, n))
        if c is not None:
            want = F32(0.5) * view(bufs[2], c, (bt, m, n)) + F32(2.0) * want
        np.testing.assert_allclose(got.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)
        assert strided_gemm([(s,) for s in sizes], bt, m, n, k, a, b, c, inputs=inputs) is op

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(case=layouts(), seed=st.integers(0, 2**16))
    def test_generated_c_equals_reference(self, case, seed, so_dir) -> None:
        bt, m, n, k, a, b, c, sizes = case
        rng = np.random.default_rng(seed)
        bufs = [_rand(rng, (s,)) for s in sizes]
        inputs = (0, 1) if c is None else (0, 1, 2)
        op = strided_gemm([(s,) for s in sizes], bt, m, n, k, a, b, c, inputs=inputs)
        params = {} if c is None else {"beta": -1.0, "alpha": 0.5}
        g, _ = _graph(op.name, [(s,) for s in sizes], params)
        want = evaluate(g, {f"in{j}": x for j, x in enumerate(bufs)})["out"]
        (got,) = _run_c(g, g.kernels()[0], bufs, so_dir)
        np.testing.assert_allclose(got.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-5)

    def test_one_buffer_read_twice(self) -> None:
        # x.T @ x, both operands in one buffer (attention's q and k come from one qkv)
        x = np.arange(12, dtype=F32).reshape(4, 3)
        op = strided_gemm(
            [(4, 3)], 1, 3, 3, 4, Strided(0, 0, 1, 3), Strided.dense(4, 3), inputs=(0, 0)
        )
        assert op.arity == 1 and np.array_equal(op.reference([x]), x.T @ x)


class TestFusionAcrossReshapes:
    def test_epilogue_reading_a_reshape_of_the_head_fuses(self) -> None:
        # linear on a (2, 4, 6) input writes its (2, 4, 5) result into an (8, 5) buffer (as
        # torch's addmm does); the residual add reads that buffer with another (8, 5) one.
        # The fused add sees the head's value in the head's shape: fusion compares element
        # counts, and binding reads the value reshaped, so the pair is one kernel.
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4 * 48, shape=(2, 4, 6))
        w = b.alloc_external_buffer("w", 4 * 30, shape=(5, 6))
        bias = b.alloc_external_buffer("bias", 4 * 5, shape=(5,))
        res = b.alloc_external_buffer("res", 4 * 40, shape=(8, 5))
        h = b.alloc_buffer("h", 4 * 40, shape=(8, 5))
        out = b.alloc_buffer("out", 4 * 40, shape=(8, 5))
        b.add_kernel("fc", 1, 32).op("linear").inputs([x, w, bias]).outputs([h]).fusible(
            True
        ).finish()
        b.add_kernel("res", 1, 32).op("add").inputs([h, res]).outputs([out]).fusible(True).finish()
        g = b.build()
        rng = np.random.default_rng(0)
        inputs = {n: _rand(rng, g.buffer_by_name(n).array_shape) for n in ("x", "w", "bias", "res")}
        want = evaluate(g, inputs)["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
        (k,) = plan.graph.kernels()
        assert k.fused is not None and [s.op for s in k.fused.steps] == ["linear", "add"]
        got = SequentialExecutor(plan).run(inputs).outputs["out"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(
            want.reshape(2, 4, 5),
            inputs["x"] @ inputs["w"].T + inputs["bias"] + inputs["res"].reshape(2, 4, 5),
            rtol=1e-5,
            atol=1e-5,
        )


@st.composite
def attention_cases(draw):
    """A strided attention: sizes, one buffer per operand, layouts, output permutation."""
    bt, m, n, k, d = (draw(st.integers(1, 3)) for _ in range(5))

    def operand(rows: int, cols: int) -> tuple[Strided, int]:
        off = draw(st.integers(0, 2))
        if draw(st.booleans()):  # read transposed (k^T from a row-major k)
            lay = Strided(off, rows * cols, 1, rows)
        else:
            lay = Strided(off, rows * cols, cols, 1)
        if draw(st.integers(0, 3)) == 0:
            lay = Strided(lay.offset, 0, lay.row, lay.col)  # one matrix for every batch
        return lay, lay.last((bt, rows, cols)) + 1

    ops_ = [operand(m, k), operand(k, n), operand(n, d)]
    mask = draw(st.sampled_from([None, "full", "heads", "keys"]))
    if mask == "full":
        ops_.append((Strided(0, m * n, n, 1), bt * m * n))
    elif mask == "heads":  # one (m, n) mask for every batch, as a (1, 1, m, n) mask
        ops_.append((Strided(0, 0, n, 1), m * n))
    elif mask == "keys":  # a padding mask over the keys only, as (b, 1, 1, n)
        ops_.append((Strided(0, n, 0, 1), bt * n))
    # the heads' permute(0, 2, 1, 3) before the output projection: out[m, b, d]
    perm = (0, ((m, d), (bt, m * d), (d, 1))) if draw(st.booleans()) else None
    alpha = draw(st.sampled_from([1.0, 0.125, -0.5]))
    divisor = draw(st.sampled_from([1.0, 8.0, 3.0]))
    return bt, m, n, k, d, ops_, perm, {"alpha": alpha, "divisor": divisor}


def _attention_op(case):
    bt, m, n, k, d, ops_, perm, _ = case
    lays = [lay for lay, _ in ops_]
    out = (m, bt, d) if perm else (bt, m, d)
    return lib_reduce.strided_attention(
        [(s,) for _, s in ops_], bt, m, n, k, d, *lays[:3], *lays[3:], out=out, perm=perm
    )


def _unfused_attention(case, bufs):
    """The same attention as library kernels one by one (GEMM, scale, divide, mask add,
    softmax, GEMM), evaluated one by one: its (batch, m, d) result."""
    bt, m, n, k, d, ops_, _, params = case
    (lq, _), (lk, _), (lv, _) = ops_[:3]
    b = GraphBuilder()

    def buf(name, shape, external=False):
        alloc = b.alloc_external_buffer if external else b.alloc_buffer
        return alloc(name, 4 * math.prod(shape), shape=shape)

    ins = [buf(f"in{j}", (s,), True) for j, (_, s) in enumerate(ops_[:3])]
    inputs = {f"in{j}": x for j, x in enumerate(bufs[:3])}
    s1 = strided_gemm([(ops_[0][1],), (ops_[1][1],)], bt, m, n, k, lq, lk, out=(bt, m, n))
    steps = [(s1.name, [ins[0], ins[1]], {}), ("scale", None, {"alpha": params["alpha"]})]
    steps.append(("div_scalar", None, {"other": params["divisor"]}))
    if len(ops_) == 4:  # the mask, as the dense (b, m, n) array torch's add broadcasts
        lm, _ = ops_[3]
        dense = as_strided(bufs[3][lm.offset :], (bt, m, n), [4 * lm.batch, 4 * lm.row, 4 * lm.col])
        inputs["maskd"] = np.ascontiguousarray(dense)
        steps.append(("add", [None, buf("maskd", (bt, m, n), True)], {}))
    steps.append(("softmax", None, {}))
    s2 = strided_gemm([(bt, m, n), (ops_[2][1],)], bt, m, d, n, Strided.dense(m, n, True), lv)
    steps.append((s2.name, [None, ins[2]], {}))
    prev = None
    for j, (op, reads, p) in enumerate(steps):
        shape = (bt, m, d) if j == len(steps) - 1 else (bt, m, n)
        out = buf("out" if j == len(steps) - 1 else f"t{j}", shape)
        reads = [prev if r is None else r for r in (reads or [None])]
        b.add_kernel(f"k{j}", 1, 32).op(op).params(**p).inputs(reads).outputs([out]).fusible(
            True
        ).finish()
        prev = out
    return evaluate(b.build(), inputs)["out"]


class TestStridedAttention:
    def test_raises_on_bad_layouts(self) -> None:
        dense = Strided.dense(2, 2, True)
        with pytest.raises(InvalidArgument, match="reads past its buffer"):
            lib_reduce.strided_attention([(4,), (8,), (8,)], 2, 2, 2, 2, 2, dense, dense, dense)
        with pytest.raises(InvalidArgument, match="do not name"):
            lib_reduce.strided_attention([(8,)] * 3, 2, 2, 2, 2, 2, dense, dense, dense, dense)
        with pytest.raises(InvalidArgument, match="reads outside the result"):
            lib_reduce.strided_attention(
                [(8,)] * 3, 2, 2, 2, 2, 2, dense, dense, dense, perm=(1, ((8, 1),))
            )

    @SETTINGS
    @given(case=attention_cases(), seed=st.integers(0, 2**16))
    def test_equals_the_unfused_kernels(self, case, seed) -> None:
        # fused == unfused: one attention kernel gives the values of GEMM, scale, divide,
        # mask add, softmax and GEMM run one by one (then permuted as perm says)
        op = _attention_op(case)
        rng = np.random.default_rng(seed)
        bufs = [_rand(rng, (s,)) for _, s in case[5]]
        want = _unfused_attention(case, bufs).reshape(-1)[
            lib_reduce.Attention(*case[:5], None, None, None, None, (), (), case[6]).result_index()
        ]
        g, _ = _graph(op.name, [(s,) for _, s in case[5]], case[7])
        plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
        got = SequentialExecutor(plan).run({f"in{j}": x for j, x in enumerate(bufs)}).outputs
        np.testing.assert_allclose(got["out"].reshape(-1), want, rtol=1e-5, atol=1e-6)
        assert _attention_op(case) is op

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @settings(SETTINGS, max_examples=6)  # each new source is a g++ build
    @given(case=attention_cases(), seed=st.integers(0, 2**16))
    def test_generated_c_equals_reference(self, case, seed, so_dir) -> None:
        op = _attention_op(case)
        rng = np.random.default_rng(seed)
        bufs = [_rand(rng, (s,)) for _, s in case[5]]
        g, _ = _graph(op.name, [(s,) for _, s in case[5]], case[7])
        want = evaluate(g, {f"in{j}": x for j, x in enumerate(bufs)})["out"]
        (got,) = _run_c(g, g.kernels()[0], bufs, so_dir)
        np.testing.assert_allclose(got.reshape(-1), want.reshape(-1), rtol=1e-5, atol=1e-6)

    def test_compiles_with_nvrtc_alone_and_fused(self, nvrtc_compile) -> None:
        dense = Strided.dense(3, 3, True)
        for mask, perm in ((None, None), (Strided(0, 0, 3, 1), (0, ((3, 3), (2, 9), (3, 1))))):
            lays = [dense, dense, dense] + ([mask] if mask else [])
            op = lib_reduce.strided_attention(
                [(18,)] * 3 + ([(9,)] if mask else []), 2, 3, 3, 3, 3, *lays,
                out=(3, 2, 3) if perm else (2, 3, 3), perm=perm,
            )  # fmt: skip
            for epilogue in (None, "gelu"):
                g, _ = _graph(op.name, [(18,)] * 3 + ([(9,)] if mask else []), {}, epilogue)
                g = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
                assert len(g.kernels()) == 1  # the epilogue fuses into the attention head
                nvrtc_compile(kernel_source(g, g.kernels()[0]).source, f"attn_{epilogue}")
