"""SLO sweep figures: the rate → mean TTFT curve of each policy with the SLO line, and the tornado.

Input: the sweep's result object (``asaptrace sweep --json``; keys in docs/reference/sweep-json.md):
``curves`` (per policy, points with ``rate`` and ``mean_ttft_ns``), ``slo_ttft_ns``, ``slo_rps`` and
``tornado`` (per varied knob, the lowest and highest ratio).

The results carry per rate only the mean, p50 and p99 TTFT (no per-request TTFTs, no other
quantiles), so the "TTFT CDF per policy" of issue 11 is drawn as :func:`ttft_quantiles`: the p50
and p99 TTFT per rate, the two points of each policy's CDF the sweep keeps.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from asaptrace.viz.theme import WAIT_COLOUR, empty_figure, label_every, plain, rows_height, styled

#: One colour per policy, in the order the sweep lists them.
POLICY_COLOURS = ("#7F7F7F", "#FF7F0E", "#2CA02C", "#1F77B4", "#9467BD", "#8C564B")


def ttft_curves(result: dict[str, Any]) -> go.Figure:
    """Mean TTFT (s) against request rate per policy, the SLO as a horizontal line, each policy's
    SLO-compliant throughput in its legend entry."""
    title = "Mean TTFT vs request rate (SLO line dashed)"
    curves = result.get("curves") or {}
    if not any(curves.values()):
        return empty_figure(title, "no sweep points")
    fig = go.Figure()
    for i, (policy, points) in enumerate(curves.items()):
        pts = sorted((p for p in points if p.get("mean_ttft_ns") is not None), key=lambda p: p["rate"])
        rps = (result.get("slo_rps") or {}).get(policy)
        label = plain(policy) + (f" (SLO at {rps:.2f}/s)" if rps is not None else " (misses the SLO)")
        fig.add_trace(
            go.Scatter(
                x=[p["rate"] for p in pts],
                y=[round(p["mean_ttft_ns"] / 1e9, 6) for p in pts],
                mode="lines+markers",
                name=label,
                line={"color": POLICY_COLOURS[i % len(POLICY_COLOURS)]},
                hovertemplate=plain(policy) + ": %{x:.3g}/s → %{y:.3g} s<extra></extra>",
            )
        )
    slo = result.get("slo_ttft_ns")
    if slo:
        fig.add_hline(
            y=slo / 1e9,
            line={"color": WAIT_COLOUR, "dash": "dash"},
            annotation_text=f"SLO {slo / 1e9:g} s",
        )
    return styled(fig, title=title, x_title="request rate (1/s)", y_title="mean TTFT (s)")


#: The quantile lines of :func:`ttft_quantiles`: (key of a curve point, legend suffix, line dash).
QUANTILES = (("p50_ttft_ns", "p50", "solid"), ("p99_ttft_ns", "p99", "dot"))


def ttft_quantiles(result: dict[str, Any]) -> go.Figure:
    """p50 (solid) and p99 (dotted) TTFT (s) against request rate, per policy.

    The sweep's results keep only these two points of each rate's TTFT distribution (not the
    per-request TTFTs a full CDF needs), so this is the CDF the results can show: where half and
    99 % of the requests had their first token, rate by rate, with the SLO line.
    """
    title = "p50 and p99 TTFT vs request rate (p99 dotted, SLO line dashed)"
    curves = result.get("curves") or {}
    if not any(curves.values()):
        return empty_figure(title, "no sweep points")
    fig = go.Figure()
    for i, (policy, points) in enumerate(curves.items()):
        for key, suffix, dash in QUANTILES:
            pts = sorted((p for p in points if p.get(key) is not None), key=lambda p: p["rate"])
            fig.add_trace(
                go.Scatter(
                    x=[p["rate"] for p in pts],
                    y=[round(p[key] / 1e9, 6) for p in pts],
                    mode="lines+markers",
                    name=f"{plain(policy)} {suffix}",
                    line={"color": POLICY_COLOURS[i % len(POLICY_COLOURS)], "dash": dash},
                    hovertemplate=f"{plain(policy)} {suffix}: " + "%{x:.3g}/s → %{y:.3g} s<extra></extra>",
                )
            )
    slo = result.get("slo_ttft_ns")
    if slo:
        fig.add_hline(
            y=slo / 1e9, line={"color": WAIT_COLOUR, "dash": "dash"}, annotation_text=f"SLO {slo / 1e9:g} s"
        )
    return styled(fig, title=title, x_title="request rate (1/s)", y_title="TTFT (s)")


def sensitivity_tornado(result: dict[str, Any]) -> go.Figure:
    """Per varied knob, the range of the headline ratio (asap / first policy), widest swing on top."""
    title = "Sensitivity: SLO-throughput ratio over each knob's values"
    rows = result.get("tornado") or []
    if not rows:
        return empty_figure(title, "no knob varied (vary one to see how far the ratio moves)")
    rows = list(reversed(rows))  # the sweep lists the widest first; plotly draws bottom-up
    fig = go.Figure(
        go.Bar(
            y=[plain(r["knob"]) for r in rows],
            x=[round(r["ratio_max"] - r["ratio_min"], 6) for r in rows],
            base=[r["ratio_min"] for r in rows],
            orientation="h",
            marker_color="#1F77B4",
            text=[f"{plain(str(r['at_min']))} → {plain(str(r['at_max']))}" for r in rows],
            hovertemplate="%{y}: ratio %{base:.2f} – %{x:.2f} wider (%{text})<extra></extra>",
        )
    )
    fig.add_vline(x=1.0, line={"color": "#333333", "dash": "dot", "width": 1})
    label_every(fig, "y", [plain(r["knob"]) for r in rows])
    return styled(
        fig, title=title, x_title="ratio of SLO throughputs", y_title="knob", height=rows_height(len(rows))
    )
