"""The layer contract (pyproject.toml's ``[tool.importlinter]``) holds, and breaks on an
upward import: what the lint step (``lint-imports`` in scripts/test.sh) enforces."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(where: Path) -> subprocess.CompletedProcess[str]:
    # Run in ``where`` so that grimp finds *that* copy of the package first.
    return subprocess.run(
        [str(LINT), "--no-logo", "--no-cache", str(where / "pyproject.toml")],
        cwd=where,
        env={"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's Python sources and the contract, copied where they can be broken."""
    where = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        ROOT / "oxiwork",
        where / "oxiwork",
        ignore=shutil.ignore_patterns("static", "__pycache__", "*.json", "*.css", "*.js"),
    )
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    return where


def test_the_tree_keeps_the_contract() -> None:
    assert LINT.exists(), "import-linter is in the test extra: pip install -e '.[test]'"
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout


@pytest.mark.parametrize(
    ("module", "upward", "message"),
    [
        # the bottom importing the top
        (
            "node.py",
            "import oxiwork.widget",
            "oxiwork.node is not allowed to import oxiwork.widget",
        ),
        # a pass importing the pipeline that lists it
        (
            "optimizer/fusion.py",
            "from oxiwork.pipeline import Pipeline",
            "oxiwork.optimizer is not allowed to import oxiwork.pipeline",
        ),
        # an analysis importing the executor (what happens_before did from executor/)
        (
            "analysis/liveness.py",
            "from oxiwork.executor.plan import ExecutionPlan",
            "oxiwork.analysis is not allowed to import oxiwork.executor",
        ),
        # verify importing the plan (it dispatches through the object instead)
        (
            "verify.py",
            "import oxiwork.executor.plan",
            "oxiwork.verify is not allowed to import oxiwork.executor",
        ),
    ],
)
def test_an_upward_import_breaks_it(copy: Path, module: str, upward: str, message: str) -> None:
    path = copy / "oxiwork" / module
    text = path.read_text()
    try:
        # After the module docstring and ``from __future__``: a plain top-level import.
        path.write_text(text + f"\n{upward}  # noqa\n")
        done = _lint(copy)
    finally:
        path.write_text(text)
    assert done.returncode != 0
    assert message in done.stdout, done.stdout
    assert "0 kept, 1 broken" in done.stdout
