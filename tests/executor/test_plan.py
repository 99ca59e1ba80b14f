"""Tests for ExecutionPlan.build and verify_plan: every built plan verifies; tampered ones don't."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork import verify
from oxiwork.analysis.happens_before import plan_clocks
from oxiwork.error import GraphError, InvalidPlan, UnorderedAccess
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.plan import BufferArg, ExecutionPlan, PlanStep, _positional, verify_plan
from oxiwork.node import BufferId, NodeKind, StreamId
from tests.strategies import any_dags

# ----------------------------------------------------------------------------- tampering


def drop_steps(plan: ExecutionPlan, drop: set[int], *, renumber: bool = True) -> ExecutionPlan:
    """The plan without the steps in ``drop``: renumbered, positions (and events) recounted."""
    keep = [s for s in plan.steps if s.index not in drop]
    new_index = {s.index: i for i, s in enumerate(keep)}
    events = sorted({s.event for s in keep if s.kind is NodeKind.EventRecord})
    new_event = {e: i for i, e in enumerate(events)}
    if not renumber:
        events = list(range(plan.event_count))
        new_event = {e: e for e in events}
    count: dict[int, int] = {}
    steps = []
    for i, s in enumerate(keep):
        pos = count.get(int(s.stream), 0)
        count[int(s.stream)] = pos + 1
        steps.append(
            replace(
                s,
                index=i,
                position=pos,
                event=None if s.event is None else new_event.get(s.event, len(events)),
                depends_on=tuple(new_index[j] for j in s.depends_on if j in new_index),
            )
        )
    return replace(plan, steps=tuple(steps), event_count=len(events))


def move_buffer(plan: ExecutionPlan, bid: BufferId, offset: int) -> ExecutionPlan:
    """The plan with buffer ``bid`` at ``offset`` (in the graph and in every step)."""
    graph = plan.graph.with_changes(
        buffers=[replace(b, offset=offset) if b.id == bid else b for b in plan.graph.buffers]
    )

    def fix(args):
        return tuple(replace(a, offset=offset) if a.buffer == bid else a for a in args)

    steps = tuple(replace(s, inputs=fix(s.inputs), outputs=fix(s.outputs)) for s in plan.steps)
    return replace(plan, graph=graph, steps=steps)


def multi_stream_plan() -> ExecutionPlan:
    plan = ExecutionPlan.build(transformer_block(), max_streams=4)
    assert plan.num_streams > 1 and plan.event_count > 0
    return plan


# ----------------------------------------------------------------------------- build


class TestBuild:
    def test_quick_start_fuses_to_one_kernel(self):
        plan = ExecutionPlan.build(quick_start())
        kernels = [s for s in plan.steps if s.kind is NodeKind.KernelLaunch]
        assert len(kernels) == 1
        names = [plan.original.node(n).name for n in kernels[0].fused_nodes]
        assert names == ["relu", "scale"]
        assert (plan.kernel_count_original, plan.kernel_count_fused) == (2, 1)
        assert plan.num_streams == 1 and plan.event_count == 0
        assert [t.name for t in plan.trace] == ["fusion", "streams", "memory"]
        assert plan.pool_bytes == plan.memory.arena_bytes == 8192

    def test_quick_start_without_fusion(self):
        plan = ExecutionPlan.build(quick_start(), fusion=False)
        assert [s.name for s in plan.steps] == ["upload", "relu", "scale", "download"]
        assert all(s.fused_nodes == (s.node,) for s in plan.steps)
        assert [s.depends_on for s in plan.steps] == [(), (0,), (1,), (2,)]

    def test_summary_and_dict(self):
        plan = multi_stream_plan()
        text = str(plan)
        assert text == plan.summary()
        assert text.splitlines()[0].startswith("ExecutionPlan: ")
        assert len(text.splitlines()) == len(plan.steps) + 2
        assert "record e0" in text and "wait e0" in text
        d = json.loads(json.dumps(plan.to_dict()))
        assert len(d["steps"]) == len(plan.steps)
        assert d["event_count"] == plan.event_count
        assert d["streams"]["num_streams"] == plan.num_streams

    @settings(max_examples=40, deadline=None)
    @given(st.integers(0, 100_000), st.integers(5, 40), st.integers(1, 4), st.booleans())
    def test_every_plan_verifies(self, seed, n, cap, fusion):
        graph = random_op_dag(seed, n)
        plan = ExecutionPlan.build(graph, max_streams=cap, fusion=fusion, verify=False)
        verify_plan(plan)
        verify(plan)
        assert plan.num_streams <= cap
        assert len(plan.steps) == plan.graph.num_nodes
        order = {s.node: s.index for s in plan.steps}
        for s in plan.steps:
            assert all(j < s.index for j in s.depends_on)
            assert {order[p] for p in plan.graph.predecessors(s.node)} == set(s.depends_on)
            if s.kind is NodeKind.KernelLaunch:
                assert s.function_name and s.config is not None
        fused = [n for s in plan.steps for n in s.fused_nodes if s.kind is NodeKind.KernelLaunch]
        assert sorted(fused) == sorted(k.id for k in graph.kernels())

    @settings(max_examples=40, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(1, 4))
    def test_any_dag_plans_verify(self, graph, cap):
        verify_plan(ExecutionPlan.build(graph, max_streams=cap, fusion=False))


# ----------------------------------------------------------------------------- verify_plan


class TestVerifyPlan:
    def test_raises_when_an_event_is_removed(self):
        plan = multi_stream_plan()
        rec = next(s for s in plan.steps if s.kind is NodeKind.EventRecord)
        # the record and every wait on it (a producer's record is shared by its waits)
        gone = {s.index for s in plan.steps if s.event == rec.event}
        broken = drop_steps(plan, gone)
        # What the dropped event ordered is a buffer a step reads: named with the event.
        with pytest.raises(UnorderedAccess, match="neither stream order nor an event orders") as e:
            verify_plan(broken)
        assert e.value.in_plan and e.value.missing.startswith("event recorded after step")

    def test_raises_when_one_wait_of_a_shared_record_loses_its_record(self):
        plan = multi_stream_plan()
        shared = next(
            s
            for s in plan.steps
            if s.kind is NodeKind.EventRecord
            and sum(w.event == s.event for w in plan.steps if w.kind is NodeKind.EventWait) > 1
        )
        wait = next(
            s for s in plan.steps if s.kind is NodeKind.EventWait and s.event == shared.event
        )
        with pytest.raises(InvalidPlan, match="outside"):
            verify_plan(drop_steps(plan, {shared.index, wait.index}))

    @pytest.mark.parametrize("cap", [2, 3, 4])
    def test_raises_for_every_removed_event(self, cap):
        plan = ExecutionPlan.build(random_op_dag(7, 40), max_streams=cap)
        assert plan.event_count > 0
        for rec in (s for s in plan.steps if s.kind is NodeKind.EventRecord):
            waits = {
                s.index for s in plan.steps if s.kind is NodeKind.EventWait and s.event == rec.event
            }
            # A dropped event leaves a data access or a dependency unordered.
            with pytest.raises(InvalidPlan, match=r"depends on step|nor an event orders them"):
                verify_plan(drop_steps(plan, {rec.index, *waits}))

    def test_raises_when_a_record_is_missing(self):
        plan = multi_stream_plan()
        rec = next(s for s in plan.steps if s.kind is NodeKind.EventRecord)
        with pytest.raises(InvalidPlan, match="no earlier step records it"):
            verify_plan(drop_steps(plan, {rec.index}, renumber=False))

    def test_raises_on_bad_position(self):
        plan = multi_stream_plan()
        steps = list(plan.steps)
        steps[3] = replace(steps[3], position=steps[3].position + 1)
        with pytest.raises(InvalidPlan, match=r"position \d+ on stream"):
            verify_plan(replace(plan, steps=tuple(steps)))

    def test_raises_on_stream_out_of_range(self):
        plan = multi_stream_plan()
        steps = list(plan.steps)
        steps[0] = replace(steps[0], stream=StreamId(plan.num_streams))
        with pytest.raises(InvalidPlan, match="outside"):
            verify_plan(replace(plan, steps=tuple(steps)))

    def test_raises_on_missing_node(self):
        plan = ExecutionPlan.build(quick_start())
        with pytest.raises(InvalidPlan, match="has no step"):
            verify_plan(drop_steps(plan, {2}))

    def test_raises_on_misaligned_offset(self):
        plan = ExecutionPlan.build(quick_start())
        bid = plan.steps[0].outputs[0].buffer
        with pytest.raises(InvalidPlan, match="alignment"):
            verify_plan(move_buffer(plan, bid, 4))

    def test_raises_past_the_arena(self):
        plan = ExecutionPlan.build(quick_start())
        bid = plan.steps[0].outputs[0].buffer
        with pytest.raises(InvalidPlan, match="past the arena"):
            verify_plan(move_buffer(plan, bid, plan.pool_bytes))

    def test_raises_on_offset_mismatch(self):
        plan = ExecutionPlan.build(quick_start())
        steps = list(plan.steps)
        arg = steps[1].inputs[0]
        steps[1] = replace(steps[1], inputs=(replace(arg, offset=arg.offset + 256),))
        with pytest.raises(InvalidPlan, match="offset"):
            verify_plan(replace(plan, steps=tuple(steps)))

    @pytest.mark.parametrize(
        ("where", "msg"),
        [
            ("every", "steps use offset None, plan.graph says 0"),
            ("first", "is at offset 0, but an earlier step has it at None"),
            ("later", "is at offset None, but an earlier step has it at 0"),
        ],
    )
    def test_raises_when_a_step_sees_no_offset(self, where, msg):
        # (None is NONE in the offset arrays: steps that see no offset for a placed buffer,
        # or see one where another step saw none, are told apart)
        plan = ExecutionPlan.build(quick_start())
        bid = plan.steps[0].outputs[0].buffer
        assert plan.graph.buffer(bid).offset == 0

        def unplaced(args):
            return tuple(replace(a, offset=None) if a.buffer == bid else a for a in args)

        which = {"every": (0, 1), "first": (0,), "later": (1,)}[where]
        steps = [
            replace(st_, inputs=unplaced(st_.inputs), outputs=unplaced(st_.outputs))
            if k in which
            else st_
            for k, st_ in enumerate(plan.steps)
        ]
        with pytest.raises(InvalidPlan, match=msg):
            verify_plan(replace(plan, steps=tuple(steps)))

    def test_raises_on_overlap_of_concurrent_buffers(self):
        plan = multi_stream_plan()
        vc = plan_clocks(plan)
        acc: dict = {}
        for s in plan.steps:
            for a in (*s.inputs, *s.outputs):
                if not a.external:
                    acc.setdefault(a.buffer, set()).add(s.index)
        pair = next(
            (a, b)
            for a in acc
            for b in acc
            if a < b
            and not all(vc.happens_before(x, y) for x in acc[a] for y in acc[b])
            and not all(vc.happens_before(y, x) for x in acc[a] for y in acc[b])
        )
        a, b = pair
        broken = move_buffer(plan, b, plan.graph.buffer(a).offset)
        with pytest.raises(InvalidPlan, match="share arena bytes"):
            verify_plan(broken)

    def test_raises_on_overlap_on_one_stream_same_step(self):
        plan = ExecutionPlan.build(quick_start())
        kernel = next(s for s in plan.steps if s.kind is NodeKind.KernelLaunch)
        src, dst = kernel.inputs[0], kernel.outputs[0]
        with pytest.raises(InvalidPlan, match="share arena bytes"):
            verify_plan(move_buffer(plan, dst.buffer, src.offset))

    def test_is_a_graph_error(self):
        assert issubclass(InvalidPlan, GraphError)
        assert PlanStep.__slots__  # the data types stay slotted


class TestStreamsWeighMemory:
    """ExecutionPlan.build keeps extra streams only where they pay for their memory."""

    @settings(max_examples=40, deadline=None)
    @given(any_dags(max_nodes=40), st.integers(2, 8))
    def test_default_plan_pays_for_its_streams(self, graph, cap):
        from oxiwork.optimizer.fusion import peak_live_bytes
        from oxiwork.optimizer.stream import streams_pay

        # (the heuristic memory mode: the default's search stops at a time budget, so two
        # builds under load may place buffers differently; the weighing is the same)
        mode = "heuristic"
        plan = ExecutionPlan.build(graph, max_streams=cap, memory_mode=mode)
        tried = plan.options["streams_tried"]
        assert tried[0] == cap and tried == sorted(tried, reverse=True)
        if plan.num_streams > 1:
            fused = plan.trace[0].after
            sa = plan.streams
            assert streams_pay(plan.pool_bytes, sa.makespan, peak_live_bytes(fused), sa.total_work)
        raw = ExecutionPlan.build(graph, max_streams=cap, weigh_memory=False, memory_mode=mode)
        assert raw.options["streams_tried"] == [cap]
        if len(tried) == 1:  # nothing was rejected: the same plan
            assert (raw.pool_bytes, raw.num_streams) == (plan.pool_bytes, plan.num_streams)

    @pytest.mark.parametrize("cap", [2, 4, 8])
    def test_memory_budget_halves_the_streams_until_the_arena_fits(self, cap):
        g = transformer_block()
        one = ExecutionPlan.build(g, max_streams=1)
        full = ExecutionPlan.build(g, max_streams=cap, weigh_memory=False)
        assert full.pool_bytes > one.pool_bytes  # streams cost memory here
        plan = ExecutionPlan.build(g, max_streams=cap, memory_budget=one.pool_bytes)
        verify_plan(plan)
        assert plan.pool_bytes <= one.pool_bytes
        tried = plan.options["streams_tried"]
        assert tried[0] == cap and plan.num_streams <= tried[-1]
        roomy = ExecutionPlan.build(g, max_streams=cap, memory_budget=full.pool_bytes)
        assert (roomy.num_streams, roomy.pool_bytes) == (full.num_streams, full.pool_bytes)


class TestPositionalConstructor:
    """_lower makes its steps and buffer args with plan._positional: the very objects
    the dataclasses' own constructors make."""

    @settings(max_examples=20, deadline=None)
    @given(seed=st.integers(0, 10**6), n=st.integers(2, 20))
    def test_same_steps_as_the_dataclass_constructor(self, seed: int, n: int) -> None:
        plan = ExecutionPlan.build(random_op_dag(seed, n), max_streams=2)
        for st_ in plan.steps:
            assert type(st_) is PlanStep
            values = [getattr(st_, f.name) for f in dataclasses.fields(PlanStep)]
            assert PlanStep(*values) == st_ and hash(PlanStep(*values)) == hash(st_)
            for a in (*st_.inputs, *st_.outputs):
                assert type(a) is BufferArg
                assert BufferArg(*[getattr(a, f.name) for f in dataclasses.fields(a)]) == a
            with pytest.raises(dataclasses.FrozenInstanceError):
                st_.name = "x"  # type: ignore[misc]

    def test_raises_for_a_class_with_post_init(self) -> None:
        @dataclasses.dataclass(frozen=True, slots=True)
        class Checked:
            x: int

            def __post_init__(self) -> None:
                pass

        with pytest.raises(TypeError, match="not a plain slotted dataclass"):
            _positional(Checked)

    def test_raises_for_a_field_with_a_default_factory(self) -> None:
        @dataclasses.dataclass(frozen=True, slots=True)
        class Listed:
            xs: tuple[int, ...] = dataclasses.field(default_factory=tuple)

        with pytest.raises(TypeError, match="not a plain slotted dataclass"):
            _positional(Listed)

    @settings(max_examples=20, deadline=None)
    @given(seed=st.integers(0, 10**6), n=st.integers(2, 20))
    def test_fused_kernels_are_what_their_constructors_make(self, seed: int, n: int) -> None:
        """Fusion makes its kernels and their steps by keyword through _positional (with the
        classes' defaults for the fields it leaves out)."""
        from oxiwork.node import FusedStep, GraphNode
        from oxiwork.optimizer.fusion import fuse

        for node in fuse(random_op_dag(seed, n)).graph.nodes:
            assert type(node) is GraphNode
            values = {f.name: getattr(node, f.name) for f in dataclasses.fields(GraphNode)}
            assert GraphNode(**values) == node and hash(GraphNode(**values)) == hash(node)
            for step in node.fused.steps if node.fused is not None else ():
                assert type(step) is FusedStep
                assert FusedStep(step.op, step.params, step.args, step.node) == step
            with pytest.raises(dataclasses.FrozenInstanceError):
                node.name = "x"  # type: ignore[misc]


