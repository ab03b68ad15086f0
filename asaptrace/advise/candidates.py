"""The what-ifs a store is advised on, each at its best setting, with its range and the findings it answers.

The candidates are the registry's (:data:`asaptrace.replay.policies.POLICIES`): every registered
policy that declares the findings it answers (``answers``) is a what-if — lockstep ones first,
then disaggregated ones, in registry order — followed by each one's robustness variants
(``robustness``: ``asap-expert-failure``, asap's best split with one expert die lost). A policy
says what its search tries: its ``search_settings`` (chunked's chunk sizes), replayed each and
the best kept, or with ``searches_split`` every D×T + E of the store's device total
(``replay --split auto``) × its search settings (afd-pingpong's m). Its label (``whatif_label``),
the deployments it needs (``needs_deployment``: balanced and chunked re-place requests across a
coupled run's barriered DP groups) and its findings are the policy's own; a user's registered
policy gets advice as a built-in does (DOMAIN.md §7; every replay on the store's device total).

A finding of severity "info" (e.g. Σs² imbalance where no barrier couples the groups) costs no
time and is answered by nothing; a lockstep what-if answers a straggler DP group only when its
cause is its load.

**Range** (what the store cannot pin): a disaggregated what-if on a coupled store is replayed again
at ``k_s`` ∈ {1, 2} (a measured coupled collective vs an asynchronous send) and with its modelled
pool and transfer costs × (1 ∓ each fitted part's residual p95) (the replay's band); a lockstep
what-if, which rescales measured attention by the fitted model, with the model's c2 (the Σs²
term, what placement weighs) × (1 ∓ the attention fit's residual p95). The range is the least and the most recovered over those runs.
A what-if that cannot run on the store (no MoE layers, one device, no batch composition) is kept
with the one-line reason.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from asaptrace.advise.advice import Advice, WhatIf, whatif_line
from asaptrace.analyze.diagnosis import Diagnosis
from asaptrace.errors import UsageError
from asaptrace.executors import TaskPool
from asaptrace.replay.costs import R2_WARN, CostFit, CostModel
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import POLICIES, Policy, policy_of
from asaptrace.replay.whatif.explore import best_split, vary_replay
from asaptrace.replay.whatif.run import (
    ReplayResult,
    mc_band,
    model_error,
    replay_measured_work,
    resolve_costs,
)
from asaptrace.units import percent, plural

#: where a what-if's Monte-Carlo band is drawn: a pool, and each what-if's band being drawn by name
Drawing = tuple[TaskPool, dict[str, Future[dict[str, Any]]]]

#: attention group counts D replayed per round of the split search beyond which it goes coarse to
#: fine (a 32-device store's 7 splits are all replayed; 384 devices: ≈ 30 of 95)
SPLIT_POINTS = 12
#: k_s values a disaggregated what-if of a coupled store is replayed at (its range)
K_S_RANGE = ("1", "2")

_LOCKSTEP_PARTS = ("attention",)
_PIPELINED_PARTS = ("attention", "moe", "transfer")


def candidates() -> list[tuple[str, type[Policy], dict[str, Any]]]:
    """The what-ifs advise runs, from the registry: (name, policy class, the named variant's params
    — empty for the policy itself), lockstep policies first, each policy's robustness variants last."""
    classes = [cls for _, cls in POLICIES if cls.answers]
    classes.sort(key=lambda cls: cls.family != "lockstep")  # stable: registry order within a family
    out: list[tuple[str, type[Policy], dict[str, Any]]] = [(cls.name, cls, {}) for cls in classes]
    out += [(f"{cls.name}-{v}", cls, dict(cls.variants[v])) for cls in classes for v in cls.robustness]
    return out


