"""``python -m oxiwork``: run a graph through the whole engine and print what each stage found.

With no argument it uses the seed's quick start; ``--example transformer`` uses the bundled
transformer-block DAG; ``--json FILE`` loads a graph saved with ``ComputeGraph.to_json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from oxiwork.error import GraphError
from oxiwork.graph import ComputeGraph


def _load(args: argparse.Namespace) -> ComputeGraph:
    from oxiwork import examples

    if args.json:
        # Bytes: from_json reports a file that is not UTF-8 as malformed, like bad JSON.
        return ComputeGraph.from_json(Path(args.json).read_bytes())
    if args.example == "transformer":
        return examples.transformer_block()
    return examples.quick_start()


def _names(graph: ComputeGraph, ids: object) -> str:
    return ", ".join(graph.node(i).name for i in ids)  # type: ignore[attr-defined]


def report(graph: ComputeGraph, *, max_streams: int, memory_mode: str, out=sys.stdout) -> int:
    """Print the analyses, the pass trace, the plan and a simulation check of ``graph``."""
    from oxiwork import cost, reference
    from oxiwork.analysis import dominance, liveness, topo
    from oxiwork.executor.plan import ExecutionPlan
    from oxiwork.executor.simulator import SequentialExecutor, input_names

    def p(*parts: object) -> None:
        print(*parts, file=out)

    kernels = len(graph.kernels())
    p(
        f"graph: {graph.num_nodes} nodes ({kernels} kernels), {len(graph.buffers)} buffers, "
        f"{len(graph.edges)} edges"
    )

    # Times from the cost model (H200 defaults), in microseconds.
    t = topo.analyze(graph, cost.node_costs(graph))
    us = 1e6
    levels = t.level_widths
    p(f"\n[topo] {len(levels)} levels, widths {list(levels[:12])}")
    path = list(t.critical_path)
    shown = _names(graph, path[:8]) + (f", … (+{len(path) - 8} more)" if len(path) > 8 else "")
    p(f"[topo] critical path: {len(path)} nodes, {t.makespan * us:.2f} us: {shown}")
    if graph.num_nodes <= 12:
        for nid in graph.topological_order():
            p(
                f"  {graph.node(nid).name:<12} level {t.level[nid]}  "
                f"asap {t.asap[nid] * us:6.2f} us  alap {t.alap[nid] * us:6.2f} us  "
                f"slack {t.slack[nid] * us:.2f} us"
            )

    live = liveness.analyze(graph)
    p(f"\n[liveness] max live bytes {live.max_live_bytes} (the lower bound of any memory plan)")
    dom = dominance.dominators(graph)
    pdom = dominance.post_dominators(graph)
    if graph.num_nodes <= 12:
        for nid in graph.topological_order():
            i, j = dom.idom[nid], pdom.idom[nid]
            p(
                f"  {graph.node(nid).name:<12} idom {graph.node(i).name if i is not None else '-':<10}"
                f" ipdom {graph.node(j).name if j is not None else '-'}"
            )

    plan = ExecutionPlan.build(graph, max_streams=max_streams, memory_mode=memory_mode)
    p("\n[passes]")
    for entry in plan.trace:
        p(f"  {entry.summary()}")
        not_fused = entry.artefacts.get("not_fused") if entry.name == "fusion" else None
        if not_fused:
            p(f"  not fused: {len(not_fused)} kernel -> kernel edge(s); for example")
            seen: set[str] = set()
            for (a, b), rule in not_fused.rules().items():
                if rule not in seen and len(seen) < 3:  # one example per rule
                    seen.add(rule)
                    p(f"    {graph.node(a).name} -> {graph.node(b).name}: {not_fused[(a, b)]}")
    p(
        f"\n[plan] {plan.kernel_count_original} kernels -> {plan.kernel_count_fused} after "
        f"fusion, {plan.num_streams} stream(s), {plan.event_count} event(s), "
        f"arena {plan.pool_bytes} bytes"
    )
    p(plan.summary())

    inputs = {
        name: reference.generated_input(graph.buffer_by_name(name), seed=0)
        for name in input_names(plan)
    }
    stats = SequentialExecutor(plan).run(inputs)
    p(
        f"\n[simulator] {stats.kernels_launched} kernel launches, {stats.bytes_copied} bytes "
        f"copied, steps per stream {list(stats.steps_per_stream)}"
    )
    if stats.outputs is not None:
        ref = reference.evaluate(graph, inputs)
        ok = all(np.allclose(v, ref[k], rtol=1e-5, atol=1e-6) for k, v in stats.outputs.items())
        p(f"[simulator] outputs {sorted(stats.outputs)} match the numpy reference: {ok}")
        return 0 if ok else 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m oxiwork``."""
    ap = argparse.ArgumentParser(prog="python -m oxiwork", description=__doc__)
    ap.add_argument("--example", choices=["quick_start", "transformer"], default="quick_start")
    ap.add_argument("--json", help="a graph saved with ComputeGraph.to_json()")
    ap.add_argument("--streams", type=int, default=4, help="maximum number of streams")
    ap.add_argument("--memory", choices=["heuristic", "exact"], default="heuristic")
    args = ap.parse_args(argv)
    try:
        graph = _load(args)
        return report(graph, max_streams=args.streams, memory_mode=args.memory)
    except (GraphError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
