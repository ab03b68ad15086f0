"""``advise --online``: the same candidates served online, on a scenario fitted to the store.

The offline advice says "this batch set would finish X s sooner"; this adds "at your SLO this
serves Y requests/s more". The scenario is the shipped one (DOMAIN.md §6: arrivals, SLO, batch
formers) with the store's own cost fit (:func:`asaptrace.replay.run.resolve_costs`), its layers,
its coupled DP × TP, and each what-if's chosen setting (asap's split, the chunk size); requests
are the store's own (their arrival times rescaled to each rate, their lengths kept) when its
batches say when they arrived, else Poisson arrivals with the scenario's fitted lengths. The
measured policy (``coupled``) is swept beside them; afd-pingpong at its chosen m, on asap's split;
a what-if with no online batch former (a user's replay-only policy) says so. A disaggregated
store's measured policy is asap at its measured split with its own mechanisms (dual batch as it
ran, no long-prompt rule), swept on the same request stream as the what-ifs in a second sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from asaptrace.advise.advice import Advice, WhatIf, whatif_line
from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostFit, CostModel
from asaptrace.replay.measured import MeasuredWork
from asaptrace.replay.run import resolve_costs
from asaptrace.replay.scenario import load_scenario
from asaptrace.replay.serving import policy_names
from asaptrace.replay.sweep import SweepOptions, run_sweep

#: simulated seconds of arrivals per rate (the paper's 300 s is `asaptrace sweep`'s default; the
#: advice trades that for seconds of wall time, and a noisier SLO rate)
DURATION_S = 60.0
MEASURED = "coupled"


def advise_online(
    advice: Advice,
    wl: MeasuredWork,
    *,
    costs: CostModel | CostFit | str | None = None,
    scenario: str = "asap-paper",
    duration_s: float = DURATION_S,
    progress: Callable[[str], None] | None = None,
) -> Advice:
    """``advice`` with each applying what-if's SLO throughput beside the measured policy's."""
    fit = resolve_costs(wl, costs)
    by = {w.name: w for w in advice.ranked}
    knobs: dict[str, Any] = {"layers": wl.layers, "duration_s": duration_s}
    measured, measured_label, measured_knobs = MEASURED, MEASURED, {}
    if wl.deployment == "coupled":
        knobs |= {"default_dp": wl.n_groups, "default_tp": wl.tp}
    else:  # the measured runtime: its split, its dual batch or not, no long-prompt rule
        knobs["asap_alone_tokens"] = 1 << 40
        measured = "asap" if wl.micro_batches > 1 else "asap-no-dual-batch"
        measured_knobs = {"asap_dp": wl.n_groups, "asap_tp": wl.tp, "asap_experts": wl.expert_ranks}
        measured_label = f"asap at {wl.n_groups}×{wl.tp} + {wl.expert_ranks} as measured"
    split = by.get("asap") or by.get("afd-pingpong")
    if split is not None:  # one scenario holds one disaggregated split: asap's (else afd-pingpong's)
        d, t = (int(x) for x in str(split.params["attention"]).split("x"))
        knobs |= {"asap_dp": d, "asap_tp": t, "asap_experts": int(split.params["experts"])}
    if "chunked" in by:
        knobs["chunk_tokens"] = by["chunked"].params["chunk_tokens"]
    base_sc = load_scenario(scenario).with_costs(fit.model, fit.quality, origin=wl.source)
    spec = {w.name: _spec(w, measured) for w in advice.ranked if _spec(w, measured) in policy_names()}
    workload, source = _requests(advice.store)
    if wl.deployment == "coupled":
        res, source = _sweep(
            base_sc.with_knobs(knobs),
            (MEASURED, *(v for v in spec.values() if v != MEASURED)),
            workload,
            source,
            progress,
        )
        ref = res
    else:  # two sweeps on the same request stream: the measured split, then the what-ifs' split
        ref, source = _sweep(
            base_sc.with_knobs(knobs | measured_knobs), (measured,), workload, source, progress
        )
        res, source = _sweep(
            base_sc.with_knobs(knobs), tuple(dict.fromkeys(spec.values())), workload, source, progress
        )
    base, base_c = ref["slo_rps"][measured], ref["slo_censored"][measured]
    same = ref is res
    whatifs = []
    for w in advice.whatifs:
        if w.applies:
            online: dict[str, Any] = {
                "measured_policy": measured_label,
                "measured_slo_rps": base,
                "measured_censored": base_c,
            }
            if w.name in spec:
                v = spec[w.name]
                ratio = None if not base or res["slo_rps"][v] is None else round(res["slo_rps"][v] / base, 4)
                online |= {"slo_rps": res["slo_rps"][v], "censored": res["slo_censored"][v], "ratio": ratio}
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
        "measured_policy": measured_label,
        "slo_rps": {measured_label: base}
        | {k: v for k, v in res["slo_rps"].items() if k != MEASURED or wl.deployment != "coupled"},
        "slo_censored": {measured_label: base_c}
        | {k: v for k, v in res["slo_censored"].items() if k != MEASURED or wl.deployment != "coupled"},
        "reading": res["reading"] if same else f"{ref['reading']} {res['reading']}",
    }
    return replace(advice, whatifs=whatifs, online=block)


def _sweep(
    sc: Any, policies: tuple[str, ...], workload: str | None, source: str, progress: Any
) -> tuple[Any, str]:
    """One SLO sweep on the store's requests (Poisson with the scenario's lengths when the store's
    batches record no arrival times); returns the result and what the requests were."""
    opt = SweepOptions(policies=policies, workload=workload)
    try:
        return run_sweep(sc, opt, progress=progress), source
    except UsageError:
        if workload is None:
            raise
        why = "Poisson arrivals, the scenario's fitted lengths (the store's requests have no arrival times)"
        return run_sweep(sc, replace(opt, workload=None), progress=progress), why


def _spec(w: WhatIf, measured: str) -> str:
    """The sweep's name of a what-if at its chosen setting (afd-pingpong at its m; a disaggregated
    store's asap with its measured mechanisms)."""
    if w.name == "afd-pingpong":
        return f"afd-pingpong-m{w.params['m']}"
    return measured if w.name == "asap" and measured.startswith("asap") else w.name


def _requests(store: str) -> tuple[str | None, str]:
    """The store itself as the request trace (its batches' arrival times and lengths)."""
    if not store:
        return None, "Poisson arrivals, the scenario's fitted lengths"
    return store, f"the store's own requests ({store}), arrival times rescaled to each rate"
