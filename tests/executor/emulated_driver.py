"""An emulating stand-in for ``cuda.bindings.driver``: it really runs, on the CPU, what the
GPU executors build, so their numbers are checkable in CI without a GPU.

Unlike :class:`tests.executor.gpu_fakes.FakeDriver` (which records calls and hands out
fake handles), :class:`EmulatedDriver` gives every call its CUDA meaning:

- **Memory** is real host memory. ``cuMemAlloc`` returns the 256-aligned address of a
  numpy buffer, poisoned with ``0xFF`` bytes (NaN as float32, as uninitialised device
  memory is "anything"), followed by a guard band; so the pointers the lowering packs
  (arena base + offset) are addresses the emulated kernels dereference. Copies and
  memsets are bounds-checked against the allocation they target, a kernel's pointer
  arguments must point into an allocation, and a kernel that writes into the guard band
  after one fails. Such a failure is reported at the next synchronisation as
  ``CUDA_ERROR_ILLEGAL_ADDRESS`` (700) naming the node. ``cuMemGetInfo`` reports the
  tracked totals, so "no growth over many cycles" is measurable.
- **Kernels**: the executors compile with the real NVRTC; :func:`capture_sources` wraps
  the compile entry point so the CUDA C of every cubin is kept. ``cuModuleLoadData``
  compiles that source as C++ with g++ (CUDA keywords defined away; see
  ``tests/ops/test_codegen.py``) plus, per ``__global__`` function, an ``extern "C"``
  wrapper that takes the ``void** kernelParams`` and unpacks each parameter by the C
  type parsed from the source, then loops over the grid and over each block's threads.
  A kernel that synchronises threads runs its threads as coroutines (``ucontext``)
  switched at ``__syncthreads``, in a seeded random order per phase, so shared-memory
  reductions run with the real block size and a missing barrier can give wrong
  numbers; threads that reach different barriers fail the launch. A packing bug (wrong
  order, float packed as double, a wrong offset) gives wrong numbers, as on a GPU.
  Argument bytes are copied when a launch or a kernel node is made, as the driver does.
- **Graphs** run their nodes in a seeded random topological order of the recorded
  edges, so a missing edge can give wrong numbers. ``cuGraphInstantiate`` snapshots the
  parameters; ``cuGraphExecKernelNodeSetParams`` and ``cuGraphExecUpdate`` change the
  snapshot (only through the nodes of the graph it was instantiated from, and only for
  an identical topology); ``cuGraphDebugDotPrint`` writes a real dot file.
- **Streams** queue work; at a synchronisation a seeded random interleaving runs it,
  honouring each stream's FIFO order and event waits (a wait blocks its stream until
  the work recorded before that record has run), so a missing wait can give wrong
  numbers. Events carry an emulated clock for ``cuEventElapsedTime``.
- **The primary context** is reference counted; releasing it for the last time frees
  everything still allocated in it (as CUDA resets it), and a call that needs a context
  without a current one fails with ``CUDA_ERROR_INVALID_CONTEXT``.

Structs and enums are the real ``cuda.bindings.driver`` ones when that package is
installed (they need no GPU), so a field set with the wrong type fails as it would on a
GPU; otherwise the fakes of ``gpu_fakes`` stand in.

What the emulator cannot check: threads running truly at once (warp-synchronous code,
shuffles, atomics' contention, races between threads of one barrier phase beyond what a
random order of whole phases shows), two operations overlapping in
time (work is interleaved at operation granularity, not run concurrently), reads past
an allocation's end (they only give garbage), device-side numerics (g++ and libm
instead of NVCC's; ``--fmad=false`` vs ``-ffp-contract=off``), real timings, and any
driver behaviour not listed above.

References
----------
NVIDIA, "CUDA Driver API" (13): 6.13 Memory Management, 6.15 Stream Management, 6.16
Event Management, 6.22 Execution Control, 6.24 Graph Management; NVIDIA, "CUDA C++
Programming Guide", "Asynchronous Concurrent Execution" (stream and event semantics,
pageable vs pinned copies). Randomised schedules to expose ordering bugs follow
Burckhardt et al., "A Randomized Scheduler with Probabilistic Guarantees of Finding
Bugs", ASPLOS 2010.
"""

from __future__ import annotations

import bisect
import collections
import ctypes
import hashlib
import os
import random
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from tests.executor import gpu_fakes

try:  # the real structs and enums need no GPU, only the package
    import cuda.bindings.driver as _real
except ImportError:  # pragma: no cover - CI installs cuda-bindings
    _real = None

CXX = shutil.which("g++") or shutil.which("clang++")
ALIGN = 256
GUARD = 256  # bytes after every allocation that a kernel must not write
POISON = 0xFF  # fresh memory reads as NaN (float32) or -1 (ints)
CANARY = 0xA5
TOTAL_BYTES = 141 << 30  # what an H200 reports
MAX_DEFAULT_SMEM = 48 * 1024

# CUresult codes the emulator returns
SUCCESS = 0
INVALID_VALUE = 1
OUT_OF_MEMORY = 2
INVALID_IMAGE = 200
INVALID_CONTEXT = 201
INVALID_HANDLE = 400
NOT_FOUND = 500
NOT_READY = 600
ILLEGAL_ADDRESS = 700
LAUNCH_FAILED = 719
NOT_PERMITTED = 800
GRAPH_EXEC_UPDATE_FAILURE = 910
NOT_SUPPORTED = 801
FILE_NOT_FOUND = 301

_NAMES = {
    SUCCESS: "CUDA_SUCCESS",
    INVALID_VALUE: "CUDA_ERROR_INVALID_VALUE",
    OUT_OF_MEMORY: "CUDA_ERROR_OUT_OF_MEMORY",
    INVALID_IMAGE: "CUDA_ERROR_INVALID_IMAGE",
    INVALID_CONTEXT: "CUDA_ERROR_INVALID_CONTEXT",
    INVALID_HANDLE: "CUDA_ERROR_INVALID_HANDLE",
    NOT_FOUND: "CUDA_ERROR_NOT_FOUND",
    NOT_READY: "CUDA_ERROR_NOT_READY",
    ILLEGAL_ADDRESS: "CUDA_ERROR_ILLEGAL_ADDRESS",
    LAUNCH_FAILED: "CUDA_ERROR_LAUNCH_FAILED",
    NOT_PERMITTED: "CUDA_ERROR_NOT_PERMITTED",
    GRAPH_EXEC_UPDATE_FAILURE: "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
}


class ErrorCode(int):
    """A CUresult whose ``name`` also says what failed: ``check`` puts it in the message.

    >>> e = ErrorCode(700, "memcpy node 'upload' reads past its allocation")
    >>> int(e), e.name
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS: memcpy node 'upload' reads past its allocation")
    """

    name: str

    def __new__(cls, code: int, detail: str = "") -> ErrorCode:
        obj = super().__new__(cls, code)
        base = _NAMES.get(code, f"CUresult {code}")
        obj.name = f"{base}: {detail}" if detail else base
        return obj


class EmulationError(Exception):
    """Raised inside the emulator; becomes an error code returned by the driver call."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


# ---------------------------------------------------------------------------- sources
# sha256(cubin) -> CUDA C source, filled by the compile wrapper of capture_sources.
SOURCES: dict[str, str] = {}
_SOURCES_LOCK = threading.Lock()


def remember_source(cubin: bytes, source: str) -> None:
    """Record that ``cubin`` was compiled from ``source`` (thread-safe)."""
    with _SOURCES_LOCK:
        SOURCES[hashlib.sha256(cubin).hexdigest()] = source


def capture_sources(monkeypatch: Any) -> None:
    """Wrap NVRTC's compile entry point (``oxiwork.executor.nvrtc.compile_cuda``, also as
    imported by ``cuda_graph``) so every cubin's CUDA C is remembered; the real compile
    stays in the path, so the emulated kernels are exactly the ones NVRTC accepted."""
    from oxiwork.executor import cuda_graph, nvrtc

    real = nvrtc.compile_cuda

    def compile_and_remember(source: Any, **kwargs: Any) -> Any:
        module = real(source, **kwargs)
        text = source.source if isinstance(source, nvrtc.ModuleSource) else source
        remember_source(module.cubin, text)
        return module

    monkeypatch.setattr(nvrtc, "compile_cuda", compile_and_remember)
    monkeypatch.setattr(cuda_graph, "compile_cuda", compile_and_remember)


# ---------------------------------------------------------------------------- C++ side
PRELUDE = """#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
struct ox_dim3 { unsigned x, y, z; };
static ox_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
static inline float __int_as_float(unsigned v) { float f; memcpy(&f, &v, 4); return f; }
// libcudadevrt's cudaGraphSetConditional: an emulated handle is the address of its value.
void cudaGraphSetConditional(unsigned long long handle, unsigned int value) {
    *(volatile unsigned int*)(uintptr_t)handle = value;
}
static inline unsigned __float_as_int(float f) { unsigned v; memcpy(&v, &f, 4); return v; }
// cuda_fp16.h / cuda_bf16.h stand-ins (build_library drops their #include lines): the
// storage types and the conversions generated kernels call, bit-exact round to nearest
// even as on the GPU (float16 through GCC's _Float16, IEEE binary16 on x86-64).
struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };
static inline float __half2float(__half h) { _Float16 v; memcpy(&v, &h.x, 2); return (float)v; }
static inline __half __float2half_rn(float f) { _Float16 v = (_Float16)f; __half h; memcpy(&h.x, &v, 2); return h; }
static inline float __bfloat162float(__nv_bfloat16 h) { unsigned v = (unsigned)h.x << 16; float f; memcpy(&f, &v, 4); return f; }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned v; memcpy(&v, &f, 4); __nv_bfloat16 h;
    if ((v & 0x7fffffffu) > 0x7f800000u) { h.x = (uint16_t)((v >> 16) | 0x40u); return h; }  // NaN: quiet
    v += 0x7fffu + ((v >> 16) & 1u); h.x = (uint16_t)(v >> 16); return h;
}

