"""Dump a Workbench's synced state as JSON (binary traits base64) for the widget benchmark.

Usage: ``python bench/widget_state.py <nodes> <shape> <out.json> [--eager | --no-passes]``; prints the
seconds the kernel side took as one JSON line.

By default the workbench opens progressively: ``out.json`` is the state the constructor
synced (the input graph's DAG, pass views pending), and ``out.loaded.json`` holds the traits
that the frontend's ``load_passes`` request then changed. ``--eager`` builds the whole
pipeline in the constructor (``progressive=False``, the behaviour before progressive
opening) and writes only ``out.json``.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxiwork.examples import synthetic
from oxiwork.widget import Workbench

# Every trait the Workbench itself syncs (not anywidget's plumbing), so the stand-in model
# holds what the real one would, including traits added later.
SYNCED = tuple(sorted(Workbench.class_own_traits(sync=True)))


def state_of(w: Workbench) -> dict[str, Any]:
    state = {}
    for k in SYNCED:
        v = getattr(w, k)
        state[k] = {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
    return state


def main() -> None:
    nodes, shape, out = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    eager = "--eager" in sys.argv[4:]
    # --no-passes: only the first sync (the 50,000-node run measures drawing, not the pipeline).
    no_passes = "--no-passes" in sys.argv[4:]
    t0 = time.perf_counter()
    graph = synthetic(nodes, shape)
    t1 = time.perf_counter()
    w = Workbench(graph, progressive=not eager)
    t2 = time.perf_counter()
    first = state_of(w)
    out.write_text(json.dumps(first))
    row = {"nodes": graph.num_nodes, "edges": len(graph.edges), "generate_s": t1 - t0,
           "workbench_s": t2 - t1, "state_bytes": out.stat().st_size}  # fmt: skip
    if not eager and not no_passes:
        # What the kernel does when the frontend asks for the passes after its first draw.
        t3 = time.perf_counter()
        reply = w.handle_message({"type": "load_passes", "request_id": "bench"})
        row["load_passes_s"] = time.perf_counter() - t3
        if reply["type"] != "ok":
            raise SystemExit(f"load_passes failed: {reply['message']}")
        loaded = {k: v for k, v in state_of(w).items() if v != first[k]}
        loaded_file = out.with_suffix(".loaded.json")
        loaded_file.write_text(json.dumps(loaded))
        row["loaded_bytes"] = loaded_file.stat().st_size
    print(json.dumps({**row, **w.timings}))


if __name__ == "__main__":
    main()
