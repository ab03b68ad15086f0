"""Link contention: a transfer slowed by the transfers in flight in its direction.

A *transfer* is one dispatch or one combine instance of a disaggregated store: an attention
group's dispatch-send (its members' kernels of one (group, step, layer, micro-batch)) or the
pool's combine-send of one served item (the i-th combine of a (step, layer, micro-batch) on every
expert rank, the pool serving items in one order). Each sender kernel (one die's part of a
transfer) gets n = the number of *other* transfers of its direction (dispatches go into the pool,
combines out of it) one of whose kernels runs at its start (``start ≤ s < end``) — synth's own
definition (:mod:`asaptrace.synth.contention`), so a twin's κ is read back. The fit
(:func:`estimate_contention`) finds κ in::

    duration = level of its transfer × (1 + κ·n) × the die's noise

by least squares on the log durations within each transfer (its dies carry the same payload, so
the level drops out and the dies' own skew in n is what is left). κ is kept only when positive and
when it explains the kernels better than κ = 0 (an F statistic on one parameter, above
:data:`F_CONTENTION`); the transfer line is then fitted on X_measured / (1 + κ·n̄), n̄ each row's
mean count. Otherwise κ = 0 and exactly the line fitted without it.

The counts compare kernels of different ranks, so they need the ranks' clocks to agree to well
under a transfer's duration. A coupled store cannot show contention (its dispatch and combine are
collectives, one at a time, their kernels holding the barrier wait: no sender kernels are read),
and enrich cannot align the hosts of a disaggregated run (its sends are asynchronous): hosts whose
clocks disagree by milliseconds blur n and read κ low (a twin at contention 0.5 with 3 ms per-node
offsets: 0.16).

The what-if keeps each measured transfer's level (its count is taken as the measured one, not
re-derived for another split); the Monte-Carlo band draws it per item as N ~ Poisson(n̄) and costs
the transfer × (1 + κ·N) / (1 + κ·n̄) (:func:`drawn_contention`). A run that cannot show
contention (:func:`contention_observable`) keeps κ = 0 in its answer and the band draws κ over
:data:`CONTENTION_PRIOR` (``asaptrace.replay.whatif.run.mc_band``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from asaptrace.schema import Kind, Role

_KEYS = ["step", "layer", "micro_batch"]
IN_FLIGHT_SCHEMA = {"dispatch_in_flight": pl.Float64, "combine_in_flight": pl.Float64}


def transfer_kernels(dev: pl.DataFrame, ranks: pl.DataFrame, deployment: str) -> pl.DataFrame:
    """``kind, step, layer, micro_batch, inst, ts_ns, dur_ns, in_flight`` per sender kernel of a
    disaggregated store (empty for a coupled one: its collectives' kernels hold their barrier wait,
    and they run one at a time)."""
    cols = {"kind": pl.String, "step": pl.Int32, "layer": pl.Int16, "micro_batch": pl.Int8}
    empty = pl.DataFrame(
        schema=cols | {"inst": pl.Int64, "ts_ns": pl.Int64, "dur_ns": pl.Int64, "in_flight": pl.Int64}
    )
    if deployment != "disaggregated":
        return empty
    role, kind = pl.col("role"), pl.col("kind")
    ev = (
        dev.join(ranks.select("rank", "role", "dp_group"), on="rank")
        .filter(
            ((kind == Kind.DISPATCH.value) & (role == Role.ATTENTION.value))
            | ((kind == Kind.COMBINE.value) & (role == Role.EXPERT.value))
        )
        .filter(pl.col("layer").is_not_null(), pl.col("dur_ns") > 0)
        .with_columns(
            # a combine's transfer: its order among the rank's combines of the (step, layer, mb)
            pl.when(kind == Kind.COMBINE.value)
            .then(pl.col("ts_ns").rank("ordinal").over("rank", "kind", *_KEYS).cast(pl.Int64))
            .otherwise(pl.col("dp_group").cast(pl.Int64))
            .alias("sub")
        )
        .with_columns(inst=pl.struct("kind", *_KEYS, "sub").rank("dense").cast(pl.Int64))
        .sort("ts_ns", "rank")
    )
    if ev.height == 0:
        return empty
    counts = np.zeros(ev.height, np.int64)
    kinds = ev["kind"].to_numpy()
    for k in (Kind.DISPATCH.value, Kind.COMBINE.value):
        sel = np.flatnonzero(kinds == k)
        counts[sel] = others_in_flight(
            ev["inst"].to_numpy()[sel], ev["ts_ns"].to_numpy()[sel], ev["end_ns"].to_numpy()[sel]
        )
    return ev.select(
        *(pl.col(c).cast(t) for c, t in cols.items()), "inst", "ts_ns", "dur_ns", in_flight=pl.Series(counts)
    )


def others_in_flight(inst: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per kernel: the other transfers one of whose kernels runs at its start. Each transfer's
    kernels are merged into disjoint segments, so a transfer covers a time at most once."""
    order = np.lexsort((start, inst))
    i, s, e = inst[order], start[order], end[order]
    seg_s, seg_e, seg_of = [], [], np.empty(len(i), np.int64)
    for k in range(len(i)):
        if k and i[k] == i[k - 1] and s[k] <= seg_e[-1]:
            seg_e[-1] = max(seg_e[-1], e[k])
        else:
            seg_s.append(s[k])
            seg_e.append(e[k])
        seg_of[k] = len(seg_s) - 1
    ss, se = np.sort(np.array(seg_s)), np.sort(np.array(seg_e))
    covering = np.searchsorted(ss, start, side="right") - np.searchsorted(se, start, side="right")
    # its own transfer covers its start unless its segment has no length (a zero-time kernel)
    own = np.empty(len(i), np.int64)
    own[order] = np.array(seg_e, np.int64)[seg_of] > s
    return covering - own


