"""Stragglers: who arrives last, how often, and whether it is the device or the load.

Symbols, from the barrier table (:mod:`asaptrace.analyze.barrier`) and the device time by kind:

* last_count[r] = instances where rank r arrived last; last_share = last_count / instances;
* lateness[i, r] = a[i, r] − median over the instance's ranks of a[i, ·];
* compute ratios: a rank's non-MoE compute time (attention, gate, GEMMs, copies …) divided by the
  median of its DP group's ranks (they run the same batch). A rank alone in its group (TP1) has no
  such peers: its attention time is divided by what the Σs/Σs² fit of
  :mod:`asaptrace.analyze.imbalance` predicts for its batches (null when lengths are unknown, since
  load and a slow device then cannot be told apart); ranks without a DP group are compared with
  the median of all ranks. The MoE time is divided by the median over all MoE-running ranks;
* outlier test, on each ratio across ranks (a pluggable ``detector``; default: Dixon's Q at 95 %
  for up to 10 values, else a leave-one-out 3σ test; both ignore deviations under 5 %);
* cause of an outlier rank: ``slow_device`` when its non-MoE compute ratio is an outlier (every
  kernel is slower: persistent, whatever the batch), else ``hot_expert`` when its MoE ratio is;
* a DP group that is ready last at a step is **load-induced** when it also had the largest Σs²
  (largest measured attention when lengths are unknown) in that step; a group's ``cause`` is
  ``load`` when that holds for at least half the steps where it was most often last, else
  ``persistent`` when it was most often last in at least half of all steps (two steps at least).

:func:`stragglers` columns: rank, dp_group (int32), role (str), n_instances, last_count (int64),
last_share (float64), mean_lateness_ns (int64, ns), compute_ns, attention_ns, moe_ns (int64, ns),
compute_ratio (float64), compute_baseline (str: dp_group_peers, load_fit or all_ranks), moe_ratio
(float64), outlier (bool), outlier_metric, outlier_test, cause (str).

:func:`straggler_groups` columns: dp_group (int32), last_count (int64), last_share (float64),
steps_last (int64, steps where the group was most often last), load_matched_steps (int64, of
those, steps where it also had the largest load), cause (str: load, persistent or null).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from asaptrace.analyze._common import device_activity, rank_groups
from asaptrace.schema import Kind

#: Dixon's Q critical values at 95 % confidence, n = 3 … 10 (Rorabacher 1991).
DIXON_Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}
MIN_DEVIATION = 0.05

Detector = Callable[[np.ndarray], tuple[np.ndarray, str]]


def dixon_or_3sigma(values: np.ndarray) -> tuple[np.ndarray, str]:
    """High outliers of ``values`` (ratios around 1): a boolean mask and the test's name."""
    x = np.asarray(values, dtype=np.float64)
    flags = np.zeros(len(x), dtype=bool)
    ok = np.isfinite(x)
    v = x[ok]
    if len(v) < 3:
        return flags, "none"
    if len(v) <= 10:
        order = np.argsort(v)
        spread = v[order[-1]] - v[order[0]]
        if spread > 0:
            q = (v[order[-1]] - v[order[-2]]) / spread
            if q > DIXON_Q95[len(v)] and v[order[-1]] > np.median(v) * (1 + MIN_DEVIATION):
                idx = np.flatnonzero(ok)[order[-1]]
                flags[idx] = True
        return flags, "dixon_q95"
    n = len(v)
    total, total_sq = v.sum(), (v * v).sum()
    mean_o = (total - v) / (n - 1)
    var_o = np.maximum((total_sq - v * v) / (n - 1) - mean_o**2, 0.0) * (n - 1) / max(n - 2, 1)
    std_o = np.sqrt(var_o)
    big = v > mean_o * (1 + MIN_DEVIATION)
    z = np.where(std_o > 0, (v - mean_o) / np.where(std_o > 0, std_o, 1), np.inf)
    flags[np.flatnonzero(ok)] = big & (z > 3)
    return flags, "3sigma"


