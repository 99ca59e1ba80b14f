"""Tests of oxiwork.executor.simulator: values against the reference evaluator under every
interleaving policy, the memory plan really exercised, time travel, breakpoints, errors."""

from __future__ import annotations

import dataclasses
import functools
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.error import ExecutionError, InvalidArgument, InvalidPlan, UnknownBuffer, UnknownNode
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import drop_event, find_races
from oxiwork.executor.simulator import (
    POLICIES,
    SequentialExecutor,
    Simulator,
    input_names,
)
from oxiwork.node import NodeKind
from oxiwork.reference import evaluate

pytestmark = pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")


@functools.lru_cache(maxsize=64)
def plan_of(seed: int, n: int = 16, streams: int = 4, fusion: bool = True) -> ExecutionPlan:
    return ExecutionPlan.build(random_op_dag(seed, n), max_streams=streams, fusion=fusion)


def inputs_for(plan: ExecutionPlan, seed: int, low: float = 0.5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    args = {a.name: a for s in plan.steps for a in (*s.inputs, *s.outputs)}
    # positive values keep log/div mostly finite; NaNs are compared as equal anyway
    return {n: rng.uniform(low, 2.0, args[n].shape).astype(np.float32) for n in input_names(plan)}


def assert_matches_reference(plan: ExecutionPlan, outputs: dict[str, np.ndarray], inputs) -> None:
    ref = evaluate(plan.original, inputs)
    assert outputs, "a plan of a random DAG downloads something"
    for name, value in outputs.items():
        np.testing.assert_allclose(
            value.reshape(-1),
            ref[name].reshape(-1),
            rtol=1e-5,
            atol=1e-5,
            equal_nan=True,
            err_msg=f"buffer {name!r}",
        )


def quick_plan() -> ExecutionPlan:
    return ExecutionPlan.build(quick_start())


def snapshot(sim: Simulator) -> tuple:
    m = sim._machine
    bufs = tuple(sorted((a.name, sim.buffer(a.name).tobytes()) for a in m.args.values()))
    outs = tuple(sorted((k, v.tobytes()) for k, v in (sim.outputs or {}).items()))
    return (sim.state, bufs, outs, tuple(r.message for r in sim.races))


class TestSequentialExecutor:
    def test_raises_not_a_plan(self):
        with pytest.raises(InvalidArgument, match="expected an ExecutionPlan"):
            SequentialExecutor(quick_start()).run()  # type: ignore[arg-type]

    def test_raises_unknown_input(self):
        with pytest.raises(UnknownBuffer, match=r"'nope'.*inputs are: 'input'"):
            SequentialExecutor(quick_plan()).run({"nope": np.zeros(3)})

    def test_quick_start_values(self):
        x = np.linspace(-1, 1, 1024, dtype=np.float32)
        stats = SequentialExecutor(quick_plan()).run({"input": x})
        np.testing.assert_allclose(stats.outputs["output"], 2 * np.maximum(x, 0))
        assert stats.generated_inputs == ()
        assert stats.bytes_copied == 8192
        assert stats.kernels_launched == quick_plan().kernel_count_fused

    def test_generated_inputs_are_announced_and_match_reference(self):
        plan = quick_plan()
        with pytest.warns(Warning, match="generated from seed 5"):
            stats = SequentialExecutor(plan).run(seed=5)
        assert stats.generated_inputs == ("input",)
        np.testing.assert_allclose(
            stats.outputs["output"], evaluate(quick_start(), seed=5)["output"]
        )

    def test_values_false_counts_only(self):
        plan = plan_of(3)
        stats = SequentialExecutor(plan, values=False).run()
        assert stats.outputs is None
        assert stats.steps == len(plan.steps)
        assert sum(stats.steps_per_stream) == len(plan.steps)
        waits = sum(s.kind is NodeKind.EventWait for s in plan.steps)
        assert stats.events_recorded == plan.event_count
        assert stats.events_waited == waits >= plan.event_count

    def test_opaque_kernel_gives_no_outputs(self):
        b = GraphBuilder()
        x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_kernel("mystery", 1, 16).inputs([x]).outputs([y]).finish()
        b.add_memcpy("down", MemcpyDir.DeviceToHost, 64, src=y)
        plan = ExecutionPlan.build(b.build())
        with pytest.warns(Warning, match="timing only"):
            stats = SequentialExecutor(plan).run({"x": np.ones(16, np.float32)})
        assert stats.outputs is None and stats.kernels_launched == 1

    def test_never_read_buffer_is_an_output(self):
        b = GraphBuilder()
        x, y = b.alloc_buffer("x", 64), b.alloc_buffer("y", 64)
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_kernel("neg", 1, 16).inputs([x]).outputs([y]).finish()
        plan = ExecutionPlan.build(b.build())
        out = SequentialExecutor(plan).run({"x": np.arange(16, dtype=np.float32)}).outputs
        np.testing.assert_array_equal(out["y"], -np.arange(16, dtype=np.float32))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    streams=st.integers(1, 8),
    fusion=st.booleans(),
    policy=st.sampled_from(POLICIES),
)
def test_simulated_outputs_equal_reference(seed, streams, fusion, policy):
    plan = ExecutionPlan.build(random_op_dag(seed, 14), max_streams=streams, fusion=fusion)
    inputs = inputs_for(plan, seed)
    sim = Simulator(plan, inputs, policy=policy, seed=seed, check_finite=False)
    assert sim.run().reason == "end"
    assert sim.state.finished and sim.races == []
    assert_matches_reference(plan, sim.outputs, inputs)
    seq = SequentialExecutor(plan).run(inputs)
    assert seq.outputs.keys() == sim.outputs.keys()


