"""Barrier wait: who waited on whom, at which collective instance, for how long.

Symbols, for a matched instance i (one step, layer, micro-batch and op: dispatch, combine or a
collective kernel) and a participating rank r, on aligned clocks:

* arrival a[i, r] = start of r's first kernel of the instance;
* release R[i] = max over r of a[i, r] (the last arrival: nobody can finish before it);
* wait w[i, r] = R[i] − a[i, r] — the time r's kernel spins for its peers;
* transfer x[i] = min over r of (end[i, r] − a[i, r]) — the shortest peer duration, i.e. the
  kernel time of a rank that did not wait.

Only complete instances (every rank that runs the op took part) are used. The wait each DP group
imposes on the others: at an instance where group g is the last to be ready (a group is ready when
its last member arrives), ``imposed_wait_ns`` adds R[i] − (latest readiness among the other
groups), the time g alone held the barrier, and ``caused_wait_ns`` adds the waits of every rank
outside g.

:func:`barrier_wait` returns one row per (instance, rank):

| column | dtype | unit | meaning |
|---|---|---|---|
| instance | int64 | – | matched instance id |
| step, layer, micro_batch | int32, int16, int8 | – | segment (nullable) |
| op, kind | str | – | ``dispatch`` / ``combine`` / collective kernel name; its kind |
| seq | int32 | – | occurrence of the op within the segment |
| rank, dp_group | int32 | – | the rank and its DP group (nullable) |
| arrival_ns | int64 | ns | a[i, r] |
| release_ns | int64 | ns | R[i] |
| end_ns | int64 | ns | end of r's last kernel of the instance |
| wait_ns | int64 | ns | w[i, r] |
| transfer_ns | int64 | ns | x[i] |
| is_last | bool | – | r arrived last (a[i, r] = R[i]) |
| last_rank | int32 | – | lowest rank among the last arrivals |
| last_dp_group | int32 | – | DP group that was ready last (nullable) |
| n_ranks | int32 | – | ranks in the instance |

The roll-ups (:func:`wait_by_rank`, :func:`wait_by_group`, :func:`wait_by_layer`,
:func:`wait_by_step`, :func:`wait_by_rank_layer`, :func:`wait_by_instance`) document their columns in
``docs/reference/columns.md``.
"""

from __future__ import annotations

import polars as pl

from asaptrace.analyze._common import lazy, rank_groups, share
from asaptrace.enrich.instances import match_instances
from asaptrace.schema import Kind, Role

_INST = ["instance"]


