"""The README's quick start runs as written and prints the plan the README shows."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str) -> list[str]:
    """Fenced blocks whose info string is ``lang`` (a small fence parser: opening and
    closing fences alternate)."""
    blocks, current, info = [], None, ""
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                if info == lang:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def test_quick_start_runs_and_prints_the_readme_plan() -> None:
    (code,) = [b for b in _blocks("python") if "GraphBuilder()" in b]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, str(README), "exec"), {})  # our own README, not user input
    shown = next(b for b in _blocks("") if b.startswith("ExecutionPlan:"))
    assert printed.getvalue().strip() == shown.strip()


def test_readme_has_exactly_two_setup_commands() -> None:
    section = README.read_text(encoding="utf-8").split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"```bash\n", section)) == 2
    assert "bash scripts/test.sh" in section
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/test.sh" in ci
