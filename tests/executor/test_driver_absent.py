"""Graceful absence: without cuda-bindings, without a driver or without a device,
oxiwork imports and works up to the first driver call, and constructing a GPU executor
raises BackendUnavailable saying what is missing. Also the checked-call helper.

These run everywhere: the "no driver" case uses this machine when it has no GPU and a
fake driver module otherwise.
"""

from __future__ import annotations

import enum
import subprocess
import sys

import pytest

from oxiwork.error import BackendUnavailable, ExecutionError, GraphError, InvalidArgument
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import Device, Driver, DriverError, check, probe
from oxiwork.executor.streams import StreamExecutor
from tests.executor.gpu_fakes import (
    CUresult,
    DynamicLibNotFoundError,
    FakeDriver,
    diamond_plan,
    kitchen_sink_plan,
)

EXECUTORS = [CudaGraphExecutor, StreamExecutor]


class TestCheck:
    def test_raises_driver_error_naming_call_and_code(self):
        with pytest.raises(
            DriverError, match=r"cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY \(2\)"
        ) as info:
            check("cuMemAlloc", (CUresult.CUDA_ERROR_OUT_OF_MEMORY, None))
        assert isinstance(info.value, GraphError)
        assert (info.value.call, info.value.code) == ("cuMemAlloc", 2)

    def test_raises_on_a_non_tuple_result(self):
        with pytest.raises(DriverError, match="returned 5"):
            check("cuInit", 5)

    def test_unpacks_results(self):
        assert check("cuInit", (CUresult.CUDA_SUCCESS,)) is None
        assert check("cuMemAlloc", (CUresult.CUDA_SUCCESS, 256)) == 256
        assert check("cuMemGetInfo", (CUresult.CUDA_SUCCESS, 1, 2)) == (1, 2)

    def test_plain_int_codes_are_named_through_the_module(self):
        class Mod:
            @staticmethod
            def cuGetErrorName(err):
                return (0, b"CUDA_ERROR_FAKE")

        with pytest.raises(DriverError, match="CUDA_ERROR_FAKE"):
            check("cuX", (7,), Mod)


class TestImportWithoutGpu:
    def test_import_touches_no_driver(self):
        # A fresh interpreter: importing everything must not load libcuda.
        code = (
            "import oxiwork, oxiwork.executor.cuda_graph, oxiwork.executor.streams, "
            "oxiwork.executor.lowering, oxiwork.executor.driver, oxiwork.executor.nvrtc\n"
            "import sys\n"
            "print('cuda.bindings.driver' in sys.modules)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="."
        )
        assert out.stdout.strip() == "False"


class TestMissingBindings:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_raises_with_pip_hint(self, executor, monkeypatch):
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
        with pytest.raises(BackendUnavailable, match=r"pip install 'oxiwork\[gpu\]'"):
            executor(diamond_plan())

    def test_probe_reports_it(self, monkeypatch):
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", None)
        assert "oxiwork[gpu]" in probe()


class TestMissingDriver:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_fake_library_error_becomes_backend_unavailable(self, executor):
        fake = FakeDriver(fail={"cuInit": DynamicLibNotFoundError("libcuda.so.1 not found")})
        with pytest.raises(BackendUnavailable, match=r"no NVIDIA driver found \(libcuda\.so\)"):
            executor(diamond_plan(), driver=fake)
        assert fake.live == {}

    @pytest.mark.skipif(probe() is None, reason="this machine has a working GPU")
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_this_machine(self, executor):
        with pytest.raises(BackendUnavailable) as info:
            executor(diamond_plan())
        msg = str(info.value)
        assert "no NVIDIA driver found (libcuda.so)" in msg or "device" in msg

    def test_old_driver_without_the_symbol(self):
        fake = FakeDriver(fail={"cuInit": RuntimeError('Function "cuInit" not found')})
        with pytest.raises(BackendUnavailable, match=r"580\.65\.06"):
            Device.open(0, Driver(fake))


class TestMissingDevice:
    @pytest.mark.parametrize("executor", EXECUTORS)
    def test_no_device(self, executor):
        fake = FakeDriver(devices=0)
        with pytest.raises(BackendUnavailable, match="no CUDA-capable device"):
            executor(diamond_plan(), driver=fake)
        assert fake.live == {}

    def test_cuinit_no_device_code(self):
        fake = FakeDriver(fail={"cuInit": CUresult.CUDA_ERROR_NO_DEVICE})
        with pytest.raises(BackendUnavailable, match="CUDA_ERROR_NO_DEVICE"):
            Device.open(0, Driver(fake))

    def test_ordinal_out_of_range(self):
        with pytest.raises(BackendUnavailable, match=r"device 2 was requested but only 1"):
            Device.open(2, Driver(FakeDriver()))

    def test_raises_on_bad_ordinal(self):
        with pytest.raises(InvalidArgument, match="device must be an int"):
            Device.open(-1, Driver(FakeDriver()))

    def test_other_driver_errors_are_not_hidden(self):
        fake = FakeDriver(fail={"cuInit": CUresult.CUDA_ERROR_INVALID_VALUE})
        with pytest.raises(DriverError, match="cuInit"):
            Device.open(0, Driver(fake))
        assert isinstance(DriverError("x"), ExecutionError)


