"""Views on the GPU executors, run on the CPU emulation of the CUDA driver: a view's pointer
is its base's plus its offset (in the arena, or in a user-owned buffer), and the strided
kernels of oxiwork.ops.strided read and write through it; the numbers equal the simulator's
on every schedule the emulator picks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from oxiwork import ComputeGraph, GraphBuilder, GraphWarning, MemcpyDir
from oxiwork.error import GraphError
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.executor.streams import StreamExecutor
from tests.executor.emulated_driver import CXX, EmulatedDriver, capture_sources

try:
    from oxiwork.executor.nvrtc import nvrtc_version

    nvrtc_version()
    NVRTC = True
except GraphError:
    NVRTC = False

pytestmark = [
    pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++) to emulate kernels"),
    pytest.mark.skipif(not NVRTC, reason="NVRTC (cuda-bindings) is not installed"),
]


@pytest.fixture(scope="module")
def so_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emulated_view_kernels")


def _graph() -> ComputeGraph:
    """w (external, (3, 4)) read through its transpose; x uploaded, its columns scaled into
    y through a strided view, a row of y overwritten through a view (a write to y)."""
    b = GraphBuilder()
    w = b.alloc_external_buffer("w", 48, shape=(3, 4))
    x = b.alloc_buffer("x", 48, shape=(3, 4))
    wt_copy = b.alloc_buffer("wt", 48, shape=(4, 3))
    y = b.alloc_buffer("y", 48, shape=(4, 3))
    b.add_memcpy("up", MemcpyDir.HostToDevice, 48, dst=x)
    wt = b.view("wT", w, (4, 3), (1, 4))
    b.add_kernel("copy wT", 1, 32).op("copy").inputs([wt]).outputs([wt_copy]).finish()
    xt = b.view("xT", x, (4, 3), (1, 4))
    b.add_kernel("xT + wT", 2, 8).op("add").inputs([xt, wt_copy]).outputs([y]).finish()
    row = b.view("y row 1", y, (3,), (1,), 3)
    col = b.view("x col 2", x, (3,), (4,), 2)
    b.add_kernel("neg col", 1, 32).op("neg").inputs([col]).outputs([row]).finish()
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 48, src=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


@pytest.mark.parametrize("cls", [CudaGraphExecutor, StreamExecutor])
@pytest.mark.parametrize("streams", [1, 3])
def test_views_match_the_simulator_on_the_emulated_driver(monkeypatch, so_dir, cls, streams):
    capture_sources(monkeypatch)
    plan = ExecutionPlan.build(_graph(), max_streams=streams, fusion=True)
    rng = np.random.default_rng(3)
    inputs = {
        "w": rng.standard_normal((3, 4)).astype(np.float32),
        "x": rng.standard_normal((3, 4)).astype(np.float32),
    }
    want = SequentialExecutor(plan).run(inputs).outputs
    assert want is not None
    y = inputs["x"].T + inputs["w"].T
    y[1] = -inputs["x"][:, 2]
    np.testing.assert_allclose(want["y"], y, rtol=1e-6)
    for seed in range(3):  # schedules the emulator picks
        driver = EmulatedDriver(seed=seed, so_dir=so_dir)
        with cls(plan, driver=driver) as ex:
            got, _ = ex.run(inputs, seed=0)
        np.testing.assert_array_equal(got["y"], want["y"])
        assert driver.live_counts() == {}
