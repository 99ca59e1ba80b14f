"""The best-fit sweep of the memory pass as it was before issue 14's speed-up (commit
927cc4b, ``oxiwork.optimizer.memory_pass._place_sweep``), verbatim: the oracle that
tests/optimizer/test_memory_pass.py compares the faster sweep with (same offsets, same
arena). Not imported by oxiwork."""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from typing import Any

import numpy as np


class _FreeRuns:
    """The free byte runs of one stream during :func:`_place_sweep`, coalesced: parallel
    ``starts``/``ends`` sorted by start (the last run is the tail, ending at ``_TOP``) and
    ``by_len``, the finite runs as ``(length, start)`` sorted, for best fit."""

    __slots__ = ("by_len", "ends", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = [0]
        self.ends: list[int] = [_TOP]
        self.by_len: list[tuple[int, int]] = []

    def _drop(self, i: int) -> None:
        s, e = self.starts.pop(i), self.ends.pop(i)
        if e != _TOP:
            del self.by_len[bisect_left(self.by_len, (e - s, s))]

    def _put(self, i: int, s: int, e: int) -> None:
        self.starts.insert(i, s)
        self.ends.insert(i, e)
        if e != _TOP:
            insort(self.by_len, (e - s, s))

    def add(self, s: int, e: int) -> None:
        """Mark ``[s, e)`` free (it is not): merge with the runs it touches."""
        starts, ends = self.starts, self.ends
        i = bisect_left(starts, s)
        if i < len(starts) and starts[i] == e:
            e = ends[i]
            self._drop(i)
        if i and ends[i - 1] == s:
            i -= 1
            s = starts[i]
            self._drop(i)
        self._put(i, s, e)

    def take(self, s: int, e: int) -> None:
        """Mark ``[s, e)`` not free, whatever part of it is."""
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, s) - 1
        if i < 0 or ends[i] <= s:
            i += 1
        while i < len(starts) and starts[i] < e:
            rs, re = starts[i], ends[i]
            self._drop(i)
            if rs < s:
                self._put(i, rs, s)
                i += 1
            if re > e:
                self._put(i, e, re)
                break

    def holds(self, s: int, e: int) -> bool:
        """Is all of ``[s, e)`` free?"""
        i = bisect_right(self.starts, s) - 1
        return i >= 0 and self.ends[i] >= e


