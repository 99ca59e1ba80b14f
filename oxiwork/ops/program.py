"""A kernel node as a checked program of op steps.

Every kernel that computes values is a :class:`~oxiwork.node.FusedProgram`: a fused
kernel carries one, and a single-op kernel is a one-step program. :func:`bind` resolves
the ops, binds parameters, infers every step's shape from the buffers' shapes and checks
them against the output buffers, so the reference evaluator, the code generator and the
cost model all see the same validated description (and report the same clear errors).

A graph is immutable, so a node's bound program is cached in the graph (``graph._cache``)
and fusion, code generation and the cost model bind each kernel once per graph;
:func:`share_bound` hands the entries of unchanged nodes on to a pass's output graph.
Kernels with the same :func:`signature` (what binding reads: ops, parameters, buffer
shapes and dtypes, not names or ids) are validated once: the first one's binding is
re-labelled for the others, so a 50,000-kernel graph of a few distinct layers binds in a
fraction of the time.

Example
-------
>>> from oxiwork.examples import quick_start
>>> g = quick_start()
>>> k = next(n for n in g.nodes if n.name == "scale")
>>> b = bind(g, k)
>>> b.steps[0].op.name, b.steps[0].params, b.steps[0].shape
('scale', {'alpha': 2.0}, (1024,))
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.node import Buffer, BufferId, FusedProgram, FusedStep, GraphNode, NodeKind
from oxiwork.ops.table import OpDef, Shape, bind_params, get, infer_shape

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = [
    "BoundProgram",
    "BoundStep",
    "bind",
    "describe",
    "program_of",
    "run",
    "run_into",
    "share_bound",
    "signature",
]

# graph._cache key: node id -> (node, its BoundProgram, the op name each step looked up)
_BOUND = "ops.bound"


@dataclass(frozen=True, slots=True)
class BoundStep:
    """A program step with its op resolved, parameters bound and shapes inferred."""

    op: OpDef
    params: dict[str, float]
    args: tuple[tuple[str, int], ...]
    in_shapes: tuple[Shape, ...]
    shape: Shape
    node: Any


@dataclass(frozen=True, slots=True)
class BoundProgram:
    """A kernel's program, checked against its buffers."""

    where: str
    steps: tuple[BoundStep, ...]
    outputs: tuple[int, ...]
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...]


def describe(node: GraphNode) -> str:
    """How messages name a node: ``kernel 'relu' (id 3)``.

    >>> from oxiwork.node import GraphNode, NodeId, NodeKind
    >>> describe(GraphNode(NodeId(3), "relu", NodeKind.KernelLaunch))
    "kernel 'relu' (id 3)"
    """
    kind = "kernel" if node.kind is NodeKind.KernelLaunch else node.kind.value
    return f"{kind} {node.name!r} (id {int(node.id)})"


def program_of(node: GraphNode) -> FusedProgram:
    """``node.fused``, or the one-step program of a single-op kernel.

    Raises :class:`~oxiwork.error.UnsupportedOp` for an opaque kernel (no op).
    """
    if node.fused is not None:
        return node.fused
    if node.op is None or get(node.op) is None:
        what = "has no op" if node.op is None else f"names op {node.op!r}, which is not registered"
        raise UnsupportedOp(
            f"{describe(node)} {what}, so its values cannot be computed: name the kernel "
            "after a registered op (see oxiwork.ops.REGISTRY), call .op('<name>') on its "
            f"KernelBuilder, or register one with oxiwork.ops.custom({node.name!r}, "
            "reference=..., source=...)"
        )
    step = FusedStep(
        node.op, node.params, tuple(("in", k) for k in range(len(node.inputs))), node.id
    )
    return FusedProgram((step,), (0,))


