"""A mixture-of-experts dispatch, as transformers' grouped experts compute it, imports
without opaque kernels: ``torch.histc`` to ``histc``, ``cumsum(dtype=torch.int32)`` to
``cumsum_int32``, ``x // n`` and ``torch.div(rounding_mode=...)`` of integers to
``floor_divide_scalar`` / ``trunc_divide_scalar``, ``%`` of integers to
``remainder_int_scalar``, ``inv[perm] = arange`` to
``index_put``, a router's ``scatter`` of ``-inf`` to ``scatter_value``; the simulator gives
eager's outputs with fusion on and off. What the library does not compute stays opaque,
saying why: a histogram over the data's own range, an accumulating index_put, a float floor
division, a scatter of NaN or one that reduces.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from tests.importers._eager import import_with_eager


class Dispatch(nn.Module):
    """Tokens sorted by expert, each expert's row offsets, each slot's token, the inverse
    permutation: transformers' ``grouped_mm_experts_forward`` up to its matmuls."""

    def __init__(self, experts: int = 4, top_k: int = 2) -> None:
        super().__init__()
        self.experts, self.top_k = experts, top_k

    def forward(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ids = torch.topk(logits, self.top_k, dim=-1).indices.reshape(-1)
        sorted_ids, perm = torch.sort(ids)
        counts = torch.histc(sorted_ids.float(), bins=self.experts, min=0, max=self.experts - 1)
        offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
        token = perm // self.top_k
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        toward_zero = torch.div(perm - 5, -3, rounding_mode="trunc")
        bucket = (perm * 7919 - 11) % 5  # (a hash, as CANINE buckets its ids)
        masked = torch.scatter(logits, -1, ids.view(-1, self.top_k)[:, :1], float("-inf"))
        one_hot = torch.zeros_like(logits, dtype=torch.int64).scatter(1, sorted_ids.view(-1, 2), 3)
        return counts, offsets, token, inv, toward_zero, bucket, masked, one_hot


def _simulated(model, fusion: bool) -> tuple[np.ndarray, ...]:
    plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
    verify(plan)
    return model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)


def test_dispatch_imports_whole_and_matches_eager() -> None:
    torch.manual_seed(5)
    model, eager = import_with_eager(Dispatch(), (torch.randn(7, 4),))
    assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]
    used = {n.op for n in model.graph.kernels()}
    assert {"histc", "cumsum_int32", "floor_divide_scalar", "index_put"} <= used
    assert {"trunc_divide_scalar", "remainder_int_scalar", "scatter_value"} <= used
    for fusion in (False, True):
        for got, want in zip(_simulated(model, fusion), eager, strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


class Unmapped(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spread = torch.histc(x, bins=3)  # min == max == 0: the data's own range
        acc = torch.zeros(4).index_put((idx,), x[:3], accumulate=True)
        halves = torch.div(x, 2.0, rounding_mode="floor")
        by_tensor = torch.div(idx, idx + 1, rounding_mode="trunc")
        nan = torch.scatter(x, 0, idx, float("nan"))
        summed = torch.scatter(x, 0, idx, 2.0, reduce="add")
        return spread, acc, halves, by_tensor, nan, summed


def test_what_the_library_does_not_compute_stays_opaque_saying_why() -> None:
    torch.manual_seed(6)
    model, eager = import_with_eager(Unmapped(), (torch.randn(5), torch.tensor([0, 2, 0])))
    reasons = {o.target: o.reason for o in model.opaque}
    assert "range from the data" in reasons["aten.histc.default"]
    assert "accumulate=True" in reasons["aten.index_put.default"]
    divisions = [o.reason for o in model.opaque if o.target == "aten.div.Tensor_mode"]
    assert any("take int64 or int32" in r for r in divisions)  # a float floor division
    assert any("divides by a tensor" in r for r in divisions)
    assert "scatters NaN" in reasons["aten.scatter.value"]
    assert "no op of the library" in reasons["aten.scatter.value_reduce"]  # (its own overload)
    for got, want in zip(_simulated(model, False), eager, strict=True):  # (torch's own there)
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


class Experts(nn.Module):
    """torch._grouped_mm (bfloat16: what torch.export takes) of a weight stored (E, N, K),
    passed transposed as transformers' experts pass theirs, then an activation."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 16, 8).bfloat16())

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch._grouped_mm(x, self.w.transpose(-2, -1), offs=offs)).float()


def test_grouped_matmul_reads_a_transposed_weight_in_place_and_matches_eager() -> None:
    torch.manual_seed(7)
    # (every row in a group: torch leaves the rows past the last offset unwritten, the
    # library's are 0; an empty group in the middle)
    offs = torch.tensor([2, 2, 6], dtype=torch.int32)
    model, eager = import_with_eager(Experts(), (torch.randn(6, 8).bfloat16(), offs))
    assert model.opaque == ()
    (mm,) = [n for n in model.graph.kernels() if n.op == "grouped_mm"]
    assert dict(mm.params) == {"transposed": 1.0}  # no copy of the weights
    assert "copy" not in {n.op for n in model.graph.kernels()}
    for fusion in (False, True):  # bfloat16 products summed in float32, rounded once: exact
        (got,) = _simulated(model, fusion)
        np.testing.assert_array_equal(got, eager[0])


class MaskedFill(nn.Module):
    """``x[mask] = v`` with one value ``v`` (GraniteSpeech pads its token ids so), on ids
    and on floats, with a mask of the same shape (a value of another dtype too, which torch
    converts first), and a mask over fewer axes (opaque)."""

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ids = ids.clone()
        ids[ids % 3 == 0] = torch.tensor(7)
        y = x * 2
        y[x > 0.5] = torch.tensor(-1.0)
        z = x.clone()
        z[x < 0.2] = torch.tensor(3)  # an int64 value into float32
        rows = x.clone()
        rows[x[:, 0] > 0.5] = torch.tensor(0.0)  # a mask over the rows only
        return ids, y, z, rows


def test_a_masked_fill_by_index_put_of_one_value_is_where() -> None:
    ids = torch.arange(16).reshape(2, 8)
    x = torch.rand(2, 8, generator=torch.Generator().manual_seed(0))
    model, eager = import_with_eager(MaskedFill(), (ids, x))
    (row,) = model.opaque  # the mask over the rows; where converts the int64 value as torch
    assert "bool mask of shape (2,) into (2, 8)" in row.reason
    assert sum(k.op == "where" for k in model.graph.kernels()) == 3
    for fusion in (False, True):
        for got, want in zip(_simulated(model, fusion), eager, strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