// Threads of a block that synchronise run as coroutines: each runs until its next
// __syncthreads (or its end), in a random order per phase, then the next phase starts.
// That is one of the interleavings a GPU allows, and reading a value another thread
// writes in the same phase depends on the order, as on a GPU.
#define OX_STACK (64 * 1024)
static ucontext_t ox_sched;
static ucontext_t* ox_ctx = 0;
static char* ox_stacks = 0;
static unsigned char ox_state[1024];  // 0 running, 1 at a barrier, 2 done
static unsigned ox_cur = 0;
static int ox_in_block = 0;
static unsigned ox_seed = 1;
static inline unsigned ox_rand() { ox_seed = ox_seed * 1664525u + 1013904223u; return ox_seed >> 8; }
static void ox_barrier() {
    if (!ox_in_block) return;
    ox_state[ox_cur] = 1;
    swapcontext(&ox_ctx[ox_cur], &ox_sched);
}
#define __syncthreads() ox_barrier()
// Returns 1 if some threads ended while others waited at a barrier (divergent barrier).
static int ox_run_block(void (*entry)(), unsigned bx, unsigned by, unsigned bz) {
    unsigned n = bx * by * bz, order[1024];
    if (!ox_ctx) {
        ox_ctx = (ucontext_t*)malloc(sizeof(ucontext_t) * 1024);
        ox_stacks = (char*)malloc((size_t)OX_STACK * 1024);
    }
    for (unsigned t = 0; t < n; ++t) {
        getcontext(&ox_ctx[t]);
        ox_ctx[t].uc_stack.ss_sp = ox_stacks + (size_t)t * OX_STACK;
        ox_ctx[t].uc_stack.ss_size = OX_STACK;
        ox_ctx[t].uc_link = &ox_sched;
        makecontext(&ox_ctx[t], entry, 0);
        ox_state[t] = 0;
        order[t] = t;
    }
    ox_in_block = 1;
    unsigned alive = n;
    int diverged = 0;
    while (alive) {
        for (unsigned i = n - 1; i > 0; --i) {
            unsigned j = ox_rand() % (i + 1), tmp = order[i];
            order[i] = order[j]; order[j] = tmp;
        }
        unsigned finished = 0, waiting = 0;
        for (unsigned i = 0; i < n; ++i) {
            unsigned t = order[i];
            if (ox_state[t] == 2) continue;
            ox_cur = t;
            threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
            ox_state[t] = 0;
            swapcontext(&ox_sched, &ox_ctx[t]);
            if (ox_state[t] == 0) { ox_state[t] = 2; ++finished; --alive; } else { ++waiting; }
        }
        if (finished && waiting) diverged = 1;
    }
    ox_in_block = 0;
    return diverged;
}
"""

_GLOBAL_RE = re.compile(r"__global__\s+void\s+(\w+)\s*\(([^)]*)\)\s*\{")
_DEF_RE = re.compile(r"(\w+)\s*\(([^()]*)\)\s*\{")
_SYNC_RE = re.compile(r"__syncthreads|__shared__")


@dataclass(frozen=True)
class KernelSignature:
    """A ``__global__`` function: its name, C parameter types and names, and whether
    it synchronises threads (then its threads run as coroutines switched at barriers)."""

    name: str
    types: tuple[str, ...]
    names: tuple[str, ...]
    synchronises: bool

    def is_pointer(self, k: int) -> bool:
        return "*" in self.types[k]


def _body(source: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(source)):
        if source[i] == "{":
            depth += 1
        elif source[i] == "}":
            depth -= 1
            if depth == 0:
                return source[open_brace : i + 1]
    return source[open_brace:]


def parse_kernels(source: str) -> list[KernelSignature]:
    """Every ``__global__`` function of ``source`` with its parameters' C types.

    >>> src = 'extern "C" __global__ void f(const float* __restrict__ a, size_t n, float s) {}'
    >>> k, = parse_kernels(src)
    >>> k.name, k.types, k.names, k.synchronises
    ('f', ('const float* __restrict__', 'size_t', 'float'), ('a', 'n', 's'), False)
    """
    bodies = {m.group(1): _body(source, m.end() - 1) for m in _DEF_RE.finditer(source)}
    # functions that synchronise threads, directly or through a function they call
    sync = {name for name, body in bodies.items() if _SYNC_RE.search(body)}
    changed = True
    while changed:
        changed = False
        for name, body in bodies.items():
            if name not in sync and any(re.search(rf"\b{s}\s*\(", body) for s in sync):
                sync.add(name)
                changed = True
    kernels = []
    for m in _GLOBAL_RE.finditer(source):
        types, names = [], []
        for param in filter(None, (p.strip() for p in m.group(2).split(","))):
            pm = re.match(r"^(.*?)(\w+)$", param, re.S)
            if pm is None or not pm.group(1).strip():
                raise ValueError(f"cannot parse parameter {param!r} of {m.group(1)}")
            types.append(" ".join(pm.group(1).split()))
            names.append(pm.group(2))
        kernels.append(KernelSignature(m.group(1), tuple(types), tuple(names), m.group(1) in sync))
    return kernels


def _local_type(ctype: str) -> str:
    # a top-level const (``const int n``) cannot be memcpy'd into; a pointee const can
    if "*" not in ctype and ctype.startswith("const "):
        return ctype[len("const ") :]
    return ctype


def wrapper_source(kernels: list[KernelSignature]) -> str:
    """C++ that launches each kernel from a ``void**`` the way the driver does.

    ``oxemu_<name>(params, grid xyz, block xyz, seed)`` returns 0, or 1 when threads of
    a block reached different ``__syncthreads``; ``oxemu_sizes_<name>`` holds the size of
    each parameter.
    """
    out = []
    for k in kernels:
        local = [_local_type(t) for t in k.types]
        decls = "\n".join(
            f"    memcpy(&oxargs_{k.name}.a{i}, params[{i}], sizeof(oxargs_{k.name}.a{i}));"
            for i in range(len(local))
        )
        fields = " ".join(f"{t} a{i};" for i, t in enumerate(local))
        sizes = ", ".join(f"sizeof({t})" for t in local) or "0"
        call = ", ".join(f"oxargs_{k.name}.a{i}" for i in range(len(local)))
        if k.synchronises:
            body = f"diverged |= ox_run_block(oxthread_{k.name}, bx, by, bz);"
        else:
            body = f"""for (unsigned tz = 0; tz < bz; ++tz)
        for (unsigned ty = 0; ty < by; ++ty)
        for (unsigned tx = 0; tx < bx; ++tx) {{
            threadIdx = {{tx, ty, tz}};
            oxthread_{k.name}();
        }}"""
        out.append(
            f"""
