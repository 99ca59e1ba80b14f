"""Dtypes through the op table: result dtype rules, references computing in float32 with
one rounding per op, the simulator's typed arena views, fusion, the cost model, verify.

The semantics checked (PyTorch's): a float16/bfloat16 op widens its inputs to float32,
computes, and rounds its result once to its dtype; a fused chain rounds each step to the
step's dtype, so fused == unfused bit for bit.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.cost import kernel_work
from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source, lib_conv, lib_dtype
from oxiwork.ops.program import bind
from oxiwork.ops.table import COMPUTE_DTYPES
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel
from tests.ops.test_special_values import EXACT

FLOATS = ("float32", "float16", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _np(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Bit-for-bit equal in the array's dtype but for NaN payloads (compared as float32)."""
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} vs {want.dtype}"
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32), err_msg=what)


def _ew_graph(name: str, dtype: str, shapes: list[tuple[int, ...]], out_dtype: str | None = None):
    op = ops.get(name)
    b = GraphBuilder()
    it = DTYPES[dtype]
    ins = [
        b.alloc_external_buffer(f"in{k}", it * math.prod(s), dtype=dtype, shape=s)
        for k, s in enumerate(shapes)
    ]
    out_shape = ops.infer_shape(op, shapes, op.defaults, "t")
    od = out_dtype or dtype
    out = b.alloc_buffer("out", DTYPES[od] * math.prod(out_shape), dtype=od, shape=out_shape)
    b.add_kernel(name, 1, 32).op(name).inputs(ins).outputs([out]).finish()
    return b.build()


def _float_ops() -> list[str]:
    """Built-in ops whose rule accepts every float dtype and whose reference computes."""
    return sorted(
        n
        for n in ops.BUILTIN_OPS
        if ops.get(n).reference is not None
        and ops.get(n).dtype in (ops.table.float_dtype, ops.table.numeric_dtype)
    )


def _shapes(op: ops.OpDef) -> list[tuple[int, ...]]:
    for shapes in ([(2, 5)] * op.arity, [(2, 5), (5,)], [(2, 5), (5, 3)]):
        if len(shapes) != op.arity:
            continue
        try:
            ops.infer_shape(op, shapes, op.defaults, "probe")
        except InvalidArgument:
            continue
        return shapes
    raise AssertionError(f"no shapes for {op.name}")


class TestRules:
    def test_raises_int_input_to_float_op_at_build(self):
        b = GraphBuilder()
        ids = b.alloc_external_buffer("ids", 80, dtype="int64", shape=(10,))
        y = b.alloc_buffer("y", 40, shape=(10,))
        b.add_kernel("r", 1, 32).op("relu").inputs([ids]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=r"input 0 is int64.*cast_float32"):
            b.build()

    def test_raises_store_of_another_dtype(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 20, dtype="float16", shape=(10,))
        y = b.alloc_buffer("y", 40, shape=(10,))
        b.add_kernel("r", 1, 32).op("relu").inputs([x]).outputs([y]).finish()
        with pytest.raises(
            InvalidArgument, match=r"computes float16 .* buffer 'y' of dtype float32"
        ):
            b.build()

    def test_raises_alignment_below_element_size(self):
        b = GraphBuilder()
        with pytest.raises(InvalidArgument, match=r"alignment 4 is smaller than its int64"):
            b.alloc_buffer("x", 64, dtype="int64", alignment=4)

    @pytest.mark.parametrize("a, b, want", [
        ("float16", "float16", "float16"),
        ("bfloat16", "bfloat16", "bfloat16"),
        ("float16", "bfloat16", "float32"),
        ("float16", "float32", "float32"),
        ("bfloat16", "float32", "float32"),
    ])  # fmt: skip
    def test_float_promotion_is_torchs(self, a, b, want):
        import torch

        t = {n: getattr(torch, n) for n in FLOATS}
        assert str(torch.promote_types(t[a], t[b])) == f"torch.{want}"
        assert ops.table.float_dtype([a, b], {}) == want


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestFloatMath:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("name", _float_ops())
    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_half_op_is_float32_math_rounded_once(self, name, dtype, data):
        op = ops.get(name)
        shapes = _shapes(op)
        xs = [
            data.draw(hnp.arrays(np.float32, s, elements=st.floats(-50, 50, width=32))).astype(
                dtype
            )
            for s in shapes
        ]
        g = _ew_graph(name, dtype, shapes)
        inputs = {f"in{k}": x for k, x in enumerate(xs)}
        with np.errstate(all="ignore"):
            want = np.asarray(
                op.reference([x.astype(np.float32) for x in xs], **op.defaults), np.float32
            ).astype(dtype)
        ref = evaluate(g, inputs)["out"]
        _same(ref.reshape(want.shape), want, f"{name}/{dtype}: reference")
        sim = SequentialExecutor(ExecutionPlan.build(g, max_streams=1, fusion=False)).run(inputs)
        _same(sim.outputs["out"].reshape(want.shape), want, f"{name}/{dtype}: simulator")

    @pytest.mark.parametrize("dtype", FLOATS)
    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        names=st.lists(st.sampled_from(["relu", "exp", "tanh", "scale", "gelu", "neg", "sigmoid"]),
                       min_size=2, max_size=4),
        data=st.data(),
        streams=st.integers(1, 4),
    )  # fmt: skip
    def test_fused_chain_rounds_each_step(self, dtype, names, data, streams):
        b = GraphBuilder()
        it = DTYPES[dtype]
        cur = b.alloc_external_buffer("x", it * 6, dtype=dtype, shape=(2, 3))
        for j, n in enumerate(names):
            out = b.alloc_buffer(
                "out" if j == len(names) - 1 else f"t{j}", it * 6, dtype=dtype, shape=(2, 3)
            )
            b.add_kernel(f"k{j}", 1, 32).op(n).inputs([cur]).outputs([out]).fusible(True).finish()
            cur = out
        g = b.build()
        x = data.draw(hnp.arrays(np.float32, (2, 3), elements=st.floats(-4, 4, width=32)))
        inputs = {"x": x.astype(dtype)}
        want = evaluate(g, inputs)["out"]
        assert want.dtype == _np(dtype)
        for fusion in (False, True):
            plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
            if fusion:
                assert plan.kernel_count_fused == 1
                fused = plan.graph.kernels()[0]
                assert [st.dtype for st in bind(plan.graph, fused).steps] == [dtype] * len(names)
            got = SequentialExecutor(plan).run(inputs).outputs["out"]
            _same(got, want, f"{names} {dtype} fusion={fusion}")