def _collide(plan: ExecutionPlan) -> ExecutionPlan | None:
    """Put a buffer B on the bytes of a buffer A that is read after B is written."""
    reads: dict[str, list[int]] = {}
    writes: dict[str, list[int]] = {}
    args = {}
    for s in plan.steps:
        for a in s.inputs:
            reads.setdefault(a.name, []).append(s.index)
            args[a.name] = a
        for a in s.outputs:
            # a copy writes the same values: choose B among kernel outputs (not 'copy')
            if s.kind.value == "kernel" and "copy" not in s.name:
                writes.setdefault(a.name, []).append(s.index)
            args[a.name] = a
    for a_name, rs in reads.items():
        a = args[a_name]
        first_write = min(
            (s.index for s in plan.steps for o in s.outputs if o.name == a_name), default=None
        )
        if a.external or first_write is None:
            continue
        for b_name, ws in writes.items():
            b = args[b_name]
            if b_name == a_name or b.external or b.size_bytes > a.size_bytes:
                continue
            if any(first_write < w < max(rs) for w in ws):
                # B written while A still has a reader to come: a live overlap
                def move(arg, off=a.offset, name=b_name):
                    return dataclasses.replace(arg, offset=off) if arg.name == name else arg

                steps = tuple(
                    dataclasses.replace(
                        s,
                        inputs=tuple(map(move, s.inputs)),
                        outputs=tuple(map(move, s.outputs)),
                    )
                    for s in plan.steps
                )
                return dataclasses.replace(plan, steps=steps)
    return None


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("streams", [1, 3])
def test_colliding_buffers_never_pass_silently(seed, streams):
    plan = plan_of(seed, 20, streams, False)
    bad = _collide(plan)
    if bad is None:
        pytest.skip("no pair of buffers with overlapping lifetimes in this graph")
    inputs = inputs_for(plan, seed, low=-2.0)  # signed: relu must not be an identity
    overlaps = [r for r in find_races(bad) if r.kind == "overlap"]
    with pytest.raises(InvalidPlan):  # the executors refuse it outright now
        SequentialExecutor(bad)
    sim = Simulator(bad, inputs, check_finite=False, verify=False)  # what it would compute
    sim.run()
    out = sim.outputs
    ref = evaluate(plan.original, inputs)
    wrong = any(
        not np.allclose(v.reshape(-1), ref[k].reshape(-1), rtol=1e-5, atol=1e-5, equal_nan=True)
        for k, v in out.items()
    )
    assert overlaps or wrong


