"""A PyTorch module in as a ComputeGraph: ``torch.export``, core ATen, one kernel per op.

:func:`from_module` exports a module with ``torch.export.export`` and lowers it to core
ATen with ``run_decompositions()``; :func:`from_exported_program` converts an
``ExportedProgram`` (whatever its op set) into a :class:`~oxiwork.graph.ComputeGraph`:

- every parameter, buffer, lifted constant and user input that the program reads is an
  *external* buffer named after it (``encoder.layer.0.attention.self.query.weight``,
  ``input_ids``), and :attr:`ImportedModel.inputs` holds its real value, ready for
  ``SequentialExecutor(plan).run(model.inputs)`` or :func:`oxiwork.reference.evaluate`;
- every ATen op that is not a view is one kernel, named after the module it came from
  (``node.meta["nn_module_stack"]``): ``encoder.layer.3.attention.softmax``. Where an op of
  the library (:data:`oxiwork.ops.REGISTRY`) computes exactly the same thing on the same
  shapes and dtypes (element-wise ops on shapes that broadcast, sum/mean/amax over any
  dims and softmax/log_softmax over any dim, layer-norm (affine too) over the last axis,
  ``mm``/``bmm``/``addmm``/``baddbmm``/
  ``linear`` whose operands may be views: a transposed weight or permuted attention heads
  is read in place by a strided matmul of :mod:`oxiwork.ops.lib_reduce`), the kernel uses it
  and may fuse; every other op is an *opaque* kernel whose op, registered with
  :func:`oxiwork.ops.custom`, carries a numeric reference that runs the ATen op on the CPU
  through torch. :attr:`ImportedModel.opaque` says which kernels are opaque and why;
- views (``view``, ``reshape``'s ``_unsafe_view``, ``permute``, ``expand``, ``slice``,
  ``select``, ``transpose``, ``t``, ``unsqueeze``, ``split``, ``as_strided`` ... any op
  whose schema says its result aliases its input) allocate nothing and get no node. A
  chain of views that keeps the elements in row-major order (reshapes of a row-major
  buffer) is the buffer itself: the consumer reads the base. Any other chain becomes a
  *view buffer* aliasing the base (:meth:`GraphBuilder.view
  <oxiwork.builder.GraphBuilder.view>`: offset and strides over the base's elements,
  found by running the chain on the base's element indices), so ``clone`` of a permute is
  the library's ``copy`` reading a strided view. A library op other than an element-wise
  one reads a non-contiguous view through an explicit ``copy`` kernel (named
  ``<view>.contiguous``), since its generated CUDA C reads whole row-major buffers;
- an element-wise op whose eager result keeps a permuted layout (an op of a permuted view)
  computes in that memory order: its library op writes a row-major buffer of the permuted
  shape, and the value is that buffer's permute back, with eager's strides;
- an element-wise op on operands of two dtypes (a bool mask times float32 values, an int64
  tensor plus a float) reads each operand torch converts through a ``cast_<dtype>`` kernel
  of its buffer (one per buffer and dtype, fusible), named ``<buffer>.to_<dtype>``: torch's
  type promotion converts every operand to their common dtype and computes in it (the
  result's, but for comparisons), so the library op then computes torch's values;
- ops with no tensor input (``scalar_tensor``, ``full``, ``arange``) and ops that read only
  their input's shape (``full_like``, ``zeros_like``, ``ones_like``) are computed once at
  import time and become constant external buffers (:attr:`ImportedModel.folded`);
- each graph output is read at the end by a DeviceToHost copy; :attr:`ImportedModel.outputs`
  names the output buffers in torch's output order.

Opaque ops are deduplicated by signature (ATen op, its non-tensor arguments, the views
folded into it, the shapes, strides and dtypes it reads and writes): the 12 identical
attention softmaxes of BERT share one registered op. Their names are
``torch_<aten name>_<12 hex digits of the signature's SHA-1>``, always valid C and Python
identifiers and never equal to a library op's name.

What is refused, with a :class:`TorchImportError` (a :class:`~oxiwork.error.GraphError`)
that quotes torch: a module ``torch.export`` cannot export (:class:`ExportFailed`:
data-dependent control flow, unsupported Python), and programs holding what today's IR
cannot express (:class:`UnsupportedModel`): dynamic (symbolic) shapes, ``torch.cond`` and
other higher-order ops, in-place mutation of the module's buffers or parameters (a module in
training mode: call ``module.eval()``), random draws (``torch.rand``, a dropout in
training: eager draws anew on every call), an empty tensor read by anything but ``cat``
into a result with elements, or returned (a tensor of no elements has no buffer and an op
whose result is empty no kernel: ``cat`` skips it, as torch does, ``slice_scatter`` of it is
its base, and an op of empty tensors and constants only folds), and dtypes outside
:data:`oxiwork.node.DTYPES` (complex, float8: the error names the dtype). float16 and
bfloat16 models import as they are (``model.half()``, ``model.to(torch.bfloat16)``); their
library ops compute in float32 and round once per op, as PyTorch's kernels do, and
``_to_copy`` (``.to(dtype)``) becomes a ``cast_<dtype>`` kernel, as do ``aten.to`` and
``type_as`` with a new dtype in programs not decomposed (never a view: they copy).

Example
-------
>>> import numpy as np, torch
>>> from oxiwork import ExecutionPlan, SequentialExecutor
>>> from oxiwork.importers.torch import from_module
>>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
>>> x = torch.randn(3, 4)
>>> model = from_module(net, (x,))
>>> [(n.name, n.op) for n in model.graph.kernels()]
[('0.addmm', 'linear'), ('1.relu', 'relu_nan'), ('2.addmm', 'linear')]
>>> model.opaque
()
>>> stats = SequentialExecutor(ExecutionPlan.build(model.graph)).run(model.inputs)
>>> (y,) = model.outputs_from(stats.outputs)
>>> bool(np.allclose(y, net(x).detach().numpy(), atol=1e-6))
True

References
----------
PyTorch documentation, "torch.export" (ExportedProgram, graph signature, nn_module_stack)
and "IRs" (the core ATen operator set and ``run_decompositions``).
"""

from __future__ import annotations

import functools
import hashlib
import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType, SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from oxiwork import ops
from oxiwork.builder import GraphBuilder
from oxiwork.error import GraphError, InvalidArgument
from oxiwork.node import DTYPES, MemcpyDir
from oxiwork.ops import lib_dtype, lib_reduce
from oxiwork.ops.lib_conv import cat_op
from oxiwork.ops.lib_reduce import Strided
from oxiwork.ops.table import COMPUTE_DTYPES, FLOAT_COMPUTE, INT_DTYPES, FusionClass, OpDef

if TYPE_CHECKING:
    from oxiwork.graph import ComputeGraph

__all__ = [
    "ExportFailed",
    "ImportedModel",
    "OpaqueOp",
    "PatternMatch",
    "TorchImportError",
    "UnsupportedModel",
    "from_exported_program",
    "from_module",
]

_THREADS = 256
_MAX_REASON_LINES = 12


class TorchImportError(GraphError):
    """A model that cannot be imported; the message quotes torch's reason where it gave one."""


class ExportFailed(TorchImportError):
    """``torch.export`` (or ``run_decompositions``) refused the module.

    ``reason`` is torch's own message (its first lines), also quoted in ``str(error)``.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class UnsupportedModel(TorchImportError):
    """The exported program holds something today's IR cannot express (dynamic shapes,
    control flow, mutation, an unsupported dtype, an empty tensor)."""


@dataclass(frozen=True, slots=True)
class OpaqueOp:
    """One opaque kernel: its name, the ATen op, the registered op, and why it is opaque."""

    kernel: str
    target: str
    op: str
    reason: str


@dataclass(frozen=True, slots=True)
class PatternMatch:
    """ATen nodes the importer did not convert one kernel each (``patterns=True``).

    ``pattern`` is ``"attention"`` (eager attention's chain as one ``strided_attention``
    kernel, named ``kernel``), ``"clone read in place"`` (a clone its matmuls read as a
    strided view: no kernel), ``"pad into convolutions"`` (a zero pad the convolutions
    reading it apply themselves: no kernel) or ``"unsorted topk sorted"`` (a
    ``topk(sorted=False)``, whose order torch leaves unspecified, computed in the sorted
    order, one kernel ``kernel`` per output used: an output that shows the order may differ
    from eager's, whose CPU order is ``std::nth_element``'s); ``nodes`` names the FX nodes it
    covers.
    """

    pattern: str
    nodes: tuple[str, ...]
    kernel: str = ""


@dataclass(frozen=True, slots=True)
class ImportedModel:
    """What :func:`from_exported_program` returns.

    Attributes
    ----------
    graph
        The imported, verified graph.
    inputs
        Value of every external buffer by name (parameters, buffers, lifted and folded
        constants, and the user inputs of the example call): pass it to
        ``SequentialExecutor(plan).run(...)``. Read-only; copy it to change user inputs.
    outputs
        Names of the output buffers, in torch's output order.
    output_shapes
        torch's shape of each output (a 0-d output is held in a buffer of shape ``(1,)``).
    user_inputs
        Names of the buffers holding the module's tensor inputs, in torch's order.
    opaque
        The opaque kernels, in graph order, with the reason each is opaque.
    targets
        Kernel name -> the ATen op it computes (``"aten.addmm.default"``).
    folded
        Names of the constant buffers: the program's lifted constants (tensors the module's
        code holds) and those computed at import time (ops without tensor inputs, ops reading
        only their input's shape, and ops reading only constants).
    name
        The model's name.
    mutated
        Names of the user inputs the module writes in place (``x.copy_(...)``,
        ``x[0] = ...``): the graph writes each new value into the input's own buffer (a
        DeviceToDevice copy, after every read of the old value) and reads it at the end,
        so a run's outputs hold it under the input's name.
    patterns
        Where the importer replaced several ATen nodes by one kernel, or a node by none
        (:class:`PatternMatch`), in graph order; empty with ``patterns=False``.
    eager_outputs
        The module's own outputs on the example call, in torch's order and shapes, as
        :func:`from_module` computed them once (eager PyTorch, ``torch.no_grad``, on copies
        of the inputs); what :class:`~oxiwork.widget.Workbench` compares the simulation
        with. ``None`` from :func:`from_exported_program`, which has no module to run.
    """

    graph: ComputeGraph
    inputs: Mapping[str, np.ndarray]
    outputs: tuple[str, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    user_inputs: tuple[str, ...]
    opaque: tuple[OpaqueOp, ...]
    targets: Mapping[str, str]
    folded: tuple[str, ...]
    name: str
    mutated: tuple[str, ...] = ()
    eager_outputs: tuple[np.ndarray, ...] | None = None
    patterns: tuple[PatternMatch, ...] = ()

    def outputs_from(self, values: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
        """The model's outputs, in torch's order and shapes, from a run's buffer values
        (``ExecutionStats.outputs`` or :func:`oxiwork.reference.evaluate`'s result)."""
        missing = [n for n in self.outputs if n not in values]
        if missing:
            raise InvalidArgument(
                f"the values hold no output buffer {missing[0]!r}; pass the outputs of a run "
                "that computed values (SequentialExecutor(plan).run(model.inputs).outputs)"
            )
        return tuple(
            np.asarray(values[n]).reshape(s)
            for n, s in zip(self.outputs, self.output_shapes, strict=True)
        )

    def opaque_counts(self) -> dict[str, int]:
        """Opaque kernels per ATen op, most frequent first."""
        counts: dict[str, int] = {}
        for o in self.opaque:
            counts[o.target] = counts.get(o.target, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# ----------------------------------------------------------------------------- torch access
def _torch() -> Any:
    try:
        import torch
    except ImportError:  # pragma: no cover - the [torch] extra is missing
        raise TorchImportError(
            "the torch importer needs PyTorch: pip install 'oxiwork[torch]'"
        ) from None
    return torch


_DTYPE_NAMES = {
    "torch.float32": "float32",
    "torch.float64": "float64",
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.int32": "int32",
    "torch.int64": "int64",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
}


def _dtype_name(dtype: Any, what: str) -> str:
    name = _DTYPE_NAMES.get(str(dtype))
    if name is None or name not in DTYPES:
        raise UnsupportedModel(
            f"{what} is a {dtype} tensor; the IR holds "
            f"{', '.join(n for n in _DTYPE_NAMES.values() if n in DTYPES)}: convert the model "
            "and its inputs (model.float()) before importing"
        )
    return name


def _to_numpy(t: Any) -> np.ndarray:
    """A CPU tensor's values as numpy (torch's .numpy() has no bfloat16: its bits are
    reinterpreted as ml_dtypes' bfloat16, the dtype oxiwork buffers hold)."""
    torch = _torch()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view("bfloat16")
    return t.numpy()


def _from_numpy(x: np.ndarray) -> Any:
    """The inverse of :func:`_to_numpy` (``x`` writeable and contiguous)."""
    torch = _torch()
    if x.dtype.name == "bfloat16":
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


@dataclass(frozen=True, slots=True)
class _Meta:
    """What a kernel reads or writes: torch shape, strides (None when contiguous or not
    reproducible), dtype name. ``ir_shape`` is the buffer shape (a 0-d tensor holds one
    element)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: str

    @property
    def ir_shape(self) -> tuple[int, ...]:
        return self.shape or (1,)

    @property
    def nbytes(self) -> int:
        return math.prod(self.ir_shape) * DTYPES[self.dtype]


def _meta(val: Any, what: str) -> _Meta:
    torch = _torch()
    if not isinstance(val, torch.Tensor):
        raise UnsupportedModel(f"{what} is a {type(val).__name__}, not a tensor")
    shape = tuple(val.shape)
    dynamic = [d for d in shape if not isinstance(d, int)]
    if dynamic:
        raise UnsupportedModel(
            f"{what} has a dynamic shape {tuple(str(d) for d in shape)} (symbols "
            f"{', '.join(str(d) for d in dynamic)}); the IR holds static shapes: export without "
            "dynamic_shapes, or with every dimension fixed"
        )
    if 0 in shape:
        raise UnsupportedModel(f"{what} is empty (shape {shape}); the IR has no empty buffers")
    dtype = _dtype_name(val.dtype, what)
    strides = tuple(int(s) for s in val.stride())
    return _Meta(shape, strides if _permuted_dense(shape, strides) else None, dtype)


def _permuted_dense(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True if ``strides`` lay ``shape`` out densely in an order other than row-major (a
    permuted layout, which :func:`_as_tensor` rebuilds exactly); False for row-major and
    for layouts with holes or overlaps (those are read as row-major)."""
    dims = sorted((st, -k) for k, (d, st) in enumerate(zip(shape, strides, strict=True)) if d > 1)
    expect = 1
    for st, k in dims:
        if st != expect:
            return False
        expect *= shape[-k]
    row_major = [-k for _, k in dims] == sorted((-k for _, k in dims), reverse=True)
    return not row_major


# ----------------------------------------------------------------------------- values
# (offset, strides) in elements of a buffer: element [i0, i1, ...] of a tensor is at
# offset + sum(i_d * strides[d]) of the buffer holding its base row-major
_Layout = tuple[int, tuple[int, ...]]


def _layout(val: Any, base: _Layout | None, viewed: bool) -> _Layout | None:
    """Where ``val``'s elements lie in the buffer of its base, as torch laid them out.

    A base tensor (``viewed`` False) has one when torch holds it row-major from the start of
    its storage, as its buffer does; a view of such a base has torch's own offset and
    strides (a permute or transpose, a slice, an expand with stride 0): so a library op can
    read the view in place. ``None`` when it cannot be known."""
    if viewed and base is None:
        return None
    if not viewed and not (val.is_contiguous() and val.storage_offset() == 0):
        return None
    strides = tuple(0 if d == 1 else int(st) for d, st in zip(val.shape, val.stride(), strict=True))
    return int(val.storage_offset()), strides


@dataclass(frozen=True, slots=True)
class _Tensor:
    """A tensor value during conversion: a base buffer and the views applied to it."""

    buffer: str
    base: _Meta
    chain: tuple[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]], ...] = ()
    list_views: bool = False  # the last view returns a list (split): index it first
    shape: tuple[int, ...] | None = None  # the viewed shape (None: the base's)
    layout: _Layout | None = None  # where the viewed elements lie in the buffer (_layout)


@dataclass(frozen=True, slots=True)
class _Pending:
    """A multi-output op (native_layer_norm...): one kernel per output that is used."""

    node: Any


@dataclass(frozen=True, slots=True)
class _Empty:
    """A tensor of no elements: no buffer (the IR has no empty buffers) and nothing to
    compute. An op whose result is empty is one too, whatever it reads; ``cat`` skips it,
    as torch does, and an op folded from constants reads it as an empty tensor. Any other
    op that reads one into a result with elements is refused."""

    shape: tuple[int, ...]
    dtype: Any  # torch.dtype


@dataclass(frozen=True, slots=True)
class _Scalar:
    """A value read from a computed tensor with ``.item()`` (``_local_scalar_dense``): data
    the IR's static shapes and parameters cannot hold, kept in ``tensor``, its one-element
    buffer. Only the comparisons and selections of ``torch.export``'s symbolic arithmetic
    read one (:func:`_scalar_ops`, computed as kernels on that buffer), and only to feed a
    run-time check (``aten._assert_scalar``, a kernel of op ``check``); anything else that
    reads one is refused."""

    tensor: _Tensor
    node: str  # the .item() node's name, for messages


@dataclass(frozen=True, slots=True)
class _Key:
    """An argument of a call the importer makes up (a scalar's comparison), standing for a
    value it holds under this key in the converter's environment."""

    name: str


@dataclass(frozen=True, slots=True, eq=False)  # (hashed as itself, as an FX node is)
class _MadeCall:
    """A call the importer makes up, read by :meth:`_Converter.kernel` as it reads an FX
    node: ``torch.export``'s scalar arithmetic on a :class:`_Scalar`, as the ATen op on its
    buffer."""

    target: Any
    args: tuple[Any, ...]
    name: str
    meta: dict[str, Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


def _empty_value(val: Any) -> Any:
    """``val`` (a node's meta value) as :class:`_Empty` values if it is a tensor of no
    elements, or a tuple or list of only such tensors; else None."""
    torch = _torch()
    if isinstance(val, torch.Tensor):
        shape = tuple(val.shape)
        if all(isinstance(d, int) for d in shape) and 0 in shape:
            return _Empty(shape, val.dtype)
        return None
    if isinstance(val, (tuple, list)) and val:
        each = [_empty_value(v) for v in val]
        return tuple(each) if all(e is not None for e in each) else None
    return None


@dataclass(frozen=True, slots=True)
class _Arg:
    """A tensor argument of a kernel's op: kernel input ``index`` with views ``chain``."""

    index: int
    chain: tuple[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]], ...]
    base: _Meta
    shape: tuple[int, ...]  # after the views
    layout: _Layout | None = None  # where its elements lie in the buffer (_layout)
    cast: str | None = None  # read through a cast of its buffer to this dtype (_promoted)


@dataclass(frozen=True, slots=True)
class _Call:
    """One op application, as the library rules and the opaque reference see it."""

    target: Any
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    ins: tuple[_Meta, ...]
    out: _Meta
    index: int | None
    patterns: bool = True  # from_exported_program(patterns=...): the rules' choices too

    @property
    def tensor_args(self) -> list[_Arg]:
        return [a for a in _leaves(self.args) if isinstance(a, _Arg)]

    def kw(self, name: str, default: Any = None) -> Any:
        return dict(self.kwargs).get(name, default)


# Ops whose result depends on their tensor input's shape, dtype and layout only, never on
# its values: folded into constants like ops without tensor inputs (Converter.fold).
# (empty_like is not: its elements are whatever the memory held.)
_SHAPE_ONLY = frozenset(
    {"aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default"}
)


def _physical_order(meta: _Meta) -> tuple[int, ...]:
    """The axes of a permuted-dense layout (``meta.strides``) from outermost to innermost in
    memory (size-1 axes, whose stride means nothing, where they stand)."""
    strides = meta.strides or ()
    return tuple(sorted(range(len(strides)), key=lambda k: (-strides[k], k)))


def _permuted(v: _Tensor, order: tuple[int, ...]) -> _Tensor:
    """``v`` as an operand of a result computed in memory ``order``: leading unit axes up to
    the result's rank (as broadcasting aligns it), then its axes permuted to ``order``."""
    torch = _torch()
    shape = tuple(v.shape if v.shape is not None else v.base.shape)
    lead = len(order) - len(shape)
    steps = tuple((torch.ops.aten.unsqueeze.default, (0,), ()) for _ in range(lead))
    steps += ((torch.ops.aten.permute.default, (list(order),), ()),)
    full = (1,) * lead + shape
    layout = None
    if v.layout is not None:
        offset, strides = v.layout
        aligned = (0,) * lead + tuple(strides)
        layout = (offset, tuple(aligned[k] for k in order))
    return _Tensor(
        v.buffer, v.base, (*v.chain, *steps), False, tuple(full[k] for k in order), layout
    )


def _elementwise(op: str) -> bool:
    """Does library op ``op`` compute each output element from the same index of its
    inputs (so it may compute in any memory order)?"""
    return ops.get(op).fusion_class in (FusionClass.ELEMENTWISE, FusionClass.BROADCAST)


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _leaves(v)]
    return [x]


