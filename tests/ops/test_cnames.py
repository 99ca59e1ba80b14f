"""Generated-code hygiene of custom ops (oxiwork.ops.cnames, used by ops.custom): a name or
expression is refused when the op is defined, or the kernels made from it compile."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, GraphWarning, MemcpyDir, ops
from oxiwork.error import InvalidArgument
from oxiwork.ops import cnames
from oxiwork.ops.codegen import kernel_source
from oxiwork.optimizer.fusion import fuse

OP = "hyg_t"


@pytest.fixture(autouse=True)
def _forget_op() -> Iterator[None]:
    yield
    ops.REGISTRY.pop(OP, None)


def _custom(**kw: Any) -> Any:
    kw.setdefault("reference", lambda xs, **p: xs[0])
    return ops.custom(OP, replace=True, **kw)


class TestRefusedAtDefinition:
    @pytest.mark.parametrize(
        "name",
        [*sorted(cnames.GENERATED), "in0", "out3", "t1", "m0", "q2", "s0_alpha", "float",
         "return", "threadIdx", "size_t", "_x", "__restrict__", "ox_sum", "é", "a-b", "1a", "",
         "x" * 65, 3, None],
    )  # fmt: skip
    def test_param_names(self, name: Any) -> None:
        with pytest.raises(InvalidArgument, match=r"custom op 'hyg_t'"):
            _custom(expr="{0}", params={name: 1.0})
        assert OP not in ops.REGISTRY

    @pytest.mark.parametrize(
        "expr",
        ["{0}; evil()", "{0} /* c */", "{0} // c", "({0}", "{0})", "{0}]", "{{0}}", "{0!r}",
         "{0:>8}", "{0.real}", "{0[1]}", "{1}", "{beta}", "{", "}", "{0} + n", "{0} + i",
         "in0[0]", "t0 * {0}", "{0} + rows", '"s"', "'c'", "#define x", "{0}\n", "\\n",
         "return {0}", "", "x" * 2000, "{0} + \u00e9", "{0} + \ud800"],
    )  # fmt: skip
    def test_exprs(self, expr: str) -> None:
        with pytest.raises(InvalidArgument, match=r"custom op 'hyg_t'"):
            _custom(expr=expr, params={"alpha": 1.0})
        assert OP not in ops.REGISTRY

    @pytest.mark.parametrize(
        ("kw", "match"),
        [
            ({"source": "x" * (cnames.MAX_SOURCE_BYTES + 1), "function_name": "x"}, "bytes"),
            ({"source": "void f\x00(", "function_name": "f"}, "NUL"),
            ({"source": "void \ud800(", "function_name": "f"}, "Unicode"),
            ({"source": "void int(", "function_name": "int"}, "keyword"),
            ({"expr": "{0}", "params": {"a": float("nan")}}, "finite float32"),
            ({"expr": "{0}", "params": {"a": 1e39}}, "finite float32"),
            ({"expr": "{0}", "params": {"a": 10**400}}, "finite float32"),
            ({"expr": "{0}", "arity": 65}, "arity"),
            ({"expr": "{0}", "arity": True}, "arity"),
            ({"expr": "{0}", "flops_per_element": float("inf")}, "flops_per_element"),
            ({"expr": "{0}", "reference": 3}, "reference"),
        ],
    )
    def test_other_fields(self, kw: dict[str, Any], match: str) -> None:
        with pytest.raises(InvalidArgument, match=match):
            _custom(**kw)
        assert OP not in ops.REGISTRY

    @pytest.mark.parametrize("name", ["if", "_op", "é", "a b", "x" * 65])
    def test_op_names(self, name: str) -> None:
        with pytest.raises(InvalidArgument):
            ops.custom(name, expr="{0}", reference=lambda xs: xs[0])
        assert name not in ops.REGISTRY


def _graph() -> Any:
    """up -> relu -> hyg_t(alpha=0.5) -> scale -> down: a fusible chain through the op."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        b = GraphBuilder()
        x, y, z, w = (b.alloc_buffer(n, 256) for n in "xyzw")
        b.add_memcpy("up", MemcpyDir.HostToDevice, 256, dst=x)
        b.add_kernel("relu", 1, 64).fusible().inputs([x]).outputs([y]).finish()
        b.add_kernel(OP, 1, 64).fusible().inputs([y]).outputs([z]).finish()
        b.add_kernel("scale", 1, 64).fusible().inputs([z]).outputs([w]).finish()
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 256, src=w)
        return b.build()


_idents = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_atoms = st.sampled_from(["{0}", "{p}", "2.0f", "0.5f", "1e-3f", "fmaxf({0}, {p})", "expf({0})",
                          "n", "i", "in0", "t0", "m0", "row", "(float)1"])  # fmt: skip
_exprs = st.lists(
    st.tuples(_atoms, st.sampled_from([" + ", " * ", " - ", " / "])), min_size=1, max_size=4
).map(lambda xs: "(" + "".join(a + op for a, op in xs[:-1]) + xs[-1][0] + ")")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=_idents, expr=_exprs)
def test_accepted_ops_compile_alone_and_fused(nvrtc_compile: Any, name: str, expr: str) -> None:
    """Either custom() refuses the parameter name or expression, or the op's kernels (alone
    and fused between two built-in ops) have distinct argument names and compile."""
    expr = expr.replace("{p}", "{" + name + "}")
    try:
        _custom(expr=expr, params={name: 0.5}, reference=lambda xs, **p: np.float32(2) * xs[0])
    except InvalidArgument:
        refused = True
    else:
        refused = False
    bare = re.findall(r"[A-Za-z_]\w*", re.sub(r"\{[^}]*\}|(?<!\w)\d[\w.]*", " ", expr))
    reserved = (
        name in cnames.GENERATED
        or name in cnames.C_KEYWORDS
        or name.startswith(("_", "ox_"))
        or cnames._NUMBERED.fullmatch(name) is not None
        or bool({"n", "i", "in0", "t0", "m0", "row"} & set(bare))
    )
    assert refused == reserved, (name, expr)
    if refused:
        return
    g = _graph()
    node = next(n for n in g.nodes if n.op == OP)
    fused = fuse(g).graph
    kernels = [kernel_source(g, node)] + [
        kernel_source(fused, n) for n in fused.kernels() if n.fused is not None
    ]
    assert len(kernels) >= 2
    for ks in kernels:
        names = [a for _, a, _ in ks.scalar_args]
        assert len(names) == len(set(names)), ks.source
        nvrtc_compile(ks.source, ks.function_name, "sm_90")
