"""The measured pool of a store (:func:`~asaptrace.replay.whatif.measured.extract_measured_work`'s
``pool`` table): the MoE work its expert ranks served, per (step, layer, micro-batch), and the per-die
noise the replay redraws (:mod:`asaptrace.replay.dispersion`)."""

from __future__ import annotations

import polars as pl

from asaptrace.replay.dispersion import with_noise
from asaptrace.schema import Kind


def pool_items(dev: pl.DataFrame, expert: pl.DataFrame, items: pl.DataFrame, deployment: str) -> pl.DataFrame:
    """Per (step, layer, micro_batch): the pool's time, as the sum over its served items of each
    item's slowest die (``pool_ns``; its dies' mean: ``pool_mean_ns``), and the dies' noise.

    A coupled store's pool serves one item a (step, layer, micro-batch): every group's tokens at
    once. A disaggregated one serves each group's batch as an item of its own (:func:`served_item`),
    and the noise is read per item: the log spread of the D items' per-die *sums* is σ/√D, not the
    per-die σ an item of another split pays (E[max of k] at the item's own σ)."""
    keys = ["step", "layer", "micro_batch"]
    kernels = dev.filter((pl.col("kind") == Kind.MOE.value) & pl.col("layer").is_not_null()).join(
        expert.select("rank"), on="rank"
    )
    kernels = served_item(kernels, items) if deployment == "disaggregated" else kernels.with_columns(sub=0)
    per_rank = kernels.group_by(*keys, "sub", "rank").agg(pl.col("dur_ns").sum())
    per_item = per_rank.group_by(*keys, "sub").agg(
        pl.col("dur_ns").max().alias("pool_ns"), pl.col("dur_ns").mean().round(0).alias("pool_mean_ns")
    )
    per_item = with_noise(per_item, per_rank, [*keys, "sub"], ["step"], "dur_ns", "moe")
    moe = per_item.group_by(*keys).agg(
        pl.col("pool_ns").sum(),
        pl.col("pool_mean_ns").sum(),
        pl.col("moe_log_ss").sum(),
        # degrees of freedom Σ (dies − 1) over the items, as one row's dies − 1
        (pl.col("moe_dies").sum() - pl.len() + 1).alias("moe_dies"),
        pl.col("moe_thr").first(),  # per step
    )
    tok = items.group_by("step", "layer", "micro_batch").agg(
        pl.when(pl.col("tokens").null_count() == 0).then(pl.col("tokens").sum()).alias("tokens")
    )
    return (
        moe.join(tok, on=["step", "layer", "micro_batch"], how="left", nulls_equal=True)
        .select(
            pl.col("step").cast(pl.Int32),
            pl.col("layer").cast(pl.Int16),
            pl.col("micro_batch").cast(pl.Int8),
            pl.col("pool_ns").cast(pl.Int64),
            pl.col("pool_mean_ns").cast(pl.Int64),
            pl.col("tokens").cast(pl.Float64),
            pl.col("moe_log_ss").fill_null(0.0).cast(pl.Float64),
            pl.col("moe_dies").fill_null(0).cast(pl.Int64),
            pl.col("moe_thr").fill_null(1.0).cast(pl.Float64),
        )
        .sort("step", "layer", "micro_batch")
    )


def served_item(kernels: pl.DataFrame, items: pl.DataFrame) -> pl.DataFrame:
    """``kernels`` (an expert rank's MoE kernels) with ``sub``: which of its (step, layer,
    micro-batch)'s D served items each belongs to. The pool serves one item at a time on a die, so
    its kernels of a (step, layer, micro-batch) come in D equal runs, in the order served; when a
    rank's count is not a multiple of D, ``sub`` is 0 (the items' sum, as a coupled store's)."""
    keys = ["step", "layer", "micro_batch"]
    d = items.group_by(keys).agg(pl.len().alias("_d"))
    d = d.cast({k: kernels.schema[k] for k in keys})
    n, d_ = pl.col("_n"), pl.col("_d").fill_null(1)
    return (
        kernels.join(d, on=keys, how="left", nulls_equal=True)
        .with_columns(
            _n=pl.len().over("rank", *keys),
            _o=(pl.col("ts_ns").rank("ordinal").over("rank", *keys) - 1).cast(pl.Int64),
        )
        .with_columns(_k=pl.when(n % d_ == 0).then(n // d_).otherwise(n).cast(pl.Int64))
        .with_columns(sub=pl.col("_o") // pl.col("_k"))
        .drop("_d", "_n", "_o", "_k")
    )
