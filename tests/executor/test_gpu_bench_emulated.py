"""``bench/gpu.py`` end to end on the emulated CUDA driver, at toy sizes.

The GPU benchmark runs once, on a borrowed GPU, with minutes to spare: a typo in one of
its rarely run paths (the copy-bandwidth session, the timed replays, the unfused chain)
would waste that run. Here every path of ``main()`` runs against
:mod:`tests.executor.emulated_driver` (real NVRTC compile, kernels executed as C++), so
only what needs real hardware is left untested. The numbers it prints mean nothing.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from oxiwork.executor import driver as driver_module
from tests.executor.emulated_driver import CXX, EmulatedDriver, capture_sources
from tests.executor.test_emulated_executors import NVRTC

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to emulate kernels"),
    pytest.mark.skipif(not NVRTC, reason="NVRTC (cuda-bindings) is not installed"),
]

BENCH = Path(__file__).resolve().parents[2] / "bench" / "gpu.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("oxiwork_bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_gpu_benchmark_runs_every_path(monkeypatch, tmp_path, capsys):
    capture_sources(monkeypatch)
    emulated = EmulatedDriver(seed=0, so_dir=tmp_path)
    # Every Driver() and probe() the benchmark makes finds the emulator.
    monkeypatch.setattr(driver_module, "load_driver_module", lambda: emulated)
    bench = _load_bench()
    argv = ["gpu.py", "--elements", "65536", "--sizes", "4", "64", "--reps", "2", "--blocks", "8"]
    monkeypatch.setattr(sys, "argv", argv)
    assert bench.main() == 0
    out = capsys.readouterr().out
    assert "no GPU benchmark" not in out
    for line in (
        "## 1. Launch overhead per node",
        "target graph mode >= 5x cheaper per node at 64:",
        "device copy bandwidth (cuMemcpyDtoDAsync, read+write):",
        "| ours, fused graph | 1 |",  # the 8-op chain fuses into one kernel
        "| ours, unfused graph | 8 |",
        "target fused >= 80% of copy bandwidth:",
        "fusion speed-up (unfused / fused time):",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert emulated.live_counts() == {}, "the benchmark leaked driver resources"
