"""Figure builders: hand-built Diagnosis tables in, the figure's data (traces, values, axis titles) checked."""

from __future__ import annotations

import polars as pl

from asaptrace.schema import Kind
from asaptrace.viz import barrier, breakdown, imbalance, timeline
from asaptrace.viz.theme import KIND_COLOURS, RECEIVE_WAIT_COLOUR, WAIT_COLOUR, time_unit

MS = 1_000_000


def _annotation_texts(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


# ------------------------------------------------------------------------------------------ theme
def test_time_unit_picks_ms_up_to_ten_seconds_then_s():
    assert time_unit([999]) == ("ns", 1)
    assert time_unit([5_000]) == ("µs", 1_000)
    assert time_unit([6_254 * MS]) == ("ms", MS)  # a 6 s step reads 6,254 ms
    assert time_unit(pl.Series([None, 12_000 * MS])) == ("s", 1_000_000_000)


# ------------------------------------------------------------------------------------------ barrier
def test_wait_heatmap_groups_rows_by_dp_group_and_sums_steps():
    t = pl.DataFrame(
        {
            "rank": [0, 0, 1, 2, 2],
            "dp_group": [0, 0, 1, 0, 0],
            "step": [0, 1, 0, 0, 0],
            "layer": [0, 0, 1, 1, None],
            "wait_ns": [2 * MS, 1 * MS, 3 * MS, MS // 2, 9 * MS],  # the null-layer row is left out
        },
        schema_overrides={"layer": pl.Int16, "rank": pl.Int32, "dp_group": pl.Int32, "step": pl.Int32},
    )
    fig = barrier.wait_heatmap(t)
    (hm,) = fig.data
    # rows: DP0 (r0, r2) then DP1 (r1); columns layers 0, 1; r0 layer 0 = 2 + 1 ms over both steps
    assert list(hm.y) == ["r0 · DP0", "r2 · DP0", "r1 · DP1"]
    assert list(hm.x) == [0, 1]
    assert [list(r) for r in hm.z] == [[3.0, 0.0], [0.0, 0.5], [0.0, 3.0]]
    assert hm.colorbar.title.text == "wait (ms)"
    assert fig.layout.xaxis.title.text == "layer"
    one = barrier.wait_heatmap(t, step=1).data[0]
    assert list(one.y) == ["r0 · DP0"] and [list(r) for r in one.z] == [[1.0]]


def test_imposed_wait_ranking_puts_the_largest_on_top():
    t = pl.DataFrame(
        {"dp_group": [0, 1], "imposed_wait_ns": [480_000, 2 * MS], "last_share": [0.25, 0.75]},
        schema_overrides={"dp_group": pl.Int32},
    )
    fig = barrier.imposed_wait_ranking(t)
    (bar,) = fig.data
    # horizontal bars are drawn bottom-up: DP0 (0.48 ms) first, DP1 (2 ms) on top
    assert list(bar.y) == ["DP0", "DP1"] and list(bar.x) == [0.48, 2.0]
    assert list(bar.text) == ["last at 25%", "last at 75%"]
    assert bar.marker.color == WAIT_COLOUR
    assert fig.layout.xaxis.title.text == "imposed wait (ms)"


def test_imposed_wait_labels_round_as_the_findings_do():
    # DLRM's rank 7 was last at 5 of 8 barriers: the finding says 63%, the tables 62.5%; the
    # chart's label said 62% (round half to even) beside them
    t = pl.DataFrame(
        {"dp_group": [7, 5], "imposed_wait_ns": [2 * MS, MS], "last_share": [5 / 8, 1 / 8]},
        schema_overrides={"dp_group": pl.Int32},
    )
    (bar,) = barrier.imposed_wait_ranking(t).data
    assert sorted(bar.text) == ["last at 13%", "last at 63%"]


# ------------------------------------------------------------------------------------------ imbalance
def _imbalance_tables(basis: str = "seq_lens") -> tuple[pl.DataFrame, pl.DataFrame]:
    by_group = pl.DataFrame(
        {
            "step": [0, 0, 1, 1],
            "dp_group": [0, 1, 0, 1],
            "tokens": [1000, 3000, 1000, 3000],
            "sum_sq": [100, 300, 200, 150],
            "attention_ns": [1_100_000, 1_300_000, 1_200_000, 1_150_000],
        }
    )
    fit = pl.DataFrame(
        {
            "cost_basis": [basis],
            "c0_ns": [1e6],
            "c1_ns_per_token": [10.0],
            "c2_ns_per_token2": [1000.0],
            "r2": [0.99],
        }
    )
    return by_group, fit


def test_attention_vs_sum_sq_has_a_trace_per_step_and_the_fit_at_mean_tokens():
    by_group, fit = _imbalance_tables()
    fig = imbalance.attention_vs_sum_sq(by_group, fit)
    s0, s1, curve = fig.data
    assert (s0.name, s1.name) == ("step 0", "step 1")
    assert list(s0.x) == [100, 300] and list(s0.y) == [1.1, 1.3]  # ms
    assert list(s0.text) == ["DP0", "DP1"]
    # fit at mean tokens 2000: (1e6 + 10·2000 + 1000·Σs²) / 1e6 ms, Σs² from 100 to 300
    assert curve.mode == "lines"
    assert curve.x[0] == 100 and curve.x[-1] == 300
    assert curve.y[0] == 1.12 and curve.y[-1] == 1.32
    assert "R² = 0.99" in curve.name
    assert fig.layout.xaxis.title.text == "Σs² (tokens²)"
    assert fig.layout.yaxis.title.text == "attention time per rank (ms)"


def test_attention_vs_sum_sq_says_so_when_lengths_are_unknown():
    by_group, fit = _imbalance_tables("measured_attention")
    fig = imbalance.attention_vs_sum_sq(by_group, fit)
    assert not fig.data
    assert "sequence lengths unknown" in _annotation_texts(fig)[0]
    # no DP group at all (a one-rank serving trace whose lengths its annotations give): the groups
    # are missing, not the lengths, and "pass --batches" would not help
    fig = imbalance.attention_vs_sum_sq(by_group.clear(), fit)
    assert not fig.data and _annotation_texts(fig) == [
        "fewer than two DP groups: imbalance is measured between the DP groups of a step"
    ]


def test_imbalance_ratios_shows_tokens_sum_sq_and_attention_per_step():
    t = pl.DataFrame(
        {
            "step": [0, 1],
            "tokens_ratio": [1.01, 1.0],
            "sum_sq_ratio": [1.83, 2.5],
            "attention_ratio": [1.09, 1.25],
        }
    )
    fig = imbalance.imbalance_ratios(t)
    assert [tr.name for tr in fig.data] == ["tokens", "Σs²", "attention time"]
    assert list(fig.data[1].y) == [1.83, 2.5] and list(fig.data[1].x) == ["0", "1"]
    assert fig.layout.barmode == "group"
    assert fig.layout.shapes[0].y0 == 1.0  # the balanced line


# ------------------------------------------------------------------------------------------ breakdown
def test_group_stacked_bars_parts_add_up_to_step_time():
    u = MS
    bd = pl.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "dp_group": [0, 0, 0, 0],
            "step": [0, 1, 0, 1],
            "step_time_ns": [100 * u] * 4,
            "compute_ns": [60 * u, 70 * u, 90 * u, 90 * u],
            "copy_ns": [5 * u, 0, 0, 0],
            "wait_ns": [25 * u, 20 * u, 0, 0],
            "transfer_ns": [5 * u] * 4,
            "idle_host_ns": [5 * u] * 4,
            "idle_sync_ns": [0] * 4,
            "idle_other_ns": [0] * 4,
        }
    )
    # rank 0: compute 130, attention 80 + MoE 40 = 120 → other compute 10.
    # rank 1: compute 180, attention 150 + MoE 50 = 200 > 180 → MoE cut to 30, other 0.
    st = pl.DataFrame({"rank": [0, 1], "attention_ns": [80 * u, 150 * u], "moe_ns": [40 * u, 50 * u]})
    fig = breakdown.group_stacked_bars(bd, st)
    got = {tr.name: tr.y[0] for tr in fig.data}
    # means per rank over both steps (ms): attention 115, MoE 35, other 5, copy 2.5 (rank 0's 5 and
    # rank 1's 0: a copy is never compute), transfer 10, wait 22.5, idle waiting on the host 10
    assert got == {
        "attention": 115.0,
        "MoE experts": 35.0,
        "other compute": 5.0,
        "copy (memcpy, memset)": 2.5,
        "communication (exposed transfer)": 10.0,
        "exposed barrier wait": 22.5,
        "idle: host launch": 10.0,
        "idle: synchronisation": 0.0,
        "idle: other": 0.0,
    }
    assert sum(got.values()) == 200.0  # the mean step time (two steps of 100 ms)
    assert fig.data[0].marker.color == KIND_COLOURS[Kind.ATTENTION]
    assert fig.data[5].marker.color == WAIT_COLOUR
    assert list(fig.data[0].x) == ["DP0"] and fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == "time per rank (ms)"


