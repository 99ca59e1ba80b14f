"""Core node types of the computation graph: ids, kinds, kernel configs, buffers, nodes.

Everything here is immutable (frozen, slotted dataclasses and enums), so a pass that
changes a graph returns a new one and the old one stays valid: every pass yields a
before/after pair for free.

Ids are ``int`` subclasses: they hash and compare at C speed (analyses of 100k-node
graphs key dicts by them) and serialise as plain numbers, while the type still tells a
node id from a buffer id.

Example
-------
>>> from oxiwork.node import KernelConfig
>>> KernelConfig.linear(4, 256).total_threads
1024
"""

from __future__ import annotations

import enum
import math
import operator
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import ml_dtypes  # noqa: F401  (registers numpy's "bfloat16", see DTYPES)

from oxiwork import validate
from oxiwork.error import InvalidArgument, IterationLimit
from oxiwork.validate import (
    MAX_BLOCK_DIM,
    MAX_BLOCK_THREADS,
    MAX_GRID_X,
    MAX_GRID_YZ,
    MAX_SHARED_MEM_BYTES,
)

__all__ = [
    "BODY_KINDS",
    "DTYPES",
    "FLOAT_DTYPES",
    "MAX_BLOCK_DIM",
    "MAX_BLOCK_THREADS",
    "MAX_GRID_X",
    "MAX_GRID_YZ",
    "MAX_SHARED_MEM_BYTES",
    "MEMORY_KINDS",
    "Buffer",
    "BufferId",
    "CondKind",
    "FusedProgram",
    "FusedStep",
    "GraphNode",
    "KernelConfig",
    "MemcpyDir",
    "NodeId",
    "NodeKind",
    "StreamId",
    "conditional_runs",
    "view_bytes",
]

if TYPE_CHECKING:  # annotations only: graph.py sits above this module
    from oxiwork.graph import ComputeGraph

# The CUDA limits (MAX_*) are defined with the other bounds in oxiwork.validate.

# numpy dtype name -> bytes per element. One place defines what a buffer may hold.
# numpy has no bfloat16: ml_dtypes (the package JAX uses) registers one with numpy when
# imported, so ``np.dtype("bfloat16")`` and ``array.view("bfloat16")`` work everywhere
# a buffer's dtype name is turned into a numpy dtype.
DTYPES: Mapping[str, int] = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "bool": 1,
}

# The floating-point dtypes (bfloat16's numpy kind is "V", not "f": ask this set instead).
FLOAT_DTYPES: frozenset[str] = frozenset({"float32", "float64", "float16", "bfloat16"})


class NodeId(int):
    """Identifier of a node in a :class:`~oxiwork.graph.ComputeGraph`.

    >>> NodeId(3)
    NodeId(3)
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"NodeId({int(self)})"


class BufferId(int):
    """Identifier of a device buffer.

    >>> BufferId(0)
    BufferId(0)
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"BufferId({int(self)})"


class StreamId(int):
    """Identifier of a CUDA stream (0 is the first stream the plan uses).

    Stream ids are interned: ``StreamId(1)`` is one object however often it is made.
    Every node and plan step names its stream, so a 100k-node plan made ~90k stream-id
    objects for its 4 streams, each one tracked and scanned by the garbage collector (an
    int subclass's instances are, as any heap type's). Node and buffer ids are not
    interned: :class:`~oxiwork.builder.GraphBuilder` tells its own ids from another
    builder's by identity.

    >>> StreamId(1)
    StreamId(1)
    >>> StreamId(1) is StreamId(1)
    True
    """

    __slots__ = ()

    def __new__(cls, value: Any = 0) -> StreamId:
        try:
            hit = _STREAM_IDS.get(value)
        except TypeError:  # unhashable: int() below says what is wrong with it
            hit = None
        if hit is not None:
            return hit
        made = int.__new__(cls, value)
        if 0 <= made < _STREAM_ID_LIMIT:  # a hostile file's huge ids cannot grow the table
            _STREAM_IDS[int(made)] = made
        return made

    def __repr__(self) -> str:
        return f"StreamId({int(self)})"


_STREAM_IDS: dict[int, StreamId] = {}
_STREAM_ID_LIMIT = 1 << 12


