"""Two stores side by side as a human sees them (overall, per DP group) and as flat tables."""

from __future__ import annotations

import polars as pl

from asaptrace.units import metric_label, metric_value
from asaptrace.views.table import TableView, rows_view


def compare_views(comparison: dict[str, pl.DataFrame], a: str = "A", b: str = "B") -> list[TableView]:
    """Two stores side by side: each headline metric in its own unit, then per DP group."""
    rows = [
        (
            metric_label(r["metric"]),
            metric_value(r["unit"], r["metric"], r["a"]),
            metric_value(r["unit"], r["metric"], r["b"]),
            metric_value(r["unit"], r["metric"], r["delta"], delta=True),
            r["ratio"],
        )
        for r in comparison["compare_overall"].iter_rows(named=True)
    ]
    overall = rows_view(
        f"{a} vs {b}",
        {"metric": "metric", "a": a, "b": b, "delta": "delta", "ratio": "ratio"},
        rows,
        name="compare-overall",
        caption=f"delta = {b} − {a} (shares in percentage points, pp); ratio = {b} / {a}",
        dtypes={"metric": pl.String, "a": pl.String, "b": pl.String, "delta": pl.String, "ratio": pl.Float64},
    )
    groups = comparison["compare_by_group"]
    by_group = TableView(
        f"{a} vs {b}, per DP group",
        groups.columns,
        groups,
        name="compare-by-group",
        caption=f"step: mean step time; wait: exposed wait per rank; overlap: overlap efficiency; Δ = {b} − {a}",
        labels=[_group_label(c, a, b) for c in groups.columns],
    )
    return [overall, by_group]


def _group_label(column: str, a: str, b: str) -> str:
    """``exposed_wait_ns_b`` → ``wait B``: short enough for an 80-column terminal (legend in the caption)."""
    short = {"mean_step_time_ns": "step", "exposed_wait_ns": "wait", "overlap_efficiency": "overlap"}
    for suffix, form in (("_a", "{} " + a), ("_b", "{} " + b), ("_delta", "Δ {}")):
        if column.endswith(suffix) and (name := column.removesuffix(suffix)) in short:
            return form.format(short[name])
    return "DP group" if column == "dp_group" else column.replace("_", " ")


def compare_tables(comparison: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``overall`` (one row per headline metric: a, b, delta, ratio, unit) and ``by_group``."""
    return {"overall": comparison["compare_overall"], "by_group": comparison["compare_by_group"]}
