"""Ergonomic builder API for constructing :class:`~oxiwork.graph.ComputeGraph` values.

The builder is the only mutable object of the IR: it collects buffers, nodes and
dependencies, then :meth:`GraphBuilder.build` infers the data edges, binds unbound copies
where that is unambiguous, validates everything and returns an immutable graph.

Every mistake is reported as a :class:`~oxiwork.error.GraphError` at the call that made
it (the seed's builder silently dropped edge errors; this one does not).

Example (the seed's quick start)
--------------------------------
>>> from oxiwork import GraphBuilder, MemcpyDir
>>> b = GraphBuilder()
>>> buf_in, buf_mid, buf_out = (b.alloc_buffer(n, 4096) for n in ("input", "mid", "output"))
>>> upload = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096)
>>> k0 = b.add_kernel("relu", 4, 256, 0).fusible(True).inputs([buf_in]).outputs([buf_mid]).finish()
>>> k1 = b.add_kernel("scale", 4, 256, 0).fusible(True).inputs([buf_mid]).outputs([buf_out]).finish()
>>> download = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096)
>>> b.chain([upload, k0, k1, download])
>>> graph = b.build()
>>> graph.num_nodes, len(graph.edges)
(4, 3)
>>> graph.node(upload).outputs == (buf_in,)   # the upload was bound to 'input'
True
"""

from __future__ import annotations

import itertools
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from oxiwork import ops, validate
from oxiwork.analysis import paused_gc
from oxiwork.error import (
    CycleError,
    EmptyGraph,
    GraphWarning,
    InvalidArgument,
    UnknownBuffer,
    UnknownNode,
)
from oxiwork.graph import ComputeGraph, check_buffer, check_node, check_view
from oxiwork.node import (
    MEMORY_KINDS,
    Buffer,
    BufferId,
    CondKind,
    GraphNode,
    KernelConfig,
    MemcpyDir,
    NodeId,
    NodeKind,
    StreamId,
)

__all__ = ["GraphBuilder", "KernelBuilder"]


def _check_name(name: Any, what: str) -> str:
    return validate.name(name, f"{what} name")


def _items(values: Any, what: str) -> list[Any]:
    """``list(values)`` for a collection (of ids, of sizes); :class:`InvalidArgument` for
    anything else: None, one id on its own, a string."""
    if values is None or isinstance(values, (str, bytes, int)):  # ids are ints
        raise InvalidArgument(
            f"{what} must be a list, got {values!r}; wrap a single value in a list"
        )
    try:
        return list(values)
    except TypeError:
        raise InvalidArgument(
            f"{what} must be a list, got {type(values).__name__} {values!r}"
        ) from None


class KernelBuilder:
    """Fluent configuration of one kernel; :meth:`finish` adds it and returns its id."""

    def __init__(self, owner: GraphBuilder, name: str, config: KernelConfig) -> None:
        self._owner = owner
        self._name = name
        self._config = config
        self._fusible = False
        self._inputs: tuple[BufferId, ...] = ()
        self._outputs: tuple[BufferId, ...] = ()
        self._stream: StreamId | None = None
        self._cost: float | None = None
        self._params: dict[str, Any] = {}
        self._op: str | None = None
        self._op_set = False
        self._finished: NodeId | None = None

    def fusible(self, flag: bool = True) -> KernelBuilder:
        """Allow the fusion pass to merge this kernel with its neighbours."""
        self._fusible = bool(flag)
        return self

    def inputs(self, buffers: Iterable[BufferId]) -> KernelBuilder:
        """Buffers the kernel reads, in argument order."""
        check = self._owner._check_buffer
        items = _items(buffers, f"inputs of {self._name!r}")
        self._inputs = tuple([check(b, self._name) for b in items])
        return self

    def outputs(self, buffers: Iterable[BufferId]) -> KernelBuilder:
        """Buffers the kernel writes, in argument order."""
        check = self._owner._check_buffer
        items = _items(buffers, f"outputs of {self._name!r}")
        self._outputs = tuple([check(b, self._name) for b in items])
        return self

    def on_stream(self, stream: int) -> KernelBuilder:
        """Pin the kernel to a stream (the stream pass keeps pins)."""
        self._stream = StreamId(validate.stream(stream, f"stream for {self._name!r}"))
        return self

    def cost(self, seconds: float) -> KernelBuilder:
        """Override the cost model's time estimate for this kernel (seconds, finite, >= 0)."""
        self._cost = validate.cost(seconds, f"cost of {self._name!r}")
        return self

    def params(self, **op_params: Any) -> KernelBuilder:
        """Op parameters (``alpha=0.5`` for ``scale``...); values are numbers, str or bool
        (see :func:`oxiwork.validate.params`)."""
        merged = {**self._params, **op_params}
        validate.params(merged, repr(self._name))  # all or nothing
        self._params = merged
        return self

    def op(self, name: str | None) -> KernelBuilder:
        """Pick the op this kernel computes (default: the op named like the kernel)."""
        if name is not None and ops.get(name) is None:
            known = ", ".join(sorted(ops.REGISTRY))
            raise InvalidArgument(
                f"kernel {self._name!r}: unknown op {name!r}; known ops: {known} "
                "(or register a custom op with oxiwork.ops.custom)"
            )
        self._op = name
        self._op_set = True
        return self

    def finish(self) -> NodeId:
        """Add the kernel to the builder and return its id."""
        if self._finished is not None:
            raise InvalidArgument(f"kernel {self._name!r} was already finished")
        op = self._op if self._op_set else _op_for_name(self._name)
        self._finished = self._owner._add(
            name=self._name,
            kind=NodeKind.KernelLaunch,
            inputs=self._inputs,
            outputs=self._outputs,
            stream=self._stream,
            cost=self._cost,
            config=self._config,
            fusible=self._fusible,
            op=op,
            params=tuple(sorted(self._params.items())),
        )
        self._owner._pending.discard(self)
        return self._finished


