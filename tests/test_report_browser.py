"""The report in a real browser (headless Chromium from disk): no request, no console error, no script runs.

Needs /usr/bin/chromium (Debian's `chromium` package) and playwright (test extra); skips with the
reason otherwise. `.ci/run` installs both and prints how many of these ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from asaptrace.advise.candidates import candidates
from tests._browser import BROWSER_MARKS, watched_page
from tests._cli import run_cli
from tests._report_helpers import hostile_store

pytestmark = BROWSER_MARKS
#: Figures of a report, each drawn into an SVG by plotly when the page has run.
N_FIGURES = 7


@pytest.fixture(scope="module")
def page():
    with watched_page(width=1300, height=900, local=("file:",)) as pg:
        yield pg


def _open(page, path: Path, n_figures: int = N_FIGURES) -> dict:
    for v in page.log.values():
        v.clear()
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("networkidle")
    page.wait_for_function(
        f"document.querySelectorAll('.plot .main-svg').length >= {n_figures}", timeout=30_000
    )
    return page.log


def test_sample_report_opens_offline_and_draws_every_figure(page, coupled_store, tmp_path):
    out = tmp_path / "coupled.html"
    assert run_cli("report", coupled_store.path, "-o", out).code == 0
    log = _open(page, out)
    assert log["external"] == []
    assert log["errors"] == []
    ids = page.eval_on_selector_all("section[id]", "els => els.map(e => e.id)")
    assert ids == [
        "summary",
        "advice",
        "headline",
        "figures",
        "tables",
        "critical-path",
        "provenance",
        "command",
    ]
    # the Advice at the top lists what `asaptrace advise` prints, line for line
    from asaptrace.pipeline import advise_store

    shown = page.eval_on_selector_all("#advice ol.advice li", "els => els.map(e => e.textContent)")
    assert shown == advise_store(coupled_store.path).lines() and len(shown) == len(candidates())
    # the timeline is WebGL, the others SVG; each figure has its traces
    assert page.locator("#fig-timeline .gl-container").count() == 1
    # attention, MoE, other compute, copy, transfer, wait, idle by its three causes
    assert page.evaluate("document.getElementById('fig-group-bars').data.length") == 9


def test_report_with_replay_and_sweep_sections_draws_them_offline(page, coupled_store, tmp_path):
    from asaptrace import pipeline

    replayed = tmp_path / "asap.store"
    pipeline.replay_store(coupled_store.path, "asap", out=replayed)
    results = tmp_path / "sweep.json"
    pipeline.sweep(policies=("default", "asap"), rates=(1.0, 40.0), knobs={"duration_s": 20}, out=results)
    out = tmp_path / "r.html"
    assert (
        run_cli("report", coupled_store.path, "--replay", replayed, "--sweep", results, "-o", out).code == 0
    )
    log = _open(page, out, N_FIGURES + 4)  # + replay steps and waterfall, TTFT curves and p50/p99
    assert log["external"] == [] and log["errors"] == []
    ids = page.eval_on_selector_all("section[id]", "els => els.map(e => e.id)")
    assert ids == [
        "summary",
        "advice",
        "headline",
        "figures",
        "tables",
        "critical-path",
        "replay-1",
        "sweep",
        "provenance",
        "command",
    ]
    assert page.evaluate("document.getElementById('fig-replay-1-recovered').data[0].type") == "waterfall"
    assert page.evaluate("document.getElementById('fig-sweep-quantiles').data.length") == 4


def test_hostile_names_show_as_text_and_run_nothing(page, tmp_path):
    store = hostile_store(tmp_path)
    out = tmp_path / "hostile.html"
    assert run_cli("report", store.path, "-o", out).code == 0
    log = _open(page, out)
    assert log["dialogs"] == [] and log["errors"] == []
    assert page.locator("img").count() == 0  # the file name did not become an element
    assert page.locator("section#summary script, section#provenance script").count() == 0
    summary = page.inner_text("#summary")
    assert "nccl_AllReduce<script>alert" in summary  # shown as the text it is
    assert '"><img src=x onerror=alert(1)>' in page.inner_text("#provenance")
    # the kernel reaches plotly as inert text: its hover label would show the characters
    texts = page.evaluate("[].concat(...document.getElementById('fig-timeline').data.map(t => t.text || []))")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in texts
