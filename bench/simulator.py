"""Simulator timings, printed as ratios measured in one run (no absolute assertions).

1. Time-only simulation (``values=False``) of a ~100k-step plan, against the 1 s target.
2. Numeric simulation of a 1,000-kernel plan on 1M-element float32 buffers, against the
   same numpy calls (the ops' references) made directly on plain arrays; target <= 1.5x.

Run: ``python bench/simulator.py [--steps 100000] [--kernels 1000] [--elements 1000000]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.error import GraphWarning
from oxiwork.examples import synthetic
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.executor.simulator import SequentialExecutor, Simulator
from oxiwork.ops import get

_OPS = (("relu", {}), ("scale", {"alpha": 0.5}), ("neg", {}), ("tanh", {}))


def numeric_plan(kernels: int, elements: int) -> ExecutionPlan:
    """A chain of element-wise kernels rotating over three buffers (non-fusible)."""
    b = GraphBuilder()
    size = 4 * elements
    bufs = [b.alloc_buffer(f"b{i}", size) for i in range(3)]
    b.add_memcpy("upload", MemcpyDir.HostToDevice, size, dst=bufs[0])
    for i in range(kernels):
        op, params = _OPS[i % len(_OPS)]
        kb = b.add_kernel(f"k{i}", 4096, 256).op(op).params(**params)
        kb.inputs([bufs[i % 3]]).outputs([bufs[(i + 1) % 3]]).finish()
    b.add_memcpy("download", MemcpyDir.DeviceToHost, size, src=bufs[kernels % 3])
    return ExecutionPlan.build(b.build(), max_streams=1, fusion=False)


def direct(kernels: int, x: np.ndarray) -> np.ndarray:
    """The same op references called directly, each result feeding the next."""
    refs = [(get(op).reference, params) for op, params in _OPS]
    for i in range(kernels):
        ref, params = refs[i % len(refs)]
        x = ref([x], **params)
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--kernels", type=int, default=1000)
    ap.add_argument("--elements", type=int, default=1_000_000)
    args = ap.parse_args()
    warnings.simplefilter("ignore", GraphWarning)

    t0 = time.perf_counter()
    plan = ExecutionPlan.build(synthetic(args.steps, "layered"), max_streams=4, fusion=False)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    SequentialExecutor(plan, values=False).run()
    seq_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim = Simulator(plan, values=False, detect_races=False)
    setup_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim.run()
    run_s = time.perf_counter() - t0
    n = len(plan.steps)
    print(f"time-only, {n} steps ({plan.num_streams} streams; plan built in {build_s:.1f} s):")
    print(
        f"  SequentialExecutor(values=False).run: {seq_s:.3f} s = {seq_s / 1.0:.2f}x the 1 s target"
    )
    print(
        f"  Simulator(values=False) setup {setup_s:.3f} s + run {run_s:.3f} s = "
        f"{(setup_s + run_s) / 1.0:.2f}x the 1 s target"
    )

    plan = numeric_plan(args.kernels, args.elements)
    x = np.random.default_rng(0).standard_normal(args.elements).astype(np.float32)
    ex = SequentialExecutor(plan)
    best_sim = best_direct = float("inf")
    for _ in range(3):  # interleaved, best of 3: the same machine state for both
        t0 = time.perf_counter()
        out = ex.run({"b0": x}).outputs
        best_sim = min(best_sim, time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = direct(args.kernels, x)
        best_direct = min(best_direct, time.perf_counter() - t0)
    name = plan.steps[-1].inputs[0].name
    assert np.allclose(out[name], ref), "the simulator and the direct calls disagree"
    print(f"numeric, {args.kernels} kernels on {args.elements} float32 elements:")
    print(
        f"  simulator {best_sim:.3f} s, direct numpy {best_direct:.3f} s: ratio "
        f"{best_sim / best_direct:.2f}x (target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
