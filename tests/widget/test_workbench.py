"""The Workbench model: every message type, and bad messages change nothing but `errors`."""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import pytest
import traitlets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oxiwork
from oxiwork.error import GraphError, InvalidArgument, InvalidPlan
from oxiwork.examples import quick_start, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import POLICIES
from oxiwork.node import MemcpyDir
from oxiwork.widget import Workbench
from oxiwork.widget.viewmodel import unpack_dag
from oxiwork.widget.workbench import PENDING, InvalidOption

SYNCED = ("view", "dag", "selection", "details", "pass_index", "sim_position", "color_mode",
          "memory_mode", "stream_mode", "inspector", "inspector_values", "max_streams", "fusion",
          "max_group_size", "sim_state")  # fmt: skip


def snapshot(w: Workbench) -> dict[str, Any]:
    return {k: copy.deepcopy(getattr(w, k)) for k in SYNCED} | {
        "graph": w.graph,
        "sim_settings": w.sim_settings,
    }


def send(w: Workbench, mtype: str, **fields: Any) -> dict[str, Any]:
    return w.handle_message({"type": mtype, "request_id": "t", **fields})


def node_id(w: Workbench, name: str) -> int:
    return int(next(n.id for n in w.graph.nodes if n.name == name))


def memory_stage(w: Workbench) -> int:
    """The pass slider's position of the memory pass (runs the passes)."""
    return [st.name for st in w.session.stages].index("memory")


@pytest.fixture
def w() -> Workbench:
    return Workbench(quick_start())


class TestConstruction:
    def test_raises_wrong_type(self) -> None:
        with pytest.raises(
            TypeError, match="ComputeGraph, a GraphBuilder or an ImportedModel"
        ) as e:
            Workbench("graph")  # type: ignore[arg-type]
        assert isinstance(e.value, GraphError)  # bad input is a GraphError, here too
        for bad in (None, [], "fast"):
            with pytest.raises(GraphError, match="memory_mode must be one of"):
                Workbench(quick_start(), memory_mode=bad)  # type: ignore[arg-type]

    def test_accepts_builder(self) -> None:
        b = oxiwork.GraphBuilder()
        x = b.alloc_buffer("x", 64)
        b.add_memcpy("up", MemcpyDir.HostToDevice, 64, dst=x)
        assert Workbench(b).view["dag"]["names"] == ["up"]

    def test_view_matches_graph(self, w: Workbench) -> None:
        cols = unpack_dag(w.dag)
        assert w.view["dag"]["num_nodes"] == w.graph.num_nodes == len(cols["id"])
        assert sorted(cols["id"]) == [int(i) for i in w.graph.node_ids]
        assert len(cols["src"]) == len(w.graph.edges)
        assert [b["name"] for b in w.view["buffers"]] == [b.name for b in w.graph.buffers]

    def test_graph_setter_redraws(self, w: Workbench) -> None:
        w.selection = 1
        w.graph = transformer_block(1)
        assert w.view["dag"]["num_nodes"] == transformer_block(1).num_nodes
        assert w.selection == -1 or w.graph.has_node(w.selection)

    def test_graph_setter_rejects(self, w: Workbench) -> None:
        before = snapshot(w)
        with pytest.raises(TypeError):
            w.graph = 3  # type: ignore[assignment]
        assert snapshot(w) == before


class TestPythonSide:
    """Traits set from Python redraw the views too; bad values are refused."""

    def test_pass_index(self, w: Workbench) -> None:
        last = len(w.session.stages) - 1
        w.pass_index = last
        assert w.view["dag"]["pass_index"] == last
        with pytest.raises(traitlets.TraitError, match="positions"):
            w.pass_index = last + 1
        assert w.pass_index == last

    def test_selection_updates_details(self, w: Workbench) -> None:
        w.selection = node_id(w, "scale")
        assert w.details["name"] == "scale"
        w.selection = -1
        assert w.details == {}

    def test_details_explain_fusion_and_show_the_cuda(self) -> None:
        w = Workbench(transformer_block(1))
        w.selection = node_id(w, "L0.k0_bias")
        assert not w.session.loaded  # selecting a node does not run the passes
        assert w.details["fusion"] == [] and "__global__" in w.details["source"]
        w.load_passes()
        rows = w.details["fusion"]
        assert ["before", "L0.k0_t"] in [r[:2] for r in rows]
        assert any("transpose" in r[2] and "never fuses" in r[2] for r in rows)
        # A fused kernel after the fusion pass: its members' rows and its generated C.
        w.pass_index = 1
        fused = next(n for n in w.session.stages[1].graph.nodes if n.name == "L0.q0+L0.q0_bias")
        w.selection = int(fused.id)
        d = w.details
        assert "matmul" in d["source"] and "bias_add" in d["source"]
        assert any(r[1] == "L0.scores0" for r in d["fusion"])
        # Not a kernel: no source; the upload's neighbours are kernels it cannot fuse with.
        w.pass_index = 0
        w.selection = node_id(w, "upload_x1")
        assert w.details["source"] is None

    def test_modes(self, w: Workbench) -> None:
        w.color_mode = "no such mode"
        assert w.color_mode == "kind"
        with pytest.raises(traitlets.TraitError, match="memory_mode"):
            w.memory_mode = "magic"
        w.memory_mode = "exact"
        w.pass_index = memory_stage(w)
        assert w.view["memory"]["mode"] == "exact"


