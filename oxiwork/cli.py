"""The ``oxiwork`` command line (also ``python -m oxiwork``).

::

    oxiwork lab [--dry-run] [JUPYTER_ARGS...]   open JupyterLab on the workbench notebook
    oxiwork plan FILE [plan options] [--format text|csv|markdown]
    oxiwork simulate FILE [--inputs FILE.npz] [--outputs OUT.npz] [plan options]
    oxiwork render FILE --view memory -o fig.png|svg|pdf [plan options]
    oxiwork report FILE -o report.html [plan options]
    oxiwork export FILE [--json G.json] [--perfetto T.json] [--dot G.dot] [--csv P.csv]
                        [--markdown P.md] [plan options]
    oxiwork [--example NAME | --json FILE] [--streams N] [--memory MODE]
                                              the demo: every stage of one graph, printed

``FILE`` is a graph saved with :meth:`ComputeGraph.to_json` or ``example:NAME`` (one of
:data:`EXAMPLES`). Plan options: ``--max-streams N``, ``--memory auto|heuristic|exact`` (the planner's default, ``auto``),
``--time-limit S`` (exact search), ``--no-fusion``, ``--max-group-size N``.

Errors are one line on stderr (``error: ...``) and exit code 2, never a traceback; names
are printed with control characters escaped. A closed pipe (``oxiwork plan g.json | head``)
ends the command quietly.

Example
-------
>>> import io, contextlib
>>> buf = io.StringIO()
>>> with contextlib.redirect_stdout(buf):
...     rc = main(["plan", "example:quick_start"])
>>> rc, buf.getvalue().splitlines()[0][:40]
(0, 'ExecutionPlan: 3 steps on 1 stream, 0 ev')
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from oxiwork.error import GraphError, InvalidArgument, MalformedFile
from oxiwork.graph import ComputeGraph
from oxiwork.render._style import format_bytes, plural, printable

__all__ = ["EXAMPLES", "describe", "load_graph", "main"]

# The examples a FILE argument may name as ``example:NAME``.
EXAMPLES: dict[str, Callable[[], ComputeGraph]] = {}


def _examples() -> dict[str, Callable[[], ComputeGraph]]:
    if not EXAMPLES:
        from oxiwork import examples as ex

        EXAMPLES.update(
            {
                "quick_start": ex.quick_start,
                "transformer": ex.transformer_block,
                "random": lambda: ex.random_op_dag(0, 40),
                "chain": lambda: ex.synthetic(1000, "chain"),
                "layered": lambda: ex.synthetic(5000, "layered"),
            }
        )
    return EXAMPLES


BIG = 10_000
"""Graphs with more nodes than this (and exact memory solves) get progress bars."""


def _one_line(e: BaseException) -> str:
    text = " ".join(part.strip() for part in str(e).splitlines() if part.strip())
    return printable(text or type(e).__name__)


def _out(text: str, out: TextIO | None = None) -> None:
    """Print ``text`` with control characters in names escaped (line breaks kept)."""
    print("\n".join(printable(line) for line in text.split("\n")), file=out or sys.stdout)


def load_graph(spec: str) -> ComputeGraph:
    """The graph a FILE argument names: ``example:NAME`` or a path to graph JSON.

    >>> load_graph("example:quick_start").num_nodes
    4
    """
    if spec.startswith("example:"):
        name = spec.split(":", 1)[1]
        known = _examples()
        if name not in known:
            raise InvalidArgument(
                f"unknown example {name!r}; use one of {', '.join('example:' + k for k in known)}"
            )
        return known[name]()
    # Bytes: from_json reports a file that is not UTF-8 as malformed, like bad JSON.
    return ComputeGraph.from_json(Path(spec).read_bytes())


# ---------------------------------------------------------------------- the demo (no command)
def describe(
    graph: ComputeGraph, *, max_streams: int, memory_mode: str, out: TextIO | None = None
) -> int:
    """Print the analyses, the pass trace, the plan and a simulation check of ``graph``
    (``python -m oxiwork`` with no command); 0 when the simulator matches numpy."""
    from oxiwork import cost, reference
    from oxiwork.analysis import dominance, liveness, topo
    from oxiwork.executor.plan import ExecutionPlan
    from oxiwork.executor.simulator import SequentialExecutor, input_names

    out = out or sys.stdout

    def p(*parts: object) -> None:
        _out(" ".join(str(x) for x in parts), out)

    def names(ids: Sequence[Any]) -> str:
        return ", ".join(graph.node(i).name for i in ids)

    p(
        f"graph: {plural(graph.num_nodes, 'node')} ({plural(len(graph.kernels()), 'kernel')}), "
        f"{plural(len(graph.buffers), 'buffer')}, {plural(len(graph.edges), 'edge')}"
    )
    # Times from the cost model (H200 defaults), in microseconds.
    t = topo.analyze(graph, cost.node_costs(graph))
    us = 1e6
    levels = t.level_widths
    p(f"\n[topo] {plural(len(levels), 'level')}, widths {list(levels[:12])}")
    path = list(t.critical_path)
    shown = names(path[:8]) + (f", … (+{len(path) - 8} more)" if len(path) > 8 else "")
    p(
        f"[topo] critical path: {plural(len(path), 'node')}, {t.makespan * us:.2f} µs "
        f"(cost model, dependencies only, no launch overheads): {shown}"
    )
    if graph.num_nodes <= 12:
        for nid in graph.topological_order():
            p(
                f"  {graph.node(nid).name:<12} level {t.level[nid]}  "
                f"asap {t.asap[nid] * us:6.2f} µs  alap {t.alap[nid] * us:6.2f} µs  "
                f"slack {t.slack[nid] * us:.2f} µs"
            )

    live = liveness.analyze(graph)
    p(
        f"\n[liveness] max live bytes {live.max_live_bytes:,} B: most bytes live at once in this "
        "(unfused) graph's topological order; fusion removes buffers, so the plan's bounds "
        "below can be lower"
    )
    dom = dominance.dominators(graph)
    pdom = dominance.post_dominators(graph)
    if graph.num_nodes <= 12:
        for nid in graph.topological_order():
            i, j = dom.idom[nid], pdom.idom[nid]
            p(
                f"  {graph.node(nid).name:<12} idom {graph.node(i).name if i is not None else '-':<10}"
                f" ipdom {graph.node(j).name if j is not None else '-'}"
            )

    plan = ExecutionPlan.build(graph, max_streams=max_streams, memory_mode=memory_mode)
    p("\n[passes]")
    for entry in plan.trace:
        p(f"  {entry.summary()}")
        not_fused = entry.artefacts.get("not_fused") if entry.name == "fusion" else None
        if not_fused:
            p(f"  not fused: {len(not_fused)} kernel -> kernel edge(s); for example")
            seen: set[str] = set()
            for (a, b), rule in not_fused.rules().items():
                if rule not in seen and len(seen) < 3:  # one example per rule
                    seen.add(rule)
                    p(f"    {graph.node(a).name} -> {graph.node(b).name}: {not_fused[(a, b)]}")
    p(
        f"\n[plan] {plural(plan.kernel_count_original, 'kernel')} -> {plan.kernel_count_fused} "
        f"after fusion, {plural(plan.num_streams, 'stream')}, {plural(plan.event_count, 'event')}, "
        f"arena {plan.pool_bytes:,} B"
    )
    _memory_lines(plan, p)
    p(plan.summary())

    inputs = {
        name: reference.generated_input(graph.buffer_by_name(name), seed=0)
        for name in input_names(plan)
    }
    stats = SequentialExecutor(plan).run(inputs)
    p(
        f"\n[simulator] {plural(stats.kernels_launched, 'kernel launch', 'kernel launches')}, "
        f"{stats.bytes_copied:,} B copied, steps per stream {list(stats.steps_per_stream)}"
    )
    if stats.outputs is not None:
        ref = reference.evaluate(graph, inputs)
        ok = all(np.allclose(v, ref[k], rtol=1e-5, atol=1e-6) for k, v in stats.outputs.items())
        p(f"[simulator] outputs {sorted(stats.outputs)} match the numpy reference: {ok}")
        return 0 if ok else 1
    return 0


def _memory_lines(plan: Any, p: Callable[..., None]) -> None:
    """The memory pass's figures, one definition each (``MemoryReport``'s names)."""
    rep = plan.memory
    if rep is None:
        return
    p(
        f"[memory] arena {rep.arena_bytes:,} B = {rep.ratio:.3f} x lower_bound; "
        f"lower_bound {rep.lower_bound:,} B (schedule-aware, no safe arena is smaller: the "
        f"larger of the next two); liveness_lower_bound {rep.liveness_lower_bound:,} B (most "
        f"bytes live at once over the issue order); conflict_lower_bound "
        f"{rep.conflict_lower_bound:,} B (buffers no event orders, which need disjoint bytes)"
    )


# ---------------------------------------------------------------------- commands
def _plan_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("FILE", help="graph JSON (ComputeGraph.to_json) or example:NAME")
    ap.add_argument("--max-streams", type=int, default=4, metavar="N")
    ap.add_argument("--memory", choices=["auto", "heuristic", "exact"], default="auto")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="seconds the exact memory search may take")  # fmt: skip
    ap.add_argument("--no-fusion", action="store_true")
    ap.add_argument("--max-group-size", type=int, default=16, metavar="N")


def _build(args: argparse.Namespace, *, what: str = "plan") -> Any:
    """Load FILE and plan it, with a progress bar on long work."""
    from tqdm import tqdm

    from oxiwork.executor.plan import ExecutionPlan

    graph = load_graph(args.FILE)
    long = graph.num_nodes > BIG or args.memory != "heuristic"
    # disable=None: the bar shows on a terminal only, never in pipes, files or tests.
    with tqdm(total=2, desc=what, unit="stage", disable=None if long else True,
              file=sys.stderr, leave=False) as bar:  # fmt: skip
        bar.set_postfix_str(f"{graph.num_nodes:,} nodes: fusion, streams, memory")
        bar.update(1)
        plan = ExecutionPlan.build(
            graph,
            max_streams=args.max_streams,
            fusion=not args.no_fusion,
            max_group_size=args.max_group_size,
            memory_mode=args.memory,
            memory_time_limit=args.time_limit,
        )
        bar.update(1)
    return plan


def _cmd_plan(args: argparse.Namespace) -> int:
    from oxiwork.export.table import plan_csv, plan_markdown

    plan = _build(args)
    if args.format == "csv":
        sys.stdout.write(plan_csv(plan))
    elif args.format == "markdown":
        sys.stdout.write(plan_markdown(plan))
    else:
        _out(plan.summary())
        _memory_lines(plan, _out)
    return 0


def _load_inputs(path: str | None) -> dict[str, np.ndarray] | None:
    if path is None:
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise MalformedFile(
            f"{path}: not a readable .npz of arrays ({e}); write it with numpy.savez"
        ) from None


def _cmd_simulate(args: argparse.Namespace) -> int:
    from oxiwork import reference
    from oxiwork.executor.simulator import SequentialExecutor

    inputs = _load_inputs(args.inputs)
    plan = _build(args, what="simulate")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = SequentialExecutor(plan).run(inputs)
    for w in caught:
        _out(f"note: {w.message}", sys.stderr)
    _out(
        f"simulated {plural(len(plan.steps), 'step')} on {plural(plan.num_streams, 'stream')}: "
        f"{plural(stats.kernels_launched, 'kernel launch', 'kernel launches')}, "
        f"{stats.bytes_copied:,} B copied"
    )
    if stats.outputs is None:
        _out("no values computed (a kernel has no numpy reference)")
        return 0
    for name, v in sorted(stats.outputs.items()):
        finite = v[np.isfinite(v)] if v.size else v
        rng = (
            f"min {finite.min():.6g}, max {finite.max():.6g}" if finite.size else "no finite values"
        )
        _out(f"  {name}: {v.dtype} {list(v.shape)}, {rng}")
    full = {n: stats_in for n, stats_in in (inputs or {}).items()}
    for n in stats.generated_inputs:
        full[n] = reference.generated_input(plan.original.buffer_by_name(n), seed=0)
    ref = reference.evaluate(plan.original, full)
    ok = all(
        np.allclose(v, ref[k], rtol=1e-5, atol=1e-6, equal_nan=True)
        for k, v in stats.outputs.items()
    )
    _out(f"outputs match the numpy reference: {ok}")
    if args.outputs:
        np.savez(args.outputs, **stats.outputs)
        _out(f"wrote {args.outputs}")
    return 0 if ok else 1


_FORMATS = ("png", "svg", "pdf")


def _cmd_render(args: argparse.Namespace) -> int:
    from oxiwork.render import figures

    suffix = Path(args.output).suffix.lower().lstrip(".")
    if suffix not in _FORMATS:
        raise InvalidArgument(f"-o {args.output!r}: the file must end in .png, .svg or .pdf")
    plan = _build(args, what="render")
    fig = figures.VIEWS[args.view](plan)
    import matplotlib

    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(args.output, format=suffix, dpi=args.dpi)
    _out(f"wrote {args.output} ({args.view} view)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from oxiwork.export.html import save_report

    plan = _build(args, what="report")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # generated inputs for the histograms: expected
        path = save_report(plan, args.output)
    _out(f"wrote {path} ({format_bytes(path.stat().st_size)}, opens offline)")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    outs = {k: getattr(args, k) for k in ("json", "perfetto", "dot", "csv", "markdown")}
    if not any(outs.values()):
        raise InvalidArgument("say what to export: --json, --perfetto, --dot, --csv or --markdown")
    graph = load_graph(args.FILE)
    written = []
    if outs["json"]:
        Path(outs["json"]).write_text(graph.to_json(), encoding="utf-8")
        written.append(outs["json"])
    if outs["dot"]:
        Path(outs["dot"]).write_text(graph.to_dot(color_by=args.color), encoding="utf-8")
        written.append(outs["dot"])
    if outs["perfetto"] or outs["csv"] or outs["markdown"]:
        from oxiwork.export.perfetto import perfetto_trace
        from oxiwork.export.table import plan_csv, plan_markdown

        plan = _build(args, what="export")
        for key, make in (("perfetto", lambda: perfetto_trace(plan, modes=("graph", "stream"))),
                          ("csv", lambda: plan_csv(plan)), ("markdown", lambda: plan_markdown(plan))):  # fmt: skip
            if outs[key]:
                Path(outs[key]).write_text(make(), encoding="utf-8")
                written.append(outs[key])
    _out("wrote " + ", ".join(written))
    return 0


def _notebook() -> Path:
    """The workbench notebook: the repository's, or a new one in the current folder."""
    repo = Path(__file__).resolve().parents[1] / "notebooks" / "workbench.ipynb"
    if repo.exists():
        return repo
    import json

    path = Path.cwd() / "oxiwork-workbench.ipynb"
    if not path.exists():
        src = (
            "from oxiwork import Workbench\nfrom oxiwork.examples import transformer_block\n"
            "Workbench(transformer_block())"
        )
        nb = {
            "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": src}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                        "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5,
        }  # fmt: skip
        path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


