"""The advice at a glance and the timeline's rank labels as a person sees them, in headless Chromium.

* the coupled sample's report and dashboard Overview lead with the advice figure: every what-if
  that applies named on its axis, its range drawn as a whisker as wide as its low–high, the
  recommended one starred and the rule that chose it said;
* DLRM (a training run: nothing applies) shows the reason in the figure's place, in both;
* the timeline names each rank at the vertical middle of its lanes (its name sat on its first lane,
  beside the previous rank's wait band).

Needs /usr/bin/chromium and playwright (test extra), and for DLRM ../shared/data; skips with the
reason otherwise.
"""

from __future__ import annotations

import polars as pl
import pytest

from tests._browser import BROWSER_MARKS, watched_page
from tests._cli import run_cli
from tests._dashboard_helpers import DASH_IDLE, GRAPHS_DRAWN, LiveDash

pytestmark = BROWSER_MARKS
DLRM_REASON = "this run holds no prefill to replay (1 training step): the what-ifs model MoE prefill"
#: how far (px) a drawn label may sit from where it belongs
PX = 3


@pytest.fixture(scope="module")
def dlrm_store(shared_data, tmp_path_factory):
    from asaptrace.pipeline import build_store

    return build_store(
        [shared_data / "traces" / "kineto-dlrm-8rank"], tmp_path_factory.mktemp("dlrm") / "dlrm.store"
    )


@pytest.fixture(scope="module")
def page():
    with watched_page(width=1300, height=900, local=("file:", "http://127.0.0.1")) as pg:
        yield pg


def _report(page, store, out) -> None:
    assert run_cli("report", store.path, "-o", out).code == 0
    page.goto(out.resolve().as_uri())
    page.wait_for_load_state("networkidle")
    page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 7", timeout=30_000)


def _rows(page, fig_id: str) -> list[str]:
    """A figure's row names as drawn, top to bottom."""
    return page.evaluate(
        """(id) => [...document.querySelectorAll('#' + id + ' .ytick text')]
        .map(e => [e.getBoundingClientRect().top, e.textContent]).sort((a, b) => a[0] - b[0]).map(a => a[1])""",
        fig_id,
    )


def _whiskers(page, fig_id: str) -> list[dict]:
    """Each offline bar's drawn whisker: the axis label of its row and its pixel ends."""
    return page.evaluate(
        """(id) => {
        const gd = document.querySelector('#' + id + ' .js-plotly-plot') || document.getElementById(id);
        const xa = gd._fullLayout.xaxis;
        const bar = gd.data[0];
        const paths = [...gd.querySelectorAll('.barlayer .errorbar path.xerror')];
        return paths.map((p, i) => { const b = p.getBBox();
            return {row: bar.y[i], x0: b.x, x1: b.x + b.width, px_per_unit: xa._m}; });
        }""",
        fig_id,
    )


def test_the_report_leads_with_the_advice_at_a_glance(page, coupled_store, tmp_path):
    from asaptrace.pipeline import advise_store

    j = advise_store(coupled_store.path).to_json()
    _report(page, coupled_store, tmp_path / "r.html")
    assert page.log["errors"] == [] and page.log["external"] == []
    # the figure is the Advice section's first element, right after the summary
    first = page.evaluate("document.querySelector('#advice h2').nextElementSibling.querySelector('div').id")
    assert first == "fig-advice"
    ticks = _rows(page, "fig-advice")
    applying = [w for w in j["whatifs"] if w["applies"]]
    assert len(ticks) == len(applying) == 5
    # every what-if named; the one winning back most offline starred (no online answer in a report)
    best = max(applying, key=lambda w: w["recovered_ns"])
    assert ticks == [("★ " if w is best else "") + w["label"] for w in applying]
    assert "chosen by time won back offline" in page.inner_text("#fig-advice")
    # each range drawn: a whisker as wide as high − low, in the axis' pixels (the unit is ms)
    drawn = {w["row"]: w for w in _whiskers(page, "fig-advice")}
    for w in applying:
        row = drawn[("★ " if w is best else "") + w["label"]]
        want = (w["recovered_high_ns"] - w["recovered_low_ns"]) / 1e6 * row["px_per_unit"]
        assert abs((row["x1"] - row["x0"]) - want) <= PX, (w["name"], row, want)