def test_missing_event_is_a_race_under_adversarial_policy():
    found = 0
    for seed in range(12):
        plan = plan_of(seed, 20, 4, True)
        for e in range(plan.event_count):
            bad = drop_event(plan, e)
            static = find_races(bad)
            if not static:
                continue
            inputs = inputs_for(plan, seed)
            with pytest.raises(InvalidPlan):  # refused unless asked to step through it
                Simulator(bad, inputs)
            sim = Simulator(bad, inputs, policy="adversarial", check_finite=False, verify=False)
            sim.run()
            assert sim.races, "the simulator records the races it runs into"
            assert {(r.first, r.second) for r in sim.races} <= {(r.first, r.second) for r in static}
            found += any(r.manifested for r in sim.races)
    assert found > 0, "the adversarial policy makes some missing event visible"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 5),
    policy=st.sampled_from(POLICIES),
    forward=st.integers(0, 60),
    back=st.integers(0, 60),
)
def test_step_back_restores_exact_state(seed, policy, forward, back):
    plan = plan_of(seed, 12, 3, seed % 2 == 0)
    sim = Simulator(plan, inputs_for(plan, seed), policy=policy, seed=seed, check_finite=False)
    snaps = [snapshot(sim)]
    for _ in range(forward):
        if sim.step() is None:
            break
        snaps.append(snapshot(sim))
    for _ in range(min(back, len(snaps) - 1)):
        sim.step_back()
        snaps.pop()
        assert snapshot(sim) == snaps[-1]
    # and forward again reaches the same end as a fresh run
    sim.run()
    fresh = Simulator(plan, inputs_for(plan, seed), policy=policy, seed=seed, check_finite=False)
    fresh.run()
    assert snapshot(sim) == snapshot(fresh)


class TestUndoLog:
    def test_raises_nothing_to_undo(self):
        with pytest.raises(InvalidArgument, match="nothing to step back"):
            Simulator(quick_plan(), {"input": np.ones(1024, np.float32)}).step_back()

    def test_raises_past_dropped_entries(self):
        sim = Simulator(quick_plan(), {"input": np.ones(1024, np.float32)}, max_undo_bytes=5000)
        sim.run()
        sim.step_back()  # the download writes no device bytes: kept
        sim.step_back()  # 4096 bytes: kept
        with pytest.raises(InvalidArgument, match=r"cannot step back past step 0.*max_undo_bytes"):
            sim.step_back()

    def test_raises_bad_arguments(self):
        with pytest.raises(InvalidArgument, match="unknown policy 'fifo'"):
            Simulator(quick_plan(), policy="fifo")
        with pytest.raises(InvalidArgument, match="max_undo_bytes must be >= 0"):
            Simulator(quick_plan(), max_undo_bytes=-1)


class TestPolicies:
    def test_in_order_is_plan_order(self):
        plan = plan_of(2, 16, 4)
        sim = Simulator(plan, inputs_for(plan, 2), check_finite=False)
        sim.run()
        assert list(sim.state.executed) == list(range(len(plan.steps)))

    @pytest.mark.parametrize("policy", POLICIES)
    def test_every_policy_respects_streams_and_events(self, policy):
        plan = plan_of(4, 24, 4)
        sim = Simulator(plan, inputs_for(plan, 4), policy=policy, seed=1, check_finite=False)
        sim.run()
        when = {i: k for k, i in enumerate(sim.state.executed)}
        last_pos: dict[int, int] = {}
        records = {s.event: s.index for s in plan.steps if s.kind.value == "event_record"}
        for i in sim.state.executed:
            s = plan.steps[i]
            assert last_pos.get(int(s.stream), -1) == s.position - 1
            last_pos[int(s.stream)] = s.position
            if s.kind.value == "event_wait":
                assert when[records[s.event]] < when[i]

    def test_random_policy_is_seeded(self):
        plan = plan_of(5, 20, 4)
        runs = []
        for _ in range(2):
            sim = Simulator(plan, inputs_for(plan, 5), policy="random", seed=9, values=False)
            sim.run()
            runs.append(sim.state.executed)
        assert runs[0] == runs[1]


