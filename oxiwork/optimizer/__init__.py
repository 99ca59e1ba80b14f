"""Optimisation passes: each is a function ``graph -> PassResult``.

- :mod:`~oxiwork.optimizer.fusion`: kernel fusion with generated CUDA C;
- :mod:`~oxiwork.optimizer.stream`: stream assignment and the events between streams;
- :mod:`~oxiwork.optimizer.memory_pass`: buffer offsets safe under the stream schedule
  (planners in :mod:`~oxiwork.optimizer.memory`).

:class:`PassResult`, what every pass returns, lives here, below the pipeline that lists
the passes (:mod:`oxiwork.pipeline`, which re-exports it), so a pass never imports the
pipeline.

Example
-------
>>> from oxiwork.examples import quick_start
>>> from oxiwork.optimizer.fusion import fuse
>>> result = fuse(quick_start())
>>> isinstance(result, PassResult), len(result.graph.kernels())
(True, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oxiwork.graph import ComputeGraph

__all__ = ["PassFn", "PassResult"]


@dataclass(frozen=True, slots=True)
class PassResult:
    """What a pass returns: the new graph and named artefacts (plain data or reports)."""

    graph: ComputeGraph
    artefacts: Mapping[str, Any] = field(default_factory=dict)


PassFn = Callable[..., PassResult]
"""A pass: ``fn(graph, **options) -> PassResult``."""