class TestMessages:
    def test_select(self, w: Workbench) -> None:
        relu = node_id(w, "relu")
        assert send(w, "select", node=relu)["type"] == "ok"
        assert w.selection == relu
        assert w.details["name"] == "relu"
        assert send(w, "select", node=None)["type"] == "ok"
        assert w.selection == -1 and w.details == {}

    def test_set_pass(self, w: Workbench) -> None:
        # Before the frontend asked for the passes: set_pass runs them on the spot.
        assert w.view["pending"]
        last = len(w.session.stages) - 1
        assert send(w, "set_pass", index=last)["type"] == "ok"
        assert len(w.view["passes"]["entries"]) == last + 1
        assert w.pass_index == last
        assert w.view["dag"]["pass_index"] == last
        shown = w.session.stages[last].graph
        assert w.view["dag"]["num_nodes"] == shown.num_nodes

    def test_set_memory_mode(self, w: Workbench) -> None:
        assert send(w, "set_memory_mode", mode="exact")["type"] == "ok"
        assert w.memory_mode == "exact"
        assert send(w, "set_pass", index=memory_stage(w))["type"] == "ok"
        assert w.view["memory"]["mode"] == "exact"

    def test_plan_memory(self, w: Workbench) -> None:
        assert send(w, "plan_memory")["type"] == "ok"
        w.pass_index = memory_stage(w)
        assert w.view["memory"]["available"]

    def test_add_buffer(self, w: Workbench) -> None:
        assert send(w, "add_buffer", name="extra", size_bytes=1024, dtype="float32")["type"] == "ok"
        assert w.graph.buffer_by_name("extra").size_bytes == 1024

    def test_add_kernel(self, w: Workbench) -> None:
        send(w, "add_buffer", name="extra", size_bytes=4096)
        r = send(w, "add_kernel", name="k2", op="relu", inputs=["output"], outputs=["extra"],
                 grid=[4], block=[256], params={})  # fmt: skip
        assert r["type"] == "ok", r
        k2 = w.graph.node(node_id(w, "k2"))
        assert k2.op == "relu" and k2.config.block == (256, 1, 1)
        # The builder inferred the data edge from the writer of `output`.
        assert node_id(w, "scale") in w.graph.predecessors(k2.id)
        assert "k2" in w.view["dag"]["names"]

    def test_add_memcpy(self, w: Workbench) -> None:
        r = send(w, "add_memcpy", name="peek", src="output", direction="d2h")
        assert r["type"] == "ok", r
        assert w.graph.node(node_id(w, "peek")).memcpy_dir is MemcpyDir.DeviceToHost

    def test_add_dependency(self, w: Workbench) -> None:
        send(w, "add_buffer", name="lone", size_bytes=64)
        send(w, "add_memcpy", name="up2", dst="lone", direction="h2d")
        a, b = node_id(w, "up2"), node_id(w, "download")
        assert send(w, "add_dependency", src=a, dst=b)["type"] == "ok"
        assert (a, b) in {(int(x), int(y)) for x, y in w.graph.edges}

    def test_delete_node(self, w: Workbench) -> None:
        down = node_id(w, "download")
        assert send(w, "delete", node=down)["type"] == "ok"
        assert not w.graph.has_node(down)

    def test_delete_buffer(self, w: Workbench) -> None:
        send(w, "add_buffer", name="unused", size_bytes=64)
        bid = w.graph.buffer_by_name("unused").id
        assert send(w, "delete", buffer=int(bid))["type"] == "ok"
        assert "unused" not in [b.name for b in w.graph.buffers]

    def test_rename(self, w: Workbench) -> None:
        relu = node_id(w, "relu")
        assert send(w, "rename", node=relu, name="<b>bold</b>")["type"] == "ok"
        assert w.graph.node(relu).name == "<b>bold</b>"
        assert send(w, "rename", buffer=0, name="inp")["type"] == "ok"
        assert w.graph.buffer(0).name == "inp"

    def test_on_msg_replies_with_the_request_id(
        self, w: Workbench, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        sent: list[Any] = []
        monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append(content))
        w._on_msg(w, {"type": "select", "request_id": "r42", "node": 12345}, [])
        assert sent[-1]["type"] == "error" and sent[-1]["request_id"] == "r42"
        assert "12345" in sent[-1]["message"]


class TestStreams:
    """The stream view draws the plan's timeline once the slider is past the stream pass."""

    def test_before_and_after_the_stream_pass(self) -> None:
        w = Workbench(transformer_block(1))
        w.load_passes()
        assert w.view["streams"] == {"available": False, "reason": w.view["streams"]["reason"]}
        assert "stream" in w.view["streams"]["reason"]
        for i, stage in enumerate(w.session.stages):
            w.pass_index = i
            streams = w.view["streams"]
            assert streams["available"] == any(n.stream is not None for n in stage.graph.nodes)
            if streams["available"]:
                assert [b["node"] for b in streams["bars"]] == [int(st.node) for st in w.plan.steps]
        assert w.view["streams"]["available"]

    def test_mode_switch(self) -> None:
        w = Workbench(transformer_block(1))
        w.pass_index = len(w.session.stages) - 1
        totals = w.view["streams"]["totals"]
        assert totals["graph"] < totals["stream"]
        for mode in ("stream", "graph"):
            assert send(w, "set_stream_mode", mode=mode)["type"] == "ok"
            assert w.stream_mode == mode
            assert w.view["streams"]["mode"] == mode
            assert w.view["streams"]["makespan"] == totals[mode]
        with pytest.raises(traitlets.TraitError, match="stream_mode"):
            w.stream_mode = "warp"

    def test_chrome_trace(self, w: Workbench) -> None:
        trace = json.loads(w.chrome_trace())
        spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert [e["args"]["step"] for e in spans] == list(range(len(w.plan.steps)))
        assert w.chrome_trace("stream") != w.chrome_trace("graph")


