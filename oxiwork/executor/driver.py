"""The only module that talks to the CUDA driver (``cuda.bindings.driver``).

Three things live here, so that the executors stay free of error handling boilerplate:

- :func:`load_driver_module` imports ``cuda.bindings.driver`` lazily, so ``import
  oxiwork`` (and everything up to the first driver call) works on a machine without
  cuda-bindings, without a driver and without a GPU;
- :func:`check` is the one checked helper: every driver call returns ``(CUresult,
  *values)``, and a non-success code becomes a :class:`DriverError` naming the call;
- :class:`Driver` wraps a driver module (the real one, or a fake in tests) and turns the
  "library missing" exceptions of ``cuda.pathfinder`` into
  :class:`~oxiwork.error.BackendUnavailable` with a message saying what to install.

The executors take a ``driver`` argument, so tests can pass a fake module that records
the calls and check call order and teardown without a GPU.

Example
-------
>>> from types import SimpleNamespace
>>> import enum
>>> class CUresult(enum.IntEnum):
...     CUDA_SUCCESS = 0
...     CUDA_ERROR_OUT_OF_MEMORY = 2
>>> check("cuMemAlloc", (CUresult.CUDA_SUCCESS, 4096))
4096
>>> check("cuMemAlloc", (CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0))
Traceback (most recent call last):
...
oxiwork.executor.driver.DriverError: cuMemAlloc failed with CUDA_ERROR_OUT_OF_MEMORY (2)

References
----------
NVIDIA, "CUDA Driver API", section 6.24 Graph Management (CUDA 13 documentation);
cuda-python, ``cuda_bindings/examples/3_CUDA_Features/simple_cuda_graphs.py``.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from oxiwork.error import BackendUnavailable, ExecutionError, InvalidArgument

__all__ = [
    "INSTALL_HINT",
    "Device",
    "Driver",
    "DriverError",
    "Session",
    "check",
    "load_driver_module",
    "probe",
]

INSTALL_HINT = "pip install 'oxiwork[gpu]'"
NO_DRIVER = "no NVIDIA driver found (libcuda.so)"

# CUresult codes that mean "this machine cannot run CUDA" rather than "a bug": they
# become BackendUnavailable, with what to do about them.
_UNAVAILABLE = {
    100: "no CUDA-capable device is visible (CUDA_ERROR_NO_DEVICE); check nvidia-smi and "
    "CUDA_VISIBLE_DEVICES",
    803: "the NVIDIA kernel driver and the user-mode driver differ "
    "(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH); reinstall the driver or reboot",
    804: "forward compatibility is not supported on this device "
    "(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE); install driver >= 580.65.06",
    34: "the CUDA driver is a stub library (CUDA_ERROR_STUB_LIBRARY); " + NO_DRIVER,
    3: "the CUDA driver could not be initialised (CUDA_ERROR_NOT_INITIALIZED)",
    999: "the CUDA driver reported an unknown error during initialisation (CUDA_ERROR_UNKNOWN)",
}


class DriverError(ExecutionError):
    """A driver call returned an error code; ``call`` and ``code`` name both."""

    def __init__(self, message: str, call: str = "", code: int = -1) -> None:
        super().__init__(message)
        self.call = call
        self.code = code


def load_driver_module() -> ModuleType:
    """Import ``cuda.bindings.driver``; :class:`BackendUnavailable` if it is not installed.

    Importing the bindings never touches the driver library (that happens at the first
    call), so this succeeds on machines without a GPU as long as the package is there.

    >>> load_driver_module().__name__  # doctest: +SKIP
    'cuda.bindings.driver'
    """
    try:
        # import_module honours a module blocked in sys.modules (how tests simulate a
        # machine without cuda-bindings), unlike "from cuda.bindings import driver".
        driver = importlib.import_module("cuda.bindings.driver")
    except ImportError as e:
        raise BackendUnavailable(
            f"the GPU backend needs cuda-bindings, which is not installed ({e}); "
            f"install it with: {INSTALL_HINT}"
        ) from e
    return driver


def _code_name(err: Any, module: Any = None) -> str:
    name = getattr(err, "name", None)
    if name:
        return str(name)
    if module is not None:
        try:
            code, text = module.cuGetErrorName(err)
            if int(code) == 0 and text:
                return text.decode() if isinstance(text, bytes) else str(text)
        except Exception:  # only used to word a message
            pass
    return "CUresult"


def check(call_name: str, result: Any, module: Any = None) -> Any:
    """Unpack a driver call's ``(err, *values)`` tuple, raising on a non-success code.

    Returns ``None`` for a call without results, the value for one result and a tuple
    for several. The :class:`DriverError` message names the call and the error code.

    >>> check("cuInit", (0,)) is None
    True
    >>> check("cuMemGetInfo", (0, 10, 20))
    (10, 20)
    """
    if not isinstance(result, tuple) or not result:
        raise DriverError(
            f"{call_name} returned {result!r}; a cuda.bindings call returns (CUresult, ...). "
            "Is the driver module a real cuda.bindings.driver?",
            call_name,
        )
    err, *values = result
    code = int(err)
    if code != 0:
        raise DriverError(
            f"{call_name} failed with {_code_name(err, module)} ({code})", call_name, code
        )
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _library_missing(exc: BaseException) -> bool:
    """True for cuda.pathfinder's "could not load libcuda" family of exceptions.

    Matched by class name so that cuda.pathfinder stays an optional import and its
    module layout may change; older bindings raised a RuntimeError naming libcuda.
    """
    if any(c.__name__.startswith("DynamicLib") for c in type(exc).__mro__):
        return True
    return isinstance(exc, (RuntimeError, OSError)) and "libcuda" in str(exc)


class Driver:
    """A driver module plus checked calls: ``drv("cuMemAlloc", n)`` returns the pointer.

    ``module`` defaults to the real ``cuda.bindings.driver``; tests pass a fake.
    """

    def __init__(self, module: Any = None) -> None:
        self.cu = load_driver_module() if module is None else module
        self.calls = 0

    def __call__(self, name: str, *args: Any) -> Any:
        """Call ``cuda.bindings.driver.<name>(*args)`` and :func:`check` the result."""
        fn = getattr(self.cu, name, None)
        if fn is None:
            raise BackendUnavailable(
                f"the installed cuda-bindings has no {name}; install a matching version "
                f"with: {INSTALL_HINT}"
            )
        self.calls += 1
        try:
            result = fn(*args)
        except Exception as e:
            if _library_missing(e):
                raise BackendUnavailable(f"{NO_DRIVER}: {e}") from e
            if isinstance(e, RuntimeError) and "not found" in str(e) and name in str(e):
                # cuda-bindings raises this when libcuda lacks the symbol: an old driver.
                raise BackendUnavailable(
                    f"the NVIDIA driver has no {name}; it is older than cuda-bindings 13 "
                    "needs: install driver >= 580.65.06"
                ) from e
            raise
        return check(name, result, self.cu)

    def new(self, struct: str) -> Any:
        """A fresh parameter struct, e.g. ``drv.new("CUDA_KERNEL_NODE_PARAMS")``."""
        return getattr(self.cu, struct)()

    def enum(self, path: str) -> Any:
        """An enum member by dotted path: ``drv.enum("CUmemorytype.CU_MEMORYTYPE_HOST")``."""
        cls, member = path.split(".")
        return getattr(getattr(self.cu, cls), member)


@dataclass
class Device:
    """An initialised device with its retained primary context.

    Created by :meth:`open`; :meth:`release` gives the context back (idempotent).
    """

    driver: Driver
    ordinal: int
    handle: Any
    context: Any
    name: str = ""
    compute_capability: tuple[int, int] = (0, 0)
    _released: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, ordinal: int = 0, driver: Driver | None = None) -> Device:
        """``cuInit``, pick device ``ordinal``, retain and make current its primary context.

        The primary context is the one CuPy, PyTorch and cuda.core use, so oxiwork's
        allocations and theirs can be mixed. Raises :class:`BackendUnavailable` when the
        driver or the device is missing, naming which.
        """
        if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 0:
            raise InvalidArgument(f"device must be an int >= 0, got {ordinal!r}")
        drv = Driver() if driver is None else driver
        try:
            drv("cuInit", 0)
            count = drv("cuDeviceGetCount")
        except DriverError as e:
            reason = _UNAVAILABLE.get(e.code)
            if reason is None:
                raise
            raise BackendUnavailable(reason) from e
        if count == 0:
            raise BackendUnavailable(
                "no CUDA-capable device is visible; check nvidia-smi and CUDA_VISIBLE_DEVICES"
            )
        if ordinal >= count:
            raise BackendUnavailable(
                f"device {ordinal} was requested but only {count} CUDA device(s) are "
                f"visible; use device=0..{count - 1}"
            )
        handle = drv("cuDeviceGet", ordinal)
        major = drv("cuDeviceGetAttribute", _attr(drv, "COMPUTE_CAPABILITY_MAJOR"), handle)
        minor = drv("cuDeviceGetAttribute", _attr(drv, "COMPUTE_CAPABILITY_MINOR"), handle)
        raw_name = drv("cuDeviceGetName", 256, handle)
        name = (
            raw_name.split(b"\x00")[0].decode(errors="replace")
            if isinstance(raw_name, bytes)
            else str(raw_name)
        )
        context = drv("cuDevicePrimaryCtxRetain", handle)
        try:
            drv("cuCtxSetCurrent", context)
        except BaseException:
            drv("cuDevicePrimaryCtxRelease", handle)
            raise
        return cls(drv, ordinal, handle, context, name, (int(major), int(minor)))

    @property
    def arch(self) -> str:
        """The NVRTC arch of this device, e.g. ``"sm_90"`` for an H100/H200."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory (``cuMemGetInfo``)."""
        free, total = self.driver("cuMemGetInfo")
        return int(free), int(total)

    def release(self) -> None:
        """Release the primary context (once; later calls do nothing)."""
        if self._released:
            return
        self._released = True
        self.driver("cuDevicePrimaryCtxRelease", self.handle)


