"""The GPU executors on the CPU emulation of the CUDA driver (no GPU needed).

:class:`~tests.executor.emulated_driver.EmulatedDriver` really executes what
:class:`~oxiwork.executor.cuda_graph.CudaGraphExecutor` and
:class:`~oxiwork.executor.streams.StreamExecutor` build: kernels compiled by the real NVRTC
run as g++-compiled C++ unpacked from the packed ``void**`` by their C signatures, graph
nodes run in a random topological order of their edges, stream work in a random
interleaving that honours stream order and event waits. So the scenarios of
``tests/gpu/test_gpu_executors.py`` (run here, unmarked, through the same functions)
check the executors' numbers against the simulator in CI, and the mutation tests below
show that the emulation catches what it is meant to catch: a dropped graph edge, a
dropped event wait, a float packed as a double, swapped arguments, an overrunning copy,
a missing ``__syncthreads`` in a block reduction.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oxiwork.error import ExecutionError, GraphError
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.executor import cuda_graph, lowering
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import Device, Driver, DriverError
from oxiwork.executor.streams import StreamExecutor
from tests.executor import emulated_driver
from tests.executor.emulated_driver import CXX, EmulatedDriver, capture_sources, parse_kernels
from tests.executor.gpu_fakes import build_plan, diamond_plan
from tests.gpu import test_gpu_executors as scenarios
from tests.gpu.test_gpu_executors import Target

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

X = np.linspace(-1, 1, 1024, dtype=np.float32)
SCHEDULES = 12  # random schedules a mutation gets to show itself in


@pytest.fixture(scope="session")
def so_dir(tmp_path_factory):
    """Where compiled kernel libraries are cached for the whole session."""
    return tmp_path_factory.mktemp("emulated_kernels")


@pytest.fixture
def capture(monkeypatch):
    capture_sources(monkeypatch)


@pytest.fixture
def emu(capture, so_dir):
    """The scenarios' target on the emulated driver; checks nothing is left alive."""
    driver = EmulatedDriver(seed=0, so_dir=so_dir)
    yield Target(0, driver, cycles=100)
    assert driver.live_counts() == {}, "an executor leaked driver resources"
    assert driver.context_refs == 0, "the primary context was not released"
    assert driver.context_resets == 0, "a context release had to free leaked resources"


def _simulate(plan, inputs=None, seed=0):
    return scenarios._simulate(plan, inputs, seed)


def _run(cls, plan, driver, inputs=None, seed=0):
    with cls(plan, driver=driver) as ex:
        out, _ = ex.run(inputs, seed=seed)
    return out


def _differs(got, want) -> bool:
    try:
        scenarios._assert_same(got, want, "")
    except AssertionError:
        return True
    return False


# ---------------------------------------------------------------------------- scenarios
# The bodies are the GPU tests'; here they run on the emulator.
def test_quick_start(emu):
    scenarios.test_quick_start(emu)


def test_random_dags_match_the_simulator(emu):
    scenarios.test_random_dags_match_the_simulator(emu)


def test_every_step_kind(emu):
    scenarios.test_every_step_kind(emu)


def test_small_examples_match_the_simulator(emu):
    # the GPU test runs every example on 1 and 4 streams; here each kernel is built with
    # g++ (the transformer's take minutes), so the two smallest on 4 streams
    scenarios.examples_match_the_simulator(emu, ("quick_start", "random"), streams=(4,))


def test_imported_models_match_eager(emu):
    # one stream here (the GPU test also runs two): torch.export and the C++ builds dominate
    scenarios.imported_models_match_eager(emu, streams=(1,))


def test_library_ops_match_the_simulator(emu):
    # every op probe, as the GPU test runs them: the emulated C of each library op in each
    # input dtype it takes against the reference (about 600 kernels, half a minute)
    scenarios.library_ops_match_the_simulator(emu)


def test_stock_modules_match_eager(emu):
    # every stock module, as the GPU test runs them (fused, one stream): the generated C of
    # each against eager (under a minute)
    pytest.importorskip("torch")
    scenarios.stock_modules_match_eager(emu)


def test_zoo_models_match_eager(emu):
    # four of the GPU test's Hugging Face models (fused, four streams): the generated C of
    # an integer argmax, slice writes, channels_last convolutions and a mixture of experts
    # (routing, grouped matmuls) against eager
    pytest.importorskip("transformers")
    scenarios.zoo_models_match_eager(emu, ("clip_text", "funnel", "convnext", "mixtral"))


