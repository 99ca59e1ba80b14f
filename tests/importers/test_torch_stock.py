"""Stock ``torch.nn`` modules import with no opaque kernel and simulate to eager's outputs.

Each module is PyTorch's own (random weights, eval mode): what a user builds a model from
before writing any layer of their own. An opaque kernel has no CUDA C, so a model holding
one cannot run through the CUDA executors; this list is what the op library must cover.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import ImportedModel, from_module


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _with_running_stats(module: nn.Module) -> nn.Module:
    """``module`` with random running statistics in its norms (fresh ones are 0 and 1, which
    would hide a mean or variance read from the wrong channel)."""
    for m in module.modules():
        if getattr(m, "running_mean", None) is not None:
            m.running_mean.copy_(torch.randn_like(m.running_mean))
            m.running_var.copy_(torch.rand_like(m.running_var) + 0.5)
    return module


class _Resize(nn.Module):
    """Bilinear resizing as segmentation heads and FPNs do it: by a factor, to a size, with
    and without align_corners; and a bicubic one."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.Upsample(scale_factor=2.5, mode="bilinear")

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(self.conv(x))
        f = nn.functional
        return (
            self.up(y),
            f.interpolate(y, size=(11, 4), mode="bilinear", align_corners=True),
            f.interpolate(y, size=(5, 7), mode="bilinear") + y,  # the same size: a copy
            f.interpolate(y, scale_factor=(0.5, 1.5), mode="bilinear"),
            # bicubic's source rows and columns fold into constants and index whole axes
            f.interpolate(y, size=(7, 9), mode="bicubic", align_corners=False),
        )


class _Moves(nn.Module):
    """Data movement as Swin's shifted windows (roll), flips (test-time augmentation) and
    repeated embeddings do it."""

    def __init__(self) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.randn(1, 4, 6))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.roll(x, shifts=(1, -2), dims=(1, 2)) * 2.0
        return (
            y + self.pos.repeat(x.shape[0], 1, 1),
            torch.flip(x, dims=(0, 2)) - x,
            torch.roll(x, 3) + 1.0,  # over the flattened tensor
            x.repeat(2, 1, 1, 2),
        )


class _Survival(nn.Module):
    """A survival (stick-breaking) head: hazards, their cumulative products and the product
    over all steps, and the count of positive logits per row (an integer sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hazard = torch.sigmoid(self.head(x))
        alive = torch.cumprod(1.0 - hazard, dim=-1)
        return alive, hazard.prod(-1, keepdim=True), (x > 0).long().sum(-1)


class _TopK(nn.Module):
    """A classifier's top-k predictions (probabilities and classes) and its scores ranked,
    as evaluation code and beam search write them."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        probs = torch.softmax(self.head(x), dim=-1)
        top, classes = probs.topk(3, dim=-1)
        ranked, order = torch.sort(self.head(x), dim=-1, descending=True)
        return top, classes, ranked[:, :2] * 2.0, order, torch.argsort(probs, dim=0)


