"""The torch importer emits views as aliases: modules of our own using permute, transpose,
reshape, slice, select, expand, ``t`` and an in-place ``copy_`` import to graphs that
verify, whose views allocate nothing, and whose simulated outputs equal eager's with
fusion on and off, on 1 to 4 streams."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import ImportedModel, UnsupportedModel, from_module
from oxiwork.ops import kernel_source
from tests.importers._eager import assert_simulates_exactly, import_with_eager


class Heads(nn.Module):
    """Attention-style head split: view, permute, contiguous (a clone of a permute)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (2, 6, 8)
        h = x.view(2, 6, 2, 4).permute(0, 2, 1, 3).contiguous()
        return torch.relu(h) * 2.0


class Slices(nn.Module):
    """Slices, selects and an expand read by element-wise ops."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:  # (3, 4, 5)
        a = x[:, 1:3, :] + x[:, 2:4, :]
        b = x[:, 0, :].unsqueeze(1).expand(3, 4, 5) - x
        c = x.transpose(0, 2)[1]  # a transposed select, returned as a view
        return a, b, c


class TransposedWeight(nn.Module):
    """A matmul of a transposed weight view (t()), then a reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (3, 4)
        return (x @ self.w.t()).reshape(2, 9)


class CopyInto(nn.Module):
    """An in-place copy_ into a slice of an intermediate (functionalised by torch.export)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (2, 3, 4)
        y = x * 2.0
        y[:, 0, :].copy_(x[:, 1, :])
        return y.transpose(1, 2).reshape(2, 12)


class ChannelsLast(nn.Module):
    """ConvNeXt's block on a channels_last tensor: torch keeps the depthwise convolution's
    result channels_last, permutes it to NHWC (a contiguous view in eager), normalises and
    projects the channels, permutes back and adds the input; then a strided convolution."""

    def __init__(self) -> None:
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
        self.norm = nn.LayerNorm(4)
        self.fc = nn.Linear(4, 4)
        self.down = nn.Conv2d(4, 6, 2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (2, 4, 6, 6)
        x = x.contiguous(memory_format=torch.channels_last)
        y = self.fc(self.norm(self.dw(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return self.down(x + y)


class EmptyOperand(nn.Module):
    """GPT-J's rotary split where the rotary part is the whole head: a cat with an empty
    slice (which torch skips)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (2, 3, 4)
        return torch.cat([x[..., :4] * 2.0, x[..., 4:]], dim=-1)


