"""Compute/communication overlap per device, and utilisation per role.

Symbols, per rank over its device span [first start, last end] (annotation copies excluded):

* C = time some compute kernel runs (any stream; a memcpy or memset is never compute);
* Y = time a copy runs and no compute kernel does;
* M = time some communication kernel runs — kinds ``dispatch``, ``combine``, ``collective``, so
  DeepEP and HCCL traffic counts, not only NCCL;
* overlapped = time M runs under C or a copy; exposed communication = M − overlapped;
  idle = span − |C ∪ copies ∪ M|;
* overlap efficiency = overlapped / M (HTA's definition, with the wider notion of communication).

Identity, checked in code and in a test: ``compute_ns + copy_ns + exposed_comm_ns + idle_ns = span_ns``.

:func:`overlap_by_rank` columns:

| column | dtype | unit | meaning |
|---|---|---|---|
| rank, dp_group | int32 | – | rank and DP group |
| role | str | – | fused / attention / expert / unknown |
| span_ns | int64 | ns | last end − first start of device work |
| compute_ns | int64 | ns | C |
| copy_ns | int64 | ns | Y |
| comm_ns | int64 | ns | M |
| overlapped_ns | int64 | ns | M ∧ (C ∨ copy) |
| overlapped_copy_ns | int64 | ns | M ∧ copy ∧ ¬C (the part of overlapped_ns under a copy alone) |
| exposed_comm_ns | int64 | ns | M ∧ ¬C ∧ ¬copy |
| idle_ns | int64 | ns | neither |
| overlap_efficiency | float64 | – | overlapped_ns / comm_ns (null without communication) |
| utilisation | float64 | – | compute_ns / span_ns (spinning communication kernels are not work) |
| n_bubbles | int64 | – | gaps of at least ``bubble_min_ns`` in which no compute kernel runs |
| bubble_ns | int64 | ns | their total length |

:func:`overlap_by_role` sums the same per role: role, n_ranks, span_ns, compute_ns, comm_ns,
overlapped_ns, exposed_comm_ns, idle_ns (int64, Σ over ranks), overlap_efficiency,
utilisation (float64), n_bubbles, bubble_ns (int64, Σ), mean_bubble_ns (int64), copy_ns (int64, Σ).
"""

from __future__ import annotations

import polars as pl

from asaptrace.analyze._common import device_activity, rank_groups, share, work_category
from asaptrace.analyze._coverage import coverage, idle_gaps
from asaptrace.errors import AccountingError

_COMPUTE, _COMM, _COPY = 0, 1, 2
DEFAULT_BUBBLE_MIN_NS = 10_000


class OverlapIdentityError(AccountingError):
    """compute + exposed communication + idle did not add up to the span: a bug."""


def overlap_by_rank(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    bubble_min_ns: int = DEFAULT_BUBBLE_MIN_NS,
) -> pl.DataFrame:
    """Per rank: compute, communication, overlapped, exposed communication, idle (columns above)."""
    act = device_activity(events)
    iv = act.select(
        "rank", "start", "end", work_category(compute=_COMPUTE, copy=_COPY, comm=_COMM).alias("cat")
    )
    cov = coverage(iv, ["rank"], 3)
    mask = pl.col("mask")
    comp, comm, copy = (mask & 1) > 0, (mask & 2) > 0, (mask & 4) > 0
    per = cov.group_by("rank").agg(
        pl.col("ns").sum().alias("span_ns"),
        pl.col("ns").filter(comp).sum().alias("compute_ns"),
        pl.col("ns").filter(copy & ~comp).sum().alias("copy_ns"),
        pl.col("ns").filter(comm).sum().alias("comm_ns"),
        pl.col("ns").filter(comm & (comp | copy)).sum().alias("overlapped_ns"),
        pl.col("ns").filter(comm & copy & ~comp).sum().alias("overlapped_copy_ns"),
        pl.col("ns").filter(mask == 2).sum().alias("exposed_comm_ns"),
        pl.col("ns").filter(mask == 0).sum().alias("idle_ns"),
    )
    bad = per.filter(
        pl.col("compute_ns") + pl.col("copy_ns") + pl.col("exposed_comm_ns") + pl.col("idle_ns")
        != pl.col("span_ns")
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise OverlapIdentityError(f"overlap of rank {r['rank']} does not add up: {r}")
    gaps = idle_gaps(iv.filter(pl.col("cat") == _COMPUTE), ["rank"], min_gap_ns=bubble_min_ns)
    out = per.join(gaps, on="rank", how="left").join(rank_groups(ranks), on="rank", how="left")
    return out.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("dp_group").cast(pl.Int32),
        "role",
        *[
            pl.col(c).cast(pl.Int64)
            for c in ("span_ns", "compute_ns", "comm_ns", "overlapped_ns", "exposed_comm_ns", "idle_ns")
        ],
        pl.col("copy_ns").cast(pl.Int64),
        pl.col("overlapped_copy_ns").cast(pl.Int64),
        share(pl.col("overlapped_ns"), pl.col("comm_ns")).alias("overlap_efficiency"),
        share(pl.col("compute_ns"), pl.col("span_ns")).alias("utilisation"),
        pl.col("n_bubbles").fill_null(0).cast(pl.Int64),
        pl.col("bubble_ns").fill_null(0).cast(pl.Int64),
    ).sort("rank")


def overlap_by_role(by_rank: pl.DataFrame) -> pl.DataFrame:
    """Sums of :func:`overlap_by_rank` per role (columns in the module docstring)."""
    sums = [
        "span_ns",
        "compute_ns",
        "comm_ns",
        "overlapped_ns",
        "exposed_comm_ns",
        "idle_ns",
        "n_bubbles",
        "bubble_ns",
        "copy_ns",
    ]
    out = by_rank.group_by("role").agg(
        pl.len().cast(pl.Int64).alias("n_ranks"), *[pl.col(c).sum().cast(pl.Int64) for c in sums]
    )
    return (
        out.with_columns(
            overlap_efficiency=share(pl.col("overlapped_ns"), pl.col("comm_ns")),
            utilisation=share(pl.col("compute_ns"), pl.col("span_ns")),
            mean_bubble_ns=pl.when(pl.col("n_bubbles") > 0)
            .then(pl.col("bubble_ns") // pl.col("n_bubbles"))
            .otherwise(None)
            .cast(pl.Int64),
        )
        .select(
            "role",
            "n_ranks",
            *sums[:6],
            "overlap_efficiency",
            "utilisation",
            "n_bubbles",
            "bubble_ns",
            "mean_bubble_ns",
            "copy_ns",
        )
        .sort("role")
    )
