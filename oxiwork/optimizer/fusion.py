"""Kernel fusion: merge chains and diamonds of element-wise ops, element-wise
prologues/epilogues of a reduction, and element-wise epilogues of a matmul into single
kernels.

The rules follow TVM's FuseOps (T. Chen et al., "TVM: An Automated End-to-End Optimizing
Compiler for Deep Learning", OSDI 2018, section 4.1): ops are classified by
:class:`~oxiwork.ops.FusionClass`; an element-wise op fuses into its consumer, a fan-out
fuses with everything up to the immediate post-dominator that closes it (computed by
:func:`oxiwork.analysis.dominance.post_dominators`) when every op in between is
fusible, element-wise ops fuse before (prologue) and after (epilogue) one reduction, and
after (only) one out-element-wise op such as matmul.
Groups are formed greedily in topological order with union of groups, in rounds until
no more merge or a round keeps every group it formed (so fusing a fused graph again changes
nothing); a merge is kept only if
the merged group is still legal:

- every member is a fusible kernel (``node.fusible``, a registered element-wise,
  broadcast, reduction or out-element-wise op; never opaque or injective) with one
  output, and all members have the same stream pin;
- no intermediate buffer escapes: a buffer written by a member and read by another
  member must not be external, must have that single writer and must be read by members
  only (not by copies or other kernels);
- at most one reduction, with prologue steps on its input's index space and epilogue
  steps on its output's, so the group is one kernel (:mod:`oxiwork.ops.codegen`);
- or at most one out-element-wise op (matmul, TVM's "out-elemwise-fusable"), reading
  only buffers from outside the group, with element-wise steps on its output's index
  space (a bias, an activation, a residual add: the epilogue of a GEMM), and no
  reduction;
- merging keeps the graph acyclic: no path leaves the group and re-enters it;
- at most ``max_group_size`` members.

Each group keeps a summary (its members, outputs, outputs read inside, members read
only from outside, inputs, bases of views read, its reduction or matmul, last position,
successors outside), so a merge of groups is checked from their summaries in time of
about their size, not by walking every member; the member-wise rules (``_Fuser.legal``)
remain the definition, name the rule a refused merge breaks, and in the tests check every
merge the summaries accept. Kernels are classified once per bind key (op, parameters,
buffer specs), not bound one by one. A later round takes its candidates and their readers
and writers from the previous round's (a fused kernel joins no group, the others keep
their ids and buffers) instead of classifying and sweeping the fused graph again; the
tests compare each derived round with a sweep.

After each round, peak live memory (a sweep over buffer lifetimes along
:func:`program_order`) is compared with the input graph's; the latest groups are undone
(1, 2, 4, ... of them, then bisecting) until fusion no longer raises it. The fused graph's
peak is computed from the input graph's access arrays with each group on its kernel's step
(:func:`oxiwork.analysis.liveness.max_live_bytes_merged`), not by analysing the new graph
again; the tests check it against the full analysis of the fused graph.

Example
-------
>>> from oxiwork.examples import quick_start
>>> res = fuse(quick_start())
>>> [n.name for n in res.graph.nodes]
['upload', 'download', 'relu+scale']
>>> [b.name for b in res.graph.buffers]
['input', 'output']
>>> res.artefacts["kernels_before"], res.artefacts["kernels_after"]
(2, 1)
"""

from __future__ import annotations

import heapq
import math
import operator
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from oxiwork import validate
from oxiwork.analysis import liveness, paused_gc
from oxiwork.analysis._util import positions_topological
from oxiwork.analysis.dominance import post_dominators
from oxiwork.error import GraphError, InvalidArgument
from oxiwork.graph import ComputeGraph, _positional
from oxiwork.node import (
    Buffer,
    BufferId,
    FusedProgram,
    FusedStep,
    GraphNode,
    KernelConfig,
    NodeId,
    NodeKind,
)
from oxiwork.ops import FusionClass, bind, get, kernel_source
from oxiwork.ops.program import share_bound
from oxiwork.optimizer import PassResult

__all__ = ["NotFused", "fuse", "peak_live_bytes", "program_order"]

_FUSIBLE_CLASSES = {
    FusionClass.ELEMENTWISE: "E",
    FusionClass.BROADCAST: "E",
    FusionClass.REDUCTION: "R",
    FusionClass.OUT_ELEMENTWISE: "M",
}
_THREADS = 256
# Tests set it: every merge the group summaries accept is checked member-wise too.
CHECK_MERGES = False
MAX_NAME = 200  # a fused kernel's "a+b+..." name; longer ones are shortened (<= 180)
assert MAX_NAME <= validate.MAX_NAME_LENGTH


@dataclass(frozen=True, slots=True)
class _Info:
    """What fusion needs to know about one fusible kernel (its output aside): the same for
    every kernel of one bind key, so shared by them."""

    cls: str  # "E" element-wise/broadcast, "R" reduction, "M" out-element-wise (matmul)
    out_numel: int
    in_numel: tuple[int, ...]
    rows: int  # a reduction's rows (its input's elements over the last axis), else 0
    bcast: bool  # every input's elements divide the output's (it broadcasts over them)


class _Adjacency(dict[NodeId, list[NodeId]]):
    """``node id -> neighbour ids`` of one side of a dense view, each list made when first
    read."""

    __slots__ = ("_adj", "_ids", "_pos")

    def __init__(
        self, ids: tuple[NodeId, ...], pos: Mapping[NodeId, int], adj: tuple[tuple[int, ...], ...]
    ) -> None:
        super().__init__()
        self._ids, self._pos, self._adj = ids, pos, adj

    def __missing__(self, nid: NodeId) -> list[NodeId]:
        ids = self._ids
        out = self[nid] = [ids[q] for q in self._adj[self._pos[nid]]]
        return out


@dataclass(slots=True)
class _Group:
    """What the legality checks need to know about one group that formed (or one kernel
    alone), so that a merge is checked from its groups' summaries instead of member by
    member: a merge of legal groups is legal exactly when the conditions below hold on the
    union of their summaries (see :meth:`_Fuser.merged`)."""

    mset: set[NodeId]  # the members
    written: set[BufferId]  # their outputs
    internal: set[BufferId]  # outputs read inside the group (all their readers are in it)
    open: list[NodeId]  # members whose output has readers, all outside the group
    ext_in: set[BufferId]  # buffers members read that no member writes
    vbases: set[BufferId]  # bases of the views members read
    red: NodeId | None  # the reduction, if any
    head: NodeId | None  # the out-element-wise head (matmul), if any
    numel: int  # elements every member produces (a group without a reduction)
    bcast: bool  # every input broadcasts over ``numel`` (a group without a reduction)
    hi: int  # the last member's topological position
    outsucc: set[NodeId]  # successors of members outside the group
    stream: Any  # the members' stream pin