class TestCost:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("name", ["relu", "sum", "matmul", "softmax"])
    def test_half_kernels_move_half_the_bytes(self, name, dtype):
        shapes = _shapes(ops.get(name))
        g32, gh = _ew_graph(name, "float32", shapes), _ew_graph(name, dtype, shapes)
        f32 = kernel_work(g32, g32.kernels()[0])
        half = kernel_work(gh, gh.kernels()[0])
        assert half[0] == f32[0]
        assert half[1] == f32[1] / 2


# ------------------------------------------------------------------ generated C, per dtype
needs_cxx = pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("dtype_kernels")


def _run_c(graph, node, arrays, so_dir):
    """The node's generated kernel run on the CPU (the emulated driver's C++ build)."""
    ks = kernel_source(graph, node)
    bound = bind(graph, node)
    return run_kernel(
        ks.source,
        ks.function_name,
        arrays,
        list(bound.out_shapes),
        ks.scalar_args,
        so_dir,
        out_dtypes=[_np(d) for d in bound.out_dtypes],
    )


def _c_graph(graph, inputs, so_dir):
    """Every kernel of ``graph`` as generated C, in topological order: the buffers' values."""
    vals = {graph.buffer_by_name(n).id: v for n, v in inputs.items()}
    for nid in graph.topological_order():
        node = graph.node(nid)
        if node.is_kernel:
            outs = _run_c(graph, node, [vals[b] for b in node.inputs], so_dir)
            vals.update(zip(node.outputs, outs, strict=True))
    return vals[graph.buffer_by_name("out").id]