def test_where_nothing_applies_the_reason_stands_in_the_figures_place(page, dlrm_store, tmp_path):
    _report(page, dlrm_store, tmp_path / "dlrm.html")
    assert page.locator("#fig-advice").count() == 0
    text = page.inner_text("#advice > p")
    assert text == f"No what-if applies to this store: {DLRM_REASON}."


def test_timeline_labels_sit_at_the_middle_of_their_ranks_lanes(
    page, coupled_store, coupled_diagnosis, tmp_path
):
    from asaptrace.pipeline import timeline_of
    from asaptrace.viz.timeline import worst_window

    t = coupled_diagnosis.tables
    step, layers = worst_window(t["barrier_by_rank_layer"], t["step_breakdown"])
    spans = timeline_of(coupled_store, coupled_diagnosis, step=step, layers=layers)
    # the lanes as the figure orders them: by DP group and rank, the wait band (stream −1) last
    order = (
        spans.select("rank", "dp_group", "stream")
        .unique()
        .sort(["dp_group", "rank", pl.col("stream") == -1, "stream"])
        .with_row_index("lane")
    )
    middle = {
        r: (lo + hi) / 2
        for r, lo, hi in order.group_by("rank")
        .agg(pl.col("lane").min().alias("lo"), pl.col("lane").max().alias("hi"))
        .iter_rows()
    }
    assert any(
        hi > lo
        for _, lo, hi in order.group_by("rank")
        .agg(pl.col("lane").min(), pl.col("lane").max().alias("hi"))
        .iter_rows()
    )
    _report(page, coupled_store, tmp_path / "t.html")
    labels = page.evaluate(
        """() => { const gd = document.getElementById('fig-timeline'), ya = gd._fullLayout.yaxis;
        const top = gd.querySelector('.main-svg').getBoundingClientRect().top;
        const lane = (v) => top + ya._offset + ya.l2p(v);
        return [...gd.querySelectorAll('.ytick text')].map(e => { const b = e.getBoundingClientRect();
            return {text: e.textContent, y: b.top + b.height / 2, lane0: lane(0), lane1: lane(1)}; }); }"""
    )
    assert len(labels) == 32
    for lab in labels:
        rank = int(lab["text"].split(" · ")[0][1:])
        want = lab["lane0"] + middle[rank] * (lab["lane1"] - lab["lane0"])
        assert abs(lab["y"] - want) <= PX, (lab, middle[rank])


@pytest.fixture(scope="module")
def served(coupled_store, dlrm_store):
    from asaptrace_dashboards import create_app

    with LiveDash(create_app([coupled_store.path, dlrm_store.path])) as live:
        yield live


def _settle(page) -> None:
    page.wait_for_load_state("networkidle")
    page.wait_for_function(DASH_IDLE, timeout=60_000)
    page.wait_for_function(GRAPHS_DRAWN, timeout=60_000)


def test_the_overview_leads_with_the_same_figure_and_says_why_on_dlrm(page, served, coupled_store):
    page.goto(served.url + "/")
    page.wait_for_selector("#overview-advice-figure .main-svg", timeout=60_000)
    _settle(page)
    # above the findings, as in the report; the same rows
    order = page.evaluate(
        "[...document.querySelectorAll('#overview-advice-figure, #overview-findings')].map(e => e.id)"
    )
    assert order == ["overview-advice-figure", "overview-findings"]
    ticks = _rows(page, "overview-advice-figure")
    assert len(ticks) == 5 and sum(t.startswith("★ ") for t in ticks) == 1
    assert len(_whiskers(page, "overview-advice-figure")) == 5
    # DLRM: the reason in the figure's place
    page.goto(served.url + "/")
    page.click("#store")
    page.get_by_role("option", name="dlrm.store").click()
    page.wait_for_selector("#overview-advice-none", timeout=60_000)
    assert page.inner_text("#overview-advice-none") == f"No what-if applies to this store: {DLRM_REASON}."
    assert page.locator("#overview-advice-figure").count() == 0
    assert page.log["errors"] == [] and page.log["external"] == []