class _Fuser:
    def __init__(
        self,
        graph: ComputeGraph,
        max_group_size: int,
        known: dict[NodeId, _Info | str] | None = None,
        numbers: dict[Any, int] | None = None,
        prev: tuple[_Fuser, list[list[NodeId]], list[GraphNode]] | None = None,
    ) -> None:
        """The fuser of one round on ``graph``. ``prev``: the previous round's fuser, the
        groups it kept and their fused kernels, when ``graph`` is that round's result; the
        candidates and their readers and writers are then derived from its state (see
        :meth:`_derive`) instead of swept from every node again."""
        self.g = graph
        self.max = max_group_size
        self.order = graph.topological_order()
        self.info: dict[NodeId, _Info] = {}
        self.keys = _BindKeys(graph, numbers)
        d = graph.dense()
        contiguous = bool(d.ids) and d.ids[-1] == len(d.ids) - 1  # ids 0..n-1: positions
        # each node's topological position, by id: a list indexed by id where ids are the
        # dense positions (no dict of n entries), else a dict
        self.pos: Any
        if contiguous:
            rank = np.empty(len(d.topo), dtype=np.int64)
            rank[np.asarray(d.topo, dtype=np.int64)] = np.arange(len(d.topo), dtype=np.int64)
            self.pos = rank.tolist()
        else:
            self.pos = {nid: i for i, nid in enumerate(self.order)}
        # Neighbour lists by id. Where the ids are the dense positions 0..n-1 (a built
        # graph's), the dense view's own tuples of positions serve: a position is then
        # equal to (and hashes as) its node's id, so the checks look it up as one, and only
        # the nodes ``between`` hands on are turned back into the ids themselves. Else
        # lists of ids, each made on first use.
        self.by_pos: tuple[NodeId, ...] | None = None
        if contiguous:  # (sorted, unique, >= 0 and the last n-1: exactly 0..n-1)
            self.succ: Any = d.succ
            self.pred: Any = d.pred
            self.by_pos = d.ids
        else:
            self.succ = _Adjacency(d.ids, d.pos, d.succ)
            self.pred = _Adjacency(d.ids, d.pos, d.pred)
        self.views = graph.views()
        self.bases = frozenset(self.views.values())
        # Buffers written by more than one node among the candidates' outputs -> their
        # writers in topological order (rare: for the next round's first writers).
        self.writers: dict[BufferId, list[NodeId]] = {}
        if prev is None:
            self._sweep({} if known is None else known)
        else:
            self._derive(*prev)
            if CHECK_MERGES:  # tests: what a sweep of the whole graph finds
                self._same_candidates(_Fuser(graph, max_group_size, dict(known or {}), numbers))
        # union-find: ``group`` holds the parent of each node that is no longer a root,
        # ``members`` the members of each root of more than one node
        self.group: dict[NodeId, NodeId] = {}
        self.members: dict[NodeId, list[NodeId]] = {}
        self.rejected: Counter[str] = Counter()
        # producer -> why this round merged it with none of its readers, as a recipe for the
        # words (formatted only for the edges that end up unfused: most never are)
        self.why: dict[NodeId, tuple[Any, ...]] = {}
        self._pdom: dict[NodeId, NodeId | None] | None = None
        self.summary: dict[NodeId, _Group] = {}  # root -> its group's summary, made on use

    # what a round knows of its candidates before grouping (a derived round's must equal a
    # sweep's: the tests compare them)
    _CANDIDATE_FIELDS = (
        "info", "out", "inputs", "stream", "readers", "writer_count", "first_writer",
        "external", "_internalisable",
    )  # fmt: skip

    def _sweep(self, known: dict[NodeId, _Info | str]) -> None:
        """Classify every node of the graph and sweep it for the candidates' readers and
        writers."""
        graph = self.g
        # A node keeps its id, buffers and op across rounds, so its classification can
        # be reused (``known``): later rounds only classify the nodes they have not seen.
        memo: dict[Any, _Info | str] = {}  # the classification of each bind key
        keys = self.keys
        info = self.info
        candidates = []
        kernel = NodeKind.KernelLaunch
        for n in graph.nodes:
            inf = known.get(n.id)
            if inf is None:
                # _classify's common case inline: a fusible kernel of one output whose bind
                # key is classified already (100k calls cost more than the look-up itself).
                # The rest, and every miss, take _classify; the tests check this against it.
                if n.kind is kernel and n.fused is None and n.fusible and len(n.outputs) == 1:
                    try:
                        inf = memo.get(keys.key(n))
                    except TypeError:  # an unhashable parameter
                        inf = None
                    if CHECK_MERGES and inf is not None:
                        assert inf == _classify(graph, n), "a bind key's classification"
                if inf is None:
                    inf = _classify(graph, n, memo, keys)
                known[n.id] = inf
            if inf.__class__ is _Info:
                info[n.id] = inf  # type: ignore[assignment]
                candidates.append(n)
        # Neighbours, readers of each candidate's output, its first writer, inputs and
        # stream, and whether the output could become internal: all fixed for the input
        # graph, so computed once (the legality checks read them for every merge tried).
        d = graph.dense()
        self.out = out = {n.id: n.outputs[0] for n in candidates}
        self.inputs = {n.id: n.inputs for n in candidates}
        self.stream = {n.id: n.stream for n in candidates}
        # Readers (in topological order, as graph.readers lists them) and writers of the
        # candidates' outputs only, from one sweep in that order: the graph's own lists
        # cover every buffer and stay cached on it.
        readers_of: dict[BufferId, list[NodeId]] = {bid: [] for bid in out.values()}
        self.writer_count = writer_count = dict.fromkeys(readers_of, 0)
        self.first_writer = first_writer = {}
        writers = self.writers
        reading = readers_of.get
        nodes = graph.nodes
        for p in d.topo:
            n = nodes[p]
            for bid in n.inputs:
                rs = reading(bid)
                if rs is not None:
                    rs.append(n.id)
            for bid in n.outputs:
                c = writer_count.get(bid)
                if c is not None:
                    if not c:
                        first_writer[bid] = n.id
                    elif c == 1:
                        writers[bid] = [first_writer[bid], n.id]
                    else:
                        writers[bid].append(n.id)
                    writer_count[bid] = c + 1
        self.readers = {nid: readers_of[bid] for nid, bid in out.items()}
        self.external = {b.id for b in graph.buffers if b.external}
        self._set_internalisable(out)

    def _derive(self, prev: _Fuser, groups: list[list[NodeId]], kernels: list[GraphNode]) -> None:
        """The candidates of this round's graph, ``prev``'s graph with ``groups`` replaced by
        ``kernels``, from ``prev``'s state: what :meth:`_sweep` finds, without classifying
        or sweeping every node again.

        A kernel keeps its id, op and buffers, and a fused kernel never joins a group, so
        the candidates are ``prev``'s minus the members of ``groups``; ``prev``'s tables
        are kept as they are (a member is no node of this graph, so nothing here looks it
        up). A buffer a candidate writes is never internal to a group (an internal buffer
        has one writer, a member), and it keeps its writers, each member writer replaced
        by its kernel (two members never write one buffer). Its readers are ``prev``'s with
        each member replaced by its kernel, once, where the kernel reads the buffer (not
        where a member read another member's write of it), in this graph's topological
        order. Views (a removed buffer is neither a view nor viewed) and external buffers
        are unchanged. The tests compare it all with a sweep."""
        owner: dict[NodeId, NodeId] = {}
        fused_inputs: dict[NodeId, tuple[BufferId, ...]] = {}
        for group, kernel in zip(groups, kernels, strict=True):
            owner.update(dict.fromkeys(group, kernel.id))
            fused_inputs[kernel.id] = kernel.inputs
        self.info = info = prev.info
        self.out = out = prev.out
        self.inputs, self.stream = prev.inputs, prev.stream
        self.writer_count = prev.writer_count
        self.external = prev.external
        self.first_writer = first_writer = prev.first_writer
        pos = self.pos
        by_pos = pos.__getitem__
        candidates = [p for p in self.order if p in info]
        if prev.writers:  # buffers of several writers: their first one here
            first_writer = self.first_writer = dict(first_writer)
            for p in candidates:
                ws = prev.writers.get(out[p])
                if ws is not None:
                    ws = self.writers[out[p]] = sorted([owner.get(w, w) for w in ws], key=by_pos)
                    first_writer[out[p]] = ws[0]
        readers_of: dict[BufferId, list[NodeId]] = {}
        prev_readers = prev.readers
        get_owner = owner.get
        members = owner.keys()
        readers = self.readers = {}
        for p in candidates:
            bid = out[p]
            rs = readers_of.get(bid)
            if rs is None:
                rs = prev_readers[p]
                if not members.isdisjoint(rs):
                    taken: set[NodeId] = set()
                    mapped = []
                    for r in rs:
                        k = get_owner(r)
                        if k is None:
                            mapped.append(r)
                        elif k not in taken:
                            taken.add(k)
                            if bid in fused_inputs[k]:
                                mapped.append(k)
                    rs = sorted(mapped, key=by_pos)
                elif len(rs) > 1:
                    rs = sorted(rs, key=by_pos)
                readers_of[bid] = rs
            readers[p] = rs
        self._set_internalisable(candidates)

    def _same_candidates(self, full: _Fuser) -> None:
        """Assert that this (derived) fuser knows of its candidates what ``full`` (a sweep of
        the same graph) knows: the tables may hold more, but never for a candidate."""
        for field in _Fuser._CANDIDATE_FIELDS:
            mine, theirs = getattr(self, field), getattr(full, field)
            if isinstance(theirs, set):
                assert mine == theirs, f"derived {field}"
            else:
                assert {k: mine.get(k) for k in theirs} == theirs, f"derived {field}"
        assert full.writers == self.writers, "derived writers"
        assert self.info.keys() & set(self.order) == full.info.keys(), "derived candidates"

    def _set_internalisable(self, candidates: Iterable[NodeId]) -> None:
        """Can each candidate's output live only inside a fused kernel (if all its readers
        join)?"""
        fusible = self.info.__contains__
        external, bases, readers = self.external, self.bases, self.readers
        writer_count, out = self.writer_count, self.out
        self._internalisable = {
            nid: (
                (bid := out[nid]) not in external
                and bid not in bases  # a view of it reads its bytes outside the group
                and writer_count[bid] == 1
                and bool(readers[nid])
                and all(map(fusible, readers[nid]))
            )
            for nid in candidates
        }

    # ---------------------------------------------------------------- union-find
    def find(self, nid: NodeId) -> NodeId:
        parent = self.group
        root = nid
        up = parent.get(root)
        if up is None:
            return root
        while up is not None:
            root, up = up, parent.get(up)
        while nid != root:  # path compression
            parent[nid], nid = root, parent[nid]
        return root

    def members_of(self, root: NodeId) -> list[NodeId]:
        """The members of the group whose root is ``root``."""
        return self.members.get(root) or [root]

    def union(self, roots: Iterable[NodeId], summary: _Group | None) -> None:
        """Merge the groups of ``roots`` (roots of distinct groups), with ``summary`` the
        merged group's (None: made again from the members when next needed)."""
        roots = sorted(roots, key=self.pos.__getitem__)
        keep = roots[0]
        kept = self.members.get(keep)
        if kept is None:
            kept = self.members[keep] = [keep]
        for r in roots[1:]:
            self.group[r] = keep
            kept.extend(self.members.pop(r, None) or (r,))
            self.summary.pop(r, None)
        if summary is None:
            self.summary.pop(keep, None)  # made again from the members when next needed
        else:
            self.summary[keep] = summary

    # ---------------------------------------------------------------- buffers
    def post_dom(self, nid: NodeId) -> NodeId | None:
        if self._pdom is None:
            self._pdom = post_dominators(self.g).idom
        return self._pdom.get(nid)

    def between(self, src: NodeId, dst: NodeId) -> set[NodeId] | None:
        """Nodes on paths ``src`` ~> ``dst`` (exclusive), or None if too many."""
        pos, succ, pred = self.pos, self.succ, self.pred
        lo, hi = pos[src], pos[dst]
        limit = 4 * self.max
        fwd: set[NodeId] = set()
        stack = [src]
        while stack:
            for s in succ[stack.pop()]:
                if s not in fwd and pos[s] < hi:
                    fwd.add(s)
                    stack.append(s)
                    if len(fwd) > limit:
                        return None
        back: set[NodeId] = set()
        stack = [dst]
        while stack:
            for p in pred[stack.pop()]:
                if p not in back and p in fwd and pos[p] > lo:
                    back.add(p)
                    stack.append(p)
        ids = self.by_pos
        return back if ids is None else {ids[p] for p in back}  # the ids, not positions

    # ---------------------------------------------------------------- legality
    def legal(self, group: list[NodeId]) -> str | None:
        """None if ``group`` may become one kernel, else the reason it may not."""
        if len(group) > self.max:
            return "group would exceed max_group_size"
        gset = set(group)
        stream = self.stream
        streams = {stream[m] for m in group}
        if len(streams) > 1:
            return "members are pinned to different streams"
        info = self.info
        # (third: it reads one flag per member, where the rules after it build sets; a
        # model's matmuls and reductions meet often, so most refused merges stop here)
        if sum(1 for m in group if info[m].cls != "E") > 1:
            return "a fused kernel holds at most one reduction or matmul"
        outs, readers_of, can = self.out, self.readers, self._internalisable
        written: set[BufferId] = set()
        internal: set[BufferId] = set()  # outputs read inside the group
        for m in group:
            out = outs[m]
            if out in written:
                return "two members write the same buffer"
            written.add(out)
            readers = readers_of[m]
            inside = sum(1 for r in readers if r in gset)
            if inside:
                if not can[m] or inside != len(readers):
                    return "an intermediate buffer has a consumer outside the group"
                internal.add(out)
        first_writer = self.first_writer
        views = self.g.views()
        for m in group:
            for bid in self.inputs[m]:
                if bid in written and first_writer[bid] not in gset:
                    return "a member overwrites a buffer another member reads"
                if views.get(bid) in written:
                    # its threads would read elements other threads of the kernel write
                    return "a member reads a view of a buffer another member writes"
        shape = self.structure_ok(sorted(group, key=self.pos.__getitem__), internal)
        if shape is not None:
            return shape
        if self.closes_cycle(gset):
            return "merging would create a cycle"
        return None

    def structure_ok(self, group: list[NodeId], internal: set[BufferId]) -> str | None:
        """None if ``group`` (in topological order; ``internal``: the outputs it reads
        itself; at most one reduction or matmul, which :meth:`legal` checks first) forms one
        element-wise, reduction or matmul-epilogue kernel, else why not."""
        info = self.info
        outs = self.out
        inner = {outs[m]: m for m in group if outs[m] in internal}
        reds = [m for m in group if info[m].cls == "R"]
        heads = [m for m in group if info[m].cls == "M"]
        if heads and any(b in inner for b in self.inputs[heads[0]]):
            return "a matmul reads whole buffers, so it can only start a fused kernel"
        if not reds:
            n = info[group[0]].out_numel
            for m in group:
                inf = info[m]
                if inf.out_numel != n:
                    return "the members produce different numbers of elements"
                if inf.cls != "M" and any(n % k for k in inf.in_numel):
                    return "an input does not broadcast over the kernel's elements"
            return None
        r = reds[0]
        rpos = group.index(r)
        full = info[r].in_numel[0]
        out = info[r].out_numel
        pre = set(group[:rpos])
        src = inner.get(self.inputs[r][0])
        if src is not None and src not in pre:
            return "the reduction's input comes from a member that is not its prologue"
        for m in group[:rpos]:
            inf = info[m]
            if outs[m] not in inner or inf.out_numel != full:
                # a prologue result must feed the kernel, not leave it
                return "a step before the reduction must only feed it, on its input's shape"
            if any(full % k for k in inf.in_numel):
                return "an input does not broadcast over the reduction's input"
        for m in group[rpos + 1 :]:
            inf = info[m]
            if inf.out_numel != out or any(out % k for k in inf.in_numel):
                return "a step after the reduction must work on its output's shape"
            if any(inner.get(b) in pre for b in self.inputs[m]):
                # epilogues see the row result, not prologue values
                return "a step after the reduction reads a value from before it"
        return None

    def closes_cycle(self, gset: set[NodeId]) -> bool:
        """True if some path leaves ``gset`` and comes back (Kahn order bounds the search)."""
        hi = max(self.pos[m] for m in gset)
        pos = self.pos
        start = [s for m in gset for s in self.succ[m] if s not in gset and pos[s] < hi]
        return self.reenters(gset, start, hi)

    def reenters(self, gset: set[NodeId], stack: list[NodeId], hi: int) -> bool:
        """True if a path from ``stack`` (successors of ``gset`` outside it, before its
        last member ``hi``) reaches ``gset``: nodes after ``hi`` cannot lead back."""
        pos = self.pos
        seen = set(stack)
        while stack:
            v = stack.pop()
            for s in self.succ[v]:
                if s in gset:
                    return True
                if s not in seen and pos[s] < hi:
                    seen.add(s)
                    stack.append(s)
        return False

    # ---------------------------------------------------------------- the greedy sweep
    def try_merge(self, nodes: Iterable[NodeId], producer: NodeId) -> None:
        roots = {self.find(m) for m in nodes}
        if len(roots) < 2:
            return
        merged = self.merged(roots)
        if merged.__class__ is _Group:
            if CHECK_MERGES:  # tests: the summaries must agree with the member-wise rules
                assert self.legal([m for r in roots for m in self.members_of(r)]) is None
            self.union(roots, merged)  # type: ignore[arg-type]
            return
        group = [m for r in roots for m in self.members_of(r)]
        why = merged
        if why is None or CHECK_MERGES:
            # the member-wise rules say which rule comes first where the summaries check
            # several at once
            why = self.legal(group)
            assert merged is None or why == merged, (why, merged)
        if why is None:  # unreachable while merged() is exact; the rules decide
            assert not CHECK_MERGES, "the group summaries refused a legal merge"
            self.union(roots, None)
        else:
            self.rejected[why] += 1
            self.why[producer] = ("merge", why, group)

    def single(self, m: NodeId) -> _Group:
        """The summary of kernel ``m`` alone."""
        inf = self.info[m]
        inputs = self.inputs[m]
        views = self.views
        cls = inf.cls
        return _Group(
            {m},
            {self.out[m]},
            set(),
            [m] if self.readers[m] else [],
            set(inputs),  # never its own output: in-place kernels do not fuse
            {views[b] for b in inputs if b in views} if views else set(),
            m if cls == "R" else None,
            m if cls == "M" else None,
            inf.out_numel,
            cls == "M" or inf.bcast,
            self.pos[m],
            set(self.succ[m]),
            self.stream[m],
        )

    def merged(self, roots: set[NodeId]) -> _Group | str | None:
        """The summary of the union of the groups of ``roots`` if :meth:`legal` accepts it,
        else the reason :meth:`legal` gives, or None where it checks several rules at once
        (it then says which comes first).

        Each group is legal on its own (or one kernel), so only what the merge adds is
        checked, in :meth:`legal`'s order: size, pins and the one reduction or matmul;
        outputs written twice and members whose readers the merge takes in part; buffers
        read in one group and written first outside the union, views of written buffers;
        the matmul's inputs and the shapes (a group with a reduction goes through
        :meth:`structure_ok`); a path leaving the union and coming back."""
        summary, members = self.summary, self.members
        size = 0
        for r in roots:
            ms = members.get(r)
            size += 1 if ms is None else len(ms)
        if size > self.max:  # before any summary is made: no set is built for it
            return "group would exceed max_group_size"
        gs = []
        for r in roots:
            g = summary.get(r)
            if g is None:
                g = summary[r] = self.single(r)
            gs.append(g)
        # The rules are checked in legal()'s order; each union of the groups' sets is made
        # only when the next rule needs it, so most refused merges copy few sets.
        a, b, more = gs[0], gs[1], gs[2:]  # mostly two groups: unions of a and b, then more
        rest = gs[1:]
        stream, numel, hi = a.stream, a.numel, a.hi
        red = head = None
        specials = 0  # reductions and matmuls
        flat = a.bcast  # every group without a reduction, on one number of elements
        for g in gs:
            if g.red is not None:
                red = g.red
                specials += 1
            elif g.head is not None:
                head = g.head
                specials += 1
        for g in rest:
            if g.stream != stream:
                return "members are pinned to different streams"
            if g.hi > hi:
                hi = g.hi
            flat = flat and g.numel == numel and g.bcast
        if specials > 1:
            return "a fused kernel holds at most one reduction or matmul"
        written = a.written | b.written
        for g in more:
            written |= g.written
        if len(written) != size:  # one output per member
            return None
        mset = a.mset | b.mset
        for g in more:
            mset |= g.mset
        readers, can, outs = self.readers, self._internalisable, self.out
        contains = mset.__contains__
        still_open = []
        closed = []  # outputs whose readers the merge takes in: internal now
        for g in gs:
            for m in g.open:
                rs = readers[m]
                inside = sum(map(contains, rs))
                if not inside:
                    still_open.append(m)
                elif inside != len(rs) or not can[m]:
                    return None
                else:
                    closed.append(outs[m])
        ext_in = a.ext_in | b.ext_in
        for g in more:
            ext_in |= g.ext_in
        crossing = ext_in & written  # read in one group, written in another
        if crossing:
            first_writer = self.first_writer
            for bid in crossing:
                if first_writer[bid] not in mset:
                    return None
            ext_in -= written
        vbases = a.vbases | b.vbases
        for g in more:
            vbases |= g.vbases
        if vbases and not vbases.isdisjoint(written):
            return None
        if head is not None and not written.isdisjoint(self.inputs[head]):
            return "a matmul reads whole buffers, so it can only start a fused kernel"
        if red is None and not flat:
            return None
        internal = a.internal | b.internal
        for g in more:
            internal |= g.internal
        internal.update(closed)
        if red is not None:
            why = self.structure_ok(sorted(mset, key=self.pos.__getitem__), internal)
            if why is not None:
                return why
        outsucc = a.outsucc | b.outsucc
        for g in more:
            outsucc |= g.outsucc
        outsucc -= mset
        pos = self.pos
        start = [v for v in outsucc if pos[v] < hi]
        if start and self.reenters(mset, start, hi):
            return "merging would create a cycle"
        return _Group(
            mset, written, internal, still_open, ext_in, vbases, red, head, numel, True, hi,
            outsucc, stream,
        )  # fmt: skip

    def not_internal(self, nid: NodeId) -> tuple[str, str]:
        """Why ``nid``'s output cannot become a value inside a fused kernel: the rule and
        the words naming the buffer and reader."""
        bid = self.out[nid]
        buf = self.g.buffer(bid)
        if buf.external:
            return "its output is external", (
                f"its output {buf.name!r} is external: the result must reach memory"
            )
        if bid in self.bases:
            return "its output is viewed", (
                f"its output {buf.name!r} is read through a view: the result must reach memory"
            )
        if self.writer_count[bid] != 1 or self.first_writer[bid] != nid:
            return "its output has other writers", f"its output {buf.name!r} has other writers"
        outside = [self.g.node(r) for r in self.readers[nid] if r not in self.info]
        if outside:
            o = outside[0]
            what = "a fused kernel" if o.fused is not None else "a kernel that cannot fuse"
            return "its output is also read outside the group", (
                f"its output {buf.name!r} is also read by {o.name!r} ({what}), so it must "
                "be written to memory"
            )
        return "nothing reads its output", f"nothing reads its output {buf.name!r}"

    def run(self) -> list[list[NodeId]]:
        info, readers_of, can = self.info, self.readers, self._internalisable
        try_merge = self.try_merge
        for p in self.order:
            if p not in info:
                continue
            readers = readers_of[p]
            if not can[p]:
                if readers:
                    self.rejected["output is external, shared or read by a non-fusible node"] += 1
                    self.why[p] = ("internal", *self.not_internal(p))
                continue
            if len(readers) == 1 or len(set(readers)) == 1:
                try_merge([p, readers[0]], p)
                continue
            # fan-out: fuse up to the post-dominator that closes the diamond (TVM 4.1)
            pd = self.post_dom(p)
            mid = None if pd is None or pd not in info else self.between(p, pd)
            if mid is None or not all(map(info.__contains__, mid)):
                self.rejected["fan-out is not closed by a fusible post-dominator"] += 1
                self.why[p] = ("fanout", len(set(readers)))
                continue
            try_merge([p, pd, *mid], p)
        groups = [
            sorted(ms, key=self.pos.__getitem__) for ms in self.members.values() if len(ms) > 1
        ]
        groups.sort(key=lambda ms: self.pos[ms[0]])
        return groups


