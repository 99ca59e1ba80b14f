"""Element-wise ops on operands of two dtypes: torch's type promotion through cast kernels.

Torch converts every operand of an element-wise op to the operands' common dtype and computes
in it (the result's dtype, but for comparisons, which give bool). The importer reads such an
operand through a ``cast_<dtype>`` kernel of its buffer (one per buffer and dtype), so the
library op that follows computes on the values torch's converted operand holds. Every pair
here is checked against eager bit for bit, fusion on and off: int64 values past 2**24 round
to float32 as torch rounds them, bool masks become 0 and 1, float16 widens exactly.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from torch import nn

from oxiwork import ExecutionPlan, SequentialExecutor, verify
from oxiwork.importers.torch import from_module
from oxiwork.reference import evaluate

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")

# values of each dtype: the special ones, ints past float32's 2**24 and float16's range
_VALUES = {
    torch.bool: torch.tensor([True, False, True, True, False, False]),
    torch.int64: torch.tensor([0, -7, 2**24 + 2**16 + 1, 2**40 + 3, -(2**62) - 1, 65519]),
    torch.int32: torch.tensor([0, -7, 2**24 + 1, -(2**31), 2**31 - 1, 3], dtype=torch.int32),
    torch.float32: torch.tensor([float("nan"), -0.0, 1.5, float("inf"), -3.0e38, 1e-40]),
    torch.float16: torch.tensor([float("nan"), -0.0, 1.5, float("-inf"), 65504.0, 6e-8]),
    torch.bfloat16: torch.tensor([float("nan"), -0.0, 1.5, float("inf"), -3.0e38, 1e-39]),
}
_VALUES = {dtype: v.to(dtype) for dtype, v in _VALUES.items()}

_BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "lt": torch.lt,
    "eq": torch.eq,
}

# (x dtype, y dtype): each pair's promotion; every one of them computes in a dtype a library
# op takes, so none stays opaque
_PAIRS = [
    (torch.bool, torch.float32),  # a mask times a value (RecurrentGemma's reset)
    (torch.float32, torch.bool),
    (torch.int64, torch.float32),
    (torch.int32, torch.int64),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),  # -> float32
    (torch.int64, torch.float16),
    (torch.int64, torch.bfloat16),  # past 2**24: rounded to float32 first, as torch
    (torch.bool, torch.int64),
]


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def _assert_same(got: np.ndarray, want: torch.Tensor) -> None:
    w = _numpy(want)
    assert got.dtype == w.dtype and got.shape == w.shape
    if np.issubdtype(w.dtype, np.floating) or w.dtype == ml_dtypes.bfloat16:
        # bit for bit, NaN where eager has NaN (its payload aside)
        g, w = got.astype(np.float32), w.astype(np.float32)
        assert np.array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        np.testing.assert_array_equal(g[ok].view(np.uint32), w[ok].view(np.uint32))
    else:
        np.testing.assert_array_equal(got, w)


def _check(module: nn.Module, args: tuple[torch.Tensor, ...]):
    with torch.no_grad():
        want = module(*args)
    wants = want if isinstance(want, tuple) else (want,)
    model = from_module(module, args)
    verify(model.graph)
    assert not model.opaque, [(o.target, o.reason) for o in model.opaque]
    runs = [model.outputs_from(evaluate(model.graph, model.inputs))]
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion, max_streams=2)
        runs.append(model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs))
    for got in runs:
        for g, w in zip(got, wants, strict=True):
            _assert_same(g, w)
    return model


def _torch_takes(name: str, dx: torch.dtype, dy: torch.dtype) -> bool:
    """Does torch compute op ``name`` on operands of these dtypes (it refuses a bool
    operand of sub)?"""
    try:
        _BINARY[name](torch.ones(1, dtype=dx), torch.ones(1, dtype=dy))
    except RuntimeError:
        return False
    return True


_CASES = [
    pytest.param(name, dx, dy, id=f"{name}-{dx}-{dy}".replace("torch.", ""))
    for name in sorted(_BINARY)
    for dx, dy in _PAIRS
    if _torch_takes(name, dx, dy)
]


@pytest.mark.parametrize(("name", "dx", "dy"), _CASES)
def test_binary_ops_of_two_dtypes_match_eager(name: str, dx: torch.dtype, dy: torch.dtype) -> None:
    fn = _BINARY[name]

    class M(nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return fn(x, y)

    x, y = _VALUES[dx].reshape(-1, 1), _VALUES[dy].reshape(1, -1)  # every pair of values
    if name == "div" and dx in (torch.int64, torch.int32) and dy in (torch.int64, torch.int32):
        y = torch.where(y == 0, 1, y)  # true division: both converted to float32
    model = _check(M(), (x, y))
    casts = [k.op for k in model.graph.kernels() if k.op.startswith("cast_")]
    # a bool or integer operand of a float op is read through a cast to the float dtype
    # (the library's float ops take two float dtypes themselves: float16 and float32 need
    # none)
    common = torch.promote_types(dx, dy)
    if common.is_floating_point and not (dx.is_floating_point and dy.is_floating_point):
        assert casts == [f"cast_{str(common).split('.')[-1]}"], casts


def test_the_cases_leave_out_only_what_torch_refuses() -> None:
    # 8 ops x 9 pairs, less sub on the three pairs with a bool (torch refuses them)
    assert len(_CASES) == 8 * 9 - 3


def test_one_cast_per_buffer_and_dtype_and_it_fuses() -> None:
    # a bool mask read by three ops with float32 values: one cast kernel, fused with them
    class M(nn.Module):
        def forward(self, m: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return (m * x + m) * (x + m)

    m = torch.tensor([[True, False, True]]).expand(4, 3).contiguous()
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    model = _check(M(), (m, x))
    casts = [k for k in model.graph.kernels() if k.op == "cast_float32"]
    assert len(casts) == 1 and casts[0].name == "m.to_float32"
    plan = ExecutionPlan.build(model.graph, fusion=True)
    assert len(plan.graph.kernels()) == 1  # the cast and the four ops in one kernel


def test_int_operands_of_float_ops_convert_first() -> None:
    # unary float ops and number operands of int tensors: torch computes in float32
    class M(nn.Module):
        def forward(self, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.sigmoid(i), i * 0.5, i + 2.5, (i > 3) * 1.5

    i = torch.tensor([[-3, 0, 5], [2**25 + 1, 7, -(2**40)]])
    _check(M(), (i,))


def test_ops_torch_does_not_promote_are_unchanged() -> None:
    # same-dtype integer ops stay integer ops: no cast where torch converts nothing
    class M(nn.Module):
        def forward(self, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
            return i * j + i

    i = torch.tensor([2**40 + 1, -3, 7])
    model = _check(M(), (i, i.flip(0)))
    assert not any(k.op.startswith("cast_") for k in model.graph.kernels())


def test_a_condition_stays_bool_and_the_values_convert() -> None:
    # where(cond, int64, float32): torch selects between the values converted to float32;
    # the library's where takes the bool condition as it is
    class M(nn.Module):
        def forward(self, c: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return torch.where(c, x, y)

    c = torch.tensor([True, False, True, False])
    x = torch.tensor([1, 2**40 + 1, -(2**25) - 1, 7])
    y = torch.tensor([0.5, -1.5, float("nan"), -0.0])
    model = _check(M(), (c, x, y))
    assert [k.op for k in model.graph.kernels()] == ["cast_float32", "where"]
