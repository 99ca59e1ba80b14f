"""The course (``notebooks/course/``) runs top to bottom, is stored without outputs, and its
exercise checkers (:mod:`oxiwork.course`) tell a right answer from a wrong one.

Each lesson is executed in a fresh kernel with nbclient, as a reader would run it; its last
cell calls the lesson's checker on the worked solution, so a lesson whose solution no longer
matches the engine fails here. How long each lesson took is printed (``pytest -s``) and
recorded as a test property, never asserted. The checker tests compute the right answers
from the engine by their own route, not from the checker's.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import networkx as nx
import numpy as np
import pytest

from oxiwork import course
from oxiwork.analysis import dominance, topo
from oxiwork.capture import capture
from oxiwork.cost import node_costs
from oxiwork.examples import quick_start, synthetic
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import drop_event
from oxiwork.executor.simulator import SequentialExecutor, Simulator
from oxiwork.executor.timeline import timeline
from oxiwork.executor.update import check_update
from oxiwork.graph import ComputeGraph
from oxiwork.node import MemcpyDir
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory import greedy_by_size, plan_intervals
from oxiwork.reference import evaluate
from tests.notebook_kernel import execute
from tests.test_notebooks import cell_text

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "notebooks" / "course"
LESSONS = sorted(COURSE.glob("[0-9][0-9]_*.ipynb"))


def test_the_course_has_eight_lessons_each_checked_at_its_end() -> None:
    assert [p.name[:2] for p in LESSONS] == [f"{k:02d}" for k in range(1, 9)]
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        assert f"course.check_lesson_{path.name[:2]}(" in code[-1], path.name
        assert 8 <= len(nb.cells) <= 16, (path.name, len(nb.cells))  # short lessons
        assert sum(c.count("Workbench(") for c in code) <= 1, path.name  # one widget at most


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_outputs_are_stripped(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for k, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, (
                f"{path.name} cell {k} has outputs: commit the lessons without them"
            )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.name[:2])
def test_lesson_runs_top_to_bottom_in_a_fresh_kernel(
    path: Path, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    execute(nb, tmp_path)
    seconds = time.perf_counter() - t0
    record_property("seconds", round(seconds, 2))
    print(f"{path.name}: {seconds:.1f} s")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert f"lesson {path.name[:2]}: right." in cell_text(code[-1])
    if path.name.startswith("07"):  # each capture pitfall raises its error in its cell
        out = "".join(map(cell_text, code))
        assert all(e in out for e in ("CaptureUnjoined", "BakedHostValue", "CaptureRace")), out
    noise = [o["text"] for c in code for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not noise, f"{path.name} prints warnings: {noise}"
    figures = sum(1 for c in code for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
    assert figures >= 1, f"{path.name} draws no static figure"


# ----------------------------------------------------------------------- the checkers
def _wrong(check, answer) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(course.WrongAnswer, match=r"^lesson \d\d: not yet\. \S"):
        check(answer)


def _right(check, answer, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    check(answer)
    assert re.match(r"lesson \d\d: right\. ", capsys.readouterr().out)


def test_lesson_01(capsys: pytest.CaptureFixture[str]) -> None:
    plan = ExecutionPlan.build(quick_start(), fusion=False)
    stats = SequentialExecutor(plan).run({"input": np.zeros(1024, np.float32)})
    right = (stats.kernels_launched, plan.pool_bytes)
    _right(course.check_lesson_01, right, capsys)
    fused = ExecutionPlan.build(quick_start())
    _wrong(course.check_lesson_01, (fused.kernel_count_fused, fused.pool_bytes))
    _wrong(course.check_lesson_01, (right[0], right[1] + 256))
    _wrong(course.check_lesson_01, right[0])


def test_lesson_02(capsys: pytest.CaptureFixture[str]) -> None:
    g = course.branches()
    costs = node_costs(g)
    info = topo.analyze(g, costs)
    scale = next(n.id for n in g.nodes if n.name == "scale")

    # Independently: slack is how much longer a node may take before the longest path by
    # cost (networkx) grows.
    def makespan(extra: float) -> float:
        c = dict(costs)
        c[scale] += extra
        dg = nx.DiGraph()
        dg.add_edges_from((("s", n.id) for n in g.nodes), w=0.0)
        dg.add_edges_from(((a, b) for a, b in g.edges))
        dg.add_edges_from((n.id, "t") for n in g.nodes)
        for a, b in dg.edges:
            dg.edges[a, b]["w"] = 0.0 if a == "s" else c[a]
        return nx.dag_longest_path_length(dg, weight="w")

    base = makespan(0.0)
    assert base == pytest.approx(info.makespan)
    lo, hi = 0.0, info.makespan
    for _ in range(60):  # bisect the largest delay that leaves the makespan unchanged
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if makespan(mid) <= base * (1 + 1e-12) else (lo, mid)
    right = lo * 1e6
    assert right > 0
    _right(course.check_lesson_02, right, capsys)
    _wrong(course.check_lesson_02, 0.0)
    _wrong(course.check_lesson_02, costs[scale] * 1e6 if costs[scale] * 1e6 != right else 2 * right)
    _wrong(course.check_lesson_02, right * 1e-6)
    _wrong(course.check_lesson_02, "scale")


def test_lesson_03(capsys: pytest.CaptureFixture[str]) -> None:
    g = course.branches(fusible_middle=False)
    relu = next(n.id for n in g.nodes if n.name == "relu")
    # Independently: the immediate post-dominator is the nearest node every path from
    # relu to a sink passes through (networkx's dominators on the reversed graph).
    rev = nx.DiGraph([(b, a) for a, b in g.edges] + [("end", s) for s in g.sinks()])
    ipdom = g.node(nx.immediate_dominators(rev, "end")[relu]).name
    assert ipdom == g.node(dominance.post_dominators(g).idom[relu]).name
    kernels = len(list(fuse(g).graph.kernels()))
    _right(course.check_lesson_03, (ipdom, kernels), capsys)
    _wrong(course.check_lesson_03, ("tanh", kernels))
    _wrong(course.check_lesson_03, (ipdom, len(list(g.kernels()))))
    _wrong(course.check_lesson_03, ipdom)


def test_lesson_04(capsys: pytest.CaptureFixture[str]) -> None:
    iv = course.read_instance()
    greedy = greedy_by_size(iv)
    exact = plan_intervals(iv, mode="exact")
    assert exact.optimal and exact.arena_bytes < greedy.arena_bytes  # the instance teaches
    right = greedy.arena_bytes - exact.arena_bytes
    _right(course.check_lesson_04, right, capsys)
    _wrong(course.check_lesson_04, greedy.arena_bytes - plan_intervals(iv).arena_bytes)
    _wrong(course.check_lesson_04, 0)


def test_lesson_05(capsys: pytest.CaptureFixture[str]) -> None:
    plan = ExecutionPlan.build(course.branches(), max_streams=2, fusion=False)
    assert plan.event_count >= 2
    x = np.linspace(-2, 2, course.N, dtype=np.float32)
    want = SequentialExecutor(plan).run({"x": x}).outputs["y"]
    # Independently of the static race detector: a dropped event is caught when the
    # adversarial simulator (which delays producers as long as events allow) sees a race.
    caught = set()
    for e in range(plan.event_count):
        sim = Simulator(drop_event(plan, e), {"x": x}, policy="adversarial", verify=False)
        sim.run()
        if sim.races:
            caught.add(e)
            assert not np.array_equal(sim.outputs["y"], want)
    _right(course.check_lesson_05, caught, capsys)
    _wrong(course.check_lesson_05, set())
    _wrong(course.check_lesson_05, caught | {plan.event_count})
    _wrong(course.check_lesson_05, sorted(caught)[1:])


def test_lesson_06(capsys: pytest.CaptureFixture[str]) -> None:
    plan = ExecutionPlan.build(synthetic(100, "chain"), fusion=False)
    graph_launch, stream_launch = (timeline(plan, mode=m).makespan for m in ("graph", "stream"))
    right = (stream_launch - graph_launch) * 1e6
    assert right > 0
    _right(course.check_lesson_06, right, capsys)
    _right(course.check_lesson_06, right * 1.005, capsys)
    _wrong(course.check_lesson_06, right / 1e6)  # seconds, not microseconds
    _wrong(course.check_lesson_06, 0.0)
    _wrong(course.check_lesson_06, "fast")


def _fork_join() -> ComputeGraph:
    with capture() as cap:
        x, y, z, w = (cap.buffer(k, 4 * course.N) for k in ("x", "y", "z", "w"))
        main, side = cap.stream("main"), cap.stream("side")
        main.memcpy("upload", MemcpyDir.HostToDevice, dst=x)
        side.wait(main.record())
        side.launch("relu", 16, 256, inputs=[x], outputs=[y])
        main.launch("scale", 16, 256, inputs=[x], outputs=[z], alpha=3.0)
        main.wait(side.record())
        main.launch("add", 16, 256, inputs=[y, z], outputs=[w])
        main.memcpy("download", MemcpyDir.DeviceToHost, src=w)
    return cap.graph


def test_lesson_07(capsys: pytest.CaptureFixture[str]) -> None:
    _right(course.check_lesson_07, _fork_join(), capsys)
    _right(course.check_lesson_07, course.fork_join_explicit(), capsys)
    serial = course.fork_join_explicit()
    by = {n.name: n.id for n in serial.nodes}
    serial = serial.with_changes(edges=(*serial.edges, (by["relu"], by["scale"])))
    _wrong(course.check_lesson_07, serial)  # orders more than it must
    explicit = course.fork_join_explicit()
    # The constructor, unlike with_changes, does not refuse unordered accesses: what a
    # capture builds before it is checked.
    racy = ComputeGraph(
        explicit.nodes,
        explicit.buffers,
        tuple(e for e in explicit.edges if e != (by["relu"], by["add"])),
    )
    _wrong(course.check_lesson_07, racy)  # orders less: add may read y before relu wrote it
    _wrong(course.check_lesson_07, quick_start())
    _wrong(course.check_lesson_07, "graph")


def test_lesson_08(capsys: pytest.CaptureFixture[str]) -> None:
    old = ExecutionPlan.build(course.scaled_chain(2.0))
    right = {
        k for k, make in course.UPDATE_CANDIDATES.items() if check_update(old, make()).in_place
    }
    # Independently of check_update: CUDA updates in place only when the topology (node
    # count and kinds, edges) is the same.
    for k, make in course.UPDATE_CANDIDATES.items():
        new = make()
        same = [s.kind for s in new.steps] == [s.kind for s in old.steps] and [
            s.depends_on for s in new.steps
        ] == [s.depends_on for s in old.steps]
        assert (k in right) == same, k
    assert right and right != set(course.UPDATE_CANDIDATES)
    # acc by another route than the simulator: the reference evaluator of the same graph
    g = course.countdown_branch()
    data = {k: np.float32(v) for k, v in course.LOOP_INPUTS.items()}
    acc = float(evaluate(g, {**data, "c": np.float32([2.5]), "flag": np.float32([0])})["acc"][0])
    doubled = float(
        evaluate(g, {**data, "c": np.float32([2.5]), "flag": np.float32([1])})["acc"][0]
    )
    assert acc == -doubled / 2 < 0  # the else branch negates what the then branch doubles
    _right(course.check_lesson_08, (right, acc), capsys)
    _wrong(course.check_lesson_08, (set(course.UPDATE_CANDIDATES), acc))
    _wrong(course.check_lesson_08, (sorted(right)[1:], acc))
    _wrong(course.check_lesson_08, (right | {"z"}, acc))
    _wrong(course.check_lesson_08, (right, -acc))  # the then branch's sign
    _wrong(course.check_lesson_08, (right, acc + 1))  # one iteration off
    _wrong(course.check_lesson_08, right)  # not a pair
