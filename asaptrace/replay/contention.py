"""Link contention: a transfer slowed by the transfers already in flight in its direction.

A *transfer* is one dispatch or one combine instance: on a disaggregated store an attention
group's dispatch-send (its members' kernels of one (group, step, layer, micro-batch)) or the
pool's combine-send of one served item (the i-th combine of a (step, layer, micro-batch) on every
expert rank, the pool serving items in one order); on a coupled store one collective (every
rank's kernels of one (kind, step, layer, micro-batch)). It is in flight on [its earliest
kernel's start, its latest kernel's end). Its in-flight count n is the number of *other*
transfers of the same kind (direction: dispatches go into the pool, combines out of it) with
``start ≤ its start < end``. The measured transfer of a (step, layer, micro-batch) carries the
mean n of its instances, and the cost fit (:func:`fit_contention`) finds κ in::

    X_measured = X(t) · (1 + κ·n)

κ by least squares on X_measured / X(t) = L·(1 + κ·n) (one level L per kind), then the transfer
line on X_measured / (1 + κ·n).
κ is kept only when positive and when it explains the transfers better than the line alone (an
F statistic on one parameter, as for the line's slope): a run whose transfers never overlap (n = 0
throughout) or whose overlaps do not slow them gives κ = 0 and exactly the line fitted without it.

The what-if keeps each measured transfer's level (its in-flight count is taken as the measured
one; the count is not re-derived for another split); the Monte-Carlo band draws it per item as
N ~ Poisson(n) and costs the transfer × (1 + κ·N) / (1 + κ·n) (:func:`drawn_contention`).
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
        counts[sel] = _others_in_flight(
            ev["inst"].to_numpy()[sel], ev["ts_ns"].to_numpy()[sel], ev["end_ns"].to_numpy()[sel]
        )
    return ev.select(
        *(pl.col(c).cast(t) for c, t in cols.items()), "inst", "ts_ns", "dur_ns", in_flight=pl.Series(counts)
    )


def _others_in_flight(inst: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per kernel: the other transfers one of whose kernels runs at its start. Each transfer's
    kernels are merged into disjoint segments, so a transfer covers a time at most once."""
    order = np.lexsort((start, inst))
    i, s, e = inst[order], start[order], end[order]
    seg_s, seg_e = [], []
    for k in range(len(i)):
        if k and i[k] == i[k - 1] and s[k] <= seg_e[-1]:
            seg_e[-1] = max(seg_e[-1], e[k])
        else:
            seg_s.append(s[k])
            seg_e.append(e[k])
    ss, se = np.sort(np.array(seg_s)), np.sort(np.array(seg_e))
    covering = np.searchsorted(ss, start, side="right") - np.searchsorted(se, start, side="right")
    return covering - 1  # its own transfer covers its start


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
    """κ read from the sender kernels: within each transfer (its dies carry the same tokens) a
    kernel's duration over the transfer's median, r, against its in-flight count n, both less their
    transfer's means (the tokens, and whatever else sets a transfer's level, drop out; what is left
    is the dies' own skew in n): r = L·(1 + κ·n), so κ = slope / L, L the level at n = 0. ``f`` is
    the F statistic of the slope (one parameter); ``kernels`` the points used."""
    if kernels.height < 8 or kernels["in_flight"].max() == 0:
        return {"kappa": 0.0, "f": 0.0, "kernels": kernels.height}
    row = ["kind", *_KEYS, "inst"]
    x = kernels.with_columns(r=pl.col("dur_ns") / pl.col("dur_ns").median().over(row), n=pl.col("in_flight"))
    x = x.with_columns(
        dr=pl.col("r") - pl.col("r").mean().over(row), dn=pl.col("n") - pl.col("n").mean().over(row)
    )
    dr, dn = x["dr"].to_numpy(), x["dn"].to_numpy().astype(np.float64)
    sxx = float((dn * dn).sum())
    if sxx <= 0:
        return {"kappa": 0.0, "f": 0.0, "kernels": x.height}
    slope = float((dn * dr).sum()) / sxx
    ss0, ss1 = float((dr * dr).sum()), float(((dr - slope * dn) ** 2).sum())
    dof = max(x.height - x.select(pl.struct(row).n_unique()).item() - 1, 1)
    level = float(x["r"].mean()) - slope * float(x["n"].mean())
    kappa = slope / level if level > 0 else 0.0
    return {"kappa": kappa, "f": (ss0 - ss1) / max(ss1 / dof, 1e-300), "kernels": x.height}


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


def drawn_contention(rng: np.random.Generator, kappa: float, n: np.ndarray) -> np.ndarray:
    """Per item: (1 + κ·N) / (1 + κ·n) with N ~ Poisson(n) — the in-flight count redrawn."""
    n = np.nan_to_num(np.asarray(n, np.float64))
    return (1 + kappa * rng.poisson(n)) / (1 + kappa * n)
