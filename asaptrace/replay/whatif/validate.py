"""How far is a what-if from a run that was measured? Fit on one store, predict another, compare.

``validate(measured, other)``: the cost model is fitted to ``measured``'s work, the policy that
describes ``other``'s deployment (read from its ranks: a disaggregated store is ``asap`` on its
D×T + E, with dual batch when it ran two micro-batches; a coupled one is ``coupled``) replays
``measured``'s batches, and the answer is compared with what ``other`` measured — the same requests
run the other way (the bundled ``sample_traces/coupled`` and ``sample_traces/disaggregated`` are
one such pair). Reported: the error of the makespan, of each step (ready → last batch done against
the measured step time) and of the per-layer work (Σ attention + MoE over the batches at each
layer), each with the Monte-Carlo band (:func:`~asaptrace.replay.whatif.run.mc_band`'s draws, its
high edge under the link-contention prior when ``measured`` cannot show contention and ``other``
runs asap: ``mc_contention_prior``) and whether the band covers the measured value.

:func:`~asaptrace.replay.whatif.model_error.self_consistency` asks the same of one store (its
own deployment modelled from its fitted costs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from asaptrace.replay.contention import contention_observable, prior_draws
from asaptrace.replay.costs import CostFit, fit_costs
from asaptrace.replay.mechanics.offline import item_costs
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import Asap, Policy
from asaptrace.replay.whatif.model_error import measured_policy, pct_error
from asaptrace.replay.whatif.run import MC_RUNS, MC_SEED, contention_prior


def _entry(pred: float, meas: float, draws: np.ndarray, slowed: np.ndarray | None = None) -> dict[str, Any]:
    """``slowed``: the draws under the contention prior (the band's high edge is theirs)."""
    lo, hi = (float(v) for v in np.percentile(draws, [5, 95])) if len(draws) else (pred, pred)
    if slowed is not None and len(slowed):
        hi = float(np.percentile(slowed, 95))
    return {
        "predicted_ns": round(pred),
        "measured_ns": round(meas),
        "error": pct_error(pred, meas),
        "band": {"mc_low_ns": round(lo), "mc_high_ns": round(hi)},
        "covered": bool(lo <= meas <= hi),
    }


def validate(
    measured: MeasuredWork, other: MeasuredWork, *, fit: CostFit | None = None, runs: int = MC_RUNS
) -> dict[str, Any]:
    """Predict ``other`` from ``measured`` (see the module docstring); a JSON-ready dict."""
    fit = fit or fit_costs(measured)
    pol = measured_policy(other)
    run = pol.run(measured, fit.model)
    costs = [replace(fit.model, mc_draw=i, mc_seed=MC_SEED) for i in range(runs)]
    draws = [pol.run(measured, c) for c in costs]
    prior: dict[str, Any] = {}
    slowed: list = []
    if isinstance(pol, Asap) and not contention_observable(measured):  # as replay's band
        prior = {"mc_contention_prior": contention_prior(pol, measured, fit.model)}
        n = tuple(prior["mc_contention_prior"]["in_flight"].values())
        kappas = prior_draws(MC_SEED, runs)
        prior_costs = [
            replace(c, xfer_contention=k, mc_in_flight=n) for c, k in zip(costs, kappas, strict=True)
        ]
        slowed = [pol.run(measured, c) for c in prior_costs]

    def spans(rs: list, s: int | None = None) -> np.ndarray:
        return np.array(
            [r.makespan_ns if s is None else r.step_ns.get(s, run.step_ns[s]) for r in rs], np.float64
        )

    meas_steps = dict(other.steps.select("step", "measured_ns").rows())
    steps = []
    for s in sorted(set(meas_steps) & set(run.step_ns)):
        steps.append(
            {"step": int(s), **_entry(run.step_ns[s], meas_steps[s], spans(draws, s), spans(slowed, s))}
        )
    meas_span = int(other.steps["end_ns"].max() - other.steps["start_ns"].min())
    overall = _entry(run.makespan_ns, meas_span, spans(draws), spans(slowed))
    return {
        "measured_store": measured.source,
        "other_store": other.source,
        "policy": pol.name,
        "params": {
            k: str(v) if not isinstance(v, int | float | bool | None) else v for k, v in pol.params().items()
        },
        "deployment": {
            "kind": other.deployment,
            "groups": other.n_groups,
            "tp": other.tp,
            "experts": other.expert_ranks,
        },
        "mc_runs": runs,
        **prior,
        "overall": overall,
        "steps": steps,
        "layers": _layers(measured, other, fit, pol),
        "cost_fit": {p: q.get("sigma") for p, q in fit.quality.items()},
    }


def _layers(measured: MeasuredWork, other: MeasuredWork, fit: CostFit, pol: Policy) -> list[dict[str, Any]]:
    """Per layer: the predicted Σ attention + MoE time of the batches' items against the measured Σ."""
    tp = other.tp
    experts = other.expert_ranks
    # each item as long as its slowest member or die took (what the measured items are)
    ic = item_costs(measured, fit.model, tp=tp, experts=experts, asynchronous=False)
    pred = (
        ic.group_by("layer").agg((pl.col("attention_ns") + pl.col("moe_ns")).sum().alias("p")).sort("layer")
    )
    n_mb = max(other.micro_batches, 1)
    m_attn = other.items.group_by("layer").agg(pl.col("attn_ns").sum().alias("a"))
    if other.deployment == "coupled":  # one pool item of every group's tokens per (layer, micro-batch)
        m_pool = other.pool.group_by("layer").agg(pl.col("pool_ns").sum().alias("m"))
    else:
        m_pool = other.pool.group_by("layer").agg((pl.col("pool_ns").sum() / n_mb).alias("m"))
    meas = m_attn.join(m_pool, on="layer", how="left").with_columns(pl.col("m").fill_null(0)).sort("layer")
    rows = pred.join(meas, on="layer", how="inner").sort("layer")
    out = []
    for layer, p, a, m in rows.iter_rows():
        mv = float(a) + float(m)
        out.append(
            {"layer": int(layer), "predicted_ns": int(p), "measured_ns": round(mv), "error": pct_error(p, mv)}
        )
    return out