def _cmd_lab(args: argparse.Namespace) -> int:
    import importlib.util

    cmd = [sys.executable, "-m", "jupyter", "lab", *args.jupyter_args]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses root unless told (containers, CI)
    cmd.append(str(_notebook()))
    if args.dry_run:
        _out(" ".join(cmd))
        return 0
    if importlib.util.find_spec("jupyterlab") is None:
        raise InvalidArgument("JupyterLab is not installed: pip install 'oxiwork[lab]'")
    sys.stdout.flush()
    os.execv(cmd[0], cmd)  # replaces this process: Ctrl-C goes to JupyterLab
    return 0  # pragma: no cover


def _parser() -> argparse.ArgumentParser:
    from oxiwork.render.dot import COLOR_MODES
    from oxiwork.render.figures import VIEWS

    ap = argparse.ArgumentParser(prog="oxiwork", description="oxiwork: a CUDA-graph workbench.")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    lab = sub.add_parser("lab", help="open JupyterLab on the workbench notebook")
    lab.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    lab.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="passed to jupyter lab")
    lab.set_defaults(fn=_cmd_lab)
    p = sub.add_parser("plan", help="plan a graph and print the plan table")
    _plan_options(p)
    p.add_argument("--format", choices=["text", "csv", "markdown"], default="text")
    p.set_defaults(fn=_cmd_plan)
    s = sub.add_parser("simulate", help="run the plan on the CPU simulator")
    _plan_options(s)
    s.add_argument("--inputs", metavar="FILE.npz", help="input arrays by buffer name")
    s.add_argument("--outputs", metavar="OUT.npz", help="write the outputs here")
    s.set_defaults(fn=_cmd_simulate)
    r = sub.add_parser("render", help="draw one view as PNG, SVG or PDF")
    _plan_options(r)
    r.add_argument("--view", choices=sorted(VIEWS), default="memory")
    r.add_argument("-o", "--output", required=True, metavar="FIG.png|svg|pdf")
    r.add_argument("--dpi", type=int, default=150)
    r.set_defaults(fn=_cmd_render)
    h = sub.add_parser("report", help="write a self-contained offline HTML report")
    _plan_options(h)
    h.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    h.set_defaults(fn=_cmd_report)
    e = sub.add_parser("export", help="write graph JSON, a Perfetto trace, DOT, CSV, markdown")
    _plan_options(e)
    e.add_argument("--json", metavar="GRAPH.json", help="the graph (ComputeGraph.to_json)")
    e.add_argument("--perfetto", metavar="TRACE.json", help="Perfetto / Chrome trace of the plan")
    e.add_argument("--dot", metavar="GRAPH.dot", help="graphviz DOT of the graph")
    e.add_argument("--color", choices=COLOR_MODES, default="kind", help="DOT node colouring")
    e.add_argument("--csv", metavar="PLAN.csv")
    e.add_argument("--markdown", metavar="PLAN.md")
    e.set_defaults(fn=_cmd_export)
    return ap


