"""The CUDA-graph course (``notebooks/course/``): its small graphs and its exercise checkers.

Each lesson ends with an exercise; the cell after it calls ``check_lesson_NN(answer)``,
which works the right answer out from the engine (the analyses, the planners, the race
detector, :func:`~oxiwork.executor.update.check_update`), never from a stored number, and
either prints a success line or raises :class:`WrongAnswer` (an ``AssertionError``) saying
what was expected of the answer and where in the lesson to look. The graphs the lessons and
their exercises share are built here, once, so a lesson and its checker cannot drift apart.

Example
-------
>>> from oxiwork import course
>>> from oxiwork.executor.plan import ExecutionPlan
>>> from oxiwork.examples import quick_start
>>> plan = ExecutionPlan.build(quick_start(), fusion=False)
>>> course.check_lesson_01((plan.kernel_count_fused, plan.pool_bytes))
lesson 01: right. Without fusion the quick start launches 2 kernels in an arena of 8,192 B.
>>> course.check_lesson_01((1, 0))
Traceback (most recent call last):
...
oxiwork.course.WrongAnswer: lesson 01: not yet. ...
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import networkx as nx
import numpy as np
from matplotlib.figure import Figure

from oxiwork import cost
from oxiwork.analysis import dominance, topo
from oxiwork.builder import GraphBuilder
from oxiwork.examples import quick_start, synthetic
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import drop_event, find_races
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.executor.timeline import timeline
from oxiwork.executor.update import check_update
from oxiwork.graph import ComputeGraph
from oxiwork.node import MemcpyDir, NodeId
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory import IntervalPlan, greedy_by_size, lower_bound, plan_intervals
from oxiwork.render._style import buffer_color

__all__ = [
    "LOOP_INPUTS",
    "TINY_INSTANCE",
    "UPDATE_CANDIDATES",
    "WrongAnswer",
    "branches",
    "check_lesson_01",
    "check_lesson_02",
    "check_lesson_03",
    "check_lesson_04",
    "check_lesson_05",
    "check_lesson_06",
    "check_lesson_07",
    "check_lesson_08",
    "countdown_branch",
    "fork_join_explicit",
    "happens_before",
    "interval_figure",
    "read_instance",
    "scaled_chain",
]

N = 4096  # float32 elements per buffer of the course's graphs: 16 KiB, cheap to simulate
_THREADS = 256


class WrongAnswer(AssertionError):
    """An exercise's answer is not right; the message says what to look at again."""


def _wrong(lesson: str, why: str) -> WrongAnswer:
    return WrongAnswer(f"lesson {lesson}: not yet. {why}")


def _right(lesson: str, text: str) -> None:
    print(f"lesson {lesson}: right. {text}")


