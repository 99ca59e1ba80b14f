"""Importing float16, bfloat16 and integer models: dtypes carried through, eager's numbers out.

Small modules of our own: an int64 embedding lookup, an MLP in float16 and bfloat16
(``model.half()``, ``model.to(torch.bfloat16)``), casts with ``.to(dtype)``. Each imported
graph verifies, and the simulator's outputs equal eager's with fusion on and off on 1 to 4
streams, within PyTorch's own default tolerances per dtype (``torch.testing.assert_close``:
float32 rtol 1.3e-6 / atol 1e-5, float16 1e-3 / 1e-5, bfloat16 1.6e-2 / 1e-5): both sides
compute in float32 and round once per op, so they differ only where float32 rounding of a
sum differs in order.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import UnsupportedModel, from_exported_program, from_module
from oxiwork.reference import evaluate

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")

TOLERANCES = {  # torch.testing.assert_close's defaults
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


class Lookup(nn.Module):
    """Token and position embeddings (int64 ids), summed and scaled: GPT-2's input."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(50, 8)
        self.pos = nn.Embedding(16, 8)

    def forward(self, ids: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return (self.tok(ids) + self.pos(pos)) * 0.5


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.act(self.fc1(x))) * 0.5)


class Casts(nn.Module):
    """float32 in, a half-precision middle, float32 out; and an integer branch."""

    def __init__(self, mid: torch.dtype) -> None:
        super().__init__()
        self.mid = mid

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(x.to(self.mid)) * 3.0
        return h.to(torch.float32), (x * 100).to(torch.int64)


def _eager(module: nn.Module, args: tuple) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*args)
    outs = out if isinstance(out, tuple) else (out,)
    return [o.float().numpy() if o.is_floating_point() else o.numpy() for o in outs]


def _check(module: nn.Module, args: tuple, dtypes: list[str]) -> None:
    model = from_module(module, args)
    verify(model.graph)
    got_dtypes = [model.graph.buffer_by_name(n).dtype for n in model.outputs]
    assert got_dtypes == dtypes
    eager = _eager(module, args)
    results = [model.outputs_from(evaluate(model.graph, model.inputs))]
    for fusion in (False, True):
        for streams in (1, 2, 3, 4):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            results.append(model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs))
    for outs in results:
        for got, want, dt in zip(outs, eager, dtypes, strict=True):
            assert got.dtype.name == dt
            if dt in ("int64", "int32", "bool"):
                np.testing.assert_array_equal(got, want)
            else:
                rtol, atol = TOLERANCES[getattr(torch, dt)]
                np.testing.assert_allclose(got.astype(np.float32), want, rtol=rtol, atol=atol)
    return model


class TestRefusals:
    def test_raises_float8_naming_the_dtype(self) -> None:
        class F8(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x.to(torch.float8_e4m3fn)

        with pytest.raises(UnsupportedModel, match=r"torch\.float8_e4m3fn tensor"):
            from_module(F8(), (torch.randn(4),))

    def test_raises_complex_naming_the_dtype(self) -> None:
        with pytest.raises(UnsupportedModel, match=r"torch\.complex64 tensor"):
            from_module(nn.Identity(), (torch.randn(4, dtype=torch.complex64),))


class TestDtypes:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
    def test_int64_embedding_lookup(self, dtype: torch.dtype) -> None:
        torch.manual_seed(0)
        module = Lookup().eval().to(dtype)
        ids = torch.randint(0, 50, (2, 7))
        pos = torch.arange(7).unsqueeze(0).expand(2, 7).contiguous()
        model = _check(module, (ids, pos), [str(dtype).split(".")[1]])
        assert model.graph.buffer_by_name("ids").dtype == "int64"
        lookups = [k for k in model.graph.kernels() if k.op == "embedding"]
        assert len(lookups) == 2 and not model.opaque

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_mlp_in_half_precision(self, dtype: torch.dtype) -> None:
        torch.manual_seed(1)
        module = MLP().eval().to(dtype)
        model = _check(module, (torch.randn(6, 12).to(dtype),), [str(dtype).split(".")[1]])
        # every buffer the model computes holds the model's dtype: nothing was widened
        assert {b.dtype for b in model.graph.buffers} == {str(dtype).split(".")[1]}
        lib = {k.op for k in model.graph.kernels()} & {"gelu", "relu_nan", "scale"}
        assert lib == {"gelu", "relu_nan", "scale"}

    @pytest.mark.parametrize("mid", [torch.float16, torch.bfloat16])
    def test_to_dtype_is_a_cast_kernel(self, mid: torch.dtype) -> None:
        torch.manual_seed(2)
        model = _check(Casts(mid), (torch.randn(3, 5),), ["float32", "int64"])
        name = str(mid).split(".")[1]
        ops_used = {k.op for k in model.graph.kernels()}
        assert {f"cast_{name}", "cast_float32", "cast_int64"} <= ops_used
        assert not model.opaque
        fused = ExecutionPlan.build(model.graph, fusion=True)
        assert fused.kernel_count_fused < len(model.graph.kernels())

    @pytest.mark.parametrize("mid", [torch.float16, torch.bfloat16, torch.int64])
    def test_undecomposed_to_with_a_new_dtype_is_a_cast_not_a_view(self, mid) -> None:
        # torch.export without decompositions keeps aten.to.dtype and .device, whose
        # schemas return an alias of the input: with a new dtype each is a copy, so a cast
        # kernel, and a view-reading op after it (flip) reads the cast (it crashed for
        # bfloat16, and left float16 and int64 conversions opaque)
        class To(nn.Module):
            def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
                a = torch.flip(x.to(mid), [0])
                b = x.to("cpu", mid) * 2
                c = y.type_as(x) + x  # aten.type_as: a cast too
                return a, b, c, x.to(torch.float32)  # the last: the same dtype, an alias

        x, y = torch.randn(5, 4) * 50, torch.randint(-9, 9, (5, 4))
        ep = torch.export.export(To(), (x, y))
        targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
        assert {"aten.to.dtype", "aten.to.device", "aten.type_as.default"} <= targets, targets
        model = from_exported_program(ep)
        assert not model.opaque, model.opaque
        casts = [k.op for k in model.graph.kernels() if k.op.startswith("cast_")]
        assert len(casts) == 3, casts  # (x.to(float32) is x itself: no kernel)
        want = _eager(To(), (x, y))
        got = model.outputs_from(evaluate(model.graph, model.inputs))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(np.asarray(g).astype(w.dtype), w)  # casts are exact

    def test_gather_with_int64_indices(self) -> None:
        class Pick(nn.Module):
            def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
                return torch.gather(x, 1, idx) * 2.0

        torch.manual_seed(3)
        x, idx = torch.randn(3, 6), torch.randint(0, 6, (3, 4))
        model = _check(Pick(), (x, idx), ["float32"])
        assert "gather" in {k.op for k in model.graph.kernels()} and not model.opaque