class NodeKind(enum.Enum):
    """What a node does. Member names follow the seed (``NodeKind::KernelLaunch``...)."""

    KernelLaunch = "kernel"
    Memcpy = "memcpy"
    Memset = "memset"
    EventRecord = "event_record"
    EventWait = "event_wait"
    HostCallback = "host_callback"
    Barrier = "barrier"
    #: runs a whole :class:`~oxiwork.graph.ComputeGraph` (``bodies[0]``) as one node
    #: (``cudaGraphAddChildGraphNode``).
    ChildGraph = "child_graph"
    #: runs one of its ``bodies`` (or none, or one repeatedly) chosen on the device by the
    #: value of its ``condition`` buffer (``cudaGraphConditionalHandle``, CUDA 12.4+).
    Conditional = "conditional"
    #: graph-owned memory: the buffer in ``outputs`` is allocated here
    #: (``cudaGraphAddMemAllocNode``); every use of it comes after this node.
    MemAlloc = "mem_alloc"
    #: frees the buffer in ``outputs`` (``cudaGraphAddMemFreeNode``); every use comes before.
    MemFree = "mem_free"

    @property
    def noun(self) -> str:
        """How messages name a node of this kind (``"event record"``).

        >>> NodeKind.HostCallback.noun
        'host callback'
        """
        return "memcpy" if self is NodeKind.Memcpy else self.value.replace("_", " ")


#: Node kinds that hold body graphs in ``GraphNode.bodies``.
BODY_KINDS = frozenset({NodeKind.ChildGraph, NodeKind.Conditional})
#: Node kinds that bound a graph-owned buffer's lifetime.
MEMORY_KINDS = frozenset({NodeKind.MemAlloc, NodeKind.MemFree})


class CondKind(enum.Enum):
    """Which conditional node (CUDA's ``cudaGraphCondType``).

    - ``If``: ``bodies[0]`` runs once when the condition is non-zero; an optional
      ``bodies[1]`` (else) runs when it is zero (CUDA 12.8's two-body IF).
    - ``While``: ``bodies[0]`` runs while the condition is non-zero, tested before each
      iteration (the body may change it); ``max_iterations`` bounds the loop so nothing
      hangs: an executor that reaches it raises instead of running on.
    - ``Switch``: ``bodies[k]`` runs for condition value ``k``; a value outside
      ``0..len(bodies)-1`` runs nothing (as on a GPU).

    >>> CondKind("while").name
    'While'
    """

    If = "if"
    While = "while"
    Switch = "switch"

    def chooses(self, value: float, n_bodies: int) -> int | None:
        """Which body runs when the condition's first element is ``value`` (``None``: none).

        The one definition the reference, the simulator and the generated CUDA C (which
        sets the conditional handle) follow: IF and WHILE test ``value != 0`` (NaN is
        non-zero, as in C); SWITCH truncates ``value`` towards zero and runs that case when
        it is in ``0..n_bodies-1`` (a non-finite value runs none).

        >>> CondKind.If.chooses(0.0, 2), CondKind.If.chooses(3.0, 1), CondKind.If.chooses(0, 1)
        (1, 0, None)
        >>> CondKind.Switch.chooses(2.9, 3), CondKind.Switch.chooses(3, 3)
        (2, None)
        """
        v = float(value)
        if self is CondKind.Switch:
            if not math.isfinite(v):
                return None
            k = math.trunc(v)
            return k if 0 <= k < n_bodies else None
        if v != 0:  # NaN != 0 too
            return 0
        return 1 if self is CondKind.If and n_bodies == 2 else None


class MemcpyDir(enum.Enum):
    """Direction of a copy, as in the seed's ``MemcpyDir``."""

    HostToDevice = "h2d"
    DeviceToHost = "d2h"
    DeviceToDevice = "d2d"
    PeerToPeer = "p2p"


