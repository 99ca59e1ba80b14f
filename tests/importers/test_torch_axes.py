"""Reductions over any dims of imported modules: sum/mean/amax/amin/var/std, the 1- and
2-norms and argmax/argmin over any axes (keepdim or not) and softmax/log_softmax over any dim map to the library's ``*_dims``/``*_dim`` ops
(over the last axis: its row ops, as before), never to opaque kernels; the simulator gives
eager's outputs with fusion on and off, and the generated C compiles with NVRTC."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.ops import kernel_source
from tests.importers._eager import import_with_eager
from tests.ops.conftest import _compile as nvrtc_compile


class Reductions(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.tanh(x) * 2.0  # a prologue for the reductions to fuse
        return (
            y.sum(dim=(0, 2)),
            y.mean(dim=1, keepdim=True),
            y.amax(dim=(1, 3)),
            y.amin(dim=(0, 3), keepdim=True),
            torch.softmax(y, dim=1),
            torch.log_softmax(y, dim=0) + 1.0,
            torch.log_softmax(y, dim=-1),
            y.sum(dim=-1),  # the last axis: the library's row op
            y.mean(dim=(-1, -2, 0)),
            y.var(dim=(1, 2)),
            y.std(dim=0, keepdim=True, correction=0),
            nn.functional.normalize(y, dim=1),  # the 2-norm, clamped, divided by
            torch.linalg.vector_norm(y, ord=1, dim=(0, 3)),
            y.argmax(dim=1) + 1,  # an int64 epilogue fuses after the index
            y.argmin(),  # over the flattened tensor: 0-d
        )


class ReshapedReductions(nn.Module):
    """Reductions of reshapes of one buffer: over whole buffer axes (read from the buffer,
    the dims mapped to its axes), and over a reshape that cuts a buffer axis (read through
    a view of the reshape's shape)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.tanh(x)  # (2, 3, 4, 5), read below through reshapes
        return (
            y.view(6, 20).sum(dim=0),  # buffer axes 0 and 1
            y.flatten(2).amax(dim=2, keepdim=True),  # buffer axes 2 and 3
            torch.softmax(y.view(2, 3, 20), dim=1),  # buffer axis 1
            y.view(4, 30).mean(dim=0),  # 4 = 2 x 2 cuts axis 1: a (4, 30) view
        )


def test_reductions_of_reshapes_read_the_buffer_axes() -> None:
    torch.manual_seed(1)
    model, eager = import_with_eager(ReshapedReductions(), (torch.randn(2, 3, 4, 5),))
    got = {(n.op, n.params) for n in model.graph.kernels() if n.op.endswith(("_dims", "_dim"))}
    assert got == {
        ("sum_dims", (("axes", 3.0), ("keepdim", 0.0))),
        ("amax_dims", (("axes", 12.0), ("keepdim", 1.0))),
        ("softmax_dim", (("dim", 1.0),)),
        ("mean_dims", (("axes", 1.0), ("keepdim", 0.0))),
    }
    assert model.opaque == ()
    shapes = [model.graph.buffer(n.inputs[0]).array_shape for n in model.graph.kernels()]
    assert shapes.count((2, 3, 4, 5)) == 4 and (4, 30) in shapes  # tanh's and 3 reductions
    plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
    got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    for g, w in zip(got, eager, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


WANT = {
    "sum_dims": 1,
    "mean_dims": 2,
    "amax_dims": 1,
    "amin_dims": 1,
    "softmax_dim": 1,
    "log_softmax_dim": 2,
    "sum": 1,
    "var_dims": 2,  # std too: torch's decomposition is sqrt(var)
    "norm2_dims": 1,
    "norm1_dims": 1,
    "argmax_dims": 1,
    "argmin_dims": 1,
}


def test_reductions_over_any_dims_match_eager() -> None:
    torch.manual_seed(0)
    model, eager = import_with_eager(Reductions(), (torch.randn(2, 3, 4, 5),))
    assert model.opaque == ()
    ops_used = [n.op for n in model.graph.kernels()]
    assert {k: ops_used.count(k) for k in WANT} == WANT
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        verify(plan)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, eager, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        if fusion:  # tanh and the scale fuse into the reductions reading them
            kernels = plan.graph.kernels()
            assert len(kernels) < len(model.graph.kernels())
            for n in kernels:
                ks = kernel_source(plan.graph, n)
                nvrtc_compile(ks.source, ks.function_name)


class Scalars(nn.Module):
    """Reductions of every element to a 0-d tensor (a loss, a norm), and arithmetic on them."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        loss = ((x - y) ** 2).mean()
        return (
            loss,
            x.sum() * 2.0 + 1.0,
            x.amax() - x.amin(),
            x.var() + x.std(),
            torch.linalg.vector_norm(x),
            x.mean() - y,  # a 0-d value broadcast back over a tensor
            nn.functional.l1_loss(x, y),
            nn.functional.cross_entropy(x[:, :, 0], torch.tensor([0, 3, 1])),  # counts its targets
            torch.count_nonzero(torch.relu(x), dim=(0, 2)),
        )


def test_reductions_to_0d_tensors_match_eager() -> None:
    torch.manual_seed(2)
    model, eager = import_with_eager(Scalars(), (torch.randn(3, 4, 5), torch.randn(3, 4, 5)))
    assert model.opaque == ()
    assert [w.shape for w in eager][:5] == [()] * 5
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        verify(plan)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, eager, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
