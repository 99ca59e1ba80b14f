"""GPU tests of CudaGraphExecutor and StreamExecutor (marked ``gpu``; skipped cleanly
without a driver or device).

Both executors must compute what the CPU simulator computes (kernels compiled with
``--fmad=false``), for the quick start and for random DAGs with fusion on and off on 1 to 8
streams; every library op, in every input dtype it takes, must compute what its numpy
reference does (all of tests/ops/test_dtypes.py's probes in one CUDA graph); the stock
torch.nn modules of tests/importers/test_torch_stock.py must give eager's outputs; replays
take new inputs without re-instantiation; parameter patches take effect; and 1,000
build/launch/close cycles leave device memory where it was.

The module also runs without pytest (``python3 tests/gpu/test_gpu_executors.py``) for
machines that have a GPU but no test tooling; ``bench/gpu_check.sh`` uses whichever works.

Every test takes a :class:`Target` (the device, and the driver module: ``None`` for the
real ``cuda.bindings.driver``), so ``tests/executor/test_emulated_executors.py`` runs the
same scenario bodies, unmarked, on the CPU emulation of the driver
(``tests/executor/emulated_driver.py``).
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

try:
    import pytest
except ImportError:  # the plain-python runner below needs no pytest
    pytest = None  # type: ignore[assignment]

from oxiwork.builder import GraphBuilder
from oxiwork.examples import quick_start, random_op_dag
from oxiwork.executor.cuda_graph import CudaGraphExecutor
from oxiwork.executor.driver import Device, Driver, probe
from oxiwork.executor.simulator import SequentialExecutor
from oxiwork.executor.streams import StreamExecutor
from oxiwork.node import MemcpyDir
from tests.executor.gpu_fakes import build_plan, kitchen_sink_plan
from tests.strategies import build_control_graph

# fmad is off, so element-wise arithmetic matches numpy; transcendentals (expf, tanhf,
# logf) differ by an ulp or two and reductions sum in another order. Those differences
# grow through deep graphs: after the transformer example's 8 layers the outputs reach
# |1.6e3| and a residual add that cancels to ~40 keeps an absolute error of ~1e-2 (relative
# norm 4e-6 between the emulated kernels and numpy), so for the examples and the imported
# models the absolute tolerance also scales with the buffer's largest value (SCALE_TOL; a
# wrong plan is off by O(1) of that scale). The small random DAGs keep RTOL/ATOL alone.
RTOL, ATOL, SCALE_TOL = 1e-4, 1e-5, 1e-4
SEEDS = (0, 1, 2)
STREAMS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Target:
    """Where the scenarios run: a device ordinal and a driver module (``None``: the real
    ``cuda.bindings.driver``; tests pass the emulator). ``cycles`` is how many
    build/launch/close cycles the memory-growth scenario makes."""

    device: int = 0
    driver: Any = None
    cycles: int = 1000

    def executor(self, cls: Any, plan: Any, **options: Any) -> Any:
        """``cls(plan)`` (an executor class) on this target."""
        return cls(plan, device=self.device, driver=self.driver, **options)


if pytest is not None:
    pytestmark = pytest.mark.gpu

    @pytest.fixture(scope="module")
    def gpu():
        """The real device, or a clean skip saying why there is none."""
        reason = probe(0)
        if reason is not None:
            pytest.skip(f"no usable GPU: {reason}")
        return Target(0)


def _simulate(plan, inputs=None, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stats = SequentialExecutor(plan).run(inputs, seed=seed)
    assert stats.outputs is not None, "the simulator could not compute values"
    return stats.outputs


def _float64_values(graph, seed=0):
    """Every buffer of ``graph`` computed in float64 from the generated float32 inputs,
    by name, where every kernel is an element-wise op (whose numpy reference keeps the
    dtype); ``None`` for other graphs.

    Deep element-wise chains are ill-conditioned: the 5,000-node layered example
    multiplies values up to |1e24|, where float32 rounding alone leaves the simulator 13%
    away from float64 and a GPU's ``expf``/``tanhf`` (an ulp or two from glibc's) lands
    as far away elsewhere. Against float64, the GPU must be as accurate as the simulator.
    """
    from oxiwork.ops.table import FusionClass, bind_params, get
    from oxiwork.reference import generated_input

    order = [graph.node(i) for i in graph.topological_order()]
    kernels = [n for n in order if n.kind.value == "kernel"]
    if not kernels or any(
        get(n.op) is None or get(n.op).fusion_class is not FusionClass.ELEMENTWISE for n in kernels
    ):
        return None
    values = {}
    for n in kernels:
        args = []
        for b in n.inputs:
            if b not in values:  # only uploads feed these graphs: generated inputs
                values[b] = generated_input(graph.buffer(b), seed).astype(np.float64)
            args.append(values[b])
        op = get(n.op)
        (out,) = n.outputs
        with np.errstate(all="ignore"):
            values[out] = np.asarray(
                op.reference(args, **bind_params(op, n.params, n.name)), np.float64
            )
    return {graph.buffer(b).name: v for b, v in values.items()}


def _assert_same(got, want, what, exact=None, scale_tol=0.0):
    """``got`` equals ``want`` buffer by buffer within RTOL/ATOL (the absolute tolerance
    at least ``scale_tol`` times the buffer's largest finite value), and, where ``exact``
    (float64 values by name, :func:`_float64_values`) holds the buffer, within 4x the
    simulator's own distance from float64 element by element."""
    assert set(got) == set(want), f"{what}: outputs {sorted(got)} != {sorted(want)}"
    for name in want:
        a = np.asarray(got[name]).reshape(-1)
        b = np.asarray(want[name]).reshape(-1)
        finite = b[np.isfinite(b)] if b.dtype.kind == "f" else b
        scale = float(np.max(np.abs(finite), initial=0.0)) if finite.size else 0.0
        atol = max(ATOL, scale_tol * scale)
        if exact is not None and name in exact:
            with np.errstate(invalid="ignore"):
                err = np.abs(b.astype(np.float64) - exact[name].reshape(-1))
            atol = np.maximum(atol, 4 * np.nan_to_num(err, nan=0.0, posinf=0.0))
        bad = np.flatnonzero(~np.isclose(a, b, rtol=RTOL, atol=atol, equal_nan=True))
        if bad.size:
            # the worst finite difference, else the first mismatch (a NaN on one side only)
            diff = np.abs(a[bad].astype(np.float64) - b[bad])
            at = int(bad[np.nanargmax(diff)]) if np.isfinite(diff).any() else int(bad[0])
            raise AssertionError(
                f"{what}: buffer {name!r} differs at {bad.size} of {a.size} elements, e.g. "
                f"[{at}]: gpu {a[at]!r} vs simulator {b[at]!r}"
            )


def _both(plan, gpu, inputs=None, seed=0):
    want = _simulate(plan, inputs, seed)
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        graph_out, _ = ex.run(inputs, seed=seed)
    with gpu.executor(StreamExecutor, plan) as ex:
        stream_out, _ = ex.run(inputs, seed=seed)
    return want, graph_out, stream_out


def test_quick_start(gpu):
    x = np.linspace(-1, 1, 1024, dtype=np.float32)
    for fusion in (True, False):
        plan = build_plan(quick_start(), fusion=fusion)
        want, g, s = _both(plan, gpu, {"input": x})
        np.testing.assert_allclose(want["output"], 2 * np.maximum(x, 0), rtol=1e-6)
        _assert_same(g, want, f"graph mode, fusion={fusion}")
        _assert_same(s, want, f"stream mode, fusion={fusion}")


def test_random_dags_match_the_simulator(gpu):
    for seed in SEEDS:
        g = random_op_dag(seed, 24)
        for fusion in (True, False):
            for streams in STREAMS:
                plan = build_plan(g, max_streams=streams, fusion=fusion)
                want, got_g, got_s = _both(plan, gpu, seed=seed)
                what = f"seed {seed}, fusion={fusion}, max_streams={streams}"
                _assert_same(got_g, want, "graph mode, " + what)
                _assert_same(got_s, want, "stream mode, " + what)


def test_every_step_kind(gpu):
    # external input, upload, memset, kernels on two streams with events, device copy,
    # host callback, download
    want, g, s = _both(kitchen_sink_plan(), gpu, seed=7)
    _assert_same(g, want, "graph mode, kitchen sink")
    _assert_same(s, want, "stream mode, kitchen sink")


def examples_match_the_simulator(gpu, names=None, streams=(1, 4)):
    """The examples the CLI names (all by default: the quick start, the 298-node
    transformer block, a random op DAG, a 1,000-node chain, a 5,000-node layered graph),
    fusion on and off, on 1 and 4 streams (``streams``), in graph and in stream mode,
    compute what the simulator computes."""
    from oxiwork.cli import _examples

    examples = _examples()
    for name in names or examples:
        g = examples[name]()
        exact = _float64_values(g)
        for fusion in (True, False):
            for n in streams:
                plan = build_plan(g, max_streams=n, fusion=fusion)
                want, got_g, got_s = _both(plan, gpu)
                what = f"example {name!r}, fusion={fusion}, max_streams={n}"
                _assert_same(got_g, want, "graph mode, " + what, exact, SCALE_TOL)
                _assert_same(got_s, want, "stream mode, " + what, exact, SCALE_TOL)


def test_every_example_matches_the_simulator(gpu):
    examples_match_the_simulator(gpu)


#: The importer tests' own modules whose ops are all library ops (the embedding model's
#: int64 remainder runs opaque, which the GPU executors refuse by design).
IMPORTED = ("mlp", "attention", "conv_bn_relu", "conv_residual", "residual", "rms_norm")


def imported_models_match_eager(gpu, names=IMPORTED, streams=(1, 2)):
    """Imported torch modules run as CUDA graphs give eager's outputs (the tolerance of
    the importer's own tests) and the simulator's."""
    from tests.importers.test_torch import _imported

    for name in names:
        model, eager = _imported(name)
        for fusion in (True, False):
            for n in streams:
                plan = build_plan(model.graph, max_streams=n, fusion=fusion)
                what = f"model {name!r}, fusion={fusion}, max_streams={n}"
                with gpu.executor(CudaGraphExecutor, plan) as ex:
                    got, _ = ex.run(model.inputs)
                sim = _simulate(plan, model.inputs)
                _assert_same(got, sim, "graph mode vs simulator, " + what, scale_tol=SCALE_TOL)
                for out, want in zip(model.outputs_from(got), eager, strict=True):
                    assert out.shape == want.shape and out.dtype == want.dtype, what
                    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5, err_msg=what)