@dataclass(frozen=True, slots=True)
class KernelConfig:
    """Launch configuration: grid and block as 3-tuples, dynamic shared memory in bytes.

    Validated against CUDA's limits on construction.

    >>> KernelConfig((2, 2, 1), (16, 16, 1)).total_blocks
    4
    >>> KernelConfig((2, 2, 1), (16, 16, 1)).total_threads
    1024
    """

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem_bytes: int = 0

    def __post_init__(self) -> None:
        grid = validate.dims(self.grid, "grid")
        block = validate.dims(self.block, "block")
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "block", block)
        for axis, g in zip("xyz", grid, strict=True):
            if g <= 0:
                raise InvalidArgument(f"grid.{axis} is {g}; every grid dimension must be >= 1")
        if grid[0] > MAX_GRID_X:
            raise InvalidArgument(f"grid.x is {grid[0]}; CUDA allows at most {MAX_GRID_X}")
        for axis, g in zip("yz", grid[1:], strict=True):
            if g > MAX_GRID_YZ:
                raise InvalidArgument(
                    f"grid.{axis} is {g}; CUDA allows at most {MAX_GRID_YZ}: "
                    "move the extra work to grid.x or loop inside the kernel"
                )
        for axis, b, cap in zip("xyz", block, MAX_BLOCK_DIM, strict=True):
            if b <= 0:
                raise InvalidArgument(f"block.{axis} is {b}; every block dimension must be >= 1")
            if b > cap:
                raise InvalidArgument(f"block.{axis} is {b}; CUDA allows at most {cap}")
        threads = block[0] * block[1] * block[2]
        if threads > MAX_BLOCK_THREADS:
            raise InvalidArgument(
                f"block {block} has {threads} threads; CUDA allows at most "
                f"{MAX_BLOCK_THREADS} per block: use more blocks instead"
            )
        validate.shared_mem(self.shared_mem_bytes, "shared_mem_bytes")

    @classmethod
    def linear(cls, blocks: int, threads: int, smem: int = 0) -> KernelConfig:
        """A 1-D launch of ``blocks`` x ``threads``."""
        return cls((blocks, 1, 1), (threads, 1, 1), smem)

    @property
    def total_blocks(self) -> int:
        """Number of blocks in the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int:
        """Threads in one block."""
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def total_threads(self) -> int:
        """Threads in the whole launch."""
        return self.total_blocks * self.threads_per_block


@dataclass(frozen=True, slots=True)
class Buffer:
    """A named device buffer.

    ``offset`` is ``None`` until the memory pass places the buffer in the arena.
    ``external`` buffers are owned by the user (bound at run time, never placed in the
    arena, never reused); an external buffer may be read without being written.

    A *view* (``base`` set) aliases the bytes of another buffer, its base, and allocates
    nothing: element ``i`` of the view is element ``view_offset + sum(i[k] * strides[k])``
    of the base's flat storage (offset and strides count elements of the base's dtype,
    which the view shares; a stride may be 0, as ``expand`` makes). A view needs a
    ``shape``; its ``size_bytes`` is that shape's, its ``offset`` stays ``None`` (its
    address is its base's plus ``view_offset`` elements) and the base is never itself a
    view (:meth:`GraphBuilder.view <oxiwork.builder.GraphBuilder.view>` composes a view of
    a view into one of the base). Every access to a view is an access to its base.

    >>> from oxiwork.node import Buffer, BufferId
    >>> t = Buffer(BufferId(1), "xT", 24, shape=(3, 2), base=BufferId(0), strides=(1, 3))
    >>> t.is_view, t.is_contiguous, t.view_extent
    (True, False, 6)
    """

    id: BufferId
    name: str
    size_bytes: int
    dtype: str = "float32"
    shape: tuple[int, ...] | None = None
    alignment: int = 256
    external: bool = False
    offset: int | None = None
    base: BufferId | None = None
    view_offset: int = 0
    strides: tuple[int, ...] | None = None

    @property
    def itemsize(self) -> int:
        """Bytes per element of ``dtype``."""
        return DTYPES[self.dtype]

    @property
    def num_elements(self) -> int:
        """Elements the buffer holds (``size_bytes // itemsize``)."""
        return self.size_bytes // self.itemsize

    @property
    def array_shape(self) -> tuple[int, ...]:
        """``shape`` if given, else a flat ``(num_elements,)``."""
        return self.shape if self.shape is not None else (self.num_elements,)

    @property
    def is_view(self) -> bool:
        """True if this buffer aliases a base buffer (``base`` is set)."""
        return self.base is not None

    @property
    def view_extent(self) -> int:
        """One past the last element of the base a view covers (``num_elements`` for a
        buffer that is not a view): the view is in bounds when this is at most the
        base's ``num_elements``."""
        if self.strides is None:
            return self.view_offset + self.num_elements
        return (
            self.view_offset
            + 1
            + sum((d - 1) * s for d, s in zip(self.array_shape, self.strides, strict=True))
        )

    @property
    def is_contiguous(self) -> bool:
        """True if the elements lie in row-major order without gaps (a plain buffer, or a
        view whose strides are the row-major strides of its shape)."""
        if self.strides is None:
            return True
        want = 1
        for d, s in zip(reversed(self.array_shape), reversed(self.strides), strict=True):
            if d != 1 and s != want:
                return False
            want *= d
        return True


@dataclass(frozen=True, slots=True)
class FusedStep:
    """One op application inside a fused kernel.

    ``args`` refer to the fused kernel's inputs (``("in", k)``) or to the result of an
    earlier step (``("step", j)``).
    """

    op: str
    params: tuple[tuple[str, Any], ...]
    args: tuple[tuple[str, int], ...]
    node: NodeId  # the original node this step came from


@dataclass(frozen=True, slots=True)
class FusedProgram:
    """The body of a fused kernel: steps in order and which step feeds which output.

    ``outputs[k]`` is the step whose result is written to the kernel's k-th output.
    """

    steps: tuple[FusedStep, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A node of the DAG. ``kind`` says which of the optional fields are meaningful.

    - kernels: ``config``, ``fusible``, ``op`` (a registered op name, or ``None`` for an
      opaque kernel), ``params``, ``fused`` (set on kernels made by the fusion pass),
      ``fused_from`` (the original nodes a fused kernel replaces);
    - copies: ``memcpy_dir``, ``size_bytes``;
    - memsets: ``size_bytes``, ``memset_value`` (a byte value 0..255);
    - event record/wait: ``event`` (the node id of the record a wait waits for);
    - host callbacks: ``label``, ``fn`` (not serialised, not compared);
    - child graphs: ``bodies`` (one :class:`~oxiwork.graph.ComputeGraph`);
    - conditionals: ``cond_kind`` (:class:`CondKind`), ``condition`` (the buffer whose
      first element decides, :meth:`CondKind.chooses`), ``bodies`` (IF: then[, else];
      WHILE: one; SWITCH: one per case) and ``max_iterations`` (WHILE's bound);
    - memory alloc/free: the buffer in ``outputs`` (both conflict with every other access
      of it, so the ordering invariant orders them against every use).

    ``inputs``/``outputs`` are the buffers read and written; for a child graph or a
    conditional they are the union of its bodies' accesses (and the condition, read), so
    ordering, races, streams and memory planning treat it as one node touching them. ``stream`` is a pin or,
    after the stream pass, the assigned stream. ``cost`` overrides the cost model.
    """

    id: NodeId
    name: str
    kind: NodeKind
    inputs: tuple[BufferId, ...] = ()
    outputs: tuple[BufferId, ...] = ()
    stream: StreamId | None = None
    cost: float | None = None
    config: KernelConfig | None = None
    fusible: bool = False
    op: str | None = None
    params: tuple[tuple[str, Any], ...] = ()
    fused: FusedProgram | None = None
    fused_from: tuple[NodeId, ...] = ()
    memcpy_dir: MemcpyDir | None = None
    size_bytes: int = 0
    memset_value: int = 0
    event: NodeId | None = None
    label: str = ""
    fn: Callable[[], Any] | None = field(default=None, compare=False, repr=False)
    bodies: tuple[ComputeGraph, ...] = ()
    cond_kind: CondKind | None = None
    condition: BufferId | None = None
    max_iterations: int = 0

    @property
    def is_kernel(self) -> bool:
        """True for kernel launches."""
        return self.kind is NodeKind.KernelLaunch

    @property
    def param_dict(self) -> dict[str, Any]:
        """``params`` as a dict."""
        return dict(self.params)

    @property
    def function_name(self) -> str:
        """Name of the CUDA function this node launches (kernels only)."""
        return self.op if self.fused is None and self.op else _c_ident(self.name)

    def replace(self, **changes: Any) -> GraphNode:
        """A copy with ``changes`` applied.

        >>> GraphNode(NodeId(0), "k", NodeKind.KernelLaunch).replace(name="j").name
        'j'
        """
        # Positionally, all fields read at once (passes copy every node of 100k-node graphs;
        # dataclasses.replace walks the fields in Python: about 1.7x slower). An unknown
        # field takes dataclasses.replace for its TypeError.
        if not _NODE_POSITIONAL or not changes.keys() <= _NODE_FIELD_INDEX.keys():
            return replace(self, **changes)
        values = list(_NODE_VALUES(self))
        for k, v in changes.items():
            values[_NODE_FIELD_INDEX[k]] = v
        return GraphNode(*values)


# GraphNode's fields in __init__ order, for GraphNode.replace.
_NODE_FIELD_INDEX = {f.name: i for i, f in enumerate(fields(GraphNode))}
_NODE_POSITIONAL = all(f.init for f in fields(GraphNode))
_NODE_VALUES = operator.attrgetter(*_NODE_FIELD_INDEX)

_NOT_C = re.compile(r"[^A-Za-z0-9_]")


def _c_ident(name: str) -> str:
    """A valid C identifier derived from an arbitrary (possibly hostile) node name."""
    out = _NOT_C.sub("_", name)  # one pass in C: fused kernels' names run to 200 characters
    if not out or out[0].isdigit():
        out = "k_" + out
    return out


def view_bytes(
    base: Any, dtype: str, shape: tuple[int, ...], view_offset: int, strides: tuple[int, ...]
) -> tuple[Any, Any]:
    """A view's typed array and the bytes it covers, over its base's bytes ``base`` (a flat
    ``uint8`` numpy array): numpy's strided view, so writes through it land in the base.

    The one place the executors and the reference evaluator turn a view's layout into
    memory. The caller has checked the view against its base (:func:`oxiwork.graph.check_view`).

    >>> import numpy as np
    >>> base = np.arange(6, dtype=np.float32).view(np.uint8)
    >>> typed, covered = view_bytes(base, "float32", (3, 2), 0, (1, 3))
    >>> typed.tolist(), covered.size
    ([[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]], 24)
    >>> typed[0, 1] = -1.0
    >>> base.view(np.float32)[3]
    np.float32(-1.0)
    """
    import numpy as np

    itemsize = DTYPES[dtype]
    last = view_offset + sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
    covered = base[view_offset * itemsize : (last + 1) * itemsize]
    typed = np.lib.stride_tricks.as_strided(
        covered.view(dtype), shape=shape, strides=tuple(s * itemsize for s in strides)
    )
    return typed, covered


def conditional_runs(node: GraphNode, read: Callable[[], float], cond_name: str) -> Iterator[int]:
    """The bodies a conditional node runs, in order, as indices into ``node.bodies``.

    ``read()`` returns the condition's first element *now*; it is called before each
    iteration, so a WHILE body that changes the condition is seen. The one definition of
    the control flow the reference evaluator and the simulator share.

    Raises
    ------
    IterationLimit
        A WHILE node would start iteration ``max_iterations + 1``.

    Examples
    --------
    >>> n = GraphNode(NodeId(0), "loop", NodeKind.Conditional, cond_kind=CondKind.While,
    ...               bodies=(None,), max_iterations=5)  # type: ignore[arg-type]
    >>> counter = [3]
    >>> def body_ran():
    ...     counter[0] -= 1
    >>> runs = []
    >>> for k in conditional_runs(n, lambda: counter[0], "c"):
    ...     runs.append(k)
    ...     body_ran()
    >>> runs
    [0, 0, 0]
    """
    kind = node.cond_kind
    if kind is None:
        raise InvalidArgument(f"{node.name!r} is not a conditional node")
    count = len(node.bodies)
    if kind is not CondKind.While:
        k = kind.chooses(read(), count)
        if k is not None:
            yield k
        return
    for _ in range(node.max_iterations):
        if kind.chooses(read(), count) is None:
            return
        yield 0
    value = read()
    if kind.chooses(value, count) is not None:
        raise IterationLimit(
            f"WHILE node {node.name!r} ran its max_iterations={node.max_iterations} "
            f"iterations and its condition {cond_name!r} is still {float(value):g}: its body never "
            "sets it to 0 (on a GPU the loop would not end); fix the body, or raise "
            "max_iterations if the loop really needs more"
        )