def _demo(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m oxiwork",
        description="Run a graph through the whole engine and print what each stage found "
        "(commands: lab, plan, simulate, render, report, export; see oxiwork --help).",
    )
    ap.add_argument("--example", choices=["quick_start", "transformer"], default="quick_start")
    ap.add_argument("--json", help="a graph saved with ComputeGraph.to_json()")
    ap.add_argument("--streams", type=int, default=4, help="maximum number of streams")
    ap.add_argument("--memory", choices=["auto", "heuristic", "exact"], default="auto")
    args = ap.parse_args(argv)
    graph = load_graph(args.json) if args.json else load_graph(f"example:{args.example}")
    return describe(graph, max_streams=args.streams, memory_mode=args.memory)


COMMANDS = ("lab", "plan", "simulate", "render", "report", "export")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``oxiwork`` and ``python -m oxiwork``; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
            args = _parser().parse_args(argv)
            return int(args.fn(args))
        return _demo(argv)
    except BrokenPipeError:
        # The reader went away (`oxiwork plan g.json | head`): stop quietly. Point stdout at
        # devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a command killed by it
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (GraphError, OSError, ValueError) as e:
        print(f"error: {_one_line(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # a bug: still one line, but say what it was
        if os.environ.get("OXIWORK_TRACEBACK"):
            raise
        print(
            f"error: internal error ({type(e).__name__}): {_one_line(e)}; please report it "
            "(OXIWORK_TRACEBACK=1 shows the traceback)",
            file=sys.stderr,
        )
        return 2
