"""The dashboard in headless Chromium: every page renders with no console error and no request
leaving 127.0.0.1; a heatmap click updates the instance timeline; the Replay page runs asap; the
Compare page shows two stores; an unreadable store shows its message. Screenshots of every page go
to the session's tmp dir (their path is printed with -s).

Needs /usr/bin/chromium and playwright (test extra); skips with the reason otherwise (`.ci/run`
installs both and fails when these skip). One browser page for the whole module (plotly.js
compiles once).
"""

from __future__ import annotations

from itertools import pairwise
from urllib.parse import urlsplit

import pytest

from asaptrace.advise.candidates import candidates
from tests._browser import BROWSER_MARKS, watch, watched_page
from tests._dashboard_helpers import DASH_IDLE, GRAPHS_DRAWN, LiveDash
from tests._report_helpers import hostile_store

pytestmark = BROWSER_MARKS
PAGES = ["/", "/timeline", "/barriers", "/imbalance", "/overlap", "/replay", "/sweep", "/compare"]


@pytest.fixture(scope="module")
def served(coupled_store, sample_run, tmp_path_factory):
    """The coupled and disaggregated samples, a store that does not exist (key "2") and one whose
    kernel and file names are HTML injections (key "3")."""
    from asaptrace_dashboards import create_app

    missing = tmp_path_factory.mktemp("gone") / "missing.store"
    hostile = hostile_store(tmp_path_factory.mktemp("hostile"))
    app = create_app([coupled_store.path, sample_run("disaggregated")[1].path, missing, hostile.path])
    with LiveDash(app) as live:
        yield live


@pytest.fixture(scope="module")
def page(served):
    with watched_page(width=1400, height=1000, local=(served.url,)) as pg:
        yield pg


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("dashboard-screenshots")


def settle(page, timeout: int = 30_000) -> None:
    page.wait_for_load_state("networkidle")
    page.wait_for_function(DASH_IDLE, timeout=timeout)
    page.wait_for_function(GRAPHS_DRAWN, timeout=timeout)


def pick_store(page, label: str) -> None:
    page.click("#store")
    page.get_by_role("option", name=label).click()
    settle(page)


def open_tab(page, url: str):
    """A second tab (its own browser context) of the same browser, logging errors with the first."""
    tab = page.context.browser.new_page(viewport={"width": 1400, "height": 1000})
    origin = urlsplit(url)
    watch(tab, page.log, (f"{origin.scheme}://{origin.netloc}",))
    tab.goto(url)
    settle(tab)
    return tab


def test_every_page_renders_with_no_error_and_no_external_request(page, served, shots):
    for path in PAGES:
        page.goto(served.url + path)
        settle(page)
        name = path.strip("/") or "overview"
        assert page.locator(f"#page-{name}").count() == 1, path
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    print(f"screenshots in {shots}")
    assert page.log["errors"] == []
    assert page.log["external"] == []
    # the Overview lists the findings and the headline numbers of the coupled sample
    page.goto(served.url + "/")
    settle(page)
    assert "32 ranks" in page.inner_text("#overview-provenance")
    assert page.locator("#overview-headline tbody tr").count() == 11


def test_the_overview_shows_the_advice_the_report_and_the_cli_show(page, served, coupled_store):
    from asaptrace.pipeline import advise_store

    page.goto(served.url + "/")
    page.wait_for_selector("#overview-advice-lines li", timeout=60_000)
    settle(page)
    shown = page.eval_on_selector_all("#overview-advice-lines li", "els => els.map(e => e.textContent)")
    assert shown == advise_store(coupled_store.path).lines() and len(shown) == len(candidates())
    assert page.locator("#overview-advice-table tbody tr").count() == len(candidates())
    assert page.log["errors"] == []


def test_heatmap_click_shows_that_instance_on_the_timeline(page, served, shots):
    page.goto(served.url + "/barriers")
    settle(page)
    assert page.locator("#bw-timeline").count() == 0
    box = page.locator("#bw-heatmap .nsewdrag").first.bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.3)
    page.wait_for_selector("#bw-timeline .main-svg", timeout=20_000)
    settle(page)
    title = page.locator("#bw-timeline .gtitle").text_content()
    assert title.startswith("Barrier instance ") and "waited longest" in title
    # the arrival order lists every rank of the instance, the first arrival 0 after the first
    rows = page.locator("#bw-arrivals tbody tr")
    assert rows.count() == 32
    assert float(rows.first.locator("td").nth(3).inner_text()) == 0
    page.screenshot(path=str(shots / "barriers-click.png"), full_page=True)
    assert page.log["errors"] == []