def test_imported_models_match_eager(gpu):
    if pytest is not None:
        pytest.importorskip("torch")
    imported_models_match_eager(gpu)


def stock_modules_match_eager(gpu, names=None, fusions=(True,)):
    """The stock torch.nn modules of tests/importers/test_torch_stock.py (every one imports
    with no opaque kernel: between them they use most library ops, the newest included),
    run as CUDA graphs on one stream, give eager's outputs within that test's tolerance.
    Fused by default (each op alone runs in :func:`library_ops_match_the_simulator`), so
    the GPU check stays within its time limit."""
    from tests.importers.test_torch_stock import ATOL, RTOL, STOCK, imported

    for name in names or sorted(STOCK):
        model, eager = imported(name)
        for fusion in fusions:
            plan = build_plan(model.graph, max_streams=1, fusion=fusion)
            with gpu.executor(CudaGraphExecutor, plan) as ex:
                got, _ = ex.run(model.inputs)
            what = f"stock module {name!r}, fusion={fusion}"
            for out, want in zip(model.outputs_from(got), eager, strict=True):
                assert out.shape == want.shape and out.dtype == want.dtype, what
                np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL, err_msg=what)


def test_stock_modules_match_eager(gpu):
    if pytest is not None:
        pytest.importorskip("torch")
    stock_modules_match_eager(gpu)


