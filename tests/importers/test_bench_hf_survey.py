"""``bench/hf_survey.py``: which architectures it surveys, a row it gives, and its rule for
an output that misses eager's bar only because the model amplifies rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.bench_scripts import load

transformers = pytest.importorskip("transformers")  # in the [test] extra: present in CI


def test_surveys_exactly_the_base_models_the_zoo_leaves_out() -> None:
    from tests.importers.test_torch_zoo import ZOO

    survey = load("hf_survey")
    archs = survey.architectures()
    models = {m for _, m, _ in archs}
    in_zoo = {type(ZOO[name]()[0]).__name__ for name in ("llama", "gpt_neox", "whisper")}
    assert in_zoo and not in_zoo & models
    assert len(archs) > 300  # transformers 5 maps over 500 base models
    assert all(hasattr(transformers, m) and hasattr(transformers, c) for _, m, c in archs)


def test_a_text_model_imports_whole() -> None:
    row = load("hf_survey").one("bert", "BertModel", "BertConfig")
    assert row["outcome"] == "whole", row
    assert row["kernels"] > 0 and row["worst"] <= 2e-5 and row["inputs"] == ["input_ids"]


class _Amplifier(torch.nn.Module):
    """``a @ x - b @ x`` with ``a`` within 1e-3 of ``b``: the difference is a thousandth of
    the products, so their float32 rounding is a thousand times larger beside it."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        b = torch.randn(64, 64, generator=g)
        self.a = torch.nn.Parameter(b + 1e-3 * torch.randn(64, 64, generator=g))
        self.b = torch.nn.Parameter(b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a @ x - self.b @ x


def test_amplified_means_no_further_from_float64_than_eager() -> None:
    survey = load("hf_survey")
    model = _Amplifier().eval()
    kw = {"x": torch.randn(64, 4, generator=torch.Generator().manual_seed(1))}
    with torch.no_grad():
        eager = model(**kw).numpy()
        exact = model.double()(**{"x": kw["x"].double()}).numpy()
    model.float()
    assert np.abs(eager - exact).max() > 2e-5 * np.abs(exact).max()  # the model amplifies
    # the float64 result rounded once is closer to it than eager: amplified, not wrong
    ok, ratio = survey._amplified(model, kw, [exact.astype(np.float32)], [eager])
    assert ok and ratio < 1
    # an output off by 1% of the largest magnitude is wrong
    off = eager + np.float32(0.01) * np.abs(eager).max()
    ok, ratio = survey._amplified(model, kw, [off], [eager])
    assert not ok and ratio > 2
    # an output within the bar needs no float64 run: nothing to judge
    assert survey._amplified(model, kw, [eager], [eager]) == (True, 0.0)


def test_a_model_over_its_time_is_a_timeout_row() -> None:
    row = load("hf_survey").run_one(("bert", "BertModel", "BertConfig"), 0.01, 9.0)
    assert row == {
        "type": "bert",
        "model": "BertModel",
        "outcome": "timeout",
        "detail": "over 0.01 s",
    }


class _EmptyOut(torch.nn.Module):
    """A module returning a tensor of no elements, which the importer refuses."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :0]


def test_what_the_ir_cannot_express_is_refused_and_anything_else_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    survey = load("hf_survey")
    survey.make = lambda *_: (_EmptyOut().eval(), {"x": torch.ones(3, 4)})
    row = survey.one("empty", "Empty", "EmptyConfig")
    assert (row["outcome"], row["stage"]) == ("refused", "import")
    assert "output 0 is a tensor of no elements" in row["detail"]

    def broken(*_: object) -> None:
        raise IndexError("list assignment index out of range")

    survey.make = lambda *_: (torch.nn.ReLU(), {"input": torch.ones(3)})
    import oxiwork  # (one() imports the executor from it when it runs)

    monkeypatch.setattr(oxiwork, "SequentialExecutor", broken)
    row = survey.one("relu", "ReLU", "ReLUConfig")
    assert (row["outcome"], row["stage"]) == ("oxiwork error", "simulate")
    assert row["detail"].startswith("IndexError") and "Traceback" in row["traceback"]


class _Ids(torch.nn.Module):
    def forward(self, ids: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ids * 2, torch.relu(x)


@pytest.mark.parametrize("which", ["mul", "relu"])
def test_other_values_are_wrong_even_integers_off_by_one(
    which: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    import oxiwork  # (one() imports the executor from it when it runs)

    survey = load("hf_survey")
    inputs = {"ids": torch.arange(6), "x": torch.linspace(-1, 1, 6)}
    survey.make = lambda *_: (_Ids().eval(), inputs)
    real = oxiwork.SequentialExecutor

    class Off:  # the real run with one output moved: the ids by one, the floats by 1%
        def __init__(self, plan: object) -> None:
            self.real = real(plan)

        def run(self, values: object) -> object:
            outs = dict(self.real.run(values).outputs)  # (the outputs 'mul' and 'relu')
            outs[which] = outs[which] + (1 if which == "mul" else np.float32(0.01))
            return types.SimpleNamespace(outputs=outs)

    monkeypatch.setattr(oxiwork, "SequentialExecutor", Off)
    row = survey.one("ids", "Ids", "IdsConfig")
    assert row["outcome"] == "WRONG", row


class _Vlm(torch.nn.Module):
    """Checks, as transformers' vision-language models do, that its text holds one image
    token (id 7) per image feature (3)."""

    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
        tokens = int((input_ids == 7).sum())
        if tokens != 3:
            raise ValueError(
                f"Image features and image tokens do not match, tokens: {tokens}, features: 3"
            )
        return pixel_values * 2


def test_image_tokens_are_placed_and_a_model_failing_on_its_inputs_is_not_ours() -> None:
    survey = load("hf_survey")
    kw = {"input_ids": torch.arange(4).reshape(1, 4), "pixel_values": torch.ones(1, 3)}
    config = type("Config", (), {"image_token_id": 7})()
    survey._place_image_tokens(_Vlm(), config, kw)
    assert kw["input_ids"].tolist() == [[7, 7, 7, 0, 1, 2, 3]]
    # without the tokens the model's own check raises: its row says so, not an error of ours
    survey.make = lambda *_: (_Vlm(), {"input_ids": torch.arange(4).reshape(1, 4),
                                       "pixel_values": torch.ones(1, 3)})  # fmt: skip
    row = survey.one("vlm", "Vlm", "VlmConfig")
    assert (row["outcome"], row["stage"]) == ("not ours", "eager")
    assert "image tokens do not match" in row["detail"]
