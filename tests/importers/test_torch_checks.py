"""Run-time checks on values read with ``.item()``: ``torch._check`` (and the all-true
checks of vision-language models) become kernels of op ``check`` that the executors read
back; any other use of such a value is refused, naming it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import ExecutionPlan, SequentialExecutor
from oxiwork.error import CheckFailed
from oxiwork.importers.torch import UnsupportedModel, from_module
from tests.importers._eager import assert_simulates_exactly, import_with_eager


class Checked(torch.nn.Module):
    """Checks of the kinds Hugging Face models make: a count of image tokens, a bound on
    the largest id (XLM's lengths), a tensor all true (Llava's torch_compilable_check) and
    a negated comparison (sym_not)."""

    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        n = (ids == 3).sum().item()
        torch._check(n == 2)
        torch._check(ids.max().item() <= 16)
        torch._check_tensor_all(ids >= 0)
        torch._check(torch.sym_not(n == 5))
        return x * 2 + ids.to(torch.float32)


IDS = torch.tensor([[1, 3, 3, 5]])
X = torch.linspace(-1, 1, 4).reshape(1, 4)


@pytest.fixture(scope="module")
def checked():
    model, want = import_with_eager(Checked(), (IDS, X))
    plan = ExecutionPlan.build(model.graph)
    return model, want, plan


def eager_fails(ids: np.ndarray) -> bool:
    try:
        Checked()(torch.from_numpy(ids), X)
    except RuntimeError:
        return True
    return False


def test_checks_import_as_check_kernels_and_hold_on_the_example(checked):
    model, want, _ = checked
    checks = [
        name for name, target in model.targets.items() if target.endswith("_assert_scalar.default")
    ]
    assert checks and all(name.startswith("check ") for name in checks)
    ops = {n.name: n.op for n in model.graph.nodes}
    assert all(ops[name] == "check" for name in checks)
    assert not model.opaque
    assert_simulates_exactly(model, want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-2, 20), min_size=4, max_size=4))
def test_a_run_fails_its_checks_exactly_where_eager_does(checked, values):
    model, _, plan = checked
    ids = np.array([values], dtype=np.int64)
    inputs = dict(model.inputs)
    inputs[model.user_inputs[0]] = ids
    try:
        run = SequentialExecutor(plan).run(inputs)
    except CheckFailed as e:
        assert eager_fails(ids), "a check failed where eager passes"
        assert "'check " in str(e)
        return
    assert not eager_fails(ids), "eager fails a check that the plan passed"
    (got,) = model.outputs_from(run.outputs)
    want = Checked()(torch.from_numpy(ids), X).numpy()
    np.testing.assert_array_equal(got, want)


class ScalesByItem(torch.nn.Module):
    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        k = ids.sum().item()
        torch._check(k >= 0)
        return x * k


class ChecksAFloat(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.abs().sum().item() < 100.0)
        return x + 1


def test_a_value_read_with_item_is_refused_beyond_checks():
    with pytest.raises(UnsupportedModel, match=r"read back from a tensor with \.item\(\)"):
        from_module(ScalesByItem(), (IDS, X))


def test_a_float_read_with_item_is_refused():
    with pytest.raises(UnsupportedModel, match=r"float32 value back with \.item\(\)"):
        from_module(ChecksAFloat(), (X,))