def _classify(
    graph: ComputeGraph,
    n: GraphNode,
    memo: dict[Any, _Info | str] | None = None,
    keys: _BindKeys | None = None,
) -> _Info | str:
    """An :class:`_Info` if ``n`` may join a fused kernel at all, else why not (in words).

    With ``memo`` (bind key -> classification, filled as it goes) and ``keys``, kernels
    with one bind key are classified once: beyond the node's own flags, the rules and
    binding read only the op, its parameters and the buffers' specs (in place and views
    included), so they decide the same. A failed binding is not remembered: its message
    names the node.
    """
    if not n.is_kernel:
        return f"it is a {n.kind.value}, not a kernel"
    if n.fused is not None:
        return "it is already a fused kernel (a fused kernel joins no further group)"
    if not n.fusible:
        return "it is not marked fusible (KernelBuilder.fusible(True))"
    if len(n.outputs) != 1:
        return f"it writes {len(n.outputs)} buffers; a fusible kernel writes exactly one"
    if memo is None or keys is None:
        return _classify_op(graph, n)[0]
    key = keys.key(n)
    try:
        hit = memo.get(key)
    except TypeError:  # an unhashable parameter: classified on its own
        return _classify_op(graph, n)[0]
    if hit is None:
        hit, same_for_all = _classify_op(graph, n)
        if not same_for_all:
            return hit
        memo[key] = hit
    return hit


