"""Interval coverage: how long each combination of categories covers a timeline (a vectorised line sweep).

Given intervals (group keys, start, end, category bit ``cat`` in 0..k-1), the timeline of each
group is cut at every boundary into elementary segments; a segment's ``mask`` has bit c set when
some interval of category c covers it. The result sums segment lengths per (group, mask), from
the group's first boundary to its last — so the lengths of one group always add up to its span,
and mask 0 is idle time inside the span. Everything else (exposed communication, overlap,
priority attributions) is a sum over masks.
"""

from __future__ import annotations

import polars as pl


def coverage(intervals: pl.DataFrame, keys: list[str], n_cats: int) -> pl.DataFrame:
    """Columns: ``keys``, mask (int64), ns (int64 total length), segments (int64 count)."""
    seg = segments(intervals, keys, n_cats)
    return seg.group_by([*keys, "mask"]).agg(
        pl.col("ns").sum().cast(pl.Int64), (pl.col("ns") > 0).sum().cast(pl.Int64).alias("segments")
    )


def segments(
    intervals: pl.DataFrame, keys: list[str], n_cats: int, cuts: pl.DataFrame | None = None
) -> pl.DataFrame:
    """The elementary segments themselves: ``keys``, t (start), ns (length), mask (int64), in time
    order per group. ``cuts`` (``keys``, t) adds boundaries where nothing starts or ends (a step
    window's edge), so that no segment crosses one."""
    iv = intervals.filter(pl.col("end") > pl.col("start"))
    if iv.height == 0:
        return pl.DataFrame(
            schema={**{k: intervals.schema[k] for k in keys}, "t": pl.Int64, "ns": pl.Int64, "mask": pl.Int64}
        )
    parts = [
        iv.select(*keys, pl.col("start").alias("t"), "cat", pl.lit(1, pl.Int64).alias("d")),
        iv.select(*keys, pl.col("end").alias("t"), "cat", pl.lit(-1, pl.Int64).alias("d")),
    ]
    if cuts is not None and cuts.height:
        parts.append(
            cuts.select(
                *keys,
                pl.col("t").cast(pl.Int64),
                pl.lit(-1, pl.Int64).alias("cat"),
                pl.lit(0, pl.Int64).alias("d"),
            )
        )
    bounds = pl.concat(parts, how="vertical_relaxed").sort([*keys, "t"])
    # one sort and running sums over the whole: every interval opens and closes in its own group,
    # so a group's counts start from 0 (3× faster than a group_by on (keys, t), a sort and sums
    # over each group: 1.26 M intervals of 384 ranks in 0.65 s instead of 1.95 s)
    counts = [
        pl.when(pl.col("cat") == c).then(pl.col("d")).otherwise(0).cum_sum().alias(f"_c{c}")
        for c in range(n_cats)
    ]
    mask = pl.sum_horizontal([(pl.col(f"_c{c}") > 0).cast(pl.Int64) * (1 << c) for c in range(n_cats)])
    next_same = pl.all_horizontal([pl.col(k).shift(-1).eq_missing(pl.col(k)) for k in keys]).fill_null(False)
    last_at_t = ~(next_same & (pl.col("t").shift(-1) == pl.col("t"))).fill_null(False)
    return (
        bounds.with_columns(counts)
        .filter(last_at_t)  # the counts after every boundary at t
        .select(
            *keys,
            pl.col("t").cast(pl.Int64),
            pl.when(next_same)
            .then(pl.col("t").shift(-1) - pl.col("t"))
            .otherwise(0)
            .cast(pl.Int64)
            .alias("ns"),
            mask.cast(pl.Int64).alias("mask"),
        )
    )


def idle_gaps(intervals: pl.DataFrame, keys: list[str], *, min_gap_ns: int) -> pl.DataFrame:
    """Per group: number and total length of idle gaps (no interval at all) of at least ``min_gap_ns``."""
    iv = intervals.filter(pl.col("end") >= pl.col("start")).sort([*keys, "start"])
    gaps = iv.with_columns(_prev=pl.col("end").cum_max().shift(1).over(keys)).with_columns(
        _gap=(pl.col("start") - pl.col("_prev")).fill_null(0)
    )
    return gaps.group_by(keys).agg(
        (pl.col("_gap") >= min_gap_ns).sum().cast(pl.Int64).alias("n_bubbles"),
        pl.col("_gap").filter(pl.col("_gap") >= min_gap_ns).sum().cast(pl.Int64).alias("bubble_ns"),
    )