def test_setup_and_update_phases_are_timed(emu):
    plan = build_plan(quick_start(), fusion=False)
    with emu.executor(CudaGraphExecutor, plan) as ex:
        phases = ("lower_s", "load_s", "alloc_s", "build_s", "instantiate_s", "upload_s")
        assert tuple(ex.setup_s) == phases
        assert all(t >= 0 for t in ex.setup_s.values())
        assert ex.last_update_s == {}
        assert ex.update(plan) == "updated"
        assert set(ex.last_update_s) == {"lower_s", "build_s", "exec_update_s"}
        assert ex.update(build_plan(quick_start(), fusion=True)) == "reinstantiated"
        assert set(ex.last_update_s) == {"lower_s", "build_s", "exec_update_s", "instantiate_s"}
    with emu.executor(StreamExecutor, plan) as ex:  # no graph: no graph phases
        assert tuple(ex.setup_s) == ("lower_s", "load_s", "alloc_s")


def test_replay_with_new_inputs(emu):
    scenarios.test_replay_with_new_inputs(emu)


def test_update_params_and_update(emu):
    scenarios.test_update_params_and_update(emu)


def test_host_callbacks_run_on_every_replay(emu):
    scenarios.test_host_callbacks_run_on_every_replay(emu)


def test_graph_nodes_match_the_simulator(emu):
    scenarios.test_graph_nodes_match_the_simulator(emu)
    # through the driver's own graph-node calls, the set-condition kernels linked
    for call in (
        "cuGraphAddChildGraphNode",
        "cuGraphConditionalHandleCreate",
        "cuGraphAddNode",
        "cuGraphAddMemAllocNode",
        "cuGraphAddMemFreeNode",
        "cuLinkAddFile",
        "cuLinkComplete",
    ):
        assert emu.driver.calls[call] > 0, call


def test_while_bound_raises_on_the_gpu(emu):
    scenarios.test_while_bound_raises_on_the_gpu(emu)


def test_a_false_check_fails_the_run_on_the_gpu(emu):
    scenarios.test_a_false_check_fails_the_run_on_the_gpu(emu)


def test_to_dot(emu, tmp_path):
    scenarios.test_to_dot(emu, tmp_path)
    text = (tmp_path / "graph.dot").read_text()
    # the fused quick start: upload -> kernel -> download
    assert len(re.findall(r"^  n\w+ -> n\w+;$", text, re.M)) == 2, text


def test_no_device_memory_growth_over_many_cycles(emu):
    driver = emu.driver
    scenarios.test_no_device_memory_growth_over_1000_cycles(emu)
    assert driver.device_bytes == 0 and driver.host_bytes == 0


@settings(max_examples=8, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dag=st.integers(0, 40),
    streams=st.sampled_from(scenarios.STREAMS),
    fusion=st.booleans(),
    schedule=st.integers(1, 2**16),
)
@example(dag=3, streams=8, fusion=False, schedule=1)
@example(dag=6, streams=1, fusion=False, schedule=7)
def test_every_schedule_gives_the_same_bits(capture, so_dir, dag, streams, fusion, schedule):
    # Whatever order the emulator picks within the plan's ordering (random graph orders,
    # random stream interleavings), both executors compute exactly the same bits: an
    # ordering bug would make some schedule read a value too early or too late. (The
    # values themselves are checked against the simulator, with a tolerance, by the
    # scenarios above; exact bits make this check immune to float round-off.)
    plan = build_plan(random_op_dag(dag, 16), max_streams=streams, fusion=fusion)
    runs = {}
    for cls in (CudaGraphExecutor, StreamExecutor):
        for seed in (0, schedule):
            driver = EmulatedDriver(seed=seed, so_dir=so_dir)
            runs[cls.__name__, seed] = _run(cls, plan, driver, seed=dag)
            assert driver.live_counts() == {}
    reference = runs["CudaGraphExecutor", 0]
    for key, got in runs.items():
        assert set(got) == set(reference), key
        for name, value in got.items():
            assert value.tobytes() == reference[name].tobytes(), (key, name)


