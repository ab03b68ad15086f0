"""How far to trust a sweep: one knob varied at a time (the tornado), and calibration to one point.

The paper does not say how it got from its cost figures to its throughput numbers, and the
answer moves with a few knobs it leaves open (k_s, E_ref, φ, the Default routing, a global cost
scale). :func:`vary` re-runs the SLO search for each value of one knob (a scenario knob, or a
policy's setting: ``asap.experts``, or its old name ``asap_experts``) and reports each policy's
SLO throughput and the ratio of ``asap`` (or the last policy) to the first; :func:`tornado`
gives each knob's swing.
:func:`calibrate` finds the ``cost_scale`` at which one policy's mean TTFT at one rate equals a
measured value (the paper gives ASAP 350 ms at 1 RPS); the sweep then runs at that scale.
:func:`sweep_with_sensitivity` is the whole ``asaptrace sweep`` call: calibrate, sweep, vary.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.replay.policies import POLICIES
from asaptrace.replay.policies.settings import is_setting, setting_key
from asaptrace.replay.serving.scenario import Scenario, is_knob, knob_name
from asaptrace.replay.whatif.sweep import (
    Progress,
    SweepOptions,
    evaluate,
    run_sweep,
    search_seeds,
    slo_ratio,
)
from asaptrace.replay.whatif.sweep_result import SweepResult, headline_policy


def vary(
    sc: Scenario, opt: SweepOptions, knob: str, values: list[str], *, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """SLO throughput per policy and the asap (or last) / first ratio for each value of one knob:
    each row the main table's very search (:func:`search_seeds`: the same seeds, the same steady
    state, the same median), so at the main scenario's value it gives the main table's numbers."""
    setting = not is_knob(knob) and is_setting(knob, POLICIES)
    name = setting_key(knob, POLICIES) if setting else knob_name(knob)
    rows = []
    for value in values:
        if setting:
            s, o = sc, replace(opt, settings=(*opt.settings, (name, value)))
        else:
            s, o = sc.with_knobs({name: value}), opt
        slo = search_seeds(s, o, progress=progress)[0]["slo"]
        rps = {p: slo[p]["slo_rps"] for p in opt.policies}
        ratio = slo_ratio(slo[headline_policy(opt.policies)], slo[opt.policies[0]])
        rows.append({"knob": name, "value": str(value), "slo_rps": rps, "ratio": ratio})
    return rows


def tornado(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per knob: the lowest and highest ratio over its values, widest swing first."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["ratio"] is None:
            continue
        e = out.setdefault(r["knob"], {"knob": r["knob"], "ratio_min": r["ratio"], "ratio_max": r["ratio"]})
        if r["ratio"] < e["ratio_min"]:
            e |= {"ratio_min": r["ratio"], "at_min": r["value"]}
        if r["ratio"] > e["ratio_max"]:
            e |= {"ratio_max": r["ratio"], "at_max": r["value"]}
        e.setdefault("at_min", r["value"])
        e.setdefault("at_max", r["value"])
    return sorted(out.values(), key=lambda e: e["ratio_min"] - e["ratio_max"])


def calibrate(
    sc: Scenario, opt: SweepOptions, policy: str, target_ms: float, rate: float, *, tol: float = 0.002
) -> float:
    """The ``cost_scale`` at which ``policy``'s mean TTFT at ``rate`` is ``target_ms``.

    Mean TTFT grows with the scale (every cost does), so a bisection on log scale, started
    around the proportional guess, finds it to ``tol`` (relative)."""
    if target_ms <= 0 or rate <= 0:
        raise UsageError("a calibration point needs a positive TTFT and rate")

    def mean_ms(scale: float) -> float:
        return float(evaluate(policy, rate, sc.with_knobs({"cost_scale": scale}), opt)["mean_ttft_ns"]) / 1e6

    guess = sc.cost_scale * target_ms / mean_ms(sc.cost_scale)
    lo, hi = guess / 2, guess * 2
    for _ in range(20):
        if mean_ms(lo) <= target_ms:
            break
        lo /= 4
    else:
        raise UsageError(f"no cost scale gives {policy} a mean TTFT of {target_ms:g} ms at {rate:g}/s")
    for _ in range(20):
        if mean_ms(hi) >= target_ms:
            break
        hi *= 4
    else:
        raise UsageError(f"no cost scale gives {policy} a mean TTFT of {target_ms:g} ms at {rate:g}/s")
    while hi / lo - 1 > tol:
        mid = (lo * hi) ** 0.5
        if mean_ms(mid) <= target_ms:
            lo = mid
        else:
            hi = mid
    return round((lo * hi) ** 0.5, 5)


def parse_calibration(text: str) -> tuple[str, float, float]:
    """'asap=350@1' → ("asap", 350.0 ms, 1.0 per s)."""
    try:
        policy, rest = text.split("=", 1)
        ms, rate = rest.split("@", 1)
        return policy.strip(), float(ms.strip().removesuffix("ms")), float(rate.strip().removesuffix("/s"))
    except ValueError:
        raise UsageError(f"--calibrate-ttft takes POLICY=MS@RATE (e.g. asap=350@1), not {text!r}") from None


def parse_vary(text: str) -> tuple[str, list[str]]:
    """'k_s=1,2,4' → ("coupled_k_s", ["1", "2", "4"]) (the knob checked); a policy's setting
    (``asap.experts=8,12``, ``asap_experts=8,12``) is kept as given."""
    knob, sep, values = text.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not vals:
        raise UsageError(f"--vary takes KNOB=V1,V2,… (e.g. k_s=1,2,4), not {text!r}")
    knob = knob.strip()
    if not is_knob(knob) and is_setting(knob, POLICIES):
        return knob, vals
    return knob_name(knob), vals


def sweep_with_sensitivity(
    sc: Scenario,
    opt: SweepOptions,
    *,
    vary_specs: list[str] = (),  # type: ignore[assignment]
    calibrate_spec: str | None = None,
    progress: Progress | None = None,
) -> SweepResult:
    """Calibrate (if asked), sweep, then vary each knob asked for; one result."""
    specs = [parse_vary(v) for v in vary_specs]  # bad specs fail before any simulation
    calibration = None
    if calibrate_spec:
        policy, ms, rate = parse_calibration(calibrate_spec)
        if policy not in opt.policies:
            raise UsageError(f"--calibrate-ttft policy {policy!r} is not among --policies")
        scale = calibrate(sc, opt, policy, ms, rate)
        calibration = {"policy": policy, "target_ms": ms, "rate": rate, "cost_scale": scale}
        sc = sc.with_knobs({"cost_scale": scale})
    result = run_sweep(sc, opt, progress=progress)
    rows = [row for knob, values in specs for row in vary(sc, opt, knob, values, progress=progress)]
    return result.with_(calibration=calibration, vary=rows, tornado=tornado(rows))


def sweep_scenario(
    scenario: Any = "asap-paper",
    *,
    policies: Any = None,
    rates: Any = None,
    knobs: dict[str, Any] | None = None,
    costs: Any = None,
    workload: Any = None,
    lengths: str = "fit",
    decomposition_rate: float = 4.0,
    jobs: int = 1,
    vary: Any = (),
    calibrate: str | None = None,
    progress: Progress | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    seeds: int = 1,
) -> SweepResult:
    """A named (or file) scenario, with a cost file and knob overrides, swept with its sensitivity
    (:func:`sweep_with_sensitivity`). ``executor="ray"``: one Ray task per (policy, rate) point, on
    ``ray_address`` or a local instance of ``jobs`` CPUs — one instance for every search of the call
    (a local pool is opened by each search: its workers hold nothing worth keeping)."""
    from contextlib import nullcontext

    from asaptrace.executors import resolve_executor, session
    from asaptrace.replay.serving.scenario import load_scenario
    from asaptrace.replay.whatif.sweep import DEFAULT_POLICIES

    sc = load_scenario(scenario)
    sc = sc.with_costs_file(costs) if costs else sc
    knobs, settings = split_settings(knobs or {})
    first = sc.with_knobs(knobs).seed
    opt = SweepOptions(
        tuple(policies or DEFAULT_POLICIES),
        tuple(rates) if rates else None,
        decomposition_rate=decomposition_rate,
        jobs=jobs,
        workload=str(workload) if workload else None,
        lengths=lengths,
        executor=executor,
        ray_address=ray_address,
        seeds=tuple(first + k for k in range(seeds)) if seeds > 1 else None,
        settings=tuple(settings.items()),
    )
    ray = executor == "ray"
    with session(resolve_executor(executor, jobs=jobs, address=ray_address)) if ray else nullcontext():
        return sweep_with_sensitivity(
            sc.with_knobs(knobs),
            opt,
            vary_specs=list(vary),
            calibrate_spec=calibrate,
            progress=progress,
        )


def split_settings(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``--set`` pairs → (scenario knobs, policy settings); a key that is neither is one line
    naming both forms."""
    knobs: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for key, value in values.items():
        if is_knob(key):
            knobs[key] = value
        else:
            settings[setting_key(key, POLICIES)] = value
    return knobs, settings
