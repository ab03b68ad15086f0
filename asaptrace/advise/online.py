"""``advise --online``: the same candidates served under load, on the store's own workload (DOMAIN.md §8).

The offline advice says "these batches, as they arrived, would finish X s sooner"; this adds "served
under load, your lengths, this serves Y requests/s at your SLO". It is a steady-state answer: the
store's request lengths (new tokens and prefix) are resampled with the seed into Poisson arrivals
(or the store's own inter-arrival shape, rescaled), each rate's run lasts the scenario's duration,
at least 20 SLO intervals and at least :data:`MIN_ARRIVALS` arrivals, every arrival is drained and
counted, a rate whose backlog grows over the second half of its arrivals is not compliant
(:mod:`asaptrace.replay.serving.steady`), and the answer is the median over
:data:`SEEDS` seeds with its range, beside each policy's capacity bound (the binding resource named).

**Cost-fit band** (DOMAIN §8 "uncertainty", the fit's band of §7): every cost is modelled online,
so each fitted part's constants (attention c0, c1, c2; the pool's plateau, a, b; the transfers'
latency and per-1K) are set × (1 − e) and × (1 + e), e its residual p95 (capped at 90 %; a part
left at the paper's defaults has no residuals and no band), and the SLO search is run again at
both ends on the first seed, started near the first seed's answer scaled by the bound
(:mod:`~asaptrace.replay.whatif.sweep_near`): ``cost_band`` gives each policy's SLO rate (and capacity bound) at
the band's low and high costs. A store with no fitted part has no band (``status: "none"``).

Costs are the store's fit (:func:`asaptrace.replay.whatif.run.resolve_costs`); the layers are the
store's. Each what-if is served as the very policy object the offline replay ran, its deployment
spelled out on the store (its split, its chunk, its m, a lockstep policy's measured D × T:
``policy_of(w.policy, w.params).on_store(wl)``), so what ``replay --policy asap --attention 5x4
--experts 12`` replays is what is served. The measured policy is ``coupled`` on a
coupled store; on a disaggregated store, asap at its measured split with its measured dual batch and
no long-prompt rule. A what-if without an online former (a user's replay-only policy) says so.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from asaptrace.advise.advice import Advice, WhatIf, whatif_line
from asaptrace.executors import TaskPool
from asaptrace.questions import ONLINE_QUESTION
from asaptrace.replay.costs import CostFit, CostModel
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import Policy, policy_of
from asaptrace.replay.serving.scenario import Scenario, load_scenario
from asaptrace.replay.serving.steady import MIN_ARRIVALS
from asaptrace.replay.whatif.run import resolve_costs
from asaptrace.replay.whatif.sweep import SeedSearch, SweepOptions, gathered, run_sweep, submit_seeds
from asaptrace.replay.whatif.sweep_near import search_near

#: simulated seconds of arrivals per rate (each rate's run is extended to MIN_ARRIVALS arrivals and
#: 20 SLO intervals: :func:`asaptrace.replay.serving.steady.run_length`)
DURATION_S = 60.0
#: the SLO throughput is the median over this many seeds, with its range
SEEDS = 5
QUESTION = ONLINE_QUESTION
#: the cost constants each fitted part sets (what its band scales)
BAND_PARTS = {
    "attention": ("attn_c0_ms", "attn_c1_ms", "attn_c2_ms"),
    "moe": ("moe_plateau_ms", "moe_a_ms", "moe_b_ms"),
    "transfer": ("xfer_latency_ms", "xfer_per_k_ms"),
}


@dataclass
class OnlineSearches:
    """``advise --online``'s searches, each submitted to the pool as soon as it is known (they run
    while the offline what-ifs are still replayed, when the pool has workers): the measured
    policy's at once (:func:`start_online`), each what-if's once its replay chose its setting
    (:meth:`add`). ``tasks``: per policy label, per seed its futures."""

    wl: MeasuredWork
    pool: TaskPool
    sc: Scenario
    quality: dict[str, Any] | None
    label: str
    workload: str | None
    seeds: tuple[int, ...]
    progress: Callable[[str], None] | None = None
    configured: dict[str, Policy] = field(default_factory=dict)
    no_former: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, list[list[Future[SeedSearch]]]] = field(default_factory=dict)

    def options(self, labels: tuple[str, ...]) -> SweepOptions:
        """The sweep of these configured policies on the store's requests, every seed."""
        return SweepOptions(
            policies=labels,
            workload=self.workload,
            min_arrivals=MIN_ARRIVALS,
            seeds=self.seeds,
            configured=tuple((p, self.configured[p]) for p in labels),
            curve=False,  # no curve is drawn: its low-load points are not run
        )

    def submit(self, label: str, pol: Policy) -> None:
        self.configured[label] = pol
        self.tasks[label] = submit_seeds(self.sc, self.options((label,)), self.pool, progress=self.progress)

    def add(self, w: WhatIf) -> None:
        """A what-if the offline advice ran: its searches submitted (one that does not apply, or
        whose policy has no online former, is only noted)."""
        if not w.applies or w.name in self.configured or w.name in self.no_former:
            return
        pol = policy_of(w.policy, w.params).on_store(self.wl)
        if pol.online():
            self.submit(w.name, pol)
        else:
            self.no_former[w.name] = f"{w.policy} has no online batch former"