def test_the_timeline_adds_the_critical_path_over_its_lanes(page, served):
    page.goto(served.url + "/timeline")
    settle(page)
    traces = "document.querySelector('#tl-figure .js-plotly-plot').data.map(t => t.name)"
    page.wait_for_function(f"{traces}.includes('critical path')", timeout=30_000)
    names = page.evaluate(traces)
    # once, last (over the lanes), and the caption says what the black line is
    assert names.count("critical path") == 1 and names[-1] == "critical path" and "barrier wait" in names
    assert "The black line is the step's critical path" in page.inner_text("#tl-critical-note")
    assert page.log["errors"] == []


def test_replay_page_runs_asap_in_the_background_and_shows_the_result(page, served, shots):
    page.goto(served.url + "/replay")
    settle(page)
    # the progress indicator may show for under a second on the sample: record that it appeared
    page.evaluate(
        """() => { window.sawProgress = false; new MutationObserver(() => {
             if (document.querySelector('#rp-progress progress')) window.sawProgress = true;
           }).observe(document.body, {subtree: true, childList: true}); }"""
    )
    page.click("#rp-run")
    page.wait_for_selector("#rp-waterfall .main-svg", timeout=60_000)
    settle(page)
    summary = page.inner_text("#rp-summary")
    assert summary.startswith("asap (") and "measured" in summary and "makespan" in summary
    assert page.locator("#rp-steps .main-svg").count() >= 1
    assert "done in" in page.inner_text("#rp-progress")
    assert page.evaluate("window.sawProgress")
    page.screenshot(path=str(shots / "replay-result.png"), full_page=True)
    assert page.log["errors"] == []


def test_compare_page_shows_both_stores(page, served):
    page.goto(served.url + "/compare")
    settle(page)
    head = page.inner_text("#cmp-body h4")
    assert "A = " in head and "B = " in head
    assert (
        page.locator("#cmp-bars-a .main-svg").count() >= 1
        and page.locator("#cmp-bars-b .main-svg").count() >= 1
    )
    assert "mean step time" in page.inner_text("#cmp-overall")


def test_an_unreadable_store_shows_its_message_and_the_others_still_work(page, served):
    page.goto(served.url + "/")
    settle(page)
    pick_store(page, "missing.store")
    msg = page.inner_text("#overview-body .message-error")
    assert msg.startswith("cannot read store missing.store:") and "no such store" in msg
    pick_store(page, "coupled")  # the sample store's folder is named after the sample
    assert page.locator("#overview-findings").count() == 1
    assert page.log["errors"] == []


def test_trace_names_show_as_text_and_run_nothing(page, served):
    page.goto(served.url + "/")
    settle(page)
    pick_store(page, "hostile.store")
    assert "nccl_AllReduce<script>alert" in page.inner_text("#overview-findings")
    page.goto(served.url + "/timeline")  # the tab keeps its store across a reload
    settle(page)
    assert page.locator("#page script, #page img").count() == 0
    texts = page.evaluate(
        "[].concat(...document.querySelector('#tl-figure .js-plotly-plot').data.map(t => t.text || []))"
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in texts
    assert page.log["dialogs"] == [] and page.log["errors"] == []
    pick_store(page, "coupled")


def test_two_tabs_follow_their_own_replay(page, served):
    tab = open_tab(page, served.url + "/replay")
    try:
        page.goto(served.url + "/replay")
        settle(page)
        tab.click("#rp-policy")
        tab.get_by_role("option", name="coupled", exact=True).click()
        settle(tab)
        page.click("#rp-run")
        tab.click("#rp-run")
        for p in (page, tab):
            p.wait_for_selector("#rp-summary", timeout=60_000)
            settle(p)
        assert page.inner_text("#rp-summary").startswith("asap (")
        assert tab.inner_text("#rp-summary").startswith("coupled (")
    finally:
        tab.close()
    assert page.log["errors"] == []


def test_barrier_bars_are_sized_and_named_in_the_browser(page, served, shots):
    # the coupled sample's 8 DP groups: every bar named on the axis and at least ROW_PX (28 px)
    # apart, as drawn by plotly in Chromium (not only as the figure object asks)
    page.goto(served.url + "/barriers")
    settle(page)
    ranking = page.locator(".js-plotly-plot").nth(1)
    labels = ranking.locator(".ytick text").all_text_contents()
    assert sorted(labels) == [f"DP{g}" for g in range(8)]
    ys = sorted(
        ranking.locator(".ytick text").evaluate_all("els => els.map(e => e.getBoundingClientRect().y)")
    )
    assert min(b - a for a, b in pairwise(ys)) >= 27
    ranking.screenshot(path=str(shots / "barriers-ranking.png"))
