"""Imbalance figures: measured attention time against Σs² (with the fitted cost), and the per-step ratios.

Inputs: ``imbalance_by_group``, ``imbalance_fit`` and ``imbalance_by_step`` (docs/reference/columns.md).
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl

from asaptrace.schema import Kind
from asaptrace.viz.theme import (
    KIND_COLOURS,
    STEP_SYMBOLS,
    TEMPLATE,
    WAIT_COLOUR,
    empty_figure,
    scaled,
    styled,
    time_unit,
)

#: Points on the fitted curve (enough to look smooth, few enough to stay small).
_CURVE_POINTS = 50


def attention_vs_sum_sq(imbalance_by_group: pl.DataFrame, imbalance_fit: pl.DataFrame) -> go.Figure:
    """Measured attention time of each (DP group, step) against its Σs², with the fitted cost curve.

    The fit is ``c0 + c1·tokens + c2·Σs²``; it is drawn as a curve of Σs² at the mean token count of
    the points (token counts are usually near-balanced, which is the point of the figure: Σs² is
    not). Without sequence lengths (``cost_basis == measured_attention``) there is no Σs² axis and
    the figure says so.
    """
    title = "Attention time vs Σs² per DP group and step"
    if imbalance_by_group.height == 0:  # no groups (one rank, none given): lengths are not the cause
        return empty_figure(
            title, "fewer than two DP groups: imbalance is measured between the DP groups of a step"
        )
    t = imbalance_by_group.filter(pl.col("sum_sq").is_not_null() & pl.col("attention_ns").is_not_null())
    basis = imbalance_fit.get_column("cost_basis")[0] if imbalance_fit.height else None
    if t.height == 0 or basis == "measured_attention":
        return empty_figure(title, "sequence lengths unknown: no Σs² to plot (pass --batches)")
    unit, div = time_unit(t.get_column("attention_ns"))
    fig = go.Figure()
    for i, step in enumerate(sorted(t.get_column("step").unique().to_list())):
        s = t.filter(pl.col("step") == step).sort("dp_group")
        fig.add_trace(
            go.Scatter(
                x=s.get_column("sum_sq").to_list(),
                y=scaled(s.get_column("attention_ns"), div),
                mode="markers",
                name=f"step {step}",
                marker={
                    "symbol": STEP_SYMBOLS[i % len(STEP_SYMBOLS)],
                    "size": 9,
                    "color": KIND_COLOURS[Kind.ATTENTION],
                },
                text=[f"DP{g}" for g in s.get_column("dp_group")],
                hovertemplate="%{text}, step "
                + str(step)
                + ": Σs² %{x:.3s}, %{y} "
                + unit
                + "<extra></extra>",
            )
        )
    if imbalance_fit.height and imbalance_fit.get_column("c2_ns_per_token2")[0] is not None:
        fit = imbalance_fit.row(0, named=True)
        lo, hi = float(t.get_column("sum_sq").min()), float(t.get_column("sum_sq").max())  # type: ignore[arg-type]
        tokens = float(t.get_column("tokens").mean())  # type: ignore[arg-type]
        xs = [lo + (hi - lo) * k / (_CURVE_POINTS - 1) for k in range(_CURVE_POINTS)]
        ys = [
            (fit["c0_ns"] + fit["c1_ns_per_token"] * tokens + fit["c2_ns_per_token2"] * x) / div for x in xs
        ]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[float(f"{y:.6g}") for y in ys],
                mode="lines",
                name=f"fit c0 + c1·tokens + c2·Σs² (R² = {fit['r2']:.2f}, at mean tokens)",
                line={"color": "#333333", "dash": "dash"},
                hoverinfo="skip",
            )
        )
    return styled(fig, title=title, x_title="Σs² (tokens²)", y_title=f"attention time per rank ({unit})")


def imbalance_ratios(imbalance_by_step: pl.DataFrame) -> go.Figure:
    """Per step: token imbalance vs Σs² imbalance vs attention imbalance (max / mean over DP groups).

    Balanced tokens (ratio ≈ 1) next to a Σs² ratio well above 1 is the signature of length-mix
    imbalance that a token-count balancer cannot see.
    """
    title = "Imbalance per step: tokens vs Σs² vs attention time (max / mean over DP groups)"
    t = imbalance_by_step.sort("step")
    if t.height == 0:
        return empty_figure(
            title, "fewer than two DP groups: imbalance is measured between the DP groups of a step"
        )
    steps = [str(s) for s in t.get_column("step")]
    fig = go.Figure()
    for col, name, colour in (
        ("tokens_ratio", "tokens", "#7F7F7F"),
        ("sum_sq_ratio", "Σs²", WAIT_COLOUR),
        ("attention_ratio", "attention time", KIND_COLOURS[Kind.ATTENTION]),
    ):
        vals = t.get_column(col).to_list()
        fig.add_trace(
            go.Bar(
                x=steps,
                y=[None if v is None else round(v, 4) for v in vals],
                name=name,
                marker_color=colour,
                hovertemplate="step %{x}: " + name + " max/mean %{y:.2f}<extra></extra>",
            )
        )
    fig.add_hline(y=1.0, line={"color": "#333333", "dash": "dot", "width": 1})
    fig.update_layout(barmode="group", template=TEMPLATE)
    fig.update_xaxes(type="category")
    return styled(fig, title=title, x_title="step", y_title="max / mean over DP groups (1 = balanced)")