class TestPipelineFailure:
    """A graph the engine fails on is shown with the real error; the widget stays usable."""

    @pytest.mark.parametrize(
        ("exc", "expected"),
        [
            (
                InvalidPlan("pass 'memory' failed on node 'relu'"),
                "the pipeline failed on this graph",
            ),
            (RuntimeError("engine bug"), "raised RuntimeError"),
        ],
        ids=["graph_error", "engine_bug"],
    )
    def test_reason_is_the_real_error(
        self, monkeypatch: pytest.MonkeyPatch, exc: Exception, expected: str
    ) -> None:
        def build(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
            raise exc

        monkeypatch.setattr(ExecutionPlan, "build", classmethod(build))
        w = Workbench(quick_start())
        assert w.plan is None
        assert [e["name"] for e in w.view["passes"]["entries"]] == ["input"]
        reason = w.view["sim"]["reason"]
        assert not w.view["sim"]["available"]
        assert expected in reason and str(exc) in reason
        r = send(w, "sim", action="step")
        assert r["type"] == "error" and str(exc) in r["message"]
        # The rest of the workbench still works on the input graph.
        assert w.view["dag"]["num_nodes"] == w.graph.num_nodes
        assert send(w, "select", node=node_id(w, "relu"))["type"] == "ok"
        assert send(w, "add_buffer", name="extra", size_bytes=64)["type"] == "ok"
        with pytest.raises(InvalidPlan, match="no plan to trace"):
            w.chrome_trace()


class TestSimulator:
    def test_step_back_run_reset(self) -> None:
        w = Workbench(quick_start())
        w.load_passes()
        assert w.view["sim"]["available"], w.session.notes
        n = len(w.view["sim"]["steps"])
        assert send(w, "sim", action="step")["type"] == "ok"
        assert w.sim_position == 0 and w.sim_state["position"] == 0
        first = w.sim_state["highlight"]
        assert send(w, "sim", action="step")["type"] == "ok"
        assert w.sim_position == 1 and w.sim_state["highlight"] != first
        assert send(w, "sim", action="back")["type"] == "ok"
        assert w.sim_position == 0 and w.sim_state["highlight"] == first
        assert send(w, "sim", action="run")["type"] == "ok"
        assert w.sim_state["finished"] and w.sim_position == n - 1
        assert send(w, "sim", action="step")["type"] == "error"
        assert send(w, "sim", action="reset")["type"] == "ok"
        assert w.sim_position == -1 and w.sim_state["highlight"] == []

    def test_race_messages_number_the_real_plans_steps(self) -> None:
        # With an event dropped the simulator runs a copy of the plan with fewer steps; the
        # panel lists the real plan, so each race's text is formatted from its fields with
        # the real step numbers (no text is parsed back).
        w = Workbench(transformer_block(1), max_streams=4)
        w.load_passes()
        assert send(w, "sim_config", drop_event=0)["type"] == "ok"
        send(w, "sim", action="run")
        races = w.sim_state["races"]
        assert races
        steps = w.session.plan.steps
        for r in races:
            real = steps[r["step"]]
            assert f"step {r['step']} {real.name!r} on stream {int(real.stream)}" in r["message"]

    def test_step_does_not_resend_the_graph(self) -> None:
        w = Workbench(quick_start())
        w.load_passes()
        view, dag = copy.deepcopy(w.view), w.dag
        send(w, "sim", action="step")
        assert w.view == view and w.dag == dag
        assert w.sim_state["position"] == 0

    def test_run_to_breakpoint(self) -> None:
        w = Workbench(quick_start())
        down = node_id(w, "download")
        assert send(w, "sim", action="run", breakpoint=down)["type"] == "ok"
        steps = w.view["sim"]["steps"]
        # Stops before the breakpoint's step: the step before it is the current one.
        assert steps[w.sim_position + 1]["node"] == down

    def test_inspect(self) -> None:
        w = Workbench(quick_start())
        send(w, "sim", action="step")  # the upload fills `input`
        bid = int(w.session.final_graph.buffer_by_name("input").id)
        assert send(w, "inspect", buffer=bid)["type"] == "ok"
        info = w.inspector
        values = w.session.sim.buffer("input")
        assert info["name"] == "input" and info["count"] == values.size
        assert info["min"] == pytest.approx(float(values.min()))
        assert sum(info["hist"]) == values.size
        assert len(w.inspector_values) == 8 * min(values.size, 4096)


BAD_MESSAGES: list[dict[str, Any]] = [
    {"type": "teleport"},
    {"type": "select"},
    {"type": "select", "node": "relu"},
    {"type": "select", "node": 999},
    {"type": "select", "node": 1, "extra": 1},
    {"type": "set_pass", "index": 99},
    {"type": "set_pass", "index": -1},
    {"type": "inspect", "buffer": 999},
    {"type": "set_memory_mode", "mode": "magic"},
    {"type": "set_stream_mode", "mode": "warp"},
    {"type": "add_dependency", "src": 3, "dst": 0},  # closes a cycle
    {"type": "add_dependency", "src": 0, "dst": 999},
    {"type": "add_dependency", "src": 1, "dst": 1},
    {"type": "delete", "node": 999},
    {"type": "delete", "buffer": 0},  # in use
    {"type": "rename", "node": 999, "name": "x"},
    {"type": "rename", "buffer": 0, "name": "output"},  # duplicate
    {"type": "rename", "node": 1, "name": ""},
    {"type": "add_buffer", "name": "input", "size_bytes": 64},  # duplicate
    {"type": "add_buffer", "name": "odd", "size_bytes": 3},
    {"type": "add_buffer", "name": "neg", "size_bytes": -4},
    {"type": "add_kernel", "name": "k", "inputs": ["nope"], "outputs": ["mid"], "grid": [1], "block": [1]},
    {"type": "add_kernel", "name": "k", "inputs": [], "outputs": ["mid"], "grid": [1], "block": [2048]},
    {"type": "add_kernel", "name": "k", "op": "no_such_op", "inputs": [], "outputs": ["mid"], "grid": [1], "block": [1]},
    {"type": "add_kernel", "name": "k", "inputs": [], "outputs": [], "grid": [1], "block": [1]},
    {"type": "add_memcpy", "name": "c", "src": "nope", "direction": "d2h"},
    {"type": "add_memcpy", "name": "c", "direction": "d2d"},
    {"type": "add_kernel", "name": "k", "inputs": ["x" * 250] * 200, "outputs": ["mid"],
     "grid": [1], "block": [1]},  # huge payload
    {"type": "sim", "action": "run", "breakpoint": 999},
    {"type": "set_options"},
    {"type": "set_options", "max_streams": 0},
    {"type": "set_options", "max_streams": 33},
    {"type": "set_options", "max_streams": 10**30},
    {"type": "set_options", "max_streams": "2"},
    {"type": "set_options", "max_streams": True},
    {"type": "set_options", "max_streams": 2, "fusion": "no"},  # one bad field: nothing changes
    {"type": "set_options", "max_group_size": 0, "fusion": False},
    {"type": "set_options", "max_streams": 1, "colour": "red"},
    {"type": "sim_config"},
    {"type": "sim_config", "policy": "chaos"},
    {"type": "sim_config", "drop_event": 0},  # the quick start has no events
    {"type": "sim_config", "drop_event": True},
    {"type": "sim_config", "drop_event": "0"},
    {"type": "sim_config", "policy": "random", "drop_event": 5},  # one bad field
]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_MESSAGES, ids=lambda m: m["type"])
def test_bad_message_changes_nothing(bad: dict[str, Any]) -> None:
    w = Workbench(quick_start())
    before = snapshot(w)
    reply = w.handle_message({"request_id": "bad1", **bad})
    assert reply["type"] == "error", reply
    assert reply["request_id"] == "bad1" and reply["message"]
    assert snapshot(w) == before
    assert w.errors[-1]["message"] == reply["message"]


def test_edits_refused_past_the_input() -> None:
    w = Workbench(quick_start())
    w.load_passes()
    send(w, "set_pass", index=len(w.view["passes"]["entries"]) - 1)
    assert w.pass_index > 0
    before = snapshot(w)
    assert send(w, "add_buffer", name="x2", size_bytes=64)["type"] == "error"
    assert snapshot(w) == before
    assert not w.view["editable"]


def test_errors_are_capped() -> None:
    w = Workbench(quick_start())
    for _ in range(30):
        send(w, "teleport")
    assert len(w.errors) == 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                [
                    "select",
                    "delete",
                    "rename",
                    "add_dependency",
                    "inspect",
                    "set_pass",
                    "set_options",
                    "sim_config",
                ]
            )
        },
        optional={
            "node": st.integers(-3, 12),
            "buffer": st.integers(-3, 12),
            "src": st.integers(-3, 12),
            "dst": st.integers(-3, 12),
            "index": st.integers(-3, 5),
            "name": st.text(max_size=6),
            "max_streams": st.integers(-2, 40) | st.booleans() | st.just("2"),
            "fusion": st.booleans() | st.integers(0, 1) | st.none(),
            "max_group_size": st.integers(-2, 70) | st.booleans(),
            "policy": st.sampled_from([*POLICIES, "chaos"]) | st.none() | st.integers(0, 1),
            "drop_event": st.integers(-2, 8) | st.none() | st.booleans() | st.just("1"),
        },
    )
)
def test_random_messages_never_raise(message: dict[str, Any]) -> None:
    """Any request gets a reply; an error reply leaves the state as it was."""
    w = Workbench(quick_start())
    before = snapshot(w)
    reply = w.handle_message(message)
    assert reply["type"] in ("ok", "error")
    if reply["type"] == "error":
        assert snapshot(w) == before
        assert "internal error" not in reply["message"]


