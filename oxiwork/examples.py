"""Example graphs: the quick start, random op DAGs for property tests, a transformer block,
and large synthetic graphs for benchmarks. All are built through :class:`GraphBuilder`.

Example
-------
>>> from oxiwork.examples import quick_start, random_op_dag, synthetic
>>> quick_start().num_nodes
4
>>> random_op_dag(0, 12).num_nodes >= 12
True
>>> synthetic(1000, "layered").num_nodes
1000
"""

from __future__ import annotations

import math
import random
import warnings

from oxiwork.builder import GraphBuilder
from oxiwork.error import GraphWarning, InvalidArgument
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, MemcpyDir, NodeId

__all__ = ["quick_start", "random_op_dag", "synthetic", "transformer_block"]

_THREADS = 256


def _blocks(n_elements: int) -> int:
    return max(1, min(65535, math.ceil(n_elements / _THREADS)))


def quick_start() -> ComputeGraph:
    """The seed's quick start: upload -> relu -> scale -> download on 4096-byte buffers.

    ``scale`` uses its default ``alpha=2.0``. Fusion turns relu and scale into one kernel
    and drops the intermediate buffer ``mid``.

    >>> g = quick_start()
    >>> [n.name for n in g.nodes]
    ['upload', 'relu', 'scale', 'download']
    >>> [b.name for b in g.buffers]
    ['input', 'mid', 'output']
    """
    b = GraphBuilder()
    x = b.alloc_buffer("input", 4096)
    mid = b.alloc_buffer("mid", 4096)
    y = b.alloc_buffer("output", 4096)
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096, dst=x)
    k0 = b.add_kernel("relu", 4, 256, 0).fusible(True).inputs([x]).outputs([mid]).finish()
    k1 = b.add_kernel("scale", 4, 256, 0).fusible(True).inputs([mid]).outputs([y]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096, src=y)
    b.chain([up, k0, k1, down])
    return b.build()


class _Dag:
    """Bookkeeping for the generators: a builder plus buffers grouped by shape."""

    def __init__(self) -> None:
        self.b = GraphBuilder()
        self.count = 0
        self.sizes: dict[BufferId, int] = {}  # bytes per buffer

    def buf(self, shape: tuple[int, ...], prefix: str = "t", external: bool = False) -> BufferId:
        self.count += 1
        size = 4 * math.prod(shape)
        name = f"{prefix}{self.count}"
        if external:
            bid = self.b.alloc_external_buffer(name, size, shape=shape)
        else:
            bid = self.b.alloc_buffer(name, size, shape=shape)
        self.sizes[bid] = size
        return bid

    def kernel(
        self,
        op: str,
        ins: list[BufferId],
        out: BufferId,
        *,
        name: str | None = None,
        fusible: bool = True,
        **params: float,
    ) -> NodeId:
        n = self.sizes[out] // 4
        kb = self.b.add_kernel(name or op, _blocks(n), _THREADS).op(op).fusible(fusible)
        if params:
            kb = kb.params(**params)
        return kb.inputs(ins).outputs([out]).finish()

    def upload(self, shape: tuple[int, ...], prefix: str = "x") -> BufferId:
        bid = self.buf(shape, prefix)
        self.b.add_memcpy(
            f"upload_{prefix}{self.count}", MemcpyDir.HostToDevice, 4 * math.prod(shape), dst=bid
        )
        return bid

    def download(self, bid: BufferId) -> NodeId:
        size = self.sizes[bid]
        return self.b.add_memcpy(f"download_{int(bid)}", MemcpyDir.DeviceToHost, size, src=bid)

    def build(self) -> ComputeGraph:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", GraphWarning)
            return self.b.build()


_UNARY = ("relu", "scale", "neg", "exp", "tanh", "sigmoid", "gelu", "copy", "log")
_BINARY = ("add", "sub", "mul", "div")
_ROWWISE = ("softmax", "layer_norm")
_REDUCE = ("sum", "max")