def stragglers(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    barrier: pl.DataFrame,
    imbalance: pl.DataFrame | None = None,
    detector: Detector = dixon_or_3sigma,
) -> pl.DataFrame:
    """Per rank: last arrivals, lateness, compute ratios, outlier flag and cause (see above)."""
    rk = rank_groups(ranks)
    act = device_activity(events).filter(~pl.col("is_comm") & ~pl.col("is_copy"))
    dur = pl.col("end") - pl.col("start")
    work = act.group_by("rank").agg(
        dur.sum().alias("compute_ns"),
        dur.filter(pl.col("kind") == Kind.ATTENTION).sum().alias("attention_ns"),
        dur.filter(pl.col("kind") == Kind.MOE).sum().alias("moe_ns"),
    )
    if barrier.height:
        late = (
            barrier.with_columns(_late=pl.col("arrival_ns") - pl.col("arrival_ns").median().over("instance"))
            .group_by("rank")
            .agg(
                pl.len().cast(pl.Int64).alias("n_instances"),
                (pl.col("rank") == pl.col("last_rank")).sum().cast(pl.Int64).alias("last_count"),
                pl.col("_late").mean().round(0).cast(pl.Int64).alias("mean_lateness_ns"),
            )
        )
        n_inst = barrier.get_column("instance").n_unique()
    else:
        late = pl.DataFrame(
            schema={
                "rank": pl.Int32,
                "n_instances": pl.Int64,
                "last_count": pl.Int64,
                "mean_lateness_ns": pl.Int64,
            }
        )
        n_inst = 0
    t = (
        rk.join(work, on="rank", how="left")
        .join(late, on="rank", how="left")
        .with_columns(
            pl.col("compute_ns").fill_null(0),
            pl.col("attention_ns").fill_null(0),
            pl.col("moe_ns").fill_null(0),
            pl.col("n_instances").fill_null(0),
            pl.col("last_count").fill_null(0),
        )
        .with_columns(
            _other=pl.col("compute_ns") - pl.col("moe_ns"), _grp=pl.coalesce("dp_group", pl.lit(-1))
        )
    )
    group_size = pl.len().over("_grp")
    peer_median = pl.col("_other").median().over("_grp")
    expected = _expected_attention(imbalance)
    t = (
        t.join(expected, on="dp_group", how="left")
        if expected is not None
        else t.with_columns(_expected=pl.lit(None, pl.Float64))
    )
    ratio = (
        pl.when(pl.col("dp_group").is_null())
        .then(pl.col("_other") / pl.col("_other").median())
        .when(group_size > 1)
        .then(pl.col("_other") / peer_median)
        .otherwise(pl.col("attention_ns") / pl.col("_expected"))
    )
    baseline = (
        pl.when(pl.col("dp_group").is_null())
        .then(pl.lit("all_ranks"))
        .when(group_size > 1)
        .then(pl.lit("dp_group_peers"))
        .otherwise(pl.lit("load_fit"))
    )
    moe_median = pl.col("moe_ns").filter(pl.col("moe_ns") > 0).median()
    t = t.with_columns(
        compute_baseline=baseline,
        compute_ratio=pl.when(ratio.is_finite() & (ratio > 0)).then(ratio).otherwise(None),
        moe_ratio=pl.when((pl.col("moe_ns") > 0) & (moe_median > 0))
        .then(pl.col("moe_ns") / moe_median)
        .otherwise(None),
        last_share=(pl.col("last_count") / n_inst) if n_inst else pl.lit(None, pl.Float64),
    ).sort("rank")
    slow, test_c = detector(t.get_column("compute_ratio").to_numpy())
    hot, test_m = detector(t.get_column("moe_ratio").to_numpy())
    hot = hot & ~slow
    cause = np.where(slow, "slow_device", np.where(hot, "hot_expert", None))
    metric = np.where(slow, "compute_ratio", np.where(hot, "moe_ratio", None))
    test = np.where(slow, test_c, np.where(hot, test_m, None))
    t = t.with_columns(
        outlier=pl.Series(slow | hot),
        outlier_metric=pl.Series(metric.tolist(), dtype=pl.String),
        outlier_test=pl.Series(test.tolist(), dtype=pl.String),
        cause=pl.Series(cause.tolist(), dtype=pl.String),
    )
    return t.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("dp_group").cast(pl.Int32),
        "role",
        "n_instances",
        "last_count",
        "last_share",
        "mean_lateness_ns",
        *[pl.col(c).cast(pl.Int64) for c in ("compute_ns", "attention_ns", "moe_ns")],
        "compute_ratio",
        "compute_baseline",
        "moe_ratio",
        "outlier",
        "outlier_metric",
        "outlier_test",
        "cause",
    )


