"""Exact memory planning: MiniMalloc's canonical branch-and-bound search, in Python.

The search decides whether the intervals fit in a capacity ``C``. It places one buffer per
level, always at the lowest offset its already placed time-neighbours allow (its *minimum
offset*), so offsets only ever sit on the skyline those neighbours form. Moffitt shows that
restricting the search this way loses no solutions, and adds the rules that make it fast:

* **Canonical order**: the placed offsets never decrease, and buffers placed at the same offset
  go in preorder; every solution is then reached by exactly one path.
* **Dominance**: a buffer is never placed at or above the lowest height some other unplaced
  buffer could reach, because that buffer could always drop into the gap below.
* **Dynamic ordering**: candidates are tried by minimum offset, then by a static preorder (by
  width/area/"total", round-robin over three preorders with doubling node limits).
* **Section inference**: time is cut into sections (between consecutive start/end points); in
  each, the unplaced buffers must stack above the section's floor, so ``floor + unplaced bytes``
  may not exceed ``C``. The floor is the higher of the current offset (offsets never decrease),
  the top of the placed buffers, and the smallest minimum offset of the unplaced ones.
* **Dynamic decomposition**: once no unplaced buffer spans a cut between two sections, the two
  sides are solved independently, each with its buffers re-ranked by the bytes still unplaced.
* **Hatless pruning**: a buffer with no unplaced time-neighbours constrains nobody; if placing
  it at its minimum offset fails, no other choice at that node can succeed.

Two additions of ours: the per-section floors are computed with numpy over a (buffer x
section) matrix of minimum offsets, and failed residual problems (same unplaced buffers, same
minimum offsets, same canonical bound) are remembered in a hashed table, which keeps its
entries across MiniMalloc's round-robin restarts.

For minimising (the exact mode without a capacity) three more steps follow when tightening
stalls: :func:`_probe` tries capacities from the lower bound up with short searches (success
is far from monotone in the capacity), :func:`_local` restarts the search with perturbed
preorders (Gomes et al.), and :func:`descend` re-solves upward-closed neighbourhoods of the best
plan above the floors the rest of it leaves (the search accepts per-buffer floors). None of
them proves more than the search does; they find lower arenas.

References
----------
M. D. Moffitt, "MiniMalloc: A Lightweight Memory Allocator for Hardware-Accelerated Machine
Learning", ASPLOS 2023 (and google/minimalloc, whose solver this follows in outline).
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from oxiwork.optimizer.memory import IntervalPlan, _live_profile, _overlaps, _Problem, _result

__all__ = ["MAX_EXACT_INTERVALS", "Status", "descend", "improve", "search"]

MAX_EXACT_INTERVALS = 2000
"""Above this the exact mode keeps the heuristic plan: the search recurses once per buffer and
keeps a (buffers x sections) matrix, 64 MB at this size."""

# Static preorders tried round-robin (MiniMalloc's defaults): W = lifetime width, A = area,
# T = the most bytes live in any section the buffer spans. Descending on every key.
_PREORDERS = ("WAT", "TAW", "TWA")

# Remember at most this many failed residual problems (a 64-bit hash each, ~100 bytes with the
# set's overhead). Two different residual problems share a hash with probability ~2**-64 per
# pair, so a wrongly pruned branch is possible in principle but vanishingly unlikely.
_MAX_FAILED = 2_000_000

# Check the clock every this many nodes: perf_counter is cheap but not free.
_CLOCK_EVERY = 512


class Status:
    """Outcome of one search: a plan, a proof that none exists, or out of nodes/time."""

    FOUND = "found"
    INFEASIBLE = "infeasible"
    ABORTED = "aborted"  # node limit of this round-robin turn spent
    TIMEOUT = "timeout"


class _Abort(Exception):
    """Unwinds the recursion when the node limit or the deadline is reached."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


