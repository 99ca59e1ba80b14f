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
5. **Set-up and update**: ``CudaGraphExecutor.setup_s`` (lowering, NVRTC compile and module
   load, allocation, graph build, ``cuGraphInstantiate``, ``cuGraphUpload``) and
   ``last_update_s`` (an in-place ``cuGraphExecUpdate``, and a re-instantiation) for the
   chains of 1. and the transformer example; medians of several executors and updates.
6. **The 298-node transformer example** (``oxiwork.examples.transformer_block``, 8 layers) as our
   CUDA graph (the default plan: fusion, up to 4 streams) and as stream launches, against
   the same computation written in torch (its ops, op by op in the graph's topological
   order: ``bench.gpu.torch_twin``) captured in a ``torch.cuda.CUDAGraph``, on the same
   inputs; the outputs are compared first (relative norm). Target: ours not slower.

Run: ``PYTHONPATH=. python3 bench/gpu.py [--elements N] [--quick] [--json FILE]``. Needs a
GPU, cuda-bindings and NVRTC; prints why and exits 0 when there is no GPU. ``--json`` also
writes every number measured to FILE.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oxiwork.builder import GraphBuilder
from oxiwork.error import GraphWarning
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import Session, probe
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.streams import StreamExecutor
from oxiwork.graph import ComputeGraph
from oxiwork.node import NodeKind

#: Every number measured, by section (written by ``--json``).
RESULTS: dict[str, Any] = {}

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
        RESULTS.setdefault("launch_us_per_node", {})[n] = {
            "graph": t_graph * 1e6,
            "stream": t_stream * 1e6,
        }
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
        torch.clamp(x, min=0, out=a)  # relu (torch.relu takes no out=)
        torch.mul(a, ALPHA, out=b)
        torch.neg(b, out=a)
        b.copy_(a)
        torch.mul(b, ALPHA, out=a)
        torch.clamp(a, min=0, out=b)
        torch.neg(b, out=a)
        torch.mul(a, ALPHA, out=b)

    graph, _ = torch_graph(chain)
    return torch_replay_ms(graph, reps, rounds=1)