def start_online(
    wl: MeasuredWork,
    pool: TaskPool,
    *,
    workload: str | None,
    costs: CostModel | CostFit | str | None = None,
    scenario: str = "asap-paper",
    duration_s: float = DURATION_S,
    seeds: int = SEEDS,
    progress: Callable[[str], None] | None = None,
) -> OnlineSearches:
    """The measured policy's searches of :func:`advise_online`, submitted to ``pool`` now (they
    need no offline what-if): the measured policy is ``coupled`` on a coupled store; on a
    disaggregated store, asap at its measured split with its measured dual batch and no
    long-prompt rule."""
    fit = resolve_costs(wl, costs)
    knobs: dict[str, Any] = {"layers": wl.layers, "duration_s": duration_s}
    if wl.deployment == "coupled":
        measured: Policy = policy_of("coupled").on_store(wl)
        label = "coupled"
    else:  # the measured runtime: its split, its dual batch or not, no long-prompt rule
        measured = policy_of(
            "asap",
            {
                "attention": f"{wl.n_groups}x{wl.tp}",
                "experts": wl.expert_ranks,
                "dual_batch": wl.micro_batches > 1,
                "long_tokens": 1 << 40,
            },
        )
        label = f"asap at {wl.n_groups}×{wl.tp} + {wl.expert_ranks} as measured"
    sc = load_scenario(scenario).with_costs(fit.model, fit.quality, origin=wl.source).with_knobs(knobs)
    at = tuple(sc.seed + k for k in range(max(seeds, 1)))
    searches = OnlineSearches(wl, pool, sc, fit.quality, label, workload, at, progress)
    searches.submit(label, measured)
    return searches


def advise_online(
    advice: Advice,
    wl: MeasuredWork,
    *,
    costs: CostModel | CostFit | str | None = None,
    scenario: str = "asap-paper",
    duration_s: float = DURATION_S,
    seeds: int = SEEDS,
    progress: Callable[[str], None] | None = None,
    pool: TaskPool | None = None,
    start: OnlineSearches | None = None,
) -> Advice:
    """``advice`` with each applying what-if's SLO throughput (median, range, bound) beside the
    measured policy's; one line per what-if saying why when none can be served. Its searches run
    on ``pool`` (default: this process), the measured policy's from ``start`` when it was started
    (:func:`start_online`, before the offline what-ifs). Every search is a task of its own: the
    answer does not depend on where or in which order they ran."""
    why = _why_not(wl, advice)
    if why:
        return not_served(advice, why)
    pool = pool or TaskPool(1)
    workload = advice.store or None
    args = {"costs": costs, "scenario": scenario, "duration_s": duration_s, "seeds": seeds}
    start = start or start_online(wl, pool, workload=workload, progress=progress, **args)
    for w in advice.ranked:  # those not added while the offline advice ran
        start.add(w)
    sc, measured_label = start.sc, start.label
    labels = (measured_label, *[w.name for w in advice.ranked if w.name in start.configured])
    configured, no_former = start.configured, start.no_former
    opt = start.options(labels)
    # the bands search near the first seed's answers while the other seeds run
    first = gathered(t for p in labels for t in start.tasks[p][0])
    first_main = {
        "slo_by_seed": {p: [first.slo[p]["slo_rps"]] for p in opt.policies},
        "slo_censored": {p: first.slo[p]["censored"] for p in opt.policies},
        "capacity": first.caps,
    }
    band_later = cost_band_later(sc, opt, start.quality, first_main, pool)
    whatifs_online = {w.name: w for w in advice.ranked if w.name in configured}
    mc_later = mc_band_later(sc, opt, first_main, whatifs_online, pool)
    found = [first] + [
        gathered(t for p in labels for t in start.tasks[p][k]) for k in range(1, len(start.seeds))
    ]
    res = run_sweep(sc, opt, progress=progress, found=found)
    band, mc = band_later(), mc_later()
    base = res["slo_rps"][measured_label]
    whatifs = []
    for w in advice.whatifs:
        if w.applies:
            online = _column(res, measured_label) | {
                "measured_slo_rps": base,
                "measured_range": res["slo_range"].get(measured_label),
                "measured_censored": res["slo_censored"][measured_label],
            }
            if w.name in configured:
                mine = res["slo_rps"][w.name]
                ratio = None if not base or mine is None else round(mine / base, 4)
                online |= _column(res, w.name) | {
                    "ratio": ratio,
                    "cost_band": _band_of(band, w.name),
                    "mc_band": mc.get(w.name),
                }
            else:
                online |= {"slo_rps": None, "reason": no_former[w.name]}
            w = replace(w, online=online)
            w = replace(w, line=whatif_line(w))
        whatifs.append(w)
    block = {
        "status": "run",
        "question": QUESTION,
        "scenario": res["scenario"],
        "requests": res["workload"],
        "slo_ttft_ns": res["slo_ttft_ns"],
        "duration_ns": res["duration_ns"],  # the run's: extended to 20 SLO intervals
        "min_arrivals": MIN_ARRIVALS,
        "seeds": res["seeds"],
        "costs_from": res["costs_from"],
        "measured_policy": measured_label,
        "slo_rps": dict(res["slo_rps"]),
        "slo_range": dict(res["slo_range"]),
        "slo_censored": dict(res["slo_censored"]),
        "capacity": dict(res["capacity"]),
        "arrivals": {p: _arrivals_at(res, p) for p in res["policies"]},
        "cost_band": band,
        "mc_band": mc,
        "reading": res["reading"],
    }
    return replace(advice, whatifs=whatifs, online=block)


