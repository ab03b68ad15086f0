"""Step time of each rank, split so that every nanosecond of a step is counted once (DOMAIN §9).

**Device windows.** On each rank, step N's window runs from the first device work launched in
step N (events whose ``step`` is N) to the first device work launched in step N+1, the last step's
to the rank's last work end. Windows tile the rank's device span: they never overlap, and Σ
step_time_ns over a rank's rows = its device span. Work that runs before the first step's (launched
outside every step) gets a row of step null; a rank without steps is one such row. A GPU that runs
behind its CPU does not stretch the steps: how far behind is ``lag_ns``, the step's first device
work minus the start of its host spans (annotation, ops) on the rank — the queue depth, not added.

**Breakdown.** Each instant of a window goes to the first that applies:

1. **compute** — a kernel that is neither communication nor a copy runs (any stream, any step);
2. **copy** — a memcpy or memset runs;
3. **transfer** — a communication kernel runs past the release R[i] of its barrier instance (all
   its peers have arrived), or one that belongs to no matched instance runs;
4. **wait** — a communication kernel of instance i runs before R[i] (its last peer has not
   arrived; an asynchronous receive of a disaggregated deployment waits all along,
   :func:`~asaptrace.analyze.barrier.receive_wait`);
5. **idle** — nothing runs; split by cause into idle_sync, idle_host, idle_other
   (:mod:`asaptrace.analyze._idle`).

Identity, checked in code (:class:`~asaptrace.errors.AccountingError`) and in a test over every
store the tests build:

    compute_ns + copy_ns + transfer_ns + wait_ns + idle_host_ns + idle_sync_ns + idle_other_ns
        = step_time_ns      for every (rank, step)

*Exposed* has one meaning in every table: an instant is exposed communication when a
communication kernel runs and no compute kernel or copy does (:mod:`~asaptrace.analyze.overlap`'s
``exposed_comm_ns``); the breakdown splits it into transfer and wait, so per rank

    Σ over steps of transfer_ns  ≤  exposed_comm_ns  ≤  comm_ns      (overlap_by_rank)

Communication under compute or a copy is ``overlapped_ns``, reported beside the parts.

Columns of :func:`step_breakdown`:

| column | dtype | unit | meaning |
|---|---|---|---|
| rank, dp_group | int32 | – | rank and its DP group |
| step | int32 | – | step (null: work before the first step, or a rank without steps) |
| start_ns, end_ns | int64 | ns | the device window on the aligned clock |
| last_end_ns | int64 | ns | last end of the device work launched in the step (its results are out; may pass end_ns) |
| step_time_ns | int64 | ns | end_ns − start_ns |
| compute_ns | int64 | ns | part 1 |
| copy_ns | int64 | ns | part 2 |
| transfer_ns | int64 | ns | part 3 (exposed communication past the barrier) |
| wait_ns | int64 | ns | part 4 (exposed barrier wait) |
| idle_host_ns, idle_sync_ns, idle_other_ns | int64 | ns | part 5 by cause |
| idle_ns | int64 | ns | Σ of the three idle parts (a total, not a further part) |
| overlapped_ns | int64 | ns | communication running under compute or a copy (beside the parts) |
| lag_ns | int64 | ns | CPU→GPU lag: window start − the step's first host span (null without host spans) |
| n_host_gaps | int64 | – | idle gaps that went to idle_host (the device waiting on a launch) |
| n_host_gaps_short | int64 | – | of those, the ones whose next kernel ran under 5 µs |
"""

from __future__ import annotations

import polars as pl

from asaptrace.analyze._common import device_activity, rank_groups, work_category
from asaptrace.analyze._coverage import segments
from asaptrace.analyze._idle import SHORT_KERNEL_NS, idle_causes, sync_ops
from asaptrace.errors import AccountingError

_COMPUTE, _COPY, _TRANSFER, _WAIT, _COMM = 0, 1, 2, 3, 4
_KEYS = ["rank", "step"]
#: The parts, in precedence order; they sum to step_time_ns
PARTS = (
    "compute_ns",
    "copy_ns",
    "transfer_ns",
    "wait_ns",
    "idle_host_ns",
    "idle_sync_ns",
    "idle_other_ns",
)
_COUNTS = ("idle_ns", "overlapped_ns", "n_host_gaps", "n_host_gaps_short")


class BreakdownIdentityError(AccountingError):
    """The parts did not add up to the step time: a bug."""


