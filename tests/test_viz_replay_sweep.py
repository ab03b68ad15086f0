"""Figures of the replay (steps, recovered-by-cause waterfall) and the sweep (TTFT curves, tornado),
plus the dashboard's hooks in shared figures (heatmap cells name their rank, a highlighted interval)."""

from __future__ import annotations

import polars as pl

from asaptrace.viz import barrier, replay, sweep, timeline
from asaptrace.viz.theme import rank_from_label
from tests.test_viz_figures import RANKS, US, _instances, _scenario

MS = 1_000_000


def _replay_result() -> dict:
    # two steps: measured 10 and 12 ms, the coupled reference reproduces them as 10 and 11 ms,
    # asap replays them in 7 and 8 ms. Coupled replay total (baseline) 21 ms → asap 15 ms:
    # recovered 6 ms = barrier 4 ms + dual batch 2 ms (Σ causes = baseline − replayed).
    return {
        "policy": "asap",
        "reference_policy": "coupled",
        "steps": [
            {"step": 0, "measured_ns": 10 * MS, "reference_ns": 10 * MS, "replayed_ns": 7 * MS},
            {"step": 1, "measured_ns": 12 * MS, "reference_ns": 11 * MS, "replayed_ns": 8 * MS},
        ],
        "baseline_ns": 21 * MS,
        "replayed_ns": 15 * MS,
        "recovered_ns": {"barrier": 4 * MS, "dual_batch": 2 * MS},
    }


def test_replay_steps_groups_measured_reference_and_replayed_per_step():
    fig = replay.replay_steps(_replay_result())
    assert [t.name for t in fig.data] == ["measured", "coupled replay", "replayed"]
    assert [list(t.y) for t in fig.data] == [[10.0, 12.0], [10.0, 11.0], [7.0, 8.0]]
    assert list(fig.data[0].x) == ["0", "1"]
    assert fig.layout.yaxis.title.text == "step time (ms)"


def test_recovered_waterfall_walks_from_the_coupled_replay_to_the_policy():
    (wf,) = replay.recovered_waterfall(_replay_result()).data
    assert list(wf.x) == ["coupled replay", "barrier", "dual batch", "asap"]
    assert list(wf.measure) == ["absolute", "relative", "relative", "total"]
    # 21 − 4 − 2 = 15 ms: the total bar plotly draws lands on the replayed total
    assert list(wf.y)[:3] == [21.0, -4.0, -2.0]
    assert sum(list(wf.y)[:3]) * MS == _replay_result()["replayed_ns"]


def test_recovered_waterfall_says_so_without_attribution():
    fig = replay.recovered_waterfall({**_replay_result(), "recovered_ns": {}})
    assert fig.data == () and "no recovered time" in fig.layout.annotations[0].text


def _sweep_result() -> dict:
    # default meets the 1 s SLO at 1/s (0.5 s) and misses it at 2/s (1.5 s); asap meets it at both
    return {
        "policies": ["default", "asap"],
        "slo_ttft_ns": 1_000 * MS,
        "slo_rps": {"default": 1.5, "asap": 2.0},
        "curves": {
            "default": [{"rate": 2.0, "mean_ttft_ns": 1_500 * MS}, {"rate": 1.0, "mean_ttft_ns": 500 * MS}],
            "asap": [{"rate": 1.0, "mean_ttft_ns": 300 * MS}, {"rate": 2.0, "mean_ttft_ns": 600 * MS}],
        },
        "tornado": [
            {"knob": "coupled_k_s", "ratio_min": 1.1, "ratio_max": 1.6, "at_min": "1", "at_max": "4"},
            {"knob": "<b>phi</b>", "ratio_min": 1.2, "ratio_max": 1.3, "at_min": "0", "at_max": "0.5"},
        ],
    }


def test_ttft_curves_one_line_per_policy_sorted_by_rate_with_the_slo_line():
    fig = sweep.ttft_curves(_sweep_result())
    default, asap = fig.data
    assert list(default.x) == [1.0, 2.0] and list(default.y) == [0.5, 1.5]  # sorted by rate, in s
    assert list(asap.y) == [0.3, 0.6]
    assert default.name == "default (SLO at 1.50/s)"
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 1.0