def stable(view: dict[str, Any]) -> dict[str, Any]:
    """The view without wall times (the passes' seconds differ from run to run)."""
    v = copy.deepcopy(view)
    if v.get("passes", {}).get("available"):
        for e in v["passes"]["entries"]:
            e.pop("seconds")
    return v


PASS_SECTIONS = ("passes", "memory", "streams", "sim")
# Python-side accesses that need the pass pipeline: each runs it on the spot.
ON_DEMAND: dict[str, Any] = {
    "plan": lambda w: w.plan,
    "chrome_trace": lambda w: w.chrome_trace(),
    "pass_index": lambda w: setattr(w, "pass_index", 1),
    "memory_mode": lambda w: setattr(w, "memory_mode", "exact"),
    "stream_mode": lambda w: setattr(w, "stream_mode", "stream"),
    "set_pass": lambda w: send(w, "set_pass", index=1),
    "sim": lambda w: send(w, "sim", action="step"),
    "inspect": lambda w: send(w, "inspect", buffer=0),
    "plan_memory": lambda w: send(w, "plan_memory"),
}


class TestProgressive:
    """The constructor syncs the input DAG only; the passes follow on request or on demand."""

    def test_opens_with_the_input_dag_and_pending_pass_views(self, w: Workbench) -> None:
        assert not w.session.loaded  # the constructor did not run the pipeline
        assert w.view["pending"] and not w.passes_loaded
        for k in PASS_SECTIONS:
            assert w.view[k] == {"available": False, "reason": PENDING, "pending": True}
        assert w.view["dag"]["num_nodes"] == w.graph.num_nodes and w.view["editable"]
        assert ["plan", PENDING] in w.view["summary"]
        assert w.sim_state == {}

    def test_load_passes_fills_the_same_views_as_an_eager_workbench(self, w: Workbench) -> None:
        eager = Workbench(quick_start(), progressive=False)
        assert not eager.view["pending"] and eager.passes_loaded
        dag = w.dag
        r = send(w, "load_passes")
        assert r["type"] == "ok" and "passes computed" in r["message"]
        assert stable(w.view) == stable(eager.view)
        assert w.dag == dag == eager.dag and w.sim_state == eager.sim_state
        assert w.passes_loaded and w.timings["passes_s"] > 0
        before = snapshot(w)
        assert send(w, "load_passes")["message"].startswith("passes computed in ")
        assert snapshot(w) == before

    @pytest.mark.parametrize("access", ON_DEMAND.values(), ids=ON_DEMAND.keys())
    def test_python_access_runs_the_passes_on_demand(self, w: Workbench, access: Any) -> None:
        reply = access(w)
        assert not (isinstance(reply, dict) and reply.get("type") == "error"), reply
        assert w.passes_loaded and not w.view["pending"]
        assert all(not w.view[k].get("pending") for k in PASS_SECTIONS)

    def test_refused_request_leaves_the_views_pending(self, w: Workbench) -> None:
        before = snapshot(w)
        assert send(w, "set_pass", index=99)["type"] == "error"
        assert snapshot(w) == before and w.view["pending"]
        assert send(w, "load_passes")["type"] == "ok"
        assert not w.view["pending"] and w.view["passes"]["available"]

    def test_edit_before_the_passes_load(self, w: Workbench) -> None:
        assert send(w, "add_buffer", name="extra", size_bytes=256)["type"] == "ok"
        assert w.view["pending"] and not w.session.loaded
        assert "extra" in [b["name"] for b in w.view["buffers"]]
        send(w, "load_passes")
        eager = Workbench(w.graph, progressive=False)
        assert stable(w.view) == stable(eager.view)

    def test_edit_after_the_passes_load_waits_for_the_next_request(self, w: Workbench) -> None:
        w.load_passes()
        assert send(w, "add_buffer", name="extra", size_bytes=256)["type"] == "ok"
        assert w.view["pending"] and not w.passes_loaded
        w.load_passes()
        assert "not planned yet" in w.view["memory"]["reason"]  # the slider is at the input
        w.pass_index = memory_stage(w)
        assert w.view["memory"]["available"]

    def test_graph_setter_past_the_input_keeps_the_slider(self) -> None:
        w = Workbench(transformer_block(1))
        w.pass_index = 2
        w.graph = transformer_block(2)
        assert w.pass_index == 2 and not w.view["pending"]
        w.pass_index = 0
        w.graph = transformer_block(1)
        assert w.view["pending"]

    def test_eager_edits_stay_eager(self) -> None:
        w = Workbench(quick_start(), progressive=False)
        assert send(w, "add_buffer", name="extra", size_bytes=256)["type"] == "ok"
        assert not w.view["pending"] and w.view["passes"]["available"]
        w.pass_index = memory_stage(w)
        assert w.view["memory"]["available"]


MESSAGES = st.one_of(
    st.fixed_dictionaries({"type": st.just("select"), "node": st.integers(-1, 6)}),
    st.fixed_dictionaries({"type": st.just("set_pass"), "index": st.integers(-1, 6)}),
    st.fixed_dictionaries({"type": st.just("sim"), "action": st.sampled_from(["step", "back", "run", "reset"])}),
    st.fixed_dictionaries({"type": st.just("inspect"), "buffer": st.integers(-1, 4)}),
    st.fixed_dictionaries({"type": st.just("set_memory_mode"), "mode": st.sampled_from(["heuristic", "exact"])}),
    st.fixed_dictionaries({"type": st.just("set_stream_mode"), "mode": st.sampled_from(["graph", "stream"])}),
    st.fixed_dictionaries({"type": st.just("add_buffer"), "name": st.sampled_from(["b1", "b2", "input"]), "size_bytes": st.just(256)}),
    st.fixed_dictionaries({"type": st.just("delete"), "node": st.integers(0, 5)}),
    st.fixed_dictionaries({"type": st.sampled_from(["load_passes", "plan_memory"])}),
    st.fixed_dictionaries({"type": st.just("set_options")}, optional={"max_streams": st.integers(0, 5), "fusion": st.booleans(), "max_group_size": st.integers(1, 3)}),
    st.fixed_dictionaries({"type": st.just("sim_config")}, optional={"policy": st.sampled_from(["round_robin", "adversarial", "x"]), "drop_event": st.none() | st.integers(0, 1)}),
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGES, max_size=6))
def test_progressive_behaves_like_eager(messages: list[dict[str, Any]]) -> None:
    """Any sequence of requests gets the same replies and leaves the same state whether the
    passes ran in the constructor or on request; only `pending` tells them apart."""
    lazy, eager = Workbench(quick_start()), Workbench(quick_start(), progressive=False)
    for m in messages:
        a, b = (x.handle_message({"request_id": "p", **m}) for x in (lazy, eager))
        assert a["type"] == b["type"], (m, a, b)
        if a["type"] == "error" or m["type"] != "load_passes":
            assert a["message"] == b["message"]
        for k in ("selection", "pass_index", "sim_position", "memory_mode", "stream_mode",
                  "details", "inspector", "inspector_values", "errors", "max_streams", "fusion",
                  "max_group_size"):  # fmt: skip
            assert getattr(lazy, k) == getattr(eager, k), k
        assert lazy.graph == eager.graph and lazy.dag == eager.dag
        if not lazy.view["pending"]:
            assert stable(lazy.view) == stable(eager.view)
            assert lazy.sim_state == eager.sim_state
    lazy.load_passes()
    eager.load_passes()
    assert stable(lazy.view) == stable(eager.view)


