"""Workbench(ImportedModel) simulates the model's own values and checks them against eager.

A small conv block of our own (conv, batch norm, ReLU, a linear head; two outputs) is
imported once. The workbench's simulator must start from the model's real inputs and
weights, its run must equal the module's eager outputs (computed here, not stored), a wrong
weight or wrong expected values must show as a mismatch, and an edit must drop the binding.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start
from oxiwork.importers.torch import from_module
from oxiwork.widget import InvalidOption, Workbench
from oxiwork.widget.eager import tolerance

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


class ConvBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 5 * 5, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(h.flatten(1)), h.mean()


@pytest.fixture(scope="module")
def net() -> tuple[ConvBlock, torch.Tensor]:
    torch.manual_seed(0)
    block = ConvBlock().eval()
    with torch.no_grad():  # statistics that are not the identity, so batch norm matters
        block.bn.running_mean.uniform_(-0.5, 0.5)
        block.bn.running_var.uniform_(0.5, 2.0)
    return block, torch.randn(2, 3, 5, 5)


@pytest.fixture(scope="module")
def model(net):
    block, x = net
    return from_module(block, (x,))


@pytest.fixture(scope="module")
def eager(net) -> tuple[np.ndarray, ...]:
    block, x = net
    with torch.no_grad():
        return tuple(t.numpy() for t in block(x))


class Branches(nn.Module):
    """Two branches that two streams run side by side, joined by an event."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.out = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.a(x)) * torch.tanh(self.b(x)))


def _run(w: Workbench) -> dict:
    reply = w.handle_message({"type": "sim", "request_id": "r", "action": "run"})
    assert reply["type"] == "ok", reply
    return w.sim_state["eager"]


