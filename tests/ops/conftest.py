"""Compile CUDA C with NVRTC (no GPU needed); tests skip cleanly without cuda.bindings."""

from __future__ import annotations

import pytest


def _compile(source: str, name: str, arch: str = "sm_90") -> bytes:
    """Compile ``source`` to a cubin for ``arch``; fail the test with NVRTC's log."""
    from cuda.bindings import nvrtc

    from oxiwork.executor.nvrtc import unit_options

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
    try:
        # the executor's own options: the arch, --fmad=false, and -I of the CUDA headers
        # (cuda_fp16.h, cuda_bf16.h: pip's nvidia-cuda-runtime) when the source includes
        opts = [o.encode() for o in unit_options(source, arch)] + [b"-std=c++17"]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            pytest.fail(
                f"NVRTC failed for {name} ({arch}):\n{log.decode(errors='replace')}\n{source}"
            )
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.fixture(scope="session")
def nvrtc_compile():
    """``nvrtc_compile(source, name, arch)``; skips when cuda.bindings is not importable."""
    pytest.importorskip("cuda.bindings.nvrtc")
    return _compile
