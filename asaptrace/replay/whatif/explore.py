"""Around one what-if: the best attention/expert split (``--split auto``) and the answer's range (``--vary``).

* :func:`search_splits` replays a disaggregated policy on every D×T + E of the store's device
  total N (T the measured TP unless given; D = 1 … ⌊(N − 1)/T⌋, E = N − D·T ≥ 1; at each, every
  combination of the policy's own ``search_settings``: afd-pingpong's m), without attribution, and lists each split's makespan, mean / p99 batch latency
  and the pool's and the busiest attention group's utilisation, the best (smallest makespan)
  marked. A split is *bandwidth-bound* when the pool is far from busy yet the makespan does not
  fall with more expert dies (the attention/FFN "dead zone"); ``binding`` names the resource
  closest to saturation.
* :func:`vary_replay` re-runs the what-if (and its reference) for each value of one knob the
  store cannot pin — ``k_s`` (measured coupled collective ÷ asynchronous send), ``moe_e_ref``
  (E_fit, the dies the MoE constants hold for; 0: no scaling with the pool size), ``phi``
  (attention's per-request share), ``scale`` (the what-if's modelled pool and transfer costs ×
  the value) and ``costs`` (``fitted`` or ``default``: DOMAIN §3's figures) — and
  :func:`replay_tornado` gives each knob's swing of the recovered time.

:func:`explore_whatif` does both for ``replay`` and returns an :class:`Exploration` (the parameters
to replay, the rows); the pipeline fits the costs before it, and replays and writes after it.

Every split and every knob value is an independent replay: both take an ``executor``
(:func:`asaptrace.executors.resolve_executor`; default this process) and run one task per
split or value — on a Ray cluster, one Ray task each, the workload shipped once — with the rows in
the same order, so the answer is the same whichever executor ran it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.executors import Executor, SerialExecutor, map_ordered
from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import PipelinedPolicy, Policy
from asaptrace.replay.policies.base import parse_attention
from asaptrace.replay.serving.scenario import KNOB_ALIASES
from asaptrace.replay.whatif.run import replay_measured_work
from asaptrace.units import plural

#: replay --vary knobs: alias → CostModel field(s) ("costs" switches fitted ↔ default)
VARY_KNOBS: dict[str, tuple[str, ...]] = {
    "k_s": ("coupled_k_s",),
    "moe_e_ref": ("moe_e_ref",),
    "phi": ("attn_phi",),
    "scale": ("whatif_moe_scale", "whatif_transfer_scale"),
    "costs": (),
}


def _settings_grid(policy: PipelinedPolicy) -> list[dict[str, Any]]:
    """Every combination of the policy's ``search_settings`` (one empty one when it has none)."""
    grid = type(policy).search_settings
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]


