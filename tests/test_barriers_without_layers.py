"""Barriers without layers (DLRM, ../shared/data/traces/kineto-dlrm-8rank): its 5 all-to-alls and 3
all-reduces per rank are 8 matched collective instances, and the report and the dashboard's
Barriers page show those 8 — the ones the findings cite — instead of "no barrier wait inside layers"."""

from __future__ import annotations

import re

import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store, report_store


@pytest.fixture(scope="module")
def dlrm_store(shared_data, tmp_path_factory):
    folder = shared_data / "traces" / "kineto-dlrm-8rank"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    return enrich_store(ingest_paths([folder], tmp_path_factory.mktemp("dlrm") / "s", jobs=1))


def test_report_shows_the_eight_instances(dlrm_store, tmp_path):
    out = report_store(dlrm_store.path, tmp_path / "r.html", command="asaptrace report", advice=False)
    html = out.read_text()
    section = html.split('id="table-barrier-by-instance"', 1)[1].split("</table>", 1)[0]
    # 8 instances, numbered 0..7 in arrival order, all in step 10 with 8 ranks each
    assert len(re.findall(r"<tr>", section)) == 1 + 8  # header + one row per instance
    assert "ncclKernel_AllReduce_RING_LL_Sum_float" in section and "(ncclDevComm" not in section
    assert "Barrier wait by rank and collective instance" in html
    assert "no barrier wait inside layers" not in html and "no matched barrier instances" not in html
    # the per-rank ranking replaces the DP-group one: ranks 7, 5 and 4 arrived last (5, 2 and 1 times)
    assert "Wait imposed by each rank" in html
    # no key table is bare headers: every table has rows or a "No rows: <reason>." line
    for block in html.split("<h3 ")[1:]:
        body = block.split("<h3 ", 1)[0]
        if "<table>" in body:
            assert body.count("<tr>") > 1, block[:120]


def test_barriers_page_heatmap_table_and_click(dlrm_store):
    from asaptrace_dashboards.pages import barriers
    from asaptrace_dashboards.state import Stores

    stores = Stores([dlrm_store.path])
    heat, imposed, inst = barriers.barriers_body(stores, "0", "all")
    assert list(heat.figure.data[0].x) == [f"#{i}" for i in range(8)]
    assert list(heat.figure.data[0].y) == [f"r{r}" for r in range(8)]
    assert list(imposed.figure.data[0].y) == ["r4", "r5", "r7"]  # smallest imposed wait first, r7 on top
    cells = [c.children for row in inst.children[1].children[1].children for c in row.children]
    assert len(inst.children[1].children[1].children) == 8
    assert cells[2] == "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    # the step filter keeps them: all 8 are in step 10
    heat10 = barriers.barriers_body(stores, "0", 10)[0]
    assert len(heat10.figure.data[0].x) == 8
    # a click on (r1, #0) opens the first all-to-all: r1 waited longest there (7.62 ms), r7 came last
    fig, arrivals = barriers.instance_detail(stores, "0", "all", {"points": [{"x": "#0", "y": "r1"}]})
    assert "Barrier instance 0" in fig.figure.layout.title.text
    rows = arrivals.children[1].children[1].children
    assert rows[-1].children[1].children == "7" and rows[-1].children[-1].children == "yes"
