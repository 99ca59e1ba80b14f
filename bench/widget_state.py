"""Dump a Workbench's synced state as JSON (binary traits base64) for the widget benchmark.

Usage: ``python bench/widget_state.py <nodes> <shape> <out.json>``; prints the seconds the
kernel side took (graph generation, engine, view-model) as one JSON line.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxiwork.examples import synthetic
from oxiwork.widget import Workbench

SYNCED = ("view", "dag", "selection", "details", "pass_index", "sim_position", "color_mode",
          "memory_mode", "errors", "inspector", "inspector_values")  # fmt: skip


def main() -> None:
    nodes, shape, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    t0 = time.perf_counter()
    graph = synthetic(nodes, shape)
    t1 = time.perf_counter()
    w = Workbench(graph)
    t2 = time.perf_counter()
    state = {}
    for k in SYNCED:
        v = getattr(w, k)
        state[k] = {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
    out.write_text(json.dumps(state))
    print(json.dumps({"nodes": graph.num_nodes, "edges": len(graph.edges),
                      "generate_s": t1 - t0, "workbench_s": t2 - t1, **w.timings,
                      "state_bytes": out.stat().st_size}))  # fmt: skip


if __name__ == "__main__":
    main()