class _Solver:
    """Search state for one problem; :meth:`solve` answers one capacity."""

    def __init__(self, p: _Problem, base: Sequence[int] | None = None) -> None:
        n = p.n
        self.n = n
        # Floors: the lowest offset each buffer may take (already placed buffers outside the
        # problem lie below it; see :func:`descend`). Rounded up to each buffer's alignment.
        al = p.align.tolist()
        if base is None:
            self.base = [0] * n
        else:
            self.base = [-(-int(b) // a) * a for b, a in zip(base, al, strict=True)]
        live, lo, hi = _live_profile(p)
        self.num_sections = len(live)
        self.lo = lo.tolist()
        self.hi = hi.tolist()
        self.size = p.size.tolist()
        self.align = p.align.tolist()
        ptr, cols = _overlaps(p)
        self.nbrs = [cols[ptr[i] : ptr[i + 1]].tolist() for i in range(n)]
        width = (p.end - p.start).tolist()
        area = ((p.end - p.start) * p.size).tolist()
        # "Total": the largest live bytes over the sections the buffer spans.
        total = [int(live[a:b].max()) for a, b in zip(self.lo, self.hi, strict=True)]
        keys = {"W": width, "A": area, "T": total}
        self.width, self.area = width, area
        self.keys = keys
        self.preorders = [
            sorted(range(n), key=lambda i, h=h: (*(-keys[c][i] for c in h), i)) for h in _PREORDERS
        ]
        # Sections' totals when nothing is placed, and how many buffers span each cut between
        # section s and s + 1 (a zero cut splits the problem).
        delta = np.zeros(self.num_sections + 1, dtype=np.int64)
        np.add.at(delta, lo, p.size)
        np.add.at(delta, hi, -p.size)
        self.total0 = np.cumsum(delta)[: self.num_sections]
        cut = np.zeros(max(self.num_sections, 1), dtype=np.int64)
        np.add.at(cut, lo, 1)
        np.add.at(cut, np.maximum(hi - 1, 0), -1)
        self.cuts0 = np.cumsum(cut)[: max(self.num_sections - 1, 0)]
        self.nodes = 0
        self.stored = 0  # entries in all tables: they share one memory budget
        self.tables: dict[int, dict[tuple[int, ...], set[int]]] = {}

    # ----------------------------------------------------------------------------------------

    def solve(
        self,
        capacity: int,
        deadline: float,
        order: Sequence[int],
        node_limit: float,
        heuristic: str | None = None,
    ) -> tuple[str, list[int] | None]:
        """Search with one preorder; FOUND with offsets (original indices), or a failure.

        ``heuristic`` names the keys (of :data:`_PREORDERS`) that decomposed pieces are
        re-ranked by; by default those ``order`` was sorted by (it must then be one of
        :attr:`preorders`).
        """
        n = self.n
        rank = [0] * n
        for r, i in enumerate(order):
            rank[i] = r
        # Relabel buffers by preorder rank so that "lower index" means "earlier in preorder".
        self.C = capacity
        self.deadline = deadline
        self.node_budget = node_limit
        self.sz = [self.size[i] for i in order]
        self.al = [self.align[i] for i in order]
        self.slo = [self.lo[i] for i in order]
        self.shi = [self.hi[i] for i in order]
        self.nb = [[rank[j] for j in self.nbrs[i]] for i in order]
        self.order = list(order)
        self.heuristic = heuristic or _PREORDERS[self.preorders.index(list(order))]
        # Tie-break rank of each buffer inside its current partition (the preorder at first;
        # each decomposed piece re-ranks its buffers by the totals left at that point).
        self.rank = list(range(n))
        self.off = [-1] * n
        self.sol = [-1] * n
        self.minoff = [self.base[i] for i in order]
        self.height = [m + z for m, z in zip(self.minoff, self.sz, strict=True)]  # minoff + size
        self.total = self.total0.copy()
        # Sections any neighbour of each buffer lives in: where its placement can raise F_s.
        self.hull_lo = [
            min([a, *(self.slo[j] for j in self.nb[i])]) for i, a in enumerate(self.slo)
        ]
        self.hull_hi = [
            max([b, *(self.shi[j] for j in self.nb[i])]) for i, b in enumerate(self.shi)
        ]
        self.cuts = self.cuts0.copy()
        # V[r, s]: minimum offset of the unplaced buffer in row r if it lives in section s, else
        # C (min(F, C) keeps sections without unplaced buffers harmless, with no overflow; an
        # unplaced buffer whose minimum offset passes C is pruned before V is read). Rows go
        # by first section, so the buffers that can live in sections [a, b) of a partition
        # starting at section p sit in rows row_at[p] .. row_at[b].
        by_lo = sorted(range(n), key=lambda j: (self.slo[j], j))
        self.row = [0] * n
        for r, j in enumerate(by_lo):
            self.row[j] = r
        self.row_at = np.searchsorted(
            np.array([self.slo[j] for j in by_lo], dtype=np.int64),
            np.arange(self.num_sections + 1),
        ).tolist()
        self.V = np.full((n, max(self.num_sections, 1)), capacity, dtype=np.int64)
        for j in range(n):
            self.V[self.row[j], self.slo[j] : self.shi[j]] = self.minoff[j]
        self.unit = all(a == 1 for a in self.al)
        # Failed residual problems stay failed for the same capacity and preorder (the keys
        # use preorder ranks), so round-robin rounds keep what the earlier rounds learned.
        tables = self.tables.setdefault(capacity, {})
        self.failed = tables.setdefault(tuple(order), set())
        if max(self.height, default=0) > capacity or (
            self.num_sections and int((self.V.min(axis=0) + self.total).max()) > capacity
        ):
            return Status.INFEASIBLE, None
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, 4 * n + 1000))
        try:
            zero = np.flatnonzero(self.cuts == 0) + 1
            ok = self._split(list(range(n)), [0, *zero.tolist(), self.num_sections], rerank=False)
        except _Abort as e:
            return e.status, None
        finally:
            sys.setrecursionlimit(old_limit)
        if not ok:
            return Status.INFEASIBLE, None
        return Status.FOUND, [self.sol[rank[i]] for i in range(n)]

    def _sub(self, bufs: list[int], slo: int, shi: int, rerank: bool) -> bool:
        """Solve one partition: ``bufs`` (unplaced, in preorder) over sections [slo, shi)."""
        rank = self.rank
        saved = None
        if rerank:
            # MiniMalloc recomputes the preorder for every piece, with "total" taken from the
            # bytes still unplaced: the crowded moments of this piece go first.
            saved = [rank[j] for j in bufs]
            total = self.total
            slo_l, shi_l = self.slo, self.shi
            keys = {
                "W": [self.width[self.order[j]] for j in bufs],
                "A": [self.area[self.order[j]] for j in bufs],
                "T": [int(total[slo_l[j] : shi_l[j]].max()) for j in bufs],
            }
            cols = [keys[c] for c in self.heuristic]
            by = sorted(
                range(len(bufs)),
                key=lambda k: (*(-c[k] for c in cols), self.order[bufs[k]]),
            )
            for r, k in enumerate(by):
                rank[bufs[k]] = r
        try:
            ordering = sorted(bufs, key=rank.__getitem__)
            ordering.sort(key=self.minoff.__getitem__)  # stable: ties stay in rank order
            return self._search(ordering, slo, shi, 0, -1)
        finally:
            if saved is not None:
                for j, r in zip(bufs, saved, strict=True):
                    rank[j] = r

    def _split(self, bufs: list[int], points: list[int], rerank: bool = True) -> bool:
        """Solve the pieces of ``bufs`` between consecutive section ``points`` independently."""
        slo_l, shi_l = self.slo, self.shi
        for lo_s, hi_s in pairwise(points):
            part = [j for j in bufs if slo_l[j] < hi_s and lo_s < shi_l[j]]
            if part and not self._sub(part, lo_s, hi_s, rerank):
                return False
        return True

    def _search(self, ordering: list[int], slo: int, shi: int, last_off: int, last: int) -> bool:
        self.nodes += 1
        self.node_budget -= 1
        if self.node_budget < 0:
            raise _Abort(Status.ABORTED)
        if not self.nodes % _CLOCK_EVERY and time.perf_counter() > self.deadline:
            raise _Abort(Status.TIMEOUT)
        if not ordering:
            return True
        minoff = self.minoff
        # Transposition table: different placements often leave the same skyline under the
        # same unplaced buffers (swap two equal-lifetime buffers); the residual problem is
        # then the same, so a failure is remembered and not searched again.
        lows = tuple(map(minoff.__getitem__, ordering))
        ranks = tuple(map(self.rank.__getitem__, ordering))
        key = hash((slo, shi, last_off, last, tuple(ordering), lows, ranks))
        if key in self.failed:
            return False
        if self._expand(ordering, slo, shi, last_off, last):
            return True
        if self.stored < _MAX_FAILED:
            self.failed.add(key)
            self.stored += 1
        return False

    def _expand(self, ordering: list[int], slo: int, shi: int, last_off: int, last: int) -> bool:
        """Try each admissible buffer at its minimum offset (one search node)."""
        minoff = self.minoff
        height = self.height
        min_height = min(map(height.__getitem__, ordering))
        C = self.C
        total = self.total
        # Section inference. With offsets never decreasing, every section's unplaced buffers
        # stack above max(m, F_s), where F_s is the smallest minimum offset among them; so
        # placing any buffer at offset m needs max(m, F_s) + total_s <= C in every section.
        # F_s + total_s <= C held when the parent checked; what is left depends on m alone:
        # m <= C - max(total). (A buffer's own sections lose its size but gain m + size as
        # their floor, which cancels.)
        if shi > slo:
            max_m = C - int(total[slo:shi].max())
            if max_m < min_height:
                min_height = max_m + 1
        off = self.off
        sz = self.sz
        al = self.al
        nb = self.nb
        V = self.V
        row = self.row
        row_at = self.row_at
        unit = self.unit
        slo_l, shi_l = self.slo, self.shi
        hull_lo, hull_hi = self.hull_lo, self.hull_hi
        rank = self.rank
        r_first = row_at[slo]
        for k, i in enumerate(ordering):
            m = minoff[i]
            # Dominance: everything from here on would sit at or above some buffer's lowest
            # possible top, leaving a gap that buffer could fill; such plans are never needed.
            if m >= min_height:
                break
            # Canonical order: offsets never decrease; equal offsets go in preorder.
            if m < last_off or (m == last_off and rank[i] < last):
                continue
            top = m + sz[i]
            # Raise the minimum offset of every unplaced neighbour above the new buffer.
            hat = [j for j in nb[i] if off[j] < 0]
            bumped = [j for j in hat if minoff[j] < top]
            old = [minoff[j] for j in bumped]
            feasible = True
            if unit:
                for j in bumped:
                    minoff[j] = top
                    h = top + sz[j]
                    height[j] = h
                    if h > C:
                        feasible = False
            else:
                for j in bumped:
                    a = al[j]
                    t = -(-top // a) * a
                    minoff[j] = t
                    height[j] = t + sz[j]
                    if t + sz[j] > C:
                        feasible = False
            off[i] = m
            self.sol[i] = m
            a, b = slo_l[i], shi_l[i]
            ri = row[i]
            total[a:b] -= sz[i]
            V[ri, a:b] = C
            saved_v = None
            if feasible and bumped:
                # Unallocated floor: a section's unplaced buffers all sit at or above the
                # smallest of their minimum offsets (F_s, which is never below the top of the
                # placed buffers there), and the bumps above may have raised it.
                # (Only this partition's sections: the others hold other partitions' totals.)
                lo_u = hull_lo[i] if hull_lo[i] > slo else slo
                hi_u = hull_hi[i] if hull_hi[i] < shi else shi
                rows = np.array([row[j] for j in bumped])
                saved_v = V[rows, lo_u:hi_u]
                # Outside a buffer's own sections its row holds C >= top, so max() keeps it.
                if unit:
                    V[rows, lo_u:hi_u] = np.maximum(saved_v, top)
                else:
                    new = np.array([minoff[j] for j in bumped], dtype=np.int64)
                    V[rows, lo_u:hi_u] = np.maximum(saved_v, new[:, None])
                low = V[r_first : row_at[hi_u], lo_u:hi_u].min(axis=0)
                low += total[lo_u:hi_u]
                feasible = int(low.max()) <= C
            if feasible:
                rest = ordering[:k] + ordering[k + 1 :]
                # By minimum offset, ties in rank order.
                rest.sort(key=rank.__getitem__)
                rest.sort(key=minoff.__getitem__)
                found = self._decompose(rest, i, slo, shi, m)
            else:
                found = False
            if saved_v is not None:
                V[rows, lo_u:hi_u] = saved_v
            V[ri, a:b] = m
            total[a:b] += sz[i]
            for j, mj in zip(bumped, old, strict=True):
                minoff[j] = mj
                height[j] = mj + sz[j]
            off[i] = -1
            if found:
                return True
            # Hatless pruning: a buffer with no unplaced time-neighbours constrains nobody, so
            # placing it at its minimum offset is always safe; if that failed, so does the node.
            if not hat:
                break
        return False

    def _decompose(self, rest: list[int], i: int, slo: int, shi: int, m: int) -> bool:
        """Recurse, splitting the partition where buffer ``i`` was the last to span a cut."""
        a, b = self.slo[i], self.shi[i]
        cuts = self.cuts
        if b - a > 1:
            seg = cuts[a : b - 1]
            seg -= 1
            zero = np.flatnonzero(seg == 0)
        else:
            zero = ()
        try:
            if len(zero) == 0:
                return self._search(rest, slo, shi, m, self.rank[i])
            points = [slo, *(int(z) + a + 1 for z in zero if slo < int(z) + a + 1 < shi), shi]
            return self._split(rest, points)
        finally:
            if b - a > 1:
                cuts[a : b - 1] += 1


def search(
    p: _Problem, capacity: int, deadline: float, solver: _Solver | None = None
) -> tuple[str, list[int] | None, int]:
    """Decide whether ``p`` fits in ``capacity`` bytes before ``deadline`` (perf_counter).

    Round-robins over the static preorders with a node limit that doubles each round, as
    MiniMalloc does, so one unlucky preorder cannot stall the search. Returns the status, the
    offsets (when FOUND) and the number of search nodes visited.

    References
    ----------
    Moffitt, "MiniMalloc", ASPLOS 2023 (see the module docstring).

    >>> import numpy as np, time
    >>> from oxiwork.optimizer.memory import _make_problem
    >>> p = _make_problem(np.array([(0, 2, 2), (1, 3, 2), (0, 1, 2), (2, 3, 2)]), 1)
    >>> search(p, 4, time.perf_counter() + 10)[:2]
    ('found', [0, 2, 2, 0])
    >>> search(p, 3, time.perf_counter() + 10)[0]
    'infeasible'
    """
    s = solver or _Solver(p)
    s.nodes = 0
    if s.n == 0:
        return Status.FOUND, [], 0
    limit = float(max(s.n, 16))
    while True:
        limit *= 2
        for order in s.preorders:
            status, offsets = s.solve(capacity, deadline, order, limit)
            if status != Status.ABORTED:
                return status, offsets, s.nodes


def _tops(lo: list[int], hi: list[int], tops: list[int], sections: int) -> list[int]:
    """The plan's skyline, highest first: per section, the highest top of a buffer live there."""
    sky = [0] * sections
    for a, b, t in zip(lo, hi, tops, strict=True):
        for s in range(a, b):
            if t > sky[s]:
                sky[s] = t
    sky.sort(reverse=True)
    return sky


def descend(
    p: _Problem,
    off: Sequence[int],
    deadline: float,
    seed: int = 0,
    node_factor: float = 5.0,
    free_range: tuple[int, int] = (20, 80),
    noise: float = 0.05,
) -> tuple[list[int], int, int]:
    """Large-neighbourhood search: lower a valid plan's arena by re-solving parts of it exactly.

    Each step frees a set ``F`` of buffers that is *upward closed* (with a buffer, every
    time-overlapping buffer resting above it is in ``F``): a time window's highest buffers,
    seeded from the top down until the closure holds ``free_range`` buffers. Every other
    buffer then lies below every time-neighbour of it in ``F``, so the buffers in ``F`` may be
    re-placed anywhere above the *floor* (the highest top of their fixed time-neighbours)
    without touching the rest; the current plan is one such placement, so the step can never
    lose it. The canonical search (:class:`_Solver` with floors) re-places ``F`` within the
    current arena, with a perturbed preorder and a node limit of ``node_factor * |F|``; the
    new plan is kept when its skyline (each section's highest top, sorted highest first) is
    no worse lexicographically, so plateaus are walked and the arena never grows. Returns the
    offsets, the arena and the search nodes spent. Nothing is proved: an arena it reaches is a
    plan, not a minimum.

    References
    ----------
    P. Shaw, "Using constraint programming and local search methods to solve vehicle routing
    problems", CP 1998 (large-neighbourhood search); Moffitt, "MiniMalloc", ASPLOS 2023 (the
    search that re-solves each neighbourhood).

    >>> import numpy as np, time
    >>> from oxiwork.optimizer.memory import _make_problem
    >>> p = _make_problem(np.array([(0, 2, 2), (1, 3, 2), (0, 1, 2), (2, 3, 2)]), 1)
    >>> descend(p, [0, 4, 2, 0], time.perf_counter() + 0.2, free_range=(1, 4))[1]
    4
    """
    n = p.n
    size = p.size.tolist()
    off = [int(o) for o in off]
    if n == 0:
        return off, 0, 0
    ptr, cols = _overlaps(p)
    nbrs = [cols[ptr[i] : ptr[i + 1]].tolist() for i in range(n)]
    _, lo_a, hi_a = _live_profile(p)
    lo, hi = lo_a.tolist(), hi_a.tolist()
    sections = max(hi)
    rng = random.Random(seed)
    sky = _tops(lo, hi, [o + z for o, z in zip(off, size, strict=True)], sections)
    nodes = 0
    kmin, kmax = max(1, min(free_range[0], n)), max(1, min(free_range[1], n))
    while time.perf_counter() < deadline:
        want = rng.randint(kmin, kmax)
        t = rng.randrange(sections)
        w = rng.randint(1, max(1, sections // 3))
        window = [i for i in range(n) if lo[i] < t + w and t < hi[i]]
        window.sort(key=lambda i: -(off[i] + size[i]))
        free: set[int] = set()
        stack: list[int] = []
        for i in window:
            if i not in free:
                free.add(i)
                stack.append(i)
            # Upward closure: whatever rests above a freed buffer must move with it.
            while stack:
                j = stack.pop()
                top = off[j] + size[j]
                for k in nbrs[j]:
                    if k not in free and off[k] >= top:
                        free.add(k)
                        stack.append(k)
            if len(free) >= want:
                break
        ids = sorted(free)
        base = [max([0, *(off[k] + size[k] for k in nbrs[i] if k not in free)]) for i in ids]
        sub = _Problem(p.start[ids], p.end[ids], p.size[ids], p.align[ids])
        solver = _Solver(sub, base)
        h = rng.choice(_PREORDERS)
        jitter = [2.0 ** (noise * rng.gauss(0, 1)) for _ in ids]
        order = sorted(
            range(len(ids)), key=lambda i: (*(-solver.keys[c][i] * jitter[i] for c in h), i)
        )
        arena = sky[0]
        status, sol = solver.solve(arena, deadline, order, node_factor * len(ids), h)
        nodes += solver.nodes
        if status != Status.FOUND or sol is None:
            continue
        new = list(off)
        for i, o in zip(ids, sol, strict=True):
            new[i] = o
        new_sky = _tops(lo, hi, [o + z for o, z in zip(new, size, strict=True)], sections)
        if new_sky <= sky:
            off, sky = new, new_sky
    return off, sky[0], nodes


def _probe(
    solver: _Solver, lb: int, best: int, grid: int, deadline: float
) -> tuple[list[int] | None, int, int, int]:
    """Probe capacities from ``lb`` up: the lowest that one short pass fits.

    Each capacity gets one search with one of the three preorders (in turn) at MiniMalloc's
    first node limit (twice the buffers): first about 16 capacities spread up to ``best``,
    then every capacity on the ``grid`` from ``lb`` up to the arena that pass found. (Whether a short
    search succeeds is far from monotone in the capacity: on MiniMalloc's instance D it fits
    1,009 KiB in 248 nodes and fails 1,024 KiB in 48,000.) Returns the best plan found (or
    None), its arena (else ``best``), the smallest arena not proved infeasible on the way,
    and the nodes spent.
    """
    size = solver.size
    lo, nodes = lb, 0
    found: list[int] | None = None
    step = max(grid, (best - lb) // 16 // grid * grid)
    for stride in (step, grid):
        hit = False
        for k, capacity in enumerate(range(max(lo, lb + stride), best, stride)):
            for order in (solver.preorders[k % len(solver.preorders)],):
                if time.perf_counter() > deadline:
                    return found, best, lo, nodes
                solver.nodes = 0
                status, sol = solver.solve(capacity, deadline, order, 2.0 * max(solver.n, 16))
                nodes += solver.nodes
                if status == Status.FOUND and sol is not None:
                    found, best = sol, max(o + z for o, z in zip(sol, size, strict=True))
                    hit = True
                    break
                if status == Status.INFEASIBLE:
                    lo = max(lo, capacity + 1)  # an exhausted search: a proof
                    break
            if hit:
                break  # the lowest capacity of this pass that fits
    return found, best, lo, nodes


def _local(
    p: _Problem,
    solver: _Solver,
    off: list[int],
    target: int,
    deadline: float,
    rng: random.Random,
    seed: int,
) -> tuple[list[int], int, int, int]:
    """Randomised restarts at ``target``, alternated with :func:`descend`, until ``deadline``.

    A restart is one search with a perturbed preorder and a short node limit (three times the
    buffers): heavy-tailed searches are better served by many short runs than by one long
    one (Gomes, Selman, Kautz, "Boosting combinatorial search through randomization", AAAI
    1998). Every eighth turn the descent improves the best plan for a second. Returns the
    best offsets, their arena, the nodes spent and, when a restart exhausted its search (a
    proof that ``target`` is infeasible), ``target + 1``, else 0.
    """
    size = solver.size
    best = max(o + z for o, z in zip(off, size, strict=True))
    nodes = 0
    turn = 0
    while time.perf_counter() < deadline:
        turn += 1
        if turn % 8 == 0:
            new, arena, n = descend(p, off, min(deadline, time.perf_counter() + 1.0), seed + turn)
            nodes += n
            if arena < best:
                off, best = new, arena
                target = min(target, best - 1)
            continue
        h = rng.choice(_PREORDERS)
        jitter = [2.0 ** (0.05 * rng.gauss(0, 1)) for _ in range(solver.n)]
        order = sorted(
            range(solver.n), key=lambda i: (*(-solver.keys[c][i] * jitter[i] for c in h), i)
        )
        solver.nodes = 0
        status, sol = solver.solve(target, deadline, order, 3.0 * solver.n, h)
        nodes += solver.nodes
        if status == Status.FOUND and sol is not None:
            off = sol
            best = max(o + z for o, z in zip(sol, size, strict=True))
            target = best - 1
        elif status == Status.INFEASIBLE:
            return off, best, nodes, target + 1
    return off, best, nodes, 0


def improve(
    p: _Problem,
    off: Sequence[int],
    arena: int,
    strategy: str,
    capacity: int | None,
    t0: float,
    deadline: float,
    lns: bool = False,
) -> IntervalPlan:
    """Exact mode: from the heuristic plan, search for a fit (or the minimum arena).

    With a ``capacity`` the first plan that fits is returned; without one the arena is
    tightened from the heuristic's toward the lower bound until the search proves it minimal
    or ``deadline`` passes. With ``lns`` (the exact mode's minimisation) a tightening search
    gets a quarter of the time left; when it runs out, :func:`descend` works on the best plan
    for half of what is left, and tightening resumes below whatever it reached (large
    instances stall in the search far above their minimum, but their plans still improve
    locally). :func:`oxiwork.optimizer.memory.plan_intervals` is the public way in.

    References
    ----------
    Moffitt, "MiniMalloc", ASPLOS 2023 (see the module docstring).

    >>> from oxiwork.optimizer.memory import plan_intervals
    >>> plan_intervals([(0, 2, 2), (1, 3, 2), (0, 1, 2), (2, 3, 2)], mode="exact").optimal
    True
    """
    live, _, _ = _live_profile(p)
    lb = int(live.max()) if len(live) else 0
    if arena == lb:
        return _result(p, off, arena, strategy, capacity, t0, lb=lb)
    if capacity is not None and arena <= capacity:
        return _result(p, off, arena, strategy, capacity, t0, lb=lb)
    if p.n > MAX_EXACT_INTERVALS:
        return _result(
            p,
            off,
            arena,
            strategy,
            capacity,
            t0,
            lb=lb,
            message=f"exact search skipped: {p.n} intervals is more than "
            f"{MAX_EXACT_INTERVALS}; kept the heuristic plan",
            stopped_early=True,
        )
    solver = _Solver(p)
    nodes = 0
    if capacity is not None:
        status, sol, nodes = search(p, capacity, deadline, solver)
        if status == Status.FOUND and sol is not None:
            a = max(o + s for o, s in zip(sol, p.size.tolist(), strict=True))
            return _result(p, sol, a, "minimalloc", capacity, t0, lb=lb, nodes=nodes)
        why = (
            f"proved that no plan fits in capacity {capacity} bytes"
            if status == Status.INFEASIBLE
            else f"time limit reached before a plan within capacity {capacity} bytes was found"
        )
        return _result(
            p,
            off,
            arena,
            strategy,
            capacity,
            t0,
            lb=lb,
            nodes=nodes,
            message=f"{why}; returning the heuristic plan of {arena} bytes "
            f"(lower bound {lb}); raise the capacity or the time_limit",
            proved_bound=capacity + 1 if status == Status.INFEASIBLE else lb,
            stopped_early=status != Status.INFEASIBLE,
        )
    # Minimise: aim for the lower bound first (often met on real models), then tighten the
    # best arena one step at a time; an exhausted search proves the incumbent optimal.
    best_off, best, best_strategy = list(off), arena, strategy
    lo = lb
    target = lb
    proved = False
    message = None
    rounds = 0
    # Every size and alignment is a multiple of this, so every offset and arena is too: only
    # capacities on this grid are worth trying.
    grid = int(np.gcd.reduce(np.concatenate([p.size, p.align])))
    rng = random.Random(0)
    while True:
        # The lower bound may be out of reach and slow to refute: give it a third of the time
        # (a twentieth with lns, whose rounds need the time more).
        now = time.perf_counter()
        if target == lb:
            until = now + (deadline - now) / (20 if lns else 3)
        else:
            until = now + (deadline - now) / 4 if lns else deadline
        status, sol, n_nodes = search(p, target, until, solver)
        nodes += n_nodes
        if status == Status.FOUND and sol is not None:
            best_off = sol
            best = max(o + s for o, s in zip(sol, p.size.tolist(), strict=True))
            best_strategy = "minimalloc"
        elif status == Status.INFEASIBLE:
            lo = target + 1
        elif target == lb and time.perf_counter() < deadline:
            # Gave up on the lower bound; tighten from above instead (with lns, after probing
            # capacities from the bound up: the search's luck is not monotone in capacity).
            if lns:
                now = time.perf_counter()
                found, arena, lo, n_nodes = _probe(
                    solver, lb, best, grid, now + (deadline - now) / 2
                )
                nodes += n_nodes
                if found is not None:
                    best_off, best, best_strategy = found, arena, "minimalloc"
        elif lns and deadline - time.perf_counter() > 0.01:
            now = time.perf_counter()
            found_off, found_best, n_nodes, proof = _local(
                p, solver, best_off, best - 1, now + (deadline - now) / 2, rng, rounds
            )
            rounds += 1
            nodes += n_nodes
            lo = max(lo, proof)
            if found_best < best:
                best_off, best, best_strategy = found_off, found_best, "minimalloc+lns"
        else:
            message = f"time limit reached; best arena {best} bytes, lower bound {lo} bytes"
            break
        if lo >= best:
            proved = True
            break
        target = best - 1
    return _result(
        p,
        best_off,
        best,
        best_strategy,
        None,
        t0,
        lb=lb,
        proved=proved,
        message=message,
        nodes=nodes,
        proved_bound=lo,
        stopped_early=not proved,
    )