def last_stage(w: Workbench) -> None:
    w.pass_index = len(w.session.stages) - 1


class TestOptions:
    """max_streams, fusion and max_group_size: from the constructor, Python and the frontend."""

    def test_raises_bad_constructor_option(self) -> None:
        with pytest.raises(InvalidOption, match="max_streams is 0; choose an integer from 1"):
            Workbench(quick_start(), max_streams=0)
        with pytest.raises(InvalidOption, match="fusion must be True or False"):
            Workbench(quick_start(), fusion="yes")  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        ("name", "value"),
        [("max_streams", 0), ("max_streams", 33), ("max_streams", True), ("max_streams", "2"),
         ("max_streams", 2.0), ("fusion", 0), ("fusion", None), ("max_group_size", 65)],
    )  # fmt: skip
    def test_raises_bad_python_option(self, w: Workbench, name: str, value: Any) -> None:
        w.load_passes()
        before, session = snapshot(w), w.session
        with pytest.raises(InvalidOption, match=name) as info:
            setattr(w, name, value)
        # A GraphError for oxiwork users, a TraitError for traitlets' rollback.
        assert isinstance(info.value, GraphError) and isinstance(info.value, traitlets.TraitError)
        if value is not None:  # None keeps an option in set_options
            with pytest.raises(InvalidOption, match=name):
                w.set_options(**{"max_streams": 2, name: value})  # the good one is not applied
        assert snapshot(w) == before and w.session is session

    def test_defaults(self, w: Workbench) -> None:
        assert (w.max_streams, w.fusion, w.max_group_size) == (4, True, 16)
        assert w.options == {"max_streams": 4, "fusion": True, "max_group_size": 16}

    @pytest.mark.parametrize("how", ["constructor", "trait", "set_options", "message"])
    def test_streams_change_the_plan_and_the_stream_view(self, how: str) -> None:
        counts = {}
        for n in (1, 4):
            if how == "constructor":
                w = Workbench(transformer_block(1), max_streams=n)
            else:
                w = Workbench(transformer_block(1), max_streams=3)
                if how == "trait":
                    w.max_streams = n
                elif how == "set_options":
                    assert w.set_options(max_streams=n)
                else:
                    reply = send(w, "set_options", max_streams=n)
                    assert reply["type"] == "ok" and reply["message"].startswith(f"options: {n} ")
            last_stage(w)
            assert w.options["max_streams"] == w.max_streams == n
            assert w.view["streams"]["num_streams"] == len(w.view["streams"]["lanes"])
            counts[n] = (w.plan.num_streams, w.view["streams"]["num_streams"])
        assert counts[1] == (1, 1)
        assert counts[4][0] == counts[4][1] > 1

    def test_fusion_off(self) -> None:
        w = Workbench(transformer_block(1))
        assert w.plan.kernel_count_fused < w.plan.kernel_count_original
        assert send(w, "set_options", fusion=False)["message"] == "options: 4 streams, fusion off"
        assert w.plan.kernel_count_fused == w.plan.kernel_count_original
        names = [e["name"] for e in w.view["passes"]["entries"]]
        assert "fusion" not in names and names[0] == "input"
        assert all(
            not st.graph.node(n.id).fused_from for st in w.session.stages for n in st.graph.nodes
        )
        # The plan runs the input's kernels one for one.
        kernels = {n.name for n in w.graph.nodes if n.kind.value == "kernel"}
        assert kernels <= {s.name for s in w.plan.steps}

    def test_group_size_limits_fusion(self) -> None:
        w = Workbench(transformer_block(1), max_group_size=1)
        one = w.plan.kernel_count_fused
        w.max_group_size = 16
        assert w.plan.kernel_count_fused < one

    def test_unchanged_options_change_nothing(self, w: Workbench) -> None:
        w.load_passes()
        before, session = snapshot(w), w.session
        reply = send(w, "set_options", max_streams=4, fusion=True)
        assert reply["message"] == "options unchanged: 4 streams, fusion on (groups ≤ 16)"
        assert snapshot(w) == before and w.session is session
        assert not w.set_options()

    def test_at_the_input_the_passes_wait_for_the_frontend(self, w: Workbench) -> None:
        w.load_passes()
        assert send(w, "set_options", max_streams=1, fusion=False)["type"] == "ok"
        assert w.view["pending"] and not w.session.loaded and w.pass_index == 0
        assert w.max_streams == 1 and not w.fusion
        send(w, "load_passes")
        eager = Workbench(quick_start(), max_streams=1, fusion=False, progressive=False)
        assert stable(w.view) == stable(eager.view)

    def test_eager_workbench_replans_at_once(self) -> None:
        w = Workbench(quick_start(), progressive=False)
        w.fusion = False
        assert not w.view["pending"] and w.passes_loaded
        assert [e["name"] for e in w.view["passes"]["entries"]] == ["input", "streams", "memory"]

    def test_slider_stays_on_the_same_pass(self) -> None:
        w = Workbench(transformer_block(1))
        last_stage(w)
        assert w.session.stages[w.pass_index].name == "memory"
        w.fusion = False
        assert w.session.stages[w.pass_index].name == "memory" and not w.view["pending"]
        w.fusion = True
        assert w.session.stages[w.pass_index].name == "memory"

    def test_slider_clamps_when_its_pass_is_gone(self) -> None:
        w = Workbench(transformer_block(1))
        w.pass_index = 1  # the fusion pass
        fused = next(n for n in w.session.stages[1].graph.nodes if n.fused_from)
        w.selection = int(fused.id)
        send(w, "sim", action="step")
        assert w.sim_position == 0
        w.fusion = False
        assert w.pass_index == 1 and w.session.stages[1].name == "streams"
        assert w.view["dag"]["pass_index"] == 1
        assert w.selection == -1 and w.details == {}  # the fused kernel is not in this plan
        assert w.sim_position == -1 and w.sim_state["executed"] == 0

    def test_selection_kept_when_still_shown(self) -> None:
        w = Workbench(transformer_block(1))
        w.pass_index = 0
        nid = int(w.graph.nodes[3].id)
        w.selection = nid
        w.max_streams = 2
        assert w.selection == nid and w.details["id"] == nid


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.fixed_dictionaries(
                {},
                optional={"max_streams": st.integers(1, 5), "fusion": st.booleans(),
                          "max_group_size": st.integers(1, 4)},
            ),
            st.integers(0, 4),
        ),
        min_size=1,
        max_size=4,
    )
)  # fmt: skip
def test_views_after_option_changes_match_a_fresh_workbench(
    steps: list[tuple[dict[str, Any], int]],
) -> None:
    """Whatever options change and wherever the slider is, every view is what a workbench
    built with those options from the start shows at that position."""
    w = Workbench(transformer_block(1))
    for options, index in steps:
        w.set_options(**options)
        assert 0 <= w.pass_index < max(1, len(w.view["passes"].get("entries", [None])))
        send(w, "set_pass", index=min(index, len(w.session.stages) - 1))
    fresh = Workbench(transformer_block(1), progressive=False, **w.options)
    fresh.pass_index = w.pass_index
    w.load_passes()
    assert w.session.options == fresh.session.options
    assert stable(w.view) == stable(fresh.view) and w.dag == fresh.dag
    assert w.sim_state == fresh.sim_state