#: Hugging Face models of tests/importers/test_torch_zoo.py, one per family of ops: rotary
#: decoders, soft-capping, a selective scan, an encoder-decoder, speech, integer argmax,
#: slice writes, NHWC pads, channels_last convolutions, ceil-mode pooling, a mixture of
#: experts.
ZOO_ON_GPU = (
    "llama", "gemma2", "mamba", "t5", "whisper", "wav2vec2", "clip_text", "funnel", "swin",
    "convnext", "segformer", "efficientnet", "mixtral",
)  # fmt: skip


def zoo_models_match_eager(gpu, names=ZOO_ON_GPU, streams=4):
    """Hugging Face models (every one imports with no opaque kernel) run fused as CUDA
    graphs on ``streams`` streams give eager's outputs within the zoo test's tolerance."""
    from tests.importers.test_torch_zoo import assert_eagers, imported

    for name in names:
        model = imported(name)
        plan = build_plan(model.graph, max_streams=streams, fusion=True)
        with gpu.executor(CudaGraphExecutor, plan) as ex:
            got, _ = ex.run(model.inputs)
        assert_eagers(model.outputs_from(got), model, f"zoo model {name!r} on {streams} streams")


def test_zoo_models_match_eager(gpu):
    if pytest is not None:
        pytest.importorskip("transformers")
    zoo_models_match_eager(gpu)


