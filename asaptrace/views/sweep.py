"""An online sweep as a human sees it (SLO throughput beside its capacity bound, TTFT by rate, its
decomposition, sensitivity, the paper's numbers beside ours) and as flat tables, at any width.

Every online number stands beside its capacity bound (binding resource named) and its range over
seeds. A view takes an optional terminal ``width``: ``None`` (the report, the dashboard, a notebook)
and ≥ :data:`~asaptrace.views.table.WIDE` are complete; narrower terminals get fewer columns.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.replay.serving.steady import meets_slo
from asaptrace.replay.whatif.sweep_result import DECOMPOSITION_SCHEMA
from asaptrace.units import percent, rps_text
from asaptrace.views.replay import deployment_text
from asaptrace.views.table import TableView, flat_frame, narrow, rows_view


def sweep_header(res: Any) -> list[str]:
    """The lines above a sweep's tables: what was swept, the knobs and costs it assumed, the
    calibration and the length fit (each only when there is one)."""
    k = res.get("knobs") or {}
    lines = [
        f"sweep: scenario {res.get('scenario', '–')}, {res.get('workload', '–')}, "
        f"{res.get('duration_ns', 0) / 1e9:g} s per rate, SLO mean TTFT ≤ {res['slo_ttft_ns'] / 1e9:g} s, "
        f"seed {k.get('seed', '–')}"
    ]
    if k:
        served = res.get("policy_settings") or {}
        deps = ", ".join(
            f"{p} {deployment_text(s['deployment'], short=True)}"
            for p, s in served.items()
            if s.get("deployment")
        )
        lines.append(
            f"knobs assumed: k_s {k['coupled_k_s']:g}, E_ref {k['moe_e_ref']:g}, φ {k['attn_phi']:g}, "
            f"cost scale {k['cost_scale']:g} ({k['cost_source']}); {k['layers']} layers"
            + (f"; served on {deps}" if deps else "")
        )
    if res.get("costs_from"):
        lines.append(f"costs: {res['costs_from']}")
    if res.get("calibration"):
        c = res["calibration"]
        lines.append(
            f"calibrated: cost scale {c['cost_scale']:g} makes {c['policy']} {c['target_ms']:g} ms at {c['rate']:g}/s"
        )
    if res.get("lengths_fit"):
        f = res["lengths_fit"]
        qs = "  ".join(f"{q} {f[q]:,.0f}" for q in f if q.startswith("q"))
        lines.append(
            f"lengths: log-logistic α {f['alpha']:,.0f} β {f['beta']:.3f} truncated to [{f['lo']}, {f['hi']}]: "
            f"mean {f['mean']:,.0f}, mode {f['mode']:,.0f}; quantiles {qs}"
        )
    return lines


BINDING_SHORT = {
    "attention groups": "A",
    "MoE pool": "P",
    "coupled steps": "S",
    "MoE on the attention dies": "M",
}


BOUND_LEGEND = (
    "its binding resource A attention groups, P MoE pool, S coupled steps, M MoE on the attention dies"
)


def bound_text(cap: dict[str, Any] | None) -> str:
    """``7.91 P``: a policy's capacity bound and its binding resource (– when it has none)."""
    if not cap or cap.get("bound_rps") is None:
        return "–"
    return f"{rps_text(cap['bound_rps'])} {BINDING_SHORT.get(cap['binding'], cap['binding'])}"


def range_rps_text(r: list[float] | None) -> str:
    return "–" if not r else f"{rps_text(r[0])}–{rps_text(r[1])}"