def device_windows(act: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): the device window [start_ns, end_ns) that tiles the rank's device span
    (module docstring); rows in time order per rank."""
    span = act.group_by("rank").agg(pl.col("start").min().alias("_first"), pl.col("end").max().alias("_last"))
    launched = act.group_by("rank", "step").agg(
        pl.col("start").min().alias("start_ns"), pl.col("end").max().alias("last_end_ns")
    )
    firsts = launched.filter(pl.col("step").is_not_null())
    lead = span.join(
        firsts.group_by("rank").agg(pl.col("start_ns").min().alias("_s0")), on="rank", how="left"
    ).filter(pl.col("_s0").is_null() | (pl.col("_first") < pl.col("_s0")))
    # the earliest work is launched outside every step: its own row, from the rank's first work
    before = lead.join(launched.filter(pl.col("step").is_null()), on="rank").select(
        "rank", "step", pl.col("_first").alias("start_ns"), "last_end_ns"
    )
    w = pl.concat([before, firsts.select(before.columns)]).sort("rank", "start_ns", "step", nulls_last=False)
    nxt = pl.col("start_ns").shift(-1).over("rank")
    return (
        w.join(span, on="rank")
        .with_columns(end_ns=pl.coalesce(nxt, pl.col("_last")))
        .select("rank", "step", "start_ns", "end_ns", "last_end_ns")
    )


def step_breakdown(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    barrier: pl.DataFrame,
    host: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, step): the device window and its parts (columns above). ``host`` (from
    :func:`~asaptrace.analyze._idle.host_frame`) gives the idle causes and the lag; without it
    every idle nanosecond is idle_other and lag_ns is null."""
    return breakdown_tables(events, ranks, barrier=barrier, host=host)[0]


