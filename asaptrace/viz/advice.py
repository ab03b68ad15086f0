"""Advice at a glance: each what-if that applies, what it wins back offline and serves online, the
recommended change marked, in one figure (the report's and the dashboard's Overview's first).

Input: an advice's JSON (``asaptrace advise --json``, :meth:`asaptrace.advise.advice.Advice.to_json`).
One row per applying what-if, in the advice's order, top to bottom:

* left, **offline**: the time it wins back on these batches as they arrived (a bar; negative: it
  loses time) with its range over what the store cannot pin (the whisker), and the Monte-Carlo
  band when the what-if carries one (``band.mc_low_ns``/``band.mc_high_ns``, makespans: drawn as the
  time they would win back, a thick translucent line);
* right, with ``--online`` only: its SLO throughput served under load (median over seeds, the
  whisker their range) and its capacity bound (a tick), beside the measured policy's throughput
  (a dashed line) and its seeds' range (a shaded band);
* the recommended change (:func:`asaptrace.advise.advice.recommend`) marked ★ and in green, the
  rule that chose it in the subtitle.

A store where nothing applies has no figure: :func:`asaptrace.advise.advice.nothing_applies_text`
says why, in its place.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from asaptrace.advise.advice import recommend
from asaptrace.units import rps_text, text_ns
from asaptrace.viz.theme import WAIT_COLOUR, plain, rows_height, styled, time_unit

#: the recommended change, the others that win back time, those that lose it
RECOMMENDED_COLOUR = "#2CA02C"
GAIN_COLOUR = "#9ECAE1"
LOSS_COLOUR = "#BDBDBD"
MC_COLOUR = "rgba(148, 103, 189, 0.45)"
MEASURED_COLOUR = "#555555"
BOUND_COLOUR = WAIT_COLOUR
#: the mark before the recommended change's name
STAR = "★ "
#: rows of the figure: each what-if gets this many pixels (its name, its bar, its whiskers)
ROW_PX = 44


def mc_recovered(w: dict[str, Any]) -> tuple[int, int] | None:
    """The Monte-Carlo band of a what-if as time won back (low, high), from its makespans' 5th–95th
    percentiles (the slowest makespan wins back least); None when it has none."""
    band = w.get("band") or {}
    lo, hi, ref = band.get("mc_low_ns"), band.get("mc_high_ns"), w.get("reference_ns")
    if lo is None or hi is None or ref is None:
        return None
    return int(ref) - int(hi), int(ref) - int(lo)


def row_label(w: dict[str, Any], recommended: str | None) -> str:
    """A what-if's name on the figure's axis: its label, ★ before the recommended one."""
    return (STAR if w["name"] == recommended else "") + plain(w["label"])


def advice_figure(j: dict[str, Any]) -> go.Figure | None:
    """The advice at a glance (module docstring); None when no what-if applies."""
    rows = [w for w in j["whatifs"] if w["applies"]]
    if not rows:
        return None
    rec = recommend(j)
    on = j.get("online") or {}
    online = on.get("status") == "run" and any((w.get("online") or {}).get("slo_rps") for w in rows)
    fig = make_subplots(
        rows=1,
        cols=2 if online else 1,
        shared_yaxes=True,
        horizontal_spacing=0.07,
        column_widths=[0.55, 0.45] if online else None,
    )
    names = [row_label(w, rec.name) for w in rows]
    titles = [_offline(fig, rows, names, rec.name)]
    if online:
        titles.append(_online(fig, rows, names, rec.name, on))
    fig.update_yaxes(
        type="category", categoryorder="array", categoryarray=names, autorange="reversed", showgrid=False
    )
    top = next((w for w in rows if w["name"] == rec.name), None)
    title = (
        f"Advice at a glance. Recommended: {top['label']}"
        if top
        else "Advice at a glance. No change recommended"
    )
    fig = styled(
        fig,
        title=title,
        subtitle=f"★ recommended, {rec.why}" if top else rec.why,
        x_title="",
        y_title="",
        height=rows_height(len(rows), per_row=ROW_PX, other_px=230),
    )
    for col, text in enumerate(titles, start=1):  # after styled(), which titles every x axis alike
        fig.update_xaxes(title_text=text, row=1, col=col)
    legend = [t for t in fig.data if t.name and t.showlegend is not False]
    fig.update_layout(barmode="overlay", hovermode="closest", showlegend=bool(legend))
    if len(legend) == 1:  # fit_top makes room for a legend of two entries or more
        fig.update_layout(margin={"t": fig.layout.margin.t + 24}, height=fig.layout.height + 24)
    return fig


def _offline(fig: go.Figure, rows: list[dict[str, Any]], names: list[str], rec: str | None) -> str:
    """The left panel: time won back, its range, the Monte-Carlo band when there is one; returns
    its axis title."""
    values = [
        v for w in rows for v in (w["recovered_ns"], w.get("recovered_low_ns"), w.get("recovered_high_ns"))
    ]
    unit, div = time_unit(values)

    def at(ns: int | None) -> float | None:
        return None if ns is None else float(f"{ns / div:.6g}")

    rec_ns = [w["recovered_ns"] for w in rows]
    lows = [
        w.get("recovered_low_ns") if w.get("recovered_low_ns") is not None else r
        for w, r in zip(rows, rec_ns, strict=True)
    ]
    highs = [
        w.get("recovered_high_ns") if w.get("recovered_high_ns") is not None else r
        for w, r in zip(rows, rec_ns, strict=True)
    ]
    colours = [
        RECOMMENDED_COLOUR if w["name"] == rec else (GAIN_COLOUR if r > 0 else LOSS_COLOUR)
        for w, r in zip(rows, rec_ns, strict=True)
    ]
    fig.add_trace(
        go.Bar(
            y=names,
            x=[at(r) for r in rec_ns],
            orientation="h",
            marker_color=colours,
            name="time won back",
            showlegend=False,  # its colours say recommended / wins / loses; the axis title its whisker
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [at(h - r) for h, r in zip(highs, rec_ns, strict=True)],
                "arrayminus": [at(r - lo) for lo, r in zip(lows, rec_ns, strict=True)],
                "color": "#333333",
                "thickness": 1.5,
                "width": 6,
            },
            text=[("wins back " if r >= 0 else "loses ") + text_ns(abs(r)) for r in rec_ns],
            textposition="none",
            customdata=[
                [text_ns(lo), text_ns(h), text_ns(w["reference_ns"])]
                for w, lo, h in zip(rows, lows, highs, strict=True)
            ],
            hovertemplate="%{y}: %{text} of %{customdata[2]}<br>range %{customdata[0]} to %{customdata[1]}"
            "<extra>offline</extra>",
        ),
        row=1,
        col=1,
    )
    bands = [mc_recovered(w) for w in rows]
    lows = [min([lo, *(b or ())]) for lo, b in zip(lows, bands, strict=True)]  # what the rows span
    highs = [max([h, *(b or ())]) for h, b in zip(highs, bands, strict=True)]
    ends = [max(h, r, 0) if r >= 0 else min(lo, r, 0) for lo, h, r in zip(lows, highs, rec_ns, strict=True)]
    fig.add_trace(  # the words beside the whisker's end, where they cover neither bar nor whisker
        go.Scatter(
            y=names,
            x=[at(e) for e in ends],
            mode="text",
            text=[(" wins back " if r >= 0 else "loses ") + text_ns(abs(r)) + " " for r in rec_ns],
            textposition=["middle right" if r >= 0 else "middle left" for r in rec_ns],
            showlegend=False,
            hoverinfo="skip",
            cliponaxis=False,
        ),
        row=1,
        col=1,
    )
    mc = list(zip(names, bands, strict=True))
    mc = [(n, b) for n, b in mc if b is not None]
    if mc:
        xs: list[float | None] = []
        ys: list[str | None] = []
        for n, (lo, hi) in mc:
            xs += [at(lo), at(hi), None]
            ys += [n, n, None]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": MC_COLOUR, "width": 14},
                name="Monte-Carlo band (5th–95th pct)",
                hovertemplate="%{y}: Monte-Carlo band edge %{x} " + unit + "<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_vline(x=0, line={"color": "#333333", "width": 1}, row=1, col=1)
    lo_x, hi_x = min(0, *lows) / div, max(0, *highs) / div
    pad = 0.4 * (hi_x - lo_x or 1)  # room for the words beside each whisker
    fig.update_xaxes(range=[lo_x - (pad if lo_x < 0 else 0.05 * pad), hi_x + pad], row=1, col=1)
    return f"offline: time won back ({unit}; whisker: its range)"


def _online(
    fig: go.Figure, rows: list[dict[str, Any]], names: list[str], rec: str | None, on: dict[str, Any]
) -> str:
    """The right panel: each what-if's SLO throughput with its seeds' range and capacity bound,
    the measured policy's throughput and range behind them; returns its axis title."""
    who = on.get("measured_policy", "coupled")
    base = (on.get("slo_rps") or {}).get(who)
    base_range = (on.get("slo_range") or {}).get(who)
    if base_range and None not in base_range:
        fig.add_vrect(
            x0=base_range[0],
            x1=base_range[1],
            fillcolor=MEASURED_COLOUR,
            opacity=0.12,
            line_width=0,
            row=1,
            col=2,
            exclude_empty_subplots=False,
        )
    if base is not None:
        fig.add_vline(
            x=base,
            line={"color": MEASURED_COLOUR, "dash": "dash", "width": 1.5},
            annotation_text=f"{plain(who)} as measured: {rps_text(base)}/s",
            annotation_position="bottom right",
            annotation_font_size=11,
            row=1,
            col=2,
            exclude_empty_subplots=False,
        )
    served = [
        (n, w, w["online"])
        for n, w in zip(names, rows, strict=True)
        if (w.get("online") or {}).get("slo_rps") is not None
    ]
    fig.add_trace(
        go.Scatter(
            y=[n for n, _, _ in served],
            x=[o["slo_rps"] for _, _, o in served],
            mode="markers+text",
            marker={
                "size": 11,
                "color": [RECOMMENDED_COLOUR if w["name"] == rec else "#1F77B4" for _, w, _ in served],
                "symbol": ["circle-open" if o.get("censored") else "circle" for _, _, o in served],
                "line": {"width": 2},
            },
            error_x={
                "type": "data",
                "symmetric": False,
                "array": [(o.get("range") or [None, o["slo_rps"]])[1] - o["slo_rps"] for _, _, o in served],
                "arrayminus": [
                    o["slo_rps"] - (o.get("range") or [o["slo_rps"], None])[0] for _, _, o in served
                ],
                "color": "#333333",
                "thickness": 1.5,
                "width": 6,
            },
            text=[f"{rps_text(o['slo_rps'], o.get('censored'))}/s" for _, _, o in served],
            textposition="top center",
            name="requests/s at the SLO (whisker: seeds)",
            hovertemplate="%{y}: %{text}<extra>online</extra>",
        ),
        row=1,
        col=2,
    )
    bounds = [(n, o) for n, _, o in served if o.get("bound_rps") is not None]
    if bounds:
        fig.add_trace(
            go.Scatter(
                y=[n for n, _ in bounds],
                x=[o["bound_rps"] for _, o in bounds],
                mode="markers",
                marker={"symbol": "line-ns", "size": 18, "line": {"width": 3, "color": BOUND_COLOUR}},
                name="capacity bound",
                customdata=[o.get("binding") or "–" for _, o in bounds],
                hovertemplate="%{y}: bound %{x:.2f}/s, the %{customdata} binds<extra></extra>",
            ),
            row=1,
            col=2,
        )
    top = max(
        [o["bound_rps"] for _, o in bounds]
        + [(o.get("range") or [0, o["slo_rps"]])[1] for _, _, o in served]
        + [base or 0]
    )
    fig.update_xaxes(range=[0, 1.08 * top], row=1, col=2)
    return "online: requests/s at the SLO"
