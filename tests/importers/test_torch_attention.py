"""Eager attention imports as one ``lib_reduce.strided_attention`` kernel.

transformers' eager attention (GPT-2, BERT, ViT in bench/models.py) exports as bmm, a scale,
a mask add, softmax, a clone (dropout), bmm and the heads' permute + clone; the importer
makes that one kernel (as Inductor replaces it by one SDPA call) when a library op computes
it, and converts the nodes one by one otherwise. Outputs match eager with fusion on and off.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from tests.importers._eager import import_with_eager
from tests.importers.test_torch import _assert_matches


class EagerAttention(nn.Module):
    """Self-attention written as transformers' eager implementation writes it."""

    def __init__(self, d: int = 16, heads: int = 2, divide: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)
        self.heads, self.divide = heads, divide

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2))
        h = d // self.heads
        scores = scores / math.sqrt(h) if self.divide else scores * h**-0.5
        if mask is not None:
            scores = scores + mask
        probs = self.drop(torch.softmax(scores, dim=-1))
        out = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(b, s, d)
        return self.proj(out)


def _run(module: nn.Module, args: tuple[torch.Tensor, ...], **options: object):
    torch.manual_seed(0)
    model, eager = import_with_eager(module, args, **options)
    for fusion in (False, True):
        for streams in (1, 3):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            verify(plan)
            stats = SequentialExecutor(plan).run(model.inputs)
            _assert_matches(model.outputs_from(stats.outputs), eager)
    return model


def _attention_kernels(model):
    return [n for n in model.graph.kernels() if model.targets[n.name] == "attention"]


class TestEagerAttention:
    @pytest.mark.parametrize(
        "divide, mask_shape",
        [(False, None), (True, (1, 1, 5, 5)), (False, (1, 1, 1, 5)), (True, (1, 2, 5, 5))],
    )
    def test_one_kernel_equal_to_eager(self, divide, mask_shape) -> None:
        # one sequence, as bench/models.py runs them (with more, torch's decomposition
        # copies q, k and v before the bmms: clones of expanded views, kept as kernels)
        torch.manual_seed(0)
        x = torch.randn(1, 5, 16)
        args = (x,) if mask_shape is None else (x, torch.randn(mask_shape))
        model = _run(EagerAttention(divide=divide), args)
        (att,) = _attention_kernels(model)
        assert att.op.startswith("attn_") and att.fusible and model.opaque == ()
        # no bmm, softmax, scale or clone of the heads is left: qkv, attention, proj and
        # the copy of the output (a view of proj's result)
        targets = [model.targets[n.name] for n in model.graph.kernels()]
        assert sorted(targets) == [
            "aten.addmm.default", "aten.addmm.default", "aten.clone.default", "attention",
        ]  # fmt: skip
        (copy,) = [n for n in model.graph.kernels() if n.op == "copy"]
        assert copy.name.startswith("output.")
        # the heads are written permuted, so the projection reads the result as it is
        plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
        assert plan.kernel_count_fused == 3  # qkv, attention, proj with the copy

    def test_a_mask_no_layout_fits_is_converted_node_by_node(self) -> None:
        # a (2, 1, 5, 5) mask over 2 batches x 2 heads: stride 25 across batches, 0 across
        # heads, which no single batch stride of the folded (4, 5, 5) scores describes
        torch.manual_seed(0)
        x = torch.randn(2, 5, 16)
        model = _run(EagerAttention(), (x, torch.randn(2, 1, 5, 5)))
        assert not _attention_kernels(model) and model.opaque == ()
        assert [model.targets[n.name] for n in model.graph.kernels()].count("aten.bmm.default") == 2

    def test_softmax_read_elsewhere_is_not_absorbed(self) -> None:
        class Both(EagerAttention):
            def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                b, s, d = x.shape
                q, k, v = (t.view(b, s, 2, -1).transpose(1, 2) for t in self.qkv(x).split(d, 2))
                p = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1)
                return p @ v, p  # the probabilities are an output too

        torch.manual_seed(0)
        model = _run(Both(), (torch.randn(1, 4, 16),))
        assert not _attention_kernels(model)