class TestBinding:
    def test_raises_for_expected_without_a_model(self) -> None:
        with pytest.raises(InvalidOption, match="expected= compares an imported model"):
            Workbench(quick_start(), expected=(np.zeros(3),))

    def test_raises_for_expected_of_the_wrong_count(self, model) -> None:
        with pytest.raises(InvalidOption, match=r"has 1 value.* 2 output"):
            Workbench(model, expected=(np.zeros(3),))

    @pytest.mark.parametrize("tol", [(1e-5,), (-1.0, 0.0), ("a", 1.0), (float("nan"), 0.0)])
    def test_raises_for_a_bad_tolerance(self, model, tol) -> None:
        with pytest.raises(InvalidOption, match=r"tolerance must be \(rtol, atol\)"):
            Workbench(model, tolerance=tol)

    def test_simulation_outputs_equal_eager(self, model, eager) -> None:
        w = Workbench(model, progressive=False)
        assert w.model is model and w.view["model"]["bound"]
        assert w.session.sim.generated_inputs == ()  # every input is the model's own value
        verdict = _run(w)
        got = model.outputs_from(w.session.sim.outputs)
        for g, e, row in zip(got, eager, verdict["outputs"], strict=True):
            rtol, atol = tolerance(e.dtype.name)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
            assert row["allclose"] and (row["rtol"], row["atol"]) == (rtol, atol)
            assert row["max_abs_diff"] == pytest.approx(float(np.abs(g - e).max()), abs=1e-12)
            assert row["shape"] == list(e.shape)
        assert verdict["match"] is True and "matches PyTorch eager" in verdict["text"]

    def test_options_keep_the_binding(self, model) -> None:
        w = Workbench(model, max_streams=2)
        w.set_options(max_streams=1, fusion=False)
        v = w.compare_eager()  # the plan run in order, without stepping
        assert v["match"] is True and v["source"] == "plan run in order"
        assert w.sim_state["eager"] == v and w.session.sim.generated_inputs == ()

    def test_a_wrong_weight_shows_a_mismatch(self, model) -> None:
        name = next(n for n in model.inputs if n.endswith("fc.weight"))
        wrong = dataclasses.replace(
            model, inputs={**model.inputs, name: model.inputs[name] + np.float32(0.5)}
        )
        w = Workbench(wrong, progressive=False)
        verdict = _run(w)
        assert verdict["match"] is False and verdict["text"].startswith("differs from")
        head, mean = verdict["outputs"]
        assert not head["allclose"] and head["max_abs_diff"] > head["atol"]
        assert mean["allclose"]  # the wrong weight is the head's only

    def test_a_plan_missing_an_event_shows_a_mismatch(self) -> None:
        torch.manual_seed(1)
        m = from_module(Branches().eval(), (torch.randn(4, 8),))
        w = Workbench(m, max_streams=2, fusion=False, progressive=False)
        assert list(w.session.events) == [0]  # the join of the two branches
        w.sim_config(policy="adversarial", drop_event=0)
        raced = _run(w)
        assert raced["match"] is False and "event 0 dropped" in raced["source"]
        assert not raced["outputs"][0]["allclose"]
        # the plan itself, run in order, still computes the module
        assert w.compare_eager()["match"] is True

    def test_wrong_expected_values_show_a_mismatch(self, model, eager) -> None:
        off = eager[0].copy()
        off.flat[3] += 1e-3
        w = Workbench(model, expected={model.outputs[0]: off, model.outputs[1]: eager[1]})
        v = w.compare_eager()
        row = v["outputs"][0]
        assert v["match"] is False and not row["allclose"]
        assert row["max_abs_diff"] == pytest.approx(1e-3, rel=1e-2)
        # the same values within a looser tolerance match, and say which they used
        loose = Workbench(model, expected=(off, eager[1]), tolerance=(0.0, 2e-3)).compare_eager()
        assert loose["match"] is True
        assert {(r["rtol"], r["atol"]) for r in loose["outputs"]} == {(0.0, 2e-3)}

    def test_a_shape_mismatch_is_a_failure_without_a_size(self, model, eager) -> None:
        v = Workbench(model, expected=(eager[0][:1], eager[1])).compare_eager()
        row = v["outputs"][0]
        assert v["match"] is False and row["max_abs_diff"] is None and "shape" in row["reason"]

    def test_an_edit_drops_the_binding(self, model) -> None:
        w = Workbench(model)
        reply = w.handle_message(
            {"type": "add_buffer", "request_id": "e", "name": "extra", "size_bytes": 64}
        )
        assert reply["type"] == "ok" and "model binding dropped" in reply["message"]
        assert w.model is None and "edited" in w.binding_note
        w.load_passes()
        section = w.view["model"]
        assert not section["bound"] and section["note"] == w.binding_note
        assert not section["eager"] and section["values"] == len(model.inputs)
        # the buffers the edit left alike keep the model's values...
        assert w.session.sim.generated_inputs == ()
        _run(w)
        # ... but nothing is compared with the module's (now stale) eager outputs
        assert w.sim_state["eager"] is None
        with pytest.raises(InvalidArgument, match="graph was edited"):
            w.compare_eager()
        w.graph = model  # binds it again
        assert w.model is model and w.binding_note == "" and w.view["model"]["bound"]

    def test_a_model_without_eager_outputs_asks_for_them(self, model, eager) -> None:
        m = dataclasses.replace(model, eager_outputs=None)  # as from_exported_program makes
        w = Workbench(m)
        assert w.view["model"]["bound"] and not w.view["model"]["eager"]
        with pytest.raises(InvalidArgument, match="expected="):
            w.compare_eager()
        assert Workbench(m, expected=eager).compare_eager()["match"] is True


class TestStepValues:
    def test_a_step_shows_the_values_it_touched(self, model, net) -> None:
        _, x = net
        w = Workbench(model, progressive=False)
        assert w.sim_state["touched"] == []  # before the first step
        steps = 0
        while not any(r["name"] in model.user_inputs for r in w.sim_state["touched"]):
            w.handle_message({"type": "sim", "request_id": "s", "action": "step"})
            steps += 1
        rows = {r["name"]: r for r in w.sim_state["touched"]}
        (name,) = model.user_inputs
        row = rows[name]
        flat = x.numpy().ravel()
        assert row["role"] == "read" and row["shape"] == list(x.shape)
        assert row["head"] == pytest.approx(flat[: len(row["head"])].tolist())
        assert (row["min"], row["max"]) == pytest.approx((flat.min(), flat.max()))
        for r in rows.values():
            if r["role"] != "read":  # what the step wrote is the simulator's buffer now
                value = w.session.sim.buffer(r["name"])
                assert r["mean"] == pytest.approx(float(value.astype(np.float64).mean()))
        for _ in range(steps):  # back to the start: no step on screen, no buffers
            w.handle_message({"type": "sim", "request_id": "b", "action": "back"})
        assert w.sim_state["position"] == -1 and w.sim_state["touched"] == []