def bind(graph: ComputeGraph, node: GraphNode) -> BoundProgram:
    """Resolve ``node``'s program against ``graph``'s buffers; raise naming what is wrong.

    The result is cached in ``graph`` under ``node.id`` (shared: do not mutate it). A
    cached program is reused only for a node with the same program, name and buffers
    (``node`` need not be in ``graph``: fusion binds the kernels it is about to create)
    and only while the registry still maps every step to the same op, so re-registering
    an op with ``replace=True`` takes effect. Failures are not cached.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> k = g.nodes[1]
    >>> bind(g, k) is bind(g, k), bind(g, k).steps[0].shape
    (True, (1024,))
    """
    cache = graph._cache.get(_BOUND)
    if cache is None:
        cache = graph._cache[_BOUND] = {}
    hit = cache.get(node.id)
    if hit is not None and _same_program(hit[0], node) and _ops_current(hit[1], hit[2]):
        return hit[1]
    names = (node.op or "",) if node.fused is None else tuple(st.op for st in node.fused.steps)
    # Kernels with the same signature bind to the same steps and shapes (a layer repeated
    # 12 times, 50,000 relus of one shape): validate the first, re-label it for the rest.
    key = signature(graph, node)
    template = _TEMPLATES.get(key) if key is not None else None
    if template is not None and _ops_current(template, names):
        bound = _relabel(template, node)
    else:
        bound = _bind(graph, node)
        if key is not None:
            if len(_TEMPLATES) >= _MAX_TEMPLATES:
                _TEMPLATES.clear()  # a crude bound: distinct signatures are few in practice
            _TEMPLATES[key] = bound
    cache[node.id] = (node, bound, names)
    return bound


# What a buffer contributes to binding: every field but its identity (id, name) and the
# arena offset a memory plan sets. Taken from the dataclass so a field added to Buffer
# (e.g. a view's base and strides) is part of the signature without anyone remembering.
_BUFFER_SPEC = operator.attrgetter(
    *(f.name for f in fields(Buffer) if f.name not in ("id", "name", "offset"))
)
# signature -> a BoundProgram of some kernel with it (see bind); process-wide, because a
# signature names no graph: it holds what _bind reads, and _bind reads nothing else.
_TEMPLATES: dict[Hashable, BoundProgram] = {}
_MAX_TEMPLATES = 1 << 16


def signature(graph: ComputeGraph, node: GraphNode) -> Hashable | None:
    """What :func:`bind` reads of ``node`` and its buffers, but not its identity.

    Two kernels with equal signatures bind to the same steps, shapes and parameters (only
    the names in messages and each step's origin differ) and have the same cost; ``None``
    when a parameter is unhashable (such a kernel is bound on its own). The op names are
    part of it, the ops they resolve to are not (the registry can change: see
    :func:`bind`). Buffers enter by everything but their id, name and arena offset, and by
    which of the kernel's inputs and outputs are the same buffer.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> relu, scale = g.nodes[1], g.nodes[2]
    >>> signature(g, relu) == signature(g, relu.replace(name="other")), signature(g, relu) == signature(g, scale)
    (True, False)
    """
    ids = (*node.inputs, *node.outputs)
    buffer = graph.buffer
    specs = tuple([_BUFFER_SPEC(buffer(b)) for b in ids])
    # in-place kernels and repeated inputs: which positions name the same buffer
    alias = None if len(set(ids)) == len(ids) else tuple([ids.index(b) for b in ids])
    fused = node.fused
    program = (
        None
        if fused is None
        else (tuple([(st.op, st.params, st.args) for st in fused.steps]), fused.outputs)
    )
    key = (node.op, node.params, program, len(node.inputs), specs, alias)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _relabel(template: BoundProgram, node: GraphNode) -> BoundProgram:
    """``template`` (bound for a kernel with ``node``'s signature) as ``node``'s program."""
    fused = node.fused
    origins = (node.id,) if fused is None else tuple([st.node for st in fused.steps])
    return BoundProgram(
        describe(node),
        tuple(
            [
                BoundStep(st.op, st.params, st.args, st.in_shapes, st.shape, origin)
                for st, origin in zip(template.steps, origins, strict=True)
            ]
        ),
        template.outputs,
        template.in_shapes,
        template.out_shapes,
    )


def share_bound(src: ComputeGraph, dst: ComputeGraph) -> None:
    """Let ``dst`` reuse ``src``'s bound programs for the nodes a pass left unchanged.

    An entry moves when ``dst`` has a node with that id, the same program and name, and
    each of its buffers is the same in both graphs: binding it in ``dst`` would give an
    equal result. Passes that rebuild a graph around unchanged kernels (fusion, streams)
    call it so the cost model does not bind every kernel again.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> h = g.with_changes(edges=g.edges)
    >>> b = bind(g, g.nodes[1])
    >>> share_bound(g, h)
    >>> bind(h, h.nodes[1]) is b
    True
    """
    cache = src._cache.get(_BOUND)
    if not cache:
        return
    out = dst._cache.get(_BOUND)
    if out is None:
        out = dst._cache[_BOUND] = {}
    for nid, entry in cache.items():
        if nid in out or not dst.has_node(nid):
            continue
        node = dst.node(nid)
        if not _same_program(entry[0], node):
            continue
        if all(_same_buffer(src, dst, b) for b in (*node.inputs, *node.outputs)):
            out[nid] = (node, entry[1], entry[2])


