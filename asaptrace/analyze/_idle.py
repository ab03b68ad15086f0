"""Why the device was idle (private to :mod:`asaptrace.analyze.breakdown`): DOMAIN §9's idle causes.

An idle gap [g0, g1) is a stretch of a rank's device time in which no work runs on any stream; it
ends at the kernel (or copy) K that starts at g1. Its time goes, in this order, to:

* **sync** — the instants at which some host thread of the rank was inside a synchronising call
  (:data:`SYNC_CALLS`: the host blocked on the device, so it launched nothing);
* **host** — of the rest, up to the launch call's end plus :data:`LAUNCH_LATENCY_NS`, when K's
  launch (the runtime call with K's correlation id) started after g0 and the launching thread was
  busy in host ops (CPU ops, Python functions, runtime calls) for at least half of [g0, launch]:
  the device waited for the host to get to the launch (a kernel that then waits longer in its
  queue waits on something else);
* **other** — the rest otherwise (K launched before the gap began: a dependency or the driver held
  it; the thread idle; no host data).

Everything is a vectorised sweep: the covered time of a set of intervals up to an instant is a
prefix sum over their merged union, looked up with an as-of join (no loop over events).
"""

from __future__ import annotations

import polars as pl

#: Host calls during which the host waits for the device (blocking synchronisations and copies)
SYNC_CALLS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaStreamQuery",
    "cudaEventQuery",
    "cudaMemcpy",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "hipMemcpyWithStream",
    "aten::to",
    "aten::item",
    "aten::_local_scalar_dense",
    "aclrtSynchronizeStream",
    "aclrtSynchronizeDevice",
)
#: Share of [gap start, launch] the launching thread must be busy for the gap to be the host's
HOST_BUSY_SHARE = 0.5
#: How soon after its launch call returns a kernel can start on an idle device: a queued kernel that
#: starts later than this waited on something other than the host (a dependency, the driver)
LAUNCH_LATENCY_NS = 20_000
#: A kernel this short keeps the device busy for less than a launch costs the host
SHORT_KERNEL_NS = 5_000

HOST_COLUMNS = ("rank", "stream", "name", "start", "end", "corr")


def host_frame(events: pl.LazyFrame) -> pl.DataFrame | None:
    """The host spans the causes and the lag read: rank, stream, name (str), start, end, corr,
    step, is_op (false for annotations, which mark steps but are not work). None when the events
    carry no host side."""
    names = events.collect_schema().names()
    if "corr" not in names or "step" not in names:
        return None
    kind = pl.col("kind").cast(pl.String)
    return (
        events.filter(~pl.col("is_device") & (pl.col("dur_ns") > 0))
        .select(
            "rank",
            "stream",
            pl.col("name").cast(pl.String),
            pl.col("ts_ns").alias("start"),
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"),
            "corr",
            "step",
            (kind != "annotation").alias("is_op"),
        )
        .collect()
    )


