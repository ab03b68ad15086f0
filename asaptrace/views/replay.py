"""A replay as a human sees it (makespan and latency, per step, recovered time by cause, the cost
fit, the splits and the knobs varied, its range and its consistency check) and as flat tables
(``--csv`` / ``--parquet``)."""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.info import not_prefill_reason
from asaptrace.units import human_ns, percent, plural
from asaptrace.views.table import REPLAY_QUESTION, TableView, flat_frame, rows_view


def deployment_text(dep: dict[str, Any], *, short: bool = False) -> str:
    """'4×4 attention + 16 expert dies (32 devices)' or 'DP8×TP4 coupled (32 devices)'; ``short``:
    '4×4 + 16' / 'DP8×TP4'."""
    if short:
        if dep.get("kind") == "disaggregated":
            return f"{dep['groups']}×{dep['tp']} + {dep['experts']}"
        return f"DP{dep['groups']}×TP{dep['tp']}"
    if dep.get("kind") == "disaggregated":
        return f"{dep['groups']}×{dep['tp']} attention + {dep['experts']} expert dies ({plural(dep['devices'], 'device')})"
    return f"DP{dep['groups']}×TP{dep['tp']} coupled ({plural(dep.get('devices', dep['groups'] * dep['tp']), 'device')})"


def no_replay_reason(meta: dict[str, Any]) -> str | None:
    """Why no replay applies to a store (no step is prefill: a training or decode run), for a face to
    say before anyone asks for one; None when one may. The rule is the one the replay itself refuses
    by (:func:`asaptrace.info.not_prefill_reason`), so the page and ``asaptrace replay`` say the same."""
    return not_prefill_reason(meta)


def _share(ns: int, of: int) -> float | None:
    return ns / of if of else None


def replay_makespan_view(j: dict[str, Any]) -> TableView:
    """The answer: measured run, reference (a consistency check) and what-if — makespan, latency."""
    ref, lat, rlat = j["reference_makespan_ns"], j.get("latency") or {}, j.get("reference_latency") or {}
    rows = [
        ("measured run", j["measured_makespan_ns"], None, None, None),
        (
            f"{j['reference_policy']} replay (consistency check)",
            ref,
            rlat.get("mean_ns"),
            rlat.get("p99_ns"),
            0,
        ),
        (
            f"{j['policy']} what-if",
            j["makespan_ns"],
            lat.get("mean_ns"),
            lat.get("p99_ns"),
            ref - j["makespan_ns"],
        ),
    ]
    return rows_view(
        f"Makespan (first batch ready → last batch done) and batch latency (ready → done) — {REPLAY_QUESTION}",
        {
            "run": "run",
            "makespan_ns": "makespan",
            "latency_mean_ns": "batch latency mean",
            "latency_p99_ns": "batch latency p99",
            "recovered_ns": "recovered",
        },
        rows,
        name="makespan",
        caption="recovered = reference makespan − what-if makespan; per-step times below are latencies, never summed",
    )


def replay_steps_view(j: dict[str, Any]) -> TableView:
    """Per measured step: its measured time and each replay's latency (ready → last batch done)."""
    rows = [(s["step"], s["measured_ns"], s["reference_ns"], s["replayed_ns"]) for s in j["steps"]]
    return rows_view(
        "Per step: latency of its batches (they may overlap the next step's: not summed)",
        {
            "step": "step",
            "measured_ns": "measured step",
            "reference_ns": f"{j['reference_policy']} replay",
            "replayed_ns": f"{j['policy']}",
        },
        rows,
        name="steps",
        dtypes=dict.fromkeys(("step", "measured_ns", "reference_ns", "replayed_ns"), pl.Int64),
    )