class TestDevice:
    def test_arch_and_release_once(self):
        fake = FakeDriver(cc=(8, 0))
        dev = Device.open(0, Driver(fake))
        assert dev.arch == "sm_80"
        assert dev.name == "Fake GPU"
        dev.release()
        dev.release()
        assert fake.names().count("cuDevicePrimaryCtxRelease") == 1
        assert fake.live == {}

    def test_probe_with_a_working_fake(self):
        fake = FakeDriver()
        assert probe(0, fake) is None
        assert fake.live == {}


def test_enum_helper():
    class E(enum.IntEnum):
        A = 1

    class Mod:
        pass

    Mod.E = E
    assert Driver(Mod).enum("E.A") is E.A


# ------------------------------------------------------------------ real bindings, no driver
def _real_bindings():
    try:
        import cuda.bindings.driver as real
    except ImportError:
        return None
    return real


_REAL_TYPES = {
    "context": "CUcontext",
    "stream": "CUstream",
    "event": "CUevent",
    "graph": "CUgraph",
    "exec": "CUgraphExec",
    "module": "CUmodule",
    "function": "CUfunction",
    "node": "CUgraphNode",
}


def _to_real(value, real):
    """A fake-driver value as the real binding's type (handles, enums, structs)."""
    from types import SimpleNamespace

    from tests.executor.gpu_fakes import Handle

    if isinstance(value, Handle):
        if value.kind == "device":
            return real.CUdevice(value.number)
        if value.kind == "device_memory":
            return real.CUdeviceptr(int(value))
        return getattr(real, _REAL_TYPES[value.kind])()
    if isinstance(value, enum.Enum):
        return getattr(getattr(real, type(value).__name__), value.name)
    if isinstance(value, SimpleNamespace):
        struct = getattr(real, value._struct)()
        for k, v in vars(value).items():
            if k != "_struct":
                setattr(struct, k, _to_real(v, real))  # also checks every field's type
        return struct
    if isinstance(value, list):
        return [_to_real(v, real) for v in value]
    return value


@pytest.mark.skipif(_real_bindings() is None, reason="cuda-bindings not installed")
@pytest.mark.skipif(probe() is None, reason="a real driver is present: dummy handles unsafe")
class TestRealBindingsAcceptOurArguments:
    """Replay every call both executors make (recorded with the fake driver) against the
    real ``cuda.bindings.driver``. Without a driver, a call whose arguments convert fails
    only when it loads libcuda (DynamicLibNotFoundError); a wrong type, a wrong number of
    arguments or an unknown struct field fails earlier with TypeError/AttributeError. So
    this checks, without a GPU, that every call we make matches the installed API."""

    @pytest.mark.parametrize("executor", EXECUTORS)
    @pytest.mark.parametrize("make", [diamond_plan, kitchen_sink_plan])
    def test_every_call_converts(self, executor, make, tmp_path):
        real = _real_bindings()
        fake = FakeDriver()
        ex = executor(make(), driver=fake)
        ex.run()
        if isinstance(ex, CudaGraphExecutor):
            kernel = next(n for n in ex.desc.nodes if n.kind == "kernel")
            ex.update_params(kernel.name, grid=2)
            ex.update(make())
            ex.to_dot(str(tmp_path / "g.dot"))
            ex.read_buffer("x")
        ex.close()
        checked = set()
        for name, args in fake.calls:
            fn = getattr(real, name)  # AttributeError: a call the bindings do not have
            try:
                fn(*[_to_real(a, real) for a in args])
            except Exception as e:
                assert type(e).__name__ == "DynamicLibNotFoundError", (
                    f"{name}{args!r} was rejected by cuda.bindings: {type(e).__name__}: {e}"
                )
            checked.add(name)
        assert {"cuGraphAddKernelNode", "cuLaunchKernel"} & checked
        if make is kitchen_sink_plan:
            assert {
                "cuGraphAddMemsetNode",
                "cuGraphAddHostNode",
                "cuMemsetD32Async",
                "cuLaunchHostFunc",
            } & checked


class TestFindCudadevrt:
    """libcudadevrt.a (for conditional nodes) from cuda.pathfinder, else a system toolkit."""

    @pytest.fixture
    def no_pathfinder(self, monkeypatch):
        import types

        old = types.ModuleType("cuda.pathfinder")  # a release without find_static_lib
        monkeypatch.setitem(sys.modules, "cuda.pathfinder", old)
        for var in ("CUDA_HOME", "CUDA_PATH"):
            monkeypatch.delenv(var, raising=False)

    def test_falls_back_to_cuda_home(self, no_pathfinder, monkeypatch, tmp_path):
        from oxiwork.executor import driver

        lib = tmp_path / "lib64" / "libcudadevrt.a"
        lib.parent.mkdir()
        lib.write_bytes(b"!<arch>\n")
        monkeypatch.setenv("CUDA_HOME", str(tmp_path))
        monkeypatch.setattr(driver.os.path, "isfile", lambda p: p == str(lib))
        assert driver.find_cudadevrt() == str(lib)

    def test_missing_everywhere_says_what_to_install(self, no_pathfinder, monkeypatch):
        from oxiwork.executor import driver

        monkeypatch.setattr(driver.os.path, "isfile", lambda p: False)
        with pytest.raises(BackendUnavailable, match=r"libcudadevrt\.a.*pip install"):
            driver.find_cudadevrt()
