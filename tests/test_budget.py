"""Work budgets (oxiwork.budget) and the refusals of issue 13, one test per class:
bounded work per request, atomic setters, values every consumer can hold."""

from __future__ import annotations

import copy
import json
import tracemalloc
import warnings
from typing import Any

import numpy as np
import pytest

from oxiwork import Budget, ComputeGraph, ExecutionPlan, GraphBuilder, Simulator
from oxiwork import budget as budgets
from oxiwork.error import BudgetExceeded, CycleError, GraphError, InvalidArgument, MalformedFile
from oxiwork.examples import quick_start
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.widget import Workbench
from oxiwork.widget import workbench as wb_module

GiB = 2**30
SYNCED = ("view", "dag", "selection", "details", "pass_index", "sim_position", "sim_state",
          "inspector", "inspector_values")  # fmt: skip


def state(w: Workbench) -> dict[str, Any]:
    return {k: copy.deepcopy(getattr(w, k)) for k in SYNCED} | {"graph": w.graph}


def send(w: Workbench, mtype: str, **fields: Any) -> dict[str, Any]:
    return w.handle_message({"type": mtype, "request_id": "r", **fields})


class TestBudget:
    @pytest.mark.parametrize("field", ["sim_bytes", "max_nodes", "max_buffers"])
    @pytest.mark.parametrize("bad", [0, -1, 1.5, "1", True, None])
    def test_raises_bad_limits(self, field: str, bad: Any) -> None:
        with pytest.raises(InvalidArgument, match=f"Budget.{field} must be an int > 0"):
            Budget(**{field: bad})

    def test_using_nests_and_restores(self) -> None:
        outer = budgets.current()
        with budgets.using(Budget(sim_bytes=10)) as b:
            assert budgets.current() is b
            with budgets.using(Budget(sim_bytes=20)):
                assert budgets.current().sim_bytes == 20
            assert budgets.current() is b
        assert budgets.current() is outer

    def test_set_default(self) -> None:
        old = budgets.set_default(Budget(sim_bytes=123))
        try:
            assert budgets.current().sim_bytes == 123
        finally:
            budgets.set_default(old)
        assert budgets.current() is old

    @pytest.mark.parametrize(
        "make", [Simulator, lambda plan, inputs: SequentialExecutor(plan).run(inputs)]
    )
    def test_executors_refuse_before_allocating(self, make: Any) -> None:
        plan = ExecutionPlan.build(quick_start())
        tracemalloc.start()
        try:
            with budgets.using(Budget(sim_bytes=1024)), pytest.raises(BudgetExceeded) as e:
                make(plan, {"input": np.ones(1024, np.float32)})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # The message names the limit and how to raise it.
        assert "Budget.sim_bytes" in str(e.value) and "budget=Budget(sim_bytes=" in str(e.value)
        assert peak < 2**20


def _big_buffer_requests(w: Workbench) -> list[dict[str, Any]]:
    """Issue 13's example: an 8 GiB buffer, a copy into it, then the passes."""
    return [
        send(w, "add_buffer", name="huge", size_bytes=8 * GiB),
        send(w, "add_memcpy", name="fill", direction="h2d", dst="huge", size_bytes=8 * GiB),
        send(w, "load_passes"),
    ]


class TestWidgetBudget:
    def test_eight_gib_buffer_is_refused_quickly_and_changes_nothing(self) -> None:
        w = Workbench(quick_start())
        before = state(w)
        tracemalloc.start()
        try:
            replies = _big_buffer_requests(w)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert replies[0]["type"] == "error" and replies[0]["kind"] == "BudgetExceeded"
        assert "Budget.sim_bytes" in replies[0]["message"]
        assert "Workbench(..., budget=Budget(sim_bytes=...))" in replies[0]["message"]
        assert replies[1]["type"] == "error"  # no buffer 'huge' to copy into
        assert w.graph is before["graph"]
        assert peak < 256 * 2**20  # the passes of the small graph, not 8 GiB
        assert replies[2]["type"] == "ok"

    def test_a_larger_budget_lets_the_edit_through(self) -> None:
        w = Workbench(quick_start(), budget=Budget(sim_bytes=16 * GiB))
        reply = send(w, "add_buffer", name="huge", size_bytes=8 * GiB)
        assert reply["type"] == "ok", reply
        assert w.graph.buffer_by_name("huge").size_bytes == 8 * GiB

    def test_simulator_of_a_graph_from_python_reports_the_budget(self) -> None:
        w = Workbench(quick_start(), budget=Budget(sim_bytes=1024))
        assert send(w, "load_passes")["type"] == "ok"
        assert w.session.sim is None
        assert "BudgetExceeded" in w.session.notes["sim"]

    @pytest.mark.parametrize(("field", "mtype"), [("max_buffers", "add_buffer")])
    def test_growth_limits(self, field: str, mtype: str) -> None:
        g = quick_start()
        w = Workbench(g, budget=Budget(**{field: len(g.buffers)}))
        reply = send(w, mtype, name="extra", size_bytes=64)
        assert reply["kind"] == "BudgetExceeded" and f"Budget.{field}" in reply["message"]
        assert w.graph is g
        # Edits that do not grow the graph still pass.
        assert send(w, "rename", buffer=int(g.buffers[0].id), name="renamed")["type"] == "ok"

    def test_node_limit(self) -> None:
        g = quick_start()
        w = Workbench(g, budget=Budget(max_nodes=len(g.nodes)))
        reply = send(w, "add_memcpy", name="c", direction="d2h", src="output")
        assert reply["kind"] == "BudgetExceeded" and "Budget.max_nodes" in reply["message"]
        assert w.graph is g


