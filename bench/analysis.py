"""Benchmark of the analyses (topo + liveness + dominators + post-dominators) on big DAGs.

Builds synthetic DAGs of 1k, 10k and 100k nodes (chains, wide layered random DAGs,
transformer-like blocks from :func:`oxiwork.examples.synthetic`, and sparse random DAGs
from ``tests/strategies.py``), reports the build time separately, then times all four
analyses together and ``networkx.immediate_dominators`` on the same graphs in the same
run. Prints a markdown table with the growth ratio 10k -> 100k and networkx / ours for
dominators.

Targets (2-core machine): all analyses of a 100k-node DAG under 1 s, growth 10x nodes ->
at most 12x time, our dominators at least 3x faster than networkx at 100k.

Run: ``.venv/bin/python bench/analysis.py [--sizes 1000 10000 100000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import networkx as nx

from oxiwork import ComputeGraph, GraphWarning
from oxiwork.analysis import dominance, liveness, topo

ROOT = "__root__"


def make_graph(shape: str, n: int, seed: int = 0) -> ComputeGraph:
    """A synthetic DAG of ``shape`` with about ``n`` nodes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        if shape == "random":
            from tests.strategies import build_dag, dag_edges

            return build_dag(*dag_edges("random", n, seed), seed)
        from oxiwork.examples import synthetic

        return synthetic(n, shape, seed)


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """Minimum wall time of ``repeat`` runs (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def all_analyses(g: ComputeGraph) -> None:
    topo.analyze(g)
    liveness.analyze(g)
    dominance.dominators(g)
    dominance.post_dominators(g)


def nx_dominators(g: ComputeGraph) -> None:
    # The same problem as ours: a virtual root before every source. Building the DiGraph
    # is not timed; only the dominator computation is.
    h = g.to_networkx()
    h.add_edges_from((ROOT, s) for s in g.sources())
    t0 = time.perf_counter()
    nx.immediate_dominators(h, ROOT)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--shapes", nargs="+", default=["chain", "layered", "transformer", "random"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    rows = []
    for shape in args.shapes:
        prev = None
        for n in args.sizes:
            t0 = time.perf_counter()
            g = make_graph(shape, n)
            build = time.perf_counter() - t0
            g.dense()  # part of building: every graph validates acyclicity with it
            parts = {
                "topo": best_of(lambda g=g: topo.analyze(g), args.repeat),
                "liveness": best_of(lambda g=g: liveness.analyze(g), args.repeat),
                "dom": best_of(lambda g=g: dominance.dominators(g), args.repeat),
                "postdom": best_of(lambda g=g: dominance.post_dominators(g), args.repeat),
            }
            total = best_of(lambda g=g: all_analyses(g), args.repeat)
            nxt = min(nx_dominators(g) for _ in range(args.repeat))
            growth = f"{total / prev:.1f}x" if prev else ""
            prev = total
            rows.append(
                (shape, g.num_nodes, len(g.edges), build, *parts.values(), total, growth, nxt)
            )
            print(f"  {shape} {n}: total {total:.3f} s", file=sys.stderr, flush=True)

    print(
        "| shape | nodes | edges | build s | topo s | liveness s | dom s | postdom s "
        "| all 4 s | growth | nx idom s | nx/ours (dom) |"
    )
    print("|" + "---|" * 12)
    for shape, n, e, build, tp, lv, dm, pd, total, growth, nxt in rows:
        print(
            f"| {shape} | {n} | {e} | {build:.2f} | {tp:.3f} | {lv:.3f} | {dm:.3f} | {pd:.3f} "
            f"| {total:.3f} | {growth} | {nxt:.3f} | {nxt / dm:.1f}x |"
        )


if __name__ == "__main__":
    main()
