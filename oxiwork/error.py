"""Error types for the oxiwork engine.

Every bad input is rejected with a subclass of :class:`GraphError` whose message says
what is wrong (naming the node or buffer) and what to do about it. The hierarchy is
deliberately shallow, in the spirit of networkx's ``exception.py``.

Example
-------
>>> from oxiwork import GraphBuilder, GraphError
>>> b = GraphBuilder()
>>> try:
...     b.alloc_buffer("x", 0)
... except GraphError as e:
...     print(type(e).__name__)
InvalidArgument
"""

from __future__ import annotations

__all__ = [
    "BackendUnavailable",
    "BudgetExceeded",
    "CycleError",
    "EmptyGraph",
    "ExecutionError",
    "GraphError",
    "GraphResult",
    "GraphWarning",
    "InvalidArgument",
    "InvalidLifetime",
    "InvalidPlan",
    "IterationLimit",
    "MalformedFile",
    "MessageError",
    "RaceError",
    "UnknownBuffer",
    "UnknownNode",
    "UnorderedAccess",
    "UnsupportedOp",
]


class GraphError(Exception):
    """Base class of every error oxiwork raises on purpose."""


class InvalidArgument(GraphError, ValueError):
    """A value is out of range or of the wrong type (sizes, dimensions, names...)."""


class UnknownNode(GraphError, KeyError):
    """A node id does not belong to this graph or builder."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0]) if self.args else ""


class UnknownBuffer(GraphError, KeyError):
    """A buffer id (or name) does not belong to this graph or builder."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CycleError(GraphError):
    """The dependencies form a cycle; ``cycle`` lists the node names around it."""

    def __init__(self, message: str, cycle: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.cycle = cycle


class EmptyGraph(GraphError):
    """An operation needs at least one node."""


class MalformedFile(GraphError, ValueError):
    """A serialised graph (JSON) is not valid: wrong version, missing fields, wrong types."""


class InvalidPlan(GraphError):
    """An ExecutionPlan breaks an invariant (ordering, events, arena overlap, alignment)."""


class UnorderedAccess(InvalidPlan):
    """Two accesses to the same bytes, at least one a write, that nothing orders.

    In a graph, no path of edges leads from one node to the other; in a plan, neither
    stream order nor an event record/wait pair makes one step happen before the other.
    Either way an executor may run them in either order, so the result is not defined.
    Raised by :func:`oxiwork.verify.verify` for graphs and plans, and so by
    :meth:`ComputeGraph.from_json <oxiwork.graph.ComputeGraph.from_json>`,
    :meth:`~oxiwork.graph.ComputeGraph.with_changes` and every executor. It is an
    :class:`InvalidPlan` so that code catching plan errors catches it for plans too.

    The fields say what the message says, for code that formats its own text:

    Attributes
    ----------
    buffer : str
        The buffer whose accesses are unordered (for two buffers on overlapping arena
        bytes, ``"a" / "b"``; see ``buffers``).
    buffers : tuple of str
        The buffer the first and the second access touch (the same name twice unless the
        memory plan put two buffers on the same bytes).
    first, second : int
        The two nodes (graph) or steps (plan), earlier one first (topological or plan order).
    first_name, second_name : str
        Their names.
    first_access, second_access : str
        ``"read"`` or ``"write"``.
    missing : str
        What would order them: the edge to add (graph) or the event to record and wait
        for (plan).
    in_plan : bool
        True for plan steps, False for graph nodes.
    """

    def __init__(
        self,
        message: str,
        *,
        buffers: tuple[str, str] = ("", ""),
        first: int = -1,
        second: int = -1,
        first_name: str = "",
        second_name: str = "",
        first_access: str = "",
        second_access: str = "",
        missing: str = "",
        in_plan: bool = False,
    ) -> None:
        # Defaults only so that copy and pickle (which call cls(*args), then restore
        # __dict__) can rebuild it; oxiwork always passes every field.
        super().__init__(message)
        self.buffers = buffers
        self.buffer = buffers[0] if buffers[0] == buffers[1] else f"{buffers[0]} / {buffers[1]}"
        self.first = first
        self.second = second
        self.first_name = first_name
        self.second_name = second_name
        self.first_access = first_access
        self.second_access = second_access
        self.missing = missing
        self.in_plan = in_plan


class InvalidLifetime(InvalidPlan):
    """Graph-owned memory used outside its alloc/free nodes: a use before the alloc, a use
    after the free, a double free, or a free of memory the graph did not allocate.

    ``buffer`` names the buffer, ``node`` the node id at fault.
    """

    def __init__(self, message: str, *, buffer: str = "", node: int = -1) -> None:
        super().__init__(message)
        self.buffer = buffer
        self.node = node


class UnsupportedOp(GraphError):
    """A kernel has no numpy reference or no CUDA C, so its values cannot be computed."""


class ExecutionError(GraphError):
    """A step failed while executing a plan; names the step, node and buffer."""


class CheckFailed(ExecutionError):
    """A run-time check of the program (a kernel of an op with ``OpDef.check``, such as a
    model's ``torch._check`` kept by ``torch.export``) found its condition false: the inputs
    break a condition the program itself requires, and eager PyTorch raises there too. The
    simulator raises it at the check's step, a GPU executor's ``run`` after the run."""


class IterationLimit(ExecutionError):
    """A WHILE node ran ``max_iterations`` times and its condition was still non-zero: the
    body never ends the loop (on a GPU it would hang). Raised instead of running on."""


class RaceError(ExecutionError):
    """Two accesses to the same bytes are not ordered by happens-before."""


class BackendUnavailable(GraphError):
    """A GPU backend was asked for but the driver, device or library is missing."""


class MessageError(GraphError):
    """A message from the widget frontend is malformed or refers to unknown things."""


class GraphWarning(UserWarning):
    """Something is suspicious but not wrong (a buffer read before anyone writes it...)."""


class BudgetExceeded(GraphError):
    """A request needs more than its work budget (:class:`oxiwork.budget.Budget`) allows;
    the message names the budget and how to raise it."""


# The seed's ``GraphResult<T>`` is Rust's ``Result``; in Python a function either
# returns its value or raises. The alias keeps the seed's public name importable.
GraphResult = object
