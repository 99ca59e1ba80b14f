"""One way the importer tests import a module and keep its eager outputs beside it, and one
way they compare a plan's simulated outputs with them."""

from __future__ import annotations

import numpy as np
import torch

from oxiwork import ExecutionPlan, SequentialExecutor
from oxiwork.importers.torch import ImportedModel, from_module


def import_with_eager(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], **options: object
) -> tuple[ImportedModel, tuple[np.ndarray, ...]]:
    """``module`` (put in eval mode) imported (``from_module(..., **options)``), and its eager
    outputs on ``args`` as arrays."""
    module.eval()
    with torch.no_grad():
        eager = module(*args)
    eager = eager if isinstance(eager, tuple) else (eager,)
    return from_module(module, args, **options), tuple(t.numpy() for t in eager)


def assert_simulates_exactly(model: ImportedModel, want: tuple[np.ndarray, ...]) -> None:
    """The plan of ``model`` (fusion off and on) simulates to ``want`` (eager's outputs),
    dtypes and values equal."""
    for fusion in (False, True):
        plan = ExecutionPlan.build(model.graph, fusion=fusion)
        got = model.outputs_from(SequentialExecutor(plan).run(model.inputs).outputs)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