def advise(
    wl: MeasuredWork,
    diag: Diagnosis,
    *,
    costs: CostModel | CostFit | str | None = None,
    source: str = "",
    progress: Callable[[str], None] | None = None,
    on_whatif: Callable[[WhatIf], None] | None = None,
    pool: TaskPool | None = None,
) -> Advice:
    """Run every candidate what-if on ``wl`` and rank them (see the module docstring);
    ``on_whatif`` is told each what-if as soon as it ran (``advise --online`` starts serving it);
    the Monte-Carlo bands' re-runs are tasks on ``pool`` (default: this process), read at the end."""
    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    fit = resolve_costs(wl, costs)
    cands = candidates()
    findings = [f for f in diag.findings if f.code in {c for _, cls, _ in cands for c in cls.answers}]
    out: list[WhatIf] = []
    drawn: dict[str, Future[dict[str, Any]]] = {}  # what-if → its Monte-Carlo band, being drawn
    for name, cls, variant in cands:
        say(f"what-if: {name}")
        try:
            w = _run(name, cls, variant, wl, fit, out, (pool or TaskPool(1), drawn))
        except UsageError as e:
            w = WhatIf(name, cls.whatif_label(variant), cls.name, False, reason=_reason(str(e)))
        if w.applies:
            w = replace(w, answers=_answers(name, cls, variant, findings), fit=_fit(fit, cls))
        out.append(replace(w, line=whatif_line(w)))
        if on_whatif is not None:
            on_whatif(out[-1])
    for k, w in enumerate(out):
        if w.name in drawn:
            w = replace(w, band=mc_of(drawn[w.name].result()))
            out[k] = replace(w, line=whatif_line(w))
    ranked = sorted((w for w in out if w.applies), key=lambda w: -(w.recovered_ns or 0))
    ref = next((w.reference_ns for w in ranked), None)
    return Advice(
        store=source,
        deployment=wl.deployment,
        devices=wl.world_size,
        measured_makespan_ns=int(wl.steps["end_ns"].max() - wl.steps["start_ns"].min()),
        reference_makespan_ns=int(ref) if ref is not None else 0,
        whatifs=ranked + [w for w in out if not w.applies],
        findings=[f.to_json() for f in diag.findings],
        notes=list(wl.notes),
        seconds=round(time.perf_counter() - t0, 3),
        model_error=model_error(wl, fit.model),
    )


def _run(
    name: str,
    cls: type[Policy],
    variant: dict[str, Any],
    wl: MeasuredWork,
    fit: CostFit,
    done: list[WhatIf],
    mc: Drawing,
) -> WhatIf:
    """One candidate: a robustness variant at its parent's chosen setting, a split search, or the
    best of the policy's search settings."""
    if cls.needs_deployment is not None and wl.deployment != cls.needs_deployment:
        raise UsageError(_NEEDS.get(cls.needs_deployment, f"it needs a {cls.needs_deployment} store"))
    if variant:
        return _robustness(name, cls, variant, wl, fit, done, mc)
    if cls.searches_split:
        return _pipelined_whatif(cls, wl, fit, _measured_mechanisms(wl), mc=mc)
    return _searched(cls, wl, fit)


def _reason(message: str) -> str:
    """A replay's UsageError as the one-line reason (without the ``POLICY does not apply:`` head)."""
    return message.split(" does not apply: ", 1)[-1].strip()


# ------------------------------------------------------------------------------------ the what-ifs
#: why a policy that needs a deployment does not apply to another store's
_NEEDS = {
    "coupled": "the store is disaggregated: it reworks the steps of a coupled run, whose DP groups meet at a barrier"
}


def _settings_grid(cls: type[Policy]) -> list[dict[str, Any]]:
    grid = cls.search_settings
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def _searched(cls: type[Policy], wl: MeasuredWork, fit: CostFit) -> WhatIf:
    """The best of the policy's search settings (fewest makespan; ties: the first tried)."""
    grid = _settings_grid(cls)
    pols = [policy_of(cls.name, params) for params in grid]  # each built once, replayed and re-run
    runs = [replay_measured_work(wl, pol, costs=fit, attribute=False, band=False) for pol in pols]
    i = min(range(len(runs)), key=lambda k: (runs[k].makespan_ns, k))
    params, best = grid[i], runs[i]
    label = cls.whatif_label(params)
    if cls.family == "lockstep":
        w = _lockstep_whatif(cls.name, label, best, wl, fit, pols[i])
    else:
        w = _from_replay(cls.name, label, cls.name, best, [best.recovered_total_ns], [])
    if len(runs) > 1:
        tried = "; ".join(
            f"{cls.search_words.get(k, k.replace('_', ' '))} " + ", ".join(f"{x:,}" for x in values)
            for k, values in cls.search_settings.items()
        )
        w = replace(w, chosen_from=f"best of {tried}")
    return w


def _measured_mechanisms(wl: MeasuredWork) -> dict[str, Any]:
    """A disaggregated store's what-ifs keep its runtime's mechanisms (as its reference replay does:
    dual batch when it ran two micro-batches, no long-prompt rule) and change only the split."""
    if wl.deployment == "coupled":
        return {}
    return {"dual_batch": wl.micro_batches > 1, "long_tokens": 0}