def _classify_op(graph: ComputeGraph, n: GraphNode) -> tuple[_Info | str, bool]:
    """:func:`_classify` of a fusible kernel writing one buffer, and whether every kernel
    with its bind key gets the same (not when binding failed: the message names it)."""
    op = get(n.op)
    if op is None:
        return "it has no op from the op library (an opaque kernel)", True
    if op.fusion_class not in _FUSIBLE_CLASSES:
        return f"its op {op.name!r} is {op.fusion_class.value}, which never fuses", True
    if op.expr is None and op.row is None and op.element is None:
        return f"its op {op.name!r} has no CUDA C expression to inline", True
    if set(n.inputs) & set(n.outputs):
        # in place: reads and writes would race inside one kernel
        return "it reads and writes the same buffer (in place)", True
    views = graph.views()
    if views and any(b in views for b in n.outputs):
        # A fused kernel may keep an output in registers; a view is another buffer's bytes.
        return "it writes a view of another buffer (a fused kernel writes whole buffers)", True
    if views and op.element is not None and any(b in views for b in n.inputs):
        # An out-element-wise head (matmul) reads its operands whole, row-major.
        return f"its op {op.name!r} reads a view of another buffer whole", True
    try:
        bound = bind(graph, n)
    except GraphError as e:  # the evaluator reports it; fusion just leaves it alone
        return f"its buffers do not fit its op: {e}", False
    step = bound.steps[0]
    rows = 0
    if step.op.row is not None:
        full = step.in_shapes[0]
        cols = math.prod(full[a] for a in step.op.reduced_axes(full, step.params))
        rows = math.prod(full) // cols * step.op.row_groups(full, step.params)
    out_numel = math.prod(step.shape)
    in_numel = tuple(math.prod(s) for s in bound.in_shapes)
    info = _Info(
        _FUSIBLE_CLASSES[op.fusion_class],
        out_numel,
        in_numel,
        rows,
        not any(out_numel % k for k in in_numel),
    )
    return info, True


