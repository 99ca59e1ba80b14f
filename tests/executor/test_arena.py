"""Tests of oxiwork.executor.arena's overlap search against an all-pairs reference."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from oxiwork.executor.arena import overlapping_pairs, overlapping_ranges
from oxiwork.executor.plan import BufferArg
from oxiwork.node import BufferId

ranges = st.lists(st.tuples(st.integers(0, 64), st.integers(0, 24)), max_size=30)


def sweep(regs: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The sweep: each range against the earlier ones (by start, stop, tie) still open."""
    out, active = [], []
    for lo, hi, k in sorted(regs):
        active = [r for r in active if r[1] > lo]
        out.extend((ak, k) for _, _, ak in active)
        active.append((lo, hi, k))
    return out


@settings(max_examples=200, deadline=None)
@given(regs=ranges)
def test_overlapping_ranges_is_the_sweep(regs):
    start = np.array([lo for lo, _ in regs], dtype=np.int64)
    stop = start + np.array([n for _, n in regs], dtype=np.int64)
    i, j = overlapping_ranges(start, stop, np.arange(len(regs)))
    expect = sweep([(lo, lo + n, k) for k, (lo, n) in enumerate(regs)])
    assert list(zip(i.tolist(), j.tolist(), strict=True)) == expect
    # every pair of non-empty ranges sharing a byte is among them
    shared = {
        frozenset((a, b))
        for a in range(len(regs))
        for b in range(a)
        if max(start[a], start[b]) < min(stop[a], stop[b])
    }
    assert shared <= {frozenset(p) for p in expect}


@settings(max_examples=100, deadline=None)
@given(regs=ranges, external=st.lists(st.booleans(), min_size=30, max_size=30))
def test_overlapping_pairs_skips_external_and_names_shared_bytes(regs, external):
    args = [
        BufferArg(BufferId(k), f"b{k}", None if ext else lo, n, "uint8", (n,), ext)
        for k, ((lo, n), ext) in enumerate(zip(regs, external, strict=False))
    ]
    pairs = overlapping_pairs(args)
    for a, b, lo, hi in pairs:
        assert not args[a].external and not args[b].external
        assert lo == max(args[a].offset, args[b].offset)
        assert hi == min(args[a].offset + args[a].size_bytes, args[b].offset + args[b].size_bytes)
    placed = [(a.offset, a.offset + a.size_bytes, int(a.buffer)) for a in args if not a.external]
    assert [(int(a), int(b)) for a, b, _, _ in pairs] == sweep(placed)