def _drop_unread_externals(conv: Any, graph: ComputeGraph, keep: Sequence[str]) -> ComputeGraph:
    """``graph`` without the external buffers nothing reads any more but those named in
    ``keep`` (the user's inputs, the outputs), and their values dropped from ``conv``:
    folded constants read only by ops that folded too (roll's ``arange``), and parameters or
    buffers read only by ops that made no kernel (LFM's rotary frequencies of attention
    layers a config has none of). A plan reads no such buffer, so the simulator would
    refuse its value as an input it does not know."""
    used = {b for n in graph.nodes for b in (*n.inputs, *n.outputs)}
    used |= {graph.storage(b) for b in used}  # (a view read: its base too)
    dead = {b.name for b in graph.buffers if b.name in conv.values and b.id not in used}
    dead -= set(keep)
    if not dead:
        return graph
    gone = {graph.buffer_by_name(name).id for name in dead}
    # unread views of them go too (a read view keeps its base: it is used)
    dead |= {b.name for b in graph.buffers if b.base in gone and b.id not in used}
    for name in dead:
        conv.values.pop(name, None)
    conv.folded = [f for f in conv.folded if f not in dead]
    return graph.with_changes(buffers=[b for b in graph.buffers if b.name not in dead])


def _map_leaves(x: Any, f: Callable[[Any], Any]) -> Any:
    """``x`` with ``f`` applied to every leaf of its nested lists and tuples."""
    if isinstance(x, (list, tuple)):
        return type(x)(_map_leaves(v, f) for v in x)
    return f(x)


def _op_name(target: Any) -> str:
    """``aten.addmm.default`` for an OpOverload, the callable's name otherwise."""
    if hasattr(target, "_overloadname"):  # str() of an OpOverload is its qualified name
        return str(target)
    return str(getattr(target, "__name__", target))


def _base_name(target: Any) -> str:
    """The op's short name for kernel names: ``aten._softmax.default`` -> ``softmax``."""
    schema = getattr(target, "_schema", None)
    name = schema.name.split("::", 1)[-1] if schema is not None else str(target)
    return name.strip("_") or name


def _is_view(target: Any) -> bool:
    schema = target._schema
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def _converts(node: Any) -> bool:
    """Is ``node`` a ``to`` (``aten.to.dtype``, ``.other``, ``.device``...) that changes the
    dtype? Its schema says it may return its input (an alias), which it does only when
    nothing changes; with a new dtype it is a copy in that dtype, a cast, not a view of its
    input's bytes."""
    if _base_name(node.target) != "to" or not node.args:
        return False
    src, out = getattr(node.args[0], "meta", {}).get("val"), node.meta.get("val")
    return getattr(src, "dtype", None) is not None and src.dtype != getattr(out, "dtype", None)


def _mutates(target: Any) -> bool:
    schema = target._schema
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _draws_random(node: Any) -> bool:
    """Does ``node`` draw random numbers (an ATen op tagged ``nondeterministic_seeded``:
    rand, randn, bernoulli, a dropout in training...)? A dropout told not to train, or with
    ``p`` 0, is the identity and draws nothing."""
    torch = _torch()
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    if "dropout" in _base_name(node.target):
        p, train = (*node.args[1:], *([None] * 2))[:2]
        p, train = node.kwargs.get("p", p), node.kwargs.get("train", train)
        return not (train is False or p == 0)
    return True