def test_check_steps_and_their_read_back() -> None:
    import numpy as np

    from oxiwork import GraphBuilder
    from oxiwork.error import CheckFailed, ExecutionError, UnsupportedOp
    from oxiwork.executor.plan import check_steps, raise_failed_checks

    b = GraphBuilder()
    x = b.alloc_external_buffer("x", 4, dtype="bool")
    ok = b.alloc_buffer("ok", 4, dtype="bool")
    b.add_kernel("x holds", 1, 32).op("check").inputs([x]).outputs([ok]).finish()
    (st,) = check_steps(ExecutionPlan.build(b.build()))
    raise_failed_checks([st], {"ok": np.ones(4, bool)})  # true everywhere: nothing
    with pytest.raises(CheckFailed, match=r"step 0 'x holds': the run-time check is false"):
        raise_failed_checks([st], {"ok": np.array([1, 1, 0, 1], bool)})
    with pytest.raises(ExecutionError, match=r"'x holds' \(buffer 'ok'\) was not read back"):
        raise_failed_checks([st], {})
    # a check inside a body graph: refused (the GPU executors read back the top level's)
    b = GraphBuilder()
    c = b.alloc_buffer("c", 4)
    x = b.alloc_external_buffer("x", 4, dtype="bool")
    ok = b.alloc_buffer("ok", 4, dtype="bool")
    body = b.body()
    body.add_kernel("x holds", 1, 32).op("check").inputs([x]).outputs([ok]).finish()
    b.add_memset("c = 1", 4, 1, dst=c)
    b.add_if("if c", c, body)
    with pytest.raises(UnsupportedOp, match=r"'x holds' lies in a body graph of 'if c'"):
        check_steps(ExecutionPlan.build(b.build()))


def test_a_check_op_must_be_opaque() -> None:
    from oxiwork.error import InvalidArgument
    from oxiwork.ops import get
    from oxiwork.ops.table import FusionClass

    op = get("check")
    assert op.check and op.fusion_class is FusionClass.OPAQUE
    with pytest.raises(InvalidArgument, match="a check's result must reach memory"):
        dataclasses.replace(op, fusion_class=FusionClass.ELEMENTWISE)
