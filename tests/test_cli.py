"""The ``oxiwork`` command line, run in-process through ``main(argv)``: every command, the
round trip export -> plan on every example, one-line errors with exit 2, a closed pipe."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from oxiwork import GraphBuilder
from oxiwork.cli import EXAMPLES, _examples, main
from oxiwork.executor.plan import ExecutionPlan

ROOT = Path(__file__).resolve().parents[1]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_console_script_is_declared() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["scripts"]["oxiwork"] == "oxiwork.cli:main"
    for dep in ("matplotlib", "graphviz", "tqdm"):
        assert any(d.startswith(dep) for d in data["project"]["dependencies"])


class TestPlan:
    def test_prints_the_plan_table_and_memory_figures(self, capsys) -> None:
        rc, out, _ = run(["plan", "example:transformer", "--max-streams", "2"], capsys)
        plan = ExecutionPlan.build(_examples()["transformer"](), max_streams=2)
        assert rc == 0
        assert out.startswith(plan.summary())
        assert f"lower_bound {plan.memory.lower_bound:,} B" in out
        assert f"liveness_lower_bound {plan.memory.liveness_lower_bound:,} B" in out

    def test_options_reach_the_planner(self, capsys) -> None:
        rc, out, _ = run(["plan", "example:quick_start", "--no-fusion", "--memory", "exact",
                          "--time-limit", "5", "--format", "csv"], capsys)  # fmt: skip
        plan = ExecutionPlan.build(_examples()["quick_start"](), fusion=False, memory_mode="exact")
        assert rc == 0 and len(out.splitlines()) == 1 + len(plan.steps)
        assert [ln.split(",")[4] for ln in out.splitlines()[1:]] == [s.name for s in plan.steps]

    def test_markdown(self, capsys) -> None:
        rc, out, _ = run(["plan", "example:quick_start", "--format", "markdown"], capsys)
        assert rc == 0 and out.startswith("| step |")


@pytest.mark.parametrize("name", sorted(_examples()))
def test_export_then_plan_round_trips(name: str, tmp_path: Path, capsys) -> None:
    g = tmp_path / "g.json"
    rc, _, _ = run(["export", f"example:{name}", "--json", str(g)], capsys)
    assert rc == 0
    rc, from_file, _ = run(["plan", str(g), "--format", "csv"], capsys)
    assert rc == 0
    rc, from_example, _ = run(["plan", f"example:{name}", "--format", "csv"], capsys)
    assert rc == 0 and from_file == from_example
    assert len(from_file.splitlines()) == 1 + len(ExecutionPlan.build(EXAMPLES[name]()).steps)


def test_export_writes_every_file(tmp_path: Path, capsys) -> None:
    paths = {k: tmp_path / f"out.{k}" for k in ("json", "perfetto", "dot", "csv", "markdown")}
    argv = ["export", "example:quick_start"]
    for k, p in paths.items():
        argv += [f"--{k}", str(p)]
    rc, _, _ = run([*argv, "--color", "stream"], capsys)
    assert rc == 0 and all(p.stat().st_size > 0 for p in paths.values())
    trace = json.loads(paths["perfetto"].read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == 2 * 3  # both launch modes
    assert paths["dot"].read_text().startswith("digraph")


def test_simulate_with_inputs(tmp_path: Path, capsys) -> None:
    x = np.linspace(-2, 2, 1024, dtype=np.float32)
    np.savez(tmp_path / "in.npz", input=x)
    rc, out, _ = run(["simulate", "example:quick_start", "--inputs", str(tmp_path / "in.npz"),
                      "--outputs", str(tmp_path / "out.npz")], capsys)  # fmt: skip
    assert rc == 0 and "match the numpy reference: True" in out
    with np.load(tmp_path / "out.npz") as got:
        np.testing.assert_allclose(got["output"], np.maximum(x, 0) * 2)


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_render(fmt: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / f"fig.{fmt}"
    rc, _, err = run(["render", "example:quick_start", "--view", "memory", "-o", str(out)], capsys)
    assert rc == 0, err
    head = out.read_bytes()[:8]
    assert head.startswith({"png": b"\x89PNG", "svg": b"<?xml", "pdf": b"%PDF"}[fmt])


def test_report(tmp_path: Path, capsys) -> None:
    rc, out, _ = run(["report", "example:quick_start", "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 0 and "opens offline" in out
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_lab_dry_run(capsys) -> None:
    rc, out, _ = run(["lab", "--dry-run"], capsys)
    assert rc == 0 and " -m jupyter lab" in out and out.strip().endswith("workbench.ipynb")


class TestErrors:
    @pytest.mark.parametrize(
        ("content", "needle"),
        [
            (b'{"format": "oxiwork.graph", "version": 99}', "version is 99"),
            (b"\xff\xfe not text", "not valid JSON"),
            (b"[1, 2", "not valid JSON"),
            (b"{}", ""),
        ],
    )
    def test_bad_file_is_one_line_and_exit_2(self, content, needle, tmp_path, capsys) -> None:
        bad = tmp_path / "bad.json"
        bad.write_bytes(content)
        for cmd in (["plan"], ["simulate"], ["export", "--json", str(tmp_path / "o.json")]):
            rc, out, err = run([cmd[0], str(bad), *cmd[1:]], capsys)
            assert rc == 2 and out == ""
            assert err.startswith("error: ") and err.count("\n") == 1 and needle in err
            assert "Traceback" not in err

    @pytest.mark.parametrize(
        "argv",
        [
            ["plan", "nope.json"],
            ["plan", "example:nope"],
            ["render", "example:quick_start", "-o", "fig.gif"],
            ["export", "example:quick_start"],
            ["simulate", "example:quick_start", "--inputs", "missing.npz"],
        ],
    )
    def test_usage_errors(self, argv, capsys, tmp_path, monkeypatch) -> None:
        monkeypatch.chdir(tmp_path)
        rc, _, err = run(argv, capsys)
        assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1

    def test_bad_npz(self, tmp_path, capsys) -> None:
        (tmp_path / "x.npz").write_bytes(b"PK not a zip")
        rc, _, err = run(
            ["simulate", "example:quick_start", "--inputs", str(tmp_path / "x.npz")], capsys
        )
        assert rc == 2 and "numpy.savez" in err

    def test_names_printed_with_control_characters_escaped(self, tmp_path, capsys) -> None:
        b = GraphBuilder()
        b.add_barrier("ok")
        g = b.build()
        data = json.loads(g.to_json())
        data["nodes"][0]["name"] = "evil\x1b[2Jname"  # a file can carry what the builder refuses
        path = tmp_path / "g.json"
        path.write_text(json.dumps(data))
        rc, out, err = run(["plan", str(path)], capsys)
        assert "\x1b" not in out + err
        assert rc == 2 or "evil\\x1b[2Jname" in out


def test_closed_pipe_is_quiet() -> None:
    """`python -m oxiwork | head -1`: no "Broken pipe" message, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "oxiwork", "plan", "example:transformer"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Broken pipe" not in err and "Traceback" not in err and "error" not in err