class TestAtomicSetter:
    def test_failing_view_leaves_the_workbench_as_it_was(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        w = Workbench(quick_start())
        before = state(w)
        b = GraphBuilder.from_graph(quick_start())
        b.alloc_buffer("extra", 64)
        new = b.build()

        def broken(*_: Any, **__: Any) -> Any:
            raise OverflowError("a view the frontend cannot hold")

        monkeypatch.setattr(wb_module.vm, "buffers_section", broken)
        with pytest.raises(OverflowError):
            w.graph = new
        assert state(w) == before
        monkeypatch.undo()
        # Still usable: the next edit works.
        assert send(w, "add_buffer", name="later", size_bytes=64)["type"] == "ok"

    def test_unsendable_view_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        w = Workbench(quick_start())
        before = state(w)
        real = wb_module.vm.buffers_section
        monkeypatch.setattr(
            wb_module.vm, "buffers_section", lambda g: [*real(g), {"x": float("nan")}]
        )
        reply = send(w, "add_buffer", name="extra", size_bytes=64)
        assert reply["type"] == "error" and "cannot send" in reply["message"]
        assert state(w) == before


class TestIssueExamples:
    def test_lone_surrogate_name_is_refused_everywhere(self) -> None:
        w = Workbench(quick_start())
        before = state(w)
        reply = send(w, "add_buffer", name="\ud800", size_bytes=64)
        assert reply["type"] == "error" and "not valid Unicode" in reply["message"]
        assert state(w) == before
        json.dumps(reply, ensure_ascii=False).encode("utf-8")  # the reply itself can be sent
        d = quick_start().to_dict()
        d["buffers"][0]["name"] = "\ud800"
        with pytest.raises(MalformedFile, match="not valid Unicode"):
            ComputeGraph.from_dict(d)
        # A request id that cannot be sent back is refused and not echoed.
        reply = w.handle_message({"type": "select", "request_id": "\udc80", "node": 0})
        assert reply["type"] == "error" and reply["request_id"] == ""

    def test_ids_beyond_int32_are_refused_by_the_loader(self) -> None:
        d = quick_start().to_dict()
        d["nodes"][0]["id"] = 2**31
        with pytest.raises(MalformedFile, match=r"ids must be from 0 to 1073741823"):
            ComputeGraph.from_dict(d)

    @pytest.mark.parametrize(
        "text",
        [
            "[" * 100_000,
            '{"a":' * 50_000,
            '{"format": "oxiwork.graph", "version": 1, "buffers": [], "nodes": [], "edges": [['
            + "9" * 5000
            + ", 1]]}",
            json.dumps(quick_start().to_dict()).replace('"cost": null', '"cost": 1e999', 1),
            json.dumps(quick_start().to_dict()).replace(
                '"alignment": 256', '"alignment": 1e400', 1
            ),
            json.dumps(quick_start().to_dict()).replace(
                '"alignment": 256', f'"alignment": {2**62}', 1
            ),
            json.dumps(quick_start().to_dict()).replace('"cost": null', f'"cost": {10**300}', 1),
            "NaN",
        ],
    )
    def test_loader_raises_malformed_file_only(self, text: str) -> None:
        with pytest.raises(MalformedFile):
            ComputeGraph.from_json(text)

    @pytest.mark.parametrize("call", ["chain", "fan_in", "fan_out"])
    def test_refused_dependency_calls_add_nothing(self, call: str) -> None:
        b = GraphBuilder()
        a, c, d = (b.add_barrier(n) for n in "acd")
        b.dep(d, a)  # d -> a: anything ending in d after a closes a cycle
        deps = dict(b._deps)
        with pytest.raises(CycleError):
            if call == "chain":
                b.chain([c, a, d])  # c -> a is fine, a -> d closes d -> a -> d
            elif call == "fan_in":
                b.fan_in([c, a], d)  # c -> d fine, a -> d closes the cycle
            else:
                b.fan_out(a, [c, d])  # a -> c fine, a -> d closes the cycle
        assert b._deps == deps
        assert set(b.build().edges) == {(d, a)}

    def test_refused_dependency_with_a_bad_id_adds_nothing(self) -> None:
        b = GraphBuilder()
        a, c = b.add_barrier("a"), b.add_barrier("c")
        with pytest.raises(GraphError):
            b.chain([a, c, 7])  # type: ignore[list-item]
        assert not b._deps
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert b.build().edges == ()