def _same_program(a: GraphNode, b: GraphNode) -> bool:
    """Would ``a`` and ``b`` (same id) bind to the same program? (what :func:`_bind` reads)"""
    return a is b or (
        a.name == b.name
        and a.kind is b.kind
        and a.op == b.op
        and a.params == b.params
        and a.fused == b.fused
        and a.inputs == b.inputs
        and a.outputs == b.outputs
    )


def _ops_current(bound: BoundProgram, names: tuple[str, ...]) -> bool:
    """Does the registry still resolve every step of ``bound`` to the op it was bound to?"""
    return all(get(name) is st.op for name, st in zip(names, bound.steps, strict=True))


def _same_buffer(src: ComputeGraph, dst: ComputeGraph, bid: BufferId) -> bool:
    # both graphs hold ``bid``: the node's own graph validated it, and the cached node
    # (same buffers) was bound in ``src``
    a, b = src.buffer(bid), dst.buffer(bid)
    # what binding reads: not the name (messages only) or the offset a memory plan sets
    return a is b or (a.dtype == b.dtype and a.size_bytes == b.size_bytes and a.shape == b.shape)


def _in_args(k: int) -> tuple[tuple[str, int], ...]:
    """The arguments of a single-op kernel with ``k`` inputs: ``("in", 0) ... ("in", k-1)``."""
    while len(_IN_ARGS) <= k:
        _IN_ARGS.append((*_IN_ARGS[-1], ("in", len(_IN_ARGS) - 1)))
    return _IN_ARGS[k]


_IN_ARGS: list[tuple[tuple[str, int], ...]] = [()]


def _bind(graph: ComputeGraph, node: GraphNode) -> BoundProgram:
    """:func:`bind` without the cache."""
    where = describe(node)
    # (op name, params, args, origin) per step, and which steps are results. A single-op
    # kernel's one-step program is spelled out here rather than built by program_of: this
    # runs for every kernel of every graph, so it skips allocating the FusedStep.
    specs: Sequence[tuple[str, Any, tuple[tuple[str, int], ...], Any]]
    if node.fused is None:
        if node.op is None or get(node.op) is None:
            program_of(node)  # raises UnsupportedOp naming what to do
        specs = ((node.op, node.params, _in_args(len(node.inputs)), node.id),)
        results: tuple[int, ...] = (0,)
    else:
        specs = [(st.op, st.params, st.args, st.node) for st in node.fused.steps]
        results = node.fused.outputs
    buffer = graph.buffer
    in_bufs = [buffer(b) for b in node.inputs]
    out_bufs = [buffer(b) for b in node.outputs]
    # Ops with CUDA C compute float32; a kernel whose ops only have numpy references (an
    # importer's opaque kernel) reads and writes its buffers in their own dtypes.
    typed = all((op := get(s[0])) is not None and not op.has_cuda for s in specs)
    for buf in (*in_bufs, *out_bufs):
        if buf.dtype != "float32" and not typed:
            raise UnsupportedOp(
                f"{where} uses buffer {buf.name!r} of dtype {buf.dtype}; ops compute on "
                "float32 only: allocate it with dtype='float32'"
            )
    in_shapes = tuple([b.array_shape for b in in_bufs])
    n_in = len(in_shapes)
    steps: list[BoundStep] = []
    for j, (name, given, args, origin) in enumerate(specs):
        op = get(name)
        if op is None:
            raise UnsupportedOp(
                f"{where}: step {j} names op {name!r}, which is not registered; register "
                "it with oxiwork.ops.custom() first"
            )
        shapes: list[Shape] = []
        for kind, i in args:
            if kind == "in" and 0 <= i < n_in:
                shapes.append(in_shapes[i])
            elif kind == "step" and 0 <= i < j:
                shapes.append(steps[i].shape)
            else:
                raise InvalidArgument(
                    f"{where}: step {j} ({name}) reads {kind} {i}, which does not exist "
                    f"(the kernel has {n_in} input buffer(s); steps may only read "
                    "earlier steps)"
                )
        step_where = where if len(specs) == 1 else f"{where} step {j}"
        try:
            params = bind_params(op, given, step_where)
            shape = infer_shape(op, shapes, params, step_where)
        except InvalidArgument as e:
            if len(specs) > 1 or len(shapes) != op.arity:
                raise
            # name the buffers too (built only on error: bind runs for every kernel)
            names = ", ".join(f"{b.name!r} {b.array_shape}" for b in in_bufs)
            raise InvalidArgument(str(e).replace(where, f"{where} reading {names}", 1)) from None
        steps.append(BoundStep(op, params, args, tuple(shapes), shape, origin))
    if len(results) != len(out_bufs):
        raise InvalidArgument(
            f"{where} computes {len(results)} result(s) but writes "
            f"{len(out_bufs)} buffer(s); give it exactly {len(results)} output(s)"
        )
    for k, (s, buf) in enumerate(zip(results, out_bufs, strict=True)):
        if not 0 <= s < len(steps):
            raise InvalidArgument(f"{where}: output {k} names step {s}, which does not exist")
        got = steps[s].shape
        if math.prod(got) != buf.num_elements:
            raise InvalidArgument(
                f"{where} writes a result of shape {got} ({math.prod(got)} elements) into "
                f"buffer {buf.name!r}, which holds {buf.num_elements} float32 elements; "
                f"allocate {buf.name!r} with shape={got}"
            )
    return BoundProgram(
        where,
        tuple(steps),
        results,
        in_shapes,
        tuple([b.array_shape for b in out_bufs]),
    )


