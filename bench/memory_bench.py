"""Memory planner benchmark: MiniMalloc's challenging instances and random interval sets.

Prints markdown tables. For each MiniMalloc instance (capacity 1,048,576 bytes): lower bound,
TFLite greedy-by-size arena and ratio, our heuristic's arena, ratio and time, and the exact
mode's arena, whether it fits the capacity, its search nodes and time. Then heuristic timing on
random interval sets of 1k/10k/100k intervals, with and without 1% long-lived buffers
(ratios and times measured in this one run; the machine may be shared, so compare within it).

Usage::

    python bench/memory_bench.py [--time-limit 120] [--instances A,B,C,D,E] [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import numpy as np

from oxiwork.optimizer.memory import greedy_by_size, plan_intervals

DATA = Path("/work/shared/bench-data/minimalloc")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--instances", default="A,B,C,D,E")
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--skip-exact", action="store_true")
    args = ap.parse_args()

    print("## MiniMalloc challenging instances (capacity 1,048,576 bytes)\n")
    print(
        "| instance | buffers | lower bound | greedy-by-size | greedy ratio | heuristic | "
        "heuristic ratio | heuristic s | strategy | exact arena | fits | nodes | exact s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.instances.split(","):
        (path,) = DATA.glob(f"{name}.*.csv")
        capacity = int(path.name.split(".")[1])
        iv = load(path)
        g = greedy_by_size(iv)
        h = plan_intervals(iv)
        if args.skip_exact:
            ex = "| - | - | - | - |"
        else:
            e = plan_intervals(iv, mode="exact", capacity=capacity, time_limit=args.time_limit)
            ex = f"| {e.arena_bytes:,} | {e.fits} | {e.nodes:,} | {e.seconds:.1f} |"
        print(
            f"| {name} | {len(iv)} | {h.lower_bound:,} | {g.arena_bytes:,} | {g.ratio:.3f} | "
            f"{h.arena_bytes:,} | {h.ratio:.3f} | {h.seconds:.3f} | {h.strategy} {ex}",
            flush=True,
        )

    print("\n## Heuristic on random interval sets (alignment 256)\n")
    print(
        "| intervals | long-lived | overlap pairs | lower bound | greedy ratio | greedy s | "
        "heuristic ratio | heuristic s | strategy |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for long_lived in (0.0, 0.01):
        for n in (int(x) for x in args.sizes.split(",")):
            iv = random_intervals(n, long_lived=long_lived)
            pairs = overlap_pairs(iv)
            t = time.perf_counter()
            g = greedy_by_size(iv, alignment=256)
            tg = time.perf_counter() - t
            t = time.perf_counter()
            h = plan_intervals(iv, alignment=256)
            th = time.perf_counter() - t
            print(
                f"| {n:,} | {long_lived:.0%} | {pairs:,} | {h.lower_bound:,} | {g.ratio:.4f} | "
                f"{tg:.3f} | {h.ratio:.4f} | {th:.3f} | {h.strategy} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
