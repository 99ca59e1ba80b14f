"""Pass benchmark: fusion, stream and memory passes on 1k/10k/100k-node graphs.

Every ratio is measured in this one run, against a baseline run on the same input:

* build (first): ``ExecutionPlan.build(synthetic(n, shape), max_streams=4)`` per size and
  shape, wall and CPU seconds and the per-pass times of its trace, next to issue 14's targets:
  each 100k-node build under 5 s, the 100k layered memory pass under 2 s, and 10x more nodes
  costing at most 12x more time (``--build-only`` prints just this table; ``--repeat k``
  builds each k times, interleaved, and reports the medians, judging the targets on them);

* fusion: kernels before/after, peak live bytes before/after, time;
* streams (cap ``--streams``): our assignment vs the round-robin-by-level baseline: streams,
  DAG width, events inserted vs the minimum for the assignment, makespan under the cost
  model vs the lower bound ``max(critical path, work / streams)``, time;
* memory (on the stream-assigned graph): arena vs the lower bound (the heavier of plain
  liveness over the issue order and the schedule-aware clique bound of the memory pass, which
  no safe placement beats), the interval plan alone and TFLite's
  greedy-by-size on the same happens-before-safe lifetimes, time; the winning strategy is the
  interval planner's or the exact happens-before placement's (``conflict_best_fit_*``), and
  the interval plan's ratio reads "skipped" when the pass did not run it (too many pairs,
  or the placement already met the lower bound);
* the MiniMalloc challenging instances through the memory helper's planner
  (``plan_intervals``) vs ``greedy_by_size``.

Usage::

    python bench/passes.py [--sizes 1000,10000,100000] [--shapes chain,layered,transformer]
                           [--streams 4] [--instances A,B,C,D,E] [--max-pairs 20000000]
                           [--build-only] [--repeat 1]

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from oxiwork.examples import synthetic
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.graph import ComputeGraph
from oxiwork.optimizer.fusion import fuse
from oxiwork.optimizer.memory import greedy_by_size, plan_intervals
from oxiwork.optimizer.memory_pass import buffer_intervals, plan_memory
from oxiwork.optimizer.stream import assign_streams, round_robin_by_level

DATA = Path("/work/shared/bench-data/minimalloc")


def overlap_pairs(intervals: list[tuple[int, int, int]]) -> int:
    """How many pairs of intervals overlap in time (the heuristic planner's work scales so)."""
    starts = sorted(s for s, _, _ in intervals)
    return sum(
        bisect.bisect_left(starts, e) - bisect.bisect_right(starts, s) for s, e, _ in intervals
    )


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t0


def reference_seconds() -> float:
    """Seconds a fixed pure-Python workload takes on this machine now: Kahn's topological
    order of a seeded random 200k-node DAG kept in lists, dicts and sets, the interpreter
    work the passes do. Timed beside the builds, it says how fast the machine ran during
    them, so runs on different machines (or one machine at busier times) can be compared:
    the targets are absolute seconds, the machine is not."""
    import random

    rng = random.Random(14)
    n = 200_000
    gc.disable()  # as the builds run (ExecutionPlan.build pauses the collector)
    t0 = time.perf_counter()
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = dict.fromkeys(range(n), 0)
    for v in range(1, n):
        for u in {rng.randrange(max(0, v - 64), v) for _ in range(2)}:
            succ[u].append(v)
            indeg[v] += 1
    ready = [v for v, k in indeg.items() if not k]
    order = []
    seen: set[int] = set()
    while ready:
        v = ready.pop()
        order.append(v)
        seen.add(v)
        for w in succ[v]:
            indeg[w] -= 1
            if not indeg[w]:
                ready.append(w)
    seconds = time.perf_counter() - t0
    gc.enable()
    assert len(order) == n == len(seen)
    return seconds


def bench_graph(shape: str, n: int, cap: int, max_pairs: int, rows: dict[str, list[str]]) -> None:
    g: ComputeGraph = synthetic(n, shape)
    fres, tf = timed(fuse, g)
    fa = fres.artefacts
    rows["fusion"].append(
        f"| {shape} | {n:,} | {fa['kernels_before']:,} | {fa['kernels_after']:,} | "
        f"{fa['peak_bytes_before']:,} | {fa['peak_bytes_after']:,} | {tf:.2f} |"
    )
    fused = fres.graph
    for name, fn in (("ours", assign_streams), ("round-robin-by-level", round_robin_by_level)):
        res, ts = timed(fn, fused, max_streams=cap)
        sa = res.artefacts["streams"]
        width = f"{sa.width:,}" + ("" if sa.width_exact else "+")
        rows["streams"].append(
            f"| {shape} | {fused.num_nodes:,} | {name} | {sa.method} | {sa.num_streams} | "
            f"{width} | {sa.event_count:,} | {sa.min_event_count:,} | {sa.record_count:,} | "
            f"{sa.makespan * 1e3:.3f} | {sa.lower_bound * 1e3:.3f} | {sa.ratio:.3f} | {ts:.2f} |"
        )
        if name == "ours":
            streamed = res.graph
    safe, _, _ = buffer_intervals(streamed)
    sizes = {b.id: b.size_bytes for b in streamed.buffers}
    triples = [(a, e, sizes[b]) for b, (a, e) in safe.items()]
    pairs = overlap_pairs(triples)
    if pairs > max_pairs:
        rows["memory"].append(
            f"| {shape} | {fused.num_nodes:,} | {len(triples):,} | {pairs:,} | skipped: more "
            f"than {max_pairs:,} overlapping lifetime pairs | | | | | | | | |"
        )
        return
    mres, tm = timed(plan_memory, streamed)
    rep = mres.artefacts["memory"]
    # greedy-by-size on the same lifetimes, each size rounded to the 256-byte alignment
    greedy, tg = timed(greedy_by_size, triples, alignment=256)
    # rep.plan is the interval planner's plan only when it ran; above MAX_INTERVAL_PAIRS
    # overlapping pairs, or when the placement met the bound, it is skipped and rep.plan
    # carries the exact placement instead.
    if rep.plan.strategy.startswith("conflict_best_fit"):
        interval = "skipped"
    else:
        interval = f"{rep.plan.arena_bytes / max(rep.lower_bound, 1):.3f} ({rep.plan.strategy})"
    rows["memory"].append(
        f"| {shape} | {fused.num_nodes:,} | {len(triples):,} | {pairs:,} | "
        f"{rep.arena_bytes:,} | {rep.lower_bound:,} | {rep.ratio:.3f} | {rep.strategy} | "
        f"{'-' if rep.conflict_pairs is None else f'{rep.conflict_pairs:,}'} | {tm:.2f} | "
        f"{interval} | "
        f"{greedy.arena_bytes / max(rep.lower_bound, 1):.3f} | {tg:.2f} |"
    )


BUILD_TARGET_S = 5.0  # ExecutionPlan.build of a 100k-node synthetic graph
MEMORY_TARGET_S = 2.0  # the memory pass on the 100k layered graph
GROWTH_TARGET = 12.0  # time growth for 10x the nodes
wall_clock = time.perf_counter  # what the build table times builds by (its test swaps it)


class CollectorClock:
    """CPU seconds the cyclic garbage collector runs while enabled (``gc.callbacks``).

    ``ExecutionPlan.build`` pauses the collector for its passes; what a build leaves behind
    (its surviving container objects) is scanned by the collections that follow, inside
    ``build`` (its final checks) or after it. The clock shows that share of the build.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.process_time()
        else:
            self.seconds += time.process_time() - self._t0


def build_table(sizes: list[int], shapes: list[str], cap: int, repeat: int = 1) -> None:
    """ExecutionPlan.build per shape and size: times per pass and the targets beside them.

    With ``repeat`` > 1 every build runs that many times, the rounds interleaved (each round
    builds every size and shape once), and the table shows each column's median over the
    rounds, with the range of the wall time beside it; the targets are judged on the
    medians. This machine's run-to-run noise (1.6-1.8x on the same code) is as large as the
    targets' margins, so one sample can flip a verdict either way.
    """
    ExecutionPlan.build(synthetic(200, "layered"), max_streams=cap)  # imports, caches
    print("## ExecutionPlan.build (issue 14 targets beside the measured numbers)\n")
    # Other users of the machine stretch wall time (not CPU time): say how busy it was.
    print(f"Load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)\n")
    clock = CollectorClock()
    gc.callbacks.append(clock)
    samples: dict[tuple[str, int], list[dict[str, float]]] = {}
    # what each plan is (the same in every round: builds are deterministic), kept as plain
    # values so that no plan outlives its round into the next build's timing
    shown: dict[tuple[str, int], str] = {}
    reference: list[float] = []
    for r in range(repeat):
        reference.append(reference_seconds())
        for n in sizes:
            for shape in shapes:
                plan = None  # the last build's plan is freed here, not inside the next timing
                g = synthetic(n, shape)
                gc.collect()
                tracked = len(gc.get_objects())
                clock.seconds = 0.0
                w, c = wall_clock(), time.process_time()
                plan = ExecutionPlan.build(g, max_streams=cap)
                wall, cpu = wall_clock() - w, time.process_time() - c
                collector = clock.seconds
                # One full collection (outside the timing) frees the build's garbage and
                # untracks its tuples of plain values: what is left is what every later
                # full collection scans.
                gc.collect()
                left = len(gc.get_objects()) - tracked  # container objects the build keeps
                per = {t.name: t.seconds for t in plan.trace}
                rest = wall - sum(per.values())
                samples.setdefault((shape, n), []).append(
                    {"wall": wall, "cpu": cpu, "collector": collector, "rest": rest, **per}
                )
                m = plan.memory
                shown[(shape, n)] = (
                    f"{left:,} | {m.arena_bytes / max(m.lower_bound, 1):.3f} | "
                    f"{plan.num_streams} | {plan.event_count:,} | {plan.kernel_count_fused:,}"
                )
                print(f"<!-- round {r + 1}/{repeat}: {shape} {n} {wall:.2f} s -->", file=sys.stderr)
    plan = None
    gc.callbacks.remove(clock)

    def med(key: tuple[str, int], column: str) -> float:
        return statistics.median(s.get(column, 0.0) for s in samples[key])

    what = "median of" if repeat > 1 else "one build of"
    print(f"Each row: the {what} {repeat} interleaved build{'s' if repeat > 1 else ''}.\n")
    print(
        "| shape | nodes | wall s | wall range s | CPU s | fusion s | streams s | memory s | "
        "rest s (lowering, verify_plan) | of which collector s | objects left | "
        "arena / bound | streams | events | kernels | target |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in sizes:
        for shape in shapes:
            key = (shape, n)
            walls = [s["wall"] for s in samples[key]]
            wall = med(key, "wall")
            target = ""
            if n >= 100_000:
                ok = "met" if wall < BUILD_TARGET_S else "NOT met"
                target = f"build < {BUILD_TARGET_S:.0f} s: {ok}"
                if shape == "layered":
                    ok = "met" if med(key, "memory") < MEMORY_TARGET_S else "NOT met"
                    target += f"; memory < {MEMORY_TARGET_S:.0f} s: {ok}"
            print(
                f"| {shape} | {n:,} | {wall:.2f} | {min(walls):.2f}-{max(walls):.2f} | "
                f"{med(key, 'cpu'):.2f} | {med(key, 'fusion'):.2f} | {med(key, 'streams'):.2f} | "
                f"{med(key, 'memory'):.2f} | {med(key, 'rest'):.2f} | {med(key, 'collector'):.2f} | "
                f"{shown[key]} | {target} |",
                flush=True,
            )
    print(f"\nLoad average at the end: {os.getloadavg()[0]:.2f}")
    print(
        f"\nReference workload (fixed pure-Python work, once per round, see "
        f"reference_seconds): {statistics.median(reference):.3f} s "
        f"({min(reference):.3f}-{max(reference):.3f} s). The targets are absolute seconds; "
        "compare runs on different machines by this number."
    )
    print(
        "\n'of which collector' is CPU time inside the build spent in garbage collections "
        "(counted in 'rest'); 'objects left' counts the container objects the last build made "
        "that survive a full collection after it, which later full collections scan again.\n"
    )
    print(
        f"\nGrowth per 10x nodes (target <= {GROWTH_TARGET:.0f}x), wall and CPU ({what} builds):\n"
    )
    print("| shape | sizes | wall growth | CPU growth | target |")
    print("|---|---|---:|---:|---|")
    for shape in shapes:
        for n in sizes:
            if (shape, 10 * n) in samples:
                a, b = (shape, n), (shape, 10 * n)
                gw = med(b, "wall") / med(a, "wall")
                gcpu = med(b, "cpu") / med(a, "cpu")
                ok = "met" if gw <= GROWTH_TARGET else "NOT met"
                print(f"| {shape} | {n:,} -> {10 * n:,} | {gw:.1f}x | {gcpu:.1f}x | {ok} |")
    print()


def load(path: Path) -> list[tuple[int, int, int]]:
    with path.open() as f:
        return [(int(r["lower"]), int(r["upper"]), int(r["size"])) for r in csv.DictReader(f)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--shapes", default="chain,layered,transformer")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--instances", default="A,B,C,D,E")
    ap.add_argument("--max-pairs", type=int, default=20_000_000)
    ap.add_argument("--build-only", action="store_true", help="only the build table")
    ap.add_argument(
        "--repeat", type=int, default=1, help="builds per size and shape (median reported)"
    )
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    shapes = [s for s in args.shapes.split(",") if s]
    build_table(sizes, shapes, args.streams, max(1, args.repeat))
    if args.build_only:
        return

    rows: dict[str, list[str]] = {"fusion": [], "streams": [], "memory": []}
    for n in (int(x) for x in args.sizes.split(",") if x):
        for shape in (s for s in args.shapes.split(",") if s):
            bench_graph(shape, n, args.streams, args.max_pairs, rows)
            print(f"<!-- done {shape} {n} -->", file=sys.stderr, flush=True)

    print("## Fusion\n")
    print("| graph | nodes | kernels before | kernels after | peak bytes before | peak after | s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows["fusion"]))
    print(f"\n## Streams (cap {args.streams}; width '+' = lower bound only)\n")
    print(
        "| graph | nodes (fused) | assignment | method | streams | width | events (waits) | "
        "min events | records | makespan ms | lower bound ms | ratio | s |"
    )
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows["streams"]))
    print("\n## Memory (happens-before safe lifetimes on the stream schedule)\n")
    print(
        "| graph | nodes | buffers | overlapping safe-interval pairs | arena | lower bound | "
        "ratio | winning strategy | conflicting pairs | s | interval plan ratio (strategy) | "
        "greedy-by-size ratio | greedy s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    print("\n".join(rows["memory"]))

    print("\n## MiniMalloc challenging instances (heuristic mode)\n")
    print("| instance | buffers | lower bound | ours | ratio | s | greedy-by-size | ratio | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name in (x for x in args.instances.split(",") if x):
        path = DATA / f"{name}.1048576.csv"
        if not path.exists():
            print(f"| {name} | missing: {path} | | | | | | | |")
            continue
        iv = load(path)
        ours, to = timed(plan_intervals, iv)
        greedy, tg = timed(greedy_by_size, iv)
        lb = ours.lower_bound
        print(
            f"| {name} | {len(iv)} | {lb:,} | {ours.arena_bytes:,} | "
            f"{ours.arena_bytes / lb:.3f} | {to:.2f} | {greedy.arena_bytes:,} | "
            f"{greedy.arena_bytes / lb:.3f} | {tg:.2f} |"
        )


if __name__ == "__main__":
    main()