# ---------------------------------------------------------------------- the race lab
@pytest.fixture(scope="module")
def tb() -> Workbench:
    """The transformer block on 4 streams: 6 events. Shared: every test starts with
    sim_config, which rebuilds and resets the simulator."""
    w = Workbench(transformer_block(1), max_streams=4, progressive=False)
    assert w.session.events, "the race lab needs a plan with events"
    return w


def run_to_end(w: Workbench) -> None:
    reply = send(w, "sim", action="run")
    assert reply["type"] == "ok", reply
    assert w.sim_state["finished"]


class TestRaceLab:
    @pytest.mark.parametrize(
        ("fields", "match"),
        [
            ({"policy": "chaos"}, "expected one of: in_order, round_robin, random, adversarial"),
            ({"drop_event": 6}, "drop_event is 6, which is not an event of this plan; its events are 0 to 5"),
            ({"drop_event": -1}, "not an event of this plan"),
            ({"drop_event": True}, "integer"),
            ({"drop_event": "1"}, "integer"),
            ({"policy": "random", "drop_event": 99}, "not an event"),
            ({}, "at least one of: policy, drop_event"),
        ],
    )  # fmt: skip
    def test_raises_bad_config_changes_nothing(
        self, tb: Workbench, fields: dict[str, Any], match: str
    ) -> None:
        tb.sim_config(policy="round_robin", drop_event=1)
        send(tb, "sim", action="step")
        before = snapshot(tb)
        reply = send(tb, "sim_config", **fields)
        assert reply["type"] == "error" and match in reply["message"], reply
        assert snapshot(tb) == before
        assert tb.sim_settings == {"policy": "round_robin", "drop_event": 1}
        assert tb.errors[-1]["message"] == reply["message"]

    @pytest.mark.parametrize(
        "kwargs", [{"policy": "chaos"}, {"drop_event": 6}, {"drop_event": False}, {"policy": None}]
    )
    def test_raises_bad_python_config(self, tb: Workbench, kwargs: dict[str, Any]) -> None:
        tb.sim_config(policy="in_order", drop_event=None)
        before = snapshot(tb)
        with pytest.raises(GraphError, match=r"policy|drop_event"):
            tb.sim_config(**kwargs)
        assert snapshot(tb) == before

    def test_raises_without_a_plan(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def build(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
            raise InvalidPlan("pass 'memory' failed")

        monkeypatch.setattr(ExecutionPlan, "build", classmethod(build))
        w = Workbench(quick_start(), progressive=False)
        before = snapshot(w)
        reply = send(w, "sim_config", policy="random")
        assert reply["type"] == "error" and w.session.notes["sim"] in reply["message"]
        assert snapshot(w) == before

    def test_menu_lists_policies_and_events(self, tb: Workbench) -> None:
        sim = tb.view["sim"]
        assert sim["policies"] == list(POLICIES)
        assert [e["event"] for e in sim["events"]] == sorted(tb.session.events)
        e0 = sim["events"][0]
        steps = tb.plan.steps
        assert e0["label"].startswith(f"e0: {steps[e0['steps'][0]].name} s0 → wait s")
        assert {steps[i].event for i in e0["steps"]} == {0}

    @pytest.mark.parametrize("policy", POLICIES)
    def test_correct_plan_has_no_race_and_matching_outputs(
        self, tb: Workbench, policy: str
    ) -> None:
        text = tb.sim_config(policy=policy, drop_event=None)
        assert text == f"simulator: {policy} policy, every event kept; reset"
        assert tb.sim_state["verdict"] is None  # not run yet
        run_to_end(tb)
        state = tb.sim_state
        assert state["races"] == []
        # A plain run (the plan in plan order) is the reference itself: nothing to compare.
        assert state["verdict"] == (
            None
            if policy == "in_order"
            else {"match": True, "text": "outputs still match the correct plan", "buffers": []}
        )
        assert sorted(state["executed_steps"]) == list(range(len(tb.plan.steps)))

    def test_dropped_event_races_and_wrong_outputs(self, tb: Workbench) -> None:
        reply = send(tb, "sim_config", policy="adversarial", drop_event=0)
        assert reply["type"] == "ok" and "event 0 dropped" in reply["message"]
        state = tb.sim_state
        assert state["policy"] == "adversarial" and state["drop_event"] == 0
        assert state["dropped_steps"] == list(tb.session.events[0])
        assert state["position"] == -1 and tb.sim_position == -1
        # The static analysis finds the races before anything runs.
        assert state["races"] and not any(r["observed"] for r in state["races"])
        run_to_end(tb)
        state = tb.sim_state
        assert any(r["manifested"] for r in state["races"])
        verdict = state["verdict"]
        assert verdict["match"] is False
        [diff] = verdict["buffers"]
        assert diff["name"] == "L0_resid2_59" and diff["max_abs_diff"] > 1
        assert verdict["text"].startswith("outputs differ from the correct plan: L0_resid2_59 (")
        # Race reports name steps of the real plan (what the panel lists), in their
        # messages too.
        for r in state["races"]:
            step = tb.plan.steps[r["step"]]
            assert step.node == r["node"]
            assert f"step {r['step']} {step.name!r} on stream {int(step.stream)}" in r["message"]
        raw = [*tb.session.sim.races, *tb.session.sim.static_races]
        assert any(r["step"] != x.second for r, x in zip(state["races"], raw, strict=True))
        # Back one step: the run is not finished, so there is no verdict.
        assert send(tb, "sim", action="back")["type"] == "ok"
        assert tb.sim_state["verdict"] is None
        # Restoring the event gives the correct plan back.
        tb.sim_config(drop_event=None)
        assert tb.sim_settings == {"policy": "adversarial", "drop_event": None}
        run_to_end(tb)
        assert tb.sim_state["verdict"]["match"] and tb.sim_state["races"] == []

    def test_races_are_capped_and_counted(
        self, tb: Workbench, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        import oxiwork.widget.workbench as wb

        monkeypatch.setattr(wb, "MAX_RACES", 1)  # the state is synced on every step
        tb.sim_config(policy="adversarial", drop_event=0)
        state = tb.sim_state
        total = len(tb.session.sim.races) + len(tb.session.sim.static_races)
        assert total > 1 and len(state["races"]) == 1 and state["races_total"] == total

    def test_breakpoint_on_a_dropped_step(self, tb: Workbench) -> None:
        tb.sim_config(policy="in_order", drop_event=2)
        record = tb.plan.steps[tb.session.events[2][0]].node
        before = snapshot(tb)
        reply = send(tb, "sim", action="run", breakpoint=int(record))
        assert reply["type"] == "error" and "which the simulator drops" in reply["message"]
        assert snapshot(tb) == before

    def test_replanning_resets_the_settings(self) -> None:
        w = Workbench(transformer_block(1), max_streams=4)
        w.sim_config(policy="random", drop_event=3)
        assert w.sim_settings == {"policy": "random", "drop_event": 3}
        w.set_options(max_streams=3)
        assert w.sim_settings == {"policy": "in_order", "drop_event": None}
        w.load_passes()
        assert w.sim_state["policy"] == "in_order" and w.sim_state["dropped_steps"] == []
        assert w.session.sim.plan is w.session.plan

    def test_progressive_workbench_loads_its_views(self) -> None:
        w = Workbench(transformer_block(1), max_streams=4)
        assert w.view["pending"]
        assert send(w, "sim_config", policy="round_robin")["type"] == "ok"
        assert not w.view["pending"] and w.sim_state["policy"] == "round_robin"


@functools.cache
def shared_tb() -> Workbench:
    """One transformer workbench for the property test below (sim_config resets it)."""
    return Workbench(transformer_block(1), max_streams=4, progressive=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(POLICIES),
    event=st.none() | st.integers(0, 5),
    actions=st.lists(st.sampled_from(["step", "step", "step", "back", "run"]), max_size=12),
)
def test_highlight_is_the_step_that_ran(policy: str, event: int | None, actions: list[str]) -> None:
    """Whatever is dropped and however the streams interleave, the position every view
    highlights is the real plan's step of the node the simulator ran last, and dropped
    record/wait steps never run."""
    w = shared_tb()
    w.sim_config(policy=policy, drop_event=event)
    plan = w.plan
    shown_last = w.pass_index == len(w.session.stages) - 1
    for a in actions:
        reply = send(w, "sim", action=a)
        state, sim = w.sim_state, w.session.sim
        if reply["type"] == "error":  # stepping past the end or back before the start
            assert "finished" in reply["message"] or "start" in reply["message"]
        history = sim.history
        assert state["executed"] == len(history)
        assert state["executed_steps"] == [w.session.plan_step(st.index) for st in history]
        if not history:
            assert state["position"] == w.sim_position == -1
            continue
        pos = state["position"]
        assert pos == w.sim_position
        assert plan.steps[pos].node == history[-1].node
        assert plan.steps[pos].name == history[-1].name
        assert not set(state["executed_steps"]) & set(state["dropped_steps"])
        if shown_last:
            assert int(history[-1].node) in state["highlight"]
    if w.sim_state["finished"]:
        done = set(w.sim_state["executed_steps"]) | set(w.sim_state["dropped_steps"])
        assert done == set(range(len(plan.steps)))


class TestOneDefinitionPerFigure:
    """Issue 15 (5) and issue 11: every figure has one definition, shown with its name."""

    def test_memory_chart_is_the_pass_plan_for_the_plans_schedule(self) -> None:
        # Re-planning transformer_block(1) on 4 streams with one-order liveness gave 98,304 B,
        # below the pass's proven bound of 114,688 B for that schedule (and racing).
        w = Workbench(transformer_block(1), max_streams=4, progressive=False)
        w.pass_index = memory_stage(w)
        bound = w.plan.memory.lower_bound
        for mode in ("heuristic", "exact"):
            w.memory_mode = mode
            mem = w.view["memory"]
            assert mem["mode"] == mode and mem["lower_bound_bytes"] == bound
            assert mem["arena_bytes"] >= bound

    def test_memory_waits_for_the_memory_pass_on_the_slider(self) -> None:
        w = Workbench(transformer_block(1), progressive=False)
        at = memory_stage(w)
        for i in range(len(w.session.stages)):
            w.pass_index = i
            mem = w.view["memory"]
            assert mem["available"] == (i >= at)
            if i < at:
                assert mem["reason"].startswith("not planned yet")

    def test_header_and_details_count_the_same_buffers(self) -> None:
        w = Workbench(transformer_block(1), progressive=False)
        for i, stage in enumerate(w.session.stages):
            w.pass_index = i
            summary = dict(w.view["summary"])
            n = w.view["dag"]["num_buffers"]
            assert n == len(stage.graph.buffers) and summary["buffers"].startswith(f"{n} ·")

    def test_plan_row_is_plural_only_when_it_should_be(self) -> None:
        w = Workbench(quick_start(), max_streams=1, progressive=False)
        assert dict(w.view["summary"])["plan"].startswith("3 steps on 1 stream ·")

    def test_streams_view_names_its_figures(self) -> None:
        w = Workbench(transformer_block(1), max_streams=4, progressive=False)
        w.pass_index = len(w.session.stages) - 1
        st = w.view["streams"]
        plan = w.plan
        assert st["schedule"] == plan.streams.makespan
        assert st["launches"] == sum(
            1 for s in plan.steps if s.kind.value in ("kernel", "memcpy", "memset")
        )
        # The stream mode is host-bound when launches x overhead exceed the device work.
        assert st["totals"]["stream"] >= st["launches"] * st["overheads"]["stream"]


class TestStepNumbers:
    """Issue 15 (1): step i is plan.steps[i] in every message, list and header."""

    def test_messages_name_the_plan_step_the_panel_shows(self) -> None:
        w = Workbench(quick_start(), progressive=False)
        for k in range(3):
            r = send(w, "sim", action="step")
            pos = w.sim_state["position"]
            assert pos == k == w.sim_position
            assert r["message"] == f"ran step {pos} ({w.plan.steps[pos].name})"
        r = send(w, "sim", action="back")
        assert r["message"] == f"undid step 2 ({w.plan.steps[2].name})"
        assert w.sim_state["position"] == 1

    def test_dropped_event_keeps_real_plan_numbers(self) -> None:
        w = Workbench(transformer_block(1), max_streams=4, progressive=False)
        w.sim_config(drop_event=0)
        for _ in range(6):
            r = send(w, "sim", action="step")
            pos = w.sim_state["position"]
            assert r["message"] == f"ran step {pos} ({w.plan.steps[pos].name})"

    def test_run_to_selected_says_so_without_api_names(self) -> None:
        w = Workbench(quick_start(), progressive=False)
        target = w.plan.steps[2].node
        r = send(w, "sim", action="run", breakpoint=int(target))
        assert r["message"] == f"stopped before step 2 ({w.plan.steps[2].name}): the selected node"
        assert "break_on_node" not in r["message"]
        assert send(w, "sim", action="run")["message"] == "ran to the end: every step executed"

    def test_races_carry_both_steps(self) -> None:
        w = Workbench(transformer_block(1), max_streams=4, progressive=False)
        w.sim_config(policy="adversarial", drop_event=0)
        send(w, "sim", action="run")
        races = w.sim_state["races"]
        assert races
        steps = w.plan.steps
        for r in races:
            assert r["first"] < r["step"]
            assert steps[r["first"]].node == r["first_node"] and steps[r["step"]].node == r["node"]


class TestSavedNotebook:
    """Issue 15 (10): a notebook executed without a browser saves every view, and the bundle."""

    def test_headless_execution_saves_the_pipelines_views_and_the_bundle(
        self, tmp_path: pytest.TempPathFactory
    ) -> None:
        nbformat = pytest.importorskip("nbformat")
        nbclient = pytest.importorskip("nbclient")
        import os
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        nb = nbformat.v4.new_notebook()
        nb.cells = [
            nbformat.v4.new_code_cell(
                "from oxiwork import Workbench\nfrom oxiwork.examples import quick_start\n"
                "w = Workbench(quick_start())\nw"
            )
        ]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        old = dict(os.environ)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), old.get("PYTHONPATH")]))
        try:
            nbclient.NotebookClient(
                nb, timeout=120, kernel_name="python3", store_widget_state=True
            ).execute()
        finally:
            os.environ.clear()
            os.environ.update(old)
        state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        ours = [m["state"] for m in state.values() if "view" in m["state"]]
        assert len(ours) == 1
        saved = ours[0]
        assert saved["view"]["pending"] is False
        assert [e["name"] for e in saved["view"]["passes"]["entries"]][:2] == ["input", "fusion"]
        assert saved["view"]["sim"]["available"] is True
        # Every stage, so the saved page's pass slider works without a kernel.
        stages = saved["saved_stages"]["stages"]
        assert [stage["dag"]["title"] for stage in stages] == [
            "input graph" if i == 0 else f"after {e['name']}"
            for i, e in enumerate(saved["view"]["passes"]["entries"])
        ]
        # The bundle itself, not a URL: the saved state renders without a network.
        esm = saved["_esm"]
        assert "owColumn" in esm and "://" not in esm.split("\n", 1)[0]


