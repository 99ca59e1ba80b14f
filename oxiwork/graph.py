"""The ComputeGraph: an immutable directed acyclic graph of GPU operations over named buffers.

A graph is a value: building one validates it (ids, references, acyclicity), and every
change returns a new graph. Algorithms that must be fast on 100k nodes use the cached
:meth:`ComputeGraph.dense` view (integer positions and adjacency lists) instead of ids.

Example
-------
>>> from oxiwork import GraphBuilder, MemcpyDir
>>> b = GraphBuilder()
>>> x = b.alloc_buffer("x", 1024)
>>> up = b.add_memcpy("up", MemcpyDir.HostToDevice, 1024, dst=x)
>>> k = b.add_kernel("relu", 1, 256, 0).inputs([x]).outputs([b.alloc_buffer("y", 1024)]).finish()
>>> g = b.build()
>>> [g.node(n).name for n in g.topological_order()]
['up', 'relu']
>>> ComputeGraph.from_json(g.to_json()) == g
True
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from types import MappingProxyType, SimpleNamespace
from typing import Any

import numpy as np

from oxiwork import validate
from oxiwork.error import (
    CycleError,
    InvalidArgument,
    MalformedFile,
    UnknownBuffer,
    UnknownNode,
    UnorderedAccess,
)
from oxiwork.node import (
    BODY_KINDS,
    DTYPES,
    Buffer,
    BufferId,
    CondKind,
    FusedProgram,
    FusedStep,
    GraphNode,
    KernelConfig,
    MemcpyDir,
    NodeId,
    NodeKind,
    StreamId,
)
from oxiwork.verify import verify_graph

__all__ = [
    "JSON_FORMAT",
    "JSON_VERSION",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_JSON_NUMBER",
    "ComputeGraph",
    "DenseGraph",
    "check_buffer",
    "check_node",
]

JSON_FORMAT = "oxiwork.graph"
JSON_VERSION = 1
#: Largest graph file :meth:`ComputeGraph.from_json` reads (a 100k-node graph is ~50 MB).
MAX_JSON_BYTES = 512 * 2**20
#: Deepest nesting of arrays and objects in a graph file: the format itself needs 8, and
#: each level of body graphs (child graphs, conditionals) 4 more.
MAX_JSON_DEPTH = 8 + 4 * validate.MAX_BODY_DEPTH
#: Most characters of one number in a graph file (2**64 has 20 digits; a float's repr 24).
MAX_JSON_NUMBER = 32


# _cache key under which a constructor's caller passes (nodes, buffers) already checked.
_TRUSTED = "_trusted"
# In place of the trusted nodes: every node passed was made of checked values
# (with_changes(nodes=x, checked_nodes=x)).
_EVERY = ("every node",)
# _cache key, set while with_changes runs: the edges given begin with the very edges of the
# graph it started from, in their order (so the new graph keeps every old edge).
_EXTENDS = "_extends_edges"
# _cache key, set while with_changes runs: the old graph's node index when every node
# accesses what the node of its id accessed there, over the very same buffers.
_SAME_ACCESSES = "_same_accesses"


@dataclass(frozen=True, slots=True)
class DenseGraph:
    """Integer-indexed adjacency of a graph, for algorithms that must be fast.

    ``ids[p]`` is the node at position ``p`` (``graph.nodes[p]``); ``pos`` maps back;
    ``succ``/``pred`` are adjacency tuples of positions; ``topo`` is a deterministic
    topological order of positions (Kahn's algorithm, ties broken by id).

    The view is cached on the graph and shared by every caller, so it is read-only:
    tuples, and a read-only mapping for ``pos``. Copy what you need to change
    (``list(d.topo)``).

    >>> from oxiwork.examples import quick_start
    >>> d = quick_start().dense()
    >>> d.succ[0], type(d.topo).__name__
    ((1,), 'tuple')
    >>> d.pos[d.ids[2]] = 0
    Traceback (most recent call last):
    TypeError: 'mappingproxy' object does not support item assignment
    """

    ids: tuple[NodeId, ...]
    pos: Mapping[NodeId, int]
    succ: tuple[tuple[int, ...], ...]
    pred: tuple[tuple[int, ...], ...]
    topo: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ComputeGraph:
    """A validated DAG of :class:`~oxiwork.node.GraphNode` over :class:`~oxiwork.node.Buffer`.

    ``edges`` is the whole dependency relation: ``build()`` adds the data edges inferred
    from buffer accesses, so nothing else needs to be consulted to order nodes.
    """

    nodes: tuple[GraphNode, ...]
    buffers: tuple[Buffer, ...]
    edges: tuple[tuple[NodeId, NodeId], ...]
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self) -> None:
        if set(self._cache) - {_TRUSTED}:  # dataclasses.replace passed another graph's
            object.__setattr__(
                self, "_cache", {k: v for k, v in self._cache.items() if k == _TRUSTED}
            )
        # A part that is the very tuple of the graph with_changes started from is already
        # sorted and checked: only the parts passed in are turned into checked tuples.
        given = self._cache.get(_TRUSTED, ())
        nodes, buffers, edges = self.nodes, self.buffers, self.edges
        if len(given) > 10 and given[10] is not None and nodes is given[10][0]:
            pass  # a tuple this module sorted (ComputeGraph._with_appended_edges)
        elif len(given) < 3 or nodes is not given[0]:
            nodes = _sorted_by_id(nodes, GraphNode, "nodes")
        if len(given) < 3 or buffers is not given[1]:
            buffers = _sorted_by_id(buffers, Buffer, "buffers")
        ends = None  # the edges' ends as arrays, when the edges were sorted here
        if len(given) > 9 and given[9] is not None:
            # edges this module sorted and made unique itself, with their ends as arrays
            # (ComputeGraph._with_contracted): nothing to sort or read back
            ends = given[9]
        elif len(given) < 3 or edges is not given[2]:
            # (edges extending the trusted graph's: their known ends are not read again)
            known = (given[2], given[4]) if len(given) > 4 and given[4] is not None else None
            appended = given[8] if len(given) > 8 else None
            edges, ends, extends = _sorted_edges(edges, known, appended)
            if extends:
                self._cache[_EXTENDS] = given[2]
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "buffers", buffers)
        object.__setattr__(self, "edges", edges)
        self._validate(ends)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle and copy rebuild the graph from its parts (validated again): the caches
        # hold read-only views (MappingProxyType) that cannot be pickled, and a copy must
        # not share another graph's caches.
        return (ComputeGraph, (self.nodes, self.buffers, self.edges))

    # ------------------------------------------------------------------ validation
    def _validate(self, ends: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        # Values first (oxiwork.validate's rules), skipping the objects a caller vouches
        # for: with_changes passes the parts of the graph it came from, the builder what it
        # checked as it went. They are alive while this runs, so their id()s are unique.
        trusted = self._cache.pop(_TRUSTED, ((), ()))
        # The fast path only says "valid" (whole-graph set and array operations, no
        # message); anything it does not accept takes the full checks below, which raise
        # the first problem in their order. So both accept exactly the same graphs.
        if _FAST_VALIDATION and self._validate_fast(trusted, ends):
            return
        self._validate_full(trusted)

    def _validate_fast(
        self, trusted: tuple[Any, ...], ends: tuple[np.ndarray, np.ndarray] | None
    ) -> bool:
        """True if every check of :meth:`_validate_full` passes (then the caches it fills
        are filled); False if one may fail (nothing is cached)."""
        nodes, buffers = self.nodes, self.buffers
        try:
            # the value rules, for the objects no caller vouches for (usually none)
            for part, given, rule in (
                (buffers, trusted[1], check_buffer),
                (nodes, trusted[0], check_node),
            ):
                if part is not given and given is not _EVERY:
                    new = set(map(id, part))
                    new.difference_update(map(id, given))
                    for x in part if new else ():
                        if id(x) in new:
                            rule(x)
            old_nodes = trusted[5] if len(trusted) > 6 and nodes is trusted[0] else None
            same_as = None  # the checked graph's node index, when accesses are the same
            known = trusted[10] if len(trusted) > 10 else None
            if known is not None and nodes is not known[0]:
                known = None  # (its ids as a list and an array, when nodes is that tuple)
            if old_nodes is not None:  # the very nodes of a checked graph: its index
                node_index = old_nodes
                nids = list(node_index)
            else:
                nids = list(map(_ID, nodes)) if known is None else known[1]
                node_index = dict(zip(nids, nodes, strict=True))
            same_buffers = len(trusted) > 7 and buffers is trusted[1] and trusted[7] is not None
            if same_buffers:  # the very buffers of a checked graph: its indexes, its views
                buf_index, names = trusted[6], trusted[7]
            else:
                buf_index = dict(zip(map(_ID, buffers), buffers, strict=True))
                names = dict(zip(map(_NAME, buffers), buffers, strict=True))
            if not len(node_index) == len(nodes) == len(nids) or not (
                len(buf_index) == len(names) == len(buffers)
            ):
                return False  # a repeated id or name
            for b in itertools.compress(
                () if same_buffers else buffers,
                map(operator.is_not, map(_BASE, buffers), itertools.repeat(None)),
            ):
                check_view(b, buf_index.get(b.base))
            if old_nodes is not None and buf_index.keys() == trusted[6].keys():
                pass  # the same nodes over the same buffer ids: their references hold
            else:
                todo = nodes
                if same_buffers and trusted[5] is not None:
                    # A node that accesses what the node of its id accessed in the checked
                    # graph (a node new to it: nothing), over its very buffers, names
                    # buffers that exist (the stream pass's nodes: each restreamed one
                    # holds its old access tuples, each event none): only the others
                    # are looked at, and when there are none the graph's ordering
                    # search may take it (_ordering_kept).
                    kept = _same_accesses(trusted[5], nids, nodes)
                    if all(kept):
                        todo = ()
                        same_as = trusted[5]
                    else:
                        todo = list(itertools.compress(nodes, map(operator.not_, kept)))
                used = set(itertools.chain.from_iterable(map(_INPUTS, todo)))
                used.update(itertools.chain.from_iterable(map(_OUTPUTS, todo)))
                used.update(map(_CONDITION, todo))
                used.discard(None)
                waits = set(
                    itertools.compress(
                        map(_EVENT, nodes),
                        map(operator.is_, map(_KIND, nodes), itertools.repeat(NodeKind.EventWait)),
                    )
                )
                if not buf_index.keys() >= used or None in waits or not node_index.keys() >= waits:
                    return False
            dense = trusted[3] if len(trusted) > 3 else None
            arrays = trusted[4] if len(trusted) > 4 else None
            ids = None
            if dense is not None and self.edges is trusted[2] and tuple(nids) == dense.ids:
                pass  # the very edges over the same ids: ends, self-loops, cycle as before
            else:
                if ends is None:
                    ends = _edge_arrays(self.edges)
                    if ends is None:
                        return False
                if known is not None:
                    ids = known[2]
                else:
                    ids = np.fromiter(nids, dtype=np.int64, count=len(nids))  # ascending
                a, b = ends
                pa = np.searchsorted(ids, a).clip(0, max(len(ids) - 1, 0))
                pb = np.searchsorted(ids, b).clip(0, max(len(ids) - 1, 0))
                if len(a) and (
                    not len(ids) or (ids[pa] != a).any() or (ids[pb] != b).any() or (a == b).any()
                ):
                    return False  # an end that is no node, or a self-loop
                dense = _dense_of(tuple(nids), pa, pb)
                if dense is None:
                    return False  # a cycle: the full checks name it
                arrays = (a, b, pa, pb)
        except Exception:  # whatever is wrong, the full checks say it in their words
            return False
        self._cache["node_index"] = node_index
        self._cache["buf_index"] = buf_index
        self._cache["buf_names"] = names
        self._cache["dense"] = dense
        if arrays is not None:
            self._cache["edge_arrays"] = arrays
        if ids is not None:
            self._cache["id_array"] = ids
        if same_as is not None:
            self._cache[_SAME_ACCESSES] = same_as
        return True

    def _validate_full(self, trusted: tuple[Any, ...]) -> None:
        # with_changes also passes its graph's edges and dense view: when the edges are that
        # very tuple and the node ids are the same, the edges' ends are known to be nodes,
        # no self-loops and no cycle, and the dense view (ids and edges only) carries over.
        dense = trusted[3] if len(trusted) > 3 else None
        same_shape = (
            dense is not None
            and self.edges is trusted[2]
            and tuple(n.id for n in self.nodes) == dense.ids
        )
        # (a part that is the trusted tuple itself needs no look-up per item)
        if self.buffers is not trusted[1]:
            seen_b = {id(b) for b in trusted[1]}
            for b in self.buffers:
                if id(b) not in seen_b:
                    check_buffer(b)
        if self.nodes is not trusted[0] and trusted[0] is not _EVERY:
            seen_n = {id(n) for n in trusted[0]}
            for n in self.nodes:
                if id(n) not in seen_n:
                    check_node(n)
        node_index: dict[NodeId, GraphNode] = {}
        for n in self.nodes:
            if n.id in node_index:
                raise InvalidArgument(
                    f"node id {int(n.id)} is used twice ({node_index[n.id].name!r} and "
                    f"{n.name!r}); give every node its own id"
                )
            node_index[n.id] = n
        buf_index: dict[BufferId, Buffer] = {}
        names: dict[str, Buffer] = {}
        for b in self.buffers:
            if b.id in buf_index:
                raise InvalidArgument(f"buffer id {int(b.id)} is used twice; ids must be unique")
            if b.name in names:
                raise InvalidArgument(
                    f"two buffers are named {b.name!r} (ids {int(names[b.name].id)} and "
                    f"{int(b.id)}); buffer names must be unique"
                )
            buf_index[b.id] = b
            names[b.name] = b
        self._cache["node_index"] = node_index
        self._cache["buf_index"] = buf_index
        self._cache["buf_names"] = names
        for b in self.buffers:
            if b.base is not None:
                check_view(b, buf_index.get(b.base))
        for n in self.nodes:
            for bid in (*n.inputs, *n.outputs):
                if bid not in buf_index:
                    raise UnknownBuffer(
                        f"node {n.name!r} (id {int(n.id)}) uses buffer id {int(bid)}, which "
                        "is not in this graph; allocate the buffer in the same builder"
                    )
            if n.condition is not None and n.condition not in buf_index:
                raise UnknownBuffer(
                    f"conditional {n.name!r} (id {int(n.id)}) tests buffer id "
                    f"{int(n.condition)}, which is not in this graph; allocate the condition "
                    "buffer in the same builder"
                )
            if n.kind is NodeKind.EventWait and (n.event is None or n.event not in node_index):
                raise UnknownNode(
                    f"event wait {n.name!r} waits for node {n.event!r}, which is not an event "
                    "record of this graph"
                )
        if same_shape:
            self._cache["dense"] = dense
            return
        for a, b in self.edges:
            for end in (a, b):
                if end not in node_index:
                    raise UnknownNode(
                        f"edge {int(a)} -> {int(b)} names node id {int(end)}, which is not in "
                        "this graph"
                    )
            if a == b:
                raise CycleError(
                    f"node {node_index[a].name!r} depends on itself; remove the self-loop",
                    (node_index[a].name,),
                )
        self.dense()  # raises CycleError with the cycle named

    # ------------------------------------------------------------------ queries
    def node(self, nid: NodeId | int) -> GraphNode:
        """The node with id ``nid``; :class:`UnknownNode` if there is none."""
        try:
            return self._cache["node_index"][nid]
        except (KeyError, TypeError):
            raise UnknownNode(
                f"no node with id {nid!r} in this graph (it has {len(self.nodes)} nodes); "
                "use an id from this graph"
            ) from None

    def has_node(self, nid: NodeId | int) -> bool:
        """True if ``nid`` names a node of this graph."""
        return nid in self._cache["node_index"]

    def buffer(self, bid: BufferId | int) -> Buffer:
        """The buffer with id ``bid``; :class:`UnknownBuffer` if there is none."""
        try:
            return self._cache["buf_index"][bid]
        except (KeyError, TypeError):
            raise UnknownBuffer(
                f"no buffer with id {bid!r} in this graph; use an id from this graph"
            ) from None

    def buffer_by_name(self, name: str) -> Buffer:
        """The buffer named ``name``; :class:`UnknownBuffer` listing the names if absent."""
        try:
            return self._cache["buf_names"][name]
        except (KeyError, TypeError):
            known = ", ".join(repr(n) for n in list(self._cache["buf_names"])[:10])
            raise UnknownBuffer(f"no buffer named {name!r}; buffers are: {known}") from None

    def views(self) -> Mapping[BufferId, BufferId]:
        """``view id -> base id`` for every view buffer (read-only, cached; empty when the
        graph has no views).

        The one definition of aliasing the analyses share: an access to a view is an
        access to its base's bytes, so ordering, liveness, memory planning and race
        detection map each view to its base through this.

        >>> from oxiwork import GraphBuilder
        >>> b = GraphBuilder()
        >>> x = b.alloc_buffer("x", 24, shape=(2, 3))
        >>> xt = b.view("xT", x, (3, 2), strides=(1, 3))
        >>> _ = b.add_memset("zero", 24, 0, dst=x)
        >>> _ = b.add_kernel("copy", 1, 6).inputs([xt]).outputs([b.alloc_buffer("y", 24)]).finish()
        >>> dict(b.build().views())
        {BufferId(1): BufferId(0)}
        """
        v = self._cache.get("views")
        if v is None:
            v = MappingProxyType({b.id: b.base for b in self.buffers if b.base is not None})
            self._cache["views"] = v
        return v

    def storage(self, bid: BufferId) -> BufferId:
        """The buffer whose bytes ``bid`` occupies: its base for a view, else ``bid``.

        >>> from oxiwork.examples import quick_start
        >>> quick_start().storage(BufferId(0))
        BufferId(0)
        """
        self.buffer(bid)
        return self.views().get(bid, bid)

    @property
    def node_ids(self) -> tuple[NodeId, ...]:
        """All node ids, ascending."""
        return self.dense().ids

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    def dense(self) -> DenseGraph:
        """The cached integer-indexed view (computed once per graph)."""
        d = self._cache.get("dense")
        if d is None:
            d = self._make_dense()
            self._cache["dense"] = d
        return d

    def _make_dense(self) -> DenseGraph:
        ids = tuple(n.id for n in self.nodes)
        pos = {nid: i for i, nid in enumerate(ids)}
        n = len(ids)
        succ: list[list[int]] = [[] for _ in range(n)]
        pred: list[list[int]] = [[] for _ in range(n)]
        for a, b in self.edges:
            pa, pb = pos[a], pos[b]
            succ[pa].append(pb)
            pred[pb].append(pa)
        # Kahn's algorithm (Kahn, CACM 1962); a FIFO seeded in id order keeps it
        # deterministic without a heap, so it stays O(V + E).
        indeg = [len(p) for p in pred]
        queue = deque(i for i in range(n) if indeg[i] == 0)
        topo: list[int] = []
        while queue:
            v = queue.popleft()
            topo.append(v)
            for w in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        if len(topo) != n:
            cycle = _find_cycle(pred, {i for i in range(n) if indeg[i] > 0})
            names = tuple(self.nodes[i].name for i in cycle)
            shown = " -> ".join(repr(x) for x in (*names, names[0]))
            raise CycleError(
                f"the dependencies form a cycle: {shown}; remove one of these dependencies",
                names,
            )
        return DenseGraph(
            ids,
            MappingProxyType(pos),
            tuple(map(tuple, succ)),
            tuple(map(tuple, pred)),
            tuple(topo),
        )

    def successors(self, nid: NodeId) -> tuple[NodeId, ...]:
        """Nodes that directly depend on ``nid``."""
        d = self.dense()
        self.node(nid)
        return tuple(d.ids[p] for p in d.succ[d.pos[nid]])

    def predecessors(self, nid: NodeId) -> tuple[NodeId, ...]:
        """Nodes ``nid`` directly depends on."""
        d = self.dense()
        self.node(nid)
        return tuple(d.ids[p] for p in d.pred[d.pos[nid]])

    def sources(self) -> tuple[NodeId, ...]:
        """Nodes without predecessors."""
        d = self.dense()
        return tuple(d.ids[p] for p in range(len(d.ids)) if not d.pred[p])

    def sinks(self) -> tuple[NodeId, ...]:
        """Nodes without successors."""
        d = self.dense()
        return tuple(d.ids[p] for p in range(len(d.ids)) if not d.succ[p])

    def topological_order(self) -> tuple[NodeId, ...]:
        """A deterministic topological order of node ids."""
        order = self._cache.get("topo_ids")
        if order is None:
            d = self.dense()
            order = tuple(map(d.ids.__getitem__, d.topo))
            self._cache["topo_ids"] = order
        return order

    def _accesses(self) -> tuple[dict[BufferId, list[NodeId]], dict[BufferId, list[NodeId]]]:
        acc = self._cache.get("accesses")
        if acc is None:
            readers: dict[BufferId, list[NodeId]] = {b.id: [] for b in self.buffers}
            writers: dict[BufferId, list[NodeId]] = {b.id: [] for b in self.buffers}
            for nid in self.topological_order():
                n = self._cache["node_index"][nid]
                for bid in n.inputs:
                    readers[bid].append(nid)
                for bid in n.outputs:
                    writers[bid].append(nid)
            acc = (readers, writers)
            self._cache["accesses"] = acc
        return acc

    def readers(self, bid: BufferId) -> tuple[NodeId, ...]:
        """Nodes that read buffer ``bid``, in topological order."""
        self.buffer(bid)
        return tuple(self._accesses()[0][bid])

    def writers(self, bid: BufferId) -> tuple[NodeId, ...]:
        """Nodes that write buffer ``bid``, in topological order."""
        self.buffer(bid)
        return tuple(self._accesses()[1][bid])

    def verify(self) -> None:
        """Check every invariant (:func:`oxiwork.verify.verify_graph`), once per graph.

        >>> from oxiwork.examples import quick_start
        >>> quick_start().verify()
        """
        if not self._cache.get("verified"):
            verify_graph(self)
            self._cache["verified"] = True

    def check_ordering(self) -> None:
        """Check that the edges order every pair of conflicting accesses.

        Two accesses to one buffer conflict when at least one of them writes; the edges
        must then lead (through any path) from one node to the other, or an executor may
        run them in either order and the result is not defined. :meth:`GraphBuilder.build
        <oxiwork.builder.GraphBuilder.build>` adds these data edges itself; a graph put
        together by hand, loaded from JSON or edited with :meth:`with_changes` is checked
        here. The result is cached: the check runs once per graph.

        Per buffer, the accesses are walked in topological order as runs of readers
        between writers. Each reader must follow the writer before it and precede the
        writer after it, and consecutive writers must be ordered (when no reader sits
        between them); by transitivity that orders every conflicting pair, so the check
        makes O(accesses) queries instead of one per pair. The queries are answered at
        once by the direct edge, which ``build()`` and every pass put there (a binary
        search in the sorted edge keys); only the rest search the graph, from the earlier
        node, never past the later node's topological rank (nothing beyond it can reach
        it).

        Raises
        ------
        UnorderedAccess
            Naming the buffer, both nodes and the edge that would order them.

        Examples
        --------
        >>> from oxiwork.examples import quick_start
        >>> g = quick_start()
        >>> g.check_ordering()
        >>> try:
        ...     g.with_changes(edges=[e for e in g.edges if e != (1, 2)])  # relu -> scale
        ... except UnorderedAccess as e:
        ...     print(e.buffer, e.first_name, e.second_name, e.missing)
        mid relu scale edge 'relu' -> 'scale'
        """
        if self._cache.get("ordered"):
            return
        bad = _first_unordered(self)
        if bad is not None:
            raise _unordered(self, *bad)
        self._cache["ordered"] = True

    def kernels(self) -> tuple[GraphNode, ...]:
        """All kernel-launch nodes."""
        return tuple(n for n in self.nodes if n.kind is NodeKind.KernelLaunch)

    # ------------------------------------------------------------------ evolution
    def with_changes(
        self,
        *,
        nodes: Iterable[GraphNode] | None = None,
        buffers: Iterable[Buffer] | None = None,
        edges: Iterable[tuple[NodeId, NodeId]] | None = None,
        checked_nodes: Iterable[GraphNode] = (),
        checked_buffers: Iterable[Buffer] = (),
    ) -> ComputeGraph:
        """A new, validated graph with the given parts replaced.

        ``checked_nodes`` are nodes among ``nodes`` that a pass built only from values
        already checked (a node of this graph with a stream the pass checked, an event
        named after a node): they skip the per-field value rules (:func:`check_node`),
        never the structural checks (ids, buffers, events, cycles, ordering).
        ``checked_buffers`` likewise: buffers among ``buffers`` a pass made from this
        graph's buffers with values it checked (the memory pass's aligned offsets).

        The new graph must order its conflicting accesses by its edges
        (:meth:`check_ordering`), or the change is refused with
        :class:`~oxiwork.error.UnorderedAccess` naming the edge to keep or add. The data
        edges are not re-derived: which of two unordered accesses should come first is
        exactly what the edges say, so a derivation would have to guess it (or silently
        put back an edge the caller removed). ``GraphBuilder.build()``, which knows the
        program order, is the one place that derives them.

        >>> from oxiwork.examples import quick_start
        >>> g = quick_start()
        >>> g.with_changes(nodes=[n.replace(label="x") for n in g.nodes]).nodes[0].label
        'x'
        """
        return self._changed(nodes, buffers, edges, checked_nodes, checked_buffers)

    def _with_appended_edges(
        self,
        nodes: Iterable[GraphNode],
        sources: Iterable[int],
        targets: Iterable[int],
        checked_nodes: Iterable[GraphNode] = (),
    ) -> ComputeGraph:
        """``with_changes(nodes=nodes, edges=[*self.edges, *added], checked_nodes=...)``,
        the added edges given by position in the new graph's node order (sorted by id):
        ``sources[k] -> targets[k]``.

        For the stream pass, which works on positions: the edge tuples are made here from
        the node ids, so their ends are known as arrays without reading 100k tuples back
        (what the constructor does with edges it is given). Every check runs as for
        ``with_changes``: ends in range, no self-loop, no cycle, ordering.

        >>> from oxiwork.examples import quick_start
        >>> g = quick_start()
        >>> mark = GraphNode(g.next_node_id(), "mark", NodeKind.Barrier)
        >>> h = g._with_appended_edges([*g.nodes, mark], [3], [4])
        >>> h.edges[-1], h == g.with_changes(nodes=[*g.nodes, mark], edges=[*g.edges, (3, 4)])
        ((NodeId(3), NodeId(4)), True)
        """
        node_t = _sorted_by_id(nodes, GraphNode, "nodes")  # (in id order already: kept)
        ids = list(map(_ID, node_t))
        at = np.fromiter(ids, dtype=np.int64, count=len(ids))
        src = np.asarray(list(sources), dtype=np.int64)
        dst = np.asarray(list(targets), dtype=np.int64)
        if src.shape != dst.shape or (
            len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= len(ids))
        ):
            raise InvalidArgument(
                f"appended edges must join positions 0..{len(ids) - 1} of the new graph's "
                f"nodes ({len(src)} sources, {len(dst)} targets)"
            )
        added = zip(
            map(ids.__getitem__, src.tolist()), map(ids.__getitem__, dst.tolist()), strict=True
        )
        # the ends of the edges after self's, made from the very ids the tuples hold
        return self._changed(
            node_t,
            None,
            [*self.edges, *added],
            checked_nodes,
            (),
            (at[src], at[dst]),
            given_nodes=nodes,
            sorted_nodes=(node_t, ids, at),
        )

    def _with_contracted(
        self,
        groups: Sequence[Sequence[NodeId]],
        fused: Sequence[GraphNode],
        buffers: Iterable[Buffer],
    ) -> ComputeGraph:
        """The graph with each group of nodes ``groups[k]`` replaced by the node
        ``fused[k]`` (the fusion pass's change): ``with_changes(nodes=[*others, *fused],
        buffers=buffers, edges=contracted, checked_nodes=fused)``, where ``others`` are
        this graph's nodes in no group and ``contracted`` every edge with each end that
        is a group member replaced by its group's node, the edges inside a group dropped.

        The edges are mapped by position in the edge arrays, so the 100k edge tuples are
        not read again (an edge between two nodes in no group stays the very tuple it was:
        it is old to the garbage collector). When this graph's ordering was checked, the
        new graph's holds without a search if each fused node writes only buffers its
        members write and reads only buffers they access, and views map alike: every
        conflicting pair of the new graph then has a conflicting pair of members (or kept
        nodes) behind it, ordered here by a path whose contraction the new graph has.
        Groups that are not disjoint sets of this graph's nodes take the plain edge-by-edge
        mapping (the same graph, the same checks).

        >>> from oxiwork.examples import quick_start
        >>> g = quick_start()
        >>> both = g.nodes[1].replace(id=g.next_node_id(), name="both")
        >>> h = g._with_contracted([[NodeId(1), NodeId(2)]], [both], g.buffers)
        >>> [n.name for n in h.nodes], h.edges
        (['upload', 'download', 'both'], ((NodeId(0), NodeId(4)), (NodeId(4), NodeId(3))))
        """
        fused = list(fused)
        contracted = _contracted_positions(self, groups, fused)
        if contracted is None:
            nodes, buffers, edges = _contracted_parts(self, groups, fused, buffers)
            return self.with_changes(nodes=nodes, buffers=buffers, edges=edges, checked_nodes=fused)
        owned, at, of, fused_ids = contracted
        _, _, pa, pb = _edges_np(self)
        target = _ids_np(self).copy()  # the id each node has in the new graph
        target[at] = fused_ids[of]
        a, b = target[pa], target[pb]
        inner = np.flatnonzero(a != b)
        # sorted by (a, b) and unique, the first of equal pairs kept (as _sorted_edges)
        _, first = np.unique(a[inner] * (validate.MAX_ID + 1) + b[inner], return_index=True)
        keep = inner[first]
        edges = list(map(self.edges.__getitem__, keep.tolist()))
        moved = np.flatnonzero(owned[pa[keep]] | owned[pb[keep]])
        end = list(self.dense().ids)  # the new graph's id object for each position
        for p, k in zip(at.tolist(), of.tolist(), strict=True):
            end[p] = fused[k].id
        for k, x, y in zip(
            moved.tolist(),
            map(end.__getitem__, pa[keep[moved]].tolist()),
            map(end.__getitem__, pb[keep[moved]].tolist()),
            strict=True,
        ):
            edges[k] = (x, y)
        nodes = [*itertools.compress(self.nodes, (~owned).tolist()), *fused]
        members = list(map(self.nodes.__getitem__, at.tolist()))
        sizes = list(map(len, groups))
        return self._changed(
            nodes,
            buffers,
            tuple(edges),
            nodes,  # this graph's own nodes and the fused ones the caller vouches for
            (),
            sorted_ends=(a[keep], b[keep]),
            ordering_kept=lambda new: _contraction_keeps_ordering(self, new, members, sizes, fused),
        )

    def _changed(
        self,
        nodes: Iterable[GraphNode] | None,
        buffers: Iterable[Buffer] | None,
        edges: Iterable[tuple[NodeId, NodeId]] | None,
        checked_nodes: Iterable[GraphNode],
        checked_buffers: Iterable[Buffer],
        appended: tuple[np.ndarray, np.ndarray] | None = None,
        *,
        given_nodes: Any = None,
        sorted_ends: tuple[np.ndarray, np.ndarray] | None = None,
        ordering_kept: Callable[[ComputeGraph], bool] | None = None,
        sorted_nodes: tuple[tuple[GraphNode, ...], list[NodeId], np.ndarray] | None = None,
    ) -> ComputeGraph:
        # The constructor turns each part into a checked tuple (InvalidArgument for junk);
        # of the nodes and buffers, only those not taken from this graph are checked again.
        # sorted_ends: ``edges`` is a tuple this module sorted by (a, b) and made unique,
        # these its ends; ordering_kept: a test that this graph's ordering implies the new
        # graph's (run only when this graph's ordering was checked); sorted_nodes: ``nodes``
        # is a tuple this module sorted by id, with its ids as a list and as an array.
        if given_nodes is None:
            given_nodes = nodes
        graph = ComputeGraph(
            self.nodes if nodes is None else nodes,  # type: ignore[arg-type]
            self.buffers if buffers is None else buffers,  # type: ignore[arg-type]
            self.edges if edges is None else edges,  # type: ignore[arg-type]
            {
                _TRUSTED: (
                    # (every node vouched for: no set of their ids to build and subtract)
                    _EVERY
                    if checked_nodes is given_nodes and nodes is not None
                    else (*self.nodes, *checked_nodes)
                    if checked_nodes
                    else self.nodes,
                    (*self.buffers, *checked_buffers) if checked_buffers else self.buffers,
                    self.edges,
                    self._cache.get("dense"),
                    self._cache.get("edge_arrays"),
                    self._cache.get("node_index"),
                    self._cache.get("buf_index"),
                    self._cache.get("buf_names"),
                    appended,
                    sorted_ends,
                    sorted_nodes,
                )
            },
        )
        extends = graph._cache.pop(_EXTENDS, None) is self.edges or graph.edges is self.edges
        same_as = graph._cache.pop(_SAME_ACCESSES, None)
        same_accesses = same_as is not None and same_as is self._cache.get("node_index")
        if ordering_kept is not None:
            if self._cache.get("ordered") and ordering_kept(graph):
                graph._cache["ordered"] = True
        elif (
            nodes is None
            and edges is None
            and self._cache.get("ordered")
            and _same_but_offsets(self.buffers, graph.buffers)
        ):
            # The same accesses and edges over the same buffers (a memory plan only sets
            # offsets): every conflicting pair is still ordered.
            graph._cache["ordered"] = True
            if self._cache.get("node_rules"):  # verify_graph's node rules read no offset
                graph._cache["node_rules"] = True
        elif self._cache.get("ordered") and _ordering_kept(self, graph, extends, same_accesses):
            graph._cache["ordered"] = True
        if self._cache.get("node_rules") and not graph._cache.get("node_rules"):
            # verify_graph re-checks only the nodes that are not this graph's very objects
            # over its buffers (oxiwork.verify._unchanged_nodes)
            graph._cache["node_rules_base"] = (self._cache["node_index"], self._cache["buf_index"])
        graph.check_ordering()
        return graph

    def next_node_id(self) -> NodeId:
        """An id larger than any node's, for passes that create nodes."""
        return NodeId(int(self.nodes[-1].id) + 1 if self.nodes else 0)

    def next_buffer_id(self) -> BufferId:
        """An id larger than any buffer's, for passes that create buffers."""
        return BufferId(int(self.buffers[-1].id) + 1 if self.buffers else 0)

    # ------------------------------------------------------------------ export
    def to_dict(self) -> dict[str, Any]:
        """The versioned, JSON-able form of the graph (``fn`` of host callbacks is dropped)."""
        return {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "buffers": [_buffer_to_dict(b) for b in self.buffers],
            "nodes": [_node_to_dict(n) for n in self.nodes],
            "edges": [[int(a), int(b)] for a, b in self.edges],
        }

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to JSON (see :meth:`from_json`)."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> ComputeGraph:
        """Load and validate the form written by :meth:`to_dict` (:meth:`verify`: a
        graph whose edges leave two accesses of a buffer unordered is refused)."""
        graph = _graph_from_dict(data)
        graph.verify()
        return graph

    @classmethod
    def from_json(cls, text: str | bytes) -> ComputeGraph:
        """Load a graph written by :meth:`to_json`; :class:`MalformedFile` if invalid.

        Parsing is bounded: at most :data:`MAX_JSON_BYTES` bytes, :data:`MAX_JSON_DEPTH`
        levels of nesting and :data:`MAX_JSON_NUMBER` characters per number, and every
        value passes the builder's rules (:mod:`oxiwork.validate`).

        >>> try:
        ...     ComputeGraph.from_json("[" * 100_000)
        ... except MalformedFile as e:
        ...     print(e)
        arrays and objects nest 100000 deep; a graph file nests at most 40 deep
        """
        return cls.from_dict(_load_json(text))

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` with node attributes ``name``, ``kind`` and ``node``."""
        import networkx as nx

        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.id, name=n.name, kind=n.kind.value, node=n)
        g.add_edges_from(self.edges)
        return g

    def to_dot(self, color_by: str = "kind", plan: Any = None) -> str:
        """Graphviz DOT text (:func:`oxiwork.render.dot.graph_dot`); names are escaped, so
        any name is safe.

        ``color_by`` (``"kind"``, ``"group"``, ``"stream"``, ``"level"``, ``"slack"``) fills
        the nodes by that pass result, with ``plan`` giving an input graph's fused groups
        and streams.
        """
        from oxiwork.render.dot import graph_dot  # renderers sit above the IR

        return graph_dot(self, color=color_by, plan=plan)

    def to_svg(self, color_by: str = "kind", plan: Any = None) -> str:
        """SVG of :meth:`to_dot` laid out by graphviz's ``dot`` (``GraphvizMissing`` says how
        to install it when it is not there)."""
        from oxiwork.render.dot import graph_dot, to_svg

        return to_svg(graph_dot(self, color=color_by, plan=plan))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        # Jupyter shows a graph as SVG without the widget (text when dot is missing).
        from oxiwork.render.dot import graph_dot, mimebundle

        text = f"ComputeGraph: {self.num_nodes} nodes, {len(self.edges)} edges, {len(self.buffers)} buffers"
        return dict(mimebundle(self, lambda: graph_dot(self), text, self.num_nodes))


_BUT_OFFSET = operator.attrgetter(*(f for f in Buffer.__slots__ if f != "offset"))


def _same_but_offsets(a: tuple[Buffer, ...], b: tuple[Buffer, ...]) -> bool:
    """Do two sorted buffer tuples hold the same buffers, offsets aside?

    (Buffer by buffer, all fields read at once: one pass per field, by identity, touches
    each of 66k buffers ten times and measured twice as slow.)
    """
    return len(a) == len(b) and all(
        x is y or _BUT_OFFSET(x) == _BUT_OFFSET(y) for x, y in zip(a, b, strict=True)
    )


# Field getters for the whole-graph checks (one C-level pass per field).
_ID = operator.attrgetter("id")
_NAME = operator.attrgetter("name")
_BASE = operator.attrgetter("base")
_KIND = operator.attrgetter("kind")
_EVENT = operator.attrgetter("event")
_CONDITION = operator.attrgetter("condition")
_INPUTS = operator.attrgetter("inputs")
_OUTPUTS = operator.attrgetter("outputs")
_ACCESSES = operator.attrgetter("inputs", "outputs", "condition")
_ID_TYPES = frozenset({NodeId, int})
#: False makes every graph take the full, message-giving checks (the fast path's oracle
#: in tests/test_graph_fast_validation.py).
_FAST_VALIDATION = True


@functools.cache  # one constructor per class, shared by every module that asks for it
def _positional(cls: type) -> Any:
    """A constructor of the frozen, slotted dataclass ``cls`` taking its fields as ``cls``
    does (positionally or by name, with its defaults), for one call per object where passes
    and the lowering make 100k of them (plan steps and buffer args, the stream pass's
    restreamed nodes and events, fused kernels and their steps).

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (a
    global look-up and a call per field: ~4 us for a 17-field step); this one fills an
    unfrozen class with the very same slots by plain attribute stores and then makes the
    object a ``cls`` (``__class__`` assignment, allowed between classes of the same slot
    layout), about 3x faster. The result is an ordinary ``cls``: equal to ``cls(*values)``
    (tests/executor/test_plan.py), frozen from then on. ``cls`` must have no
    ``__post_init__`` (nothing would run it).

    >>> make = _positional(Buffer)
    >>> a = make(BufferId(0), "x", 16, "float32", None, 256, False, None, None, 0, None)
    >>> type(a) is Buffer, a == Buffer(BufferId(0), "x", 16)
    (True, True)
    >>> make(BufferId(0), "x", 16, dtype="float16") == Buffer(BufferId(0), "x", 16, "float16")
    True
    >>> _positional(Buffer) is make
    True
    """
    names = tuple(f.name for f in fields(cls))
    if (
        getattr(cls, "__slots__", None) != names
        or hasattr(cls, "__post_init__")
        or any(f.default_factory is not MISSING for f in fields(cls))
    ):
        raise TypeError(f"{cls.__name__} is not a plain slotted dataclass")
    body = "".join(f"    self.{n} = {n}\n" for n in names)
    scope: dict[str, Any] = {"_cls": cls}
    # the field's own default (immutable values: None, (), 0, ""), so callers may name
    # the fields they set, as with cls itself
    params = []
    for f in fields(cls):
        if f.default is MISSING:
            params.append(f.name)
        else:
            scope[f"_d_{f.name}"] = f.default
            params.append(f"{f.name}=_d_{f.name}")
    # the same code dataclasses generates for an unfrozen __init__, plus the class swap
    exec(f"def __init__(self, {', '.join(params)}):\n{body}    self.__class__ = _cls\n", scope)
    return type(f"_{cls.__name__}Fields", (), {"__slots__": names, "__init__": scope["__init__"]})


def _sorted_by_id(values: Any, cls: type, what: str) -> tuple[Any, ...]:
    """``values`` as a tuple of ``cls`` sorted by id (:func:`_items` for junk).

    Parts that are already in id order (what the passes build) are not sorted again;
    ``sorted`` is stable, so the result is the same either way.
    """
    items = _items(values, cls, what)
    ids = list(map(_ID, items))
    try:
        ascending = all(map(operator.lt, ids, itertools.islice(ids, 1, None)))
    except Exception:  # incomparable ids: sorted raises as it always did
        ascending = False
    return tuple(items) if ascending else tuple(sorted(items, key=_ID))


def _sorted_edges(
    values: Any,
    known: tuple[tuple[Any, ...], tuple[np.ndarray, ...]] | None = None,
    appended: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[tuple[Any, ...], tuple[np.ndarray, np.ndarray] | None, bool]:
    """The edges sorted and without repeats, (when every end is a node id in range) their
    ends as two int64 arrays in the same order (else None), and whether ``values`` begin
    with the ``known`` edges' very tuples.

    ``appended``: the ends of the edges after the known ones, when
    :meth:`ComputeGraph._with_appended_edges` made those tuples from these very ids.

    ``known``: a checked graph's edges and their edge arrays (:func:`_edges_np`). When the
    edges begin with those very tuples, in that order (the stream pass appends its event
    and stream-order edges to the old ones), only the rest are converted: a tuple is
    immutable, so the very objects have the ends read before.
    """
    # (tuples with_changes made itself of node ids need no look at their types)
    items = list(values) if appended is not None else _items(values, tuple, "edges")
    ends = None
    extends = False
    if known is not None:
        old, (a0, b0, *_) = known
        m0 = len(old)
        # (map stops at the shorter: the first m0 items against the old tuples)
        if m0 and len(items) >= m0 and all(map(operator.is_, items, old)):
            extends = True
            if len(items) == m0:
                ends = (a0, b0)
            elif appended is not None and len(appended[0]) == len(items) - m0:
                ends = (np.concatenate([a0, appended[0]]), np.concatenate([b0, appended[1]]))
            elif (rest := _edge_arrays(items[m0:])) is not None:
                ends = (np.concatenate([a0, rest[0]]), np.concatenate([b0, rest[1]]))
    if ends is None:
        ends = _edge_arrays(items)
    if ends is None:
        try:
            return tuple(sorted(set(items))), None, extends
        except TypeError:  # an unhashable or unorderable end: not a node id
            raise InvalidArgument(
                "edges must be (NodeId, NodeId) pairs of this graph's ids"
            ) from None
    a, b = ends
    # sorted by (a, b) and unique: one key per pair (ends are at most MAX_ID); the first
    # of equal pairs is kept, as the set would (they are equal anyway)
    _, first = np.unique(a * (validate.MAX_ID + 1) + b, return_index=True)
    return tuple(map(items.__getitem__, first.tolist())), (a[first], b[first]), extends


def _edge_arrays(items: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The ends of ``items`` (pairs) as int64 arrays, or None unless every end is an
    ``int``/``NodeId`` in ``0..MAX_ID`` (anything else takes the checks that name it)."""
    m = len(items)
    if not set(map(type, itertools.chain.from_iterable(items))) <= _ID_TYPES:
        return None
    try:
        flat = np.fromiter(itertools.chain.from_iterable(items), dtype=np.int64, count=2 * m)
    except (OverflowError, ValueError, TypeError):
        return None
    if m and (flat.min() < 0 or flat.max() > validate.MAX_ID):
        return None
    return flat[0::2], flat[1::2]


def _dense_of(ids: tuple[NodeId, ...], pa: np.ndarray, pb: np.ndarray) -> DenseGraph | None:
    """The :class:`DenseGraph` of nodes ``ids`` and edges ``pa[i] -> pb[i]`` (positions,
    sorted by ``(pa, pb)``, no repeats), or None if they form a cycle.

    The same view as :meth:`ComputeGraph._make_dense` builds edge by edge: successors in
    ascending position, predecessors likewise, and the same FIFO Kahn order.
    """
    n = len(ids)
    out_deg = np.bincount(pa, minlength=n)
    in_deg = np.bincount(pb, minlength=n)
    succ = _runs(pb.tolist(), out_deg)
    by_dst = np.lexsort((pa, pb))
    pred = _runs(pa[by_dst].tolist(), in_deg)
    # Kahn's algorithm (Kahn, CACM 1962), FIFO seeded in position order: the list grows
    # while it is walked, so the walk is the queue.
    indeg = in_deg.tolist()
    topo = np.flatnonzero(in_deg == 0).tolist()
    for v in topo:
        for w in succ[v]:
            indeg[w] -= 1
            if not indeg[w]:
                topo.append(w)
    if len(topo) != n:
        return None
    return DenseGraph(
        ids, MappingProxyType(dict(zip(ids, range(n), strict=True))), succ, pred, tuple(topo)
    )


def _runs(values: list[int], counts: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """``values`` cut into consecutive tuples of ``counts[k]`` items.

    (Slices of one tuple are tuples already: one object per run instead of a list and
    its copy, and every empty run is the one empty tuple.)
    """
    ends = np.cumsum(counts).tolist()
    starts = [0, *ends[:-1]]
    return tuple(map(tuple(values).__getitem__, map(slice, starts, ends)))


def _items(values: Any, cls: type, what: str) -> list[Any]:
    """``values`` as a list of ``cls`` (edges: of ``(NodeId, NodeId)`` pairs), or
    :class:`InvalidArgument` saying what was passed instead."""
    try:
        items = list(values)
    except TypeError:
        raise InvalidArgument(
            f"{what} must be a sequence of {cls.__name__}, got {type(values).__name__}"
        ) from None
    if set(map(type, items)) <= {cls} and (cls is not tuple or set(map(len, items)) <= {2}):
        return items  # exactly the class (a pair): the common case, without a loop
    for x in items:
        # An edge is a pair; its ends are checked against the nodes by _validate.
        if not isinstance(x, cls) or (cls is tuple and len(x) != 2):
            raise InvalidArgument(
                f"{what} must hold {'(NodeId, NodeId) pairs' if cls is tuple else cls.__name__}"
                f" only, got {x!r}"
            )
    return items


def _edges_np(g: ComputeGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The edges as int64 arrays ``(a, b, pa, pb)``: ends by id and by position, sorted
    by ``(a, b)`` (the order of ``g.edges``); cached (made at construction when it can)."""
    arrays = g._cache.get("edge_arrays")
    if arrays is None:
        d = g.dense()
        n = len(d.ids)
        lens = np.fromiter(map(len, d.succ), dtype=np.int64, count=n)
        pa = np.repeat(np.arange(n, dtype=np.int64), lens)
        pb = np.fromiter(itertools.chain.from_iterable(d.succ), dtype=np.int64, count=len(pa))
        ids = np.fromiter(d.ids, dtype=np.int64, count=n)
        arrays = (ids[pa], ids[pb], pa, pb)
        g._cache["edge_arrays"] = arrays
    return arrays


def _ids_np(g: ComputeGraph) -> np.ndarray:
    """The node ids in position order as an int64 array (cached)."""
    ids = g._cache.get("id_array")
    if ids is None:
        d = g.dense()
        ids = g._cache["id_array"] = np.fromiter(d.ids, dtype=np.int64, count=len(d.ids))
    return ids


def _contracted_positions(
    g: ComputeGraph, groups: Sequence[Sequence[NodeId]], fused: list[GraphNode]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """For :meth:`ComputeGraph._with_contracted`: ``(owned, at, of, fused_ids)``, whether
    each position is a group member, the members' positions in group order, the group of
    each and the fused nodes' ids; None unless the groups are disjoint sets of ``g``'s
    nodes, one per fused node, whose ids are ints in ``0..MAX_ID`` (anything else takes
    the plain mapping)."""
    if len(groups) != len(fused):
        return None
    ids = _ids_np(g)
    try:
        sizes = list(map(len, groups))
        count = sum(sizes)
        flat = list(itertools.chain.from_iterable(groups))
        if (
            not set(map(type, flat)) <= _ID_TYPES
            or not set(map(type, map(_ID, fused))) <= _ID_TYPES
        ):
            return None
        members = np.fromiter(flat, dtype=np.int64, count=count)
        fused_ids = np.fromiter(map(_ID, fused), dtype=np.int64, count=len(fused))
    except (OverflowError, ValueError, TypeError):
        return None
    if len(fused_ids) and (fused_ids.min() < 0 or fused_ids.max() > validate.MAX_ID):
        return None
    at = np.searchsorted(ids, members)
    if count and (not len(ids) or at.max() >= len(ids) or (ids[at] != members).any()):
        return None  # a member that is not a node of g
    owned = np.zeros(len(ids), dtype=bool)
    owned[at] = True
    if int(owned.sum()) != count:
        return None  # a node in two groups, or twice in one
    return owned, at, np.repeat(np.arange(len(fused), dtype=np.int64), sizes), fused_ids


def _contracted_parts(
    g: ComputeGraph,
    groups: Sequence[Sequence[NodeId]],
    fused: list[GraphNode],
    buffers: Iterable[Buffer],
) -> tuple[list[GraphNode], Iterable[Buffer], set[tuple[NodeId, NodeId]]]:
    """The nodes, buffers and edges of :meth:`ComputeGraph._with_contracted`, mapped edge
    by edge (any groups: a node in two groups goes to the later one's node)."""
    owner: dict[NodeId, NodeId] = {}
    for group, node in zip(groups, fused, strict=False):
        owner.update((m, node.id) for m in group)
    nodes = [n for n in g.nodes if n.id not in owner] + fused
    edges = set()
    for e in g.edges:
        a, b = e
        oa, ob = owner.get(a), owner.get(b)
        if oa is None and ob is None:
            edges.add(e)
        else:
            a = a if oa is None else oa
            b = b if ob is None else ob
            if a != b:
                edges.add((a, b))
    return nodes, buffers, edges


def _contraction_keeps_ordering(
    old: ComputeGraph,
    new: ComputeGraph,
    members: list[GraphNode],
    sizes: list[int],
    fused: list[GraphNode],
) -> bool:
    """Does ``old``'s ordering (checked) imply that of ``new``, made from it by
    :meth:`ComputeGraph._with_contracted` (``fused[k]`` replacing the next ``sizes[k]`` of
    ``members``)? True when views map alike and each fused node writes only buffers its
    members write and reads only buffers they access.

    (A set per group: on 100k-node graphs half the time of the full search, which builds
    and sorts every access of the graph.)
    """
    if new.buffers is not old.buffers and not new.views().items() <= old.views().items():
        return False
    chain = itertools.chain.from_iterable
    outs_of = list(map(_OUTPUTS, members))
    ins_of = list(map(_INPUTS, members))
    start = 0
    for node, size in zip(fused, sizes, strict=True):
        stop = start + size
        written = set(chain(outs_of[start:stop]))
        if not written.issuperset(node.outputs) or not (
            written.issuperset(node.inputs)
            or written.union(chain(ins_of[start:stop])).issuperset(node.inputs)
        ):
            return False
        start = stop
    return True


# What a node that is not in a graph accesses, for _ordering_kept.
_NO_ACCESS = SimpleNamespace(inputs=(), outputs=(), condition=None)


def _same_accesses(
    index: Mapping[NodeId, GraphNode], nids: list[NodeId], nodes: Sequence[GraphNode]
) -> list[bool]:
    """Per node, whether it reads, writes and tests exactly what the node of its id in
    ``index`` does (a node not there: nothing). Whole-graph C-level passes; the tuples are
    mostly the very same objects, which compare at once. When the ids begin with
    ``index``'s (the stream pass appends its events), the old nodes are taken by position,
    without a look-up per node."""
    m = len(index)
    if nids[:m] == list(index):
        olds = [*index.values(), *itertools.repeat(_NO_ACCESS, len(nids) - m)]
    else:
        olds = list(map(index.get, nids, itertools.repeat(_NO_ACCESS)))
    return list(map(operator.eq, map(_ACCESSES, olds), map(_ACCESSES, nodes)))


def _ordering_kept(
    old: ComputeGraph, new: ComputeGraph, extends: bool = False, same_accesses: bool = False
) -> bool:
    """Does ``old``'s ordering (checked) imply ``new``'s? True when ``new`` keeps every
    edge of ``old``, maps views alike, and each of its nodes accesses exactly what the node
    of the same id accessed in ``old`` (a new node: nothing). Every conflicting pair of
    ``new`` is then a pair of ``old``, ordered there by a path of edges ``new`` still has.

    ``extends``: ``new``'s edges were given as ``old``'s very edge tuples followed by
    others (what the constructor saw), so they keep every edge of ``old`` without a search.
    ``same_accesses``: the constructor found that every node of ``new`` accesses what the
    node of its id did in ``old``, over ``old``'s very buffers (:func:`_same_accesses`).

    The stream pass's graph is such a change (streams set, event nodes and edges added),
    so its ordering is not searched again.
    """
    if len(new.edges) < len(old.edges):  # (the fusion pass's graph: fewer edges)
        return False
    if new.buffers is not old.buffers and new.views() != old.views():
        return False
    if not same_accesses:
        index = old._cache["node_index"]
        olds = list(map(index.get, map(_ID, new.nodes), itertools.repeat(_NO_ACCESS)))
        if list(map(_INPUTS, olds)) != list(map(_INPUTS, new.nodes)) or list(
            map(_OUTPUTS, olds)
        ) != list(map(_OUTPUTS, new.nodes)):
            return False
    if extends:
        return True
    a0, b0, _, _ = _edges_np(old)
    a1, b1, _, _ = _edges_np(new)
    key0 = a0 * (validate.MAX_ID + 1) + b0  # both sorted: g.edges is
    key1 = a1 * (validate.MAX_ID + 1) + b1
    at = np.searchsorted(key1, key0).clip(0, max(len(key1) - 1, 0))
    return bool(len(key0) == 0 or (len(key1) and (key1[at] == key0).all()))


def _first_unordered(g: ComputeGraph) -> tuple[int, int, BufferId, bool, bool] | None:
    """The first conflicting pair of accesses no path orders, as ``(p, q, buffer,
    p_writes, q_writes)`` (positions, ``p`` earlier in topological order), or None."""
    d = g.dense()
    n = len(d.ids)
    succ = d.succ
    # Every access as (position, buffer, writes), in arrays.
    outs = list(map(_OUTPUTS, g.nodes))
    ins = list(map(_INPUTS, g.nodes))
    counts = np.empty(2 * n, dtype=np.int64)
    counts[0::2] = np.fromiter(map(len, outs), dtype=np.int64, count=n)
    counts[1::2] = np.fromiter(map(len, ins), dtype=np.int64, count=n)
    m = int(counts.sum())
    if m < 2:
        return None
    bufs = itertools.chain.from_iterable(itertools.chain.from_iterable(zip(outs, ins, strict=True)))
    pos = np.repeat(np.repeat(np.arange(n, dtype=np.int64), 2), counts)
    write = np.repeat(np.tile(np.array([True, False]), n), counts)
    buf = np.fromiter(bufs, dtype=np.int64, count=m)
    views = g.views()
    if views:  # an access to a view is an access to its base's bytes
        root = np.arange(int(g.buffers[-1].id) + 1, dtype=np.int64)
        root[np.fromiter(views, np.int64)] = np.fromiter(views.values(), np.int64)
        buf = root[buf]
    rank = np.empty(n, dtype=np.int64)
    rank[np.array(d.topo, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    # By buffer, then topological rank, writes first; a node's repeats count once (a
    # read-modify-write counts as the write).
    srt = np.lexsort((~write, rank[pos], buf))
    pos, write, buf = pos[srt], write[srt], buf[srt]
    keep = np.r_[True, (buf[1:] != buf[:-1]) | (pos[1:] != pos[:-1])]
    pos, write, buf = pos[keep], write[keep], buf[keep]
    m = len(pos)
    # The pairs to test: each read after the write before it, each read before the write
    # after it, each write after the write right before it (same buffer).
    idx = np.arange(m)
    new = np.r_[True, buf[1:] != buf[:-1]]
    start = np.maximum.accumulate(np.where(new, idx, 0))
    end = np.r_[np.flatnonzero(new)[1:], m][np.cumsum(new) - 1]
    last_w = np.r_[-1, np.maximum.accumulate(np.where(write, idx, -1))[:-1]]
    first_w = np.r_[np.minimum.accumulate(np.where(write, idx, m)[::-1])[::-1][1:], m]
    r1 = ~write & (last_w >= start)
    r2 = ~write & (first_w < end)
    ww = write & ~new & np.r_[False, write[:-1]]
    a = np.concatenate([last_w[r1], idx[r2], idx[ww] - 1])
    b = np.concatenate([idx[r1], first_w[r2], idx[ww]])
    # Answered by a direct edge (build() and every pass put one there), all at once.
    _, _, src, dst = _edges_np(g)
    edge_keys = src * n + dst  # sorted: the edges are sorted by (a, b), so by position
    keys = pos[a] * n + pos[b]
    at = np.searchsorted(edge_keys, keys).clip(0, max(len(edge_keys) - 1, 0))
    direct = (edge_keys[at] == keys) if len(edge_keys) else np.zeros(len(keys), dtype=bool)
    miss = np.flatnonzero(~direct)
    if not len(miss):
        return None
    # In walk order: by buffer, then the later access, then the earlier one.
    miss = miss[np.lexsort((a[miss], b[miss], buf[a[miss]]))]
    misses = [
        (int(pos[x]), int(pos[y]), BufferId(int(buf[x])), bool(write[x]), bool(write[y]))
        for x, y in zip(a[miss].tolist(), b[miss].tolist(), strict=True)
    ]
    rank = rank.tolist()
    if not misses:
        return None
    # The rest search forwards from the earlier node, up to the later node's rank.
    targets: dict[int, set[int]] = {}
    for u, v, *_ in misses:
        targets.setdefault(u, set()).add(v)
    reached: dict[int, set[int]] = {}
    for u, want in targets.items():
        bound = max(rank[v] for v in want)
        seen = {u}
        stack = [u]
        found: set[int] = set()
        while stack and len(found) < len(want):
            for w in succ[stack.pop()]:
                if w not in seen and rank[w] <= bound:
                    seen.add(w)
                    stack.append(w)
                    if w in want:
                        found.add(w)
        reached[u] = found
    for miss in misses:
        if miss[1] not in reached[miss[0]]:
            return miss
    return None


def _unordered(
    g: ComputeGraph, p: int, q: int, bid: BufferId, p_writes: bool, q_writes: bool
) -> UnorderedAccess:
    if p > q:  # neither reaches the other: name them in id (creation) order, the likelier intent
        p, q, p_writes, q_writes = q, p, q_writes, p_writes
    a, b = g.nodes[p], g.nodes[q]
    name = g.buffer(bid).name
    how = {True: "written", False: "read"}
    return UnorderedAccess(
        f"buffer {name!r} is {how[p_writes]} by {a.name!r} (node {int(a.id)}) and "
        f"{how[q_writes]} by {b.name!r} (node {int(b.id)}), but no path of edges leads from "
        "one to the other, so an executor may run them in either order and the result is "
        f"not defined; add the edge {a.name!r} -> {b.name!r} (({int(a.id)}, {int(b.id)}) in "
        "edges; the reverse if the other must run first), or build the graph with "
        "GraphBuilder, which adds every data edge itself",
        buffers=(name, name),
        first=int(a.id),
        second=int(b.id),
        first_name=a.name,
        second_name=b.name,
        first_access="write" if p_writes else "read",
        second_access="write" if q_writes else "read",
        missing=f"edge {a.name!r} -> {b.name!r}",
        in_plan=False,
    )


def _find_cycle(pred: list[list[int]], remaining: set[int]) -> list[int]:
    """A cycle among ``remaining``, the nodes Kahn's algorithm never released, in edge
    order (each node's successor follows it; the last leads back to the first).

    Every remaining node kept a remaining *predecessor* (its in-degree never reached 0),
    so walking backwards inside the set never gets stuck and must repeat a node. Walking
    forwards could: a sink downstream of a cycle is remaining too, with no successor.
    """
    v = min(remaining)
    seen: dict[int, int] = {}
    path: list[int] = []
    while v not in seen:
        seen[v] = len(path)
        path.append(v)
        v = next(u for u in pred[v] if u in remaining)
    cycle = path[seen[v] :][::-1]
    k = cycle.index(min(cycle))  # start at its first node by position: stable messages
    return cycle[k:] + cycle[:k]


# ---------------------------------------------------------------------- JSON helpers
def _buffer_to_dict(b: Buffer) -> dict[str, Any]:
    return {
        "id": int(b.id),
        "name": b.name,
        "size_bytes": b.size_bytes,
        "dtype": b.dtype,
        "shape": list(b.shape) if b.shape is not None else None,
        "alignment": b.alignment,
        "external": b.external,
        "offset": b.offset,
        # Only views carry these, so files without views read as they always did.
        **(
            {}
            if b.base is None
            else {
                "base": int(b.base),
                "view_offset": b.view_offset,
                "strides": list(b.strides) if b.strides is not None else None,
            }
        ),
    }


def _fused_to_dict(p: FusedProgram) -> dict[str, Any]:
    return {
        "steps": [
            {
                "op": s.op,
                "params": dict(s.params),
                "args": [[kind, int(i)] for kind, i in s.args],
                "node": int(s.node),
            }
            for s in p.steps
        ],
        "outputs": list(p.outputs),
    }


def _body_to_dict(g: ComputeGraph) -> dict[str, Any]:
    """A body graph: the parts of :meth:`ComputeGraph.to_dict` without format and version
    (the file's own say which)."""
    return {
        "buffers": [_buffer_to_dict(b) for b in g.buffers],
        "nodes": [_node_to_dict(n) for n in g.nodes],
        "edges": [[int(a), int(b)] for a, b in g.edges],
    }


def _node_to_dict(n: GraphNode) -> dict[str, Any]:
    out = _plain_node_to_dict(n)
    if n.kind in BODY_KINDS:  # only these carry the fields (older files stay as they were)
        out["bodies"] = [_body_to_dict(b) for b in n.bodies]
        out["cond_kind"] = None if n.cond_kind is None else n.cond_kind.value
        out["condition"] = None if n.condition is None else int(n.condition)
        out["max_iterations"] = n.max_iterations
    return out


def _plain_node_to_dict(n: GraphNode) -> dict[str, Any]:
    return {
        "id": int(n.id),
        "name": n.name,
        "kind": n.kind.value,
        "inputs": [int(b) for b in n.inputs],
        "outputs": [int(b) for b in n.outputs],
        "stream": None if n.stream is None else int(n.stream),
        "cost": n.cost,
        "config": None
        if n.config is None
        else {
            "grid": list(n.config.grid),
            "block": list(n.config.block),
            "shared_mem_bytes": n.config.shared_mem_bytes,
        },
        "fusible": n.fusible,
        "op": n.op,
        "params": dict(n.params),
        "fused": None if n.fused is None else _fused_to_dict(n.fused),
        "fused_from": [int(x) for x in n.fused_from],
        "memcpy_dir": None if n.memcpy_dir is None else n.memcpy_dir.value,
        "size_bytes": n.size_bytes,
        "memset_value": n.memset_value,
        "event": None if n.event is None else int(n.event),
        "label": n.label,
    }


def check_buffer(b: Buffer) -> None:
    """The value rules (:mod:`oxiwork.validate`) for one buffer: what ``alloc_buffer`` checks.

    The builder, the JSON loader and ``ComputeGraph`` itself call this one function, so they
    refuse the same buffers with the same message. Fields may still be raw (a ``list``
    shape, a plain ``int`` id): the loader checks before it converts.

    >>> from oxiwork.node import Buffer, BufferId
    >>> try:
    ...     check_buffer(Buffer(BufferId(0), "x", 6, "float32"))
    ... except InvalidArgument as e:
    ...     print(e)
    buffer 'x': 6 bytes is not a whole number of float32 elements (4 bytes each)
    """
    if _buffer_ok(b):
        return
    validate.name(b.name, "buffer name")
    what = f"buffer {b.name!r}"
    validate.ident(b.id, f"id of {what}")
    size = validate.size(b.size_bytes, f"size of {what}")
    if not isinstance(b.dtype, str) or b.dtype not in DTYPES:
        raise InvalidArgument(
            f"{what}: unknown dtype {validate.shown(b.dtype)}; use one of {', '.join(DTYPES)}"
        )
    itemsize = DTYPES[b.dtype]
    if size % itemsize:
        raise InvalidArgument(
            f"{what}: {size} bytes is not a whole number of {b.dtype} elements "
            f"({itemsize} bytes each)"
        )
    if b.shape is not None:
        dims = validate.shape(b.shape, f"shape of {what}")
        count = 1
        for d in dims:
            count *= d
        if count * itemsize != size:
            raise InvalidArgument(
                f"{what}: shape {dims} holds {count * itemsize} bytes of {b.dtype}, but "
                f"size_bytes is {size}"
            )
    validate.alignment(b.alignment, f"alignment of {what}")
    if b.alignment < itemsize:
        # typed views of the arena (and CUDA loads) need offsets that are multiples of the
        # element size; the memory planner places buffers on multiples of their alignment
        raise InvalidArgument(
            f"{what}: alignment {b.alignment} is smaller than its {b.dtype} elements "
            f"({itemsize} bytes); give it an alignment of at least {itemsize} (default 256)"
        )
    validate.flag(b.external, f"external of {what}")
    if b.offset is not None:
        validate.offset(b.offset, f"offset of {what}")
    if b.base is None:
        if b.view_offset != 0 or b.strides is not None:
            raise InvalidArgument(
                f"{what} has a view_offset or strides but no base; give the base buffer it "
                "views (GraphBuilder.view), or drop them"
            )
        return
    validate.ident(b.base, f"base of {what}")
    if b.shape is None:
        raise InvalidArgument(f"{what} is a view without a shape; give the view's shape")
    if b.external or b.offset is not None:
        raise InvalidArgument(
            f"{what} is a view, so it has no memory of its own: it cannot be external or "
            "have an arena offset (its base is placed or bound instead); drop external/offset"
        )
    # In bounds of the base is checked by the graph, which knows the base (check_views).
    validate.view(b.view_offset, dims, b.strides, validate.MAX_SIZE_BYTES + 1, f"view {b.name!r}")


def check_view(view: Buffer, base: Buffer | None) -> None:
    """The rules a view must meet against its base (``None``: no buffer has the view's
    ``base`` id): the base exists, is not itself a view, holds the view's dtype, and holds
    every element the view covers (:func:`oxiwork.validate.view`).

    >>> from oxiwork.node import Buffer, BufferId
    >>> x = Buffer(BufferId(0), "x", 24, shape=(2, 3))
    >>> check_view(Buffer(BufferId(1), "xT", 24, shape=(3, 2), base=x.id, strides=(1, 3)), x)
    >>> try:
    ...     check_view(Buffer(BufferId(1), "xT", 24, shape=(3, 2), base=x.id,
    ...                       strides=(2, 3)), x)
    ... except InvalidArgument as e:
    ...     print(e)
    view 'xT' reaches element 7 of its base, which has 6 elements; lower the view's offset, shape or strides so that view_offset + sum((shape[k] - 1) * strides[k]) < 6
    """
    what = f"view {view.name!r}"
    if base is None:
        raise UnknownBuffer(
            f"{what} views buffer id {int(view.base or 0)}, which is not in this graph; "
            "allocate the base buffer in the same graph"
        )
    if base.id == view.id:
        raise InvalidArgument(f"{what} views itself; give it another buffer as its base")
    if base.base is not None:
        raise InvalidArgument(
            f"{what} views {base.name!r}, which is itself a view of buffer id "
            f"{int(base.base)}; view the base directly (compose the offsets and strides: "
            "GraphBuilder.view does this when given a view)"
        )
    if view.dtype != base.dtype:
        raise InvalidArgument(
            f"{what} has dtype {view.dtype} but its base {base.name!r} holds {base.dtype}; "
            "a view shares its base's dtype (cast with a kernel instead)"
        )
    validate.view(view.view_offset, view.array_shape, view.strides, base.num_elements, what)


def check_node(n: GraphNode) -> None:
    """The value rules (:mod:`oxiwork.validate`) for one node's fields.

    Like :func:`check_buffer`, shared by the builder, the loader and ``ComputeGraph``. What
    needs the rest of the graph (buffers exist, copies fit, events are records) is checked
    by the graph and :func:`oxiwork.verify.verify`.

    >>> from oxiwork.node import NodeId, NodeKind
    >>> try:
    ...     check_node(GraphNode(NodeId(0), "s", NodeKind.Memset, size_bytes=4, memset_value=300))
    ... except InvalidArgument as e:
    ...     print(e)
    memset 's': value must be a byte 0..255, got 300
    """
    if _node_ok(n):
        return
    kind = n.kind
    if not isinstance(kind, NodeKind):
        raise InvalidArgument(f"node kind must be a NodeKind, got {validate.shown(kind)}")
    word = kind.noun
    validate.name(n.name, f"{word} name")
    what = repr(n.name)
    validate.ident(n.id, f"id of {word} {what}")
    for key, ids in (("inputs", n.inputs), ("outputs", n.outputs), ("fused_from", n.fused_from)):
        if not isinstance(ids, (tuple, list)):
            raise InvalidArgument(f"{key} of {what} must be a list of ids")
        for x in ids:
            validate.ident(x, f"{key} of {what}: buffer id" if key != "fused_from" else key)
    if n.stream is not None:
        validate.stream(n.stream, f"stream for {what}")
    if n.cost is not None:
        validate.cost(n.cost, f"cost of {what}")
    if n.config is not None and not isinstance(n.config, KernelConfig):
        raise InvalidArgument(f"config of {what} must be a KernelConfig")
    validate.flag(n.fusible, f"fusible of {what}")
    if n.op is not None:
        validate.name(n.op, f"op of {what}")
    validate.params(n.params, what)
    if n.fused is not None:
        _check_fused(n.fused, what)
    if n.memcpy_dir is not None and not isinstance(n.memcpy_dir, MemcpyDir):
        raise InvalidArgument(f"direction of {word} {what} must be a MemcpyDir")
    if kind is NodeKind.Memcpy or kind is NodeKind.Memset or n.size_bytes != 0:
        validate.size(n.size_bytes, f"size of {word} {what}")
    validate.byte(n.memset_value, f"memset {what}: value")
    if n.event is not None:
        validate.ident(n.event, f"event of {what}")
    validate.text(n.label, f"label of {what}")
    if not isinstance(n.bodies, tuple) or len(n.bodies) > validate.MAX_BODIES:
        raise InvalidArgument(
            f"bodies of {what} must be a tuple of at most {validate.MAX_BODIES} ComputeGraphs"
        )
    for k, body in enumerate(n.bodies):
        if not isinstance(body, ComputeGraph):
            raise InvalidArgument(
                f"body {k} of {what} must be a ComputeGraph, got {type(body).__name__}; make "
                "it with GraphBuilder.body() and build()"
            )
    if n.cond_kind is not None and not isinstance(n.cond_kind, CondKind):
        raise InvalidArgument(f"cond_kind of {what} must be a CondKind")
    if n.condition is not None:
        validate.ident(n.condition, f"condition of {what}: buffer id")
    if n.max_iterations != 0:
        validate.iterations(n.max_iterations, f"max_iterations of {what}")


# Fast paths of check_buffer/check_node: plain boolean tests of the common, valid case
# (100k-node graphs are checked on every construction); anything they do not accept takes
# the full rules, which raise the message.
_MAX_ID, _MAX_SIZE = validate.MAX_ID, validate.MAX_SIZE_BYTES
_ALIGN = frozenset(2**k for k in range(validate.MAX_ALIGNMENT.bit_length()))


def _name_ok(name: Any) -> bool:
    return (
        type(name) is str
        and 0 < len(name) <= validate.MAX_NAME_LENGTH
        and name.isprintable()
        and not name.isspace()
    )


def _ids_ok(ids: Any, cls: type) -> bool:
    return type(ids) is tuple and all(type(x) is cls and 0 <= x <= _MAX_ID for x in ids)


def _shape_ok(shape: Any, count: int) -> bool:
    if type(shape) is not tuple or not 0 < len(shape) <= validate.MAX_RANK:
        return False
    for d in shape:
        if type(d) is not int or not 0 < d <= _MAX_SIZE:
            return False
        count, rest = divmod(count, d)
        if rest:
            return False
    return count == 1


def _params_ok(params: Any) -> bool:
    if type(params) is not tuple or len(params) > validate.MAX_PARAMS:
        return False
    last = ""
    for p in params:
        if type(p) is not tuple or len(p) != 2:
            return False
        k, v = p
        if type(k) is not str or not k.isidentifier() or not k.isascii() or not last < k:
            return False  # sorted, no duplicates
        if len(k) > validate.MAX_PARAM_NAME or not (
            (type(v) is float and math.isfinite(v))
            or (type(v) is int and -validate.MAX_PARAM_INT <= v <= validate.MAX_PARAM_INT)
        ):
            return False
        last = k
    return True


def _buffer_ok(b: Buffer) -> bool:
    return (
        type(b.id) is BufferId
        and 0 <= b.id <= _MAX_ID
        and _name_ok(b.name)
        and type(b.size_bytes) is int
        and 0 < b.size_bytes <= _MAX_SIZE
        and type(b.dtype) is str
        and b.dtype in DTYPES
        and b.size_bytes % DTYPES[b.dtype] == 0
        and (b.shape is None or _shape_ok(b.shape, b.size_bytes // DTYPES[b.dtype]))
        and type(b.alignment) is int
        and b.alignment in _ALIGN
        and b.alignment >= DTYPES[b.dtype]
        and type(b.external) is bool
        and (b.offset is None or (type(b.offset) is int and 0 <= b.offset <= validate.MAX_OFFSET))
        and b.base is None
        and b.view_offset == 0
        and b.strides is None
    )


def _node_ok(n: GraphNode) -> bool:
    kind = n.kind
    return (
        type(n.id) is NodeId
        and 0 <= n.id <= _MAX_ID
        and _name_ok(n.name)
        and type(kind) is NodeKind
        and _ids_ok(n.inputs, BufferId)
        and _ids_ok(n.outputs, BufferId)
        and (n.stream is None or (type(n.stream) is StreamId and 0 <= n.stream <= validate.MAX_STREAM))
        and (n.cost is None or (type(n.cost) is float and 0.0 <= n.cost <= validate.MAX_COST_SECONDS))
        and (n.config is None or type(n.config) is KernelConfig)
        and type(n.fusible) is bool
        and (n.op is None or _name_ok(n.op))
        and (not n.params or _params_ok(n.params))
        and (n.fused is None or _fused_ok(n.fused))
        and (not n.fused_from or _ids_ok(n.fused_from, NodeId))
        and (n.memcpy_dir is None or type(n.memcpy_dir) is MemcpyDir)
        and type(n.size_bytes) is int
        and (0 < n.size_bytes <= _MAX_SIZE or (n.size_bytes == 0 and kind is not NodeKind.Memcpy and kind is not NodeKind.Memset))
        and type(n.memset_value) is int
        and 0 <= n.memset_value <= 255
        and (n.event is None or (type(n.event) is NodeId and 0 <= n.event <= _MAX_ID))
        and (n.label == "" or (type(n.label) is str and len(n.label) <= validate.MAX_NAME_LENGTH and n.label.isprintable()))
        and not n.bodies
        and n.cond_kind is None
        and n.condition is None
        and n.max_iterations == 0
    )  # fmt: skip


def _fused_ok(p: Any) -> bool:
    # the fusion pass's programs: every fused kernel of a 100k-node graph is checked again
    # each time a pass rebuilds the graph around it
    if type(p) is not FusedProgram or type(p.steps) is not tuple or type(p.outputs) is not tuple:
        return False
    for st in p.steps:
        if not (
            type(st) is FusedStep
            and _name_ok(st.op)
            and (not st.params or _params_ok(st.params))
            and type(st.node) is NodeId
            and 0 <= st.node <= _MAX_ID
            and type(st.args) is tuple
        ):
            return False
        for a in st.args:
            if not (
                type(a) is tuple
                and len(a) == 2
                and type(a[0]) is str
                and (a[0] == "in" or a[0] == "step")
                and type(a[1]) is int
                and 0 <= a[1] <= _MAX_ID
            ):
                return False
    return all(type(k) is int and 0 <= k <= _MAX_ID for k in p.outputs)


def _check_fused(p: FusedProgram, what: str) -> None:
    if not isinstance(p, FusedProgram):
        raise InvalidArgument(f"fused program of {what} must be a FusedProgram")
    for j, st in enumerate(p.steps):
        where = f"fused step {j} of {what}"
        validate.name(st.op, f"op of {where}")
        validate.params(st.params, where)
        for kind, i in st.args:
            if kind not in ("in", "step"):
                raise InvalidArgument(f"{where}: an argument is 'in' or 'step', got {kind!r:.40}")
            validate.ident(i, f"argument of {where}")
        validate.ident(st.node, f"node of {where}")
    for k in p.outputs:
        validate.ident(k, f"output of the fused program of {what}")


class _Reader:
    """Field access with messages that name the path of the bad field.

    :meth:`get` checks the structure (an object, a list, an enum's string); value fields are
    read :meth:`raw` and checked by the same rules the builder applies
    (:func:`check_buffer`, :func:`check_node`), so both refuse a value with the same words.
    """

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise MalformedFile(f"{path}: expected an object, got {type(data).__name__}")
        self.data = data
        self.path = path

    def raw(self, key: str, *, optional: bool = False) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise MalformedFile(f"{self.path}: missing field {key!r}")
        return self.data[key]

    def get(self, key: str, types: type | tuple[type, ...], *, optional: bool = False) -> Any:
        value = self.raw(key, optional=optional)
        if value is None and optional:
            return None
        ok = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in _as_tuple(types)
        )
        if not ok:
            want = " or ".join(t.__name__ for t in _as_tuple(types))
            raise MalformedFile(
                f"{self.path}.{key}: expected {want}, got {type(value).__name__} "
                f"{validate.shown(value)}"
            )
        return value

    def ids(self, key: str) -> list[Any]:
        """A list whose entries the value rules check (ids, dimensions)."""
        return list(self.get(key, list))


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _enum(enum_cls: Any, value: str, path: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_cls)
        raise MalformedFile(
            f"{path}: unknown value {validate.shown(value)}; expected one of {allowed}"
        ) from None


# ---------------------------------------------------------------------- bounded JSON parsing
# JSON strings, whose brackets do not nest; an escape is a backslash and the next byte.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _json_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data``, without recursing.

    Strings are cut out first (their brackets do not count), then the depth is the running
    sum of +1 per opening and -1 per closing bracket: linear time, a few numpy passes.
    """
    bare = np.frombuffer(_JSON_STRING.sub(b"", data), np.uint8)
    return int(np.cumsum(_BRACKET_STEP[bare], dtype=np.int64).max(initial=0))


# +1 for an opening bracket, -1 for a closing one, 0 for every other byte.
_BRACKET_STEP = np.zeros(256, np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1


def _json_number(kind: str, convert: Any) -> Any:
    def parse(text: str) -> Any:
        # Checked before converting: int() of 5000 digits raises ValueError (and takes
        # quadratic time below that limit), float() of "1e999" is inf.
        if len(text) > MAX_JSON_NUMBER:
            raise MalformedFile(
                f"a number in the file has {len(text)} characters; at most "
                f"{MAX_JSON_NUMBER} are allowed ({text[:20]}...)"
            )
        value = convert(text)
        if kind == "float" and not np.isfinite(value):
            raise MalformedFile(f"the number {text} is too large for a float")
        return value

    return parse


def _json_constant(text: str) -> Any:
    raise MalformedFile(f"{text} is not a number JSON allows; write a finite number")


def _load_json(text: str | bytes) -> Any:
    """``json.loads`` with bounded size, nesting depth and number length (MalformedFile)."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        data = bytes(text)
    elif isinstance(text, str):
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedFile(
                "the text is not valid Unicode (it holds a lone surrogate); pass the text "
                "written by to_json()"
            ) from None
    else:
        raise MalformedFile(
            f"from_json needs the JSON text (str or bytes), got {type(text).__name__}"
        )
    if len(data) > MAX_JSON_BYTES:
        raise MalformedFile(
            f"the file is {len(data)} bytes; graph files are limited to {MAX_JSON_BYTES} "
            "bytes (oxiwork.graph.MAX_JSON_BYTES)"
        )
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedFile(
            f"not valid JSON: the text is not UTF-8 ({e}); pass the text written by to_json()"
        ) from e
    depth = _json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise MalformedFile(
            f"arrays and objects nest {depth} deep; a graph file nests at most "
            f"{MAX_JSON_DEPTH} deep"
        )
    try:
        return json.loads(
            decoded,
            parse_int=_json_number("int", int),
            parse_float=_json_number("float", float),
            parse_constant=_json_constant,
        )
    except json.JSONDecodeError as e:
        raise MalformedFile(f"not valid JSON: {e}; pass the text written by to_json()") from e
    except RecursionError:  # cannot happen below MAX_JSON_DEPTH; never let it escape
        raise MalformedFile("arrays and objects nest too deeply") from None


def _checked(check: Any, obj: Any, path: str) -> None:
    """Run a value rule on a loaded object; its InvalidArgument becomes MalformedFile."""
    try:
        check(obj)
    except InvalidArgument as e:
        raise MalformedFile(f"{path}: {e}") from None


def _buffer_from_dict(raw: Any, path: str) -> Buffer:
    r = _Reader(raw, path)
    b = Buffer(
        id=r.raw("id"),
        name=r.raw("name"),
        size_bytes=r.raw("size_bytes"),
        dtype=r.raw("dtype"),
        shape=r.raw("shape", optional=True),
        alignment=r.raw("alignment"),
        external=r.raw("external"),
        offset=r.raw("offset", optional=True),
        base=r.raw("base", optional=True),
        view_offset=0 if (vo := r.raw("view_offset", optional=True)) is None else vo,
        strides=r.raw("strides", optional=True),
    )
    _checked(check_buffer, b, path)
    return replace(
        b,
        id=BufferId(b.id),
        shape=None if b.shape is None else tuple(b.shape),
        base=None if b.base is None else BufferId(b.base),
        strides=None if b.strides is None else tuple(b.strides),
    )


def _fused_from_dict(raw: Any, path: str) -> FusedProgram:
    f = _Reader(raw, path)
    steps = []
    for j, sraw in enumerate(f.get("steps", list)):
        s = _Reader(sraw, f"{path}.steps[{j}]")
        args = []
        for k, a in enumerate(s.get("args", list)):
            if not (isinstance(a, list) and len(a) == 2):
                raise MalformedFile(f"{s.path}.args[{k}]: expected ['in'|'step', int]")
            args.append((a[0], a[1]))
        steps.append(
            FusedStep(
                op=s.raw("op"),
                params=s.get("params", dict),  # type: ignore[arg-type]  # checked by check_node
                args=tuple(args),
                node=s.raw("node"),
            )
        )
    return FusedProgram(tuple(steps), tuple(f.ids("outputs")))


def _node_from_dict(raw: Any, path: str, depth: int = 0) -> GraphNode:
    r = _Reader(raw, path)
    cfg_raw = r.get("config", dict, optional=True)
    config = None
    if cfg_raw is not None:
        c = _Reader(cfg_raw, f"{path}.config")
        try:
            config = KernelConfig(c.raw("grid"), c.raw("block"), c.raw("shared_mem_bytes"))
        except InvalidArgument as e:
            raise MalformedFile(f"{c.path}: {e}") from None
    fused_raw = r.get("fused", dict, optional=True)
    memcpy_dir = r.get("memcpy_dir", str, optional=True)
    stream, event = r.raw("stream", optional=True), r.raw("event", optional=True)
    n = GraphNode(
        id=r.raw("id"),
        name=r.raw("name"),
        kind=_enum(NodeKind, r.get("kind", str), f"{path}.kind"),
        inputs=tuple(r.ids("inputs")),
        outputs=tuple(r.ids("outputs")),
        stream=stream,
        cost=r.raw("cost", optional=True),
        config=config,
        fusible=r.raw("fusible"),
        op=r.raw("op", optional=True),
        params=r.get("params", dict),
        fused=None if fused_raw is None else _fused_from_dict(fused_raw, f"{path}.fused"),
        fused_from=tuple(r.ids("fused_from")),
        memcpy_dir=None if memcpy_dir is None else _enum(MemcpyDir, memcpy_dir, f"{path}.memcpy_dir"),
        size_bytes=r.raw("size_bytes"),
        memset_value=r.raw("memset_value"),
        event=event,
        label=r.raw("label"),
    )  # fmt: skip
    _checked(check_node, n, path)
    n = _bodies_from_dict(r, n, depth)
    fused = n.fused
    if fused is not None:
        fused = FusedProgram(
            tuple(
                replace(st, params=validate.params(st.params, ""), node=NodeId(st.node))
                for st in fused.steps
            ),
            fused.outputs,
        )
    return replace(
        n,
        id=NodeId(n.id),
        inputs=tuple(BufferId(x) for x in n.inputs),
        outputs=tuple(BufferId(x) for x in n.outputs),
        stream=None if stream is None else StreamId(stream),
        cost=None if n.cost is None else float(n.cost),
        params=validate.params(n.params, ""),
        fused=fused,
        fused_from=tuple(NodeId(x) for x in n.fused_from),
        event=None if event is None else NodeId(event),
    )


def _bodies_from_dict(r: _Reader, n: GraphNode, depth: int) -> GraphNode:
    """The optional body fields of a node (child graphs, conditionals), bodies read
    recursively up to :data:`~oxiwork.validate.MAX_BODY_DEPTH` levels."""
    raw_bodies = r.get("bodies", list, optional=True)
    cond_kind = r.get("cond_kind", str, optional=True)
    condition = r.raw("condition", optional=True)
    max_iterations = r.raw("max_iterations", optional=True)
    if raw_bodies is None and cond_kind is None and condition is None and max_iterations is None:
        return n
    bodies: list[ComputeGraph] = []
    if raw_bodies:
        if depth >= validate.MAX_BODY_DEPTH:
            raise MalformedFile(
                f"{r.path}.bodies: body graphs nest more than {validate.MAX_BODY_DEPTH} deep "
                "(oxiwork.validate.MAX_BODY_DEPTH)"
            )
        if len(raw_bodies) > validate.MAX_BODIES:
            raise MalformedFile(
                f"{r.path}.bodies: {len(raw_bodies)} bodies; at most {validate.MAX_BODIES}"
            )
        bodies = [
            _parts_from_dict(_Reader(b, f"{r.path}.bodies[{k}]"), depth + 1)
            for k, b in enumerate(raw_bodies)
        ]
    m = replace(
        n,
        bodies=tuple(bodies),
        cond_kind=None if cond_kind is None else _enum(CondKind, cond_kind, f"{r.path}.cond_kind"),
        condition=condition,
        max_iterations=0 if max_iterations is None else max_iterations,
    )
    _checked(check_node, m, r.path)
    return replace(m, condition=None if condition is None else BufferId(condition))


def _parts_from_dict(top: _Reader, depth: int) -> ComputeGraph:
    """Buffers, nodes and edges of a graph (a file's top level, or a body at ``depth``)."""
    path = top.path
    buffers = [
        _buffer_from_dict(raw, f"{path}.buffers[{i}]")
        for i, raw in enumerate(top.get("buffers", list))
    ]
    nodes = [
        _node_from_dict(raw, f"{path}.nodes[{i}]", depth)
        for i, raw in enumerate(top.get("nodes", list))
    ]
    edges: list[tuple[NodeId, NodeId]] = []
    for i, e in enumerate(top.get("edges", list)):
        ok = isinstance(e, list) and len(e) == 2
        if ok:
            try:
                for x in e:
                    validate.ident(x, f"{path}.edges[{i}]: node id")
            except InvalidArgument as err:
                raise MalformedFile(str(err)) from None
        else:
            raise MalformedFile(f"{path}.edges[{i}]: expected [int, int], got {validate.shown(e)}")
        edges.append((NodeId(e[0]), NodeId(e[1])))
    try:
        return ComputeGraph(tuple(nodes), tuple(buffers), tuple(edges))
    except MalformedFile:
        raise
    except (InvalidArgument, UnknownBuffer, UnknownNode, CycleError) as e:
        if depth == 0:
            raise
        raise MalformedFile(f"{path}: {e}") from None


def _graph_from_dict(data: Any) -> ComputeGraph:
    top = _Reader(data, "graph")
    fmt = top.get("format", str)
    if fmt != JSON_FORMAT:
        raise MalformedFile(f"graph.format is {validate.shown(fmt)}, expected {JSON_FORMAT!r}")
    version = top.get("version", int)
    if version != JSON_VERSION:
        raise MalformedFile(
            f"graph.version is {validate.shown(version)}; this oxiwork reads version "
            f"{JSON_VERSION}: re-export the graph with a matching oxiwork"
        )
    return _parts_from_dict(top, 0)
