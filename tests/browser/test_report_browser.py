"""The offline HTML report in Debian's Chromium: no console error, no network request,
every view present as SVG, names shown as text (a hostile name included, never run).

Needs ``/usr/bin/chromium`` (scripts/test.sh installs it), Node 20 and
``widget_js/node_modules`` (``npm ci`` in widget_js); a missing one fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.examples import transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.export.html import VIEW_IDS, save_report

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("OXIWORK_CHROMIUM", "/usr/bin/chromium")
HOSTILE = '<img src=x onerror=alert(1)> & "quoted"'


def _open(path: Path, shot: Path) -> dict:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: apt-get install -y chromium"
    assert shutil.which("node"), "node not found"
    assert (ROOT / "widget_js/node_modules/playwright-core").exists(), "run `npm ci` in widget_js"
    proc = subprocess.run(
        ["node", str(HERE / "report_offline.mjs"), str(path), str(shot)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _hostile_graph():
    b = GraphBuilder()
    x = b.alloc_buffer("in", 4096)
    y = b.alloc_buffer("out", 4096)
    up = b.add_memcpy("upload", MemcpyDir.HostToDevice, 4096)
    k = b.add_kernel(HOSTILE, 4, 256, 0).op("relu").inputs([x]).outputs([y]).finish()
    down = b.add_memcpy("download", MemcpyDir.DeviceToHost, 4096)
    b.chain([up, k, down])
    return b.build()


@pytest.mark.parametrize("which", ["transformer", "hostile"])
def test_report_opens_offline(which: str, tmp_path: Path) -> None:
    graph = transformer_block() if which == "transformer" else _hostile_graph()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = save_report(
            ExecutionPlan.build(graph), tmp_path / f"{which}.html", title=f"{which} report"
        )
    artifacts = HERE / "artifacts"
    artifacts.mkdir(exist_ok=True)
    res = _open(path, artifacts / f"report_{which}.png")
    assert res["console_errors"] == [] and res["page_errors"] == []
    assert res["requests"] == []
    assert res["scripts"] == 0
    assert [v["id"] for v in res["views"]] == [f"view-{v}" for v in VIEW_IDS]
    assert all(v["svg"] >= 1 and v["texts"] > 0 for v in res["views"]), res["views"]
    names = {n.name for n in graph.nodes}
    shown = set(res["svg_text"])
    if which == "hostile":
        assert HOSTILE in res["text"]  # in the tables, as text
        assert HOSTILE in shown  # and in the graphviz views
    else:
        assert len(names & shown) >= 0.9 * len(names)  # the DAG view names (nearly) every node
