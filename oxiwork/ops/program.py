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
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.node import Buffer, BufferId, FusedProgram, FusedStep, GraphNode, NodeKind
from oxiwork.ops.table import (
    FusionClass,
    OpDef,
    Shape,
    bind_params,
    get,
    infer_dtype,
    infer_shape,
    widen,
)
from oxiwork.verify import KERNEL_CHECKS

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = [
    "BoundProgram",
    "BoundStep",
    "bind",
    "buffer_specs",
    "check_dtypes",
    "describe",
    "program_of",
    "run",
    "run_into",
    "share_bound",
    "signature",
    "signature_key",
]

# graph._cache key: node id -> (node, its BoundProgram, the op name each step looked up)
_BOUND = "ops.bound"
# graph._cache key: buffer id -> what it contributes to a signature (buffer_specs)
_SPECS = "ops.buffer_specs"


@dataclass(frozen=True, slots=True)
class BoundStep:
    """A program step with its op resolved, parameters bound, shapes and dtype inferred.

    ``dtype`` is the step's result dtype (one per step: a fused kernel rounds each step's
    value to it, as the unfused kernel's store into its buffer did).
    """

    op: OpDef
    params: dict[str, float]
    args: tuple[tuple[str, int], ...]
    in_shapes: tuple[Shape, ...]
    shape: Shape
    node: Any
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class BoundProgram:
    """A kernel's program, checked against its buffers."""

    where: str
    steps: tuple[BoundStep, ...]
    outputs: tuple[int, ...]
    in_shapes: tuple[Shape, ...]
    out_shapes: tuple[Shape, ...]
    in_dtypes: tuple[str, ...] = ()
    out_dtypes: tuple[str, ...] = ()


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
# (op id, given parameters, argument kinds, shapes, dtypes) -> (op, parameters, shape, the
# shapes it reads, dtype) of a step of a fused program that bound (see _bind); process-wide
# like the templates. Tests set it to None: every step is then bound by the rules alone.
_STEPS: dict[Hashable, tuple[Any, ...]] | None = {}


def buffer_specs(graph: ComputeGraph) -> Mapping[BufferId, tuple[Any, ...]]:
    """What each buffer of ``graph`` contributes to a :func:`signature`, by id (cached).

    For callers taking the signature of many kernels of one graph (the cost model): one
    look-up per buffer access instead of a buffer look-up and a field read each.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> signature(g, g.nodes[1], buffer_specs(g)) == signature(g, g.nodes[1])
    True
    """
    specs = graph._cache.get(_SPECS)
    if specs is None:
        specs = graph._cache[_SPECS] = MappingProxyType(
            {b.id: _BUFFER_SPEC(b) for b in graph.buffers}
        )
    return specs


def signature(
    graph: ComputeGraph,
    node: GraphNode,
    specs: Mapping[BufferId, tuple[Any, ...]] | None = None,
) -> Hashable | None:
    """What :func:`bind` reads of ``node`` and its buffers, but not its identity.

    Two kernels with equal signatures bind to the same steps, shapes and parameters (only
    the names in messages and each step's origin differ) and have the same cost; ``None``
    when a parameter is unhashable (such a kernel is bound on its own). The op names are
    part of it, the ops they resolve to are not (the registry can change: see
    :func:`bind`). Buffers enter by everything but their id, name and arena offset, and by
    which of the kernel's inputs and outputs are the same buffer; ``specs``, when given,
    is :func:`buffer_specs` of ``graph``.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> relu, scale = g.nodes[1], g.nodes[2]
    >>> signature(g, relu) == signature(g, relu.replace(name="other")), signature(g, relu) == signature(g, scale)
    (True, False)
    """
    if specs is None:
        buffer = graph.buffer
        spec_of = lambda b: _BUFFER_SPEC(buffer(b))  # noqa: E731
    else:
        spec_of = specs.__getitem__
    key = signature_key(node, spec_of)
    try:
        hash(key)
    except TypeError:
        return None
    return key


# What a fused step contributes to a signature: all but its origin.
_STEP_KEY = operator.attrgetter("op", "params", "args")