class _BindKeys:
    """What binding a kernel of ``graph`` reads, as :func:`oxiwork.ops.program.signature`
    holds it, with each buffer's spec replaced by a number given once per buffer (not
    once per access): kernels with equal keys bind to the same shapes. ``numbers`` (spec
    -> number) may be shared by the graphs of several rounds, so numbers of one spec
    agree between them."""

    __slots__ = ("_by_buffer", "graph", "numbers")

    def __init__(self, graph: ComputeGraph, numbers: dict[Any, int] | None = None) -> None:
        self.graph = graph
        self.numbers = {} if numbers is None else numbers
        self._by_buffer: dict[BufferId, int] | None = None  # numbered on first use

    @property
    def by_buffer(self) -> dict[BufferId, int]:
        """``buffer id -> number of its spec`` (equal numbers: equal specs)."""
        by_buffer = self._by_buffer
        if by_buffer is None:
            numbers = self.numbers
            by_buffer = self._by_buffer = {
                b.id: numbers.setdefault(_BUFFER_KEY(b), len(numbers)) for b in self.graph.buffers
            }
        return by_buffer

    def key(self, n: GraphNode) -> Any:
        """The bind key of kernel ``n`` of the graph."""
        ids = n.inputs + n.outputs
        # repeated inputs: which positions name the same buffer (as signature says it)
        alias = None if len(set(ids)) == len(ids) else tuple([ids.index(b) for b in ids])
        number = (self._by_buffer or self.by_buffer).__getitem__
        return (n.op, n.params, len(n.inputs), tuple(map(number, ids)), alias)


def _fused_node(
    graph: ComputeGraph, nid: NodeId, group: list[NodeId], fuser: _Fuser
) -> tuple[GraphNode, set[BufferId]]:
    """The kernel replacing ``group`` (members classified by ``fuser``) and the buffers
    that become internal to it."""
    node_of = graph.node
    nodes = [node_of(m) for m in group]
    # outputs read inside the group (the group is legal: all their readers are in it), as
    # the group's summary holds them (its root is its first member)
    summary = fuser.summary.get(group[0])
    if summary is None or CHECK_MERGES:
        gset = set(group)
        readers = fuser.readers
        internal = {n.outputs[0] for n in nodes if not gset.isdisjoint(readers[n.id])}
        assert summary is None or summary.internal == internal, "summary's internal buffers"
    else:
        internal = summary.internal
    inputs: list[BufferId] = []
    in_index: dict[BufferId, int] = {}
    step_of: dict[BufferId, int] = {}
    steps: list[FusedStep] = []
    outputs: list[BufferId] = []
    results: list[int] = []
    wired = _ARGS.setdefault
    for j, n in enumerate(nodes):
        args = []
        for bid in n.inputs:
            k = step_of.get(bid)
            if k is not None:
                args.append(("step", k))
            else:
                k = in_index.get(bid)
                if k is None:
                    k = in_index[bid] = len(inputs)
                    inputs.append(bid)
                args.append(("in", k))
        wiring = tuple(args)
        steps.append(_MAKE_STEP(n.op or "", n.params, wired(wiring, wiring), n.id))
        out = n.outputs[0]
        step_of[out] = j
        if out not in internal:
            outputs.append(out)
            results.append(j)
    name = "+".join([n.name for n in nodes])
    if len(name) > MAX_NAME:
        name = f"{nodes[0].name[:80]}+...+{nodes[-1].name[:80]} ({len(nodes)} kernels)"
    program = FusedProgram(tuple(steps), tuple(results))
    info = fuser.info
    # The members' own tuples where equal (a chain reads what its first member reads and
    # writes what its last writes): fewer young objects for the collector to walk.
    first_in = nodes[0].inputs
    ins = first_in if len(inputs) == len(first_in) and first_in == tuple(inputs) else tuple(inputs)
    outs = nodes[results[0]].outputs if len(outputs) == 1 else tuple(outputs)
    node = _MAKE_NODE(
        nid,
        name,
        nodes[0].kind,
        inputs=ins,
        outputs=outs,
        stream=nodes[0].stream,
        config=_config([info[m] for m in group], results[0]),
        fusible=True,
        fused=program,
        fused_from=tuple(group),
    )
    return node, internal


