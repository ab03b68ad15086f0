"""Replay figures: measured vs replayed step time, and the recovered time by cause as a waterfall.

Input: the JSON form of a replay result (:meth:`asaptrace.replay.whatif.run.ReplayResult.to_json`, keys in
docs/analyses/replay.md) — the same object ``asaptrace replay --json`` prints, so a figure can be drawn
from a saved result as well as from a live one.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from asaptrace.viz.theme import WAIT_COLOUR, empty_figure, label_every, rows_height, styled, time_unit

#: Bars of the step figure: (key of a step row, legend name, colour).
STEP_BARS = (
    ("measured_ns", "measured", "#7F7F7F"),
    ("reference_ns", "reference replay", "#AEC7E8"),  # per-step latencies (ready → last batch done)
    ("replayed_ns", "replayed", "#2CA02C"),
)


def replay_steps(result: dict[str, Any]) -> go.Figure:
    """Per step: measured time, the reference replay (its reproduction) and the policy's replay."""
    title = f"Per step: measured time and replayed latency ({result.get('policy', '?')})"
    steps = result.get("steps") or []
    if not steps:
        return empty_figure(title, "no steps replayed")
    unit, div = time_unit([max(max(s[k] for k, _, _ in STEP_BARS) for s in steps)])
    x = [str(s["step"]) for s in steps]
    fig = go.Figure(
        [
            go.Bar(
                x=x,
                y=[float(f"{s[key] / div:.6g}") for s in steps],
                name=name if key != "reference_ns" else f"{result.get('reference_policy', '')} replay",
                marker_color=colour,
                hovertemplate="step %{x}: %{y} " + unit + "<extra>" + name + "</extra>",
            )
            for key, name, colour in STEP_BARS
        ]
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(type="category")
    return styled(fig, title=title, x_title="step", y_title=f"step time ({unit})")


def recovered_waterfall(result: dict[str, Any]) -> go.Figure:
    """From the coupled replay (``baseline_ns``) down to the policy's replay, one bar per cause.

    Each cause's bar is the time it recovered (Σ causes = baseline − replayed, which the replay
    checks), so the last bar lands on the replayed total.
    """
    ref = f"{result.get('reference_policy') or 'coupled'} replay"
    title = f"Recovered makespan by cause: {ref} → {result.get('policy', '?')}"
    causes = result.get("recovered_ns") or {}
    if not causes:
        return empty_figure(title, "no recovered time attributed (run with attribution)")
    base = int(result["baseline_ns"])
    unit, div = time_unit([base])
    names = [ref, *(c.replace("_", " ") for c in causes), result.get("policy", "replayed")]
    values = [base, *(-int(v) for v in causes.values()), 0]
    fig = go.Figure(
        go.Waterfall(
            x=names,
            y=[float(f"{v / div:.6g}") for v in values],
            measure=["absolute", *(["relative"] * len(causes)), "total"],
            decreasing={"marker": {"color": "#2CA02C"}},
            increasing={"marker": {"color": WAIT_COLOUR}},
            totals={"marker": {"color": "#7F7F7F"}},
            hovertemplate="%{x}: %{y} " + unit + "<extra></extra>",
        )
    )
    fig.update_xaxes(type="category")
    return styled(fig, title=title, x_title="", y_title=f"makespan ({unit})")


def recovered_tornado(result: dict[str, Any]) -> go.Figure:
    """Per knob of ``replay --vary``: the range of the recovered time over its values, widest on top."""
    title = "The answer's range: recovered time over each knob's values"
    rows = result.get("tornado") or []
    if not rows:
        return empty_figure(title, "no knob varied (replay --vary KNOB=V1,V2 to see how far it moves)")
    rows = list(reversed(rows))
    unit, div = time_unit(
        [max(abs(int(r[k])) for r in rows for k in ("recovered_min_ns", "recovered_max_ns"))]
    )
    fig = go.Figure(
        go.Bar(
            y=[str(r["knob"]) for r in rows],
            x=[float(f"{(int(r['recovered_max_ns']) - int(r['recovered_min_ns'])) / div:.6g}") for r in rows],
            base=[float(f"{int(r['recovered_min_ns']) / div:.6g}") for r in rows],
            orientation="h",
            marker_color="#1F77B4",
            text=[f"{r['at_min']} → {r['at_max']}" for r in rows],
            hovertemplate="%{y}: %{base} + %{x} " + unit + " (%{text})<extra></extra>",
        )
    )
    fig.add_vline(x=0.0, line={"color": "#333333", "dash": "dot", "width": 1})
    label_every(fig, "y", [str(r["knob"]) for r in rows])
    return styled(
        fig, title=title, x_title=f"recovered time ({unit})", y_title="knob", height=rows_height(len(rows))
    )
