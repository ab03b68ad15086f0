"""Run a policy on an extracted workload: ``replay_measured_work(wl, policy, ...) -> ReplayResult`` (+ JSON).

:func:`asaptrace.pipeline.replay_store` composes it with the store: open, extract, replay, write.

What it does, in order (DOMAIN §7):

1. (the pipeline) extract the workload (:func:`~asaptrace.replay.whatif.measured.extract_measured_work`);
2. take the cost model: a :class:`CostModel`, a TOML file (its ``[fit]`` quality kept), or
   (default) one fitted to the store (:func:`~asaptrace.replay.costs.fit_costs`; each part keeps
   the DOMAIN defaults when the store cannot fit it, and says why); poor or missing fits become
   one-line ``warnings``;
3. check the what-if applies (:meth:`Policy.applies`: one line, exit 2, when it does not);
4. run the **reference replay** — ``coupled`` on a coupled store, ``asap`` on the measured device
   counts on a disaggregated one. On a coupled store it replays the measured durations, so it
   reproduces the run by construction: a **consistency check** of the mechanics (``consistency``),
   never an error bar;
5. run the requested policy. Its time is the **makespan** (first batch ready → last batch done)
   plus each batch's latency (mean, p99); recovered = reference makespan − replayed makespan;
6. attribute the recovered time along the policy's counterfactual sequence
   (:meth:`Policy.counterfactuals`, every step at the store's device total unless the user asked
   for another): Σ causes = recovered (checked, :class:`~asaptrace.errors.AccountingError`);
7. the **band**: the policy replayed again with its modelled pool and transfer costs × (1 ∓ the
   fitted parts' residual p95), giving the recovered time's low and high;
8. (the pipeline) optionally write the replay as a store (atomic).

JSON form (:meth:`ReplayResult.to_json`, ``schema_version`` 2; documented in
``docs/analyses/replay.md``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from asaptrace.display import HtmlRepr
from asaptrace.errors import AccountingError, UsageError
from asaptrace.questions import REPLAY_QUESTION
from asaptrace.replay.contention import CONTENTION_PRIOR, contention_observable, others_in_flight, prior_draws
from asaptrace.replay.costs import CostFit, CostModel, fit_costs, fit_warnings, read_costs, save_costs
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import Asap, Coupled, Deployment, LockstepPolicy, Policy, PolicyRun, policy_of
from asaptrace.replay.whatif.model_error import measured_policy, reference_policy, self_consistency

SCHEMA_VERSION = 2


@dataclass(frozen=True, repr=False)
class ReplayResult(HtmlRepr):
    """Makespans (measured, reference, replayed), batch latencies, recovered time by cause, the band."""

    store: str
    policy: str
    params: dict[str, Any]
    deployment: dict[str, Any]
    reference_policy: str
    steps: list[dict[str, int]]  # per measured step: measured step time and the latencies of both replays
    measured_makespan_ns: int
    reference_makespan_ns: int
    makespan_ns: int
    latency: dict[str, int]
    reference_latency: dict[str, int]
    consistency: dict[str, Any]
    recovered_ns: dict[str, int]
    counterfactuals: list[dict[str, Any]]
    band: dict[str, Any]
    bounds: dict[str, Any]
    simulated_wait_ns: int
    events: int
    seconds: float
    costs: dict[str, Any]
    cost_fit: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    splits: list[dict[str, Any]] | None = None
    vary: list[dict[str, Any]] | None = None
    tornado: list[dict[str, Any]] | None = None
    out: str | None = None
    #: the store's own deployment modelled from the same costs against the run ("how far this model
    #: was from your run", :func:`~asaptrace.replay.whatif.model_error.self_consistency`)
    model_error: dict[str, Any] | None = None
    run: PolicyRun | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (
            f"<ReplayResult {self.policy} of {self.store}: makespan {self.makespan_ns / 1e9:.3f} s against the "
            f"reference {self.reference_makespan_ns / 1e9:.3f} s (recovered {self.recovered_total_ns / 1e9:+.3f} s)>"
        )

    # the names of schema 1, kept: totals are makespans now (never sums of overlapping steps)
    @property
    def measured_ns(self) -> int:
        return self.measured_makespan_ns

    @property
    def reference_ns(self) -> int:
        return self.reference_makespan_ns

    @property
    def replayed_ns(self) -> int:
        return self.makespan_ns

    @property
    def baseline_ns(self) -> int:
        return self.reference_makespan_ns

    @property
    def recovered_total_ns(self) -> int:
        return self.reference_makespan_ns - self.makespan_ns

    @property
    def error_mean_pct(self) -> float:
        return float(self.consistency["mean_pct"])

    @property
    def error_max_pct(self) -> float:
        return float(self.consistency["max_pct"])

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "question": REPLAY_QUESTION,
            "store": self.store,
            "policy": self.policy,
            "params": self.params,
            "deployment": self.deployment,
            "reference_policy": self.reference_policy,
            "steps": self.steps,
            "measured_makespan_ns": self.measured_makespan_ns,
            "reference_makespan_ns": self.reference_makespan_ns,
            "makespan_ns": self.makespan_ns,
            "measured_ns": self.measured_ns,
            "reference_ns": self.reference_ns,
            "replayed_ns": self.replayed_ns,
            "baseline_ns": self.baseline_ns,
            "latency": self.latency,
            "reference_latency": self.reference_latency,
            "consistency": self.consistency,
            "error_mean_pct": self.error_mean_pct,
            "error_max_pct": self.error_max_pct,
            "recovered_ns": self.recovered_ns,
            "recovered_total_ns": self.recovered_total_ns,
            "counterfactuals": self.counterfactuals,
            "band": self.band,
            "bounds": self.bounds,
            "simulated_wait_ns": self.simulated_wait_ns,
            "events": self.events,
            "seconds": round(self.seconds, 4),
            "costs": self.costs,
            "cost_fit": self.cost_fit,
            "warnings": self.warnings,
            "notes": self.notes,
            "splits": self.splits,
            "vary": self.vary,
            "tornado": self.tornado,
            "out": self.out,
            "model_error": self.model_error,
        }


def resolve_costs(wl: MeasuredWork, costs: CostModel | CostFit | str | Path | None) -> CostFit:
    """The cost model and its fit quality: given (a model has none), read from a file (with its
    [fit]), or fitted to the workload."""
    if isinstance(costs, CostFit):
        return costs
    if isinstance(costs, CostModel):
        return CostFit(costs, {})
    if costs is not None:
        model, quality = read_costs(costs)
        return CostFit(model, quality or {})
    return fit_costs(wl)


def deployment_json(dep: Deployment) -> dict[str, Any]:
    return {**asdict(dep), "devices": dep.devices}


def replay_measured_work(
    wl: MeasuredWork,
    policy: Policy | str = "asap",
    *,
    params: dict[str, Any] | None = None,
    costs: CostModel | CostFit | str | Path | None = None,
    attribute: bool = True,
    band: bool = True,
    mc: bool = True,
    source: str = "",
) -> ReplayResult:
    """Replay an extracted workload under ``policy`` (steps 2–7 of the module docstring): a built
    policy (what the pipeline, explore and advise pass, built once), or a spec built here with
    ``params`` (:func:`~asaptrace.replay.policies.policy_of`). ``mc`` False leaves the band's
    Monte-Carlo part out (a caller running :func:`mc_band` elsewhere, e.g. on a worker)."""
    t0 = time.perf_counter()
    if isinstance(policy, Policy):
        if params:
            raise TypeError("a built policy carries its own settings: pass no params with it")
        pol = policy
    else:
        pol = policy_of(policy, params)
    fit = resolve_costs(wl, costs)  # a bad cost file is named before anything else
    model, quality = fit.model, fit.quality or None
    why = pol.applies(wl)
    if why:
        raise UsageError(f"{pol.name} does not apply: {why}", path=source or None)
    ref_pol = reference_policy(wl)
    ref = ref_pol.run(wl, model)
    run = ref if pol == ref_pol else pol.run(wl, model)
    for p, r in ((ref_pol, ref), (pol, run)):
        missing = sorted(set(wl.steps["step"].to_list()) - set(r.step_ns))
        if missing:
            raise UsageError(
                f"policy {p.name!r} found no per-layer work to replay in step(s) {missing} "
                "(it needs attention and MoE layers segmented in the store)",
                path=source or None,
            )
    recovered, counterfactuals = attribute_recovered(pol, wl, model, ref, run) if attribute else ({}, [])
    measured = dict(wl.steps.select("step", "measured_ns").rows())
    ref_steps, run_steps = ref.step_ns, run.step_ns
    steps = [
        {
            "step": int(s),
            "measured_ns": int(measured[s]),
            "reference_ns": int(ref_steps[s]),
            "replayed_ns": int(run_steps[s]),
        }
        for s in sorted(measured)
    ]
    result = ReplayResult(
        store=source,
        policy=pol.name,
        params=_jsonable(pol.params()),
        deployment=deployment_json(run.deployment),
        reference_policy=ref_pol.name,
        steps=steps,
        measured_makespan_ns=int(wl.steps["end_ns"].max() - wl.steps["start_ns"].min()),
        reference_makespan_ns=ref.makespan_ns,
        makespan_ns=run.makespan_ns,
        latency=run.latency_ns(),
        reference_latency=ref.latency_ns(),
        consistency=consistency_check(ref_pol, wl, steps),
        recovered_ns=recovered,
        counterfactuals=counterfactuals,
        band=(
            fit_band(pol, wl, model, quality, ref.makespan_ns)
            | (mc_band(pol, wl, model, ref.makespan_ns) if mc else {})
            if band
            else {"status": "not computed"}
        ),
        bounds=lower_bounds(wl, run),
        simulated_wait_ns=run.simulated_wait_ns,
        events=run.events,
        seconds=0.0,
        costs=model.to_dict(),
        cost_fit=quality,
        warnings=fit_warnings(quality) if _uses_model(pol) else [],
        notes=list(wl.notes) + _notes(wl, pol),
        model_error=model_error(wl, model),
        run=run,
    )
    return replace(result, seconds=time.perf_counter() - t0)


def model_error(wl: MeasuredWork, costs: CostModel) -> dict[str, Any]:
    """:func:`self_consistency`, or why there is none (a store the measured deployment's model
    does not apply to: no MoE layers, one device)."""
    why = measured_policy(wl).applies(wl)
    if why:
        return {"status": "none", "reason": why}
    return {"status": "measured", **self_consistency(wl, costs)}


def _uses_model(pol: Policy) -> bool:
    """A what-if that rescales costs through the model (every policy but plain coupled)."""
    return not isinstance(pol, Coupled) or pol.expert_failure or pol.k_s != 1.0


def _notes(wl: MeasuredWork, pol: Policy) -> list[str]:
    out = []
    if not wl.has_tokens and _uses_model(pol):
        out.append(
            "the store has no request lengths (no annotations, no --batches sidecar): pool time is "
            "shared evenly over the groups' batches and scaled linearly with the pool size, transfers are "
            "kept as measured"
        )
    return out


def consistency_check(ref_pol: Policy, wl: MeasuredWork, steps: list[dict[str, int]]) -> dict[str, Any]:
    """The reference replay against the measurement, per step (mean and max |Δ| %).

    On a coupled store the reference replays the measured durations, so it matches by
    construction (``exact``): it checks the replay's mechanics, not the cost model. On a
    disaggregated store the reference runs on rescaled costs: a real (if weak) check of them.
    """
    errors = [
        abs(r["reference_ns"] - r["measured_ns"]) / r["measured_ns"] * 100 for r in steps if r["measured_ns"]
    ]
    exact = isinstance(ref_pol, Coupled)
    return {
        "policy": ref_pol.name,
        "exact_by_construction": exact,
        "mean_pct": round(sum(errors) / len(errors), 4) if errors else 0.0,
        "max_pct": round(max(errors), 4) if errors else 0.0,
        "what": (
            "the coupled replay of the measured durations reproduces the measured steps (mechanics check)"
            if exact
            else "the reference replay of the measured deployment on the fitted costs vs the measured steps"
        ),
    }


def attribute_recovered(
    pol: Policy, wl: MeasuredWork, costs: CostModel, reference: PolicyRun, final: PolicyRun
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Recovered time by cause along the policy's counterfactual sequence (adds up exactly)."""
    prev = reference.makespan_ns
    out: dict[str, int] = {}
    rows: list[dict[str, Any]] = []
    for cause, p in pol.counterfactuals(wl):
        r = final if p == pol else p.run(wl, costs)
        out[cause] = out.get(cause, 0) + prev - r.makespan_ns
        dep = deployment_json(r.deployment)
        rows.append(
            {
                "cause": cause,
                "policy": p.name,
                "deployment": {k: dep[k] for k in ("kind", "groups", "tp", "experts", "devices")},
                "replayed_ns": r.makespan_ns,
                "recovered_ns": prev - r.makespan_ns,
            }
        )
        prev = r.makespan_ns
    want = reference.makespan_ns - final.makespan_ns
    if sum(out.values()) != want:
        raise AccountingError(f"recovered time by cause adds up to {sum(out.values())} ns, not {want} ns")
    return out, rows


