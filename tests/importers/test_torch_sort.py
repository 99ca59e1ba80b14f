"""torch.sort, argsort and topk of imported modules map to the library's ``sort_*`` and
``topk_*`` ops (one kernel per output used: the values, the int64 indices), never to
opaque kernels: the simulator gives eager's outputs with fusion on and off, the generated
C run on the CPU gives the simulator's values, and NVRTC compiles it.

torch's unstable sort and its topk leave the order of equal elements unspecified: on rows
without ties the outputs equal eager's exactly; on rows with ties the values do, and the
indices are distinct and gather those values (the library takes lower index first, which
torch's stable sort gives exactly). ``topk(sorted=False)``, whose order torch leaves to
``std::nth_element``, is imported sorted and listed in ``model.patterns`` (opaque, saying
why, with ``patterns=False``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import from_exported_program
from oxiwork.ops import kernel_source
from oxiwork.reference import evaluate
from tests.executor.emulated_driver import CXX
from tests.importers._eager import import_with_eager
from tests.ops.conftest import _compile as nvrtc_compile
from tests.ops.test_dtypes import _bits_equal, _run_c

SORTS = ("sort_values", "sort_indices", "topk_values", "topk_indices")


class Sorts(nn.Module):
    """Values only, indices only, both, over every dim, both directions, in int64 and
    bfloat16 too; an epilogue after them."""

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2.0  # (exact: a sort's values are bits to compare)
        v, i = torch.sort(y, dim=1, descending=True)  # both outputs
        return (
            v,
            i,
            torch.sort(y, dim=0)[0] + 1.0,  # values only, an epilogue fused after
            torch.argsort(y, dim=-1),  # indices only
            torch.argsort(y, dim=0, descending=True, stable=True),
            y.sort(stable=True)[1],
            torch.msort(y),
            torch.topk(y, 2).values,
            torch.topk(y, 3, dim=0, largest=False).indices,
            *torch.topk(y, 1, dim=1),
            torch.sort(ids, descending=True)[0],  # int64
            torch.topk(ids, 2)[1],
            torch.sort(y.to(torch.bfloat16), dim=1)[0].float(),  # bfloat16
        )


class Router(nn.Module):
    """Mixture-of-experts routing (Switch Transformer, Mixtral): each token's top-k gate
    logits, a softmax over them, its chosen experts' outputs gathered by the indices and
    weighted."""

    def __init__(self, d: int = 8, experts: int = 4, k: int = 2) -> None:
        super().__init__()
        self.k, self.e, self.d = k, experts, d
        self.gate = nn.Linear(d, experts, bias=False)
        self.experts = nn.Linear(d, experts * d)  # every expert's output at once

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        top, idx = torch.topk(self.gate(x), self.k, dim=-1)
        w = torch.softmax(top, dim=-1)
        outs = self.experts(x).view(x.shape[0], self.e, self.d)
        chosen = torch.gather(outs, 1, idx.unsqueeze(-1).expand(-1, -1, self.d))
        return (w.unsqueeze(-1) * chosen).sum(dim=1), idx


def _inputs(ties: bool) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    if ties:  # few values, NaN, infinities and both zeros among them
        pool = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -1.0])
        x = pool[torch.randint(0, len(pool), (4, 5, 6))]
        ids = torch.randint(0, 3, (3, 7))
    else:  # no two elements equal
        x = (torch.randperm(120).float() / 8 - 7).reshape(4, 5, 6)
        ids = torch.randperm(21).reshape(3, 7) - 10
    return x, ids


def _simulated(model, fusion: bool) -> tuple[np.ndarray, ...]:
    plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
    verify(plan)
    return model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)


def test_sorts_map_to_library_ops_and_match_eager_without_ties() -> None:
    model, eager = import_with_eager(Sorts(), _inputs(ties=False))
    assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]
    used = [n.op for n in model.graph.kernels()]
    assert {k: used.count(k) for k in SORTS} == {
        "sort_values": 5,
        "sort_indices": 4,
        "topk_values": 2,
        "topk_indices": 3,
    }
    for fusion in (False, True):
        for g, w in zip(_simulated(model, fusion), eager, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            _bits_equal(g, w, f"fusion={fusion}")


class Undecomposed(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.argsort(x, dim=1),
            torch.argsort(x, dim=0, descending=True, stable=True),
            torch.msort(x),
            torch.sort(x, dim=-1, stable=True)[0],
            torch.topk(x, 2, dim=1)[1],
        )


def test_undecomposed_argsort_and_msort_map_too() -> None:
    # torch.export keeps argsort and msort whole until run_decompositions makes them sorts
    x = _inputs(ties=False)[0]
    ep = torch.export.export(Undecomposed(), (x,))
    assert {"aten.argsort.default", "aten.argsort.stable", "aten.msort.default"} <= {
        str(n.target) for n in ep.graph.nodes
    }
    model = from_exported_program(ep)
    assert model.opaque == (), [(o.target, o.reason) for o in model.opaque]
    with torch.no_grad():
        eager = [t.numpy() for t in Undecomposed()(x)]
    for g, w in zip(_simulated(model, True), eager, strict=True):
        _bits_equal(g, w, "undecomposed")


def test_with_ties_values_match_and_indices_gather_them() -> None:
    x, ids = _inputs(ties=True)
    model, eager = import_with_eager(Sorts(), (x, ids))
    assert model.opaque == ()
    got = _simulated(model, True)
    # (output, its input, dim) of each index output of Sorts, the values it must gather
    y = x * 2.0
    index_outputs = {1: (y, 1), 3: (y, -1), 4: (y, 0), 5: (y, -1), 8: (y, 0), 10: (y, 1)}
    index_outputs[12] = (ids, -1)
    for k, (g, w) in enumerate(zip(got, eager, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype
        if k not in index_outputs:  # values: equal (-0.0 may stand for a tied 0.0)
            np.testing.assert_array_equal(g, w)
            continue
        src, dim = index_outputs[k]
        rows = np.sort(np.moveaxis(g, dim, -1), axis=-1)
        assert (np.diff(rows, axis=-1) > 0).all(), f"output {k}: indices of a row repeat"
        want = torch.gather(src, dim, torch.from_numpy(w)).numpy()
        np.testing.assert_array_equal(torch.gather(src, dim, torch.from_numpy(g)).numpy(), want)
    # the stable sorts' indices are torch's exactly, ties and all
    for k in (4, 5):
        np.testing.assert_array_equal(got[k], eager[k])


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to run the generated C")
@pytest.mark.parametrize("ties", [False, True])
def test_generated_c_gives_the_simulators_values(ties: bool, tmp_path) -> None:
    model, _ = import_with_eager(Sorts(), _inputs(ties))
    plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
    g = plan.graph
    values = evaluate(g, dict(model.inputs))  # every buffer's value, by name
    seen = 0
    for node in g.kernels():
        steps = node.fused.steps if node.fused is not None else ()
        if node.op not in SORTS and not any(s.op in SORTS for s in steps):
            continue
        arrays = [values[g.buffer(b).name] for b in node.inputs]
        (got,) = _run_c(g, node, arrays, tmp_path)
        _bits_equal(got, values[g.buffer(node.outputs[0]).name], node.name)
        seen += 1
    assert seen == 14


def test_generated_c_compiles_with_nvrtc() -> None:
    pytest.importorskip("cuda.bindings.nvrtc")
    model, _ = import_with_eager(Sorts(), _inputs(False))
    seen, compiled = set(), set()
    for g in (model.graph, ExecutionPlan.build(model.graph, fusion=True).graph):
        for node in g.kernels():
            steps = [node.op] if node.fused is None else [s.op for s in node.fused.steps]
            if not set(steps) & set(SORTS):
                continue
            ks = kernel_source(g, node)
            body = ks.source.replace(ks.function_name, "k")
            if body not in seen:  # (sizes are arguments: many kernels share a source)
                seen.add(body)
                assert nvrtc_compile(ks.source, ks.function_name, "sm_90")
            compiled |= set(steps)
    assert set(SORTS) <= compiled


def test_mixture_of_experts_routing_imports_whole() -> None:
    torch.manual_seed(3)
    model, eager = import_with_eager(Router(), (torch.randn(6, 8),))
    assert model.opaque == ()
    assert {"topk_values", "topk_indices", "softmax", "gather"} <= {
        n.op for n in model.graph.kernels()
    }
    for fusion in (False, True):
        out, idx = _simulated(model, fusion)
        np.testing.assert_allclose(out, eager[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(idx, eager[1])


class Unsorted(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = torch.topk(x, 3, sorted=False)[0]
        return v * 2.0, torch.sort(x.view(6, 4), dim=0)[1]  # a reshape, read through a view


def test_unsorted_topk_is_sorted_and_listed_or_stays_opaque_without_patterns() -> None:
    # topk(sorted=False) leaves the order unspecified: imported sorted (DeepSeek-V3's router
    # sums over its experts in any order), listed in model.patterns; without patterns it is
    # torch's own op, saying why
    torch.manual_seed(4)
    x = torch.randn(4, 6)
    model, eager = import_with_eager(Unsorted(), (x,))
    assert model.opaque == ()
    (match,) = [m for m in model.patterns if m.pattern == "unsorted topk sorted"]
    assert match.kernel in {n.name for n in model.graph.kernels() if n.op == "topk_values"}
    values, order = _simulated(model, True)
    # the same values as eager's (its order is std::nth_element's), sorted descending
    np.testing.assert_array_equal(np.sort(values, axis=-1), np.sort(eager[0], axis=-1))
    np.testing.assert_array_equal(values, 2.0 * torch.topk(x, 3).values.numpy())
    np.testing.assert_array_equal(order, eager[1])
    raw, eager = import_with_eager(Unsorted(), (x,), patterns=False)
    (opaque,) = raw.opaque  # the topk's values; the sort of the reshape is the library's
    assert opaque.target == "aten.topk.default"
    assert "sorted=False" in opaque.reason and "std::nth_element" in opaque.reason
    assert "sort_indices" in {n.op for n in raw.graph.kernels()}
    for g, w in zip(_simulated(raw, False), eager, strict=True):  # (torch's own there)
        np.testing.assert_array_equal(g, w)
