"""Work budgets: how much memory the simulator may allocate and how far the widget may
grow a graph, so that no request can make the kernel allocate gigabytes or block for long.

A :class:`Budget` is in force for a block of code (:func:`using`; a
:class:`~oxiwork.widget.workbench.Workbench` runs its engine under its own ``budget=``) or
process-wide (:func:`set_default`). Exceeding it raises
:class:`~oxiwork.error.BudgetExceeded`, which names the limit and how to raise it.

Example
-------
>>> import numpy as np
>>> from oxiwork import ExecutionPlan, Simulator
>>> from oxiwork.examples import quick_start
>>> plan = ExecutionPlan.build(quick_start())
>>> with using(Budget(sim_bytes=1024)):
...     try:
...         Simulator(plan, {"input": np.ones(1024, np.float32)})
...     except BudgetExceeded as e:
...         print(str(e).split(":")[0])
the simulator's arena needs 8192 bytes; the budget allows 1024 (Budget.sim_bytes)
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

from oxiwork import validate
from oxiwork.error import BudgetExceeded, InvalidArgument
from oxiwork.graph import ComputeGraph

__all__ = ["DEFAULT", "Budget", "BudgetExceeded", "check_growth", "check_sim_bytes", "current",
           "set_default", "using"]  # fmt: skip

_HOW = (
    "raise it with Workbench(..., budget=Budget({field}=...)), "
    "`with oxiwork.budget.using(Budget({field}=...)):` or "
    "oxiwork.budget.set_default(Budget({field}=...))"
)


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on the work one request may cause.

    Parameters
    ----------
    sim_bytes
        Bytes the simulator (and the sequential executor) may allocate for a plan's buffers:
        its arena pool plus the private arrays of external and unplaced buffers. Default
        1 GiB; filling that takes about a second.
    max_nodes, max_buffers
        Nodes and buffers a graph may grow to through the widget's edits (a graph given from
        Python may be larger; edits that do not add nodes or buffers are always allowed).

    >>> Budget(sim_bytes=2**20).max_nodes
    5000
    """

    sim_bytes: int = 2**30
    # About as many as the pass pipeline and the views redo in a few seconds per edit.
    max_nodes: int = 5_000
    max_buffers: int = 5_000

    def __post_init__(self) -> None:
        for field in ("sim_bytes", "max_nodes", "max_buffers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidArgument(
                    f"Budget.{field} must be an int > 0, got {validate.shown(value)}"
                )


DEFAULT = Budget()
_current: contextvars.ContextVar[Budget] = contextvars.ContextVar("oxiwork_budget")
_default = [DEFAULT]


def current() -> Budget:
    """The budget in force: the innermost :func:`using`, else the process default."""
    return _current.get(_default[0])


def set_default(budget: Budget) -> Budget:
    """Make ``budget`` the process-wide default; return the previous one."""
    if not isinstance(budget, Budget):
        raise InvalidArgument(f"set_default needs a Budget, got {type(budget).__name__}")
    old, _default[0] = _default[0], budget
    return old


@contextlib.contextmanager
def using(budget: Budget | None) -> Iterator[Budget]:
    """Run a block under ``budget`` (``None``: the budget already in force)."""
    if budget is None:
        yield current()
        return
    if not isinstance(budget, Budget):
        raise InvalidArgument(f"budget must be a Budget, got {type(budget).__name__}")
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def check_sim_bytes(nbytes: int, what: str) -> None:
    """Refuse an allocation of ``nbytes`` for ``what`` beyond ``current().sim_bytes``."""
    limit = current().sim_bytes
    if nbytes > limit:
        raise BudgetExceeded(
            f"{what} needs {nbytes} bytes; the budget allows {limit} (Budget.sim_bytes): "
            + _HOW.format(field="sim_bytes")
        )


def check_growth(before: ComputeGraph, after: ComputeGraph) -> None:
    """Refuse a widget edit that grows graph ``before`` into ``after`` past :func:`current`'s
    limits: nodes, buffers, and buffer bytes (what simulating it would allocate, at most).

    Only growth is refused: an edit that adds no node, buffer or byte always passes, so a
    graph given from Python larger than the budget can still be renamed or reduced.
    """
    b = current()
    n0, n1 = len(before.nodes), len(after.nodes)
    if n1 > n0 and n1 > b.max_nodes:
        raise BudgetExceeded(
            f"the graph would have {n1} nodes; the budget allows {b.max_nodes} "
            "(Budget.max_nodes): " + _HOW.format(field="max_nodes")
        )
    k0, k1 = len(before.buffers), len(after.buffers)
    if k1 > k0 and k1 > b.max_buffers:
        raise BudgetExceeded(
            f"the graph would have {k1} buffers; the budget allows {b.max_buffers} "
            "(Budget.max_buffers): " + _HOW.format(field="max_buffers")
        )
    bytes0 = sum(x.size_bytes for x in before.buffers)
    bytes1 = sum(x.size_bytes for x in after.buffers)
    if bytes1 > bytes0:
        check_sim_bytes(bytes1, "simulating the graph's buffers")
