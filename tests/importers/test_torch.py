"""The torch.export importer: small modules of our own in, the same numbers out.

Each model is imported once (torch.export dominates the time); every check then runs on
the imported graph: it verifies, views got no node, the opaque report is accurate, and the
reference evaluator, SequentialExecutor and the step-through Simulator compute eager's
outputs with fusion on and off on 1 to 4 streams.
"""

from __future__ import annotations

import contextlib
import io
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, GraphError, SequentialExecutor, Simulator, ops, verify
from oxiwork.importers.torch import (
    ExportFailed,
    ImportedModel,
    UnsupportedModel,
    from_exported_program,
    from_module,
)
from oxiwork.node import NodeKind
from oxiwork.reference import evaluate
from tests.importers._eager import import_with_eager

# ----------------------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(32, 32)
        self.out = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        return self.out(torch.relu(self.fc2(h)) * 0.5)


class Attention(nn.Module):
    """Pre-norm self-attention with a boolean causal mask given as an input."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.heads = heads
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = self.softmax(scores.masked_fill(~mask, float("-inf")))
        return self.proj((att @ v).transpose(1, 2).reshape(b, s, d)) + x


class ConvBnRelu(nn.Module):
    """A stem conv and a depthwise-separable pair, each with inference batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.depthwise = nn.Sequential(
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU6(),
        )
        self.pointwise = nn.Sequential(nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.pointwise(self.depthwise(self.stem(x)))).flatten(1)


class ConvResidual(nn.Module):
    """A CNN residual block: a zero pad folded into a strided conv (MobileNet's TF padding),
    max pooling, conv -> relu -> conv (+bias) -> + x -> relu, an average pooling and a cat."""

    def __init__(self, c: int = 6) -> None:
        super().__init__()
        self.down = nn.Conv2d(3, c, 3, stride=2, bias=False)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c, c, 3, padding=2, dilation=2, groups=3)
        self.side = nn.AvgPool2d(2, stride=1, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.pool(self.down(nn.functional.pad(x, (0, 1, 0, 1))))
        z = torch.relu(self.conv2(torch.relu(self.conv1(y))) + y)
        return torch.cat([z, self.side(nn.functional.pad(z, (1, 0, 1, 0)))], dim=1).mean((2, 3))


class Residual(nn.Module):
    def __init__(self, d: int = 24) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.body(x) + x)
        return y, y.t()  # a second output that is a view: it gets its own copy