# ---------------------------------------------------------------------------- mutations
# Each test breaks the lowered description (or the packing) the way a bug would, and
# shows that the emulator then gives wrong numbers for some schedule: the scenarios
# above passing means something.
def _mutate(monkeypatch, change):
    """Make both executors run ``change(desc)`` instead of the lowered description."""
    real = cuda_graph.lower
    monkeypatch.setattr(cuda_graph, "lower", lambda plan, **kw: change(real(plan, **kw)))


def _some_schedule_differs(cls, plan, so_dir, inputs=None):
    want = _simulate(plan, inputs)
    for schedule in range(SCHEDULES):
        driver = EmulatedDriver(seed=schedule, so_dir=so_dir)
        try:
            got = _run(cls, plan, driver, inputs)
        except DriverError:
            return True  # an emulated fault is a detection too
        if _differs(got, want):
            return True
    return False


def _chain_plan():
    return build_plan(quick_start(), fusion=False)  # upload -> relu -> scale -> download


@pytest.mark.parametrize("edge", [(0, 1), (1, 2), (2, 3)])
def test_a_dropped_graph_edge_gives_wrong_numbers(capture, so_dir, monkeypatch, edge):
    plan = _chain_plan()

    def drop(desc):
        assert edge in desc.edges
        return replace(desc, edges=tuple(e for e in desc.edges if e != edge))

    _mutate(monkeypatch, drop)
    assert _some_schedule_differs(CudaGraphExecutor, plan, so_dir, {"input": X})


def test_every_dropped_cross_stream_edge_of_a_diamond_is_caught(capture, so_dir, monkeypatch):
    plan = diamond_plan()  # relu -> (scale | neg on stream 1) -> add
    desc = lowering.lower(plan)
    crossing = [(a, b) for a, b in desc.edges if desc.nodes[a].stream != desc.nodes[b].stream]
    assert len(crossing) == 2
    for edge in crossing:
        with monkeypatch.context() as m:
            _mutate(
                m, lambda d, edge=edge: replace(d, edges=tuple(e for e in d.edges if e != edge))
            )
            assert _some_schedule_differs(CudaGraphExecutor, plan, so_dir), edge


def test_every_dropped_event_wait_is_caught(capture, so_dir, monkeypatch):
    plan = diamond_plan()
    waits = [n.index for n in lowering.lower(plan, events="nodes").nodes if n.kind == "event_wait"]
    assert len(waits) == 2
    for index in waits:

        def drop(desc, index=index):
            nodes = list(desc.nodes)
            nodes[index] = replace(nodes[index], kind="empty")  # issues nothing
            return replace(desc, nodes=tuple(nodes))

        with monkeypatch.context() as m:
            _mutate(m, drop)
            assert _some_schedule_differs(StreamExecutor, plan, so_dir), index
    # and intact, no schedule differs
    assert not _some_schedule_differs(StreamExecutor, plan, so_dir)


@pytest.mark.parametrize("cls", [CudaGraphExecutor, StreamExecutor])
def test_a_float_packed_as_double_changes_the_result(capture, so_dir, monkeypatch, cls):
    plan = _chain_plan()  # scale's alpha is a float argument
    driver = EmulatedDriver(so_dir=so_dir)
    good = _run(cls, plan, driver, {"input": X})["output"]
    np.testing.assert_allclose(good, 2 * np.maximum(X, 0), rtol=1e-6)
    monkeypatch.setitem(lowering.CTYPES, "float", (np.float64, 8, ctypes.c_double))
    bad = _run(cls, plan, EmulatedDriver(so_dir=so_dir), {"input": X})["output"]
    # the kernel reads the low half of the double 2.0, which is 0.0
    np.testing.assert_array_equal(bad, np.zeros_like(bad))


@pytest.mark.parametrize("how", ["swap", "offset"])
@pytest.mark.parametrize("cls", [CudaGraphExecutor, StreamExecutor])
def test_misplaced_kernel_arguments_change_the_result(capture, so_dir, monkeypatch, cls, how):
    plan = _chain_plan()

    def misplace(desc):
        nodes = list(desc.nodes)
        k = next(i for i, n in enumerate(nodes) if n.kind == "kernel" and n.name == "scale")
        args = list(nodes[k].args)
        if how == "swap":  # out0 and in0 exchanged
            args[0], args[1] = (
                replace(args[0], value=args[1].value),
                replace(args[1], value=args[0].value),
            )
        else:  # in0 one float further into the arena
            kind, offset = args[0].value
            args[0] = replace(args[0], value=(kind, offset + 4))
        nodes[k] = replace(nodes[k], args=tuple(args))
        return replace(desc, nodes=tuple(nodes))

    _mutate(monkeypatch, misplace)
    got = _run(cls, plan, EmulatedDriver(so_dir=so_dir), {"input": X})
    assert _differs(got, _simulate(plan, {"input": X}))