def with_in_flight(transfers: pl.DataFrame, kernels: pl.DataFrame) -> pl.DataFrame:
    """``transfers`` with the mean in-flight count of each row's dispatch and combine kernels
    (``dispatch_in_flight``, ``combine_in_flight``; null where it has none)."""
    k = pl.col("kind")
    by_item = kernels.group_by(_KEYS).agg(
        pl.col("in_flight").filter(k == Kind.DISPATCH.value).mean().alias("dispatch_in_flight"),
        pl.col("in_flight").filter(k == Kind.COMBINE.value).mean().alias("combine_in_flight"),
    )
    return transfers.join(by_item, on=_KEYS, how="left", nulls_equal=True).sort(_KEYS, nulls_last=True)


def estimate_contention(kernels: pl.DataFrame) -> dict[str, float]:
    """κ read from the sender kernels, within each transfer (its dies carry the same payload): a
    kernel's log duration is its transfer's level plus log(1 + κ·n) plus the die's noise,

        log d_i = a_transfer + log(1 + κ·n_i) + ε_i

    so the levels (the tokens, the link, whatever sets a transfer's size) drop out and what is
    left is the dies' own skew in n. κ is the least-squares value (each transfer's a its mean at
    that κ; a one-dimensional search, :func:`_least_squares_kappa`); ``f`` the F statistic of κ
    against κ = 0 (one parameter); ``kernels`` the points used."""
    overlaps = int((kernels["in_flight"] > 0).sum()) if kernels.height else 0
    quiet = {"kappa": 0.0, "f": 0.0, "kernels": kernels.height, "overlaps": overlaps}
    if kernels.height < 8 or overlaps == 0:
        return quiet
    transfer = kernels.select(pl.struct("kind", *_KEYS, "inst").rank("dense")).to_series().to_numpy() - 1
    y = np.log(kernels["dur_ns"].to_numpy().astype(np.float64))
    n = kernels["in_flight"].to_numpy().astype(np.float64)
    size = np.bincount(transfer)
    dof = len(y) - len(size) - 1
    if dof < 1 or not (n - (np.bincount(transfer, n) / size)[transfer]).any():
        return quiet  # every transfer's dies see the same count: κ cannot be told from the level

    def ssr(kappa: float) -> float:
        r = y - np.log1p(kappa * n)
        r -= (np.bincount(transfer, r) / size)[transfer]
        return float(r @ r)

    kappa = _least_squares_kappa(ssr, -0.99 / n.max(), KAPPA_MAX)
    ss1 = ssr(kappa)
    return quiet | {"kappa": kappa, "f": (ssr(0.0) - ss1) / max(ss1 / dof, 1e-300)}


