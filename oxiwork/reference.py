"""Reference evaluator: what every buffer holds after the graph runs, in plain numpy.

An interpreter over the graph in topological order (in the style of JAX's ``eval_jaxpr``
and torch.fx's ``Interpreter``): one byte array per buffer, dispatch by node kind through
a rule table, ops through their numpy references. Fused kernels evaluate their
:class:`~oxiwork.node.FusedProgram`, so "fused == unfused" is a plain equality test.

Buffers start zeroed. A buffer that a HostToDevice copy fills, or an external buffer,
takes its data from ``inputs`` (keyed by buffer name); if ``inputs`` has no entry for it,
the data is drawn from a random generator seeded by ``seed`` and the buffer name
(standard normal for floats, 0..9 for integers), so the same graph and seed always give
the same values, whatever other buffers exist. :func:`evaluate_detailed` also reports
which buffers were generated.

Example
-------
>>> import numpy as np
>>> from oxiwork.examples import quick_start
>>> x = np.array([-1.0, 2.0] * 512, dtype=np.float32)
>>> out = evaluate(quick_start(), {"input": x})
>>> out["output"][:2]   # scale(relu(x)) with alpha = 2
array([0., 4.], dtype=float32)
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from oxiwork.error import InvalidArgument, UnknownBuffer
from oxiwork.node import (
    FLOAT_DTYPES,
    Buffer,
    BufferId,
    GraphNode,
    MemcpyDir,
    NodeKind,
    conditional_runs,
    view_bytes,
)
from oxiwork.ops.program import bind, run

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = ["ReferenceResult", "evaluate", "evaluate_detailed", "generated_input"]


@dataclass(frozen=True, slots=True)
class ReferenceResult:
    """Final buffer contents by name, and the names whose input data was generated."""

    values: dict[str, np.ndarray]
    generated: tuple[str, ...]


def generated_input(buffer: Buffer, seed: int = 0) -> np.ndarray:
    """The data the evaluator invents for ``buffer`` when ``inputs`` does not give it.

    >>> from oxiwork.node import Buffer, BufferId
    >>> a = generated_input(Buffer(BufferId(0), "x", 16), seed=1)
    >>> b = generated_input(Buffer(BufferId(5), "x", 16), seed=1)
    >>> a.dtype, a.shape, bool((a == b).all())
    (dtype('float32'), (4,), True)
    """
    rng = np.random.default_rng([seed, zlib.crc32(buffer.name.encode())])
    dt = np.dtype(buffer.dtype)
    if buffer.dtype in FLOAT_DTYPES:
        data = rng.standard_normal(buffer.array_shape).astype(dt)
    else:
        data = rng.integers(0, 10, size=buffer.array_shape).astype(dt)
    return data


class _State:
    """The interpreter's environment: one byte array per buffer."""

    def __init__(self, graph: ComputeGraph, inputs: Mapping[str, np.ndarray], seed: int) -> None:
        self.graph = graph
        self.inputs = inputs
        self.seed = seed
        self.mem = {
            b.id: np.zeros(b.size_bytes, dtype=np.uint8) for b in graph.buffers if b.base is None
        }
        # A view holds no bytes: its typed array is a strided view of its base's, and its
        # bytes (for copies and memsets, which need a contiguous view) those it covers.
        self.typed: dict[BufferId, np.ndarray] = {}
        for b in graph.buffers:
            if b.base is not None:
                base = self.mem[b.base]
                self.typed[b.id], self.mem[b.id] = view_bytes(
                    base, b.dtype, b.array_shape, b.view_offset, b.strides or ()
                )
        self.generated: list[str] = []
        for b in graph.buffers:
            if b.external:
                self.load(b)

    def view(self, buf: Buffer) -> np.ndarray:
        typed = self.typed.get(buf.id)
        if typed is not None:
            return typed
        return self.mem[buf.id].view(np.dtype(buf.dtype)).reshape(buf.array_shape)

    def host_data(self, buf: Buffer) -> np.ndarray:
        if buf.name not in self.inputs:
            if buf.name not in self.generated:
                self.generated.append(buf.name)
            return generated_input(buf, self.seed)
        data = np.asarray(self.inputs[buf.name])
        if data.size != buf.num_elements:
            raise InvalidArgument(
                f"input {buf.name!r} has {data.size} elements but the buffer holds "
                f"{buf.num_elements} {buf.dtype} elements (shape {buf.array_shape}); pass an "
                "array of that size"
            )
        return data.astype(buf.dtype, copy=False).reshape(buf.array_shape)

    def load(self, buf: Buffer, nbytes: int | None = None) -> None:
        raw = np.ascontiguousarray(self.host_data(buf)).view(np.uint8).reshape(-1)
        n = buf.size_bytes if nbytes is None else nbytes
        self.mem[buf.id][:n] = raw[:n]


