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


def test_memory_chart_marks_bound_each_graph_owned_bar():
    from oxiwork.executor.plan import ExecutionPlan
    from oxiwork.widget.viewmodel import memory_section

    b = GraphBuilder()
    owned = []
    for i in range(3):
        t = b.alloc_buffer(f"t{i}", 1024 * (i + 1))
        b.add_mem_alloc(f"alloc t{i}", t)
        b.add_memset(f"fill t{i}", 1024 * (i + 1), i, dst=t)
        b.add_mem_free(f"free t{i}", t)
        owned.append(int(t))
    plan = ExecutionPlan.build(b.build())
    m = memory_section(plan.graph, plan.memory)
    bars = {r["id"]: r for r in m["buffers"]}
    by = {(k["kind"], k["buffer"]): k for k in m["marks"]}
    assert {k["buffer"] for k in m["marks"]} == set(owned) & set(bars)
    order = list(plan.memory.order)
    for buf in set(owned) & set(bars):
        alloc, free = by[("alloc", buf)], by[("free", buf)]
        # The alloc opens the bar at its step, the free closes it after its own.
        assert plan.graph.node(order[alloc["step"]]).kind.value == "mem_alloc"
        assert plan.graph.node(order[free["step"] - 1]).kind.value == "mem_free"
        assert bars[buf]["start"] <= alloc["step"] < free["step"] <= bars[buf]["end"]
    assert m["marks"] and all(k["buffer"] in bars for k in m["marks"])


def test_dag_section_sends_each_body_with_its_nodes_and_edges():
    from oxiwork.widget.viewmodel import KINDS, dag_section

    g = course.countdown_branch()
    meta, _ = dag_section(g)
    bodies = meta["bodies"]
    holders = [n for n in g.nodes if n.bodies]
    assert holders and len(bodies) >= sum(len(n.bodies) for n in holders)
    pos = g.dense().pos
    outer = [b for b in bodies if b["parent"] == -1]
    assert [(b["node"], b["title"]) for b in outer] == [
        (pos[n.id], body_title(n, k)) for n in holders for k in range(len(n.bodies))
    ]
    pairs = [(h, k) for h in holders for k in range(len(h.bodies))]
    for b, (h, k) in zip(outer, pairs, strict=True):
        body = h.bodies[k]
        assert b["names"] == [m.name for m in body.nodes]
        assert [KINDS[c] for c in b["kinds"]] == [m.kind.value for m in body.nodes]
        ids = [m.id for m in body.nodes]
        assert sorted((ids[i], ids[j]) for i, j in b["edges"]) == sorted(body.edges)
    for b in bodies:
        assert -1 <= b["parent"] < bodies.index(b)
        # A nested body's parent is the body holding its node (titles start with the holder's name).
        if b["parent"] >= 0:
            assert b["title"].startswith(bodies[b["parent"]]["names"][b["node"]] + ":")
    assert any(b["parent"] >= 0 for b in bodies)
    from oxiwork.examples import quick_start

    assert dag_section(quick_start())[0]["bodies"] == []
