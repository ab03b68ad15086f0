"""The replay entry point: ``replay_store(store, policy, ...) -> ReplayResult`` (and its JSON form).

What it does, in order:

1. extract the workload (:func:`~asaptrace.replay.workload.extract_workload`);
2. take the cost model: a :class:`CostModel`, a TOML file, or (default) one fitted to the store
   (:func:`~asaptrace.replay.costs.fit_costs`; each part keeps the DOMAIN defaults when the
   store cannot fit it);
3. run the **reference replay** — ``coupled`` on a coupled store, ``asap`` on the measured device
   counts (no long-prompt rule) on a disaggregated one — and compare it with the measured step
   times: the reproduction error (mean and max % over steps) quoted with every what-if;
4. run the requested policy;
5. attribute the recovered time: starting from the coupled replay, run the policy's
   counterfactual sequence (:meth:`Policy.counterfactuals`); each cause gets the drop from the
   previous replay to its own, so Σ causes = coupled replay − policy replay (checked, an
   :class:`~asaptrace.errors.AccountingError` if not);
6. optionally write the replay as a store (atomic, :class:`~asaptrace.store.StoreWriter`).

JSON form (:meth:`ReplayResult.to_json`, ``schema_version`` 1; documented in
``docs/analyses/replay.md``)::

    {"schema_version": 1, "store", "policy", "params", "deployment": {kind, groups, tp, experts, devices},
     "reference_policy", "steps": [{"step", "measured_ns", "reference_ns", "replayed_ns"}],
     "measured_ns", "reference_ns", "baseline_ns", "replayed_ns",
     "error_mean_pct", "error_max_pct", "recovered_ns": {cause: ns}, "recovered_total_ns",
     "simulated_wait_ns", "events", "seconds", "costs": {...}, "cost_fit": {...} | null, "notes": [str],
     "out": path | null}
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from asaptrace.errors import AccountingError, UsageError
from asaptrace.replay.costs import CostModel, fit_costs, load_costs, save_costs
from asaptrace.replay.policies import POLICIES, Asap, Coupled, Policy, PolicyRun
from asaptrace.replay.replayed_store import replay_meta, replay_tables
from asaptrace.replay.workload import Workload, extract_workload
from asaptrace.store import StoreWriter, TraceStore

SCHEMA_VERSION = 1


@dataclass
class ReplayResult:
    """Measured vs replayed step times, the reproduction error, recovered time by cause."""

    store: str
    policy: str
    params: dict[str, Any]
    deployment: dict[str, Any]
    reference_policy: str
    steps: list[dict[str, int]]
    error_mean_pct: float
    error_max_pct: float
    baseline_ns: int
    recovered_ns: dict[str, int]
    simulated_wait_ns: int
    events: int
    seconds: float
    costs: dict[str, Any]
    cost_fit: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    out: str | None = None
    run: PolicyRun | None = field(default=None, repr=False)

    @property
    def measured_ns(self) -> int:
        return sum(s["measured_ns"] for s in self.steps)

    @property
    def reference_ns(self) -> int:
        return sum(s["reference_ns"] for s in self.steps)

    @property
    def replayed_ns(self) -> int:
        return sum(s["replayed_ns"] for s in self.steps)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "store": self.store,
            "policy": self.policy,
            "params": self.params,
            "deployment": self.deployment,
            "reference_policy": self.reference_policy,
            "steps": self.steps,
            "measured_ns": self.measured_ns,
            "reference_ns": self.reference_ns,
            "baseline_ns": self.baseline_ns,
            "replayed_ns": self.replayed_ns,
            "error_mean_pct": self.error_mean_pct,
            "error_max_pct": self.error_max_pct,
            "recovered_ns": self.recovered_ns,
            "recovered_total_ns": sum(self.recovered_ns.values()),
            "simulated_wait_ns": self.simulated_wait_ns,
            "events": self.events,
            "seconds": round(self.seconds, 4),
            "costs": self.costs,
            "cost_fit": self.cost_fit,
            "notes": self.notes,
            "out": self.out,
        }


def make_policy(name: str, params: dict[str, Any] | None = None) -> Policy:
    """The registered policy ``name`` with ``params`` (unknown parameter: UsageError)."""
    cls = POLICIES.get(name)
    params = {k: v for k, v in (params or {}).items() if v is not None}
    unknown = sorted(set(params) - set(cls.param_names()))
    if unknown:
        raise UsageError(
            f"policy {name!r} has no parameter {', '.join(unknown)} (it has: {', '.join(cls.param_names())})"
        )
    return cls(**params)


def reference_policy(wl: Workload) -> Policy:
    """The replay that must reproduce the measured run: its own deployment's semantics."""
    if wl.deployment == "coupled":
        return Coupled()
    return Asap(
        attention=f"{wl.n_groups}x{wl.tp}",
        experts=wl.expert_ranks,
        dual_batch=wl.micro_batches > 1,
        long_tokens=0,
    )


