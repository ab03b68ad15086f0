"""In-flight MoE items on a disaggregated run's expert pool, over time (a counter track for the export).

An item is one (DP group, step, layer, micro-batch) of attention output sent to the pool. It is in
flight from when its dispatch has reached the pool — the end of the last dispatch span among its
group's attention ranks — until its MoE work ends on the pool (every expert rank draws the item's
MoE span at the same time, so the pool's spans are counted once per distinct span). The count is
therefore the pool's queue plus the item it is running: (items arrived by t) − (items finished by t).

Derived from the events alone, so it works on any disaggregated store (a replayed ASAP run, or a
measured one whose taxonomy marks dispatch and MoE kernels and whose ranks have roles); a store
without attention and expert ranks gives an empty table.
"""

from __future__ import annotations

import polars as pl

from asaptrace.schema import Kind, Role

#: Name of the counter track (a Perfetto ``C`` event name).
IN_FLIGHT_NAME = "in-flight MoE items (pool)"
COUNTER_SCHEMA = {"rank": pl.Int64, "name": pl.String, "ts_ns": pl.Int64, "value": pl.Int64}
_ITEM = ("step", "layer", "micro_batch")


def in_flight_moe_items(
    events: pl.DataFrame | pl.LazyFrame, ranks: pl.DataFrame | pl.LazyFrame
) -> pl.DataFrame:
    """``rank, name, ts_ns, value``: the in-flight item count after every change, on the lowest
    expert rank (the pool's track); empty when the run has no attention or no expert ranks."""
    rk = (
        ranks.lazy()
        .select(pl.col("rank").cast(pl.Int64), pl.col("role").cast(pl.String), "dp_group")
        .collect()
    )
    experts = rk.filter(pl.col("role") == Role.EXPERT).get_column("rank")
    ev = events.lazy().with_columns(pl.col("rank").cast(pl.Int64), pl.col("kind").cast(pl.String))
    if experts.len() == 0 or rk.filter(pl.col("role") == Role.ATTENTION).height == 0:
        return pl.DataFrame(schema=COUNTER_SCHEMA)
    arrived = (
        ev.filter(pl.col("kind") == Kind.DISPATCH)
        .join(rk.lazy().filter(pl.col("role") == Role.ATTENTION), on="rank")
        .group_by("dp_group", *_ITEM)
        .agg(ts_ns=(pl.col("ts_ns") + pl.col("dur_ns")).max())
        .select("ts_ns", delta=pl.lit(1, pl.Int64))
    )
    finished = (
        ev.filter(pl.col("kind") == Kind.MOE, pl.col("rank").is_in(experts.to_list()))
        .select(*_ITEM, "ts_ns", "dur_ns")
        .unique()
        .select(ts_ns=pl.col("ts_ns") + pl.col("dur_ns"), delta=pl.lit(-1, pl.Int64))
    )
    return (
        pl.concat([arrived, finished])
        .group_by("ts_ns")
        .agg(pl.col("delta").sum())
        .sort("ts_ns")
        .select(
            rank=pl.lit(int(experts.min()), pl.Int64),  # type: ignore[arg-type]
            name=pl.lit(IN_FLIGHT_NAME),
            ts_ns=pl.col("ts_ns").cast(pl.Int64),
            value=pl.col("delta").cum_sum().cast(pl.Int64),
        )
        .collect()
    )
