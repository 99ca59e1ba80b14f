"""Numpy broadcasting in element-wise ops: shape rule, reference, simulator, cost and the
generated C (run on the CPU and compiled by NVRTC) agree, alone and fused.

Inputs of random mutually broadcastable shapes (hypothesis) are computed by numpy's own
broadcasting (the oracle), by the op table's references (``evaluate``), by the simulator
(the in-place forms in the planned arena) and by the generated kernel run as C++ on the
CPU; the element-wise ops involved are single IEEE operations, so all four must agree bit
for bit. A wrong broadcast index reads another element (or past the buffer) and shows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork import GraphBuilder, ops
from oxiwork.cost import kernel_work
from oxiwork.error import InvalidArgument
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.ops import kernel_source
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.ops.test_special_values import arrays, assert_same, run_c

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C"),
    pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning"),
]

F32 = np.float32
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("broadcast_kernels")


@st.composite
def broadcastable(draw, num: int = 2):
    """``num`` input shapes (1 to 4 axes, some of size 1 or missing) and their broadcast."""
    base = draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=3))
    got = draw(
        hnp.mutually_broadcastable_shapes(num_shapes=num, base_shape=base, min_dims=1, max_dims=4)
    )
    shapes = [s if s else (1,) for s in got.input_shapes]
    return shapes, tuple(np.broadcast_shapes(*shapes))


class _Net:
    """A builder of kernels over external inputs x0, x1...; the last kernel writes ``out``."""

    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.k = 0

    def input(self, shape):
        name = f"x{len(self.shapes)}"
        self.shapes[name] = tuple(shape)
        return self.b.alloc_external_buffer(name, 4 * math.prod(shape), shape=shape), shape

    def kernel(self, op_name, ins, out_name=None, **params):
        op = ops.get(op_name)
        shape = ops.infer_shape(op, [s for _, s in ins], {**op.defaults, **params}, "t")
        name = out_name or f"t{self.k}"
        out = self.b.alloc_buffer(name, 4 * math.prod(shape), shape=shape)
        kb = self.b.add_kernel(f"k{self.k}", 2, 32).op(op_name).inputs([b for b, _ in ins])
        kb = kb.outputs([out]).fusible(True)
        if params:
            kb.params(**params)
        kb.finish()
        self.k += 1
        return out, shape

    def build(self):
        return self.b.build()


def _values(data, shapes):
    return {n: data.draw(arrays(s), label=n) for n, s in shapes.items()}


class TestShapeRule:
    def test_raises_naming_the_axis_that_does_not_broadcast(self):
        with pytest.raises(InvalidArgument, match=r"axis -1 has sizes 4 and 3"):
            ops.infer_shape(ops.get("mul"), [(2, 4), (1, 3)], {}, "kernel 'm'")

    def test_gpt2_mask_add(self):
        got = ops.infer_shape(ops.get("add"), [(1, 12, 64, 64), (1, 1, 64, 64)], {}, "k")
        assert got == (1, 12, 64, 64)

    @given(case=broadcastable())
    @settings(max_examples=50, deadline=None)
    def test_terms_index_like_numpy(self, case):
        # the (div, mod, stride) terms give, for every output index, the element numpy's
        # broadcasting reads
        (a, _), out = case
        src = np.arange(math.prod(a)).reshape(a)
        want = np.broadcast_to(src, out).reshape(-1)
        terms = ops.broadcast_terms(a, out)
        i = np.arange(math.prod(out))
        got = i if terms is None else sum(((i // d) % m) * s for d, m, s in terms)
        np.testing.assert_array_equal(np.broadcast_to(got, want.shape), want)


class TestCost:
    @given(case=broadcastable())
    @settings(max_examples=20, deadline=None)
    def test_each_input_moves_its_own_bytes(self, case):
        shapes, out = case
        net = _Net()
        ins = [net.input(s) for s in shapes]
        net.kernel("add", ins, "out")
        g = net.build()
        flops, nbytes = kernel_work(g, g.kernels()[0])
        assert nbytes == 4 * (sum(math.prod(s) for s in shapes) + math.prod(out))
        assert flops == math.prod(out)


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(case=broadcastable(), data=st.data(), block=st.sampled_from([1, 4, 32]))
def test_binary_op_four_ways(name, case, data, block, so_dir, nvrtc_compile):
    shapes, out = case
    net = _Net()
    ins = [net.input(s) for s in shapes]
    net.kernel(name, ins, "out")
    g = net.build()
    xs = _values(data, net.shapes)
    with np.errstate(all="ignore"):
        want = BINARY[name](xs["x0"], xs["x1"]).astype(F32)
    assert want.shape == out
    assert_same(evaluate(g, xs)["out"], want, f"{name}: reference vs numpy broadcasting")
    plan = ExecutionPlan.build(g, max_streams=1, fusion=False)
    sim = SequentialExecutor(plan).run(xs).outputs["out"]
    assert_same(sim, want, f"{name}: simulator vs numpy broadcasting")
    node = g.kernels()[0]
    (c,) = run_c(g, node, [xs["x0"], xs["x1"]], so_dir, block)
    assert_same(c, want, f"{name} {shapes}: generated C vs numpy broadcasting")
    ks = kernel_source(g, node)
    assert nvrtc_compile(ks.source, ks.function_name, "sm_90")


@st.composite
def broadcast_chains(draw):
    """x -> [matmul] -> binary/unary ops with broadcast second operands -> [softmax]."""
    shapes, out = draw(broadcastable(num=3))
    names = draw(
        st.lists(st.sampled_from([*sorted(BINARY), "relu", "neg"]), min_size=2, max_size=4)
    )
    head = len(out) >= 2 and draw(st.booleans())
    # a fused kernel holds one matmul or one reduction
    row = None if head else draw(st.sampled_from([None, "softmax", "sum"]))
    return shapes, out, names, head, row


@SETTINGS
@given(chain=broadcast_chains(), data=st.data(), block=st.sampled_from([1, 4, 32]))
def test_fused_chain_with_broadcast_inputs(chain, data, block, so_dir, nvrtc_compile):
    shapes, out, names, head, row = chain
    net = _Net()
    if head:  # a matmul head: its epilogue reads broadcast inputs by the broadcast index
        k = out[-1]
        a, b = net.input((*out[:-1], k)), net.input((k, out[-1]))
        cur = net.kernel("matmul", [a, b])
    else:
        cur = net.input(out)
    others = iter(shapes[1:] * 4)
    for j, name in enumerate(names):
        last = j == len(names) - 1 and row is None
        ins = [cur, net.input(next(others))] if name in BINARY else [cur]
        cur = net.kernel(name, ins, "out" if last else None)
    if row is not None:
        cur = net.kernel(row, [cur], "out")
    g = net.build()
    xs = _values(data, net.shapes)

    want = evaluate(g, xs)["out"]
    fused = ExecutionPlan.build(g, max_streams=1, fusion=True)
    kernels = fused.graph.kernels()
    assert len(kernels) == 1 and kernels[0].fused is not None, [k.name for k in kernels]
    assert_same(SequentialExecutor(fused).run(xs).outputs["out"], want, f"{names}: fused sim")
    unfused = ExecutionPlan.build(g, max_streams=1, fusion=False)
    assert_same(SequentialExecutor(unfused).run(xs).outputs["out"], want, f"{names}: sim")

    def c_values(graph):
        vals = {graph.buffer_by_name(n).id: v for n, v in xs.items()}
        for nid in graph.topological_order():
            node = graph.node(nid)
            if node.is_kernel:
                outs = run_c(graph, node, [vals[b] for b in node.inputs], so_dir, block)
                vals.update(zip(node.outputs, outs, strict=True))
        return vals[graph.buffer_by_name("out").id]

    c_unfused = c_values(g)
    assert_same(c_values(fused.graph), c_unfused, f"{names}: fused C vs unfused C")
    if not head and row is None:  # single IEEE operations only: C and numpy agree exactly
        assert_same(c_unfused, want, f"{names}: generated C vs numpy")
    ks = kernel_source(fused.graph, kernels[0])
    assert nvrtc_compile(ks.source, ks.function_name, "sm_90")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (((1, 12, 64, 64), (1, 1, 64, 64)), ((1, 3, 5, 7), (1, 1, 5, 7))),  # attention mask
        (((8, 16, 14, 14), (16, 1, 1)), ((2, 3, 2, 2), (3, 1, 1))),  # per-channel params
        (((4, 8), (8,)), ((3, 5), (5,))),  # a bias
    ],
)
def test_one_source_per_broadcast_pattern(a, b):
    # sizes are kernel arguments: shapes with one broadcast pattern share one source
    def source(shapes):
        net = _Net()
        net.kernel("mul", [net.input(s) for s in shapes], "out")
        g = net.build()
        ks = kernel_source(g, g.kernels()[0])
        return ks.source.replace(ks.function_name, "k"), ks.scalar_args

    (sa, args_a), (sb, args_b) = source(a), source(b)
    assert sa == sb
    assert args_a != args_b