def _expected_attention(imbalance: pl.DataFrame | None) -> pl.DataFrame | None:
    """Per DP group: Σ over steps of the fitted attention time (None without a fit)."""
    if (
        imbalance is None
        or imbalance.height == 0
        or imbalance.get_column("predicted_attention_ns").is_null().all()
    ):
        return None
    return imbalance.group_by("dp_group").agg(
        pl.col("predicted_attention_ns").sum().cast(pl.Float64).alias("_expected")
    )


def straggler_groups(barrier: pl.DataFrame, imbalance: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per DP group: how often it was ready last, and whether that follows its load (see above)."""
    schema = {
        "dp_group": pl.Int32,
        "last_count": pl.Int64,
        "last_share": pl.Float64,
        "steps_last": pl.Int64,
        "load_matched_steps": pl.Int64,
        "cause": pl.String,
    }
    b = barrier.filter(pl.col("last_dp_group").is_not_null())
    if b.height == 0:
        return pl.DataFrame(schema=schema)
    inst = b.select("instance", "step", "last_dp_group").unique("instance")
    n_inst = inst.height
    counts = inst.group_by("last_dp_group").agg(pl.len().cast(pl.Int64).alias("last_count"))
    per_step = (
        inst.group_by("step", "last_dp_group")
        .agg(pl.len().alias("n"))
        .sort(["step", "n", "last_dp_group"], descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .agg(pl.col("last_dp_group").first().alias("g"))
    )
    n_steps = per_step.height
    if imbalance is not None and imbalance.height:
        load_col = "sum_sq" if imbalance.get_column("sum_sq").is_not_null().any() else "attention_ns"
        top = (
            imbalance.filter(pl.col(load_col).is_not_null())
            .sort(["step", load_col], descending=[False, True])
            .group_by("step", maintain_order=True)
            .agg(pl.col("dp_group").first().alias("top"))
        )
        per_step = per_step.join(top, on="step", how="left", nulls_equal=True)
    else:
        per_step = per_step.with_columns(top=pl.lit(None, pl.Int32))
    steps = per_step.group_by("g").agg(
        pl.len().cast(pl.Int64).alias("steps_last"),
        (pl.col("g") == pl.col("top")).fill_null(False).sum().cast(pl.Int64).alias("load_matched_steps"),
    )
    out = (
        counts.rename({"last_dp_group": "dp_group"})
        .join(steps.rename({"g": "dp_group"}), on="dp_group", how="left")
        .with_columns(
            pl.col("steps_last").fill_null(0),
            pl.col("load_matched_steps").fill_null(0),
            last_share=pl.col("last_count") / n_inst,
        )
        .with_columns(
            cause=pl.when(
                (pl.col("steps_last") > 0)
                & (2 * pl.col("load_matched_steps") >= pl.col("steps_last"))
                & (pl.col("load_matched_steps") > 0)
            )
            .then(pl.lit("load"))
            .when((n_steps >= 2) & (2 * pl.col("steps_last") >= n_steps) & (pl.col("steps_last") > 0))
            .then(pl.lit("persistent"))
            .otherwise(None)
        )
    )
    return out.select(
        pl.col("dp_group").cast(pl.Int32),
        "last_count",
        "last_share",
        "steps_last",
        "load_matched_steps",
        "cause",
    ).sort("last_count", descending=True)