def torch_graph(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """``fn`` captured in a ``torch.cuda.CUDAGraph`` (after three warm-up calls on a side
    stream, as torch's documentation does it) and replayed once; returns the graph and
    what the captured call returned (its tensors hold each replay's results)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph, result


def torch_replay_ms(graph: Any, reps: int, rounds: int) -> float:
    """GPU milliseconds per replay of a ``torch.cuda.CUDAGraph``: CUDA events around each
    batch of ``reps`` back-to-back replays, the median of ``rounds`` batches."""
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(rounds):
        start.record()
        for _ in range(reps):
            graph.replay()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) / reps)
    return statistics.median(times)


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
    RESULTS["chain"] = {
        "floats": n_floats,
        "copy_GBps": copy_bw / 1e9,
        "fused_ms": fused_ms,
        "fused_kernels": fused_k,
        "unfused_ms": unfused_ms,
        "unfused_kernels": unfused_k,
        "fused_share_of_copy": frac,
    }
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
        RESULTS["chain"]["torch_graph_ms"] = torch_ms
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


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def setup_and_update(sizes: list[int], reps: int, layers: int = 8) -> None:
    """Set-up phases of fresh executors and in-place/re-instantiating updates (medians)."""
    from oxiwork.examples import transformer_block

    print("\n## 5. Set-up and update (host ms, medians)\n")
    print(
        "| graph | plan steps | lower | compile+load | build | instantiate | upload | "
        "update in place (cuGraphExecUpdate) | whole update() | re-instantiate |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    graphs: list[tuple[str, Callable[[], ComputeGraph]]] = [
        (f"chain {n}", lambda n=n: chain_graph(n, 256, fusible=False, blocks=1)) for n in sizes
    ]
    graphs.append(("transformer", lambda: transformer_block(layers)))
    table: dict[str, Any] = {}
    for label, make in graphs:
        plan = ExecutionPlan.build(make(), max_streams=1, fusion=False)
        phases: dict[str, list[float]] = {}
        for _ in range(reps):
            with CudaGraphExecutor(plan, exact=False, capture=False) as ex:
                for k, v in ex.setup_s.items():
                    phases.setdefault(k, []).append(v)
        in_place: list[float] = []
        whole: list[float] = []
        reinst: list[float] = []
        with CudaGraphExecutor(plan, exact=False, capture=False) as ex:
            for _ in range(reps):
                t0 = time.perf_counter()
                assert ex.update(plan) == "updated", ex.last_update
                whole.append(time.perf_counter() - t0)
                in_place.append(ex.last_update_s["exec_update_s"])
        # The same plan again updates in place (above); the graph re-planned with fusion
        # has another topology, so switching between the two must re-instantiate.
        fused = ExecutionPlan.build(make(), max_streams=1, fusion=True)
        if fused.kernel_count_fused != plan.kernel_count_fused:
            with CudaGraphExecutor(plan, exact=False, capture=False) as ex:
                for i in range(reps):
                    target = fused if i % 2 == 0 else plan
                    assert ex.update(target) == "reinstantiated", ex.last_update
                    reinst.append(ex.last_update_s["instantiate_s"])
        row = {k.removesuffix("_s") + "_ms": _median_ms(v) for k, v in phases.items()}
        row.update(
            steps=len(plan.steps),
            exec_update_ms=_median_ms(in_place),
            whole_update_ms=_median_ms(whole),
            reinstantiate_ms=_median_ms(reinst) if reinst else None,
        )
        table[label] = row
        re_ms = f"{row['reinstantiate_ms']:.2f}" if reinst else "-"
        print(
            f"| {label} | {row['steps']} | {row['lower_ms']:.2f} | {row['load_ms']:.2f} | "
            f"{row['build_ms']:.2f} | {row['instantiate_ms']:.2f} | {row['upload_ms']:.2f} | "
            f"{row['exec_update_ms']:.2f} | {row['whole_update_ms']:.2f} | {re_ms} |"
        )
    RESULTS["setup_ms"] = table


def _torch_ops() -> dict[str, Callable[..., Any]]:
    import torch
    import torch.nn.functional as F

    return {
        "matmul": lambda p, a, b: torch.matmul(a, b),
        "bias_add": lambda p, a, b: a + b.reshape(-1),
        "add": lambda p, a, b: a + b,
        "scale": lambda p, a: a * p["alpha"],
        "transpose": lambda p, a: a.t(),
        "softmax": lambda p, a: torch.softmax(a, -1),
        "layer_norm": lambda p, a: F.layer_norm(a, a.shape[-1:], eps=p["eps"]),
        "gelu": lambda p, a: F.gelu(a, approximate="tanh"),
        "relu": lambda p, a: torch.relu(a),
    }


def torch_twin(graph: ComputeGraph) -> tuple[Callable[[dict[str, Any]], dict[str, Any]], list[str]]:
    """The same computation as ``graph``'s kernels, in torch: a function of the input
    tensors (by buffer name) returning every buffer no kernel reads (by name), and the
    input names. Each kernel's op is the torch op of the same definition (the op table's
    parameters and defaults); an op without one raises ``KeyError`` naming it."""
    from oxiwork.ops.table import bind_params, get

    table = _torch_ops()
    kernels = [graph.node(i) for i in graph.topological_order()]
    kernels = [n for n in kernels if n.kind == NodeKind.KernelLaunch]
    written = {b for n in kernels for b in n.outputs}
    read = {b for n in kernels for b in n.inputs}
    steps = []
    for n in kernels:
        if n.op not in table:
            raise KeyError(f"kernel {n.name!r}: op {n.op!r} has no torch twin")
        (out,) = n.outputs
        params = bind_params(get(n.op), n.params, f"kernel {n.name!r}")
        steps.append((table[n.op], params, n.inputs, out))
    inputs = sorted(read - written)
    outputs = sorted(written - read)
    names = {b: graph.buffer(b).name for b in (*inputs, *outputs)}

    def run(values: dict[str, Any]) -> dict[str, Any]:
        env = {b: values[names[b]] for b in inputs}
        for fn, params, ins, out in steps:
            env[out] = fn(params, *(env[b] for b in ins))
        return {names[b]: env[b] for b in outputs}

    return run, [names[b] for b in inputs]


def transformer_vs_torch(reps: int, rounds: int, layers: int = 8) -> None:
    from oxiwork.examples import transformer_block
    from oxiwork.reference import generated_input

    graph = transformer_block(layers)
    print(
        f"\n## 6. The {graph.num_nodes}-node transformer example: our CUDA graph vs "
        "torch.cuda.CUDAGraph\n"
    )
    plan = ExecutionPlan.build(graph, max_streams=4)
    twin, input_names = torch_twin(graph)
    host = {n: generated_input(graph.buffer_by_name(n), seed=0) for n in input_names}
    row: dict[str, Any] = {
        "nodes": graph.num_nodes,
        "kernels": len(graph.kernels()),
        "plan_kernels": plan.kernel_count_fused,
        "plan_streams": plan.num_streams,
    }
    with CudaGraphExecutor(plan, exact=False, capture=False) as ex:
        ours, _ = ex.run(host)
        ex.timed_launches(2)
        row["ours_graph_ms"] = statistics.median(ex.timed_launches(reps) for _ in range(rounds))
    with StreamExecutor(plan, exact=False, capture=False) as ex:
        ex.timed_launches(2)
        row["ours_stream_ms"] = statistics.median(ex.timed_launches(reps) for _ in range(rounds))
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("(torch with CUDA is not available: the torch side is skipped)")
    else:
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 products, as ours
        dev = {n: torch.from_numpy(np.ascontiguousarray(v)).cuda() for n, v in host.items()}
        g, result = torch_graph(lambda: twin(dev))
        worst = 0.0
        for name, t in result.items():
            a = np.asarray(ours[name], np.float64).reshape(-1)
            b = t.double().cpu().numpy().reshape(-1)
            worst = max(worst, float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)))
        row["outputs_rel_norm_diff"] = worst
        row["torch_graph_ms"] = torch_replay_ms(g, reps, rounds)
    RESULTS["transformer"] = row
    print(
        f"{row['nodes']} nodes, {row['kernels']} kernels; our plan: {row['plan_kernels']} "
        f"kernels on {row['plan_streams']} stream(s)"
    )
    print("| variant | GPU ms per replay |")
    print("|---|--:|")
    print(f"| ours, CUDA graph | {row['ours_graph_ms']:.4f} |")
    print(f"| ours, stream launches | {row['ours_stream_ms']:.4f} |")
    if "torch_graph_ms" in row:
        print(f"| torch.cuda.CUDAGraph ({row['kernels']} ops) | {row['torch_graph_ms']:.4f} |")
        print(f"outputs ours vs torch: relative norm difference {row['outputs_rel_norm_diff']:.2e}")
        ratio = row["torch_graph_ms"] / row["ours_graph_ms"]
        verdict = "MET" if row["ours_graph_ms"] <= row["torch_graph_ms"] * 1.02 else "MISSED"
        print(f"target ours not slower than torch: torch/ours = {ratio:.2f}x -> {verdict}")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--elements", type=int, default=256 << 20, help="floats per buffer (default 256M)"
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--blocks", type=int, default=65535, help="blocks of the chain kernels")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument(
        "--rounds", type=int, default=5, help="executors, updates and timed batches per median"
    )
    ap.add_argument(
        "--layers", type=int, default=8, help="layers of the transformer example (8: 298 nodes)"
    )
    ap.add_argument("--json", type=Path, help="also write every number measured to this file")
    args = ap.parse_args()
    if args.quick:
        args.elements, args.sizes, args.reps = 1 << 22, [8, 64], 5
    reason = probe(0)
    if reason is not None:
        print(f"no GPU benchmark: {reason}")
        return 0
    s = Session()
    print(f"# oxiwork GPU benchmark on {s.device.name} ({s.device.arch})")
    s.close()
    t0 = time.perf_counter()
    RESULTS["device"] = {"name": s.device.name, "arch": s.device.arch}
    sections: list[tuple[str, Callable[[], None]]] = [
        ("launch", lambda: launch_overhead(args.sizes, args.reps)),
        ("bandwidth", lambda: bandwidth(args.elements, args.reps, args.blocks)),
        ("setup", lambda: setup_and_update(args.sizes, args.rounds, args.layers)),
        ("transformer", lambda: transformer_vs_torch(args.reps, args.rounds, args.layers)),
    ]
    failed = 0
    for name, section in sections:  # one failing section does not hide the others
        started = time.perf_counter()
        try:
            section()
        except Exception as e:
            failed += 1
            RESULTS.setdefault("errors", {})[name] = f"{type(e).__name__}: {e}"
            print(f"\nsection {name!r} FAILED: {type(e).__name__}: {e}")
        RESULTS.setdefault("section_s", {})[name] = time.perf_counter() - started
        if args.json:
            args.json.write_text(json.dumps(RESULTS, indent=1, default=str))
    print(f"\n(total {time.perf_counter() - t0:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
