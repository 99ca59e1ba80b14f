"""float16 and bfloat16 models with matmuls, convolutions and strided copies.

Small modules of our own in ``model.half()`` / ``model.to(torch.bfloat16)``: a linear + GELU
MLP, a conv-bn-relu block (a depthwise conv among them) and an attention block (one
strided_attention kernel with an additive mask, a strided copy of its heads, a projection
reading a view in place). Each
imports with no opaque op, verifies, gives eager's outputs with fusion off and on (within
the per-dtype tolerances below), and every kernel's generated CUDA C (``__half`` /
``__nv_bfloat16`` buffers, float32 accumulation, one rounding per op) compiles with NVRTC.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import from_module
from oxiwork.ops import kernel_source
from tests.importers.test_torch import ConvBnRelu
from tests.ops.conftest import _compile as nvrtc_compile

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")

# Both sides compute each op in float32 and round it once, but a float32 sum in another
# order can round to the neighbouring half value, and later ops carry that one-ulp step on:
# a few units of the dtype's last place (float16: 2**-10, bfloat16: 2**-7) relative, plus
# an absolute floor for values near 0 after a cancellation.
TOLERANCES = {torch.float16: (4e-3, 2e-3), torch.bfloat16: (3.2e-2, 1.6e-2)}
DTYPES = [torch.float16, torch.bfloat16]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class AttentionBlock(nn.Module):
    """Self-attention with an additive float mask; the heads' output is made contiguous
    (a strided copy) before the projection."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads) + mask
        att = torch.softmax(scores, dim=-1)
        # a copy read by an element-wise op (a clone read only by matmuls is elided)
        heads = torch.tanh((att @ v).transpose(1, 2).contiguous())
        return self.proj(heads.view(b, s, d))


def _module(name: str, dtype: torch.dtype) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(7)
    if name == "mlp":
        return MLP().to(dtype), (torch.randn(5, 12).to(dtype),)
    if name == "conv":
        module = ConvBnRelu()
        for m in module.modules():  # statistics away from 0 and 1, as after training
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        return module.to(dtype), (torch.randn(2, 3, 8, 8).to(dtype),)
    x = torch.randn(2, 6, 16).to(dtype)
    mask = torch.triu(torch.full((6, 6), -1e4), diagonal=1)
    return AttentionBlock().to(dtype), (x, mask.to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["mlp", "conv", "attention"])
def test_half_module_matches_eager_and_compiles(name: str, dtype: torch.dtype) -> None:
    module, args = _module(name, dtype)
    model = from_module(module.eval(), args)
    eager = model.eager_outputs
    assert eager is not None
    dt = str(dtype).split(".")[1]
    assert model.opaque == (), model.opaque
    assert {model.graph.buffer_by_name(n).dtype for n in model.outputs} == {dt}
    heads = {k.op for k in model.graph.kernels()}
    want = {"mlp": {"linear"}, "conv": {"conv2d_bias", "conv2d"}}.get(name, {"linear"})
    assert want <= heads
    if name == "attention":  # matmuls, mask and softmax: one strided_attention kernel
        assert sum(op.startswith("attn_") for op in heads) == 1
    if name == "attention":  # the projection reads a view in place, the copy is strided
        assert sum(op.startswith("gemm_") for op in heads) >= 1
        assert any(model.graph.buffer(b).strides for k in model.graph.kernels() for b in k.inputs if k.op == "copy")  # fmt: skip
    rtol, atol = TOLERANCES[dtype]
    sources: dict[str, str] = {}  # every kernel of both plans, compiled as one unit
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        verify(plan)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, eager, strict=True):
            assert g.dtype.name == dt and g.shape == w.shape
            np.testing.assert_allclose(
                g.astype(np.float32), w.astype(np.float32), rtol=rtol, atol=atol
            )
        for k in plan.graph.kernels():
            ks = kernel_source(plan.graph, k)
            sources[ks.function_name] = ks.source
    nvrtc_compile("\n".join(sources.values()), f"{name}_{dt}")
