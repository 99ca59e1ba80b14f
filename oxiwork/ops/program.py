"""A kernel node as a checked program of op steps.

Every kernel that computes values is a :class:`~oxiwork.node.FusedProgram`: a fused
kernel carries one, and a single-op kernel is a one-step program. :func:`bind` resolves
the ops, binds parameters, infers every step's shape from the buffers' shapes and checks
them against the output buffers, so the reference evaluator, the code generator and the
cost model all see the same validated description (and report the same clear errors).

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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from oxiwork.error import InvalidArgument, UnsupportedOp
from oxiwork.node import FusedProgram, FusedStep, GraphNode, NodeKind
from oxiwork.ops.table import OpDef, Shape, bind_params, get, infer_shape

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = ["BoundProgram", "BoundStep", "bind", "describe", "program_of", "run"]


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
    """Resolve ``node``'s program against ``graph``'s buffers; raise naming what is wrong."""
    where = describe(node)
    program = program_of(node)
    in_bufs = [graph.buffer(b) for b in node.inputs]
    out_bufs = [graph.buffer(b) for b in node.outputs]
    for buf in (*in_bufs, *out_bufs):
        if buf.dtype != "float32":
            raise UnsupportedOp(
                f"{where} uses buffer {buf.name!r} of dtype {buf.dtype}; ops compute on "
                "float32 only: allocate it with dtype='float32'"
            )
    in_shapes = tuple(b.array_shape for b in in_bufs)
    steps: list[BoundStep] = []
    for j, st in enumerate(program.steps):
        op = get(st.op)
        if op is None:
            raise UnsupportedOp(
                f"{where}: step {j} names op {st.op!r}, which is not registered; register "
                "it with oxiwork.ops.custom() first"
            )
        shapes: list[Shape] = []
        for kind, i in st.args:
            if kind == "in" and 0 <= i < len(in_shapes):
                shapes.append(in_shapes[i])
            elif kind == "step" and 0 <= i < j:
                shapes.append(steps[i].shape)
            else:
                raise InvalidArgument(
                    f"{where}: step {j} ({st.op}) reads {kind} {i}, which does not exist "
                    f"(the kernel has {len(in_shapes)} input buffer(s); steps may only read "
                    "earlier steps)"
                )
        step_where = where if len(program.steps) == 1 else f"{where} step {j}"
        try:
            params = bind_params(op, st.params, step_where)
            shape = infer_shape(op, shapes, params, step_where)
        except InvalidArgument as e:
            if len(program.steps) > 1 or len(shapes) != op.arity:
                raise
            # name the buffers too (built only on error: bind runs for every kernel)
            names = ", ".join(f"{b.name!r} {b.array_shape}" for b in in_bufs)
            raise InvalidArgument(str(e).replace(where, f"{where} reading {names}", 1)) from None
        steps.append(BoundStep(op, params, st.args, tuple(shapes), shape, st.node))
    if len(program.outputs) != len(out_bufs):
        raise InvalidArgument(
            f"{where} computes {len(program.outputs)} result(s) but writes "
            f"{len(out_bufs)} buffer(s); give it exactly {len(program.outputs)} output(s)"
        )
    for k, (s, buf) in enumerate(zip(program.outputs, out_bufs, strict=True)):
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
        program.outputs,
        in_shapes,
        tuple(b.array_shape for b in out_bufs),
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
            out = np.asarray(st.op.reference(args, **st.params), dtype=np.float32)
        if out.shape != st.shape:
            out = out.reshape(st.shape)
        values.append(out)
    return [
        values[s].reshape(shape) for s, shape in zip(bound.outputs, bound.out_shapes, strict=True)
    ]