def _cover(intervals: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The merged union of ``intervals`` (``keys``, start, end) with ``before``: the covered time of
    the group before each merged piece starts (sorted by start)."""
    iv = intervals.select(*keys, "start", "end").sort([*keys, "start"])
    run = pl.col("end").cum_max().shift(1).over(keys)
    pieces = (
        iv.with_columns(_new=(run.is_null() | (pl.col("start") > run)).cast(pl.Int64))
        .with_columns(_id=pl.col("_new").cum_sum().over(keys))
        .group_by([*keys, "_id"])
        .agg(pl.col("start").min(), pl.col("end").max())
        .sort([*keys, "start"])
    )
    return pieces.with_columns(
        before=(pl.col("end") - pl.col("start")).cum_sum().shift(1, fill_value=0).over(keys)
    ).select(*keys, "start", "end", "before")


def covered_until(
    points: pl.DataFrame, on: str, cover: pl.DataFrame, keys: list[str], out: str
) -> pl.DataFrame:
    """``points`` with ``out`` = covered time of ``cover`` (from :func:`_cover`) before ``points[on]``."""
    right = cover.rename({"start": "_cs", "end": "_ce", "before": "_cb"}).sort("_cs")
    cast = {k: right.schema[k] for k in keys}
    left = points.with_columns(pl.col(k).cast(t) for k, t in cast.items()).with_row_index("_row").sort(on)
    joined = left.join_asof(
        right, left_on=on, right_on="_cs", by=keys, strategy="backward", check_sortedness=False
    )
    val = pl.col("_cb") + (pl.min_horizontal(pl.col(on), pl.col("_ce")) - pl.col("_cs")).clip(lower_bound=0)
    return (
        joined.with_columns(val.fill_null(0).cast(pl.Int64).alias(out))
        .sort("_row")
        .drop("_row", "_cs", "_ce", "_cb")
    )


def idle_causes(gaps: pl.DataFrame, act: pl.DataFrame, host: pl.DataFrame | None) -> pl.DataFrame:
    """Per gap (rank, step, g0, ns): idle_sync_ns, idle_host_ns, idle_other_ns (summing to ns),
    and for the findings: the next kernel's duration and its launch's name (host gaps)."""
    g = gaps.with_columns(g1=pl.col("g0") + pl.col("ns"))
    nxt = (
        act.sort("start", "end")
        .group_by("rank", "start")
        .agg(
            pl.col("corr").first().alias("_corr"), (pl.col("end") - pl.col("start")).first().alias("next_ns")
        )
        .rename({"start": "g1"})
    )
    g = g.join(nxt.with_columns(pl.col("rank").cast(g.schema["rank"])), on=["rank", "g1"], how="left")
    host = host.filter(pl.col("is_op")) if host is not None else None
    if host is None or host.height == 0:
        return g.with_columns(
            idle_sync_ns=pl.lit(0, pl.Int64),
            idle_host_ns=pl.lit(0, pl.Int64),
            idle_other_ns=pl.col("ns"),
            launch=pl.lit(None, pl.String),
        )
    sync = host.filter(pl.col("name").is_in(SYNC_CALLS))
    if sync.height:
        cov = _cover(sync, ["rank"])
        g = covered_until(g, "g0", cov, ["rank"], "_s0")
        g = covered_until(g, "g1", cov, ["rank"], "_s1")
        g = g.with_columns(idle_sync_ns=pl.col("_s1") - pl.col("_s0")).drop("_s0", "_s1")
    else:
        g = g.with_columns(idle_sync_ns=pl.lit(0, pl.Int64))
    launches = host.filter(pl.col("corr").is_not_null()).select(
        pl.col("rank").cast(g.schema["rank"]),
        pl.col("corr").alias("_corr"),
        pl.col("stream").alias("_thread"),
        pl.col("start").alias("_launch"),
        pl.col("end").alias("_lend"),
        pl.col("name").alias("launch"),
    )
    launches = launches.unique(["rank", "_corr"], keep="first")
    g = g.join(launches, on=["rank", "_corr"], how="left")
    late = (
        pl.col("_launch").is_not_null()
        & (pl.col("_launch") > pl.col("g0"))
        & (pl.col("_launch") < pl.col("g1"))
    )
    cand = g.with_row_index("_gap").filter(late)
    if cand.height:
        threads = host.join(
            cand.select(pl.col("rank").cast(host.schema["rank"]), pl.col("_thread").alias("stream")).unique(),
            on=["rank", "stream"],
        )
        cov = _cover(threads, ["rank", "stream"])
        pts = cand.select("_gap", "rank", pl.col("_thread").alias("stream"), "g0", "_launch")
        pts = covered_until(pts, "g0", cov, ["rank", "stream"], "_b0")
        pts = covered_until(pts, "_launch", cov, ["rank", "stream"], "_b1")
        busy = pts.filter(
            (pl.col("_b1") - pl.col("_b0")) >= HOST_BUSY_SHARE * (pl.col("_launch") - pl.col("g0"))
        )
        is_host = pl.col("_gap").is_in(busy.get_column("_gap").implode())
    else:
        is_host = pl.lit(False)
    rest = pl.col("ns") - pl.col("idle_sync_ns")
    waited = pl.min_horizontal(rest, pl.col("_lend") + LAUNCH_LATENCY_NS - pl.col("g0"))
    return (
        g.with_row_index("_gap")
        .with_columns(idle_host_ns=pl.when(is_host).then(waited).otherwise(0).cast(pl.Int64))
        .with_columns(
            idle_other_ns=(rest - pl.col("idle_host_ns")).cast(pl.Int64),
            launch=pl.when(is_host).then(pl.col("launch")).otherwise(None),
        )
        .drop("_gap", "_thread", "_launch", "_lend", "_corr")
    )


def sync_ops(gaps: pl.DataFrame, host: pl.DataFrame | None) -> pl.DataFrame:
    """Per synchronising call name: the idle time it covered (name, ns), most first. A nested
    call (``cudaStreamSynchronize`` inside ``aten::to``) counts for both names."""
    if host is None or gaps.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "ns": pl.Int64})
    sync = host.filter(pl.col("is_op") & pl.col("name").is_in(SYNC_CALLS))
    if sync.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "ns": pl.Int64})
    idle = _cover(
        gaps.select("rank", pl.col("g0").alias("start"), (pl.col("g0") + pl.col("ns")).alias("end")), ["rank"]
    )
    pts = covered_until(sync, "start", idle, ["rank"], "_i0")
    pts = covered_until(pts, "end", idle, ["rank"], "_i1")
    return (
        pts.group_by("name")
        .agg((pl.col("_i1") - pl.col("_i0")).sum().cast(pl.Int64).alias("ns"))
        .filter(pl.col("ns") > 0)
        .sort("ns", "name", descending=[True, False])
    )
