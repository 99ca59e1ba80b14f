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

import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oxiwork.error import CycleError, InvalidArgument, MalformedFile, UnknownBuffer, UnknownNode
from oxiwork.node import (
    DTYPES,
    Buffer,
    BufferId,
    FusedProgram,
    FusedStep,
    GraphNode,
    KernelConfig,
    MemcpyDir,
    NodeId,
    NodeKind,
    StreamId,
)

__all__ = ["JSON_FORMAT", "JSON_VERSION", "ComputeGraph", "DenseGraph"]

JSON_FORMAT = "oxiwork.graph"
JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class DenseGraph:
    """Integer-indexed adjacency of a graph, for algorithms that must be fast.

    ``ids[p]`` is the node at position ``p``; ``pos`` maps back; ``succ``/``pred`` are
    adjacency lists of positions; ``topo`` is a deterministic topological order of
    positions (Kahn's algorithm, ties broken by id).
    """

    ids: tuple[NodeId, ...]
    pos: dict[NodeId, int]
    succ: list[list[int]]
    pred: list[list[int]]
    topo: list[int]


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
        nodes = tuple(sorted(_items(self.nodes, GraphNode, "nodes"), key=lambda n: n.id))
        buffers = tuple(sorted(_items(self.buffers, Buffer, "buffers"), key=lambda b: b.id))
        try:
            edges = tuple(sorted(set(_items(self.edges, tuple, "edges"))))
        except TypeError:  # an unhashable or unorderable end: not a node id
            raise InvalidArgument(
                "edges must be (NodeId, NodeId) pairs of this graph's ids"
            ) from None
        object.__setattr__(self, "nodes", nodes)
        object.__setattr__(self, "buffers", buffers)
        object.__setattr__(self, "edges", edges)
        self._validate()

    # ------------------------------------------------------------------ validation
    def _validate(self) -> None:
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
        for n in self.nodes:
            for bid in (*n.inputs, *n.outputs):
                if bid not in buf_index:
                    raise UnknownBuffer(
                        f"node {n.name!r} (id {int(n.id)}) uses buffer id {int(bid)}, which "
                        "is not in this graph; allocate the buffer in the same builder"
                    )
            if n.kind is NodeKind.EventWait and (n.event is None or n.event not in node_index):
                raise UnknownNode(
                    f"event wait {n.name!r} waits for node {n.event!r}, which is not an event "
                    "record of this graph"
                )
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
        return DenseGraph(ids, pos, succ, pred, topo)

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
            order = tuple(d.ids[p] for p in d.topo)
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
    ) -> ComputeGraph:
        """A new, validated graph with the given parts replaced."""
        # The constructor turns each part into a checked tuple (InvalidArgument for junk).
        return ComputeGraph(
            self.nodes if nodes is None else nodes,  # type: ignore[arg-type]
            self.buffers if buffers is None else buffers,  # type: ignore[arg-type]
            self.edges if edges is None else edges,  # type: ignore[arg-type]
        )

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
        """Load and validate the form written by :meth:`to_dict`."""
        from oxiwork.verify import verify

        graph = _graph_from_dict(data)
        verify(graph)
        return graph

    @classmethod
    def from_json(cls, text: str | bytes) -> ComputeGraph:
        """Load a graph written by :meth:`to_json`; :class:`MalformedFile` if invalid."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError, TypeError) as e:
            raise MalformedFile(f"not valid JSON: {e}; pass the text written by to_json()") from e
        return cls.from_dict(data)

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` with node attributes ``name``, ``kind`` and ``node``."""
        import networkx as nx

        g = nx.DiGraph()
        for n in self.nodes:
            g.add_node(n.id, name=n.name, kind=n.kind.value, node=n)
        g.add_edges_from(self.edges)
        return g

    def to_dot(self, color_by: str | None = None, plan: Any = None) -> str:
        """Graphviz DOT text; names are escaped, so any name is safe.

        ``color_by`` (``"kind"``, ``"group"``, ``"stream"``, ``"level"``, ``"slack"``) fills
        the nodes by that pass result, with ``plan`` giving an input graph's fused groups
        and streams (see :func:`oxiwork.render.dot.graph_dot`).
        """
        if color_by is not None:
            from oxiwork.render.dot import graph_dot  # renderers sit above the IR

            return graph_dot(self, color=color_by, plan=plan)
        lines = ["digraph oxiwork {", "  rankdir=TB;", "  node [fontname=Helvetica];"]
        shapes = {
            NodeKind.KernelLaunch: "box",
            NodeKind.Memcpy: "cds",
            NodeKind.Memset: "box3d",
            NodeKind.EventRecord: "diamond",
            NodeKind.EventWait: "diamond",
            NodeKind.HostCallback: "ellipse",
            NodeKind.Barrier: "octagon",
        }
        for n in self.nodes:
            # Escape name and kind separately: escaping the joined text and then undoing
            # the escape of the separator would also turn a literal backslash-n in a name
            # into a line break.
            label = f"{_dot_escape(n.name)}\\n{_dot_escape(n.kind.value)}"
            lines.append(f'  n{int(n.id)} [label="{label}", shape={shapes[n.kind]}];')
        for a, b in self.edges:
            lines.append(f"  n{int(a)} -> n{int(b)};")
        lines.append("}")
        return "\n".join(lines) + "\n"

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


