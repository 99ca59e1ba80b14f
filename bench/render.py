"""Rendering timings, each printed next to its target (no assertions; ratios within one run).

1. Every matplotlib view of a 5,000-node graph (``synthetic(5000, "layered")``, planned on
   4 streams), figure built and written as PNG and as SVG (in memory); target < 2 s each.
   Above ``figures.AGGREGATE_ABOVE`` nodes the DAG and the trees are drawn aggregated.
2. The HTML report of the 298-node transformer example; targets < 2 s and < 5 MB.
3. graphviz SVG of the 298-node DAG, for comparison.

Run: ``python bench/render.py [--nodes 5000] [--repeat 2]`` (best of ``repeat``).
"""

from __future__ import annotations

import argparse
import io
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import matplotlib

matplotlib.use("Agg")

from oxiwork.examples import synthetic, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.export.html import report_html
from oxiwork.render import dot, figures


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    t = time.perf_counter()
    plan = ExecutionPlan.build(synthetic(args.nodes, "layered"), max_streams=4)
    print(f"planned {args.nodes:,} nodes ({len(plan.steps):,} steps) in "
          f"{time.perf_counter() - t:.2f} s (not counted below)")  # fmt: skip
    print(f"{'view':<16} {'PNG s':>7} {'SVG s':>7}  target")
    for name, make in figures.VIEWS.items():
        cells = []
        for fmt in ("png", "svg"):

            def once(make=make, fmt=fmt) -> None:
                with matplotlib.rc_context({"svg.fonttype": "none"}):
                    make(plan).savefig(io.BytesIO(), format=fmt, dpi=100)

            cells.append(best(once, args.repeat))
        verdict = "ok" if max(cells) < 2 else "OVER"
        print(f"{name:<16} {cells[0]:>7.2f} {cells[1]:>7.2f}  < 2 s ({verdict})")

    small = ExecutionPlan.build(transformer_block(), max_streams=4)
    page = ""

    def report() -> None:
        nonlocal page
        page = report_html(small)

    secs = best(report, args.repeat)
    size = len(page.encode())
    print(f"HTML report, {small.original.num_nodes} nodes: {secs:.2f} s (target < 2 s), "
          f"{size / 1e6:.2f} MB (target < 5 MB)")  # fmt: skip
    src = dot.graph_dot(small.original, color="group", plan=small)
    print(f"graphviz SVG of the {small.original.num_nodes}-node DAG: "
          f"{best(lambda: dot.to_svg(src), args.repeat):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
