"""Compile generated CUDA C to cubin with NVRTC, cached by content.

NVRTC (the CUDA runtime compiler, from ``cuda-toolkit[nvrtc]``) needs no GPU and no
driver, so this module works on any machine that has ``cuda-bindings`` installed; CI uses
it to compile every generated kernel for ``sm_80`` and ``sm_90``.

Several kernels go into one translation unit (:func:`module_source`): NVRTC's start-up
cost dominates for the tiny kernels oxiwork generates, so one compile of a whole plan is
far cheaper than one compile per kernel, and the GPU backend loads a single module.

Results are cached by the SHA-256 of ``(source, options, arch)`` (:func:`cache_key`) in
memory and optionally on disk (``~/.cache/oxiwork/kernels/``). Only cubin bytes are
stored on disk (never pickled objects), under a directory named after the NVRTC version,
and a file that is not an ELF image is ignored and recompiled.

Example
-------
>>> src = 'extern "C" __global__ void twice(const float* in0, float* out0, size_t n)'
>>> src += '{ size_t i = threadIdx.x; if (i < n) out0[i] = 2.0f * in0[i]; }'
>>> options = compile_options("sm_90", exact=True)
>>> options
('--gpu-architecture=sm_90', '--fmad=false')
>>> len(cache_key(src, options, "sm_90"))
64
>>> mod = compile_cuda(src, arch="sm_90")  # doctest: +SKIP
>>> mod.cubin[:4]  # doctest: +SKIP
b'\\x7fELF'

References
----------
NVIDIA, "NVRTC: CUDA Runtime Compilation", CUDA Toolkit documentation, version 13.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from oxiwork.error import BackendUnavailable, GraphError, InvalidArgument

__all__ = [
    "CI_ARCHS",
    "CompileError",
    "CompiledModule",
    "KernelCache",
    "ModuleSource",
    "cache_key",
    "compile_cuda",
    "compile_module",
    "compile_options",
    "default_cache",
    "default_cache_dir",
    "load_nvrtc",
    "module_source",
    "nvrtc_version",
    "unit_options",
]

CI_ARCHS = ("sm_80", "sm_90")
MIN_ARCH = 75  # NVRTC 13 rejects anything older than Turing
ELF_MAGIC = b"\x7fELF"
_ARCH_RE = re.compile(r"^sm_(\d+)([a-z]?)$")
# NVRTC log lines look like ``oxiwork.cu(12): error: identifier "y" is undefined``.
_LOG_LINE_RE = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<level>error|warning)")


class CompileError(GraphError):
    """NVRTC rejected generated CUDA C.

    ``log`` is NVRTC's log, ``source`` the full translation unit, ``lines`` the 1-based
    line numbers the log blames and ``kernels`` the functions those lines belong to.
    """

    def __init__(
        self,
        message: str,
        *,
        log: str = "",
        source: str = "",
        lines: tuple[int, ...] = (),
        kernels: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.log = log
        self.source = source
        self.lines = lines
        self.kernels = kernels


@dataclass(frozen=True, slots=True)
class ModuleSource:
    """One translation unit: the text, the kernels it defines and where each starts.

    ``starts[k]`` is the 1-based line where ``function_names[k]``'s code begins, so an
    error line can be mapped back to the kernel (and hence the node) it belongs to.
    """

    source: str
    function_names: tuple[str, ...]
    starts: tuple[int, ...]

    def kernel_at(self, line: int) -> str | None:
        """The kernel whose code contains 1-based ``line``, or ``None`` before the first."""
        found = None
        for name, start in zip(self.function_names, self.starts, strict=True):
            if start <= line:
                found = name
        return found


@dataclass(frozen=True, slots=True)
class CompiledModule:
    """A compiled translation unit: cubin bytes plus how they were made."""

    key: str
    arch: str
    options: tuple[str, ...]
    cubin: bytes = field(repr=False)
    log: str = ""
    function_names: tuple[str, ...] = ()


# ---------------------------------------------------------------------------- loading
def load_nvrtc() -> ModuleType:
    """``cuda.bindings.nvrtc``, or :class:`BackendUnavailable` saying what to install.

    >>> load_nvrtc().__name__  # doctest: +SKIP
    'cuda.bindings.nvrtc'
    """
    try:
        # import_module (not "from cuda.bindings import nvrtc") so that a module
        # blocked in sys.modules reads as missing, as on a machine without it.
        nvrtc = importlib.import_module("cuda.bindings.nvrtc")
    except ImportError as e:
        raise BackendUnavailable(
            f"NVRTC is not available ({e}); install it with: pip install 'oxiwork[nvrtc]'"
        ) from e
    return nvrtc


def _nvrtc_call(nvrtc: ModuleType, name: str, *args: Any) -> Any:
    """Call an NVRTC function and unpack its ``(err, *values)`` tuple.

    Failures other than compilation errors are programming or installation errors; they
    raise :class:`BackendUnavailable` (library missing) or :class:`CompileError`.
    """
    try:
        result = getattr(nvrtc, name)(*args)
    except RuntimeError as e:
        # cuda.pathfinder's DynamicLibNotFoundError derives from RuntimeError; matching by
        # name keeps cuda.pathfinder an optional import.
        if any(c.__name__.startswith("DynamicLib") for c in type(e).__mro__):
            raise BackendUnavailable(
                f"libnvrtc could not be loaded ({e}); install it with: pip install 'oxiwork[nvrtc]'"
            ) from e
        raise
    err, *values = result
    if int(err) != 0:
        raise CompileError(f"{name} failed with {_nvrtc_error_name(nvrtc, err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _nvrtc_error_name(nvrtc: ModuleType, err: Any) -> str:
    try:
        code, text = nvrtc.nvrtcGetErrorString(err)
        return text.decode() if int(code) == 0 else str(err)
    except Exception:  # a name for a message only; never mask the real error
        return getattr(err, "name", str(err))


def nvrtc_version() -> tuple[int, int]:
    """The NVRTC version as ``(major, minor)``.

    >>> nvrtc_version() >= (12, 0)  # doctest: +SKIP
    True
    """
    nvrtc = load_nvrtc()
    major, minor = _nvrtc_call(nvrtc, "nvrtcVersion")
    return int(major), int(minor)


# ---------------------------------------------------------------------------- options
def _check_arch(arch: str) -> int:
    m = _ARCH_RE.match(arch) if isinstance(arch, str) else None
    if m is None:
        raise InvalidArgument(f"arch must look like 'sm_90' (compute capability 9.0), got {arch!r}")
    number = int(m.group(1))
    if number < MIN_ARCH:
        raise InvalidArgument(
            f"arch {arch!r} is too old: NVRTC 13 supports sm_{MIN_ARCH} (Turing) and newer"
        )
    return number


def compile_options(
    arch: str, *, exact: bool = True, include_dirs: Iterable[str] = ()
) -> tuple[str, ...]:
    """NVRTC options for ``arch``.

    ``exact`` disables fused multiply-add contraction (``--fmad=false``) so results match
    numpy's separately rounded multiply and add; otherwise NVRTC's default (fmad on) is
    kept for speed.

    >>> compile_options("sm_80", exact=False)
    ('--gpu-architecture=sm_80',)
    >>> compile_options("sm_60")
    Traceback (most recent call last):
    ...
    oxiwork.error.InvalidArgument: arch 'sm_60' is too old: NVRTC 13 supports sm_75 (Turing) and newer
    """
    _check_arch(arch)
    opts = [f"--gpu-architecture={arch}"]
    if exact:
        opts.append("--fmad=false")
    opts += [f"-I{d}" for d in include_dirs]
    return tuple(opts)


def _include_dirs(source: str) -> tuple[str, ...]:
    """Header directories a source needs: cudart's, if (and only if) it includes anything.

    Adding ``-I`` only when needed keeps the cache key of header-free kernels (all the
    generated ones) independent of where the toolkit is installed.
    """
    if "#include" not in source:
        return ()
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return ()
    found = find_nvidia_header_directory("cudart")
    return (str(found),) if found else ()


def unit_options(source: str, arch: str, *, exact: bool = True) -> tuple[str, ...]:
    """The options :func:`compile_cuda` uses for ``source`` (``-I`` only if it includes).

    >>> unit_options("__global__ void f() {}", "sm_90")
    ('--gpu-architecture=sm_90', '--fmad=false')
    """
    return compile_options(arch, exact=exact, include_dirs=_include_dirs(source))


def cache_key(source: str, options: Sequence[str], arch: str) -> str:
    """SHA-256 (hex) of the source, the options and the arch: the identity of a cubin.

    >>> cache_key("a", ("x",), "sm_90") == cache_key("a", ("x",), "sm_90")
    True
    >>> cache_key("a", ("x",), "sm_90") == cache_key("a", ("x",), "sm_80")
    False
    """
    blob = json.dumps([source, list(options), arch], separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------- sources
def module_source(kernels: Iterable[Any]) -> ModuleSource:
    """Join the sources of several kernels into one translation unit.

    ``kernels`` are :class:`~oxiwork.ops.KernelSource` values (anything with
    ``function_name`` and ``source``). A kernel that appears twice with the same text is
    included once (custom ops share one function across nodes); the same name with
    different code is an error, since the unit could not define both.

    >>> from types import SimpleNamespace as K
    >>> m = module_source([K(function_name="a", source="// a\\n"), K(function_name="b",
    ...     source="// b\\n"), K(function_name="a", source="// a\\n")])
    >>> m.function_names, m.starts
    (('a', 'b'), (1, 2))
    """
    seen: dict[str, str] = {}
    parts: list[str] = []
    names: list[str] = []
    starts: list[int] = []
    line = 1
    for k in kernels:
        name, text = k.function_name, k.source
        if name in seen:
            if seen[name] != text:
                raise InvalidArgument(
                    f"two kernels are named {name!r} but have different code; give the "
                    "custom op's function a unique name"
                )
            continue
        seen[name] = text
        if not text.endswith("\n"):
            text += "\n"
        names.append(name)
        starts.append(line)
        parts.append(text)
        line += text.count("\n")
    return ModuleSource("".join(parts), tuple(names), tuple(starts))


# ---------------------------------------------------------------------------- cache
def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/oxiwork/kernels`` (``~/.cache/oxiwork/kernels`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "oxiwork" / "kernels"


class KernelCache:
    """Cubin bytes by :func:`cache_key`, in memory and (if ``directory``) on disk.

    The disk layout is ``directory/nvrtc-<major>.<minor>/<key>.cubin``: a new compiler
    never reuses an old one's output. Writes are atomic (temporary file + rename), so
    concurrent processes at worst compile the same kernel twice.

    >>> c = KernelCache()
    >>> c.put("k" * 64, b"\\x7fELF...")
    >>> c.get("k" * 64)
    b'\\x7fELF...'
    >>> c.hits, c.misses
    (1, 0)
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[str, bytes] = {}
        self.hits = 0
        self.misses = 0

    @classmethod
    def on_disk(cls) -> KernelCache:
        """A cache backed by :func:`default_cache_dir`."""
        return cls(default_cache_dir())

    def _path(self, key: str) -> Path | None:
        if self.directory is None:
            return None
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            return None  # only our own hex digests ever become file names
        try:
            major, minor = nvrtc_version()
        except GraphError:
            return None
        return self.directory / f"nvrtc-{major}.{minor}" / f"{key}.cubin"

    def get(self, key: str) -> bytes | None:
        """The cached cubin for ``key``, or ``None``."""
        data = self._memory.get(key)
        if data is None:
            path = self._path(key)
            if path is not None and path.is_file():
                blob = path.read_bytes()
                if blob.startswith(ELF_MAGIC):
                    data = blob
                    self._memory[key] = blob
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def put(self, key: str, cubin: bytes) -> None:
        """Store ``cubin`` under ``key`` (in memory, and on disk if configured)."""
        self._memory[key] = cubin
        path = self._path(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(cubin)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only or full disk only costs a recompile next time

    def clear(self) -> None:
        """Forget the in-memory entries (files on disk are kept)."""
        self._memory.clear()


_DEFAULT_CACHE = KernelCache()


def default_cache() -> KernelCache:
    """The process-wide in-memory cache used when no cache is passed."""
    return _DEFAULT_CACHE


# ---------------------------------------------------------------------------- compile
def compile_cuda(
    source: str | ModuleSource,
    *,
    arch: str = "sm_90",
    exact: bool = True,
    name: str = "oxiwork.cu",
    cache: KernelCache | None = None,
    extra_options: Sequence[str] = (),
) -> CompiledModule:
    """Compile CUDA C ``source`` to a cubin for ``arch`` (memoised in ``cache``).

    Raises :class:`CompileError` with NVRTC's log and the offending source lines, and
    :class:`~oxiwork.error.BackendUnavailable` if NVRTC is not installed.

    >>> compile_cuda('extern "C" __global__ void f() { int x = y; }', arch="sm_90")  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    oxiwork.executor.nvrtc.CompileError: NVRTC could not compile oxiwork.cu for sm_90 ...
    """
    unit = source if isinstance(source, ModuleSource) else ModuleSource(source, (), ())
    options = (*unit_options(unit.source, arch, exact=exact), *extra_options)
    key = cache_key(unit.source, options, arch)
    cache = default_cache() if cache is None else cache
    cubin = cache.get(key)
    log = ""
    if cubin is None:
        cubin, log = _compile(unit, options, arch, name)
        cache.put(key, cubin)
    return CompiledModule(key, arch, options, cubin, log, unit.function_names)


def compile_module(
    kernels: Iterable[Any],
    *,
    arch: str = "sm_90",
    exact: bool = True,
    cache: KernelCache | None = None,
) -> CompiledModule:
    """Compile several kernels (``KernelSource`` values) as one unit; see :func:`compile_cuda`."""
    return compile_cuda(module_source(kernels), arch=arch, exact=exact, cache=cache)


def _compile(unit: ModuleSource, options: Sequence[str], arch: str, name: str) -> tuple[bytes, str]:
    nvrtc = load_nvrtc()
    prog = _nvrtc_call(nvrtc, "nvrtcCreateProgram", unit.source.encode(), name.encode(), 0, [], [])
    try:
        err, *_ = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        log = _program_log(nvrtc, prog)
        if int(err) != 0:
            raise _compile_error(unit, log, arch, name, _nvrtc_error_name(nvrtc, err))
        size = _nvrtc_call(nvrtc, "nvrtcGetCUBINSize", prog)
        buf = b" " * size
        _nvrtc_call(nvrtc, "nvrtcGetCUBIN", prog, buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(buf), log


def _program_log(nvrtc: ModuleType, prog: Any) -> str:
    size = _nvrtc_call(nvrtc, "nvrtcGetProgramLogSize", prog)
    if size <= 1:
        return ""
    buf = b" " * size
    _nvrtc_call(nvrtc, "nvrtcGetProgramLog", prog, buf)
    return buf.rstrip(b"\x00").decode("utf-8", "replace")


def _compile_error(unit: ModuleSource, log: str, arch: str, name: str, code: str) -> CompileError:
    """A CompileError quoting the log and the blamed lines with their numbers."""
    blamed: list[int] = []
    for log_line in log.splitlines():
        m = _LOG_LINE_RE.match(log_line.strip())
        if m and m.group("level") == "error" and int(m.group("line")) not in blamed:
            blamed.append(int(m.group("line")))
    kernels = tuple(dict.fromkeys(k for k in (unit.kernel_at(n) for n in blamed) if k))
    src_lines = unit.source.splitlines()
    width = len(str(len(src_lines)))
    excerpt: list[str] = []
    for n in blamed[:10]:
        for k in range(max(1, n - 1), min(len(src_lines), n + 1) + 1):
            mark = ">" if k == n else " "
            excerpt.append(f"{mark} {k:>{width}} | {src_lines[k - 1]}")
        excerpt.append("")
    where = f" (kernels: {', '.join(kernels)})" if kernels else ""
    message = (
        f"NVRTC could not compile {name} for {arch}{where}: {code}\n"
        f"--- NVRTC log ---\n{log.strip()}\n"
        + ("--- offending lines ---\n" + "\n".join(excerpt) if excerpt else "")
        + "\nThe CUDA C was generated by oxiwork.ops; fix the op's expression or source."
    )
    return CompileError(message, log=log, source=unit.source, lines=tuple(blamed), kernels=kernels)
