"""matplotlib views: structure, not pixels (one mark per buffer / step / edge / event wait,
axis labels with units, the lower-bound line at the memory pass's bound)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection

from oxiwork.analysis import dominance, topo
from oxiwork.error import InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, synthetic, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import Simulator
from oxiwork.executor.timeline import timeline
from oxiwork.node import NodeKind
from oxiwork.render import _style as st
from oxiwork.render import figures
from oxiwork.render.summary import pass_rows


def coll(ax, gid):
    found = [c for c in ax.collections if c.get_gid() == gid]
    assert len(found) == 1, [c.get_gid() for c in ax.collections]
    return found[0]


@pytest.fixture(scope="module")
def transformer_plan() -> ExecutionPlan:
    return ExecutionPlan.build(transformer_block(), max_streams=4)


PLANS = {
    "quick_start": lambda: ExecutionPlan.build(quick_start()),
    "random_2_streams": lambda: ExecutionPlan.build(random_op_dag(3, 40), max_streams=2),
    "unfused_3_streams": lambda: ExecutionPlan.build(
        random_op_dag(5, 30), max_streams=3, fusion=False
    ),
}


class TestDag:
    @pytest.mark.parametrize("make", [quick_start, lambda: random_op_dag(1, 30), transformer_block])
    def test_one_point_per_node_one_segment_per_edge(self, make) -> None:
        g = make()
        ax = figures.dag(g).axes[0]
        info = topo.analyze(g)
        assert len(coll(ax, "nodes").get_offsets()) == g.num_nodes
        assert len(coll(ax, "edges").get_segments()) == len(g.edges)
        from oxiwork import cost

        crit = topo.analyze(g, cost.node_costs(g)).critical_path
        assert len(coll(ax, "critical path").get_segments()) == len(crit) - 1
        labels = [t for t in ax.texts if t.get_gid() == "label"]
        assert len(labels) == g.num_nodes  # readable at 298 nodes: every node named
        assert ax.get_xlabel().startswith("level")
        assert f"{len(info.level_widths)} levels" in ax.get_title()

    def test_critical_nodes_are_red(self) -> None:
        g = quick_start()
        ax = figures.dag(g).axes[0]
        colours = coll(ax, "nodes").get_facecolors()
        red = matplotlib.colors.to_rgba(st.STRONG)
        assert all(np.allclose(c, red) for c in colours)  # a chain: all on the path

    def test_aggregated_above_the_threshold(self) -> None:
        g = synthetic(600, "layered")
        ax = figures.dag(g, aggregate_above=500).axes[0]
        info = topo.analyze(g)
        assert not [c for c in ax.collections if c.get_gid() == "nodes"]
        heights = [p.get_height() for p in ax.patches]
        assert sum(heights) == pytest.approx(g.num_nodes)
        assert len(ax.patches) == 2 * len(info.level_widths)
        assert ax.get_ylabel() == "nodes" and "aggregated" in ax.get_title()

    def test_draws_into_a_given_axes(self) -> None:
        from matplotlib.figure import Figure

        fig = Figure()
        ax = fig.add_subplot()
        assert figures.dag(quick_start(), ax=ax) is fig and fig.axes == [ax]


class TestDominatorTree:
    @pytest.mark.parametrize("post", [False, True])
    def test_one_edge_per_node_to_its_idom(self, post: bool) -> None:
        g = transformer_block()
        ax = figures.dominator_tree(g, post=post).axes[0]
        tree = dominance.post_dominators(g) if post else dominance.dominators(g)
        segs = coll(ax, "tree edges").get_segments()
        assert len(segs) == g.num_nodes
        # every parent sits one depth row above its child
        assert all(np.isclose(s[0][1] - s[1][1], 1.0) for s in segs)
        assert len(coll(ax, "nodes").get_offsets()) == g.num_nodes + 1  # + virtual root
        names = {t.get_text() for t in ax.texts}
        assert {g.node(n).name[:17] for n in tree.idom} <= {n[:17] for n in names}

    def test_aggregated(self) -> None:
        g = synthetic(800, "layered")
        ax = figures.dominator_tree(g, aggregate_above=500).axes[0]
        assert sum(p.get_height() for p in ax.patches) == g.num_nodes


class TestMemory:
    @pytest.mark.parametrize("name", sorted(PLANS))
    def test_one_rectangle_per_buffer_and_the_bound_line(self, name: str) -> None:
        plan = PLANS[name]()
        ax = figures.memory(plan).axes[0]
        rows = plan.memory.to_dict()["buffers"]
        polys = coll(ax, "buffers")
        assert isinstance(polys, PolyCollection) and len(polys.get_paths()) == len(rows)
        unit = ax.get_ylabel().split("(")[1].rstrip(")")
        scale = {"B": 1, "KiB": 1024, "MiB": 1024**2}[unit]
        (lb,) = [ln for ln in ax.lines if ln.get_gid() == "lower bound"]
        assert lb.get_ydata()[0] * scale == pytest.approx(plan.memory.lower_bound)
        (arena,) = [ln for ln in ax.lines if ln.get_gid() == "arena"]
        assert arena.get_ydata()[0] * scale == pytest.approx(plan.pool_bytes)
        # each rectangle spans its buffer's interval and bytes
        for path, r in zip(polys.get_paths(), rows, strict=True):
            xs, ys = path.vertices[:, 0], path.vertices[:, 1] * scale
            assert (xs.min(), xs.max()) == (r["start"], r["end"])
            assert ys.min() == pytest.approx(r["offset"])
            assert ys.max() == pytest.approx(r["offset"] + r["size"])
        assert ax.get_xlabel() == "step (plan order)"

    def test_labels_only_buffers_that_fit(self, transformer_plan: ExecutionPlan) -> None:
        ax = figures.memory(transformer_plan).axes[0]
        labels = [t for t in ax.texts if t.get_gid() == "label"]
        names = {b.name for b in transformer_plan.graph.buffers}
        assert 0 < len(labels) < len(transformer_plan.memory.to_dict()["buffers"])
        assert {t.get_text() for t in labels} <= names

    def test_liveness_bound_shown_when_lower(self, transformer_plan: ExecutionPlan) -> None:
        rep = transformer_plan.memory
        ax = figures.memory(transformer_plan).axes[0]
        gids = [ln.get_gid() for ln in ax.lines]
        assert ("liveness lower bound" in gids) == (rep.liveness_lower_bound < rep.lower_bound)


class TestStreams:
    @pytest.mark.parametrize("name", sorted(PLANS))
    def test_one_bar_per_step_and_one_arrow_per_event_wait(self, name: str) -> None:
        plan = PLANS[name]()
        fig = figures.streams(plan)
        assert [a.get_title().split(":")[0] for a in fig.axes] == ["graph launch", "stream launch"]
        waits = sum(1 for s in plan.steps if s.kind is NodeKind.EventWait)
        for ax, mode in zip(fig.axes, ("graph", "stream"), strict=True):
            assert len(coll(ax, "steps").get_paths()) == len(plan.steps)
            arrows = coll(ax, "event arrows")
            assert isinstance(arrows, LineCollection) and len(arrows.get_segments()) == waits
            assert ax.get_xlabel() == "time (µs, cost model)"
            tl = timeline(plan, mode=mode)
            assert st.format_time(tl.makespan) in ax.get_title()

    def test_arrow_ends_at_the_wait_start(self, transformer_plan: ExecutionPlan) -> None:
        ax = figures.streams(transformer_plan, modes=["graph"]).axes[0]
        tl = timeline(transformer_plan, mode="graph")
        start = {b.step: b.start for b in tl.bars}
        for seg, a in zip(coll(ax, "event arrows").get_segments(), tl.arrows, strict=True):
            assert seg[0][0] == pytest.approx(a.time * 1e6)
            assert seg[1][0] == pytest.approx(start[a.wait] * 1e6)

    def test_raises_on_unknown_mode(self) -> None:
        with pytest.raises(InvalidArgument, match="modes must be"):
            figures.streams(ExecutionPlan.build(quick_start()), modes=["gpu"])


class TestPassSummary:
    def test_one_bar_per_stage_per_figure(self, transformer_plan: ExecutionPlan) -> None:
        fig = figures.pass_summary(transformer_plan)
        rows = pass_rows(transformer_plan)
        assert [r.stage for r in rows] == ["input", "fusion", "streams", "memory"]
        assert [a.get_title() for a in fig.axes] == [
            "kernels", "buffers", "bytes without reuse", "arena", "event waits", "critical path"
        ]  # fmt: skip
        for ax in fig.axes:
            assert len(ax.patches) == len(rows)
        kernels = [p.get_height() for p in fig.axes[0].patches]
        assert kernels == [r.kernels for r in rows]
        assert kernels[0] == len(transformer_plan.original.kernels())
        assert kernels[-1] == transformer_plan.kernel_count_fused
        assert rows[-1].arena == transformer_plan.pool_bytes
        assert rows[-1].event_waits == sum(
            s.kind is NodeKind.EventWait for s in transformer_plan.steps
        )
        assert fig.axes[-1].get_ylabel() == "µs"


@pytest.mark.filterwarnings("ignore::oxiwork.error.GraphWarning")
class TestBufferHistogram:
    def test_from_a_simulator(self) -> None:
        sim = Simulator(ExecutionPlan.build(quick_start()))
        sim.run()
        ax = figures.buffer_histogram(sim, "output").axes[0]
        assert len(ax.patches) == 24
        assert sum(p.get_height() for p in ax.patches) == sim.buffer("output").size
        assert ax.get_xlabel() == "value" and ax.get_title().startswith("output:")

    def test_nan_counted_not_binned(self) -> None:
        ax = figures.buffer_histogram(np.array([1.0, np.nan, 2.0]), "x").axes[0]
        assert sum(p.get_height() for p in ax.patches) == 2 and "1 NaN" in ax.get_title()

    def test_simulator_needs_a_name(self) -> None:
        with pytest.raises(InvalidArgument, match="name the buffer"):
            figures.buffer_histogram(Simulator(ExecutionPlan.build(quick_start())))


def test_palette_is_the_widgets() -> None:
    """colors.ts imports oxiwork/palette.json: one definition."""
    from pathlib import Path

    ts = (Path(__file__).resolve().parents[2] / "widget_js/src/colors.ts").read_text()
    assert 'from "../../oxiwork/palette.json"' in ts
    assert "#4e79a7" not in ts  # no second copy of the colours


def test_big_plans_batch_the_same_geometry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above BATCH_ABOVE, bars and arrows become one path per colour: same rectangles,
    same segments."""
    plan = ExecutionPlan.build(random_op_dag(4, 60), max_streams=3)
    small = figures.streams(plan, modes=["graph"]).axes[0]
    monkeypatch.setattr(figures, "BATCH_ABOVE", 0)
    big = figures.streams(plan, modes=["graph"]).axes[0]
    bars = [p for p in big.patches if p.get_gid() == "steps"]
    assert len(bars) == len({b.stream for b in timeline(plan).bars})
    n_rects = sum(len(p.get_path().vertices) // 5 for p in bars)
    assert n_rects == len(coll(small, "steps").get_paths()) == len(plan.steps)
    (line,) = [ln for ln in big.lines if ln.get_gid() == "event arrows"]
    xs = line.get_xdata()
    waits = sum(1 for s in plan.steps if s.kind is NodeKind.EventWait)
    assert np.isnan(xs).sum() == waits == len(coll(small, "event arrows").get_segments())
    mem = figures.memory(plan).axes[0]
    rects = sum(len(p.get_path().vertices) // 5 for p in mem.patches if p.get_gid() == "buffers")
    assert rects == len(plan.memory.to_dict()["buffers"])


@pytest.mark.parametrize("view", sorted(figures.VIEWS))
def test_every_view_renders_to_svg_with_names_as_text(view: str, tmp_path) -> None:
    plan = ExecutionPlan.build(quick_start())
    fig = figures.VIEWS[view](plan)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(tmp_path / "v.svg")
    svg = (tmp_path / "v.svg").read_text()
    assert "<text" in svg


def test_output_histograms_one_panel_per_output() -> None:
    plan = ExecutionPlan.build(transformer_block(1), max_streams=2)
    fig = figures.output_histograms(plan)
    assert len(fig.axes) == min(3, len(simulated_outputs(plan)))


def simulated_outputs(plan: ExecutionPlan) -> dict:
    import warnings

    from oxiwork.executor.simulator import SequentialExecutor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inputs generated from the seed
        return SequentialExecutor(plan).run().outputs


def test_dag_labels_lie_inside_the_axes_even_for_a_chain() -> None:
    # A chain is one row of nodes; its names, drawn above and below the row, used to fall
    # outside the axes (cut off in a notebook or a saved figure).
    ax = figures.dag(quick_start()).axes[0]
    lo, hi = ax.get_ylim()
    labels = [t for t in ax.texts if t.get_gid() == "label"]
    assert len(labels) == 4 and all(lo < t.get_position()[1] < hi for t in labels)