def fit_band(
    pol: Policy, wl: MeasuredWork, costs: CostModel, quality: dict | None, reference_ns: int
) -> dict[str, Any]:
    """The recovered time's range from the fit's residuals: the modelled pool and transfer costs
    × (1 ∓ residual p95) of each fitted part (a default part has no residuals: no band from it)."""
    if not _uses_model(pol) or isinstance(pol, LockstepPolicy):
        return {"status": "none", "reason": "this what-if rescales no modelled pool or transfer cost"}
    e = {}
    for part, field_name in (("moe", "whatif_moe_scale"), ("transfer", "whatif_transfer_scale")):
        q = (quality or {}).get(part) or {}
        if q.get("status") == "fitted" and q.get("residual_p95_pct") is not None:
            e[field_name] = min(float(q["residual_p95_pct"]) / 100, 0.9)
    if not e:
        return {
            "status": "none",
            "reason": "no fitted pool or transfer part: the range comes from --vary only",
        }
    lo = pol.run(wl, replace(costs, **{k: 1 - v for k, v in e.items()})).makespan_ns
    hi = pol.run(wl, replace(costs, **{k: 1 + v for k, v in e.items()})).makespan_ns
    return {
        "status": "fitted",
        "parts": {k.removeprefix("whatif_").removesuffix("_scale"): round(v, 4) for k, v in e.items()},
        "makespan_low_ns": lo,
        "makespan_high_ns": hi,
        "recovered_low_ns": reference_ns - hi,
        "recovered_high_ns": reference_ns - lo,
    }


