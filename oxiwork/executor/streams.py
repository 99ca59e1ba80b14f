"""Run an ExecutionPlan kernel by kernel on CUDA streams with real events.

:class:`StreamExecutor` replays the same lowered plan as
:class:`~oxiwork.executor.cuda_graph.CudaGraphExecutor`, but the classic way: one
``cuLaunchKernel``/``cuMemcpy*Async``/``cuMemset*Async`` per step on the step's stream, and
the plan's event pairs as real ``cuEventRecord``/``cuStreamWaitEvent`` calls. Both
executors share the lowering, the compiled module, the memory layout and the input/output
handling, so graph mode and stream mode can be compared on exactly the same work (the
benchmark in ``bench/gpu.py`` does that).

Every run forks from stream 0 (all streams wait for an event recorded after the inputs are
staged) and joins back into it (stream 0 waits for an event from every other stream), so
the timing events on stream 0 bracket all the work.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.executor.plan import ExecutionPlan
>>> with StreamExecutor(ExecutionPlan.build(quick_start())) as ex:  # doctest: +SKIP
...     outputs, timings = ex.run()

References
----------
NVIDIA, "CUDA C++ Programming Guide", "Streams" and "Events" (explicit synchronisation
with ``cudaStreamWaitEvent``).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from oxiwork.error import UnsupportedOp
from oxiwork.executor.cuda_graph import (
    _PlanExecutor,
    kernel_function,
    pack_node,
)
from oxiwork.executor.lowering import DescNode
from oxiwork.executor.nvrtc import KernelCache
from oxiwork.node import NodeKind

if TYPE_CHECKING:
    from oxiwork.executor.driver import Session
    from oxiwork.executor.plan import ExecutionPlan

__all__ = ["StreamExecutor"]


# Node kinds only a CUDA graph can run.
_GRAPH_ONLY = frozenset(
    {NodeKind.ChildGraph, NodeKind.Conditional, NodeKind.MemAlloc, NodeKind.MemFree}
)


class StreamExecutor(_PlanExecutor):
    """A plan launched step by step on ``plan.num_streams`` CUDA streams.

    Parameters are those of :class:`~oxiwork.executor.cuda_graph.CudaGraphExecutor`;
    ``num_streams`` overrides the plan's stream count (at least the plan's).
    """

    _EVENTS = "nodes"  # the plan's event pairs as steps of their own: real record/wait calls

    def __init__(
        self,
        plan: ExecutionPlan,
        *,
        device: int = 0,
        exact: bool = True,
        arch: str | None = None,
        cache: KernelCache | None = None,
        driver: Any = None,
        opaque: str = "noop",
        capture: bool = True,
        num_streams: int | None = None,
    ) -> None:
        self._num_streams_wanted = num_streams
        self._program: list[Callable[[], Any]] = []
        graph_only = sorted(
            {s.kind.noun for s in getattr(plan, "steps", ()) if s.kind in _GRAPH_ONLY}
        )
        if graph_only:
            raise UnsupportedOp(
                f"this plan has {', '.join(graph_only)} nodes, which exist only inside a CUDA "
                "graph (streams have no child graphs, conditional handles or graph-owned "
                "memory); run it with CudaGraphExecutor"
            )
        super().__init__(
            plan, device=device, exact=exact, arch=arch, cache=cache, driver=driver,
            opaque=opaque, capture=capture,
        )  # fmt: skip

    def _create_streams(self, s: Session) -> Any:
        used = max((n.stream for n in self.desc.nodes), default=0) + 1
        wanted = self._num_streams_wanted or 0
        self.num_streams = max(1, int(self.plan.num_streams), used, wanted)
        self._streams = [s.stream() for _ in range(self.num_streams)]
        events = max((n.event + 1 for n in self.desc.nodes if n.event is not None), default=0)
        self._events = [s.event(timing=False) for _ in range(max(events, self.desc.event_count))]
        self._fork = s.event(timing=False)
        self._joins = [s.event(timing=False) for _ in range(self.num_streams)]
        return self._streams[0]

    def _prepare(self, s: Session) -> None:
        self._fn_ptrs = {
            i: ctypes.cast(w, ctypes.c_void_p).value or 0 for i, w in self._callbacks.items()
        }
        for n in self.desc.nodes:
            if n.kind == "kernel":
                self._packed[n.index] = pack_node(n, self._memory)
        self._program = self._compile_program()

    # ------------------------------------------------------------------ running
    def enqueue(self) -> None:
        """Enqueue every step once (fork, steps, join), without staging or waiting."""
        self._launch(self._require())

    def _launch(self, s: Session) -> None:
        main = self._stream
        s.record(self._fork, main)
        for st in self._streams[1:]:
            s.wait(st, self._fork)
        for call in self._program:
            call()
        for k, st in enumerate(self._streams[1:], start=1):
            s.record(self._joins[k], st)
            s.wait(main, self._joins[k])

    def _compile_program(self) -> list[Callable[[], Any]]:
        """One bound driver call per step, prepared once (the rule table below), so that
        an enqueue costs only the calls themselves: stream mode is measured fairly."""
        s = self._require()
        program = []
        for n in self.desc.nodes:
            rule = _ISSUE_RULES.get(n.kind)
            if rule is not None:
                program.append(rule(self, s, n, self._streams[n.stream]))
        return program

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Release modules, memory, events, streams and the context. Idempotent."""
        super().close()
        self._program = []


# ---------------------------------------------------------------------- one rule per kind
# Each rule returns the driver call that issues node ``n`` on ``stream``, with every
# argument resolved in advance. Barriers ("empty") issue nothing: stream order joins.
def _issue_kernel(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    assert n.function_name is not None and n.grid is not None and n.block is not None
    fn = kernel_function(ex._functions, ex.desc, n)
    kp = ex._packed[n.index].kernel_params
    grid, block, smem = n.grid, n.block, n.smem
    return lambda: s.launch_kernel(fn, grid, block, smem, stream, kp)


def _issue_memcpy(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    assert n.src is not None and n.dst is not None and n.direction is not None
    direction, dst, src = n.direction, ex._memory.resolve(n.dst), ex._memory.resolve(n.src)
    return lambda: s.copy_async(direction, dst, src, n.nbytes, stream)


def _issue_memset(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    assert n.dst is not None
    dst = ex._memory.resolve(n.dst)
    return lambda: s.memset_async(dst, n.value, n.element_size, n.width, stream)


def _issue_record(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    event = ex._events[int(n.event or 0)]
    return lambda: s.record(event, stream)


def _issue_wait(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    event = ex._events[int(n.event or 0)]
    return lambda: s.wait(stream, event)


def _issue_host(ex: StreamExecutor, s: Session, n: DescNode, stream: Any) -> Callable[[], Any]:
    fn_ptr = ex._fn_ptrs[n.index]
    return lambda: s.host_func(stream, fn_ptr)


_ISSUE_RULES: dict[str, Callable[[StreamExecutor, Session, DescNode, Any], Callable[[], Any]]] = {
    "kernel": _issue_kernel,
    "memcpy": _issue_memcpy,
    "memset": _issue_memset,
    "event_record": _issue_record,
    "event_wait": _issue_wait,
    "host": _issue_host,
}
