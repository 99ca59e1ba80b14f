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
    "InvalidArgument",
    "InvalidPlan",
    "MalformedFile",
    "MessageError",
    "RaceError",
    "UnknownBuffer",
    "UnknownNode",
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


class UnsupportedOp(GraphError):
    """A kernel has no numpy reference or no CUDA C, so its values cannot be computed."""


class ExecutionError(GraphError):
    """A step failed while executing a plan; names the step, node and buffer."""


class RaceError(ExecutionError):
    """Two accesses to the same bytes are not ordered by happens-before."""


class BackendUnavailable(GraphError):
    """A GPU backend was asked for but the driver, device or library is missing."""


class MessageError(GraphError):
    """A message from the widget frontend is malformed or refers to unknown things."""


class BudgetExceeded(GraphError):
    """A request needs more than its work budget (:class:`oxiwork.budget.Budget`) allows;
    the message names the budget and how to raise it."""


# The seed's ``GraphResult<T>`` is Rust's ``Result``; in Python a function either
# returns its value or raises. The alias keeps the seed's public name importable.
GraphResult = object
