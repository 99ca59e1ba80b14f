"""Reference evaluator: semantics of each node kind, inputs, and rejections."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.error import GraphWarning, InvalidArgument, UnknownBuffer, UnsupportedOp
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.reference import evaluate, evaluate_detailed, generated_input


def build(fn):
    b = GraphBuilder()
    fn(b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


class TestRejections:
    def test_raises_on_opaque_kernel(self):
        def make(b):
            x = b.alloc_external_buffer("x", 64)
            y = b.alloc_buffer("y", 64)
            b.add_kernel("my_kernel", 1, 32).inputs([x]).outputs([y]).finish()

        with pytest.raises(UnsupportedOp, match=r"kernel 'my_kernel' \(id 0\) has no op.*custom"):
            evaluate(build(make))

    def test_raises_on_shape_mismatch_naming_node_and_buffers(self):
        def make(b):
            x = b.alloc_external_buffer("x", 4 * 6, shape=(2, 3))
            y = b.alloc_external_buffer("yy", 4 * 6, shape=(3, 2))
            z = b.alloc_buffer("z", 4 * 6)
            b.add_kernel("add", 1, 32).inputs([x, y]).outputs([z]).finish()

        with pytest.raises(
            InvalidArgument, match=r"kernel 'add' \(id 0\) reading 'x' \(2, 3\), 'yy'"
        ):
            evaluate(build(make))

    def test_raises_on_output_too_small(self):
        def make(b):
            x = b.alloc_external_buffer("x", 4 * 6, shape=(2, 3))
            z = b.alloc_buffer("small", 4 * 3)
            b.add_kernel("relu", 1, 32).inputs([x]).outputs([z]).finish()

        with pytest.raises(InvalidArgument, match=r"into buffer 'small'.*shape=\(2, 3\)"):
            evaluate(build(make))

    def test_raises_on_unknown_param(self):
        def make(b):
            x = b.alloc_external_buffer("x", 16)
            z = b.alloc_buffer("z", 16)
            b.add_kernel("scale", 1, 32).params(alpah=3.0).inputs([x]).outputs([z]).finish()

        with pytest.raises(InvalidArgument, match=r"kernel 'scale'.*no parameter 'alpah'.*alpha"):
            evaluate(build(make))

    def test_raises_on_wrong_arity(self):
        def make(b):
            x = b.alloc_external_buffer("x", 16)
            z = b.alloc_buffer("z", 16)
            b.add_kernel("add", 1, 32).inputs([x]).outputs([z]).finish()

        with pytest.raises(InvalidArgument, match="takes 2"):
            evaluate(build(make))

    def test_raises_on_non_float_buffer(self):
        def make(b):
            x = b.alloc_external_buffer("x", 16, dtype="int32")
            z = b.alloc_buffer("z", 16)
            b.add_kernel("relu", 1, 32).inputs([x]).outputs([z]).finish()

        # refused when the graph is built (verify checks the op's dtype rule)
        with pytest.raises(InvalidArgument, match=r"input 0 is int32.*'cast_float32'"):
            build(make)

    def test_raises_on_unknown_input_name(self):
        with pytest.raises(UnknownBuffer, match="'nope'"):
            evaluate(quick_start(), {"nope": np.zeros(4)})

    def test_raises_on_wrong_input_size(self):
        with pytest.raises(InvalidArgument, match="input 'input' has 3 elements"):
            evaluate(quick_start(), {"input": np.zeros(3)})


class TestSemantics:
    def test_quick_start_values(self):
        x = np.linspace(-1, 1, 1024, dtype=np.float32)
        out = evaluate(quick_start(), {"input": x})
        np.testing.assert_array_equal(out["mid"], np.maximum(x, 0))
        np.testing.assert_array_equal(out["output"], 2 * np.maximum(x, 0))

    def test_generated_inputs_are_reported_and_seeded(self):
        g = quick_start()
        a = evaluate_detailed(g, seed=1)
        b = evaluate_detailed(g, seed=1)
        c = evaluate_detailed(g, seed=2)
        assert a.generated == ("input",)
        np.testing.assert_array_equal(a.values["input"], b.values["input"])
        assert not np.array_equal(a.values["input"], c.values["input"])
        np.testing.assert_array_equal(
            a.values["input"], generated_input(g.buffer_by_name("input"), 1)
        )

    def test_memset_memcpy_and_external(self):
        def make(b):
            e = b.alloc_external_buffer("e", 16)
            d = b.alloc_buffer("d", 16)
            m = b.alloc_buffer("m", 16, dtype="uint8")
            s = b.add_memset("fill", 8, 7, dst=m)
            c = b.add_memcpy("copy", MemcpyDir.DeviceToDevice, 8, src=e, dst=d)
            b.dep(s, c)

        g = build(make)
        e = np.array([1, 2, 3, 4], np.float32)
        out = evaluate(g, {"e": e})
        np.testing.assert_array_equal(out["m"], [7] * 8 + [0] * 8)
        np.testing.assert_array_equal(out["d"], [1, 2, 0, 0])  # only 8 bytes copied
        np.testing.assert_array_equal(out["e"], e)

    def test_every_buffer_is_returned(self):
        g = random_op_dag(5, 25)
        assert set(evaluate(g)) == {b.name for b in g.buffers}

    @settings(max_examples=30, deadline=None)
    @given(st.integers(0, 10_000), st.integers(1, 30))
    def test_random_dags_evaluate_deterministically(self, seed, n):
        g = random_op_dag(seed, n)
        a, b = evaluate(g, seed=seed), evaluate(g, seed=seed)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
            assert a[k].dtype == np.dtype(g.buffer_by_name(k).dtype)
