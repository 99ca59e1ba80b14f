"""``group_norm`` and ``group_norm_affine`` of ``oxiwork.ops.lib_reduce``: GroupNorm,
InstanceNorm and LayerNorm over several trailing axes, as one row kernel.

On random shapes, groups and weight layouts (one entry per channel or per element): the
reference equals the textbook formula computed in float64, the generated CUDA C run on the
CPU (the emulated launcher of ``tests/executor``) equals the reference alone and with a
prologue and an epilogue fused into it, the fused kernel launches one block per row, and
NVRTC compiles it. Shapes that do not split evenly are refused with the rule they break.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, ops
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.ops import kernel_source
from oxiwork.ops.program import bind
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX, run_kernel

F32 = np.float32
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw):
    """(op, x shape, weight shape or None, params): a GroupNorm of (N, C, *S), or a
    LayerNorm over the trailing ``dims`` axes (one group, a weight per element)."""
    affine = draw(st.booleans())
    if draw(st.booleans()):  # GroupNorm / InstanceNorm: per-channel weight
        groups = draw(st.integers(1, 3))
        c = groups * draw(st.integers(1, 3))
        spatial = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
        shape = (draw(st.integers(1, 3)), c, *spatial)
        dims, weight = len(shape) - 1, (c,)
    else:  # LayerNorm over the last `dims` axes
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
        dims = draw(st.integers(1, len(shape)))
        groups, weight = 1, shape[len(shape) - dims :]
    params = {"groups": float(groups), "dims": float(dims), "eps": 1e-5}
    return ("group_norm_affine" if affine else "group_norm"), shape, weight, params


def _formula(x, w, b, groups, dims, eps):
    """The textbook group norm in float64."""
    block = math.prod(x.shape[x.ndim - dims :])
    rows = x.reshape(-1, block // groups).astype(np.float64)
    y = (rows - rows.mean(-1, keepdims=True)) / np.sqrt(rows.var(-1, keepdims=True) + eps)
    y = y.reshape(-1, block)
    if w is not None:
        y = y * np.repeat(w.reshape(-1), block // w.size) + np.repeat(
            b.reshape(-1), block // b.size
        )
    return y.reshape(x.shape)


def _graph(name, shape, weight, params, fused=False):
    """``name`` on external x (weight and bias when affine); in ``fused``, of ``tanh(x)``
    and followed by ``relu``: one kernel per op."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", 4 * math.prod(shape), shape=shape)
    ins = [x]
    if name.endswith("affine"):
        ins += [b.alloc_external_buffer(k, 4 * math.prod(weight), shape=weight) for k in "wb"]

    def kernel(op, inputs, out, **p):
        buf = b.alloc_buffer(out, 4 * math.prod(shape), shape=shape)
        kb = b.add_kernel(out, 2, 32).op(op).inputs(inputs).outputs([buf]).fusible(True)
        if p:
            kb.params(**p)
        kb.finish()
        return buf

    if fused:
        ins[0] = kernel("tanh", [x], "t")
    y = kernel(name, ins, "y" if fused else "out", **params)
    if fused:
        kernel("relu", [y], "out")
    return b.build()


def _inputs(name, shape, weight, seed):
    rng = np.random.default_rng(seed)
    xs = {"x": rng.uniform(-3, 3, shape).astype(F32)}
    if name.endswith("affine"):
        xs["w"] = rng.uniform(-2, 2, weight).astype(F32)
        xs["b"] = rng.uniform(-1, 1, weight).astype(F32)
    return xs


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("group_norm_kernels")


