"""Tests of oxiwork.executor.races: synchronised plans are race-free, a removed event or an
unordered arena overlap is reported with a sentence that says what to do."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.analysis.happens_before import plan_clocks
from oxiwork.error import InvalidArgument
from oxiwork.examples import random_op_dag
from oxiwork.executor import races as races_mod
from oxiwork.executor.arena import plan_buffers
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import Race, drop_event, find_races
from oxiwork.node import NodeKind

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


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

    @pytest.mark.parametrize("event", [0, 1])
    def test_a_race_is_a_record_and_its_text_is_formatted_from_it(self, event):
        plan = fork_plan()
        if event >= plan.event_count:
            pytest.skip("the stream pass needed fewer events")
        bad = drop_event(plan, event)
        races = find_races(bad)
        assert races
        for r in races:
            sa, sb = bad.steps[r.first], bad.steps[r.second]
            assert r.nodes == (sa.node, sb.node)
            assert (r.first_name, r.second_name) == (sa.name, sb.name)
            touched_a = {a.buffer for a in (*sa.inputs, *sa.outputs)}
            touched_b = {a.buffer for a in (*sb.inputs, *sb.outputs)}
            assert r.buffer_ids[0] in touched_a and r.buffer_ids[1] in touched_b
            assert (r.buffer_ids[0] == r.buffer_ids[1]) == (r.kind == "conflict")
            fix = r.fix
            assert (fix.record_after, fix.wait_before) == (r.first, r.second)
            assert (fix.from_stream, fix.to_stream) == (int(sa.stream), int(sb.stream))
            assert fix.separate_buffers == (r.kind == "overlap")
            # the text is a view of the fields: renumbering the steps renumbers only them
            shifted = r.describe(lambda i: i + 1000)
            assert f"step {r.second + 1000} {r.second_name!r}" in shifted
            assert f"after step {r.first + 1000} (" in shifted
            assert (
                shifted.replace(str(r.second + 1000), str(r.second)).replace(
                    str(r.first + 1000), str(r.first)
                )
                == r.message
                == str(r)
            )

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


# --- the numpy screen against the previous all-pairs implementation -------------------------


def _sweep_pairs(args):
    """The previous ``overlapping_pairs``: a Python sweep over the regions sorted by start."""
    regs = sorted(
        (a.offset, a.offset + a.size_bytes, a.buffer)
        for a in args
        if not a.external and a.offset is not None
    )
    out, active = [], []
    for lo, hi, bid in regs:
        active = [r for r in active if r[1] > lo]
        out.extend((abid, bid, lo, min(ahi, hi)) for _, ahi, abid in active)
        active.append((lo, hi, bid))
    return out


def reference_races(plan: ExecutionPlan) -> list[Race]:
    """The previous ``find_races``: every access pair of every candidate buffer pair, tested
    one by one in Python (no numpy screen)."""
    vc = plan_clocks(plan)
    steps = plan.steps
    stream = [int(s.stream) for s in steps]
    acc = races_mod._accesses(plan)
    args = plan_buffers(plan)
    seen, out = set(), []

    def check(ba, bb, rng):
        same = ba == bb
        for x, ax in acc.get(ba, ()):
            for y, ay in acc.get(bb, ()):
                if x == y or (ax == "read" and ay == "read") or stream[x] == stream[y]:
                    continue
                if (same and x > y) or vc.ordered(x, y):
                    continue
                if x < y:
                    a, acc_a, buf_a, b, acc_b, buf_b = x, ax, ba, y, ay, bb
                else:
                    a, acc_a, buf_a, b, acc_b, buf_b = y, ay, bb, x, ax, ba
                if (a, b, buf_a, buf_b) in seen:
                    continue
                seen.add((a, b, buf_a, buf_b))
                out.append(races_mod._race(plan, args, a, acc_a, buf_a, b, acc_b, buf_b, rng))

    for bid, arg in args.items():
        in_arena = not arg.external and arg.offset is not None
        check(bid, bid, (arg.offset, arg.offset + arg.size_bytes) if in_arena else None)
    for ba, bb, lo, hi in _sweep_pairs(args.values()):
        check(ba, bb, (lo, hi))
    out.sort(key=lambda r: (r.second, r.first, r.buffers))
    return out


def with_offsets(plan: ExecutionPlan, offsets: dict[str, int]) -> ExecutionPlan:
    """``plan`` with the named buffers moved to the given arena offsets (in every step)."""

    def move(a):
        return dataclasses.replace(a, offset=offsets[a.name]) if a.name in offsets else a

    return dataclasses.replace(
        plan,
        steps=tuple(
            dataclasses.replace(
                s, inputs=tuple(map(move, s.inputs)), outputs=tuple(map(move, s.outputs))
            )
            for s in plan.steps
        ),
    )


@st.composite
def messy_plans(draw) -> ExecutionPlan:
    """Built plans, some with an event dropped, some with buffers forced onto few offsets."""
    seed = draw(st.integers(0, 10_000))
    plan = ExecutionPlan.build(
        random_op_dag(seed, draw(st.integers(2, 24))),
        max_streams=draw(st.integers(1, 6)),
        fusion=draw(st.booleans()),
    )
    if plan.event_count and draw(st.booleans()):
        plan = drop_event(plan, draw(st.integers(0, plan.event_count - 1)))
    if draw(st.booleans()):
        placed = sorted(
            {a.name for s in plan.steps for a in (*s.inputs, *s.outputs) if not a.external}
        )
        # a small pool of offsets (some misaligned) makes many buffers share bytes
        pool = draw(st.lists(st.integers(0, 4096), min_size=1, max_size=4))
        chosen = draw(st.lists(st.sampled_from(pool), min_size=len(placed), max_size=len(placed)))
        plan = with_offsets(plan, dict(zip(placed, chosen, strict=True)))
    return plan


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=messy_plans())
def test_matches_the_all_pairs_reference(plan):
    """Same races, same order, same messages as testing every access pair in Python."""
    assert find_races(plan) == reference_races(plan)


def test_reference_sees_races_in_messy_plans():
    """The comparison above is not vacuous: collided and event-less plans do race."""
    plan = plan_of(3, 4)
    names = sorted({a.name for s in plan.steps for a in s.outputs if not a.external})
    bad = with_offsets(plan, dict.fromkeys(names, 0))
    got = find_races(bad)
    assert any(r.kind == "overlap" for r in got)
    assert got == reference_races(bad)
