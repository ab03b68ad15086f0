"""Layers from the order of dispatch/combine kernels, for ranks without layer annotations.

Within a (rank, step), the k-th run of dispatch kernels and the combine run after it form MoE
layer k (counted from 0 among MoE layers, not the model's layer id); a compute kernel belongs to
layer k when k combine runs ended before it started; events after the last combine have no layer.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.schema import Kind


def layers_from_comm_order(ev: pl.DataFrame, ranks: pl.Series) -> pl.DataFrame | None:
    """Layers of ``ranks``' device work from the order of their dispatch/combine kernels (see
    :mod:`asaptrace.enrich.segment`, rule 5, applied by :mod:`asaptrace.enrich.structure`); None when
    those ranks have no dispatch/combine."""
    ev = ev.with_row_index("_row")
    kind = pl.col("kind").cast(pl.String)
    dev = (
        ev.filter(pl.col("rank").is_in(ranks.implode()) & pl.col("is_device") & (kind != Kind.ANNOTATION))
        .select("_row", "rank", "step", "ts_ns", "dur_ns", kind.alias("k"))
        .sort("rank", "step", "ts_ns")
    )
    comm = dev.filter(pl.col("k").is_in([Kind.DISPATCH, Kind.COMBINE]))
    if comm.height == 0:
        return None
    keys = ["rank", "step"]
    comm = comm.with_columns(
        _run=(pl.col("k") != pl.col("k").shift(1)).fill_null(True).cast(pl.Int32).cum_sum().over(keys)
    )
    runs = (
        comm.group_by([*keys, "_run", "k"])
        .agg(pl.col("ts_ns").min().alias("_start"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("_end"))
        .sort([*keys, "_start"])
    )
    runs = runs.with_columns(
        _n_dispatch=(pl.col("k") == Kind.DISPATCH).cast(pl.Int32).cum_sum().over(keys),
    ).with_columns(_layer=(pl.col("_n_dispatch") - 1))
    # a combine run before any dispatch has no layer
    runs = runs.with_columns(_layer=pl.when(pl.col("_layer") >= 0).then(pl.col("_layer")).otherwise(None))
    comm = comm.join(runs.select([*keys, "_run", "_layer"]), on=[*keys, "_run"], how="left")
    n_layers = runs.group_by(keys).agg(pl.col("_n_dispatch").max().alias("_n"))
    combine_ends = (
        runs.filter(pl.col("k") == Kind.COMBINE)
        .select([*keys, "_end"])
        .sort("_end")
        .with_columns(_done=pl.int_range(1, pl.len() + 1).over(keys))
    )
    other = dev.filter(~pl.col("k").is_in([Kind.DISPATCH, Kind.COMBINE])).sort("ts_ns")
    other = (
        other.join_asof(
            combine_ends,
            left_on="ts_ns",
            right_on="_end",
            by=keys,
            strategy="backward",
            check_sortedness=False,
        )
        .join(n_layers, on=keys, how="left")
        .with_columns(_layer=pl.col("_done").fill_null(0))
        .with_columns(_layer=pl.when(pl.col("_layer") < pl.col("_n")).then(pl.col("_layer")).otherwise(None))
    )
    fill = np.full(ev.height, -1, dtype=np.int64)
    for part in (comm, other):
        fill[part.get_column("_row").to_numpy()] = part.get_column("_layer").fill_null(-1).to_numpy()
    fill_s = pl.Series(fill).cast(pl.Int16)
    return ev.with_columns(layer=pl.when(fill_s >= 0).then(fill_s).otherwise(pl.col("layer"))).drop("_row")