def _attr(drv: Driver, name: str) -> Any:
    return drv.enum(f"CUdevice_attribute.CU_DEVICE_ATTRIBUTE_{name}")


def probe(device: int = 0, module: Any = None) -> str | None:
    """``None`` if device ``device`` can run CUDA here, else the reason it cannot.

    Used by the GPU tests to skip cleanly. Starts nothing that outlives the call.

    >>> reason = probe()
    >>> reason is None or isinstance(reason, str)
    True
    """
    try:
        dev = Device.open(device, Driver(module))
    except BackendUnavailable as e:
        return str(e)
    except DriverError as e:
        return f"the CUDA driver failed during start-up: {e}"
    dev.release()
    return None


# Resource kinds in the order they are released, with the call that releases each:
# executable graphs before the graphs they came from, graphs before the modules their
# kernel nodes reference, then memory, events and streams; the context goes last.
_RELEASE_ORDER: tuple[tuple[str, str], ...] = (
    ("exec", "cuGraphExecDestroy"),
    ("graph", "cuGraphDestroy"),
    ("module", "cuModuleUnload"),
    ("device_memory", "cuMemFree"),
    ("host_memory", "cuMemFreeHost"),
    ("event", "cuEventDestroy"),
    ("stream", "cuStreamDestroy"),
)
_DESTROY = dict(_RELEASE_ORDER)


