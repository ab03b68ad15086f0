"""Collective instances: one (step, layer, micro-batch, op, occurrence) matched across its ranks.

Used by clock alignment (their end times must coincide) and by the barrier analysis (their start
times are the ranks' arrivals). Only device events of kinds dispatch, combine and collective take
part.

* **dispatch / combine**: on a rank, every kernel of the op within one (step, layer, micro-batch)
  is one arrival — DeepEP's ``notify_dispatch`` and ``dispatch`` kernels form a single instance:
  arrival = earliest start, end = latest end. When a (step, layer, micro-batch) holds several
  separate runs of the op (interleaved with the other op), each run is its own occurrence.
  Dispatch/combine of ``attention`` / ``expert`` ranks (a disaggregated deployment) are
  asynchronous sends and receives, not barriers, and are left out.
* **collective** (NCCL, HCCL, …): each kernel is an instance; op = the kernel name without HCCL's
  per-rank numeric suffix (``hcom_allGather__521_1_1`` → ``hcom_allGather``), occurrence = its
  order among kernels of that op in the (step, layer, micro-batch) on that rank.

Output columns (one row per instance and rank):

| column | dtype | unit | meaning |
|---|---|---|---|
| instance | int64 | – | id of the matched instance (dense, ordered by first arrival; ties by op, seq, segment) |
| step, layer, micro_batch | int32, int16, int8 | – | segment of the instance (nullable) |
| op | str | – | ``dispatch``, ``combine`` or the collective kernel's name |
| kind | str | – | ``dispatch``, ``combine`` or ``collective`` |
| seq | int32 | – | occurrence of the op within the segment |
| rank | int32 | – | participating rank |
| arrival_ns | int64 | ns | start of the rank's first kernel of the instance |
| end_ns | int64 | ns | end of the rank's last kernel of the instance |
| n_kernels | int32 | – | kernels merged into this arrival |
| n_ranks | int32 | – | ranks that took part in the instance |
| expected_ranks | int32 | – | ranks that run this op anywhere in the trace |
| complete | bool | – | n_ranks == expected_ranks |
"""

from __future__ import annotations

import polars as pl

from asaptrace.schema import Kind, Role

_KEYS = ["step", "layer", "micro_batch", "op", "seq"]
#: HCCL operator names end in a per-rank id and counters (hcom_allReduce__360_0_1): not part of the op
_HCCL_SUFFIX = r"__\d+(?:_\d+)*$"
_SEG = ["rank", "step", "layer", "micro_batch"]


def match_instances(
    events: pl.LazyFrame | pl.DataFrame, ranks: pl.LazyFrame | pl.DataFrame | None = None
) -> pl.DataFrame:
    """Match collective instances across ranks (see the module docstring for the columns)."""
    ev = events.lazy() if isinstance(events, pl.DataFrame) else events
    kind = pl.col("kind").cast(pl.String)
    comm = ev.filter(pl.col("is_device") & kind.is_in([Kind.DISPATCH, Kind.COMBINE, Kind.COLLECTIVE])).select(
        "rank",
        "step",
        "layer",
        "micro_batch",
        kind.alias("kind"),
        # only a collective's name names its op (dispatch/combine go by kind): DeepEP's long
        # kernel names are not made a string per kernel of the run for nothing
        pl.when(kind == Kind.COLLECTIVE).then(pl.col("name").cast(pl.String)).alias("name"),
        "ts_ns",
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
    )
    if ranks is not None:
        rk = ranks.lazy() if isinstance(ranks, pl.DataFrame) else ranks
        asynchronous = rk.filter(pl.col("role").is_in([Role.ATTENTION.value, Role.EXPERT.value])).select(
            "rank"
        )
        ep = comm.filter(pl.col("kind") != Kind.COLLECTIVE).join(asynchronous, on="rank", how="anti")
        comm = pl.concat([ep, comm.filter(pl.col("kind") == Kind.COLLECTIVE)])
    comm = comm.collect()
    if comm.height == 0:
        return _empty()
    # dispatch/combine: a run is consecutive kernels of one op in a segment (rows in time order)
    ep = comm.filter(pl.col("kind") != Kind.COLLECTIVE).sort([*_SEG, "ts_ns"], nulls_last=True)
    ep = ep.with_columns(_run=_starts([*_SEG, "kind"]).cast(pl.Int32).cum_sum())
    ep = (
        ep.group_by("_run")  # a run is one (segment, kind): grouped by its number alone
        .agg(
            pl.col(*_SEG, "kind").first(),
            pl.col("ts_ns").min().alias("arrival_ns"),
            pl.col("end_ns").max().alias("end_ns"),
            pl.len().cast(pl.Int32).alias("n_kernels"),
        )
        .with_columns(op=pl.col("kind"))
        .drop("_run")
    )
    coll = (
        comm.filter(pl.col("kind") == Kind.COLLECTIVE)
        .with_columns(op=pl.col("name").str.replace(_HCCL_SUFFIX, ""))
        .select(
            *_SEG,
            "kind",
            pl.col("ts_ns").alias("arrival_ns"),
            "end_ns",
            pl.lit(1, pl.Int32).alias("n_kernels"),
            "op",
        )
    )
    # seq: the occurrence of the op in its segment on its rank, in arrival order
    # ops sorted by a code of their name (any order of ops gives the same occurrences: only the
    # rows of one op in a segment are counted), not by the strings
    both = (
        pl.concat([ep.select(coll.columns), coll])
        .with_columns(_op=pl.col("op").cast(pl.Categorical).to_physical())
        .sort([*_SEG, "_op", "arrival_ns"], nulls_last=True)
    )
    row = pl.int_range(pl.len(), dtype=pl.Int32)
    both = both.with_columns(
        seq=row - pl.when(_starts([*_SEG, "_op"])).then(row).otherwise(None).forward_fill()
    ).drop("_op")
    expected = both.group_by("op").agg(pl.col("rank").n_unique().cast(pl.Int32).alias("expected_ranks"))
    ids = (
        both.group_by(_KEYS)
        .agg(pl.len().cast(pl.Int32).alias("n_ranks"), pl.col("arrival_ns").min().alias("_first"))
        .sort(["_first", "op", "seq", "step", "layer", "micro_batch"], nulls_last=True)  # ties: by segment
        .with_row_index("instance")
        .with_columns(pl.col("instance").cast(pl.Int64))
        .drop("_first")
    )
    per = (
        both.join(ids, on=_KEYS, how="left", nulls_equal=True)
        .join(expected, on="op", how="left")
        .with_columns(complete=pl.col("n_ranks") == pl.col("expected_ranks"))
    )
    return per.select(
        "instance",
        "step",
        "layer",
        "micro_batch",
        "op",
        "kind",
        "seq",
        "rank",
        "arrival_ns",
        "end_ns",
        "n_kernels",
        "n_ranks",
        "expected_ranks",
        "complete",
    ).sort("instance", "rank")


def _starts(keys: list[str]) -> pl.Expr:
    """True on the first row of each run of equal ``keys`` (rows sorted by them; nulls equal)."""
    return pl.any_horizontal([pl.col(k).ne_missing(pl.col(k).shift(1)) for k in keys]).fill_null(True)


def _empty() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "instance": pl.Int64,
            "step": pl.Int32,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
            "op": pl.String,
            "kind": pl.String,
            "seq": pl.Int32,
            "rank": pl.Int32,
            "arrival_ns": pl.Int64,
            "end_ns": pl.Int64,
            "n_kernels": pl.Int32,
            "n_ranks": pl.Int32,
            "expected_ranks": pl.Int32,
            "complete": pl.Boolean,
        }
    )