def _cpu(x: Any) -> Any:
    """``x`` with every torch.device replaced by the CPU (references run on the CPU)."""
    torch = _torch()
    if isinstance(x, torch.device):
        return torch.device("cpu")
    if isinstance(x, list):
        return [_cpu(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_cpu(v) for v in x)
    return x


# ----------------------------------------------------------------------------- references
def _as_tensor(torch: Any, x: np.ndarray, meta: _Meta) -> Any:
    """The torch tensor a kernel input holds, in the shape and strides eager had."""
    if not (x.flags.writeable and x.flags.c_contiguous):
        x = np.array(x)  # torch.from_numpy wants a writeable array
    t = _from_numpy(x).reshape(meta.shape)
    if meta.strides is not None:  # as eager laid it out, so as_strided views agree
        t = torch.empty_strided(meta.shape, meta.strides, dtype=t.dtype).copy_(t)
    return t


def _view_layout(v: _Tensor) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    """The view ``v`` as ``(shape, strides, offset)`` over its base buffer's row-major
    elements, or None if it is not one (negative steps, or no affine map).

    The chain runs on a tensor of the base's element indices, laid out as eager laid the
    base out (so ``as_strided`` sees eager's strides): the view's values are the indices
    it reads, and an affine map from view position to index is a strided view.
    """
    torch = _torch()
    base = v.base
    n = math.prod(base.ir_shape)
    idx = torch.arange(n, dtype=torch.int64).reshape(base.shape)
    if base.strides is not None:
        idx = torch.empty_strided(base.shape, base.strides, dtype=torch.int64).copy_(idx)
    with torch.no_grad():
        t = _apply_views(idx, v.chain)
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    shape = tuple(int(d) for d in t.shape)
    got = t.reshape(shape or (1,)).numpy()
    offset = int(got.reshape(-1)[0])
    strides = []
    for k, d in enumerate(shape or (1,)):  # (a 0-d view reads one element: no stride)
        if d > 1:
            at = [0] * len(shape)
            at[k] = 1
            strides.append(int(got[tuple(at)]) - offset)
        else:
            strides.append(0)
    if min(strides, default=0) < 0:
        return None
    dims = shape or (1,)
    want = offset + sum(
        np.arange(d).reshape([-1 if j == k else 1 for j in range(len(dims))]) * st
        for k, (d, st) in enumerate(zip(dims, strides, strict=True))
    )
    if not np.array_equal(np.broadcast_to(want, dims), got):
        return None
    return shape, tuple(strides), offset


def _row_major(shape: tuple[int, ...], strides: Sequence[int]) -> tuple[int, ...]:
    """``strides`` with each dimension's stride replaced by its row-major one (dimensions
    of size 1 keep theirs: their stride is never used): equal to ``strides`` iff the view
    is contiguous."""
    out = []
    step = 1
    for d, st in zip(reversed(shape), reversed(tuple(strides)), strict=True):
        out.append(st if d == 1 else step)
        step *= d
    return tuple(reversed(out))


_CLONE = "aten.clone.default"
_GEMM_TARGETS = frozenset(
    {"aten.bmm.default", "aten.mm.default", "aten.addmm.default", "aten.baddbmm.default"}
)


def _chain_layout(v: _Tensor) -> _Layout | None:
    """:func:`_view_layout` of ``v`` as a :data:`_Layout` (None if it has none)."""
    lay = _view_layout(v)
    if lay is None:
        return None
    shape, strides, offset = lay
    return offset, tuple(0 if d == 1 else st for d, st in zip(shape, strides, strict=False))


def _apply_views(
    t: Any, chain: Sequence[tuple[Any, tuple[Any, ...], tuple[tuple[str, Any], ...]]]
) -> Any:
    for target, args, kwargs in chain:
        t = target(t, *args, **dict(kwargs))
    return t


def _fill(x: Any, bases: list[Any]) -> Any:
    if isinstance(x, _Arg):
        return _apply_views(bases[x.index], x.chain)
    if isinstance(x, list):
        return [_fill(v, bases) for v in x]
    if isinstance(x, tuple):
        return tuple(_fill(v, bases) for v in x)
    return x


def _reference(call: _Call) -> Callable[[list[np.ndarray]], np.ndarray]:
    """A numpy reference running ``call`` through torch on the CPU."""
    target, args, kwargs, ins, index = call.target, call.args, call.kwargs, call.ins, call.index

    def reference(xs: list[np.ndarray]) -> np.ndarray:
        torch = _torch()
        bases = [_as_tensor(torch, x, m) for x, m in zip(xs, ins, strict=True)]
        with torch.no_grad():
            r = target(*_fill(args, bases), **{k: _fill(v, bases) for k, v in kwargs})
        if index is not None:
            r = r[index]
        return _to_numpy(r.detach().contiguous())

    return reference


def _shape_rule(
    call: _Call,
) -> Callable[[Sequence[tuple[int, ...]], Mapping[str, float]], tuple[int, ...]]:
    expected = tuple(m.ir_shape for m in call.ins)
    out = call.out.ir_shape

    def shape(in_shapes: Sequence[tuple[int, ...]], params: Mapping[str, float]) -> tuple[int, ...]:
        if tuple(tuple(s) for s in in_shapes) != expected:
            raise InvalidArgument(
                f"this imported op reads shapes {expected}, got {tuple(in_shapes)}; it was "
                "registered for one call site of the model and computes nothing else"
            )
        return out

    return shape


# op name -> the signature it was registered for (a name is a hash: check for collisions)
_SIGNATURES: dict[str, str] = {}


def _signature(call: _Call) -> str:
    return repr((_op_name(call.target), call.args, call.kwargs, call.ins, call.out, call.index))


def _opaque_op(call: _Call) -> OpDef:
    """The registered opaque op computing ``call``; registered on first use."""
    sig = _signature(call)
    ident = re.sub(r"\W", "_", _base_name(call.target)).strip("_")[:40] or "op"
    name = f"torch_{ident}_{hashlib.sha1(sig.encode()).hexdigest()[:12]}"
    op = ops.get(name)
    if op is not None:
        if _SIGNATURES.get(name) != sig:
            raise InvalidArgument(
                f"an op named {name!r} is already registered for something else; unregister "
                f"it (oxiwork.ops.REGISTRY.pop({name!r})) before importing"
            )
        return op
    op = ops.custom(
        name,
        reference=_reference(call),
        arity=len(call.ins),
        fusion_class=FusionClass.OPAQUE,
        shape=_shape_rule(call),
    )
    _SIGNATURES[name] = sig
    return op


# ----------------------------------------------------------------------------- library rules
# One rule per ATen op that some library op computes exactly: it returns (library op,
# params, the call's tensor arguments in the library op's input order), or why not.
_Rule = Callable[[_Call], "tuple[str, dict[str, float], list[_Arg]] | str"]


# Views that keep the row-major order of the elements (a buffer holds its tensor's elements
# row-major): a library op can read the base buffer in place of such a view.
_RESHAPES = frozenset(
    {
        "aten.view.default",
        "aten._unsafe_view.default",
        "aten.reshape.default",
        "aten.unsqueeze.default",
        "aten.squeeze.default",
        "aten.squeeze.dim",
        "aten.squeeze.dims",
        "aten.alias.default",
    }
)


def _plain(call: _Call, args: Sequence[Any], reshape_ok: bool = True) -> str | None:
    """Why ``args`` are not whole buffers, or reshapes of them (None if they are); their
    dtypes are checked against the library op's dtype rule (:func:`_library`)."""
    for a in args:
        if not isinstance(a, _Arg):
            return f"an operand is a Python {type(a).__name__}, not a tensor"
        # (reshapes back to the buffer's own shape, an alias: the buffer, even for an op that
        # reads shapes)
        # (a buffer holds its tensor's values row-major whatever eager's strides, which
        # only views read: a reshape is the buffer's values in the same order)
        reshaped = all(_op_name(t) in _RESHAPES for t, _, _ in a.chain)
        if a.chain and not (reshaped and (reshape_ok or tuple(a.shape) == a.base.shape)):
            views = ", ".join(
                _base_name(t) if hasattr(t, "_schema") else "getitem" for t, _, _ in a.chain
            )
            return f"it reads a view ({views}) of its input; library ops read whole buffers"
    return None


def _same(call: _Call, args: Sequence[_Arg]) -> str | None:
    shapes = [a.shape for a in args]
    if any(s != call.out.shape for s in shapes):
        return (
            f"its operands broadcast ({' and '.join(map(str, shapes))} -> {call.out.shape}); "
            "library element-wise ops need equal shapes"
        )
    held = {a.base.ir_shape for a in args}
    if len(held) > 1:
        return (
            f"its operands are reshapes of buffers of shapes {sorted(held)}; the library op "
            "needs buffers of one shape"
        )
    return None


def _broadcasts(call: _Call, args: Sequence[_Arg]) -> str | None:
    """Why the library's broadcasting element-wise ops cannot compute ``call`` on the buffers
    behind ``args`` (None if they can).

    A library op broadcasts its buffers' own shapes (numpy rules), while torch broadcast the
    (possibly reshaped) views: they must read the same elements. An operand as large as the
    result is read element for element whatever its shape; a smaller one must be broadcast
    alike from its buffer's shape and from its view's.
    """
    held = [a.base.ir_shape for a in args]
    out = call.out.shape
    try:
        shape = ops.broadcast_shape(held)
    except ValueError:
        shape = None
    if shape is None or math.prod(shape) != math.prod(out):
        return (
            f"its operands are reshapes of buffers of shapes {sorted(set(held))}, which do not "
            f"broadcast to its result {out}; library ops broadcast their buffers' shapes"
        )
    for a, h in zip(args, held, strict=True):
        if math.prod(h) != math.prod(out) and ops.broadcast_terms(h, shape) != ops.broadcast_terms(
            a.shape, out
        ):
            return (
                f"it broadcasts a reshape ({h} read as {a.shape}) that its buffer's shape "
                "would broadcast differently; library ops broadcast their buffers' shapes"
            )
    return None


def _rows_kept(a: _Arg) -> bool:
    """Does the buffer behind ``a`` have ``a``'s last axis (so rows are the same)?"""
    return bool(a.shape) and a.base.ir_shape[-1] == a.shape[-1]


def _unary(lib: str, **fixed: tuple[Any, Any]) -> _Rule:
    """A rule for a one-input op; ``fixed[k] = (value the library computes, torch's default)``."""

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        for k, (want, default) in fixed.items():
            got = call.kw(k, default)
            if got != want:
                return f"{k}={got!r}; the library's {lib} computes {k}={want!r}"
        x = call.args[0]
        why = _plain(call, [x]) or _same(call, [x])
        return why or (lib, {}, [x])

    return rule


def _binary(lib: str) -> _Rule:
    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        if call.kw("alpha", 1) != 1 or len(call.args) > 2:
            return "it scales its second operand (alpha != 1); no library op does"
        args = list(call.args[:2])
        # operands of any broadcastable shapes (the mask add, a bias, a per-channel scale)
        return _plain(call, args) or _broadcasts(call, args) or (lib, {}, args)

    return rule


def _mul(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, y = call.args[:2]
    if isinstance(y, (int, float)) and not isinstance(y, bool) and math.isfinite(y):
        why = _plain(call, [x]) or _same(call, [x])
        return why or ("scale", {"alpha": float(y)}, [x])
    return _binary("mul")(call)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _scalar_or(lib: str, tensors: _Rule | None = None, alpha_scales: str = "other") -> _Rule:
    """``x op number`` as the scalar op ``lib`` (the number its parameter ``other``, times
    ``alpha`` where torch scales it), else ``tensors``' rule. ``alpha_scales="x"``: rsub's
    ``other - alpha * x``, which maps only for ``alpha == 1``."""

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x, y = call.args[:2]
        alpha = call.args[2] if len(call.args) > 2 else call.kw("alpha", 1)
        if _number(x) and isinstance(y, _Arg) and alpha == 1 and lib in _SWAPPED:
            # number op tensor (``1.0 - y`` exports as sub.Tensor(1.0, y))
            why = _plain(call, [y]) or _same(call, [y])
            return why or (_SWAPPED[lib], {"other": float(x)}, [y])
        if _number(y) and _number(alpha):
            if alpha_scales == "x" and alpha != 1:
                return f"it scales its tensor operand (alpha={alpha!r}); no library op does"
            other = float(y) * (float(alpha) if alpha_scales == "other" else 1.0)
            if not math.isfinite(other) or abs(other) > float(np.finfo(np.float32).max):
                return f"its scalar {other!r} is not a finite float32"
            why = _plain(call, [x]) or _same(call, [x])
            return why or (lib, {"other": other}, [x])
        if tensors is None:
            return f"its scalar operand is {y!r}, not a finite number"
        return tensors(call)

    return rule


# the scalar op computing ``number op x`` for each ``x op number`` (division has none)
_SWAPPED = {"add_scalar": "add_scalar", "sub_scalar": "rsub_scalar"}


def _gelu(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # torch's default is the exact erf form; approximate='tanh' is the library's gelu
    approximate = call.kw("approximate", "none")
    lib = {"none": "gelu_erf", "tanh": "gelu"}.get(approximate)
    if lib is None:
        return f"approximate={approximate!r}; the library computes 'none' and 'tanh'"
    return _unary(lib)(call)


def _pow(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, e = call.args[:2]
    if not _number(e) or abs(float(e)) > float(np.finfo(np.float32).max):
        return f"its exponent is {e!r}; the library's pow_scalar takes a finite float32"
    why = _plain(call, [x]) or _same(call, [x])
    return why or ("pow_scalar", {"exponent": float(e)}, [x])


def _hardtanh(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x = call.args[0]
    lo = call.args[1] if len(call.args) > 1 else call.kw("min_val", -1.0)
    hi = call.args[2] if len(call.args) > 2 else call.kw("max_val", 1.0)
    if not (_number(lo) and _number(hi)):
        return f"its bounds are {lo!r} and {hi!r}; the library's hardtanh takes numbers"
    why = _plain(call, [x]) or _same(call, [x])
    if why:
        return why
    if (lo, hi) == (0, 6):  # nn.ReLU6
        return "relu6", {}, [x]
    return "hardtanh", {"min_val": float(lo), "max_val": float(hi)}, [x]


def _clamp(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """``clamp`` (numbers ``min``, ``max``, either None), ``clamp_min``, ``clamp_max``:
    hardtanh with both bounds, the one-sided clamps with one."""
    name = _op_name(call.target)
    if name == "aten.clamp_min.default":
        (x, lo), hi = _argv(call, ("self", "min"), ()), None
    elif name == "aten.clamp_max.default":
        (x, hi), lo = _argv(call, ("self", "max"), ()), None
    else:
        x, lo, hi = _argv(call, ("self", "min", "max"), (None, None))
    # An infinite bound on its own side bounds nothing (max(x, -inf) and min(x, inf) are x,
    # NaN included): the clamp of the other bound (Falcon-H1 clamps at 0 and inf).
    given = lo, hi
    if isinstance(lo, float) and lo == -math.inf and hi is not None:
        lo = None
    if isinstance(hi, float) and hi == math.inf and lo is not None:
        hi = None
    if any(b is not None and not _number(b) for b in (lo, hi)) or (lo, hi) == (None, None):
        return (
            f"its bounds are {given[0]!r} and {given[1]!r}; the library's clamps take finite "
            "numbers"
        )
    why = _plain(call, [x]) or _same(call, [x])
    if why:
        return why
    if lo is None:
        return "clamp_max", {"max_val": float(hi)}, [x]
    if hi is None:
        return "clamp_min", {"min_val": float(lo)}, [x]
    if lo > hi:  # torch gives max everywhere; hardtanh's test of min first would not
        return f"its min {lo!r} exceeds its max {hi!r}; no library op clamps so"
    return "hardtanh", {"min_val": float(lo), "max_val": float(hi)}, [x]


def _clamp_tensor(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """``clamp`` by tensors (``aten.clamp.Tensor``, ``clamp_min.Tensor``,
    ``clamp_max.Tensor``): with one bound torch computes it as ``maximum(x, min)`` or
    ``minimum(x, max)`` (its maximum/minimum kernels: a NaN in x or in the bound is the
    result, operands broadcast, the dtype their promotion), which the library's maximum and
    minimum compute; with both, ``minimum(maximum(x, min), max)``, the library's
    ``clamp_tensors``."""
    name = _op_name(call.target)
    if name == "aten.clamp_min.Tensor":
        (x, lo), hi = _argv(call, ("self", "min"), ()), None
    elif name == "aten.clamp_max.Tensor":
        (x, hi), lo = _argv(call, ("self", "max"), ()), None
    else:
        x, lo, hi = _argv(call, ("self", "min", "max"), (None, None))
    if lo is not None and hi is not None:
        lib, args = "clamp_tensors", [x, lo, hi]
    else:
        lib, args = ("maximum", [x, lo]) if hi is None else ("minimum", [x, hi])
    # (a tie of -0.0 and 0.0 keeps x, as torch's scalar loop; its vector loop keeps the
    # bound: torch itself has no one choice there, as for torch.maximum)
    return _plain(call, args) or _broadcasts(call, args) or (lib, {}, args)


def _leaky_relu(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, slope = _argv(call, ("self", "negative_slope"), (0.01,))
    if not _number(slope):
        return f"its slope is {slope!r}; the library's leaky_relu takes a finite number"
    why = _plain(call, [x]) or _same(call, [x])
    return why or ("leaky_relu", {"negative_slope": float(slope)}, [x])


def _elu(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    names = ("alpha", "scale", "input_scale")
    x, *given = _argv(call, ("self", *names), (1.0, 1.0, 1.0))
    if not all(_number(v) for v in given):
        return f"its constants are {given!r}; the library's elu takes finite numbers"
    why = _plain(call, [x]) or _same(call, [x])
    return why or ("elu", {n: float(v) for n, v in zip(names, given, strict=True)}, [x])


def _batch_norm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var,
    # momentum, eps): inference batch norm with the running statistics
    x, weight, bias, mean, var = call.args[:5]
    eps = call.args[6] if len(call.args) > 6 else call.kw("eps", 1e-5)
    if call.index != 0:
        return "its saved mean/rstd output is used; the library's batch_norm gives the result"
    if (weight is None) != (bias is None):
        return (
            "it has only one of the affine weight and bias; the library's batch_norm takes "
            "both or neither"
        )
    args = [x, mean, var] if weight is None else [x, mean, var, weight, bias]
    why = _plain(call, args)
    if why:
        return why
    if x.base.ir_shape != x.shape or len(x.shape) < 2:
        return (
            f"it normalises a reshape ({x.base.ir_shape} read as {x.shape}); the library's "
            "batch_norm takes the channel axis of its buffer's shape"
        )
    return "batch_norm" if weight is not None else "batch_norm_plain", {"eps": float(eps)}, args


def _where(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    return _where_of(call, list(call.args[:3]))


def _where_of(call: _Call, args: list[Any]) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """``call`` as the library's where of ``args`` (condition, then, else), or why not."""
    return _plain(call, args) or _broadcasts(call, args) or ("where", {}, args)


# ``x <op> ±inf`` as ``x <op'> ±FLT_MAX`` (key: op, the infinity is positive), exact for
# float32, float16 and bfloat16 ``x``: no such value lies strictly between FLT_MAX and inf,
# and a NaN compares false either way. (lt -inf and gt +inf, always false, and ne, ge -inf
# and le +inf, true but for NaN, have no such form.)
_INF_COMPARE = {
    ("eq", False): "lt",
    ("le", False): "lt",
    ("gt", False): "ge",
    ("eq", True): "gt",
    ("ge", True): "gt",
    ("lt", True): "le",
}


def _compare(name: str) -> _Rule:
    """``x <op> y`` of two tensors (broadcast) or of a tensor and a number (``name_scalar``,
    the number its parameter ``other``: exact on integers, whose rule wants a whole one)."""

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x, y = call.args[:2]
        if isinstance(y, bool):
            y = int(y)
        if isinstance(y, float) and math.isinf(y) and isinstance(x, _Arg):
            # (a parameter is finite: the comparison with the largest float32 that says
            # the same of every float32, float16 and bfloat16 value, NaN included)
            swap = _INF_COMPARE.get((name, y > 0))
            if swap is None or x.base.dtype not in ("float32", "float16", "bfloat16"):
                return f"it compares {x.base.dtype} values with {y}; no library op does"
            why = _plain(call, [x]) or _same(call, [x])
            big = float(np.finfo(np.float32).max)
            return why or (f"{swap}_scalar", {"other": big if y > 0 else -big}, [x])
        if _number(y) and isinstance(x, _Arg):
            if abs(float(y)) > float(np.finfo(np.float32).max):
                return f"its scalar {y!r} is not a finite float32"
            why = _plain(call, [x]) or _same(call, [x])
            return why or (f"{name}_scalar", {"other": float(y)}, [x])
        return _binary(name)(call)

    return rule


def _bitwise_not(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # ~ of a bool tensor is its logical negation (bitwise_not of the integer would flip
    # every bit of the byte)
    x = call.args[0]
    lib = "logical_not" if isinstance(x, _Arg) and x.base.dtype == "bool" else "bitwise_not"
    return _unary(lib)(call)


def _last_axis(call: _Call, dims: Any) -> bool:
    x = call.args[0]
    if not isinstance(x, _Arg) or not _rows_kept(x):
        return False
    nd = len(x.shape)
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    return nd >= 1 and [d % nd for d in dims] == [nd - 1]


def _any_axes(
    lib: str, last: str | None, extra: Callable[[_Call], str | None] | None = None
) -> _Rule:
    """A reduction over any dims: ``last`` (the library's last-axis op) where it reduces
    the last axis only, else ``lib`` over the axes of the buffer ``x`` is (sum_dims,
    mean_dims, amax_dims with ``dim``/``keepdim``; softmax_dim, log_softmax_dim with one
    ``dim``). ``dim`` None or [] is every axis, as in torch. ``extra``: why else the
    call does not map, if it can say so."""
    one = lib.endswith("_dim")

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x = call.args[0]
        why = _plain(call, [x]) or (extra(call) if extra is not None else None)
        if why:
            return why
        dims = call.args[1] if len(call.args) > 1 else call.kw("dim", [] if not one else -1)
        if last is not None and _last_axis(call, dims):
            return last, {}, [x]
        nd = len(x.shape)
        want = [dims] if isinstance(dims, int) else list(dims or range(nd))
        axes = _buffer_axes(x.base.ir_shape, x.shape, {d % nd for d in want})
        if axes is None or (one and len(axes) != 1):
            return (
                f"it reduces dims {dims!r} of a reshape ({x.base.ir_shape} read as {x.shape}) "
                f"that are not {'one axis' if one else 'whole axes'} of its buffer; the "
                f"library's {lib} reduces the axes of its buffer's shape"
            )
        if one:
            return lib, {"dim": float(axes[0])}, [x]
        keep = call.args[2] if len(call.args) > 2 else call.kw("keepdim", False)
        mask = lib_reduce.axes_mask(axes, len(x.base.ir_shape))
        return lib, {"axes": mask, "keepdim": float(bool(keep))}, [x]

    return rule


def _ints_or_floats(ints: _Rule, floats: _Rule) -> _Rule:
    """``ints`` where the first operand holds integers, else ``floats``."""

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x = call.args[0]
        return (ints if isinstance(x, _Arg) and x.base.dtype in INT_DTYPES else floats)(call)

    return rule


def _arg_extreme(name: str) -> _Rule:
    """argmax/argmin (``name``) over one dim or the flattened tensor: of floats the block
    reduction (a NaN counting as the extreme), of integers the element loop comparing them
    exactly (CLIP's text pooler takes the argmax of int32 token ids)."""
    return _ints_or_floats(_any_axes(f"{name}_int_dims", None), _any_axes(f"{name}_dims", None))


def _values_or_indices(values: _Rule, indices: _Rule) -> _Rule:
    """A two-output op (values, indices): ``values`` for output 0, ``indices`` for 1."""
    return lambda call: (indices if call.index == 1 else values)(call)


def _spread(lib: str) -> _Rule:
    """torch.var/torch.std over dims (``correction``, default 1: Bessel's)."""
    over = _any_axes(lib, None)

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        found = over(call)
        if isinstance(found, str):
            return found
        correction = call.kw("correction")
        name, params, args = found
        return (
            name,
            {**params, "correction": 1.0 if correction is None else float(correction)},
            args,
        )

    return rule


def _vector_norm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """linalg_vector_norm(x, ord, dim, keepdim, *, dtype) with ord 2 or 1 over dims."""
    x = call.args[0]
    order = call.args[1] if len(call.args) > 1 else call.kw("ord", 2)
    lib = {2: "norm2_dims", 1: "norm1_dims"}.get(order)
    if lib is None:
        return f"it is the {order!r}-norm; the library has the 2-norm and the 1-norm"
    # (a dtype= is the result's: _library checks it)
    dims = call.args[2] if len(call.args) > 2 else call.kw("dim")
    keep = call.args[3] if len(call.args) > 3 else call.kw("keepdim", False)
    # (as a reduction over dims: sum_dims' argument order)
    shifted = replace(call, args=(x, dims, keep), kwargs=())
    return _any_axes(lib, None)(shifted)


def _buffer_axes(
    held: tuple[int, ...], shape: tuple[int, ...], axes: set[int]
) -> tuple[int, ...] | None:
    """The axes of a row-major buffer of shape ``held`` that reducing ``axes`` of its
    reshape to ``shape`` reduces, or None if those are not whole axes of the buffer.

    Both shapes are merges of one finer shape (their axes split until they agree, size-1
    axes aside); each buffer axis must be made of reduced parts only or kept parts only.
    A reduction of size-1 axes only reduces nothing: None (the caller refuses it).

    >>> _buffer_axes((2, 3, 4, 5), (6, 20), {0}), _buffer_axes((2, 3, 4, 5), (2, 3, 20), {2})
    ((0, 1), (2, 3))
    >>> _buffer_axes((2, 3, 4, 5), (4, 30), {0}) is None    # 4 = 2 x 2 splits axis 1
    True
    >>> _buffer_axes((1,), (), set())  # all of a 0-d tensor (its buffer holds one element)
    (0,)
    """
    if held == shape:
        return tuple(sorted(axes))
    if len(axes) == len(shape):  # every axis of the reshape: every axis of the buffer (a
        return tuple(range(len(held)))  # 0-d tensor's (1,) buffer among them)
    bs = [[d, k] for k, d in enumerate(held) if d != 1]
    xs = [[d, k] for k, d in enumerate(shape) if d != 1]
    kinds: dict[int, set[bool]] = {}  # buffer axis -> reduced?, per part
    i = j = 0
    while i < len(bs) and j < len(xs):
        (rb, kb), (rx, kx) = bs[i], xs[j]
        part = min(rb, rx)
        if max(rb, rx) % part:
            return None  # the axes interleave: no buffer axis is a whole part
        kinds.setdefault(kb, set()).add(kx in axes)
        bs[i][0] //= part
        xs[j][0] //= part
        i += bs[i][0] == 1
        j += xs[j][0] == 1
    if any(len(k) > 1 for k in kinds.values()):
        return None
    out = tuple(sorted(k for k, r in kinds.items() if r == {True}))
    return out or None


def _softmax_extra(call: _Call) -> str | None:
    return "it computes in float32 from half" if len(call.args) > 2 and call.args[2] else None


def _extreme(which: str) -> _Rule:
    """amax/amin (and max/min's values): of floats the block reductions (``amax`` over the
    last axis alone), of integers ``amax_int_dims``/``amin_int_dims``, exact in their dtype."""
    return _ints_or_floats(
        _any_axes(f"a{which}_int_dims", None),
        _any_axes(f"a{which}_dims", "amax" if which == "max" else None),
    )


_EXTREMES = {w: _extreme(w) for w in ("max", "min")}


def _sum(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """A sum over dims: of floats, sum_dims; of bool and integers (int64 in torch),
    sum_int_dims, exact in int64; of bool over fewer than 2**24 elements, count_dims (a
    count of the true elements, block-parallel rather than one thread's loop per result,
    exact below 2**24: its own shape rule decides)."""
    x = call.args[0]
    if not isinstance(x, _Arg) or x.base.dtype in (*FLOAT_COMPUTE, "float64"):
        return _any_axes("sum_dims", "sum")(call)
    found = _any_axes("sum_int_dims", None)(call)
    if x.base.dtype == "bool" and not isinstance(found, str):
        _, params, args = found
        try:
            ops.infer_shape(ops.get("count_dims"), [x.base.ir_shape], params, "count_dims")
        except InvalidArgument:  # 2**24 elements or more: not exact in count_dims' floats
            return found
        return "count_dims", params, args
    return found


def _strided(a: Any, rank: int) -> tuple[Strided, tuple[int, ...]] | str:
    """``a`` as a GEMM operand of ``rank`` 2 or 3: its :class:`Strided` layout in its buffer
    and its shape, or why it cannot be read in place."""
    if not isinstance(a, _Arg):
        return f"an operand is a Python {type(a).__name__}, not a tensor"
    if a.base.dtype not in FLOAT_COMPUTE:  # halves are widened (_library checks the rule)
        return f"it reads {a.base.dtype} data; the library's matmuls compute on floats"
    if a.layout is None:
        return "it reads a tensor whose layout in its buffer is not known; library ops read row-major buffers"
    if len(a.shape) != rank:
        return f"an operand has shape {a.shape}; expected {rank} dimensions"
    off, st = a.layout
    return Strided(off, st[0] if rank == 3 else 0, st[-2], st[-1]), a.shape


def _gemm_rule(batched: bool, added: bool) -> _Rule:
    """mm, bmm (``added`` False) or addmm, baddbmm (True): the library's dense op when every
    operand is a whole row-major buffer, ``linear`` for ``addmm(bias, x, w.t())``, else a
    strided GEMM reading the views in place (permuted heads, transposed weights, splits)."""
    rank = 3 if batched else 2
    dense_op, scaled_op = ("bmm", "baddbmm") if batched else ("mm", "addmm")

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        tensors = list(call.args[:3] if added else call.args[:2])
        beta, alpha = float(call.kw("beta", 1)), float(call.kw("alpha", 1))
        if added and alpha == 0:
            return "alpha=0 (torch then ignores mat1 @ mat2, NaNs included); the library's addmm does not"
        if not all(math.isfinite(v) for v in (beta, alpha)):
            return "its beta/alpha is not finite"
        ab = tensors[1:] if added else tensors
        got = [_strided(t, rank) for t in ab]
        for g in got:
            if isinstance(g, str):
                return g
        (la, sa), (lb, sb) = got  # type: ignore[misc]
        bt, m, k = (1, *sa) if rank == 2 else sa
        n = sb[-1]
        lc = None
        if added:
            c = tensors[0]
            if not isinstance(c, _Arg) or c.layout is None or c.base.dtype not in FLOAT_COMPUTE:
                return "its added input is not a floating-point tensor read in place"
            lc = _broadcast_layout(c, (bt, m, n) if batched else (m, n))
            if isinstance(lc, str):
                return lc
        x, w = ab
        # the library's own op when a is rows of K read in order (mm and addmm fold a's
        # leading axes into M) and b a whole [K, N] (or [B, K, N]) buffer
        plain = (
            x.layout == (0, _dense(x.shape))
            and x.base.ir_shape[-1] == k
            and math.prod(x.base.ir_shape) == bt * m * k
            and (not batched or x.base.ir_shape == x.shape)
            and w.base.ir_shape == w.shape
            and w.layout == (0, _dense(w.shape))
        )
        if plain and not added:
            return dense_op, {}, [_whole_arg(x), _whole_arg(w)]
        c0 = tensors[0] if added else None
        if plain and c0 is not None and _whole(c0) and lc is not None:
            ab_args = [_whole_arg(x), _whole_arg(w)]
            return scaled_op, {"beta": beta, "alpha": alpha}, [c0, *ab_args]
        if added and not batched and beta == alpha == 1 and _linear_operands(x, w, tensors[0]):
            # addmm(bias, x, w.t()): nn.Linear after decomposition
            return "linear", {}, [_whole_arg(x), _whole_arg(w), _whole_arg(tensors[0])]
        # a strided GEMM over the distinct buffers the operands view
        order = list(dict.fromkeys(a.index for a in (*ab, *tensors[: 1 if added else 0])))
        bases = {a.index: a for a in tensors}
        shapes = [bases[i].base.ir_shape for i in order]
        which = tuple(order.index(a.index) for a in ab)
        if added:
            which = (*which, order.index(tensors[0].index))
        op = lib_reduce.strided_gemm(
            shapes, bt, m, n, k, la, lb, lc, out=call.out.shape, inputs=which
        )
        params = {"beta": beta, "alpha": alpha} if added else {}
        return op.name, params, [_whole_arg(bases[i]) for i in order]

    return rule


def _dense(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``shape``, 0 on size-1 axes (as :func:`_layout` writes them)."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(0 if d == 1 else step)
        step *= d
    return tuple(reversed(out))


def _linear_operands(x: _Arg, w: _Arg, bias: _Arg) -> bool:
    """Are these ``addmm(bias, x, w.t())``'s operands as nn.Linear leaves them: x a reshape
    of a buffer whose last axis is K, w a transposed row-major [N, K] weight, bias [N]?"""
    (m, k), n = x.shape, w.shape[1]
    return (
        x.layout == (0, _dense((m, k)))
        and x.base.ir_shape[-1] == k
        and math.prod(x.base.ir_shape) == m * k
        and w.base.ir_shape == (n, k)
        and w.layout == (0, _dense((n, k))[::-1])
        and bias.layout is not None
        and bias.layout[0] == 0
        and math.prod(bias.base.ir_shape) == n
        and tuple(bias.shape)[-1:] in ((n,), (1,))
        and math.prod(bias.shape) == n
    )


def _whole(a: _Arg) -> bool:
    """Is ``a`` its whole buffer, in the buffer's own shape?"""
    return not a.chain and a.base.strides is None and a.layout is not None


def _whole_arg(a: _Arg) -> _Arg:
    """The buffer ``a`` views, as an argument (a library op reading it whole)."""
    return _Arg(a.index, (), a.base, a.base.ir_shape, None)


def _broadcast_layout(c: _Arg, target: tuple[int, ...]) -> Strided | str:
    """The added input ``c`` read broadcast to ``target`` ((m, n) or (batch, m, n))."""
    assert c.layout is not None
    off, st = c.layout
    shape = tuple(c.shape)
    if len(shape) > len(target) or any(
        d not in (1, t) for d, t in zip(reversed(shape), reversed(target), strict=False)
    ):
        return f"its added input of shape {shape} does not broadcast to {target}"
    full = [0] * (len(target) - len(shape)) + [
        0 if d == 1 else s for d, s in zip(shape, st, strict=True)
    ]
    if len(target) == 2:
        full = [0, *full]
    return Strided(off, full[0], full[1], full[2])


def _linear(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """aten.linear (before decomposition): the library's linear, or x @ w.t() as a GEMM."""
    x, w = call.args[:2]
    bias = call.args[2] if len(call.args) > 2 else call.kw("bias")
    for t in (x, w, bias):
        if t is not None and (
            not isinstance(t, _Arg) or not _whole(t) or t.base.dtype not in FLOAT_COMPUTE
        ):
            return "it reads a view or a non-float tensor; the library's linear reads whole buffers"
    if len(w.shape) != 2 or (bias is not None and len(bias.shape) != 1):
        return f"its weight has shape {w.shape}; the library's linear takes a 2-D weight"
    if bias is not None:
        return "linear", {}, [x, w, bias]
    n, k = w.shape
    m = math.prod(x.shape[:-1])
    op = lib_reduce.strided_gemm(
        [x.base.ir_shape, w.base.ir_shape], 1, m, n, k,
        Strided.dense(m, k), Strided(0, 0, 1, k), out=call.out.shape,
    )  # fmt: skip
    return op.name, {}, [x, w]


def _clone(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # A clone of a permute/transpose reads a view buffer (Converter._alias): a plain copy.
    x = call.args[0]
    why = _plain(call, [x]) or _same(call, [x])
    return why or ("copy", {}, [x])


def _copy(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # aten.copy(self, src): functionalisation's form of self.copy_(src); the result is
    # src in self's shape and dtype, so self is not read
    src = call.args[1]
    why = _plain(call, [src]) or _same(call, [src])
    return why or ("copy", {}, [src])


def _group_norm_op(
    call: _Call, x: Any, block: int, groups: int, weight: Any, bias: Any, eps: float
) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """The library's group_norm(_affine) normalising each of ``groups`` equal consecutive
    parts of every block of ``block`` elements of ``x`` (row-major, so read on the buffer
    behind a reshape), the weight and bias entries spread evenly over a block."""
    if call.index != 0:
        return "its mean/rstd output is used; the library's norms give the result only"
    if (weight is None) != (bias is None):
        return "it has a weight without a bias (or the reverse); the library's affine norm has both"
    affine = [a for a in (weight, bias) if a is not None]
    why = _plain(call, [x, *affine])
    if why:
        return why
    held = tuple(x.base.ir_shape)
    dims = next(
        (d for d in range(1, len(held) + 1) if math.prod(held[len(held) - d :]) == block), None
    )
    if dims is None:
        return (
            f"it normalises blocks of {block} elements, which are no trailing axes of its "
            f"buffer of shape {held}"
        )
    params = {"groups": float(groups), "dims": float(dims), "eps": float(eps)}
    return ("group_norm_affine", params, [x, *affine]) if affine else ("group_norm", params, [x])


def _group_norm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps): GroupNorm
    x, weight, bias, _, c, hw, groups, eps = call.args[:8]
    return _group_norm_op(call, x, int(c) * int(hw), int(groups), weight, bias, eps)


def _instance_norm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps): the
    # batch's own statistics; InstanceNorm calls it on a batch of one, (1, N * C, H, W)
    x, weight, bias = call.args[:3]
    eps = call.args[5] if len(call.args) > 5 else call.kw("eps", 1e-5)
    if not isinstance(x, _Arg) or len(x.shape) < 2 or x.shape[0] != 1:
        return (
            "it normalises each channel over a batch of several samples; the library's norms "
            "normalise consecutive elements (InstanceNorm's batch of one)"
        )
    return _group_norm_op(call, x, math.prod(x.shape), int(x.shape[1]), weight, bias, eps)


def _layer_norm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, shape, weight, bias, eps = call.args
    why = _plain(call, [x])
    if why:
        return why
    if len(shape) > 1:  # over several axes: one group of the trailing block
        return _group_norm_op(call, x, math.prod(shape), 1, weight, bias, eps)
    if list(shape) != [x.shape[-1]] or not _rows_kept(x):
        return f"it normalises over {list(shape)}; the library's layer_norm the last axis only"
    if call.index != 0:
        return "its mean/rstd output is used; the library's layer_norm gives the result only"
    if weight is None and bias is None:
        return "layer_norm", {"eps": float(eps)}, [x]
    if weight is None:
        return "it has a bias without a weight; the library's affine norms have a weight"
    if bias is None:  # LayerNorm(bias=False): MPT's, OLMo's
        return _plain(call, [weight]) or ("layer_norm_scale", {"eps": float(eps)}, [x, weight])
    why = _plain(call, [weight, bias])
    return why or ("layer_norm_affine", {"eps": float(eps)}, [x, weight, bias])


def _mean_dims(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """mean over the last axis: the library's mean; over H and W of NCHW: a pooling."""
    dims = call.args[1] if len(call.args) > 1 else call.kw("dim")
    x = call.args[0]
    nd = len(x.shape) if isinstance(x, _Arg) else 0
    if nd == 4 and sorted(d % 4 for d in (dims or [])) == [2, 3]:
        return _mean(call)  # the pooler of CNNs: an adaptive average pooling to 1x1
    return _any_axes("mean_dims", "mean")(call)


# ----------------------------------------------------------------------------- CNN rules
# conv1d/2d/3d, pooling, pad and cat (oxiwork.ops.lib_conv): NCL/NCHW/NCDHW buffers read
# whole.
def _sizes(v: Any, n: int, default: Any = None) -> tuple[int, ...] | None:
    """A torch int-or-list size as ``n`` ints (one int or a one-element list: the same on
    every axis); ``default`` for an empty list; None if it has another number of axes."""
    if isinstance(v, (list, tuple)):
        if not v:
            return _sizes(default, n) if default is not None else None
        v = list(v) * n if len(v) == 1 else list(v)
        return tuple(int(x) for x in v) if len(v) == n else None
    return (int(v),) * n


def _nchw(call: _Call, args: Sequence[Any], dims: int = 2) -> str | None:
    """Why ``args`` are not whole float32 buffers (no view; input 0 with ``dims`` spatial
    axes: NCHW, or NCDHW), or None."""
    why = _plain(call, args, reshape_ok=False)
    if why is None and len(args[0].shape) != dims + 2:
        layout = "NC" + "DHW"[3 - dims :]
        return (
            f"its input has shape {args[0].shape}; the library's op takes {layout} ({dims + 2}-d)"
        )
    return why


def _zero_pad(chain: Sequence[Any], axes: int = 2) -> tuple[int, ...] | None:
    """The amounts ``(before, after)`` of each of the last ``axes`` axes, first axis first
    (2 axes: top, bottom, left, right), if ``chain`` is zero ``constant_pad_nd`` s of those
    axes by non-negative amounts (which a convolution can apply itself; zero pads of zero
    pads add up: ``padding="same"`` with an even kernel pads once more), else None."""
    total = [0] * (2 * axes)  # torch's order: the last axis first
    for target, args, _ in chain:
        if _op_name(target) != "aten.constant_pad_nd.default":
            return None
        pad, value = list(args[0]), (args[1:] or (0,))[0]
        if value != 0 or len(pad) % 2 or not pad or min(pad) < 0:
            return None
        if any(pad[2 * axes :]):  # it pads an axis the convolution does not slide over
            return None
        pad = (pad + [0] * (2 * axes))[: 2 * axes]
        total = [t + p for t, p in zip(total, pad, strict=True)]
    if not chain:
        return None
    return tuple(total[2 * k + e] for k in reversed(range(axes)) for e in (0, 1))


def _conv(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, w, b, stride, padding, dilation, transposed, out_pad, groups = call.args
    if transposed and len(stride) == 1:  # ConvTranspose1d: NCL
        args = [x, w] if b is None else [x, w, b]
        why = _plain(call, args, reshape_ok=False)
        if why:
            return why
        params = {"stride": stride[0], "pad": padding[0], "dilation": dilation[0]}
        params |= {"out_pad": out_pad[0], "groups": groups}
        return (
            ("conv_transpose1d" if b is None else "conv_transpose1d_bias"),
            {k: float(v) for k, v in params.items()},
            args,
        )
    dims = len(stride)
    if transposed:  # ConvTranspose2d (NCHW) or ConvTranspose3d (NCDHW)
        if dims not in (2, 3):
            return (
                f"it is a {dims}-d transposed convolution; the library's conv_transpose1d, "
                "conv_transpose2d and conv_transpose3d are 1-d (NCL), 2-d (NCHW) and 3-d "
                "(NCDHW)"
            )
        args = [x, w] if b is None else [x, w, b]
        why = _nchw(call, args, dims)
        if why:
            return why
        axes = "dhw"[3 - dims :]
        params = {"groups": groups}
        for kind, values in (
            ("stride", stride),
            ("pad", _sizes(padding, dims)),
            ("dilation", dilation),
            ("out_pad", _sizes(out_pad, dims)),
        ):
            params |= {f"{kind}_{a}": v for a, v in zip(axes, values, strict=True)}
        return (
            (f"conv_transpose{dims}d" if b is None else f"conv_transpose{dims}d_bias"),
            {k: float(v) for k, v in params.items()},
            args,
        )
    if dims == 1:
        return _conv1d(call)
    if dims not in (2, 3):
        return (
            f"it is a {dims}-d convolution; the library has conv1d (NCL), conv2d (NCHW) and "
            "conv3d (NCDHW) only"
        )
    pads = [p for p in _sizes(padding, dims) or () for _ in range(2)]  # (before, after)
    folded = _zero_pad(x.chain, dims) if isinstance(x, _Arg) else None
    if folded is not None:  # a zero pad before the convolution: the convolution pads
        pads = [p + q for p, q in zip(pads, folded, strict=True)]
        x = _Arg(x.index, (), x.base, x.base.shape)
    args = [x, w] if b is None else [x, w, b]
    why = _nchw(call, args, dims)
    if why:
        return why
    axes = "dhw"[3 - dims :]
    names = ("pad_front", "pad_back", "pad_top", "pad_bottom", "pad_left", "pad_right")
    params = dict(zip(names[6 - 2 * dims :], pads, strict=True))
    params |= {f"stride_{a}": s for a, s in zip(axes, stride, strict=True)}
    params |= {f"dilation_{a}": d for a, d in zip(axes, dilation, strict=True)}
    return (
        (f"conv{dims}d" if b is None else f"conv{dims}d_bias"),
        {k: float(v) for k, v in params.items()},
        args,
    )


def _conv_call(dims: int, transposed: bool) -> _Rule:
    """``aten.conv{dims}d.default`` or ``aten.conv_transpose{dims}d.input`` (``.default``),
    as programs not decomposed hold them: their arguments in ``aten.convolution``'s order
    (defaults filled in, each size one per axis), for :func:`_conv`. (Zero pads before them
    stay kernels: :func:`_pad_for_convolutions` folds pads into ``aten.convolution`` only.)
    The ``.padding`` overloads (``padding="same"``) have no rule: opaque, saying so."""
    names = ["input", "weight", "bias", "stride", "padding"]
    names += ["output_padding", "groups", "dilation"] if transposed else ["dilation", "groups"]
    defaults = (None, 1, 0, *((0, 1, 1) if transposed else (1, 1)))

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        given = dict(zip(names, _argv(call, names, defaults), strict=True))
        kinds = ("stride", "padding", "dilation", "output_padding")
        sizes = {k: _sizes(given.get(k, 0), dims) for k in kinds}
        if any(v is None for v in sizes.values()):
            return f"its sizes {given} are not {dims}-d"
        args = (given["input"], given["weight"], given["bias"], *map(list, sizes.values()))
        stride, padding, dilation, out_pad = args[3:]
        conv = (*args[:3], stride, padding, dilation, transposed, out_pad, given["groups"])
        return _conv(replace(call, args=conv, kwargs=()))

    return rule


def _conv1d(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """``aten.convolution`` of an (N, C, L) input: the library's conv1d; a zero pad of the
    last axis before it folds into its padding."""
    x, w, b, (stride,), (pad,), (dilation,), _, _, _ = call.args
    pads = [pad, pad]
    folded = _zero_pad(x.chain, 1) if isinstance(x, _Arg) else None
    if folded is not None:  # (a pad of the last axis only)
        pads = [pads[0] + folded[0], pads[1] + folded[1]]
        x = _Arg(x.index, (), x.base, x.base.shape)
    args = [x, w] if b is None else [x, w, b]
    why = _plain(call, args, reshape_ok=False)
    if why:
        return why
    if len(args[0].shape) != 3:
        return f"its input has shape {args[0].shape}; the library's conv1d takes NCL (3-d)"
    params = {"stride": stride, "pad_left": pads[0], "pad_right": pads[1], "dilation": dilation}
    return (
        ("conv1d" if b is None else "conv1d_bias"),
        {k: float(v) for k, v in params.items()},
        args,
    )


def _resize_dims(call: _Call) -> int:
    """2 for aten.upsample_*2d, 3 for aten.upsample_*3d."""
    return 3 if "3d" in _op_name(call.target) else 2


def _nearest_factors(
    target: Any,
    rest: Sequence[Any],
    kwargs: Mapping[str, Any],
    sizes: Sequence[int],
    outs: Sequence[int],
) -> list[int] | str:
    """The whole factors by which nearest resizing ``target`` (called with arguments ``rest``
    after its input) takes ``sizes`` to ``outs``, if torch's own choice of each output's
    source (run here on the input's element indices) is ``p // factor``; else why not."""
    if any(o % s for s, o in zip(sizes, outs, strict=True)):
        return (
            f"it resizes {'x'.join(map(str, sizes))} to {'x'.join(map(str, outs))}; the "
            "library upsamples by whole factors"
        )
    factors = [o // s for s, o in zip(sizes, outs, strict=True)]
    torch = _torch()
    index = torch.arange(math.prod(sizes), dtype=torch.float64).reshape(1, 1, *sizes)
    chosen = target(index, *rest, **dict(kwargs)).numpy()
    expected = index.numpy()
    for axis, factor in enumerate(factors, start=2):
        expected = np.repeat(expected, factor, axis=axis)
    if chosen.shape != expected.shape or not np.array_equal(chosen, expected):
        return "torch's nearest sources here are not p // factor; no library op picks them"
    return factors


def _upsample_nearest(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """Nearest upsampling (2-d or 3-d) by whole factors (:func:`_nearest_factors`)."""
    dims = _resize_dims(call)
    x = call.args[0]
    why = _nchw(call, [x], dims)
    if why:
        return why
    factors = _nearest_factors(
        call.target, call.args[1:], call.kwargs, x.shape[2:], call.out.shape[2:]
    )
    if isinstance(factors, str):
        return factors
    axes = "dhw"[3 - dims :]
    params = {f"factor_{a}": float(f) for a, f in zip(axes, factors, strict=True)}
    return f"upsample_nearest{dims}d", params, [x]


def _upsample_linear(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """Bilinear (2-d) or trilinear (3-d) resizing: the library's upsample_bilinear2d or
    upsample_trilinear3d, with the float32 ratio per axis torch's kernel computes
    (aten/src/ATen/native/UpSample.h, area_pixel_compute_scale): (in - 1) / (out - 1) with
    align_corners, else 1 / the scale factor it was given, or in / out."""
    dims = _resize_dims(call)
    axes = "dhw"[3 - dims :]
    x, _, align = call.args[:3]
    why = _nchw(call, [x], dims)
    if why:
        return why
    if _op_name(call.target).endswith(".vec"):
        factors = call.args[3] if len(call.args) > 3 else call.kw("scale_factors")
    else:  # (input, output_size, align_corners, scales_d?, scales_h, scales_w)
        factors = [
            call.args[k] if len(call.args) > k else call.kw(f"scales_{a}")
            for k, a in enumerate(axes, start=3)
        ]
    params = {"align_corners": float(bool(align))}
    sizes, outs = x.shape[2:], call.out.shape[2:]
    for a, size, out, factor in zip(axes, sizes, outs, factors or [None] * dims, strict=True):
        if align:
            r = np.float32(size - 1) / np.float32(out - 1) if out > 1 else np.float32(0)
        elif factor is not None and factor > 0:
            r = np.float32(1.0 / factor)
        else:
            r = np.float32(size) / np.float32(out)
        params |= {f"out_{a}": float(out), f"ratio_{a}": float(r)}
    return ("upsample_bilinear2d" if dims == 2 else "upsample_trilinear3d"), params, [x]


def _argv(call: _Call, names: Sequence[str], defaults: Sequence[Any]) -> list[Any]:
    """The call's arguments by schema order: positional, then keyword, then ``defaults``
    (aligned with the end of ``names``)."""
    given = dict(zip(names, call.args, strict=False)) | dict(call.kwargs)
    pad = [None] * (len(names) - len(defaults)) + list(defaults)
    return [given.get(n, d) for n, d in zip(names, pad, strict=True)]


def _pool_params(
    kernel: Any, stride: Any, padding: Any, ceil: Any, dims: int = 2
) -> dict[str, float] | None:
    """A ``dims``-d pooling's window, stride, padding and ceil mode as the library's
    parameters (``kernel_h``...), or None if they are not ``dims``-d."""
    sizes = (_sizes(kernel, dims), _sizes(stride, dims, kernel), _sizes(padding, dims))
    if any(v is None for v in sizes):
        return None
    axes = "dhw"[3 - dims :]
    params = {
        f"{kind}_{a}": float(v)
        for kind, values in zip(("kernel", "stride", "pad"), sizes, strict=True)
        for a, v in zip(axes, values, strict=True)  # type: ignore[arg-type]
    }
    return {**params, "ceil_mode": float(bool(ceil))}


_MAX_POOL_ARGS = ("self", "kernel_size", "stride", "padding", "dilation", "ceil_mode")
_AVG_POOL_ARGS = (
    "self",
    "kernel_size",
    "stride",
    "padding",
    "ceil_mode",
    "count_include_pad",
    "divisor_override",
)


def _max_pool(dims: int) -> _Rule:
    """``aten.max_pool{dims}d`` (its values; not its indices): the library's max_pool<dims>d."""
    lib = f"max_pool{dims}d"

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x, kernel, stride, padding, dilation, ceil = _argv(call, _MAX_POOL_ARGS, ([], 0, 1, False))
        if call.index not in (None, 0):
            return f"its indices are used; the library's {lib} gives the values only"
        params = _pool_params(kernel, stride, padding, ceil, dims)
        dilations = _sizes(dilation, dims)
        if params is None or dilations is None:
            return f"its window {kernel} is not {dims}-d; the library's {lib} is {dims}-d"
        why = _nchw(call, [x], dims)
        if why:
            return why
        params |= {
            f"dilation_{a}": float(d) for a, d in zip("dhw"[3 - dims :], dilations, strict=True)
        }
        return lib, params, [x]

    return rule


def _avg_pool(dims: int) -> _Rule:
    """``aten.avg_pool{dims}d``: the library's avg_pool<dims>d."""
    lib = f"avg_pool{dims}d"

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x, kernel, stride, padding, ceil, include, override = _argv(
            call, _AVG_POOL_ARGS, ([], 0, False, True, None)
        )
        params = _pool_params(kernel, stride, padding, ceil, dims)
        if params is None:
            return f"its window {kernel} is not {dims}-d; the library's {lib} is {dims}-d"
        why = _nchw(call, [x], dims)
        if why:
            return why
        params["count_include_pad"] = float(bool(include))
        params["divisor_override"] = float(override or 0)
        return lib, params, [x]

    return rule


def _adaptive_pool(lib: str) -> _Rule:
    """Adaptive average or max pooling to ``output_size``: the library's ``lib`` (2-d or
    3-d, as its name says)."""
    dims = 3 if lib.endswith("3d") else 2

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        if call.index not in (None, 0):
            return f"its indices output is used; the library's {lib} gives the maxima"
        x, size = call.args[:2]
        why = _nchw(call, [x], dims)
        if why:
            return why
        out = _sizes(size, dims)
        if out is None:
            return f"its output size {size} is not {dims}-d; the library's {lib} is {dims}-d"
        return lib, {f"out_{a}": float(o) for a, o in zip("dhw"[3 - dims :], out, strict=True)}, [x]

    return rule


def _mean(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # The mean over H and W of an NCHW tensor (ResNet's and MobileNet's pooler) is an
    # adaptive average pooling to 1x1 (means over other axes: mean_dims, _mean_dims).
    x, dims = call.args[0], call.args[1] if len(call.args) > 1 else call.kw("dim")
    # (a dtype= is the result's: _library checks it)
    nd = len(x.shape) if isinstance(x, _Arg) else 0
    if nd != 4 or sorted(d % 4 for d in (dims or [])) != [2, 3]:
        return f"it averages over dims {dims!r}; the library averages H and W of NCHW only"
    why = _nchw(call, [x])
    return why or ("adaptive_avg_pool2d", {"out_h": 1.0, "out_w": 1.0}, [x])


def _constant_pad(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, pad, value = (*call.args, 0.0)[:3]
    pad = list(pad)
    while len(pad) > 4 and pad[-2:] == [0, 0]:  # outer axes padded by nothing (MobileBERT's)
        pad = pad[:-2]
    if len(pad) > 6:
        return f"it pads {len(pad) // 2} axes; the library's constant_pads pad the last three"
    if not math.isfinite(value):
        return f"it pads with {value}; op parameters are finite"
    dims = 3 if len(pad) == 6 else 2  # (Swin pads H and W of NHWC: three axes, C by nothing)
    lib = "constant_pad" if dims == 2 else "constant_pad3d"
    why = _plain(call, [x], reshape_ok=False)
    if why is None and len(x.shape) < dims:
        why = f"its input has shape {x.shape}; the library's {lib} needs {dims} axes or more"
    if why:
        return why
    names = [p for p in ops.get(lib).defaults if p != "value"]  # F.pad's order, as the op's
    params = {k: float(v) for k, v in zip(names, pad, strict=False)}
    return lib, {**params, "value": float(value)}, [x]


# The ops that read an empty operand (:class:`_Empty`) by skipping it, as torch does.
_SKIPS_EMPTY = frozenset({"aten.cat.default"})
# The ops whose result is their first operand with their second written into a part of it:
# with an empty second operand, the first (Converter.call).
_SCATTERS_INTO_BASE = frozenset({"aten.slice_scatter.default"})


def _cat(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    tensors, dim = call.args[0], (*call.args[1:], call.kw("dim", 0))[0]
    # torch skips empty operands (a slice past a rotary half, a cache of length 0); the IR
    # holds no empty buffer, so the op concatenates the others (their dtypes decide the
    # result's: _library refuses one the empty operand would have promoted)
    tensors = [
        t
        for t in tensors
        if not isinstance(t, _Empty) and not (isinstance(t, _Arg) and 0 in tuple(t.shape))
    ]
    why = _plain(call, tensors, reshape_ok=False)
    if why:
        return why
    return cat_op(len(tensors)).name, {"axis": float(dim)}, tensors


# ----------------------------------------------------------------------------- dtype rules
# casts and lookups (oxiwork.ops.lib_dtype)
def _to_copy(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x = call.args[0]
    # device, layout and memory format say where and how eager lays the copy out: the IR
    # holds row-major buffers on one device (a channels_last result's buffer holds its values
    # row-major, as every buffer does; its strides are kept for the views that read it)
    # (non_blocking, pin_memory and copy change when and where, not the values; a cast
    # always copies)
    ignored = {"dtype", "device", "layout", "memory_format", "non_blocking", "pin_memory", "copy"}
    extra = {k for k, v in call.kwargs if v not in (None, False)} - ignored
    if extra:
        return f"it sets {', '.join(sorted(extra))}; the library's casts change the dtype only"
    if call.out.dtype not in COMPUTE_DTYPES:
        return (
            f"it converts to {call.out.dtype}; kernels compute {', '.join(sorted(COMPUTE_DTYPES))}"
        )
    why = _plain(call, [x]) or _same(call, [x])
    return why or (lib_dtype.cast_name(call.out.dtype), {}, [x])


def _embedding(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # padding_idx, scale_grad_by_freq and sparse change the gradient only
    weight, indices = call.args[:2]
    why = _plain(call, [weight], reshape_ok=False) or _plain(call, [indices])
    if why is None and len(weight.shape) != 2:
        why = f"its table has shape {weight.shape}; the library's embedding takes [rows, dim]"
    return why or ("embedding", {}, [weight, indices])


def _gather(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, dim, index = call.args[:3]
    why = _plain(call, [x, index], reshape_ok=False)
    return why or ("gather", {"dim": float(dim)}, [x, index])


def _index(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # x[i0, i1, ...] or x[:, :, i0, i1]: integer index tensors for adjacent axes after whole
    # ones (no None between or after them, no bool mask)
    x, indices = call.args[:2]
    lead = next((k for k, i in enumerate(indices) if i is not None), len(indices))
    tensors = list(indices[lead:])
    if not tensors or any(i is None for i in tensors):
        return "it indexes with None (a kept axis) between or after index tensors; the library's index takes adjacent axes"
    why = _plain(call, [x, *tensors], reshape_ok=False)
    return why or (lib_dtype.index_op(len(tensors), lead).name, {}, [x, *tensors])


def _index_select(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, dim, index = call.args[:3]
    why = _plain(call, [x, index], reshape_ok=False)
    return why or ("index_select", {"dim": float(dim % max(1, len(x.shape)))}, [x, index])


def _flip(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, dims = call.args[:2]
    why = _plain(call, [x], reshape_ok=False)
    return why or ("flip", {"axes": lib_reduce.axes_mask(dims, len(x.shape)) if dims else 0.0}, [x])


def _slice_scatter(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # slice_scatter(input, src, dim=0, start=None, end=None, step=1), torch's slice rules
    x, src = call.args[:2]
    rest = (*call.args[2:], *([None] * 4))
    dim = call.kw("dim", rest[0] if rest[0] is not None else 0)
    start, end = call.kw("start", rest[1]), call.kw("end", rest[2])
    step = call.kw("step", rest[3] if rest[3] is not None else 1)
    why = _plain(call, [x, src], reshape_ok=False)
    if why:
        return why
    n = len(x.shape)
    axis = dim % n
    first, _, _ = slice(start, end, step).indices(x.shape[axis])
    return (
        "slice_scatter",
        {"dim": float(axis), "start": float(first), "step": float(step)},
        [x, src],
    )


def _repeat(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, times = call.args[:2]
    why = _plain(call, [x], reshape_ok=False)
    if why:
        return why
    if len(times) > lib_dtype.MAX_REPEAT_AXES:
        return f"it repeats over {len(times)} axes; the library's repeat takes at most {lib_dtype.MAX_REPEAT_AXES}"
    params = {"lead": float(len(times) - len(x.shape))}
    params |= {f"times{k}": float(t) for k, t in enumerate(reversed(times))}
    return "repeat", params, [x]


def _scan(lib: str) -> _Rule:
    """cumsum / cumprod along ``dim`` (the buffer's own shape: no reshape). A cumsum's
    ``dtype=`` other than the one it sums in anyway is ``cumsum_<dtype>`` (the elements
    converted first, as torch's); any other dtype= is checked by :func:`_library`."""

    def rule(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
        x, dim = call.args[:2]
        why = _plain(call, [x], reshape_ok=False)
        if why:
            return why
        name, to = lib, call.out.dtype
        if (
            lib == "cumsum"
            and call.kw("dtype") is not None
            and to in lib_dtype.CUMSUM_DTYPES
            and to != lib_dtype.accumulate_dtype([x.base.dtype], {})
        ):
            name = f"cumsum_{to}"
        return name, {"dim": float(dim)}, [x]

    return rule


# x / y as a tensor op or by a number (div without a rounding mode, however it is called)
_DIVIDE = _scalar_or("div_scalar", _binary("div"))


def _rounding_divide(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # div(x, n, rounding_mode=...) and floor_divide(x, n) of an integer tensor by a number
    # (MoE layers find each routed slot's token so); without a rounding mode, div itself
    x, y = call.args[:2]
    mode = call.kw("rounding_mode", "floor" if "floor_divide" in _op_name(call.target) else None)
    if mode is None:
        return _DIVIDE(call)
    if not (_number(y) and float(y).is_integer()):
        by = repr(y) if _number(y) else ("a tensor" if isinstance(y, _Arg) else repr(y))
        return (
            f"it divides by {by} with rounding {mode!r}; the library's rounding divisions take "
            "an integer tensor by a whole number"
        )
    why = _plain(call, [x]) or _same(call, [x])
    return why or (f"{mode}_divide_scalar", {"other": float(y)}, [x])


def _grouped_mm(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """A mixture of experts' grouped matmul: transformers' ``grouped_mm_fallback(input,
    weight, offs)`` (what its MoE layers export to) and ``aten._grouped_mm`` of a 2-d input
    by 3-d weights. A weight read transposed (``w.transpose(-2, -1)`` of an (E, N, K)
    parameter, as the layers that store it so pass it) is read in place."""
    if _op_name(call.target).startswith("aten."):
        x, w, offs, bias = _argv(call, ("self", "mat2", "offs", "bias"), (None, None))
        if bias is not None:
            return "it adds a bias; the library's grouped_mm does not"
    else:
        x, w, offs = _argv(call, ("input", "weight", "offs"), ())
    if not all(isinstance(a, _Arg) for a in (x, w, offs)):
        return "its input, weights and group offsets must all be tensors"
    if len(x.shape) != 2 or len(w.shape) != 3:
        return (
            f"it multiplies {tuple(x.shape)} by {tuple(w.shape)}; the library's grouped_mm "
            "takes a 2-d input and 3-d weights"
        )
    params: dict[str, float] = {}
    if w.chain and w.layout is not None:
        e, k, n = w.shape
        off, strides = w.layout
        if off == 0 and tuple(strides) == (n * k, 1, k) and w.base.ir_shape == (e, n, k):
            w, params = _whole_arg(w), {"transposed": 1.0}
    why = _plain(call, [x, w, offs], reshape_ok=False)
    return why or ("grouped_mm", params, [x, w, offs])


def _scatter_value(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # scatter(x, dim, index, value) of a number: an infinity is the op's ``infinite`` (one
    # that reduces, reduce="add", is an overload of its own: scatter.value_reduce)
    x, dim, index, value = _argv(call, ("self", "dim", "index", "value"), ())
    if not isinstance(value, int | float):
        return f"its value is a Python {type(value).__name__}, not a number"
    value = float(value)
    if math.isnan(value):
        return "it scatters NaN; the library's scatter_value takes a number or an infinity"
    why = _plain(call, [x, index], reshape_ok=False)
    if why:
        return why
    params = {"dim": float(dim % max(1, len(x.shape)))}
    if math.isinf(value):
        params["infinite"] = math.copysign(1.0, value)
    else:
        params["value"] = value
    return "scatter_value", params, [x, index]


# x % n: of floats remainder_scalar, of integers remainder_int_scalar (exact)
_REMAINDERS = {False: _scalar_or("remainder_scalar"), True: _scalar_or("remainder_int_scalar")}


def _remainder(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x = call.args[0]
    return _REMAINDERS[isinstance(x, _Arg) and x.base.dtype in INT_DTYPES](call)


def _histc(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, bins, lo, hi = _argv(call, ("self", "bins", "min", "max"), (100, 0, 0))
    why = _plain(call, [x])
    if why:
        return why
    if not (lo < hi):
        return (
            f"its range [{lo}, {hi}] is empty: torch then takes the range from the data "
            "(min == max); the library's histc needs min < max"
        )
    return "histc", {"bins": float(bins), "min": float(lo), "max": float(hi)}, [x]


def _index_put(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    x, indices, values, accumulate = _argv(
        call, ("self", "indices", "values", "accumulate"), (False,)
    )
    if accumulate:
        return "it accumulates (index_put with accumulate=True); the library's index_put writes"
    if not isinstance(indices, list | tuple) or len(indices) != 1 or indices[0] is None:
        return "it indexes other than the leading axis by one tensor; the library's index_put does that only"
    mask = indices[0]
    if (
        isinstance(mask, _Arg)
        and isinstance(x, _Arg)
        and isinstance(values, _Arg)
        and mask.base.dtype == "bool"
        and tuple(mask.shape) == tuple(x.shape)
        and math.prod(values.shape) == 1
    ):
        # x[mask] = v of one value (GraniteSpeech's x[mask] = pad): where(mask, v, x), the
        # value broadcast (where's dtype rule refuses a v that torch would convert first)
        return _where_of(call, [mask, values, x])
    if isinstance(mask, _Arg) and mask.base.dtype == "bool":
        return (
            f"it writes by a bool mask of shape {tuple(mask.shape)} into {tuple(x.shape)}"
            + ("" if not isinstance(values, _Arg) else f", values of shape {tuple(values.shape)}")
            + "; the library computes x[mask] = v as where only for a mask of x's shape and "
            "one value"
        )
    why = _plain(call, [x, indices[0], values], reshape_ok=False)
    return why or ("index_put", {}, [x, indices[0], values])


def _ordered(
    call: _Call, x: Any, dim: int, k: int | None, descending: Any
) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """sort/argsort/topk of ``x`` along ``dim``: the library's sort_* (``k`` None) or
    topk_* op giving the call's output (``call.index``: 0 the values, 1 the indices)."""
    why = _plain(call, [x], reshape_ok=False)
    if why:
        return why
    if not x.shape:
        return "it sorts a 0-d tensor; the library's sorts order the elements along an axis"
    indices = call.index == 1 or _base_name(call.target) == "argsort"
    params = {"dim": float(dim % len(x.shape))}
    if k is None:
        lib, params["descending"] = "sort", float(bool(descending))
    else:
        lib, params["k"], params["largest"] = "topk", float(k), float(bool(descending))
    return f"{lib}_{'indices' if indices else 'values'}", params, [x]


def _sort(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # sort.default(self, dim, descending), sort.stable(self, *, stable, dim, descending) and
    # argsort's two: the library's order is the stable one, and torch's unstable sort leaves
    # the order of equal elements free (the library's: lower index first)
    x, dim, descending = _argv(call, ("self", "dim", "descending"), (-1, False))
    return _ordered(call, x, dim, None, descending)


def _msort(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    return _ordered(call, call.args[0], 0, None, False)  # sort(x, dim=0)'s values


_TOPK = ("self", "k", "dim", "largest", "sorted")


def _topk(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    # topk(sorted=False) leaves the order to the implementation (std::nth_element's on the
    # CPU): the library's sorted order is one it may give, so with patterns on it maps
    # (listed in model.patterns: outputs that show the order may differ from eager's)
    x, k, dim, largest, ordered = _argv(call, _TOPK, (-1, True, True))
    if not ordered and not call.patterns:
        return (
            "it asks for the top k unsorted (sorted=False), in an order torch leaves "
            "unspecified (on the CPU std::nth_element's, unless it sorts them anyway); the "
            "library's topk gives them sorted: drop sorted=False, or import with patterns=True"
        )
    return _ordered(call, x, dim, k, largest)


# ----------------------------------------------------------------------------- attention
# Eager attention (transformers' "eager" implementation, what torch.export sees) is
# bmm(q, k^T) -> views -> [mul|div by a number] -> [add mask] -> _softmax(-1) -> [clone]
# -> views -> bmm(., v) -> [views, permute -> clone]: imported as one kernel of
# lib_reduce.strided_attention (Inductor's SDPA pattern replacement does the same before
# it fuses), so no score or probability buffer exists and the heads are written permuted.
_SCORE_SCALES = {
    "aten.mul.Tensor": "alpha",
    "aten.mul.Scalar": "alpha",
    "aten.div.Tensor": "divisor",
    "aten.div.Scalar": "divisor",
}
_SWAPPED_COMPARISON = {"ge": "le", "le": "ge", "gt": "lt", "lt": "gt", "eq": "eq", "ne": "ne"}


@functools.cache
def _scalar_ops() -> dict[Any, tuple[str, str | None]]:
    """FX target -> the converter's method for ``.item()``, ``torch.export``'s arithmetic on
    its values and ``torch._check``'s assertion (:meth:`_Converter.item`, ``scalar_op``,
    ``assert_scalar``), with the arithmetic's kind. Made on first use: torch is imported
    lazily."""
    torch = _torch()
    aten = torch.ops.aten
    kinds = {
        operator.ge: "ge", operator.gt: "gt", operator.le: "le", operator.lt: "lt",
        operator.eq: "eq", operator.ne: "ne", torch.sym_not: "not", torch.sym_ite: "ite",
    }  # fmt: skip
    return {
        **{target: ("scalar_op", kind) for target, kind in kinds.items()},
        aten.item.default: ("item", None),
        aten._local_scalar_dense.default: ("item", None),
        aten._assert_scalar.default: ("assert_scalar", None),
    }


_PASSIVE = frozenset({"aten._assert_tensor_metadata.default"})  # users that read nothing


class _EagerAttention:
    """The target of an attention kernel's call: the views its result goes through before
    the final clone (``post``) and the scores' shape (``scores``, for the mask's layout)."""

    __name__ = "attention"

    def __init__(self, post: tuple[Any, ...], scores: tuple[int, ...]) -> None:
        self.post, self.scores = post, scores

    def __repr__(self) -> str:
        return f"attention(post={self.post!r}, scores={self.scores})"

    def __str__(self) -> str:  # the kernel's name (_base_name)
        return "attention"


@dataclass(frozen=True, slots=True)
class _AttentionMatch:
    nodes: tuple[Any, ...]  # the FX nodes the kernel computes, in graph order (last: its result)
    q: Any
    kt: Any
    v: Any
    mask: Any
    alpha: float
    divisor: float
    softmax: Any
    post: tuple[Any, ...]


def _users(node: Any) -> list[Any]:
    return [u for u in node.users if _op_name(u.target) not in _PASSIVE]


def _only_user(node: Any) -> Any:
    """The one node reading ``node``'s value, or None."""
    users = _users(node)
    return users[0] if len(users) == 1 else None


def _target(node: Any) -> str:
    return _op_name(node.target) if getattr(node, "op", None) == "call_function" else ""


def _shape_of(node: Any) -> tuple[int, ...] | None:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(val.shape) if hasattr(val, "shape") else None


def _match_attention(sm: Any) -> _AttentionMatch | None:
    """The eager attention whose softmax is ``sm``, or None (see the section comment)."""
    if _target(sm) != "aten._softmax.default" or len(sm.args) < 3 or sm.args[2]:
        return None
    scores = _shape_of(sm)
    if not scores or len(scores) < 3 or sm.args[1] % len(scores) != len(scores) - 1:
        return None
    chain, cur, mask, scale = [sm], sm.args[0], None, {"alpha": 1.0, "divisor": 1.0}
    if _target(cur) == "aten.add.Tensor" and _only_user(cur) is sm and len(cur.args) == 2:
        if cur.kwargs.get("alpha", 1) != 1:
            return None
        a, b = cur.args
        pick = [x for x in (a, b) if _target(x) in (*_SCORE_SCALES, "aten.bmm.default")]
        if len(pick) != 1 or not hasattr(a if pick[0] is b else b, "meta"):
            return None
        chain.append(cur)
        mask = a if pick[0] is b else b
        cur = pick[0]
    if _target(cur) in _SCORE_SCALES and _only_user(cur) is chain[-1]:
        if len(cur.args) != 2 or not _number(cur.args[1]) or cur.args[1] == 0:
            return None
        scale[_SCORE_SCALES[_target(cur)]] = float(cur.args[1])
        chain.append(cur)
        cur = cur.args[0]
    while _target(cur) in _RESHAPES and _only_user(cur) is chain[-1]:
        chain.append(cur)
        cur = cur.args[0]
    bmm1 = cur
    if _target(bmm1) != "aten.bmm.default" or _only_user(bmm1) is not chain[-1]:
        return None
    b, m, n = _shape_of(bmm1) or (0, 0, 0)
    if scores[-2:] != (m, n) or math.prod(scores[:-2]) != b:
        return None
    chain.append(bmm1)
    cur, prev = _only_user(sm), sm
    if cur is not None and _target(cur) == "aten.clone.default" and len(cur.args) == 1:
        chain.append(cur)
        prev, cur = cur, _only_user(cur)
    while cur is not None and (
        _target(cur) in _RESHAPES
        or (_target(cur) == "aten.expand.default" and _shape_of(cur) == _shape_of(prev))
    ):
        chain.append(cur)
        prev, cur = cur, _only_user(cur)
    if cur is None or _target(cur) != "aten.bmm.default" or cur.args[0] is not prev:
        return None
    bmm2 = cur
    if cur.args[1] in chain or (mask is not None and mask in chain):
        return None
    chain.append(bmm2)
    post: list[Any] = []
    cur = _only_user(bmm2)
    while cur is not None and _target(cur) in (*_RESHAPES, "aten.permute.default"):
        post.append(cur)
        cur = _only_user(cur)
    if post and cur is not None and _target(cur) == "aten.clone.default":
        chain += [*post, cur]
    else:
        post = []
    steps = tuple((p.target, tuple(_cpu(a) for a in p.args[1:]), ()) for p in post)
    order = {n: k for k, n in enumerate(sm.graph.nodes)}
    return _AttentionMatch(
        tuple(sorted(chain, key=order.__getitem__)),
        bmm1.args[0], bmm1.args[1], bmm2.args[1], mask,
        scale["alpha"], scale["divisor"], sm, steps,
    )  # fmt: skip


def _mask_layout(c: _Arg, scores: tuple[int, ...]) -> Strided | str:
    """The mask ``c`` read broadcast to ``scores`` (``(*batch, m, n)``), its batch axes
    folded into one stride, or why it cannot be."""
    if c.layout is None or c.base.dtype not in FLOAT_COMPUTE:
        return "its mask is not a floating-point tensor read in place"
    off, st = c.layout
    shape = tuple(c.shape)
    if len(shape) > len(scores) or any(
        d not in (1, t) for d, t in zip(reversed(shape), reversed(scores), strict=False)
    ):
        return f"its mask of shape {shape} does not broadcast to the scores {scores}"
    full = [0] * (len(scores) - len(shape)) + [
        0 if d == 1 else s for d, s in zip(shape, st, strict=True)
    ]
    lead = [(d, s) for d, s in zip(scores[:-2], full[:-2], strict=True) if d > 1]
    batch = lead[-1][1] if lead else 0
    step = batch
    for d, s in reversed(lead):  # the batch index runs row-major over these axes
        if s != step:
            return f"its mask's batch axes (strides {full[:-2]}) are not one stride"
        step *= d
    return Strided(off, batch, full[-2], full[-1])


def _attention(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """Eager attention (:func:`_match_attention`) as one ``strided_attention`` op."""
    q, kt, v, mask = call.args
    target = call.target
    got = [_strided(t, 3) for t in (q, kt, v)]
    for g in got:
        if isinstance(g, str):
            return g
    (lq, sq), (lk, sk), (lv, sv) = got  # type: ignore[misc]
    b, m, k = sq
    n, d = sk[2], sv[2]
    if sk != (b, k, n) or sv != (b, n, d):
        return f"its operands' shapes {sq}, {sk}, {sv} are no attention"
    lm = None
    if mask is not None:
        if not isinstance(mask, _Arg):
            return f"its mask is a Python {type(mask).__name__}, not a tensor"
        lm = _mask_layout(mask, target.scores)
        if isinstance(lm, str):
            return lm
    perm = None
    if target.post:
        lay = _view_layout(_Tensor("result", _Meta((b, m, d), None, "float32"), target.post))
        if lay is None or lay[0] != call.out.shape:
            return "its result is not a strided view of the attention's rows"
        shape, strides, offset = lay
        perm = (offset, tuple(zip(shape, strides, strict=True)))
    elif math.prod(call.out.shape) != b * m * d:
        return f"its result {call.out.shape} does not hold {b}x{m}x{d} elements"
    operands = [t for t in (q, kt, v, mask) if t is not None]
    order = list(dict.fromkeys(a.index for a in operands))
    bases = {a.index: a for a in operands}
    op = lib_reduce.strided_attention(
        [bases[i].base.ir_shape for i in order], b, m, n, k, d, lq, lk, lv, lm,
        out=call.out.shape, inputs=tuple(order.index(a.index) for a in operands), perm=perm,
    )  # fmt: skip
    params = {"alpha": call.kw("alpha", 1.0), "divisor": call.kw("divisor", 1.0)}
    return op.name, params, [_whole_arg(bases[i]) for i in order]


# one-input math ops the library has under torch's name (oxiwork.ops.lib_elementwise)
_MATH_UNARY = (
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "log2", "log10", "exp2",
    "erf", "floor", "ceil", "trunc", "sign", "reciprocal", "isnan",
)  # fmt: skip

_LIBRARY: dict[str, _Rule] = {
    # torch.relu keeps a NaN: relu_nan, not relu (whose fmaxf gives 0)
    "aten.relu.default": _unary("relu_nan"),
    "aten.neg.default": _unary("neg"),
    "aten.exp.default": _unary("exp"),
    "aten.log.default": _unary("log"),
    "aten.tanh.default": _unary("tanh"),
    "aten.sigmoid.default": _unary("sigmoid"),
    "aten.gelu.default": _gelu,
    # tensors of any broadcastable shapes, or a tensor and a number (the scalar ops)
    "aten.add.Tensor": _scalar_or("add_scalar", _binary("add")),
    "aten.add.Scalar": _scalar_or("add_scalar"),
    "aten.sub.Tensor": _scalar_or("sub_scalar", _binary("sub")),
    "aten.sub.Scalar": _scalar_or("sub_scalar"),
    "aten.rsub.Scalar": _scalar_or("rsub_scalar", alpha_scales="x"),
    "aten.mul.Tensor": _mul,
    "aten.mul.Scalar": _mul,
    "aten.div.Tensor": _DIVIDE,
    "aten.div.Scalar": _scalar_or("div_scalar"),
    "aten.div.Tensor_mode": _rounding_divide,
    "aten.div.Scalar_mode": _rounding_divide,
    "aten.floor_divide.default": _rounding_divide,
    "aten.floor_divide.Scalar": _rounding_divide,
    "aten.pow.Tensor_Scalar": _pow,
    "aten.rsqrt.default": _unary("rsqrt"),
    "aten.silu.default": _unary("silu"),
    "aten.hardtanh.default": _hardtanh,
    "aten.clamp.default": _clamp,
    "aten.clamp_min.default": _clamp,
    "aten.clamp_max.default": _clamp,
    # by tensors: maximum or minimum with one bound (torch's own kernels for it), clamp_tensors
    # with both
    "aten.clamp.Tensor": _clamp_tensor,
    "aten.clamp_min.Tensor": _clamp_tensor,
    "aten.clamp_max.Tensor": _clamp_tensor,
    "aten.abs.default": _unary("abs"),
    "aten.sqrt.default": _unary("sqrt"),
    "aten.log1p.default": _unary("log1p"),
    "aten.expm1.default": _unary("expm1"),
    **{f"aten.{f}.default": _unary(f) for f in _MATH_UNARY},
    "aten.round.default": _unary("round"),  # (half to even; round with decimals: opaque)
    "aten.maximum.default": _binary("maximum"),
    "aten.minimum.default": _binary("minimum"),
    "aten.pow.Tensor_Tensor": _binary("pow"),
    "aten.atan2.default": _binary("atan2"),
    "aten.hypot.default": _binary("hypot"),
    "aten.fmod.Scalar": _scalar_or("fmod_scalar"),
    "aten.remainder.Scalar": _remainder,
    "aten.leaky_relu.default": _leaky_relu,
    "aten.elu.default": _elu,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm,
    "aten.where.self": _where,
    # comparisons give bool (a tensor, or a number: the op's parameter ``other``)
    **{f"aten.{c}.Tensor": _compare(c) for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{f"aten.{c}.Scalar": _compare(c) for c in ("eq", "ne", "lt", "le", "gt", "ge")},
    # bitwise ops on bool and integers, logical ops on anything (non-zero is true)
    **{f"aten.{c}.Tensor": _binary(c) for c in ("bitwise_and", "bitwise_or", "bitwise_xor")},
    **{f"aten.{c}.default": _binary(c) for c in ("logical_and", "logical_or", "logical_xor")},
    "aten.logical_not.default": _unary("logical_not"),
    "aten.bitwise_not.default": _bitwise_not,
    "aten.clone.default": _clone,
    "aten.copy.default": _copy,
    "aten._softmax.default": _any_axes("softmax_dim", "softmax", _softmax_extra),
    "aten._log_softmax.default": _any_axes("log_softmax_dim", None, _softmax_extra),
    "aten.sum.dim_IntList": _sum,
    "aten.sum.default": _sum,  # of every element
    # torch.prod over one dim or every element (floats in float, bool and integers in int64)
    "aten.prod.dim_int": _any_axes("prod_dims", None),
    "aten.prod.default": _any_axes("prod_dims", None),
    "aten.count_nonzero.dim_IntList": _any_axes("count_dims", None),
    "aten.count_nonzero.default": _any_axes("count_dims", None),
    # aten.amax maps to amax, not max: max skips NaNs (CUDA fmaxf), torch.amax propagates them
    "aten.mm.default": _gemm_rule(batched=False, added=False),
    "aten.bmm.default": _gemm_rule(batched=True, added=False),
    "aten.addmm.default": _gemm_rule(batched=False, added=True),
    "aten.baddbmm.default": _gemm_rule(batched=True, added=True),
    "aten.linear.default": _linear,
    "aten.native_layer_norm.default": _layer_norm,
    "aten.native_group_norm.default": _group_norm,
    "aten._native_batch_norm_legit.no_stats": _instance_norm,
    "aten.convolution.default": _conv,
    # (programs not decomposed)
    **{f"aten.conv{d}d.default": _conv_call(d, False) for d in (1, 2, 3)},
    **{
        f"aten.conv_transpose{d}d.{o}": _conv_call(d, True)
        for d in (1, 2, 3)
        for o in ("default", "input")  # (1-d's overload is named default, the others input)
    },
    **{
        name: rule
        for d in (2, 3)
        for name, rule in (
            (f"aten.max_pool{d}d_with_indices.default", _max_pool(d)),
            (f"aten.max_pool{d}d.default", _max_pool(d)),
            (f"aten.avg_pool{d}d.default", _avg_pool(d)),
            (f"aten._adaptive_avg_pool{d}d.default", _adaptive_pool(f"adaptive_avg_pool{d}d")),
            (f"aten.adaptive_avg_pool{d}d.default", _adaptive_pool(f"adaptive_avg_pool{d}d")),
            (f"aten.adaptive_max_pool{d}d.default", _adaptive_pool(f"adaptive_max_pool{d}d")),
        )
    },
    "aten.mean.dim": _mean_dims,
    "aten.mean.default": _mean_dims,  # of every element
    "aten.amax.default": _EXTREMES["max"],
    "aten.amin.default": _EXTREMES["min"],
    # torch.max(x) / torch.min(x): over every element, as amax/amin (NaN propagates)
    "aten.max.default": _EXTREMES["max"],
    "aten.min.default": _EXTREMES["min"],
    # argmax/argmin over one dim, or the flattened tensor (dim None)
    "aten.argmax.default": _arg_extreme("argmax"),
    "aten.argmin.default": _arg_extreme("argmin"),
    # torch.max/min over a dim: the values (NaN-propagating, as amax/amin) and the indices
    # (of the first extreme, a NaN counting as one, as argmax/argmin), one kernel each used
    "aten.max.dim": _values_or_indices(_EXTREMES["max"], _arg_extreme("argmax")),
    "aten.min.dim": _values_or_indices(_EXTREMES["min"], _arg_extreme("argmin")),
    "aten.var.correction": _spread("var_dims"),
    "aten.std.correction": _spread("std_dims"),
    "aten.linalg_vector_norm.default": _vector_norm,
    # any/all over one dim, several, or every one: bool, NaN counting as true
    **{
        f"aten.{f}.{o}": _any_axes(f"{f}_dims", None)
        for f in ("any", "all")
        for o in ("dim", "dims", "default")
    },
    # torch._check's all-true test of a tensor, and its assertion on the value read back
    "aten._is_all_true.default": _any_axes("all_dims", None),
    "aten._is_any_true.default": _any_axes("any_dims", None),
    "aten._assert_scalar.default": lambda call: (
        _plain(call, call.args[:1]) or ("check", {}, list(call.args[:1]))
    ),
    "aten.constant_pad_nd.default": _constant_pad,
    "aten.upsample_nearest2d.vec": _upsample_nearest,
    "aten.upsample_nearest2d.default": _upsample_nearest,
    "aten.upsample_bilinear2d.vec": _upsample_linear,
    "aten.upsample_bilinear2d.default": _upsample_linear,
    "aten.upsample_nearest3d.vec": _upsample_nearest,
    "aten.upsample_nearest3d.default": _upsample_nearest,
    "aten.upsample_trilinear3d.vec": _upsample_linear,
    "aten.upsample_trilinear3d.default": _upsample_linear,
    "aten.cat.default": _cat,
    "aten._to_copy.default": _to_copy,
    # ``to`` with a new dtype (un-decomposed programs; see _converts): the same cast
    **{f"aten.to.{o}": _to_copy for o in ("dtype", "dtype_layout", "other", "device")},
    "aten.type_as.default": _to_copy,  # (its other tensor gives the dtype only)
    "aten.embedding.default": _embedding,
    "aten.gather.default": _gather,
    "aten.index.Tensor": _index,
    "aten.cumsum.default": _scan("cumsum"),
    "aten.histc.default": _histc,
    "aten.scatter.value": _scatter_value,
    # (a mixture of experts' matmuls: transformers' own op and torch's)
    "transformers.grouped_mm_fallback.default": _grouped_mm,
    "aten._grouped_mm.default": _grouped_mm,
    "aten.index_put.default": _index_put,
    "aten.cumprod.default": _scan("cumprod"),
    "aten.index_select.default": _index_select,
    "aten.flip.default": _flip,
    "aten.slice_scatter.default": _slice_scatter,
    "aten.repeat.default": _repeat,
    # values and indices (one kernel each, as used), argsort's indices
    **{f"aten.{f}.{o}": _sort for f in ("sort", "argsort") for o in ("default", "stable")},
    "aten.msort.default": _msort,
    "aten.topk.default": _topk,
    "attention": _attention,  # eager attention, matched over several nodes
}

# Multi-output ops whose rules decide themselves which outputs the library computes.
_MULTI_OUTPUT = frozenset(
    {
        "aten.native_layer_norm.default",
        "aten.native_group_norm.default",
        "aten._native_batch_norm_legit.no_stats",
        "aten.max_pool2d_with_indices.default",
        "aten.adaptive_max_pool2d.default",
        "aten.max_pool3d_with_indices.default",
        "aten.adaptive_max_pool3d.default",
        "aten._native_batch_norm_legit_no_training.default",
        "aten.max.dim",
        "aten.min.dim",
        "aten.sort.default",
        "aten.sort.stable",
        "aten.topk.default",
    }
)


def _promoted(
    call: _Call, lib: str, params: Mapping[str, Any], args: Sequence[_Arg]
) -> list[_Arg] | None:
    """``args`` read through casts to the dtype torch computes element-wise op ``call`` in
    (``mask * x`` of a bool mask and float32 ``x``: the mask as float32), where the library
    op ``lib`` then computes torch's result dtype; None where it does not.

    Torch's element-wise kernels convert every operand to the operands' common dtype (its
    type promotion) and compute in it: that dtype is the result's, except for comparisons,
    whose result is bool while they compare in the common dtype of their tensor operands.
    A cast kernel converting the operand first computes the very values torch's converted
    operand holds, so the op that follows computes torch's result.
    """
    if not _elementwise(lib) or not args:
        return None
    torch = _torch()
    common = call.out.dtype
    if common == "bool":  # a comparison (or a logical op): the operands' common dtype
        dtype = getattr(torch, args[0].base.dtype)
        for a in args[1:]:
            dtype = torch.promote_types(dtype, getattr(torch, a.base.dtype))
        common = str(dtype).removeprefix("torch.")
    if common not in DTYPES or all(a.base.dtype == common for a in args):
        return None
    # bool operands first left as they are (where's condition: the op takes it so), then
    # every operand not of the common dtype converted
    for keep in ("bool", None):
        cast = [a if a.base.dtype in (common, keep) else replace(a, cast=common) for a in args]
        try:
            got = ops.infer_dtype(ops.get(lib), [a.cast or a.base.dtype for a in cast], params, lib)
        except InvalidArgument:
            continue
        if got == call.out.dtype:
            return cast
    return None


def _library(call: _Call) -> tuple[str, dict[str, float], list[_Arg]] | str:
    """A library op computing ``call`` exactly, or the reason there is none."""
    name = _op_name(call.target)
    rule = _LIBRARY.get(name)
    if rule is None:
        return f"no op of the library computes {name.rsplit('.', 1)[0]}"
    if call.index is not None and name not in _MULTI_OUTPUT:
        return "it has several outputs; library ops have one"
    found = rule(call)
    if isinstance(found, str):
        return found
    # the library op must compute torch's result dtype from these input dtypes
    lib, params, args = found
    try:
        got = ops.infer_dtype(ops.get(lib), [a.base.dtype for a in args], params, lib)
    except InvalidArgument as e:
        got, why = None, str(e).split(": ", 1)[-1]
    # (so a dtype= argument, torch's result dtype, maps exactly where it names the dtype the
    # library op computes anyway, where accumulating in it is the plain op: an int32 sum
    # with dtype=torch.int64 is the int64 sum torch gives without it)
    if got != call.out.dtype:
        promoted = _promoted(call, lib, params, args)
        if promoted is not None:
            found = lib, params, promoted
        elif got is None:
            return f"its operands' dtypes do not fit the library's {lib}: {why}"
        else:
            return (
                f"it computes {call.out.dtype}; the library's {lib} computes {got} from its inputs"
            )
    # and take its operands' shapes (the buffers the kernel binds to): a rule a shape
    # breaks (argmax over 2**24 elements or more, counted in float) leaves the op opaque,
    # saying why, rather than a kernel nothing could bind
    try:
        op = ops.get(lib)
        ops.infer_shape(op, [a.base.ir_shape for a in args], {**op.defaults, **params}, lib)
    except InvalidArgument as e:
        return f"its operands' shapes do not fit the library's {lib}: {str(e).split(': ', 1)[-1]}"
    return found


# ----------------------------------------------------------------------------- conversion
@dataclass
class _Converter:
    ep: Any
    builder: GraphBuilder = field(default_factory=GraphBuilder)
    env: dict[Any, Any] = field(default_factory=dict)
    ids: dict[str, Any] = field(default_factory=dict)  # buffer name -> BufferId
    sizes: dict[str, int] = field(default_factory=dict)  # buffer name -> bytes
    values: dict[str, np.ndarray] = field(default_factory=dict)
    kernel_names: set[str] = field(default_factory=set)
    opaque: list[OpaqueOp] = field(default_factory=list)
    targets: dict[str, str] = field(default_factory=dict)
    folded: list[str] = field(default_factory=list)
    multi: dict[tuple[Any, int], _Tensor] = field(default_factory=dict)
    aliases: dict[tuple[str, str], _Tensor] = field(default_factory=dict)  # view buffers
    copies: dict[str, str] = field(default_factory=dict)  # view -> its contiguous copy
    casts: dict[tuple[str, str], str] = field(default_factory=dict)  # (buffer, dtype) -> cast
    strided: dict[str, _Meta] = field(default_factory=dict)  # non-contiguous view buffers
    user_buffers: dict[str, str] = field(default_factory=dict)  # user input -> its buffer
    mutated: list[str] = field(default_factory=list)  # user inputs written in place
    # eager attentions (_match_attention): result node -> match; the other nodes of each
    attention: dict[Any, _AttentionMatch] = field(default_factory=dict)
    absorbed: set[Any] = field(default_factory=set)
    patterns: bool = True  # from_exported_program(patterns=...): the rewrites below on
    matched: list[PatternMatch] = field(default_factory=list)

    # -------------------------------------------------------------- names and buffers
    def _unique(self, name: str, taken: Mapping[str, Any] | set[str]) -> str:
        name = name[:200]
        if name not in taken:
            return name
        k = 1
        while f"{name}_{k}" in taken:
            k += 1
        return f"{name}_{k}"

    def _buffer(self, name: str, meta: _Meta, *, external: bool) -> tuple[str, Any]:
        name = self._unique(name, self.ids)
        bid = self.builder.alloc_buffer(
            name, meta.nbytes, meta.dtype, meta.ir_shape, external=external
        )
        self.ids[name] = bid
        self.sizes[name] = meta.nbytes
        return name, bid

    def _external(self, name: str, value: Any, what: str) -> _Tensor:
        meta = _meta(value, what)  # its strides too: views of it see eager's layout
        arr = _to_numpy(value.detach().cpu().contiguous()).reshape(meta.ir_shape)
        name, _ = self._buffer(name, meta, external=True)
        self.values[name] = arr
        return _Tensor(name, meta, layout=_layout(value, None, False))

    # -------------------------------------------------------------- nodes
    def placeholder(self, node: Any, spec: Any, value: Any) -> None:
        torch = _torch()
        if not node.users:
            return
        kind = spec.kind.name
        if kind in ("TOKEN", "CUSTOM_OBJ"):
            raise UnsupportedModel(
                f"input {node.name!r} is a {kind.lower()} (effectful ops or script objects); "
                "the importer reads tensors only"
            )
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            self.env[node] = value if value is not None else val  # a specialised Python value
            return
        empty = _empty_value(val)
        if empty is not None:  # (DINOv3's register tokens when a config asks for none)
            self.env[node] = empty
            return
        if value is None:  # an input without an example value: zeros of the right kind
            value = torch.zeros(tuple(val.shape), dtype=val.dtype)
        name = spec.arg.name if kind == "USER_INPUT" else (spec.target or node.name)
        if kind == "CONSTANT_TENSOR":
            # a tensor the module's code holds (not a parameter, buffer or input): no value
            # is bound at run time, so the ops reading only such constants fold (ViT-MAE's
            # mask token broadcast into a constant's slice)
            self.env[node] = self._constant(name, value, f"constant {name!r}")
            return
        self.env[node] = self._external(name, value, f"input {name!r}")
        if kind == "USER_INPUT":
            self.user_buffers[spec.arg.name] = self.env[node].buffer

    def call(self, node: Any) -> None:
        torch = _torch()
        if node in self.absorbed:
            return  # computed by the attention kernel at its result node (attend)
        if node in self.attention:
            self.attend(self.attention[node])
            return
        target = node.target
        scalar = _scalar_ops().get(target)
        if scalar is not None:  # .item(), its comparisons and selections, torch._check
            getattr(self, scalar[0])(node)
            return
        for a in node.all_input_nodes:
            if isinstance(self.env.get(a), _Scalar):
                raise UnsupportedModel(
                    f"node {node.name!r} ({_op_name(target)}) reads {a.name!r}, a value read "
                    "back from a tensor with .item() (data-dependent); the importer computes "
                    "such values only for the model's run-time checks (torch._check), as the "
                    "IR's shapes and parameters are static: keep the value a tensor"
                )
        if target is operator.getitem:
            self.getitem(node)
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            raise UnsupportedModel(
                f"node {node.name!r} is torch.ops.higher_order.{target.__name__} "
                "(data-dependent control flow or a wrapped subgraph); the IR has static "
                "dataflow only: compute the branch outside the module"
            )
        if not isinstance(target, torch._ops.OpOverload):
            raise UnsupportedModel(
                f"node {node.name!r} calls {target!r}, not an ATen op (symbolic-shape "
                "arithmetic?); export with static shapes"
            )
        empty = _empty_value(node.meta.get("val"))
        if empty is not None:
            # Nothing to compute, whatever it reads: an in-place op on it writes nothing, a
            # draw into it draws nothing (Flaubert's cat with an empty tensor, DeepSeek-V4's
            # zeros of a slice of length 0 on their way into a cat that skips them).
            self.env[node] = empty
            return
        if _op_name(target) in _SCATTERS_INTO_BASE and len(node.args) > 1:
            base, src = (self.env.get(a) if _hashable(a) else None for a in node.args[:2])
            if isinstance(src, _Empty) and isinstance(base, (_Tensor, _Empty)):
                # writing no elements into the base leaves it as it was: the result is the
                # base's value (Qwen3.5's slice_scatter of a slice of length 0)
                self.env[node] = base
                return
        if _mutates(target):
            raise UnsupportedModel(
                f"node {node.name!r} ({_op_name(target)}) writes to its input in place; the IR "
                "has no aliasing writes yet: call module.eval() or rewrite the mutation"
            )
        if _draws_random(node):
            # Eager draws new numbers on every call: a kernel running the op would never
            # match it, and one folded at import would replay one draw as if it were a weight.
            raise UnsupportedModel(
                f"node {node.name!r} ({_op_name(target)}) draws random numbers, which eager "
                "draws anew on every call, so no plan computes the module's outputs: call "
                "module.eval() (dropout), or draw them outside and pass them as an input "
                "(ViT-MAE's noise=)"
            )
        val = node.meta.get("val")
        if val is None and not node.users:
            return  # an assertion (aten._assert_tensor_metadata...): checks, computes nothing
        if _is_view(target) and not _converts(node):
            self.view(node)
            return
        if self.patterns and _pad_for_convolutions(node) and self._padded_whole(node):
            self.pad_into_convolutions(node)
            return
        tensors = [
            a for a in _leaves((node.args, tuple(node.kwargs.values()))) if self._is_tensor(a)
        ]
        if (
            not tensors
            or (_op_name(target) in _SHAPE_ONLY and tensors == [node.args[0]])
            or all(self._folded_value(a) is not None for a in tensors)
        ):
            self.fold(node)
            return
        if isinstance(val, (list, tuple)):
            self.env[node] = _Pending(node)
            return
        if self.patterns and _op_name(target) == _CLONE:
            in_place = self._clone_in_place(node)
            if in_place is not None:
                self.env[node] = in_place
                self.matched.append(PatternMatch("clone read in place", (node.name,)))
                return
        self.env[node] = self.kernel(node, None)

    def _clone_in_place(self, node: Any) -> _Tensor | None:
        """``clone`` of a view read only by matmuls (through reshapes), each operand an
        affine map over the view's base: the view itself, which the matmuls read in place
        as strided GEMMs (so no copy kernel); else None. (torch's decomposition clones an
        expanded, permuted head before the ``view`` to ``(batch * heads, s, d)``.)"""
        torch = _torch()
        src = self.env.get(node.args[0])
        if not isinstance(src, _Tensor) or src.list_views or not src.chain or len(node.args) != 1:
            return None
        if node.kwargs.get("memory_format") not in (None, torch.contiguous_format):
            return None
        val = node.meta.get("val")
        step = (node.target, (), tuple((k, _cpu(v)) for k, v in node.kwargs.items()))
        made = _Tensor(src.buffer, src.base, (*src.chain, step), False)
        made = replace(made, shape=tuple(val.shape))
        stack = [(node, made.chain)]
        while stack:
            n, chain = stack.pop()
            users = _users(n)
            if not users:
                return None
            for u in users:
                if _target(u) in _RESHAPES:
                    step = (u.target, tuple(_cpu(a) for a in u.args[1:]), tuple(u.kwargs.items()))
                    stack.append((u, (*chain, step)))
                elif (
                    _target(u) not in _GEMM_TARGETS
                    or n in u.kwargs.values()
                    or _chain_layout(replace(made, chain=chain)) is None
                ):
                    return None
        return replace(made, layout=_chain_layout(made))

    def attend(self, match: _AttentionMatch) -> None:
        """One attention kernel for the nodes of ``match``; if no library op takes it,
        the nodes are converted one by one as any others."""
        sm, last = match.softmax, match.nodes[-1]
        call = SimpleNamespace(
            target=_EagerAttention(match.post, tuple(sm.meta["val"].shape)),
            args=(match.q, match.kt, match.v, match.mask),
            kwargs={"alpha": match.alpha, "divisor": match.divisor},
            name=last.name,
            meta={"val": last.meta["val"], "nn_module_stack": sm.meta.get("nn_module_stack")},
        )
        made = self.kernel(call, None, library_only=True)
        if made is not None:
            self.env[last] = made
            names = tuple(n.name for n in match.nodes)
            kernel = next(reversed(self.targets))  # the kernel kernel() just added
            self.matched.append(PatternMatch("attention", names, kernel))
            return
        del self.attention[last]
        self.absorbed.difference_update(match.nodes)
        for n in match.nodes:
            self.call(n)

    def _alias(
        self, v: _Tensor, pending: dict[tuple[str, str], Any], reshapes: bool = False
    ) -> _Tensor:
        """``v`` as a tensor a consumer reads whole: ``v`` itself for a chain of reshapes of
        a row-major buffer (the same bytes in the same order), else a view buffer over
        ``v``'s base (one per base and chain; a new one is only noted in ``pending`` until
        :meth:`_commit`); ``v`` when the chain is no strided view of the base's row-major
        elements."""
        if not v.chain or v.list_views:
            return v
        names = [_op_name(t) for t, _, _ in v.chain]
        if all(n in _RESHAPES for n in names) and not (
            reshapes and v.shape is not None and tuple(v.shape) != v.base.shape
        ):
            return v  # a reshape read whole is its buffer; with ``reshapes``, one of another
            # shape is a contiguous view buffer of that shape (cat, gather, index read shapes)
        if "aten.view.dtype" in names:  # reinterprets bytes: not an index map
            return v
        key = (v.buffer, repr(v.chain))
        made = self.aliases.get(key) or (pending[key][0] if key in pending else None)
        if made is not None:
            return made
        layout = _view_layout(v)
        if layout is None:
            return v
        shape, strides, offset = layout
        meta = _Meta(shape, None, v.base.dtype)  # read whole, row-major in its own shape
        last = _base_name(v.chain[-1][0]) if hasattr(v.chain[-1][0], "_schema") else "item"
        taken = {**self.ids, **{p[0].buffer: None for p in pending.values()}}
        name = self._unique(f"{v.buffer}.{last}", taken)
        rm = _row_major(meta.ir_shape, strides or (0,))
        made = _Tensor(
            name,
            meta,
            layout=(0, tuple(0 if d == 1 else s for d, s in zip(meta.ir_shape, rm, strict=True))),
        )
        pending[key] = (made, v.buffer, strides or (0,), offset)
        return made

    def _commit(self, pending: dict[tuple[str, str], Any]) -> None:
        """Make the view buffers :meth:`_alias` noted."""
        for key, (made, base, strides, offset) in pending.items():
            meta = made.base
            name = made.buffer
            self.ids[name] = self.builder.view(name, self.ids[base], meta.ir_shape, strides, offset)
            self.sizes[name] = meta.nbytes
            if tuple(strides) != _row_major(meta.ir_shape, strides):
                self.strided[name] = meta
            self.aliases[key] = made

    def _contiguous(self, name: str) -> str:
        """A buffer holding view ``name``'s elements row-major: a ``copy`` kernel into it."""
        done = self.copies.get(name)
        if done is None:
            done = self.copies[name] = self._helper_kernel(
                f"{name}.contiguous", "aten.clone.default", "copy", name, self.strided[name]
            )
        return done

    def _cast(self, name: str, arg: _Arg) -> str:
        """A buffer holding buffer ``name`` (``arg``'s) converted to ``arg.cast``: a
        ``cast_<dtype>`` kernel into it (one per buffer and dtype)."""
        assert arg.cast is not None
        done = self.casts.get((name, arg.cast))
        if done is None:
            done = self.casts[name, arg.cast] = self._helper_kernel(
                f"{name}.to_{arg.cast}",
                "aten._to_copy.default",
                lib_dtype.cast_name(arg.cast),
                name,
                _Meta(arg.base.shape, None, arg.cast),
            )
        return done

    def _helper_kernel(self, name: str, target: str, op: str, source: str, meta: _Meta) -> str:
        """A fusible kernel ``name`` (unique) of the one-input library op ``op`` reading
        buffer ``source`` into a new buffer of ``meta``, standing for ATen's ``target``
        (a copy or cast the importer inserts); the new buffer's name."""
        kname = self._unique(name, self.kernel_names)
        self.kernel_names.add(kname)
        self.targets[kname] = target
        buf, bid = self._buffer(kname, meta, external=False)
        numel = math.prod(meta.ir_shape)
        kb = self.builder.add_kernel(
            kname, max(1, min(math.ceil(numel / _THREADS), 65535)), _THREADS
        )
        kb.op(op).fusible(True).inputs([self.ids[source]]).outputs([bid]).finish()
        return buf

    # ------------------------------------------------------- .item() and run-time checks
    def item(self, node: Any) -> None:
        """``.item()`` (``_local_scalar_dense``): the number of a folded constant, else a
        :class:`_Scalar` of the computed one-element tensor. Integers and bools only: a
        Python float is a double, which a float32 buffer does not hold, so comparing it
        could differ from eager."""
        src = node.args[0]
        folded = self._folded_value(src)
        if folded is not None and folded.numel() == 1:
            self.env[node] = folded.item()  # a constant: as eager reads it
            return
        v = self.env.get(src) if _hashable(src) else None
        val = getattr(src, "meta", {}).get("val")
        if not isinstance(v, _Tensor) or v.list_views or val is None or val.numel() != 1:
            raise UnsupportedModel(
                f"node {node.name!r} reads {getattr(src, 'name', src)!r} back with .item(), "
                "which the importer takes of a computed one-element tensor only"
            )
        if v.base.dtype not in ("bool", "int32", "int64", "uint8", "int8", "int16"):
            raise UnsupportedModel(
                f"node {node.name!r} reads a {v.base.dtype} value back with .item(); the "
                "importer keeps integer and bool values read so (a model's checks on counts "
                "and masks): a float becomes a Python double, which its buffer does not hold"
            )
        self.env[node] = _Scalar(v, node.name)

    def scalar_op(self, node: Any) -> None:
        """``torch.export``'s arithmetic on ``.item()`` values: a comparison, ``sym_not`` or
        ``sym_ite``. Of constants only it is computed now, as eager computes it; of a
        :class:`_Scalar`, it is the ATen op on its buffer (``ge.Scalar``, ``logical_not``,
        ``where.self``), another :class:`_Scalar`."""
        torch = _torch()
        aten = torch.ops.aten
        kind = _scalar_ops()[node.target][1]
        args = []
        for a in node.args:
            if isinstance(a, torch.fx.Node):
                if a not in self.env:
                    raise UnsupportedModel(
                        f"node {node.name!r} ({node.target!r}) reads {a.name!r}, which is no "
                        "value the importer holds (symbolic-shape arithmetic?); export with "
                        "static shapes"
                    )
                a = self.env[a]
            args.append(a)
        if not all(isinstance(a, (_Scalar, bool, int)) for a in args):
            raise UnsupportedModel(
                f"node {node.name!r} ({node.target!r}) computes on "
                f"{', '.join(type(a).__name__ for a in args)}; the importer computes this "
                "arithmetic on integers and bools read with .item() only"
            )
        if not any(isinstance(a, _Scalar) for a in args):
            self.env[node] = node.target(*args)  # constants only: as eager computes them
            return
        if kind == "not":
            target, operands, dtype = aten.logical_not.default, args, torch.bool
        elif kind == "ite":
            cond, yes, no = args
            if not isinstance(cond, _Scalar):
                self.env[node] = yes if cond else no
                return
            # (a branch read with .item() keeps its own dtype, which a number's must match)
            kept = [b.tensor.base.dtype for b in (yes, no) if isinstance(b, _Scalar)]
            if kept:
                dtype = getattr(torch, kept[0])
            else:
                dtype = torch.bool if all(isinstance(b, bool) for b in (yes, no)) else torch.int64
            branches = [self._scalar_constant(node, k, b, dtype) for k, b in ((1, yes), (2, no))]
            target, operands = aten.where.self, [cond, *branches]
        else:  # a comparison: of a scalar and a number, or of two scalars
            x, y = args
            if not isinstance(x, _Scalar):
                x, y, kind = y, x, _SWAPPED_COMPARISON[kind]
            overload = "Tensor" if isinstance(y, _Scalar) else "Scalar"
            target = getattr(getattr(aten, kind), overload)
            operands, dtype = [x, y], torch.bool
        self.env[node] = _Scalar(self._made_kernel(node, target, operands, dtype), node.name)

    def assert_scalar(self, node: Any) -> None:
        """``aten._assert_scalar`` (a ``torch._check`` on ``.item()`` values): a kernel of op
        ``check`` on its condition's buffer, which the executors read back (a false
        condition fails the run with :class:`~oxiwork.error.CheckFailed`); of a constant,
        nothing if it holds, else the import fails, as eager would."""
        cond = node.args[0]
        message = str(node.args[1]) if len(node.args) > 1 else "a run-time check"
        value = self.env.get(cond, cond) if _hashable(cond) else cond
        if not isinstance(value, _Scalar):
            if isinstance(value, (bool, int)) and value:
                return  # holds on the constants
            raise UnsupportedModel(
                f"node {node.name!r}: the model's run-time check ({message}) does not hold "
                f"on {value!r}; eager PyTorch fails it too"
            )
        torch = _torch()
        # named by torch's expression ("check u0 >= 1"), the message kept in the error
        said = re.search(r"expression (.+) on node", message)
        name = f"check {said.group(1) if said else message}"
        self._made_kernel(node, torch.ops.aten._assert_scalar.default, [value], torch.bool, name)

    def _scalar_constant(self, node: Any, k: int, value: Any, dtype: Any) -> Any:
        """Branch ``k`` of ``sym_ite`` ``node``: a :class:`_Scalar` as it is, a number as a
        folded 0-d constant of ``dtype``."""
        if isinstance(value, _Scalar):
            return value
        tensor = _torch().tensor(value, dtype=dtype)
        return self._constant(f"const.{node.name}.{k}", tensor, f"constant {node.name!r}[{k}]")

    def _made_kernel(
        self, node: Any, target: Any, operands: list[Any], dtype: Any, name: str | None = None
    ) -> _Tensor:
        """The library kernel computing ``target`` of ``operands`` (scalars, constants and
        numbers) for ``node``, its result of ``dtype`` and the operands' broadcast shape."""
        torch = _torch()
        args: list[Any] = []
        keys: list[_Key] = []
        shapes: list[tuple[int, ...]] = []
        for k, a in enumerate(operands):
            if isinstance(a, (_Scalar, _Tensor)):
                t = a.tensor if isinstance(a, _Scalar) else a
                key = _Key(f"{node.name}.{k}")
                self.env[key] = t
                keys.append(key)
                args.append(key)
                shapes.append(t.shape if t.shape is not None else t.base.shape)
            else:
                args.append(a)
        meta = {"val": torch.empty(torch.broadcast_shapes(*shapes), dtype=dtype)}
        if node.meta.get("nn_module_stack"):
            meta["nn_module_stack"] = node.meta["nn_module_stack"]
        try:
            out = self.kernel(
                _MadeCall(target, tuple(args), node.name, meta), None, library_only=True,
                base_name=name,
            )  # fmt: skip
        finally:
            for key in keys:
                del self.env[key]
        if not isinstance(out, _Tensor):
            raise UnsupportedModel(
                f"node {node.name!r}: no library op computes {_op_name(target)} of the values "
                "read with .item() it reads"
            )
        return out

    def _is_tensor(self, a: Any) -> bool:
        return isinstance(self.env.get(a) if _hashable(a) else None, (_Tensor, _Pending, _Empty))

    def view(self, node: Any) -> None:
        src = self.env.get(node.args[0])
        if not isinstance(src, _Tensor) or src.list_views:
            raise UnsupportedModel(
                f"view {node.name!r} ({_op_name(node.target)}) has no tensor base to alias"
            )
        rest = tuple(_cpu(a) for a in node.args[1:])
        kwargs = tuple((k, _cpu(v)) for k, v in node.kwargs.items())
        if any(self._is_tensor(a) for a in _leaves((rest, tuple(v for _, v in kwargs)))):
            raise UnsupportedModel(
                f"view {node.name!r} ({_op_name(node.target)}) takes a second tensor; the "
                "importer folds views of one base only"
            )
        step = (node.target, rest, kwargs)
        val = node.meta.get("val")
        lists = isinstance(val, (list, tuple))
        shape = None if lists else tuple(val.shape)
        # a list of views (split) keeps its base's layout: each item's comes from getitem
        lay = src.layout if lists else _layout(val, src.layout, True)
        if not lists and any(
            t is not operator.getitem and _op_name(t) == _CLONE for t, _, _ in src.chain
        ):
            # a clone read in place (_clone_in_place): torch's strides are the copy's
            lay = _chain_layout(_Tensor(src.buffer, src.base, (*src.chain, step), False, shape))
        self.env[node] = _Tensor(src.buffer, src.base, (*src.chain, step), lists, shape, lay)

    def pad_into_convolutions(self, node: Any) -> None:
        """A zero pad read only by convolutions gets no kernel: it is kept on the value,
        like a view, and each convolution pads by that much itself (:func:`_conv`), or
        applies it in its reference if it is opaque."""
        src = self.env.get(node.args[0])
        if not isinstance(src, _Tensor) or src.list_views:
            self.env[node] = self.kernel(node, None)
            return
        step = (node.target, tuple(_cpu(a) for a in node.args[1:]), ())
        shape = tuple(node.meta["val"].shape)
        self.env[node] = _Tensor(src.buffer, src.base, (*src.chain, step), False, shape)
        self.matched.append(PatternMatch("pad into convolutions", (node.name,)))

    def getitem(self, node: Any) -> None:
        src, k = self.env.get(node.args[0]), node.args[1]
        if isinstance(src, _Tensor) and src.list_views:  # a view out of split/unbind
            step = (operator.getitem, (k,), ())
            shape = tuple(node.meta["val"].shape)
            lay = _layout(node.meta["val"], src.layout, True)
            self.env[node] = _Tensor(src.buffer, src.base, (*src.chain, step), False, shape, lay)
        elif isinstance(src, _Pending):
            if not node.users:  # an output nobody reads (kept in a program not decomposed)
                return
            empty = _empty_value(node.meta.get("val"))
            if empty is not None:
                self.env[node] = empty
                return
            key = (src.node, k)
            if key not in self.multi:
                self.multi[key] = self.kernel(src.node, k)
            self.env[node] = self.multi[key]
        elif isinstance(src, (list, tuple)):
            self.env[node] = src[k]
        else:
            raise UnsupportedModel(f"getitem {node.name!r} indexes {type(src).__name__}")

    def fold(self, node: Any) -> None:
        """An op without tensor inputs, one that reads only its input's shape, dtype and
        layout (:data:`_SHAPE_ONLY`, given a stand-in of those), or one reading only
        constants folded before it: computed now, held as a constant buffer."""
        torch = _torch()
        given = node.args
        if _op_name(node.target) in _SHAPE_ONLY:
            like, given = node.args[0].meta["val"], node.args[1:]
        args = _cpu(
            tuple(
                _map_leaves(given, self._fold_arg)
                if given is node.args
                else (self.env.get(a, a) if _hashable(a) else a for a in given)
            )
        )
        if given is not node.args:
            shape = _meta(like, f"the input of {node.name!r}").shape  # (static, checked)
            # eager's strides and dtype: *_like keeps them unless told otherwise
            stand_in = torch.empty_strided(shape, tuple(like.stride()), dtype=like.dtype)
            args = (stand_in.zero_(), *args)
        kwargs = {k: _cpu(_map_leaves(v, self._fold_arg)) for k, v in node.kwargs.items()}
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
            # a multi-output op of constants (CANINE's max pooling with indices of a
            # constant mask): a constant for each output some getitem reads
            read = {u.args[1] for u in node.users if u.target is operator.getitem}
            self.env[node] = tuple(
                self._constant(f"const.{node.name}.{k}", v, f"constant {node.name!r}[{k}]")
                if k in read
                else None
                for k, v in enumerate(value)
            )
            return
        if not isinstance(value, torch.Tensor):
            raise UnsupportedModel(
                f"node {node.name!r} ({_op_name(node.target)}) computes a {type(value).__name__} "
                "from no tensor; the importer folds tensors and tuples of them only"
            )
        self.env[node] = self._constant(f"const.{node.name}", value, f"constant {node.name!r}")

    def _constant(self, name: str, value: Any, what: str) -> _Tensor | _Empty:
        """A folded constant: an external buffer holding ``value`` (none if it is empty)."""
        empty = _empty_value(value)
        if empty is not None:
            return empty
        t = self._external(name, value, what)
        self.folded.append(t.buffer)
        return t

    def _fold_arg(self, a: Any) -> Any:
        """An argument of a folded op: a folded constant's value, a specialised Python
        input's value, or the argument itself."""
        if self._is_tensor(a):
            return self._folded_value(a)
        return self.env.get(a, a) if _hashable(a) else a

    def _folded_value(self, a: Any) -> Any:
        """The value of ``a`` if it is a constant this import folded (or a view of one, the
        views replayed), as a torch tensor of eager's shape; else None. Ops reading only such constants fold
        too (roll's ``fmod(arange + shift, n)`` indices): a parameter or input never does,
        so a value the user binds at run time is never baked in."""
        v = self.env.get(a) if _hashable(a) else None
        if isinstance(v, _Empty):  # no elements: the same whatever runs
            return _torch().empty(v.shape, dtype=v.dtype)
        if not isinstance(v, _Tensor) or v.list_views or v.buffer not in self.folded:
            return None  # (a split not yet indexed is a list: its ops take their own path)
        value = _torch().from_numpy(self.values[v.buffer].copy()).reshape(v.base.shape)
        for target, args, kwargs in v.chain:  # its views, replayed on the value
            value = target(value, *args, **dict(kwargs))
        return value

    def _module_path(self, node: Any) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            return ""
        path = list(stack.values())[-1][0]
        return re.sub(r"@\d+$", "", str(path))

    def _padded_whole(self, node: Any) -> bool:
        """Does the pad ``node`` pad a whole buffer (or a reshape of one, or such a pad), which
        the convolutions reading it can take as their input? A pad of a permuted view
        (CANINE's of a transpose) stays a kernel of its own: the convolution then reads its
        row-major result."""
        v = self.env.get(node.args[0]) if _hashable(node.args[0]) else None
        return isinstance(v, _Tensor) and all(
            _op_name(t) in _RESHAPES or _op_name(t) == "aten.constant_pad_nd.default"
            for t, _, _ in v.chain
        )

    def kernel(
        self,
        node: Any,
        index: int | None,
        *,
        contiguous: bool = False,
        library_only: bool = False,
        base_name: str | None = None,
    ) -> Any:
        """One kernel computing ``node`` (its output ``index`` for multi-output ops); with
        ``library_only``, None instead of an opaque kernel. ``base_name``: the kernel's name
        after its module path (default: the op's)."""
        inputs: list[str] = []
        metas: list[_Meta] = []
        pending: dict[tuple[str, str], Any] | None = None  # view buffers (second attempt)
        order: tuple[int, ...] | None = None  # every operand read in this order (below)

        def arg(a: Any) -> Any:
            if isinstance(a, (list, tuple)):
                return type(a)(arg(v) for v in a)
            v = self.env.get(a) if _hashable(a) else None
            if isinstance(v, _Pending):  # an unindexed multi-output value as an argument
                raise UnsupportedModel(f"node {node.name!r} reads a tuple of tensors whole")
            if isinstance(v, _Tensor):
                if v.list_views:
                    raise UnsupportedModel(f"node {node.name!r} reads a list of views whole")
                if order is not None:
                    v = _permuted(v, order)
                if pending is not None:
                    v = self._alias(v, pending, reshapes)
                if v.buffer not in inputs:
                    inputs.append(v.buffer)
                    metas.append(v.base)
                shape = v.shape if v.shape is not None else v.base.shape
                return _Arg(inputs.index(v.buffer), v.chain, v.base, shape, v.layout)
            if isinstance(v, _Empty) and _op_name(node.target) not in _SKIPS_EMPTY:
                raise UnsupportedModel(
                    f"node {node.name!r} ({_op_name(node.target)}) reads {a.name!r}, a tensor "
                    f"of no elements (shape {v.shape}), into a result of shape "
                    f"{tuple(node.meta['val'].shape)}; the IR has no empty buffers, and only "
                    "cat skips such an operand"
                )
            if v is not None and not isinstance(v, (_Tensor, _Pending)):
                return v  # a specialised Python input (or an empty operand, which cat skips)
            return _cpu(a)

        val = node.meta.get("val")
        if index is not None:
            val = val[index]
        op_name = _op_name(node.target)
        out = _meta(val, f"the result of {node.name!r} ({op_name})")
        if contiguous:
            out = _Meta(out.shape, None, out.dtype)
        path = self._module_path(node)
        base = base_name or _base_name(node.target) + ("" if index in (None, 0) else f"_out{index}")
        name = self._unique(f"{path}.{base}" if path else base, self.kernel_names)
        self.kernel_names.add(name)
        reshapes = False  # read by arg() (a closure), like pending and order

        def attempt(
            out: _Meta, elementwise_only: bool
        ) -> tuple[list[str], list[_Meta], _Call, Any]:
            nonlocal inputs, metas, pending, reshapes
            inputs, metas, pending, reshapes = [], [], None, False
            args = arg(tuple(node.args))
            kwargs = tuple((k, arg(v)) for k, v in node.kwargs.items())
            call = _Call(node.target, args, kwargs, tuple(metas), out, index, self.patterns)
            lib = _library(call)
            if elementwise_only and not isinstance(lib, str) and not _elementwise(lib[0]):
                lib = "not element-wise"
            first = (inputs, metas, call)
            for mode in (False, True):
                reshapes = mode
                if not isinstance(lib, str) or not any(a.chain for a in first[2].tensor_args):
                    break
                # Refused reading views of its inputs: try again reading view buffers
                # (aliases of the bases, read whole), then with reshapes as view buffers of
                # their own shapes too (ops that read shapes: cat, gather, index); keep the
                # first a library op takes.
                inputs, metas, pending = [], [], {}
                args = arg(tuple(node.args))
                kwargs = tuple((k, arg(v)) for k, v in node.kwargs.items())
                call = _Call(node.target, args, kwargs, tuple(metas), out, index, self.patterns)
                again = _library(call)
                if isinstance(again, str) or (elementwise_only and not _elementwise(again[0])):
                    inputs, metas, call = first
                    pending = None
                else:
                    self._commit(pending)
                    lib = again
            return inputs, metas, call, lib

        inputs, metas, call, lib = attempt(out, False)
        physical = None
        if (
            out.strides is not None
            and index is None
            and (isinstance(lib, str) or _elementwise(lib[0]))
        ):
            # (A library op that is not element-wise writes the row-major values of a
            # permuted-dense result, as an opaque op does: its strides stay on the buffer's
            # meta for the views that read it, a channels_last convolution's.)
            # torch keeps an element-wise op's result in its operand's permuted layout (a
            # scaled permute of attention heads): the library op computes the result in
            # that memory order, reading every operand permuted alike, into a row-major
            # buffer of the permuted shape, and the value is its permute back, with torch's
            # strides, so the views after it read what eager reads.
            first = (inputs, metas, call, lib)
            order = _physical_order(out)
            phys = _Meta(tuple(out.shape[k] for k in order), None, out.dtype)
            tried = attempt(phys, True)
            if not isinstance(tried[3], str):
                (inputs, metas, call, lib), physical = tried, (phys, order)
            else:
                inputs, metas, call, lib = first
            order = None
        if isinstance(lib, str) and library_only:
            self.kernel_names.discard(name)
            return None
        if isinstance(lib, str) and any(isinstance(a, _Empty) for a in _leaves(call.args)):
            raise UnsupportedModel(
                f"node {node.name!r} ({op_name}) skips an empty operand, but no library op "
                f"computes it ({lib}); an opaque kernel reads buffers, and the IR has no "
                "empty buffers"
            )
        if isinstance(lib, str):
            op, params, reads = _opaque_op(call).name, {}, [inputs[i] for i in range(len(inputs))]
            self.opaque.append(OpaqueOp(name, op_name, op, lib))
        else:
            if op_name == "aten.topk.default" and not _argv(call, _TOPK, (-1, True, True))[4]:
                self.matched.append(PatternMatch("unsorted topk sorted", (node.name,), name))
            op, params, lib_args = lib
            reads = [inputs[a.index] for a in lib_args]
            # operands torch converts to the dtype it computes in (type promotion)
            reads = [
                self._cast(r, a) if a.cast else r for r, a in zip(reads, lib_args, strict=True)
            ]
            if ops.get(op).fusion_class not in (FusionClass.ELEMENTWISE, FusionClass.BROADCAST):
                # its CUDA C reads whole row-major buffers: a strided view goes through a copy
                reads = [self._contiguous(r) if r in self.strided else r for r in reads]
        self.targets[name] = op_name
        buf, bid = self._buffer(name, out if physical is None else physical[0], external=False)
        numel = math.prod(out.ir_shape)
        kb = self.builder.add_kernel(
            name, max(1, min(math.ceil(numel / _THREADS), 65535)), _THREADS
        )
        kb.op(op).params(**params).fusible(not isinstance(lib, str))
        kb.inputs([self.ids[r] for r in reads]).outputs([bid]).finish()
        if physical is not None:  # the permute back to torch's order (and strides)
            phys, kept = physical
            back = sorted(range(len(kept)), key=kept.__getitem__)  # the inverse permutation
            step = (_torch().ops.aten.permute.default, (back,), ())
            lay = _layout(val, (0, ()), True)
            return _Tensor(buf, phys, (step,), False, out.shape, lay)
        return _Tensor(buf, out, layout=_layout(val, None, False) if out.strides is None else None)

    def output(self, node: Any) -> tuple[list[str], list[tuple[int, ...]]]:
        torch = _torch()
        sig = self.ep.graph_signature
        names: list[str] = []
        shapes: list[tuple[int, ...]] = []
        writes: list[tuple[int, Any, Any]] = []
        for k, (spec, v) in enumerate(zip(sig.output_specs, node.args[0], strict=True)):
            kind = spec.kind.name
            if kind == "USER_INPUT_MUTATION" and spec.target in self.user_buffers:
                writes.append((k, self.user_buffers[spec.target], v))
                continue
            if kind != "USER_OUTPUT":
                what = getattr(spec, "target", None) or spec.arg
                raise UnsupportedModel(
                    f"the module mutates {what} ({kind.lower()}); the importer writes user "
                    "inputs in place only: call module.eval() (batch-norm statistics) or drop "
                    "the mutation"
                )
            if v is None:  # a None among the outputs (an unset ModelOutput field): no tensor
                continue
            value = self.env.get(v) if _hashable(v) else None
            val = v.meta.get("val") if hasattr(v, "meta") else None
            if isinstance(value, _Empty):
                raise UnsupportedModel(
                    f"output {k} is a tensor of no elements (shape {value.shape}); the IR has "
                    "no empty buffers"
                )
            if not isinstance(value, _Tensor) or not isinstance(val, torch.Tensor):
                raise UnsupportedModel(
                    f"output {k} is {type(value if value is not None else v).__name__}, not a "
                    "tensor; the importer reads tensor outputs only"
                )
            if value.chain:  # a view: materialise it (the copy eager's caller would make)
                value = self._materialise(v, value, k)
            names.append(value.buffer)
            shapes.append(tuple(val.shape))
        for k, dst, v in writes:  # in place: the new value into the input's own buffer
            value = self.env.get(v) if _hashable(v) else None
            if not isinstance(value, _Tensor):
                raise UnsupportedModel(f"the new value of input {dst!r} is not a tensor")
            if value.chain:
                value = self._materialise(v, value, k)
            if value.buffer != dst:
                self.builder.add_memcpy(
                    self._unique(f"write {dst}", self.kernel_names),
                    MemcpyDir.DeviceToDevice,
                    self.sizes[dst],
                    src=self.ids[value.buffer],
                    dst=self.ids[dst],
                )
            self.mutated.append(dst)
        for name in dict.fromkeys([*names, *self.mutated]):
            self.builder.add_memcpy(
                self._unique(f"read {name}", self.kernel_names),
                MemcpyDir.DeviceToHost,
                self.sizes[name],
                src=self.ids[name],
            )
        return names, shapes

    def _materialise(self, v: Any, value: _Tensor, k: int) -> _Tensor:
        """A kernel copying output ``k``, a view, into a buffer of its own (``aten.clone``,
        as a caller of the eager module would copy it)."""
        torch = _torch()
        clone = SimpleNamespace(
            target=torch.ops.aten.clone.default,
            args=(v,),
            kwargs={"memory_format": torch.contiguous_format},
            name=f"output_{k}",
            meta={"val": v.meta["val"], "nn_module_stack": {"out": (f"output.{k}", "")}},
        )
        return self.kernel(clone, None, contiguous=True)


def _pad_for_convolutions(node: Any, chain: tuple[Any, ...] = ()) -> bool:
    """Is ``node`` a zero ``constant_pad_nd`` whose only readers are (not transposed)
    convolutions taking it as their input (MobileNet's TensorFlow-style padding), or such pads (a padded input
    padded again: ``padding="same"`` with an even kernel), every convolution sliding over
    each axis the pads before it (``chain`` and ``node``) pad?"""
    if _op_name(node.target) != "aten.constant_pad_nd.default" or not node.users:
        return False
    chain = (*chain, (node.target, tuple(node.args[1:]), ()))

    def reads(u: Any) -> bool:
        if _op_name(u.target) == "aten.convolution.default":
            # (its strides: one per axis); a transposed convolution's padding crops its
            # output, so it cannot apply a pad of its input: the pad stays a kernel
            return not u.args[6] and _zero_pad(chain, len(u.args[3])) is not None
        return _pad_for_convolutions(u, chain)

    return all(
        getattr(u, "target", None) is not None
        and u.args[0] is node
        and all(a is not node for a in u.args[1:])
        and reads(u)
        for u in node.users
    )


def _hashable(a: Any) -> bool:
    try:
        hash(a)
    except TypeError:
        return False
    return True


def from_exported_program(
    ep: Any, *, name: str | None = None, progress: bool | None = None, patterns: bool = True
) -> ImportedModel:
    """Convert a ``torch.export.ExportedProgram`` into an :class:`ImportedModel`.

    Any op set converts (core ATen after ``run_decompositions()`` gives the most library
    ops); the user inputs take the values of ``ep.example_inputs`` (zeros when the program
    has none: replace them in a copy of :attr:`ImportedModel.inputs`).

    Parameters
    ----------
    ep
        The exported program (static shapes, no mutation: see the module docstring).
    name
        The model's name (default ``"model"``).
    progress
        Show a progress bar over the program's nodes (``tqdm.auto``: a widget in a
        notebook); ``None``: only for programs of over 500 nodes.
    patterns
        Replace the patterns Inductor's pattern matcher also replaces before it fuses
        (:class:`PatternMatch`: eager attention as one kernel, a clone its matmuls read in
        place, a zero pad its convolutions apply); each is listed in
        :attr:`ImportedModel.patterns`. ``False``: one kernel per non-view ATen op, the
        graph as exported.

    Raises
    ------
    UnsupportedModel
        The program holds what the IR cannot express; the message says what and why.

    Examples
    --------
    >>> import torch
    >>> ep = torch.export.export(torch.nn.Softmax(dim=-1), (torch.randn(2, 8),))
    >>> model = from_exported_program(ep.run_decompositions(), name="softmax")
    >>> dict(model.targets), model.opaque
    ({'softmax': 'aten._softmax.default'}, ())
    """
    torch = _torch()
    if not isinstance(ep, torch.export.ExportedProgram):
        raise InvalidArgument(
            f"from_exported_program needs a torch.export.ExportedProgram, got "
            f"{type(ep).__name__}; for an nn.Module call from_module(module, args)"
        )
    sig = ep.graph_signature
    examples = getattr(ep, "example_inputs", None)
    leaves = torch.utils._pytree.tree_leaves(examples) if examples is not None else []
    user = [s for s in sig.input_specs if s.kind.name == "USER_INPUT"]
    user_values = (
        dict(zip((s.arg.name for s in user), leaves, strict=True))
        if len(leaves) == len(user)
        else {}
    )
    state = {**ep.state_dict, **ep.constants}
    conv = _Converter(ep, patterns=patterns)
    for node in ep.graph.nodes if patterns else ():
        match = _match_attention(node)
        if match is not None and not conv.absorbed.intersection(match.nodes):
            conv.attention[match.nodes[-1]] = match
            conv.absorbed.update(match.nodes[:-1])
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user_names: list[str] = []
    for node, spec in zip(placeholders, sig.input_specs, strict=True):
        value = (
            user_values.get(node.name) if spec.kind.name == "USER_INPUT" else state.get(spec.target)
        )
        conv.placeholder(node, spec, value)
        t = conv.env.get(node)
        if spec.kind.name == "USER_INPUT" and isinstance(t, _Tensor):
            user_names.append(t.buffer)
    outputs: list[str] = []
    shapes: list[tuple[int, ...]] = []
    nodes = list(ep.graph.nodes)
    if progress is None:
        progress = len(nodes) > _PROGRESS_NODES
    for node in _progress(nodes, progress, f"import {name or 'model'}", "node"):
        if node.op == "call_function":
            conv.call(node)
        elif node.op == "output":
            outputs, shapes = conv.output(node)
        elif node.op == "get_attr":
            continue  # a subgraph of a higher-order op (torch.cond), refused at its call
        elif node.op != "placeholder":
            raise UnsupportedModel(
                f"node {node.name!r} is a {node.op} ({node.target}); exported programs hold "
                "placeholders, calls and one output only (a torch.cond branch?)"
            )
    # (an output that is a parameter or a constant is read by the caller)
    graph = _drop_unread_externals(conv, conv.builder.build(), (*user_names, *outputs))
    return ImportedModel(
        graph=graph,
        inputs=MappingProxyType(conv.values),
        outputs=tuple(outputs),
        output_shapes=tuple(shapes),
        user_inputs=tuple(user_names),
        opaque=tuple(conv.opaque),
        targets=MappingProxyType(conv.targets),
        folded=tuple(conv.folded),
        name=name or "model",
        mutated=tuple(conv.mutated),
        patterns=tuple(conv.matched),
    )


# Above these sizes an import takes seconds: show where it is (tqdm; the issue's "long work").
_PROGRESS_NODES = 500
_PROGRESS_PARAMS = 10_000_000


def _progress(items: Sequence[Any], show: bool, desc: str, unit: str) -> Any:
    """``items``, wrapped in a progress bar when ``show`` (a notebook widget in Jupyter)."""
    if not show:
        return items
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit=unit, leave=False)


def _reason(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    text = "\n".join(lines[:_MAX_REASON_LINES])
    if len(lines) > _MAX_REASON_LINES:
        text += f"\n... ({len(lines) - _MAX_REASON_LINES} more lines)"
    return f"{type(e).__name__}: {text}"


def from_module(
    module: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    progress: bool | None = None,
    patterns: bool = True,
) -> ImportedModel:
    """Export ``module`` on ``args`` (and ``kwargs``) and import it.

    Runs ``torch.export.export(module, args, kwargs)`` and ``run_decompositions()`` (core
    ATen), then :func:`from_exported_program`; a program that returns constants (None)
    among its tensors, or whose outputs the decomposition moves, is imported as exported
    (torch's decomposition can misplace such outputs). The example inputs become the user
    inputs' values. Call ``module.eval()`` first for inference (training-mode batch norm
    mutates its statistics, and dropout draws random numbers eager would not repeat).

    Parameters
    ----------
    module
        A ``torch.nn.Module``.
    args, kwargs
        The example call: tensors with the static shapes to import.
    name
        The model's name (default: the module's class name).
    progress
        Show progress bars for the export and the conversion (``tqdm.auto``); ``None``:
        only for modules of over 10 million parameters (export takes seconds there).
    patterns
        As in :func:`from_exported_program`: ``False`` imports one kernel per non-view op.

    Raises
    ------
    ExportFailed
        ``torch.export`` refused the module (data-dependent control flow...); the message
        and ``reason`` quote torch.
    UnsupportedModel
        The exported program holds what the IR cannot express.

    Examples
    --------
    >>> import torch
    >>> class Branchy(torch.nn.Module):
    ...     def forward(self, x):
    ...         return x if x.sum() > 0 else -x
    >>> from_module(Branchy(), (torch.randn(4),))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    oxiwork.importers.torch.ExportFailed: torch.export could not export Branchy: ...
    """
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise InvalidArgument(
            f"from_module needs a torch.nn.Module, got {type(module).__name__}; for an "
            "ExportedProgram call from_exported_program(ep)"
        )
    if not isinstance(args, (tuple, list)):
        raise InvalidArgument(
            f"args must be a tuple of the module's positional inputs, got {type(args).__name__}: "
            "wrap a single tensor as (x,)"
        )
    label = name or type(module).__name__
    if progress is None:
        progress = sum(p.numel() for p in module.parameters()) > _PROGRESS_PARAMS
    try:
        stages = _progress(["export", "decompose"], progress, f"export {label}", "stage")
        for stage in stages:
            if stage == "export":
                ep = torch.export.export(module, tuple(args), kwargs=dict(kwargs or {}))
            else:
                decomposed = ep.run_decompositions(_decompositions(ep))
                # torch's decomposition can misplace the outputs of a program returning
                # constants among its tensors (AyaVision's hidden states (None, None, x):
                # its pooled features moved before the Nones): such a program, or one whose
                # user outputs changed place, is imported as exported (the importer maps
                # ATen ops undecomposed too, fewer of them)
                before = _output_signature(ep)
                if ("constant",) not in before and _output_signature(decomposed) == before:
                    ep = decomposed
    except Exception as e:  # torch raises many kinds; each becomes one GraphError quoting it
        reason = _reason(e)
        raise ExportFailed(
            f"torch.export could not export {label}: {reason}\nMake the traced code "
            "independent of tensor values (torch.cond, or compute the branch outside the "
            "module) or see the torch.export documentation for the construct it names.",
            reason,
        ) from e
    model = from_exported_program(ep, name=label, progress=progress, patterns=patterns)
    eager = _eager_outputs(module, args, kwargs, len(model.outputs), ep.call_spec.out_spec)
    return replace(model, eager_outputs=eager)


def _output_signature(ep: Any) -> list[tuple[Any, ...]]:
    """Per user output of ``ep`` (not the writes into inputs, which the decomposition adds
    as it makes the program functional): the shape and dtype of a tensor, or
    ``("constant",)``."""
    (out,) = (n for n in ep.graph.nodes if n.op == "output")
    sig = []
    for spec, v in zip(ep.graph_signature.output_specs, out.args[0], strict=True):
        if spec.kind.name != "USER_OUTPUT":
            continue
        val = getattr(v, "meta", {}).get("val")
        if val is None or not hasattr(val, "shape"):
            sig.append(("constant",))
        else:
            sig.append((tuple(val.shape), str(val.dtype)))
    return sig


def _decompositions(ep: Any) -> Any:
    """torch's core ATen decomposition table for ``ep``, less the 3-d resizings a library op
    computes whole (as the table keeps their 2-d twins): trilinear always (``upsample_
    trilinear3d``, one kernel where torch's decomposition is 8 gathers and 21 element-wise
    ops), nearest where each of ``ep``'s resizes by whole factors (``upsample_nearest3d``;
    other factors stay torch's decomposition, a gather the library runs, not an opaque
    kernel)."""
    aten = _torch().ops.aten
    table = _torch().export.default_decompositions()
    table.pop(aten.upsample_trilinear3d.vec, None)

    def maps(node: Any) -> bool:  # (the rule's own test, on the node's static shapes)
        sizes = tuple(int(s) for s in node.args[0].meta["val"].shape[2:])
        outs = tuple(int(s) for s in node.meta["val"].shape[2:])
        return not isinstance(
            _nearest_factors(node.target, node.args[1:], node.kwargs, sizes, outs), str
        )

    if all(maps(n) for n in ep.graph.nodes if n.target is aten.upsample_nearest3d.vec):
        table.pop(aten.upsample_nearest3d.vec, None)
    return table


def _eager_outputs(
    module: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    count: int,
    spec: Any = None,
) -> tuple[np.ndarray, ...] | None:
    """``module``'s eager outputs on copies of the example call (a module that writes
    into its inputs must not change the values :attr:`ImportedModel.inputs` holds), or
    ``None`` when its tensor leaves are not the program's ``count`` user outputs, or its
    output's structure is not the program's ``spec`` (then a leaf's place need not be the
    program's: a ModelOutput's fields in another order)."""
    torch = _torch()
    tree = torch.utils._pytree

    def copy(v: Any) -> Any:
        return v.detach().clone() if isinstance(v, torch.Tensor) else v

    with torch.no_grad():
        out = module(*tree.tree_map(copy, tuple(args)), **tree.tree_map(copy, dict(kwargs or {})))
    flat, structure = tree.tree_flatten(out)
    leaves = [t for t in flat if isinstance(t, torch.Tensor)]
    if len(leaves) != count or (spec is not None and structure != spec):
        return None
    return tuple(_to_numpy(t.detach().cpu().contiguous()) for t in leaves)
