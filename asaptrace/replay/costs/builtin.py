"""The built-in cost parts: attention, the MoE pool, transfers (their costs, least costs and fits).

Their formulas are :class:`~asaptrace.replay.costs.model.CostModel`'s methods (the model module's
docstring); here each is registered as a part (:mod:`asaptrace.replay.costs.parts`) with how it is
fitted to a store's measured work (moved out of one ``fit_costs`` body, same arithmetic) and what
it costs a request at least (the capacity bounds' terms, DOMAIN §8).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from asaptrace.replay.contention import fit_contention
from asaptrace.replay.costs.fit import default_quality, least_squares, part_quality
from asaptrace.replay.costs.model import _NS_PER_MS, K2, CostModel, K
from asaptrace.replay.costs.parts import (
    ATTENTION,
    POOL,
    TRANSFER,
    CostPart,
    LayerWork,
    LeastWork,
    register_part,
)
from asaptrace.replay.dispersion import expected_max


def _per_micro_batch(work: Any) -> tuple[int, str]:
    """The micro-batches a per-(step, layer) sum is averaged over, and where the lengths came from."""
    return max(int(work.micro_batches), 1), work.batches_source


def fit_attention(work: Any, model: CostModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """Attention per (step, group, layer) on [1, Σc, Σc(2P+c)] (needs the batch composition; the
    constants then hold for the store's TP, ``attn_tp_ref``)."""
    changes: dict[str, Any] = {}
    quality: dict[str, Any]
    data = work.batches_source
    # attention per (step, group, layer), summed over micro-batches (the store may not say which
    # request ran in which micro-batch, only the group's whole batch)
    it = (
        work.items.filter(pl.col("tokens").is_not_null())
        .group_by("step", "dp_group", "layer")
        .agg(pl.col("attn_ns").sum(), pl.col("tokens").sum(), pl.col("quad").sum())
        .filter(pl.col("attn_ns") > 0)
        .sort("step", "dp_group", "layer")  # rows in one order: the fit's last digits never drift
    )
    if it.height >= 4:
        x = np.column_stack([np.ones(it.height), it["tokens"].to_numpy() / K, it["quad"].to_numpy() / K2])
        y = it["attn_ns"].to_numpy() / _NS_PER_MS
        beta, pred = least_squares(x.astype(np.float64), y)
        changes.update(
            attn_c0_ms=float(beta[0]),
            attn_c1_ms=float(beta[1]),
            attn_c2_ms=float(beta[2]),
            attn_tp_ref=float(work.tp),
        )
        quality = part_quality(y, pred, data=f"(step, DP group, layer) items; lengths from {data}")
        quality["sigma"] = round(model.attn_sigma, 4)
    else:
        why = (
            "the store has no request lengths (no annotations, no --batches sidecar)"
            if not data
            else "fewer than 4 items with lengths"
        )
        quality = default_quality(it.height, why)
    return changes, quality


def fit_moe(work: Any, model: CostModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MoE pool per (step, layer) on [1, N] above the plateau (the plateau from items below the knee)."""
    changes: dict[str, Any] = {}
    quality: dict[str, Any]
    n_mb, data = _per_micro_batch(work)
    # MoE and transfers per (step, layer), averaged over micro-batches
    pool = (
        work.pool.filter(pl.col("tokens").is_not_null())
        .group_by("step", "layer")
        .agg((pl.col("pool_ns").sum() / n_mb).alias("y"), pl.col("tokens").sum().alias("n"))
        .filter(pl.col("y") > 0)
        .sort("step", "layer")
    )
    if pool.height >= 4:
        # the constants are fitted on the store's own pool: E_fit = its expert ranks (r = 1 there);
        # a measured item is the slowest of the E_fit dies: the per-die location is y / G(E_fit, σ)
        e = float(work.expert_ranks)
        r = 1.0
        g = expected_max(e, model.moe_sigma)
        y_max = pool["y"].to_numpy() / _NS_PER_MS
        y = y_max / g
        n = pool["n"].to_numpy() / K / n_mb
        beta, pred = least_squares(np.column_stack([np.ones(len(y)), r * n]), y)
        changes.update(moe_a_ms=float(beta[0]), moe_b_ms=float(beta[1]), moe_e_ref=e)
        # the plateau: only measured items below the linear part's knee say where it is (the
        # default plateau is read on E_ref dies: on the store's pool it is × E_ref / E)
        plateau = model.moe_plateau_ms * (model.moe_e_ref / e if model.moe_e_ref > 0 else 1.0) / g
        knee = (plateau - beta[0]) / max(beta[1], 1e-12)
        flat = y[n < knee]
        q = part_quality(
            y_max, np.maximum(pred, plateau) * g, data=f"(step, layer) pool items; tokens from {data}"
        )
        if len(flat) >= 2:
            changes["moe_plateau_ms"] = float(np.median(flat))
            q["note"] = f"plateau from {len(flat)} items below the knee"
        else:
            changes["moe_plateau_ms"] = plateau
            q["note"] = "no item on the plateau: the default plateau kept (read on this pool)"
        quality = q
    else:
        why = "no MoE pool items with token counts" if work.pool.height else "the store has no MoE layers"
        quality = default_quality(pool.height, why)
    quality["sigma"] = round(model.moe_sigma, 4)
    return changes, quality


#: the latency + per-token line is kept only when its slope explains this much more than the
#: default shape scaled (an F statistic on one extra parameter; ≈ p < 0.002)
F_SLOPE = 10.0


def _transfer_line(t: np.ndarray, y: np.ndarray, base: CostModel) -> tuple[np.ndarray, np.ndarray, str]:
    """latency + per_k·t fitted to the transfers, or — when the tokens per die vary too little
    for the slope to stand out of the noise — the base shape scaled to their level (a noisy run
    of near-equal batches otherwise puts everything in the latency, and a what-if with smaller
    batches keeps the measured transfer whole)."""
    beta, pred = least_squares(np.column_stack([np.ones(len(y)), t]), y)
    shape = base.xfer_latency_ms + base.xfer_per_k_ms * t
    scale = float((shape * y).sum() / max(float((shape * shape).sum()), 1e-300))
    ss2, ss1 = float(((y - pred) ** 2).sum()), float(((y - scale * shape) ** 2).sum())
    n = len(y)
    if n > 2 and ss1 > ss2 and (ss1 - ss2) > F_SLOPE * ss2 / (n - 2):
        return beta, pred, ""
    how = "tokens per die vary too little to fit the slope: the default shape scaled to the measured level"
    return np.array([base.xfer_latency_ms * scale, base.xfer_per_k_ms * scale]), scale * shape, how


def fit_transfer(work: Any, model: CostModel) -> tuple[dict[str, Any], dict[str, Any]]:
    """Dispatch and combine per (step, layer) on [1, tokens per die], and their dispersion."""
    changes: dict[str, Any] = {}
    quality: dict[str, Any]
    n_mb, data = _per_micro_batch(work)
    xf = (
        work.transfers.filter(pl.col("tokens_per_die").is_not_null())
        .group_by("step", "layer")
        .agg(
            (pl.col("dispatch_ns").sum() / n_mb).alias("d"),
            (pl.col("combine_ns").sum() / n_mb).alias("c"),
            (pl.col("tokens_per_die").sum() / n_mb).alias("t"),
            pl.col("dispatch_in_flight").mean().fill_null(0.0).alias("nd"),
            pl.col("combine_in_flight").mean().fill_null(0.0).alias("nc"),
        )
        .sort("step", "layer")
    )
    if xf.height >= 4:
        y = np.concatenate([xf["d"].to_numpy(), xf["c"].to_numpy()]) / _NS_PER_MS
        t = np.tile(xf["t"].to_numpy() / K, 2)
        n = np.concatenate([xf["nd"].to_numpy(), xf["nc"].to_numpy()])
        kappa, beta, pred, how, contention = fit_contention(
            t, y, n, work.contention, lambda t, y: _transfer_line(t, y, model)
        )
        changes.update(xfer_latency_ms=float(beta[0]), xfer_per_k_ms=float(beta[1]), xfer_contention=kappa)
        quality = (
            part_quality(y, pred, data=f"dispatch and combine per (step, layer); tokens from {data}")
            | contention
        )
        if how:
            quality["note"] = how
        # the transfers' dispersion: σ of log(measured / fitted), what the Monte-Carlo band redraws
        ok = (y > 0) & (pred > 0)
        sx = float(np.std(np.log(y[ok] / pred[ok]), ddof=1)) if ok.sum() >= 4 else 0.0
        changes["xfer_sigma"] = sx
        quality["sigma"] = round(sx, 4)
    else:
        why = (
            "no dispatch/combine with token counts"
            if work.transfers.height
            else "the store has no dispatch/combine"
        )
        quality = default_quality(xf.height, why)
    return changes, quality


# ------------------------------------------------------------------------------- costs, least costs
def attention_layer_ns(costs: CostModel, w: LayerWork) -> Any:
    """A group's attention from its pieces (exact), or each group's from their sums (vectorised)."""
    if w.new is not None:
        return costs.attention_ns(w.new, w.prefix, tp=w.tp)
    return costs.attention_sums_ns(w.tokens, w.quad, w.n, tp=w.tp)


def attention_least_ns(costs: CostModel, w: LeastWork) -> float:
    """Mean least attention work of one request for one layer on a group of ``tp`` dies (ns): its
    variable work c1·(1 − φ)·c + c2·c(2P + c) + per_request (c0 and the φ share amortised away)."""
    c = np.asarray(w.new, np.float64)
    p = np.asarray(w.prefix, np.float64)
    ms = (
        costs.attn_c1_ms * (1 - costs.attn_phi) * c / K
        + costs.attn_c2_ms * c * (2 * p + c) / K2
        + costs.attn_per_request_ms
    )
    return float(ms.mean()) * costs.tp_factor(w.tp) * 1e6


def moe_least_ns(costs: CostModel, w: LeastWork) -> float:
    """The least pool time per token: an item of ``n_cap`` tokens (M(N)/N falls with N)."""
    n_cap = max(float(w.n_cap), 1.0)
    return float(costs.moe_ns(n_cap, w.experts)) / n_cap


def transfer_least_ns(costs: CostModel, w: LeastWork) -> float:
    """The least send time per token, sent from every one of ``experts`` dies, its latency
    amortised over ``n_cap`` tokens (ns per token per send)."""
    return (costs.xfer_per_k_ms / (w.experts * K) + costs.xfer_latency_ms / w.n_cap) * 1e6


register_part(
    CostPart("attention", ATTENTION, attention_layer_ns, attention_least_ns, fit_attention, in_measured=True)
)
register_part(
    CostPart(
        "moe", POOL, lambda c, w: c.moe_ns(w.pool_tokens, w.experts), moe_least_ns, fit_moe, in_measured=True
    )
)
register_part(
    CostPart(
        "transfer",
        TRANSFER,
        lambda c, w: c.transfer_ns(w.sent_per_die),
        transfer_least_ns,
        fit_transfer,
        in_measured=True,
    )
)
