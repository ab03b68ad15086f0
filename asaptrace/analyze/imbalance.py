"""DP imbalance: how unequal the DP groups' work was at each step, and whether Σs² explains the wait.

Symbols, for step k and DP group g with requests of lengths s_1 … s_n:

* tokens T[k, g] = Σ (s_i − c_i);  Σs²[k, g] = Σ (s_i² − c_i²)  (from the batches table; c_i is the
  request's prefix-cache hit, 0 when unknown: cached tokens are neither computed nor attended anew);
* A[k, g] = measured attention time: Σ of the device time of ``attention`` kernels in step k,
  averaged over g's ranks (its TP members split the same batch);
* imbalance ratio of a quantity X at step k = max_g X[k, g] / mean_g X[k, g] (1 = balanced);
* fit over all (k, g): A ≈ c0 + c1·T + c2·Σs² by least squares, with its R²;
* predicted wait P[k, g] = max_g' Â[k, g'] − Â[k, g] (Â = fitted attention) and measured wait
  W[k, g] = exposed barrier wait of step k (:mod:`asaptrace.analyze.breakdown`), averaged over g's
  ranks;
* explained share = clip(Σ P / Σ W, 0, 1): the part of the barrier wait that the groups' length mix
  predicts — a lower bound, since imbalance between micro-batches (two-micro-batch overlap) adds
  wait that group totals cannot see; wait R² = the R² of W ≈ a + b·P over all (k, g): how well
  the length mix ranks the groups' waits.

Batches of DP groups no rank of the store belongs to are left out (the store's ranks define the
groups). When the lengths are unknown the cost basis falls back to the measured attention time (T, Σs²,
the fit and P are null) and ``cost_basis`` says ``measured_attention``.

:func:`imbalance_by_group` columns: step (int32), dp_group (int32), n_ranks (int64),
n_requests (int64), tokens (int64, tokens), sum_sq (int64, tokens²), attention_ns (int64, ns),
predicted_attention_ns (int64, ns), wait_ns (int64, ns), predicted_wait_ns (int64, ns).

:func:`imbalance_by_step` columns: step (int32), n_groups (int64), tokens_ratio, sum_sq_ratio,
attention_ratio (float64), max_sum_sq_group, max_attention_group (int32), wait_ns (int64, Σ over
groups of their mean per-rank wait).

:func:`fit_attention` columns (one row): n_points (int64), cost_basis (str), c0_ns (float64, ns),
c1_ns_per_token (float64), c2_ns_per_token2 (float64), r2 (float64), explained_wait_share (float64),
wait_r2 (float64).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.analyze._common import device_activity, rank_groups
from asaptrace.schema import Kind

_BY = ["step", "dp_group"]


def imbalance_by_group(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    batches: pl.LazyFrame | pl.DataFrame | None = None,
    breakdown: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (step, DP group): requests, tokens, Σs², measured and fitted attention, wait (see above)."""
    rk = rank_groups(ranks).filter(pl.col("dp_group").is_not_null())
    act = device_activity(events).filter(pl.col("kind") == Kind.ATTENTION)
    per_rank = act.group_by("rank", "step").agg((pl.col("end") - pl.col("start")).sum().alias("attn"))
    per_rank = per_rank.join(rk.select("rank", "dp_group"), on="rank", how="inner")
    attn = per_rank.group_by(_BY).agg(
        pl.col("rank").n_unique().cast(pl.Int64).alias("n_ranks"),
        pl.col("attn").mean().round(0).cast(pl.Int64).alias("attention_ns"),
    )
    # only the DP groups some rank of the store belongs to: a batch of a group no device ran is
    # no load of this run (diagnose() notes such groups)
    lengths = _lengths(batches)
    if lengths.height:
        lengths = lengths.join(
            rk.select(pl.col("dp_group").cast(pl.Int32)).unique(), on="dp_group", how="semi"
        )
    out = (
        attn.join(lengths, on=_BY, how="full", coalesce=True)
        if lengths.height
        else attn.with_columns(
            n_requests=pl.lit(None, pl.Int64), tokens=pl.lit(None, pl.Int64), sum_sq=pl.lit(None, pl.Int64)
        )
    )
    if breakdown is not None and breakdown.height:
        w = (
            breakdown.filter(pl.col("dp_group").is_not_null())
            .group_by(_BY)
            .agg(pl.col("wait_ns").mean().round(0).cast(pl.Int64))
        )
        out = out.join(w, on=_BY, how="left")
    else:
        out = out.with_columns(wait_ns=pl.lit(None, pl.Int64))
    out = out.with_columns(pl.col("step").cast(pl.Int32), pl.col("dp_group").cast(pl.Int32))
    coef = _fit(out)
    if coef is not None:
        c0, c1, c2, _ = coef
        pred = (c0 + c1 * pl.col("tokens").cast(pl.Float64) + c2 * pl.col("sum_sq").cast(pl.Float64)).round(0)
        out = out.with_columns(predicted_attention_ns=pred.cast(pl.Int64)).with_columns(
            predicted_wait_ns=(
                pl.col("predicted_attention_ns").max().over("step") - pl.col("predicted_attention_ns")
            )
        )
    else:
        out = out.with_columns(
            predicted_attention_ns=pl.lit(None, pl.Int64), predicted_wait_ns=pl.lit(None, pl.Int64)
        )
    return out.select(
        "step",
        "dp_group",
        pl.col("n_ranks").fill_null(0),
        "n_requests",
        "tokens",
        "sum_sq",
        "attention_ns",
        "predicted_attention_ns",
        "wait_ns",
        "predicted_wait_ns",
    ).sort(_BY, nulls_last=True)