def test_rank_stacked_bars_are_the_breakdown_parts_per_step():
    u = MS
    bd = pl.DataFrame(
        {
            "rank": [0, 0, 1],
            "dp_group": [None, None, None],
            "step": [0, 1, 0],
            "step_time_ns": [100 * u, 60 * u, 80 * u],
            "compute_ns": [50 * u, 30 * u, 80 * u],
            "copy_ns": [10 * u, 0, 0],
            "transfer_ns": [0, 10 * u, 0],
            "wait_ns": [0, 0, 0],
            "idle_host_ns": [20 * u, 10 * u, 0],
            "idle_sync_ns": [20 * u, 0, 0],
            "idle_other_ns": [0, 10 * u, 0],
        }
    )
    fig = breakdown.rank_stacked_bars(bd)
    rank0 = {tr.name: tr.y[0] for tr in fig.data}
    # rank 0, mean over its two steps (ms): compute 40, copy 5, transfer 5, host 15, sync 10, other 5
    assert rank0 == {
        "compute": 40.0,
        "copy (memcpy, memset)": 5.0,
        "communication (exposed transfer)": 5.0,
        "exposed barrier wait": 0.0,
        "idle: host launch": 15.0,
        "idle: synchronisation": 10.0,
        "idle: other": 5.0,
    }
    assert sum(rank0.values()) == 80.0 and fig.data[0].y[1] == 80.0  # rank 1: all compute