# Ops whose integer inputs index another input: every probe axis has 2 or more elements,
# so index 1 is in range for each.
# ops whose integer inputs are indices or offsets (1: in range on every probe's shapes; a
# grouped_mm's offsets of 1 put its first row in group 0 and leave the others 0)
_INDEXING = ("embedding", "gather", "index_select", "index_put", "scatter_value", "grouped_mm")
# Outputs against the simulator, by dtype: integers and bool exactly; floats within RTOL
# (float32), or within two units in the last place of a half type (both sides compute in
# float32 and round once: a libm ulp there can move a half result by one of its ulps).
_HALF_RTOL = {"float16": 2.0**-9, "bfloat16": 2.0**-6}


def probe_suite(labels=None):
    """One graph holding, side by side, the probe kernel of each label (all by default) of
    tests/ops/test_dtypes.py's PROBES (every library op with CUDA C, in every input dtype
    its rule takes, on small shapes), its inputs by name (floats standard normal, integers
    1 to 9, indices 1) and each output's dtype by name."""
    from oxiwork.reference import generated_input
    from tests.ops.test_dtypes import PROBES

    b = GraphBuilder()
    inputs, dtypes = {}, {}
    chosen = [(k, lab, g) for k, (lab, g) in enumerate(PROBES) if labels is None or lab in labels]
    assert labels is None or len(chosen) == len(labels), "a label names no probe"
    for k, label, g in chosen:
        (node,) = g.kernels()
        ins = []
        for j, bid in enumerate(node.inputs):
            buf = g.buffer(bid)
            name = f"p{k}_in{j}"
            ins.append(
                b.alloc_external_buffer(name, buf.size_bytes, dtype=buf.dtype, shape=buf.shape)
            )
            if buf.dtype in ("float32", "float16", "bfloat16"):
                inputs[name] = generated_input(buf, seed=k)
            elif node.op in _INDEXING or node.op.startswith("index_"):
                inputs[name] = np.ones(buf.array_shape, np.dtype(buf.dtype))
            else:
                rng = np.random.default_rng([k, j])
                inputs[name] = rng.integers(1, 10, buf.array_shape).astype(np.dtype(buf.dtype))
        (obid,) = node.outputs
        o = g.buffer(obid)
        out = b.alloc_buffer(f"p{k}_out", o.size_bytes, dtype=o.dtype, shape=o.shape)
        dtypes[f"p{k}_out"] = (label, o.dtype)
        kb = b.add_kernel(f"p{k}", node.config.grid[0], node.config.block[0]).op(node.op)
        kb = kb.inputs(ins).outputs([out])
        if node.params:
            kb = kb.params(**dict(node.params))
        kb.finish()
    return b.build(), inputs, dtypes