def _bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal bit for bit (floats: NaN positions equal, payloads free; -0.0 != 0.0)."""
    assert got.dtype == want.dtype, f"{what}: {got.dtype} vs {want.dtype}"
    g, w = got.reshape(-1), want.reshape(-1)
    if want.dtype.name in ("float32", "float16", "bfloat16"):
        g32, w32 = g.astype(np.float32), w.astype(np.float32)
        assert np.array_equal(np.isnan(g32), np.isnan(w32)), f"{what}: NaNs {g} vs {w}"
        ok = ~np.isnan(w32)
        assert np.array_equal(g32[ok], w32[ok]), f"{what}: {g} vs {w}"
        assert np.array_equal(np.signbit(g32[ok]), np.signbit(w32[ok])), f"{what}: zero signs"
    else:
        assert np.array_equal(g, w), f"{what}: {g} vs {w}"


@needs_cxx
@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestGeneratedC:
    @pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
    @pytest.mark.parametrize("name", sorted({*_float_ops(), "matmul", "copy", "transpose"}))
    @settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_op_in_c_equals_the_reference(self, name, dtype, data, so_dir):
        # Both sides compute in float32 and round once to the dtype: ops exact in float32
        # agree bit for bit; the others differ in float32 by a few ulp (test_special_values),
        # which rounding to 8 or 11 bits turns into at most one ulp of the dtype.
        op = ops.get(name)
        shapes = _shapes(op)
        xs = [
            data.draw(hnp.arrays(np.float32, s, elements=st.floats(-4, 4, width=32))).astype(dtype)
            for s in shapes
        ]
        g = _ew_graph(name, dtype, shapes)
        want = evaluate(g, {f"in{k}": x for k, x in enumerate(xs)})["out"]
        (c,) = _run_c(g, g.kernels()[0], xs, so_dir)
        if name in EXACT:
            _bits_equal(c.reshape(want.shape), want, f"{name}/{dtype}")
        else:
            w32 = want.astype(np.float32).reshape(-1)
            c32 = c.astype(np.float32).reshape(-1)
            assert np.array_equal(np.isnan(c32), np.isnan(w32)), f"{name}/{dtype}: NaNs"
            with np.errstate(all="ignore"):  # log of negatives, exp overflow: NaN and inf
                ulp = np.abs(np.spacing(w32.astype(dtype)).astype(np.float32))
                near = np.abs(c32 - w32) <= ulp + 1e-6
            fine = (c32 == w32) | near | np.isnan(w32)
            assert fine.all(), f"{name}/{dtype}: {c} vs {want}"

    @pytest.mark.parametrize("dtype", FLOATS)
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        names=st.lists(st.sampled_from(["relu", "scale", "neg", "add", "mul", "copy"]),
                       min_size=2, max_size=4),
        data=st.data(),
    )  # fmt: skip
    def test_fused_chain_in_c_equals_unfused_and_reference(self, dtype, names, data, so_dir):
        b = GraphBuilder()
        it = DTYPES[dtype]
        cur = b.alloc_external_buffer("x", it * 6, dtype=dtype, shape=(2, 3))
        y = b.alloc_external_buffer("y", it * 6, dtype=dtype, shape=(2, 3))
        for j, n in enumerate(names):
            last = j == len(names) - 1
            out = b.alloc_buffer("out" if last else f"t{j}", it * 6, dtype=dtype, shape=(2, 3))
            ins = [cur, y] if ops.get(n).arity == 2 else [cur]
            b.add_kernel(f"k{j}", 1, 32).op(n).inputs(ins).outputs([out]).fusible(True).finish()
            cur = out
        g = b.build()
        el = st.floats(-300, 300, width=32)
        inputs = {k: data.draw(hnp.arrays(np.float32, (2, 3), elements=el)).astype(dtype)
                  for k in ("x", "y")}  # fmt: skip
        want = evaluate(g, inputs)["out"]
        fused = ExecutionPlan.build(g, max_streams=1, fusion=True).graph
        assert len(fused.kernels()) == 1
        _bits_equal(_c_graph(g, inputs, so_dir), want, f"{names} {dtype}: unfused C")
        _bits_equal(_c_graph(fused, inputs, so_dir), want, f"{names} {dtype}: fused C")


# ------------------------------------------------------------------ casts
_INT_RANGE = {"int64": 2**62, "int32": 2**31 - 1}


def _values(dtype: str, to: str) -> st.SearchStrategy[np.ndarray]:
    """Values of ``dtype`` a cast to ``to`` is defined on (C leaves NaN, inf and out-of-range
    floats to integers undefined: those are drawn only for float and bool targets)."""
    if dtype == "bool":
        return hnp.arrays(np.bool_, 6)
    if dtype in _INT_RANGE:
        lim = _INT_RANGE[dtype]
        return hnp.arrays(dtype, 6, elements=st.integers(-lim, lim))
    if to in _INT_RANGE:
        lim = 2.0**30 if to == "int32" else 2.0**59
        el = st.floats(-lim, lim, width=32)
    else:
        el = st.one_of(st.floats(width=32), st.sampled_from([0.0, -0.0, 65520.0, 1e-8, 3.0e38]))
    return hnp.arrays(np.float32, 6, elements=el).map(lambda a: a.astype(dtype))


def _cast_graph(src: str, dst: str, then: str | None = None):
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", DTYPES[src] * 6, dtype=src, shape=(6,))
    mid = b.alloc_buffer("out" if then is None else "mid", DTYPES[dst] * 6, dtype=dst, shape=(6,))
    kb = b.add_kernel("c", 1, 32).op(lib_dtype.cast_name(dst)).inputs([x]).outputs([mid])
    kb.fusible(True).finish()
    if then is not None:  # a float op after the cast, then back to float32: one fused kernel
        t = b.alloc_buffer("t", DTYPES[dst] * 6, dtype=dst, shape=(6,))
        b.add_kernel("r", 1, 32).op(then).inputs([mid]).outputs([t]).fusible(True).finish()
        out = b.alloc_buffer("out", 24, dtype="float32", shape=(6,))
        b.add_kernel("c2", 1, 32).op("cast_float32").inputs([t]).outputs([out]).fusible(
            True
        ).finish()
    return b.build()


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestCasts:
    def test_raises_cast_of_float64(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 48, dtype="float64", shape=(6,))
        y = b.alloc_buffer("y", 24, shape=(6,))
        b.add_kernel("c", 1, 32).op("cast_float32").inputs([x]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=r"input 0 is float64, which kernels do not"):
            b.build()

    def test_every_compute_dtype_has_a_cast(self):
        assert {op.name for op in lib_dtype.CASTS} == {
            lib_dtype.cast_name(d) for d in COMPUTE_DTYPES
        }

    @pytest.mark.parametrize("dst", sorted(COMPUTE_DTYPES))
    @pytest.mark.parametrize("src", sorted(COMPUTE_DTYPES))
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_cast_is_torchs_and_c_agrees(self, src, dst, data, so_dir):
        import torch

        x = data.draw(_values(src, dst), label="x")
        g = _cast_graph(src, dst)
        want = evaluate(g, {"x": x})["out"]
        assert want.dtype == _np(dst)
        sim = SequentialExecutor(ExecutionPlan.build(g, fusion=False)).run({"x": x}).outputs["out"]
        _bits_equal(sim, want, f"{src}->{dst}: simulator")
        # torch's Tensor.to (PyTorch's own conversions): the same values
        tx = (
            torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
            if src == "bfloat16"
            else (torch.from_numpy(x))
        )
        if not (src in ("int64", "int32") and dst in ("float16", "bfloat16")):
            # (torch converts an integer straight to a half type; C and we go through float32)
            tt = tx.to(getattr(torch, dst))
            tn = tt.view(torch.int16).numpy().view(BF16) if dst == "bfloat16" else tt.numpy()
            _bits_equal(want, tn, f"{src}->{dst}: vs torch")
        if CXX is not None:
            (c,) = _run_c(g, g.kernels()[0], [x], so_dir)
            _bits_equal(c, want, f"{src}->{dst}: generated C")

    @pytest.mark.parametrize("dst", ["float16", "bfloat16"])
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), streams=st.integers(1, 4))
    def test_cast_fuses_into_a_chain(self, dst, data, streams, so_dir):
        x = data.draw(_values("float32", dst), label="x")
        g = _cast_graph("float32", dst, then="gelu")
        want = evaluate(g, {"x": x})["out"]
        for fusion in (False, True):
            plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
            assert plan.kernel_count_fused == (1 if fusion else 3)
            got = SequentialExecutor(plan).run({"x": x}).outputs["out"]
            _bits_equal(got, want, f"float32->{dst}->gelu->float32 fusion={fusion}")
            if fusion and CXX is not None:
                _bits_equal(_c_graph(plan.graph, {"x": x}, so_dir), want, "fused C")


# ------------------------------------------------------------------ embedding
def _embedding_graph(wdtype: str, idtype: str, rows: int, dim: int, ishape, epilogue=False):
    b = GraphBuilder()
    w = b.alloc_external_buffer("w", DTYPES[wdtype] * rows * dim, dtype=wdtype, shape=(rows, dim))
    n = math.prod(ishape)
    ix = b.alloc_external_buffer("ix", DTYPES[idtype] * n, dtype=idtype, shape=ishape)
    shape = (*ishape, dim)
    e = b.alloc_buffer("out" if not epilogue else "e", DTYPES[wdtype] * n * dim, dtype=wdtype,
                       shape=shape)  # fmt: skip
    b.add_kernel("emb", 1, 32).op("embedding").inputs([w, ix]).outputs([e]).fusible(True).finish()
    if epilogue:
        out = b.alloc_buffer("out", DTYPES[wdtype] * n * dim, dtype=wdtype, shape=shape)
        b.add_kernel("s", 1, 32).op("scale").params(alpha=3.0).inputs([e]).outputs([out]).fusible(
            True
        ).finish()
    return b.build()


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestEmbedding:
    def test_raises_float_indices(self):
        b = GraphBuilder()
        w = b.alloc_external_buffer("w", 48, shape=(3, 4))
        ix = b.alloc_external_buffer("ix", 8, shape=(2,))
        y = b.alloc_buffer("y", 32, shape=(2, 4))
        b.add_kernel("e", 1, 32).op("embedding").inputs([w, ix]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=r"indices \(input 1\) are float32.*cast_int64"):
            b.build()

    def test_raises_index_out_of_range_in_the_simulator(self):
        g = _embedding_graph("float32", "int64", 3, 2, (2,))
        plan = ExecutionPlan.build(g)
        w = np.ones((3, 2), np.float32)
        with pytest.raises(Exception, match=r"embedding index 3 is out of range for a table of 3"):
            SequentialExecutor(plan).run({"w": w, "ix": np.array([0, 3])})

    @pytest.mark.parametrize("idtype", ["int64", "int32"])
    @pytest.mark.parametrize("wdtype", FLOATS)
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        data=st.data(),
        rows=st.integers(1, 9),
        dim=st.integers(1, 5),
        ishape=st.sampled_from([(1,), (4,), (2, 3)]),
        streams=st.integers(1, 4),
    )
    def test_lookup_equals_torch_fused_and_in_c(
        self, wdtype, idtype, data, rows, dim, ishape, streams, so_dir
    ):
        import torch

        w = data.draw(hnp.arrays(np.float32, (rows, dim), elements=st.floats(-9, 9, width=32)))
        w = w.astype(wdtype)
        ix = data.draw(hnp.arrays(idtype, ishape, elements=st.integers(0, rows - 1)))
        g = _embedding_graph(wdtype, idtype, rows, dim, ishape, epilogue=True)
        inputs = {"w": w, "ix": ix}
        want = evaluate(g, inputs)["out"]
        tw = torch.from_numpy(w.astype(np.float32))
        eager = torch.nn.functional.embedding(torch.from_numpy(ix.astype(np.int64)), tw) * 3
        _bits_equal(want, eager.numpy().astype(wdtype), "reference vs torch")
        for fusion in (False, True):
            plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
            assert plan.kernel_count_fused == (1 if fusion else 2)
            got = SequentialExecutor(plan).run(inputs).outputs["out"]
            _bits_equal(got, want, f"simulator fusion={fusion}")
            if CXX is not None:
                _bits_equal(_c_graph(plan.graph, inputs, so_dir), want, f"C fusion={fusion}")


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestGather:
    @pytest.mark.parametrize("idtype", ["int64", "int32"])
    @pytest.mark.parametrize("wdtype", FLOATS)
    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), dim=st.integers(-3, 2), fusion=st.booleans())
    def test_gather_equals_torch_and_c(self, wdtype, idtype, data, dim, fusion, so_dir):
        import torch

        xshape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=3, max_size=3)))
        ishape = tuple(
            data.draw(st.integers(1, 4)) if k == dim % 3 else data.draw(st.integers(1, s))
            for k, s in enumerate(xshape)
        )
        x = data.draw(hnp.arrays(np.float32, xshape, elements=st.floats(-9, 9, width=32)))
        x = x.astype(wdtype)
        n = xshape[dim % 3]
        ix = data.draw(hnp.arrays(idtype, ishape, elements=st.integers(0, n - 1)))
        b = GraphBuilder()
        xb = b.alloc_external_buffer("x", x.nbytes, dtype=wdtype, shape=xshape)
        ib = b.alloc_external_buffer("ix", ix.nbytes, dtype=idtype, shape=ishape)
        size = DTYPES[wdtype] * math.prod(ishape)
        g_ = b.alloc_buffer("g", size, dtype=wdtype, shape=ishape)
        out = b.alloc_buffer("out", size, dtype=wdtype, shape=ishape)
        b.add_kernel("ga", 1, 32).op("gather").params(dim=dim).inputs([xb, ib]).outputs(
            [g_]
        ).fusible(True).finish()
        b.add_kernel("n", 1, 32).op("neg").inputs([g_]).outputs([out]).fusible(True).finish()
        g = b.build()
        inputs = {"x": x, "ix": ix}
        want = evaluate(g, inputs)["out"]
        tx = torch.from_numpy(x.astype(np.float32))
        eager = -torch.gather(tx, dim, torch.from_numpy(ix.astype(np.int64)))
        _bits_equal(want, eager.numpy().astype(wdtype), "reference vs torch")
        plan = ExecutionPlan.build(g, fusion=fusion)
        assert plan.kernel_count_fused == (1 if fusion else 2)
        _bits_equal(SequentialExecutor(plan).run(inputs).outputs["out"], want, "simulator")
        if CXX is not None:
            _bits_equal(_c_graph(plan.graph, inputs, so_dir), want, f"C fusion={fusion}")


@st.composite
def moves(draw):
    """(op, x, index or None, params, torch's result) of index_select, flip or repeat."""
    import torch

    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16", "int64", "int32"]))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    x = np.arange(math.prod(shape)).reshape(shape).astype(np.float32) - 3.5
    x = x.astype(BF16 if dtype == "bfloat16" else dtype)
    tx = torch.from_numpy(x.astype(np.float32))
    name = draw(st.sampled_from(["index_select", "flip", "repeat"]))
    rank = len(shape)
    if name == "index_select":
        dim = draw(st.integers(-rank, rank - 1))
        n = shape[dim]
        ix = np.array(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=5)), np.int64)
        want = torch.index_select(tx, dim, torch.from_numpy(ix))
        return name, x, ix, {"dim": float(dim % rank)}, want
    if name == "flip":
        dims = draw(st.lists(st.integers(0, rank - 1), unique=True))
        return name, x, None, {"axes": float(sum(1 << d for d in dims))}, torch.flip(tx, dims)
    times = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=min(6, rank + 2)))
    params = {"lead": float(len(times) - rank)}
    params |= {f"times{k}": float(t) for k, t in enumerate(reversed(times))}
    return name, x, None, params, tx.repeat(*times)


