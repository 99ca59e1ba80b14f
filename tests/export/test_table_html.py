"""The plan as CSV/markdown and the offline HTML report."""

from __future__ import annotations

import csv
import io
import re
import warnings
from html.parser import HTMLParser

import pytest

from oxiwork import GraphBuilder, MemcpyDir
from oxiwork.examples import quick_start, random_op_dag, transformer_block
from oxiwork.executor.plan import ExecutionPlan
from oxiwork.export import html as report
from oxiwork.export.table import COLUMNS, plan_csv, plan_markdown, plan_rows

HOSTILE = '<script>alert(1)</script> | `x` & "q"'


def hostile_plan() -> ExecutionPlan:
    b = GraphBuilder()
    x = b.alloc_buffer("<b>buf</b>", 4096)
    y = b.alloc_buffer("out|put", 4096)
    up = b.add_memcpy("up", MemcpyDir.HostToDevice, 4096)
    k = b.add_kernel(HOSTILE, 4, 256, 0).op("relu").inputs([x]).outputs([y]).finish()
    down = b.add_memcpy("down", MemcpyDir.DeviceToHost, 4096)
    b.chain([up, k, down])
    return ExecutionPlan.build(b.build())


class TestTable:
    @pytest.mark.parametrize("seed", [0, 1])
    def test_csv_round_trips_one_row_per_step(self, seed: int) -> None:
        plan = ExecutionPlan.build(random_op_dag(seed, 30), max_streams=3)
        rows = list(csv.DictReader(io.StringIO(plan_csv(plan))))
        assert len(rows) == len(plan.steps) and tuple(rows[0]) == COLUMNS
        for r, st in zip(rows, plan.steps, strict=True):
            assert (int(r["step"]), int(r["stream"]), r["name"]) == (
                st.index,
                int(st.stream),
                st.name,
            )
            assert float(r["start_us"]) <= float(r["end_us"])

    def test_markdown_has_one_line_per_step_and_escapes(self) -> None:
        plan = hostile_plan()
        md = plan_markdown(plan)
        lines = md.splitlines()
        assert len(lines) == 2 + len(plan.steps)
        for line in lines:  # every row has exactly the columns: no pipe leaked from a name
            assert len(re.findall(r"(?<!\\)\|", line)) == len(COLUMNS) + 1
        assert "<script>" not in md and "&lt;script&gt;" in md

    def test_rows_match_the_plan(self) -> None:
        plan = ExecutionPlan.build(quick_start())
        rows = plan_rows(plan)
        assert [r["fuses"] for r in rows] == ["", "relu; scale", ""]
        assert rows[1]["grid"] == "4x1x1"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.ids: list[str] = []
        self.text: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k == "id" and tag == "section":
                self.ids.append(v)
            if k in ("src", "href", "xlink:href") and v and not v.startswith("#"):
                self.urls.append(v)

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture(scope="module")
def transformer_report() -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return report.report_html(ExecutionPlan.build(transformer_block()))


class TestReport:
    def test_every_view_and_nothing_to_fetch(self, transformer_report: str) -> None:
        page = _Page()
        page.feed(transformer_report)
        assert page.ids == [f"view-{v}" for v in report.VIEW_IDS]
        assert not {"script", "link", "img", "iframe", "object"} & set(page.tags)
        assert page.urls == []
        assert "default-src 'none'" in transformer_report
        assert page.tags.count("svg") == len(report.VIEW_IDS)
        assert "not drawn" not in transformer_report
        assert len(transformer_report.encode()) < 5_000_000

    def test_figures_named_with_units(self, transformer_report: str) -> None:
        plan = ExecutionPlan.build(transformer_block())
        for name in ("lower_bound", "liveness_lower_bound", "conflict_lower_bound"):
            value = getattr(plan.memory, name)
            assert re.search(
                rf"<td>{name}</td><td class=n>{value:,}</td><td>B</td>", transformer_report
            )

    def test_names_are_text_and_escaped(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            page_html = report.report_html(hostile_plan(), title=HOSTILE)
        assert "<script>" not in page_html
        page = _Page()
        page.feed(page_html)
        text = "".join(page.text)
        assert HOSTILE in text  # shown, as text
        assert "<b>buf</b>" in text

    def test_missing_dot_leaves_a_note(self, monkeypatch, tmp_path) -> None:
        monkeypatch.setenv("PATH", str(tmp_path))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            page = report.report_html(ExecutionPlan.build(quick_start()))
        assert page.count("not drawn") == 4 and "apt-get install graphviz" in page
        assert 'id="view-memory"' in page

    def test_workbench_save_html(self, tmp_path) -> None:
        from oxiwork.widget import Workbench

        w = Workbench(quick_start())
        path = w.save_html(tmp_path / "r.html")
        assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
