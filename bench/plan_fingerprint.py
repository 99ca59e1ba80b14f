"""Plan fingerprints: one short hash per ``ExecutionPlan.build`` of a fixed set of graphs.

A speed change to a pass must leave every plan as it was. Run this before and after the change
and compare the outputs (``diff``): the hash covers the plan's steps, arena, streams, events and
kernel count, the planned graph's buffers (ids, names, offsets, sizes), nodes and edges. The
graphs: the synthetic chain, layered and transformer shapes at 500, 3,000 and 20,000 nodes, the
bundled examples and 12 random op DAGs, each planned on 1 and on 4 streams.

Usage::

    python bench/plan_fingerprint.py > before.txt   # then, after the change:
    python bench/plan_fingerprint.py | diff before.txt -
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from oxiwork.examples import quick_start, random_op_dag, synthetic, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.graph import ComputeGraph


def fingerprint(plan: ExecutionPlan) -> str:
    """A 16-hex-digit hash of what the plan computes and where its buffers live."""
    h = hashlib.sha256()
    h.update(repr(plan.steps).encode())
    h.update(
        repr(
            (plan.pool_bytes, plan.num_streams, plan.event_count, plan.kernel_count_fused)
        ).encode()
    )
    buffers = sorted((int(b.id), b.name, b.offset, b.size_bytes) for b in plan.graph.buffers)
    h.update(repr(buffers).encode())
    h.update(repr(plan.graph.nodes).encode())
    h.update(repr(sorted(plan.graph.edges)).encode())
    return h.hexdigest()[:16]


def cases() -> list[tuple[str, Callable[[], ComputeGraph]]]:
    """The graphs, by label, each made on demand."""
    out: list[tuple[str, Callable[[], ComputeGraph]]] = []
    for shape in ("chain", "layered", "transformer"):
        for n in (500, 3000, 20000):
            out.append((f"{shape}-{n}", lambda s=shape, n=n: synthetic(n, s)))
    out += [("quick_start", quick_start), ("transformer_block", transformer_block)]
    for seed in range(12):
        out.append((f"random-{seed}", lambda seed=seed: random_op_dag(seed, 40)))
    return out


def main() -> None:
    for label, make in cases():
        for streams in (1, 4):
            try:
                print(label, streams, fingerprint(ExecutionPlan.build(make(), max_streams=streams)))
            except Exception as e:  # a refused build is part of the fingerprint too
                print(label, streams, "ERROR", type(e).__name__, str(e)[:80])


if __name__ == "__main__":
    main()