def _accesses(
    bodies: Iterable[ComputeGraph], condition: BufferId | None = None
) -> tuple[tuple[BufferId, ...], tuple[BufferId, ...]]:
    """The inputs and outputs of a node running ``bodies``: the union of their accesses
    (and the condition, read), by id."""
    reads = {condition} if condition is not None else set()
    writes: set[BufferId] = set()
    for g in bodies:
        for n in g.nodes:
            reads.update(n.inputs)
            writes.update(n.outputs)
    return tuple(sorted(reads)), tuple(sorted(writes))


def _op_for_name(name: str) -> str | None:
    return name if ops.get(name) is not None else None


class GraphBuilder:
    """Collects buffers, nodes and dependencies; :meth:`build` returns a ComputeGraph."""

    def __init__(self) -> None:
        self._buffers: list[Buffer] = []
        self._buffer_names: dict[str, BufferId] = {}
        self._nodes: list[GraphNode] = []
        self._deps: dict[tuple[NodeId, NodeId], None] = {}
        self._succ: dict[NodeId, list[NodeId]] = {}
        self._pred: dict[NodeId, list[NodeId]] = {}
        # A topological numbering of the explicit dependencies, kept valid on every dep()
        # (Pearce and Kelly's dynamic topological sort): an edge from a lower to a higher
        # number cannot close a cycle, so the common dep() is O(1).
        self._ord: dict[NodeId, int] = {}
        # Identical launch configurations share one (immutable) KernelConfig.
        self._configs: dict[tuple[int, int, int], KernelConfig] = {}
        self._pending: set[KernelBuilder] = set()
        # ids handed out by this builder: an id from another builder is rejected even if
        # its number happens to be in range here.
        self._issued_nodes: dict[int, NodeId] = {}
        self._issued_buffers: dict[int, BufferId] = {}
        self._node_index: dict[NodeId, int] = {}
        self._buffer_index: dict[BufferId, int] = {}
        self.notes: list[str] = []
        self.warnings: list[str] = []
        # The builder whose buffers this one shares (itself, unless made by body()).
        self._root: GraphBuilder = self

    @classmethod
    def from_graph(cls, graph: ComputeGraph) -> GraphBuilder:
        """A builder holding ``graph``'s buffers, nodes and edges, for editing.

        Ids of ``graph`` are accepted by the new builder.
        """
        b = cls()
        for buf in graph.buffers:
            b._buffer_index[buf.id] = len(b._buffers)
            b._buffers.append(buf)
            b._buffer_names[buf.name] = buf.id
            b._issued_buffers[int(buf.id)] = buf.id
        for n in graph.nodes:
            b._node_index[n.id] = len(b._nodes)
            b._nodes.append(n)
            b._issued_nodes[int(n.id)] = n.id
            b._succ.setdefault(n.id, [])
            b._pred.setdefault(n.id, [])
        for a, c in graph.edges:
            b._deps[(a, c)] = None
            b._succ[a].append(c)
            b._pred[c].append(a)
        b._ord = {nid: k for k, nid in enumerate(graph.topological_order())}
        b._next_node = int(graph.next_node_id())
        b._next_buffer = int(graph.next_buffer_id())
        return b

    # ------------------------------------------------------------------ buffers
    _next_node = 0
    _next_buffer = 0

    def alloc_buffer(
        self,
        name: str,
        size_bytes: int,
        dtype: str = "float32",
        shape: Sequence[int] | None = None,
        alignment: int = 256,
        *,
        external: bool = False,
    ) -> BufferId:
        """Declare a device buffer of ``size_bytes`` bytes and return its id.

        In a body builder (:meth:`body`) the buffer belongs to the outer graph, which the
        body shares its buffers with.
        """
        if self._root is not self:
            return self._root.alloc_buffer(
                name, size_bytes, dtype, shape, alignment, external=external
            )
        _check_name(name, "buffer")
        if name in self._buffer_names:
            raise InvalidArgument(f"a buffer named {name!r} already exists; pick another name")
        shape_t = None if shape is None else tuple(_items(shape, f"shape of buffer {name!r}"))
        bid = BufferId(self._next_buffer)
        buf = Buffer(bid, name, size_bytes, dtype, shape_t, alignment, external=external)
        check_buffer(buf)  # the rules the loader applies too, with the same messages
        self._next_buffer += 1
        self._buffer_index[bid] = len(self._buffers)
        self._buffers.append(buf)
        self._buffer_names[name] = bid
        self._issued_buffers[int(bid)] = bid
        return bid

    def alloc_external_buffer(
        self,
        name: str,
        size_bytes: int,
        dtype: str = "float32",
        shape: Sequence[int] | None = None,
        alignment: int = 256,
    ) -> BufferId:
        """Declare a user-owned buffer: bound at run time, never placed in the arena."""
        return self.alloc_buffer(name, size_bytes, dtype, shape, alignment, external=True)

    def view(
        self,
        name: str,
        base: BufferId,
        shape: Sequence[int],
        strides: Sequence[int] | None = None,
        offset: int = 0,
    ) -> BufferId:
        """Declare a view: a buffer that aliases ``base``'s bytes and allocates nothing.

        Element ``i`` of the view is element ``offset + sum(i[k] * strides[k])`` of the
        base's flat (row-major) storage, as torch's ``as_strided`` defines it; a kernel
        that reads or writes the view reads or writes the base. The view has the base's
        dtype and lives as long as the base in every plan.

        Parameters
        ----------
        name : str
            The view's name (unique among buffers).
        base : BufferId
            The buffer viewed. A contiguous view may be given: the new view is then made of
            its base, its ``offset`` added (a non-contiguous one is refused: give the
            composed strides over its base instead).
        shape : sequence of int
            The view's shape.
        strides : sequence of int, optional
            Elements to step per dimension (``>= 0``; 0 repeats, as ``expand``); default
            the row-major strides of ``shape`` (a reshape).
        offset : int
            First element of the base the view starts at.

        Returns
        -------
        BufferId

        Raises
        ------
        InvalidArgument
            A bad shape or stride, or a view reaching past the end of its base.

        Examples
        --------
        A transpose is a view; copying it makes the transposed data contiguous:

        >>> from oxiwork import GraphBuilder
        >>> b = GraphBuilder()
        >>> x = b.alloc_external_buffer("x", 24, shape=(2, 3))
        >>> xt = b.view("xT", x, (3, 2), strides=(1, 3))
        >>> y = b.alloc_buffer("y", 24, shape=(3, 2))
        >>> _ = b.add_kernel("copy", 1, 6).inputs([xt]).outputs([y]).finish()
        >>> g = b.build()
        >>> g.buffer(xt).is_view, g.storage(xt) == x
        (True, True)
        >>> try:
        ...     b.view("bad", x, (4, 2), strides=(1, 3))
        ... except Exception as e:
        ...     print(e)
        view 'bad' reaches element 6 of its base, which has 6 elements; lower the view's offset, shape or strides so that view_offset + sum((shape[k] - 1) * strides[k]) < 6
        """
        _check_name(name, "buffer")
        if name in self._buffer_names:
            raise InvalidArgument(f"a buffer named {name!r} already exists; pick another name")
        base = self._check_buffer(base, name)
        root = self._buffers[self._buffer_pos(base)]
        shape_t = validate.shape(
            tuple(_items(shape, f"shape of view {name!r}")), f"shape of view {name!r}"
        )
        if strides is None:
            st: list[int] = []
            step = 1
            for d in reversed(shape_t):
                st.append(step)
                step *= d
            strides_t = tuple(reversed(st))
        else:
            strides_t = tuple(_items(strides, f"strides of view {name!r}"))
        if root.base is not None:
            if not root.is_contiguous:
                raise InvalidArgument(
                    f"view {name!r} views {root.name!r}, a non-contiguous view; view its base "
                    f"{self._buf_name(root.base)!r} with the composed offset and strides"
                )
            validate.offset(offset, f"offset of view {name!r}")
            offset = root.view_offset + offset
            root = self._buffers[self._buffer_pos(root.base)]
        count = 1
        for d in shape_t:
            count *= d
        bid = BufferId(self._next_buffer)
        buf = Buffer(
            bid,
            name,
            count * root.itemsize,
            root.dtype,
            shape_t,
            root.alignment,
            base=root.id,
            view_offset=offset,
            strides=strides_t,
        )
        check_buffer(buf)
        check_view(buf, root)
        self._next_buffer += 1
        self._buffer_index[bid] = len(self._buffers)
        self._buffers.append(buf)
        self._buffer_names[name] = bid
        self._issued_buffers[int(bid)] = bid
        return bid

    # ------------------------------------------------------------------ nodes
    def add_kernel(self, name: str, blocks: int, threads: int, smem: int = 0) -> KernelBuilder:
        """Start a 1-D kernel launch of ``blocks`` x ``threads`` with ``smem`` bytes."""
        _check_name(name, "kernel")
        if type(blocks) is int and type(threads) is int and type(smem) is int:
            key = (blocks, threads, smem)
            config = self._configs.get(key)
            if config is None:
                config = self._configs[key] = KernelConfig.linear(blocks, threads, smem)
        else:
            config = KernelConfig.linear(blocks, threads, smem)  # validates, raises
        kb = KernelBuilder(self, name, config)
        self._pending.add(kb)
        return kb

    def add_kernel_3d(
        self,
        name: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        smem: int = 0,
    ) -> KernelBuilder:
        """Start a kernel launch with 3-D ``grid`` and ``block``."""
        _check_name(name, "kernel")
        kb = KernelBuilder(self, name, KernelConfig(grid, block, smem))
        self._pending.add(kb)
        return kb

    def add_memcpy(
        self,
        name: str,
        direction: MemcpyDir,
        size_bytes: int,
        src: BufferId | None = None,
        dst: BufferId | None = None,
    ) -> NodeId:
        """A copy of ``size_bytes``. Host sides have no buffer; device sides may be bound
        now or inferred by :meth:`build` from the neighbours."""
        _check_name(name, "memcpy")
        if not isinstance(direction, MemcpyDir):
            raise InvalidArgument(f"memcpy {name!r}: direction must be a MemcpyDir")
        validate.size(size_bytes, f"size of memcpy {name!r}")
        host_src = direction is MemcpyDir.HostToDevice
        host_dst = direction is MemcpyDir.DeviceToHost
        if host_src and src is not None:
            raise InvalidArgument(f"memcpy {name!r} is HostToDevice: its source is the host")
        if host_dst and dst is not None:
            raise InvalidArgument(f"memcpy {name!r} is DeviceToHost: its destination is the host")
        ins = () if src is None else (self._check_buffer(src, name),)
        outs = () if dst is None else (self._check_buffer(dst, name),)
        self._check_fits(f"memcpy {name!r} copies", size_bytes, (*ins, *outs))
        return self._add(
            name=name,
            kind=NodeKind.Memcpy,
            inputs=ins,
            outputs=outs,
            memcpy_dir=direction,
            size_bytes=size_bytes,
        )

    def add_memset(
        self, name: str, size_bytes: int, value: int, dst: BufferId | None = None
    ) -> NodeId:
        """Fill ``size_bytes`` bytes with the byte ``value`` (0..255)."""
        _check_name(name, "memset")
        validate.size(size_bytes, f"size of memset {name!r}")
        validate.byte(value, f"memset {name!r}: value")
        outs = () if dst is None else (self._check_buffer(dst, name),)
        self._check_fits(f"memset {name!r} sets", size_bytes, outs)
        return self._add(
            name=name,
            kind=NodeKind.Memset,
            outputs=outs,
            size_bytes=size_bytes,
            memset_value=value,
        )

    def add_event_record(self, name: str) -> NodeId:
        """Record an event (waits on it are ordered after this node)."""
        _check_name(name, "event record")
        return self._add(name=name, kind=NodeKind.EventRecord)

    def add_event_wait(self, name: str, record: NodeId) -> NodeId:
        """Wait for the event recorded by node ``record``."""
        _check_name(name, "event wait")
        rec = self._check_node(record)
        if self._node(rec).kind is not NodeKind.EventRecord:
            raise InvalidArgument(
                f"event wait {name!r} must wait for an event record, but "
                f"{self._node(rec).name!r} is a {self._node(rec).kind.value}"
            )
        nid = self._add(name=name, kind=NodeKind.EventWait, event=rec)
        self.dep(rec, nid)
        return nid

    def add_host_callback(self, label: str, fn: Callable[[], Any] | None = None) -> NodeId:
        """A host function run when its dependencies are done (``fn`` may be None)."""
        _check_name(label, "host callback")
        if fn is not None and not callable(fn):
            raise InvalidArgument(f"host callback {label!r}: fn must be callable")
        return self._add(name=label, kind=NodeKind.HostCallback, label=label, fn=fn)

    def add_barrier(self, name: str = "barrier") -> NodeId:
        """A node that only orders: everything before it finishes before anything after."""
        _check_name(name, "barrier")
        return self._add(name=name, kind=NodeKind.Barrier)

    # ------------------------------------------------------------------ graph nodes
    def body(self) -> GraphBuilder:
        """A builder for a body graph (of a child graph or a conditional) of this graph.

        The body shares this builder's buffers: it uses the ids :meth:`alloc_buffer`
        returned here, and a buffer it allocates belongs to the outer graph. Its nodes have
        their own ids. Pass it, unbuilt, to :meth:`add_child_graph`, :meth:`add_if`,
        :meth:`add_while` or :meth:`add_switch`; a body may be empty.

        Examples
        --------
        >>> from oxiwork import GraphBuilder
        >>> b = GraphBuilder()
        >>> x, y = b.alloc_buffer("x", 1024), b.alloc_buffer("y", 1024)
        >>> _ = b.add_memset("zero", 1024, 0, dst=x)
        >>> inner = b.body()
        >>> _ = inner.add_kernel("relu", 1, 256).inputs([x]).outputs([y]).finish()
        >>> child = b.add_child_graph("block", inner)
        >>> g = b.build()
        >>> g.node(child).inputs == (x,), g.node(child).outputs == (y,)
        (True, True)
        """
        sub = GraphBuilder()
        root = self._root
        sub._root = root
        sub._buffers = root._buffers  # shared, so the body checks and names them alike
        sub._buffer_names = root._buffer_names
        sub._issued_buffers = root._issued_buffers
        sub._buffer_index = root._buffer_index
        return sub

    def add_child_graph(self, name: str, body: GraphBuilder | ComputeGraph) -> NodeId:
        """Run a whole graph as one node (CUDA's child graph node).

        The node reads and writes exactly what its body does, so the data edges to the
        rest of the graph follow from the buffers, as for any node; every pass treats it
        as one node.

        Parameters
        ----------
        name
            The node's name.
        body
            A builder from :meth:`body` (built here), or a built body graph whose
            buffers are this builder's.

        Returns
        -------
        NodeId
            The child graph node.

        Examples
        --------
        >>> from oxiwork import GraphBuilder, MemcpyDir
        >>> b = GraphBuilder()
        >>> x, y = b.alloc_buffer("x", 1024), b.alloc_buffer("y", 1024)
        >>> up = b.add_memcpy("up", MemcpyDir.HostToDevice, 1024, dst=x)
        >>> inner = b.body()
        >>> _ = inner.add_kernel("relu", 1, 256).inputs([x]).outputs([y]).finish()
        >>> child = b.add_child_graph("block", inner)
        >>> g = b.build()
        >>> g.edges == ((up, child),), g.node(child).bodies[0].num_nodes
        (True, 1)
        """
        _check_name(name, "child graph")
        graph = self._body_graph(body, f"body of child graph {name!r}")
        ins, outs = _accesses([graph])
        return self._add(
            name=name, kind=NodeKind.ChildGraph, inputs=ins, outputs=outs, bodies=(graph,)
        )

    def add_if(
        self,
        name: str,
        condition: BufferId,
        then: GraphBuilder | ComputeGraph,
        otherwise: GraphBuilder | ComputeGraph | None = None,
    ) -> NodeId:
        """A conditional IF node: ``then`` runs when ``condition``'s first element is
        non-zero, ``otherwise`` (if given) when it is zero (CUDA 12.4+ conditional nodes;
        the else body is CUDA 12.8's).

        The condition is read on the device when the node runs, so the value the graph
        computed up to that point decides, not a host value.

        Parameters
        ----------
        name
            The node's name.
        condition
            The buffer tested (any dtype; see :meth:`~oxiwork.node.CondKind.chooses`).
        then, otherwise
            Bodies from :meth:`body` (or built body graphs).

        Returns
        -------
        NodeId
            The conditional node.

        Examples
        --------
        >>> import numpy as np
        >>> from oxiwork import GraphBuilder, MemcpyDir
        >>> from oxiwork.reference import evaluate
        >>> b = GraphBuilder()
        >>> flag, x = b.alloc_buffer("flag", 4, "int32"), b.alloc_buffer("x", 1024)
        >>> _ = b.add_memcpy("up flag", MemcpyDir.HostToDevice, 4, dst=flag)
        >>> _ = b.add_memcpy("up x", MemcpyDir.HostToDevice, 1024, dst=x)
        >>> then = b.body()
        >>> _ = then.add_kernel("neg", 1, 256).inputs([x]).outputs([x]).finish()
        >>> _ = b.add_if("maybe negate", flag, then)
        >>> g = b.build()
        >>> ones = np.ones(256, np.float32)
        >>> float(evaluate(g, {"flag": np.array([1]), "x": ones})["x"][0])
        -1.0
        >>> float(evaluate(g, {"flag": np.array([0]), "x": ones})["x"][0])
        1.0
        """
        bodies = [then] if otherwise is None else [then, otherwise]
        return self._add_conditional(name, CondKind.If, condition, bodies, 0)

    def add_while(
        self,
        name: str,
        condition: BufferId,
        body: GraphBuilder | ComputeGraph,
        max_iterations: int = 1000,
    ) -> NodeId:
        """A conditional WHILE node: ``body`` runs while ``condition``'s first element is
        non-zero, tested before every iteration (the body changes it to end the loop).

        ``max_iterations`` bounds the loop so that nothing hangs: an executor that
        reaches it with the condition still non-zero raises
        :class:`~oxiwork.error.IterationLimit` (a GPU would spin forever).

        Parameters
        ----------
        name
            The node's name.
        condition
            The buffer tested before each iteration.
        body
            A body from :meth:`body` (or a built body graph).
        max_iterations
            1..:data:`~oxiwork.validate.MAX_ITERATIONS`.

        Returns
        -------
        NodeId
            The conditional node.

        Examples
        --------
        A countdown: ``c = relu(c - 1)`` until ``c`` is 0, so it runs ``ceil(c)`` times.

        >>> import numpy as np
        >>> from oxiwork import GraphBuilder, MemcpyDir
        >>> from oxiwork.reference import evaluate
        >>> b = GraphBuilder()
        >>> c, one, d = (b.alloc_buffer(n, 4) for n in ("c", "one", "d"))
        >>> _ = b.add_memcpy("up c", MemcpyDir.HostToDevice, 4, dst=c)
        >>> _ = b.add_memcpy("up one", MemcpyDir.HostToDevice, 4, dst=one)
        >>> loop = b.body()
        >>> k = loop.add_kernel("sub", 1, 32).inputs([c, one]).outputs([d]).finish()
        >>> _ = loop.add_kernel("relu", 1, 32).inputs([d]).outputs([c]).finish()
        >>> _ = b.add_while("count down", c, loop, max_iterations=10)
        >>> g = b.build()
        >>> out = evaluate(g, {"c": np.array([3.0]), "one": np.array([1.0])})
        >>> float(out["c"][0]), float(out["d"][0])
        (0.0, 0.0)
        """
        return self._add_conditional(name, CondKind.While, condition, [body], max_iterations)

    def add_switch(
        self, name: str, condition: BufferId, cases: Sequence[GraphBuilder | ComputeGraph]
    ) -> NodeId:
        """A conditional SWITCH node: ``cases[k]`` runs when ``condition``'s first element,
        truncated to an integer, is ``k``; any other value runs none.

        Parameters
        ----------
        name
            The node's name.
        condition
            The buffer whose value picks the case.
        cases
            One body per case (from :meth:`body`, or built body graphs).

        Returns
        -------
        NodeId
            The conditional node.

        Examples
        --------
        >>> import numpy as np
        >>> from oxiwork import GraphBuilder, MemcpyDir
        >>> from oxiwork.reference import evaluate
        >>> b = GraphBuilder()
        >>> k, x = b.alloc_buffer("k", 4, "int32"), b.alloc_buffer("x", 16)
        >>> _ = b.add_memcpy("up k", MemcpyDir.HostToDevice, 4, dst=k)
        >>> cases = [b.body() for _ in range(3)]
        >>> for value, case in enumerate(cases):
        ...     _ = case.add_memset(f"set {value}", 16, value, dst=x)
        >>> _ = b.add_switch("pick", k, cases)
        >>> g = b.build()
        >>> [int(evaluate(g, {"k": np.array([v])})["x"].view(np.uint8)[0]) for v in (2, 1, 7)]
        [2, 1, 0]
        """
        return self._add_conditional(
            name, CondKind.Switch, condition, _items(cases, f"cases of switch {name!r}"), 0
        )

    def add_mem_alloc(self, name: str, buffer: BufferId) -> NodeId:
        """Allocate graph-owned memory for ``buffer`` (CUDA's memory alloc node).

        Every other use of the buffer must come after this node (the data edges follow
        from program order, as for a write); its lifetime, for liveness, the memory plan
        and the memory chart, starts here.

        Examples
        --------
        >>> from oxiwork import GraphBuilder
        >>> from oxiwork.analysis import liveness
        >>> b = GraphBuilder()
        >>> x, tmp = b.alloc_buffer("x", 1024), b.alloc_buffer("tmp", 1024)
        >>> _ = b.add_memset("fill", 1024, 1, dst=x)
        >>> a = b.add_mem_alloc("alloc tmp", tmp)
        >>> _ = b.add_kernel("relu", 1, 256).inputs([x]).outputs([tmp]).finish()
        >>> _ = b.add_kernel("neg", 1, 256).inputs([tmp]).outputs([x]).finish()
        >>> f = b.add_mem_free("free tmp", tmp)
        >>> g = b.build()
        >>> start, end = liveness.analyze(g).intervals[tmp]  # [first, last + 1)
        >>> order = g.topological_order()
        >>> (order[start], order[end - 1]) == (a, f)
        True
        """
        return self._add_memory_node(name, buffer, NodeKind.MemAlloc)

    def add_mem_free(self, name: str, buffer: BufferId) -> NodeId:
        """Free the graph-owned ``buffer`` (CUDA's memory free node; it needs an alloc node
        of this graph). Every other use must come before it: a use after free or a second
        free is refused when the graph is built (:class:`~oxiwork.error.InvalidLifetime`).

        Examples
        --------
        >>> from oxiwork import GraphBuilder
        >>> from oxiwork.error import InvalidLifetime
        >>> b = GraphBuilder()
        >>> tmp = b.alloc_buffer("tmp", 64)
        >>> _ = b.add_mem_alloc("alloc", tmp)
        >>> _ = b.add_mem_free("free", tmp)
        >>> _ = b.add_memset("late", 64, 0, dst=tmp)
        >>> try:
        ...     b.build()
        ... except InvalidLifetime as e:
        ...     print(e.buffer, e.node)
        tmp 2
        """
        return self._add_memory_node(name, buffer, NodeKind.MemFree)

    def _add_memory_node(self, name: str, buffer: BufferId, kind: NodeKind) -> NodeId:
        _check_name(name, kind.noun)
        bid = self._check_buffer(buffer, name)
        buf = self._buffers[self._buffer_pos(bid)]
        if buf.external or buf.base is not None:
            what = "external (the user owns it)" if buf.external else "a view (it owns no memory)"
            raise InvalidArgument(
                f"{kind.noun} {name!r}: buffer {buf.name!r} is {what}; allocate graph-owned "
                "memory with alloc_buffer"
            )
        return self._add(name=name, kind=kind, outputs=(bid,))

    def _add_conditional(
        self,
        name: str,
        kind: CondKind,
        condition: BufferId,
        bodies: list[Any],
        max_iterations: int,
    ) -> NodeId:
        _check_name(name, "conditional")
        cond = self._check_buffer(condition, name)
        if kind is CondKind.While:
            validate.iterations(max_iterations, f"max_iterations of {name!r}")
        if not bodies:
            raise InvalidArgument(f"{kind.name.upper()} node {name!r} needs at least one body")
        graphs = tuple(
            self._body_graph(body, f"body {k} of {kind.name.upper()} node {name!r}")
            for k, body in enumerate(bodies)
        )
        ins, outs = _accesses(graphs, cond)
        return self._add(
            name=name,
            kind=NodeKind.Conditional,
            inputs=ins,
            outputs=outs,
            bodies=graphs,
            cond_kind=kind,
            condition=cond,
            max_iterations=max_iterations,
        )

    def _body_graph(self, body: Any, what: str) -> ComputeGraph:
        """``body`` as a built body graph of this builder (built here if a builder)."""
        if isinstance(body, GraphBuilder):
            if body._root is not self._root or body is self._root:
                raise InvalidArgument(
                    f"{what} was not made by this builder's body(); make bodies with "
                    "b.body() so that they share b's buffers"
                )
            if body is self:
                raise InvalidArgument(f"{what} is the builder it is added to")
            return body.build()
        if isinstance(body, ComputeGraph):
            for buf in body.buffers:
                ours = self._issued_buffers.get(int(buf.id))
                if ours is None or self._buffers[self._buffer_pos(ours)].name != buf.name:
                    raise InvalidArgument(
                        f"{what} uses buffer {buf.name!r}, which is not a buffer of this "
                        "builder; build bodies with this builder's body()"
                    )
            return body
        raise InvalidArgument(
            f"{what} must be a GraphBuilder from body() or a ComputeGraph, got "
            f"{type(body).__name__}"
        )

    # ------------------------------------------------------------------ dependencies
    def dep(self, before: NodeId, after: NodeId) -> None:
        """``after`` depends on ``before``; rejects self-loops and edges closing a cycle."""
        a, b = self._check_node(before), self._check_node(after)
        if a == b:
            raise CycleError(
                f"node {self._node(a).name!r} cannot depend on itself", (self._node(a).name,)
            )
        if (a, b) in self._deps:
            return
        if self._ord[a] > self._ord[b] and not self._reorder(a, b):
            path = self._path(b, a)
            assert path is not None
            names = tuple(self._node(n).name for n in path)
            shown = " -> ".join(repr(x) for x in (*names, names[0]))
            raise CycleError(
                f"dependency {self._node(a).name!r} -> {self._node(b).name!r} would close the "
                f"cycle {shown}; drop it or reverse it",
                names,
            )
        self._deps[(a, b)] = None
        self._succ[a].append(b)
        self._pred[b].append(a)

    def chain(self, nodes: Sequence[NodeId]) -> None:
        """Each node depends on the one before it (all the dependencies, or none on error)."""
        nodes = _items(nodes, "chain")
        self._deps_all(list(itertools.pairwise(nodes)))

    def fan_in(self, sources: Iterable[NodeId], sink: NodeId) -> None:
        """``sink`` depends on every node of ``sources`` (all, or none on error)."""
        self._deps_all([(s, sink) for s in _items(sources, "fan_in sources")])

    def fan_out(self, source: NodeId, sinks: Iterable[NodeId]) -> None:
        """Every node of ``sinks`` depends on ``source`` (all, or none on error)."""
        self._deps_all([(source, s) for s in _items(sinks, "fan_out sinks")])

    def _deps_all(self, pairs: list[tuple[Any, Any]]) -> None:
        """Add every dependency of ``pairs`` or, if one is refused, none of them.

        The ids are checked first; a cycle can only show up while adding, so the edges this
        call added are removed again (the topological numbering stays valid for fewer edges).
        """
        for a, b in pairs:
            self._check_node(a)
            self._check_node(b)
        added: list[tuple[NodeId, NodeId]] = []
        try:
            for a, b in pairs:
                if (a, b) not in self._deps:
                    self.dep(a, b)
                    added.append((a, b))
        except BaseException:
            for a, b in added:
                del self._deps[(a, b)]
                self._succ[a].remove(b)
                self._pred[b].remove(a)
            raise

    # ------------------------------------------------------------------ build
    def build(self) -> ComputeGraph:
        """Infer data edges, bind unbound copies, validate, and return the graph.

        Data edges follow program order (the explicit dependencies, ties broken by
        creation order): read-after-write, write-after-read and write-after-write on the
        same buffer each add an edge, so every ordering the buffers need is explicit.
        """
        if self._pending:
            names = ", ".join(sorted(repr(k._name) for k in self._pending))
            raise InvalidArgument(
                f"kernel(s) {names} were started but never finished: call .finish()"
            )
        is_body = self._root is not self
        if not self._nodes and not is_body:  # an empty body is allowed, as in CUDA
            raise EmptyGraph("the graph has no nodes; add at least one kernel, copy or memset")
        # A 100k-node build allocates about a million small containers, and every
        # generation-2 collection they trigger walks the whole (growing) heap: a third of the
        # build's time. Nothing made here is cyclic garbage, so collect after, not during.
        with paused_gc():
            self.notes = []
            self.warnings = []
            nodes = self._bind_copies()
            topo = self._program_order(nodes)
            if topo is None:  # cannot happen through dep(); let the graph name the problem
                topo = [
                    nodes[self._node_index[nid]]
                    for nid in ComputeGraph(
                        tuple(nodes), tuple(self._buffers), tuple(self._deps)
                    ).topological_order()
                ]
            edges = dict(self._deps)
            last_writer: dict[BufferId, NodeId] = {}
            readers_since: dict[BufferId, list[NodeId]] = {}
            written: set[BufferId] = set()
            # A view's accesses are its base's: order them on the base.
            root = {b.id: b.base for b in self._buffers if b.base is not None}
            if root:
                topo = [
                    replace(
                        n,
                        inputs=tuple(root.get(x, x) for x in n.inputs),
                        outputs=tuple(root.get(x, x) for x in n.outputs),
                    )
                    for n in topo
                ]
            for n in topo:
                nid = n.id
                for bid in n.inputs:
                    w = last_writer.get(bid)
                    if w is not None and w != nid:
                        edges[(w, nid)] = None
                    readers_since.setdefault(bid, []).append(nid)
                for bid in n.outputs:
                    for r in readers_since.pop(bid, []):
                        if r != nid:
                            edges[(r, nid)] = None
                    w = last_writer.get(bid)
                    if w is not None and w != nid:
                        edges[(w, nid)] = None
                    last_writer[bid] = nid
                    # Graph-owned memory is allocated, not written: reading it before a
                    # write is the same mistake as reading any unwritten buffer.
                    if n.kind not in MEMORY_KINDS:
                        written.add(bid)
            for n in nodes if not is_body else ():  # a body reads what the outer graph wrote
                for bid in n.inputs:
                    bid = root.get(bid, bid)
                    buf = self._buffers[self._buffer_index[bid]]
                    if bid not in written and not buf.external:
                        self._warn(
                            f"buffer {buf.name!r} is read by {n.name!r} but nothing writes it; "
                            "add a HostToDevice copy into it or allocate it with "
                            "alloc_external_buffer"
                        )
            # Every node and buffer passed the value rules when it was added (_add,
            # alloc_buffer); the graph checks only the copies that _bind_copies replaced.
            buffers = self._buffers
            if is_body:  # only the outer graph's buffers the body uses
                used = {b for n in nodes for b in (*n.inputs, *n.outputs)}
                used |= {b.base for b in buffers if b.id in used and b.base is not None}
                buffers = [b for b in buffers if b.id in used]
            graph = ComputeGraph(
                tuple(nodes),
                tuple(buffers),
                tuple(edges),
                {"_trusted": (self._nodes, self._buffers)},
            )
            graph.verify()
            return graph

    # ------------------------------------------------------------------ internals
    def _check_fits(self, what: str, size_bytes: int, buffers: Iterable[BufferId]) -> None:
        """``what`` ("memcpy 'x' copies") touches ``size_bytes`` of each buffer: they must fit."""
        for bid in buffers:
            buf = self._buffers[self._buffer_pos(bid)]
            if size_bytes > buf.size_bytes:
                raise InvalidArgument(
                    f"{what} {size_bytes} bytes but buffer {buf.name!r} holds {buf.size_bytes}"
                )

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        warnings.warn(message, GraphWarning, stacklevel=3)

    def _program_order(self, nodes: list[GraphNode]) -> list[GraphNode] | None:
        """``nodes`` in the topological order :class:`ComputeGraph` gives the explicit
        dependencies (Kahn's algorithm, a FIFO seeded in id order, successors by id), without
        building and validating that intermediate graph; None if they hold a cycle."""
        pos = self._node_index  # nodes are held in id order
        succ: list[list[int]] = [[] for _ in nodes]
        indeg = [0] * len(nodes)
        for a, b in sorted(self._deps):
            pb = pos[b]
            succ[pos[a]].append(pb)
            indeg[pb] += 1
        queue = deque(i for i, d in enumerate(indeg) if d == 0)
        topo: list[GraphNode] = []
        while queue:
            v = queue.popleft()
            topo.append(nodes[v])
            for w in succ[v]:
                indeg[w] -= 1
                if indeg[w] == 0:
                    queue.append(w)
        return topo if len(topo) == len(nodes) else None

    def _bind_copies(self) -> list[GraphNode]:
        """Bind copies without a device buffer where exactly one buffer fits.

        A HostToDevice copy with no destination feeds the one buffer of matching size
        that its direct successors read and that nothing writes; a DeviceToHost copy
        with no source drains the one buffer of matching size that its direct
        predecessors write and that nothing reads. This is what makes the seed's quick
        start (whose copies name no buffers) compute real values. Ambiguous copies stay
        unbound (timing only) and are reported in ``warnings``.
        """
        nodes = list(self._nodes)
        h2d, d2h = MemcpyDir.HostToDevice, MemcpyDir.DeviceToHost
        unbound = [
            i
            for i, n in enumerate(nodes)
            if n.kind is NodeKind.Memcpy
            and ((n.memcpy_dir is h2d and not n.outputs) or (n.memcpy_dir is d2h and not n.inputs))
        ]
        if not unbound:
            return nodes  # the usual case: skip the whole-graph bookkeeping below
        pred = self._pred
        by_id = self._node_index  # nodes are held in id order
        written = {b for n in nodes for b in n.outputs}
        read = {b for n in nodes for b in n.inputs}
        # views are never guessed as a copy's end: bind a copy of a view with src=/dst=
        sizes = {b.id: b.size_bytes for b in self._buffers if b.base is None}
        for i in unbound:
            n = nodes[i]
            if n.memcpy_dir is MemcpyDir.HostToDevice and not n.outputs:
                cands = {
                    bid
                    for s in self._succ[n.id]
                    for bid in nodes[by_id[s]].inputs
                    if bid not in written and sizes.get(bid) == n.size_bytes
                }
                if len(cands) == 1:
                    (bid,) = cands
                    nodes[i] = replace(n, outputs=(bid,))
                    written.add(bid)
                    self.notes.append(f"{n.name!r} writes {self._buf_name(bid)!r} (inferred)")
                else:
                    self._warn(
                        f"copy {n.name!r} names no destination and {len(cands)} buffers could "
                        "be it; pass dst= to bind it (it runs for timing only)"
                    )
            elif n.memcpy_dir is MemcpyDir.DeviceToHost and not n.inputs:
                cands = {
                    bid
                    for p in pred[n.id]
                    for bid in nodes[by_id[p]].outputs
                    if bid not in read and sizes.get(bid) == n.size_bytes
                }
                if len(cands) == 1:
                    (bid,) = cands
                    nodes[i] = replace(n, inputs=(bid,))
                    read.add(bid)
                    self.notes.append(f"{n.name!r} reads {self._buf_name(bid)!r} (inferred)")
                else:
                    self._warn(
                        f"copy {n.name!r} names no source and {len(cands)} buffers could be "
                        "it; pass src= to bind it (it runs for timing only)"
                    )
        return nodes

    def _buf_name(self, bid: BufferId) -> str:
        return self._buffers[self._buffer_pos(bid)].name

    def _add(self, **fields: Any) -> NodeId:
        nid = NodeId(self._next_node)
        node = GraphNode(id=nid, **fields)
        check_node(node)  # the rules the loader applies too (checked before any change)
        self._next_node += 1
        self._node_index[nid] = len(self._nodes)
        self._nodes.append(node)
        self._issued_nodes[int(nid)] = nid
        self._succ[nid] = []
        self._pred[nid] = []
        self._ord[nid] = len(self._ord)
        return nid

    def _node(self, nid: NodeId) -> GraphNode:
        return self._nodes[self._node_pos(nid)]

    def _node_pos(self, nid: NodeId) -> int:
        return self._node_index[nid]

    def _buffer_pos(self, bid: BufferId) -> int:
        return self._buffer_index[bid]

    def _check_node(self, nid: Any) -> NodeId:
        if not isinstance(nid, NodeId):
            hint = " (that is a BufferId)" if isinstance(nid, BufferId) else ""
            raise InvalidArgument(
                f"expected a NodeId returned by add_*(), got {nid!r}{hint}"
                + ("; did you forget .finish()?" if isinstance(nid, KernelBuilder) else "")
            )
        issued = self._issued_nodes.get(int(nid))
        if issued is None:
            raise UnknownNode(
                f"{nid!r} is not a node of this builder (it has {len(self._nodes)} nodes); "
                "use the id returned by this builder's add_* call"
            )
        if issued is not nid:
            raise UnknownNode(
                f"{nid!r} was not issued by this builder (it comes from another builder or "
                "was constructed by hand); use the id returned by this builder's add_* call"
            )
        return nid

    def _check_buffer(self, bid: Any, user: str) -> BufferId:
        if type(bid) is BufferId and self._issued_buffers.get(bid) is bid:
            return bid  # the common case: an id this builder handed out (ints hash alike)
        if not isinstance(bid, BufferId):
            hint = " (that is a NodeId)" if isinstance(bid, NodeId) else ""
            raise InvalidArgument(
                f"{user!r}: expected a BufferId returned by alloc_buffer(), got {bid!r}{hint}"
            )
        issued = self._issued_buffers.get(int(bid))
        if issued is None or issued is not bid:
            raise UnknownBuffer(
                f"{user!r} uses {bid!r}, which is not a buffer of this builder; use the id "
                "returned by this builder's alloc_buffer()"
            )
        return bid

    def _reorder(self, a: NodeId, b: NodeId) -> bool:
        """Renumber so that a new edge ``a -> b`` (numbered the wrong way) fits the order.

        Pearce and Kelly's algorithm: the nodes reachable from ``b`` numbered at most
        ``ord[a]`` and the nodes reaching ``a`` numbered at least ``ord[b]`` are the only
        ones out of place; they take their own numbers back, the latter group first. Returns
        False, changing nothing, when ``a`` is reachable from ``b`` (the edge closes a cycle).

        References
        ----------
        D. J. Pearce and P. H. J. Kelly, "A Dynamic Topological Sort Algorithm for Directed
        Acyclic Graphs", ACM Journal of Experimental Algorithmics 11 (2006).
        """
        order = self._ord
        lo, hi = order[b], order[a]
        forward = [b]
        seen = {b}
        stack = [b]
        while stack:
            for w in self._succ[stack.pop()]:
                if w == a:
                    return False
                if w not in seen and order[w] <= hi:
                    seen.add(w)
                    forward.append(w)
                    stack.append(w)
        backward = [a]
        seen = {a}
        stack = [a]
        while stack:
            for u in self._pred[stack.pop()]:
                if u not in seen and order[u] >= lo:
                    seen.add(u)
                    backward.append(u)
                    stack.append(u)
        moved = sorted(backward, key=order.__getitem__) + sorted(forward, key=order.__getitem__)
        for nid, k in zip(moved, sorted(order[v] for v in moved), strict=True):
            order[nid] = k
        return True

    def _path(self, start: NodeId, goal: NodeId) -> list[NodeId] | None:
        """A path start -> ... -> goal over explicit dependencies, or None (DFS)."""
        parent: dict[NodeId, NodeId | None] = {start: None}
        stack = [start]
        while stack:
            v = stack.pop()
            if v == goal:
                path = [v]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])  # type: ignore[arg-type]
                return path[::-1]
            for w in self._succ[v]:
                if w not in parent:
                    parent[w] = v
                    stack.append(w)
        return None
