"""``sort_values``/``sort_indices`` and ``topk_values``/``topk_indices`` of
``oxiwork.ops.lib_dtype`` (torch.sort, argsort, topk).

On hypothesis-drawn shapes, dims, k, directions and dtypes, with NaN, infinities, -0.0 and
ties in the rows: the reference equals torch's stable sort (its first k for topk) exactly,
and torch's unstable sort and topk exactly on rows without ties, and on rows with ties in
their values, with indices that are distinct and gather those values (torch leaves the
order of equal elements to them unspecified); the generated CUDA C run on the CPU (the
emulated launcher of ``tests/executor``) equals the reference bit for bit, alone and with
an epilogue fused after it; NVRTC compiles it.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.node import DTYPES
from oxiwork.ops import kernel_source
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.ops.test_dtypes import _bits_equal, _c_graph, _run_c

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BF16 = np.dtype(ml_dtypes.bfloat16)
NP = {"bfloat16": BF16, "float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}
NP |= {d: np.dtype(d) for d in ("int64", "int32", "bool")}
I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)
# values every float dtype holds exactly (8 significant bits at most), ties and specials
_QUARTERS = [v / 4 for v in range(-255, 256) if v]
_FLOAT_TIES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5]


def _pool(dtype: str, ties: bool) -> list:
    """Values to draw a row from: few (ties) or distinct under the sort's order (one
    NaN, one zero: -0.0 equals 0.0)."""
    if dtype == "bool":
        return [False, True]
    if dtype.startswith("int"):
        info = I64 if dtype == "int64" else I32
        return (
            [info.min, -1, 0, 1, 7, info.max] if ties else [info.min, info.max, *range(-250, 250)]
        )
    return _FLOAT_TIES if ties else [np.nan, np.inf, -np.inf, -0.0, *_QUARTERS]


@st.composite
def cases(draw):
    """(name of the values op, x, params, torch's call) of a sort or a topk."""
    dtype = draw(st.sampled_from(["float32", "float16", "bfloat16", "int64", "int32", "bool"]))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
    count = math.prod(shape)
    ties = dtype == "bool" or draw(st.booleans())
    pool = _pool(dtype, ties)
    if not ties:
        flat = draw(st.permutations(pool))[:count]  # no two elements of the array equal
    else:
        flat = draw(st.lists(st.sampled_from(pool), min_size=count, max_size=count))
    x = np.array(flat, np.float64 if NP[dtype].kind == "f" or dtype == "bfloat16" else dtype)
    x = x.astype(NP[dtype]).reshape(shape)
    rank = len(shape)
    dim = draw(st.integers(-rank, rank - 1))
    descending = draw(st.booleans())
    if draw(st.booleans()):
        params = {"dim": float(dim), "descending": float(descending)}
        return "sort_values", x, params, (dim, descending, None)
    k = draw(st.integers(1, shape[dim]))
    params = {"k": float(k), "dim": float(dim), "largest": float(descending)}
    return "topk_values", x, params, (dim, descending, k)


def _torch(x: np.ndarray) -> torch.Tensor:
    # (bfloat16 through float32: exact; torch sorts its bfloat16 as the same values)
    if x.dtype == BF16:
        return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(x)


def _np(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(BF16)
    return t.numpy()


def _ties(x: np.ndarray, dim: int) -> bool:
    """Does some row along ``dim`` hold two equal elements (NaNs equal, -0.0 == 0.0)?"""
    rows = np.moveaxis(
        x.astype(np.float64 if x.dtype.kind == "f" or x.dtype == BF16 else np.int64), dim, -1
    )
    rows = rows.reshape(-1, rows.shape[-1])
    for row in rows:
        nan = np.isnan(row) if row.dtype.kind == "f" else np.zeros(row.shape, bool)
        if nan.sum() > 1 or len(np.unique(row[~nan] + 0)) < (~nan).sum():
            return True
    return False


def _reference(name: str, x: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    values = ops.get(name).reference([x], **params)
    indices = ops.get(name.replace("values", "indices")).reference([x], **params)
    return values, indices


class TestReference:
    @SETTINGS
    @given(case=cases())
    def test_is_torchs_stable_sort_and_agrees_with_torchs_sort_and_topk(self, case):
        name, x, params, (dim, descending, k) = case
        values, indices = _reference(name, x, params)
        assert indices.dtype == np.int64 and values.dtype == x.dtype
        assert values.shape == indices.shape == ops.infer_shape(ops.get(name), [x.shape], params, "t")  # fmt: skip
        # the order the ops define: torch's stable sort (its first k elements for topk)
        tv, ti = torch.sort(_torch(x), dim=dim, descending=descending, stable=True)
        if k is not None:
            tv, ti = tv.narrow(dim, 0, k), ti.narrow(dim, 0, k)
        _bits_equal(values, _np(tv), "values vs torch's stable sort")
        np.testing.assert_array_equal(indices, ti.numpy())
        if k is not None and x.dtype == np.bool_:
            return  # (torch.topk refuses bool on the CPU)
        if k is None:
            ev, ei = torch.sort(_torch(x), dim=dim, descending=descending)
        else:
            ev, ei = torch.topk(_torch(x), k, dim=dim, largest=descending)
        if not _ties(x, dim):  # torch's order, the same
            _bits_equal(values, _np(ev), "values vs torch")
            np.testing.assert_array_equal(indices, ei.numpy())
            return
        # equal elements in some order of torch's own: the same values (-0.0 may stand
        # for 0.0), at distinct indices of the row holding them
        np.testing.assert_array_equal(values.astype(np.float64), _np(ev).astype(np.float64))
        got = torch.gather(_torch(x), dim, torch.from_numpy(indices))
        _bits_equal(_np(got), values, "x.gather(dim, indices) vs values")
        rows = np.sort(np.moveaxis(indices, dim, -1), axis=-1)
        assert (np.diff(rows, axis=-1) > 0).all(), "indices of a row repeat"

    def test_the_order_of_specials_and_ties_is_torchs(self):
        x = np.array([3.0, np.nan, -0.0, 0.0, 1.0, np.nan, -np.inf, 1.0, 0.0], np.float32)
        up = ops.get("sort_indices").reference([x], dim=0.0, descending=0.0)
        down = ops.get("sort_indices").reference([x], dim=0.0, descending=1.0)
        assert up.tolist() == [6, 2, 3, 8, 4, 7, 0, 1, 5]  # NaN last, ties in index order
        assert down.tolist() == [1, 5, 0, 4, 7, 2, 3, 8, 6]  # NaN first, ties in index order
        top = ops.get("topk_indices").reference([x], k=4.0, dim=0.0, largest=0.0)
        assert top.tolist() == [6, 2, 3, 8]
        ints = np.array([I64.max, I64.min, 0, I64.min], np.int64)
        assert ops.get("sort_indices").reference([ints], dim=0.0, descending=1.0).tolist() == [0, 2, 1, 3]  # fmt: skip

    @pytest.mark.parametrize(
        ("name", "shape", "params", "match"),
        [
            ("topk_values", (2, 5), {"k": 6.0}, r"k=6\.0 must be a whole number from 1 to 5"),
            ("topk_indices", (2, 5), {"k": 0.0, "dim": 0.0}, r"from 1 to 2, the length of dim 0"),
            ("topk_values", (2, 5), {"k": 1.5}, r"k=1\.5 must be a whole number"),
            ("sort_values", (2, 5), {"dim": 2.0}, r"dim 2\.0 is not an axis of the input"),
            ("sort_indices", (), {}, r"the input is 0-d"),
        ],
    )
    def test_shape_rule_refuses_naming_the_rule(self, name, shape, params, match):
        op = ops.get(name)
        with pytest.raises(InvalidArgument, match=match):
            ops.infer_shape(op, [shape], {**op.defaults, **params}, "t")

    def test_dtypes(self):
        for d in ("float32", "float16", "bfloat16", "int64", "int32", "bool"):
            assert ops.infer_dtype(ops.get("topk_values"), [d], {}, "t") == d
            assert ops.infer_dtype(ops.get("sort_indices"), [d], {}, "t") == "int64"
        with pytest.raises(InvalidArgument, match="float64, which kernels do not compute on"):
            ops.infer_dtype(ops.get("sort_values"), ["float64"], {}, "t")

    def test_cost_counts_9_passes_over_the_row_per_output_element(self):
        # topk shortens its row's axis: that axis is the row; a sort's row is bounded by
        # its longest axis (the rule sees shapes only)
        flops, _ = ops.get("topk_values").op_cost([(3, 40, 5)], (3, 2, 5))
        assert flops == 9 * 40 * (3 * 2 * 5)
        flops, _ = ops.get("sort_indices").op_cost([(3, 40, 5)], (3, 40, 5))
        assert flops == 9 * 40 * (3 * 40 * 5)


def _graph(name: str, x: np.ndarray, params: dict, epilogue: str | None = None):
    """``name`` and its indices twin on ``x``, each written to a buffer of its own
    (``out``, ``idx``), or (``epilogue``) ``name`` followed by that element-wise op."""
    dtype = "bfloat16" if x.dtype == BF16 else x.dtype.name
    b = GraphBuilder()
    xb = b.alloc_external_buffer("x", x.nbytes, dtype=dtype, shape=x.shape)
    op = ops.get(name)
    shape = ops.infer_shape(op, [x.shape], {**op.defaults, **params}, "t")

    def kernel(op_name, src, out_name, **p):
        odt = ops.infer_dtype(ops.get(op_name), [dt[src]], {**ops.get(op_name).defaults, **p}, op_name)  # fmt: skip
        out = b.alloc_buffer(out_name, DTYPES[odt] * math.prod(shape), dtype=odt, shape=shape)
        dt[out] = odt
        kb = b.add_kernel(out_name, 1, 32).op(op_name).params(**p).inputs([src])
        kb.outputs([out]).fusible(True).finish()
        return out

    dt = {xb: dtype}
    if epilogue is None:
        kernel(name, xb, "out", **params)
        kernel(name.replace("values", "indices"), xb, "idx", **params)
    else:
        mid = kernel(name, xb, "mid", **params)
        kernel(epilogue, mid, "out", alpha=3.0)
    return b.build()


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sort_kernels")


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestGeneratedC:
    @SETTINGS
    @given(case=cases())
    def test_equals_the_reference_and_the_simulator(self, case, so_dir):
        name, x, params, _ = case
        g = _graph(name, x, params)
        want = evaluate(g, {"x": x})
        sim = SequentialExecutor(ExecutionPlan.build(g)).run({"x": x}).outputs
        for out in ("out", "idx"):
            node = next(n for n in g.kernels() if g.buffer(n.outputs[0]).name == out)
            (got,) = _run_c(g, node, [x], so_dir)
            _bits_equal(got, want[out], f"generated C {out}")
            _bits_equal(sim[out], want[out], f"simulator {out}")

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=cases())
    def test_an_epilogue_fuses_after_it(self, case, so_dir):
        name, x, params, _ = case
        if x.dtype == np.bool_:
            return  # (scale takes numbers)
        g = _graph(name, x, params, epilogue="scale")
        want = evaluate(g, {"x": x})["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
        (node,) = plan.graph.kernels()  # one kernel: the sort and its scale
        assert node.fused is not None
        (got,) = _run_c(plan.graph, node, [x], so_dir)
        _bits_equal(got, want, "fused generated C")

    def test_row_of_a_thousand_with_ties_in_one_thread_each(self, so_dir):
        # long rows, every element equal to some other: the select's tie pass
        rng = np.random.default_rng(0)
        x = rng.integers(-3, 3, (2, 1000)).astype(np.float32)
        x[0, ::7] = np.nan
        for name, params in (("sort_values", {"dim": 1.0, "descending": 1.0}), ("topk_values", {"k": 50.0, "dim": -1.0, "largest": 0.0})):  # fmt: skip
            g = _graph(name, x, params)
            want = evaluate(g, {"x": x})
            assert _c_graph(g, {"x": x}, so_dir).shape == want["out"].shape
            for out in ("out", "idx"):
                node = next(n for n in g.kernels() if g.buffer(n.outputs[0]).name == out)
                (got,) = _run_c(g, node, [x], so_dir)
                _bits_equal(got, want[out], f"{name} {out}")


def test_compiles_with_nvrtc_for_every_dtype_and_fused(nvrtc_compile):
    # every dtype over a middle axis, and a fused epilogue; one NVRTC unit
    sources = []
    for k, d in enumerate(("float32", "float16", "bfloat16", "int64", "int32", "bool")):
        x = np.zeros((2, 5, 3), NP[d])
        for name, params in (("sort_values", {"dim": 1.0}), ("topk_values", {"k": 2.0, "dim": 1.0})):  # fmt: skip
            g = _graph(name, x, params, epilogue=None if d == "bool" else "scale")
            plan = ExecutionPlan.build(g, max_streams=1, fusion=True)
            for n in plan.graph.kernels():
                ks = kernel_source(plan.graph, n)
                sources.append(ks.source.replace(ks.function_name, f"{ks.function_name}_{k}_{len(sources)}"))  # fmt: skip
    assert nvrtc_compile("\n".join(sources), "sorts")
