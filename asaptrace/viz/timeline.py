"""The device timeline (Gantt): one lane per rank and stream, coloured by kind, barrier wait as its own band.

Two steps, as in HTA's ``prepare_timeline_events`` → ``plot_events_timeline``:

* :func:`timeline_spans` (pure polars) cuts the store's events table down to one step and layer range
  and adds, per rank, a *wait band* from the barrier instances (``[arrival, release]`` of every
  wait). The caller passes the frames (viz never reads a store).
* :func:`timeline_figure` draws them. A 384-rank run has ~10⁶ kernels in a few layers, so spans
  are **downsampled** first: per lane and kind, spans closer than one pixel (the window divided by
  ``pixel_width``) are merged into one segment (hover says how many), and the pixel is widened
  until at most ``max_segments`` remain. Each kind is one trace of thick line segments separated
  by gaps, not one shape per span (see ``benchmarks/figures.py``): WebGL (``go.Scattergl``) for a
  big window, SVG up to :data:`SVG_MAX_SEGMENTS` (drawn sooner there: no GL context).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
import polars as pl

from asaptrace.schema import Kind
from asaptrace.units import plural
from asaptrace.viz.theme import (
    RECEIVE_WAIT_COLOUR,
    WAIT_COLOUR,
    empty_figure,
    kind_colour,
    plain,
    rank_label,
    styled,
    time_unit,
)

#: The stream number of the wait band (no device stream is negative).
WAIT_LANE = -1
#: The kinds drawn in the wait band: legend name and colour.
WAIT_KINDS = {"wait": ("barrier wait", WAIT_COLOUR), "receive_wait": ("receive wait", RECEIVE_WAIT_COLOUR)}
#: Kernel names are cut to this many characters in hover text (keeps the figure small).
NAME_CHARS = 64
#: Decimals of the time axis (in its unit: 0.1 µs when the axis is in ms).
X_DECIMALS = 4

SPAN_COLUMNS = ("rank", "dp_group", "stream", "kind", "name", "start_ns", "end_ns")


def timeline_spans(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    barrier_instances: pl.DataFrame,
    *,
    step: int | None = None,
    layers: tuple[int, int] | None = None,
    rank_subset: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Device spans (annotations left out) and barrier waits of one step and layer range.

    ``layers`` is an inclusive range; with it, work outside any layer (null layer) is left out.
    Waits become spans of kind ``"wait"`` on stream :data:`WAIT_LANE`; pass ``barrier_instances``
    concatenated with ``receive_waits`` (same columns) to draw a disaggregated run's receive waits
    in the band too (kind ``"receive_wait"``: rows without a last rank). Output columns:
    ``rank, dp_group, stream, kind, name, start_ns, end_ns``.
    """
    ev = events.lazy().filter(pl.col("is_device") & (pl.col("kind").cast(pl.String) != Kind.ANNOTATION))
    waits = barrier_instances.lazy().filter(pl.col("wait_ns") > 0)
    if step is not None:
        ev, waits = ev.filter(pl.col("step") == step), waits.filter(pl.col("step") == step)
    if layers is not None:
        lo, hi = layers
        ev = ev.filter(pl.col("layer").is_between(lo, hi))
        waits = waits.filter(pl.col("layer").is_between(lo, hi))
    if rank_subset is not None:
        keep = list(rank_subset)
        ev, waits = ev.filter(pl.col("rank").is_in(keep)), waits.filter(pl.col("rank").is_in(keep))
    groups = ranks.lazy().select(pl.col("rank").cast(pl.Int32), pl.col("dp_group").cast(pl.Int32))
    spans = ev.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("stream").cast(pl.Int32),
        pl.col("kind").cast(pl.String),
        pl.col("name").cast(pl.String),
        pl.col("ts_ns").alias("start_ns"),
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
    ).join(groups, on="rank", how="left")
    wait_spans = waits.select(
        pl.col("rank").cast(pl.Int32),
        pl.lit(WAIT_LANE, pl.Int32).alias("stream"),
        pl.when(pl.col("last_rank").is_null())
        .then(pl.lit("receive_wait"))
        .otherwise(pl.lit("wait"))
        .alias("kind"),
        pl.concat_str(
            pl.lit("wait at "),
            pl.col("op"),
            pl.when(pl.col("last_rank").is_not_null()).then(
                pl.lit(" · last: r") + pl.col("last_rank").cast(pl.String)
            ),
            ignore_nulls=True,
        ).alias("name"),
        pl.col("arrival_ns").alias("start_ns"),
        pl.col("release_ns").alias("end_ns"),
    ).join(groups, on="rank", how="left")  # the DP group of the ranks table, as for the device spans
    return (
        pl.concat([spans, wait_spans], how="diagonal_relaxed")
        .select(SPAN_COLUMNS)
        .sort("rank", "stream", "start_ns")
        .collect()
    )