# GraphNode and FusedStep as they construct, without a frozen __init__'s call per field
# (oxiwork.graph._positional: 35k fused kernels of 100k steps on a 100k-node model)
_MAKE_NODE = _positional(GraphNode)
_MAKE_STEP = _positional(FusedStep)
# A step's wiring, shared by the steps wired alike (few patterns, many steps: fewer
# objects for the garbage collector to walk). Values are tuples of str and int.
_ARGS: dict[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]] = {}
_CONFIGS: dict[int, KernelConfig] = {}  # blocks -> launch (KernelConfig checks CUDA's limits)


def _config(info: list[_Info], first_result: int) -> KernelConfig:
    """A launch covering the work of a group (its members' infos, in step order, and the
    step of its first output): one thread per element, or one block per row. From the
    members' shapes, so the fused kernel need not be bound to size its launch."""
    rows = [inf.rows for inf in info if inf.cls == "R"]
    if rows:
        blocks = max(1, min(rows[0], 65535))
    else:
        blocks = max(1, min(math.ceil(info[first_result].out_numel / _THREADS), 65535))
    config = _CONFIGS.get(blocks)
    if config is None:
        config = _CONFIGS[blocks] = KernelConfig.linear(blocks, _THREADS)
    return config


def _apply(
    graph: ComputeGraph, groups: list[list[NodeId]], made: list[tuple[GraphNode, set[BufferId]]]
) -> tuple[ComputeGraph, list[BufferId]]:
    """The graph with each group replaced by its fused kernel (``made[k]`` for group k)."""
    if not groups:
        return graph, []
    fused: list[GraphNode] = []
    removed: set[BufferId] = set()
    for node, internal in made[: len(groups)]:
        fused.append(node)
        removed |= internal
    buffers = [b for b in graph.buffers if b.id not in removed]
    # The fused kernels are made of their members' checked values (names, ops, params,
    # stream), ids and step indices, and a launch KernelConfig checked on construction:
    # the graph need not check their fields again. It maps the edges onto the fused
    # kernels itself (by position, all at once).
    new = graph._with_contracted(groups, fused, buffers)
    return new, sorted(removed)


def program_order(graph: ComputeGraph) -> list[NodeId]:
    """The order peak memory is measured in: Kahn's algorithm (CACM 1962) with a heap
    that releases ready nodes by origin id (a fused kernel counts as its first member).

    Keying by origin makes the order of a fused graph the original order with each group
    collapsed, so peak memory before and after fusion (and across repeated fusion) is
    measured on the same schedule and the comparison cannot flip with an unrelated
    tie-break.

    >>> from oxiwork.examples import quick_start
    >>> [int(n) for n in program_order(quick_start())]
    [0, 1, 2, 3]
    """
    ids = graph.dense().ids
    return [ids[p] for p in _program_positions(graph)]


