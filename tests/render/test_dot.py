"""graphviz renders: DOT for graphs, plans, dominator trees and lowered CUDA graphs; SVG
through Debian's dot; hostile names stay names; a missing dot is a GraphError with a fix."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from oxiwork import GraphBuilder
from oxiwork.analysis import dominance
from oxiwork.error import GraphError, InvalidArgument
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.lowering import lower
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.node import NodeKind
from oxiwork.render import _style as st
from oxiwork.render import dot

HOSTILE = [
    'say "hi"',
    "back\\slash",
    "tricky\\n not a newline",
    "trailing\\",
    "<img src=x onerror=alert(1)>",
    '"]; evil -> node [label="',
    "} digraph x { a -> b",
    "&amp; </text></svg>",
]

_QUOTED = r'"((?:[^"\\]|\\.)*)"'


def unquote(s: str) -> str:
    """Undo DOT escapes: backslash-n is a line break, any other backslash-x is x."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), s)


def edge_lines(text: str) -> list[str]:
    return re.findall(r"^\s*\w+ -> \w+( \[.*\])?;$", text, re.M)


def node_labels(text: str) -> dict[str, str]:
    """id -> label of every node statement (a strict parse of our own DOT lines)."""
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(\w+) \[label=" + _QUOTED + r"(.*)\];", line)
        if m:
            out[m.group(1)] = unquote(m.group(2))
    return out


def hostile_graph():
    b = GraphBuilder()
    ids = [b.add_barrier(n) for n in HOSTILE]
    b.chain(ids)
    return b.build()


def svg_texts(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode())
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


class TestGraphDot:
    @pytest.mark.parametrize("color", dot.COLOR_MODES)
    def test_every_mode_colours_every_node(self, color: str) -> None:
        g = random_op_dag(2, 30)
        plan = ExecutionPlan.build(g, max_streams=3)
        text = g.to_dot(color_by=color, plan=plan)
        labels = {k: v for k, v in node_labels(text).items() if k.startswith("n")}
        assert len(labels) == g.num_nodes
        fills = re.findall(r'^  n\d+ \[.*fillcolor="(#[0-9a-f]{6})"', text, re.M)
        assert len(fills) == g.num_nodes
        assert len(edge_lines(text)) == len(g.edges)

    def test_group_colours_follow_the_plan(self) -> None:
        g = quick_start()
        plan = ExecutionPlan.build(g)
        text = dot.graph_dot(g, color="group", plan=plan, legend=False)
        fill = dict(re.findall(r'^  n(\d+) \[.*fillcolor="(#\w+)"', text, re.M))
        relu, scale = (
            str(int(n)) for s in plan.steps if len(s.fused_nodes) > 1 for n in s.fused_nodes
        )
        assert fill[relu] == fill[scale] != st.MUTED
        assert fill["0"] == st.MUTED  # upload is in no group

    def test_stream_colours_follow_the_plan(self) -> None:
        g = random_op_dag(4, 40)
        plan = ExecutionPlan.build(g, max_streams=4, fusion=False)
        text = dot.graph_dot(g, color="stream", plan=plan, legend=False)
        fill = {int(k): v for k, v in re.findall(r'^  n(\d+) \[.*fillcolor="(#\w+)"', text, re.M)}
        for s in plan.steps:
            if s.kind is NodeKind.KernelLaunch:
                assert fill[int(s.node)] == st.stream_color(int(s.stream))

    def test_unknown_mode(self) -> None:
        with pytest.raises(InvalidArgument, match="unknown colour mode"):
            quick_start().to_dot(color_by="rainbow")

    @pytest.mark.parametrize("name", HOSTILE)
    def test_hostile_name_stays_one_label(self, name: str) -> None:
        b = GraphBuilder()
        b.add_barrier(name)
        text = dot.graph_dot(b.build(), legend=False)
        labels = node_labels(text)
        assert list(labels) == ["n0"]
        # graphviz decodes entities, so "&" is written as "&amp;" (the SVG test shows "&")
        assert labels["n0"] == f"{st.printable(name)}\nbarrier".replace("&", "&amp;")
        assert edge_lines(text) == []
        assert "\x1b" not in text

    def test_hostile_names_survive_svg_as_text(self) -> None:
        svg = hostile_graph().to_svg()
        texts = svg_texts(svg)  # well-formed XML: nothing injected
        for name in HOSTILE:
            assert st.printable(name) in texts
        assert "<img" not in svg and "onerror=alert" in svg  # escaped, shown as text