def worst_window(
    barrier_by_rank_layer: pl.DataFrame, step_breakdown: pl.DataFrame, *, width: int = 3
) -> tuple[int | None, tuple[int, int] | None]:
    """The (step, layer range) worth looking at first: ``width`` layers around the largest summed wait.

    Without any wait inside a layer: the first step and no layer range (the whole step).
    """
    w = barrier_by_rank_layer.filter(pl.col("layer").is_not_null() & pl.col("step").is_not_null())
    if w.height:
        top = (
            w.group_by("step", "layer")
            .agg(pl.col("wait_ns").sum())
            .sort(["wait_ns", "step", "layer"], descending=[True, False, False])
            .row(0, named=True)
        )
        lo = max(int(top["layer"]) - (width - 1) // 2, int(w.get_column("layer").min()))  # type: ignore[arg-type]
        return int(top["step"]), (lo, lo + width - 1)
    steps = step_breakdown.get_column("step").drop_nulls()
    return (int(steps.min()) if len(steps) else None), None  # type: ignore[arg-type]


#: Up to this many segments the lanes are SVG (``go.Scatter``), above it WebGL (``go.Scattergl``):
#: Chromium draws 16 ranks' 760 segments in 0.26–0.32 s as SVG and 0.65–0.98 s as WebGL (the GL
#: context alone is a fixed cost), 96 ranks' 4,600 in 1.2–1.5 s against 2.4 s; at 18,500 segments
#: (384 ranks) neither is faster (docs/performance.md).
SVG_MAX_SEGMENTS = 10_000
#: Above this many ranks the dashboard's Timeline opens on :func:`focus_ranks` (the browser takes
#: 3–6 s to draw the 1,536 lanes of 384 ranks with software WebGL; 16 ranks draw in well under 1 s).
FOCUS_ABOVE = 32


def focus_ranks(
    barrier_instances: pl.DataFrame,
    ranks: pl.DataFrame,
    *,
    step: int | None,
    layers: tuple[int, int] | None,
    most: int = 16,
) -> tuple[list[int], str]:
    """The ranks worth drawing first in one window of a big run, and why, in words.

    Whole DP groups, at most ``most`` ranks: the group of the rank that arrives last at the window's
    barriers (weighted by the wait it causes), then the groups that wait longest for it; a rank
    without a DP group counts as its own. Without a wait in the window: the first ``most`` ranks.
    """
    group = pl.coalesce(pl.col("dp_group").cast(pl.Int64), -1 - pl.col("rank").cast(pl.Int64))
    members = ranks.select(pl.col("rank").cast(pl.Int64), group.alias("g")).sort("rank")
    w = barrier_instances.filter(pl.col("wait_ns") > 0)
    if step is not None:
        w = w.filter(pl.col("step") == step)
    if layers is not None:
        w = w.filter(pl.col("layer").is_between(*layers))
    if w.height == 0:
        first = members.get_column("rank").head(most).to_list()
        return first, f"the first {plural(len(first), 'rank')} (no barrier wait in this window)"
    w = w.with_columns(pl.col("rank").cast(pl.Int64)).join(members, on="rank", how="left")
    last = w.filter(pl.col("last_rank").is_not_null())
    last_rank = (
        int(
            last.group_by("last_rank")
            .agg(pl.col("wait_ns").sum())
            .sort(["wait_ns", "last_rank"], descending=[True, False])
            .item(0, "last_rank")
        )
        if last.height
        else None
    )
    waiting = w.group_by("g").agg(pl.col("wait_ns").sum()).sort(["wait_ns", "g"], descending=[True, False])
    order = waiting.get_column("g").to_list()
    if last_rank is not None:
        lg = members.filter(pl.col("rank") == last_rank).get_column("g").to_list()
        order = [*lg, *(g for g in order if g not in lg)]
    chosen: list[int] = []
    for g in order:
        these = members.filter(pl.col("g") == g).get_column("rank").to_list()
        if chosen and len(chosen) + len(these) > most:
            break
        chosen += these[: most - len(chosen)]
    why = "the DP groups that wait longest in this window"
    if last_rank is not None:
        why = f"the DP group of r{last_rank}, the last to arrive at this window's barriers, and the groups that wait longest for it"
    return sorted(chosen), why


def downsample(spans: pl.DataFrame, resolution_ns: int) -> pl.DataFrame:
    """Merge, per (rank, stream, kind), spans whose gap to the previous one is below ``resolution_ns``.

    Adds ``n_spans`` (spans merged into the segment); the name is kept when a segment holds one span.
    """
    return (
        spans.sort("rank", "stream", "kind", "start_ns")
        .with_columns(
            (pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1) + resolution_ns)
            .fill_null(True)
            .cum_sum()
            .over("rank", "stream", "kind")
            .alias("_seg")
        )
        .group_by("rank", "dp_group", "stream", "kind", "_seg")
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.len().alias("n_spans"),
            pl.col("name").first(),
        )
        .drop("_seg")
        .sort("rank", "stream", "start_ns")
    )