def _robustness(
    name: str,
    cls: type[Policy],
    variant: dict[str, Any],
    wl: MeasuredWork,
    fit: CostFit,
    done: list[WhatIf],
    mc: Drawing,
) -> WhatIf:
    """A named ablation at its policy's chosen setting (asap-expert-failure: the best split, one
    expert die lost)."""
    parent = next((w for w in done if w.name == cls.name), None)
    if parent is None or not parent.applies:
        raise UsageError(parent.reason if parent is not None else f"{cls.name} did not run")
    params = _measured_mechanisms(wl) | {
        k: parent.params[k] for k in ("attention", "experts") if k in parent.params
    }
    params |= {k: parent.params[k] for k in cls.search_settings if k in parent.params} | variant
    if params.get("expert_failure") and int(params.get("experts") or 0) < 2:
        raise UsageError("the best split has one expert die: losing it leaves no pool")
    if cls.searches_split:
        w = _pipelined_whatif(cls, wl, fit, params, search=False, name=name, mc=mc)
    else:
        r = replay_measured_work(wl, policy_of(cls.name, params), costs=fit, attribute=False, band=False)
        w = _from_replay(name, cls.whatif_label(params), cls.name, r, [r.recovered_total_ns], [])
    return replace(w, chosen_from=f"robustness of {parent.label}")


def _lockstep_whatif(
    name: str, label: str, r: ReplayResult, wl: MeasuredWork, fit: CostFit, pol: Policy
) -> WhatIf:
    """A lockstep what-if and its range over the attention fit's residual (c1, c2 × (1 ∓ p95))."""
    q = (fit.quality or {}).get("attention") or {}
    recs, range_from = [r.recovered_total_ns], []
    if q.get("status") == "fitted" and q.get("residual_p95_pct"):
        e = min(float(q["residual_p95_pct"]) / 100, 0.9)
        m = fit.model
        for s in (1 - e, 1 + e):
            costs = replace(m, attn_c2_ms=m.attn_c2_ms * s)  # the Σs² share: what placement weighs
            recs.append(
                replay_measured_work(wl, pol, costs=costs, attribute=False, band=False).recovered_total_ns
            )
        range_from.append(f"the attention model's c2 ± {q['residual_p95_pct']:g} % (its fit's residual p95)")
    return _from_replay(name, label, name, r, recs, range_from)


def _pipelined_whatif(
    cls: type[Policy],
    wl: MeasuredWork,
    fit: CostFit,
    params: dict[str, Any],
    *,
    search: bool = True,
    name: str | None = None,
    mc: Drawing,
) -> WhatIf:
    """A disaggregated what-if at its best split (or at ``params``), its band and its k_s range;
    its Monte-Carlo band drawn as a task of ``mc``'s pool (its future kept there by name)."""
    policy = cls.name
    name = name or policy
    row: dict[str, Any] = {}
    n_splits = 0
    pol = policy_of(policy, params)  # built once: the split search, the replay and --vary take it
    if search:
        rows, pol = best_split(wl, pol, fit.model, at_most=SPLIT_POINTS)
        row, n_splits = next(r for r in rows if r["best"]), len(rows)
    r = replay_measured_work(wl, pol, costs=fit, attribute=False, band=True, mc=False)
    pool, drawn = mc
    drawn[name] = pool.submit(mc_band, pol, wl, fit.model, r.reference_makespan_ns)
    recs, range_from = [r.recovered_total_ns], []
    if r.band.get("status") == "fitted":
        recs += [r.band["recovered_low_ns"], r.band["recovered_high_ns"]]
        parts = ", ".join(f"{p} ± {100 * v:.0f} %" for p, v in r.band["parts"].items())
        range_from.append(f"the fitted {parts} (residual p95)")
    if wl.deployment == "coupled":
        rows_k = vary_replay(wl, pol, fit.model, [("k_s", list(K_S_RANGE))])
        recs += [x["recovered_ns"] for x in rows_k]
        range_from.append("k_s " + "–".join(K_S_RANGE))
    label = cls.whatif_label(r.params)
    coarse = ", searched coarse to fine" if (wl.world_size - 1) // wl.tp > SPLIT_POINTS else ""
    what = f"(split, {', '.join(cls.search_settings)})" if cls.search_settings else "splits"
    chosen = f"best of {n_splits} {what} of {plural(wl.world_size, 'device')}{coarse}" if search else ""
    return _from_replay(
        name,
        label,
        policy,
        r,
        recs,
        range_from,
        chosen_from=chosen,
        binding=row.get("binding") or _binding(r),
        bandwidth_bound=row.get("bandwidth_bound"),
    )