def signature_key(node: GraphNode, spec_of: Callable[[BufferId], Any]) -> tuple[Any, ...]:
    """:func:`signature` of ``node`` with each buffer's spec given by ``spec_of`` (a
    look-up in :func:`buffer_specs`), without checking that it is hashable: for callers
    that look many kernels up in a dict anyway (the cost model), where an unhashable key
    raises ``TypeError`` at the look-up.

    >>> from oxiwork.examples import quick_start
    >>> g = quick_start()
    >>> signature_key(g.nodes[1], buffer_specs(g).__getitem__) == signature(g, g.nodes[1])
    True
    """
    ids = node.inputs + node.outputs
    # in-place kernels and repeated inputs: which positions name the same buffer
    alias = None if len(set(ids)) == len(ids) else tuple([ids.index(b) for b in ids])
    fused = node.fused
    program = None if fused is None else (tuple(map(_STEP_KEY, fused.steps)), fused.outputs)
    return (node.op, node.params, program, len(node.inputs), tuple(map(spec_of, ids)), alias)


def _relabel(template: BoundProgram, node: GraphNode) -> BoundProgram:
    """``template`` (bound for a kernel with ``node``'s signature) as ``node``'s program."""
    fused = node.fused
    origins = (node.id,) if fused is None else tuple([st.node for st in fused.steps])
    return BoundProgram(
        describe(node),
        tuple(
            [
                BoundStep(st.op, st.params, st.args, st.in_shapes, st.shape, origin, st.dtype)
                for st, origin in zip(template.steps, origins, strict=True)
            ]
        ),
        template.outputs,
        template.in_shapes,
        template.out_shapes,
        template.in_dtypes,
        template.out_dtypes,
    )


