"""oxiwork: an interactive CUDA-graph workbench for Jupyter.

Build a DAG of GPU work with :class:`GraphBuilder`, run the analysis and optimisation
passes, and turn it into an :class:`ExecutionPlan` that a step-through CPU simulator and
real CUDA graphs both execute. The seed crate's public names are kept, so its quick start
transliterates directly.

Example
-------
>>> import oxiwork
>>> oxiwork.GraphBuilder().alloc_buffer("x", 1024)
BufferId(0)
"""

from oxiwork.budget import Budget
from oxiwork.builder import GraphBuilder, KernelBuilder

# The function shadows the submodules name on the package, so `oxiwork.capture()` reads
# like `torch.cuda.graph()`; `from oxiwork.capture import CaptureError` still works.
from oxiwork.capture import capture
from oxiwork.error import GraphError, GraphResult, GraphWarning
from oxiwork.executor.plan import ExecutionPlan, PlanStep
from oxiwork.executor.simulator import SequentialExecutor, Simulator
from oxiwork.graph import ComputeGraph
from oxiwork.node import (
    Buffer,
    BufferId,
    CondKind,
    GraphNode,
    KernelConfig,
    MemcpyDir,
    NodeId,
    NodeKind,
    StreamId,
)
from oxiwork.verify import verify

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The widget pulls in anywidget/ipywidgets; import it only when asked for.
    if name == "Workbench":
        from oxiwork.widget import Workbench

        return Workbench
    raise AttributeError(f"module 'oxiwork' has no attribute {name!r}")


__all__ = [
    "Budget",
    "Buffer",
    "BufferId",
    "ComputeGraph",
    "CondKind",
    "ExecutionPlan",
    "GraphBuilder",
    "GraphError",
    "GraphNode",
    "GraphResult",
    "GraphWarning",
    "KernelBuilder",
    "KernelConfig",
    "MemcpyDir",
    "NodeId",
    "NodeKind",
    "PlanStep",
    "SequentialExecutor",
    "Simulator",
    "StreamId",
    "Workbench",
    "capture",
    "verify",
]