class TestBreakpoints:
    def setup_method(self):
        self.plan = plan_of(6, 16, 2, False)
        self.inputs = inputs_for(self.plan, 6)

    def sim(self, **kw) -> Simulator:
        return Simulator(self.plan, self.inputs, check_finite=False, **kw)

    def test_raises_unknown_targets(self):
        sim = self.sim()
        with pytest.raises(UnknownNode, match="no step of the plan runs node 'nope'"):
            sim.break_on_node("nope")
        with pytest.raises(UnknownBuffer, match="no step of the plan touches a buffer named 'zz'"):
            sim.break_on_write("zz")
        with pytest.raises(InvalidArgument, match="until=999"):
            sim.run(until=999)

    def test_break_on_node_stops_before_the_step(self):
        sim = self.sim()
        target = next(s for s in self.plan.steps if s.kind.value == "kernel" and s.index > 0)
        sim.break_on_node(target.node)
        stop = sim.run()
        assert (stop.reason, stop.step) == ("breakpoint", target.index)
        assert target.index not in sim.state.executed
        assert sim.run().reason == "end"  # continues past it

    def test_break_on_write_stops_after_the_write(self):
        sim = self.sim()
        target = next(s for s in self.plan.steps if s.kind.value == "kernel")
        name = target.outputs[0].name
        sim.break_on_write(name)
        stop = sim.run()
        assert stop.step == target.index and sim.state.executed[-1] == target.index
        assert name in stop.message

    def test_break_on_condition_and_until(self):
        sim = self.sim()
        sim.break_on_condition(lambda s: len(s.history) == 3, "three steps")
        stop = sim.run()
        assert len(sim.history) == 3 and "three steps" in stop.message
        sim.clear_breakpoints()
        last = len(self.plan.steps) - 1
        assert sim.run(until=last).reason == "until" and sim.state.finished

    def test_break_on_nan(self):
        b = GraphBuilder()
        x, y, z = (b.alloc_buffer(n, 64) for n in "xyz")
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        b.add_kernel("log", 1, 16).inputs([x]).outputs([y]).finish()
        b.add_kernel("neg", 1, 16).inputs([y]).outputs([z]).finish()
        plan = ExecutionPlan.build(b.build(), fusion=False)
        sim = Simulator(plan, {"x": -np.ones(16, np.float32)}, check_finite=False)
        sim.break_on_nan()
        stop = sim.run()
        assert plan.steps[stop.step].name == "log" and np.isnan(sim.buffer("y")).all()


class TestState:
    def test_positions_events_and_live_buffers(self):
        plan = quick_plan()
        sim = Simulator(plan, {"input": np.ones(1024, np.float32)})
        assert sim.state.positions == (0,) * len(sim.state.positions)
        assert sim.state.live_buffers == frozenset()
        sim.step()
        assert sim.state.live_buffers == {"input"}
        sim.run()
        s = sim.state
        assert s.finished and s.next_steps == (None,) * len(s.next_steps)
        assert s.live_buffers == frozenset()  # everything consumed
        assert [st.name for st in sim.history] == [st.name for st in plan.steps]

    def test_fired_events(self):
        plan = plan_of(7, 20, 4)
        if plan.event_count == 0:
            pytest.skip("no events")
        sim = Simulator(plan, values=False)
        sim.run()
        assert sim.state.fired_events == frozenset(range(plan.event_count))

    def test_reset(self):
        sim = Simulator(quick_plan(), {"input": np.ones(1024, np.float32)})
        sim.run()
        sim.reset()
        assert sim.state.executed == () and sim.outputs == {}
        assert (sim.buffer("output") == 0).all()

    def test_buffer_needs_values(self):
        sim = Simulator(quick_plan(), values=False)
        with pytest.raises(InvalidArgument, match="values=False"):
            sim.buffer("input")


def _one_kernel(op: str, shape_x=(16,), shape_y=(16,), name: str | None = None) -> ExecutionPlan:
    b = GraphBuilder()
    x = b.alloc_buffer("x", 4 * int(np.prod(shape_x)), shape=shape_x)
    y = b.alloc_buffer("y", 4 * int(np.prod(shape_y)), shape=shape_y)
    b.add_memcpy("up", MemcpyDir.HostToDevice, 4 * int(np.prod(shape_x)), dst=x)
    b.add_kernel(name or op, 1, 16).op(op).inputs([x]).outputs([y]).finish()
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 4 * int(np.prod(shape_y)), src=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ExecutionPlan.build(b.build(), fusion=False)


