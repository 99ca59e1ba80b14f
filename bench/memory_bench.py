"""Memory planner benchmark: MiniMalloc's challenging instances and random interval sets.

Prints markdown tables. For each MiniMalloc instance (capacity 1,048,576 bytes): lower bound,
TFLite greedy-by-size arena and ratio, our heuristic's arena, ratio and time, the default
``"auto"`` mode's arena, ratio, proved bound and whether it stopped early (issue 14's target
beside it: <= 1.01x the lower bound), and the exact mode's arena, whether it fits the
capacity, its search nodes and time. Then heuristic timing on
random interval sets of 1k/10k/100k intervals, with and without 1% long-lived buffers: best of
``--repeat`` CPU seconds, and the heuristic's time as a multiple of greedy-by-size's (ratios and
times measured in this one run; the machine may be shared, so compare within it).

Then the stretch of issue 14 (``--stretch D,J``, ``--stretch-time 600``): the exact mode minimising
each named instance's arena with no capacity (MiniMalloc's canonical search, then the
large-neighbourhood descent on its best plan), with the arena, its ratio to the lower bound,
the bound it proved, the seconds, and an independent check of the plan (every pair of buffers
live at the same time compared by address, all pairs, sharing no code with the planner).

``--baseline REV`` also times the planner as it was at git revision ``REV`` (its
``oxiwork/optimizer/memory.py``, loaded as a separate module) on the same inputs, in the same
run. ``--orderings`` prints, per input, every candidate ordering's arena relative to
greedy-by-size and which ordering wins how often (what the large-input pair was chosen by).

``--pass`` prints the graph-level memory pass (:func:`oxiwork.optimizer.memory_pass.plan_memory`)
on the stream-assigned, fused ``examples.transformer_block()`` (1/2/4/8 streams) and
``examples.synthetic(n, "layered" | "transformer")`` (1/2/4/8 streams): arena, the liveness and
conflict-clique lower bounds, arena / best bound, best of ``--repeat`` CPU seconds (each call on
a fresh copy of the graph, so no call finds another's cached analyses), and the arena
against the greedy clique alone and against the exact max-flow clique computed whatever its size; with ``--baseline REV`` also the
pass as it was at ``REV`` (its ``memory_pass.py``, loaded as a separate module) on the same
graphs, its arena measured against this run's bound. Then the pass on ``--random`` fused random
op DAGs of 40-400 nodes on 2, 4 and 8 streams: plans meeting the lower bound, the worst arena /
bound, plans that stopped early, and time (with ``--baseline``: the baseline's plans measured
against this run's bound).

Usage::

    python bench/memory_bench.py [--time-limit 120] [--instances A,B,C,D,E]
                                 [--sizes 1000,10000,100000] [--skip-exact] [--repeat 3]
                                 [--baseline HEAD~1] [--orderings]
                                 [--pass] [--pass-sizes 1000,10000] [--pass-only] [--random 20]
                                 [--stretch D,J] [--stretch-time 600]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import numpy as np

from oxiwork.optimizer import memory
from oxiwork.optimizer.memory import greedy_by_size, plan_intervals

DATA = Path("/work/shared/bench-data/minimalloc")
ROOT = Path(__file__).resolve().parents[1]


def load(path: Path) -> list[tuple[int, int, int]]:
    with path.open() as f:
        return [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)]


def random_intervals(n: int, seed: int = 0, long_lived: float = 0.0) -> list[tuple[int, int, int]]:
    """Lifetimes like a long op sequence: start anywhere, short exponential lengths (mean 20
    steps); a ``long_lived`` fraction lives up to a quarter of the run (like weights)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start = rng.randrange(n)
        length = 1 + int(rng.expovariate(1 / 20))
        if rng.random() < long_lived:
            length = rng.randrange(n // 4 + 1) + 1
        out.append((start, start + length, 256 * rng.randint(1, 4096)))
    return out


def overlap_pairs(intervals: list[tuple[int, int, int]]) -> int:
    """How many pairs of half-open lifetimes overlap in time, by one sort and a binary search.

    With starts sorted, interval i overlaps exactly the later-sorted j with ``start[j] <
    end[i]`` (their end is > their start >= start[i]), so the count is the sum over i of
    ``searchsorted(starts, end[i]) - (i + 1)``, no pairs listed.
    """
    if not intervals:
        return 0
    arr = np.asarray(intervals, dtype=np.int64)
    order = np.argsort(arr[:, 0], kind="stable")
    starts = arr[order, 0]
    stop = np.searchsorted(starts, arr[order, 1], side="left")
    return int(np.maximum(stop - np.arange(1, len(arr) + 1), 0).sum())


def overlapping_pairs(intervals: list[tuple[int, int, int]], offsets: list[int]) -> int:
    """How many pairs of buffers overlap in both time and address (0 for a valid plan).

    All pairs by numpy broadcasting, from the definition alone: half-open lifetimes and
    address ranges ``[offset, offset + size)`` overlap when each starts before the other ends.
    Also counts a negative offset as a fault.
    """
    arr = np.asarray(intervals, dtype=np.int64).reshape(-1, 3)
    off = np.asarray(offsets, dtype=np.int64)
    s, e, z = arr[:, 0], arr[:, 1], arr[:, 2]
    time_ov = (s[:, None] < e[None, :]) & (s[None, :] < e[:, None])
    addr_ov = (off[:, None] < (off + z)[None, :]) & (off[None, :] < (off + z)[:, None])
    both = np.triu(time_ov & addr_ov, k=1)
    return int(both.sum()) + int((off < 0).sum())


def stretch_table(names: list[str], seconds: float) -> None:
    """Issue 14's stretch: minimise each instance's arena in exact mode within ``seconds``."""
    print(f"\n## Stretch: minimum arena, exact mode, {seconds:g} s per instance\n")
    print(
        "| instance | lower bound | arena | arena / 1024 | ratio | proved bound | strategy | "
        "nodes | s | overlapping pairs (independent check) |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    for name in names:
        found = list(DATA.glob(f"{name}.*.csv"))
        if not found:
            print(f"| {name} | not in {DATA} | | | | | | | | |")
            continue
        iv = load(found[0])
        e = plan_intervals(iv, mode="exact", time_limit=seconds)
        bad = overlapping_pairs(iv, list(e.offsets))
        top = max(o + z for o, (_, _, z) in zip(e.offsets, iv, strict=True))
        assert top == e.arena_bytes, "arena is not the plan's top"
        print(
            f"| {name} | {e.lower_bound:,} | {e.arena_bytes:,} | {e.arena_bytes / 1024:.0f} | "
            f"{e.ratio:.4f} | {e.proved_bound:,} | {e.strategy} | {e.nodes:,} | "
            f"{e.seconds:.0f} | {bad} |",
            flush=True,
        )


def baseline_module(rev: str, module: str = "memory") -> ModuleType:
    """``oxiwork/optimizer/<module>.py`` as of git revision ``rev``, imported as its own module."""
    src = subprocess.run(
        ["git", "show", f"{rev}:oxiwork/optimizer/{module}.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    name = f"{module}_baseline"
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up here
    spec.loader.exec_module(mod)
    return mod


def best_cpu(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    """Result and the least CPU seconds over ``repeat`` calls (CPU time: the machine is shared)."""
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return out, best


def best_cpu_fresh(fn: Callable[[Any], Any], graph: Any, repeat: int) -> tuple[Any, float]:
    """:func:`best_cpu` of ``fn(g)`` where each call gets its own copy ``g`` of ``graph``, built
    from its parts outside the timing: a graph caches its analyses (accesses, positions,
    clocks), so a second call on the same graph would find them and time less than a pass
    meeting that graph for the first time does. The copy gets ``graph``'s node costs, as
    the stream pass hands them on to the graph it returns (``cost.restreamed_costs``): the
    pipeline's memory pass does not cost the kernels again either. Its edge ordering is
    checked outside the timing too (``check_ordering``): the stream pass's ``with_changes``
    checked its output's, so in the pipeline the memory pass finds the verdict (and its own
    ``with_changes``, offsets only, keeps it); on the 100k-node layered example the check is
    a tenth of the pass."""
    from oxiwork.cost import restreamed_costs
    from oxiwork.graph import ComputeGraph

    best = float("inf")
    out = None
    for _ in range(repeat):
        g = ComputeGraph(graph.nodes, graph.buffers, graph.edges)
        restreamed_costs(graph, g)
        g.check_ordering()
        t = time.process_time()
        out = fn(g)
        best = min(best, time.process_time() - t)
    return out, best


def print_head(head: str, rule: str, rev: str | None, extra: list[str]) -> None:
    """Print a markdown table's header: ``head`` and ``rule``, then with a baseline ``rev``
    one right-aligned column ``"<rev> <name>"`` per name of ``extra``."""
    if rev is not None:
        head += "".join(f" {rev} {name} |" for name in extra)
        rule += "---:|" * len(extra)
    print(head)
    print(rule)


def orderings_table(instances: list[str]) -> None:
    """Every candidate ordering's arena / greedy-by-size's, per input, and the win counts."""
    names = list(memory._ORDERINGS)
    inputs: list[tuple[str, list[tuple[int, int, int]], int]] = []
    for name in instances:
        (path,) = DATA.glob(f"{name}.*.csv")
        inputs.append((f"MiniMalloc {name}", load(path), 1))
    for n, seeds in ((1000, 5), (5000, 5), (20000, 5), (100000, 1)):
        for ll in (0.0, 0.01, 0.05):
            for seed in range(seeds):
                iv = random_intervals(n, seed=seed, long_lived=ll)
                inputs.append((f"random {n:,} {ll:.0%} #{seed}", iv, 256))
    print("\n## Candidate orderings: arena / greedy-by-size's (lower is better)\n")
    print("| input | " + " | ".join(names) + " | winner |")
    print("|---|" + "---|" * (len(names) + 1))
    wins: Counter[str] = Counter()
    sole: Counter[str] = Counter()
    for label, iv, align in inputs:
        p = memory._make_problem(memory._validate_intervals(iv), align)
        arena = {nm: memory._heuristic(p, (nm,))[1] for nm in names}
        best = min(arena.values())
        won = [nm for nm in names if arena[nm] == best]
        wins.update(won)
        if len(won) == 1:
            sole[won[0]] += 1
        g = arena["greedy_by_size"]
        cells = " | ".join(f"{arena[nm] / g:.4f}" for nm in names)
        print(f"| {label} | {cells} | {', '.join(won)} |", flush=True)
    print("\n| ordering | best (ties count for each) | sole best |")
    print("|---|---:|---:|")
    for nm in names:
        print(f"| {nm} | {wins[nm]} of {len(inputs)} | {sole[nm]} |")


def greedy_bound(g: Any) -> int:
    """The pass's bound with the exact max-flow clique switched off (the greedy clique only)."""
    from oxiwork.optimizer import memory_pass

    cap = memory_pass.MAX_ANTICHAIN_PAIRS
    memory_pass.MAX_ANTICHAIN_PAIRS = -1
    try:
        return max(memory_pass.plan_memory(g).artefacts["memory"].lower_bound, 1)
    finally:
        memory_pass.MAX_ANTICHAIN_PAIRS = cap


def exact_bound(g: Any) -> int:
    """The maximum-weight clique of the conflict graph by one max flow, whatever its size."""
    from oxiwork.optimizer import memory_pass

    a = memory_pass._analyse(g)
    by_id = {b.id: b for b in g.buffers}
    align = np.array([by_id[b].alignment for b in a.ids], dtype=np.int64)
    size = -(-np.array([by_id[b].size_bytes for b in a.ids], dtype=np.int64) // align) * align
    if not len(size):
        return 1
    return max(int(size[memory_pass._max_antichain(a, size)].sum()), 1)


def pass_table(sizes: list[int], repeat: int, rev: str | None) -> None:
    """The memory pass on stream-assigned graphs: arena against both lower bounds."""
    from oxiwork.examples import synthetic, transformer_block
    from oxiwork.optimizer.fusion import fuse
    from oxiwork.optimizer.memory_pass import plan_memory
    from oxiwork.optimizer.stream import assign_streams

    base = baseline_module(rev, "memory_pass") if rev else None
    graphs = [(f"transformer_block, {s} streams max", transformer_block(), s) for s in (1, 2, 4, 8)]
    graphs += [
        (f"{shape} {n:,}, {s} streams max", synthetic(n, shape, 0), s)
        for shape in ("layered", "transformer")
        for n in sizes
        for s in (1, 2, 4, 8)
    ]
    print("\n## Memory pass (fused, stream-assigned; best of CPU seconds)\n")
    head = (
        "| graph | streams | buffers | arena | liveness bound | conflict bound | "
        "arena / bound (default plan; target <= 1.01) | strategy | s | "
        "arena / greedy-clique bound | arena / exact max-flow bound (uncapped) |"
    )
    rule = "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
    if base is not None:
        head += f" {rev} arena | {rev} arena / bound | {rev} s | time / {rev} |"
        rule += "---:|---:|---:|---:|"
    print(head)
    print(rule)
    for label, g0, cap in graphs:
        g = assign_streams(fuse(g0).graph, max_streams=cap).graph
        streams = len({n.stream for n in g.nodes})
        res, t = best_cpu_fresh(plan_memory, g, repeat)
        rep = res.artefacts["memory"]
        bound = max(rep.lower_bound, 1)
        row = (
            f"| {label} | {streams} | {len(rep.intervals):,} | {rep.arena_bytes:,} | "
            f"{rep.liveness_lower_bound:,} | {rep.conflict_lower_bound:,} | "
            f"{rep.arena_bytes / bound:.3f} ({'met' if rep.arena_bytes <= 1.01 * bound else 'NOT met'})"
            f" | {rep.strategy} | {t:.3f} | {rep.arena_bytes / greedy_bound(g):.3f} | "
            f"{rep.arena_bytes / exact_bound(g):.3f} |"
        )
        if base is not None:
            old, tb = best_cpu_fresh(base.plan_memory, g, repeat)
            oa = old.artefacts["memory"].arena_bytes
            row += f" {oa:,} | {oa / bound:.3f} | {tb:.3f} | {t / tb:.2f} |"
        print(row, flush=True)


def random_table(count: int, repeat: int, rev: str | None) -> None:
    """The memory pass on ``count`` fused random op DAGs of 40-400 nodes per stream cap: how
    many default plans meet the lower bound, the worst arena / bound, and time."""
    from oxiwork.examples import random_op_dag
    from oxiwork.optimizer.fusion import fuse
    from oxiwork.optimizer.memory_pass import plan_memory
    from oxiwork.optimizer.stream import assign_streams

    base = baseline_module(rev, "memory_pass") if rev else None
    print(f"\n## Memory pass on {count} random op DAGs (seeds 0-{count - 1}, 40-400 nodes)\n")
    head = "| streams max | plans at the bound | worst arena / bound | stopped early | total s |"
    print_head(head, "|---:|---:|---:|---:|---:|", rev, ["at the bound", "worst", "total s"])
    sizes = [40 + (360 * seed) // max(count - 1, 1) for seed in range(count)]
    fused = [fuse(random_op_dag(seed, n)).graph for seed, n in enumerate(sizes)]  # once each
    for cap in (2, 4, 8):
        met = stopped = 0
        worst = 1.0
        total = old_total = 0.0
        old_met, old_worst = 0, 1.0
        for f in fused:
            g = assign_streams(f, max_streams=cap).graph
            res, t = best_cpu_fresh(plan_memory, g, repeat)
            rep = res.artefacts["memory"]
            bound = max(rep.lower_bound, 1)
            met += rep.arena_bytes == rep.lower_bound
            stopped += rep.stopped_early
            worst = max(worst, rep.arena_bytes / bound)
            total += t
            if base is not None:
                old, tb = best_cpu_fresh(base.plan_memory, g, repeat)
                oa = old.artefacts["memory"].arena_bytes
                old_met += oa == rep.lower_bound
                old_worst = max(old_worst, oa / bound)
                old_total += tb
        row = f"| {cap} | {met}/{count} | {worst:.3f} | {stopped} | {total:.2f} |"
        if base is not None:
            row += f" {old_met}/{count} | {old_worst:.3f} | {old_total:.2f} |"
        print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--instances", default="A,B,C,D,E")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--skip-exact", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="timings: best of this many runs")
    ap.add_argument("--baseline", help="git revision whose planner to time alongside")
    ap.add_argument("--orderings", action="store_true", help="print the orderings table")
    ap.add_argument("--pass", dest="pass_", action="store_true", help="print the pass table")
    ap.add_argument("--pass-sizes", default="1000,3000", help="synthetic graph sizes (--pass)")
    ap.add_argument("--pass-only", action="store_true", help="only the pass table")
    ap.add_argument("--random", type=int, default=20, help="random op DAGs (--pass)")
    ap.add_argument("--stretch", default="D,J", help="instances to minimise (issue 14)")
    ap.add_argument("--stretch-time", type=float, default=600.0, help="seconds per instance")
    args = ap.parse_args()
    if args.pass_ or args.pass_only:
        sizes = [int(x) for x in args.pass_sizes.split(",") if x]
        pass_table(sizes, args.repeat, args.baseline)
        random_table(args.random, args.repeat, args.baseline)
    if args.pass_only:
        return
    base = baseline_module(args.baseline) if args.baseline else None

    print("## MiniMalloc challenging instances (capacity 1,048,576 bytes)\n")
    print(
        "| instance | buffers | lower bound | greedy-by-size | greedy ratio | heuristic | "
        "heuristic ratio | heuristic s | strategy | auto ratio (target <= 1.01) | "
        "auto proved bound | auto stopped early | auto s | exact arena | fits | nodes | "
        "exact s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.instances.split(","):
        (path,) = DATA.glob(f"{name}.*.csv")
        capacity = int(path.name.split(".")[1])
        iv = load(path)
        g = greedy_by_size(iv)
        h = plan_intervals(iv)
        au = plan_intervals(iv, mode="auto")
        met = "met" if au.ratio <= 1.01 else "NOT met"
        auto = (
            f"{au.ratio:.3f} ({met}) | {au.proved_bound:,} | {au.stopped_early} | {au.seconds:.2f} "
        )
        if args.skip_exact:
            ex = "| - | - | - | - |"
        else:
            e = plan_intervals(iv, mode="exact", capacity=capacity, time_limit=args.time_limit)
            ex = f"| {e.arena_bytes:,} | {e.fits} | {e.nodes:,} | {e.seconds:.1f} |"
        print(
            f"| {name} | {len(iv)} | {h.lower_bound:,} | {g.arena_bytes:,} | {g.ratio:.3f} | "
            f"{h.arena_bytes:,} | {h.ratio:.3f} | {h.seconds:.3f} | {h.strategy} | {auto}{ex}",
            flush=True,
        )

    print("\n## Heuristic on random interval sets (alignment 256, best of CPU seconds)\n")
    head = (
        "| intervals | long-lived | overlap pairs | lower bound | greedy ratio | greedy s | "
        "heuristic ratio | heuristic s | heuristic / greedy time | strategy |"
    )
    rule = "|---|---|---|---|---|---|---|---|---|---|"
    if base is not None:
        head += f" {args.baseline} ratio | {args.baseline} s | time / {args.baseline} |"
        rule += "---|---|---|"
    print(head)
    print(rule)
    for long_lived in (0.0, 0.01):
        for n in (int(x) for x in args.sizes.split(",")):
            iv = random_intervals(n, long_lived=long_lived)
            pairs = overlap_pairs(iv)
            g, tg = best_cpu(lambda iv=iv: greedy_by_size(iv, alignment=256), args.repeat)
            h, th = best_cpu(lambda iv=iv: plan_intervals(iv, alignment=256), args.repeat)
            row = (
                f"| {n:,} | {long_lived:.0%} | {pairs:,} | {h.lower_bound:,} | {g.ratio:.4f} | "
                f"{tg:.3f} | {h.ratio:.4f} | {th:.3f} | {th / tg:.2f} | {h.strategy} |"
            )
            if base is not None:
                b, tb = best_cpu(lambda iv=iv: base.plan_intervals(iv, alignment=256), args.repeat)
                row += f" {b.ratio:.4f} | {tb:.3f} | {th / tb:.2f} |"
            print(row, flush=True)

    if args.orderings:
        orderings_table(args.instances.split(","))

    if not args.skip_exact and args.stretch:
        stretch_table(args.stretch.split(","), args.stretch_time)


if __name__ == "__main__":
    main()