def find_cudadevrt() -> str:
    """The path of ``libcudadevrt.a``: where ``cuda.pathfinder`` finds it (the
    ``cuda-toolkit[cudart]`` wheels), else in a system toolkit (``$CUDA_HOME``,
    ``$CUDA_PATH``, ``/usr/local/cuda``); older ``cuda.pathfinder`` releases have no
    ``find_static_lib``. Raises :class:`BackendUnavailable` saying how to install it.

    >>> find_cudadevrt().endswith("libcudadevrt.a")  # with cuda-toolkit[cudart] installed
    True
    """
    reason = ""
    try:
        from cuda.pathfinder import find_static_lib

        return str(find_static_lib("cudadevrt"))
    except Exception as e:  # ImportError, or the library is not installed there
        reason = f"{type(e).__name__}: {e}"
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        for lib in ("lib64", "lib", "targets/x86_64-linux/lib"):
            path = os.path.join(root or "", lib, "libcudadevrt.a")
            if root and os.path.isfile(path):
                return path
    raise BackendUnavailable(
        f"conditional nodes need libcudadevrt.a (the CUDA device runtime) to link their "
        f"set-condition kernels, which was not found ({reason}; nor under $CUDA_HOME, "
        "$CUDA_PATH or /usr/local/cuda); install it with: pip install 'cuda-toolkit[cudart]'"
    )


