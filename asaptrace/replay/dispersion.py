"""Per-die noise: work spread over k dies that must all finish costs the expected max of k draws.

A layer's MoE item runs on every die of the pool and ends when the slowest die ends; a TP group's
attention ends when its slowest member ends. With each die's duration ``loc·exp(σ·Z)`` (Z standard
normal, independent per die: lognormal kernel noise), the item costs

    E[max of k] = loc · G(k, σ),   G(k, σ) = ∫ exp(σz) · k·φ(z)·Φ(z)^(k−1) dz

— the expected maximum of k lognormal draws (order statistics). G(1, σ) = exp(σ²/2), G(k, 0) = 1.
A measured max over n dies is rescaled to k dies by G(k, σ) / G(n, σ): a pool of 8 dies does not pay
the slowest of the 32 a coupled run measured. G is integrated on a fixed grid (deterministic, no
scipy), cached per (k, σ).

σ is fitted from the dies' own durations at each item (:func:`log_spread`): the log durations'
spread around the item's mean, after each die's persistent offset is taken out (a hot expert or a
slow device is a level, not noise: it stays in the measured max, the noise is what is redrawn).

:func:`fork_join_share` is what a resource kept busy pays per item: less than its slowest die,
since each die runs its own queue and may run ahead by the items in flight.

:func:`max_draws` samples the max of k draws for the Monte-Carlo band (inverse CDF of Φ^k on the
same grid: one uniform per item whatever k).
"""

from __future__ import annotations

import heapq
import math
from functools import lru_cache
from typing import Any

import numpy as np
import polars as pl

_Z = np.linspace(-9.0, 9.0, 3601)
_PHI = np.exp(-0.5 * _Z * _Z) / math.sqrt(2 * math.pi)
_CDF = np.clip(0.5 * (1.0 + np.vectorize(math.erf)(_Z / math.sqrt(2.0))), 0.0, 1.0)
_DZ = float(_Z[1] - _Z[0])


@lru_cache(maxsize=4096)
def _expected_max(k: int, sigma: float) -> float:
    if sigma <= 0 or k < 1:
        return 1.0
    dens = k * _PHI * _CDF ** (k - 1)
    w = np.exp(sigma * _Z) * dens
    return float((w[:-1] + w[1:]).sum() * _DZ / 2)


def expected_max(k: float, sigma: float) -> float:
    """G(k, σ): E[max of k draws of exp(σZ)] (1 when σ = 0; k rounded to whole dies, at least 1)."""
    return _expected_max(max(round(float(k)), 1), round(float(sigma), 12))


def fork_join_share(k: float, sigma: float, window: int) -> float:
    """What a resource of k independent dies pays per item when it is the bottleneck, in units of
    one die's location: the steady-state interval between items of a closed loop of ``window``
    items, each run on all k dies (every die its own FIFO queue, each duration exp(σZ) drawn
    independently) and released again as soon as its slowest die ends (every slot's item waits on
    the resource). A die runs ahead of the slowest by at most the items in flight and idles when it
    is that far ahead. window 1: G(k, σ), the slowest die every item; a long window: G(1, σ), the
    mean die. Simulated over :data:`FORK_JOIN_ITEMS` items (the second half's rate) with a seed made
    of its arguments: one value per argument set, the same in every process, cached."""
    if sigma <= 0:
        return 1.0
    kk, w = max(round(float(k)), 1), max(int(window), 1)
    if kk == 1 or w == 1:  # one die is always busy; one item in flight waits for the slowest
        return expected_max(kk if w == 1 else 1, sigma)
    return _fork_join(kk, round(float(sigma), 12), w)


#: items a :func:`fork_join_share` loop runs: its rate, read over the second half, moves ≈ 0.3 %
#: from one seed to another at σ 0.2 (one loop: 20 ms at 8 dies, 40 ms at 256)
FORK_JOIN_ITEMS = 4000


@lru_cache(maxsize=1024)
def _fork_join(k: int, sigma: float, window: int) -> float:
    rng = np.random.default_rng([k, window, round(sigma * 1e9)])
    x = np.exp(sigma * rng.standard_normal((FORK_JOIN_ITEMS, k)))
    free = np.zeros(k)  # when each die is through its queue
    release = [0.0] * window  # each slot's next release (a heap: items reach the dies in this order)
    done = np.zeros(FORK_JOIN_ITEMS)
    for j in range(FORK_JOIN_ITEMS):
        free = np.maximum(free, heapq.heappop(release)) + x[j]
        done[j] = free.max()
        heapq.heappush(release, float(done[j]))
    half = FORK_JOIN_ITEMS // 2
    return float((done[-1] - done[half - 1]) / (FORK_JOIN_ITEMS - half))


