"""Stream pass speed: the pass before issue 14's speed-up vs now, in one run, same graphs.

For each size and shape: ``fuse(synthetic(n, shape))``, then ``assign_streams(max_streams=4)``
with the pre-speed-up functions (``tests/optimizer/stream_before.py``, the oracle of
``tests/optimizer/test_stream_fast.py``) and with the current pass, alternately, ``--reps``
times each, from the same graph caches (the costs are recomputed each time, both with the
current cost model). Prints CPU seconds (``time.process_time``, min over the repetitions),
the part spent constructing and validating the new graph (``ComputeGraph.with_changes``,
the graph's own work), the ratio, and whether both gave the same graph and artefacts.

Usage::

    PYTHONPATH=. python bench/stream_pass.py [--sizes 10000,100000]
                                             [--shapes chain,layered,transformer] [--reps 2]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from oxiwork.examples import synthetic
from oxiwork.graph import ComputeGraph
from oxiwork.optimizer import stream
from oxiwork.optimizer.fusion import fuse
from tests.optimizer import stream_before

_SPENT = [0.0]
_with_changes = ComputeGraph.with_changes


def _timed_with_changes(self: ComputeGraph, **parts):  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    try:
        return _with_changes(self, **parts)
    finally:
        _SPENT[0] += time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--shapes", default="chain,layered,transformer")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    ComputeGraph.with_changes = _timed_with_changes  # type: ignore[method-assign]
    print("| shape | nodes | fused nodes | before s | now s | of which graph construction "
          "(before / now) | speed-up | same plan |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        for shape in args.shapes.split(","):
            g = fuse(synthetic(n, shape)).graph
            snapshot = {k: (dict(v) if isinstance(v, dict) else v) for k, v in g._cache.items()}
            runs: dict[str, list] = {"before": [], "now": []}
            for _ in range(args.reps):
                for name, assign in (
                    ("before", stream_before.assign_streams),
                    ("now", stream.assign_streams),
                ):
                    g._cache.clear()  # the caches fusion left, nothing a previous run added
                    g._cache.update(
                        {k: (dict(v) if isinstance(v, dict) else v) for k, v in snapshot.items()}
                    )
                    gc.collect()
                    gc.disable()  # as in ExecutionPlan.build
                    _SPENT[0] = 0.0
                    t0 = time.process_time()
                    res = assign(g, max_streams=4)
                    runs[name].append((time.process_time() - t0, _SPENT[0], res))
                    gc.enable()
            (tb, wb, rb), (tn, wn, rn) = (min(runs[k], key=lambda r: r[0]) for k in runs)
            a, b = rb.artefacts["streams"], rn.artefacts["streams"]
            same = rb.graph == rn.graph and a.to_dict() | {"seconds": 0} == b.to_dict() | {
                "seconds": 0
            }
            print(
                f"| {shape} | {n:,} | {len(g.nodes):,} | {tb:.3f} | {tn:.3f} | "
                f"{wb:.3f} / {wn:.3f} | {tb / tn:.2f}x | {same} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