class TestCloneReadInPlace:
    def test_a_clone_only_matmuls_read_is_no_kernel(self) -> None:
        # .contiguous() of a transposed operand: the matmuls read the transpose in place
        # (strided GEMMs); the element-wise add reading one keeps its copy
        class Clones(nn.Module):
            def forward(self, a, b, c):
                t = a.t()
                return (
                    t.contiguous() @ b,
                    torch.bmm(c.transpose(1, 2).contiguous(), c),
                    (t.contiguous() + 1),
                )

        torch.manual_seed(0)
        args = (torch.randn(4, 3), torch.randn(4, 5), torch.randn(2, 3, 4))
        model = _run(Clones(), args)
        kernels = {model.targets[n.name]: n for n in model.graph.kernels()}
        assert kernels["aten.mm.default"].op.startswith("gemm_")
        assert kernels["aten.bmm.default"].op.startswith("gemm_")
        g = model.graph
        assert g.buffer(kernels["aten.mm.default"].inputs[0]).name == "a"
        assert g.buffer(kernels["aten.bmm.default"].inputs[0]).name == "c"
        assert [n.op for n in g.kernels()].count("copy") == 1 and model.opaque == ()

    def test_a_clone_no_layout_fits_stays_a_copy(self) -> None:
        # two sequences x two heads: the heads' batch axes are no single stride, so the
        # clones torch puts before the bmms stay copies (EagerAttention with a 2-D mask
        # converted node by node, above, computes eager's values with them)
        torch.manual_seed(0)
        model = _run(EagerAttention(), (torch.randn(2, 5, 16),))
        copies = [n for n in model.graph.kernels() if n.op == "copy"]
        assert len(copies) == 4  # q, k, v and the output's copy
        assert len(_attention_kernels(model)) == 1


class TestPatternsSwitch:
    """``patterns=True`` lists what it replaced; ``False`` keeps one kernel per ATen op."""

    def test_attention_is_listed_and_can_be_turned_off(self) -> None:
        torch.manual_seed(0)
        args = (torch.randn(1, 5, 16), torch.randn(1, 1, 5, 5))
        on = _run(EagerAttention(), args)
        (att,) = _attention_kernels(on)
        matches = {m.pattern: m for m in on.patterns}
        assert matches["attention"].kernel == att.name
        # the chain's bmms, scale, mask add and softmax are among the nodes it covers
        covered = " ".join(matches["attention"].nodes)
        assert covered.count("bmm") == 2 and "softmax" in covered
        off = _run(EagerAttention(), args, patterns=False)
        assert off.patterns == () and not _attention_kernels(off) and off.opaque == ()
        ops = [off.targets[n.name] for n in off.graph.kernels()]
        assert ops.count("aten.bmm.default") == 2 and "aten._softmax.default" in ops
        assert len(off.graph.kernels()) > len(on.graph.kernels())

    def test_clones_in_place_are_listed(self) -> None:
        class Clone(nn.Module):
            def forward(self, a, b):
                return a.t().contiguous() @ b

        torch.manual_seed(0)
        on = _run(Clone(), (torch.randn(4, 3), torch.randn(4, 5)))
        assert [m.pattern for m in on.patterns] == ["clone read in place"]
        off = _run(Clone(), (torch.randn(4, 3), torch.randn(4, 5)), patterns=False)
        assert off.patterns == ()
        assert [off.targets[n.name] for n in off.graph.kernels()].count("aten.clone.default") == 1

    def test_zero_pads_into_convolutions_are_listed(self) -> None:
        class Padded(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.conv = nn.Conv2d(2, 3, 3)

            def forward(self, x):
                return self.conv(nn.functional.pad(x, (1, 1, 1, 1)))

        torch.manual_seed(0)
        x = torch.randn(1, 2, 6, 6)
        on = _run(Padded(), (x,))
        assert [m.pattern for m in on.patterns] == ["pad into convolutions"]
        off = _run(Padded(), (x,), patterns=False)
        targets = [off.targets[n.name] for n in off.graph.kernels()]
        assert off.patterns == () and "aten.constant_pad_nd.default" in targets
        assert len(off.graph.kernels()) == len(on.graph.kernels()) + 1