class _UNet3dDecoder(nn.Module):
    """A 3-D U-Net's decoder block (Cicek et al. 2016): upsample (a stride-2 ConvTranspose3d,
    or trilinear resizing), concatenate the encoder's skip, Conv3d/BatchNorm3d/ReLU twice."""

    def __init__(self, transposed: bool) -> None:
        super().__init__()
        self.up = (
            nn.ConvTranspose3d(6, 6, 2, stride=2)
            if transposed
            else nn.Upsample(scale_factor=2, mode="trilinear", align_corners=False)
        )
        self.block = nn.Sequential(
            nn.Conv3d(6 + 3, 4, 3, padding=1, bias=False),
            nn.BatchNorm3d(4),
            nn.ReLU(inplace=True),
            nn.Conv3d(4, 4, 3, padding=1, bias=False),
            nn.BatchNorm3d(4),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.block(torch.cat([self.up(x), skip], dim=1))


STOCK = {
    "transformer encoder": (
        lambda: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            2,
            enable_nested_tensor=False,
        ),
        lambda: (_x(2, 5, 16),),
    ),
    "transformer encoder, norm first": (
        lambda: nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, norm_first=True),
        lambda: (_x(5, 2, 16),),
    ),
    "transformer decoder layer": (
        lambda: nn.TransformerDecoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
        lambda: (_x(2, 4, 16), _x(2, 5, 16)),
    ),
    "multihead attention": (
        lambda: nn.MultiheadAttention(16, 4, batch_first=True),
        lambda: (_x(2, 5, 16), _x(2, 5, 16), _x(2, 5, 16)),
    ),
    "lstm": (lambda: nn.LSTM(8, 12, batch_first=True), lambda: (_x(2, 5, 8),)),
    "gru": (lambda: nn.GRU(6, 10, num_layers=2), lambda: (_x(4, 2, 6),)),
    "conv1d block": (
        lambda: nn.Sequential(
            nn.Conv1d(4, 8, 3, padding=1),
            nn.BatchNorm1d(8),
            nn.LeakyReLU(0.1),
            nn.Conv1d(8, 8, 3, stride=2, groups=8),
            nn.ELU(),
            nn.MaxPool1d(2),
        ),
        lambda: (_x(2, 4, 17),),
    ),
    "mobile activations": (
        lambda: nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.Hardswish(), nn.Hardsigmoid(), nn.SELU(), nn.Mish()
        ),
        lambda: (_x(1, 3, 6, 6),),
    ),
    "group norm block": (
        lambda: nn.Sequential(
            nn.Conv2d(4, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.SiLU(), nn.GroupNorm(1, 8)
        ),
        lambda: (_x(2, 4, 5, 6),),
    ),
    "instance norm, affine": (
        lambda: nn.Sequential(nn.InstanceNorm2d(3, affine=True), nn.Tanh()),
        lambda: (_x(2, 3, 4, 5),),
    ),
    "roll, flip and repeat": (lambda: _Moves(), lambda: (_x(2, 4, 6),)),
    "top-k predictions and a ranking": (lambda: _TopK(), lambda: (_x(5, 8),)),
    "adaptive max pooling head": (
        lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveMaxPool2d((2, 3)), nn.Flatten()),
        lambda: (_x(2, 3, 9, 8),),
    ),
    "instance norm": (
        lambda: nn.Sequential(nn.Conv2d(3, 6, 3), nn.InstanceNorm2d(6), nn.ReLU()),
        lambda: (_x(2, 3, 7, 7),),
    ),
    "norms without affine weights, on running statistics": (
        lambda: _with_running_stats(
            nn.Sequential(
                nn.Conv2d(3, 6, 3),
                nn.BatchNorm2d(6, affine=False),
                nn.ReLU(),
                nn.InstanceNorm2d(6, track_running_stats=True),
                nn.Flatten(2),
                nn.BatchNorm1d(6, affine=False),
            )
        ),
        lambda: (_x(2, 3, 7, 7),),
    ),
    "layer norm over several axes": (
        lambda: nn.Sequential(nn.Conv1d(3, 4, 1), nn.LayerNorm([4, 6]), nn.GELU()),
        lambda: (_x(2, 3, 6),),
    ),
    "transposed convolutions (a decoder)": (
        lambda: nn.Sequential(
            nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
            nn.ConvTranspose2d(4, 2, 3, dilation=2, bias=False),
            nn.Sigmoid(),
        ),
        lambda: (_x(2, 6, 3, 4),),
    ),
    "3-d U-Net encoder block": (
        lambda: _with_running_stats(
            nn.Sequential(
                nn.Conv3d(2, 4, 3, padding=1, bias=False),
                nn.BatchNorm3d(4),
                nn.ReLU(inplace=True),
                nn.Conv3d(4, 4, 3, padding=1, bias=False),
                nn.BatchNorm3d(4),
                nn.ReLU(inplace=True),
                nn.MaxPool3d(2),
            )
        ),
        lambda: (_x(2, 2, 6, 8, 8),),
    ),
    "3-d U-Net decoder block, transposed convolution": (
        lambda: _with_running_stats(_UNet3dDecoder(transposed=True)),
        lambda: (_x(2, 6, 2, 3, 4), _x(2, 3, 4, 6, 8)),
    ),
    "3-d U-Net decoder block, trilinear upsampling": (
        lambda: _with_running_stats(_UNet3dDecoder(transposed=False)),
        lambda: (_x(2, 6, 2, 3, 4), _x(2, 3, 4, 6, 8)),
    ),
    "video network stem and head (R3D/C3D)": (
        lambda: _with_running_stats(
            nn.Sequential(
                nn.Conv3d(3, 8, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
                nn.BatchNorm3d(8),
                nn.ReLU(),
                nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
                nn.Conv3d(8, 8, 3, padding="same", groups=2),
                nn.AvgPool3d(2, ceil_mode=True, count_include_pad=False),
                nn.AdaptiveMaxPool3d((1, 2, 2)),
                nn.AdaptiveAvgPool3d(1),
                nn.Flatten(),
                nn.Linear(8, 5),
            )
        ),
        lambda: (_x(1, 3, 4, 16, 16),),
    ),
    "bilinear upsampling (a segmentation head)": (
        lambda: _Resize(),
        lambda: (_x(2, 3, 5, 7),),
    ),
    "survival head (cumprod, prod, integer sums)": (lambda: _Survival(), lambda: (_x(3, 4, 6),)),
    "embedding bag of ops": (
        lambda: nn.Sequential(nn.Embedding(10, 6), nn.Flatten(), nn.Linear(18, 4), nn.Softplus()),
        lambda: (torch.tensor([[1, 2, 3], [4, 5, 9]]),),
    ),
}


RTOL, ATOL = 1e-4, 1e-5  # simulated (and GPU) outputs against eager's


def imported(name: str) -> tuple[ImportedModel, list[np.ndarray]]:
    """Stock module ``name`` (seeded weights, eval mode) imported, and its eager outputs in
    torch's flat order (LSTM: output, (h, c)). The GPU tests run the same models
    (tests/gpu/test_gpu_executors.py)."""
    make, args = STOCK[name]
    torch.manual_seed(0)
    module, inputs = make().eval(), args()
    with torch.no_grad():
        want = [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*inputs))]
    return from_module(module, inputs), want


@pytest.mark.parametrize("name", sorted(STOCK))
def test_stock_modules_import_without_opaque_kernels(name) -> None:
    model, want = imported(name)
    verify(model.graph)
    assert not model.opaque, model.opaque_counts()
    # every value handed to the run is a buffer some node reads (folded constants that
    # only fed folded ops, such as roll's aranges, are gone)
    read = {b for n in model.graph.nodes for b in (*n.inputs, *n.outputs)}
    read |= {model.graph.storage(b) for b in read}
    assert {model.graph.buffer_by_name(k).id for k in model.inputs} <= read
    for streams in (1, 4):
        plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=True)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
