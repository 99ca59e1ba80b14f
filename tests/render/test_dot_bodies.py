"""graph_dot draws the bodies of child graph and conditional nodes as graphviz clusters."""

from __future__ import annotations

import re
import warnings

import pytest
from strategies import build_control_graph

from oxiwork.render.dot import graph_dot, to_svg


def bodies(graph):
    """(body, its holder) for every body graph, nested ones included."""
    for n in graph.nodes:
        for b in n.bodies:
            yield b, n
            yield from bodies(b)


@pytest.mark.parametrize("seed", range(6))
def test_one_cluster_per_body_holding_its_nodes(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g, _ = build_control_graph(seed, 6)
    text = graph_dot(g, legend=False)
    found = list(bodies(g))
    assert len(re.findall(r"subgraph cluster_n", text)) == len(found)
    inner_nodes = sum(len(b.nodes) for b, _ in found)
    inner_edges = sum(len(b.edges) for b, _ in found)
    assert len(re.findall(r"^\s+n\d+(?:_b\d+_\d+)+ \[", text, re.M)) == inner_nodes
    assert len(re.findall(r"^\s+n[\d_b]+ -> n[\d_b]+;$", text, re.M)) == len(g.edges) + inner_edges
    # one dotted edge from each holder into each of its bodies
    assert text.count("style=dotted") == len(found)
    if found:
        assert "compound=true" in text
        assert "<svg" in to_svg(text)


def test_plain_graphs_have_no_clusters():
    from oxiwork.examples import quick_start

    text = graph_dot(quick_start(), legend=False)
    assert "cluster_n" not in text and "compound" not in text
