"""Barrier figures: who waited where (rank × layer heatmap) and who made the others wait (imposed ranking).

Inputs are Diagnosis tables (``barrier_by_rank_layer``, ``barrier_by_group``, and for runs without
layers or DP groups ``barrier_instances`` and ``barrier_by_rank``; columns in
docs/reference/columns.md); each function returns a ``go.Figure``. A run without layers (a
training job's all-to-alls and all-reduces) is drawn per (rank × collective instance), a run
without DP groups ranks its ranks: the barriers are there either way.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from asaptrace.units import percent
from asaptrace.viz.theme import (
    HEATMAP_ROW_PX,
    WAIT_COLOUR,
    WAIT_SCALE,
    empty_figure,
    instance_label,
    label_every,
    plain,
    rank_label,
    rows_height,
    scaled,
    styled,
    time_unit,
)


def wait_heatmap(
    barrier_by_rank_layer: pl.DataFrame,
    *,
    step: int | None = None,
    instances: pl.DataFrame | None = None,
) -> go.Figure:
    """Barrier wait per rank (rows, grouped by DP group) and layer (columns), for one step or summed.

    Rows are ordered by (DP group, rank) so a DP group that waits reads as a horizontal stripe and a
    layer where everybody waits as a vertical one. Waits outside any layer (null layer) are left out
    — unless no wait is inside a layer: then, given ``instances`` (``barrier_instances``), the
    columns are the matched collective instances (:func:`instance_wait_heatmap`).
    """
    title = "Barrier wait by rank and layer" + (f" (step {step})" if step is not None else " (all steps)")
    t = barrier_by_rank_layer.filter(pl.col("layer").is_not_null())
    if step is not None:
        t = t.filter(pl.col("step") == step)
    if t.height == 0:
        if instances is not None and _in_step(instances, step).height:
            return instance_wait_heatmap(instances, step=step)
        why = "no matched collective instance" if instances is not None else "no barrier wait inside layers"
        return empty_figure(title, why + (f" in step {step}" if step is not None else ""))
    cells = (
        t.group_by("rank", "dp_group", "layer")
        .agg(pl.col("wait_ns").sum())
        .sort("dp_group", "rank", "layer", nulls_last=True)
    )
    rows = cells.select("rank", "dp_group").unique(maintain_order=True)
    layers = sorted(cells.get_column("layer").unique().to_list())
    unit, div = time_unit(cells.get_column("wait_ns"))
    grid = (
        rows.join(pl.DataFrame({"layer": layers}, schema={"layer": cells.schema["layer"]}), how="cross")
        .join(cells, on=["rank", "dp_group", "layer"], how="left")
        .with_columns(pl.col("wait_ns").fill_null(0))
    )
    z_flat = scaled(grid.get_column("wait_ns"), div)
    n = len(layers)
    z = [z_flat[i * n : (i + 1) * n] for i in range(rows.height)]
    labels = [rank_label(r, g) for r, g in rows.iter_rows()]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=layers,
            y=labels,
            colorscale=WAIT_SCALE,
            colorbar={"title": {"text": f"wait ({unit})"}},
            hovertemplate="%{y}, layer %{x}: %{z} " + unit + "<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed", type="category")
    height = rows_height(len(z), per_row=HEATMAP_ROW_PX)
    if height - 200 >= HEATMAP_ROW_PX * len(z):  # room for every rank's name (else plotly picks)
        label_every(fig, "y", labels)
    return styled(fig, title=title, x_title="layer", y_title="rank (grouped by DP group)", height=height)


def instance_wait_heatmap(barrier_instances: pl.DataFrame, *, step: int | None = None) -> go.Figure:
    """Barrier wait per rank (rows) and matched collective instance (columns "#i", in arrival order).

    For runs whose barriers are not inside layers: every matched instance is one column, so each
    all-to-all or all-reduce of a training step shows who waited at it and for how long.
    """
    title = "Barrier wait by rank and collective instance" + (
        f" (step {step})" if step is not None else " (all steps)"
    )
    t = _in_step(barrier_instances, step)
    if t.height == 0:
        return empty_figure(title, "no matched collective instance")
    t = t.sort("dp_group", "rank", "instance", nulls_last=True)
    rows = t.select("rank", "dp_group").unique(maintain_order=True)
    cols = t.group_by("instance").agg(pl.col("op").first(), pl.col("step").first()).sort("instance")
    unit, div = time_unit(t.get_column("wait_ns"))
    grid = rows.join(cols.select("instance"), how="cross").join(
        t.select("rank", "instance", "wait_ns"), on=["rank", "instance"], how="left"
    )
    z_flat = scaled(grid.get_column("wait_ns").fill_null(0), div)
    n = cols.height
    z = [z_flat[i * n : (i + 1) * n] for i in range(rows.height)]
    ops = [
        plain(str(op).split("(")[0][:60]) + (f", step {s}" if s is not None else "")
        for op, s in zip(cols["op"], cols["step"], strict=True)
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[instance_label(i) for i in cols.get_column("instance")],
            y=[rank_label(r, g) for r, g in rows.iter_rows()],
            customdata=[ops] * rows.height,
            colorscale=WAIT_SCALE,
            colorbar={"title": {"text": f"wait ({unit})"}},
            hovertemplate="%{y} at instance %{x} (%{customdata}): %{z} " + unit + "<extra></extra>",
        )
    )
    fig.update_xaxes(type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    height = rows_height(rows.height, per_row=HEATMAP_ROW_PX)
    if height - 200 >= HEATMAP_ROW_PX * rows.height:  # room for every rank's name (else plotly picks)
        label_every(fig, "y", [rank_label(r, g) for r, g in rows.iter_rows()])
    return styled(
        fig, title=title, x_title="collective instance (in arrival order)", y_title="rank", height=height
    )


def _in_step(barrier_instances: pl.DataFrame, step: int | None) -> pl.DataFrame:
    return barrier_instances if step is None else barrier_instances.filter(pl.col("step") == step)


def imposed_wait_ranking(barrier_by_group: pl.DataFrame, *, by_rank: pl.DataFrame | None = None) -> go.Figure:
    """DP groups ranked by the wait they imposed on the others (time they alone held the barrier).

    Without DP groups, given ``by_rank`` (``barrier_by_rank``), the ranks that ever arrived last
    are ranked the same way: each rank is then its own party at the barrier.
    """
    title = "Wait imposed by each DP group (arrived last and held the barrier)"
    t = barrier_by_group.filter(pl.col("dp_group").is_not_null())
    who, prefix = "DP group", "DP"
    if t.height == 0 and by_rank is not None and by_rank.height:
        title = "Wait imposed by each rank (arrived last and held the barrier)"
        t = by_rank.filter(pl.col("last_count") > 0).rename({"rank": "_who"}).drop("dp_group")
        t = t.rename({"_who": "dp_group"})
        who, prefix = "rank", "r"
        if t.height == 0:
            return empty_figure(title, "no rank arrived last at a matched collective instance")
    elif t.height == 0:
        why = "no DP groups" if by_rank is not None else "no matched barrier instances"
        return empty_figure(title, why)
    t = t.sort("imposed_wait_ns", "dp_group", descending=[False, True])  # largest on top
    unit, div = time_unit(t.get_column("imposed_wait_ns"))
    x = scaled(t.get_column("imposed_wait_ns"), div)
    groups = [f"{prefix}{g}" for g in t.get_column("dp_group")]
    fig = go.Figure(
        go.Bar(
            x=x,
            y=groups,
            orientation="h",
            marker_color=WAIT_COLOUR,
            # beside the bar, at the axis labels' size (inside, plotly shrank it to fit a thin bar),
            # rounded as the findings round
            text=[f"last at {percent(s)}" for s in t.get_column("last_share").fill_null(0.0)],
            textposition="outside",
            cliponaxis=False,
            name="imposed wait",
            hovertemplate="%{y}: %{x} " + unit + " imposed, %{text} of barriers<extra></extra>",
        )
    )
    label_every(fig, "y", groups)
    top = max((v for v in x if v is not None), default=0.0) or 1.0
    fig.update_xaxes(range=[0, top * 1.25])  # room for the text beside the longest bar
    return styled(
        fig, title=title, x_title=f"imposed wait ({unit})", y_title=who, height=rows_height(t.height)
    )
