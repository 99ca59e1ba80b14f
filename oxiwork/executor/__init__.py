"""Executor backends: the plan, the CPU simulator, and the CUDA backends.

The CUDA executors are imported lazily (``from oxiwork.executor import CudaGraphExecutor``
works, but ``cuda.bindings`` is only loaded when one is constructed), so a CPU-only install
imports everything.
"""

from oxiwork.executor.plan import ExecutionPlan, PlanStep
from oxiwork.executor.simulator import SequentialExecutor, Simulator

__all__ = [
    "CudaGraphExecutor",
    "ExecutionPlan",
    "PlanStep",
    "SequentialExecutor",
    "Simulator",
    "StreamExecutor",
]


def __getattr__(name: str) -> object:
    if name == "CudaGraphExecutor":
        from oxiwork.executor.cuda_graph import CudaGraphExecutor

        return CudaGraphExecutor
    if name == "StreamExecutor":
        from oxiwork.executor.streams import StreamExecutor

        return StreamExecutor
    raise AttributeError(f"module 'oxiwork.executor' has no attribute {name!r}")
