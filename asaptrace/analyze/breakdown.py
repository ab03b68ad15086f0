"""Step time of each rank, split into compute, exposed barrier wait, exposed transfer and idle.

The step window of rank r in step s is [first start, last end] of r's device work in s. Every
instant of it goes to exactly one bucket, by priority:

1. **compute** — some non-communication device kernel or copy is running (on any stream, whatever
   step it belongs to: a kernel of the next step, or one outside every step, that runs inside this
   window hides this step's communication as much as one of its own);
2. **wait** — else, r is inside the wait part [a[i, r], R[i]] of a barrier instance (or inside
   an asynchronous receive of a disaggregated deployment, :func:`~asaptrace.analyze.barrier.receive_wait`);
3. **transfer** — else, a communication kernel is running (the rest of a collective);
4. **idle** — else (the device does nothing: host launch gaps, bubbles).

Identity, checked in code (:class:`~asaptrace.errors.AccountingError`) and in a test:

    compute_ns + wait_ns + transfer_ns + idle_ns = step_time_ns      for every (rank, step)

Wait hidden under another micro-batch's compute is not counted here (it cost nothing); the
barrier table keeps the raw per-instance waits.

*Exposed* has one meaning in every table: an instant of a device is exposed communication when a
communication kernel runs on it and no compute kernel does, on any stream, of any step — the
definition of :mod:`~asaptrace.analyze.overlap`'s ``exposed_comm_ns``. The breakdown splits that
time into exposed wait (inside [a, R] of a barrier instance) and exposed transfer (the rest), so
per rank, as long as no two steps' communication kernels run at the same instant,

    Σ over steps of transfer_ns  ≤  exposed_comm_ns  ≤  comm_ns      (overlap_by_rank)

(tested as a property over every store the tests build).

Columns of :func:`step_breakdown`:

| column | dtype | unit | meaning |
|---|---|---|---|
| rank, dp_group | int32 | – | rank and its DP group |
| step | int32 | – | step (null: events outside any step) |
| start_ns, end_ns | int64 | ns | step window on the aligned clock |
| step_time_ns | int64 | ns | end_ns − start_ns |
| compute_ns | int64 | ns | bucket 1 |
| wait_ns | int64 | ns | bucket 2 (exposed barrier wait) |
| transfer_ns | int64 | ns | bucket 3 (exposed communication other than wait) |
| idle_ns | int64 | ns | bucket 4 |
"""

from __future__ import annotations

import polars as pl

from asaptrace.analyze._common import device_activity, rank_groups
from asaptrace.analyze._coverage import coverage
from asaptrace.errors import AccountingError

_COMPUTE, _WAIT, _COMM = 0, 1, 2
_KEYS = ["rank", "step"]


class BreakdownIdentityError(AccountingError):
    """compute + wait + transfer + idle did not add up to the step time: a bug."""


def step_breakdown(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    barrier: pl.DataFrame,
) -> pl.DataFrame:
    """Per (rank, step): step time split into compute, exposed wait, exposed transfer, idle."""
    act = device_activity(events)
    work = act.select(
        *_KEYS,
        "start",
        "end",
        pl.when(pl.col("is_comm"))
        .then(pl.lit(_COMM))
        .otherwise(pl.lit(_COMPUTE))
        .cast(pl.Int64)
        .alias("cat"),
    )
    waits = barrier.filter(pl.col("wait_ns") > 0).select(
        *_KEYS,
        pl.col("arrival_ns").alias("start"),
        pl.min_horizontal("release_ns", "end_ns").alias("end"),
        pl.lit(_WAIT, pl.Int64).alias("cat"),
    )
    window = work.group_by(_KEYS).agg(
        pl.col("start").min().alias("start_ns"), pl.col("end").max().alias("end_ns")
    )
    foreign = _foreign_compute(work, window)
    iv = pl.concat([work, waits.cast(work.schema), foreign.cast(work.schema)])  # type: ignore[arg-type]
    cov = coverage(iv, _KEYS, 3)
    has = lambda bit: (pl.col("mask") & (1 << bit)) > 0  # noqa: E731
    buckets = cov.group_by(_KEYS).agg(
        pl.col("ns").filter(has(_COMPUTE)).sum().alias("compute_ns"),
        pl.col("ns").filter(~has(_COMPUTE) & has(_WAIT)).sum().alias("wait_ns"),
        pl.col("ns").filter(~has(_COMPUTE) & ~has(_WAIT) & has(_COMM)).sum().alias("transfer_ns"),
        pl.col("ns").filter(pl.col("mask") == 0).sum().alias("idle_ns"),
        pl.col("ns").sum().alias("_covered"),
    )
    out = window.join(buckets, on=_KEYS, how="left", nulls_equal=True).with_columns(
        step_time_ns=pl.col("end_ns") - pl.col("start_ns"),
        **{
            c: pl.col(c).fill_null(0).cast(pl.Int64)
            for c in ("compute_ns", "wait_ns", "transfer_ns", "idle_ns")
        },
    )
    check_identity(out)
    out = out.join(rank_groups(ranks).select("rank", "dp_group"), on="rank", how="left")
    return out.select(
        "rank",
        pl.col("dp_group").cast(pl.Int32),
        pl.col("step").cast(pl.Int32),
        "start_ns",
        "end_ns",
        "step_time_ns",
        "compute_ns",
        "wait_ns",
        "transfer_ns",
        "idle_ns",
    ).sort("rank", "step", nulls_last=True)


def _foreign_compute(work: pl.DataFrame, window: pl.DataFrame) -> pl.DataFrame:
    """Compute intervals of *other* steps of the same rank that run inside a step's window, clipped
    to it and labelled with that step (so they hide its communication). Only windows that overlap
    can hold another step's kernels, so the pairs of overlapping windows are found first (few)."""
    w = window.with_columns(pl.col("step").cast(pl.Int64).fill_null(-(2**62)).alias("_s"))
    pairs = w.join_where(
        w.rename({c: f"{c}_o" for c in w.columns}),
        pl.col("rank") == pl.col("rank_o"),
        pl.col("start_ns") < pl.col("end_ns_o"),
        pl.col("end_ns") > pl.col("start_ns_o"),
        pl.col("_s") != pl.col("_s_o"),
    )
    if pairs.height == 0:
        return work.clear()
    comp = work.filter(pl.col("cat") == _COMPUTE).with_columns(
        pl.col("step").cast(pl.Int64).fill_null(-(2**62)).alias("_s_o")
    )
    return (
        comp.drop("step")
        .rename({"rank": "rank_o"})
        .join(pairs.select("rank_o", "_s_o", "rank", "step", "start_ns", "end_ns"), on=["rank_o", "_s_o"])
        .with_columns(start=pl.max_horizontal("start", "start_ns"), end=pl.min_horizontal("end", "end_ns"))
        .filter(pl.col("end") > pl.col("start"))
        .select(*_KEYS, "start", "end", "cat")
    )


def check_identity(table: pl.DataFrame) -> None:
    """Raise :class:`BreakdownIdentityError` unless compute + wait + transfer + idle = step time."""
    total = pl.col("compute_ns") + pl.col("wait_ns") + pl.col("transfer_ns") + pl.col("idle_ns")
    bad = table.filter(total != pl.col("step_time_ns"))
    if bad.height:
        row = bad.row(0, named=True)
        raise BreakdownIdentityError(
            f"step breakdown does not add up for rank {row['rank']} step {row['step']}: "
            f"{row['compute_ns']} + {row['wait_ns']} + {row['transfer_ns']} + {row['idle_ns']} "
            f"!= {row['step_time_ns']} ns"
        )
