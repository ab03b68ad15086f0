"""Small pieces shared by the analyses (private)."""

from __future__ import annotations

import polars as pl

from asaptrace.schema import COMM_KINDS, Kind

COMM = sorted(str(k) for k in COMM_KINDS)


def lazy(frame: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    return frame.lazy() if isinstance(frame, pl.DataFrame) else frame


def device_activity(events: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Device spans that are work (annotation copies left out): rank, stream, step, layer,
    micro_batch, kind (str), start, end, is_comm."""
    kind = pl.col("kind").cast(pl.String)
    return (
        lazy(events)
        .filter(pl.col("is_device") & (kind != Kind.ANNOTATION))
        .select(
            "rank",
            "stream",
            "step",
            "layer",
            "micro_batch",
            kind.alias("kind"),
            pl.col("ts_ns").alias("start"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
        )
        .with_columns(is_comm=pl.col("kind").is_in(COMM))
        .collect()
    )


def rank_groups(ranks: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """rank, dp_group, role."""
    return lazy(ranks).select("rank", "dp_group", "role").collect()


def share(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den as float, null when den is 0 or null."""
    return pl.when(den > 0).then(num.cast(pl.Float64) / den.cast(pl.Float64)).otherwise(None)
