"""The details panel's rows for child graph, conditional and memory alloc/free nodes."""

from __future__ import annotations

from oxiwork import GraphBuilder, course
from oxiwork.render.dot import body_title
from oxiwork.widget.viewmodel import node_details, summary_section


def test_body_nodes_list_their_condition_and_bodies():
    g = course.countdown_branch()
    for n in g.nodes:
        if not n.bodies:
            assert node_details(g, n.id)["params"] == [[k, str(v)] for k, v in n.params]
            continue
        rows = dict(node_details(g, n.id)["params"])
        for k, body in enumerate(n.bodies):
            text = rows[body_title(n, k)]
            assert text.startswith(f"{len(body.nodes)} node")
            assert all(m.name in text for m in body.nodes)
        assert ("condition" in rows) == (n.condition is not None)
        if n.condition is not None:
            assert rows["condition"].startswith(g.buffer(n.condition).name)


def test_memory_nodes_name_the_lifetime_they_bound():
    b = GraphBuilder()
    t = b.alloc_buffer("scratch", 4096)
    a = b.add_mem_alloc("alloc", t)
    b.add_memset("fill", 4096, 0, dst=t)
    f = b.add_mem_free("free", t)
    g = b.build()
    assert dict(node_details(g, a)["params"])["lifetime"].startswith("allocates scratch (4")
    assert dict(node_details(g, f)["params"])["lifetime"].startswith("frees scratch (4")
    nodes = dict(summary_section(g))["nodes"]
    assert "1 memory allocs" in nodes and "1 memory frees" in nodes