def sweep_slo_view(res: Any, *, width: int | None = None) -> TableView:
    """Per policy: our SLO-compliant throughput (median over seeds, their range, the capacity bound)
    and its ratio to the first policy, the paper's beside them, and the mean TTFT at 1 request/s
    (ours, the paper's). A narrow terminal drops the two TTFT columns
    (:func:`sweep_at_1rps_line` says them in words)."""
    pols = list(res["policies"])
    paper = res.get("paper") or {}
    p_rps, p_1 = paper.get("slo_rps") or {}, paper.get("mean_ttft_ms_at_1rps") or {}
    base = p_rps.get(pols[0]) if pols else None
    censored, ratios, at1 = (
        res.get("slo_censored") or {},
        res.get("ratios") or {},
        res.get("mean_ttft_ns_at_1rps") or {},
    )
    cap, ranges = res.get("capacity") or {}, res.get("slo_range") or {}
    seeds = len(res.get("seeds") or []) > 1
    full = not narrow(width)
    rows = [
        (
            p,
            rps_text(res["slo_rps"].get(p), bool(censored.get(p))),
            *((range_rps_text(ranges.get(p)),) if seeds else ()),
            bound_text(cap.get(p)),
            ratios.get(p),
            None if p_rps.get(p) is None else f"{p_rps[p]:g}",
            p_rps[p] / base if p_rps.get(p) is not None and base else None,
            *((at1.get(p), None if p_1.get(p) is None else round(p_1[p] * 1e6)) if full else ()),
        )
        for p in pols
    ]
    question = f" — {res['question']}" if res.get("question") else ""
    columns = {
        "policy": "policy",
        "slo_rps": "SLO RPS" + (" median" if seeds else ""),
        **({"slo_range": "seeds"} if seeds else {}),
        "bound": "bound",
        "ratio": "ratio",
        "paper_slo_rps": "paper RPS",
        "paper_ratio": "paper ratio",
        **({"ttft_at_1rps_ns": "mean TTFT @1/s", "paper_ttft_at_1rps_ns": "paper @1/s"} if full else {}),
    }
    dtypes = dict.fromkeys(columns, pl.String) | {
        "ratio": pl.Float64,
        "paper_ratio": pl.Float64,
        "ttft_at_1rps_ns": pl.Int64,
        "paper_ttft_at_1rps_ns": pl.Int64,
    }
    return rows_view(
        f"SLO-compliant throughput (requests/s){question}",
        columns,
        rows,
        name="sweep-slo",
        # the ≥ is explained only where one is shown
        caption=(
            "≥: the SLO was met at every rate swept (a lower bound); "
            if any(censored.get(p) for p in pols)
            else ""
        )
        + (
            f"seeds: min–max over {len(res['seeds'])} seeds; "
            if seeds
            else f"one seed ({(res.get('seeds') or ['–'])[0]}): no range (--seeds 5 gives one); "
        )
        + f"bound: the capacity bound, {BOUND_LEGEND}; ratio = policy / "
        + (pols[0] if pols else "the first policy"),
        dtypes={c: dtypes[c] for c in columns},
    )


def sweep_at_1rps_line(res: Any) -> str:
    """The mean TTFT at 1 request/s per policy (the paper's beside it), in words: what a narrow
    terminal shows instead of the SLO table's last two columns."""
    from asaptrace.units import human_ns

    at1 = res.get("mean_ttft_ns_at_1rps") or {}
    p_1 = (res.get("paper") or {}).get("mean_ttft_ms_at_1rps") or {}
    parts = []
    for p in res["policies"]:
        text = f"{p} {human_ns(at1.get(p), sig=True)}"
        if p_1.get(p) is not None:
            text += f" (paper {human_ns(round(p_1[p] * 1e6), sig=True)})"
        parts.append(text)
    return "mean TTFT at 1 request/s: " + ", ".join(parts)


def sweep_legend(res: Any) -> str:
    """What the SLO table's columns mean (the view's caption), one line for a terminal."""
    return sweep_slo_view(res).caption


def paper_shares_line(res: Any) -> str | None:
    """The paper's TTFT shares for short requests, shown under the decomposition (None without them)."""
    short = (res.get("paper") or {}).get("short_request_shares")
    if not short:
        return None
    return (
        f"paper: coupled (its Default) at {short['rate']:g}/s, requests < {short['below_tokens']} "
        f"tokens: synchronisation {percent(short['sync'])}, queueing {percent(short['queue'])} of TTFT"
    )


