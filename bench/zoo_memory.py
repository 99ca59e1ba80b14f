"""The memory pass on the importer zoo's models: how often the default plan meets its bound.

For each model of ``tests/importers/test_torch_zoo.py`` (shrunk Hugging Face models, random
weights, nothing downloaded) and each stream cap of ``--streams``: the imported graph fused
and stream-assigned, then :func:`oxiwork.optimizer.memory_pass.plan_memory` in its default
mode (``"auto"``, the conflict search within ``auto_time_limit``). Per stream cap, in one run:
the plans whose arena meets the proven lower bound, those that stopped early, the worst arena
/ bound, the plans on which the conflict search ran, and the pass's total CPU seconds; with
``--baseline REV`` the same for ``memory_pass.py`` as of git revision ``REV`` on the same
graphs, its arenas measured against this run's bound (never below the baseline's: both are
proven). ``--rows`` also prints one row per plan the search ran on.

Needs ``transformers`` (as the zoo tests do). Usage::

    PYTHONPATH=. .venv/bin/python bench/zoo_memory.py [--streams 2,4,8] [--baseline HEAD~1]
        [--models llama,phi,...] [--rows]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "bench"))

from memory_bench import baseline_module, best_cpu_fresh, print_head  # noqa: E402

from oxiwork.optimizer.fusion import fuse  # noqa: E402
from oxiwork.optimizer.memory_pass import plan_memory  # noqa: E402
from oxiwork.optimizer.stream import assign_streams  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", default="2,4,8")
    ap.add_argument("--baseline", help="git revision whose memory pass to run alongside")
    ap.add_argument("--models", help="comma-separated zoo names (default: all)")
    ap.add_argument("--rows", action="store_true", help="one row per plan the search ran on")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from tests.importers.test_torch_zoo import ZOO, imported

    base = baseline_module(args.baseline, "memory_pass") if args.baseline else None
    caps = [int(s) for s in args.streams.split(",")]
    names = args.models.split(",") if args.models else sorted(ZOO)
    stats = {cap: {"plans": 0, "met": 0, "stopped": 0, "worst": 1.0, "searched": 0, "s": 0.0,
                   "base_met": 0, "base_worst": 1.0, "base_s": 0.0} for cap in caps}  # fmt: skip
    rows = []
    for name in names:
        model = imported(name)
        fused = fuse(model.graph).graph
        for cap in caps:
            g = assign_streams(fused, max_streams=cap).graph
            res, t = best_cpu_fresh(plan_memory, g, 1)
            rep = res.artefacts["memory"]
            bound = max(rep.lower_bound, 1)
            st = stats[cap]
            st["plans"] += 1
            st["met"] += rep.arena_bytes == rep.lower_bound
            st["stopped"] += rep.stopped_early
            st["worst"] = max(st["worst"], rep.arena_bytes / bound)
            searched = rep.strategy == "conflict_search" or rep.search_nodes > 0
            st["searched"] += searched
            st["s"] += t
            row = f"| {name} | {cap} | {len(rep.intervals)} | {rep.arena_bytes / bound:.3f} |"
            if base is not None:
                old, tb = best_cpu_fresh(base.plan_memory, g, 1)
                oa = old.artefacts["memory"].arena_bytes
                st["base_met"] += oa == rep.lower_bound
                st["base_worst"] = max(st["base_worst"], oa / bound)
                st["base_s"] += tb
                row += f" {oa / bound:.3f} |"
            if searched:
                rows.append(row)
        print(f"{name} done", file=sys.stderr, flush=True)
    print(f"\n## Memory pass on {len(names)} zoo models (default mode; arena / proven bound)\n")
    head = "| streams max | plans | at the bound | stopped early | worst | searched | CPU s |"
    rule = "|---:|---:|---:|---:|---:|---:|---:|"
    print_head(head, rule, args.baseline, ["at the bound", "worst", "CPU s"])
    for cap in caps:
        st = stats[cap]
        row = (
            f"| {cap} | {st['plans']} | {st['met']} | {st['stopped']} | {st['worst']:.3f} | "
            f"{st['searched']} | {st['s']:.2f} |"
        )
        if base is not None:
            row += f" {st['base_met']} | {st['base_worst']:.3f} | {st['base_s']:.2f} |"
        print(row)
    if args.rows:
        print(
            "\n| model | streams max | buffers | arena / bound |" + (" baseline |" if base else "")
        )
        print("|---|---:|---:|---:|" + ("---:|" if base else ""))
        print("\n".join(rows))


if __name__ == "__main__":
    main()