def breakdown_tables(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    barrier: pl.DataFrame,
    host: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`step_breakdown` and ``idle_ops``: per cause (``host``, ``sync``) the host calls the
    idle time came from — cause, name, ns (idle time), gaps (count; null for sync, whose calls
    may cover several gaps each), most first."""
    act = device_activity(events)
    windows = device_windows(act)
    seg = _segments(act, barrier, windows)
    seg = seg.sort("t").join_asof(
        windows.select(pl.col("rank").cast(seg.schema["rank"]), "step", pl.col("start_ns").alias("t")).sort(
            "t"
        ),
        on="t",
        by="rank",
        strategy="backward",
        check_sortedness=False,
    )
    has = lambda bit: (pl.col("mask") & (1 << bit)) > 0  # noqa: E731
    first = lambda bit: has(bit) & ((pl.col("mask") & ((1 << bit) - 1)) == 0)  # noqa: E731
    ns = pl.col("ns")
    parts = seg.group_by(_KEYS).agg(
        ns.filter(has(_COMPUTE)).sum().alias("compute_ns"),
        ns.filter(first(_COPY)).sum().alias("copy_ns"),
        ns.filter(first(_TRANSFER)).sum().alias("transfer_ns"),
        ns.filter(first(_WAIT)).sum().alias("wait_ns"),
        ns.filter(has(_COMM) & (has(_COMPUTE) | has(_COPY))).sum().alias("overlapped_ns"),
    )
    gaps = seg.filter((pl.col("mask") == 0) & (ns > 0)).select(*_KEYS, pl.col("t").alias("g0"), "ns")
    causes = idle_causes(gaps, act, host)
    idle = causes.group_by(_KEYS).agg(
        pl.col("idle_host_ns").sum(),
        pl.col("idle_sync_ns").sum(),
        pl.col("idle_other_ns").sum(),
        (pl.col("idle_host_ns") > 0).sum().cast(pl.Int64).alias("n_host_gaps"),
        ((pl.col("idle_host_ns") > 0) & (pl.col("next_ns") < SHORT_KERNEL_NS))
        .sum()
        .cast(pl.Int64)
        .alias("n_host_gaps_short"),
    )
    wk = windows.with_columns(pl.col("rank").cast(seg.schema["rank"]))
    out = (
        wk.join(parts, on=_KEYS, how="left", nulls_equal=True)
        .join(idle, on=_KEYS, how="left", nulls_equal=True)
        .with_columns(
            pl.col(c).fill_null(0).cast(pl.Int64)
            for c in (*PARTS, "overlapped_ns", "n_host_gaps", "n_host_gaps_short")
        )
        .with_columns(
            step_time_ns=pl.col("end_ns") - pl.col("start_ns"),
            idle_ns=pl.col("idle_host_ns") + pl.col("idle_sync_ns") + pl.col("idle_other_ns"),
        )
    )
    check_identity(out)
    ops = _idle_ops(causes, gaps, host)
    out = out.join(_lag(windows, host), on=_KEYS, how="left", nulls_equal=True)
    out = out.join(
        rank_groups(ranks).select(pl.col("rank").cast(out.schema["rank"]), "dp_group"), on="rank", how="left"
    )
    return out.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("dp_group").cast(pl.Int32),
        pl.col("step").cast(pl.Int32),
        "start_ns",
        "end_ns",
        "last_end_ns",
        "step_time_ns",
        *PARTS,
        *_COUNTS[:2],
        pl.col("lag_ns").cast(pl.Int64),
        *_COUNTS[2:],
    ).sort("rank", "start_ns"), ops


def _idle_ops(causes: pl.DataFrame, gaps: pl.DataFrame, host: pl.DataFrame | None) -> pl.DataFrame:
    launch = (
        causes.filter(pl.col("idle_host_ns") > 0)
        .group_by(pl.col("launch").fill_null("?").alias("name"))
        .agg(pl.col("idle_host_ns").sum().alias("ns"), pl.len().cast(pl.Int64).alias("gaps"))
        .select(pl.lit("host").alias("cause"), "name", pl.col("ns").cast(pl.Int64), "gaps")
    )
    sync = sync_ops(gaps, host).select(
        pl.lit("sync").alias("cause"), "name", "ns", pl.lit(None, pl.Int64).alias("gaps")
    )
    return pl.concat([launch, sync]).sort("cause", "ns", descending=[False, True])


def _segments(act: pl.DataFrame, barrier: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The rank's device time cut into elementary segments (rank, t, ns, mask) at every work edge
    and window edge; mask bits: compute, copy, transfer state, wait state, any communication."""
    cat = work_category(compute=_COMPUTE, copy=_COPY, comm=_COMM)
    work = act.select("rank", "start", "end", cat.alias("cat"))
    rank_t = work.schema["rank"]
    seg_keys = ["rank", "step", "layer", "micro_batch", "kind"]
    comm = act.filter(pl.col("is_comm")).select(*seg_keys, "start", "end").with_row_index("_k")
    b = barrier.select(
        pl.col("rank").cast(rank_t),
        pl.col("step").cast(act.schema["step"]),
        pl.col("layer").cast(act.schema["layer"]),
        pl.col("micro_batch").cast(act.schema["micro_batch"]),
        pl.col("kind").cast(pl.String),
        pl.col("arrival_ns").alias("a"),
        pl.col("release_ns").alias("r"),
        pl.col("end_ns").alias("e"),
    )
    # each communication kernel of a matched instance (a collective kernel is its own instance, a
    # dispatch/combine instance is every kernel of the op in [a, e] of its segment) waits from its
    # start to the release R[i] and transfers after it; a kernel of no instance transfers all along
    linked = (
        comm.join(b, on=seg_keys, nulls_equal=True)
        .filter(
            (pl.col("start") >= pl.col("a"))
            & (pl.col("start") < pl.col("e"))
            & ((pl.col("kind") != "collective") | (pl.col("start") == pl.col("a")))
        )
        .group_by("_k")
        .agg(pl.col("r").max())
    )
    state = comm.join(linked, on="_k", how="left").with_columns(
        _r=pl.col("r").fill_null(pl.col("start")).clip(pl.col("start"), pl.col("end"))
    )
    waits = state.select("rank", "start", pl.col("_r").alias("end"), pl.lit(_WAIT, pl.Int64).alias("cat"))
    transfer = state.select(
        "rank", pl.col("_r").alias("start"), "end", pl.lit(_TRANSFER, pl.Int64).alias("cat")
    )
    iv = pl.concat([work, waits, transfer], how="vertical_relaxed")
    cuts = windows.select(pl.col("rank").cast(rank_t), pl.col("start_ns").alias("t"))
    return segments(iv, ["rank"], 5, cuts)


def _lag(windows: pl.DataFrame, host: pl.DataFrame | None) -> pl.DataFrame:
    """rank, step, lag_ns: the step's window start − its first host span (null without one)."""
    if host is None or "step" not in host.columns:
        return windows.select(*_KEYS, pl.lit(None, pl.Int64).alias("lag_ns"))
    first = (
        host.filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(pl.col("start").min().alias("_h"))
        .with_columns(
            pl.col("rank").cast(windows.schema["rank"]), pl.col("step").cast(windows.schema["step"])
        )
    )
    return windows.join(first, on=_KEYS, how="left").select(
        *_KEYS, (pl.col("start_ns") - pl.col("_h")).alias("lag_ns")
    )


def check_identity(table: pl.DataFrame) -> None:
    """Raise :class:`BreakdownIdentityError` unless the parts add up to the step time."""
    total = pl.sum_horizontal(*PARTS)
    bad = table.filter(total != pl.col("step_time_ns"))
    if bad.height:
        row = bad.row(0, named=True)
        raise BreakdownIdentityError(
            f"step breakdown does not add up for rank {row['rank']} step {row['step']}: "
            + " + ".join(f"{row[c]}" for c in PARTS)
            + f" != {row['step_time_ns']} ns"
        )