def test_ttft_quantiles_p50_solid_p99_dotted_per_policy_sorted_by_rate():
    # hand-built: default at 2/s has p50 1.2 s and p99 3 s; at 1/s p50 0.4 s, p99 0.9 s (listed out of
    # order, so the figure must sort); asap has a point without quantiles (older results) → skipped
    result = {
        "slo_ttft_ns": 1_000 * MS,
        "curves": {
            "default": [
                {"rate": 2.0, "p50_ttft_ns": 1_200 * MS, "p99_ttft_ns": 3_000 * MS},
                {"rate": 1.0, "p50_ttft_ns": 400 * MS, "p99_ttft_ns": 900 * MS},
            ],
            "<i>asap</i>": [
                {"rate": 1.0, "p50_ttft_ns": 250 * MS, "p99_ttft_ns": 500 * MS},
                {"rate": 2.0, "mean_ttft_ns": 600 * MS},
            ],
        },
    }
    fig = sweep.ttft_quantiles(result)
    d50, d99, a50, a99 = fig.data
    assert (d50.name, d99.name) == ("default p50", "default p99")
    assert list(d50.x) == [1.0, 2.0] and list(d50.y) == [0.4, 1.2]
    assert list(d99.y) == [0.9, 3.0] and d99.line.dash == "dot" and d50.line.dash == "solid"
    assert d50.line.color == d99.line.color != a50.line.color  # one colour per policy
    assert a50.name == "&lt;i&gt;asap&lt;/i&gt; p50" and list(a50.x) == [1.0] and list(a99.y) == [0.5]
    (line,) = fig.layout.shapes
    assert line.y0 == line.y1 == 1.0
    assert fig.layout.yaxis.title.text == "TTFT (s)"
    assert fig.layout.xaxis.title.text == "request rate (1/s)"


def test_ttft_quantiles_says_so_without_points():
    assert "no sweep points" in sweep.ttft_quantiles({"curves": {}}).layout.annotations[0].text


def test_tornado_widest_swing_on_top_and_knob_names_inert():
    (bar,) = sweep.sensitivity_tornado(_sweep_result()).data
    # plotly draws bottom-up, so the widest (listed first by the sweep) is the last bar
    assert list(bar.y) == ["&lt;b&gt;phi&lt;/b&gt;", "coupled_k_s"]
    assert list(bar.base) == [1.2, 1.1]
    assert [round(x, 6) for x in bar.x] == [0.1, 0.5]


def test_tornado_says_so_when_no_knob_was_varied():
    fig = sweep.sensitivity_tornado({**_sweep_result(), "tornado": []})
    assert "no knob varied" in fig.layout.annotations[0].text


def test_a_heatmap_row_label_names_its_rank_back():
    t = pl.DataFrame(
        {"rank": [13, 1], "dp_group": [0, None], "step": [0, 0], "layer": [0, 1], "wait_ns": [MS, MS]},
        schema_overrides={"layer": pl.Int16, "rank": pl.Int32, "dp_group": pl.Int32, "step": pl.Int32},
    )
    (hm,) = barrier.wait_heatmap(t).data
    assert [rank_from_label(y) for y in hm.y] == [13, 1]  # "r13 · DP0", then "r1" (no DP group)
    assert rank_from_label("layer 3") is None and rank_from_label("rx · DP1") is None


def test_timeline_highlight_is_shaded_on_the_window_clock():
    spans = timeline.timeline_spans(_scenario(), RANKS, _instances(), step=0, layers=(0, 0))
    # the window starts at 0; rank 1 waits 50 → 100 µs
    fig = timeline.timeline_figure(spans, highlight_ns=(50 * US, 100 * US))
    (rect,) = fig.layout.shapes
    assert (rect.x0, rect.x1) == (50.0, 100.0)