class RMSNorm(nn.Module):
    def __init__(self, d: int = 16, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * rms * self.weight


class RMSBlock(nn.Module):
    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.norm1 = RMSNorm(d)
        self.fc = nn.Linear(d, d)
        self.norm2 = RMSNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(torch.sigmoid(self.fc(self.norm1(x))) + x)


class Embed(nn.Module):
    """An int64 lookup whose index arithmetic overflows float32's 24-bit mantissa."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(100, 16)
        self.positions = nn.Embedding(8, 16)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hashed = (ids * 1_000_003 + 7) % 100  # ids * 1e6 > 2**24: exact only in int64
        pos = torch.arange(ids.shape[1])
        return self.tokens(hashed) + self.positions(pos), hashed


def _make(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), (torch.randn(4, 12),)
    if name == "attention":
        mask = torch.ones(6, 6, dtype=torch.bool).tril()
        return Attention(), (torch.randn(2, 6, 16), mask)
    if name == "conv_bn_relu":
        m = ConvBnRelu()
        for mod in m.modules():  # non-trivial statistics, so batch norm matters
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
        return m, (torch.randn(2, 3, 10, 10),)
    if name == "residual":
        return Residual(), (torch.randn(3, 24),)
    if name == "conv_residual":
        return ConvResidual(), (torch.randn(2, 3, 17, 15),)
    if name == "rms_norm":
        return RMSBlock(), (torch.randn(2, 5, 16),)
    if name == "embedding":
        return Embed(), (torch.randint(0, 1000, (2, 8), dtype=torch.int64),)
    raise KeyError(name)


MODELS = (
    "mlp",
    "attention",
    "conv_bn_relu",
    "conv_residual",
    "residual",
    "rms_norm",
    "embedding",
)
_CACHE: dict[str, tuple[ImportedModel, tuple[np.ndarray, ...]]] = {}


def _imported(name: str) -> tuple[ImportedModel, tuple[np.ndarray, ...]]:
    if name not in _CACHE:
        _CACHE[name] = import_with_eager(*_make(name))
    return _CACHE[name]


def _assert_matches(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if w.dtype.kind == "f":  # per-dtype tolerance: ops run one at a time, not fused
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)


def _ids(model: ImportedModel, name: str) -> list[int]:
    return [n.id for n in model.graph.nodes if n.name == name]


def _is_view(target: str) -> bool:
    packet, overload = target.rsplit(".", 1)
    op = getattr(getattr(torch.ops.aten, packet.split(".", 1)[1]), overload)
    return any(r.alias_info is not None for r in op._schema.returns)


# ----------------------------------------------------------------------------- refusals
class TestRaises:
    def test_raises_not_a_module(self) -> None:
        with pytest.raises(GraphError, match=r"needs a torch\.nn\.Module"):
            from_module(lambda x: x, (torch.ones(2),))  # type: ignore[arg-type]

    def test_raises_args_not_a_tuple(self) -> None:
        with pytest.raises(GraphError, match=r"wrap a single tensor as \(x,\)"):
            from_module(nn.ReLU(), torch.ones(2))  # type: ignore[arg-type]

    def test_raises_not_an_exported_program(self) -> None:
        with pytest.raises(GraphError, match="ExportedProgram"):
            from_exported_program(nn.ReLU())

    def test_raises_data_dependent_control_flow_quoting_torch(self) -> None:
        class Branchy(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x * 2 if x.sum() > 0 else x - 1

        with pytest.raises(ExportFailed) as info:
            from_module(Branchy(), (torch.randn(4),))
        assert info.value.reason and info.value.reason in str(info.value)
        assert "data-dependent" in info.value.reason.lower()  # torch's own words

    def test_raises_dynamic_shapes(self) -> None:
        batch = torch.export.Dim("batch", min=2, max=64)
        ep = torch.export.export(
            nn.Linear(3, 2), (torch.randn(4, 3),), dynamic_shapes=({0: batch},)
        )
        with pytest.raises(UnsupportedModel, match="dynamic shape"):
            from_exported_program(ep.run_decompositions())

    def test_raises_torch_cond(self) -> None:
        class Cond(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))

        ep = torch.export.export(Cond(), (torch.randn(4),))
        with pytest.raises(UnsupportedModel, match=r"higher_order\.cond"):
            from_exported_program(ep)

    def test_raises_training_mode_mutation(self) -> None:
        bn = nn.BatchNorm1d(4).train()
        with pytest.raises(UnsupportedModel, match=r"module\.eval\(\)"):
            from_module(bn, (torch.randn(3, 4),))

    @pytest.mark.parametrize(
        "draw",
        [
            lambda x: x + torch.rand(3),  # no tensor input: it would fold into a constant
            lambda x: x * torch.rand_like(x),
            lambda x: nn.functional.dropout(x, 0.5, training=True),
            lambda x: torch.bernoulli(torch.sigmoid(x)),
        ],
        ids=["rand", "rand_like", "dropout", "bernoulli"],
    )
    def test_raises_random_draws(self, draw) -> None:
        class Draws(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return draw(x)

        with pytest.raises(UnsupportedModel, match=r"draws random numbers.*pass them as an input"):
            from_module(Draws(), (torch.ones(3),))

    def test_a_dropout_not_training_imports(self) -> None:
        class Eval(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return nn.functional.dropout(x, 0.5, training=False) + nn.functional.dropout(
                    x, 0.0, training=True
                )

        model = from_module(Eval(), (torch.ones(3),))
        plan = ExecutionPlan.build(model.graph)
        (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        np.testing.assert_array_equal(got, np.full(3, 2.0, np.float32))

    def test_raises_complex(self) -> None:  # bfloat16 imports: tests/importers/test_torch_dtypes.py
        with pytest.raises(UnsupportedModel, match=r"torch\.complex64 tensor"):
            from_module(
                nn.Linear(4, 4).to(torch.complex64), (torch.randn(2, 4).to(torch.complex64),)
            )

    def test_import_oxiwork_does_not_import_torch(self) -> None:
        code = "import sys, oxiwork, oxiwork.importers; print('torch' in sys.modules)"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- the graph
@pytest.mark.parametrize("name", MODELS)
class TestImport:
    def test_graph_verifies(self, name: str) -> None:
        model, _ = _imported(name)
        verify(model.graph)
        kernels = [n for n in model.graph.nodes if n.is_kernel]
        assert kernels and set(model.targets) == {n.name for n in kernels}

    def test_views_get_no_node_and_allocate_nothing(self, name: str) -> None:
        model, _ = _imported(name)
        assert not [t for t in model.targets.values() if _is_view(t)]
        # every buffer is written by one kernel or is an external input, or is a view
        # (an alias of such a buffer) that the plan gives no bytes of its own
        g = model.graph
        for b in g.buffers:
            if b.base is not None:
                assert not g.writers(b.id) and not g.buffer(b.base).is_view, b.name
                continue
            writers = g.writers(b.id)
            assert (len(writers) == 1) != b.external, b.name
        plan = ExecutionPlan.build(g)
        assert all(b.offset is None for b in plan.graph.buffers if b.is_view)

    def test_kernels_are_named_after_modules(self, name: str) -> None:
        model, _ = _imported(name)
        module, _ = _make(name)
        paths = {p for p, _ in module.named_modules() if p}
        for kernel in model.targets:
            prefix = kernel.rsplit(".", 1)[0] if "." in kernel else ""
            assert prefix in paths or prefix == "" or prefix.startswith("output."), kernel

    def test_opaque_report_is_accurate(self, name: str) -> None:
        model, _ = _imported(name)
        opaque = {o.kernel: o for o in model.opaque}
        assert len(opaque) == len(model.opaque)
        for n in model.graph.nodes:
            if not n.is_kernel:
                continue
            op = ops.get(n.op)
            assert op is not None and op.reference is not None
            if n.name in opaque:
                o = opaque[n.name]
                assert o.op == n.op and o.target == model.targets[n.name] and o.reason
                assert op.fusion_class is ops.FusionClass.OPAQUE and not n.fusible
                assert n.op.isidentifier() and n.op.startswith("torch_")
                assert n.op not in ops.BUILTIN_OPS
            else:  # a library op: built in or from a library module (ops.lib_conv...)
                assert op.fusion_class is not ops.FusionClass.OPAQUE and n.fusible
                assert not n.op.startswith("torch_")
        assert sum(model.opaque_counts().values()) == len(model.opaque)

    def test_inputs_hold_real_values(self, name: str) -> None:
        model, _ = _imported(name)
        module, args = _make(name)
        state = module.state_dict()
        for buf in model.graph.buffers:
            if buf.external:
                value = model.inputs[buf.name]
                assert value.dtype == np.dtype(buf.dtype)
                if buf.name in state:
                    np.testing.assert_array_equal(value, state[buf.name].numpy())
        for buf_name, arg in zip(model.user_inputs, args, strict=True):
            np.testing.assert_array_equal(model.inputs[buf_name], arg.numpy())

    def test_reference_evaluator_matches_eager(self, name: str) -> None:
        model, eager = _imported(name)
        _assert_matches(model.outputs_from(evaluate(model.graph, model.inputs)), eager)

    @pytest.mark.parametrize("fusion", [True, False])
    def test_simulated_outputs_match_eager(self, name: str, fusion: bool) -> None:
        model, eager = _imported(name)
        for streams in (1, 2, 3, 4):
            plan = ExecutionPlan.build(model.graph, max_streams=streams, fusion=fusion)
            verify(plan)
            stats = SequentialExecutor(plan).run(model.inputs)
            assert stats.generated_inputs == ()
            _assert_matches(model.outputs_from(stats.outputs), eager)
        sim = Simulator(plan, model.inputs, policy="random", check_finite=False)
        assert sim.run().reason == "end"
        _assert_matches(model.outputs_from(sim.outputs), eager)


# ----------------------------------------------------------------------------- specifics
class TestMapping:
    def test_library_ops_where_exact(self) -> None:
        model, _ = _imported("residual")
        ops_of = {
            k: model.graph.node(nid).op
            for nid in model.graph.node_ids
            for k in [model.graph.node(nid).name]
        }
        # the residual add and the relu on equal float32 shapes are library ops, and fuse
        assert ops_of["add"] == "add" and ops_of["relu"] == "relu_nan"
        assert ops_of["body.1.tanh"] == "tanh"
        plan = ExecutionPlan.build(model.graph, fusion=True)
        assert plan.kernel_count_fused < plan.kernel_count_original

    def test_cnn_ops_are_library_ops(self) -> None:
        cnn = ("convolution", "pool", "pad", "cat", "mean")
        for name in ("conv_bn_relu", "conv_residual"):
            model, _ = _imported(name)
            assert not [o for o in model.opaque if any(w in o.target for w in cnn)], name
        model, _ = _imported("conv_residual")
        op_of = {n.name: n.op for n in model.graph.nodes if n.is_kernel}
        assert op_of["down.convolution"] == "conv2d" and op_of["conv2.convolution"] == "conv2d_bias"
        assert op_of["pool.max_pool2d_with_indices"] == "max_pool2d"
        assert op_of["side.avg_pool2d"] == "avg_pool2d" and op_of["mean"] == "adaptive_avg_pool2d"
        assert op_of["cat"] == "cat_2"
        # the zero pad before `down` is folded into it (padding only bottom and right), the
        # pad before `side` is not (an average pooling reads it): a kernel of its own
        pads = [k for k, t in model.targets.items() if t == "aten.constant_pad_nd.default"]
        assert [op_of[k] for k in pads] == ["constant_pad"]
        pad = next(n for n in model.graph.nodes if n.name == pads[0])
        assert (dict(pad.params)["pad_left"], dict(pad.params)["pad_top"]) == (1.0, 1.0)
        down = next(n for n in model.graph.nodes if n.name == "down.convolution")
        assert (dict(down.params)["pad_top"], dict(down.params)["pad_bottom"]) == (0.0, 1.0)

    def test_conv_epilogues_fuse_into_the_convolution(self) -> None:
        model, eager = _imported("conv_residual")
        plan = ExecutionPlan.build(model.graph, max_streams=1, fusion=True)
        heads = [k.fused for k in plan.graph.kernels() if k.fused is not None]
        steps = [tuple(st.op for st in f.steps) for f in heads]
        assert ("conv2d", "relu_nan") in steps  # conv1 -> relu
        assert ("conv2d_bias", "add", "relu_nan") in steps  # conv2 -> + y -> relu
        _assert_matches(
            model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs), eager
        )

    @pytest.mark.parametrize(
        ("module", "shape", "reason"),
        [
            # (every 1-, 2- and 3-d convolution, transposed or not, of float32, float16 or
            # bfloat16 maps: a float64 one is what remains)
            (nn.Conv2d(2, 2, 3).double(), (1, 2, 5, 5), "input 0 is float64"),
            (nn.ConvTranspose3d(2, 2, 3).double(), (1, 2, 3, 3, 3), "input 0 is float64"),
        ],
    )
    def test_other_convolutions_are_opaque_with_a_reason(self, module, shape, reason) -> None:
        x = torch.randn(*shape, dtype=torch.float64)
        model = from_module(module.eval(), (x,))
        conv = [o for o in model.opaque if o.target == "aten.convolution.default"]
        assert len(conv) == 1 and reason in conv[0].reason
        (y,) = model.outputs_from(evaluate(model.graph, model.inputs))
        np.testing.assert_allclose(y, module(x).detach().numpy(), rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("dims", [2, 3])
    def test_max_pool_indices_stay_opaque(self, dims) -> None:
        pool = nn.functional.max_pool2d if dims == 2 else nn.functional.max_pool3d

        class WithIndices(nn.Module):
            def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return pool(x, 2, return_indices=True)

        x = torch.randn(1, 2, *(6,) * dims)
        model = from_module(WithIndices(), (x,))
        op_of = {n.name: n.op for n in model.graph.nodes if n.is_kernel}
        name = f"max_pool{dims}d_with_indices"
        assert op_of[name] == f"max_pool{dims}d"
        # the int64 indices: another kernel of the same op, opaque (through torch)
        (idx,) = model.opaque
        assert idx.target == f"aten.{name}.default"
        assert idx.kernel == f"{name}_out1" and "indices are used" in idx.reason
        got = model.outputs_from(evaluate(model.graph, model.inputs))
        for g, w in zip(got, WithIndices()(x), strict=True):
            np.testing.assert_array_equal(g, w.numpy())

    def test_nan_goes_through_relu_and_amax_as_in_eager(self) -> None:
        # torch.relu and torch.amax keep a NaN; the library's fmaxf-based relu and max
        # would give 0 / skip it, so relu maps to relu_nan and amax to amax (NaN-propagating).
        class M(nn.Module):
            def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return torch.relu(x) * 2.0, torch.amax(x, dim=-1)

        x = torch.tensor([[1.0, float("nan"), -2.0, 3.0], [-1.0, -0.0, 0.5, -4.0]])
        want = tuple(t.numpy() for t in M()(x))
        model = from_module(M(), (x,))
        assert {model.graph.node(i).op for i in model.graph.node_ids} >= {"relu_nan", "amax"}
        for fusion in (False, True):
            plan = ExecutionPlan.build(model.graph, fusion=fusion)
            sim = Simulator(plan, model.inputs, check_finite=False)
            assert sim.run().reason == "end"
            for got, w in zip(model.outputs_from(sim.outputs), want, strict=True):
                np.testing.assert_array_equal(got, w)  # NaN == NaN here

    def test_gelu_maps_in_both_forms(self) -> None:
        mlp, _ = _imported("mlp")  # nn.GELU(approximate="tanh")
        assert mlp.graph.node(next(iter(_ids(mlp, "act.gelu")))).op == "gelu"
        # its own generator: on two pytest workers the global RNG's state depends on the
        # tests that ran before on the same worker
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
        exact = from_module(nn.GELU(), (x,))  # the default, erf form
        assert exact.opaque == () and next(n.op for n in exact.graph.nodes) == "gelu_erf"
        (y,) = exact.outputs_from(evaluate(exact.graph, exact.inputs))
        # torch's vectorised erf and the reference's libm erf differ by a few float32 ulps of
        # x (seen: 2.4e-7 where x * Phi(x) cancels to 0.039)
        np.testing.assert_allclose(y, nn.GELU()(x).numpy(), rtol=1e-6, atol=5e-7)

    def test_library_ops_read_reshapes_of_buffers(self) -> None:
        # sigmoid reads fc's (10, 16) addmm result viewed as (2, 5, 16): a reshape keeps the
        # row-major order, so the library's sigmoid reads the base buffer itself
        model, _ = _imported("rms_norm")
        g = model.graph
        sig = next(n for n in g.nodes if n.name == "sigmoid")
        assert sig.op == "sigmoid"
        (src,) = sig.inputs
        assert g.buffer(src).array_shape == (10, 16) and g.buffer(sig.outputs[0]).array_shape == (
            2,
            5,
            16,
        )
        # a transposing view is no reshape: the attention's clones of permuted heads are the
        # library's copy reading a strided view of the heads' buffer
        model, _ = _imported("attention")
        g = model.graph
        assert all(model.targets[o.kernel] == o.target for o in model.opaque)
        assert not [o for o in model.opaque if o.target == "aten.clone.default"]
        clones = [n for n in g.nodes if model.targets.get(n.name) == "aten.clone.default"]
        assert clones and all(n.op == "copy" for n in clones)
        assert any(
            g.buffer(n.inputs[0]).is_view and not g.buffer(n.inputs[0]).is_contiguous
            for n in clones
        )

    def test_opaque_reasons(self) -> None:
        model, _ = _imported("attention")
        reasons = {o.target: o.reason for o in model.opaque}
        # matmuls map to the library, reading permuted heads in place (ops.lib_reduce)
        assert not {"aten.addmm.default", "aten.bmm.default"} & set(reasons)
        assert "aten.native_layer_norm.default" not in reasons  # layer_norm_affine
        # where() reads the bool mask, ~mask is the library's logical_not: nothing opaque
        assert reasons == {}
        ops_ = {n.op for n in model.graph.nodes if n.is_kernel}
        assert {"where", "logical_not"} <= ops_

    def test_view_output_is_materialised(self) -> None:
        model, _ = _imported("residual")
        assert len(model.outputs) == 2 and model.outputs[0] != model.outputs[1]
        # the transposed output y.t() is the library's copy of a transposed view of y
        g = model.graph
        kernel = next(n for n in g.nodes if n.name.startswith("output.1"))
        assert kernel.op == "copy" and model.output_shapes[1] == (24, 3)
        (view,) = (g.buffer(b) for b in kernel.inputs)
        assert view.is_view and view.strides == (1, 24) and view.array_shape == (24, 3)

    def test_a_none_output_is_skipped(self) -> None:
        # a ModelOutput field left unset (LLaVA's image states without an image) is a None
        # output of the program: the tensor outputs keep eager's order
        class WithNone(nn.Module):
            def forward(self, x):
                return x * 2, None, x + 1

        x = torch.arange(6, dtype=torch.float32)
        model = from_module(WithNone(), (x,))
        assert len(model.outputs) == 2 and model.output_shapes == ((6,), (6,))
        got = model.outputs_from(
            SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs).outputs
        )
        assert [g.tolist() for g in got] == [(x * 2).tolist(), (x + 1).tolist()]
        assert [e.tolist() for e in model.eager_outputs] == [g.tolist() for g in got]

    def test_eager_outputs_pair_with_the_program_only_on_its_structure(self) -> None:
        from oxiwork.importers.torch import _eager_outputs

        class Two(nn.Module):
            def forward(self, x):
                return {"b": x * 2, "a": x + 1}

        x = torch.arange(3, dtype=torch.float32)
        model = from_module(Two(), (x,))
        assert [e.tolist() for e in model.eager_outputs] == [[0, 2, 4], [1, 2, 3]]
        # the same leaves under another structure (the keys in another order): not paired
        other = torch.utils._pytree.tree_flatten({"a": x, "b": x})[1]
        assert _eager_outputs(Two(), (x,), None, 2, other) is None
        assert _eager_outputs(Two(), (x,), None, 2) is not None

    def test_a_program_returning_constants_is_imported_undecomposed(self) -> None:
        # torch's run_decompositions can misplace the tensor outputs of a program that
        # returns constants among them (AyaVision's): such a program is imported as
        # exported, its linear layer one aten.linear, and its outputs in eager's places
        class Outputs(nn.Module):
            def __init__(self, none: bool) -> None:
                super().__init__()
                self.lin, self.none = nn.Linear(4, 3), none

            def forward(self, x):
                y = self.lin(x)
                return (y, (None, x * 2), y.sum(0)) if self.none else (y, (x * 2,), y.sum(0))

        x = torch.linspace(-1, 1, 8).reshape(2, 4)
        for none in (True, False):
            model = from_module(Outputs(none).eval(), (x,))
            eager = model.eager_outputs
            targets = set(model.targets.values())
            assert ("aten.linear.default" in targets) is none, targets
            got = model.outputs_from(
                SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs).outputs
            )
            assert [g.shape for g in got] == [e.shape for e in eager] == [(2, 3), (2, 4), (3,)]
            for g, e in zip(got, eager, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)

    def test_constants_are_folded(self) -> None:
        model, _ = _imported("embedding")
        assert model.folded and all(model.graph.buffer_by_name(f).external for f in model.folded)
        assert model.graph.buffer_by_name(model.outputs[1]).dtype == "int64"

    def test_a_multi_output_op_of_constants_folds_the_outputs_read(self) -> None:
        # CANINE pools a constant mask with indices: a tuple computed from no tensor
        class PooledMask(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                mask = torch.arange(16.0).reshape(1, 1, 4, 4)
                pooled, _ = nn.functional.max_pool2d(mask, 2, return_indices=True)
                return x * pooled.flatten()

        x = torch.randn(4)
        model = from_module(PooledMask(), (x,))
        # the pooled values (read), not the indices (not read)
        assert [f for f in model.folded if "max_pool" in f] == ["const.max_pool2d_with_indices.0"]
        assert not model.opaque
        (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
        np.testing.assert_array_equal(got, (x * torch.tensor([5.0, 7.0, 13.0, 15.0])).numpy())

    def test_a_layer_norm_without_bias_scales_only(self) -> None:
        # MPT's and OLMo's LayerNorm(bias=False): the library's layer_norm_scale
        block = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8, bias=False), nn.ReLU()).eval()
        with torch.no_grad():
            block[1].weight.copy_(torch.linspace(-2.0, 2.0, 8))
        x = torch.randn(3, 8)
        model = from_module(block, (x,))
        assert not model.opaque
        assert [n.op for n in model.graph.kernels()][1] == "layer_norm_scale"
        for fusion in (False, True):
            plan = ExecutionPlan.build(model.graph, fusion=fusion)
            (got,) = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
            np.testing.assert_allclose(got, model.eager_outputs[0], rtol=1e-5, atol=1e-6)

    def test_identical_call_sites_share_one_op(self) -> None:
        # logcumsumexp stays opaque (no library op computes it)
        class LogCumSumExp(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.logcumsumexp(x, -1)

        block = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), LogCumSumExp()) for _ in range(3)))
        model = from_module(block.eval(), (torch.randn(2, 8),))
        scans = [n.op for n in model.graph.nodes if n.is_kernel and "logcumsumexp" in n.name]
        assert len(scans) == 3 and len(set(scans)) == 1 and scans[0].startswith("torch_")
        again = from_module(block.eval(), (torch.randn(2, 8),))  # re-import reuses the ops
        assert {o.op for o in again.opaque} == {o.op for o in model.opaque}

    def test_kwargs_and_example_inputs(self) -> None:
        class Scaled(nn.Module):
            def forward(self, x: torch.Tensor, *, bias: torch.Tensor) -> torch.Tensor:
                return torch.exp(x) + bias

        gen = torch.Generator().manual_seed(
            0
        )  # not the global RNG: its state depends on test order
        x, bias = torch.randn(3, 4, generator=gen), torch.randn(3, 4, generator=gen)
        model = from_module(Scaled(), (x,), {"bias": bias})
        assert model.user_inputs == ("x", "bias") and model.opaque == ()
        (y,) = model.outputs_from(evaluate(model.graph, model.inputs))
        # atol: exp's ulp differences survive where exp(x) + bias cancels to near zero
        np.testing.assert_allclose(y, (torch.exp(x) + bias).numpy(), rtol=1e-6, atol=1e-7)

    def test_graph_outputs_are_read_at_the_end(self) -> None:
        model, _ = _imported("embedding")
        reads = [n for n in model.graph.nodes if n.kind is NodeKind.Memcpy]
        assert [model.graph.buffer(n.inputs[0]).name for n in reads] == list(model.outputs)
        assert all(not model.graph.successors(n.id) for n in reads)


def test_readme_import_example_runs_as_written() -> None:
    from tests.test_readme import _blocks

    (code,) = [b for b in _blocks("python") if "from_module" in b]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})  # our own README, not user input
    shown = code.rsplit("# ", 1)[1].strip()  # the comment on the print line
    assert printed.getvalue().strip() == shown


def test_as_strided_sees_eagers_layout() -> None:
    # exp of a transposed input keeps eager's transposed layout; as_strided then indexes that
    # storage, so the importer must rebuild it (a row-major copy would give other elements)
    class Strided(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.as_strided(torch.exp(x.permute(1, 0)), (2, 3), (1, 2)) * 2

    x = torch.randn(2, 3)
    model = from_module(Strided(), (x,))
    want = Strided()(x).numpy()
    (got,) = model.outputs_from(evaluate(model.graph, model.inputs))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert not np.allclose(
        np.exp(x.numpy().T).reshape(-1)[[0, 2, 4, 1, 3, 5]], want.reshape(-1) / 2
    )


def test_progress_bars_show_when_asked_and_not_for_a_small_model(capsys) -> None:
    module, args = _make("mlp")
    module.eval()
    from_module(module, args)  # default: a small model imports quietly
    assert "import" not in capsys.readouterr().err
    from_module(module, args, progress=True)
    err = capsys.readouterr().err
    assert "export MLP" in err
    assert "node" in err and "import MLP" in err
