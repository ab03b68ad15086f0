"""The dashboard without a server: layout, routing and every page's callback body called directly
on the 32-rank coupled sample, the job manager (background replay, cancel, two tabs), the sweep
page without a sweep, escaping, the CLI's safe defaults, and callback latency after the first load."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from plotly.utils import PlotlyJSONEncoder

from asaptrace import pipeline
from asaptrace_dashboards import create_app
from asaptrace_dashboards.jobs import Jobs
from asaptrace_dashboards.pages import (
    PAGES,
    barriers,
    compare,
    imbalance,
    overlap,
    overview,
    replay,
    sweep,
    timeline,
)
from asaptrace_dashboards.state import Stores
from tests._cli import run_cli
from tests._report_helpers import SCRIPT_KERNEL, hostile_store

DASHBOARDS = Path(__file__).resolve().parents[1] / "dashboards"


@pytest.fixture(scope="module")
def stores(coupled_store, sample_run, tmp_path_factory):
    """key "0": the coupled sample, "1": the disaggregated sample, "2": a path with no store."""
    missing = tmp_path_factory.mktemp("gone") / "missing.store"
    return Stores([coupled_store.path, sample_run("disaggregated")[1].path, missing])


def _json(component) -> str:
    return json.dumps(component, cls=PlotlyJSONEncoder) if component is not None else ""


def _find(component, id_: str):
    """The component with ``id_`` in a tree (children lists, single children)."""
    if component is None or isinstance(component, (str, int, float)):
        return None
    if isinstance(component, (list, tuple)):
        for c in component:
            hit = _find(c, id_)
            if hit is not None:
                return hit
        return None
    if getattr(component, "id", None) == id_:
        return component
    return _find(getattr(component, "children", None), id_)


# ------------------------------------------------------------------------------------- app and layout
def test_layout_names_stores_by_key_and_loads_nothing_from_outside(coupled_store, tmp_path):
    app = create_app([coupled_store.path, tmp_path / "other.store"])
    assert app.config.serve_locally is True
    assert app.config.external_stylesheets == [] and app.config.external_scripts == []
    picker = _find(app.layout, "store")
    # the browser sees labels and keys, never a path it could send back
    assert [o["value"] for o in picker.options] == ["0", "1"]
    assert str(coupled_store.path) not in _json(app.layout)
    assert [_find(app.layout, f"nav-{p.TITLE.lower()}").href for p in PAGES] == [
        "/",
        "/timeline",
        "/barriers",
        "/imbalance",
        "/overlap",
        "/replay",
        "/sweep",
        "/compare",
    ]
    assert list((DASHBOARDS / "assets").glob("*.css"))  # the stylesheet is served from here


def test_no_module_sets_raw_html():
    sources = "".join(p.read_text() for p in DASHBOARDS.rglob("*.py"))
    assert "dangerously_allow_html" not in sources and "Markdown(" not in sources


def test_routing_renders_each_page_and_refuses_unknown_paths(stores):
    from asaptrace_dashboards.app import route

    by_path = {p.PATH: p for p in PAGES}
    for p in PAGES:
        assert route(stores, p.PATH, by_path).id == f"page-{p.TITLE.lower()}"
    assert "no page at /etc/passwd" in route(stores, "/etc/passwd", by_path).children


# ----------------------------------------------------------------------------------------------- pages
def test_overview_shows_findings_headline_and_provenance(stores, coupled_diagnosis):
    body = overview.overview_body(stores, "0")
    findings = _find(body, "overview-findings")
    rows = findings.children[1].children[1].children
    assert len(rows) == len(coupled_diagnosis.findings)
    headline = {
        r.children[0].children: r.children[2].children
        for r in _find(body, "overview-headline").children[1].children
    }
    assert headline["ranks"] == "32" and headline["steps"] == "2"
    prov = _json(_find(body, "overview-provenance"))
    assert "32 ranks" in prov and "read 287,360 = kept 287,360 + rejected (none)" in prov


def test_an_unreadable_store_says_so_and_the_others_still_work(stores):
    (msg,) = overview.overview_body(stores, "2")
    assert msg.children.startswith("cannot read store missing.store: ") and "no such store" in msg.children
    assert _find(overview.overview_body(stores, "0"), "overview-findings") is not None
    # a key the dashboard was not started with (a path, a traversal) is refused, never opened
    for key in ("3", "../x", "/tmp", None, 0):
        (msg,) = overview.overview_body(stores, key)
        assert msg.children.startswith("unknown store")


def test_a_damaged_store_is_one_line_on_the_page(coupled_store, tmp_path):
    import shutil

    broken = tmp_path / "broken.store"
    shutil.copytree(coupled_store.path, broken)
    (broken / "meta.json").write_text("{not json")
    (msg,) = overview.overview_body(Stores([broken]), "0")
    assert msg.children.startswith("cannot read store broken.store: ") and "\n" not in msg.children


def test_timeline_opens_on_the_worst_window_and_follows_the_selectors(stores):
    steps, step, lo, hi, window, _marks, ranks, focus, msg = timeline.timeline_controls(stores, "0")
    assert [o["value"] for o in steps] == [0, 1] and msg is None
    assert (lo, hi) == (0, 60)  # the sample's 61 layers
    assert window[1] - window[0] == 2 and len(ranks) == 32  # three layers around the largest wait
    assert focus is None  # 32 ranks are all drawn (a bigger run opens on a few: test_timeline_focus)
    fig = timeline.timeline_fig(stores, "0", step, window, None)
    assert f"step {step}, layers {window[0]}–{window[1]}" in fig.layout.title.text
    assert "barrier wait" in {t.name for t in fig.data}
    two = timeline.timeline_fig(stores, "0", step, window, [5, 3])
    assert list(two.layout.yaxis.ticktext) == ["r3 · DP0", "r5 · DP1"]


def test_heatmap_click_picks_the_instance_where_that_rank_waited_longest(stores):
    body = barriers.barriers_body(stores, "0", "all")
    hm = body[0].figure.data[0]
    y, layer = hm.y[7], hm.x[10]
    detail = barriers.instance_detail(stores, "0", "all", {"points": [{"x": layer, "y": y}]})
    fig, arrivals = detail
    title = fig.figure.layout.title.text
    instance = int(title.split(":")[0].removeprefix("Barrier instance "))
    inst = stores.get("0").diag.tables["barrier_instances"]
    rank = int(y.split(" ")[0][1:])
    mine = inst.filter((inst["rank"] == rank) & (inst["layer"] == layer))
    # the chosen instance is one of that rank's in that layer, and none of the others made it wait longer
    chosen = mine.filter(mine["instance"] == instance)
    assert chosen.height == 1 and chosen["wait_ns"][0] == mine["wait_ns"].max()
    assert fig.figure.layout.shapes  # shaded from the first arrival to the release
    # every rank of the instance, in arrival order: first at 0 after the first, last holds the barrier
    rows = arrivals.children[1].children[1].children
    assert len(rows) == inst.filter(inst["instance"] == instance).height
    # (durations in the column's one unit, named in its header; booleans as yes/no: units.format_table)
    head = arrivals.children[1].children[0].children.children
    assert head[3].children.startswith("arrived after the first (")
    assert float(rows[0].children[3].children) == 0 and rows[-1].children[5].children == "yes"
    assert barriers.instance_detail(stores, "0", "all", None)[0].children == barriers.HINT


def test_imbalance_overlap_compare_pages_have_their_figures(stores):
    one = imbalance.imbalance_body(stores, "0", 1)
    assert {t.name for t in one[0].figure.data} >= {"step 1"} and "step 0" not in {
        t.name for t in one[0].figure.data
    }
    assert len(overlap.overlap_body(stores, "0")) == 4  # per device, per rank, per DP group, the table
    body = compare.compare_body(stores, "0", "1")
    # the coupled run beside its ASAP layout: compared, the differences said first (as by `compare`)
    heads = [c.children for c in body if getattr(c, "id", None) is None and isinstance(c.children, str)]
    assert any(h.startswith("A = ") for h in heads) and _find(body, "cmp-bars-b") is not None
    assert "differ in deployment" in _find(body, "cmp-warning-0").children
    overall = {r.children[0].children: r for r in _find(body, "cmp-overall").children[1].children[1].children}
    assert overall["ranks"].children[1].children == "32"
    assert compare.compare_body(stores, "0", "2")[0].children.startswith("cannot read store missing.store")


def test_trace_names_reach_the_page_as_inert_text(tmp_path):
    s = Stores([hostile_store(tmp_path).path])
    _steps, step, *_ = timeline.timeline_controls(s, "0")
    fig = timeline.timeline_fig(s, "0", step, None, None)
    texts = [x for t in fig.data for x in (t.text if t.text is not None else [])]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in texts and SCRIPT_KERNEL not in texts
    # a finding quoting the hostile collective is a text child (React escapes it), never markup
    body = overview.overview_body(s, "0")
    assert "nccl_AllReduce<script>alert" in _json(body)


# ------------------------------------------------------------------------------------------ replay/jobs
def test_replay_form_passes_only_the_policy_knobs():
    mech = ["dual_batch", "super_kernel"]
    assert replay.replay_params("asap", {"attention": "4 x 4", "experts": 16, "m": 3}, mech) == {
        "attention": "4x4",
        "experts": 16,
        "dual_batch": True,
        "overlap": False,
        "super_kernel": True,
    }
    assert replay.replay_params("chunked", {"chunk_tokens": 4096, "experts": 16}, mech) == {
        "chunk_tokens": 4096
    }
    with pytest.raises(ValueError, match="DxT"):
        replay.replay_params("asap", {"attention": "four"}, mech)
    disabled = replay.knob_state("afd-pingpong")
    assert disabled[:4] == (False, False, False, True)  # attention, experts, m on; chunk_tokens off


def _wait(jobs: Jobs, job_id: str, timeout: float = 120) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        st = jobs.status(job_id)
        if st["state"] != "running":
            return st
        time.sleep(0.2)
    raise AssertionError("job did not finish")


def test_two_tabs_replays_run_in_the_background_apart_and_are_cached(stores, coupled_store):
    jobs = Jobs()
    # two tabs start different replays at once; each follows its own job id
    tab_a, _ = replay.start_replay(stores, jobs, "0", "asap", {}, ["dual_batch", "overlap", "super_kernel"])
    tab_b, _ = replay.start_replay(stores, jobs, "0", "coupled", {}, [])
    assert tab_a["id"] != tab_b["id"] and jobs.status(tab_a["id"])["state"] == "running"
    a, b = _wait(jobs, tab_a["id"]), _wait(jobs, tab_b["id"])
    assert (a["state"], b["state"]) == ("done", "done")
    assert a["result"]["policy"] == "asap" and b["result"]["policy"] == "coupled"
    # the worker reported the replay's stages as they started
    assert a["messages"][1] == "extracting the workload" and a["messages"][2].startswith("replaying asap")
    # the same replay in this process gives the same numbers
    direct = pipeline.replay_store(
        coupled_store.path,
        "asap",
        params=replay.replay_params("asap", {}, ["dual_batch", "overlap", "super_kernel"]),
    )
    assert (
        a["result"]["replayed_ns"] == direct.replayed_ns and a["result"]["measured_ns"] == direct.measured_ns
    )
    # the page shows it: summary, steps and waterfall
    shown = replay.replay_result(a["result"])
    assert shown[0].children.startswith("asap (") and _find(shown, "rp-waterfall") is not None
    # asked again with the same parameters: done at once, from the cache
    again, _ = replay.start_replay(stores, jobs, "0", "asap", {}, ["dual_batch", "overlap", "super_kernel"])
    assert (
        jobs.status(again["id"])["state"] == "done" and "cached" in jobs.status(again["id"])["messages"][-1]
    )


def test_a_running_replay_can_be_cancelled(stores):
    jobs = Jobs()
    job, _ = replay.start_replay(stores, jobs, "0", "balanced", {}, [])
    proc = jobs._jobs[job["id"]].process
    assert jobs.cancel(job["id"]) is True
    st = jobs.status(job["id"])
    assert st["state"] == "cancelled" and st["result"] is None
    assert not proc.is_alive()  # the worker is gone, not left running
    assert jobs.cancel(job["id"]) is False and jobs.status("no-such-job") is None


def test_more_runs_than_workers_are_refused_until_one_ends(stores):
    from asaptrace_dashboards.jobs import MAX_RUNNING

    jobs = Jobs()
    started = [
        replay.start_replay(stores, jobs, "0", "chunked", {"chunk_tokens": 1024 * (i + 1)}, [])[0]
        for i in range(MAX_RUNNING)
    ]
    job, msg = replay.start_replay(stores, jobs, "0", "chunked", {"chunk_tokens": 99}, [])
    assert msg.children.startswith(f"{MAX_RUNNING} jobs are running already")
    for j in started:
        jobs.cancel(j["id"])
    job, msg = replay.start_replay(stores, jobs, "0", "chunked", {"chunk_tokens": 99}, [])
    assert msg is None and jobs.cancel(job["id"])


def test_a_replay_on_an_unreadable_store_is_a_message_not_a_job(stores):
    jobs = Jobs()
    _job, msg = replay.start_replay(stores, jobs, "2", "asap", {}, [])
    assert msg.children.startswith("cannot read store missing.store") and jobs._jobs == {}


def test_the_replay_page_says_up_front_when_the_store_has_no_prefill(stores, tmp_path):
    from tests._analysis_helpers import GEMM, RankTrace, ingest, write_traces

    # one decode step (SGLang's annotation) and one kernel: nothing a prefill what-if can replay
    d = RankTrace(rank=0, world=1)
    d.annotation("step[DECODE bs=2 toks=2]", 0, 500)
    d.kernel(GEMM, 100, 100, launch_at=50)
    decode = pipeline.enrich_store(ingest(write_traces(tmp_path / "t", [d]), tmp_path / "s"))
    # the page shows, before any run, the line `asaptrace replay` refuses with
    refusal = run_cli("replay", decode.path).stderr
    note, no_button = replay.applies_note(Stores([decode.path]), "0")
    assert note.id == "rp-no-prefill" and "no prefill to replay (1 decode step)" in note.children
    assert note.children in " ".join(refusal.split()) and no_button
    # a prefill store, or one that cannot be read (the run says why), shows nothing up front
    assert replay.applies_note(stores, "0") == (None, False) == replay.applies_note(stores, "2")


def test_replay_page_says_before_the_click_when_the_policy_needs_more_devices(tmp_path):
    from tests._analysis_helpers import GEMM, RankTrace, ingest, write_traces

    # one device (an SGLang-like serving trace): asap has nothing to split, coupled still replays
    d = RankTrace(rank=0, world=1)
    d.kernel(GEMM, 100, 100, launch_at=50)
    one = Stores([pipeline.enrich_store(ingest(write_traces(tmp_path / "t", [d]), tmp_path / "s")).path])
    refusal = " ".join(run_cli("replay", one.paths[0], "--policy", "asap").stderr.split())
    note, no_button = replay.applies_note(one, "0", "asap")
    assert no_button and "asap does not apply" in note.children and note.children in refusal
    assert _find(replay.layout(), "rp-applies") is not None


# ---------------------------------------------------------------------------------------------- sweep
def test_sweep_page_says_so_when_the_pipeline_has_no_sweep(monkeypatch):
    monkeypatch.delattr(pipeline, "sweep", raising=False)
    page = sweep.layout()
    assert _find(page, "sw-unavailable").children == sweep.UNAVAILABLE
    _job, msg = sweep.start_sweep(Jobs(), ["asap"], "1", 10, "")
    assert msg.children == sweep.UNAVAILABLE


def test_sweep_form_becomes_the_pipeline_call(monkeypatch, coupled_store):
    monkeypatch.delattr(pipeline, "sweep", raising=False)  # this build may or may not have one
    assert not any("sw-result" in k for k in create_app([coupled_store.path]).callback_map)
    monkeypatch.setattr(pipeline, "sweep", lambda **kw: kw, raising=False)
    # with a sweep in the pipeline the page's run, cancel and poll callbacks are wired
    wired = create_app([coupled_store.path]).callback_map
    assert any("sw-result.children" in k for k in wired) and any("sweep-job.data" in k for k in wired)
    page = sweep.layout()
    assert _find(page, "sw-unavailable") is None and _find(page, "sw-run") is not None
    # the choices are the registry's online policies, and the chosen ones the sweep's defaults
    assert {"coupled", "chunked", "asap", "balanced", "asap-no-dual-batch"} <= set(sweep.POLICIES)
    assert "afd-pingpong-m4" in sweep.POLICIES  # its named settings of m too
    assert _find(page, "sw-policies").value == ["coupled", "asap", "chunked"]
    args = sweep.sweep_args(["asap", "coupled"], "1, 2,4", 30, "k_s=1,2")
    assert args == {
        "scenario": "asap-paper",
        "policies": ("coupled", "asap"),  # in the sweep's order: the first is the ratios' baseline
        "rates": (1.0, 2.0, 4.0),
        "knobs": {"duration_s": 30.0},
        "vary": ["k_s=1,2"],
    }
    assert sweep.sweep_args(["asap"], "1", 30, "", 5)["seeds"] == 5  # the median over 5, with the range
    for bad in (
        ([], "1", 30, ""),
        (["asap"], "x", 30, ""),
        (["asap"], "1", 0, ""),
        (["asap"], "1", 30, "", 0),
    ):
        with pytest.raises(ValueError):
            sweep.sweep_args(*bad)


def test_sweep_result_shows_slo_table_curves_and_tornado():
    ms = 1_000_000
    result = {
        "policies": ["default", "asap"],
        "slo_ttft_ns": 1_000 * ms,
        "slo_rps": {"default": 1.5, "asap": None},
        "slo_censored": {"default": False, "asap": False},
        "ratios": {"default": 1.0, "asap": None},
        "curves": {
            "default": [{"rate": 1.0, "mean_ttft_ns": 500 * ms}],
            "asap": [{"rate": 1.0, "mean_ttft_ns": 2_000 * ms}],
        },
        "tornado": [],
        "reading": "SLO-compliant throughput: default 1.50, asap below the lowest rate.",
    }
    shown = sweep.sweep_result(result)
    rows = [
        [td.children for td in r.children] for r in _find(shown, "sw-slo").children[1].children[1].children
    ]
    # the same table as the CLI and the report (views.sweep.sweep_slo_view): RPS, bound (none in
    # this hand-made result: "–", never a made-up one), ratio, the paper's, TTFT @1/s
    assert [r[:4] for r in rows] == [["default", "1.50", "–", "1.00×"], ["asap", "< lowest", "–", "–"]]
    # the question it answers and the legend of its columns
    assert _find(shown, "sw-question").children.startswith("The question: the paper's scenario.")
    assert "bound: the capacity bound" in _find(shown, "sw-slo-legend").children
    assert _find(shown, "sw-curves") is not None and _find(shown, "sw-tornado") is not None


# ------------------------------------------------------------------------------------------- latency
def test_callbacks_answer_well_under_a_second_after_the_first_load(stores):
    stores.get("0")  # the first load (open + diagnose) is paid once
    _steps, _step, lo, _hi, _window, *_ = timeline.timeline_controls(stores, "0")
    calls = {
        "overview": lambda: overview.overview_body(stores, "0"),
        "timeline": lambda: timeline.timeline_fig(stores, "0", 0, [lo, lo + 2], None),
        "barriers": lambda: barriers.barriers_body(stores, "0", "all"),
        "click": lambda: barriers.instance_detail(
            stores, "0", "all", {"points": [{"x": 5, "y": "r3 · DP0"}]}
        ),
        "imbalance": lambda: imbalance.imbalance_body(stores, "0", "all"),
        "overlap": lambda: overlap.overlap_body(stores, "0"),
    }
    for name, call in calls.items():
        t0 = time.perf_counter()
        _json(call())  # and serialised, as Dash sends it
        assert time.perf_counter() - t0 < 1.0, (
            name
        )  # generous: ≈ 0.01–0.1 s measured (benchmarks/dashboard.py)


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_binds_localhost_without_debug_unless_asked(monkeypatch, coupled_store):
    import dash
    import waitress

    from asaptrace_dashboards.server import default_threads

    seen: dict = {}

    class Server:  # what waitress.create_server returns, minus the socket
        effective_port = 8050

        def run(self):
            seen["ran"] = True

    def create_server(app, **kw):
        seen.update(kw, app=app)
        return Server()

    monkeypatch.setattr(waitress, "create_server", create_server)
    monkeypatch.setattr(dash.Dash, "run", lambda self, **kw: seen.update(kw, dash_run=True))
    r = run_cli("dashboard", coupled_store.path)
    assert r.code == 0 and seen["ran"] and "dash_run" not in seen  # waitress, not Dash's own server
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8050 and seen["threads"] == default_threads()
    assert "serving 1 store(s) at http://127.0.0.1:8050/" in r.stdout and "warning" not in r.stderr
    seen.clear()
    r = run_cli("dashboard", coupled_store.path, "--threads", "3")
    assert seen["threads"] == 3
    seen.clear()
    r = run_cli("dashboard", coupled_store.path, "--host", "0.0.0.0", "--port", "9000", "--debug")
    assert seen["dash_run"] and "ran" not in seen  # --debug: Dash's own server
    assert seen["host"] == "0.0.0.0" and seen["debug"] is True and seen["port"] == 9000
    assert "warning: serving on 0.0.0.0" in r.stderr
    help_text = run_cli("dashboard", "--help").stdout
    assert "127.0.0.1" in help_text and "--host 0.0.0.0" in help_text and "--debug" in help_text


def test_importing_the_cli_does_not_import_dash():
    import subprocess
    import sys

    code = "import sys, asaptrace.cli.app; print('dash' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_replay_summary_says_recovered_or_slower():
    ms = 1_000_000
    base = {
        "policy": "asap",
        "reference_policy": "coupled",
        "deployment": {"kind": "disaggregated", "groups": 4, "tp": 4, "experts": 16, "devices": 32},
        "steps": [{"step": 0, "measured_ns": 10 * ms, "reference_ns": 10 * ms, "replayed_ns": 8 * ms}],
        "measured_ns": 10 * ms,
        "replayed_ns": 8 * ms,
        "baseline_ns": 10 * ms,
        "recovered_ns": {"barrier_wait_removed": 2 * ms},
        "recovered_total_ns": 2 * ms,
        "error_mean_pct": 0.0,
        "error_max_pct": 0.0,
        "costs": {"source": "defaults"},
    }
    # 10 → 8 ms is −20.0%, 2 ms recovered; the other way round it is 2 ms slower
    assert replay.replay_result(base)[0].children == (
        "asap (4×4 attention + 16 expert dies (32 devices)): measured 10.000 ms, makespan 8.000 ms (-20.0%); "
        "recovered 2.000 ms from the coupled replay"
    )
    # and the question it answers, beside the other two faces' questions
    question = _find(replay.replay_result(base), "rp-question").children
    assert (
        question.startswith("The question: these batches as they arrived")
        and "the paper's scenario" in question
    )
    slower = {**base, "replayed_ns": 12 * ms, "recovered_total_ns": -2 * ms}
    assert replay.replay_result(slower)[0].children.endswith(
        "(+20.0%); 2.000 ms slower than the coupled replay"
    )


def test_the_replay_page_shows_the_cost_fit_and_the_causes(stores, coupled_store):
    # the page renders the replay's own JSON: its fit table holds the fit's parts and statuses
    j = pipeline.replay_store(coupled_store.path, "asap").to_json()
    shown = replay.replay_result(j)
    fit = _find(shown, "rp-fit")
    assert fit is not None
    text = str(fit)
    for part, q in j["cost_fit"].items():
        assert part in text and q["status"] in text
    assert _find(shown, "rp-causes") is not None and "split cost" in str(_find(shown, "rp-causes"))
    assert any("consistency check" in str(getattr(c, "children", "")) for c in shown)


def test_the_sweep_worker_calls_pipeline_sweep_with_the_form_and_forwards_progress(monkeypatch):
    import queue

    from asaptrace_dashboards.jobs import _child

    seen = {}

    def fake_sweep(**kw):
        seen.update(kw)
        kw["progress"]("asap @ 1/s")
        return SimpleNamespace(to_json=lambda: {"slo_rps": {"asap": 1.0}})  # a SweepResult's JSON form

    monkeypatch.setattr(pipeline, "sweep", fake_sweep, raising=False)
    args = sweep.sweep_args(["asap"], "1", 10, "")
    q: queue.Queue = queue.Queue()
    _child("sweep", args, q)  # what the worker process runs, here in this process
    got = [q.get_nowait() for _ in range(q.qsize())]
    assert got == [("progress", "sweeping"), ("progress", "asap @ 1/s"), ("done", {"slo_rps": {"asap": 1.0}})]
    assert {k: v for k, v in seen.items() if k != "progress"} == args


def test_replay_form_is_generated_from_the_registry_schema():
    from dataclasses import dataclass
    from typing import ClassVar

    from asaptrace.replay.policies import POLICIES, Coupled, register_policy
    from asaptrace.replay.policies.base import form_setting

    @dataclass(frozen=True)
    class Widened(Coupled):
        name: ClassVar[str] = "test-widened"
        widgets: int = form_setting(3, "widgets per step (test-widened)")
        spare: bool = form_setting(True, "keep a spare die")

    before, _ = replay.form_settings()
    register_policy(Widened)
    try:
        knobs, mechanisms = replay.form_settings()
        # its settings join the form with their own words and types; nothing else moves
        assert knobs == [*before, ("widgets", "rp-widgets", "widgets per step (test-widened)", "int")]
        assert ("spare", "keep a spare die") in mechanisms
        # only its own settings pass (m is afd-pingpong's; an unchecked expert failure is left out)
        assert replay.replay_params("test-widened", {"widgets": 5, "m": 3}, ["spare"]) == {
            "widgets": 5,
            "spare": True,
        }
        with pytest.raises(ValueError, match="widgets per step must be a whole number"):
            replay.replay_params("test-widened", {"widgets": 2.5}, [])
    finally:
        POLICIES.unregister("test-widened")
