"""Stock Hugging Face models through the torch importer, the passes and the simulator.

Each model is built from its ``transformers`` default config with random weights (nothing is
downloaded), imported with :func:`oxiwork.importers.torch.from_module`, planned with
``ExecutionPlan.build(graph, max_streams=4, fusion=True)`` and simulated with
``SequentialExecutor``. Per model, in one run:

* nodes of the imported graph (kernels, and the DeviceToHost reads of the outputs);
* opaque kernels (no op of the library computes them; they run the ATen op through torch)
  and the most frequent ATen ops among them;
* kernels after fusion, against ``torch.compile``'s Inductor on the CPU in the same run: its
  generated kernels plus its extern calls (convolutions and matmuls it leaves to a library).
  Inductor's C++ is generated but not compiled (the count needs the code, not the
  binaries, and g++ would take minutes per model on this machine): ``--compile-inductor``
  compiles and runs it too;
* arena of the memory pass, the pass's lower bound, and TFLite's greedy-by-size on the same
  happens-before-safe lifetimes;
* streams and events of the plan; import, plan and simulation time (seconds, one run);
* the simulated outputs against eager: the largest absolute difference over all outputs,
  relative to the largest eager magnitude.

Attention uses transformers' ``eager`` implementation (plain ATen ops, which both oxiwork and
Inductor see) rather than one fused SDPA call; GPT-2 runs without its KV cache.

Usage (``transformers`` is needed by this benchmark only and is in no extra)::

    .venv/bin/pip install transformers
    PYTHONPATH=. .venv/bin/python bench/models.py [--models mobilenet_v2,resnet50,...]
        [--seq 64] [--streams 4] [--no-inductor] [--compile-inductor] [--reasons]

Prints one markdown table row per model as it finishes (``--reasons``: only import, and
tabulate the most frequent reasons why ops are opaque).
"""

from __future__ import annotations

import argparse
import gc
import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from oxiwork import ExecutionPlan, SequentialExecutor
from oxiwork.importers.torch import from_module
from oxiwork.node import NodeKind
from oxiwork.optimizer.memory import greedy_by_size


def _vision(model_cls: str, config_cls: str) -> Callable[[int], tuple[Any, tuple[Any, ...]]]:
    def make(seq: int) -> tuple[Any, tuple[Any, ...]]:
        import transformers

        config = getattr(transformers, config_cls)()
        if hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
        model = getattr(transformers, model_cls)(config)
        size = getattr(config, "image_size", 224)
        return model, (torch.randn(1, 3, size, size),)

    return make


def _text(
    model_cls: str, config_cls: str, **overrides: Any
) -> Callable[[int], tuple[Any, tuple[Any, ...]]]:
    def make(seq: int) -> tuple[Any, tuple[Any, ...]]:
        import transformers

        config = getattr(transformers, config_cls)(**overrides)
        config._attn_implementation = "eager"
        model = getattr(transformers, model_cls)(config)
        ids = torch.randint(0, config.vocab_size, (1, seq), dtype=torch.int64)
        return model, (ids,)

    return make


# cheapest first
MODELS: dict[str, Callable[[int], tuple[Any, tuple[Any, ...]]]] = {
    "mobilenet_v2": _vision("MobileNetV2Model", "MobileNetV2Config"),
    "resnet50": _vision("ResNetModel", "ResNetConfig"),
    "gpt2": _text("GPT2Model", "GPT2Config", use_cache=False),
    "bert_base": _text("BertModel", "BertConfig"),
    "vit_b16": _vision("ViTModel", "ViTConfig"),
}


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def inductor_counts(model: Any, args: tuple[Any, ...], compile_cpp: bool) -> tuple[int, int, float]:
    """(generated kernels, extern calls, seconds) of torch.compile's Inductor on the CPU."""
    import torch._dynamo
    from torch._inductor import async_compile
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    original = async_compile.AsyncCompile.cpp_pybinding
    if not compile_cpp:  # generate the C++ but do not build it: a stub stands for each kernel
        async_compile.AsyncCompile.cpp_pybinding = lambda self, *a, **k: lambda *x, **y: None
    try:
        t0 = time.perf_counter()
        with torch.no_grad():
            _, codes = run_and_get_code(torch.compile(model), *args)
        seconds = time.perf_counter() - t0
    finally:
        async_compile.AsyncCompile.cpp_pybinding = original
    kernels = externs = 0
    for code in codes:
        call = code[code.index("def call(") :] if "def call(" in code else code
        kernels += len(re.findall(r"^\s+cpp_fused_\w+\(", call, re.M))
        externs += len(
            re.findall(
                r"^\s+(?:buf\d+ = )?(?:extern_kernels\.\w+|torch\.ops\.[\w.]+)\(", call, re.M
            )
        )
    return kernels, externs, seconds


