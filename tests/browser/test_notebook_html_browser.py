"""A workbench notebook saved as HTML opens offline (issue 15, problem 10).

The notebook is executed and exported with the command the README gives (``jupyter
nbconvert --to oxiwork --execute``, here with the exporter's class path, which needs no
installed entry point), then opened from ``file://`` in Debian's Chromium with the network
off and every request refused and counted: the DAG must be drawn from the saved state, no
request may leave the page, and the pass slider must switch to the last stage (the memory
chart drawn) with no kernel. Screenshots at 1280x800 go to tests/browser/artifacts.

Needs ``/usr/bin/chromium``, Node 20, ``widget_js/node_modules`` and the built bundle; a
missing one fails the test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from oxiwork.export.notebook import EMBED_JS, OfflineHTMLExporter

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CHROMIUM = os.environ.get("OXIWORK_CHROMIUM", "/usr/bin/chromium")
STATE = re.compile(
    r'<script type="application/vnd.jupyter.widget-state\+json">\s*(.*?)\s*</script>', re.S
)


SMALL = (
    "from oxiwork import Workbench\nfrom oxiwork.examples import transformer_block\n"
    "w = Workbench(transformer_block(2))\nw"
)
# A stock transformers GPT-2 built from its config (random weights, no download), 20
# layers of a small width: a ~660-node import, kernels named by module path.
GPT2 = """import torch
from transformers import GPT2Config, GPT2Model
from oxiwork import Workbench
from oxiwork.importers.torch import from_module
torch.manual_seed(0)
cfg = GPT2Config(n_layer=20, n_embd=64, n_head=4, vocab_size=128, n_positions=32,
                 use_cache=False, bos_token_id=0, eos_token_id=0)
model = from_module(GPT2Model(cfg).eval(), (torch.randint(0, 128, (1, 16)),))
w = Workbench(model)
w"""


def _export(tmp_path: Path, code: str = SMALL) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# A saved workbench\n\nA formula stays TeX: $x^2$."),
        nbformat.v4.new_code_cell(code),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    src = tmp_path / "saved.ipynb"
    nbformat.write(nb, src)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}  # fmt: skip
    jupyter = Path(sys.executable).with_name("jupyter")
    proc = subprocess.run(
        [str(jupyter), "nbconvert", "--to", f"{OfflineHTMLExporter.__module__}.OfflineHTMLExporter",
         "--execute", str(src)],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / "saved.html"


def _open(html: Path, shot: str, script: str = "notebook_offline.mjs") -> dict:
    """The JSON line ``script`` prints after opening ``html`` offline (screenshot ``shot``)."""
    artifacts = HERE / "artifacts"
    artifacts.mkdir(exist_ok=True)
    proc = subprocess.run(
        ["node", str(HERE / script), str(html), str(artifacts / shot)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_saved_notebook_shows_the_workbench_offline(tmp_path: Path) -> None:
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: apt-get install -y chromium"
    assert shutil.which("node"), "node not found"
    assert (ROOT / "widget_js/node_modules/playwright-core").exists(), "run `npm ci` in widget_js"
    assert EMBED_JS.exists(), "build the widget: cd widget_js && node build.mjs"
    html = _export(tmp_path)
    text = html.read_text(encoding="utf-8")
    # No script or stylesheet from anywhere: the only URLs left are in CSS comments.
    assert not re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', text)
    # The saved state holds the bundle and every stage of the pipeline.
    state = json.loads(STATE.search(text).group(1))["state"]
    (ours,) = [m["state"] for m in state.values() if "view" in m["state"]]
    assert "owColumn" in ours["_esm"] and ours["view"]["pending"] is False
    titles = [st["dag"]["title"] for st in ours["saved_stages"]["stages"]]
    assert titles[0] == "input graph" and titles[-1] == "after memory"

    res = _open(html, "saved_notebook.png")
    assert res["requests"] == [], res["requests"]
    assert res["console_errors"] == [] and res["page_errors"] == []
    assert res["saved_widgets"] == 1
    assert res["dag"]["nodes"] == 76 and res["dag"]["drawn"] > 0  # transformer_block(2)
    assert res["passes"] == "ready"
    # The slider's last stop, from the saved stages: its DAG and its memory chart.
    assert "after memory" in res["after"]["title"] and res["after"]["drawn"] > 0
    assert res["after"]["nodes"] == len(ours["saved_stages"]["stages"][-1]["dag"]["names"])
    assert res["after"]["rects"] > 0
    assert "saved with the notebook" in res["status"]


def test_a_700_node_gpt2_import_opens_readable(tmp_path: Path) -> None:
    # Issue 10: Workbench(from_module(model, (x,))) on a real model; the DAG groups the
    # kernels by module path (h.0 ... h.19) and opens at a legible scale.
    html = _export(tmp_path, GPT2)
    res = _open(html, "gpt2_import.png")
    assert res["requests"] == [] and res["console_errors"] == [] and res["page_errors"] == []
    assert 600 <= res["dag"]["nodes"] <= 800, res["dag"]
    # Legible: it opens on a readable part (labelled boxes), not all 700 nodes as dots.
    assert 30 <= res["dag"]["drawn"] < res["dag"]["nodes"], res["dag"]
    # One collapsible group per transformer layer at the first module level.
    assert res["group_depths"] >= 3 and res["groups"] >= 20, res
    assert res["groups_drawn"] < res["dag"]["drawn"] + res["dag"]["nodes"]
    assert "after memory" in res["after"]["title"]


def test_the_entry_point_names_the_exporter() -> None:
    # `jupyter nbconvert --to oxiwork` finds the exporter through this entry point.
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split('[project.entry-points."nbconvert.exporters"]', 1)[1].split("\n[", 1)[0]
    module, name = re.search(r'^oxiwork = "([\w.]+):(\w+)"$', section, re.M).groups()
    assert f"{module}.{name}" == f"{OfflineHTMLExporter.__module__}.OfflineHTMLExporter"


BODIES = "from oxiwork import Workbench\nfrom oxiwork import course\nw = Workbench(course.countdown_branch())\nw"  # fmt: skip


def test_a_conditional_body_opens_and_closes_on_its_badge(tmp_path: Path) -> None:
    # Issue 16: a WHILE node's body is a collapsed badge under it; a click draws the body's
    # nodes in a framed cluster, a second click closes it again.
    from oxiwork import course
    from oxiwork.widget.viewmodel import dag_section

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} not found: apt-get install -y chromium"
    assert EMBED_JS.exists(), "build the widget: cd widget_js && node build.mjs"
    bodies = dag_section(course.countdown_branch())[0]["bodies"]
    html = _export(tmp_path, BODIES)
    res = _open(html, "dag_bodies.png", "bodies_offline.mjs")
    assert res["page_errors"] == [] and res["console_errors"] == [], res
    assert res["before"]["bodies"] == len(bodies) and res["before"]["open"] == 0, res
    assert res["before"]["drawn"] == 0
    # The first body (the WHILE's) opened: exactly its nodes drawn, by name.
    assert res["after"]["open"] == 1, res
    assert res["after"]["drawn"] == len(bodies[0]["names"]), res
    assert res["after"]["names"].split("|") == bodies[0]["names"]
    assert res["closed"]["open"] == 0 and res["closed"]["drawn"] == 0, res