def sweep_curves_view(res: Any) -> TableView:
    """Rate → mean (and p99, up to three policies) TTFT per policy; every quantile is in --json."""
    pols = list(res["policies"])
    rates = sorted({row["rate"] for p in pols for row in res["curves"][p]})
    by = {(p, row["rate"]): row for p in pols for row in res["curves"][p]}
    p99 = len(pols) <= 3
    columns = {"rate": "rate /s"}
    for i, p in enumerate(pols):
        columns[f"mean_{i}_ns"] = f"{p} mean"
        if p99:
            columns[f"p99_{i}_ns"] = f"{p} p99"
    rows = []
    for r in rates:
        row: list[Any] = [r]
        for p in pols:
            point = by.get((p, r)) or {}
            row.append(point.get("mean_ttft_ns"))
            if p99:
                row.append(point.get("p99_ttft_ns"))
        rows.append(tuple(row))
    dtypes = {c: (pl.Float64 if c == "rate" else pl.Int64) for c in columns}
    unstable = [
        f"{p} at {rps_text(r)}/s"
        for p in pols
        for r in rates
        if (by.get((p, r)) or {}).get("stable") is False
    ]
    caption = "each point a steady-state run (the one the SLO column reads)"
    if unstable:
        caption += (
            f"; not stable (its backlog grew), so not SLO-compliant whatever its mean: {', '.join(unstable)}"
        )
    return rows_view("TTFT by rate", columns, rows, name="sweep-curves", dtypes=dtypes, caption=caption)


def sweep_decomposition_view(res: Any) -> TableView:
    """TTFT = queue + own + sync by prompt length at the decomposition rate (shares of the mean)."""
    from asaptrace.replay.whatif.sweep_result import DECOMPOSITION_SCHEMA  # `ingest` loads no replay module

    rows = [tuple(b[c] for c in DECOMPOSITION_SCHEMA) for b in res.get("decomposition") or []]
    return rows_view(
        f"TTFT decomposition at {res.get('decomposition_rate', 0):g}/s",
        {
            "policy": "policy",
            "bucket": "prompt tokens",
            "n_requests": "requests",
            "mean_ttft_ns": "mean TTFT",
            "queue_share": "queue",
            "own_share": "own",
            "sync_share": "sync",
        },
        rows,
        name="sweep-decomposition",
        caption="queue: arrival → first work; own: its share of the kernels it is in; sync: the rest",
        dtypes=DECOMPOSITION_SCHEMA,
    )


def sweep_vary_view(res: Any) -> TableView:
    """One knob at a time: each value's SLO throughput per policy and the headline ratio."""
    from asaptrace.replay.whatif.sweep_result import headline_policy  # `ingest` loads no replay module

    pols = list(res["policies"])
    columns = {"knob": "knob", "value": "value"}
    columns |= {f"rps_{i}": f"{p} RPS" for i, p in enumerate(pols)}
    columns["ratio"] = f"{headline_policy(pols)}/{pols[0]}" if pols else "ratio"
    rows = [
        (
            str(v["knob"]),
            str(v["value"]),
            *(rps_text((v.get("slo_rps") or {}).get(p)) for p in pols),
            v.get("ratio"),
        )
        for v in res.get("vary") or []
    ]
    dtypes = dict.fromkeys(columns, pl.String) | {"ratio": pl.Float64}
    return rows_view("Sensitivity (one knob at a time)", columns, rows, name="sweep-vary", dtypes=dtypes)


