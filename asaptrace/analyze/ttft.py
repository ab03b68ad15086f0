"""Time to first token of each request, split into queueing, kernel time and synchronisation wait.

A prefill request's first token exists when the step that processed it ends. For request q of DP
group g in step k (from the batches table):

* start[k, g] = earliest start of the step's window over g's ranks; end[k, g] = latest end of the
  device work launched in the step over them (``last_end_ns``: the step's results are out, even
  when the next step's window began earlier; see :mod:`asaptrace.analyze.breakdown`);
* queue = start − arrival (null when arrivals are unknown; arrivals must be on the trace's clock);
* wait = exposed barrier wait of the step, averaged over g's ranks;
* kernel = (end − start) − wait: compute, transfer and device idle of the step;
* ttft = end − arrival = queue + kernel + wait (null without arrival).

Requests are bucketed by length (default edges 1K, 4K, 16K tokens).

:func:`ttft_requests` columns: request_id (str), step (int32), dp_group (int32), seq_len (int64,
tokens), bucket (str), arrival_ns, start_ns, end_ns, queue_ns, kernel_ns, wait_ns, ttft_ns (int64, ns).

:func:`ttft_by_bucket` columns: bucket (str), n_requests (int64), mean_seq_len (float64, tokens),
mean_ttft_ns, mean_queue_ns, mean_kernel_ns, mean_wait_ns (int64, ns), wait_share (float64: mean
wait / mean (kernel + wait)).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import polars as pl

DEFAULT_BUCKET_EDGES = (1024, 4096, 16384)


def _label(lo: int | None, hi: int | None) -> str:
    def k(v: int) -> str:
        return f"{v // 1024}K" if v % 1024 == 0 else str(v)

    if lo is None:
        return f"<{k(hi)}"  # type: ignore[arg-type]
    if hi is None:
        return f">={k(lo)}"
    return f"{k(lo)}-{k(hi)}"


def _bucket_expr(edges: Sequence[int]) -> pl.Expr:
    expr = pl.when(pl.col("seq_len") < edges[0]).then(pl.lit(_label(None, edges[0])))
    for lo, hi in itertools.pairwise(edges):
        expr = expr.when(pl.col("seq_len") < hi).then(pl.lit(_label(lo, hi)))
    return expr.otherwise(pl.lit(_label(edges[-1], None)))


def ttft_requests(
    batches: pl.LazyFrame | pl.DataFrame | None,
    *,
    breakdown: pl.DataFrame,
    bucket_edges: Sequence[int] = DEFAULT_BUCKET_EDGES,
) -> pl.DataFrame:
    """Per request: queueing, kernel time, wait and TTFT (columns above)."""
    schema = {
        "request_id": pl.String,
        "step": pl.Int32,
        "dp_group": pl.Int32,
        "seq_len": pl.Int64,
        "bucket": pl.String,
        "arrival_ns": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "queue_ns": pl.Int64,
        "kernel_ns": pl.Int64,
        "wait_ns": pl.Int64,
        "ttft_ns": pl.Int64,
    }
    if batches is None:
        return pl.DataFrame(schema=schema)
    b = batches.collect() if isinstance(batches, pl.LazyFrame) else batches
    if b.height == 0 or breakdown.height == 0:
        return pl.DataFrame(schema=schema)
    win = (
        breakdown.filter(pl.col("dp_group").is_not_null())
        .group_by("step", "dp_group")
        .agg(
            pl.col("start_ns").min(),
            pl.col("last_end_ns" if "last_end_ns" in breakdown.columns else "end_ns").max().alias("end_ns"),
            pl.col("wait_ns").mean().round(0).cast(pl.Int64),
        )
    )
    r = b.with_columns(pl.col("step").cast(pl.Int32), pl.col("dp_group").cast(pl.Int32)).join(
        win, on=["step", "dp_group"], how="inner"
    )
    r = r.with_columns(
        bucket=_bucket_expr(list(bucket_edges)),
        queue_ns=pl.col("start_ns") - pl.col("arrival_ns"),
        kernel_ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("wait_ns"),
        ttft_ns=pl.col("end_ns") - pl.col("arrival_ns"),
    )
    return r.select(
        "request_id",
        "step",
        "dp_group",
        pl.col("seq_len").cast(pl.Int64),
        "bucket",
        *[
            pl.col(c).cast(pl.Int64)
            for c in ("arrival_ns", "start_ns", "end_ns", "queue_ns", "kernel_ns", "wait_ns", "ttft_ns")
        ],
    ).sort("step", "dp_group", "seq_len")


def ttft_by_bucket(requests: pl.DataFrame) -> pl.DataFrame:
    """Means per length bucket (columns in the module docstring)."""
    mean = lambda c: pl.col(c).mean().round(0).cast(pl.Int64).alias(f"mean_{c}")  # noqa: E731
    out = (
        requests.group_by("bucket")
        .agg(
            pl.len().cast(pl.Int64).alias("n_requests"),
            pl.col("seq_len").mean().alias("mean_seq_len"),
            mean("ttft_ns"),
            mean("queue_ns"),
            mean("kernel_ns"),
            mean("wait_ns"),
        )
        .with_columns(
            wait_share=pl.when((pl.col("mean_kernel_ns") + pl.col("mean_wait_ns")) > 0)
            .then(pl.col("mean_wait_ns") / (pl.col("mean_kernel_ns") + pl.col("mean_wait_ns")))
            .otherwise(None)
        )
    )
    return out.sort("mean_seq_len")