def place_sweep(
    perm: np.ndarray, size: np.ndarray, align: np.ndarray, a: Any
) -> tuple[np.ndarray, int]:
    """Best-fit placement in first-access order (``perm``) without listing conflicting pairs.

    Equivalent to :func:`_place_exact` in that order for buffers accessed on one stream,
    in ``O(n S log n)`` instead of ``O(conflicting pairs x S)``. Placing in first-access
    order, a later buffer ``j`` is never ordered before a placed ``i`` (the issue order is
    topological), so they may share bytes iff ``i`` is before ``j``: iff on every stream
    ``t`` where ``j`` has an access, its first one there is at or after ``past[i, t]``, the
    first position on ``t`` strictly after all of ``i``'s accesses (the clocks along a
    stream never decrease). Every address range is owned by the buffer placed there last
    ("before" is transitive, so its earlier occupants are before whatever follows it), and
    each stream keeps the runs of bytes whose owner it has passed: a sweep over the issue
    order hands the owner's bytes to stream ``t``'s free runs when it reaches position
    ``past[i, t]``. A buffer accessed on one stream ``t`` then goes into the best-fitting
    free run of ``t`` (smallest, lowest on ties) exactly as the pairwise best fit would, or
    on top; one accessed on several takes the best run of its first stream that is free on
    its other streams too as of now (conservative: those streams may free more bytes before
    it gets there), trying :data:`_SWEEP_TRIES` runs before going on top.
    """
    n, width = len(perm), a.past.shape[1]
    out = np.zeros(len(size), dtype=np.int64)
    if not n:
        return out, 0
    # Release events (item of the order where stream t passes buffer k, t, k), by item.
    rel_item = np.full((len(size), width), -1, dtype=np.int64)
    for t, members in enumerate(a.members):
        if len(members):  # (the one change: members are arrays now)
            mem = np.asarray([*members, -1], dtype=np.int64)
            rel_item[:, t] = mem[a.past[:, t]]
    rk, rt = np.nonzero(rel_item >= 0)
    ri = rel_item[rk, rt]
    o = np.argsort(ri, kind="stable")
    ev_item, ev_t, ev_k = ri[o].tolist(), rt[o].tolist(), rk[o].tolist()
    n_ev = len(ev_item)
    runs = [_FreeRuns() for _ in range(width)]
    # address segments [seg_s[i], seg_s[i+1]) -> the row placed there last (-1: none)
    seg_s: list[int] = [0]
    seg_o: list[int] = [-1]
    offs = [0] * len(size)
    sz, al = size.tolist(), align.tolist()
    first = a.first.tolist()
    fpos = a.first_pos.tolist()
    past = a.past.tolist()
    stream_of = a.stream_of.tolist()
    # per row, the streams other than its first access's where it is accessed
    on = a.first_pos >= 0
    multi = set(np.flatnonzero(on.sum(axis=1) > 1).tolist())
    ev = 0
    arena = 0
    for k in perm.tolist():
        x = first[k]
        while ev < n_ev and ev_item[ev] <= x:  # streams passing placed buffers: free bytes
            i, t = ev_k[ev], ev_t[ev]
            ev += 1
            lo, hi = offs[i], offs[i] + sz[i]
            j = bisect_right(seg_s, lo) - 1
            free_t = runs[t]
            while j < len(seg_s) and seg_s[j] < hi:
                if seg_o[j] == i:
                    free_t.add(max(seg_s[j], lo), min(seg_s[j + 1], hi))
                j += 1
        s, g = sz[k], al[k]
        t0 = stream_of[x]
        free = runs[t0]
        by_len = free.by_len
        cand = -1
        if k not in multi:
            for r in range(bisect_left(by_len, (s, -1)), len(by_len)):
                length, rs = by_len[r]
                c = -(-rs // g) * g
                if c + s <= rs + length:
                    cand = c
                    break
            if cand < 0:
                cand = -(-free.starts[-1] // g) * g
        else:
            # bytes free on t0 whose owner is also before k's first access on the others
            fk = fpos[k]
            others = [t for t, p in enumerate(fk) if p >= 0 and t != t0]
            budget = [_SWEEP_SCAN]

            def ok(i: int, fk: list[int] = fk, others: list[int] = others) -> bool:
                return i < 0 or all(past[i][t] <= fk[t] for t in others)

            for r in range(bisect_left(by_len, (s, -1)), len(by_len)):
                length, rs = by_len[r]
                cand = _window(seg_s, seg_o, rs, rs + length, s, g, ok, budget)
                if cand >= 0 or budget[0] <= 0:
                    break
            if cand < 0:
                budget[0] = _SWEEP_SCAN
                cand = _window(seg_s, seg_o, free.starts[-1], _TOP, s, g, ok, budget)
            if cand < 0:  # on top of every byte some stream of k has not passed
                top = max(runs[t].starts[-1] for t in (t0, *others))
                cand = -(-top // g) * g
        offs[k] = cand
        end = cand + s
        if end > arena:
            arena = end
        for fr in runs:
            st = fr.starts
            i = bisect_right(st, cand) - 1
            # most streams hold none of the range: skip them without a call
            if (i >= 0 and fr.ends[i] > cand) or (i + 1 < len(st) and st[i + 1] < end):
                fr.take(cand, end)
        # the range now belongs to k alone
        lo_i = bisect_right(seg_s, cand) - 1
        if seg_s[lo_i] != cand:
            lo_i += 1
            seg_s.insert(lo_i, cand)
            seg_o.insert(lo_i, seg_o[lo_i - 1])
        hi_i = bisect_right(seg_s, end) - 1
        if seg_s[hi_i] != end:
            hi_i += 1
            seg_s.insert(hi_i, end)
            seg_o.insert(hi_i, seg_o[hi_i - 1])
        seg_s[lo_i:hi_i] = [cand]
        seg_o[lo_i:hi_i] = [k]
    out[:] = offs
    return out, arena


def _window(
    seg_s: list[int],
    seg_o: list[int],
    lo: int,
    hi: int,
    size: int,
    align: int,
    ok: Any,
    budget: list[int],
) -> int:
    """Lowest aligned ``c`` with ``[c, c + size)`` inside ``[lo, hi)`` whose owners (address
    segments ``seg_s``/``seg_o``) all pass ``ok``; -1 if none, or once ``budget[0]``
    segments have been looked at."""
    c = -(-lo // align) * align
    j = bisect_right(seg_s, c) - 1
    last = len(seg_s) - 1
    while c + size <= hi:
        # segments j.. cover [c, c + size)? stop at the first whose owner fails
        while True:
            budget[0] -= 1
            if not ok(seg_o[j]):
                nxt = seg_s[j + 1]
                c = -(-nxt // align) * align
                j = bisect_right(seg_s, c) - 1
                break
            if j == last or seg_s[j + 1] >= c + size:
                return c
            j += 1
        if budget[0] <= 0:
            return -1
    return -1


_TOP = 1 << 62  # the end of the tail run: beyond any arena
_SWEEP_SCAN = 256  # address segments a buffer on several streams may scan for a place