def cost_band(
    sc: Scenario, opt: SweepOptions, quality: dict[str, Any] | None, main: Any | None = None
) -> dict[str, Any]:
    """Each policy's SLO rate and capacity bound at the fit band's low and high costs (module
    docstring), on the first seed, each searched near the ``main`` sweep's rate on that seed scaled
    by its bound (:func:`~asaptrace.replay.whatif.sweep_near.search_near`; without ``main``, in
    full); ``status: "none"`` with the reason when no part was fitted."""
    return cost_band_later(sc, opt, quality, main, TaskPool(1))()


def cost_band_later(
    sc: Scenario, opt: SweepOptions, quality: dict[str, Any] | None, main: Any | None, pool: TaskPool
) -> Callable[[], dict[str, Any]]:
    """:func:`cost_band` with its two ends' searches submitted to ``pool`` now: call the result for
    the band once they are done."""
    parts = {}
    for part in BAND_PARTS:
        q = (quality or {}).get(part) or {}
        if q.get("status") == "fitted" and q.get("residual_p95_pct") is not None:
            parts[part] = min(float(q["residual_p95_pct"]) / 100, 0.9)
    if not parts:
        return lambda: {"status": "none", "reason": "no fitted cost part: the range is the seeds' only"}
    seed = (opt.seeds or (sc.seed,))[0]
    one = replace(opt, seeds=None)
    known = {p: first_seed_guess(main, p) for p in opt.policies} if main is not None else {}
    ends = {}
    for end, sign in (("low_costs", -1), ("high_costs", 1)):
        knobs = {k: getattr(sc, k) * (1 + sign * e) for p, e in parts.items() for k in BAND_PARTS[p]}
        at = sc.with_knobs(knobs | {"seed": seed})  # each policy's search is its own task
        ends[end] = {
            p: pool.submit(search_near, at, replace(one, policies=(p,)), known) for p in opt.policies
        }

    def band() -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": "fitted",
            "parts": {p: round(e, 4) for p, e in parts.items()},
            "seed": seed,
        }
        for end, tasks in ends.items():
            rows = {}
            for p, task in tasks.items():
                slo, caps = task.result()
                rate = slo[p]["slo_rps"]
                rows[p] = {
                    "slo_rps": None if rate is None else round(rate, 4),
                    "censored": slo[p]["censored"],
                    "bound_rps": (caps.get(p) or {}).get("bound_rps"),
                }
            out[end] = rows
        return out

    return band