def barrier_wait(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    instances: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per matched instance and rank: arrival, release, wait, transfer (columns above)."""
    rk = rank_groups(ranks)
    inst = instances if instances is not None else match_instances(lazy(events), lazy(ranks))
    inst = inst.filter(pl.col("complete") & (pl.col("n_ranks") >= 2)).join(
        rk.select("rank", "dp_group"), on="rank", how="left"
    )
    if inst.height == 0:
        return _empty()
    inst = inst.with_columns(
        release_ns=pl.col("arrival_ns").max().over(_INST),
        transfer_ns=(pl.col("end_ns") - pl.col("arrival_ns")).min().over(_INST),
    ).with_columns(
        wait_ns=pl.col("release_ns") - pl.col("arrival_ns"),
        is_last=pl.col("arrival_ns") == pl.col("release_ns"),
    )
    last_rank = inst.filter(pl.col("is_last")).group_by(_INST).agg(pl.col("rank").min().alias("last_rank"))
    ready = inst.group_by([*_INST, "dp_group"]).agg(pl.col("arrival_ns").max().alias("_ready"))
    last_group = (
        ready.filter(pl.col("dp_group").is_not_null())
        .sort([*_INST, "_ready", "dp_group"], descending=[False, True, False])
        .group_by(_INST, maintain_order=True)
        .agg(pl.col("dp_group").first().alias("last_dp_group"))
    )
    out = inst.join(last_rank, on=_INST, how="left").join(last_group, on=_INST, how="left")
    return out.select(
        "instance",
        "step",
        "layer",
        "micro_batch",
        "op",
        "kind",
        "seq",
        "rank",
        "dp_group",
        "arrival_ns",
        "release_ns",
        "end_ns",
        "wait_ns",
        "transfer_ns",
        "is_last",
        pl.col("last_rank").cast(pl.Int32),
        pl.col("last_dp_group").cast(pl.Int32),
        "n_ranks",
    ).sort("instance", "rank")


def receive_wait(events: pl.LazyFrame | pl.DataFrame, ranks: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """Waits of asynchronous receives (disaggregated deployments), one row per (rank, step, layer, micro-batch).

    An attention device's combine-receive kernel starts when it is launched and spins until its own
    group's results are back: there is no barrier with other groups, but the kernel's time is still
    waiting. wait_ns = the kernel's duration (an upper bound: it includes copying the received
    data, which is short next to the round trip). Columns: those of :func:`barrier_wait` with
    ``release_ns`` = ``end_ns`` = end of the receive, transfer_ns null, is_last null, n_ranks 1.
    """
    rk = rank_groups(ranks)
    attn = rk.filter(pl.col("role") == Role.ATTENTION.value).select("rank", "dp_group")
    if attn.height == 0:
        return _empty()
    kind = pl.col("kind").cast(pl.String)
    rec = (
        lazy(events)
        .filter(pl.col("is_device") & (kind == Kind.COMBINE))
        .join(attn.lazy(), on="rank", how="inner")
        .group_by("rank", "dp_group", "step", "layer", "micro_batch")
        .agg(
            pl.col("ts_ns").min().alias("arrival_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end_ns"),
        )
        .collect()
    )
    if rec.height == 0:
        return _empty()
    return (
        rec.with_columns(
            instance=pl.lit(None, pl.Int64),
            op=pl.lit("combine_receive"),
            kind=pl.lit(Kind.COMBINE.value),
            seq=pl.lit(0, pl.Int32),
            release_ns=pl.col("end_ns"),
            wait_ns=pl.col("end_ns") - pl.col("arrival_ns"),
            transfer_ns=pl.lit(None, pl.Int64),
            is_last=pl.lit(None, pl.Boolean),
            last_rank=pl.lit(None, pl.Int32),
            last_dp_group=pl.lit(None, pl.Int32),
            n_ranks=pl.lit(1, pl.Int32),
        )
        .select(_empty().columns)
        .cast(_empty().schema)
        .sort("rank", "step", "layer", "micro_batch")
    )  # type: ignore[arg-type]


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
            "dp_group": pl.Int32,
            "arrival_ns": pl.Int64,
            "release_ns": pl.Int64,
            "end_ns": pl.Int64,
            "wait_ns": pl.Int64,
            "transfer_ns": pl.Int64,
            "is_last": pl.Boolean,
            "last_rank": pl.Int32,
            "last_dp_group": pl.Int32,
            "n_ranks": pl.Int32,
        }
    )


def wait_by_rank(barrier: pl.DataFrame, breakdown: pl.DataFrame) -> pl.DataFrame:
    """Per rank: instances, total wait, exposed wait, last arrivals, the wait it imposed, step time.

    The per-rank twin of :func:`wait_by_group`, for runs without DP groups (a training job, a run
    whose collectives are not inside MoE layers): there each rank is its own party at the barrier.

    Columns: rank (int32), dp_group (int32), n_instances (int64), wait_ns (int64, Σ w over
    instances), exposed_wait_ns (int64, wait not hidden under compute, from the step breakdown),
    transfer_ns (int64, Σ x), last_count (int64, instances where the rank arrived last, the lowest
    rank among ties), last_share (float64, last_count / instances it took part in),
    imposed_wait_ns (int64, Σ over those instances of R − the latest arrival of another rank: the
    time it alone held the barrier), caused_wait_ns (int64, Σ of the other ranks' waits there),
    step_time_ns (int64, Σ of the rank's step windows), wait_share (float64, exposed_wait_ns /
    step_time_ns).
    """
    per = barrier.group_by("rank").agg(
        pl.col("dp_group").first(),
        pl.len().cast(pl.Int64).alias("n_instances"),
        pl.col("wait_ns").sum().cast(pl.Int64),
        pl.col("transfer_ns").sum().cast(pl.Int64),
        (pl.col("rank") == pl.col("last_rank")).sum().cast(pl.Int64).alias("last_count"),
    )
    blame = _blame_by_rank(barrier)
    steps = breakdown.group_by("rank").agg(
        pl.col("dp_group").first().alias("_dp"),
        pl.col("wait_ns").sum().cast(pl.Int64).alias("exposed_wait_ns"),
        pl.col("step_time_ns").sum().cast(pl.Int64),
    )
    out = (
        steps.join(per, on="rank", how="full", coalesce=True)
        .join(blame, on="rank", how="left")
        .with_columns(
            dp_group=pl.coalesce("dp_group", "_dp"),
            n_instances=pl.col("n_instances").fill_null(0),
            wait_ns=pl.col("wait_ns").fill_null(0),
            transfer_ns=pl.col("transfer_ns").fill_null(0),
            last_count=pl.col("last_count").fill_null(0),
            exposed_wait_ns=pl.col("exposed_wait_ns").fill_null(0),
            imposed_wait_ns=pl.col("imposed_wait_ns").fill_null(0),
            caused_wait_ns=pl.col("caused_wait_ns").fill_null(0),
        )
    )
    return out.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("dp_group").cast(pl.Int32),
        "n_instances",
        "wait_ns",
        "exposed_wait_ns",
        "transfer_ns",
        "last_count",
        share(pl.col("last_count"), pl.col("n_instances")).alias("last_share"),
        pl.col("imposed_wait_ns").cast(pl.Int64),
        pl.col("caused_wait_ns").cast(pl.Int64),
        "step_time_ns",
        share(pl.col("exposed_wait_ns"), pl.col("step_time_ns")).alias("wait_share"),
    ).sort("rank")


def _blame_by_rank(barrier: pl.DataFrame) -> pl.DataFrame:
    """rank, imposed_wait_ns, caused_wait_ns over the instances the rank reached last (its ``last_rank``)."""
    others = barrier.filter(pl.col("rank") != pl.col("last_rank"))
    per = others.group_by("instance").agg(
        pl.col("last_rank").first().alias("rank"),
        (pl.col("release_ns").first() - pl.col("arrival_ns").max()).alias("imposed_wait_ns"),
        pl.col("wait_ns").sum().alias("caused_wait_ns"),
    )
    return per.group_by("rank").agg(
        pl.col("imposed_wait_ns").sum().cast(pl.Int64), pl.col("caused_wait_ns").sum().cast(pl.Int64)
    )


def wait_by_instance(barrier: pl.DataFrame) -> pl.DataFrame:
    """Per matched collective instance: where it is, how long its ranks waited, who came last.

    The barriers of a run are its matched instances, inside MoE layers or not (a training job's
    all-to-alls and all-reduces): this is what the faces show when there are no layers to sum into.

    Columns: instance (int64), step (int32), layer (int16), micro_batch (int8), op, kind (str),
    n_ranks (int32), first_arrival_ns, release_ns (int64, ns, aligned clock), wait_ns (int64, Σ over
    ranks), max_wait_ns (int64, the longest single wait), transfer_ns (int64, x), last_rank (int32),
    last_dp_group (int32, nullable).
    """
    return (
        barrier.group_by("instance")
        .agg(
            pl.col("step").first(),
            pl.col("layer").first(),
            pl.col("micro_batch").first(),
            pl.col("op").first(),
            pl.col("kind").first(),
            pl.col("n_ranks").first(),
            pl.col("arrival_ns").min().alias("first_arrival_ns"),
            pl.col("release_ns").first(),
            pl.col("wait_ns").sum().cast(pl.Int64),
            pl.col("wait_ns").max().cast(pl.Int64).alias("max_wait_ns"),
            pl.col("transfer_ns").first(),
            pl.col("last_rank").first(),
            pl.col("last_dp_group").first(),
        )
        .sort("instance")
    )


def wait_by_group(barrier: pl.DataFrame) -> pl.DataFrame:
    """Per DP group: its ranks' wait, how often it was ready last, and the wait it imposed.

    Columns: dp_group (int32), n_ranks (int64), wait_ns (int64, Σ over its ranks),
    mean_wait_ns (int64, per rank), last_count (int64, instances where the group was ready last),
    last_share (float64, of all instances), imposed_wait_ns (int64, Σ R − latest readiness of the
    other groups, where this group was last), caused_wait_ns (int64, Σ of other groups' ranks'
    waits where this group was last).
    """
    b = barrier.filter(pl.col("dp_group").is_not_null())
    if b.height == 0:
        return pl.DataFrame(
            schema={
                "dp_group": pl.Int32,
                "n_ranks": pl.Int64,
                "wait_ns": pl.Int64,
                "mean_wait_ns": pl.Int64,
                "last_count": pl.Int64,
                "last_share": pl.Float64,
                "imposed_wait_ns": pl.Int64,
                "caused_wait_ns": pl.Int64,
            }
        )
    n_inst = b.get_column("instance").n_unique()
    ready = b.group_by("instance", "dp_group").agg(
        pl.col("arrival_ns").max().alias("ready"), pl.col("release_ns").first().alias("release")
    )
    others = (
        ready.sort("instance", "ready", descending=[False, True])
        .group_by("instance", maintain_order=True)
        .agg(pl.col("ready").get(1, null_on_oob=True).alias("second"))
    )
    last = (
        b.select("instance", "last_dp_group")
        .unique()
        .join(others, on="instance")
        .join(ready.select("instance", pl.col("release").alias("_rel")).unique("instance"), on="instance")
        .with_columns(imposed=(pl.col("_rel") - pl.col("second")).fill_null(0))
    )
    caused = (
        b.filter(pl.col("dp_group") != pl.col("last_dp_group"))
        .group_by("last_dp_group")
        .agg(pl.col("wait_ns").sum().alias("caused_wait_ns"))
    )
    blame = (
        last.group_by("last_dp_group")
        .agg(
            pl.len().cast(pl.Int64).alias("last_count"),
            pl.col("imposed").sum().cast(pl.Int64).alias("imposed_wait_ns"),
        )
        .join(caused, on="last_dp_group", how="left")
        .rename({"last_dp_group": "dp_group"})
    )
    per = b.group_by("dp_group").agg(
        pl.col("rank").n_unique().cast(pl.Int64).alias("n_ranks"), pl.col("wait_ns").sum().cast(pl.Int64)
    )
    out = (
        per.join(blame, on="dp_group", how="left")
        .with_columns(
            mean_wait_ns=(pl.col("wait_ns") // pl.col("n_ranks")).cast(pl.Int64),
            last_count=pl.col("last_count").fill_null(0),
            imposed_wait_ns=pl.col("imposed_wait_ns").fill_null(0),
            caused_wait_ns=pl.col("caused_wait_ns").fill_null(0).cast(pl.Int64),
        )
        .with_columns(last_share=pl.col("last_count") / n_inst)
    )
    return out.select(
        pl.col("dp_group").cast(pl.Int32),
        "n_ranks",
        "wait_ns",
        "mean_wait_ns",
        "last_count",
        "last_share",
        "imposed_wait_ns",
        "caused_wait_ns",
    ).sort("dp_group")


def wait_by_layer(barrier: pl.DataFrame) -> pl.DataFrame:
    """Per layer: instances, total and mean wait (per rank and instance), worst single wait.

    Columns: layer (int16), n_instances (int64), wait_ns (int64), mean_wait_ns (int64),
    max_wait_ns (int64).
    """
    return (
        barrier.group_by("layer")
        .agg(
            pl.col("instance").n_unique().cast(pl.Int64).alias("n_instances"),
            pl.col("wait_ns").sum().cast(pl.Int64),
            pl.col("wait_ns").mean().round(0).cast(pl.Int64).alias("mean_wait_ns"),
            pl.col("wait_ns").max().cast(pl.Int64).alias("max_wait_ns"),
        )
        .sort("layer", nulls_last=True)
    )


def wait_by_step(barrier: pl.DataFrame, breakdown: pl.DataFrame) -> pl.DataFrame:
    """Per step: total wait over ranks, exposed wait, Σ of ranks' step times and the wait share.

    Columns: step (int32), n_instances (int64), wait_ns (int64), exposed_wait_ns (int64),
    step_time_ns (int64, Σ over ranks), wait_share (float64, exposed_wait_ns / step_time_ns).
    """
    w = barrier.group_by("step").agg(
        pl.col("instance").n_unique().cast(pl.Int64).alias("n_instances"),
        pl.col("wait_ns").sum().cast(pl.Int64),
    )
    s = breakdown.group_by("step").agg(
        pl.col("wait_ns").sum().cast(pl.Int64).alias("exposed_wait_ns"),
        pl.col("step_time_ns").sum().cast(pl.Int64),
    )
    out = s.join(w, on="step", how="full", coalesce=True).with_columns(
        pl.col("n_instances").fill_null(0),
        pl.col("wait_ns").fill_null(0),
        pl.col("exposed_wait_ns").fill_null(0),
    )
    return out.select(
        pl.col("step").cast(pl.Int32),
        "n_instances",
        "wait_ns",
        "exposed_wait_ns",
        "step_time_ns",
        share(pl.col("exposed_wait_ns"), pl.col("step_time_ns")).alias("wait_share"),
    ).sort("step", nulls_last=True)


def wait_by_rank_layer(barrier: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step, layer): Σ wait over the layer's instances (dispatch and combine, all micro-batches).

    ``barrier`` may also hold :func:`receive_wait` rows (their wait counts as combine wait).

    Columns: rank (int32), dp_group (int32), step (int32), layer (int16), wait_ns (int64),
    dispatch_wait_ns (int64), combine_wait_ns (int64).
    """
    return (
        barrier.group_by("rank", "step", "layer")
        .agg(
            pl.col("dp_group").first(),
            pl.col("wait_ns").sum().cast(pl.Int64),
            pl.col("wait_ns")
            .filter(pl.col("kind") == "dispatch")
            .sum()
            .cast(pl.Int64)
            .alias("dispatch_wait_ns"),
            pl.col("wait_ns")
            .filter(pl.col("kind") == "combine")
            .sum()
            .cast(pl.Int64)
            .alias("combine_wait_ns"),
        )
        .select("rank", "dp_group", "step", "layer", "wait_ns", "dispatch_wait_ns", "combine_wait_ns")
        .sort("rank", "step", "layer", nulls_last=True)
    )