def split_candidates(
    wl: MeasuredWork, policy: PipelinedPolicy, tp: int | None = None, groups: Sequence[int] | None = None
) -> list[PipelinedPolicy]:
    """Every D×T + E at the store's device total (× the policy's search settings: afd-pingpong's
    m); ``groups``: only those D."""
    total, t = wl.world_size, int(tp or wl.tp)
    if total < 2 or t >= total:
        raise UsageError(
            f"--split auto needs room for attention and experts: {plural(total, 'device')}, TP {t}"
        )
    out: list[PipelinedPolicy] = []
    for d in groups if groups is not None else range(1, (total - 1) // t + 1):
        base = replace(policy, attention=f"{d}x{t}", experts=total - d * t)
        out += [replace(base, **combo) for combo in _settings_grid(policy)]
    return out


def search_splits(
    wl: MeasuredWork,
    policy: PipelinedPolicy,
    costs: CostModel,
    *,
    tp: int | None = None,
    executor: Executor | None = None,
    at_most: int | None = None,
) -> list[dict[str, Any]]:
    """One row per split (see the module docstring), best first marked with ``best``; one task
    per split on ``executor`` (default: this process). With ``at_most`` and more attention group
    counts D than that, D is searched coarse to fine instead (:func:`_coarse_to_fine`)."""
    run = partial(map_ordered, executor or SerialExecutor(), partial(split_row, wl, costs))
    d_max = (wl.world_size - 1) // int(tp or wl.tp)
    if at_most is None or d_max <= at_most:
        rows = run(split_candidates(wl, policy, tp))
    else:
        rows = _coarse_to_fine(lambda ds: run(split_candidates(wl, policy, tp, ds)), d_max, at_most)
    best = min(range(len(rows)), key=lambda i: (rows[i]["makespan_ns"], i))
    for i, r in enumerate(rows):
        r["best"] = i == best
    _mark_dead_zone(rows)
    return rows


def best_split(
    wl: MeasuredWork,
    pol: Policy,
    costs: CostModel,
    *,
    executor: Executor | None = None,
    at_most: int | None = None,
) -> tuple[list[dict[str, Any]], PipelinedPolicy]:
    """``--split auto``: every split's row (:func:`search_splits`, one task each on ``executor``;
    ``at_most``: coarse to fine over D) and the policy at the best split (its search settings too)."""
    if not isinstance(pol, PipelinedPolicy):
        raise UsageError(f"--split auto is for disaggregated policies (asap, afd-pingpong), not {pol.name!r}")
    why = pol.applies(wl)
    if why:
        raise UsageError(f"{pol.name} does not apply: {why}")
    tp = parse_attention(pol.attention)[1] if pol.attention else None
    rows = search_splits(wl, pol, costs, tp=tp, executor=executor, at_most=at_most)
    best = next(r for r in rows if r["best"])
    chosen = {"attention": best["attention"], "experts": best["experts"]}
    return rows, replace(pol, **chosen, **{k: best[k] for k in type(pol).search_settings})


def _coarse_to_fine(
    replay: Callable[[list[int]], list[dict[str, Any]]], d_max: int, points: int
) -> list[dict[str, Any]]:
    """Search D in 1 … d_max with about ``points`` replays a round: D evenly spaced over the bracket,
    then the bracket shrunk to the best one's neighbours, until every D in it was replayed. About
    points·log(d_max) replays instead of d_max (each ∝ the store's ranks): the advice's search
    stays near-linear in ranks. Exact when the makespan is unimodal in D; otherwise the best of the
    splits replayed (the rows say which)."""
    seen: dict[int, list[dict[str, Any]]] = {}
    lo, hi = 1, d_max
    while True:
        step = max(1, (hi - lo) // max(points - 1, 1))
        ds = sorted({*range(lo, hi + 1, step), hi} - set(seen))
        for d, rows in zip(ds, _by_groups(replay(ds), ds), strict=True):
            seen[d] = rows
        if step == 1:
            break
        best = min(
            (d for d in seen if lo <= d <= hi), key=lambda d: (min(r["makespan_ns"] for r in seen[d]), d)
        )
        lo, hi = max(lo, best - step), min(hi, best + step)
    return [r for d in sorted(seen) for r in seen[d]]


def _by_groups(rows: list[dict[str, Any]], ds: list[int]) -> list[list[dict[str, Any]]]:
    """Rows of consecutive D (afd-pingpong: several m per D) grouped by D, in ``ds``' order."""
    out: dict[int, list[dict[str, Any]]] = {d: [] for d in ds}
    for r in rows:
        out[r["deployment"]["groups"]].append(r)
    return [out[d] for d in ds]


def split_row(wl: MeasuredWork, costs: CostModel, cand: PipelinedPolicy) -> dict[str, Any]:
    """One split replayed (no attribution): makespan, batch latency, utilisations, what binds."""
    run = cand.run(wl, costs)
    dep = run.deployment
    d, t = parse_attention(str(cand.attention))
    searched = {k: getattr(cand, k) for k in type(cand).search_settings}
    pool = int(run.work.get("pool_ns", 0))
    attn = max(run.work.get("attention_ns", {}).values(), default=0)
    ms = run.makespan_ns
    latency = run.latency_ns()
    row: dict[str, Any] = {
        "split": f"{d}×{t} + {dep.experts}" + "".join(f", {k} {v}" for k, v in searched.items()),
        "attention": f"{d}x{t}",
        "experts": dep.experts,
        "deployment": {"groups": d, "tp": t, "experts": dep.experts, "devices": d * t + dep.experts},
        "makespan_ns": ms,
        "latency_mean_ns": latency["mean_ns"],
        "latency_p99_ns": latency["p99_ns"],
        "pool_utilisation": round(pool / ms, 4) if ms else 0.0,
        "attention_utilisation": round(attn / ms, 4) if ms else 0.0,
    }
    row |= searched
    row["binding"] = "pool" if row["pool_utilisation"] >= row["attention_utilisation"] else "attention"
    return row


def _mark_dead_zone(rows: list[dict[str, Any]]) -> None:
    """A split is bandwidth-bound when, at the same attention, one more step of expert dies gains
    < 2 % of makespan while the pool is less than half busy: the dies are not what binds."""
    by_e = sorted((r for r in rows if r.get("m") in (None, rows[0].get("m"))), key=lambda r: r["experts"])
    for r in rows:
        r["bandwidth_bound"] = False
    for fewer, more in itertools.pairwise(by_e):
        gain = (fewer["makespan_ns"] - more["makespan_ns"]) / max(fewer["makespan_ns"], 1)
        if gain < 0.02 and more["pool_utilisation"] < 0.5 and more["attention_utilisation"] < 0.5:
            more["bandwidth_bound"] = True
            more["binding"] = "transfer"


def _vary_knob(name: str) -> str:
    """The --vary knob a spelling means: itself, or the knob varying the one field that the
    scenario's alias (KNOB_ALIASES: k_s, E_ref, φ, …) or field name (coupled_k_s, attn_phi) names."""
    if name in VARY_KNOBS:
        return name
    field = KNOB_ALIASES.get(name, name)
    return next((k for k, f in VARY_KNOBS.items() if f == (field,)), name)


def parse_vary(text: str) -> tuple[str, list[str]]:
    """'k_s=1,2,4' → ("k_s", ["1", "2", "4"]); an unknown knob is one line naming the known ones."""
    knob, sep, values = text.partition("=")
    knob = _vary_knob(knob.strip())
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not vals:
        raise UsageError(f"--vary takes KNOB=V1,V2,… (e.g. k_s=1,2,4), not {text!r}")
    if knob not in VARY_KNOBS:
        raise UsageError(
            f"--vary knob {knob!r} is not one the replay varies (known: {', '.join(VARY_KNOBS)})"
        )
    for v in vals:
        if knob == "costs":
            if v not in ("fitted", "default"):
                raise UsageError(f"--vary costs takes fitted and/or default, not {v!r}")
        else:
            try:
                x = float(v)
            except ValueError:
                raise UsageError(f"--vary {knob} values must be numbers, not {v!r}") from None
            if x < 0 or (knob in ("k_s", "scale") and x <= 0):
                raise UsageError(f"--vary {knob} values must be positive, not {v!r}")
    return knob, vals


def costs_at(knob: str, value: str, fitted: CostModel) -> CostModel:
    """The cost model with one knob set."""
    if knob == "costs":
        return fitted if value == "fitted" else CostModel()
    return replace(fitted, **dict.fromkeys(VARY_KNOBS[knob], float(value)))


def vary_replay(
    wl: MeasuredWork,
    policy: Policy,
    fitted: CostModel,
    specs: Sequence[tuple[str, Sequence[str]]],
    *,
    executor: Executor | None = None,
) -> list[dict[str, Any]]:
    """The what-if (and its reference) re-run for each value of each knob (``specs`` from
    :func:`parse_vary`), one task per (knob, value) on ``executor`` (default: this process):
    makespan, reference and recovered time per value, in the order given."""
    items = [(knob, value) for knob, values in specs for value in values]
    task = partial(vary_row, wl, policy, fitted)
    return map_ordered(executor or SerialExecutor(), task, items)


def vary_row(wl: MeasuredWork, policy: Policy, fitted: CostModel, item: tuple[str, str]) -> dict[str, Any]:
    """One --vary value: the what-if at that knob value, without attribution or band."""
    knob, value = item
    r = replay_measured_work(wl, policy, costs=costs_at(knob, value, fitted), attribute=False, band=False)
    return {
        "knob": knob,
        "value": value,
        "makespan_ns": r.makespan_ns,
        "reference_ns": r.reference_makespan_ns,
        "recovered_ns": r.recovered_total_ns,
    }


def replay_tornado(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per knob: the lowest and highest recovered time over its values, widest swing first."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        e = out.setdefault(
            r["knob"],
            {
                "knob": r["knob"],
                "recovered_min_ns": r["recovered_ns"],
                "recovered_max_ns": r["recovered_ns"],
                "at_min": r["value"],
                "at_max": r["value"],
            },
        )
        if r["recovered_ns"] < e["recovered_min_ns"]:
            e |= {"recovered_min_ns": r["recovered_ns"], "at_min": r["value"]}
        if r["recovered_ns"] > e["recovered_max_ns"]:
            e |= {"recovered_max_ns": r["recovered_ns"], "at_max": r["value"]}
    return sorted(out.values(), key=lambda e: e["recovered_min_ns"] - e["recovered_max_ns"])


@dataclass(frozen=True)
class Exploration:
    """What was explored around one what-if before it is replayed with its causes: the policy to
    replay (under ``--split auto`` at the best split), every split's row (:func:`search_splits`),
    each ``--vary`` value's row (:func:`vary_row`) and the tornado over them (None: not asked)."""

    policy: Policy
    splits: list[dict[str, Any]] | None = None
    vary: list[dict[str, Any]] | None = None
    tornado: list[dict[str, Any]] | None = None

    @property
    def params(self) -> dict[str, Any]:
        """The policy's settings (what its replay's JSON says)."""
        return self.policy.params()


def explore_whatif(
    wl: MeasuredWork,
    policy: Policy,
    *,
    costs: CostModel,
    split: str | None = None,
    specs: Sequence[tuple[str, Sequence[str]]] = (),
    executor: Executor | None = None,
    source: str = "",
    progress: Callable[[str], None] | None = None,
) -> Exploration:
    """Around the what-if a user asks ``replay`` for, before it is replayed: with ``split="auto"``
    the best split (:func:`best_split`), then each ``--vary`` value re-run at it (:func:`vary_replay`,
    the tornado), on ``costs`` fitted (or read) once by the caller. The splits and the values run on
    ``executor`` in one session (a process pool or a Ray instance). Replays only; writes nothing."""
    from contextlib import nullcontext

    from asaptrace.executors import session

    say = progress or (lambda _msg: None)
    found = Exploration(policy=policy)
    with session(executor) if executor is not None and (split == "auto" or specs) else nullcontext():
        if split == "auto":
            say("replaying every attention/expert split of the store's device total")
            try:
                splits, best = best_split(wl, policy, costs, executor=executor)
            except UsageError as e:
                raise UsageError(str(e), path=source or None) from None
            found = replace(found, policy=best, splits=splits)
        if specs:
            say("replaying each --vary value")
            rows = vary_replay(wl, found.policy, costs, specs, executor=executor)
            found = replace(found, vary=rows, tornado=replay_tornado(rows))
    return found
