"""Hypothesis profiles shared by the whole suite.

``ci`` (the default) derandomises Hypothesis: every run draws the same examples, so a
test run on a clean clone cannot fail by luck of the draw, and the ``@example`` cases
pinned in the tests keep the bugs earlier random runs found. ``hunt`` draws fresh
random examples on every run: use it to look for new counterexamples
(``HYPOTHESIS_PROFILE=hunt pytest tests``) and pin each one it finds with ``@example``.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("hunt", derandomize=False, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
