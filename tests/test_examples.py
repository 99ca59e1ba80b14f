"""Example graphs: structure, determinism and evaluability."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, synthetic, transformer_block
from oxiwork.node import MemcpyDir, NodeKind
from oxiwork.reference import evaluate


class TestQuickStart:
    def test_structure(self):
        g = quick_start()
        kinds = [n.kind for n in g.nodes]
        assert kinds == [
            NodeKind.Memcpy,
            NodeKind.KernelLaunch,
            NodeKind.KernelLaunch,
            NodeKind.Memcpy,
        ]
        assert g.nodes[0].memcpy_dir is MemcpyDir.HostToDevice
        assert g.nodes[3].memcpy_dir is MemcpyDir.DeviceToHost
        assert [n.op for n in g.kernels()] == ["relu", "scale"]
        assert all(n.fusible for n in g.kernels())
        assert all(b.size_bytes == 4096 for b in g.buffers)


class TestRandomOpDag:
    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 10**6), st.integers(1, 40))
    def test_deterministic_and_evaluable(self, seed, n):
        g = random_op_dag(seed, n)
        assert g == random_op_dag(seed, n)
        assert len(g.kernels()) == n
        assert all(k.op is not None for k in g.kernels())
        evaluate(g)  # no opaque kernels, shapes consistent

    def test_families_occur(self):
        ops_seen = {k.op for s in range(20) for k in random_op_dag(s, 40).kernels()}
        assert {"relu", "add", "bias_add", "softmax", "sum", "matmul"} <= ops_seen

    def test_options_switch_off_ops(self):
        g = random_op_dag(1, 60, reductions=False, matmul=False, p_nonfusible=0.0)
        assert not {k.op for k in g.kernels()} & {"sum", "max", "softmax", "layer_norm", "matmul"}
        assert all(k.fusible for k in g.kernels())


class TestTransformer:
    def test_size_and_ops(self):
        g = transformer_block()
        assert g.num_nodes == 298
        ops = {k.op for k in g.kernels()}
        assert {"matmul", "bias_add", "gelu", "softmax", "layer_norm", "add", "transpose"} <= ops

    def test_evaluates(self):
        out = evaluate(transformer_block(1, tokens=4, d_model=8, d_ff=16))
        assert all(v.size for v in out.values())


class TestSynthetic:
    @pytest.mark.parametrize("shape", ["chain", "layered", "transformer"])
    @pytest.mark.parametrize("n", [4, 57, 1000])
    def test_exact_size(self, shape, n):
        assert synthetic(n, shape).num_nodes == n

    def test_raises_on_unknown_shape(self):
        with pytest.raises(InvalidArgument, match="unknown synthetic shape 'ring'"):
            synthetic(100, "ring")

    def test_raises_on_tiny_n(self):
        with pytest.raises(InvalidArgument, match="n >= 4"):
            synthetic(3)