def test_overlap_per_device_splits_the_span_in_five():
    t = pl.DataFrame(
        {
            "rank": [1, 0],
            "dp_group": [1, 0],
            "span_ns": [100 * MS, 50 * MS],
            "compute_ns": [60 * MS, 40 * MS],
            "copy_ns": [10 * MS, 0],
            "overlapped_ns": [20 * MS, 0],
            "overlapped_copy_ns": [5 * MS, 0],
            "exposed_comm_ns": [20 * MS, 10 * MS],
            "idle_ns": [10 * MS, 0],
        }
    )
    fig = breakdown.overlap_per_device(t)
    assert [tr.name for tr in fig.data] == ["compute", "copy", "overlapped comm", "exposed comm", "idle"]
    assert list(fig.data[0].x) == ["r0 · DP0", "r1 · DP1"]
    # rank 1: compute alone 60 − 15 = 45, copy alone 10 − 5 = 5, overlapped 20 (15 under compute,
    # 5 under the copy), exposed 20, idle 10 (= span 100)
    assert [tr.y[1] for tr in fig.data] == [45.0, 5.0, 20.0, 20.0, 10.0]
    assert [tr.y[0] for tr in fig.data] == [40.0, 0.0, 0.0, 10.0, 0.0]


# ------------------------------------------------------------------------------------------ timeline
def _events(rows: list[tuple]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int32,
            "stream": pl.Int32,
            "is_device": pl.Boolean,
            "kind": pl.String,
            "name": pl.String,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
            "step": pl.Int32,
            "layer": pl.Int16,
        },
        orient="row",
    )


RANKS = pl.DataFrame({"rank": [0, 1], "dp_group": [0, 1]}, schema={"rank": pl.Int32, "dp_group": pl.Int32})
US = 1_000


