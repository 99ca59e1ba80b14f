"""``bench/passes.py --build-only --repeat k``: every size and shape is built k times, the
rounds interleaved, and the table reports medians with the wall-time range beside them."""

from __future__ import annotations

import re
import statistics

import pytest

from tests.bench_scripts import load


def test_repeated_builds_report_the_median_and_range(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load("passes")
    walls = iter([0.9, 0.1, 0.5, 3.0, 0.2, 0.4])  # per build, in the order the rounds run
    clock = {"t": 0.0, "started": False}

    def perf_counter() -> float:  # each build's wall time: the next of ``walls``
        if clock["started"]:
            clock["t"] += next(walls)
        clock["started"] = not clock["started"]
        return clock["t"]

    bench.wall_clock = perf_counter  # (this module's copy of the script only)
    bench.build_table([100, 1000], ["chain"], 2, repeat=3)
    out, err = capsys.readouterr()
    assert "the median of 3 interleaved builds" in out
    # rounds interleave: 100, 1000, 100, 1000, 100, 1000
    assert re.findall(r"round (\d)/3: chain (\d+)", err) == [
        ("1", "100"), ("1", "1000"), ("2", "100"), ("2", "1000"), ("3", "100"), ("3", "1000"),
    ]  # fmt: skip
    rows = {int(m[0].replace(",", "")): m[1:] for m in re.findall(
        r"^\| chain \| ([\d,]+) \| ([\d.]+) \| ([\d.]+)-([\d.]+) \|", out, re.M)}  # fmt: skip
    assert rows[100] == (f"{statistics.median([0.9, 0.5, 0.2]):.2f}", "0.20", "0.90")
    assert rows[1000] == (f"{statistics.median([0.1, 3.0, 0.4]):.2f}", "0.10", "3.00")
    # growth on the medians: 0.4 / 0.5
    assert re.search(r"\| chain \| 100 -> 1,000 \| 0\.8x \|", out)
