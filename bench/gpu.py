"""GPU benchmark: CUDA-graph mode vs stream mode, fused vs unfused, ours vs PyTorch.

Measured in one run, printed as ratios (no absolute thresholds are asserted; the targets
are printed next to the measurements):

1. **Launch overhead per node**: chains of 16/64/256/1024 tiny kernels (256 floats each,
   not fusible) replayed as one CUDA graph vs launched kernel by kernel on a stream
   (``cuLaunchKernel`` per node). Wall-clock (submit + wait) per node. Target: graph mode
   at least 5x cheaper per node at 64.
2. **Bandwidth of a fused 8-op element-wise chain** on 256M floats (1 GiB in, 1 GiB out),
   as a fraction of the device's measured copy bandwidth (``cuMemcpyDtoDAsync`` of the
   same size, bytes read + written). Target: at least 80%.
3. **The same chain unfused** (8 kernels, 8x the traffic).
4. **PyTorch**: the same 8 ops captured in a ``torch.cuda.CUDAGraph`` and replayed, in the
   same run (skipped cleanly without torch). Target: ours (fused) no slower.

Run: ``PYTHONPATH=. python3 bench/gpu.py [--elements N] [--quick]``. Needs a GPU,
cuda-bindings and NVRTC; prints why and exits 0 when there is no GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oxiwork.builder import GraphBuilder
from oxiwork.error import GraphWarning
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import Session, probe
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.streams import StreamExecutor

CHAIN_OPS = ("relu", "scale", "neg", "copy", "scale", "relu", "neg", "scale")
ALPHA = 1.0001  # keeps values bounded over replays


def chain_graph(n_kernels: int, n_floats: int, *, fusible: bool, blocks: int, threads: int = 256):
    """x (external) -> op -> op -> ... -> out, ``n_kernels`` kernels of ``n_floats``."""
    b = GraphBuilder()
    prev = b.alloc_external_buffer("x", 4 * n_floats)
    for i in range(n_kernels):
        op = CHAIN_OPS[i % len(CHAIN_OPS)]
        out = b.alloc_buffer(f"t{i}", 4 * n_floats)
        kb = b.add_kernel(f"{op}{i}", blocks, threads).op(op).fusible(fusible)
        if op == "scale":
            kb = kb.params(alpha=ALPHA)
        kb.inputs([prev]).outputs([out]).finish()
        prev = out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GraphWarning)
        return b.build()


def _wall_per_replay(fn, reps: int) -> float:
    t0 = time.perf_counter()
    fn(reps)
    return (time.perf_counter() - t0) / reps


def launch_overhead(sizes: list[int], reps: int) -> dict[int, tuple[float, float]]:
    print("\n## 1. Launch overhead per node (chains of tiny kernels, 1 stream)\n")
    print("| kernels | graph us/node | stream us/node | stream/graph |")
    print("|--:|--:|--:|--:|")
    out = {}
    for n in sizes:
        plan = ExecutionPlan.build(
            chain_graph(n, 256, fusible=False, blocks=1), max_streams=1, fusion=False
        )
        with CudaGraphExecutor(plan, exact=False, capture=False) as g:
            g.timed_launches(3)  # warm-up (first launch uploads the graph)
            t_graph = _wall_per_replay(g.timed_launches, reps) / n
        with StreamExecutor(plan, exact=False, capture=False) as s:
            s.timed_launches(3)
            t_stream = _wall_per_replay(s.timed_launches, max(3, reps // 4)) / n
        out[n] = (t_graph, t_stream)
        print(f"| {n} | {t_graph * 1e6:.2f} | {t_stream * 1e6:.2f} | {t_stream / t_graph:.1f}x |")
    if 64 in out:
        ratio = out[64][1] / out[64][0]
        verdict = "MET" if ratio >= 5 else "MISSED"
        print(f"\ntarget graph mode >= 5x cheaper per node at 64: {ratio:.1f}x -> {verdict}")
    return out


def copy_bandwidth(n_floats: int, reps: int) -> float:
    """Bytes (read + written) per second of a device-to-device copy of ``n_floats``."""
    nbytes = 4 * n_floats
    s = Session()
    try:
        src, dst = s.alloc(nbytes), s.alloc(nbytes)
        stream, start, stop = s.stream(), s.event(), s.event()
        s.copy_async("d2d", dst, src, nbytes, stream)  # warm-up
        s.record(start, stream)
        for _ in range(reps):
            s.copy_async("d2d", dst, src, nbytes, stream)
        s.record(stop, stream)
        s.synchronize(stream)
        seconds = s.elapsed_ms(start, stop) / 1e3 / reps
    finally:
        s.close()
    return 2 * nbytes / seconds


def chain_time(n_floats: int, *, fusion: bool, reps: int, blocks: int) -> tuple[float, int]:
    """Milliseconds per replay of the 8-op chain as one CUDA graph; kernels in the plan."""
    g = chain_graph(len(CHAIN_OPS), n_floats, fusible=True, blocks=blocks)
    plan = ExecutionPlan.build(g, max_streams=1, fusion=fusion)
    with CudaGraphExecutor(plan, exact=False, capture=False) as ex:
        ex.timed_launches(2)
        return ex.timed_launches(reps), plan.kernel_count_fused


def torch_chain_ms(n_floats: int, reps: int) -> float | None:
    try:
        import torch
    except ImportError:
        print("\n(torch is not installed: PyTorch comparison skipped)")
        return None
    if not torch.cuda.is_available():
        print("\n(torch has no CUDA: PyTorch comparison skipped)")
        return None
    x = torch.rand(n_floats, device="cuda")
    a, b = torch.empty_like(x), torch.empty_like(x)

    def chain() -> None:  # the same 8 ops as CHAIN_OPS, ping-ponging two buffers
        torch.relu(x, out=a)
        torch.mul(a, ALPHA, out=b)
        torch.neg(b, out=a)
        b.copy_(a)
        torch.mul(b, ALPHA, out=a)
        torch.relu(a, out=b)
        torch.neg(b, out=a)
        torch.mul(a, ALPHA, out=b)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        chain()
    graph.replay()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def bandwidth(n_floats: int, reps: int, blocks: int) -> None:
    nbytes = 4 * n_floats
    print(
        f"\n## 2-4. 8-op element-wise chain on {n_floats / 2**20:.0f}M floats ({nbytes / 2**30:.2f} GiB per buffer)\n"
    )
    copy_bw = copy_bandwidth(n_floats, reps)
    fused_ms, fused_k = chain_time(n_floats, fusion=True, reps=reps, blocks=blocks)
    unfused_ms, unfused_k = chain_time(n_floats, fusion=False, reps=reps, blocks=blocks)
    fused_bw = 2 * nbytes / (fused_ms / 1e3)
    frac = fused_bw / copy_bw
    print(f"device copy bandwidth (cuMemcpyDtoDAsync, read+write): {copy_bw / 1e9:.0f} GB/s")
    print("| variant | kernels | ms/replay | GB/s (useful read+write) | of copy bw |")
    print("|---|--:|--:|--:|--:|")
    print(f"| ours, fused graph | {fused_k} | {fused_ms:.3f} | {fused_bw / 1e9:.0f} | {frac:.0%} |")
    unf_bw = 2 * nbytes / (unfused_ms / 1e3)
    print(
        f"| ours, unfused graph | {unfused_k} | {unfused_ms:.3f} | {unf_bw / 1e9:.0f} | "
        f"{unf_bw / copy_bw:.0%} |"
    )
    torch_ms = torch_chain_ms(n_floats, reps)
    if torch_ms is not None:
        import torch

        torch.cuda.empty_cache()  # the tensors died with torch_chain_ms's frame
    if torch_ms is not None:
        t_bw = 2 * nbytes / (torch_ms / 1e3)
        print(
            f"| torch.cuda.CUDAGraph (8 kernels) | 8 | {torch_ms:.3f} | {t_bw / 1e9:.0f} | {t_bw / copy_bw:.0%} |"
        )
    print(
        f"\ntarget fused >= 80% of copy bandwidth: {frac:.0%} -> {'MET' if frac >= 0.8 else 'MISSED'}"
    )
    print(f"fusion speed-up (unfused / fused time): {unfused_ms / fused_ms:.1f}x")
    if torch_ms is not None:
        verdict = "MET" if fused_ms <= torch_ms * 1.02 else "MISSED"
        print(
            f"target ours (fused) no slower than torch CUDA graph: torch/ours = {torch_ms / fused_ms:.2f}x -> {verdict}"
        )
        print(f"ours unfused vs torch (same 8 kernels): torch/ours = {torch_ms / unfused_ms:.2f}x")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--elements", type=int, default=256 << 20, help="floats per buffer (default 256M)"
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 64, 256, 1024])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=65535, help="blocks of the chain kernels")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.elements, args.sizes, args.reps = 1 << 22, [16, 64], 5
    reason = probe(0)
    if reason is not None:
        print(f"no GPU benchmark: {reason}")
        return 0
    s = Session()
    print(f"# oxiwork GPU benchmark on {s.device.name} ({s.device.arch})")
    s.close()
    t0 = time.perf_counter()
    launch_overhead(args.sizes, args.reps)
    bandwidth(args.elements, args.reps, args.blocks)
    print(f"\n(total {time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
