"""The workbench's engine state (oxiwork.widget.session): eager and lazy sessions agree."""

from __future__ import annotations

from typing import Any

import pytest

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.widget.session import OPTION_DEFAULTS, Session


def describe(s: Session) -> tuple[Any, ...]:
    """What the views read from a session, without wall times."""
    stages = [(st.name, st.graph, st.before, st.created, st.removed) for st in s.stages]
    steps = [(st.node, st.name) for st in s.plan.steps] if s.plan is not None else None
    return stages, steps, s.notes, s.sim is None, s.final_graph, s.step_order


@pytest.mark.parametrize("graph", [quick_start(), transformer_block(1)], ids=["quick", "tf"])
def test_lazy_session_loads_on_first_access_and_matches_eager(graph: Any) -> None:
    lazy = Session(graph, lazy=True)
    assert not lazy.loaded and lazy.seconds == 0.0
    assert lazy.input_stage.graph is graph and not lazy.loaded
    assert describe(lazy) == describe(Session(graph))
    assert lazy.loaded and lazy.seconds > 0


@pytest.mark.parametrize("attr", ["stages", "plan", "notes", "sim", "final_graph", "step_order"])
def test_every_engine_attribute_loads(attr: str) -> None:
    s = Session(quick_start(), lazy=True)
    getattr(s, attr)
    assert s.loaded


def test_load_runs_the_pipeline_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    build = ExecutionPlan.build.__func__  # type: ignore[attr-defined]

    def counting(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
        calls.append(graph)
        return build(cls, graph, **options)

    monkeypatch.setattr(ExecutionPlan, "build", classmethod(counting))
    s = Session(quick_start(), lazy=True)
    assert calls == []
    s.load()
    s.load()
    _ = s.plan, s.stages
    assert len(calls) == 1


def test_interrupted_load_leaves_the_session_unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    build = ExecutionPlan.build.__func__  # type: ignore[attr-defined]
    state = {"interrupt": True}

    def interrupted(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
        if state.pop("interrupt", False):
            raise KeyboardInterrupt
        return build(cls, graph, **options)

    monkeypatch.setattr(ExecutionPlan, "build", classmethod(interrupted))
    s = Session(quick_start(), lazy=True)
    with pytest.raises(KeyboardInterrupt):
        s.load()
    assert not s.loaded and s.input_stage.name == "input"
    assert s.plan is not None and len(s.stages) > 1 and s.notes == {}


def test_failed_pipeline_is_recorded_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def failing(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
        calls.append(graph)
        raise RuntimeError("engine bug")

    monkeypatch.setattr(ExecutionPlan, "build", classmethod(failing))
    s = Session(quick_start(), lazy=True)
    assert s.plan is None and "RuntimeError: engine bug" in s.notes["plan"]
    assert [st.name for st in s.stages] == ["input"] and s.sim is None
    assert len(calls) == 1


def test_options_reach_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    build = ExecutionPlan.build.__func__  # type: ignore[attr-defined]

    def recording(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
        seen.append(options)
        return build(cls, graph, **options)

    monkeypatch.setattr(ExecutionPlan, "build", classmethod(recording))
    s = Session(transformer_block(1), 2, fusion=False, max_group_size=5)
    assert s.options == {"max_streams": 2, "fusion": False, "max_group_size": 5}
    assert {k: seen[0][k] for k in OPTION_DEFAULTS} == s.options
    assert s.plan.options["max_streams"] == 2 and not s.plan.options["fusion"]
    assert [st.name for st in s.stages] == ["input", "streams", "memory"]
    assert Session(quick_start(), lazy=True).options == OPTION_DEFAULTS


@pytest.mark.parametrize(
    ("options", "match"),
    [({"max_streams": 0}, "max_streams is 0"), ({"max_streams": True}, "max_streams must be"),
     ({"max_group_size": 65}, "from 1 to 64"), ({"fusion": 1}, "fusion must be True or False")],
)  # fmt: skip
def test_raises_bad_option(options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        Session(quick_start(), lazy=True, **options)