def _program_positions(graph: ComputeGraph) -> list[int]:
    """:func:`program_order` as positions of the dense view (nodes sorted by id)."""
    # The heap pops the least (origin, id) among the ready nodes, so the order does not
    # depend on edge order; ids ascend with positions, so (origin, position) is that key.
    d = graph.dense()
    key = [min(n.fused_from) if n.fused_from else n.id for n in graph.nodes]
    if positions_topological(graph) and all(map(operator.le, key, key[1:])):
        # Positions in key order are a topological order: the least remaining node is
        # then always ready, so Kahn's heap would release the nodes in just this order.
        return list(range(len(key)))
    indeg = [len(p) for p in d.pred]
    heap = [(key[p], p) for p in range(len(key)) if indeg[p] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        p = heapq.heappop(heap)[1]
        out.append(p)
        for q in d.succ[p]:
            indeg[q] -= 1
            if indeg[q] == 0:
                heapq.heappush(heap, (key[q], q))
    return out


def _steps(positions: list[int]) -> np.ndarray:
    """``step_of[p]``: the step of dense position ``p`` in the order ``positions``."""
    step_of = np.empty(len(positions), dtype=np.int64)
    step_of[np.asarray(positions, dtype=np.int64)] = np.arange(len(positions), dtype=np.int64)
    return step_of


def peak_live_bytes(graph: ComputeGraph, order: Iterable[NodeId] | None = None) -> int:
    """Largest total size of non-external buffers live at once along ``order`` (default
    :func:`program_order`): :func:`oxiwork.analysis.liveness.max_live_bytes` there.

    >>> from oxiwork.examples import quick_start
    >>> peak_live_bytes(quick_start())
    8192
    """
    if order is not None:
        return liveness.max_live_bytes(graph, list(order))
    # program_order is a topological order by construction: no need to check it again
    return liveness.max_live_bytes_merged(graph, _steps(_program_positions(graph)))


def _fused_peak(
    graph: ComputeGraph,
    new: ComputeGraph,
    groups: list[list[NodeId]],
    made: list[tuple[GraphNode, set[BufferId]]],
    removed: list[BufferId],
) -> int:
    """:func:`peak_live_bytes` of ``new``, which :func:`_apply` made from ``graph`` by
    replacing ``groups`` with the kernels ``made``, from ``graph``'s accesses: a fused
    kernel accesses exactly its members' buffers but the ones removed, so the peak is the
    one of ``graph`` with each group's members on the step of its kernel in ``new``'s
    :func:`program_order` (and the removed buffers gone)."""
    if new is graph:
        return peak_live_bytes(graph)
    d, nd = graph.dense(), new.dense()
    target = list(d.ids)  # the id each original node has in the new graph
    pos = d.pos
    for group, (node, _) in zip(groups, made, strict=True):
        for m in group:
            target[pos[m]] = node.id
    new_ids = np.fromiter(nd.ids, dtype=np.int64, count=len(nd.ids))
    at = np.searchsorted(new_ids, np.fromiter(target, dtype=np.int64, count=len(target)))
    peak = liveness.max_live_bytes_merged(graph, _steps(_program_positions(new))[at], removed)
    if CHECK_MERGES:  # tests: the same as measuring the fused graph itself
        assert peak == liveness.max_live_bytes(new, program_order(new)), "fused peak"
    return peak


_BUFFER_KEY = operator.attrgetter(
    *(f for f in Buffer.__slots__ if f not in ("id", "name", "offset"))
)


def _check_source(
    graph: ComputeGraph, node: GraphNode, sources: dict[Any, bool], keys: _BindKeys
) -> None:
    """Generate ``node``'s CUDA C once per distinct program (raising the GraphError that
    generating it raises; a program that failed is generated again, for its message).

    The source is a function of the steps (ops, parameters, wiring), the buffers' types
    and shapes and whether an input is also an output; names only enter its identifiers.
    Groups repeating one program (a model's layers) are so generated once per pass. The
    buffers enter the key as the numbers ``keys`` gives their specs (equal numbers for
    equal specs, in every round).
    """
    fused = node.fused
    assert fused is not None
    ins, outs = node.inputs, node.outputs
    key = (
        tuple([(st.op, st.params, st.args) for st in fused.steps]),
        fused.outputs,
        len(ins),
        tuple(map(keys.by_buffer.__getitem__, ins + outs)),
        tuple([b in outs for b in ins]),
    )
    # not yet generated, or it failed (say so for this node); the tests generate every one,
    # so a key that let a failing program pass as one that built would show
    if CHECK_MERGES or not sources.get(key, False):
        sources[key] = False
        kernel_source(graph, node)
        sources[key] = True


def _round(
    graph: ComputeGraph,
    max_group_size: int,
    limit: int,
    known: dict[NodeId, _Info | str],
    sources: dict[Any, bool],
    numbers: dict[Any, int],
    prev: tuple[_Fuser, list[list[NodeId]], list[GraphNode]] | None = None,
) -> tuple[
    ComputeGraph,
    int,
    list[list[NodeId]],
    list[BufferId],
    list[list[NodeId]],
    _Fuser,
    list[tuple[list[NodeId], str]],
    list[GraphNode],
]:
    """One sweep of grouping on ``graph``: the fused graph, its peak, the groups kept, the
    buffers removed, the groups undone (they raised peak memory above ``limit``), the fuser
    (its refusals, counted and per producer), the groups whose kernel failed to build,
    with the error, and the fused kernels of the groups kept. ``prev``: the previous
    round's fuser, groups kept and kernels, when ``graph`` is its result."""
    fuser = _Fuser(graph, max_group_size, known, numbers, prev)
    groups = fuser.run()
    # Every group must generate CUDA; a failure here is a bug in the rules above, so the
    # group is dropped rather than producing a kernel nobody can compile.
    checked: list[list[NodeId]] = []
    failed: list[tuple[list[NodeId], str]] = []
    made: list[tuple[GraphNode, set[BufferId]]] = []
    first = int(graph.next_node_id())  # fused nodes are numbered from here, in group order
    for group in groups:
        try:
            node, internal = _fused_node(graph, NodeId(first + len(made)), group, fuser)
            _check_source(graph, node, sources, fuser.keys)
        except GraphError as e:
            fuser.rejected["generated kernel failed to build"] += 1
            failed.append((group, f"the generated kernel for the group failed to build: {e}"))
            continue
        checked.append(group)
        made.append((node, internal))
    groups = checked
    # Undo the latest groups until peak memory fits ``limit``. Each try rebuilds the graph,
    # so instead of undoing one group at a time, undo 1, 2, 4, ... until a prefix fits
    # and then bisect between it and the shortest prefix known not to fit: O(log k)
    # rebuilds instead of k. Keeping no group always fits (this round's input is within
    # the limit). Peak is not monotone in the groups kept, so this finds a long prefix
    # that fits, not always the longest; the next round retries what it undid.
    tried: dict[int, tuple[ComputeGraph, list[BufferId], int]] = {0: (graph, [], limit)}

    def fits(k: int) -> bool:
        if k not in tried:
            new, removed = _apply(graph, groups[:k], made[:k])
            tried[k] = (new, removed, _fused_peak(graph, new, groups[:k], made[:k], removed))
        return tried[k][2] <= limit

    keep = len(groups)
    if not fits(keep):
        bad, step = keep, 1
        keep = max(0, bad - step)
        while not fits(keep):
            bad, step = keep, 2 * step
            keep = max(0, bad - step)
        while bad - keep > 1:
            mid = (keep + bad) // 2
            keep, bad = (mid, bad) if fits(mid) else (keep, mid)
    new, removed, peak = tried[keep]
    undone = groups[keep:][::-1]  # latest first
    # The kept kernels and the fused ones (bound while making them) keep their buffers,
    # so the cost model and code generation on ``new`` need not bind them again.
    share_bound(graph, new)
    kernels = [node for node, _ in made[:keep]]  # ids first, first + 1, ...: group order
    return new, peak, groups[:keep], removed, undone, fuser, failed, kernels


def fuse(graph: ComputeGraph, *, max_group_size: int = 16) -> PassResult:
    """Fuse element-wise chains, closed diamonds and reduction prologues/epilogues.

    Parameters
    ----------
    graph
        The graph to optimise (unchanged; a new one is returned).
    max_group_size
        Most original kernels one fused kernel may replace (>= 1; 1 disables fusion).

    Returns
    -------
    PassResult
        ``graph``: each group replaced by one kernel (new id, ``fused`` program,
        ``fused_from`` the originals, name ``"a+b+..."``), intermediate buffers removed,
        edges rewired. ``artefacts``: ``groups`` (lists of original ids),
        ``fused_nodes`` (new id -> originals), ``removed_buffers`` (ids),
        ``kernels_before``, ``kernels_after``, ``peak_bytes_before``,
        ``peak_bytes_after`` (both along :func:`program_order`), ``undone`` (groups
        undone because they raised peak memory), ``rejected`` (reason -> count of
        merges refused in the last round), ``rounds`` (grouping sweeps run until one
        merged nothing or kept every group it formed; ``fuse`` of its own result forms no
        group) and ``not_fused``
        (a :class:`NotFused`: why each kernel -> kernel edge was left unfused).

    References
    ----------
    T. Chen et al., "TVM: An Automated End-to-End Optimizing Compiler for Deep Learning",
    OSDI 2018, section 4.1 (operator fusion on a post-dominator tree).

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> res = fuse(quick_start())
    >>> res.artefacts["groups"], [int(b) for b in res.artefacts["removed_buffers"]]
    ([[NodeId(1), NodeId(2)]], [1])
    """
    if isinstance(max_group_size, bool) or not isinstance(max_group_size, int):
        raise InvalidArgument(f"max_group_size must be an int >= 1, got {max_group_size!r}")
    if max_group_size < 1:
        raise InvalidArgument(f"max_group_size must be >= 1, got {max_group_size}")
    with paused_gc():  # many acyclic allocations: a GC pass would rescan them all
        return _fuse(graph, max_group_size)


def _fuse(graph: ComputeGraph, max_group_size: int) -> PassResult:
    before = peak_live_bytes(graph)
    # Rounds until nothing more merges: undoing a group changes the post-dominators and the
    # peak, which can make a merge refused earlier legal (a round that undid none is the
    # last, see below). Fused kernels never join another group, so every group is a list of
    # original kernels and running ``fuse`` on its own result changes nothing.
    new, after, groups, removed = graph, before, [], []
    known: dict[NodeId, _Info | str] = {}
    sources: dict[Any, bool] = {}  # fused programs whose CUDA C was generated
    numbers: dict[Any, int] = {}  # buffer spec -> its number in the keys of ``sources``
    fused_nodes: dict[NodeId, tuple[NodeId, ...]] = {}
    undone: dict[frozenset[NodeId], list[NodeId]] = {}
    rejected: Counter[str] = Counter()
    # Why kernels did not merge, as of the latest round that said so: per producer (the
    # fuser's records) and per member of a group dropped after it formed (round, group,
    # words). Formatted into sentences only for the edges that end up unfused. The round
    # of each record is kept beside it (ints, not a pair per producer for the collector).
    said: dict[NodeId, tuple[Any, ...]] = {}
    said_in: dict[NodeId, int] = {}
    dropped_in: dict[NodeId, tuple[int, int, str]] = {}
    rounds = 0
    prev = None  # the previous round's fuser, groups and kernels: the next one derives from it
    while max_group_size > 1:
        new, peak, got, gone, dropped, fuser, failed, kernels = _round(
            new, max_group_size, before, known, sources, numbers, prev
        )
        prev = fuser, got, kernels
        rounds += 1
        rejected = fuser.rejected
        said.update(fuser.why)
        said_in.update(dict.fromkeys(fuser.why, rounds))
        # the fused kernels' own id and members tuple (no copies for the collector)
        fused_nodes.update((k.id, k.fused_from) for k in kernels)
        if undone:  # a group undone in an earlier round formed now
            for group in got:
                undone.pop(frozenset(group), None)
        for group in dropped:
            undone[frozenset(group)] = group
        notes = [(g, f"raised peak live memory above the unfused graph's {before:,} B, so "
                     "that group was undone") for g in dropped] + failed  # fmt: skip
        for k, (group, text) in enumerate(notes):
            dropped_in.update((m, (rounds, k, text)) for m in group)
        groups += got
        removed += gone
        if not got:
            break
        after = peak
        if not dropped and not failed:
            # A round that kept every group it formed ends the rounds: the next would form
            # none. Its candidates are the kernels no group took, each still single when
            # the sweep reached it (groups only grow), with the same readers and writers;
            # the merge it tried was refused then. The fused graph has the same paths
            # between them plus paths through the fused kernels (a group's members need
            # not reach each other), and a fused kernel never joins a group: a closure,
            # a post-dominator or a path that differs there goes through one, so the same
            # merge is refused again. (tests/optimizer/test_fusion.py's test_idempotent:
            # fuse of its own result forms no group.) The extra sweep cost 0.2-0.3 s of a
            # 100k-node build.
            break
    kernels_before = sum(1 for n in graph.nodes if n.is_kernel)
    artefacts: dict[str, Any] = {
        "groups": groups,
        "fused_nodes": fused_nodes,
        "removed_buffers": sorted(removed),
        "kernels_before": kernels_before,
        "kernels_after": sum(1 for n in new.nodes if n.is_kernel),
        "peak_bytes_before": before,
        "peak_bytes_after": after,
        "undone": list(undone.values()),
        "rejected": dict(rejected),
        "rounds": rounds,
        # Worked out on first read (the workbench's details panel, the CLI): most runs of
        # the pipeline never ask, and it costs a pass over every edge.
        "not_fused": NotFused(lambda: _not_fused(graph, groups, said, said_in, dropped_in, known)),
    }
    return PassResult(new, artefacts)


class NotFused(Mapping[tuple[NodeId, NodeId], str]):
    """The ``not_fused`` artefact: ``(producer, consumer) -> why they were not fused``, for
    every edge between two kernels that ended in different kernels. A read-only mapping
    whose sentences are worked out on first access; :meth:`rule` gives the rule a sentence
    cites without the names in it, to group them.

    >>> from oxiwork.examples import transformer_block
    >>> g = transformer_block(1)
    >>> why = fuse(g).artefacts["not_fused"]
    >>> "its op 'transpose' is injective, which never fuses" in set(why.rules().values())
    True
    >>> edge = next(k for k, r in why.rules().items() if "transpose" in r)
    >>> why[edge]
    "'L0.k0_t' (#9) cannot fuse: its op 'transpose' is injective, which never fuses"
    """

    __slots__ = ("_data", "_make")

    def __init__(self, make: Callable[[], dict[tuple[NodeId, NodeId], tuple[str, str]]]) -> None:
        self._make: Callable[[], dict[tuple[NodeId, NodeId], tuple[str, str]]] | None = make
        self._data: dict[tuple[NodeId, NodeId], tuple[str, str]] | None = None

    def _get(self) -> dict[tuple[NodeId, NodeId], tuple[str, str]]:
        if self._data is None:
            assert self._make is not None
            self._data, self._make = self._make(), None  # drop what the recipe holds
        return self._data

    def __getitem__(self, key: tuple[NodeId, NodeId]) -> str:
        return self._get()[key][1]

    def __iter__(self) -> Iterator[tuple[NodeId, NodeId]]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())

    def __repr__(self) -> str:
        return f"NotFused({dict(self)!r})"

    def rule(self, key: tuple[NodeId, NodeId]) -> str:
        """The rule the reason for edge ``key`` cites, without node or buffer names."""
        return self._get()[key][0]

    def rules(self) -> dict[tuple[NodeId, NodeId], str]:
        """:meth:`rule` of every edge."""
        return {k: r for k, (r, _) in self._get().items()}