class TestGroupNorm:
    @SETTINGS
    @given(case=cases(), seed=st.integers(0, 2**16))
    def test_reference_is_the_textbook_formula(self, case, seed) -> None:
        name, shape, weight, params = case
        xs = _inputs(name, shape, weight, seed)
        got = ops.get(name).reference(list(xs.values()), **params)
        want = _formula(
            xs["x"], xs.get("w"), xs.get("b"), int(params["groups"]), int(params["dims"]), 1e-5
        )
        assert got.dtype == F32 and got.shape == shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    def test_matches_torch_group_instance_and_layer_norm(self) -> None:
        torch = pytest.importorskip("torch")
        f = torch.nn.functional
        rng = np.random.default_rng(1)
        x = rng.normal(size=(2, 6, 3, 5)).astype(F32)
        w, b = rng.normal(size=6).astype(F32), rng.normal(size=6).astype(F32)
        gn = ops.get("group_norm_affine").reference([x, w, b], groups=3.0, dims=3.0, eps=1e-5)
        want = f.group_norm(torch.tensor(x), 3, torch.tensor(w), torch.tensor(b)).numpy()
        np.testing.assert_allclose(gn, want, rtol=1e-5, atol=1e-5)
        inst = ops.get("group_norm").reference([x], groups=6.0, dims=3.0, eps=1e-5)
        np.testing.assert_allclose(inst, f.instance_norm(torch.tensor(x)).numpy(), atol=1e-5)
        w2, b2 = rng.normal(size=(3, 5)).astype(F32), rng.normal(size=(3, 5)).astype(F32)
        ln = ops.get("group_norm_affine").reference([x, w2, b2], groups=1.0, dims=2.0, eps=1e-5)
        want = f.layer_norm(torch.tensor(x), [3, 5], torch.tensor(w2), torch.tensor(b2)).numpy()
        np.testing.assert_allclose(ln, want, rtol=1e-5, atol=1e-5)

    def test_refuses_shapes_that_do_not_split(self) -> None:
        gn = ops.get("group_norm_affine")
        with pytest.raises(InvalidArgument, match=r"groups=4\.0 must split the 18 elements"):
            ops.infer_shape(gn, [(2, 6, 3), (6,), (6,)], {"groups": 4.0, "dims": 2.0}, "k")
        with pytest.raises(InvalidArgument, match="has 4 elements, which must divide the 18"):
            ops.infer_shape(gn, [(2, 6, 3), (4,), (4,)], {"groups": 3.0, "dims": 2.0}, "k")
        with pytest.raises(InvalidArgument, match=r"dims=3\.0 must count 1\.\.2 trailing axes"):
            ops.infer_shape(ops.get("group_norm"), [(6, 3)], {"groups": 1.0, "dims": 3.0}, "k")

    @pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
    @SETTINGS
    @given(case=cases(), seed=st.integers(0, 2**16), fused=st.booleans())
    def test_generated_c_equals_reference(self, case, seed, fused, so_dir) -> None:
        name, shape, weight, params = case
        g = _graph(name, shape, weight, params, fused)
        xs = _inputs(name, shape, weight, seed)
        want = evaluate(g, xs)["out"]
        plan = ExecutionPlan.build(g, max_streams=1, fusion=fused)
        (node,) = plan.graph.kernels() if fused else [g.kernels()[0]]
        graph = plan.graph if fused else g
        ks = kernel_source(graph, node)
        arrays = [xs[graph.buffer(b).name] for b in node.inputs]
        (got,) = run_kernel(
            ks.source, ks.function_name, arrays, list(bind(graph, node).out_shapes),
            ks.scalar_args, so_dir,
        )  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{shape} {params}")
        if fused:  # one block per row: N * groups (LayerNorm: the leading elements)
            rows = math.prod(shape) // math.prod(shape[len(shape) - int(params["dims"]) :])
            assert node.config.grid[0] == rows * int(params["groups"])

    def test_compiles_with_nvrtc_alone_and_fused(self, nvrtc_compile) -> None:
        sources = []
        for k, (name, shape, weight, params) in enumerate(
            [
                ("group_norm_affine", (2, 6, 3, 5), (6,), {"groups": 3.0, "dims": 3.0}),
                ("group_norm", (2, 6, 3, 5), None, {"groups": 6.0, "dims": 3.0}),
                ("group_norm_affine", (2, 6, 3, 5), (3, 5), {"groups": 1.0, "dims": 2.0}),
            ]
        ):
            for fused in (False, True):
                g = ExecutionPlan.build(_graph(name, shape, weight, params, fused), fusion=fused)
                for node in g.graph.kernels():
                    ks = kernel_source(g.graph, node)
                    sources.append(ks.source.replace(ks.function_name, f"gn_{k}_{fused:d}_{ks.function_name}"))  # fmt: skip
        nvrtc_compile("\n".join(sources), "group_norm")