# ---------------------------------------------------------------------------- failures
@pytest.mark.parametrize("cls", [CudaGraphExecutor, StreamExecutor])
def test_an_overrunning_copy_fails_naming_the_node_and_close_frees_all(
    capture, so_dir, monkeypatch, cls
):
    plan = _chain_plan()

    def overrun(desc):
        nodes = list(desc.nodes)
        i = next(i for i, n in enumerate(nodes) if n.kind == "memcpy" and n.direction == "d2h")
        nodes[i] = replace(nodes[i], nbytes=nodes[i].nbytes + 4096)
        return replace(desc, nodes=tuple(nodes))

    _mutate(monkeypatch, overrun)
    driver = EmulatedDriver(so_dir=so_dir)
    ex = cls(plan, driver=driver)
    with pytest.raises(DriverError, match=r"CUDA_ERROR_ILLEGAL_ADDRESS.*overrun") as info:
        ex.run({"input": X})
    assert info.value.code == 700
    assert "device->host" in str(info.value) or "DtoH" in str(info.value)
    ex.close()
    assert driver.live_counts() == {} and driver.context_refs == 0


def _construction_calls(cls, so_dir) -> dict[str, int]:
    """How often construction makes each driver call."""
    driver = EmulatedDriver(so_dir=so_dir)
    ex = cls(_chain_plan(), driver=driver)
    calls = dict(driver.calls)
    ex.close()
    return calls


@pytest.mark.parametrize("cls", [CudaGraphExecutor, StreamExecutor])
def test_a_failure_half_way_through_construction_leaks_nothing(capture, so_dir, cls):
    calls = _construction_calls(cls, so_dir)
    assert len(calls) >= 10
    for name, count in sorted(calls.items()):
        for failure in (700, RuntimeError("driver exploded")):
            driver = EmulatedDriver(so_dir=so_dir, fail={name: failure},
                                    fail_after={name: count // 2})  # fmt: skip
            with pytest.raises((DriverError, RuntimeError, GraphError)):
                cls(_chain_plan(), driver=driver)
            what = f"{cls.__name__} failing {name} after {count // 2} calls"
            assert driver.live_counts() == {}, what
            assert driver.context_refs == 0, what


def test_a_raising_host_callback_fails_the_run_and_the_next_run_works(capture, so_dir):
    from oxiwork.builder import GraphBuilder
    from oxiwork.node import MemcpyDir

    calls = []

    def tick():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("first tick fails")

    b = GraphBuilder()
    x = b.alloc_buffer("x", 4096)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, 4096, dst=x)
    cb = b.add_host_callback("tick", tick)
    b.chain([up, cb])
    plan = build_plan(b.build())
    for cls in (CudaGraphExecutor, StreamExecutor):
        calls.clear()
        with cls(plan, driver=EmulatedDriver(so_dir=so_dir)) as ex:
            with pytest.raises(ExecutionError, match="first tick fails"):
                ex.run({"x": X})
            ex.run({"x": X})
        assert len(calls) == 2


# ---------------------------------------------------------------------------- updates
def _chain(n: int, alpha: float = 2.0):
    from oxiwork.builder import GraphBuilder
    from oxiwork.node import MemcpyDir

    b = GraphBuilder()
    x, mid, y = (b.alloc_buffer(name, 4 * n) for name in ("input", "mid", "output"))
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4 * n, dst=x)
    k0 = b.add_kernel("relu", 4, 256).inputs([x]).outputs([mid]).finish()
    k1 = b.add_kernel("scale", 4, 256).params(alpha=alpha).inputs([mid]).outputs([y]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4 * n, src=y)
    b.chain([up, k0, k1, down])
    return build_plan(b.build(), fusion=False)