def sweep_tornado_view(res: Any) -> TableView:
    """Each varied knob's range of the headline ratio, widest first."""
    rows = [
        (
            e["knob"],
            e["ratio_min"],
            str(e["at_min"]),
            e["ratio_max"],
            str(e["at_max"]),
            e["ratio_max"] - e["ratio_min"],
        )
        for e in res.get("tornado") or []
    ]
    return rows_view(
        "Tornado (widest first)",
        {
            "knob": "knob",
            "min_ratio": "lowest ratio",
            "at_min": "at",
            "max_ratio": "highest ratio",
            "at_max": "at",
            "swing": "swing",
        },
        rows,
        name="sweep-tornado",
        caption="no rows: no ratio to compare (the SLO was met at every rate swept, or missed at the lowest)",
        dtypes={
            "knob": pl.String,
            "min_ratio": pl.Float64,
            "at_min": pl.String,
            "max_ratio": pl.Float64,
            "at_max": pl.String,
            "swing": pl.Float64,
        },
    )


def sweep_views(res: Any, *, width: int | None = None) -> list[TableView]:
    """Every table of a sweep, in the order each face shows them (vary and tornado when asked)."""
    views = [sweep_slo_view(res, width=width), sweep_curves_view(res), sweep_decomposition_view(res)]
    if res.get("vary"):
        views += [sweep_vary_view(res), sweep_tornado_view(res)]
    return views


_QUANTILE_KEYS = (
    "mean_ttft_ns",
    "p50_ttft_ns",
    "p99_ttft_ns",
    "mean_queue_ns",
    "mean_own_ns",
    "mean_sync_ns",
)


def sweep_tables(res: Any) -> dict[str, pl.DataFrame]:
    """``curves`` (one row per policy × rate: requests, TTFT mean, p50 and p99, its mean queue /
    own / sync, whether the SLO held), ``slo`` (one row per policy), ``decomposition`` (policy × length bucket) and, when
    knobs were varied, ``vary`` (one row per knob value × policy)."""
    slo = res["slo_ttft_ns"]
    curve_rows = []
    for p in res["policies"]:
        for row in res["curves"][p]:
            r = {
                "policy": p,
                "rate": row["rate"],
                "n_requests": row.get("n_requests"),
                "kind": row.get("kind"),
            }
            r |= {k: row.get(k) for k in _QUANTILE_KEYS}
            r["stable"] = row.get("stable")
            r["meets_slo"] = None if row.get("mean_ttft_ns") is None else meets_slo(row, slo)
            curve_rows.append(r)
    curves = flat_frame(
        curve_rows,
        {"policy": pl.String, "rate": pl.Float64, "n_requests": pl.Int64, "kind": pl.String}
        | dict.fromkeys(_QUANTILE_KEYS, pl.Int64)
        | {"stable": pl.Boolean, "meets_slo": pl.Boolean},
    )
    slo_rows = [
        {
            "policy": p,
            "slo_rps": res["slo_rps"].get(p),
            "censored": (res.get("slo_censored") or {}).get(p),
            "ratio": (res.get("ratios") or {}).get(p),
            "mean_ttft_ns_at_1rps": (res.get("mean_ttft_ns_at_1rps") or {}).get(p),
            "slo_ttft_ns": slo,
        }
        for p in res["policies"]
    ]
    out = {
        "curves": curves,
        "slo": flat_frame(
            slo_rows,
            {
                "policy": pl.String,
                "slo_rps": pl.Float64,
                "censored": pl.Boolean,
                "ratio": pl.Float64,
                "mean_ttft_ns_at_1rps": pl.Int64,
                "slo_ttft_ns": pl.Int64,
            },
        ),
        "decomposition": flat_frame(list(res.get("decomposition") or []), DECOMPOSITION_SCHEMA),
    }
    if res.get("vary"):
        out["vary"] = flat_frame(
            [
                {
                    "knob": v["knob"],
                    "value": str(v["value"]),
                    "policy": p,
                    "slo_rps": (v.get("slo_rps") or {}).get(p),
                }
                | {"ratio": v.get("ratio")}
                for v in res["vary"]
                for p in res["policies"]
            ],
            {
                "knob": pl.String,
                "value": pl.String,
                "policy": pl.String,
                "slo_rps": pl.Float64,
                "ratio": pl.Float64,
            },
        )
    return out