def random_op_dag(
    seed: int,
    n: int,
    *,
    rows: int = 4,
    cols: int = 8,
    p_nonfusible: float = 0.1,
    p_copy: float = 0.05,
    p_download: float = 0.15,
    reductions: bool = True,
    matmul: bool = True,
) -> ComputeGraph:
    """A random, evaluable DAG of about ``n`` kernels over float32 buffers.

    Inputs are uploaded (HostToDevice) ``[rows, cols]`` buffers and an external bias of
    ``cols`` elements; each kernel applies a random op (element-wise, bias_add,
    softmax/layer_norm, sum/max into ``[rows]`` buffers, matmul with an external
    ``[cols, cols]`` weight) to recently made buffers, so chains, fan-outs and diamonds
    all occur. A fraction of kernels is marked non-fusible, some buffers are downloaded
    (DeviceToHost) or copied DeviceToDevice. Every kernel has an op, so the reference
    evaluator can compute every buffer. The same ``seed`` gives the same graph.

    >>> g = random_op_dag(3, 20)
    >>> sum(1 for k in g.kernels()) == 20
    True
    """
    rng = random.Random(seed)
    d = _Dag()
    full = (rows, cols)
    red = (rows,)
    pools: dict[tuple[int, ...], list[BufferId]] = {full: [], red: []}
    for _ in range(rng.randint(1, 3)):
        pools[full].append(d.upload(full))
    bias = d.buf((cols,), "bias", external=True)
    weight = d.buf((cols, cols), "w", external=True) if matmul else None

    def pick(shape: tuple[int, ...]) -> BufferId:
        pool = pools[shape]
        # favour recent buffers: long chains and local diamonds, like real models
        return pool[-1 - min(len(pool) - 1, int(rng.expovariate(0.7)))]

    for _ in range(n):
        shape = full if not pools[red] or rng.random() < 0.8 else red
        r = rng.random()
        fusible = rng.random() >= p_nonfusible
        if shape == full and reductions and r < 0.08:
            op = rng.choice(_REDUCE)
            out = d.buf(red)
            d.kernel(op, [pick(full)], out, fusible=fusible)
            pools[red].append(out)
            continue
        out = d.buf(shape)
        if shape == full and reductions and r < 0.16:
            d.kernel(rng.choice(_ROWWISE), [pick(full)], out, fusible=fusible)
        elif shape == full and weight is not None and r < 0.2:
            d.kernel("matmul", [pick(full), weight], out, fusible=fusible)
        elif shape == full and r < 0.3:
            d.kernel("bias_add", [pick(full), bias], out, fusible=fusible)
        elif r < 0.55:
            d.kernel(rng.choice(_BINARY), [pick(shape), pick(shape)], out, fusible=fusible)
        else:
            op = rng.choice(_UNARY)
            params = {"alpha": round(rng.uniform(-2, 2), 3)} if op == "scale" else {}
            d.kernel(op, [pick(shape)], out, fusible=fusible, **params)
        pools[shape].append(out)
        if rng.random() < p_copy:
            dst = d.buf(shape, "c")
            d.b.add_memcpy(
                f"d2d_{int(dst)}", MemcpyDir.DeviceToDevice, 4 * math.prod(shape), src=out, dst=dst
            )
            pools[shape].append(dst)
        if rng.random() < p_download:
            d.download(out)
    d.download(pools[full][-1])
    return d.build()


def _layer(
    d: _Dag,
    x: BufferId,
    li: int,
    tokens: int,
    d_model: int,
    d_ff: int,
    heads: int,
) -> BufferId:
    """One pre-norm transformer layer (Vaswani et al. 2017; pre-norm as in GPT-2)."""
    dh = d_model // heads
    full, ff = (tokens, d_model), (tokens, d_ff)

    def w(shape: tuple[int, ...], name: str) -> BufferId:
        return d.buf(shape, f"L{li}_{name}", external=True)

    def k(
        op: str, ins: list[BufferId], shape: tuple[int, ...], name: str, **params: float
    ) -> BufferId:
        out = d.buf(shape, f"L{li}_{name}_")
        d.kernel(op, ins, out, name=f"L{li}.{name}", **params)
        return out

    h = k("layer_norm", [x], full, "ln1")
    h = k("bias_add", [h, w((d_model,), "ln1_beta")], full, "ln1_bias")
    outs = []
    for hd in range(heads):
        q = k("matmul", [h, w((d_model, dh), f"wq{hd}")], (tokens, dh), f"q{hd}")
        q = k("bias_add", [q, w((dh,), f"bq{hd}")], (tokens, dh), f"q{hd}_bias")
        kk = k("matmul", [h, w((d_model, dh), f"wk{hd}")], (tokens, dh), f"k{hd}")
        kk = k("bias_add", [kk, w((dh,), f"bk{hd}")], (tokens, dh), f"k{hd}_bias")
        v = k("matmul", [h, w((d_model, dh), f"wv{hd}")], (tokens, dh), f"v{hd}")
        v = k("bias_add", [v, w((dh,), f"bv{hd}")], (tokens, dh), f"v{hd}_bias")
        kt = k("transpose", [kk], (dh, tokens), f"k{hd}_t")
        s = k("matmul", [q, kt], (tokens, tokens), f"scores{hd}")
        s = k("scale", [s], (tokens, tokens), f"scores{hd}_scale", alpha=1.0 / math.sqrt(dh))
        p = k("softmax", [s], (tokens, tokens), f"probs{hd}")
        outs.append(k("matmul", [p, v], (tokens, dh), f"ctx{hd}"))
    # concatenation of heads folded into per-head output projections summed together
    proj = None
    for hd, o in enumerate(outs):
        part = k("matmul", [o, w((dh, d_model), f"wo{hd}")], full, f"proj{hd}")
        proj = part if proj is None else k("add", [proj, part], full, f"proj_sum{hd}")
    assert proj is not None
    a = k("bias_add", [proj, w((d_model,), "bo")], full, "proj_bias")
    x = k("add", [x, a], full, "resid1")
    h = k("layer_norm", [x], full, "ln2")
    h = k("bias_add", [h, w((d_model,), "ln2_beta")], full, "ln2_bias")
    h = k("matmul", [h, w((d_model, d_ff), "w1")], ff, "ff1")
    h = k("bias_add", [h, w((d_ff,), "b1")], ff, "ff1_bias")
    h = k("gelu", [h], ff, "gelu")
    h = k("matmul", [h, w((d_ff, d_model), "w2")], full, "ff2")
    h = k("bias_add", [h, w((d_model,), "b2")], full, "ff2_bias")
    return k("add", [x, h], full, "resid2")