def library_ops_match_the_simulator(gpu, labels=None):
    """Every library op, in every input dtype it takes, computes on the device what the
    simulator (its numpy reference) computes: all probes in one CUDA graph."""
    graph, inputs, dtypes = probe_suite(labels)
    plan = build_plan(graph, max_streams=1, fusion=False)
    want = _simulate(plan, inputs)
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        got, _ = ex.run(inputs)
    bad = []
    for name, (label, dt) in sorted(dtypes.items()):
        a, w = np.asarray(got[name]).reshape(-1), np.asarray(want[name]).reshape(-1)
        if dt not in ("float32", "float16", "bfloat16"):
            ok = np.array_equal(a, w)
        else:
            a, w = a.astype(np.float32), w.astype(np.float32)
            ok = np.allclose(a, w, rtol=_HALF_RTOL.get(dt, RTOL), atol=ATOL, equal_nan=True)
        if not ok:
            bad.append(f"{label}: gpu {a[:6]!r} vs simulator {w[:6]!r}")
    assert not bad, f"{len(bad)} of {len(dtypes)} op probes differ:\n" + "\n".join(bad)


def test_every_library_op_matches_the_simulator(gpu):
    library_ops_match_the_simulator(gpu)


def test_replay_with_new_inputs(gpu):
    plan = build_plan(random_op_dag(5, 16), max_streams=4)
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        for seed in range(4):
            got, timings = ex.run(seed=seed)
            _assert_same(got, _simulate(plan, seed=seed), f"replay {seed}")
            assert timings.gpu_ms > 0
        assert ex.instantiations == 1


def test_update_params_and_update(gpu):
    x = np.linspace(-1, 1, 1024, dtype=np.float32)
    plan = build_plan(quick_start(), fusion=False)
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        scale = next(s for s in plan.steps if s.name == "scale")
        ex.update_params(scale.node, alpha=-3.0)
        got, _ = ex.run({"input": x})
        np.testing.assert_allclose(got["output"], -3 * np.maximum(x, 0), rtol=1e-6)
        assert ex.update(plan) == "updated"  # same topology: in place
        got, _ = ex.run({"input": x})
        np.testing.assert_allclose(got["output"], 2 * np.maximum(x, 0), rtol=1e-6)
        assert ex.update(build_plan(quick_start(), fusion=True)) == "reinstantiated"
        got, _ = ex.run({"input": x})
        np.testing.assert_allclose(got["output"], 2 * np.maximum(x, 0), rtol=1e-6)


def test_host_callbacks_run_on_every_replay(gpu):
    count = []
    b = GraphBuilder()
    x = b.alloc_buffer("x", 4096)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, 4096, dst=x)
    cb = b.add_host_callback("tick", lambda: count.append(1))
    b.chain([up, cb])
    plan = build_plan(b.build())
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        for _ in range(3):
            ex.run({"x": np.zeros(1024, np.float32)})
    assert len(count) == 3


def test_to_dot(gpu, tmp_path=None):
    import tempfile

    path = os.path.join(tmp_path or tempfile.mkdtemp(), "graph.dot")
    with gpu.executor(CudaGraphExecutor, build_plan(quick_start())) as ex:
        ex.to_dot(path)
    with open(path) as f:
        assert "digraph" in f.read()


def _megabyte_plan():
    b = GraphBuilder()
    n = 1 << 20  # 1 MiB buffers: a leaked arena or staging block is easy to see
    x, y = b.alloc_buffer("x", n), b.alloc_buffer("y", n)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, n, dst=x)
    k = b.add_kernel("relu", 1024, 256).inputs([x]).outputs([y]).finish()
    down = b.add_memcpy("down", MemcpyDir.DeviceToHost, n, src=y)
    b.chain([up, k, down])
    return build_plan(b.build())


def test_no_device_memory_growth_over_1000_cycles(gpu):
    plan = _megabyte_plan()
    dev = Device.open(gpu.device, Driver(gpu.driver))  # keeps the context alive between cycles
    try:
        for _ in range(10):  # warm-up: module cache, allocator pools
            with gpu.executor(CudaGraphExecutor, plan) as ex:
                ex.run()
        free_before, _ = dev.memory_info()
        for _ in range(gpu.cycles):
            ex = gpu.executor(CudaGraphExecutor, plan)
            ex.run()
            ex.close()
        free_after, _ = dev.memory_info()
    finally:
        dev.release()
    growth = free_before - free_after
    assert growth < 16 << 20, (
        f"device memory shrank by {growth / 2**20:.1f} MiB over {gpu.cycles} cycles"
    )