def _lengths(batches: pl.LazyFrame | pl.DataFrame | None) -> pl.DataFrame:
    if batches is None:
        return pl.DataFrame()
    b = batches.lazy().collect() if isinstance(batches, pl.LazyFrame) else batches
    if b.height == 0:
        return pl.DataFrame()
    s = pl.col("seq_len").cast(pl.Int64)
    c = pl.col("cached_len").cast(pl.Int64).fill_null(0)
    return (
        b.group_by(_BY)
        .agg(
            pl.len().cast(pl.Int64).alias("n_requests"),
            (s - c).sum().alias("tokens"),
            (s * s - c * c).sum().alias("sum_sq"),
        )
        .with_columns(pl.col("step").cast(pl.Int32), pl.col("dp_group").cast(pl.Int32))
    )


def _fit(by_group: pl.DataFrame) -> tuple[float, float, float, float] | None:
    """Least squares A ≈ c0 + c1 T + c2 Σs²; (c0, c1, c2, R²) or None without enough lengths."""
    d = by_group.filter(
        pl.col("tokens").is_not_null() & pl.col("sum_sq").is_not_null() & pl.col("attention_ns").is_not_null()
    )
    if d.height < 3:
        return None
    y = d.get_column("attention_ns").to_numpy().astype(np.float64)
    t = d.get_column("tokens").to_numpy().astype(np.float64)
    q = d.get_column("sum_sq").to_numpy().astype(np.float64)
    # scale columns so the solve is well conditioned; undo afterwards
    ts, qs = max(t.max(), 1.0), max(q.max(), 1.0)
    x = np.column_stack([np.ones_like(t), t / ts, q / qs])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / tot if tot > 0 else 1.0
    return float(beta[0]), float(beta[1] / ts), float(beta[2] / qs), r2


def _r2(x: np.ndarray, y: np.ndarray) -> float | None:
    """R² of the least-squares line y ≈ a + b·x."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    tot = float(((y - y.mean()) ** 2).sum())
    if tot == 0 or np.ptp(x) == 0:
        return None
    b, a = np.polyfit(x, y, 1)
    return 1.0 - float(((y - (a + b * x)) ** 2).sum()) / tot


def fit_attention(by_group: pl.DataFrame) -> pl.DataFrame:
    """One row: the fit of attention time to (Σs, Σs²) and the share of wait it explains."""
    coef = _fit(by_group)
    known = by_group.filter(pl.col("sum_sq").is_not_null()).height
    explained = wait_r2 = None
    if coef is not None:
        d = by_group.filter(pl.col("wait_ns").is_not_null() & pl.col("predicted_wait_ns").is_not_null())
        w = d.get_column("wait_ns").sum()
        if w:
            explained = float(min(1.0, max(0.0, d.get_column("predicted_wait_ns").sum() / w)))
        if d.height >= 3:
            wait_r2 = _r2(d.get_column("predicted_wait_ns").to_numpy(), d.get_column("wait_ns").to_numpy())
    c0, c1, c2, r2 = coef if coef is not None else (None, None, None, None)
    return pl.DataFrame(
        {
            "n_points": [by_group.height],
            "cost_basis": ["seq_lens" if known else "measured_attention"],
            "c0_ns": [c0],
            "c1_ns_per_token": [c1],
            "c2_ns_per_token2": [c2],
            "r2": [r2],
            "explained_wait_share": [explained],
            "wait_r2": [wait_r2],
        },
        schema={
            "n_points": pl.Int64,
            "cost_basis": pl.String,
            "c0_ns": pl.Float64,
            "c1_ns_per_token": pl.Float64,
            "c2_ns_per_token2": pl.Float64,
            "r2": pl.Float64,
            "explained_wait_share": pl.Float64,
            "wait_r2": pl.Float64,
        },
    )


def imbalance_by_step(by_group: pl.DataFrame) -> pl.DataFrame:
    """Per step: max/mean ratios over DP groups of tokens, Σs² and measured attention."""

    def ratio(c: str) -> pl.Expr:
        m = pl.col(c).cast(pl.Float64).mean()
        return pl.when(m > 0).then(pl.col(c).cast(pl.Float64).max() / m).otherwise(None).alias(f"{c}_ratio")

    def argmax(c: str, name: str) -> pl.Expr:
        return pl.col("dp_group").sort_by(pl.col(c), descending=True, nulls_last=True).first().alias(name)

    return (
        by_group.group_by("step")
        .agg(
            pl.len().cast(pl.Int64).alias("n_groups"),
            ratio("tokens"),
            ratio("sum_sq"),
            ratio("attention_ns").alias("attention_ratio"),
            argmax("sum_sq", "max_sum_sq_group").cast(pl.Int32),
            argmax("attention_ns", "max_attention_group").cast(pl.Int32),
            pl.col("wait_ns").sum().cast(pl.Int64),
        )
        .with_columns(
            pl.when(pl.col("sum_sq_ratio").is_null())
            .then(None)
            .otherwise(pl.col("max_sum_sq_group"))
            .alias("max_sum_sq_group")
        )
        .sort("step", nulls_last=True)
    )