def _not_fused(
    graph: ComputeGraph,
    groups: list[list[NodeId]],
    said: dict[NodeId, tuple[Any, ...]],
    said_in: dict[NodeId, int],
    dropped_in: dict[NodeId, tuple[int, int, str]],
    known: dict[NodeId, _Info | str],
) -> dict[tuple[NodeId, NodeId], tuple[str, str]]:
    """For every edge between two kernels of ``graph`` that ended in different kernels,
    the rule and the words for why they were not fused: the reason one of them can never
    fuse, else the latest round's word on it (the producer's refused merge, or a group of
    both dropped after forming), and which fused kernels the two went into."""
    owner = {m: k for k, group in enumerate(groups) for m in group}
    nodes = {n.id: n for n in graph.nodes}
    name = {nid: n.name for nid, n in nodes.items()}
    group_names: dict[int, str] = {}  # fused kernel names, made once per group

    def cannot(n: GraphNode) -> tuple[str, str] | None:
        cls = known.get(n.id)
        if cls is None:
            cls = known[n.id] = _classify(graph, n)
        if isinstance(cls, _Info):
            return None
        return cls, f"{n.name!r} (#{int(n.id)}) cannot fuse: {cls}"

    out: dict[tuple[NodeId, NodeId], tuple[str, str]] = {}
    for a, b in graph.edges:  # sorted, so the result is in a stable order
        na, nb = nodes[a], nodes[b]
        if not (na.is_kernel and nb.is_kernel):
            continue
        ga, gb = owner.get(a), owner.get(b)
        if ga is not None and ga == gb:
            continue
        reason = cannot(na) or cannot(nb)
        if reason is None and not set(na.outputs).intersection(nb.inputs):
            rule = "an ordering-only dependency: no buffer flows between them"
            reason = rule, rule
        if reason is None:
            rec, da, db = said.get(a), dropped_in.get(a), dropped_in.get(b)
            same_group = da is not None and db is not None and da[:2] == db[:2]
            if same_group and (rec is None or said_in[a] <= da[0]):  # after any refusal
                rec = ("dropped", da[2])
            rule, words = _said(rec, a, b, name) if rec is not None else ("", "")
            joined = []
            for n, g in ((a, ga), (b, gb)):
                if g is not None:
                    if g not in group_names:
                        full = "+".join(name[m] for m in groups[g])
                        group_names[g] = full if len(full) <= 80 else f"{full[:77]}..."
                    joined.append(f"{name[n]!r} went into {group_names[g]!r}")
            went = " and ".join(joined)
            if not rule:  # no round refused them directly: each joined another kernel
                rule = "each went into another fused kernel" if went else "no rule merged them"
            words = f"{words}; {went}" if words and went else words or went or rule
            reason = rule, words
        out[(a, b)] = reason
    return out


def _said(
    rec: tuple[Any, ...], producer: NodeId, reader: NodeId, name: dict[NodeId, str]
) -> tuple[str, str]:
    """The rule and the words for a record about ``producer`` (and its reader ``reader``)."""
    kind = rec[0]
    if kind == "dropped":
        return rec[1], f"fusing {name[producer]!r} and {name[reader]!r} in one group: {rec[1]}"
    if kind == "merge":
        group = sorted(rec[2], key=int)  # ids follow build order: producers first
        shown = ", ".join(repr(name[m]) for m in group[:8])
        more = f" and {len(group) - 8} more" if len(group) > 8 else ""
        return rec[1], f"{rec[1]} (the group tried: {shown}{more})"
    if kind == "internal":
        return rec[1], rec[2]
    rule = "a fan-out not closed by a fusible post-dominator"
    return rule, (
        f"its output feeds {rec[1]} kernels that do not all meet again at one fusible kernel "
        "(a fan-out fuses only up to the post-dominator that closes it, with every kernel in "
        "between fusible)"
    )
