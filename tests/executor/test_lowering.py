"""Tests for oxiwork.executor.lowering: plan -> backend-neutral CUDA-graph description.

Golden JSON files pin the structure of two small plans (regenerate with
``OXIWORK_UPDATE_GOLDEN=1`` after an intended change, and review the diff); properties
over random DAGs check the invariants that matter on a GPU: edges are exactly stream
order plus event pairs, contracting events keeps every ordering, every pointer lands
inside its allocation, and packed arguments read back through ctypes as the kernel
would see them.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.executor.lowering import CTYPES, KernelArg, _contract, lower, pack_args
from oxiwork.executor.nvrtc import cache_key
from oxiwork.node import NodeKind
from oxiwork.optimizer.fusion import fuse
from tests.executor.gpu_fakes import (
    build_plan,
    diamond_plan,
    kitchen_sink_plan,
    read_kernel_params,
    simple_plan,
)

GOLDEN = Path(__file__).parent / "golden"


def _normalised(desc_dict: dict) -> dict:
    """Module keys hash the generated CUDA C; the golden files pin structure, not codegen
    text, so keys are replaced by placeholders (and checked separately)."""
    d = json.loads(json.dumps(desc_dict))
    for k, m in enumerate(d["modules"]):
        m["key"] = f"<module {k} key>"
    return d


def _reachable(n: int, edges) -> list[set[int]]:
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in edges:
        succ[a].append(b)
    reach = [set() for _ in range(n)]
    for v in reversed(range(n)):  # nodes are in topological order
        for w in succ[v]:
            reach[v].add(w)
            reach[v] |= reach[w]
    return reach


class TestLowerRaises:
    def test_raises_on_bad_events_mode(self):
        with pytest.raises(InvalidArgument, match="events must be"):
            lower(diamond_plan(), events="sometimes")

    def test_raises_on_bad_arch(self):
        with pytest.raises(InvalidArgument, match="sm_60"):
            lower(diamond_plan(), arch="sm_60")

    def test_raises_on_wait_without_record(self):
        plan = diamond_plan()
        from dataclasses import replace

        steps = tuple(
            replace(s, event=7) if s.kind is NodeKind.EventWait else s for s in plan.steps
        )
        with pytest.raises(InvalidArgument, match="waits for event 7"):
            lower(replace(plan, steps=steps))

    def test_opaque_error_mode_rejects_kernels_without_op(self):
        from oxiwork.builder import GraphBuilder

        b = GraphBuilder()
        x = b.alloc_external_buffer("x", 1024)
        b.add_kernel("mystery", 1, 256).inputs([x]).outputs([b.alloc_buffer("y", 1024)]).finish()
        plan = simple_plan(b.build())
        with pytest.raises(UnsupportedOp):
            lower(plan, opaque="error")
        desc = lower(plan)  # default: an empty kernel with the same pointer arguments
        (k,) = [n for n in desc.nodes if n.kind == "kernel"]
        assert [a.name for a in k.args] == ["in0", "out0"]
        assert "{}" in desc.modules[0].source


class TestGolden:
    @pytest.mark.parametrize(
        ("name", "make"),
        [
            ("quick_start_unfused", lambda: simple_plan(quick_start())),
            ("quick_start_fused", lambda: simple_plan(fuse(quick_start()).graph)),
            ("diamond_2_streams", diamond_plan),
        ],
    )
    def test_matches_golden(self, name, make):
        desc = lower(make())
        got = _normalised(desc.to_dict())
        path = GOLDEN / f"{name}.json"
        if os.environ.get("OXIWORK_UPDATE_GOLDEN"):
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(got, indent=1) + "\n")
        assert got == json.loads(path.read_text())

    def test_module_key_is_the_hash_of_source_options_arch(self):
        desc = lower(diamond_plan(), arch="sm_80")
        (m,) = desc.modules
        assert m.key == cache_key(m.source, m.options, "sm_80")
        assert lower(diamond_plan(), arch="sm_90").modules[0].key != m.key

    def test_deterministic(self):
        assert lower(diamond_plan()).to_json() == lower(diamond_plan()).to_json()

    def test_diamond_runs_branches_in_parallel(self):
        desc = lower(diamond_plan())
        names = {n.name: n.index for n in desc.nodes}
        reach = _reachable(len(desc.nodes), desc.edges)
        assert names["neg"] not in reach[names["scale"]]
        assert names["scale"] not in reach[names["neg"]]
        assert names["add"] in reach[names["neg"]] and names["add"] in reach[names["scale"]]


def _plans():
    yield simple_plan(quick_start())
    yield diamond_plan()
    for seed in range(3):
        g = random_op_dag(seed, 12)
        yield build_plan(g, fusion=True)
        yield build_plan(g, fusion=False)


class TestStructure:
    @pytest.mark.parametrize("plan", list(_plans()))
    def test_edges_are_stream_order_and_event_pairs(self, plan):
        desc = lower(plan, events="nodes", capture=False)
        assert len(desc.nodes) == len(plan.steps)
        expected = set()
        last: dict[int, int] = {}
        record: dict[int, int] = {}
        for s in plan.steps:
            if int(s.stream) in last:
                expected.add((last[int(s.stream)], s.index))
            last[int(s.stream)] = s.index
            if s.kind is NodeKind.EventRecord:
                record[s.event] = s.index
            if s.kind is NodeKind.EventWait:
                expected.add((record[s.event], s.index))
        assert set(desc.edges) == expected

    @pytest.mark.parametrize("plan", list(_plans()))
    def test_event_contraction_keeps_every_ordering(self, plan):
        full = lower(plan, events="nodes")
        short = lower(plan, events="edges")
        kept = [n.index for n in full.nodes if n.kind not in ("event_record", "event_wait")]
        assert [full.nodes[i].name for i in kept] == [n.name for n in short.nodes]
        r_full = _reachable(len(full.nodes), full.edges)
        r_short = _reachable(len(short.nodes), short.edges)
        for a_new, a in enumerate(kept):
            want = {kept.index(b) for b in r_full[a] if b in kept}
            assert r_short[a_new] == want
        assert all(a < b for a, b in short.edges)

    @pytest.mark.parametrize("plan", list(_plans()))
    def test_pointers_land_inside_their_allocations(self, plan):
        desc = lower(plan)
        host = {h.name: h for h in desc.host_buffers}
        dev = {b.name: b for b in desc.device_buffers}

        def check(ref, nbytes):
            kind, where = ref
            if kind == "arena":
                assert where >= 0 and where + nbytes <= desc.arena_bytes
                assert where % 256 == 0
            elif kind == "host":
                assert nbytes <= host[where].nbytes
            elif kind == "buffer":
                assert nbytes <= dev[where].nbytes
            else:
                assert kind == "scratch" and nbytes <= desc.scratch_bytes

        for n in desc.nodes:
            if n.kind == "memcpy":
                check(n.src, n.nbytes)
                check(n.dst, n.nbytes)
            if n.kind == "memset":
                check(n.dst, n.nbytes)
                assert n.width * n.element_size == n.nbytes
            if n.kind == "kernel":
                step = plan.steps[n.step]
                ptrs = [a for a in n.args if a.ctype == "ptr"]
                assert len(ptrs) == len(step.inputs) + len(step.outputs)
                for a, b in zip(ptrs, (*step.inputs, *step.outputs), strict=True):
                    check(a.value, b.size_bytes)
        regions = sorted((h.offset, h.offset + h.nbytes) for h in desc.host_buffers)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(regions))
        assert regions == [] or regions[-1][1] <= desc.host_bytes

    @pytest.mark.parametrize("seed", range(3))
    def test_outputs_are_what_the_simulator_reports(self, seed):
        import warnings

        from oxiwork.executor.simulator import SequentialExecutor

        plan = build_plan(random_op_dag(seed, 12), fusion=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stats = SequentialExecutor(plan).run()
        assert stats.outputs is not None
        assert {name for name, _ in lower(plan).outputs} == set(stats.outputs)


class TestContract:
    @settings(max_examples=200, deadline=None)
    @given(st.data())
    def test_reachability_between_kept_nodes_is_unchanged(self, data):
        n = data.draw(st.integers(1, 12))
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        edges = set(data.draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else [])
        drop = set(data.draw(st.lists(st.integers(0, n - 1), unique=True)))
        kept, new_edges = _contract(n, edges, drop)
        assert kept == [i for i in range(n) if i not in drop]
        r_old = _reachable(n, edges)
        r_new = _reachable(n, new_edges)
        for a in kept:
            assert r_new[a] == {b for b in r_old[a] if b not in drop}


class TestPackArgs:
    def test_raises_on_unknown_ctype(self):
        with pytest.raises(InvalidArgument, match="double"):
            pack_args([KernelArg("x", "double", 1.0)], lambda r: 0)

    def test_raises_when_value_does_not_fit(self):
        with pytest.raises(InvalidArgument, match="does not fit"):
            pack_args([KernelArg("n", "int", 2**40)], lambda r: 0)
        with pytest.raises(InvalidArgument, match="must be an integer"):
            pack_args([KernelArg("n", "size_t", 1.5)], lambda r: 0)

    def test_no_args_is_a_null_pointer(self):
        assert pack_args([], lambda r: 0).kernel_params == 0

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.one_of(
                st.tuples(st.just("ptr"), st.integers(0, 2**48)),
                st.tuples(st.just("float"), st.floats(width=32, allow_nan=False)),
                st.tuples(st.just("size_t"), st.integers(0, 2**64 - 1)),
                st.tuples(st.just("int"), st.integers(-(2**31), 2**31 - 1)),
            ),
            max_size=12,
        )
    )
    def test_reads_back_through_ctypes(self, spec):
        base = 1 << 40
        args = [
            KernelArg(f"a{k}", ct, ("arena", v) if ct == "ptr" else v)
            for k, (ct, v) in enumerate(spec)
        ]
        packed = pack_args(args, lambda ref: base + ref[1])
        assert [v.nbytes for v in packed.values] == [CTYPES[ct][1] for ct, _ in spec]
        got = read_kernel_params(packed.kernel_params, [CTYPES[ct][2] for ct, _ in spec])
        want = [base + v if ct == "ptr" else v for ct, v in spec]
        for (ct, _), g, w in zip(spec, got, want, strict=True):
            if ct == "float":
                assert g == np.float32(w)
            else:
                assert g == w

    def test_real_kernel_args_read_back(self):
        desc = lower(diamond_plan())
        scale = desc.node_for("scale")
        packed = pack_args(scale.args, lambda ref: 4096 + ref[1])
        vals = read_kernel_params(
            packed.kernel_params,
            [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_float],
        )
        assert vals == [4096 + scale.args[0].value[1], 4096 + scale.args[1].value[1], 1024, 3.0]


class TestNodeFor:
    def test_by_name_index_and_node_id(self):
        plan = diamond_plan()
        desc = lower(plan)
        add = desc.node_for("add")
        assert desc.node_for(add.index) is add
        step = next(s for s in plan.steps if s.name == "add")
        assert desc.node_for(step.node) is add

    def test_raises_on_unknown(self):
        with pytest.raises(InvalidArgument, match="no node 'nope'"):
            lower(diamond_plan()).node_for("nope")


# ------------------------------------------------------------------ executing a description
def interpret(plan, desc, inputs=None, seed=0, order_seed=0):
    """Execute a GraphDesc on the CPU in a random order allowed by its edges.

    Kernels use the ops' numpy references on the bytes their pointer arguments name;
    copies and memsets move bytes between the arena, own buffers, scratch and the host
    block, exactly as the description says. Input staging and output reading are the
    GPU executors' own functions, so this checks the lowering and the executors' host
    side against the simulator without a GPU.
    """
    import random

    from oxiwork.executor.cuda_graph import prepare_inputs
    from oxiwork.ops.program import bind, run

    mem = {
        "arena": np.zeros(desc.arena_bytes, np.uint8),
        "scratch": np.zeros(desc.scratch_bytes, np.uint8),
        "host": np.zeros(desc.host_bytes, np.uint8),
    }
    own = {b.name: np.zeros(b.nbytes, np.uint8) for b in desc.device_buffers}
    host = {h.name: h for h in desc.host_buffers}

    def at(ref, nbytes):
        kind, where = ref
        if kind == "buffer":
            return own[where][:nbytes]
        if kind == "host":
            off = host[where].offset
            return mem["host"][off : off + nbytes]
        return mem[kind][where : where + nbytes]

    data, _ = prepare_inputs(plan, desc, inputs or {}, seed)
    for h in desc.host_buffers:
        if h.direction == "in" and h.buffer in data:
            at(("host", h.name), h.nbytes)[...] = data[h.buffer][: h.nbytes]
    for b in desc.device_buffers:
        if b.name in data:
            own[b.name][...] = data[b.name]

    preds = desc.predecessors()
    done: set[int] = set()
    ready = [n.index for n in desc.nodes if not preds[n.index]]
    rng = random.Random(order_seed)
    while ready:
        i = ready.pop(rng.randrange(len(ready)))
        n = desc.nodes[i]
        if n.kind == "kernel":
            step = plan.steps[n.step]
            node = plan.graph.node(step.node)
            ins = [
                at(a.value, b.size_bytes).view(b.dtype).reshape(b.shape)
                for a, b in zip(n.args, step.inputs, strict=False)
            ]
            outs = run(bind(plan.graph, node), [x.copy() for x in ins])
            ptrs = [a for a in n.args if a.ctype == "ptr"][len(step.inputs) :]
            for a, b, r in zip(ptrs, step.outputs, outs, strict=True):
                at(a.value, b.size_bytes)[...] = np.asarray(r, b.dtype).reshape(-1).view(np.uint8)
        elif n.kind == "memcpy":
            at(n.dst, n.nbytes)[...] = at(n.src, n.nbytes)
        elif n.kind == "memset":
            pattern = np.full(n.width, n.value, dtype=f"uint{8 * n.element_size}")
            at(n.dst, n.nbytes)[...] = pattern.view(np.uint8)
        done.add(i)
        for j in range(i + 1, len(desc.nodes)):
            if j not in done and j not in ready and all(p in done for p in preds[j]):
                ready.append(j)
    assert len(done) == len(desc.nodes)
    out = {}
    for buf, region in desc.outputs:
        h = host[region]
        raw = at(("host", region), h.nbytes)
        dt = np.dtype(h.dtype)
        out[buf] = raw[: h.nbytes - h.nbytes % dt.itemsize].view(dt)
    return out


class TestExecutingTheDescription:
    """The description, executed in any order its edges allow, computes exactly what the
    simulator computes (same numpy references, so equality is exact)."""

    @pytest.mark.parametrize("seed", range(4))
    @pytest.mark.parametrize("fusion", [True, False])
    def test_matches_the_simulator(self, seed, fusion):
        import warnings

        from oxiwork.executor.simulator import SequentialExecutor

        plan = build_plan(random_op_dag(seed, 16), fusion=fusion, max_streams=4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = SequentialExecutor(plan).run(seed=seed).outputs
        desc = lower(plan)
        for order_seed in range(3):
            got = interpret(plan, desc, seed=seed, order_seed=order_seed)
            assert set(got) == set(want)
            for name in want:
                np.testing.assert_array_equal(
                    got[name].reshape(-1), np.asarray(want[name]).reshape(-1), err_msg=name
                )

    @pytest.mark.parametrize("make", [diamond_plan, kitchen_sink_plan])
    def test_hand_made_plans(self, make):
        import warnings

        from oxiwork.executor.simulator import SequentialExecutor

        plan = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = SequentialExecutor(plan).run(seed=1).outputs
        for order_seed in range(5):
            got = interpret(plan, lower(plan), seed=1, order_seed=order_seed)
            assert {k: v.tolist() for k, v in got.items()} == {
                k: np.asarray(v).reshape(-1).tolist() for k, v in want.items()
            }

    def test_dropping_an_event_edge_can_change_the_result(self):
        # The check above can fail: without the event pair, 'add' may run before 'neg'.
        from dataclasses import replace

        plan = diamond_plan()
        desc = lower(plan)
        neg, add = desc.node_for("neg").index, desc.node_for("add").index
        broken = replace(desc, edges=tuple(e for e in desc.edges if e != (neg, add)))
        results = {
            tuple(interpret(plan, broken, seed=1, order_seed=k)["y"].tolist()) for k in range(20)
        }
        assert len(results) > 1


class TestModules:
    def test_raises_on_bad_unit_size(self):
        with pytest.raises(InvalidArgument, match="kernels_per_module"):
            lower(diamond_plan(), kernels_per_module=0)

    @pytest.mark.parametrize("per", [1, 2, 3, 64])
    def test_kernels_are_split_into_units_in_plan_order(self, per):
        plan = build_plan(random_op_dag(2, 14), fusion=False)
        desc = lower(plan, kernels_per_module=per)
        kernels = [n for n in desc.nodes if n.kind == "kernel"]
        assert len(desc.modules) == math.ceil(len(kernels) / per)
        for n in kernels:
            assert n.function_name in desc.modules[n.module].function_names
        assert [n.module for n in kernels] == sorted(n.module for n in kernels)
        assert all(len(m.function_names) <= per for m in desc.modules)
