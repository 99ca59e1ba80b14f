"""bool and integer values through the op table: comparisons give bool, ``where`` takes a
bool condition, bitwise and logical ops, integer arithmetic computed exactly in its own C
type (no float round trip, scalars passed as the input's integer type).

Each op is computed three ways, which must agree exactly: the numpy reference (against
numpy's own integer/bool semantics), the simulator (fused and unfused), and the generated
C run on the CPU by the emulated driver; the C also compiles with NVRTC.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops, verify
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")

CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
       "gt": np.greater, "ge": np.greater_equal}  # fmt: skip
# values past 2**24 (a float32 round trip would lose them) and near the int64 ends
BIG = [0, 1, -1, 2**24 + 1, -(2**40) - 3, 2**53 + 1, 2**62, -(2**62)]


def _ints(dtype: str, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    info = np.iinfo(dtype)
    special = [v for v in BIG if info.min <= v <= info.max]
    el = st.one_of(st.sampled_from(special), st.integers(-5, 5))
    return hnp.arrays(dtype, shape, elements=el)


def _values(dtype: str, shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    if dtype == "bool":
        return hnp.arrays(np.bool_, shape)
    if dtype in ("int64", "int32"):
        return _ints(dtype, shape)
    el = st.one_of(
        st.sampled_from([math.nan, -0.0, 0.0, 1.0, math.inf]), st.floats(-3, 3, width=32)
    )
    return hnp.arrays(np.float32, shape, elements=el)


def _graph(chain: list[tuple[str, dict, list]], ins: dict[str, tuple[str, tuple]]):
    """Kernels ``(op, params, inputs)`` in order, each writing ``k<j>`` (the last ``out``),
    with buffers shaped and typed by the op table's own rules; inputs name external
    buffers or earlier kernels (``"k0"``)."""
    b = GraphBuilder()
    bufs, meta = {}, {}
    for name, (dt, shape) in ins.items():
        bufs[name] = b.alloc_external_buffer(
            name, DTYPES[dt] * math.prod(shape), dtype=dt, shape=shape
        )
        meta[name] = (dt, shape)
    for j, (op, params, reads) in enumerate(chain):
        od = ops.get(op)
        p = {**od.defaults, **params}
        shape = ops.infer_shape(od, [meta[r][1] for r in reads], p, op)
        dt = ops.infer_dtype(od, [meta[r][0] for r in reads], p, op)
        name = "out" if j == len(chain) - 1 else f"k{j}"
        bufs[name] = b.alloc_buffer(name, DTYPES[dt] * math.prod(shape), dtype=dt, shape=shape)
        meta[name] = (dt, shape)
        kb = b.add_kernel(name, 1, 32).op(op).inputs([bufs[r] for r in reads]).outputs([bufs[name]])
        kb.params(**params).fusible(True).finish()
    return b.build()


def _packed(bools: list[tuple[str, dict, list]]) -> list[tuple[str, dict, list]]:
    """Kernels computing ``bools`` and packing their results into one int64 (bit k: the
    k-th), so the fused program checks them all with one compiled kernel."""
    chain = list(bools)
    bits = []
    for k in range(len(bools)):
        chain += [("cast_int64", {}, [f"k{k}"]), ("scale", {"alpha": 2**k}, [f"k{len(chain)}"])]
        bits.append(f"k{len(chain) - 1}")
    acc = bits[0]
    for b in bits[1:]:
        chain.append(("add", {}, [acc, b]))
        acc = f"k{len(chain) - 1}"
    return chain


def _c_out(graph, inputs, so_dir):
    """Every kernel of ``graph`` run as generated C (emulated driver), in order: ``out``."""
    vals = {graph.buffer_by_name(n).id: v for n, v in inputs.items()}
    for nid in graph.topological_order():
        node = graph.node(nid)
        if node.is_kernel:
            ks = kernel_source(graph, node)
            bound = bind(graph, node)
            outs = run_kernel(ks.source, ks.function_name, [vals[b] for b in node.inputs],
                              list(bound.out_shapes), ks.scalar_args, so_dir,
                              out_dtypes=[np.dtype(d) for d in bound.out_dtypes])  # fmt: skip
            vals.update(zip(node.outputs, outs, strict=True))
    return vals[graph.buffer_by_name("out").id]


def _equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: {got.dtype} vs {want.dtype}"
    np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=what)


def _four_ways(g, inputs, want, so_dir, what):
    ref = evaluate(g, inputs)["out"]
    _equal(ref, want, f"{what}: reference")
    for fusion in (False, True):
        plan = ExecutionPlan.build(g, max_streams=2, fusion=fusion)
        verify(plan.graph)
        _equal(
            SequentialExecutor(plan).run(inputs).outputs["out"], want, f"{what}: fusion={fusion}"
        )
        if CXX is not None and fusion:  # every op's C is in the fused kernel (one compile)
            _equal(_c_out(plan.graph, inputs, so_dir), want, f"{what}: C fused")


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bool_int_kernels")


class TestRaises:
    def test_raises_mixed_integer_add_naming_the_cast(self):
        with pytest.raises(InvalidArgument, match=r"int64 but input 1 is int32.*'cast_int64'"):
            _graph([("add", {}, ["a", "b"])], {"a": ("int64", (3,)), "b": ("int32", (3,))})

    def test_raises_fractional_scalar_on_integers_naming_the_cast(self):
        with pytest.raises(InvalidArgument, match=r"other=0.5 is not a whole.*'cast_float32'"):
            _graph([("add_scalar", {"other": 0.5}, ["a"])], {"a": ("int64", (3,))})

    def test_raises_bitwise_on_floats_naming_the_cast(self):
        with pytest.raises(
            InvalidArgument, match=r"bitwise ops take bool or integers.*'cast_bool'"
        ):
            _graph([("bitwise_and", {}, ["a", "a"])], {"a": ("float32", (3,))})

    def test_raises_float_op_on_bool_naming_the_cast(self):
        with pytest.raises(InvalidArgument, match=r"input 0 is bool.*'cast_float32'"):
            _graph([("exp", {}, ["a"])], {"a": ("bool", (3,))})

    def test_raises_comparison_of_int_and_float_naming_the_cast(self):
        with pytest.raises(InvalidArgument, match=r"int64 and float32.*'cast_float32'"):
            _graph([("lt", {}, ["a", "b"])], {"a": ("int64", (3,)), "b": ("float32", (3,))})

    def test_raises_store_of_bool_into_float_buffer(self):
        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 12, shape=(3,))
        y = b.alloc_buffer("y", 12, shape=(3,))
        b.add_kernel("c", 1, 32).op("gt").inputs([x, x]).outputs([y]).finish()
        with pytest.raises(InvalidArgument, match=r"computes bool.*dtype='bool'"):
            b.build()


class TestExact:
    @pytest.mark.parametrize("dtype", ["int64", "int32", "float32", "bool"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_comparisons_give_bool(self, dtype, data, so_dir):
        a = data.draw(_values(dtype, (2, 3)))
        c = data.draw(_values(dtype, (3,)))
        g = _graph(
            _packed([(n, {}, ["a", "c"]) for n in CMP]), {"a": (dtype, (2, 3)), "c": (dtype, (3,))}
        )
        want = sum(CMP[n](a, c).astype(np.int64) << k for k, n in enumerate(CMP))
        _four_ways(g, {"a": a, "c": c}, want, so_dir, f"comparisons[{dtype}]")

    @pytest.mark.parametrize("dtype", ["int64", "int32", "float32"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), other=st.sampled_from([0, -1, 2**24 + 1, 2**40]))
    def test_scalar_comparisons_are_exact_on_integers(self, dtype, other, data, so_dir):
        if other > np.iinfo("int32").max and dtype == "int32":
            other = 7
        a = data.draw(_values(dtype, (5,)))
        chain = _packed([(f"{n}_scalar", {"other": other}, ["a"]) for n in CMP])
        g = _graph(chain, {"a": (dtype, (5,))})
        o = np.float32(other) if dtype == "float32" else np.dtype(dtype).type(other)
        want = sum(CMP[n](a, o).astype(np.int64) << k for k, n in enumerate(CMP))
        _four_ways(g, {"a": a}, want, so_dir, f"scalar comparisons[{dtype}]")

    @pytest.mark.parametrize("dtype", ["int64", "int32"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data(), other=st.sampled_from([0, 1, -3, 2**24 + 1]))
    def test_integer_arithmetic_chain_is_exact(self, dtype, other, data, so_dir):
        # (a + b) * a - other, then (other - x): one fused kernel of integer steps
        a, b = data.draw(_ints(dtype, (2, 3))), data.draw(_ints(dtype, (3,)))
        chain = [("add", {}, ["a", "b"]), ("mul", {}, ["k0", "a"]),
                 ("sub_scalar", {"other": other}, ["k1"]), ("rsub_scalar", {"other": 1}, ["k2"]),
                 ("scale", {"alpha": 3}, ["k3"]), ("add_scalar", {"other": other}, ["k4"])]  # fmt: skip
        g = _graph(chain, {"a": (dtype, (2, 3)), "b": (dtype, (3,))})
        t = np.dtype(dtype).type
        with np.errstate(over="ignore"):
            want = (t(1) - ((a + b) * a - t(other))) * t(3) + t(other)
        _four_ways(g, {"a": a, "b": b}, want, so_dir, f"int chain[{dtype}]")

    @pytest.mark.parametrize("branches", ["float32", "int64", "float16"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_where_on_a_bool_condition(self, branches, data, so_dir):
        # the condition from a comparison, broadcast against the branches, as a mask
        ids = data.draw(_ints("int64", (4, 1)))
        x = data.draw(_values(branches if branches != "float16" else "float32", (4, 3)))
        x = x.astype(branches)
        y = data.draw(_values(branches if branches != "float16" else "float32", (1,)))
        y = y.astype(branches)
        chain = [("ge_scalar", {"other": 0}, ["ids"]), ("where", {}, ["k0", "x", "y"])]
        ins = {"ids": ("int64", (4, 1)), "x": (branches, (4, 3)), "y": (branches, (1,))}
        g = _graph(chain, ins)
        _four_ways(g, {"ids": ids, "x": x, "y": y}, np.where(ids >= 0, x, y), so_dir, branches)

    @pytest.mark.parametrize("dtype", ["bool", "int64"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_bitwise_ops(self, dtype, data, so_dir):
        a, b = data.draw(_values(dtype, (2, 3))), data.draw(_values(dtype, (2, 3)))
        chain = [("bitwise_and", {}, ["a", "b"]), ("bitwise_or", {}, ["k0", "b"]),
                 ("bitwise_xor", {}, ["k1", "a"])]  # fmt: skip
        want = ((a & b) | b) ^ a
        if dtype != "bool":
            chain.append(("bitwise_not", {}, ["k2"]))
            want = ~want
        g = _graph(chain, {"a": (dtype, (2, 3)), "b": (dtype, (2, 3))})
        _four_ways(g, {"a": a, "b": b}, want, so_dir, f"bits[{dtype}]")

    @pytest.mark.parametrize("dtype", ["bool", "float32"])
    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def test_logical_ops(self, dtype, data, so_dir):
        # non-zero is true, NaN included (as torch)
        a, b = data.draw(_values(dtype, (6,))), data.draw(_values(dtype, (6,)))
        chain = [("logical_and", {}, ["a", "b"]), ("logical_or", {}, ["k0", "a"]),
                 ("logical_xor", {}, ["k1", "b"]), ("logical_not", {}, ["k2"])]  # fmt: skip
        ta, tb = a != 0, b != 0
        want = ~(((ta & tb) | ta) ^ tb)
        g = _graph(chain, {"a": (dtype, (6,)), "b": (dtype, (6,))})
        _four_ways(g, {"a": a, "b": b}, want, so_dir, f"logical[{dtype}]")


def _nvrtc_graphs():
    """Mixed-dtype programs the single-dtype probes of test_dtypes.py do not build."""
    return [
        ("where[bool,float32,float32]",
         _graph([("where", {}, ["c", "x", "x"])], {"c": ("bool", (4,)), "x": ("float32", (4,))})),
        ("where[bool,bfloat16]",
         _graph([("where", {}, ["c", "x", "x"])], {"c": ("bool", (4,)), "x": ("bfloat16", (1,))})),
        ("ge_scalar->where[int64]",
         _graph([("ge_scalar", {"other": 3}, ["i"]), ("where", {}, ["k0", "i", "i"])],
                {"i": ("int64", (4,))})),
    ]  # fmt: skip


@pytest.mark.parametrize("label, graph", _nvrtc_graphs(), ids=[p[0] for p in _nvrtc_graphs()])
def test_nvrtc_compiles_mixed_dtype_programs(nvrtc_compile, label, graph):
    for g in (graph, ExecutionPlan.build(graph, fusion=True).graph):
        for node in g.kernels():
            ks = kernel_source(g, node)
            assert nvrtc_compile(ks.source, ks.function_name, "sm_90")


def test_integer_parameters_are_integer_kernel_arguments():
    g = _graph([("add_scalar", {"other": 2**40 + 1}, ["a"])], {"a": ("int64", (3,))})
    ks = kernel_source(g, g.kernels()[0])
    assert ("long long", "other", 2**40 + 1) in ks.scalar_args
    assert "long long other" in ks.source
