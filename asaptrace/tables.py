"""Results as tables for pandas, duckdb, a spreadsheet: ``--csv DIR`` / ``--parquet DIR``.

Each result's JSON (replay, sweep, compare, advise) becomes a few flat tables, one row per thing a
user would filter or join on; docs/reference/tables.md lists every table and column, and
tests/test_results_tables.py checks each against the JSON it came from. :func:`write_tables` writes
them all or nothing (:func:`~asaptrace.userfiles.write_folder_files`), so a full disk or a bad
path leaves no half-written folder behind.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.errors import UsageError
from asaptrace.replay.whatif.sweep_result import DECOMPOSITION_SCHEMA
from asaptrace.userfiles import check_output_dir, write_folder_files

FORMATS = ("csv", "parquet")


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema, orient="row")


# -------------------------------------------------------------------------------------------- replay
def replay_tables(j: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """``steps`` (one row per measured step: measured, reference, replayed) and ``causes`` (one row
    per cause of the recovered time, in the counterfactual sequence), plus ``splits`` and ``vary``
    when asked (``--split auto``, ``--vary``)."""
    steps = _frame(
        j["steps"],
        {"step": pl.Int64, "measured_ns": pl.Int64, "reference_ns": pl.Int64, "replayed_ns": pl.Int64},
    )
    causes = _frame(
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
        out["splits"] = _frame(
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
        out["vary"] = _frame(
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


# --------------------------------------------------------------------------------------------- sweep
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
            r["meets_slo"] = None if row.get("mean_ttft_ns") is None else row["mean_ttft_ns"] <= slo
            curve_rows.append(r)
    curves = _frame(
        curve_rows,
        {"policy": pl.String, "rate": pl.Float64, "n_requests": pl.Int64, "kind": pl.String}
        | dict.fromkeys(_QUANTILE_KEYS, pl.Int64)
        | {"meets_slo": pl.Boolean},
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
        "slo": _frame(
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
        "decomposition": _frame(list(res.get("decomposition") or []), DECOMPOSITION_SCHEMA),
    }
    if res.get("vary"):
        out["vary"] = _frame(
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


# ------------------------------------------------------------------------------------ compare, advise
def compare_tables(comparison: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``overall`` (one row per headline metric: a, b, delta, ratio, unit) and ``by_group``."""
    return {"overall": comparison["compare_overall"], "by_group": comparison["compare_by_group"]}


def advice_tables(j: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """``whatifs`` (one row per what-if, ranked, those that do not apply last) and ``answers``
    (one row per what-if × finding it answers)."""
    rows = []
    for rank, w in enumerate(j["whatifs"], start=1):
        o = w.get("online") or {}
        rows.append(
            {
                "rank": rank if w["applies"] else None,
                **{k: w.get(k) for k in ("name", "label", "policy", "applies", "reason")},
                **{k: w.get(k) for k in ("makespan_ns", "reference_ns", "recovered_ns")},
                **{
                    k: w.get(k)
                    for k in ("recovered_low_ns", "recovered_high_ns", "binding", "bandwidth_bound")
                },
                "weak_fit": any(q.get("weak") for q in w.get("fit") or []) if w["applies"] else None,
                "online_slo_rps": o.get("slo_rps"),
                "measured_slo_rps": o.get("measured_slo_rps"),
                "line": w["line"],
            }
        )
    whatifs = _frame(
        rows,
        {
            "rank": pl.Int64,
            "name": pl.String,
            "label": pl.String,
            "policy": pl.String,
            "applies": pl.Boolean,
            "reason": pl.String,
            "makespan_ns": pl.Int64,
            "reference_ns": pl.Int64,
            "recovered_ns": pl.Int64,
            "recovered_low_ns": pl.Int64,
            "recovered_high_ns": pl.Int64,
            "binding": pl.String,
            "bandwidth_bound": pl.Boolean,
            "weak_fit": pl.Boolean,
            "online_slo_rps": pl.Float64,
            "measured_slo_rps": pl.Float64,
            "line": pl.String,
        },
    )
    answers = _frame(
        [{"name": w["name"], **a} for w in j["whatifs"] for a in w.get("answers") or []],
        {"name": pl.String, "code": pl.String, "label": pl.String, "cost_ns": pl.Int64},
    )
    return {"whatifs": whatifs, "answers": answers}


# -------------------------------------------------------------------------------------------- writer
def check_tables_target(folder: str | Path | None, fmt: str) -> Path | None:
    """Check ``--csv`` / ``--parquet`` before the work (a bad folder is named before, not after)."""
    if folder is None:
        return None
    if fmt not in FORMATS:
        raise UsageError(f"tables are written as {' or '.join(FORMATS)}, not {fmt!r}")
    return check_output_dir(folder, what=f"folder of {fmt} tables")


def write_tables(tables: dict[str, pl.DataFrame], folder: str | Path, fmt: str = "csv") -> list[Path]:
    """Write ``folder/<name>.<fmt>`` for every table, all or nothing
    (:func:`~asaptrace.userfiles.write_folder_files`: a full disk leaves nothing new behind)."""
    target = check_tables_target(folder, fmt)
    assert target is not None
    return write_folder_files(target, {f"{name}.{fmt}": _encoder(t, fmt) for name, t in tables.items()})


def _encoder(table: pl.DataFrame, fmt: str) -> Callable[[], bytes]:
    def encode() -> bytes:
        if fmt == "csv":
            return table.write_csv().encode()
        buf = io.BytesIO()
        table.write_parquet(buf)
        return buf.getvalue()

    return encode
