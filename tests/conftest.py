"""Hypothesis profiles shared by the whole suite.

``ci`` (the default) derandomises Hypothesis: every run draws the same examples, so a
test run on a clean clone cannot fail by luck of the draw, and the ``@example`` cases
pinned in the tests keep the bugs earlier random runs found. ``hunt`` draws fresh
random examples on every run: use it to look for new counterexamples
(``HYPOTHESIS_PROFILE=hunt pytest tests``) and pin each one it finds with ``@example``.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("hunt", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def _seeded_torch() -> None:
    """Give each test the same global torch RNG state, whatever ran before it.

    On two xdist workers the test order decides which draws of the global generator a
    test sees; tests that call ``torch.randn`` without a generator then fail or pass by
    that order. Seeding only when torch is already imported keeps the suite from
    importing torch for tests that never use it (a fresh import starts from torch's fixed
    default seed, so those are deterministic too).
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
