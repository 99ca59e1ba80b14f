"""Workbench(ImportedModel) (issue 10): a torch module imported opens in the workbench."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from oxiwork import GraphError
from oxiwork.importers.torch import from_module
from oxiwork.widget import NotAGraph, Workbench
from oxiwork.widget.viewmodel import unpack_dag


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, d: int = 8, n: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return from_module(Stack().eval(), (torch.randn(2, 8),))


class TestImportedModel:
    def test_raises_for_a_torch_module_with_a_hint(self) -> None:
        with pytest.raises(NotAGraph, match=r"from_module\(module, \(x,\)\)") as e:
            Workbench(Stack())
        assert isinstance(e.value, GraphError)

    def test_raises_for_anything_else(self) -> None:
        with pytest.raises(
            NotAGraph, match="ComputeGraph, a GraphBuilder or an ImportedModel, got str"
        ):
            Workbench("model.pt")

    def test_opens_the_model_graph_named_by_module_path(self, model) -> None:
        w = Workbench(model, progressive=False)
        assert w.graph is model.graph
        names = w.view["dag"]["names"]
        assert len(names) == model.graph.num_nodes == len(unpack_dag(w.dag)["id"])
        # the DAG's groups are the module paths: every layer is a group of its own
        for i in range(3):
            assert sum(n.startswith(f"layers.{i}.") for n in names) >= 4
        assert w.plan is not None and w.view["passes"]["available"]

    def test_assigning_a_model_replaces_the_graph(self, model) -> None:
        from oxiwork.examples import quick_start

        w = Workbench(quick_start())
        w.graph = model
        assert w.graph is model.graph
