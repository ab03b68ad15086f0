"""Figures sized to their content: height per row, every category named, text at the axis size,
titles wrapped, below the modebar and clear of the legend (checked on the figure objects)."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.viz import barrier, breakdown, replay, timeline
from asaptrace.viz.theme import HEATMAP_ROW_PX, ROW_PX, TITLE_TOP_PX, WIDTH_PX, fit_top

MS = 1_000_000


def _groups(n: int) -> pl.DataFrame:
    # group g imposed (g + 1) ms; DP0 the least → drawn at the bottom, DP{n-1} on top
    return pl.DataFrame(
        {
            "dp_group": list(range(n)),
            "imposed_wait_ns": [(g + 1) * MS for g in range(n)],
            "last_share": [1 / n] * n,
        },
        schema_overrides={"dp_group": pl.Int32},
    )


def _plot_px(fig) -> float:
    """The plot area's height: the figure less its top and bottom margins."""
    return fig.layout.height - fig.layout.margin.t - (fig.layout.margin.b or 60)


@pytest.mark.parametrize("n", [1, 8, 32])
def test_a_bar_chart_of_n_groups_gets_a_row_each_and_names_every_one(n):
    fig = barrier.imposed_wait_ranking(_groups(n))
    # ROW_PX (28) per bar: 8 bars had ≈ 90 px before, i.e. 11 px a bar and half of them unnamed
    assert _plot_px(fig) >= ROW_PX * n
    assert list(fig.layout.yaxis.tickvals) == [f"DP{g}" for g in range(n)]  # every bar named
    assert fig.layout.yaxis.tickmode == "array"
    (bar,) = fig.data
    # the "last at" text beside the bar (inside, plotly shrank it to fit a thin bar), never
    # smaller than the axis labels, and the axis leaves room for it beside the longest bar
    assert bar.textposition == "outside" and bar.cliponaxis is False
    assert fig.layout.template.layout.uniformtext.minsize >= fig.layout.template.layout.font.size
    assert fig.layout.xaxis.range[1] > max(bar.x)


def test_bar_chart_height_grows_in_proportion_to_its_rows():
    h8, h32 = (barrier.imposed_wait_ranking(_groups(n)).layout.height for n in (8, 32))
    assert h32 - h8 == 24 * ROW_PX  # 24 more bars, one row each, the rest of the figure the same


def test_the_heatmap_names_every_rank():
    t = pl.DataFrame(
        {
            "rank": list(range(32)),
            "dp_group": [r // 4 for r in range(32)],
            "step": [0] * 32,
            "layer": [3] * 32,
            "wait_ns": [MS] * 32,
        },
        schema_overrides={"layer": pl.Int16, "rank": pl.Int32, "dp_group": pl.Int32, "step": pl.Int32},
    )
    fig = barrier.wait_heatmap(t)
    assert len(fig.layout.yaxis.tickvals) == 32 and fig.layout.yaxis.tickvals[5] == "r5 · DP1"
    assert _plot_px(fig) >= HEATMAP_ROW_PX * 32


def test_knob_tornado_names_every_knob_with_a_row_each():
    rows = [
        {"knob": f"k{i}", "recovered_min_ns": -i * MS, "recovered_max_ns": i * MS, "at_min": 1, "at_max": 2}
        for i in range(1, 7)
    ]
    fig = replay.recovered_tornado({"tornado": rows})
    assert sorted(fig.layout.yaxis.tickvals) == [f"k{i}" for i in range(1, 7)]
    assert _plot_px(fig) >= ROW_PX * 6


def test_titles_sit_below_the_modebar_and_above_the_legend():
    bd = pl.DataFrame(
        {
            "rank": [0],
            "dp_group": [0],
            "step": [0],
            "step_time_ns": [10 * MS],
            **{c: [MS] for c in ("compute_ns", "copy_ns", "wait_ns", "transfer_ns")},
            **{c: [2 * MS] for c in ("idle_host_ns", "idle_sync_ns", "idle_other_ns")},
        }
    )
    fig = breakdown.group_stacked_bars(bd, pl.DataFrame({"rank": [0], "attention_ns": [MS], "moe_ns": [0]}))
    title = fig.layout.template.layout.title  # where every figure's title sits: the template's
    assert title.yref == "container" and title.y == 1 and title.yanchor == "top"
    assert title.pad.t >= 28  # plotly's modebar is ≈ 28 px tall, top right, shown on hover
    # the margin holds the title (one line at 1000 px: 20 px) and the legend's rows (9 entries)
    legend = [t.name for t in fig.data if t.name]
    assert len(legend) == 9 and fig.layout.margin.t >= TITLE_TOP_PX + 20 + 24
    # half as wide (two figures side by side): the title wraps, the legend takes more rows, the
    # margin grows and so does the figure, by as much (the plot keeps its height)
    wide_top = fig.layout.margin.t
    narrow = fit_top(fig, 420)
    assert "<br>" in narrow.layout.title.text
    assert all(len(line) <= (420 - 16) // 8 for line in narrow.layout.title.text.split("<br>"))
    assert narrow.layout.margin.t > wide_top
    assert fit_top(fig, WIDTH_PX).layout.title.text == fig.layout.title.text.replace("<br>", " ")


def test_the_timeline_subtitle_is_a_subtitle_not_a_second_title_line():
    spans = pl.DataFrame(
        {
            "rank": [0, 1],
            "dp_group": [0, 0],
            "stream": [7, 7],
            "kind": ["attention", "attention"],
            "name": ["a", "a"],
            "start_ns": [0, 0],
            "end_ns": [MS, MS],
        },
        schema_overrides={"rank": pl.Int32, "dp_group": pl.Int32, "stream": pl.Int32},
    )
    fig = timeline.timeline_figure(spans)
    # a "<br><sup>" second line was drawn above the container on a small run (title clipped)
    assert "<br>" not in fig.layout.title.text and "spans in" in fig.layout.title.subtitle.text
    assert fig.layout.margin.t >= TITLE_TOP_PX + 20 + 15
