"""Where device time goes: per-rank and per-DP-group stacked bars and the overlap of each device.

Inputs: ``step_breakdown``, ``stragglers`` (attention and MoE kernel time per rank) and
``overlap_by_rank`` (docs/reference/columns.md). Copies are never drawn as compute.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from asaptrace.schema import Kind
from asaptrace.viz.theme import (
    EXPOSED_COMM_COLOUR,
    IDLE_COLOUR,
    IDLE_HOST_COLOUR,
    IDLE_SYNC_COLOUR,
    KIND_COLOURS,
    OVERLAPPED_COLOUR,
    WAIT_COLOUR,
    empty_figure,
    rank_label,
    scaled,
    styled,
    time_unit,
)

#: The step breakdown's parts after compute, bottom to top: (column, legend name, colour).
_REST = (
    ("copy_ns", "copy (memcpy, memset)", KIND_COLOURS[Kind.MEMCPY]),
    ("transfer_ns", "communication (exposed transfer)", EXPOSED_COMM_COLOUR),
    ("wait_ns", "exposed barrier wait", WAIT_COLOUR),
    ("idle_host_ns", "idle: host launch", IDLE_HOST_COLOUR),
    ("idle_sync_ns", "idle: synchronisation", IDLE_SYNC_COLOUR),
    ("idle_other_ns", "idle: other", IDLE_COLOUR),
)
#: The parts of a DP group's bar, bottom to top: (column, legend name, colour).
GROUP_PARTS = (
    ("attention_ns", "attention", KIND_COLOURS[Kind.ATTENTION]),
    ("moe_ns", "MoE experts", KIND_COLOURS[Kind.MOE]),
    ("other_compute_ns", "other compute", KIND_COLOURS[Kind.COMPUTE]),
    *_REST,
)
#: The parts of a rank's bar: the step breakdown's own (they add up to the step time).
RANK_PARTS = (("compute_ns", "compute", KIND_COLOURS[Kind.COMPUTE]), *_REST)

#: The parts of a device's overlap bar: compute alone, copies alone, comm under either, comm alone, idle.
OVERLAP_PARTS = (
    ("compute_only_ns", "compute", KIND_COLOURS[Kind.COMPUTE]),
    ("copy_only_ns", "copy", KIND_COLOURS[Kind.MEMCPY]),
    ("overlapped_ns", "overlapped comm", OVERLAPPED_COLOUR),
    ("exposed_comm_ns", "exposed comm", EXPOSED_COMM_COLOUR),
    ("idle_ns", "idle", IDLE_COLOUR),
)


def group_time(step_breakdown: pl.DataFrame, stragglers: pl.DataFrame) -> pl.DataFrame:
    """Per DP group, mean per rank over all steps: the parts of :data:`GROUP_PARTS` and step time.

    ``other_compute_ns`` = compute − attention − MoE kernel time, clipped at 0 (when kernels of
    two micro-batches run at once their kernel times add up to more than the compute time).
    The parts add up to the mean step time.
    """
    per_rank = (
        step_breakdown.group_by("rank", "dp_group")
        .agg(pl.col("step_time_ns", "compute_ns", *[c for c, _, _ in _REST]).sum())
        .join(stragglers.select("rank", "attention_ns", "moe_ns"), on="rank", how="left")
        .with_columns(pl.col("attention_ns", "moe_ns").fill_null(0))
        .with_columns(
            (pl.col("attention_ns") + pl.col("moe_ns"))
            .clip(upper_bound=pl.col("compute_ns"))
            .alias("_kernels")
        )
        .with_columns(
            pl.col("attention_ns").clip(upper_bound=pl.col("compute_ns")),
            (pl.col("_kernels") - pl.col("attention_ns").clip(upper_bound=pl.col("compute_ns"))).alias(
                "moe_ns"
            ),
            (pl.col("compute_ns") - pl.col("_kernels")).alias("other_compute_ns"),
        )
    )
    cols = [c for c, _, _ in GROUP_PARTS] + ["step_time_ns"]
    return (
        per_rank.group_by("dp_group")
        .agg(pl.len().alias("n_ranks"), *[pl.col(c).mean().round(0).cast(pl.Int64) for c in cols])
        .sort("dp_group", nulls_last=True)
    )


def group_stacked_bars(step_breakdown: pl.DataFrame, stragglers: pl.DataFrame) -> go.Figure:
    """Per DP group: attention, MoE, other compute, communication, exposed wait, idle (mean per rank)."""
    title = "Where each DP group's step time goes (mean per rank, all steps)"
    if step_breakdown.height == 0:
        return empty_figure(title, "no steps found")
    t = group_time(step_breakdown, stragglers)
    unit, div = time_unit(t.get_column("step_time_ns"))
    x = ["all" if g is None else f"DP{g}" for g in t.get_column("dp_group")]
    fig = _stacked(x, t, GROUP_PARTS, div, unit)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="category")
    return styled(fig, title=title, x_title="DP group", y_title=f"time per rank ({unit})")


def rank_stacked_bars(step_breakdown: pl.DataFrame) -> go.Figure:
    """Per rank, mean per step: compute, copy, exposed transfer, exposed wait and idle by cause —
    the step breakdown's parts, which add up to the step time (DOMAIN §9)."""
    title = "Where each rank's step time goes (mean per step)"
    if step_breakdown.height == 0:
        return empty_figure(title, "no steps found")
    cols = ["step_time_ns", *[c for c, _, _ in RANK_PARTS]]
    n = pl.col("step").n_unique() + pl.col("step").null_count().clip(upper_bound=1)
    t = (
        step_breakdown.group_by("rank", "dp_group")
        .agg(*[pl.col(c).sum() for c in cols], n.alias("_n"))
        .with_columns(*[(pl.col(c) / pl.col("_n")).round(0).cast(pl.Int64) for c in cols])
        .sort("dp_group", "rank", nulls_last=True)
    )
    unit, div = time_unit(t.get_column("step_time_ns"))
    x = [rank_label(r, g) for r, g in t.select("rank", "dp_group").iter_rows()]
    fig = _stacked(x, t, RANK_PARTS, div, unit)
    fig.update_layout(barmode="stack", bargap=0.1)
    fig.update_xaxes(type="category", tickangle=-60)
    return styled(fig, title=title, x_title="rank · DP group", y_title=f"time per step ({unit})")