class Session:
    """Every driver resource one executor owns, created through checked calls and
    released in a fixed, safe order by :meth:`close` (idempotent, also after a failure
    half-way through construction).

    The methods are thin: each is one driver call plus the bookkeeping of what must be
    released. ``driver`` is a driver module (default: ``cuda.bindings.driver``).
    """

    def __init__(self, device: int = 0, driver: Any = None) -> None:
        self.drv = driver if isinstance(driver, Driver) else Driver(driver)
        self._owned: dict[str, list[Any]] = {kind: [] for kind, _ in _RELEASE_ORDER}
        self.closed = False
        self.device = Device.open(device, self.drv)

    # ------------------------------------------------------------------ bookkeeping
    def _own(self, kind: str, handle: Any) -> Any:
        self._owned[kind].append(handle)
        return handle

    def destroy(self, kind: str, handle: Any) -> None:
        """Release one resource now (e.g. an executable graph being replaced)."""
        owned = self._owned[kind]
        for i, h in enumerate(owned):
            # memory is handed out as plain addresses, so it is matched by value
            if h is handle or (kind.endswith("memory") and int(h) == int(handle)):
                handle = h
                del owned[i]
                break
        self.drv(_DESTROY[kind], handle)

    def owned_counts(self) -> dict[str, int]:
        """How many resources of each kind are held (for tests and leak checks)."""
        return {kind: len(v) for kind, v in self._owned.items()}

    def close(self) -> None:
        """Release everything in order, then the context. Safe to call twice.

        Every release is attempted even if one fails; the first failure is raised at the
        end so that nothing else leaks.
        """
        if self.closed:
            return
        self.closed = True
        first: BaseException | None = None
        try:
            self.drv("cuCtxSetCurrent", self.device.context)
            # Work may still be in flight after an error: wait before freeing its memory.
            self.drv("cuCtxSynchronize")
        except Exception as e:  # keep releasing; report the first problem
            first = e
        for kind, call in _RELEASE_ORDER:
            handles, self._owned[kind] = self._owned[kind], []
            for h in reversed(handles):
                try:
                    self.drv(call, h)
                except Exception as e:
                    first = first or e
        try:
            self.device.release()
        except Exception as e:
            first = first or e
        if first is not None:
            raise first

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> int:
        """``cuMemAlloc``: device memory (aligned to at least 256 bytes); its address."""
        return int(self._own("device_memory", self.drv("cuMemAlloc", nbytes)))

    def alloc_host(self, nbytes: int) -> int:
        """``cuMemAllocHost``: pinned host memory, so copies in a graph can DMA from it."""
        return int(self._own("host_memory", self.drv("cuMemAllocHost", nbytes)))

    def memory_info(self) -> tuple[int, int]:
        """``(free, total)`` device memory in bytes."""
        return self.device.memory_info()

    # ------------------------------------------------------------------ code
    def load_module(self, cubin: bytes) -> Any:
        """``cuModuleLoadData`` of a cubin image."""
        return self._own("module", self.drv("cuModuleLoadData", cubin))

    def load_linked_module(self, cubin: bytes) -> Any:
        """A relocatable cubin linked with libcudadevrt, then loaded: the set-condition
        kernels call ``cudaGraphSetConditional``, which lives there (``cuLinkCreate``,
        ``cuLinkAddData``, ``cuLinkAddFile``, ``cuLinkComplete``, ``cuLinkDestroy``)."""
        devrt = find_cudadevrt()
        state = self.drv("cuLinkCreate", 0, [], [])
        try:
            cubin_type = self.drv.enum("CUjitInputType.CU_JIT_INPUT_CUBIN")
            library = self.drv.enum("CUjitInputType.CU_JIT_INPUT_LIBRARY")
            self.drv("cuLinkAddData", state, cubin_type, cubin, len(cubin), b"oxiwork", 0, [], [])
            self.drv("cuLinkAddFile", state, library, str(devrt).encode(), 0, [], [])
            image, size = self.drv("cuLinkComplete", state)
            linked = ctypes.string_at(int(image), int(size))  # owned by the link state
        finally:
            self.drv("cuLinkDestroy", state)
        return self.load_module(linked)

    def function(self, module: Any, name: str, smem: int = 0) -> Any:
        """``cuModuleGetFunction``; raises the opt-in limit when ``smem`` > 48 KiB."""
        fn = self.drv("cuModuleGetFunction", module, name.encode())
        if smem > 48 * 1024:
            attr = self.drv.enum(
                "CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"
            )
            self.drv("cuFuncSetAttribute", fn, attr, smem)
        return fn

    # ------------------------------------------------------------------ streams, events
    def stream(self) -> Any:
        """A non-blocking stream (no implicit sync with the legacy default stream)."""
        flags = self.drv.enum("CUstream_flags.CU_STREAM_NON_BLOCKING")
        return self._own("stream", self.drv("cuStreamCreate", int(flags)))

    def event(self, timing: bool = True) -> Any:
        """An event; without ``timing`` it is cheaper to record and wait on."""
        name = "CU_EVENT_DEFAULT" if timing else "CU_EVENT_DISABLE_TIMING"
        flags = self.drv.enum(f"CUevent_flags.{name}")
        return self._own("event", self.drv("cuEventCreate", int(flags)))

    def record(self, event: Any, stream: Any) -> None:
        """``cuEventRecord``."""
        self.drv("cuEventRecord", event, stream)

    def wait(self, stream: Any, event: Any) -> None:
        """``cuStreamWaitEvent``: later work on ``stream`` waits for ``event``."""
        self.drv("cuStreamWaitEvent", stream, event, 0)

    def synchronize(self, stream: Any) -> None:
        """``cuStreamSynchronize``."""
        self.drv("cuStreamSynchronize", stream)

    def elapsed_ms(self, start: Any, stop: Any) -> float:
        """``cuEventElapsedTime`` in milliseconds."""
        return float(self.drv("cuEventElapsedTime", start, stop))

    # ------------------------------------------------------------------ async work
    def launch_kernel(
        self,
        fn: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        smem: int,
        stream: Any,
        kernel_params: int,
    ) -> None:
        """``cuLaunchKernel`` with a ``void**`` argument array."""
        self.drv("cuLaunchKernel", fn, *grid, *block, smem, stream, kernel_params, 0)

    def copy_async(self, direction: str, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """An async copy: ``h2d``/``d2h`` need pinned host memory to overlap."""
        call = {"h2d": "cuMemcpyHtoDAsync", "d2h": "cuMemcpyDtoHAsync"}.get(
            direction, "cuMemcpyDtoDAsync"
        )
        self.drv(call, dst, src, nbytes, stream)

    def memset_async(
        self, dst: int, value: int, element_size: int, width: int, stream: Any
    ) -> None:
        """``cuMemsetD8/D16/D32Async`` by element size."""
        call = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}[element_size]
        self.drv(call, dst, value, width, stream)

    def host_func(self, stream: Any, fn_ptr: int) -> None:
        """``cuLaunchHostFunc`` of a C function pointer (make no CUDA calls inside)."""
        self.drv("cuLaunchHostFunc", stream, fn_ptr, 0)

    def copy_d2d(self, dst: int, src: int, nbytes: int) -> None:
        """A synchronous device-to-device copy (for bandwidth measurements)."""
        self.drv("cuMemcpyDtoD", dst, src, nbytes)

    def copy_d2h(self, dst_host: int, src: int, nbytes: int) -> None:
        """A synchronous device-to-host copy."""
        self.drv("cuMemcpyDtoH", dst_host, src, nbytes)

    # ------------------------------------------------------------------ graphs
    def create_graph(self) -> Any:
        """``cuGraphCreate``."""
        return self._own("graph", self.drv("cuGraphCreate", 0))

    def kernel_params(
        self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int,
        kernel_params: int,
    ) -> Any:  # fmt: skip
        """A filled ``CUDA_KERNEL_NODE_PARAMS``."""
        p = self.drv.new("CUDA_KERNEL_NODE_PARAMS")
        p.func = fn
        p.gridDimX, p.gridDimY, p.gridDimZ = grid
        p.blockDimX, p.blockDimY, p.blockDimZ = block
        p.sharedMemBytes = smem
        p.kernelParams = kernel_params
        p.extra = 0
        return p

    def add_kernel_node(self, graph: Any, deps: list[Any], params: Any) -> Any:
        """``cuGraphAddKernelNode``."""
        return self.drv("cuGraphAddKernelNode", graph, deps, len(deps), params)

    def add_memcpy_node(
        self, graph: Any, deps: list[Any], direction: str, dst: int, src: int, nbytes: int
    ) -> Any:
        """``cuGraphAddMemcpyNode`` of a 1-D copy (``CUDA_MEMCPY3D`` with height/depth 1)."""
        host = self.drv.enum("CUmemorytype.CU_MEMORYTYPE_HOST")
        device = self.drv.enum("CUmemorytype.CU_MEMORYTYPE_DEVICE")
        p = self.drv.new("CUDA_MEMCPY3D")
        if direction == "h2d":
            p.srcMemoryType, p.srcHost = host, src
        else:
            p.srcMemoryType, p.srcDevice = device, src
        if direction == "d2h":
            p.dstMemoryType, p.dstHost = host, dst
        else:
            p.dstMemoryType, p.dstDevice = device, dst
        p.srcPitch = p.dstPitch = nbytes
        p.srcHeight = p.dstHeight = 1
        p.WidthInBytes, p.Height, p.Depth = nbytes, 1, 1
        return self.drv("cuGraphAddMemcpyNode", graph, deps, len(deps), p, self.device.context)

    def add_memset_node(
        self, graph: Any, deps: list[Any], dst: int, value: int, element_size: int, width: int
    ) -> Any:
        """``cuGraphAddMemsetNode`` of ``width`` elements of ``element_size`` bytes."""
        p = self.drv.new("CUDA_MEMSET_NODE_PARAMS")
        p.dst = dst
        p.value = value
        p.elementSize = element_size
        p.width = width
        p.height = 1
        p.pitch = 0
        return self.drv("cuGraphAddMemsetNode", graph, deps, len(deps), p, self.device.context)

    def add_host_node(self, graph: Any, deps: list[Any], fn_ptr: int) -> Any:
        """``cuGraphAddHostNode`` of a C function pointer (kept alive by the caller)."""
        p = self.drv.new("CUDA_HOST_NODE_PARAMS")
        p.fn = fn_ptr
        p.userData = 0
        return self.drv("cuGraphAddHostNode", graph, deps, len(deps), p)

    def add_empty_node(self, graph: Any, deps: list[Any]) -> Any:
        """``cuGraphAddEmptyNode``: a join point."""
        return self.drv("cuGraphAddEmptyNode", graph, deps, len(deps))

    def add_child_graph_node(self, graph: Any, deps: list[Any], child: Any) -> Any:
        """``cuGraphAddChildGraphNode`` (the driver clones ``child``)."""
        return self.drv("cuGraphAddChildGraphNode", graph, deps, len(deps), child)

    def conditional_handle(self, graph: Any) -> Any:
        """``cuGraphConditionalHandleCreate`` with default value 0 and no flags (a kernel
        before the node sets it on every launch)."""
        return self.drv("cuGraphConditionalHandleCreate", graph, self.device.context, 0, 0)

    def add_conditional_node(
        self, graph: Any, deps: list[Any], handle: Any, cond_type: str, size: int
    ) -> tuple[Any, list[Any]]:
        """``cuGraphAddNode`` of a ``CU_GRAPH_NODE_TYPE_CONDITIONAL`` node; returns the node
        and its ``size`` body graphs (owned by the node: filled, never destroyed here)."""
        p = self.drv.new("CUgraphNodeParams")
        p.type = self.drv.enum("CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL")
        c = p.conditional
        c.handle = handle
        c.type = self.drv.enum(f"CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_{cond_type.upper()}")
        c.size = size
        c.ctx = self.device.context
        node = self.drv("cuGraphAddNode", graph, deps, None, len(deps), p)
        return node, list(p.conditional.phGraph_out)[:size]

    def add_mem_alloc_node(self, graph: Any, deps: list[Any], nbytes: int) -> tuple[Any, int]:
        """``cuGraphAddMemAllocNode`` of ``nbytes`` on this device; returns the node and
        the address the driver reserved for it (valid between it and its free node)."""
        p = self.drv.new("CUDA_MEM_ALLOC_NODE_PARAMS")
        p.bytesize = nbytes
        p.poolProps.allocType = self.drv.enum("CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED")
        p.poolProps.location.type = self.drv.enum("CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE")
        p.poolProps.location.id = self.device.ordinal
        node = self.drv("cuGraphAddMemAllocNode", graph, deps, len(deps), p)
        return node, int(p.dptr)

    def add_mem_free_node(self, graph: Any, deps: list[Any], dptr: int) -> Any:
        """``cuGraphAddMemFreeNode`` of an address a memory alloc node returned."""
        return self.drv("cuGraphAddMemFreeNode", graph, deps, len(deps), dptr)

    def instantiate(self, graph: Any) -> Any:
        """``cuGraphInstantiate`` (flags 0)."""
        return self._own("exec", self.drv("cuGraphInstantiate", graph, 0))

    def exec_update(self, graph_exec: Any, graph: Any) -> bool:
        """``cuGraphExecUpdate``: True if ``graph_exec`` now runs ``graph``'s parameters,
        False if the topology differs (then the caller re-instantiates)."""
        try:
            info = self.drv("cuGraphExecUpdate", graph_exec, graph)
        except DriverError as e:
            # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE: not an error for us, a "no".
            if "UPDATE_FAILURE" in str(e) or e.code == 910:
                return False
            raise
        result = getattr(info, "result", 0)
        return int(result) == 0

    def exec_kernel_set_params(self, graph_exec: Any, node: Any, params: Any) -> None:
        """``cuGraphExecKernelNodeSetParams``: patch one kernel of an instantiated graph."""
        self.drv("cuGraphExecKernelNodeSetParams", graph_exec, node, params)

    def kernel_node_set_params(self, node: Any, params: Any) -> None:
        """``cuGraphKernelNodeSetParams``: keep the template graph in step."""
        self.drv("cuGraphKernelNodeSetParams", node, params)

    def upload(self, graph_exec: Any, stream: Any) -> None:
        """``cuGraphUpload``: move the executable to the device before the first launch."""
        self.drv("cuGraphUpload", graph_exec, stream)

    def launch_graph(self, graph_exec: Any, stream: Any) -> None:
        """``cuGraphLaunch``."""
        self.drv("cuGraphLaunch", graph_exec, stream)

    def dot_print(self, graph: Any, path: str) -> None:
        """``cuGraphDebugDotPrint`` (verbose) to ``path``."""
        flags = self.drv.enum("CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE")
        self.drv("cuGraphDebugDotPrint", graph, str(path).encode(), int(flags))
