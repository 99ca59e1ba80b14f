"""Fixtures for the widget's model tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from oxiwork.executor.plan import ExecutionPlan


@pytest.fixture
def with_plan(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make sure ``ExecutionPlan.build`` exists: the real one, or fusion plus the hand-made
    plan of the executor tests while the plan builder is being written."""
    if getattr(ExecutionPlan, "build", None) is None:
        from oxiwork.optimizer.fusion import fuse
        from tests.executor.gpu_fakes import simple_plan

        def build(graph: Any, **_options: Any) -> ExecutionPlan:
            return simple_plan(fuse(graph).graph)

        monkeypatch.setattr(ExecutionPlan, "build", staticmethod(build), raising=False)
    yield
