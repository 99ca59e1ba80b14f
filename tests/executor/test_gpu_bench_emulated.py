"""``bench/gpu.py`` end to end on the emulated CUDA driver, at toy sizes.

The GPU benchmark runs once, on a borrowed GPU, with minutes to spare: a typo in one of
its rarely run paths (the copy-bandwidth session, the timed replays, the unfused chain)
would waste that run. Here every path of ``main()`` runs against
:mod:`tests.executor.emulated_driver` (real NVRTC compile, kernels executed as C++), so
only what needs real hardware is left untested. The numbers it prints mean nothing.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from oxiwork.examples import random_op_dag
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
    results = tmp_path / "gpu.json"
    argv = ["gpu.py", "--elements", "65536", "--sizes", "4", "64", "--reps", "2", "--blocks", "8"]
    argv += ["--rounds", "1", "--layers", "1"]  # the emulation builds each kernel with g++
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(results)])
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
        "## 5. Set-up and update (host ms, medians)",
        "| chain 64 | 64 |",
        "## 6. The 39-node transformer example",
        "| ours, CUDA graph |",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "FAILED" not in out
    numbers = json.loads(results.read_text())
    assert set(numbers) >= {"device", "launch_us_per_node", "chain", "setup_ms", "transformer"}
    chain64 = numbers["setup_ms"]["chain 64"]
    assert chain64["steps"] == 64 and chain64["reinstantiate_ms"] is None  # nothing to fuse
    assert numbers["setup_ms"]["transformer"]["reinstantiate_ms"] > 0
    assert chain64["instantiate_ms"] >= 0 and "instantiate_s" not in chain64  # ms, named so
    assert numbers["transformer"]["plan_kernels"] < numbers["transformer"]["kernels"] == 37
    assert emulated.live_counts() == {}, "the benchmark leaked driver resources"


def test_torch_twin_computes_what_the_simulator_computes():
    # Section 6 times the transformer example against a torch program of the same ops;
    # that program must compute the same numbers (here on the CPU, against the simulator).
    torch = pytest.importorskip("torch")
    from oxiwork import ExecutionPlan, SequentialExecutor
    from oxiwork.examples import transformer_block
    from oxiwork.reference import generated_input

    bench = _load_bench()
    graph = transformer_block(2)
    twin, names = bench.torch_twin(graph)
    inputs = {n: generated_input(graph.buffer_by_name(n), seed=3) for n in names}
    got = twin({n: torch.from_numpy(v) for n, v in inputs.items()})
    want = SequentialExecutor(ExecutionPlan.build(graph, fusion=False)).run(inputs).outputs
    assert set(got) == set(want) and got
    for name, value in got.items():
        # other summation orders; outputs reach |4e2| and residual adds cancel (see
        # tests/gpu/test_gpu_executors.py's SCALE_TOL)
        scale = float(np.abs(want[name]).max())
        np.testing.assert_allclose(value.numpy(), want[name], rtol=1e-4, atol=1e-4 * scale)
    with pytest.raises(KeyError, match="has no torch twin"):
        bench.torch_twin(random_op_dag(0, 40))  # ops the twin does not know are refused


def test_torch_graph_helpers_capture_once_and_time_each_batch(monkeypatch):
    # torch_graph / torch_replay_ms run only where torch has CUDA; a stand-in for
    # torch.cuda runs their own logic here (not torch's: its API is checked on a GPU).
    import contextlib
    import types

    torch = pytest.importorskip("torch")
    log: list[str] = []

    class Graph:
        def replay(self):
            log.append("replay")

    class Event:
        def __init__(self, enable_timing):
            self.at = 0.0

        def record(self):
            self.at = float(log.count("replay"))

        def elapsed_time(self, other):  # 2 ms per replay
            return 2.0 * (other.at - self.at)

    fake = types.SimpleNamespace(
        Stream=lambda: types.SimpleNamespace(wait_stream=lambda other: None),
        current_stream=lambda: types.SimpleNamespace(wait_stream=lambda other: None),
        stream=lambda s: contextlib.nullcontext(),
        graph=lambda g: contextlib.nullcontext(),
        CUDAGraph=Graph,
        Event=Event,
        synchronize=lambda: None,
    )
    monkeypatch.setattr(torch, "cuda", fake)
    bench = _load_bench()
    graph, result = bench.torch_graph(lambda: log.append("call") or "out")
    assert result == "out" and log == ["call"] * 4 + ["replay"]  # 3 warm-ups, the capture
    assert bench.torch_replay_ms(graph, reps=5, rounds=3) == 2.0
    assert log.count("replay") == 1 + 15