static struct {{ {fields} int unused; }} oxargs_{k.name};
static void oxthread_{k.name}() {{ {k.name}({call}); }}
extern "C" const unsigned oxemu_sizes_{k.name}[] = {{{sizes}}};
extern "C" int oxemu_{k.name}(void** params, unsigned gx, unsigned gy, unsigned gz,
                              unsigned bx, unsigned by, unsigned bz, unsigned seed)
{{
{decls}
    int diverged = 0;
    ox_seed = seed;
    gridDim = {{gx, gy, gz}};
    blockDim = {{bx, by, bz}};
    for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {{
        blockIdx = {{x, y, z}};
        {body}
    }}
    return diverged;
}}
"""
        )
    return "".join(out)


_LIBS: dict[str, ctypes.CDLL] = {}
_LIBS_LOCK = threading.Lock()


def build_library(source: str, directory: Path) -> tuple[ctypes.CDLL, list[KernelSignature]]:
    """Compile ``source`` (CUDA C) plus launch wrappers as a shared library with g++.

    Libraries are cached by the hash of the C++ text in ``directory`` and in memory.
    """
    if CXX is None:
        raise EmulationError(INVALID_IMAGE, "no C++ compiler (g++ or clang++) to emulate kernels")
    kernels = parse_kernels(source)
    # the PRELUDE stands in for CUDA's half-precision headers
    source = re.sub(r"#include <cuda_(?:fp16|bf16)\.h>\n?", "", source)
    text = PRELUDE + source + wrapper_source(kernels)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    with _LIBS_LOCK:
        lib = _LIBS.get(digest)
        if lib is None:
            directory.mkdir(parents=True, exist_ok=True)
            so = directory / f"{digest}.so"
            if not so.is_file():
                cpp = directory / f"{digest}.cpp"
                cpp.write_text(text)
                tmp = directory / f"{digest}.{os.getpid()}.so"
                proc = subprocess.run(
                    [CXX, "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared", "-fPIC",
                     "-w", "-o", str(tmp), str(cpp)],
                    capture_output=True, text=True,
                )  # fmt: skip
                if proc.returncode != 0:
                    raise EmulationError(
                        INVALID_IMAGE, f"g++ could not compile the kernels: {proc.stderr[:2000]}"
                    )
                os.replace(tmp, so)
            lib = _LIBS[digest] = ctypes.CDLL(str(so))
    return lib, kernels


_SCALAR_CTYPES: dict[str, Any] = {
    "size_t": ctypes.c_uint64,
    "float": ctypes.c_float,
    "int": ctypes.c_int32,
    "long long": ctypes.c_int64,
}


def run_kernel(
    source: str,
    function_name: str,
    inputs: list[np.ndarray],
    out_shapes: list[tuple[int, ...]],
    scalar_args: tuple[tuple[str, str, Any], ...],
    directory: Path,
    *,
    grid: int = 3,
    block: int = 4,
    seed: int = 0,
    out_dtypes: list[Any] | None = None,
) -> list[np.ndarray]:
    """Run one kernel of the oxiwork convention (``in0.., out0.., scalars``) on the CPU.

    The same C++ emulation as the driver's launches (:func:`build_library`, threads of a
    synchronising block as coroutines), without a driver around it: for tests that check
    the generated CUDA C of one kernel against the numpy side. Outputs start poisoned
    (``0xFF``, NaN) so an element the kernel never writes shows up. Inputs of a kernel
    dtype other than float32 (float16, bfloat16, int64, int32, bool) are passed as they
    are, anything else as float32; outputs are float32 unless ``out_dtypes`` says.
    """
    lib, kernels = build_library(source, directory)
    sig = next((k for k in kernels if k.name == function_name), None)
    if sig is None:
        raise EmulationError(NOT_FOUND, f"no kernel {function_name!r} in the source")
    kept = ("float16", "bfloat16", "int64", "int32", "bool")
    ins = [
        np.ascontiguousarray(a, dtype=None if np.asarray(a).dtype.name in kept else np.float32)
        for a in inputs
    ]
    outs = [
        np.empty(s, np.float32 if out_dtypes is None else out_dtypes[k])
        for k, s in enumerate(out_shapes)
    ]
    for o in outs:
        o.view(np.uint8).fill(POISON)
    values: list[Any] = [ctypes.c_uint64(a.ctypes.data) for a in (*ins, *outs)]
    values += [_SCALAR_CTYPES[c](v) for c, _, v in scalar_args]
    if len(values) != len(sig.types):
        raise EmulationError(
            INVALID_VALUE,
            f"kernel {function_name} takes {len(sig.types)} arguments, got {len(values)}",
        )
    argv = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    entry = getattr(lib, f"oxemu_{function_name}")
    entry.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7
    entry.restype = ctypes.c_int
    if entry(ctypes.addressof(argv), grid, 1, 1, block, 1, 1, seed):
        raise EmulationError(
            LAUNCH_FAILED, f"{function_name}: threads of a block reached different __syncthreads"
        )
    return outs


# ---------------------------------------------------------------------------- records
@dataclass
class Allocation:
    base: int
    nbytes: int
    kind: str  # "device" or "host"
    raw: np.ndarray = field(repr=False)

    @property
    def end(self) -> int:
        return self.base + self.nbytes

    def guard(self) -> np.ndarray:
        start = self.base - int(self.raw.ctypes.data)
        return self.raw[start + self.nbytes : start + self.nbytes + GUARD]


@dataclass
class Function:
    handle: int
    module: int
    signature: KernelSignature
    entry: Any
    sizes: tuple[int, ...]
    max_dynamic_smem: int = MAX_DEFAULT_SMEM


@dataclass
class Launch:
    """A kernel launch with its argument bytes copied (as the driver copies them)."""

    function: Function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int
    args: tuple[bytes, ...]


@dataclass
class GraphNode:
    handle: int
    graph: int
    index: int  # creation order within its graph
    kind: str
    params: Any
    deps: tuple[int, ...]
    label: str


@dataclass
class Graph:
    handle: int
    nodes: list[int] = field(default_factory=list)
    # device memory reserved by its memory alloc nodes, and the body graphs of its
    # conditional nodes: both released with the graph
    memory: list[int] = field(default_factory=list)
    bodies: list[int] = field(default_factory=list)


@dataclass
class Exec:
    handle: int
    source_graph: int
    node_ids: list[int]  # the source graph's node handles, in creation order
    kinds: list[str]
    params: dict[int, Any]
    deps: dict[int, tuple[int, ...]]
    labels: dict[int, str]


@dataclass
class Event:
    handle: int
    timing: bool
    last_token: int | None = None
    time_ms: float | None = None


@dataclass
class Item:
    """One unit of queued work on a stream."""

    label: str
    run: Any = None  # callable() doing the work
    wait_token: int | None = None  # a stream wait: blocked until this record has run
    done: bool = False


class EmulatedDriver:
    """A ``cuda.bindings.driver`` stand-in that executes what it is given; see the module
    docstring. ``seed`` drives the random schedules; ``so_dir`` is where compiled kernel
    libraries are cached. ``fail`` maps a call name to an error code (or exception) to
    return (raise) instead, ``fail_after`` to how many calls of that name succeed first.

    >>> emu = EmulatedDriver(seed=0)
    >>> err, ptr = emu.cuMemAlloc(1024)  # before cuInit: no context
    >>> int(err)
    201
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        so_dir: str | os.PathLike[str] | None = None,
        cc: tuple[int, int] = (9, 0),
        devices: int = 1,
        fail: dict[str, Any] | None = None,
        fail_after: dict[str, int] | None = None,
        total_bytes: int = TOTAL_BYTES,
    ) -> None:
        import tempfile

        self.rng = random.Random(seed)
        self.so_dir = Path(so_dir) if so_dir else Path(tempfile.gettempdir()) / "oxiwork-emu"
        self.cc = cc
        self.devices = devices
        self.fail = dict(fail or {})
        self.fail_after = dict(fail_after or {})
        self.total_bytes = total_bytes
        self.calls: collections.Counter[str] = collections.Counter()
        self._ids = iter(range(0x1000, 1 << 40, 0x10))
        self.initialised = False
        self.context_refs = 0
        self.context_handle = next(self._ids)
        self.current_context: int | None = None
        self.allocations: dict[int, Allocation] = {}
        self._bases: list[int] = []
        self.device_bytes = 0
        self.host_bytes = 0
        self.modules: dict[int, tuple[Any, dict[str, KernelSignature]]] = {}
        self.functions: dict[int, Function] = {}
        self.streams: dict[int, collections.deque[Item]] = {}
        self.events: dict[int, Event] = {}
        self.graphs: dict[int, Graph] = {}
        self.nodes: dict[int, GraphNode] = {}
        self.execs: dict[int, Exec] = {}
        self._done_tokens: set[int] = set()
        self._tokens = iter(range(1, 1 << 62))
        self.clock_ms = 0.0
        self.pending_error: ErrorCode | None = None
        self.errors: list[str] = []  # every asynchronous error, in full
        self.executed: list[str] = []  # labels of executed work (for tests), bounded
        self.in_callback = False
        self.context_resets = 0
        # conditional handles: 4-byte cells whose address is the handle; link states;
        # arrays the driver "owns" (phGraph_out of conditional nodes)
        self.cond_cells: dict[int, np.ndarray] = {}
        self.links: dict[int, dict[str, Any]] = {}
        self._keep: list[Any] = []

    # ------------------------------------------------------------------ plumbing
    def __getattr__(self, name: str) -> Any:
        # enums and structs: the real ones when installed, else the fakes
        if name.startswith("cu") or name.startswith("_"):
            raise AttributeError(name)
        if _real is not None and hasattr(_real, name):
            return getattr(_real, name)
        fake = getattr(gpu_fakes, name, None)
        if fake is not None:
            return fake
        if name.startswith("CUDA_"):
            return lambda: SimpleNamespace(_struct=name)
        raise AttributeError(name)

    def _handle(self, kind: str, number: int) -> Any:
        cls = {
            "device": "CUdevice", "context": "CUcontext", "module": "CUmodule",
            "function": "CUfunction", "stream": "CUstream", "event": "CUevent",
            "graph": "CUgraph", "node": "CUgraphNode", "exec": "CUgraphExec",
            "device_memory": "CUdeviceptr",
        }[kind]  # fmt: skip
        if _real is not None:
            return getattr(_real, cls)(number)
        return number if kind == "device_memory" else _IntHandle(kind, number)

    def _call(self, name: str, fn: Any, *args: Any, needs_context: bool = True) -> tuple:
        self.calls[name] += 1
        if self.in_callback:
            return (ErrorCode(NOT_PERMITTED, f"{name} called from a host callback"),)
        failure = self.fail.get(name)
        if failure is not None and self.calls[name] > self.fail_after.get(name, 0):
            if isinstance(failure, BaseException):
                raise failure
            return (ErrorCode(int(failure), f"injected failure of {name}"), None)
        if needs_context and (self.context_refs == 0 or self.current_context is None):
            return (ErrorCode(INVALID_CONTEXT, f"{name} without a current context"), None)
        try:
            values = fn(*args)
        except EmulationError as e:
            return (ErrorCode(e.code, f"{name}: {e.detail}"), None)
        return (self._success(), *values)

    def _success(self) -> Any:
        return _real.CUresult.CUDA_SUCCESS if _real is not None else gpu_fakes.CUresult(0)

    # ------------------------------------------------------------------ device, context
    def cuInit(self, flags: int) -> tuple:
        def run() -> tuple:
            self.initialised = True
            return ()

        return self._call("cuInit", run, needs_context=False)

    def cuDeviceGetCount(self) -> tuple:
        return self._call("cuDeviceGetCount", lambda: (self._device_count(),), needs_context=False)

    def _device_count(self) -> int:
        if not self.initialised:
            raise EmulationError(3, "cuInit was not called")
        return self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple:
        def run() -> tuple:
            if not 0 <= int(ordinal) < self._device_count():
                raise EmulationError(101, f"no device {ordinal}")
            return (self._handle("device", int(ordinal)),)

        return self._call("cuDeviceGet", run, needs_context=False)

    def cuDeviceGetAttribute(self, attr: Any, dev: Any) -> tuple:
        major = "MAJOR" in getattr(attr, "name", str(attr))
        return self._call(
            "cuDeviceGetAttribute", lambda: (self.cc[0] if major else self.cc[1],),
            needs_context=False,
        )  # fmt: skip

    def cuDeviceGetName(self, length: int, dev: Any) -> tuple:
        name = b"Emulated GPU (CPU)".ljust(int(length), b"\x00")
        return self._call("cuDeviceGetName", lambda: (name,), needs_context=False)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple:
        def run() -> tuple:
            self.context_refs += 1
            return (self._handle("context", self.context_handle),)

        return self._call("cuDevicePrimaryCtxRetain", run, needs_context=False)

    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple:
        def run() -> tuple:
            if self.context_refs == 0:
                raise EmulationError(INVALID_CONTEXT, "the primary context is not retained")
            self.context_refs -= 1
            if self.context_refs == 0:
                self._reset_context()
            return ()

        return self._call("cuDevicePrimaryCtxRelease", run, needs_context=False)

    def _reset_context(self) -> None:
        """The last release destroys the primary context and everything in it."""
        self._drain(lambda: False, all_work=True, report=False)
        if self.live_counts():
            self.context_resets += 1
        for a in list(self.allocations.values()):
            self._free(a.base, a.kind)
        for registry in (
            self.modules, self.functions, self.streams, self.events, self.graphs,
            self.nodes, self.execs,
        ):  # fmt: skip
            registry.clear()
        self.current_context = None
        self.pending_error = None

    def cuCtxSetCurrent(self, ctx: Any) -> tuple:
        def run() -> tuple:
            if int(ctx) != self.context_handle or self.context_refs == 0:
                raise EmulationError(INVALID_CONTEXT, f"context {int(ctx):#x} is not alive")
            self.current_context = int(ctx)
            return ()

        return self._call("cuCtxSetCurrent", run, needs_context=False)

    def cuCtxSynchronize(self) -> tuple:
        return self._sync_call("cuCtxSynchronize", None)

    def cuGetErrorName(self, err: Any) -> tuple:
        return (self._success(), _NAMES.get(int(err), "CUDA_ERROR_UNKNOWN").encode())

    # ------------------------------------------------------------------ memory
    def _allocate(self, nbytes: int, kind: str) -> int:
        nbytes = int(nbytes)
        if nbytes <= 0:
            raise EmulationError(INVALID_VALUE, f"allocation of {nbytes} bytes")
        if kind == "device" and self.device_bytes + nbytes > self.total_bytes:
            raise EmulationError(OUT_OF_MEMORY, f"{nbytes} bytes do not fit")
        raw = np.empty(nbytes + ALIGN + GUARD, dtype=np.uint8)
        start = -int(raw.ctypes.data) % ALIGN
        raw[:] = CANARY
        raw[start : start + nbytes] = POISON
        a = Allocation(int(raw.ctypes.data) + start, nbytes, kind, raw)
        self.allocations[a.base] = a
        bisect.insort(self._bases, a.base)
        if kind == "device":
            self.device_bytes += nbytes
        else:
            self.host_bytes += nbytes
        return a.base

    def _free(self, ptr: int, kind: str) -> None:
        a = self.allocations.get(int(ptr))
        if a is None or a.kind != kind:
            raise EmulationError(INVALID_VALUE, f"{int(ptr):#x} is not a live {kind} allocation")
        del self.allocations[a.base]
        self._bases.remove(a.base)
        if kind == "device":
            self.device_bytes -= a.nbytes
        else:
            self.host_bytes -= a.nbytes

    def find(self, ptr: int) -> Allocation | None:
        """The live allocation containing address ``ptr``, if any."""
        i = bisect.bisect_right(self._bases, int(ptr)) - 1
        if i < 0:
            return None
        a = self.allocations[self._bases[i]]
        return a if a.base <= int(ptr) < a.end else None

    def _check_range(self, ptr: int, nbytes: int, memtype: str, what: str) -> None:
        """``[ptr, ptr + nbytes)`` must lie in one allocation of the right type; host
        memory not allocated by the driver (pageable) cannot be checked."""
        ptr = int(ptr)
        a = self.find(ptr)
        if memtype == "device":
            if a is None or a.kind != "device":
                kind = "pinned host memory" if a is not None else "no allocation"
                raise EmulationError(
                    ILLEGAL_ADDRESS, f"{what}: device address {ptr:#x} is in {kind}"
                )
        elif a is not None and a.kind == "device":
            raise EmulationError(ILLEGAL_ADDRESS, f"{what}: host address {ptr:#x} is device memory")
        if a is not None and ptr + int(nbytes) > a.end:
            raise EmulationError(
                ILLEGAL_ADDRESS,
                f"{what}: {nbytes} bytes at offset {ptr - a.base} overrun the "
                f"{a.nbytes}-byte allocation at {a.base:#x}",
            )

    def _memtype(self, ptr: int) -> str:
        a = self.find(ptr)
        return "device" if a is not None and a.kind == "device" else "host"

    def cuMemAlloc(self, nbytes: int) -> tuple:
        return self._call(
            "cuMemAlloc", lambda: (self._handle("device_memory", self._allocate(nbytes, "device")),)
        )

    def cuMemAllocHost(self, nbytes: int) -> tuple:
        return self._call("cuMemAllocHost", lambda: (self._allocate(nbytes, "host"),))

    def cuMemFree(self, ptr: Any) -> tuple:
        return self._call("cuMemFree", lambda: self._free(int(ptr), "device") or ())

    def cuMemFreeHost(self, ptr: Any) -> tuple:
        return self._call("cuMemFreeHost", lambda: self._free(int(ptr), "host") or ())

    def cuMemGetInfo(self) -> tuple:
        return self._call(
            "cuMemGetInfo", lambda: (self.total_bytes - self.device_bytes, self.total_bytes)
        )

    def _copy(self, dst: int, src: int, nbytes: int, dst_type: str, src_type: str, what: str):
        self._check_range(src, nbytes, src_type, f"{what} (source)")
        self._check_range(dst, nbytes, dst_type, f"{what} (destination)")
        if nbytes:
            ctypes.memmove(int(dst), int(src), int(nbytes))

    def cuMemcpyDtoH(self, dst: Any, src: Any, nbytes: int) -> tuple:
        # the legacy default stream: no ordering with non-blocking streams' work
        return self._call(
            "cuMemcpyDtoH", lambda: self._copy(int(dst), int(src), nbytes, "host", "device",
                                               "cuMemcpyDtoH") or ()
        )  # fmt: skip

    def cuMemcpyDtoD(self, dst: Any, src: Any, nbytes: int) -> tuple:
        return self._call(
            "cuMemcpyDtoD", lambda: self._copy(int(dst), int(src), nbytes, "device", "device",
                                               "cuMemcpyDtoD") or ()
        )  # fmt: skip

    # ------------------------------------------------------------------ modules
    def cuModuleLoadData(self, image: Any) -> tuple:
        def run() -> tuple:
            blob = bytes(image)
            source = SOURCES.get(hashlib.sha256(blob).hexdigest())
            if source is None:
                raise EmulationError(
                    INVALID_IMAGE,
                    "no CUDA C is known for this cubin; compile through "
                    "emulated_driver.capture_sources",
                )
            lib, kernels = build_library(source, self.so_dir)
            h = next(self._ids)
            self.modules[h] = (lib, {k.name: k for k in kernels})
            return (self._handle("module", h),)

        return self._call("cuModuleLoadData", run)

    def cuModuleUnload(self, module: Any) -> tuple:
        def run() -> tuple:
            if self.modules.pop(int(module), None) is None:
                raise EmulationError(INVALID_HANDLE, f"module {int(module):#x} is not loaded")
            for h in [h for h, f in self.functions.items() if f.module == int(module)]:
                del self.functions[h]
            return ()

        return self._call("cuModuleUnload", run)

    def cuModuleGetFunction(self, module: Any, name: Any) -> tuple:
        def run() -> tuple:
            entry = self.modules.get(int(module))
            if entry is None:
                raise EmulationError(INVALID_HANDLE, f"module {int(module):#x} is not loaded")
            lib, kernels = entry
            text = name.decode() if isinstance(name, bytes) else str(name)
            sig = kernels.get(text)
            if sig is None:
                raise EmulationError(NOT_FOUND, f"no kernel {text!r} in the module")
            n = len(sig.types)
            sizes = tuple((ctypes.c_uint * max(1, n)).in_dll(lib, f"oxemu_sizes_{text}")[:n])
            entry_fn = getattr(lib, f"oxemu_{text}")
            entry_fn.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7
            entry_fn.restype = ctypes.c_int
            h = next(self._ids)
            self.functions[h] = Function(h, int(module), sig, entry_fn, sizes)
            return (self._handle("function", h),)

        return self._call("cuModuleGetFunction", run)

    def cuFuncSetAttribute(self, fn: Any, attr: Any, value: int) -> tuple:
        def run() -> tuple:
            f = self._function(fn)
            if "MAX_DYNAMIC_SHARED" in getattr(attr, "name", str(attr)):
                if int(value) > 227 * 1024:
                    raise EmulationError(INVALID_VALUE, f"{value} bytes of shared memory")
                f.max_dynamic_smem = int(value)
            return ()

        return self._call("cuFuncSetAttribute", run)

    def _function(self, fn: Any) -> Function:
        f = self.functions.get(int(fn))
        if f is None:
            raise EmulationError(INVALID_HANDLE, f"function {int(fn):#x} is not loaded")
        return f

    def _launch_record(
        self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int,
        kernel_params: Any, extra: Any,
    ) -> Launch:  # fmt: skip
        f = self._function(fn)
        grid = tuple(int(g) for g in grid)  # type: ignore[assignment]
        block = tuple(int(b) for b in block)  # type: ignore[assignment]
        name = f.signature.name
        if min(grid) < 1 or grid[0] > 2**31 - 1 or max(grid[1:]) > 65535:
            raise EmulationError(INVALID_VALUE, f"kernel {name}: grid {grid}")
        if min(block) < 1 or block[2] > 64 or block[0] * block[1] * block[2] > 1024:
            raise EmulationError(INVALID_VALUE, f"kernel {name}: block {block}")
        if int(smem) > f.max_dynamic_smem:
            raise EmulationError(
                INVALID_VALUE,
                f"kernel {name}: {smem} bytes of dynamic shared memory without the opt-in",
            )
        if extra not in (None, 0):
            raise EmulationError(INVALID_VALUE, f"kernel {name}: 'extra' is not emulated")
        n = len(f.sizes)
        kp = int(kernel_params or 0)
        if n and not kp:
            raise EmulationError(INVALID_VALUE, f"kernel {name} takes {n} arguments, got none")
        args = []
        for k, size in enumerate(f.sizes):
            ptr = ctypes.c_void_p.from_address(kp + 8 * k).value
            if not ptr:
                raise EmulationError(INVALID_VALUE, f"kernel {name}: argument {k} is NULL")
            args.append(ctypes.string_at(ptr, size))
        return Launch(f, grid, block, int(smem), tuple(args))  # type: ignore[arg-type]

    def _run_kernel(self, launch: Launch, what: str) -> None:
        f, sig = launch.function, launch.function.signature
        if f.handle not in self.functions:
            raise EmulationError(INVALID_HANDLE, f"{what}: its module was unloaded")
        touched = []
        for k, blob in enumerate(launch.args):
            if sig.is_pointer(k):
                ptr = int.from_bytes(blob[:8], "little")
                a = self.find(ptr)
                if ptr and a is None:
                    raise EmulationError(
                        ILLEGAL_ADDRESS,
                        f"{what}: pointer argument {sig.names[k]} = {ptr:#x} is in no allocation",
                    )
                if a is not None:
                    touched.append((sig.names[k], a))
        bufs = [ctypes.create_string_buffer(blob, max(8, len(blob))) for blob in launch.args]
        argv = (ctypes.c_void_p * max(1, len(bufs)))(*[ctypes.addressof(b) for b in bufs])
        seed = self.rng.getrandbits(32)
        if f.entry(ctypes.addressof(argv), *launch.grid, *launch.block, seed):
            raise EmulationError(
                LAUNCH_FAILED,
                f"{what}: threads of a block reached different __syncthreads (some ended "
                "while others waited)",
            )
        for name, a in touched:
            if np.any(a.guard() != CANARY):
                raise EmulationError(
                    ILLEGAL_ADDRESS,
                    f"{what}: wrote past the end of the {a.nbytes}-byte allocation that "
                    f"argument {name} points into",
                )

    # ------------------------------------------------------------------ streams, events
    def cuStreamCreate(self, flags: int) -> tuple:
        def run() -> tuple:
            h = next(self._ids)
            self.streams[h] = collections.deque()
            return (self._handle("stream", h),)

        return self._call("cuStreamCreate", run)

    def cuStreamDestroy(self, stream: Any) -> tuple:
        def run() -> tuple:
            q = self._queue(stream)
            if q:
                # CUDA lets queued work finish before the stream's resources go
                self._drain(lambda: not q, all_work=False, report=False)
            del self.streams[int(stream)]
            return ()

        return self._call("cuStreamDestroy", run)

    def _queue(self, stream: Any) -> collections.deque[Item]:
        q = self.streams.get(int(stream or 0))
        if q is None:
            raise EmulationError(INVALID_HANDLE, f"stream {int(stream or 0):#x} does not exist")
        return q

    def _enqueue(self, stream: Any, item: Item) -> None:
        self._queue(stream).append(item)

    def cuEventCreate(self, flags: int) -> tuple:
        def run() -> tuple:
            h = next(self._ids)
            self.events[h] = Event(h, timing=not (int(flags) & 2))
            return (self._handle("event", h),)

        return self._call("cuEventCreate", run)

    def cuEventDestroy(self, event: Any) -> tuple:
        def run() -> tuple:
            if self.events.pop(int(event), None) is None:
                raise EmulationError(INVALID_HANDLE, f"event {int(event):#x} does not exist")
            return ()

        return self._call("cuEventDestroy", run)

    def _event(self, event: Any) -> Event:
        ev = self.events.get(int(event))
        if ev is None:
            raise EmulationError(INVALID_HANDLE, f"event {int(event):#x} does not exist")
        return ev

    def cuEventRecord(self, event: Any, stream: Any) -> tuple:
        def run() -> tuple:
            ev = self._event(event)
            q = self._queue(stream)
            token = next(self._tokens)
            ev.last_token = token
            ev.time_ms = None

            def complete() -> None:
                self._done_tokens.add(token)
                if ev.last_token == token:
                    ev.time_ms = self.clock_ms

            q.append(Item(f"record event {ev.handle:#x}", complete))
            return ()

        return self._call("cuEventRecord", run)

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> tuple:
        def run() -> tuple:
            ev = self._event(event)
            q = self._queue(stream)
            if ev.last_token is not None:  # waiting on a never-recorded event is a no-op
                q.append(Item(f"wait event {ev.handle:#x}", wait_token=ev.last_token))
            return ()

        return self._call("cuStreamWaitEvent", run)

    def cuEventElapsedTime(self, start: Any, stop: Any) -> tuple:
        def run() -> tuple:
            a, b = self._event(start), self._event(stop)
            for ev in (a, b):
                if not ev.timing:
                    raise EmulationError(INVALID_HANDLE, "event created without timing")
                if ev.last_token is None:
                    raise EmulationError(INVALID_HANDLE, "event was never recorded")
                if ev.time_ms is None:
                    raise EmulationError(NOT_READY, "event has not completed")
            return (float(b.time_ms - a.time_ms),)  # type: ignore[operator]

        return self._call("cuEventElapsedTime", run)

    def cuStreamSynchronize(self, stream: Any) -> tuple:
        return self._sync_call("cuStreamSynchronize", stream)

    def _sync_call(self, name: str, stream: Any) -> tuple:
        def run() -> tuple:
            if stream is None:
                self._drain(lambda: False, all_work=True)
            else:
                q = self._queue(stream)
                self._drain(lambda: not q, all_work=False)
            return ()

        return self._call(name, run)

    def _drain(self, done: Any, *, all_work: bool, report: bool = True) -> None:
        """Run queued work in a random order that honours stream order and event waits
        until ``done()`` (or everything, with ``all_work``); raise a pending error."""
        while not done():
            ready = []
            for q in self.streams.values():
                if q and (q[0].wait_token is None or q[0].wait_token in self._done_tokens):
                    ready.append(q)
            if not ready:
                if any(self.streams.values()):
                    raise EmulationError(
                        ILLEGAL_ADDRESS, "deadlock: every stream waits for an event never run"
                    )
                break
            q = self.rng.choice(ready)
            item = q.popleft()
            if item.run is not None and self.pending_error is None:
                try:
                    item.run()
                except EmulationError as e:
                    self.errors.append(e.detail)
                    self.pending_error = ErrorCode(e.code, e.detail)
            item.done = True
            self.clock_ms += 0.001
            if len(self.executed) < 100_000:
                self.executed.append(item.label)
        if self.pending_error is not None and report:
            err, self.pending_error = self.pending_error, None
            raise EmulationError(int(err), err.name.split(": ", 1)[-1])

    def _async(self, name: str, stream: Any, label: str, work: Any, check: Any = None) -> tuple:
        def run() -> tuple:
            if check is not None:
                check()
            self._enqueue(stream, Item(label, work))
            return ()

        return self._call(name, run)

    def cuLaunchKernel(
        self, fn: Any, gx: int, gy: int, gz: int, bx: int, by: int, bz: int, smem: int,
        stream: Any, kernel_params: Any, extra: Any,
    ) -> tuple:  # fmt: skip
        def run() -> tuple:
            launch = self._launch_record(fn, (gx, gy, gz), (bx, by, bz), smem, kernel_params,
                                         extra)  # fmt: skip
            label = f"kernel {launch.function.signature.name}"
            self._enqueue(stream, Item(label, lambda: self._run_kernel(launch, label)))
            return ()

        return self._call("cuLaunchKernel", run)

    def _copy_async(
        self, name: str, dst: Any, src: Any, nbytes: int, stream: Any, dst_type: str,
        src_type: str,
    ) -> tuple:  # fmt: skip
        dst, src, nbytes = int(dst), int(src), int(nbytes)
        label = f"{name} {nbytes} bytes"
        source_is_pageable = src_type == "host" and self.find(src) is None
        dest_is_pageable = dst_type == "host" and self.find(dst) is None

        def run() -> tuple:
            q = self._queue(stream)
            if source_is_pageable:
                # pageable memory is staged when the call is made (CUDA Programming
                # Guide, "Asynchronous Concurrent Execution")
                snapshot = ctypes.string_at(src, nbytes)
                keep = ctypes.create_string_buffer(snapshot, max(1, nbytes))
                work = lambda: self._copy(  # noqa: E731
                    dst, ctypes.addressof(keep), nbytes, dst_type, "host", label
                )
            else:
                work = lambda: self._copy(dst, src, nbytes, dst_type, src_type, label)  # noqa: E731
            item = Item(label, work)
            q.append(item)
            if dest_is_pageable:  # a copy into pageable memory returns when it is done
                self._drain(lambda: item.done, all_work=False)
            return ()

        return self._call(name, run)

    def cuMemcpyHtoDAsync(self, dst: Any, src: Any, nbytes: int, stream: Any) -> tuple:
        return self._copy_async("cuMemcpyHtoDAsync", dst, src, nbytes, stream, "device", "host")

    def cuMemcpyDtoHAsync(self, dst: Any, src: Any, nbytes: int, stream: Any) -> tuple:
        return self._copy_async("cuMemcpyDtoHAsync", dst, src, nbytes, stream, "host", "device")

    def cuMemcpyDtoDAsync(self, dst: Any, src: Any, nbytes: int, stream: Any) -> tuple:
        return self._copy_async("cuMemcpyDtoDAsync", dst, src, nbytes, stream, "device", "device")

    def _memset(
        self, dst: int, value: int, size: int, width: int, height: int, pitch: int, what: str
    ) -> None:
        if size not in (1, 2, 4):
            raise EmulationError(INVALID_VALUE, f"{what}: element size {size}")
        if dst % size:
            raise EmulationError(INVALID_VALUE, f"{what}: {dst:#x} is not {size}-byte aligned")
        if height > 1 and pitch < width * size:
            raise EmulationError(INVALID_VALUE, f"{what}: pitch {pitch} < row {width * size}")
        dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[size]
        for row in range(height):
            start = dst + row * pitch
            self._check_range(start, width * size, "device", what)
            if width:
                view = np.ctypeslib.as_array((ctypes.c_ubyte * (width * size)).from_address(start))
                view.view(dtype)[:] = value

    def _memset_async(self, name: str, size: int, dst: Any, value: int, n: int, stream: Any):
        limit = 1 << (8 * size)
        if not 0 <= int(value) < limit:  # the real binding's C argument overflows
            raise OverflowError(f"{name}: value {value} does not fit {8 * size} bits")
        dst, value, n = int(dst), int(value), int(n)
        label = f"{name} {n} x {size} bytes"
        return self._async(
            name, stream, label, lambda: self._memset(dst, value, size, n, 1, 0, label)
        )

    def cuMemsetD8Async(self, dst: Any, value: int, n: int, stream: Any) -> tuple:
        return self._memset_async("cuMemsetD8Async", 1, dst, value, n, stream)

    def cuMemsetD16Async(self, dst: Any, value: int, n: int, stream: Any) -> tuple:
        return self._memset_async("cuMemsetD16Async", 2, dst, value, n, stream)

    def cuMemsetD32Async(self, dst: Any, value: int, n: int, stream: Any) -> tuple:
        return self._memset_async("cuMemsetD32Async", 4, dst, value, n, stream)

    def _host_call(self, fn: int, user_data: Any) -> None:
        self.in_callback = True
        try:
            _HOST_FN(int(fn))(int(user_data or 0) or None)
        finally:
            self.in_callback = False

    def cuLaunchHostFunc(self, stream: Any, fn: Any, user_data: Any) -> tuple:
        fn_ptr = int(fn or 0)

        def check() -> None:
            if not fn_ptr:
                raise EmulationError(INVALID_VALUE, "cuLaunchHostFunc of a NULL function")

        return self._async(
            "cuLaunchHostFunc", stream, "host function",
            lambda: self._host_call(fn_ptr, user_data), check,
        )  # fmt: skip

    # ------------------------------------------------------------------ graphs
    def cuGraphCreate(self, flags: int) -> tuple:
        def run() -> tuple:
            h = next(self._ids)
            self.graphs[h] = Graph(h)
            return (self._handle("graph", h),)

        return self._call("cuGraphCreate", run)

    def cuGraphDestroy(self, graph: Any) -> tuple:
        def run() -> tuple:
            g = self.graphs.pop(int(graph), None)
            if g is None:
                raise EmulationError(INVALID_HANDLE, f"graph {int(graph):#x} does not exist")
            self._release_graph(g)
            return ()

        return self._call("cuGraphDestroy", run)

    def _release_graph(self, g: Graph) -> None:
        for n in g.nodes:
            self.nodes.pop(n, None)
        for ptr in g.memory:
            self._free(ptr, "device")
        for body in g.bodies:  # owned by the conditional node: gone with its graph
            self._release_graph(self.graphs.pop(body))

    def _graph(self, graph: Any) -> Graph:
        g = self.graphs.get(int(graph))
        if g is None:
            raise EmulationError(INVALID_HANDLE, f"graph {int(graph):#x} does not exist")
        return g

    def _add_node(self, name: str, graph: Any, deps: Any, ndeps: int, kind: str,
                  make: Any) -> tuple:  # fmt: skip
        def run() -> tuple:
            g = self._graph(graph)
            dep_list = list(deps or [])
            if int(ndeps) != len(dep_list):
                raise EmulationError(
                    INVALID_VALUE, f"numDependencies {ndeps} but {len(dep_list)} dependencies"
                )
            dep_ids = []
            for d in dep_list:
                node = self.nodes.get(int(d))
                if node is None or node.graph != g.handle:
                    raise EmulationError(
                        INVALID_VALUE, f"dependency {int(d):#x} is not a node of this graph"
                    )
                dep_ids.append(node.handle)
            params, label = make()
            label = f"node {len(g.nodes)} ({label})"
            h = next(self._ids)
            self.nodes[h] = GraphNode(h, g.handle, len(g.nodes), kind, params, tuple(dep_ids),
                                      label)  # fmt: skip
            g.nodes.append(h)
            return (self._handle("node", h),)

        return self._call(name, run)

    def _kernel_params(self, p: Any) -> tuple[Launch, str]:
        launch = self._launch_record(
            p.func, (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY,
            p.blockDimZ), p.sharedMemBytes, p.kernelParams, getattr(p, "extra", None),
        )  # fmt: skip
        return launch, f"kernel node {launch.function.signature.name}"

    def cuGraphAddKernelNode(self, graph: Any, deps: Any, ndeps: int, params: Any) -> tuple:
        return self._add_node(
            "cuGraphAddKernelNode",
            graph,
            deps,
            ndeps,
            "kernel",
            lambda: self._kernel_params(params),
        )

    def _memcpy_params(self, p: Any) -> tuple[dict[str, Any], str]:
        def side(prefix: str) -> tuple[str, int]:
            memtype = int(getattr(p, f"{prefix}MemoryType"))
            if memtype == 1:
                return "host", int(getattr(p, f"{prefix}Host") or 0)
            if memtype == 2:
                return "device", int(getattr(p, f"{prefix}Device") or 0)
            raise EmulationError(INVALID_VALUE, f"{prefix}MemoryType {memtype} is not emulated")

        src_type, src = side("src")
        dst_type, dst = side("dst")
        width, height, depth = int(p.WidthInBytes), int(p.Height), int(p.Depth)
        d = dict(
            src_type=src_type, src=src, dst_type=dst_type, dst=dst, width=width, height=height,
            depth=depth,
        )  # fmt: skip
        for prefix in ("src", "dst"):
            pitch = int(getattr(p, f"{prefix}Pitch", 0) or 0)
            rows = int(getattr(p, f"{prefix}Height", 0) or 0)
            if pitch < width or (depth > 1 and rows < height):
                raise EmulationError(
                    INVALID_VALUE, f"{prefix}Pitch {pitch} / {prefix}Height {rows} do not fit "
                    f"a {width} x {height} x {depth} copy",
                )  # fmt: skip
            d[f"{prefix}_pitch"], d[f"{prefix}_rows"] = pitch, rows
            d[f"{prefix}_x"] = int(getattr(p, f"{prefix}XInBytes", 0) or 0)
            d[f"{prefix}_y"] = int(getattr(p, f"{prefix}Y", 0) or 0)
            d[f"{prefix}_z"] = int(getattr(p, f"{prefix}Z", 0) or 0)
        for memtype, ptr, what in ((src_type, src, "source"), (dst_type, dst, "destination")):
            a = self.find(ptr)
            if memtype == "device" and (a is None or a.kind != "device"):
                raise EmulationError(
                    INVALID_VALUE, f"memcpy node {what} {ptr:#x} is not device memory"
                )
            if memtype == "host" and (a is None or a.kind != "host"):
                # a graph replays the copy long after it was built: only pinned memory
                # has a lifetime the driver can rely on
                raise EmulationError(
                    INVALID_VALUE, f"memcpy node {what} {ptr:#x} is not pinned host memory"
                )
        return d, f"memcpy node {src_type}->{dst_type} {width * height * depth} bytes"

    def _run_memcpy(self, d: dict[str, Any], what: str) -> None:
        for z in range(d["depth"]):
            for y in range(d["height"]):
                src = (
                    d["src"]
                    + d["src_x"]
                    + (d["src_y"] + y + (d["src_z"] + z) * d["src_rows"]) * d["src_pitch"]
                )
                dst = (
                    d["dst"]
                    + d["dst_x"]
                    + (d["dst_y"] + y + (d["dst_z"] + z) * d["dst_rows"]) * d["dst_pitch"]
                )
                self._copy(dst, src, d["width"], d["dst_type"], d["src_type"], what)

    def cuGraphAddMemcpyNode(
        self, graph: Any, deps: Any, ndeps: int, params: Any, ctx: Any
    ) -> tuple:
        return self._add_node(
            "cuGraphAddMemcpyNode",
            graph,
            deps,
            ndeps,
            "memcpy",
            lambda: self._memcpy_params(params),
        )

    def _memset_params(self, p: Any) -> tuple[dict[str, Any], str]:
        d = dict(
            dst=int(p.dst), value=int(p.value), size=int(p.elementSize), width=int(p.width),
            height=int(p.height), pitch=int(p.pitch),
        )  # fmt: skip
        if d["size"] not in (1, 2, 4):
            raise EmulationError(INVALID_VALUE, f"memset node element size {d['size']}")
        a = self.find(d["dst"])
        if a is None or a.kind != "device":
            raise EmulationError(INVALID_VALUE, f"memset node {d['dst']:#x} is not device memory")
        if d["value"] >= 1 << (8 * d["size"]):
            raise EmulationError(INVALID_VALUE, f"memset value {d['value']:#x} is too wide")
        return d, f"memset node {d['width']} x {d['size']} bytes"

    def cuGraphAddMemsetNode(
        self, graph: Any, deps: Any, ndeps: int, params: Any, ctx: Any
    ) -> tuple:
        return self._add_node(
            "cuGraphAddMemsetNode",
            graph,
            deps,
            ndeps,
            "memset",
            lambda: self._memset_params(params),
        )

    def cuGraphAddHostNode(self, graph: Any, deps: Any, ndeps: int, params: Any) -> tuple:
        def make() -> tuple[Any, str]:
            fn = int(params.fn or 0)
            if not fn:
                raise EmulationError(INVALID_VALUE, "host node with a NULL function")
            return (fn, int(params.userData or 0)), "host node"

        return self._add_node("cuGraphAddHostNode", graph, deps, ndeps, "host", make)

    # ------------------------------------------------------------------ graph nodes
    def cuGraphAddChildGraphNode(self, graph: Any, deps: Any, ndeps: int, child: Any) -> tuple:
        def make() -> tuple:
            g = self._graph(child)
            # CUDA_CHILD_GRAPH_NODE_PARAMS: the child "must not contain conditional nodes",
            # and memory alloc/free nodes only when moved (not cloned, as this call does).
            # An H200 (driver 580) answered CUDA_ERROR_NOT_SUPPORTED for a nested conditional.
            refused = {"conditional", "mem_alloc", "mem_free"}
            bad = sorted({self.nodes[h].kind for h in g.nodes} & refused)
            if bad:
                raise EmulationError(
                    NOT_SUPPORTED, f"a cloned child graph may not hold {', '.join(bad)} nodes"
                )
            return int(child), f"child graph {int(child):#x}"

        return self._add_node("cuGraphAddChildGraphNode", graph, deps, ndeps, "child", make)

    def cuGraphAddMemAllocNode(self, graph: Any, deps: Any, ndeps: int, params: Any) -> tuple:
        def make() -> tuple:
            nbytes = int(params.bytesize)
            ptr = self._allocate(nbytes, "device")
            self._graph(graph).memory.append(ptr)
            params.dptr = ptr  # the driver writes the reserved address back
            return (ptr, nbytes), f"mem alloc {nbytes} B"

        return self._add_node("cuGraphAddMemAllocNode", graph, deps, ndeps, "mem_alloc", make)

    def cuGraphAddMemFreeNode(self, graph: Any, deps: Any, ndeps: int, dptr: Any) -> tuple:
        def make() -> tuple:
            a = self.find(int(dptr))
            if a is None or a.base != int(dptr):
                raise EmulationError(INVALID_VALUE, f"{int(dptr):#x} is no graph allocation")
            return (a.base, a.nbytes), f"mem free {a.nbytes} B"

        return self._add_node("cuGraphAddMemFreeNode", graph, deps, ndeps, "mem_free", make)

    def cuGraphConditionalHandleCreate(self, graph: Any, ctx: Any, default: int, flags: int):
        def run() -> tuple:
            self._graph(graph)
            cell = np.array([int(default)], dtype=np.uint32)
            self.cond_cells[int(cell.ctypes.data)] = cell
            value = int(cell.ctypes.data)
            return (_real.CUgraphConditionalHandle(value) if _real is not None else value,)

        return self._call("cuGraphConditionalHandleCreate", run)

    def cuGraphAddNode(self, graph: Any, deps: Any, edge_data: Any, ndeps: int, params: Any):
        def make() -> tuple:
            c = params.conditional
            if _real is not None and int(params.type) != int(
                _real.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
            ):
                raise EmulationError(NOT_SUPPORTED, "the emulator adds conditional nodes only")
            cell = int(c.handle)
            if cell not in self.cond_cells:
                raise EmulationError(INVALID_VALUE, f"{cell:#x} is not a conditional handle")
            size = int(c.size)
            bodies = []
            for _ in range(size):
                h = next(self._ids)
                self.graphs[h] = Graph(h)
                bodies.append(h)
            self._graph(graph).bodies.extend(bodies)
            if _real is not None:  # phGraph_out points at driver-owned memory: fill it
                out = (ctypes.c_uint64 * size)(*bodies)
                self._keep.append(out)
                ctypes.c_uint64.from_address(c.getPtr() + 16).value = ctypes.addressof(out)
            else:
                c.phGraph_out = [self._handle("graph", h) for h in bodies]
            kind = {0: "if", 1: "while", 2: "switch"}[int(c.type)]
            return (cell, kind, tuple(bodies)), f"conditional {kind} x{size}"

        return self._add_node("cuGraphAddNode", graph, deps, ndeps, "conditional", make)

    # ------------------------------------------------------------------ linking
    def cuLinkCreate(self, n: int, options: Any, values: Any) -> tuple:
        def run() -> tuple:
            h = next(self._ids)
            self.links[h] = {"cubins": [], "libraries": []}
            return (h,)

        return self._call("cuLinkCreate", run)

    def cuLinkAddData(self, state: Any, kind: Any, data: Any, size: int, name: Any, *rest: Any):
        def run() -> tuple:
            self.links[int(state)]["cubins"].append(bytes(data)[: int(size)])
            return ()

        return self._call("cuLinkAddData", run)

    def cuLinkAddFile(self, state: Any, kind: Any, path: Any, *rest: Any) -> tuple:
        def run() -> tuple:
            target = path.decode() if isinstance(path, bytes) else str(path)
            if not Path(target).is_file():
                raise EmulationError(FILE_NOT_FOUND, f"no file {target}")
            self.links[int(state)]["libraries"].append(target)
            return ()

        return self._call("cuLinkAddFile", run)

    def cuLinkComplete(self, state: Any) -> tuple:
        def run() -> tuple:
            link = self.links[int(state)]
            if len(link["cubins"]) != 1 or not any("cudadevrt" in p for p in link["libraries"]):
                raise EmulationError(INVALID_VALUE, "link one cubin with libcudadevrt")
            (cubin,) = link["cubins"]
            source = SOURCES.get(hashlib.sha256(cubin).hexdigest())
            if source is None:
                raise EmulationError(INVALID_IMAGE, "no CUDA C is known for the linked cubin")
            image = b"oxemu-linked:" + cubin
            remember_source(image, source)
            buf = ctypes.create_string_buffer(image, len(image))
            link["image"] = buf  # owned by the link state, as on a GPU
            return (ctypes.addressof(buf), len(image))

        return self._call("cuLinkComplete", run)

    def cuLinkDestroy(self, state: Any) -> tuple:
        def run() -> tuple:
            if self.links.pop(int(state), None) is None:
                raise EmulationError(INVALID_HANDLE, f"link state {int(state):#x} does not exist")
            return ()

        return self._call("cuLinkDestroy", run)

    def cuGraphAddEmptyNode(self, graph: Any, deps: Any, ndeps: int) -> tuple:
        return self._add_node(
            "cuGraphAddEmptyNode", graph, deps, ndeps, "empty", lambda: (None, "empty node")
        )

    def _node(self, node: Any) -> GraphNode:
        n = self.nodes.get(int(node))
        if n is None:
            raise EmulationError(INVALID_VALUE, f"graph node {int(node):#x} does not exist")
        return n

    def cuGraphKernelNodeSetParams(self, node: Any, params: Any) -> tuple:
        def run() -> tuple:
            n = self._node(node)
            if n.kind != "kernel":
                raise EmulationError(INVALID_VALUE, f"{n.label} is not a kernel node")
            n.params, label = self._kernel_params(params)
            n.label = f"node {n.index} ({label})"
            return ()

        return self._call("cuGraphKernelNodeSetParams", run)

    def cuGraphInstantiate(self, graph: Any, flags: int) -> tuple:
        def run() -> tuple:
            g = self._graph(graph)
            nodes = [self.nodes[n] for n in g.nodes]
            h = next(self._ids)
            self.execs[h] = Exec(
                h, g.handle, [n.handle for n in nodes], [n.kind for n in nodes],
                {n.handle: n.params for n in nodes}, {n.handle: n.deps for n in nodes},
                {n.handle: n.label for n in nodes},
            )  # fmt: skip
            return (self._handle("exec", h),)

        return self._call("cuGraphInstantiate", run)

    def _exec(self, graph_exec: Any) -> Exec:
        e = self.execs.get(int(graph_exec))
        if e is None:
            raise EmulationError(INVALID_HANDLE, f"graph exec {int(graph_exec):#x} does not exist")
        return e

    def cuGraphExecDestroy(self, graph_exec: Any) -> tuple:
        def run() -> tuple:
            self._exec(graph_exec)
            del self.execs[int(graph_exec)]
            return ()

        return self._call("cuGraphExecDestroy", run)

    def cuGraphExecKernelNodeSetParams(self, graph_exec: Any, node: Any, params: Any) -> tuple:
        def run() -> tuple:
            e = self._exec(graph_exec)
            h = int(node)
            if h not in e.params:
                raise EmulationError(
                    INVALID_VALUE,
                    f"node {h:#x} is not a node of the graph this exec was instantiated from",
                )
            if e.kinds[e.node_ids.index(h)] != "kernel":
                raise EmulationError(INVALID_VALUE, f"node {h:#x} is not a kernel node")
            launch, label = self._kernel_params(params)
            e.params[h] = launch
            e.labels[h] = f"node {e.node_ids.index(h)} ({label})"
            return ()

        return self._call("cuGraphExecKernelNodeSetParams", run)

    def cuGraphExecUpdate(self, graph_exec: Any, graph: Any) -> tuple:
        def info(result: int) -> Any:
            if _real is not None:
                i = _real.CUgraphExecUpdateResultInfo()
                i.result = _real.CUgraphExecUpdateResult(result)
                return i
            return SimpleNamespace(result=result)

        self.calls["cuGraphExecUpdate"] += 1
        try:
            e, g = self._exec(graph_exec), self._graph(graph)
        except EmulationError as err:
            return (ErrorCode(err.code, err.detail), None)
        nodes = [self.nodes[n] for n in g.nodes]
        position = {n.handle: n.index for n in nodes}
        mine = {h: i for i, h in enumerate(e.node_ids)}
        reason = None
        if [n.kind for n in nodes] != e.kinds:
            reason = 2  # CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
        elif any(
            sorted(position[d] for d in n.deps) != sorted(mine[d] for d in e.deps[e.node_ids[i]])
            for i, n in enumerate(nodes)
        ):
            reason = 2
        else:
            for i, n in enumerate(nodes):
                old = e.params[e.node_ids[i]]
                if n.kind == "memcpy" and (
                    (old["src_type"], old["dst_type"])
                    != (n.params["src_type"], n.params["dst_type"])
                ):
                    reason = 5  # CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED
        if reason is not None:
            return (ErrorCode(GRAPH_EXEC_UPDATE_FAILURE, "topology or parameters differ"),
                    info(reason))  # fmt: skip
        for i, n in enumerate(nodes):
            e.params[e.node_ids[i]] = n.params
            e.labels[e.node_ids[i]] = n.label
        return (self._success(), info(0))

    def cuGraphUpload(self, graph_exec: Any, stream: Any) -> tuple:
        def run() -> tuple:
            self._exec(graph_exec)
            self._queue(stream)
            return ()

        return self._call("cuGraphUpload", run)

    def cuGraphLaunch(self, graph_exec: Any, stream: Any) -> tuple:
        def run() -> tuple:
            e = self._exec(graph_exec)
            # the launch runs the parameters it was launched with, even if they change later
            params, labels = dict(e.params), dict(e.labels)
            order = self._topological_order(e.node_ids, e.deps)
            kinds = dict(zip(e.node_ids, e.kinds, strict=True))
            self._enqueue(
                stream, Item(f"graph {e.handle:#x}", lambda: self._run_graph(order, kinds, params,
                                                                             labels))
            )  # fmt: skip
            return ()

        return self._call("cuGraphLaunch", run)

    def _topological_order(self, ids: list[int], deps: dict[int, tuple[int, ...]]) -> list[int]:
        """A random topological order (Kahn's algorithm, a random ready node each step)."""
        waiting = {h: len(set(deps[h])) for h in ids}
        succ: dict[int, list[int]] = {h: [] for h in ids}
        for h in ids:
            for d in set(deps[h]):
                succ[d].append(h)
        ready = [h for h in ids if waiting[h] == 0]
        order = []
        while ready:
            h = ready.pop(self.rng.randrange(len(ready)))
            order.append(h)
            for s in succ[h]:
                waiting[s] -= 1
                if waiting[s] == 0:
                    ready.append(s)
        if len(order) != len(ids):
            raise EmulationError(INVALID_VALUE, "the graph has a cycle")
        return order

    def _run_graph(self, order: list[int], kinds: dict[int, str], params: dict[int, Any],
                   labels: dict[int, str]) -> None:  # fmt: skip
        for h in order:
            kind, p, label = kinds[h], params[h], labels[h]
            if kind == "kernel":
                self._run_kernel(p, label)
            elif kind == "memcpy":
                self._run_memcpy(p, label)
            elif kind == "memset":
                self._memset(p["dst"], p["value"], p["size"], p["width"], p["height"],
                             p["pitch"], label)  # fmt: skip
            elif kind == "host":
                self._host_call(*p)
            elif kind in ("child", "conditional", "mem_alloc", "mem_free"):
                self._run_graph_node(kind, p, label)
            self.clock_ms += 0.001

    def _run_body(self, graph: int) -> None:
        """Run a child or conditional body graph: its nodes' current parameters, in a
        random topological order."""
        g = self._graph(graph)
        nodes = [self.nodes[h] for h in g.nodes]
        order = self._topological_order(
            [n.handle for n in nodes], {n.handle: n.deps for n in nodes}
        )
        by = {n.handle: n for n in nodes}
        self._run_graph(
            order,
            {h: by[h].kind for h in order},
            {h: by[h].params for h in order},
            {h: by[h].label for h in order},
        )

    def _run_graph_node(self, kind: str, p: Any, label: str) -> None:
        if kind == "child":
            self._run_body(p)
        elif kind == "mem_alloc" or kind == "mem_free":
            # fresh graph memory is "anything", and freed memory must not be read again:
            # poison both, so a use outside the lifetime gives wrong numbers
            ptr, nbytes = p
            self._check_range(ptr, nbytes, "device", label)
            (ctypes.c_ubyte * nbytes).from_address(ptr)[:] = bytes([POISON]) * nbytes
        else:
            cell, cond_type, bodies = p
            value = int(self.cond_cells[cell][0])
            if cond_type == "while":
                for _ in range(1 << 20):
                    if not int(self.cond_cells[cell][0]):
                        return
                    self._run_body(bodies[0])
                raise EmulationError(LAUNCH_FAILED, f"{label}: the loop never ended")
            if cond_type == "if":
                k = 0 if value else (1 if len(bodies) == 2 else None)
            else:
                k = value if value < len(bodies) else None
            if k is not None:
                self._run_body(bodies[k])

    def cuGraphDebugDotPrint(self, graph: Any, path: Any, flags: int) -> tuple:
        def run() -> tuple:
            g = self._graph(graph)
            lines = [f"digraph emulated_graph_{g.handle:x} {{"]
            for h in g.nodes:
                n = self.nodes[h]
                lines.append(f'  n{h:x} [label="{n.index}: {n.label}" shape=box];')
            for h in g.nodes:
                for d in self.nodes[h].deps:
                    lines.append(f"  n{d:x} -> n{h:x};")
            lines.append("}")
            target = path.decode() if isinstance(path, bytes) else str(path)
            Path(target).write_text("\n".join(lines) + "\n")
            return ()

        return self._call("cuGraphDebugDotPrint", run)

    # ------------------------------------------------------------------ inspection
    def live_counts(self) -> dict[str, int]:
        """How many resources of each kind are alive (the context excluded)."""
        counts = {
            "device_memory": sum(a.kind == "device" for a in self.allocations.values()),
            "host_memory": sum(a.kind == "host" for a in self.allocations.values()),
            "module": len(self.modules),
            "stream": len(self.streams),
            "event": len(self.events),
            "graph": len(self.graphs),
            "exec": len(self.execs),
        }
        return {k: v for k, v in counts.items() if v}


_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@dataclass(frozen=True)
class _IntHandle:
    """A handle when cuda-bindings is not installed: an int with a kind."""

    kind: str
    number: int

    def __int__(self) -> int:
        return self.number
