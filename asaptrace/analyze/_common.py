"""Small pieces shared by the analyses (private)."""

from __future__ import annotations

import polars as pl

from asaptrace.schema import COMM_KINDS, Kind

COMM = sorted(str(k) for k in COMM_KINDS)


def lazy(frame: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    return frame.lazy() if isinstance(frame, pl.DataFrame) else frame


#: Profiler categories of copies (memcpy, memset): a copy is never compute, whatever a taxonomy
#: rule named it, and never communication
COPY_CATS = ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "Memcpy_async")


def device_activity(events: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Device spans that are work (annotation copies left out): rank, stream, step, layer,
    micro_batch, kind (str), start, end, corr (null when the events have none), is_comm, is_copy
    (a memcpy or memset: neither compute nor communication)."""
    ev = lazy(events)
    names = ev.collect_schema().names()
    kind = pl.col("kind").cast(pl.String)
    cat = pl.col("cat").cast(pl.String).is_in(COPY_CATS).fill_null(False) if "cat" in names else pl.lit(False)
    return (
        ev.filter(pl.col("is_device") & (kind != Kind.ANNOTATION))
        .select(
            "rank",
            "stream",
            "step",
            "layer",
            "micro_batch",
            kind.alias("kind"),
            pl.col("ts_ns").alias("start"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
            (pl.col("corr") if "corr" in names else pl.lit(None, pl.Int64)).alias("corr"),
            (cat | (kind == Kind.MEMCPY)).alias("is_copy"),
        )
        .with_columns(is_comm=pl.col("kind").is_in(COMM) & ~pl.col("is_copy"))
        .collect()
    )


def work_category(*, compute: int, copy: int, comm: int) -> pl.Expr:
    """A :func:`device_activity` row's category as the caller's code: a copy is a copy whether or
    not it moves a collective's data, communication is neither copy nor compute (copies are never
    compute)."""
    return (
        pl.when(pl.col("is_copy"))
        .then(pl.lit(copy))
        .when(pl.col("is_comm"))
        .then(pl.lit(comm))
        .otherwise(pl.lit(compute))
        .cast(pl.Int64)
    )


def rank_groups(ranks: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """rank, dp_group, role."""
    return lazy(ranks).select("rank", "dp_group", "role").collect()


def share(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den as float, null when den is 0 or null."""
    return pl.when(den > 0).then(num.cast(pl.Float64) / den.cast(pl.Float64)).otherwise(None)