class TestSaveStages:
    """Every stage's view in the synced state, for notebooks saved as HTML."""

    def test_each_stage_equals_the_view_at_that_slider_stop(self) -> None:
        w = Workbench(transformer_block(1))
        w.save_stages()
        saved = w.saved_stages
        for i, stage in enumerate(saved["stages"]):
            send(w, "set_pass", index=i)
            for key in ("dag", "summary", "editable", "edit_reason"):
                assert stage[key] == w.view[key]
            assert saved["sections"][stage["memory"]] == w.view["memory"]
            assert saved["sections"][stage["streams"]] == w.view["streams"]
            assert saved["dags"][i] == w.dag
        # the plan's memory and stream sections are stored once for the stages sharing them
        assert len(saved["sections"]) < 2 * len(saved["stages"])

    def test_a_change_of_options_clears_them(self) -> None:
        w = Workbench(quick_start())
        w.save_stages()
        assert w.saved_stages["stages"]
        w.set_options(max_streams=1)
        assert w.saved_stages == {}


class TestSweep:
    """Issue 14: the workbench shows oxiwork.explore.sweep; a point's options plan it."""

    def test_sweep_request_fills_the_chart_and_a_point_switches_the_plan(self) -> None:
        w = Workbench(transformer_block(1), progressive=False)
        r = send(w, "sweep")
        assert r["type"] == "ok" and "on the Pareto front" in r["message"]
        rows = w.sweep_table["rows"]
        assert {(x["max_streams"], x["fusion"]) for x in rows} == {
            (m, f) for m in (1, 2, 4, 8) for f in (True, False)
        }
        # no row on the front is dominated by another (explore's own property, as synced)
        for a in (x for x in rows if x["pareto"]):
            assert not any(
                b["makespan"] <= a["makespan"] and b["arena_bytes"] <= a["arena_bytes"]
                and (b["makespan"], b["arena_bytes"]) != (a["makespan"], a["arena_bytes"])
                for b in rows
            )  # fmt: skip
        # what clicking the point sends: that setting's options; the plan follows
        pick = next(x for x in rows if not x["fusion"] and x["max_streams"] == 1)
        send(w, "set_options", max_streams=1, fusion=False, max_group_size=pick["max_group_size"])
        assert (w.plan.num_streams, w.plan.kernel_count_fused) == (1, pick["kernel_count"])
        assert w.sweep_table["rows"] == rows  # the chart stays to pick another point

    def test_a_new_graph_clears_the_sweep(self) -> None:
        w = Workbench(quick_start())
        w.sweep(max_streams=[1], fusion=[True])
        assert len(w.sweep_table["rows"]) == 1
        w.graph = transformer_block(1)
        assert w.sweep_table == {}

    def test_raises_on_an_empty_list(self) -> None:
        w = Workbench(quick_start())
        with pytest.raises(InvalidArgument, match="at least one value"):
            w.sweep(max_streams=[])
        assert w.sweep_table == {}


