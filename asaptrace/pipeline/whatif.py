"""The pipeline's what-if room: store → replay → store, the online serving sweep, the advice that
ranks every what-if, and the policy catalogue a face builds its forms from. Every layer is imported
by the call that needs it (importing this module stays cheap).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asaptrace.errors import UsageError
from asaptrace.pipeline.store import diagnose_store, open_store
from asaptrace.userfiles import check_output_file

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from asaptrace.advise import Advice
    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.whatif.run import ReplayResult
    from asaptrace.replay.whatif.sweep_result import SweepResult
    from asaptrace.store import TraceStore


def replay_store(
    store_path: str | Path,
    policy: str = "asap",
    *,
    params: dict[str, Any] | None = None,
    settings: dict[str, Any] | None = None,
    costs: CostModel | str | Path | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    attribute: bool = True,
    split: str | None = None,
    vary: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    executor: str = "local",
    jobs: int = 1,
    ray_address: str | None = None,
    save_costs: str | Path | None = None,
) -> ReplayResult:
    """Replay a measured store under ``policy``: open → extract the workload → replay → (write).

    See :mod:`asaptrace.replay.whatif.run` for what the replay does and its JSON form; with ``out`` the
    replay is written as a store in the canonical schema (atomically), so every analysis, report
    and export works on it as on a measured run. ``split="auto"`` first replays every split of the
    store's device total (:func:`asaptrace.replay.whatif.explore.search_splits`) and replays the best;
    each ``vary`` spec (``KNOB=V1,V2``) re-runs the what-if per value (the range, a tornado).
    The splits and the values are independent replays, one task each on ``executor``
    (:func:`~asaptrace.executors.resolve_executor`: ``local`` with ``jobs`` processes, or
    ``ray`` on ``ray_address`` / a local instance); the result does not depend on it.
    ``settings`` (``replay --set``: ``POLICY.SETTING`` or ``SETTING`` → value, strings parsed by the
    setting's type, :mod:`asaptrace.replay.policies.settings`) go over ``params``.
    ``progress`` is told each stage as it starts. ``save_costs``: the cost model used, with its
    fit quality, written there as TOML (for ``--costs``).
    """
    from asaptrace.executors import resolve_executor
    from asaptrace.replay.policies import policy_of
    from asaptrace.replay.whatif.explore import explore_whatif, parse_vary
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.replayed_store import write_replay_store
    from asaptrace.replay.whatif.run import replay_measured_work, resolve_costs, save_result_costs
    from asaptrace.store import check_store_target

    t0 = time.perf_counter()
    say = progress or (lambda _m: None)
    if settings:
        from asaptrace.replay.policies.settings import policy_params

        params = (params or {}) | policy_params(policy, dict(settings))
    specs = [parse_vary(v) for v in vary]  # a bad spec fails before any simulation
    if split not in (None, "auto"):
        raise UsageError(f"--split takes auto, not {split!r}")
    if out is not None:
        check_store_target(out, overwrite=overwrite)
    runner = resolve_executor(executor, jobs=jobs, address=ray_address)  # a bad name fails here too
    say("extracting the workload")
    # the coupled replay re-runs what was measured, whatever its phase (a consistency check, on
    # a training run too); every other policy is a what-if of MoE prefill: prefill steps only
    wl = extract_measured_work(open_store(store_path), prefill_only=policy != "coupled")
    source = str(store_path)
    # fit → explore → replay → write, each one call: the costs fitted (or read) once for all of it
    fit = resolve_costs(wl, costs)
    # the policy built once from its spec and settings; explore and the replay pass the object on
    found = explore_whatif(
        wl,
        policy_of(policy, dict(params or {})),
        costs=fit.model,
        split=split,
        specs=specs,
        executor=runner,
        source=source,
        progress=progress,
    )
    say(f"replaying {policy} (reference replay, the policy, the counterfactuals of its causes)")
    result = replay_measured_work(wl, found.policy, costs=fit, attribute=attribute, source=source)
    result = replace(result, splits=found.splits, vary=found.vary, tornado=found.tornado)
    if out is not None:
        say("writing the replay store")
        result = replace(result, out=str(write_replay_store(result, wl, out, overwrite=overwrite)))
    if save_costs is not None:
        save_result_costs(result, save_costs)
    return replace(result, seconds=time.perf_counter() - t0)


def replay_refusal(store: TraceStore, policy: str) -> str | None:
    """Why ``replay --policy POLICY`` would refuse this store, in its own words (a training run, one
    device, no MoE layers), before anyone asks; None when it would run. For a face that offers a
    button: the same rules the replay refuses by, on the workload it would extract."""
    from asaptrace.info import not_prefill_reason
    from asaptrace.replay.policies import policy_of
    from asaptrace.replay.whatif.measured import extract_measured_work

    if policy != "coupled" and (why := not_prefill_reason(store.meta)):
        return why
    try:
        pol = policy_of(policy)
        why = pol.applies(extract_measured_work(store, prefill_only=policy != "coupled"))
    except UsageError as e:
        return str(e)
    return f"{pol.name} does not apply: {why}" if why else None


def advise_store(
    store_path: str | Path | TraceStore,
    *,
    diagnosis: Diagnosis | None = None,
    costs: CostModel | str | Path | None = None,
    online: bool = False,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> Advice:
    """Diagnose a store, run every what-if that applies to it at its best setting, and rank them
    (:func:`asaptrace.advise.advise`); ``online`` adds the SLO sweep of the same candidates on a
    scenario fitted to the store (:func:`asaptrace.advise.online.advise_online`), its searches on
    ``jobs`` processes (0: one per CPU, at most 8; the same answer on any number)."""
    from asaptrace.executors import TaskPool

    given = not isinstance(store_path, str | Path)  # an opened TraceStore
    if not given and not Path(store_path).is_dir():
        open_store(store_path)  # its one-line error, before any worker starts
    # 0: one worker per CPU, at most 8 (a store's searches are a few dozen tasks; each worker's
    # start costs ≈ 0.6 s of CPU)
    with TaskPool(jobs if online else 1, at_most=8) as pool:
        # the workers start (and import) at once, while this process imports, opens and diagnoses
        pool.warm("asaptrace.replay.whatif.sweep_near", "asaptrace.replay.policies")
        from asaptrace.advise import advise_store_workload
        from asaptrace.info import deployment_phrase, not_prefill_reason

        store = store_path if given else open_store(store_path)
        label = store.path.name if given else str(store_path)
        diag = diagnosis or diagnose_store(store)
        advice = advise_store_workload(
            store, diag, costs=costs, online=online, source=label, progress=progress, pool=pool
        )
    reason = not_prefill_reason(store.meta)  # e.g. a training or decode run: said in one line
    if reason and not all(w.reason and reason in w.reason for w in advice.whatifs):
        advice.notes.insert(0, reason)
    return replace(advice, deployment_phrase=deployment_phrase(store.meta.get("parallel")))


def policy_catalogue() -> list[dict[str, Any]]:
    """The one registry, for a face: each policy's family, online former, ablations and parameters
    (:func:`asaptrace.replay.policies.catalogue`), and the sweep's default policies."""
    from asaptrace.replay.policies import catalogue
    from asaptrace.replay.whatif.sweep import DEFAULT_POLICIES

    return [p | {"sweep_default": p["name"] in DEFAULT_POLICIES} for p in catalogue()]


def sweep(
    scenario: str | Path = "asap-paper",
    *,
    policies: Sequence[str] | None = None,
    rates: Sequence[float] | None = None,
    knobs: dict[str, Any] | None = None,
    costs: str | Path | None = None,
    workload: str | Path | None = None,
    lengths: str = "fit",
    decomposition_rate: float = 4.0,
    jobs: int = 1,
    vary: Sequence[str] = (),
    calibrate: str | None = None,
    progress: Any = None,
    out: str | Path | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    seeds: int = 1,
) -> SweepResult:
    """Online serving sweep: scenario (+ cost file, + knob overrides) → curves, SLO throughput,
    sensitivity (``vary``: ``"KNOB=v1,v2"``) and calibration (``calibrate``: ``"asap=350@1"``).

    Returns a :class:`~asaptrace.replay.whatif.sweep_result.SweepResult` (its JSON: docs/reference/sweep-json.md);
    with ``out`` it is also written there atomically. ``jobs``: processes over (policy, rate) points (0: one per core);
    ``executor="ray"`` runs one Ray task per (policy, rate) point instead, on ``ray_address`` or
    a local instance of ``jobs`` CPUs (0: all) — the same results either way. ``seeds``: the SLO
    search on that many seeds from the scenario's (the answer their median, with the range).
    """
    from asaptrace.replay.whatif.sensitivity import sweep_scenario

    if out is not None:
        check_output_file(out)  # before the sweep, not after it
    res = sweep_scenario(
        scenario,
        policies=policies,
        rates=rates,
        knobs=knobs,
        costs=costs,
        workload=workload,
        lengths=lengths,
        decomposition_rate=decomposition_rate,
        jobs=jobs,
        vary=vary,
        calibrate=calibrate,
        progress=progress,
        executor=executor,
        ray_address=ray_address,
        seeds=seeds,
    )
    if out is not None:
        res.write(out)
    return res


def validate_stores(measured: str | Path, other: str | Path) -> dict[str, Any]:
    """Fit the costs on ``measured``, predict ``other``'s deployment and policy (read from its
    store) and compare with what ``other`` measured: the error and Monte-Carlo band of the
    makespan, of each step and of the per-layer work, and whether the band covers the measured
    value (:func:`asaptrace.replay.whatif.validate.validate`)."""
    from asaptrace.replay.costs import fit_costs
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.model_error import self_consistency
    from asaptrace.replay.whatif.validate import validate

    a = extract_measured_work(open_store(measured))
    b = extract_measured_work(open_store(other))
    if not a.pool.height or not int(a.pool["pool_ns"].sum()):
        raise UsageError("the store has no MoE layers: nothing to fit the pool on", path=measured)
    fit = fit_costs(a)
    out = validate(a, b, fit=fit)
    return out | {"model_error": self_consistency(a, fit.model), "warnings": fit.warnings}