def resolve_costs(wl: Workload, costs: CostModel | str | Path | None) -> tuple[CostModel, dict | None]:
    if isinstance(costs, CostModel):
        return costs, None
    if costs is not None:
        return load_costs(costs), None
    fit = fit_costs(wl)
    return fit.model, fit.quality


def replay_store(
    store_path: str | Path,
    policy: str = "asap",
    *,
    params: dict[str, Any] | None = None,
    costs: CostModel | str | Path | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    attribute: bool = True,
) -> ReplayResult:
    """Replay a measured store under ``policy`` (see the module docstring)."""
    t0 = time.perf_counter()
    pol = make_policy(policy, params)
    wl = extract_workload(TraceStore.open(store_path))
    model, quality = resolve_costs(wl, costs)
    ref_pol = reference_policy(wl)
    ref = ref_pol.run(wl, model)
    run = ref if pol == ref_pol else pol.run(wl, model)
    baseline = ref if isinstance(ref_pol, Coupled) else Coupled().run(wl, model)
    for p, r in ((ref_pol, ref), (pol, run)):
        missing = sorted(set(wl.steps["step"].to_list()) - set(r.step_ns))
        if missing:
            raise UsageError(
                f"policy {p.name!r} found no per-layer work to replay in step(s) {missing} "
                "(it needs attention and MoE layers segmented in the store)",
                path=store_path,
            )
    recovered = attribute_recovered(pol, wl, model, baseline, run) if attribute else {}
    steps = [
        {
            "step": int(s),
            "measured_ns": int(m),
            "reference_ns": int(ref.step_ns[s]),
            "replayed_ns": int(run.step_ns[s]),
        }
        for s, m in wl.steps.select("step", "measured_ns").rows()
    ]
    errors = [
        abs(r["reference_ns"] - r["measured_ns"]) / r["measured_ns"] * 100 for r in steps if r["measured_ns"]
    ]
    result = ReplayResult(
        store=str(store_path),
        policy=pol.name,
        params=_jsonable(pol.params()),
        deployment={**asdict(run.deployment), "devices": run.deployment.devices},
        reference_policy=ref_pol.name,
        steps=steps,
        error_mean_pct=round(sum(errors) / len(errors), 4) if errors else 0.0,
        error_max_pct=round(max(errors), 4) if errors else 0.0,
        baseline_ns=sum(baseline.step_ns.values()),
        recovered_ns=recovered,
        simulated_wait_ns=run.simulated_wait_ns,
        events=run.events,
        seconds=0.0,
        costs=model.to_dict(),
        cost_fit=quality,
        notes=list(wl.notes),
        run=run,
    )
    if out is not None:
        result.out = str(write_replay(result, wl, out, overwrite=overwrite))
    result.seconds = time.perf_counter() - t0
    return result


def attribute_recovered(
    pol: Policy, wl: Workload, costs: CostModel, baseline: PolicyRun, final: PolicyRun
) -> dict[str, int]:
    """Recovered time by cause along the policy's counterfactual sequence (adds up exactly)."""
    prev = sum(baseline.step_ns.values())
    out: dict[str, int] = {}
    for cause, p in pol.counterfactuals(wl):
        total = sum((final if p == pol else p.run(wl, costs)).step_ns.values())
        out[cause] = out.get(cause, 0) + prev - total
        prev = total
    want = sum(baseline.step_ns.values()) - sum(final.step_ns.values())
    if sum(out.values()) != want:
        raise AccountingError(f"recovered time by cause adds up to {sum(out.values())} ns, not {want} ns")
    return out


def write_replay(result: ReplayResult, wl: Workload, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write ``result``'s replay as a store at ``out`` (atomically)."""
    run = result.run
    if run is None:
        raise UsageError("this result holds no replay to write")
    tables = replay_tables(run, wl)
    n = tables["events"].num_rows
    extra = {
        "accounting": {"read": n, "kept": n, "kept_by_table": {"events": n}, "rejected": {}},
        "replay": {
            "of": wl.source,
            "policy": result.policy,
            "params": result.params,
            "deployment": result.deployment,
            "reference_policy": result.reference_policy,
            "error_mean_pct": result.error_mean_pct,
            "error_max_pct": result.error_max_pct,
            "simulated_wait_ns": result.simulated_wait_ns,
            "steps": result.steps,
            "recovered_ns": result.recovered_ns,
            "costs": result.costs,
            "cost_fit": result.cost_fit,
        },
    }
    with StoreWriter(out, overwrite=overwrite) as w:
        w.write_part("events", "replay", tables["events"])
        for name in ("ranks", "streams", "batches"):
            w.write_table(name, tables[name])
        store = w.commit(replay_meta(run, wl, extra))
    return store.path


def save_result_costs(result: ReplayResult, path: str | Path) -> Path:
    """Write the cost model a replay used (with its fit quality) as TOML for ``--costs``."""
    values = {k: v for k, v in result.costs.items() if k != "source"}
    model = CostModel(**values, source=str(result.costs.get("source", "")))
    return save_costs(model, path, quality=result.cost_fit)


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, int | float | str | bool | type(None)) else str(v)) for k, v in d.items()}