def run(bound: BoundProgram, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``bound`` on float32 ``inputs`` with the ops' numpy references.

    Returns one array per output, shaped like the output buffers.
    """
    values: list[np.ndarray] = []
    for j, st in enumerate(bound.steps):
        if st.op.reference is None:
            raise UnsupportedOp(
                f"{bound.where}: op {st.op.name!r} (step {j}) has CUDA code but no numpy "
                f"reference; register it with oxiwork.ops.custom({st.op.name!r}, "
                "reference=..., replace=True) to compute it on the CPU"
            )
        args = [inputs[i] if kind == "in" else values[i] for kind, i in st.args]
        with np.errstate(all="ignore"):  # overflow, log of negatives: IEEE values, as on GPU
            out = np.asarray(
                st.op.reference(args, **st.params), dtype=np.float32 if st.op.has_cuda else None
            )
        if out.shape != st.shape:
            out = out.reshape(st.shape)
        values.append(out)
    return [
        values[s].reshape(shape) for s, shape in zip(bound.outputs, bound.out_shapes, strict=True)
    ]


def run_into(
    bound: BoundProgram, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> None:
    """Evaluate ``bound`` on float32 ``inputs`` and write the results into ``outputs``.

    ``outputs`` are float32 arrays with the output buffers' element counts (they may share
    memory with inputs, as an in-place kernel's do). A one-step program computes straight
    into its output with the op's in-place form (:meth:`~oxiwork.ops.table.OpDef.compute_into`,
    the op table's default rule when it has none); a fused one is evaluated with
    :func:`run` and copied. This is the simulator's only way to compute a kernel.

    >>> import numpy as np
    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> x = np.array([-1.0, np.nan] * 512, np.float32)
    >>> run_into(bind(g, g.nodes[1]), [x], [x])   # relu in place
    >>> x[:2]
    array([0., 0.], dtype=float32)
    """
    if len(bound.steps) == 1 and len(outputs) == 1:
        st = bound.steps[0]
        out = outputs[0]
        if out.size != math.prod(st.shape):
            raise InvalidArgument(
                f"{bound.where}: the op produces {math.prod(st.shape)} elements, but its "
                f"output holds {out.size}"
            )
        args = [inputs[i] for _, i in st.args]
        st.op.compute_into(args, out.reshape(st.shape), st.params)
        return
    for out, r in zip(outputs, run(bound, inputs), strict=True):
        if r.size != out.size:
            raise InvalidArgument(
                f"{bound.where}: the program produced {r.size} elements for an output "
                f"that holds {out.size}"
            )
        np.copyto(out, r.reshape(out.shape), casting="unsafe")