# --------------------------------------------------------------------------- graphs
def branches(*, fusible_middle: bool = True, n: int = N) -> ComputeGraph:
    """Two branches of element-wise kernels that fork after ``relu`` and join at ``add``.

    ``upload -> relu``, then a short branch ``scale`` and a long one ``sigmoid -> mul ->
    tanh`` (``mul`` multiplies the gate by ``relu``'s output), joined by ``add`` and copied
    back by ``download``. ``fusible_middle=False`` marks ``mul`` as a kernel that cannot
    fuse (as a hand-written kernel would be), which breaks the diamond for fusion.

    >>> g = branches()
    >>> [n.name for n in g.nodes]
    ['upload', 'relu', 'scale', 'sigmoid', 'mul', 'tanh', 'add', 'download']
    """
    b = GraphBuilder()
    nbytes = 4 * n
    x, a, s, g, ga, t, y = (b.alloc_buffer(k, nbytes) for k in ("x", "a", "s", "g", "ga", "t", "y"))
    blocks = max(1, n // _THREADS)

    def kernel(
        name: str, inputs: list[Any], out: Any, fusible: bool = True, **params: float
    ) -> None:
        kb = b.add_kernel(name, blocks, _THREADS).fusible(fusible).inputs(inputs).outputs([out])
        kb.params(**params).finish()

    b.add_memcpy("upload", MemcpyDir.HostToDevice, nbytes, dst=x)
    kernel("relu", [x], a)
    kernel("scale", [a], s, alpha=0.5)
    kernel("sigmoid", [a], g)
    kernel("mul", [g, a], ga, fusible=fusible_middle)
    kernel("tanh", [ga], t)
    kernel("add", [s, t], y)
    b.add_memcpy("download", MemcpyDir.DeviceToHost, nbytes, src=y)
    return b.build()


def fork_join_explicit(n: int = N) -> ComputeGraph:
    """Lesson 07's program built explicitly: ``upload``; ``relu`` and ``scale`` (alpha 3)
    side by side; ``add`` joins them; ``download``.

    >>> sorted(n.name for n in fork_join_explicit().nodes)
    ['add', 'download', 'relu', 'scale', 'upload']
    """
    b = GraphBuilder()
    nbytes = 4 * n
    x, y, z, w = (b.alloc_buffer(k, nbytes) for k in ("x", "y", "z", "w"))
    blocks = max(1, n // _THREADS)
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, nbytes, dst=x)
    relu = b.add_kernel("relu", blocks, _THREADS).inputs([x]).outputs([y]).finish()
    scale = b.add_kernel("scale", blocks, _THREADS).inputs([x]).outputs([z]).params(alpha=3.0)
    sc = scale.finish()
    add = b.add_kernel("add", blocks, _THREADS).inputs([y, z]).outputs([w]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, nbytes, src=w)
    b.fan_out(up, [relu, sc])
    b.fan_in([relu, sc], add)
    b.dep(add, down)
    return b.build()


def scaled_chain(alpha: float = 2.0, *, activation: str = "relu", n: int = N) -> ComputeGraph:
    """``upload -> activation -> scale(alpha) -> download``, lesson 08's graph to update.

    >>> [n.name for n in scaled_chain(3.0, activation="sigmoid").nodes]
    ['upload', 'sigmoid', 'scale', 'download']
    """
    b = GraphBuilder()
    nbytes = 4 * n
    blocks = max(1, n // _THREADS)
    x, m, y = (b.alloc_buffer(k, nbytes) for k in ("x", "m", "y"))
    b.add_memcpy("upload", MemcpyDir.HostToDevice, nbytes, dst=x)
    b.add_kernel(activation, blocks, _THREADS).fusible(True).inputs([x]).outputs([m]).finish()
    kb = b.add_kernel("scale", blocks, _THREADS).fusible(True).inputs([m]).outputs([y])
    kb.params(alpha=alpha).finish()
    b.add_memcpy("download", MemcpyDir.DeviceToHost, nbytes, src=y)
    return b.build()


def happens_before(graph: ComputeGraph) -> frozenset[tuple[str, str]]:
    """Every ordered pair of node names ``(a, b)`` with a path ``a -> b``: what a graph
    guarantees about order, whatever its edges look like.

    >>> sorted(happens_before(fork_join_explicit()))[:2]
    [('add', 'download'), ('relu', 'add')]
    """
    g = nx.DiGraph()
    g.add_nodes_from(n.id for n in graph.nodes)
    g.add_edges_from(graph.edges)
    closure = nx.transitive_closure_dag(g)
    return frozenset((graph.node(a).name, graph.node(b).name) for a, b in closure.edges)


# A small instance in MiniMalloc's CSV format (the benchmark's A-E instances use the same
# columns: id, lower and upper end of the lifetime, size in bytes), chosen so that
# greedy-by-size, the heuristic and the exact search all give different arenas.
TINY_INSTANCE = """\
id,lower,upper,size
0,4,6,1024
1,4,8,4096
2,0,1,5120
3,9,12,3072
4,8,12,6144
5,3,5,2048
6,8,12,2048
7,4,7,3072
8,6,9,5120
9,9,12,3072
10,5,8,3072
11,5,6,5120
"""


def read_instance(text: str = TINY_INSTANCE) -> list[tuple[int, int, int]]:
    """``(lower, upper, size)`` per row of a MiniMalloc CSV, as ``bench/memory_bench.py``
    reads the benchmark's instances.

    >>> read_instance()[:2]
    [(4, 6, 1024), (4, 8, 4096)]
    """
    rows = csv.DictReader(io.StringIO(text))
    return [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in rows]


def interval_figure(
    intervals: list[tuple[int, int, int]], plans: Mapping[str, IntervalPlan]
) -> Figure:
    """One panel per plan of ``intervals``: each buffer a rectangle, x its ``[lower, upper)``
    lifetime, y its bytes at the plan's offset; dashed, the lower bound (most bytes live
    at once). The interval planners' counterpart of :func:`oxiwork.render.memory`, which
    draws a whole plan.

    >>> iv = read_instance()
    >>> fig = interval_figure(iv, {"greedy": greedy_by_size(iv)})
    >>> len(fig.axes[0].collections) == len(iv)  # one rectangle per buffer
    True
    """
    fig = Figure(figsize=(3.2 * len(plans), 2.6), layout="constrained")
    axes = fig.subplots(1, len(plans), sharey=True, squeeze=False)[0]
    bound = lower_bound(intervals) / 1024
    top = max(p.arena_bytes for p in plans.values()) / 1024
    for ax, (title, plan) in zip(axes, plans.items(), strict=True):
        for k, ((lo, hi, size), off) in enumerate(zip(intervals, plan.offsets, strict=True)):
            ax.broken_barh(
                [(lo, hi - lo)], (off / 1024, size / 1024), facecolors=buffer_color(k),
                edgecolors="white", linewidth=0.8,
            )  # fmt: skip
            ax.text((lo + hi) / 2, (off + size / 2) / 1024, str(k), ha="center", va="center",
                    fontsize=7, color="white")  # fmt: skip
        ax.axhline(bound, color="#1b2430", linestyle="--", linewidth=0.8)
        ax.axhline(plan.arena_bytes / 1024, color="#e15759", linewidth=1.0)
        ax.set_title(f"{title}: {plan.arena_bytes / 1024:g} KiB", fontsize=9)
        ax.set_xlabel("time step", fontsize=8)
        ax.set_ylim(0, top * 1.08)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel("arena offset (KiB)", fontsize=8)
    return fig


# --------------------------------------------------------------------------- checkers
def _names(graph: ComputeGraph, ids: Iterable[NodeId]) -> list[str]:
    return [graph.node(i).name for i in ids]


def check_lesson_01(answer: tuple[int, int]) -> None:
    """Lesson 01: ``(kernels launched, arena bytes)`` of the quick start planned with
    ``fusion=False``.

    >>> check_lesson_01((2, 0))
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 01: not yet. ...
    """
    plan = ExecutionPlan.build(quick_start(), fusion=False)
    kernels = plan.kernel_count_fused  # what SequentialExecutor(plan).run() launches
    want = (kernels, plan.pool_bytes)
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise _wrong("01", "answer with a pair: (kernels launched, arena bytes)")
    if answer[0] != kernels:
        raise _wrong(
            "01",
            f"{answer[0]} kernels is not what the plan launches; run it with "
            "SequentialExecutor(plan).run() and read kernels_launched",
        )
    if answer[1] != plan.pool_bytes:
        raise _wrong("01", f"an arena of {answer[1]:,} B is not the plan's; read plan.pool_bytes")
    _right(
        "01",
        f"Without fusion the quick start launches {want[0]} kernels in an arena of {want[1]:,} B.",
    )


def check_lesson_02(answer: float) -> None:
    """Lesson 02: how many microseconds ``scale`` of :func:`branches` may be slowed down
    without delaying the end of the graph (within 1%), under the cost model.

    >>> check_lesson_02(0.0)
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 02: not yet. ...
    """
    g = branches()
    info = topo.analyze(g, cost.node_costs(g))
    (scale,) = (n.id for n in g.nodes if n.name == "scale")
    want = info.slack[scale] * 1e6
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise _wrong("02", "answer with a number of microseconds")
    if abs(answer - want) > 0.01 * want:
        hint = (
            "that is its cost, not how late it may be"
            if abs(answer - info.cost[scale] * 1e6) <= 0.01 * want
            else "read its slack (ALAP - ASAP) and convert seconds to microseconds"
        )
        raise _wrong("02", f"{answer!r} us is not it: {hint}")
    _right(
        "02",
        f"'scale' has {want:.2f} us of slack: anything up to that and the makespan stays "
        f"{info.makespan * 1e6:.2f} us.",
    )


def check_lesson_03(answer: tuple[str, int]) -> None:
    """Lesson 03: ``(immediate post-dominator of 'relu', kernels left by fusion)`` for
    ``branches(fusible_middle=False)``.

    >>> check_lesson_03(("tanh", 1))
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 03: not yet. ...
    """
    g = branches(fusible_middle=False)
    relu = next(n.id for n in g.nodes if n.name == "relu")
    ipdom = g.node(dominance.post_dominators(g).idom[relu]).name
    kernels = fuse(g).artefacts["kernels_after"]
    if not isinstance(answer, tuple) or len(answer) != 2:
        raise _wrong("03", "answer with a pair: (a node name, a number of kernels)")
    if answer[0] != ipdom:
        raise _wrong(
            "03",
            f"{answer[0]!r} does not immediately post-dominate 'relu': follow every path "
            "from 'relu' to the end; the first node they all pass through is the answer",
        )
    if answer[1] != kernels:
        raise _wrong(
            "03",
            f"fusion does not leave {answer[1]} kernels; run fuse() and read "
            "artefacts['kernels_after']",
        )
    _right(
        "03",
        f"{ipdom!r} closes the fan-out of 'relu', but 'mul' cannot fuse, so {kernels} kernels remain.",
    )


def check_lesson_04(answer: int) -> None:
    """Lesson 04: how many bytes the exact planner saves on :data:`TINY_INSTANCE` against
    greedy-by-size.

    >>> check_lesson_04(0)
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 04: not yet. ...
    """
    iv = read_instance()
    greedy = greedy_by_size(iv).arena_bytes
    exact = plan_intervals(iv, mode="exact")
    want = greedy - exact.arena_bytes
    if answer != want:
        raise _wrong(
            "04",
            f"{answer!r} B is not the difference; subtract the exact plan's arena_bytes "
            "from greedy_by_size's on the same intervals",
        )
    bound = lower_bound(iv)
    _right(
        "04",
        f"The exact search saves {want:,} B: {exact.arena_bytes:,} B, the lower bound "
        f"{bound:,} B, against greedy's {greedy:,} B.",
    )


def _lesson_05_plan() -> ExecutionPlan:
    return ExecutionPlan.build(branches(), max_streams=2, fusion=False)


def check_lesson_05(answer: Iterable[int]) -> None:
    """Lesson 05: the set of events of ``ExecutionPlan.build(branches(), max_streams=2,
    fusion=False)`` whose loss the race detector catches.

    >>> check_lesson_05(set())
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 05: not yet. ...
    """
    plan = _lesson_05_plan()
    want = {e for e in range(plan.event_count) if find_races(drop_event(plan, e))}
    got = set(answer)
    if got != want:
        missed, extra = sorted(want - got), sorted(got - want)
        parts = ([f"dropping event(s) {missed} also races"] if missed else []) + (
            [f"dropping event(s) {extra} races nowhere (or is not an event of the plan)"]
            if extra
            else []
        )
        raise _wrong("05", "; ".join(parts) + ". Try find_races(drop_event(plan, e)) for each e")
    _right("05", f"Every one of the plan's {plan.event_count} events is needed: {sorted(want)}.")


def check_lesson_06(answer: float) -> None:
    """Lesson 06: the modelled saving, in microseconds, of one graph launch over stream
    launches for ``synthetic(100, "chain")`` planned with ``fusion=False`` (within 1%).

    >>> check_lesson_06(0.0)
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 06: not yet. ...
    """
    plan = ExecutionPlan.build(synthetic(100, "chain"), fusion=False)
    totals = timeline(plan).totals
    want = (totals["stream"] - totals["graph"]) * 1e6
    if not isinstance(answer, (int, float)) or abs(answer - want) > 0.01 * abs(want):
        raise _wrong(
            "06",
            f"{answer!r} us is not the saving; take timeline(plan).totals and subtract the "
            "graph total from the stream total (seconds: multiply by 1e6)",
        )
    _right(
        "06",
        f"Graph launch saves {want:.1f} us on {plan.kernel_count_fused} short kernels "
        "(modelled, not measured).",
    )


def check_lesson_07(answer: ComputeGraph) -> None:
    """Lesson 07: a captured graph of the fork-join program with the event fixed: it must
    order exactly what :func:`fork_join_explicit` orders.

    >>> g = fork_join_explicit()
    >>> check_lesson_07(ComputeGraph(g.nodes, g.buffers, ()))  # nothing ordered
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 07: not yet. ...
    """
    if not isinstance(answer, ComputeGraph):
        raise _wrong("07", "answer with the ComputeGraph of your capture (cap.graph)")
    want = fork_join_explicit()
    if sorted(n.name for n in answer.nodes) != sorted(n.name for n in want.nodes):
        raise _wrong(
            "07", f"capture the same five operations: {sorted(n.name for n in want.nodes)}"
        )
    got, need = happens_before(answer), happens_before(want)
    if got != need:
        missing, extra = sorted(need - got), sorted(got - need)
        parts = (
            [f"nothing orders {missing[0][0]!r} before {missing[0][1]!r}"] if missing else []
        ) + (
            [
                f"{extra[0][0]!r} is ordered before {extra[0][1]!r}, which serialises work that could run side by side"
            ]
            if extra
            else []
        )
        raise _wrong("07", "; ".join(parts) + ". Check where each record and wait sits")
    _right("07", "Your capture orders exactly what the explicit graph orders.")


# Lesson 08's candidate changes, each made to scaled_chain(2.0) planned with fusion on.
UPDATE_CANDIDATES: Mapping[str, Callable[[], ExecutionPlan]] = {
    "a": lambda: ExecutionPlan.build(scaled_chain(3.0)),  # alpha 2.0 -> 3.0
    "b": lambda: ExecutionPlan.build(scaled_chain(2.0, activation="sigmoid")),  # another op
    "c": lambda: ExecutionPlan.build(scaled_chain(2.0), fusion=False),  # fusion switched off
    "d": lambda: ExecutionPlan.build(scaled_chain(2.0, n=2 * N)),  # twice the data
}
"""Lesson 08's candidate new plans, by letter (see the lesson for what each changes)."""


def countdown_branch(max_iterations: int = 16) -> ComputeGraph:
    """Lesson 08's control flow: a WHILE loop counting ``c`` down, then a child graph
    holding an IF/else on ``flag``.

    Each WHILE iteration computes ``c = relu(c - 1)`` and ``acc = acc + 1``, so the body
    runs ``ceil(c)`` times; the child graph ``finish`` then doubles ``acc`` when ``flag``
    is non-zero and negates it otherwise. Every buffer holds one float32; the host inputs
    are :data:`LOOP_INPUTS` (with ``c`` and ``flag`` of your choice).

    >>> g = countdown_branch()
    >>> [n.kind.value for n in g.nodes if n.bodies]
    ['conditional', 'child_graph']
    """
    b = GraphBuilder()
    c, one, d, acc, flag = (b.alloc_buffer(n, 4) for n in ("c", "one", "d", "acc", "flag"))
    ids = [b.add_memcpy(f"up {n}", MemcpyDir.HostToDevice, 4, dst=x)
           for n, x in (("c", c), ("one", one), ("acc", acc), ("flag", flag))]  # fmt: skip
    loop = b.body()
    loop.add_kernel("c - 1", 1, 1).op("sub").inputs([c, one]).outputs([d]).finish()
    loop.add_kernel("c = relu", 1, 1).op("relu").inputs([d]).outputs([c]).finish()
    loop.add_kernel("acc + 1", 1, 1).op("add").inputs([acc, one]).outputs([acc]).finish()
    ids.append(b.add_while("count down", c, loop, max_iterations=max_iterations))
    finish = b.body()
    double, negate = finish.body(), finish.body()
    double.add_kernel("acc * 2", 1, 1).op("scale").params(alpha=2.0).inputs([acc]).outputs(
        [acc]
    ).finish()
    negate.add_kernel("-acc", 1, 1).op("neg").inputs([acc]).outputs([acc]).finish()
    finish.add_if("flag?", flag, double, negate)
    ids.append(b.add_child_graph("finish", finish))
    ids.append(b.add_memcpy("down acc", MemcpyDir.DeviceToHost, 4, src=acc))
    b.chain(ids)
    return b.build()


LOOP_INPUTS: Mapping[str, Any] = {"one": [1.0], "acc": [0.0]}
"""The fixed host inputs of :func:`countdown_branch` (add ``c`` and ``flag``)."""


def _loop_acc(c: float, flag: float) -> float:
    """``acc`` after one run of :func:`countdown_branch` on the simulator."""
    inputs = {k: np.float32(v) for k, v in LOOP_INPUTS.items()}
    inputs.update(c=np.float32([c]), flag=np.float32([flag]))
    out = SequentialExecutor(ExecutionPlan.build(countdown_branch())).run(inputs).outputs
    assert out is not None
    return float(out["acc"][0])


def check_lesson_08(answer: tuple[Iterable[str], float]) -> None:
    """Lesson 08: ``(letters, acc)``: the letters of :data:`UPDATE_CANDIDATES` that
    ``cudaGraphExecUpdate`` can apply in place to the graph of ``scaled_chain(2.0)``, and
    the value of ``acc`` after one launch of :func:`countdown_branch` with ``c = 2.5`` and
    ``flag = 0``.

    >>> check_lesson_08(({"c"}, 0.0))
    Traceback (most recent call last):
    ...
    oxiwork.course.WrongAnswer: lesson 08: not yet. ...
    """
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise _wrong("08", "answer with a pair: (the set of letters, the value of acc)")
    letters, acc = answer
    old = ExecutionPlan.build(scaled_chain(2.0))
    verdict = {k: check_update(old, make()) for k, make in UPDATE_CANDIDATES.items()}
    want = {k for k, r in verdict.items() if r.in_place}
    got = set(letters)
    if got != want:
        wrong = sorted(got ^ want)[0]
        r = verdict.get(wrong)
        why = f"change {wrong!r}: {r.reason}" if r else f"{wrong!r} is not a candidate"
        raise _wrong("08", f"look again at {why}")
    want_acc = _loop_acc(2.5, 0.0)
    if isinstance(acc, bool) or not isinstance(acc, (int, float)) or abs(acc - want_acc) > 1e-6:
        raise _wrong(
            "08",
            f"acc is not {acc!r}: count how many times the WHILE body runs from c = 2.5 "
            "(it tests c before every iteration), then follow the IF inside 'finish' for "
            "flag = 0",
        )
    runs = round(_loop_acc(2.5, 1.0) / 2)  # the then branch doubles acc instead
    _right(
        "08",
        f"Changes {sorted(want)} update in place; the others need a new instantiation. "
        f"The loop body ran {runs} times and the else branch negated acc: {want_acc:g}.",
    )