def _from_replay(
    name: str,
    label: str,
    policy: str,
    r: ReplayResult,
    recovered: list[int],
    range_from: list[str],
    **extra: Any,
) -> WhatIf:
    """A what-if that ran: its replay's numbers, and the range of ``recovered`` over its re-runs."""
    return WhatIf(
        name=name,
        label=label,
        policy=policy,
        applies=True,
        params=r.params,
        deployment=r.deployment,
        makespan_ns=r.makespan_ns,
        reference_ns=r.reference_makespan_ns,
        recovered_ns=r.recovered_total_ns,
        recovered_low_ns=min(recovered),
        recovered_high_ns=max(recovered),
        range_from=range_from,
        band=mc_of(r.band),
        **extra,
    )


def mc_of(band: dict[str, Any] | None) -> dict[str, Any] | None:
    """The Monte-Carlo part of a replay's band (None when none was drawn)."""
    if not band or band.get("mc_status") != "drawn":
        return None
    return {k: v for k, v in band.items() if k.startswith("mc_")}


def _binding(r: ReplayResult) -> str | None:
    b = r.bounds or {}
    if "pool_utilisation" not in b:
        return None
    return "pool" if b["pool_utilisation"] >= b["attention_utilisation"] else "attention"


# --------------------------------------------------------------------------- findings and the fit
def finding_label(f: Any) -> str:
    """A finding in a few words, with its number (the advice line's left-hand side)."""
    d = f.data
    if f.code == "barrier_wait":
        return f"barrier wait at dispatch/combine ({percent(d.get('wait_share'))} of step time)"
    if f.code == "sumsq_imbalance":
        ratio = d.get("mean_sum_sq_ratio")
        return "Σs² imbalance" + ("" if ratio is None else f" (the heaviest DP group {ratio:.2f}× the mean)")
    if f.code == "straggler_group":
        why = "its load" if d.get("cause") == "load" else "persistent lateness"
        return f"DP group {d['dp_group']} last at {percent(d.get('last_share'))} of barriers ({why})"
    if f.code == "hot_expert":
        return f"rank {d['rank']}'s hot expert"
    if f.code == "slow_device":
        return f"rank {d['rank']}, a slow device"
    return f.code.replace("_", " ")


def _answers(
    name: str, cls: type[Policy], variant: dict[str, Any], findings: list[Any]
) -> list[dict[str, Any]]:
    """The findings a what-if answers, costliest first (not an "info" one: it costs no time; a
    robustness variant answers none)."""
    codes = () if variant else cls.answers
    lockstep = cls.family == "lockstep"
    picked = [
        f
        for f in findings
        if f.code in codes
        and f.severity != "info"
        and not (f.code == "straggler_group" and lockstep and f.data.get("cause") != "load")
    ]
    picked.sort(
        key=lambda f: -((f.cost_ns or 0) - f.data.get("counted_ns", 0))
    )  # time no other finding counts
    return [{"code": f.code, "label": finding_label(f), "cost_ns": f.cost_ns} for f in picked]


def _fit(fit: CostFit, cls: type[Policy]) -> list[dict[str, Any]]:
    """The cost-fit parts a what-if rests on: status, R², residual p95, and whether it is weak."""
    parts = _LOCKSTEP_PARTS if cls.family == "lockstep" else _PIPELINED_PARTS
    out = []
    for part in parts:
        q = (fit.quality or {}).get(part) or {"status": "default"}
        r2 = q.get("r2")
        out.append(
            {
                "part": part,
                "status": q.get("status", "default"),
                "r2": r2,
                "residual_p95_pct": q.get("residual_p95_pct"),
                "weak": q.get("status") != "fitted" or (r2 is not None and r2 < R2_WARN),
            }
        )
    return out


def nothing_applies(diag: Diagnosis, reason: str, *, source: str = "") -> Advice:
    """The advice of a store with no work to replay: every what-if does not apply, for ``reason``."""
    why = _reason(reason.split(": ", 1)[-1] if reason.startswith(source) and source else reason)
    whatifs = [WhatIf(n, cls.whatif_label(v), cls.name, False, reason=why) for n, cls, v in candidates()]
    bd = diag.tables.get("step_breakdown")
    span = int(bd["end_ns"].max() - bd["start_ns"].min()) if bd is not None and bd.height else 0
    return Advice(
        store=source,
        deployment=str((diag.meta.get("parallel") or {}).get("deployment", "unknown")),
        devices=int(bd["rank"].n_unique()) if bd is not None and bd.height else 0,
        measured_makespan_ns=span,  # the measured run, first step start → last step end
        reference_makespan_ns=0,
        whatifs=[replace(w, line=whatif_line(w)) for w in whatifs],
        findings=[f.to_json() for f in diag.findings],
    )