def _kernel(st: _State, node: GraphNode) -> None:
    g = st.graph
    bound = bind(g, node)
    args = [st.view(g.buffer(b)).copy() for b in node.inputs]
    with np.errstate(all="ignore"):  # exp overflow, log of negatives: numpy's IEEE values
        results = run(bound, args)
    for bid, value in zip(node.outputs, results, strict=True):
        st.view(g.buffer(bid))[...] = value.reshape(g.buffer(bid).array_shape)


def _memcpy(st: _State, node: GraphNode) -> None:
    g = st.graph
    n = node.size_bytes
    if node.memcpy_dir is MemcpyDir.HostToDevice:
        for bid in node.outputs:
            st.load(g.buffer(bid), n)
    elif node.inputs and node.outputs:  # device/peer to device: a byte copy
        src, dst = st.mem[node.inputs[0]], st.mem[node.outputs[0]]
        dst[:n] = src[:n].copy()
    # DeviceToHost only reads its source: the caller sees it in the returned values.


def _memset(st: _State, node: GraphNode) -> None:
    for bid in node.outputs:
        st.mem[bid][: node.size_bytes] = node.memset_value


def _run(st: _State, graph: ComputeGraph) -> None:
    """Every node of ``graph`` in topological order. A body graph shares the outer graph's
    buffers (by id), so it runs on the same memory with its own node table."""
    outer = st.graph
    st.graph = graph
    try:
        for nid in graph.topological_order():
            node = graph.node(nid)
            _RULES[node.kind](st, node)
    finally:
        st.graph = outer


def _child_graph(st: _State, node: GraphNode) -> None:
    _run(st, node.bodies[0])


def _conditional(st: _State, node: GraphNode) -> None:
    assert node.condition is not None  # verify's rule
    cond = st.graph.buffer(node.condition)
    for k in conditional_runs(node, lambda: st.view(cond).reshape(-1)[0], cond.name):
        _run(st, node.bodies[k])


def _nothing(st: _State, node: GraphNode) -> None:
    """Events, barriers and host callbacks order work but change no buffer (the evaluator
    does not run user callbacks: they may have side effects)."""


_RULES: dict[NodeKind, Callable[[_State, GraphNode], None]] = {
    NodeKind.KernelLaunch: _kernel,
    NodeKind.Memcpy: _memcpy,
    NodeKind.Memset: _memset,
    NodeKind.EventRecord: _nothing,
    NodeKind.EventWait: _nothing,
    NodeKind.HostCallback: _nothing,
    NodeKind.Barrier: _nothing,
    NodeKind.ChildGraph: _child_graph,
    NodeKind.Conditional: _conditional,
    # Graph-owned memory starts zeroed here as every buffer does (the first write decides,
    # and the builder warns about a read before it); a free changes no bytes.
    NodeKind.MemAlloc: _nothing,
    NodeKind.MemFree: _nothing,
}


def evaluate_detailed(
    graph: ComputeGraph, inputs: Mapping[str, np.ndarray] | None = None, *, seed: int = 0
) -> ReferenceResult:
    """Like :func:`evaluate`, and also says which inputs were generated.

    >>> from oxiwork.examples import quick_start
    >>> evaluate_detailed(quick_start()).generated
    ('input',)
    """
    inputs = dict(inputs or {})
    for name in inputs:
        try:
            graph.buffer_by_name(name)
        except UnknownBuffer:
            raise UnknownBuffer(
                f"inputs names buffer {name!r}, which is not in the graph; buffers are: "
                + ", ".join(repr(b.name) for b in graph.buffers[:20])
            ) from None
    st = _State(graph, inputs, seed)
    _run(st, graph)
    values = {b.name: st.view(b).copy() for b in graph.buffers}
    return ReferenceResult(values, tuple(st.generated))


def evaluate(
    graph: ComputeGraph, inputs: Mapping[str, np.ndarray] | None = None, *, seed: int = 0
) -> dict[str, np.ndarray]:
    """Run ``graph`` on the CPU and return the final contents of every buffer, by name.

    Parameters
    ----------
    graph
        The graph; every kernel that runs needs an op or a fused program.
    inputs
        Host data by buffer name, for buffers filled by HostToDevice copies and for
        external buffers. Missing ones are generated (see the module docstring).
    seed
        Seed for generated inputs.

    Raises
    ------
    UnsupportedOp
        A kernel has no op (opaque) or its op has no numpy reference.
    InvalidArgument
        Shapes of a kernel's buffers do not fit its op, or an input has the wrong size.

    Examples
    --------
    >>> from oxiwork.examples import quick_start
    >>> out = evaluate(quick_start(), seed=3)
    >>> bool((out["output"] == 2 * out["mid"]).all())
    True
    """
    return evaluate_detailed(graph, inputs, seed=seed).values