def lanes(spans: pl.DataFrame) -> pl.DataFrame:
    """One row per lane (rank, stream), ordered by DP group, rank, then streams with the wait band last."""
    return (
        spans.select("rank", "dp_group", "stream")
        .unique()
        .with_columns((pl.col("stream") == WAIT_LANE).alias("_wait"))
        .sort("dp_group", "rank", "_wait", "stream", nulls_last=True)
        .drop("_wait")
        .with_row_index("lane")
        .with_columns(pl.col("lane").cast(pl.Int64))
    )


def timeline_figure(
    spans: pl.DataFrame,
    *,
    title: str = "Device timeline",
    pixel_width: int = 1600,
    max_segments: int = 150_000,
    highlight_ns: tuple[int, int] | None = None,
    critical: pl.DataFrame | None = None,
) -> go.Figure:
    """Draw :func:`timeline_spans`' output: lanes per rank and stream, one trace per kind + waits.

    ``highlight_ns`` (start, end on the store's clock) shades one interval, e.g. a barrier instance
    from its first arrival to its release. ``critical`` (rows of rank, stream, kind, name, start_ns,
    end_ns in path order: :mod:`asaptrace.analyze.critical`'s ``path``) is drawn over the lanes as
    one line from piece to piece; a host piece sits on its rank's first lane.
    """
    if spans.height == 0:
        return empty_figure(title, "no device work in this step and layer range")
    t0, t1 = int(spans.get_column("start_ns").min()), int(spans.get_column("end_ns").max())  # type: ignore[arg-type]
    resolution = max((t1 - t0) // pixel_width, 1)
    segs = downsample(spans, resolution)
    while segs.height > max_segments:
        resolution *= 2
        segs = downsample(spans, resolution)
    lane_t = lanes(spans)
    segs = segs.join(lane_t, on=["rank", "dp_group", "stream"], how="left", nulls_equal=True)
    unit, div = time_unit([t1 - t0])
    n_lanes = lane_t.height
    height = int(min(max(320, 10 * n_lanes + 140), 2400))
    width_px = max(1.0, min(12.0, 0.8 * (height - 140) / n_lanes))
    kinds = [k for k in segs.get_column("kind").unique().sort().to_list() if k not in WAIT_KINDS]
    parts = [(k, segs.filter(pl.col("kind") == k)) for k in [*kinds, *WAIT_KINDS]]
    gl = segs.height > SVG_MAX_SEGMENTS
    fig = go.Figure(  # built whole: add_trace copies the figure's data each time
        [_segments_trace(part, kind, t0, div, unit, width_px, gl=gl) for kind, part in parts if part.height]
    )
    overlay = critical_overlay(spans, critical) if critical is not None else None
    if overlay is not None:
        fig.add_trace(overlay)
    ticks = rank_ticks(lane_t)
    fig.update_yaxes(
        tickvals=ticks.get_column("lane").to_list(),
        ticktext=[rank_label(r, g) for r, g in ticks.select("rank", "dp_group").iter_rows()],
        autorange="reversed",
        showgrid=False,
        zeroline=False,
    )
    sub = (
        f"{spans.height:,} spans in {plural(n_lanes, 'lane')}, drawn as {segs.height:,} segments "
        f"(merged below {resolution / 1000:,.1f} µs)"
    )
    fig.update_layout(hovermode="closest")
    if highlight_ns is not None:
        lo, hi = ((v - t0) / div for v in highlight_ns)
        fig.add_vrect(x0=round(lo, X_DECIMALS), x1=round(hi, X_DECIMALS), fillcolor=WAIT_COLOUR, opacity=0.12)
    has_wait = bool(lane_t.filter(pl.col("stream") == WAIT_LANE).height)
    fig = styled(
        fig,
        title=title,
        subtitle=sub,
        x_title=f"time since window start ({unit})",
        y_title="rank · stream" + (" (wait band last)" if has_wait else ""),
        height=height,
    )
    # the legend 4 px above the plot: the template's 1 % of a 2,000 px plot lifted it over the
    # subtitle; and 8 px more between them (the legend's box is taller than its row)
    fig.update_layout(margin={"t": fig.layout.margin.t + 8}, height=fig.layout.height + 8)
    plot_px = fig.layout.height - fig.layout.margin.t - (fig.layout.margin.b or 60)
    fig.update_layout(legend={"y": 1 + 4 / max(plot_px, 1)})
    return fig


def rank_ticks(lane_t: pl.DataFrame, *, most: int = 48) -> pl.DataFrame:
    """Where each rank's label goes: the middle of its lanes (``lane``, a float; its first lane put a
    rank's name beside the previous rank's wait band), at most ``most`` ranks named, evenly spaced."""
    rows = (
        lane_t.group_by("rank", "dp_group")
        .agg(((pl.col("lane").min() + pl.col("lane").max()) / 2).alias("lane"))
        .sort("lane")
    )
    return rows.gather_every(max(1, rows.height // most))


def timeline_caption(spans: pl.DataFrame) -> str:
    """What the timeline's lanes are, true for these spans: one lane per rank and stream, and the
    wait band only where there is one (a one-rank run has no barrier to wait at)."""
    if spans.height == 0:
        return ""
    waits = spans.filter(pl.col("stream") == WAIT_LANE)
    n_ranks = spans.get_column("rank").n_unique()
    text = "one lane per rank and stream, each rank's name at the middle of its lanes"
    if n_ranks == 1:
        text = "one lane per stream"
    if waits.height == 0:
        return text + "; no barrier wait in this window"
    band = (
        "barrier wait (at a collective, until the last rank arrives)"
        if waits.filter(pl.col("kind") == "wait").height
        else "receive wait"
    )
    return text + f"; the last lane of a rank that waits is its {band}"


def critical_overlay(spans: pl.DataFrame, critical: pl.DataFrame) -> go.Scatter | None:
    """The critical path's trace over :func:`timeline_figure`'s lanes of ``spans`` (same lanes, same
    time axis), or None when no piece falls on them: the dashboard adds it once the path is walked,
    after the lanes are drawn."""
    if spans.height == 0 or critical.height == 0:
        return None
    t0, t1 = int(spans.get_column("start_ns").min()), int(spans.get_column("end_ns").max())  # type: ignore[arg-type]
    unit, div = time_unit([t1 - t0])
    trace = _critical_trace(critical, lanes(spans), t0, div, unit)
    return trace if len(trace.x) else None


def _critical_trace(path: pl.DataFrame, lane_t: pl.DataFrame, t0: int, div: int, unit: str) -> go.Scatter:
    """The critical path as one polyline over the lanes: each piece from its start to its end on its
    lane, joined to the next (the hops cross ranks)."""
    first = lane_t.group_by("rank").agg(pl.col("lane").min().alias("_first"))
    p = (
        path.join(lane_t.select("rank", "stream", "lane"), on=["rank", "stream"], how="left")
        .join(first, on="rank", how="left")
        .with_columns(pl.coalesce("lane", "_first").alias("lane"))
        .filter(pl.col("lane").is_not_null())
    )
    xs: list[float] = []
    ys: list[int] = []
    text: list[str] = []
    for r in p.iter_rows(named=True):
        label = f"{r['kind']} · {plain(str(r['name'])[:NAME_CHARS])}"
        for t in (r["start_ns"], r["end_ns"]):
            xs.append(round((t - t0) / div, X_DECIMALS))
            ys.append(r["lane"])
            text.append(label)
    return go.Scatter(  # SVG: a few hundred points, drawn over the lanes (WebGL or not)
        x=xs,
        y=ys,
        mode="lines",
        name="critical path",
        line={"color": "#111111", "width": 2},
        text=text,
        hovertemplate="%{text}<br>%{x} " + unit + "<extra>critical path</extra>",
    )


def _segments_trace(
    part: pl.DataFrame, kind: str, t0: int, div: int, unit: str, width_px: float, *, gl: bool = True
) -> go.Scatter | go.Scattergl:
    """One kind's segments as a single line trace: x = start, end, gap; y = lane, lane, gap; WebGL
    with ``gl``, else SVG (:data:`SVG_MAX_SEGMENTS`).

    The hover text (kernel name, or "N <kind> spans" for a merged segment) sits on the start point.
    Arrays are numpy (a NaN is a gap): plotly checks a list element by element (≈ 2 s for the
    3 × 70,000 points of a 384-rank window) but takes an array whole, and ships it as binary.
    """
    n = part.height
    xs = np.full(3 * n, np.nan)
    ys = np.full(3 * n, np.nan, dtype=np.float32)  # lane numbers: exact in float32, a quarter less to ship
    xs[0::3] = ((part.get_column("start_ns") - t0) / div).round(X_DECIMALS).to_numpy()
    xs[1::3] = ((part.get_column("end_ns") - t0) / div).round(X_DECIMALS).to_numpy()
    ys[0::3] = ys[1::3] = part.get_column("lane").to_numpy()
    # on the start point only: hover near the end shows the time
    labels = part.select(
        pl.when(pl.col("n_spans") == 1)
        .then(pl.col("name").str.slice(0, NAME_CHARS))
        .otherwise(pl.col("n_spans").cast(pl.String) + f" {kind} spans")
    ).to_series()
    text = np.full(3 * n, "", dtype=object)
    text[0::3] = [plain(t) for t in labels.to_list()]
    label, colour = WAIT_KINDS.get(kind, (kind, kind_colour(kind)))
    return (go.Scattergl if gl else go.Scatter)(
        x=xs,
        y=ys,
        mode="lines",
        name=label,
        line={"color": colour, "width": width_px},
        text=text,
        hovertemplate="%{text}<br>%{x} " + unit + "<extra>" + label + "</extra>",
        connectgaps=False,
    )