def _instances() -> pl.DataFrame:
    # rank 1 arrives at the dispatch at 50 µs, rank 0 at 100 µs (last) → rank 1 waits 50 → 100 µs
    return pl.DataFrame(
        {
            "step": [0, 0],
            "layer": [0, 0],
            "op": ["dispatch", "dispatch"],
            "rank": [0, 1],
            "dp_group": [0, 1],
            "arrival_ns": [100 * US, 50 * US],
            "release_ns": [100 * US, 100 * US],
            "wait_ns": [0, 50 * US],
            "last_rank": [0, 0],
        },
        schema_overrides={"layer": pl.Int16, "step": pl.Int32, "rank": pl.Int32, "dp_group": pl.Int32},
    )


def _scenario() -> pl.DataFrame:
    return _events(
        [
            (0, 7, True, "attention", "flash_fwd", 0, 100 * US, 0, 0),
            (0, 20, True, "dispatch", "dispatch<4>", 100 * US, 50 * US, 0, 0),
            (0, 7, True, "moe", "<script>alert(1)</script>", 150 * US, 50 * US, 0, 0),
            (0, 7, True, "annotation", "layer#0", 0, 200 * US, 0, 0),  # left out
            (0, 99, False, "host", "cudaLaunchKernel", 0, 1 * US, 0, 0),  # host: left out
            (1, 7, True, "attention", "flash_fwd", 0, 50 * US, 0, 0),
            (1, 20, True, "dispatch", "dispatch<4>", 50 * US, 100 * US, 0, 0),
            (1, 7, True, "attention", "flash_fwd", 300 * US, 50 * US, 0, 1),  # layer 1
        ]
    )


def _gapped(values) -> list:
    """A timeline trace's coordinates as a list, its gaps (NaN in the array plotly is given) as None."""
    return [None if v != v else float(v) for v in values]


def test_timeline_lanes_colours_and_wait_band():
    spans = timeline.timeline_spans(_scenario(), RANKS, _instances(), step=0, layers=(0, 0))
    assert spans.height == 6  # 5 device kernels of layer 0 + 1 wait
    fig = timeline.timeline_figure(spans)
    by_name = {tr.name: tr for tr in fig.data}
    assert set(by_name) == {"attention", "dispatch", "moe", "barrier wait"}
    # a few segments: SVG (no GL context to create: drawn sooner); past SVG_MAX_SEGMENTS, WebGL
    assert all(tr.type == "scatter" for tr in fig.data)
    # lanes: r0 s7 = 0, r0 s20 = 1, r1 s7 = 2, r1 s20 = 3, r1 wait band = 4; times in µs from 0
    wait = by_name["barrier wait"]
    assert _gapped(wait.x) == [50.0, 100.0, None] and _gapped(wait.y) == [4, 4, None]
    assert wait.line.color == WAIT_COLOUR
    att = by_name["attention"]
    assert _gapped(att.x) == [0.0, 100.0, None, 0.0, 50.0, None]
    assert _gapped(att.y) == [0, 0, None, 2, 2, None]
    assert att.line.color == KIND_COLOURS[Kind.ATTENTION]
    assert "wait at dispatch · last: r0" in wait.text[0]
    # the kernel name is inert text in plotly's labels
    assert by_name["moe"].text[0] == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert list(fig.layout.yaxis.ticktext) == ["r0 · DP0", "r1 · DP1"]
    # each rank named at the middle of its lanes: r0's two, r1's two and its wait band
    assert list(fig.layout.yaxis.tickvals) == [0.5, 3.0]
    assert fig.layout.yaxis.title.text == "rank · stream (wait band last)"
    assert timeline.timeline_caption(spans).endswith(
        "the last lane of a rank that waits is its barrier wait (at a collective, until the last rank arrives)"
    )
    assert fig.layout.xaxis.title.text == "time since window start (µs)"


def test_timeline_of_one_rank_without_waits_says_no_wait_band():
    # an SGLang-like store: one rank, no barrier; a caption naming a wait band would be false
    spans = timeline.timeline_spans(_scenario(), RANKS, _instances().clear(), step=0, rank_subset=[0])
    fig = timeline.timeline_figure(spans)
    assert fig.layout.yaxis.title.text == "rank · stream"
    assert timeline.timeline_caption(spans) == "one lane per stream; no barrier wait in this window"
    assert list(fig.layout.yaxis.tickvals) == [0.5]  # r0's two lanes