class TestOtherDots:
    def test_plan_dot_steps_and_event_edges(self) -> None:
        plan = ExecutionPlan.build(transformer_block(), max_streams=4)
        text = plan.to_dot()
        waits = sum(s.kind is NodeKind.EventWait for s in plan.steps)
        assert text.count("style=dashed, constraint=false") == waits
        assert len([k for k in node_labels(text) if k.startswith("s")]) == len(plan.steps)

    @pytest.mark.parametrize("post", [False, True])
    def test_domtree_edges_are_idoms(self, post: bool) -> None:
        g = random_op_dag(7, 25)
        tree = dominance.post_dominators(g) if post else dominance.dominators(g)
        edges = set(re.findall(r"^  (\w+) -> n(\d+);", dot.domtree_dot(g, post=post), re.M))
        want = {("root" if p is None else f"n{int(p)}", str(int(n))) for n, p in tree.idom.items()}
        assert edges == want

    def test_cuda_graph_dot_like_cudaGraphDebugDotPrint(self) -> None:
        plan = ExecutionPlan.build(random_op_dag(1, 20), max_streams=2)
        desc = lower(plan)
        text = dot.cuda_graph_dot(desc)
        labels = {k: v for k, v in node_labels(text).items() if k.startswith("g")}
        assert len(labels) == len(desc.nodes)
        assert len(edge_lines(text)) == len(desc.edges)
        for n in desc.nodes:
            lab = labels[f"g{n.index}"]
            assert lab.startswith(f"{n.index}: {n.kind.upper()}\n{n.name}")
            if n.kind == "kernel":
                assert n.function_name in lab
                assert (
                    f"grid ({','.join(map(str, n.grid))}) block ({','.join(map(str, n.block))})"
                    in lab
                )

    def test_svgs_are_well_formed(self) -> None:
        plan = ExecutionPlan.build(quick_start())
        for svg in (
            plan.to_svg(),
            dot.to_svg(dot.domtree_dot(plan.original)),
            dot.to_svg(dot.cuda_graph_dot(plan)),
        ):
            assert ET.fromstring(svg.encode()).tag.endswith("svg")


class TestNotebookDisplay:
    def test_graph_and_plan_display_as_svg(self) -> None:
        g = quick_start()
        for obj in (g, ExecutionPlan.build(g)):
            bundle = obj._repr_mimebundle_()
            assert bundle["image/svg+xml"].lstrip().startswith("<?xml")
            assert bundle["text/plain"]

    def test_too_big_shows_text(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(dot, "SVG_MAX_NODES", 2)
        bundle = quick_start()._repr_mimebundle_()
        assert "image/svg+xml" not in bundle and "too big" in bundle["text/plain"]


class TestDotMissing:
    def test_missing_dot_says_how_to_install(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path
    ) -> None:
        monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dot on PATH
        with pytest.raises(dot.GraphvizMissing, match="apt-get install graphviz") as e:
            quick_start().to_svg()
        assert isinstance(e.value, GraphError)

    def test_display_falls_back_to_text(self, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
        monkeypatch.setenv("PATH", str(tmp_path))
        bundle = quick_start()._repr_mimebundle_()
        assert "image/svg+xml" not in bundle and "apt-get install graphviz" in bundle["text/plain"]