#: Monte-Carlo replays of the band, and the seed of their draws
MC_RUNS = 32
MC_SEED = 0


def mc_band(
    pol: Policy,
    wl: MeasuredWork,
    costs: CostModel,
    reference_ns: int,
    *,
    runs: int = MC_RUNS,
    seed: int = MC_SEED,
) -> dict[str, Any]:
    """The what-if re-run ``runs`` times with every kernel drawn from the fitted per-die
    distributions (attention members and MoE dies lognormal σ, transfers over the fit's log
    residuals and, with link contention κ, over their in-flight counts; seeded: one store gives
    one band): the 5th–95th percentile of the makespans. When the measured run cannot show link
    contention (:func:`~asaptrace.replay.contention.contention_observable`), the same draws run
    again with κ over the prior (:data:`~asaptrace.replay.contention.CONTENTION_PRIOR`) and the
    what-if's own transfers in flight: the high edge is theirs (``mc_contention_prior``)."""
    spread = (costs.attn_sigma, costs.moe_sigma, costs.xfer_sigma, costs.xfer_contention)
    prior = isinstance(pol, Asap) and not contention_observable(wl)
    if not isinstance(pol, Asap) or (spread == (0.0, 0.0, 0.0, 0.0) and not prior):
        return {"mc_status": "none"}
    draws = [replace(costs, mc_draw=i, mc_seed=seed) for i in range(runs)]
    spans = np.array([pol.makespan(wl, c) for c in draws], np.float64)
    lo, hi = (round(float(v)) for v in np.percentile(spans, [5, 95]))
    contention = {"mc_contention": costs.xfer_contention} if costs.xfer_contention > 0 else {}
    if prior:  # the run cannot show link contention: the same draws again with κ over the prior;
        # the band runs from none (the low edge above) to the prior's (the high edge)
        contention = {"mc_contention_prior": contention_prior(pol, wl, costs)}
        n = tuple(contention["mc_contention_prior"]["in_flight"].values())
        kappas = prior_draws(seed, runs)
        slowed = [replace(c, xfer_contention=k, mc_in_flight=n) for c, k in zip(draws, kappas, strict=True)]
        hi = round(float(np.percentile([pol.makespan(wl, c) for c in slowed], 95)))
    return contention | {
        "mc_status": "drawn",
        "mc_runs": runs,
        "mc_seed": seed,
        "mc_sigma": {"attention": costs.attn_sigma, "moe": costs.moe_sigma, "transfer": costs.xfer_sigma},
        "mc_low_ns": lo,
        "mc_high_ns": hi,
        "mc_recovered_low_ns": reference_ns - hi,
        "mc_recovered_high_ns": reference_ns - lo,
    }


