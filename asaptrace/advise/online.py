"""``advise --online``: the same candidates served online, on a scenario fitted to the store.

The offline advice says "this batch set would finish X s sooner"; this adds "at your SLO this
serves Y requests/s more". The scenario is the shipped one (DOMAIN.md §6: arrivals, SLO, batch
formers) with the store's own cost fit (:func:`asaptrace.replay.run.resolve_costs`), its layers,
its coupled DP × TP, and each what-if's chosen setting (asap's split, the chunk size); requests
are the store's own (their arrival times rescaled to each rate, their lengths kept) when its
batches say when they arrived, else Poisson arrivals with the scenario's fitted lengths. The
measured policy (``coupled``) is swept beside them; afd-pingpong at its chosen m, on asap's split;
a what-if with no online batch former (a user's replay-only policy) says so. Only a coupled store is swept: a disaggregated one's measured policy would
need its own split beside the what-if's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from asaptrace.advise.advice import Advice, WhatIf, whatif_line
from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostFit, CostModel
from asaptrace.replay.run import resolve_costs
from asaptrace.replay.scenario import load_scenario
from asaptrace.replay.serving import policy_names
from asaptrace.replay.sweep import SweepOptions, run_sweep
from asaptrace.replay.workload import Workload

#: simulated seconds of arrivals per rate (the paper's 300 s is `asaptrace sweep`'s default; the
#: advice trades that for seconds of wall time: the SLO rate moves by a few percent, see the docs)
DURATION_S = 60.0
MEASURED = "coupled"


def advise_online(
    advice: Advice,
    wl: Workload,
    *,
    costs: CostModel | CostFit | str | None = None,
    scenario: str = "asap-paper",
    duration_s: float = DURATION_S,
    progress: Callable[[str], None] | None = None,
) -> Advice:
    """``advice`` with each applying what-if's SLO throughput beside the measured policy's."""
    if wl.deployment != "coupled":
        return replace(advice, online={"status": "not run", "reason": "only a coupled store is swept online"})
    fit = resolve_costs(wl, costs)
    by = {w.name: w for w in advice.ranked}
    knobs: dict[str, Any] = {
        "layers": wl.layers,
        "default_dp": wl.n_groups,
        "default_tp": wl.tp,
        "duration_s": duration_s,
    }
    if "asap" in by:
        dep = by["asap"].deployment or {}
        knobs |= {"asap_dp": dep["groups"], "asap_tp": dep["tp"], "asap_experts": dep["experts"]}
    if "chunked" in by:
        knobs["chunk_tokens"] = by["chunked"].params["chunk_tokens"]
    afd = by.get("afd-pingpong")
    if afd is not None and "asap" not in by:  # afd-pingpong at its own split when asap has none
        d, t = (int(x) for x in str(afd.params["attention"]).split("x"))
        knobs |= {"asap_dp": d, "asap_tp": t, "asap_experts": int(afd.params["experts"])}
    sc = load_scenario(scenario).with_costs(fit.model, fit.quality, origin=wl.source).with_knobs(knobs)
    spec = {w.name: _spec(w) for w in advice.ranked if _spec(w) in policy_names()}
    policies = (MEASURED, *(s for s in spec.values() if s != MEASURED))
    workload, source = _requests(advice.store)
    opt = SweepOptions(policies=policies, workload=workload)
    try:
        res = run_sweep(sc, opt, progress=progress)
    except UsageError:
        if workload is None:
            raise
        workload, source = (
            None,
            "Poisson arrivals, the scenario's fitted lengths (the store's requests have no arrival times)",
        )
        res = run_sweep(sc, replace(opt, workload=None), progress=progress)
    base, base_c = res["slo_rps"][MEASURED], res["slo_censored"][MEASURED]
    whatifs = []
    for w in advice.whatifs:
        if w.applies:
            online: dict[str, Any] = {
                "measured_policy": MEASURED,
                "measured_slo_rps": base,
                "measured_censored": base_c,
            }
            if w.name in spec:
                s = spec[w.name]
                online |= {
                    "slo_rps": res["slo_rps"][s],
                    "censored": res["slo_censored"][s],
                    "ratio": res["ratios"][s],
                }
            else:
                online |= {"slo_rps": None, "reason": f"{w.policy} has no online batch former"}
            w = replace(w, online=online)
            w = replace(w, line=whatif_line(w))
        whatifs.append(w)
    block = {
        "status": "run",
        "scenario": res["scenario"],
        "requests": source,
        "slo_ttft_ns": res["slo_ttft_ns"],
        "duration_ns": res["duration_ns"],
        "costs_from": res["costs_from"],
        "measured_policy": MEASURED,
        "slo_rps": res["slo_rps"],
        "slo_censored": res["slo_censored"],
        "reading": res["reading"],
    }
    return replace(advice, whatifs=whatifs, online=block)


def _spec(w: WhatIf) -> str:
    """The sweep's name of a what-if at its chosen setting (afd-pingpong at its m)."""
    return f"afd-pingpong-m{w.params['m']}" if w.name == "afd-pingpong" else w.name


def _requests(store: str) -> tuple[str | None, str]:
    """The store itself as the request trace (its batches' arrival times and lengths)."""
    if not store:
        return None, "Poisson arrivals, the scenario's fitted lengths"
    return store, f"the store's own requests ({store}), arrival times rescaled to each rate"
