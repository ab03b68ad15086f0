"""Two runs side by side: the headline numbers of each Diagnosis, overall and per DP group, with deltas.

:func:`headline` reduces one Diagnosis's tables to the numbers a reader looks at first (step time,
exposed wait, imbalance, overlap); the report's summary shows them and :func:`compare` puts two
of them side by side (measured vs replayed, before vs after a scheduler change). Pure: tables in,
tables out. Columns are documented in docs/reference/columns.md (``headline``, ``compare_overall``,
``compare_by_group``).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

#: The headline metrics, in display order: (metric, unit, meaning).
HEADLINE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("n_ranks", "–", "ranks with device work"),
    ("n_steps", "–", "steps (work outside every step not counted)"),
    ("mean_step_time_ns", "ns", "mean step time (per rank and step)"),
    ("exposed_wait_ns", "ns", "exposed wait per rank, all steps (barrier; receive where no barrier)"),
    ("wait_share", "–", "exposed wait / step time"),
    ("transfer_ns", "ns", "exposed transfer per rank (all steps)"),
    ("tokens_ratio", "–", "token imbalance (max / mean over DP groups, mean over steps)"),
    ("sum_sq_ratio", "–", "Σs² imbalance (max / mean over DP groups, mean over steps)"),
    ("attention_ratio", "–", "attention-time imbalance (max / mean, mean over steps)"),
    ("overlap_efficiency", "–", "overlapped / all communication"),
    ("utilisation", "–", "compute / device span"),
)

Tables = Mapping[str, pl.DataFrame]


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _sum(t: pl.DataFrame, col: str) -> float | None:
    return float(t.get_column(col).sum()) if t.height else None


def _mean(t: pl.DataFrame, col: str) -> float | None:
    v = t.get_column(col).drop_nulls() if t.height else None
    return float(v.mean()) if v is not None and len(v) else None  # type: ignore[arg-type]


def headline(tables: Tables) -> pl.DataFrame:
    """One row per metric of :data:`HEADLINE_METRICS`: ``metric, unit, value`` (value null: unknown).

    Step time, wait and transfer come from ``step_breakdown`` (Σ over ranks and steps / ranks); the
    imbalance ratios are means over steps of ``imbalance_by_step``; overlap and utilisation are
    Σ overlapped / Σ comm and Σ compute / Σ span over ``overlap_by_rank``.
    """
    bd, imb, ov = tables["step_breakdown"], tables["imbalance_by_step"], tables["overlap_by_rank"]
    n_ranks = bd.get_column("rank").n_unique() if bd.height else ov.height
    per_rank = (lambda col: _ratio(_sum(bd, col), n_ranks)) if n_ranks else (lambda col: None)
    values = {
        "n_ranks": float(n_ranks),
        "n_steps": float(bd.get_column("step").drop_nulls().n_unique()) if bd.height else 0.0,
        "mean_step_time_ns": _mean(bd, "step_time_ns"),
        "exposed_wait_ns": per_rank("wait_ns"),
        "wait_share": _ratio(_sum(bd, "wait_ns"), _sum(bd, "step_time_ns")),
        "transfer_ns": per_rank("transfer_ns"),
        "tokens_ratio": _mean(imb, "tokens_ratio"),
        "sum_sq_ratio": _mean(imb, "sum_sq_ratio"),
        "attention_ratio": _mean(imb, "attention_ratio"),
        "overlap_efficiency": _ratio(_sum(ov, "overlapped_ns"), _sum(ov, "comm_ns")),
        "utilisation": _ratio(_sum(ov, "compute_ns"), _sum(ov, "span_ns")),
    }
    return pl.DataFrame(
        {
            "metric": [m for m, _, _ in HEADLINE_METRICS],
            "unit": [u for _, u, _ in HEADLINE_METRICS],
            "value": [values[m] for m, _, _ in HEADLINE_METRICS],
        },
        schema={"metric": pl.String, "unit": pl.String, "value": pl.Float64},
    )


def by_group(tables: Tables) -> pl.DataFrame:
    """Per DP group: mean step time, exposed wait per rank, overlap efficiency (Σ over its ranks)."""
    bd, ov = tables["step_breakdown"], tables["overlap_by_rank"]
    steps = bd.group_by("dp_group").agg(
        pl.col("step_time_ns").mean().alias("mean_step_time_ns"),
        (pl.col("wait_ns").sum() / pl.col("rank").n_unique()).alias("exposed_wait_ns"),
    )
    overlap = ov.group_by("dp_group").agg(
        (pl.col("overlapped_ns").sum() / pl.col("comm_ns").sum()).alias("overlap_efficiency")
    )
    return (
        steps.join(overlap, on="dp_group", how="full", coalesce=True, nulls_equal=True)
        .with_columns(pl.col("dp_group").cast(pl.Int32))
        .sort("dp_group", nulls_last=True)
    )


def compare(a: Tables, b: Tables) -> dict[str, pl.DataFrame]:
    """``compare_overall`` (metric, unit, a, b, delta = b − a, ratio = b / a) and ``compare_by_group``.

    ``compare_by_group`` has per DP group ``<metric>_a``, ``<metric>_b`` and ``<metric>_delta`` for
    the metrics of :func:`by_group`; a group present in one run only has nulls on the other side
    (an ASAP layout may have other DP groups than the coupled run it replays).
    """
    ha, hb = headline(a), headline(b)
    overall = (
        ha.rename({"value": "a"})
        .join(hb.select("metric", pl.col("value").alias("b")), on="metric", how="left", maintain_order="left")
        .with_columns(
            (pl.col("b") - pl.col("a")).alias("delta"),
            pl.when(pl.col("a") != 0).then(pl.col("b") / pl.col("a")).otherwise(None).alias("ratio"),
        )
    )
    ga, gb = by_group(a), by_group(b)
    metrics = [c for c in ga.columns if c != "dp_group"]
    groups = ga.rename({m: f"{m}_a" for m in metrics}).join(
        gb.rename({m: f"{m}_b" for m in metrics}), on="dp_group", how="full", coalesce=True, nulls_equal=True
    )
    groups = groups.with_columns([(pl.col(f"{m}_b") - pl.col(f"{m}_a")).alias(f"{m}_delta") for m in metrics])
    order = ["dp_group"] + [f"{m}_{s}" for m in metrics for s in ("a", "b", "delta")]
    return {
        "compare_overall": overall,
        "compare_by_group": groups.select(order).sort("dp_group", nulls_last=True),
    }
