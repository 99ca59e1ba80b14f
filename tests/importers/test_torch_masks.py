"""Attention masks as transformers builds them: int64 position ids, comparisons giving
bool, ``&`` of masks, ``where`` on a bool condition read through an ``expand`` view,
advanced indexing (``aten.index.Tensor``), ``cumsum`` of a bool, ``gather`` of an int64
buffer and ``cat`` of reshaped int64 slices: every op maps to the library (nothing is
opaque), the simulator computes eager's outputs with fusion on and off, and every kernel's
generated CUDA C compiles with NVRTC."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.ops import kernel_source
from tests.importers._eager import import_with_eager
from tests.ops.conftest import _compile

T = 6  # tokens


class CausalMask(nn.Module):
    """GPT-2's mask builder in small: positions from ``arange + start`` (an int64 input, as a
    KV cache's offset: with a constant instead, the importer folds the whole mask), a padded copy
    ``cat([pos[:, :1] - 1, pos])`` and its differences (slices of one buffer), segment ids
    by ``cumsum`` of ``ne``, positions read by advanced indexing ``pos[b, q]``, and the
    causal and same-segment tests and-ed into a bool mask turned into an additive bias."""

    def forward(self, x: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        cache = torch.arange(t) + start
        pos = cache.unsqueeze(0)
        ext = torch.cat([pos[:, :1] - 1, pos], dim=-1)
        step = ext[:, 1:] - ext[:, :-1]
        seg = torch.cumsum(step.ne(0), -1)
        b = torch.arange(1).view(1, 1, 1, 1)
        q, k = cache.view(1, 1, t, 1), cache.view(1, 1, 1, t)
        mask = torch.ones((), dtype=torch.bool) & (pos[b, k] <= pos[b, q])
        mask = mask & (seg[b, q] == seg[b, k])
        bias = torch.where(mask, 0.0, torch.finfo(torch.float32).min)
        scores = x @ x.transpose(1, 2)
        return torch.softmax(scores[:, None] + bias, dim=-1)


class PaddingMask(nn.Module):
    """BERT's embeddings and mask in small: token types gathered from an expanded int64
    buffer at position ids (a slice), int64 ids shifted by a scalar, an embedding sum, and
    a padding mask ``ids >= 0`` expanded over the keys, read by ``where``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("token_type_ids", torch.zeros(1, 16, dtype=torch.long))
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1))
        self.words = nn.Embedding(20, 8)
        self.types = nn.Embedding(2, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        pos = self.position_ids[:, :t]
        types = torch.gather(self.token_type_ids.expand(1, -1), 1, pos)
        h = self.words(ids * 2 - 1) + self.types(types)
        keep = (pos[:, None, :, None] - 2) >= 0
        bias = torch.where(keep.expand(1, 1, t, t), 0.0, -3.0e38)
        scores = h @ h.transpose(1, 2)
        return torch.softmax(scores[:, None] + bias, dim=-1)


def _make(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "causal":
        return CausalMask(), (torch.randn(1, T, 4), torch.tensor([0]))
    return PaddingMask(), (torch.randint(1, 10, (1, T)),)


_CACHE: dict[str, tuple] = {}


def _imported(name: str):
    if name not in _CACHE:
        _CACHE[name] = import_with_eager(*_make(name))
    return _CACHE[name]


@pytest.mark.parametrize("name", ["causal", "padding"])
class TestMasks:
    def test_graph_verifies_and_nothing_is_opaque(self, name: str) -> None:
        model, _ = _imported(name)
        verify(model.graph)
        assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]
        dtypes = {b.dtype for b in model.graph.buffers}
        assert {"int64", "bool"} <= dtypes

    @pytest.mark.parametrize("fusion", [False, True])
    def test_simulator_equals_eager(self, name: str, fusion: bool) -> None:
        model, want = _imported(name)
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        verify(plan.graph)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

    def test_generated_c_compiles(self, name: str) -> None:
        pytest.importorskip("cuda.bindings.nvrtc")
        # the kernels reading or writing int64/bool values (the float ones are the
        # float library's, compiled by tests/ops), unfused and fused, each source once
        model, _ = _imported(name)
        seen = set()
        for g in (model.graph, ExecutionPlan.build(model.graph, fusion=True).graph):
            for node in g.kernels():
                if {g.buffer(b).dtype for b in (*node.inputs, *node.outputs)} == {"float32"}:
                    continue
                ks = kernel_source(g, node)
                body = ks.source.replace(ks.function_name, "k")
                if body not in seen:
                    seen.add(body)
                    assert _compile(ks.source, ks.function_name, "sm_90")
        assert seen


def test_mask_ops_are_the_library_ops() -> None:
    ops_ = {n.op for n in _imported("causal")[0].graph.nodes if n.is_kernel}
    assert {"index_2", "cumsum", "cat_2", "le", "eq", "bitwise_and", "ne_scalar", "where"} <= ops_
    ops_ = {n.op for n in _imported("padding")[0].graph.nodes if n.is_kernel}
    assert {"gather", "ge_scalar", "where", "embedding", "scale", "sub_scalar"} <= ops_


class ConstantStart(CausalMask):
    """The same mask from ``arange + 0``: nothing in it depends on an input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, torch.zeros(1, dtype=torch.long))


def test_a_mask_of_constants_only_folds_into_one_constant() -> None:
    # every op of the mask reads only constants folded before it (the aranges, their views
    # and results), so it folds at import: no int64 or bool kernel is left, and the
    # constants only the folded ops read are dropped from the graph and its inputs
    model, want = import_with_eager(ConstantStart(), (torch.randn(1, T, 4),))
    assert model.opaque == ()
    kernel_dtypes = {
        model.graph.buffer(b).dtype for n in model.graph.kernels() for b in (*n.inputs, *n.outputs)
    }
    assert kernel_dtypes == {"float32"}
    assert set(model.folded) <= set(model.inputs)
    read = {model.graph.storage(b) for n in model.graph.nodes for b in n.inputs}
    assert {model.graph.buffer_by_name(f).id for f in model.folded} <= read
    plan = ExecutionPlan.build(model.graph, max_streams=2)
    got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