def contention_prior(pol: Policy, wl: MeasuredWork, costs: CostModel) -> dict[str, Any]:
    """The contention prior of a band: κ's range, and the what-if's own transfers in flight per
    direction (the mean over its dispatches, and its combines, of the others in flight at their
    start, on the expected what-if's timeline: the count the fit reads from a trace)."""
    trace = pol.run(wl, costs).trace
    n = {"dispatch": 0.0, "combine": 0.0}
    for kind in n if trace is not None else ():
        spans = np.array([(t0, t1) for *_, t0, t1 in getattr(trace, kind)], np.int64).reshape(-1, 2)
        if len(spans):
            n[kind] = round(
                float(others_in_flight(np.arange(len(spans)), spans[:, 0], spans[:, 1]).mean()), 4
            )
    return {
        "kappa": list(CONTENTION_PRIOR),
        "in_flight": n,
        "why": "the measured run cannot show link contention (no transfer overlaps another of its "
        "direction): the band draws κ over this range, the point estimate assumes none",
    }


def lower_bounds(wl: MeasuredWork, run: PolicyRun) -> dict[str, Any]:
    """What the makespan can never be below (DOMAIN §7), and which binds (the utilisation)."""
    ready_span = int(wl.steps["start_ns"].max() - wl.steps["start_ns"].min())
    out: dict[str, Any] = {"ready_span_ns": ready_span}
    if run.work:
        pool = int(run.work["pool_ns"])
        attn = max(run.work["attention_ns"].values(), default=0)
        out |= {
            "pool_work_ns": pool,
            "attention_group_work_ns": int(attn),
            "pool_utilisation": round(pool / run.makespan_ns, 4) if run.makespan_ns else 0.0,
            "attention_utilisation": round(attn / run.makespan_ns, 4) if run.makespan_ns else 0.0,
        }
    return out


def save_result_costs(result: ReplayResult, path: str | Path) -> Path:
    """Write the cost model a replay used (with its fit quality) as TOML for ``--costs``."""
    values = {k: v for k, v in result.costs.items() if k != "source" and not k.startswith("whatif_")}
    model = CostModel(**values, source=str(result.costs.get("source", "")))
    return save_costs(model, path, quality=result.cost_fit)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool | type(None)) else str(v)) for k, v in d.items()}