def replay_causes_view(j: dict[str, Any]) -> TableView:
    """Recovered time by cause, each at its deployment (the counterfactual sequence)."""
    ref = j["reference_makespan_ns"]
    cf = j.get("counterfactuals") or [
        {"cause": c, "deployment": j["deployment"], "replayed_ns": None, "recovered_ns": v}
        for c, v in (j.get("recovered_ns") or {}).items()
    ]
    total = ref - j["makespan_ns"]
    rows = [
        *(
            (
                r["cause"].replace("_", " "),
                deployment_text(r["deployment"], short=True),
                r["replayed_ns"],
                r["recovered_ns"],
                _share(r["recovered_ns"], ref),
            )
            for r in cf
        ),
        ("total", deployment_text(j["deployment"], short=True), j["makespan_ns"], total, _share(total, ref)),
    ]
    return rows_view(
        "Recovered time by cause (each step replayed at the store's device total unless asked)",
        {
            "cause": "cause",
            "deployment": "deployment",
            "replayed_ns": "makespan after",
            "recovered_ns": "recovered",
            "recovered_share": "of the reference",
        },
        rows,
        name="recovered",
        caption="each cause is the drop in makespan from the replay before it; they add up to the total",
        dtypes={"replayed_ns": pl.Int64},
    )


def cost_fit_view(fit: dict[str, Any] | None) -> TableView:
    """Per cost part: fitted or default (why), points, R², residual p50 / p95."""
    rows = [
        (
            part,
            q.get("status", "fitted" if "r2" in q else "default"),
            q.get("n"),
            q.get("r2"),
            q.get("residual_p50_pct"),
            q.get("residual_p95_pct"),
            q.get("reason") or q.get("note") or q.get("data") or "",
        )
        for part, q in (fit or {}).items()
    ]
    return rows_view(
        "Cost fit (what every what-if rests on)",
        {
            "part": "part",
            "status": "status",
            "points": "points",
            "r2": "R²",
            "residual_p50_pct": "residual p50 %",
            "residual_p95_pct": "residual p95 %",
            "note": "note",
        },
        rows,
        name="fit",
        caption="residual % = |measured − fitted| / measured over the fitted points; a default part was not fitted",
        dtypes={
            "part": pl.String,
            "status": pl.String,
            "points": pl.Int64,
            "r2": pl.Float64,
            "residual_p50_pct": pl.Float64,
            "residual_p95_pct": pl.Float64,
            "note": pl.String,
        },
    )


def split_view(splits: list[dict[str, Any]]) -> TableView:
    """--split auto: every split of the device total, the best marked."""
    rows = [
        (
            ("★ " if r["best"] else "") + r["split"],
            r["makespan_ns"],
            r["latency_mean_ns"],
            r["latency_p99_ns"],
            r["pool_utilisation"],
            r["attention_utilisation"],
            r["binding"] + (" (bandwidth-bound)" if r.get("bandwidth_bound") else ""),
        )
        for r in splits
    ]
    return rows_view(
        "Every attention/expert split of the device total (★ the best makespan)",
        {
            "split": "split",
            "makespan_ns": "makespan",
            "latency_mean_ns": "latency mean",
            "latency_p99_ns": "latency p99",
            "pool_utilisation": "pool busy",
            "attention_utilisation": "attention busy",
            "binding": "binds",
        },
        rows,
        name="splits",
    )


def vary_view(j: dict[str, Any]) -> TableView:
    """--vary: the recovered time per knob value (the range over what the store cannot pin)."""
    rows = [(v["knob"], v["value"], v["makespan_ns"], v["recovered_ns"]) for v in j.get("vary") or []]
    return rows_view(
        "The answer's range: one knob the store cannot pin varied at a time",
        {"knob": "knob", "value": "value", "makespan_ns": "what-if makespan", "recovered_ns": "recovered"},
        rows,
        name="vary",
        dtypes={"knob": pl.String, "value": pl.String, "makespan_ns": pl.Int64, "recovered_ns": pl.Int64},
    )


def replay_views(j: dict[str, Any]) -> list[TableView]:
    """The tables of a replay every face shows, in order (``name`` is each table's id): the splits
    tried, the makespans, the steps, the causes, the range, the cost fit."""
    views = [split_view(j["splits"])] if j.get("splits") else []
    views += [replay_makespan_view(j), replay_steps_view(j)]
    if j.get("recovered_ns"):
        views.append(replay_causes_view(j))
    if j.get("vary"):
        views.append(vary_view(j))
    return [*views, cost_fit_view(j.get("cost_fit"))]


