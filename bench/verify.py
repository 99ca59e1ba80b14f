"""verify() benchmark: the ordering invariant on 10k/100k-node graphs and plans.

For each shape and size: build the graph, plan it (fusion, 4 streams, memory), then time,
each on a fresh copy so no per-graph cache helps (best of ``--repeat``, CPU seconds):

* ``graph``: ``verify(graph)``, every graph invariant including the ordering check
  (every two accesses of a buffer, one a write, joined by a path of edges);
* ``ordering``: ``graph.check_ordering()`` alone;
* ``plan``: ``verify(plan)``, every plan invariant: structure, events, per-buffer
  accesses ordered by happens-before, the graph's own ordering, every dependency,
  offsets and buffers sharing arena bytes; "cold" on a fresh copy of ``plan.graph``,
  "as built" with the graph's ordering already checked (cached), as after
  ``ExecutionPlan.build``, which verifies every pass's graph;
* ``races``: ``find_races(plan)``, the race detector over the same plan, and ``floor``:
  one Python pass over the steps touching every buffer argument (what any plan check
  must at least do). The ratios to them are measured in this one run.

Usage::

    python bench/verify.py [--sizes 10000,100000] [--shapes layered,transformer,chain]

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from oxiwork.examples import synthetic
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.races import find_races
from oxiwork.graph import ComputeGraph
from oxiwork.verify import verify


def fresh_graph(g: ComputeGraph) -> ComputeGraph:
    return ComputeGraph(g.nodes, g.buffers, g.edges)


def fresh_plan(p: ExecutionPlan) -> ExecutionPlan:
    return dataclasses.replace(p, graph=fresh_graph(p.graph))


def floor(p: ExecutionPlan) -> None:
    n = 0
    for st in p.steps:
        for a in st.inputs:
            n += a.buffer
        for a in st.outputs:
            n += a.buffer


def best(fn, make, repeat: int) -> float:
    """Best CPU time of ``fn(make())`` (``make`` is not timed)."""
    times = []
    for _ in range(repeat):
        arg = make()
        gc.collect()
        t0 = time.process_time()
        fn(arg)
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--shapes", default="layered,transformer,chain")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        for n in map(int, args.sizes.split(",")):
            g = synthetic(n, shape)
            plan = ExecutionPlan.build(g, max_streams=4, verify=False)
            r = args.repeat
            t_graph = best(verify, lambda g=g: fresh_graph(g), r)
            t_order = best(lambda x: x.check_ordering(), lambda g=g: fresh_graph(g), r)
            t_plan = best(verify, lambda p=plan: fresh_plan(p), r)
            plan.graph.check_ordering()
            t_built = best(verify, lambda p=plan: dataclasses.replace(p), r)
            t_races = best(find_races, lambda p=plan: p, r)
            t_floor = best(floor, lambda p=plan: p, r)
            rows.append(
                (
                    shape,
                    f"{g.num_nodes:,}",
                    f"{len(plan.steps):,} / {plan.num_streams} / {plan.event_count:,}",
                    f"{t_graph:.3f} s",
                    f"{t_order:.3f} s",
                    f"{t_plan:.3f} s",
                    f"{t_built:.3f} s",
                    f"{t_plan / t_races:.2f}x",
                    f"{t_plan / t_floor:.1f}x",
                )
            )
            print(*rows[-1], sep=" | ", file=sys.stderr)
    head = (
        "shape",
        "nodes",
        "steps / streams / events",
        "verify(graph)",
        "check_ordering",
        "verify(plan) cold",
        "verify(plan) as built",
        "cold / find_races",
        "cold / floor",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