def test_update_in_place_with_new_memory_then_patch_then_read(emu, tmp_path):
    x2 = np.linspace(-1, 1, 2048, dtype=np.float32)
    with emu.executor(CudaGraphExecutor, _chain(1024)) as ex:
        ex.run({"input": X})
        # same topology, twice the bytes: updated in place, on new memory
        assert ex.update(_chain(2048, alpha=-1.0)) == "updated"
        got, _ = ex.run({"input": x2})
        np.testing.assert_allclose(got["output"], -np.maximum(x2, 0), rtol=1e-6)
        ex.update_params("scale", alpha=4.0)
        got, timings = ex.run({"input": x2})
        np.testing.assert_allclose(got["output"], 4 * np.maximum(x2, 0), rtol=1e-6)
        np.testing.assert_allclose(ex.read_buffer("output"), got["output"])
        assert timings.gpu_ms > 0 and ex.instantiations == 1
        ex.to_dot(str(tmp_path / "g.dot"))
        assert "scale" in (tmp_path / "g.dot").read_text()
        # grid and block are patchable too; the kernel's grid-stride loop still covers all
        ex.update_params("relu", grid=1, block=32)
        got, _ = ex.run({"input": x2})
        np.testing.assert_allclose(got["output"], 4 * np.maximum(x2, 0), rtol=1e-6)


def test_back_to_back_launches(emu):
    plan = build_plan(random_op_dag(2, 16), max_streams=4)
    want = _simulate(plan, seed=0)
    with emu.executor(CudaGraphExecutor, plan) as ex:
        ex.run(seed=0)
        assert ex.timed_launches(3) > 0
        ex.launch(2)
        ex.synchronize()
        scenarios._assert_same(cuda_graph.read_outputs(ex._memory, ex.desc), want, "graph")
    with emu.executor(StreamExecutor, plan) as ex:
        ex.run(seed=0)
        assert ex.timed_launches(3) > 0
        for _ in range(2):
            ex.enqueue()
        ex.synchronize()
        scenarios._assert_same(cuda_graph.read_outputs(ex._memory, ex.desc), want, "streams")


# ---------------------------------------------------------------------------- emulator
def test_parse_kernels_reads_the_generated_signatures(capture):
    desc = lowering.lower(build_plan(random_op_dag(0, 24), max_streams=2))
    for m in desc.modules:
        kernels = {k.name: k for k in parse_kernels(m.source)}
        assert set(kernels) == set(m.function_names)
    for n in desc.nodes:
        if n.kind == "kernel":
            sig = next(k for m in desc.modules for k in parse_kernels(m.source)
                       if k.name == n.function_name)  # fmt: skip
            assert sig.names == tuple(a.name for a in n.args), n.name
            for a, t in zip(n.args, sig.types, strict=True):
                assert (a.ctype == "ptr") == ("*" in t), (n.name, a, t)
                if a.ctype != "ptr":
                    assert a.ctype in t, (n.name, a, t)


def test_a_driver_call_inside_a_host_callback_is_refused(capture, so_dir):
    driver = EmulatedDriver(so_dir=so_dir)
    seen = []
    Device.open(0, Driver(driver))  # a context, kept
    stream = driver.cuStreamCreate(1)[1]
    fn = emulated_driver._HOST_FN(lambda _: seen.append(int(driver.cuMemAlloc(16)[0])))
    driver.cuLaunchHostFunc(stream, ctypes.cast(fn, ctypes.c_void_p).value, 0)
    assert int(driver.cuStreamSynchronize(stream)[0]) == 0
    assert seen == [800]
    driver.cuStreamDestroy(stream)


def test_a_missing_wait_between_streams_is_seen_by_some_schedule(capture, so_dir):
    # s0: memset(a, 1); record(e).  s1: [wait(e)]; copy a -> b.  Then b must hold ones.
    def run(wait: bool, seed: int) -> int:
        driver = EmulatedDriver(seed=seed, so_dir=so_dir)
        Device.open(0, Driver(driver))
        s0, s1 = driver.cuStreamCreate(1)[1], driver.cuStreamCreate(1)[1]
        ev = driver.cuEventCreate(2)[1]
        a, b = (int(driver.cuMemAlloc(64)[1]) for _ in range(2))
        driver.cuMemsetD32Async(b, 0, 16, s0)
        driver.cuStreamSynchronize(s0)
        driver.cuMemsetD32Async(a, 1, 16, s0)
        driver.cuEventRecord(ev, s0)
        if wait:
            driver.cuStreamWaitEvent(s1, ev, 0)
        driver.cuMemcpyDtoDAsync(b, a, 64, s1)
        assert int(driver.cuCtxSynchronize()[0]) == 0
        out = np.zeros(16, np.uint32)
        driver.cuMemcpyDtoH(out.ctypes.data, b, 64)
        return int(out.sum())

    assert {run(True, seed) for seed in range(SCHEDULES)} == {16}
    assert len({run(False, seed) for seed in range(SCHEDULES)}) > 1