def band_text(j: dict[str, Any]) -> str:
    """One line: the recovered time with its band from the fit's residuals (or why there is none)."""
    total = j["reference_makespan_ns"] - j["makespan_ns"]
    b = j.get("band") or {}
    if b.get("status") == "fitted":
        parts = ", ".join(f"{k} ±{percent(v)}" for k, v in b["parts"].items())
        return (
            f"recovered {human_ns(total)} (band {human_ns(b['recovered_low_ns'])} … "
            f"{human_ns(b['recovered_high_ns'])} from the fit's residual p95: {parts}){mc_text(j)}"
        )
    return (
        f"recovered {human_ns(total)} (no band from the fit: {b.get('reason', 'not computed')}){mc_text(j)}"
    )


def mc_text(j: dict[str, Any]) -> str:
    """The Monte-Carlo band of the makespan ('' when none was drawn)."""
    b = j.get("band") or {}
    if b.get("mc_status") != "drawn":
        return ""
    prior = b.get("mc_contention_prior")
    assumed = (
        f"; its high edge assumes link contention κ up to {prior['kappa'][1]:g} per transfer in flight, "
        "which the measured run cannot show (the makespan assumes none)"
        if prior
        else ""
    )
    return (
        f"; makespan {human_ns(j['makespan_ns'])}, {b['mc_runs']} noisy re-runs: "
        f"{human_ns(b['mc_low_ns'])} … {human_ns(b['mc_high_ns'])} (5th–95th percentile){assumed}"
    )


def model_error_text(j: dict[str, Any]) -> str:
    """How far this model was from the run it was fitted to ('' when not measured)."""
    m = j.get("model_error") or {}
    if m.get("status") != "measured" or m.get("error") is None:
        return ""
    return (
        f"how far this model was from your run: {m['error']:+.1f}% on the makespan "
        f"({m['what']}: {human_ns(m['makespan_ns'])} against {human_ns(m['measured_ns'])} measured)"
    )


def consistency_text(j: dict[str, Any]) -> str:
    c = j.get("consistency") or {
        "policy": j.get("reference_policy"),
        "mean_pct": j.get("error_mean_pct", 0),
        "max_pct": j.get("error_max_pct", 0),
        "exact_by_construction": j.get("reference_policy") == "coupled",
    }
    how = (
        "exact by construction: it checks the mechanics, not the cost model"
        if c.get("exact_by_construction")
        else "on the fitted costs"
    )
    model = model_error_text(j)
    return (
        f"consistency check: the {c['policy']} replay differs from the measured steps by {c['mean_pct']:.2f}% mean, "
        f"{c['max_pct']:.2f}% max ({how})" + (f"; {model}" if model else "")
    )


def replay_tables(j: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """``steps`` (one row per measured step: measured, reference, replayed) and ``causes`` (one row
    per cause of the recovered time, in the counterfactual sequence), plus ``splits`` and ``vary``
    when asked (``--split auto``, ``--vary``)."""
    steps = flat_frame(
        j["steps"],
        {"step": pl.Int64, "measured_ns": pl.Int64, "reference_ns": pl.Int64, "replayed_ns": pl.Int64},
    )
    causes = flat_frame(
        [
            {"order": i, **c, **{f"deployment_{k}": v for k, v in (c.get("deployment") or {}).items()}}
            for i, c in enumerate(j.get("counterfactuals") or [], start=1)
        ],
        {
            "order": pl.Int64,
            "cause": pl.String,
            "policy": pl.String,
            "replayed_ns": pl.Int64,
            "recovered_ns": pl.Int64,
            "deployment_groups": pl.Int64,
            "deployment_tp": pl.Int64,
            "deployment_experts": pl.Int64,
            "deployment_devices": pl.Int64,
        },
    )
    out = {"steps": steps, "causes": causes}
    if j.get("splits"):
        out["splits"] = flat_frame(
            j["splits"],
            {
                "split": pl.String,
                "attention": pl.String,
                "experts": pl.Int64,
                "m": pl.Int64,
                "makespan_ns": pl.Int64,
                "latency_mean_ns": pl.Int64,
                "latency_p99_ns": pl.Int64,
                "pool_utilisation": pl.Float64,
                "attention_utilisation": pl.Float64,
                "binding": pl.String,
                "bandwidth_bound": pl.Boolean,
                "best": pl.Boolean,
            },
        )
    if j.get("vary"):
        out["vary"] = flat_frame(
            j["vary"],
            {
                "knob": pl.String,
                "value": pl.String,
                "makespan_ns": pl.Int64,
                "reference_ns": pl.Int64,
                "recovered_ns": pl.Int64,
            },
        )
    return out