def test_timeline_layer_range_keeps_only_those_layers():
    spans = timeline.timeline_spans(_scenario(), RANKS, _instances(), step=0, layers=(1, 1))
    assert spans.select("rank", "kind", "start_ns").rows() == [(1, "attention", 300 * US)]


def test_timeline_downsamples_spans_closer_than_a_pixel(monkeypatch):
    # 1000 kernels of 1 µs with 1 µs gaps over 2 ms; at 100 px a pixel is 20 µs → one segment
    rows = [(0, 7, True, "compute", "gemm", 2 * i * US, US, 0, 0) for i in range(1000)]
    spans = timeline.timeline_spans(_events(rows), RANKS, _instances().clear(), step=0)
    fig = timeline.timeline_figure(spans, pixel_width=100)
    (tr,) = fig.data
    assert _gapped(tr.x) == [0.0, 1.999, None]  # ms: 0 → 1999 µs
    assert tr.text[0] == "1000 compute spans"
    # with a fine pixel nothing merges
    assert len(timeline.timeline_figure(spans, pixel_width=10_000).data[0].x) == 3 * 1000
    # and a segment budget widens the pixel until it holds
    assert len(timeline.timeline_figure(spans, pixel_width=10_000, max_segments=10).data[0].x) <= 30
    # 1000 segments are past a threshold of 999: WebGL; at 1000, SVG
    monkeypatch.setattr(timeline, "SVG_MAX_SEGMENTS", 999)
    assert timeline.timeline_figure(spans, pixel_width=10_000).data[0].type == "scattergl"
    monkeypatch.setattr(timeline, "SVG_MAX_SEGMENTS", 1000)
    assert timeline.timeline_figure(spans, pixel_width=10_000).data[0].type == "scatter"


def test_timeline_wait_band_takes_receive_waits_too():
    # a disaggregated run's combine receive (no barrier: last_rank null) on rank 1 from 20 to 60 µs
    receive = (
        _instances()
        .head(1)
        .with_columns(
            pl.lit(1, pl.Int32).alias("rank"),
            pl.lit("combine_receive").alias("op"),
            pl.lit(20 * US).alias("arrival_ns"),
            pl.lit(60 * US).alias("release_ns"),
            pl.lit(40 * US).alias("wait_ns"),
            pl.lit(None, pl.Int64).alias("last_rank"),
        )
    )
    waits = pl.concat([_instances(), receive], how="vertical_relaxed")
    spans = timeline.timeline_spans(_scenario(), RANKS, waits, step=0, layers=(0, 0))
    band = spans.filter(pl.col("stream") == timeline.WAIT_LANE).sort("start_ns")
    assert band.select("rank", "kind", "name", "start_ns", "end_ns").rows() == [
        (1, "receive_wait", "wait at combine_receive", 20 * US, 60 * US),
        (1, "wait", "wait at dispatch · last: r0", 50 * US, 100 * US),
    ]
    fig = timeline.timeline_figure(spans)
    assert [tr.name for tr in fig.data][-2:] == ["barrier wait", "receive wait"]
    assert fig.data[-1].line.color == RECEIVE_WAIT_COLOUR and _gapped(fig.data[-1].y) == [4, 4, None]


def test_worst_window_centres_three_layers_on_the_largest_summed_wait():
    t = pl.DataFrame(
        {
            "rank": [0, 1, 0, 1, 0],
            "step": [0, 0, 1, 1, 1],
            "layer": [3, 3, 7, 7, 8],
            "wait_ns": [5, 5, 4, 4, 100],  # step 1 layer 8 sums to 100 (> step 0 layer 3: 10)
        },
        schema_overrides={"layer": pl.Int16, "step": pl.Int32},
    )
    bd = pl.DataFrame({"step": [0, 1]}, schema={"step": pl.Int32})
    assert timeline.worst_window(t, bd) == (1, (7, 9))
    # at the first layer the window starts there, not before it
    assert timeline.worst_window(t.filter(pl.col("layer") == 3), bd) == (0, (3, 5))
    # no wait inside layers: the first step, whole
    assert timeline.worst_window(t.clear(), bd) == (0, None)