BLOCK_SUM = """
extern "C" __global__ void block_sum(const float* in0, float* out0, size_t n)
{
    __shared__ float red[256];
    float acc = 0.0f;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += in0[i];
    red[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out0[blockIdx.x] = red[0];
}
"""


def _block_sum(source: str, so_dir, seed: int) -> float:
    """Launch ``block_sum`` (256 threads) over 1..1024 and return the sum it computed."""
    from oxiwork.executor.nvrtc import compile_cuda

    driver = EmulatedDriver(seed=seed, so_dir=so_dir)
    drv = Driver(driver)
    dev = Device.open(0, drv)
    try:
        module = drv("cuModuleLoadData", compile_cuda(source).cubin)
        fn = drv("cuModuleGetFunction", module, b"block_sum")
        stream = drv("cuStreamCreate", 1)
        src, dst = int(drv("cuMemAlloc", 4096)), int(drv("cuMemAlloc", 256))
        values = np.arange(1, 1025, dtype=np.float32)
        drv("cuMemcpyHtoDAsync", src, values.ctypes.data, 4096, stream)
        args = lowering.pack_args(
            [lowering.KernelArg("in0", "ptr", src), lowering.KernelArg("out0", "ptr", dst),
             lowering.KernelArg("n", "size_t", 1024)],
            lambda ref: ref,
        )  # fmt: skip
        drv("cuLaunchKernel", fn, 1, 1, 1, 256, 1, 1, 0, stream, args.kernel_params, 0)
        drv("cuStreamSynchronize", stream)
        out = np.zeros(1, np.float32)
        drv("cuMemcpyDtoH", out.ctypes.data, dst, 4)
        return float(out[0])
    finally:
        dev.release()  # the last release frees everything, as CUDA's context reset does


def test_block_threads_meet_at_barriers(capture, so_dir):
    # 256 threads really cooperate through shared memory: with the barriers the sum is
    # right for every thread order, without the first one some order reads too early
    assert {_block_sum(BLOCK_SUM, so_dir, seed) for seed in range(4)} == {1024 * 1025 / 2}
    racy = BLOCK_SUM.replace(
        "red[threadIdx.x] = acc;\n    __syncthreads();", "red[threadIdx.x] = acc;"
    )
    assert racy != BLOCK_SUM
    assert any(_block_sum(racy, so_dir, seed) != 1024 * 1025 / 2 for seed in range(4))


def test_a_divergent_barrier_fails_the_launch(capture, so_dir):
    divergent = BLOCK_SUM.replace(
        "if (threadIdx.x == 0) out0",
        "if (threadIdx.x < 128) __syncthreads();\n    if (threadIdx.x == 0) out0",
    )
    with pytest.raises(DriverError, match="different __syncthreads") as info:
        _block_sum(divergent, so_dir, 0)
    assert info.value.code == 719


@pytest.mark.parametrize(
    ("seed", "n", "kw", "input_seed"), [(12, 40, {"rows": 16, "cols": 64}, 0), (6, 16, {}, 6)]
)
def test_nans_agree_with_the_simulator(capture, so_dir, seed, n, kw, input_seed):
    # Found by this emulator: relu/max/softmax kernels use fmaxf, which skips a NaN, while
    # the numpy references used np.maximum, which propagates it; a log of a negative
    # number then made the GPU and the simulator disagree. The references now use fmax.
    plan = build_plan(random_op_dag(seed, n, **kw), max_streams=2)
    want = _simulate(plan, seed=input_seed)
    for cls in (CudaGraphExecutor, StreamExecutor):
        got = _run(cls, plan, EmulatedDriver(seed=1, so_dir=so_dir), seed=input_seed)
        scenarios._assert_same(got, want, cls.__name__)
