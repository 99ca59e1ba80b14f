"""Tests of oxiwork.executor.races: synchronised plans are race-free, a removed event or an
unordered arena overlap is reported with a sentence that says what to do."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.error import InvalidArgument
from oxiwork.examples import random_op_dag
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import Race, drop_event, find_races
from oxiwork.node import NodeKind

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.builder.GraphWarning")


@functools.lru_cache(maxsize=32)
def plan_of(seed: int, streams: int, fusion: bool = True) -> ExecutionPlan:
    return ExecutionPlan.build(random_op_dag(seed, 20), max_streams=streams, fusion=fusion)


def fork_plan() -> ExecutionPlan:
    """upload -> (a on one stream, b on another) -> join: needs events across streams."""
    b = GraphBuilder()
    x, y, z, w = (b.alloc_buffer(n, 256) for n in ("x", "y", "z", "w"))
    b.add_memcpy("up", MemcpyDir.HostToDevice, 256, dst=x)
    b.add_kernel("relu", 1, 64).inputs([x]).outputs([y]).finish()
    b.add_kernel("neg", 1, 64).inputs([x]).outputs([z]).finish()
    b.add_kernel("add", 1, 64).inputs([y, z]).outputs([w]).finish()
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 256, src=w)
    return ExecutionPlan.build(b.build(), max_streams=2, fusion=False)


class TestDropEvent:
    def test_raises_unknown_event(self):
        with pytest.raises(InvalidArgument, match="event 99 is not an event of this plan"):
            drop_event(fork_plan(), 99)

    def test_removes_one_pair_and_reindexes(self):
        plan = fork_plan()
        assert plan.event_count > 0
        bad = drop_event(plan, 0)
        assert len(bad.steps) == len(plan.steps) - 2
        assert [s.index for s in bad.steps] == list(range(len(bad.steps)))
        for s in bad.steps:
            assert s.event != 0 or s.kind not in (NodeKind.EventRecord, NodeKind.EventWait)
            assert all(d < s.index for d in s.depends_on)


class TestFindRaces:
    def test_fork_is_race_free(self):
        assert find_races(fork_plan()) == []

    @pytest.mark.parametrize("event", [0, 1])
    def test_missing_event_is_reported_with_a_fix(self, event):
        plan = fork_plan()
        if event >= plan.event_count:
            pytest.skip("the stream pass needed fewer events")
        races = find_races(drop_event(plan, event))
        # With memory reuse, the now-unordered steps may also share bytes, so an
        # "overlap" race can be listed too; the buffer conflict must be among them.
        conflicts = [r for r in races if r.kind == "conflict"]
        assert conflicts
        r = conflicts[0]
        assert isinstance(r, Race)
        assert r.first < r.second and r.first_stream != r.second_stream
        assert r.buffers[0] == r.buffers[1]
        assert "write" in (r.first_access, r.second_access)
        assert (
            f"step {r.second} {r.second_name!r} on stream {r.second_stream} "
            f"{r.second_access}s {r.buffers[1]!r} while step {r.first} {r.first_name!r} on "
            f"stream {r.first_stream} {r.first_access}s it, and no event orders them: add an "
            f"event from stream {r.first_stream} to stream {r.second_stream} after step {r.first}"
        ) in str(r)
        assert not r.manifested and r.observed is None

    def test_unordered_arena_overlap_is_reported(self):
        plan = fork_plan()
        steps = {s.name: s for s in plan.steps}
        y, z = steps["relu"].outputs[0], steps["neg"].outputs[0]
        assert steps["relu"].stream != steps["neg"].stream

        def move(a):
            return dataclasses.replace(a, offset=y.offset) if a.name == "z" else a

        bad = dataclasses.replace(
            plan,
            steps=tuple(
                dataclasses.replace(
                    s, inputs=tuple(map(move, s.inputs)), outputs=tuple(map(move, s.outputs))
                )
                for s in plan.steps
            ),
        )
        races = [r for r in find_races(bad) if r.kind == "overlap"]
        assert races
        r = races[0]
        assert set(r.buffers) == {"y", "z"}
        assert r.byte_range == (y.offset, y.offset + min(y.size_bytes, z.size_bytes))
        assert "which the memory plan put on the same bytes" in r.message
        assert "give the two buffers disjoint memory" in r.message


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), streams=st.integers(1, 8), fusion=st.booleans())
def test_built_plans_are_race_free(seed, streams, fusion):
    plan = ExecutionPlan.build(random_op_dag(seed, 16), max_streams=streams, fusion=fusion)
    assert find_races(plan) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 20), streams=st.integers(2, 6), data=st.data())
def test_every_dropped_event_breaks_a_dependency(seed, streams, data):
    """The stream pass inserts only necessary events (a transitive reduction), so removing
    any one leaves some ordered pair of steps unordered; when that pair conflicts on a
    buffer, it must be reported, and each report names steps on different streams."""
    plan = plan_of(seed, streams)
    if plan.event_count == 0:
        return
    e = data.draw(st.integers(0, plan.event_count - 1))
    bad = drop_event(plan, e)
    for r in find_races(bad):
        assert r.first_stream != r.second_stream
        assert bad.steps[r.first].stream == r.first_stream
        assert {r.first_access, r.second_access} & {"write"}


def test_some_dropped_event_is_caught():
    caught = sum(
        bool(find_races(drop_event(plan_of(seed, 4), e)))
        for seed in range(6)
        for e in range(plan_of(seed, 4).event_count)
    )
    assert caught > 0