def share_bound(src: ComputeGraph, dst: ComputeGraph, *, offsets_only: bool = False) -> None:
    """Let ``dst`` reuse ``src``'s bound programs for the nodes a pass left unchanged.

    An entry moves when ``dst`` has a node with that id, the same program and name, and
    each of its buffers is the same in both graphs: binding it in ``dst`` would give an
    equal result. Passes that rebuild a graph around unchanged kernels (fusion, streams)
    call it so the cost model does not bind every kernel again. ``offsets_only``: the
    caller vouches that ``dst`` holds ``src``'s very nodes and its buffers but for their
    arena offsets (the memory pass), so every entry moves without a comparison.

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
    if offsets_only and src.nodes is dst.nodes:  # binding never reads an offset
        for nid, entry in cache.items():
            out.setdefault(nid, entry)
        return
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


def _infer_reading(
    op: OpDef,
    shapes: list[Shape],
    args: tuple[tuple[str, int], ...],
    params: dict[str, float],
    where: str,
) -> Shape:
    """``op``'s output shape; an element-wise step may read an earlier step's value reshaped.

    A fused kernel's steps see the values of earlier steps in those steps' own shapes, where
    the unfused kernels read them from buffers that may be reshapes of them ((8, 5) for a
    (2, 4, 5) result; a reshape moves no element of a row-major buffer). So when an
    element-wise step's shape rule refuses, an earlier step's value is read in the shape of
    an input buffer of the step with the same element count (``shapes`` is updated); fusion
    checks element counts, not shapes, for exactly this reason.
    """
    try:
        return infer_shape(op, shapes, params, where)
    except InvalidArgument:
        if op.fusion_class not in (FusionClass.ELEMENTWISE, FusionClass.BROADCAST):
            raise
        held = [s for (kind, _), s in zip(args, shapes, strict=True) if kind == "in"]
        alt = list(shapes)
        for k, (kind, _) in enumerate(args):
            same = [s for s in held if math.prod(s) == math.prod(shapes[k])]
            if kind == "step" and same:
                alt[k] = same[0]
        if alt == shapes:
            raise
        shape = infer_shape(op, alt, params, where)
        shapes[:] = alt
        return shape


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
    in_dtypes = tuple([b.dtype for b in in_bufs])
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
        dtypes: list[str] = []
        for kind, i in args:
            if kind == "in" and 0 <= i < n_in:
                shapes.append(in_shapes[i])
                dtypes.append(in_dtypes[i])
            elif kind == "step" and 0 <= i < j:
                shapes.append(steps[i].shape)
                dtypes.append(steps[i].dtype)
            else:
                raise InvalidArgument(
                    f"{where}: step {j} ({name}) reads {kind} {i}, which does not exist "
                    f"(the kernel has {n_in} input buffer(s); steps may only read "
                    "earlier steps)"
                )
        # A step binds as every step with its op, parameters, kinds of arguments and their
        # shapes and dtypes does (what the rules below read), so a fused program's steps
        # repeat the work of other programs' (the same relu on the same shape): looked up.
        memo = _STEPS
        hit = key = None
        if memo is not None and len(specs) > 1:
            key = (id(op), given, tuple([kind for kind, _ in args]), tuple(shapes), tuple(dtypes))
            try:
                hit = memo.get(key)
            except TypeError:  # an unhashable parameter: bound on its own
                key = None
        if hit is not None and hit[0] is op:
            _, params, shape, read, dtype = hit
            shapes = list(read)
        else:
            step_where = where if len(specs) == 1 else f"{where} step {j}"
            try:
                params = bind_params(op, given, step_where)
                shape = _infer_reading(op, shapes, args, params, step_where)
                dtype = infer_dtype(op, dtypes, params, step_where)
            except InvalidArgument as e:
                if len(specs) > 1 or len(shapes) != op.arity:
                    raise
                # name the buffers too (built only on error: bind runs for every kernel)
                names = ", ".join(f"{b.name!r} {b.array_shape}" for b in in_bufs)
                raise InvalidArgument(
                    str(e).replace(where, f"{where} reading {names}", 1)
                ) from None
            if key is not None:
                if len(memo) >= _MAX_TEMPLATES:  # type: ignore[arg-type]
                    memo.clear()  # type: ignore[union-attr]
                # (the op itself kept with it: its id stays its own while the entry lives)
                memo[key] = (op, params, shape, tuple(shapes), dtype)  # type: ignore[index]
        if dtype is None:
            dtype = _buffer_dtype(step_where, name, j, results, [b.dtype for b in out_bufs])
        steps.append(BoundStep(op, params, args, tuple(shapes), shape, origin, dtype))
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
                f"buffer {buf.name!r}, which holds {buf.num_elements} {buf.dtype} elements; "
                f"allocate {buf.name!r} with shape={got}"
            )
        if steps[s].dtype != buf.dtype:
            raise InvalidArgument(_store_mismatch(where, steps[s].op.name, steps[s].dtype, buf))
    return BoundProgram(
        where,
        tuple(steps),
        results,
        in_shapes,
        tuple([b.array_shape for b in out_bufs]),
        in_dtypes,
        tuple([b.dtype for b in out_bufs]),
    )


def _buffer_dtype(
    where: str, name: str, j: int, results: Sequence[int], out_dtypes: Sequence[str]
) -> str:
    """The dtype of step ``j`` whose rule says "the buffer it writes" (a reference-only op)."""
    k = next((k for k, s in enumerate(results) if s == j), None)
    if k is None or k >= len(out_dtypes):
        raise InvalidArgument(
            f"{where} (op {name!r}) takes its dtype from the buffer it writes, but its "
            "result feeds another step; run it as its own kernel"
        )
    return out_dtypes[k]


def _store_mismatch(where: str, op_name: str, dtype: str, buf: Any) -> str:
    return (
        f"{where}: op {op_name!r} computes {dtype} here but writes buffer {buf.name!r} of "
        f"dtype {buf.dtype}; allocate {buf.name!r} with dtype={dtype!r}, or convert with a "
        f"cast kernel after it (op 'cast_{buf.dtype}')"
    )


# The (program, input dtypes, output dtypes) that fit, each with the op definitions it was
# checked against: a hit counts only while the registry holds those very definitions (an op
# registered again with replace=True may have another dtype rule). Programs repeat across
# a graph (every layer of a model), so most kernels are one lookup.
_DTYPES_CHECKED: dict[Any, Any] = {}


def check_dtypes(graph: ComputeGraph, node: GraphNode) -> None:
    """Refuse a kernel whose buffers' dtypes do not fit its ops (what :func:`bind` checks
    of dtypes, without shapes); kernels of unregistered ops (opaque) pass.

    Installed in :data:`oxiwork.verify.KERNEL_CHECKS`, so ``verify(graph)`` runs it.

    >>> from oxiwork import GraphBuilder, verify
    >>> b = GraphBuilder()
    >>> ids = b.alloc_external_buffer("ids", 32, dtype="int64")
    >>> y = b.alloc_buffer("y", 16)
    >>> _ = b.add_kernel("r", 1, 32).op("relu").inputs([ids]).outputs([y]).finish()
    >>> b.build()
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: kernel 'r' (id 0) (op 'relu'): input 0 is int64, but the op computes on float32, float16 or bfloat16 values: convert it first with a cast kernel (op 'cast_float32')
    """
    op = get(node.op) if node.op is not None else None
    if node.fused is None and op is None:
        return
    bufs = graph._cache["buf_index"]  # id -> buffer (graph.buffer without its checks)
    in_dt = tuple([bufs[b].dtype for b in node.inputs])
    out_bufs = [bufs[b] for b in node.outputs]
    out_dt = tuple([b.dtype for b in out_bufs])
    if node.fused is None:
        specs: Sequence[tuple[str, Any, tuple[tuple[str, int], ...]]] = (
            (node.op, node.params, _in_args(len(node.inputs))),
        )
        results: tuple[int, ...] = (0,)
        # (a str first: never equal to a fused program's key, whose first item is a tuple)
        key: Any = (node.op, node.params, len(node.inputs), in_dt, out_dt)
        current: Any = op
    else:
        specs = [(st.op, st.params, st.args) for st in node.fused.steps]
        results = node.fused.outputs
        key = (tuple((n, tuple(p), a) for n, p, a in specs), results, in_dt, out_dt)
        current = tuple([get(n) for n, _, _ in specs])
    try:
        seen = _DTYPES_CHECKED.get(key)
    except TypeError:  # an unhashable parameter value: check without the memo
        key = seen = None
    # (tuples compare their items by identity first: no OpDef field is compared on a hit)
    if seen is not None and (seen is current or seen == current):
        return
    # Only what passes is remembered: a message names its node, so it is made per node.
    hit = _dtype_problem(describe(node), specs, results, in_dt, out_bufs)
    if hit is None and key is not None and len(_DTYPES_CHECKED) < 100_000:
        _DTYPES_CHECKED[key] = current
    if hit is not None:
        raise InvalidArgument(hit)


def _dtype_problem(
    where: str,
    specs: Sequence[tuple[str, Any, tuple[tuple[str, int], ...]]],
    results: Sequence[int],
    in_dt: Sequence[str],
    out_bufs: Sequence[Any],
) -> str | None:
    dts: list[str] = []
    for j, (name, given, args) in enumerate(specs):
        op = get(name)
        if op is None:
            return None  # bind names the missing op
        step_where = where if len(specs) == 1 else f"{where} step {j}"
        try:
            params = bind_params(op, given, step_where)
        except InvalidArgument:
            params = op.defaults  # verify checks dtypes; bind names a wrong parameter
        try:
            ins = [in_dt[i] if kind == "in" else dts[i] for kind, i in args]
            dt = infer_dtype(op, ins, params, step_where)
            if dt is None:
                dt = _buffer_dtype(step_where, name, j, results, [b.dtype for b in out_bufs])
        except IndexError:
            return None  # a malformed program: verify's structure check names it
        except InvalidArgument as e:
            return str(e)
        dts.append(dt)
    for s, buf in zip(results, out_bufs, strict=False):
        if 0 <= s < len(dts) and dts[s] != buf.dtype:
            return _store_mismatch(where, specs[s][0], dts[s], buf)
    return None


KERNEL_CHECKS.append(check_dtypes)


def run(bound: BoundProgram, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``bound`` on ``inputs`` (in the buffers' dtypes) with the ops' references.

    Returns one array per output, shaped like the output buffers. Each step's value is
    rounded to the step's dtype (half inputs widened to float32 for ops that ``widen``),
    so a fused program computes what its unfused kernels stored.
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
        # a step may read an earlier value reshaped (_infer_reading)
        args = [
            a if a.shape == s else a.reshape(s) for a, s in zip(args, st.in_shapes, strict=True)
        ]
        if st.op.widen:
            args = [widen(a) for a in args]
        with np.errstate(all="ignore"):  # overflow, log of negatives: IEEE values, as on GPU
            out = np.asarray(st.op.reference(args, **st.params))
            if out.dtype.name != st.dtype:
                out = out.astype(st.dtype)
        if out.shape != st.shape:
            out = out.reshape(st.shape)
        values.append(out)
    return [
        values[s].reshape(shape) for s, shape in zip(bound.outputs, bound.out_shapes, strict=True)
    ]


def run_into(
    bound: BoundProgram, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]
) -> None:
    """Evaluate ``bound`` on ``inputs`` and write the results into ``outputs``.

    ``outputs`` are arrays in the output buffers' dtypes and element counts (they may share
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
