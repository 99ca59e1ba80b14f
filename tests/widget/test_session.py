"""The workbench's engine state (oxiwork.widget.session): eager and lazy sessions agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import drop_event
from oxiwork.node import NodeKind
from oxiwork.widget.session import KEEP, OPTION_DEFAULTS, POLICIES, Session, output_differences


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


# ---------------------------------------------------------------------- simulator settings
@pytest.fixture(scope="module")
def tf() -> Session:
    return Session(transformer_block(1), 4)


class TestConfigureSim:
    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"policy": "chaos"}, "policy is 'chaos'; choose one of: in_order"),
            ({"policy": 3}, "policy is 3"),
            ({"drop_event": 6}, "not an event of this plan; its events are 0 to 5"),
            ({"drop_event": True}, "must be an event id"),
            ({"drop_event": 1.0}, "must be an event id"),
        ],
    )
    def test_raises_and_changes_nothing(
        self, tf: Session, kwargs: dict[str, Any], match: str
    ) -> None:
        tf.configure_sim("random", 1)
        sim, plan = tf.sim, tf.sim_plan
        with pytest.raises(InvalidArgument, match=match):
            tf.configure_sim(**kwargs)
        assert (tf.policy, tf.dropped_event) == ("random", 1)
        assert tf.sim is sim and tf.sim_plan is plan

    def test_raises_plan_without_events(self) -> None:
        with pytest.raises(InvalidArgument, match="it has none"):
            Session(quick_start()).configure_sim(drop_event=0)

    def test_defaults_and_keep(self, tf: Session) -> None:
        fresh = Session(transformer_block(1), 4, lazy=True)
        assert (fresh.policy, fresh.dropped_event) == ("in_order", None)
        tf.configure_sim("round_robin", 2)
        tf.configure_sim(drop_event=KEEP)
        assert (tf.policy, tf.dropped_event) == ("round_robin", 2)
        tf.configure_sim(policy="random")
        assert (tf.policy, tf.dropped_event) == ("random", 2)
        tf.configure_sim(drop_event=None)
        assert tf.sim_plan is tf.plan and tf.sim.policy == "random"

    @pytest.mark.parametrize("event", range(6))
    def test_sim_plan_lacks_exactly_the_event(self, tf: Session, event: int) -> None:
        tf.configure_sim("in_order", event)
        assert tf.sim.plan is tf.sim_plan
        assert [st.node for st in tf.sim_plan.steps] == [
            st.node for st in drop_event(tf.plan, event).steps
        ]
        kept = [tf.plan_step(i) for i in range(len(tf.sim_plan.steps))]
        assert sorted(set(kept) | set(tf.events[event])) == list(range(len(tf.plan.steps)))
        for i, j in enumerate(kept):
            assert tf.plan.steps[j].node == tf.sim_plan.steps[i].node

    def test_events(self, tf: Session) -> None:
        for e, idx in tf.events.items():
            kinds = [tf.plan.steps[i].kind for i in idx]
            assert kinds.count(NodeKind.EventRecord) == 1 and NodeKind.EventWait in kinds
            assert {tf.plan.steps[i].event for i in idx} == {e}

    @pytest.mark.parametrize("policy", POLICIES)
    def test_expected_outputs_are_the_in_order_run(self, tf: Session, policy: str) -> None:
        tf.configure_sim(policy, None)
        tf.sim.run()
        assert output_differences(tf.expected_outputs(), tf.sim.outputs) == []


finite = hnp.arrays(np.float32, st.integers(1, 6), elements=st.floats(-1e3, 1e3, width=32))


@settings(max_examples=100, deadline=None)
@given(a=finite, b=finite, missing=st.booleans())
def test_output_differences(a: np.ndarray, b: np.ndarray, missing: bool) -> None:
    """Empty iff every output is there and equal; otherwise names exactly the differing
    ones, with their max |difference| when the shapes agree."""
    expected = {"same": a, "other": a}
    actual = {"same": a} if missing else {"same": a.copy(), "other": b}
    diff = dict(output_differences(expected, actual))
    if missing or a.shape != b.shape:
        assert diff == {"other": None}
    elif np.array_equal(a, b):
        assert diff == {}
    else:
        assert list(diff) == ["other"]
        assert diff["other"] == float(np.max(np.abs(a.astype(np.float64) - b)))


def test_output_differences_nan() -> None:
    nan = np.array([np.nan, 1.0])
    assert output_differences({"y": nan}, {"y": nan.copy()}) == []
    assert output_differences({"y": nan}, {"y": np.array([0.0, 1.0])}) == [("y", None)]
    # NaN in the same place on both sides is equal; the rest still has a size.
    assert output_differences({"y": nan}, {"y": np.array([np.nan, 3.0])}) == [("y", 2.0)]


def test_events_are_scanned_once_per_plan() -> None:
    # The drop-event menu labels every event; rescanning the plan's steps per event made
    # opening a 10k-node workbench quadratic (11 s of 13). The map is built once.
    s = Session(transformer_block(1), 4)
    assert s.events is s.events
    assert sum(len(v) for v in s.events.values()) == sum(
        1 for st in s.plan.steps if st.event is not None
    )
