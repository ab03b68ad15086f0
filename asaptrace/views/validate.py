"""What ``asaptrace validate`` shows: the prediction of another store against its measurement."""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.units import human_ns
from asaptrace.views.table import TableView, rows_view


def _covered(e: dict[str, Any]) -> str:
    return "yes" if e["covered"] else "no"


def validate_lines(j: dict[str, Any]) -> list[str]:
    """The answer in sentences: the prediction, its error and band, and the model's own error."""
    o = j["overall"]
    dep = j["deployment"]
    where = (
        f"{dep['groups']}×{dep['tp']} + {dep['experts']}"
        if dep["kind"] == "disaggregated"
        else f"coupled {dep['groups']}×{dep['tp']}"
    )
    lines = [
        f"fitted on {j['measured_store']}, predicted {j['other_store']} ({j['policy']} on {where}): "
        f"makespan {human_ns(o['predicted_ns'])} against {human_ns(o['measured_ns'])} measured, "
        f"error {o['error']:+.2f}%; band of {j['mc_runs']} noisy re-runs "
        f"{human_ns(o['band']['mc_low_ns'])} … {human_ns(o['band']['mc_high_ns'])}, "
        f"covers the measured value: {_covered(o)}",
    ]
    if prior := j.get("mc_contention_prior"):
        lines.append(
            f"the band's high edge assumes link contention κ up to {prior['kappa'][1]:g} per transfer in "
            "flight, which the fitted run cannot show (the prediction assumes none)"
        )
    m = j.get("model_error") or {}
    if m.get("error") is not None:
        lines.append(
            f"how far this model was from the run it was fitted to: {m['error']:+.1f}% ({m['what']})"
        )
    return lines + [f"warning: {w}" for w in j.get("warnings", [])]


def validate_views(j: dict[str, Any]) -> list[TableView]:
    """Per step and per layer: predicted, measured, error, band, covered."""
    steps = rows_view(
        "Per step: predicted against measured",
        {
            "step": "step",
            "predicted_ns": "predicted",
            "measured_ns": "measured",
            "error": "error %",
            "mc_low_ns": "band low",
            "mc_high_ns": "band high",
            "covered": "covered",
        },
        [
            (
                s["step"],
                s["predicted_ns"],
                s["measured_ns"],
                s["error"],
                s["band"]["mc_low_ns"],
                s["band"]["mc_high_ns"],
                s["covered"],
            )
            for s in j["steps"]
        ],
        name="validate-steps",
        dtypes={"step": pl.Int64, "predicted_ns": pl.Int64, "measured_ns": pl.Int64, "error": pl.Float64},
    )
    layers = rows_view(
        "Per layer: predicted attention + MoE work against measured",
        {"layer": "layer", "predicted_ns": "predicted", "measured_ns": "measured", "error": "error %"},
        [(r["layer"], r["predicted_ns"], r["measured_ns"], r["error"]) for r in j["layers"]],
        name="validate-layers",
        dtypes={"layer": pl.Int64, "predicted_ns": pl.Int64, "measured_ns": pl.Int64, "error": pl.Float64},
    )
    return [steps, layers]
