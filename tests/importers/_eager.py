"""One way the importer tests import a module and keep its eager outputs beside it."""

from __future__ import annotations

import numpy as np
import torch

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