class TestPinAndCompare:
    """Issue 15: pin a plan, change the settings, compare the two."""

    def test_pin_then_change_options_compares_both_plans(self) -> None:
        w = Workbench(transformer_block(1), progressive=False)
        r = send(w, "pin")
        assert r["type"] == "ok" and "pinned the plan with 4 stream(s)" in r["message"]
        pinned = dict(w.pinned)
        assert pinned == w.view["figures"]
        w.set_options(max_streams=1, fusion=False)
        w.load_passes()
        now = w.view["figures"]
        assert w.pinned == pinned  # the pin survives re-planning
        assert (pinned["streams"], now["streams"]) == (4, 1)
        assert now["events"] == 0 < pinned["events"]
        assert now["kernels"] == now["kernels_before_fusion"] > pinned["kernels"]
        # The kernel diff has what fusion merged on one side and kept apart on the other.
        assert set(now["kernel_names"]) - set(pinned["kernel_names"])
        assert send(w, "pin", clear=True)["message"] == "unpinned" and w.pinned == {}

    def test_pin_without_a_plan_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def build(cls: type[ExecutionPlan], graph: Any, **options: Any) -> ExecutionPlan:
            raise InvalidPlan("pass 'memory' failed")

        monkeypatch.setattr(ExecutionPlan, "build", classmethod(build))
        w = Workbench(quick_start(), progressive=False)
        r = send(w, "pin")
        assert r["type"] == "error" and "no plan to pin" in r["message"]
        assert w.pinned == {} and w.view["figures"] is None


class TestMessageTexts:
    """Issue 15's "Also" list: what the user reads is about their input, in plain words."""

    def test_a_grid_typed_as_text_is_named_in_the_refusal(self) -> None:
        w = Workbench(quick_start())
        r = send(w, "add_kernel", name="k", op="relu", inputs=["input"], outputs=["mid"],
                 grid=["abc"], block=[256])  # fmt: skip
        assert r["type"] == "error" and "'abc'" in r["message"] and "None" not in r["message"]