def _items(values: Any, cls: type, what: str) -> list[Any]:
    """``values`` as a list of ``cls`` (edges: of ``(NodeId, NodeId)`` pairs), or
    :class:`InvalidArgument` saying what was passed instead."""
    try:
        items = list(values)
    except TypeError:
        raise InvalidArgument(
            f"{what} must be a sequence of {cls.__name__}, got {type(values).__name__}"
        ) from None
    for x in items:
        # An edge is a pair; its ends are checked against the nodes by _validate.
        if not isinstance(x, cls) or (cls is tuple and len(x) != 2):
            raise InvalidArgument(
                f"{what} must hold {'(NodeId, NodeId) pairs' if cls is tuple else cls.__name__}"
                f" only, got {x!r}"
            )
    return items


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


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


def _node_to_dict(n: GraphNode) -> dict[str, Any]:
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


class _Reader:
    """Typed field access with messages that name the path of the bad field."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise MalformedFile(f"{path}: expected an object, got {type(data).__name__}")
        self.data = data
        self.path = path

    def get(self, key: str, types: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.data:
            if optional:
                return None
            raise MalformedFile(f"{self.path}: missing field {key!r}")
        value = self.data[key]
        if value is None and optional:
            return None
        ok = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in _as_tuple(types)
        )
        if not ok:
            want = " or ".join(t.__name__ for t in _as_tuple(types))
            raise MalformedFile(
                f"{self.path}.{key}: expected {want}, got {type(value).__name__} {value!r:.60}"
            )
        return value

    def int_list(self, key: str, *, optional: bool = False) -> list[int] | None:
        value = self.get(key, list, optional=optional)
        if value is None:
            return None
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int):
                raise MalformedFile(f"{self.path}.{key}[{i}]: expected int, got {v!r:.60}")
        return value


def _as_tuple(t: type | tuple[type, ...]) -> tuple[type, ...]:
    return t if isinstance(t, tuple) else (t,)


def _scalar_params(r: _Reader, key: str) -> tuple[tuple[str, Any], ...]:
    params = r.get(key, dict)
    for k, v in params.items():
        if not isinstance(v, (int, float, str, bool)):
            raise MalformedFile(f"{r.path}.{key}.{k}: expected a number, string or bool")
    return tuple(params.items())


def _enum(enum_cls: Any, value: str, path: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_cls)
        raise MalformedFile(f"{path}: unknown value {value!r}; expected one of {allowed}") from None


def _graph_from_dict(data: Any) -> ComputeGraph:
    top = _Reader(data, "graph")
    fmt = top.get("format", str)
    if fmt != JSON_FORMAT:
        raise MalformedFile(f"graph.format is {fmt!r}, expected {JSON_FORMAT!r}")
    version = top.get("version", int)
    if version != JSON_VERSION:
        raise MalformedFile(
            f"graph.version is {version}; this oxiwork reads version {JSON_VERSION}: "
            "re-export the graph with a matching oxiwork"
        )
    buffers = []
    for i, raw in enumerate(top.get("buffers", list)):
        r = _Reader(raw, f"graph.buffers[{i}]")
        dtype = r.get("dtype", str)
        if dtype not in DTYPES:
            raise MalformedFile(
                f"{r.path}.dtype: unknown dtype {dtype!r}; use one of {list(DTYPES)}"
            )
        shape = r.int_list("shape", optional=True)
        size = r.get("size_bytes", int)
        if size <= 0:
            raise MalformedFile(f"{r.path}.size_bytes: must be > 0, got {size}")
        buffers.append(
            Buffer(
                id=BufferId(r.get("id", int)),
                name=r.get("name", str),
                size_bytes=size,
                dtype=dtype,
                shape=None if shape is None else tuple(shape),
                alignment=r.get("alignment", int),
                external=r.get("external", bool),
                offset=r.get("offset", int, optional=True),
            )
        )
    nodes = []
    for i, raw in enumerate(top.get("nodes", list)):
        r = _Reader(raw, f"graph.nodes[{i}]")
        cfg_raw = r.get("config", dict, optional=True)
        config = None
        if cfg_raw is not None:
            c = _Reader(cfg_raw, f"{r.path}.config")
            try:
                config = KernelConfig(
                    tuple(c.int_list("grid") or ()),  # type: ignore[arg-type]
                    tuple(c.int_list("block") or ()),  # type: ignore[arg-type]
                    c.get("shared_mem_bytes", int),
                )
            except InvalidArgument as e:
                raise MalformedFile(f"{c.path}: {e}") from None
        fused_raw = r.get("fused", dict, optional=True)
        fused = None
        if fused_raw is not None:
            f = _Reader(fused_raw, f"{r.path}.fused")
            steps = []
            for j, sraw in enumerate(f.get("steps", list)):
                s = _Reader(sraw, f"{f.path}.steps[{j}]")
                args = []
                for k, a in enumerate(s.get("args", list)):
                    ok = (
                        isinstance(a, list)
                        and len(a) == 2
                        and a[0] in ("in", "step")
                        and isinstance(a[1], int)
                        and not isinstance(a[1], bool)
                    )
                    if not ok:
                        raise MalformedFile(f"{s.path}.args[{k}]: expected ['in'|'step', int]")
                    args.append((a[0], a[1]))
                steps.append(
                    FusedStep(
                        op=s.get("op", str),
                        params=_scalar_params(s, "params"),
                        args=tuple(args),
                        node=NodeId(s.get("node", int)),
                    )
                )
            fused = FusedProgram(tuple(steps), tuple(f.int_list("outputs") or ()))
        memcpy_dir = r.get("memcpy_dir", str, optional=True)
        stream = r.get("stream", int, optional=True)
        event = r.get("event", int, optional=True)
        cost = r.get("cost", (int, float), optional=True)
        nodes.append(
            GraphNode(
                id=NodeId(r.get("id", int)),
                name=r.get("name", str),
                kind=_enum(NodeKind, r.get("kind", str), f"{r.path}.kind"),
                inputs=tuple(BufferId(x) for x in r.int_list("inputs") or ()),
                outputs=tuple(BufferId(x) for x in r.int_list("outputs") or ()),
                stream=None if stream is None else StreamId(stream),
                cost=None if cost is None else float(cost),
                config=config,
                fusible=r.get("fusible", bool),
                op=r.get("op", str, optional=True),
                params=_scalar_params(r, "params"),
                fused=fused,
                fused_from=tuple(NodeId(x) for x in r.int_list("fused_from") or ()),
                memcpy_dir=None
                if memcpy_dir is None
                else _enum(MemcpyDir, memcpy_dir, f"{r.path}.memcpy_dir"),
                size_bytes=r.get("size_bytes", int),
                memset_value=r.get("memset_value", int),
                event=None if event is None else NodeId(event),
                label=r.get("label", str),
            )
        )
    edges: list[tuple[NodeId, NodeId]] = []
    for i, e in enumerate(top.get("edges", list)):
        ok = (
            isinstance(e, list)
            and len(e) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in e)
        )
        if not ok:
            raise MalformedFile(f"graph.edges[{i}]: expected [int, int], got {e!r:.60}")
        edges.append((NodeId(e[0]), NodeId(e[1])))
    return ComputeGraph(tuple(nodes), tuple(buffers), tuple(edges))
