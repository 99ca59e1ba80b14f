"""Element-wise ATen ops through the importer: broadcasting operands, batch norm,
activations, scalars, where and comparisons map to library ops (not opaque), and the
simulator computes eager's outputs with fusion on and off, on 1 to 4 streams."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import ImportedModel, from_module
from oxiwork.reference import evaluate


class MaskAdd(nn.Module):
    """Attention scores plus an additive mask broadcast over the heads, then softmax."""

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(scores + mask, dim=-1)


class RMSScale(nn.Module):
    """An RMS-norm-like scale: a per-row factor (..., 1) and a (hidden,) weight."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x: torch.Tensor, rms: torch.Tensor) -> torch.Tensor:
        return (x * rms) * self.weight


def _make(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "mask_add":
        mask = torch.zeros(1, 1, 6, 6).masked_fill(torch.ones(6, 6).triu(1).bool(), -1e4)
        return MaskAdd(), (torch.randn(1, 3, 6, 6), mask)
    if name == "rms_scale":
        return RMSScale(), (torch.randn(2, 5, 16), torch.rand(2, 5, 1) + 0.5)
    raise KeyError(name)


MODELS = ("mask_add", "rms_scale")
_CACHE: dict[str, tuple[ImportedModel, tuple[np.ndarray, ...]]] = {}


def _imported(name: str) -> tuple[ImportedModel, tuple[np.ndarray, ...]]:
    if name not in _CACHE:
        module, args = _make(name)
        module.eval()
        with torch.no_grad():
            eager = module(*args)
        eager = eager if isinstance(eager, tuple) else (eager,)
        _CACHE[name] = (from_module(module, args), tuple(t.numpy() for t in eager))
    return _CACHE[name]


@pytest.mark.parametrize("name", MODELS)
class TestElementwiseImport:
    def test_graph_verifies_and_nothing_is_opaque(self, name: str) -> None:
        model, _ = _imported(name)
        verify(model.graph)
        assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]

    def test_reference_equals_eager(self, name: str) -> None:
        model, want = _imported(name)
        got = model.outputs_from(evaluate(model.graph, model.inputs))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("streams", [1, 2, 4])
    @pytest.mark.parametrize("fusion", [False, True])
    def test_simulator_equals_eager(self, name: str, fusion: bool, streams: int) -> None:
        model, want = _imported(name)
        plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    def test_fusion_merges_the_broadcasting_chain(self, name: str) -> None:
        model, _ = _imported(name)
        plan = ExecutionPlan.build(model.graph, fusion=True)
        assert plan.kernel_count_fused == 1 < plan.kernel_count_original