#: the search's upper end for κ (a transfer 10× slower per transfer in flight is no link)
KAPPA_MAX = 10.0


def _least_squares_kappa(ssr: Callable[[float], float], lo: float, hi: float) -> float:
    """Golden-section search of the sum of squares over [lo, hi] (to 1e-9 of the interval)."""
    g = (5**0.5 - 1) / 2
    c, d = hi - g * (hi - lo), lo + g * (hi - lo)
    fc, fd = ssr(c), ssr(d)
    while hi - lo > 1e-9 * KAPPA_MAX:
        if fc < fd:
            hi, d, fd = d, c, fc
            c = hi - g * (hi - lo)
            fc = ssr(c)
        else:
            lo, c, fc = c, d, fd
            d = lo + g * (hi - lo)
            fd = ssr(d)
    return float((lo + hi) / 2)


#: κ is kept only when the contention term explains this much more than the line alone
F_CONTENTION = 10.0

Line = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, str]]


def fit_contention(
    t: np.ndarray, y: np.ndarray, n: np.ndarray, estimate: dict[str, float], line: Line
) -> tuple[float, np.ndarray, np.ndarray, str, dict[str, Any]]:
    """κ with the transfer line: (κ, line β, prediction with contention, the line's note, quality).

    ``line(t, y)`` fits latency + per_k·t (the cost fit's own) — on y / (1 + κ·n) when κ is kept
    (positive, F above :data:`F_CONTENTION`); otherwise κ = 0 and the result is exactly ``line(t, y)``."""
    kappa, f = float(estimate.get("kappa", 0.0)), float(estimate.get("f", 0.0))
    info: dict[str, Any] = {"in_flight_mean": round(float(n.mean()), 4) if len(n) else 0.0}
    if kappa > 0 and f > F_CONTENTION and (n > 0).any():
        beta, pred, how = line(t, y / (1 + kappa * n))
        return kappa, beta, pred * (1 + kappa * n), how, info | {"contention": round(kappa, 4)}
    if (n > 0).any():
        info["contention_note"] = (
            f"the overlaps do not slow the transfers measurably (κ estimate {kappa:.3g}, F {f:.3g}): κ = 0"
        )
    beta, pred, how = line(t, y)
    return 0.0, beta, pred, how, info | {"contention": 0.0}


def drawn_contention(rng: np.random.Generator, kappa: float, n: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per item: (1 + κ·N) / (1 + κ·n) with N ~ Poisson(target) — the in-flight count redrawn
    (``target`` = n: around the measured level; n + the prior's count when the run showed none)."""
    n = np.nan_to_num(np.asarray(n, np.float64))
    return (1 + kappa * rng.poisson(np.nan_to_num(np.asarray(target, np.float64)))) / (1 + kappa * n)


#: the κ a band draws from, uniformly, when the measured run cannot show link contention (an
#: assumption, reported as ``band.mc_contention_prior``): up to half a transfer's time per transfer
#: in flight, the contention issue 41 asks the band to cover
CONTENTION_PRIOR = (0.0, 0.5)


def contention_observable(wl: Any) -> bool:
    """Whether the measured run could show link contention: sender kernels that overlap another
    transfer of their direction (a coupled store's collectives run one at a time: never)."""
    return float(wl.contention.get("overlaps", 0)) > 0


def prior_draws(seed: int, runs: int) -> np.ndarray:
    """κ of each of the band's ``runs`` replays under the prior (seeded like the band)."""
    lo, hi = CONTENTION_PRIOR
    return np.random.default_rng([seed, runs, 41]).uniform(lo, hi, runs)