def order_factor(k_to: float, k_from: float, sigma: float) -> float:
    """A measured max over ``k_from`` dies rescaled to ``k_to`` dies: G(k_to, σ) / G(k_from, σ)."""
    if sigma <= 0:
        return 1.0
    return expected_max(k_to, sigma) / expected_max(k_from, sigma)


def max_draws(rng: np.random.Generator, k: float, sigma: float, n: int) -> np.ndarray:
    """``n`` draws of max of k exp(σZ), each ÷ G(k, σ) (mean 1): the Monte-Carlo multiplier."""
    if sigma <= 0 or n == 0:
        return np.ones(n)
    kk = max(round(float(k)), 1)
    u = rng.random(n) ** (1.0 / kk)  # Φ(zmax) = U^(1/k)
    z = np.interp(u, _CDF, _Z)
    return np.exp(sigma * z) / expected_max(kk, sigma)


def die_stats(rng: np.random.Generator | None, k: float, sigma: float, n: int) -> tuple[Any, Any]:
    """Mean and max of k dies' exp(σZ) for ``n`` items: expected (G(1, σ), G(k, σ)) without a
    generator; one draw of the k dies per item with it (the Monte-Carlo band)."""
    kk = max(round(float(k)), 1)
    if rng is None or sigma <= 0:
        return expected_max(1, sigma), expected_max(kk, sigma)
    w = np.exp(sigma * rng.standard_normal((n, kk)))
    return w.mean(axis=1), w.max(axis=1)


def log_spread(per_die: pl.DataFrame, item: list[str], die: str, value: str) -> pl.DataFrame:
    """Per item: Σ of squared log-duration residuals and the number of dies (``log_ss``, ``dies``).

    residual = log d − the item's mean log − the die's mean offset over all its items (a persistent
    hot or slow die is a level, not noise). Items with one die, or non-positive durations, give 0.
    Summing is over a sorted frame, so the result does not depend on thread order.
    """
    d = (
        per_die.filter(pl.col(value) > 0)
        .sort([*item, die])
        .with_columns(_l=pl.col(value).cast(pl.Float64).log())
    )
    d = d.with_columns(_r=pl.col("_l") - pl.col("_l").mean().over(item))
    d = d.with_columns(_e=pl.col("_r") - pl.col("_r").mean().over(die))
    return (
        d.group_by(item, maintain_order=True)
        .agg((pl.col("_e") ** 2).sum().alias("log_ss"), pl.len().cast(pl.Int64).alias("dies"))
        .sort(item)
    )


def throughput_share(per_die: pl.DataFrame, span: list[str], die: str, value: str) -> pl.DataFrame:
    """Per ``span`` (a step, or a step's group): the busiest die's Σ of its own durations ÷ the Σ over
    items of each item's slowest die (``thr`` ≤ 1). Dies that each run their own queue are busy for
    their own sums, so this is the share of the items' maxima a resource really pays when it is kept
    busy: 1 without noise (every die equal, or one die always the slowest, a hot expert), lower when
    the slowest die changes from item to item."""
    items = [c for c in per_die.columns if c not in (die, value)]
    by_die = (
        per_die.group_by([*span, die])
        .agg(pl.col(value).sum())
        .group_by(span)
        .agg(pl.col(value).max().alias("_d"))
    )
    by_item = (
        per_die.group_by(items).agg(pl.col(value).max()).group_by(span).agg(pl.col(value).sum().alias("_i"))
    )
    return (
        by_die.join(by_item, on=span)
        .select(*span, thr=pl.when(pl.col("_i") > 0).then(pl.col("_d") / pl.col("_i")).otherwise(1.0))
        .sort(span)
    )


def with_noise(
    items: pl.DataFrame,
    per_die: pl.DataFrame,
    item: list[str],
    span: list[str] | None,
    value: str,
    prefix: str,
) -> pl.DataFrame:
    """``items`` with ``{prefix}_log_ss``, ``{prefix}_dies`` (:func:`log_spread`) and ``{prefix}_thr``
    (:func:`throughput_share` per ``span``; None: 1, the dies are held together at every item)."""
    spread = log_spread(per_die, item, "rank", value)
    out = items.join(
        spread.rename({"log_ss": f"{prefix}_log_ss", "dies": f"{prefix}_dies"}),
        on=item,
        how="left",
        nulls_equal=True,
    )
    if span is None:
        return out.with_columns(pl.lit(1.0).alias(f"{prefix}_thr"))
    share = throughput_share(per_die, span, "rank", value).rename({"thr": f"{prefix}_thr"})
    return out.join(share, on=span, how="left")


def pooled_sigma(log_ss: np.ndarray, dies: np.ndarray) -> tuple[float, int]:
    """σ from items' residual sums of squares (degrees of freedom: dies − 1 per item); and the dof."""
    dof = int(np.maximum(np.asarray(dies) - 1, 0).sum())
    if dof <= 0:
        return 0.0, 0
    return float(math.sqrt(float(np.asarray(log_ss, np.float64).sum()) / dof)), dof