def transformer_block(
    n_layers: int = 8,
    *,
    tokens: int = 64,
    d_model: int = 64,
    d_ff: int = 256,
    heads: int = 2,
) -> ComputeGraph:
    """A stack of ``n_layers`` pre-norm transformer layers: a realistic op DAG.

    Each layer: layer_norm, per-head q/k/v matmuls with bias_add, transpose, scores
    matmul, scale, softmax, context matmul, output projection, residual add, layer_norm,
    feed-forward (matmul, bias_add, gelu, matmul, bias_add) and a second residual. Weights
    are external buffers; the activations are uploaded and the result downloaded. With
    the defaults (2 heads) a layer has 37 kernels: 8 layers give 296 kernels and 298 nodes.

    >>> g = transformer_block(2)
    >>> len(g.kernels())
    74
    """
    d = _Dag()
    x = d.upload((tokens, d_model), "x")
    for li in range(n_layers):
        x = _layer(d, x, li, tokens, d_model, d_ff, heads)
    d.download(x)
    return d.build()


def synthetic(n: int, shape: str = "chain", seed: int = 0) -> ComputeGraph:
    """A graph of exactly ``n`` nodes for benchmarks (1k, 10k, 100k...).

    - ``"chain"``: upload, ``n - 2`` alternating relu/scale kernels, download;
    - ``"layered"``: an upload, then layers of about ``sqrt(n)`` kernels, each reading one
      or two buffers of the previous layer (random, seeded), and a download;
    - ``"transformer"``: transformer layers (small shapes) until ``n`` is nearly reached,
      padded with a relu chain to exactly ``n``.

    >>> synthetic(10, "chain").num_nodes
    10
    >>> synthetic(500, "transformer").num_nodes
    500
    """
    builders = {"chain": _chain, "layered": _layered, "transformer": _transformer}
    if shape not in builders:
        raise InvalidArgument(
            f"unknown synthetic shape {shape!r}; use one of {', '.join(builders)}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 4:
        raise InvalidArgument(f"synthetic graphs need n >= 4 nodes, got {n!r}")
    return builders[shape](n, seed)


_SMALL = (4, 64)  # 1 KiB buffers: big graphs stay cheap to evaluate


def _pad_chain(d: _Dag, x: BufferId, count: int) -> BufferId:
    for i in range(count):
        out = d.buf(_SMALL)
        d.kernel("relu" if i % 2 == 0 else "scale", [x], out)
        x = out
    return x


def _chain(n: int, seed: int) -> ComputeGraph:
    d = _Dag()
    x = d.upload(_SMALL)
    d.download(_pad_chain(d, x, n - 2))
    return d.build()


def _layered(n: int, seed: int) -> ComputeGraph:
    rng = random.Random(seed)
    d = _Dag()
    prev = [d.upload(_SMALL)]
    kernels = n - 2
    width = max(1, math.isqrt(kernels))
    made = 0
    while made < kernels:
        layer = []
        for _ in range(min(width, kernels - made)):
            out = d.buf(_SMALL)
            if len(prev) > 1 and rng.random() < 0.5:
                a, b = rng.sample(prev, 2)
                d.kernel(rng.choice(_BINARY[:3]), [a, b], out)
            else:
                d.kernel(rng.choice(("relu", "scale", "tanh", "sigmoid")), [rng.choice(prev)], out)
            layer.append(out)
            made += 1
        prev = layer
    # the last layer's other buffers stay as sinks; one download closes the graph
    d.download(prev[-1])
    return d.build()


def _transformer(n: int, seed: int) -> ComputeGraph:
    d = _Dag()
    tokens, d_model, d_ff, heads = 4, 8, 16, 2
    per_layer = 37
    x = d.upload((tokens, d_model), "x")
    li = 0
    while 2 + (li + 1) * per_layer <= n:
        x = _layer(d, x, li, tokens, d_model, d_ff, heads)
        li += 1
    rest = n - 2 - li * per_layer
    for i in range(rest):
        out = d.buf((tokens, d_model))
        d.kernel("relu" if i % 2 == 0 else "gelu", [x], out)
        x = out
    d.download(x)
    return d.build()