@st.composite
def indexings(draw):
    """(x, index tensors, lead): adjacent axes after ``lead`` whole ones, indexed by int64
    tensors of one shape (negative indices included)."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    lead = draw(st.integers(0, len(shape) - 1))
    count = draw(st.integers(1, len(shape) - lead))
    ishape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    idx = [
        np.array(draw(hnp.arrays(np.int64, ishape, elements=st.integers(-n, n - 1))))
        for n in shape[lead : lead + count]
    ]
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape), idx, lead


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestIndex:
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=indexings())
    def test_index_after_whole_axes_equals_torch_and_c(self, case, so_dir):
        import torch

        x, idx, lead = case
        op = lib_dtype.index_op(len(idx), lead)
        b = GraphBuilder()
        ins = [b.alloc_external_buffer("x", x.nbytes, shape=x.shape)]
        ins += [
            b.alloc_external_buffer(f"i{k}", ix.nbytes, dtype="int64", shape=ix.shape)
            for k, ix in enumerate(idx)
        ]
        shape = ops.infer_shape(op, [x.shape] + [ix.shape for ix in idx], {}, "t")
        out = b.alloc_buffer("out", 4 * math.prod(shape), shape=shape)
        b.add_kernel("ix", 1, 32).op(op.name).inputs(ins).outputs([out]).finish()
        g = b.build()
        inputs = {"x": x} | {f"i{k}": ix for k, ix in enumerate(idx)}
        want = evaluate(g, inputs)["out"]
        key = (slice(None),) * lead + tuple(torch.from_numpy(ix) for ix in idx)
        _bits_equal(want, torch.from_numpy(x)[key].numpy(), "reference vs torch")
        if CXX is not None:
            _bits_equal(_c_graph(g, inputs, so_dir), want, "generated C")

    def test_compiles_with_nvrtc(self, nvrtc_compile):
        op = lib_dtype.index_op(2, 2)  # bicubic's x[:, :, rows, cols]
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 4 * 120, shape=(2, 3, 4, 5))
        i = b.alloc_external_buffer("i", 8 * 6, dtype="int64", shape=(6, 1))
        j = b.alloc_external_buffer("j", 8 * 7, dtype="int64", shape=(1, 7))
        out = b.alloc_buffer("out", 4 * 2 * 3 * 6 * 7, shape=(2, 3, 6, 7))
        b.add_kernel("ix", 1, 32).op(op.name).inputs([x, i, j]).outputs([out]).finish()
        g = b.build()
        ks = kernel_source(g, g.kernels()[0])
        assert nvrtc_compile(ks.source, ks.function_name, "sm_90")

    def test_refuses_more_axes_than_the_input_has(self):
        with pytest.raises(InvalidArgument, match=r"2 index tensors after 2 whole axes"):
            ops.infer_shape(lib_dtype.index_op(2, 2), [(2, 3, 4), (1,), (1,)], {}, "t")
        with pytest.raises(InvalidArgument, match=r"0 to 8 whole leading axes"):
            lib_dtype.index_op(1, 9)


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestMoves:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=moves())
    def test_index_select_flip_and_repeat_equal_torch_and_c(self, case, so_dir):
        name, x, ix, params, eager = case
        dtype = "bfloat16" if x.dtype == BF16 else x.dtype.name
        b = GraphBuilder()
        ins = [b.alloc_external_buffer("x", x.nbytes, dtype=dtype, shape=x.shape)]
        if ix is not None:
            ins.append(b.alloc_external_buffer("ix", ix.nbytes, dtype="int64", shape=ix.shape))
        out_shape = ops.infer_shape(ops.get(name), [x.shape] + ([ix.shape] if ix is not None else []), {**ops.get(name).defaults, **params}, "t")  # fmt: skip
        out = b.alloc_buffer("out", DTYPES[dtype] * math.prod(out_shape), dtype=dtype, shape=out_shape)  # fmt: skip
        b.add_kernel(name, 1, 32).op(name).params(**params).inputs(ins).outputs([out]).finish()
        g = b.build()
        inputs = {"x": x} | ({"ix": ix} if ix is not None else {})
        want = evaluate(g, inputs)["out"]
        assert want.shape == tuple(eager.shape)
        _bits_equal(want.astype(np.float32), eager.numpy(), "reference vs torch")
        plan = ExecutionPlan.build(g)
        _bits_equal(SequentialExecutor(plan).run(inputs).outputs["out"], want, "simulator")
        if CXX is not None:
            _bits_equal(_c_graph(g, inputs, so_dir), want, "generated C")

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), fusion=st.booleans())
    def test_slice_scatter_equals_torch_and_c(self, data, fusion, so_dir):
        import torch

        dtype = data.draw(st.sampled_from(["float32", "float16", "bfloat16", "int64", "int32"]))
        shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
        rank = len(shape)
        dim = data.draw(st.integers(-rank, rank - 1))
        start = data.draw(st.integers(0, shape[dim] - 1))
        step = data.draw(st.integers(1, 3))
        m = data.draw(st.integers(1, (shape[dim] - 1 - start) // step + 1))
        src_shape = tuple(m if k == dim % rank else n for k, n in enumerate(shape))
        np_dtype = BF16 if dtype == "bfloat16" else np.dtype(dtype)
        x = (np.arange(math.prod(shape)).reshape(shape) - 3.5).astype(np.float32).astype(np_dtype)
        src = (-np.arange(math.prod(src_shape)).reshape(src_shape) - 0.5).astype(np_dtype)
        params = {"dim": float(dim % rank), "start": float(start), "step": float(step)}
        b = GraphBuilder()
        xb = b.alloc_external_buffer("x", x.nbytes, dtype=dtype, shape=shape)
        sb = b.alloc_external_buffer("src", src.nbytes, dtype=dtype, shape=src_shape)
        mid = b.alloc_buffer("mid", x.nbytes, dtype=dtype, shape=shape)
        out = b.alloc_buffer("out", x.nbytes, dtype=dtype, shape=shape)
        b.add_kernel("s", 1, 32).op("slice_scatter").params(**params).inputs([xb, sb]).outputs(
            [mid]
        ).fusible(True).finish()
        b.add_kernel("c", 1, 32).op("copy").inputs([mid]).outputs([out]).fusible(True).finish()
        g = b.build()
        inputs = {"x": x, "src": src}
        want = evaluate(g, inputs)["out"]
        t = lambda a: torch.from_numpy(a.astype(np.float32))  # noqa: E731
        end = start + step * (m - 1) + 1
        eager = torch.slice_scatter(t(x), t(src), dim, start, end, step).numpy()
        _bits_equal(want.astype(np.float32), eager, "reference vs torch")
        plan = ExecutionPlan.build(g, fusion=fusion)
        assert plan.kernel_count_fused == (1 if fusion else 2)
        _bits_equal(SequentialExecutor(plan).run(inputs).outputs["out"], want, "simulator")
        if CXX is not None:
            _bits_equal(_c_graph(plan.graph, inputs, so_dir), want, f"C fusion={fusion}")

    def test_out_of_range_index_is_refused_by_the_reference_and_nan_in_c(self, so_dir):
        x, ix = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([0, 3], np.int64)
        with pytest.raises(IndexError, match=r"index 3 is out of range for axis 1 of extent 3"):
            ops.get("index_select").reference([x, ix], dim=1.0)
        with pytest.raises(IndexError, match=r"index -1 is out of range"):  # as torch
            ops.get("index_select").reference([x, -ix[:1] - 1], dim=1.0)
        if CXX is not None:
            b = GraphBuilder()
            xb = b.alloc_external_buffer("x", 24, shape=(2, 3))
            ib = b.alloc_external_buffer("ix", 16, dtype="int64", shape=(2,))
            out = b.alloc_buffer("out", 16, shape=(2, 2))
            b.add_kernel("s", 1, 32).op("index_select").params(dim=1.0).inputs([xb, ib]).outputs(
                [out]
            ).finish()
            g = b.build()
            (got,) = _run_c(g, g.kernels()[0], [x, ix], so_dir)
            np.testing.assert_array_equal(got, [[0.0, np.nan], [3.0, np.nan]])

    @pytest.mark.parametrize(
        ("name", "shapes", "params", "match"),
        [
            ("index_select", [(2, 3), (2, 2)], {"dim": 0.0}, r"needs a vector of indices"),
            ("flip", [(2, 3)], {"axes": 4.0}, r"axes=4\.0 is not a bit mask of the 2 axes"),
            ("repeat", [(2, 3)], {"lead": 5.0}, r"lead=5\.0 must be a whole number"),
            ("repeat", [(2, 3)], {"times0": 0.0}, r"times0=0\.0 must be a whole number >= 1"),
            ("repeat", [(2, 3)], {"times3": 2.0}, r"times3=2\.0 must be .* \(1 past the 2 axes\)"),
            ("slice_scatter", [(2, 3), (2, 2)], {"dim": 0.0}, r"source \(2, 2\) must be the"),
            (
                "slice_scatter",
                [(2, 5), (2, 2)],
                {"dim": 1.0, "start": 3.0, "step": 2.0},
                r"2 elements from 3 by 2 do not fit axis 1",
            ),
            ("slice_scatter", [(2, 5), (2, 2)], {"dim": 1.0, "step": 0.0}, r"step=0\.0 must be"),
        ],
    )
    def test_raises_naming_the_rule(self, name, shapes, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, shapes, {**op.defaults, **params}, "t")


# ------------------------------------------------------------------ cumsum, cumprod
SCAN_NP = {"bool": np.dtype(bool), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
           "float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}  # fmt: skip
# floats whose partial sums and products are exact in float32 (powers of two, at most 4
# of them along the axis) and the IEEE special values: torch's CPU scans accumulate in
# double, so only exact values can be compared with them bit for bit
EXACT_STEPS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0]
# integers near the int64 ends too: sums and products wrap around modulo 2**64, as in torch
BIG_INTS = [0, 1, -1, 3, -7, 2**31 - 1, -(2**31), 2**40 + 3, -(2**62), 2**63 - 1, -(2**63)]


@st.composite
def scans(draw, exact: bool = True):
    """(op, dtype, x, dim) of cumsum or cumprod."""
    name = draw(st.sampled_from(["cumsum", "cumprod"]))
    dtype = draw(st.sampled_from(sorted(SCAN_NP)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    if dtype == "bool":
        x = draw(hnp.arrays(bool, shape))
    elif dtype in ("int32", "int64"):
        lim = np.iinfo(dtype)
        el = st.one_of(st.sampled_from(BIG_INTS), st.integers(-9, 9))
        x = draw(hnp.arrays(dtype, shape, elements=el.filter(lambda v: lim.min <= v <= lim.max)))
    else:
        el = st.sampled_from(EXACT_STEPS) if exact else st.floats(-4, 4, width=32)
        x = draw(hnp.arrays(np.float32, shape, elements=el)).astype(SCAN_NP[dtype])
    return name, dtype, x, draw(st.integers(-len(shape), len(shape) - 1))


def _scan_graph(name: str, dtype: str, shape: tuple[int, ...], dim: int, epilogue: bool = False):
    """``name`` of external ``x`` along ``dim`` (``epilogue``: then a scale by -3, fused)."""
    op = ops.get(name)
    odt = ops.infer_dtype(op, [dtype], {"dim": float(dim)}, name)
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", DTYPES[dtype] * math.prod(shape), dtype=dtype, shape=shape)
    size = DTYPES[odt] * math.prod(shape)
    r = b.alloc_buffer("r" if epilogue else "out", size, dtype=odt, shape=shape)
    b.add_kernel("s", 1, 32).op(name).params(dim=float(dim)).inputs([x]).outputs([r]).fusible(
        True
    ).finish()
    if epilogue:
        out = b.alloc_buffer("out", size, dtype=odt, shape=shape)
        b.add_kernel("k", 1, 32).op("scale").params(alpha=-3.0).inputs([r]).outputs([out]).fusible(
            True
        ).finish()
    return b.build()


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestScans:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=scans())
    def test_scan_equals_torch(self, case):
        import torch

        name, dtype, x, dim = case
        g = _scan_graph(name, dtype, x.shape, dim)
        want = evaluate(g, {"x": x})["out"]
        # torch's dtypes: bool and integers give int64, floats their own
        assert want.dtype == (
            SCAN_NP[dtype] if x.dtype.kind == "f" or dtype == "bfloat16" else np.int64
        )
        tx = torch.from_numpy(x.astype(np.float32) if dtype == "bfloat16" else x)
        tx = tx.to(torch.bfloat16) if dtype == "bfloat16" else tx
        eager = getattr(torch, name)(tx, dim)
        eager = eager.float().numpy().astype(BF16) if dtype == "bfloat16" else eager.numpy()
        _bits_equal(want, eager, f"{name} {dtype} dim={dim}: reference vs torch")

    @needs_cxx
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=st.one_of(scans(), scans(exact=False)), epilogue=st.booleans())
    def test_generated_c_equals_the_reference_bit_for_bit(self, case, epilogue, so_dir):
        # one thread per element sums (multiplies) its prefix in the reference's order
        name, dtype, x, dim = case
        g = _scan_graph(name, dtype, x.shape, dim, epilogue)
        want = evaluate(g, {"x": x})["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=epilogue)
        assert len(plan.graph.kernels()) == 1  # an epilogue fuses after the scan
        _bits_equal(_c_graph(plan.graph, {"x": x}, so_dir), want, f"{name} {dtype} dim={dim}")

    @pytest.mark.parametrize("name", ["cumsum", "cumprod"])
    def test_zero_signs_and_nan_as_torch_in_c(self, name, so_dir):
        # the sum starts at +0.0 (0 + -0.0 is +0.0, where numpy's cumsum copies x[0]); the
        # product at 1 (-0.0 kept); inf - inf and 0 * inf are NaN from there on
        import torch

        x = np.array([[-0.0, -0.0, 2.0, -np.inf, np.inf, 1.0], [0.0, -0.0, np.nan, 1.0, 0.5, -2.0]],
                     np.float32)  # fmt: skip
        g = _scan_graph(name, "float32", x.shape, 1)
        want = evaluate(g, {"x": x})["out"]
        _bits_equal(want, getattr(torch, name)(torch.from_numpy(x), 1).numpy(), "vs torch")
        if CXX is not None:
            _bits_equal(_c_graph(g, {"x": x}, so_dir), want, "generated C")

    def test_refuses_dim_outside_the_input(self):
        with pytest.raises(InvalidArgument, match=r"dim 2\.0 is not an axis of the input"):
            ops.infer_shape(ops.get("cumprod"), [(2, 3)], {"dim": 2.0}, "t")


# ------------------------------------------------------------------ NVRTC
# lib_conv's ops (convolutions, pooling, pad, upsampling): values in tests/ops/test_conv.py
CONV_NAMES = {op.name for op in lib_conv.CONV_OPS}


def _probe_graphs():
    """(label, graph) per registered op with CUDA C and per input dtypes its rule accepts:
    every input one dtype of COMPUTE_DTYPES (ops of one dtype), plus the embedding's
    (float table, integer indices) pairs."""
    probes = []
    for name, op in sorted(ops.REGISTRY.items()):
        if not op.has_cuda or op.source is not None:
            continue
        combos = [[d] * op.arity for d in sorted(COMPUTE_DTYPES)]
        if name in ("embedding", "gather", "index_select"):
            combos = [[w, i] for w in FLOATS for i in ("int64", "int32")]
        if name == "grouped_mm":  # x and the weight of one float dtype, int offsets
            combos = [[w, w, i] for w in FLOATS for i in ("int64", "int32")]
        shapes = None
        cands = [[(2, 5)] * op.arity, [(2, 5), (5,)], [(2, 5), (5, 3)], [(4, 3), (2,)]]
        cands.append([(4, 3), (2, 3, 5), (2,)])  # grouped_mm: x, a weight per group, offsets
        if name in CONV_NAMES:  # NCL/NCHW/NCDHW inputs and 1x1 windows (the defaults)
            cands = [[(1, 2, *(3,) * d), (2, 2, *(1,) * d), (2,)][: op.arity] for d in (1, 2, 3)]
        for cand in cands:
            if len(cand) == op.arity:
                try:
                    ops.infer_shape(op, cand, op.defaults, "probe")
                except InvalidArgument:
                    continue
                shapes = cand
                break
        if shapes is None:  # batched and affine ops take shapes none of these fit
            continue
        for dts in combos:
            try:
                out_dt = ops.infer_dtype(op, dts, op.defaults, name)
            except InvalidArgument:
                continue
            b = GraphBuilder()
            ins = [
                b.alloc_external_buffer(f"in{k}", DTYPES[d] * math.prod(s), dtype=d, shape=s)
                for k, (d, s) in enumerate(zip(dts, shapes, strict=True))
            ]
            out_shape = ops.infer_shape(op, shapes, op.defaults, "t")
            out = b.alloc_buffer(
                "out", DTYPES[out_dt] * math.prod(out_shape), dtype=out_dt, shape=out_shape
            )
            b.add_kernel(name, 1, 32).op(name).inputs(ins).outputs([out]).finish()
            probes.append((f"{name}[{','.join(dts)}]", b.build()))
    return probes


PROBES = _probe_graphs()


def test_every_float_op_and_cast_has_a_typed_kernel():
    # what NVRTC below compiles: the built-in float ops in every float dtype, every cast
    # from every dtype, the embedding for every table and index dtype
    labels = set()
    for label, g in PROBES:
        try:
            kernel_source(g, g.kernels()[0])
        except UnsupportedOp:
            continue
        labels.add(label)
    for name in _float_ops():
        op = ops.get(name)
        for d in FLOATS:
            assert f"{name}[{','.join([d] * op.arity)}]" in labels
    for d in COMPUTE_DTYPES:
        for t in COMPUTE_DTYPES:
            assert f"cast_{t}[{d}]" in labels
    assert sum(label.startswith("embedding[") for label in labels) == 6
    assert sum(label.startswith("gather[") for label in labels) == 6


@pytest.mark.parametrize("label, graph", PROBES, ids=[p[0] for p in PROBES])
def test_nvrtc_compiles_every_op_for_every_dtype(nvrtc_compile, label, graph):
    node = graph.kernels()[0]
    try:
        ks = kernel_source(graph, node)
    except UnsupportedOp as e:
        # an element/kernel generator written for float32 only: refused in words, not
        # miscompiled (test_every_float_op_and_cast_has_a_typed_kernel bounds these)
        assert "generates float32 C only" in str(e)
        assert bind(graph, node).steps[0].op.typed_pointers is False
        return
    assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
