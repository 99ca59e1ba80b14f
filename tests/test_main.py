"""``python -m oxiwork``: the demo runs every stage and checks the simulator against numpy."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import pytest

from oxiwork.__main__ import main, report
from oxiwork.examples import quick_start, transformer_block


def run_report(graph, **kw) -> tuple[int, str]:
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = report(graph, max_streams=kw.get("max_streams", 4), memory_mode="heuristic", out=out)
    return rc, out.getvalue()


def test_quick_start_report_names_every_stage() -> None:
    rc, text = run_report(quick_start())
    assert rc == 0
    for stage in ("[topo]", "[liveness]", "[passes]", "[plan]", "[simulator]"):
        assert stage in text
    assert "relu+scale" in text
    assert "match the numpy reference: True" in text


def test_transformer_on_two_streams_matches_the_reference() -> None:
    rc, text = run_report(transformer_block(1), max_streams=2)
    assert rc == 0 and "match the numpy reference: True" in text
    assert "2 streams" in text
    # fusion says why it stopped: a transpose is injective and never fuses
    assert "not fused:" in text and "'transpose' is injective, which never fuses" in text


def test_malformed_json_is_an_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "oxiwork.graph", "version": 99}', encoding="utf-8")
    assert main(["--json", str(bad)]) == 2
    assert "graph.version is 99" in capsys.readouterr().err


def test_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", str(tmp_path / "nope.json")]) == 2
    assert "error:" in capsys.readouterr().err


def test_a_file_that_is_not_utf8_is_an_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "graph.json"
    bad.write_bytes(b"\xff\xfe\x00 not text")
    assert main(["--json", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