def test_graph_nodes_match_the_simulator(gpu):
    # child graphs, IF/IF-else/WHILE/SWITCH conditionals (the set-condition kernels linked
    # with libcudadevrt) and graph-owned memory, on random graphs
    for seed in range(6):
        graph, inputs = build_control_graph(seed, 6)
        for streams in (1, 3):
            plan = build_plan(graph, max_streams=streams)
            with gpu.executor(CudaGraphExecutor, plan) as ex:
                got, _ = ex.run(inputs)
            _assert_same(got, _simulate(plan, inputs), f"seed {seed}, max_streams={streams}")


def test_while_bound_raises_on_the_gpu(gpu):
    from oxiwork.error import IterationLimit

    b = GraphBuilder()
    c, one, d = (b.alloc_buffer(n, 4) for n in ("c", "one", "d"))
    b.add_memcpy("up c", MemcpyDir.HostToDevice, 4, dst=c)
    b.add_memcpy("up one", MemcpyDir.HostToDevice, 4, dst=one)
    loop = b.body()
    loop.add_kernel("sub", 1, 1).inputs([c, one]).outputs([d]).finish()
    loop.add_kernel("relu", 1, 1).inputs([d]).outputs([c]).finish()
    b.add_while("count down", c, loop, max_iterations=4)
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 4, src=c)
    plan = build_plan(b.build())
    one_ = np.float32([1])
    with gpu.executor(CudaGraphExecutor, plan) as ex:
        got, _ = ex.run({"c": np.float32([4]), "one": one_})  # exactly the bound: fine
        assert float(got["c"][0]) == 0.0
        try:
            ex.run({"c": np.float32([9]), "one": one_})
        except IterationLimit as e:
            assert "max_iterations=4" in str(e)
        else:
            raise AssertionError("a WHILE past its bound must raise IterationLimit")


def test_a_false_check_fails_the_run_on_the_gpu(gpu):
    """A kernel of op ``check`` (an imported torch._check) is read back after every run: a
    false condition raises CheckFailed naming it, before any output is handed back; a
    true one runs as any plan, on both executors."""
    from oxiwork.error import CheckFailed
    from oxiwork.executor.streams import StreamExecutor

    b = GraphBuilder()
    ids = b.alloc_buffer("ids", 32, dtype="int64", shape=(4,))
    x, y = b.alloc_buffer("x", 16), b.alloc_buffer("y", 16)
    big, ok = (b.alloc_buffer(n, 4, dtype="bool", shape=(4,)) for n in ("big", "ok"))
    b.add_memcpy("up ids", MemcpyDir.HostToDevice, 32, dst=ids)
    b.add_memcpy("up x", MemcpyDir.HostToDevice, 16, dst=x)
    b.add_kernel("ids <= 16", 1, 32).op("le_scalar").params(other=16).inputs([ids]).outputs(
        [big]
    ).finish()
    b.add_kernel("check ids <= 16", 1, 32).op("check").inputs([big]).outputs([ok]).finish()
    b.add_kernel("twice", 1, 32).op("scale").params(alpha=2).inputs([x]).outputs([y]).finish()
    b.add_memcpy("down", MemcpyDir.DeviceToHost, 16, src=y)
    plan = build_plan(b.build())
    xs = np.float32([1, 2, 3, 4])
    for cls in (CudaGraphExecutor, StreamExecutor):
        with gpu.executor(cls, plan) as ex:
            got, _ = ex.run({"ids": np.int64([1, 2, 16, 0]), "x": xs})
            assert got["y"].tolist() == [2, 4, 6, 8] and got["ok"].all()
            try:
                ex.run({"ids": np.int64([1, 17, 3, 0]), "x": xs})
            except CheckFailed as e:
                assert "'check ids <= 16'" in str(e) and "false" in str(e)
            else:
                raise AssertionError("a false check must raise CheckFailed")


def _main() -> int:
    """Run the tests without pytest: each test_* with the device, report, exit code."""
    reason = probe(0)
    if reason is not None:
        print(f"SKIP all GPU tests: no usable GPU: {reason}")
        return 0
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn(Target(0))
                print(f"PASS {name}")
            except Exception as e:
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{failed} failed" if failed else "all GPU tests passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