def first_seed_guess(main: Any, label: str) -> tuple[float | None, float | None]:
    """Where a band's search starts (:func:`~asaptrace.replay.whatif.sweep_near.search_near`): the
    main sweep's rate on its first seed (None when censored: it may be a floor) and the bound it
    was found under. ``main`` reads like a sweep's result; ``advise --online`` hands the first
    seed's own search, read as soon as it is done (its ``slo_censored`` that seed's alone; a whole
    sweep's says whether any seed was)."""
    rates, cap = main["slo_by_seed"].get(label) or [None], main["capacity"].get(label) or {}
    return (None if main["slo_censored"].get(label) else rates[0]), cap.get("bound_rps")


def mc_band_later(
    sc: Scenario, opt: SweepOptions, main: Any, whatifs: dict[str, Any], pool: TaskPool
) -> Callable[[], dict[str, dict[str, Any]]]:
    """The offline Monte-Carlo band carried under load: for each what-if whose replay drew one
    (``WhatIf.band``), every fitted cost constant scaled by its band's edges over its makespan
    (f = mc_low / makespan and mc_high / makespan: the noisy re-runs' 5th–95th percentile, with
    the contention prior's slow edge when there is one) and the SLO rate searched at each near the
    first seed's (:func:`~asaptrace.replay.whatif.sweep_near.search_near`). A steady state averages
    over more batches than one replay, so this is a wide reading of the noise, not a narrow one.
    Every search is submitted to ``pool`` now: call the result for the bands once they are done."""
    seed = (opt.seeds or (sc.seed,))[0]
    todo: dict[str, dict[str, Any]] = {}
    for label, w in whatifs.items():
        b = w.band or {}
        if not b or not w.makespan_ns or main["slo_censored"].get(label):
            continue
        one = replace(opt, seeds=None, policies=(label,))
        known = {label: first_seed_guess(main, label)}
        for end, edge in (("fast", b["mc_low_ns"]), ("slow", b["mc_high_ns"])):
            f = edge / w.makespan_ns
            knobs = {k: getattr(sc, k) * f for keys in BAND_PARTS.values() for k in keys}
            found = pool.submit(search_near, sc.with_knobs(knobs | {"seed": seed}), one, known)
            todo.setdefault(label, {})[end] = (f, found)

    def bands() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for label, ends in todo.items():
            row: dict[str, Any] = {"seed": seed}
            for end, (f, found) in ends.items():
                row[f"slo_rps_{end}"] = found.result()[0][label]["slo_rps"]
                row[f"cost_scale_{end}"] = round(f, 4)
            out[label] = row
        return out

    return bands


def _band_of(band: dict[str, Any], label: str) -> dict[str, Any] | None:
    """One policy's SLO rate at the band's low and high costs (None: no band)."""
    if band.get("status") != "fitted":
        return None
    return {
        "slo_rps_low_costs": band["low_costs"][label]["slo_rps"],
        "slo_rps_high_costs": band["high_costs"][label]["slo_rps"],
        "parts": band["parts"],
        "seed": band["seed"],
    }


def _column(res: Any, label: str) -> dict[str, Any]:
    """One policy's online numbers: median SLO rate, range over seeds, bound and binding resource."""
    cap = res["capacity"].get(label) or {}
    return {
        "measured_policy": res["policies"][0],
        "question": QUESTION,
        "slo_rps": res["slo_rps"][label],
        "range": res["slo_range"].get(label),
        "censored": res["slo_censored"][label],
        "bound_rps": cap.get("bound_rps"),
        "binding": cap.get("binding"),
        "arrivals": _arrivals_at(res, label),
    }


def _arrivals_at(res: Any, label: str) -> dict[str, Any] | None:
    """How many arrivals the point nearest the reported SLO rate had, and whether it was stable."""
    rate = res["slo_rps"].get(label)
    pts = res["curves"].get(label) or []
    if rate is None or not pts:
        return None
    near = min(pts, key=lambda p: abs(p["rate"] - rate))
    return {"rate": near["rate"], "n_requests": near["n_requests"], "stable": near.get("stable")}


def _why_not(wl: MeasuredWork, advice: Advice) -> str:
    """Why no what-if of this store can be served online ("" when they can)."""
    if wl.layers < 1:
        return "the store has no MoE layers: no expert work to serve online"
    if not advice.ranked:
        return "no what-if applies to this store"
    return ""


def not_served(advice: Advice, why: str) -> Advice:
    """Every what-if says in one line why it was not served; the block says why none was."""
    whatifs = []
    for w in advice.whatifs:
        if w.applies:
            w = replace(w, online={"slo_rps": None, "reason": why, "measured_policy": "coupled"})
            w = replace(w, line=whatif_line(w))
        whatifs.append(w)
    return replace(advice, whatifs=whatifs, online={"status": "not run", "reason": why, "question": QUESTION})