def bench(
    name: str, seq: int, streams: int, inductor: bool, compile_cpp: bool, patterns: bool = True
) -> str:
    torch.manual_seed(0)
    module, args = MODELS[name](seq)
    module.eval()
    with torch.no_grad():
        eager = [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*args))]
    model, t_import = timed(from_module, module, args, name=name, patterns=patterns)
    g = model.graph
    kernels = sum(n.kind is NodeKind.KernelLaunch for n in g.nodes)
    top = ", ".join(
        f"{t.removeprefix('aten.').rsplit('.', 1)[0]} {c}"
        for t, c in list(model.opaque_counts().items())[:3]
    )
    plan, t_plan = timed(ExecutionPlan.build, g, max_streams=streams, fusion=True)
    rep = plan.memory
    sizes = {b.id: b.size_bytes for b in plan.graph.buffers}
    greedy = greedy_by_size(
        [(a, e, sizes[b]) for b, (a, e) in rep.intervals.items()], alignment=256
    )
    stats, t_sim = timed(SequentialExecutor(plan).run, model.inputs)
    got = model.outputs_from(stats.outputs)
    scale = max(float(np.abs(w).max()) for w in eager)
    diff = max(float(np.abs(a - w).max()) for a, w in zip(got, eager, strict=True))
    fused, streams_used, events = plan.kernel_count_fused, plan.num_streams, plan.event_count
    if inductor:
        del stats, plan
        gc.collect()
        k, x, t_ind = inductor_counts(module, args, compile_cpp)
        ind = f"{k} + {x} = {k + x} ({t_ind:.0f} s)"
    else:
        ind = "not measured"
    mib = 1 << 20
    return (
        f"| {name} | {g.num_nodes:,} | {kernels:,} | {len(model.opaque):,} "
        f"({100 * len(model.opaque) / kernels:.0f}%: {top}) | {fused:,} | {ind} | "
        f"{rep.arena_bytes / mib:.1f} | {rep.lower_bound / mib:.1f} | "
        f"{greedy.arena_bytes / mib:.1f} | {streams_used} / {events:,} | "
        f"{t_import:.1f} / {t_plan:.1f} / {t_sim:.1f} | {diff / scale:.1e} |"
    )


def reasons(name: str, seq: int, top: int = 6) -> list[str]:
    """The most frequent (ATen op, why it is opaque) pairs of one model (import only)."""
    torch.manual_seed(0)
    module, args = MODELS[name](seq)
    model = from_module(module.eval(), args, name=name)
    counts = Counter((o.target.removeprefix("aten."), o.reason) for o in model.opaque)
    return [f"| {name} | {t} | {c} | {r} |" for (t, r), c in counts.most_common(top)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--seq", type=int, default=64, help="tokens per text input")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--compile-inductor", action="store_true")
    ap.add_argument(
        "--no-patterns",
        action="store_true",
        help="import one kernel per ATen op (from_module(patterns=False): no attention kernel, "
        "clones and zero pads kept)",
    )
    ap.add_argument(
        "--reasons", action="store_true", help="only import, and say why the opaque ops are"
    )
    opts = ap.parse_args()
    torch.set_num_threads(2)
    if opts.reasons:
        print("| model | ATen op | kernels | why opaque |\n|---|---|---:|---|", flush=True)
        for name in opts.models.split(","):
            print("\n".join(reasons(name, opts.seq)), flush=True)
        return
    print(
        "| model | nodes | kernels | opaque | kernels after fusion | Inductor kernels + extern "
        "| arena MiB | lower bound MiB | greedy-by-size MiB | streams / events "
        "| import / plan / simulate s | max diff vs eager (relative) |"
    )
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|---|---:|", flush=True)
    for name in opts.models.split(","):
        try:
            row = bench(
                name, opts.seq, opts.streams, not opts.no_inductor, opts.compile_inductor,
                not opts.no_patterns,
            )  # fmt: skip
        except Exception as e:  # one model's failure must not hide the others' rows
            row = f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:300]} |"
        print(row, flush=True)
        gc.collect()


if __name__ == "__main__":
    main()