class SliceWrite(nn.Module):
    """Writes into strided slices of an intermediate (Funnel's and ViT-MAE's pattern):
    torch.export turns them into slice_scatter."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (3, 6)
        y = x * 2.0
        y[:, 1::2] = -x[:, :3]
        y[1:, -2:] = x[:2, :2] * 3.0
        return y + 1.0


CASES = {
    "channels_last": (ChannelsLast, (2, 4, 6, 6)),
    "slice_write": (SliceWrite, (3, 6)),
    "empty_operand": (EmptyOperand, (2, 3, 4)),
    "heads": (Heads, (2, 6, 8)),
    "slices": (Slices, (3, 4, 5)),
    "weight_t": (TransposedWeight, (3, 4)),
    "copy_into": (CopyInto, (2, 3, 4)),
}
_CACHE: dict[str, tuple[ImportedModel, tuple[np.ndarray, ...]]] = {}


def _imported(name: str) -> tuple[ImportedModel, tuple[np.ndarray, ...]]:
    if name not in _CACHE:
        cls, shape = CASES[name]
        torch.manual_seed(0)
        _CACHE[name] = import_with_eager(cls(), (torch.randn(*shape),))
    return _CACHE[name]


@pytest.mark.parametrize("name", sorted(CASES))
class TestViews:
    def test_graph_verifies_and_views_allocate_nothing(self, name: str) -> None:
        model, _ = _imported(name)
        g = model.graph
        verify(g)
        views = [b for b in g.buffers if b.is_view]
        # (the matmul of weight_t reads its transposed weight in place: a strided GEMM of
        # ops.lib_reduce, so no view buffer is needed there; empty_operand's one non-empty
        # slice is its whole input)
        assert views or name in ("weight_t", "empty_operand"), "views should be alias buffers"
        for streams in (1, 4):
            plan = ExecutionPlan.build(g, max_streams=streams)
            placed = {b.name: b for b in plan.graph.buffers}
            assert all(placed[v.name].offset is None for v in views)
            # the arena holds the bases only: views add no bytes
            assert plan.memory is not None
            assert set(plan.memory.offsets).isdisjoint(v.id for v in views)

    @pytest.mark.parametrize("fusion", [True, False])
    def test_outputs_equal_eager(self, name: str, fusion: bool) -> None:
        model, eager = _imported(name)
        for streams in (1, 2, 3, 4):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            verify(plan)
            got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
            assert len(got) == len(eager)
            for g_, w in zip(got, eager, strict=True):
                assert g_.shape == w.shape
                np.testing.assert_allclose(g_, w, rtol=1e-5, atol=1e-5)

    def test_every_library_kernel_has_cuda_c(self, name: str) -> None:
        model, _ = _imported(name)
        g = model.graph
        opaque = {o.kernel for o in model.opaque}
        for n in g.nodes:
            if n.is_kernel and n.name not in opaque:
                assert kernel_source(g, n).source


def test_channels_last_results_and_operands_take_library_ops() -> None:
    # A buffer holds its tensor's values row-major whatever eager's strides (those stay on
    # the buffer for the views that read it), so the channels_last convolutions and the add
    # reading one are library kernels, not opaque ones.
    model, _ = _imported("channels_last")
    ops_of = {model.targets[n.name]: n.op for n in model.graph.kernels()}
    assert not model.opaque
    assert ops_of["aten.convolution.default"].startswith("conv2d")


def test_writes_into_slices_are_slice_scatter_kernels() -> None:
    model, _ = _imported("slice_write")
    assert not model.opaque
    scatters = [n for n in model.graph.kernels() if n.op == "slice_scatter"]
    # y[:, 1::2] along axis 1 from 1 by 2; y[1:, -2:], a slice of a slice: two scatters
    assert len(scatters) == 3
    assert dict(scatters[0].params) == {"dim": 1.0, "start": 1.0, "step": 2.0}


def test_a_cat_skips_an_empty_operand() -> None:
    model, _ = _imported("empty_operand")
    (cat,) = [n for n in model.graph.kernels() if model.targets[n.name] == "aten.cat.default"]
    assert not model.opaque
    assert (cat.op, len(cat.inputs)) == ("cat_1", 1)


class Elements(nn.Module):
    """Single elements picked out as 0-d views (DeepSeek-V4's scalar reads of a tensor)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return y * x[1, 2], x[0, 1].clone(), torch.stack([x[0, 0], x[2, 3]]), x[1][3] + y


def test_a_0d_view_of_one_element_imports_and_simulates_to_eager() -> None:
    # (the view's layout once indexed a stride list of its 0 axes: an IndexError)
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    y = torch.randn(5, generator=torch.Generator().manual_seed(1))
    model, want = import_with_eager(Elements(), (x, y))
    assert not model.opaque
    assert_simulates_exactly(model, want)


class EmptyTensors(nn.Module):
    """Tensors of no elements on their way into a cat, as models make them: DINOv3's register
    tokens when a config asks for none (an empty parameter, expanded), Flaubert's cat with
    ``torch.tensor([])`` (an empty lifted constant, 1-d: torch skips it whatever the other
    operands' axes), DeepSeek-V4's zeros like a slice of length 0, an op of empty
    tensors only (its result folds: it reads no value), and Qwen3.5's write of nothing into
    a slice (a slice_scatter of an empty tensor: its base)."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.zeros(1, 0, 4))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:  # (1, 3, 4)
        registers = self.tokens.expand(x.shape[0], -1, -1)
        legacy = torch.cat([torch.tensor([]), x.reshape(-1)])
        zeros = x[:, :0].new_zeros((1, 0, 4)).unsqueeze(1)
        written = x * 1.5
        written[:, 2:2] = x[:, :0] + 1  # (nothing written)
        return (
            written,
            torch.cat([x, registers, x * 2], dim=1),
            legacy * 3,
            torch.cat([zeros, x.unsqueeze(1)], dim=2) + 1,
            x + self.tokens.sum() + 1,
        )


def test_empty_tensors_hold_no_buffer_and_cat_skips_them() -> None:
    x = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(0))
    model, want = import_with_eager(EmptyTensors(), (x,))
    assert not model.opaque
    assert all(b.size_bytes > 0 for b in model.graph.buffers)
    assert "tokens" not in model.inputs  # (no buffer to bind)
    assert_simulates_exactly(model, want)


class UnreadParameter(nn.Module):
    """A parameter whose only reader makes no kernel (LFM's rotary frequencies of attention
    layers its config has none of), beside a buffer and a constant returned as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.inv = nn.Parameter(torch.ones(4))
        self.register_buffer("w", torch.full((3,), 0.5))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.cat([x * 2, self.inv[:0]]), torch.arange(4.0), self.w


def test_an_external_buffer_nothing_reads_is_dropped_but_returned_ones_stay() -> None:
    # (the simulator refuses a value for a buffer its plan does not read, which the
    # imported model's inputs once held)
    x = torch.randn(3, generator=torch.Generator().manual_seed(0))
    model, want = import_with_eager(UnreadParameter(), (x,))
    assert sorted(model.inputs) == ["const.arange", "w", "x"]
    assert "inv" not in {b.name for b in model.graph.buffers}
    assert_simulates_exactly(model, want)


class EmptyBesideLive(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.addmm(x, x[:, :0], w[:0])  # x + a (3, 0) @ (0, 3) product: x


class EmptyOut(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, x[:, :0]


def test_an_empty_tensor_read_outside_a_cat_or_returned_is_refused() -> None:
    x, w = torch.randn(3, 3), torch.randn(3, 3)
    with pytest.raises(UnsupportedModel, match=r"a tensor of no elements \(shape \(3, 0\)\)"):
        from_module(EmptyBesideLive(), (x, w))
    with pytest.raises(UnsupportedModel, match=r"output 1 is a tensor of no elements"):
        from_module(EmptyOut(), (x,))


def test_clone_of_a_permute_is_a_copy_of_a_strided_view() -> None:
    model, _ = _imported("heads")
    g = model.graph
    clones = [n for n in g.nodes if model.targets.get(n.name) == "aten.clone.default"]
    assert [n.op for n in clones] == ["copy"]
    view = g.buffer(clones[0].inputs[0])
    base = g.buffer(view.base)
    # x.view(2, 6, 2, 4).permute(0, 2, 1, 3) over x's row-major (2, 6, 8) elements
    assert (view.array_shape, view.strides, base.name) == ((2, 2, 6, 4), (48, 4, 8, 1), "x")
    assert not model.opaque


def test_a_strided_view_into_a_non_elementwise_op_goes_through_a_copy() -> None:
    b = nn.Softmax(dim=-1)

    class SoftmaxT(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return b(x.t())

    x = torch.randn(4, 6)
    model = from_module(SoftmaxT().eval(), (x,))
    g = model.graph
    soft = next(n for n in g.nodes if n.op == "softmax")
    (src,) = (g.buffer(i) for i in soft.inputs)
    assert not src.is_view and src.name.endswith(".contiguous")
    writer = g.node(g.writers(src.id)[0])
    assert writer.op == "copy" and g.buffer(writer.inputs[0]).strides == (1, 6)
    plan = ExecutionPlan.build(g)
    (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    np.testing.assert_allclose(got, torch.softmax(x.t(), -1).numpy(), rtol=1e-5, atol=1e-6)


class IntoInput(nn.Module):
    """An in-place copy_ into a slice of a user input: a write to the input's buffer."""

    def forward(self, x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache[:, :2].copy_(x.t())
        return cache.sum(-1) * 1.0


def test_an_in_place_write_into_an_input_writes_its_buffer() -> None:
    x, cache = torch.randn(2, 3), torch.randn(3, 5)
    model = from_module(IntoInput(), (x, cache.clone()))
    g = model.graph
    assert model.mutated == ("cache",)
    (write,) = [n for n in g.nodes if n.name == "write cache"]
    assert g.buffer(write.outputs[0]).external  # the input's own buffer is written
    mutated = cache.clone()
    with torch.no_grad():
        want = IntoInput()(x, mutated)
    for streams in (1, 2, 3, 4):
        for fusion in (True, False):
            plan = ExecutionPlan.build(g, max_streams=streams, fusion=fusion)
            out = SequentialExecutor(plan).run(model.inputs).outputs
            assert out is not None
            np.testing.assert_allclose(model.outputs_from(out)[0], want.numpy(), rtol=1e-5)
            np.testing.assert_array_equal(out["cache"], mutated.numpy())


# Element-wise ops of a permuted view: torch keeps the view's layout in the result.
PERMUTED_OPS = {
    "scale": lambda p, y: p * 0.5,
    "add_row": lambda p, y: p + y[0, 0],  # broadcast from the last axis
    "add_full": lambda p, y: p + y,
    "clone": lambda p, y: p.clone(),
    "relu": lambda p, y: torch.relu(p),
    "cast": lambda p, y: p.to(torch.float16),
}


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
@pytest.mark.parametrize("op", sorted(PERMUTED_OPS))
def test_elementwise_ops_of_permuted_views_compute_in_torchs_layout(perm, op) -> None:
    # The result is computed by the library op in torch's memory order (a row-major buffer
    # of the permuted shape, read back through a permute), so the views and matmuls after
    # it read what eager reads: no opaque kernel, eager's values.
    f = PERMUTED_OPS[op]

    class M(nn.Module):
        def forward(self, x, y, w):
            z = f(x.permute(*perm), y)
            return z, (z.transpose(1, 2).float() @ w), z.sum(-1)

    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    p = x.permute(*perm)
    y, w = torch.randn(*p.shape), torch.randn(p.shape[1], 5)
    with torch.no_grad():
        want = [t.float().numpy() for t in M()(x, y, w)]
        z = f(p, y)
    model = from_module(M(), (x, y, w))
    verify(model.graph)
    assert not model.opaque, model.opaque
    # (z's kernel: the first of its op; a cast back to float32 comes after it)
    k = next(n for n in model.graph.kernels() if model.targets[n.name] == _op_target(op))
    held = model.graph.buffer(k.outputs[0]).array_shape
    if z.is_contiguous():
        assert held == tuple(z.shape)
    else:  # the buffer holds torch's memory order
        order = sorted(range(3), key=lambda d: -z.stride(d))
        assert held == tuple(z.shape[d] for d in order)
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, max_streams=2, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, e in zip(got, want, strict=True):
            np.testing.assert_allclose(g.astype(np.float32), e, rtol=1e-3, atol=1e-3)


def _op_target(op: str) -> str:
    return {
        "scale": "aten.mul.Tensor",
        "add_row": "aten.add.Tensor",
        "add_full": "aten.add.Tensor",
        "clone": "aten.clone.default",
        "relu": "aten.relu.default",
        "cast": "aten._to_copy.default",
    }[op]


def test_a_slice_of_the_whole_tensor_is_its_buffer_even_for_cat() -> None:
    # a U-Net's crop of the skip to the upsampled size, when the sizes already agree:
    # torch exports it as an alias, which cat (reading shapes) reads as the buffer itself
    class Crop(nn.Module):
        def forward(self, y: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
            return torch.cat([y, skip[..., : y.shape[-2], : y.shape[-1]]], dim=1) * 2.0

    y, skip = torch.randn(1, 2, 4, 4), torch.randn(1, 3, 4, 4)
    model, (want,) = import_with_eager(Crop(), (y, skip))
    assert not model.opaque
    (cat,) = [k for k in model.graph.kernels() if k.op.startswith("cat_")]
    assert model.graph.buffer(cat.inputs[1]).name == "skip"
    plan = ExecutionPlan.build(model.graph)
    (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
    np.testing.assert_array_equal(got, want)