def overlap_per_device(overlap_by_rank: pl.DataFrame) -> go.Figure:
    """Per device: compute alone, copies alone, communication under either, exposed communication, idle.

    The five parts add up to the device's span (``compute + copy + exposed_comm + idle = span``;
    the overlapped part is cut out of the compute and copy it runs under).
    """
    title = "Overlap per device: compute / copy / overlapped comm / exposed comm / idle"
    if overlap_by_rank.height == 0:
        return empty_figure(title, "no device work")
    under_copy = (
        pl.col("overlapped_copy_ns") if "overlapped_copy_ns" in overlap_by_rank.columns else pl.lit(0)
    )
    copy = pl.col("copy_ns") if "copy_ns" in overlap_by_rank.columns else pl.lit(0)
    t = overlap_by_rank.sort("dp_group", "rank", nulls_last=True).with_columns(
        (pl.col("compute_ns") - (pl.col("overlapped_ns") - under_copy)).alias("compute_only_ns"),
        (copy - under_copy).alias("copy_only_ns"),
    )
    unit, div = time_unit(t.get_column("span_ns"))
    x = [rank_label(r, g) for r, g in t.select("rank", "dp_group").iter_rows()]
    fig = _stacked(x, t, OVERLAP_PARTS, div, unit)
    fig.update_layout(barmode="stack", bargap=0.1)
    fig.update_xaxes(type="category", tickangle=-60)
    return styled(fig, title=title, x_title="device (rank · DP group)", y_title=f"device time ({unit})")


def _stacked(
    x: list[str], t: pl.DataFrame, parts: tuple[tuple[str, str, str], ...], div: int, unit: str
) -> go.Figure:
    """One bar trace per part (column, legend name, colour), stacked."""
    return go.Figure(
        [
            go.Bar(
                x=x,
                y=scaled(t.get_column(col), div),
                name=name,
                marker_color=colour,
                hovertemplate="%{x}: " + name + " %{y} " + unit + "<extra></extra>",
            )
            for col, name, colour in parts
        ]
    )