class TestErrors:
    def test_op_raising_names_step_node_stream_and_buffer(self):
        from oxiwork import ops

        def boom(xs):
            raise ValueError("kaboom")

        ops.custom("boom_op", reference=boom, expr="({0})", replace=True)
        try:
            plan = _one_kernel("boom_op", name="exploder")
            step = next(s for s in plan.steps if s.name == "exploder")
            sim = Simulator(plan, {"x": np.ones(16, np.float32)})
            with pytest.raises(ExecutionError) as info:
                sim.run()
            msg = str(info.value)
            assert msg.startswith(
                f"while executing step {step.index} 'exploder' (node {int(step.node)}, "
                f"stream {int(step.stream)}) writing buffer 'y': ValueError: kaboom"
            )
            assert sim.error is info.value and sim.state.failed_step == step.index
            assert step.index not in sim.state.executed
            with pytest.raises(ExecutionError, match="call step_back\\(\\) or reset\\(\\)"):
                sim.step()
            sim.step_back()
            assert sim.error is None and sim.state.failed_step is None
            with pytest.raises(ExecutionError, match="kaboom"):
                SequentialExecutor(plan).run({"x": np.ones(16, np.float32)})
        finally:
            ops.REGISTRY.pop("boom_op", None)

    def test_nan_is_reported_and_inspectable(self):
        plan = _one_kernel("log")
        sim = Simulator(plan, {"x": -np.ones(16, np.float32)})
        with pytest.raises(ExecutionError, match=r"'log'.*writing buffer 'y': .*16 NaN"):
            sim.run()
        assert np.isnan(sim.buffer("y")).all()
        # opt out
        out = Simulator(plan, {"x": -np.ones(16, np.float32)}, check_finite=False)
        assert out.run().reason == "end"

    def test_input_of_wrong_size(self):
        plan = _one_kernel("neg")
        up = next(s for s in plan.steps if s.name == "up")
        with pytest.raises(
            ExecutionError, match=rf"step {up.index} 'up' .*writing buffer 'x': input 'x' has 3"
        ):
            SequentialExecutor(plan).run({"x": np.ones(3, np.float32)})

    def test_shape_mismatch_is_raised_at_its_step(self):
        plan = _one_kernel("transpose", shape_x=(4, 4), shape_y=(8, 4))
        sim = Simulator(plan, {"x": np.ones((4, 4), np.float32)})
        sim.step()  # the upload is fine
        with pytest.raises(ExecutionError, match=r"'transpose'.*writing buffer 'y': .*shape"):
            sim.step()


def test_deadlock_is_reported():
    plan = plan_of(4, 24, 4)
    if plan.event_count == 0:
        pytest.skip("no events")
    rec = next(s for s in plan.steps if s.kind.value == "event_record")
    wait = next(s for s in plan.steps if s.kind.value == "event_wait" and s.event == rec.event)
    # move the record to the end of the waiting stream: that stream now waits for itself
    moved = dataclasses.replace(rec, stream=wait.stream, position=10**6)
    steps = tuple(moved if s.index == rec.index else s for s in plan.steps)
    sim = Simulator(
        dataclasses.replace(plan, steps=steps), values=False, detect_races=False, verify=False
    )
    with pytest.raises(
        ExecutionError,
        match=rf"deadlock: no stream can move .*waits at step {wait.index} .*event {rec.event}",
    ):
        sim.run()
    assert int(wait.stream) in sim.state.blocked


# ------------------------------------------------------------------ run-time checks
def _checked_graph():
    """x <= 16 checked (op ``check``, never fused), beside a scale of y."""
    b = GraphBuilder()
    x = b.alloc_external_buffer("x", 32, dtype="int64", shape=(4,))
    y = b.alloc_external_buffer("y", 16)
    small, ok = (b.alloc_buffer(n, 4, dtype="bool", shape=(4,)) for n in ("small", "ok"))
    out = b.alloc_buffer("out", 16)
    b.add_kernel("x <= 16", 1, 32).op("le_scalar").params(other=16).inputs([x]).outputs(
        [small]
    ).fusible(True).finish()
    b.add_kernel("check x <= 16", 1, 32).op("check").inputs([small]).outputs([ok]).fusible(
        True
    ).finish()
    b.add_kernel("twice", 1, 32).op("scale").params(alpha=2).inputs([y]).outputs([out]).finish()
    return b.build()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-5, 40), min_size=4, max_size=4), st.booleans())
def test_a_check_fails_the_run_exactly_when_its_condition_is_false(values, fusion):
    from oxiwork.error import CheckFailed

    plan = ExecutionPlan.build(_checked_graph(), fusion=fusion)
    assert any(n.op == "check" for n in plan.graph.kernels())  # (never fused away)
    inputs = {"x": np.array(values, np.int64), "y": np.ones(4, np.float32)}
    try:
        stats = SequentialExecutor(plan).run(inputs)
    except CheckFailed as e:
        assert max(values) > 16
        assert "'check x <= 16'" in str(e) and e.step is not None
        return
    assert max(values) <= 16
    assert stats.outputs["ok"].all() and stats.outputs["out"].tolist() == [2.0] * 4
