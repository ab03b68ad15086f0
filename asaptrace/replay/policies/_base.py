"""Bases of the replay policies: each owns the bookkeeping, a policy overrides one hook.

* :class:`LockstepPolicy` — coupled deployments. It runs each step's chain(s) through
  :func:`~asaptrace.replay.lockstep.run_chain` and keeps the per-instance barrier state. Hook:
  :meth:`LockstepPolicy.step_chains` — which chain(s) a measured step becomes (coupled: the
  measured chain, with k_s and an expert failure applied; balanced: attention rebalanced across
  groups; chunked: one chain per chunk sub-step built from costs).
* :class:`PipelinedPolicy` — disaggregated, asynchronous deployments on the event engine
  (:mod:`asaptrace.replay.pipelined`). Hook: :meth:`PipelinedPolicy.former` — the batch former
  (asap: the store's batches on D groups; afd-pingpong: each step split into m micro-batches on
  one barriered attention group).

Every policy is a frozen dataclass whose fields are its parameters (``params()``; an ablation is a
parameter, and a named ablation such as ``asap-no-dual-batch`` is an entry of ``variants``). A
policy that can serve a request stream online also overrides :meth:`Policy.serve`, its online
batch former (arrivals → batches → per-request times under a :class:`~asaptrace.replay.scenario.Scenario`,
DOMAIN.md §6): the one registry (:data:`asaptrace.replay.policies.POLICIES`) serves the replay and
the sweep alike. Every policy also says which
*counterfactual sequence* attributes its recovered time (:meth:`Policy.counterfactuals`): a list
of (cause, policy) replays run in order from the coupled replay; each cause gets the drop from the
previous replay to its own, so the causes add up to coupled − final exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from asaptrace.replay.capacity import coupled_bounds, disaggregated_bounds
from asaptrace.replay.costs import CostModel
from asaptrace.replay.lockstep import ChainTimes, chain_from_costs, run_chain
from asaptrace.replay.measured import MeasuredWork, StepChain
from asaptrace.replay.pipelined import BatchFormer, PipelineConfig, PipelineTrace, ServiceOrder, run_pipeline

if TYPE_CHECKING:
    from asaptrace.replay.scenario import Scenario
    from asaptrace.replay.serving_types import ServingRequests, ServingResult


@dataclass(frozen=True)
class Deployment:
    """The simulated devices: attention groups × TP plus expert dies (0: fused with attention)."""

    kind: str  # coupled | disaggregated
    groups: int
    tp: int
    experts: int

    @property
    def devices(self) -> int:
        return self.groups * self.tp + (self.experts if self.kind == "disaggregated" else 0)


@dataclass
class PolicyRun:
    """What one policy replay produced (the store writer draws it; run.py turns it into numbers).

    ``batches``: one row per replayed batch — step, dp_group, micro_batch (the measured batch it
    replays; null where a policy re-cut it), ready_ns (its measured step's start: open loop) and
    done_ns. The replay's time is the **makespan** (first ready → last done), each batch's
    latency done − ready; per-step intervals are never summed (a slower what-if overlaps them).
    ``work``: the busiest resources' total work (``pool_ns``; ``attention_ns`` per group) — the
    lower bounds a makespan can never be below (DOMAIN §7).
    """

    policy: str
    params: dict[str, Any]
    deployment: Deployment
    batches: pl.DataFrame
    simulated_wait_ns: int  # Σ barrier wait over ranks and instances (0 without barriers)
    events: int  # simulated events (chain instances × ranks, or engine events)
    chains: dict[int, list[ChainTimes]] = field(default_factory=dict)
    trace: PipelineTrace | None = None
    batch_keys: dict[int, tuple] = field(default_factory=dict)
    busy: pl.DataFrame | None = None  # compute to draw in measured chains (lockstep only)
    work: dict[str, Any] = field(default_factory=dict)

    @property
    def makespan_ns(self) -> int:
        return int(self.batches["done_ns"].max() - self.batches["ready_ns"].min())

    @property
    def step_ns(self) -> dict[int, int]:
        """Per measured step: its latency, last batch done − the step's ready time."""
        per = self.batches.group_by("step").agg(
            (pl.col("done_ns").max() - pl.col("ready_ns").min()).alias("l")
        )
        return {int(s): int(v) for s, v in per.sort("step").rows()}

    def latency_ns(self) -> dict[str, int]:
        """Mean and p99 batch latency (ready → done): the offline TTFT proxy."""
        lat = (self.batches["done_ns"] - self.batches["ready_ns"]).cast(pl.Float64)
        return {"mean_ns": round(float(lat.mean())), "p99_ns": round(float(lat.quantile(0.99, "linear")))}


def batch_rows(rows: list[tuple[int, int | None, int | None, int, int]]) -> pl.DataFrame:
    """The ``batches`` frame of a :class:`PolicyRun` from (step, dp_group, micro_batch, ready, done)."""
    return pl.DataFrame(
        rows,
        schema={
            "step": pl.Int32,
            "dp_group": pl.Int32,
            "micro_batch": pl.Int32,
            "ready_ns": pl.Int64,
            "done_ns": pl.Int64,
        },
        orient="row",
    )


@dataclass(frozen=True)
class Policy:
    """Base of every policy (see the module docstring)."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    #: named ablations: ``"{name}-{variant}"`` is this policy with these parameters
    variants: ClassVar[dict[str, dict[str, Any]]] = {}
    #: what ``advise`` calls it (its what-if's label head; "" : the name)
    label: ClassVar[str] = ""
    #: the diagnosis findings (codes) its what-if answers; ``advise`` runs a policy that answers
    #: at least one, or that declares a :meth:`search` (empty and no search: not a what-if)
    answers: ClassVar[tuple[str, ...]] = ()
    #: the deployments it re-places requests across: "coupled" (a barriered run's DP groups), or
    #: None (any store); advise says why it does not apply to the others
    needs_deployment: ClassVar[str | None] = None

    def run(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        """Offline: replay a store's measured work on this policy's deployment."""
        raise NotImplementedError

    def serve(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: the batch former — arrivals → batches → per-request times, on ``scenario``'s
        deployment for this policy's family (DOMAIN.md §6). Not overridden: replay-only."""
        raise NotImplementedError

    def capacity(self, scenario: Scenario, new: np.ndarray, prefix: np.ndarray) -> dict[str, float] | None:
        """Online: the highest rate each resource of this policy's deployment can sustain on a
        workload of these request lengths (:mod:`asaptrace.replay.capacity`); None: not known (a
        user policy that does not say), and its SLO throughput is then printed without a bound."""
        return None

    @classmethod
    def online(cls) -> bool:
        """Whether the policy has an online batch former (the sweep can run it)."""
        return cls.serve is not Policy.serve

    def params(self) -> dict[str, Any]:
        """Its settings: every field, but an online-only one (:func:`serve_setting`) only when it
        differs from its default (what an offline replay reads, and any serving setting given)."""
        out = asdict(self)
        for f in fields(self):
            if f.metadata.get("online") and out[f.name] == f.default:
                del out[f.name]
        return out

    def settings(self) -> dict[str, Any]:
        """Every setting, the online ones included (what a sweep states it served)."""
        return asdict(self)

    #: the settings ``advise`` tries (each combination replayed; it keeps the one that recovers
    #: most): chunked its chunk sizes; with :attr:`searches_split`, tried at every D×T + E split
    search_settings: ClassVar[dict[str, tuple[Any, ...]]] = {}
    #: how ``advise`` names a searched setting ("chunk sizes"; default: its name)
    search_words: ClassVar[dict[str, str]] = {}
    #: advise searches its D×T + E split by replay (:func:`asaptrace.replay.explore.best_split`)
    searches_split: ClassVar[bool] = False
    #: named ablations advise also runs, at the chosen setting, as robustness what-ifs
    robustness: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def whatif_label(cls, params: dict[str, Any]) -> str:
        """Its what-if in a few words at these settings (default: its label, or its name)."""
        return cls.label or cls.name

    def serve_deployment(self) -> Deployment | None:
        """The deployment its online former serves on (None: a policy that does not say)."""
        return None

    def on_store(self, wl: MeasuredWork) -> Policy:
        """This policy with its deployment spelled out as its offline replay of ``wl`` runs it (its
        online ``serve`` then serves that very deployment)."""
        return self

    def counterfactuals(self, wl: MeasuredWork) -> list[tuple[str, Policy]]:
        """(cause, replay) in order from the reference; the last replay is this policy.

        Every replay but a last ``device_total_changed`` keeps the store's device total. Default:
        one cause named after the policy (at the store's total), then the change of total if the
        user asked for one.
        """
        here = self.at_devices(wl, wl.world_size)
        if here == self:
            return [(self.name.replace("-", "_"), self)]
        return [(self.name.replace("-", "_"), here), ("device_total_changed", self)]

    def applies(self, wl: MeasuredWork) -> str | None:
        """Why this what-if does not apply to the store (one line), or None."""
        return None

    def at_devices(self, wl: MeasuredWork, total: int) -> Policy:
        """This policy on ``total`` devices (lockstep policies run on the measured ones: itself)."""
        return self

    @classmethod
    def param_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


# ----------------------------------------------------------------------------------------- lockstep
def serve_setting(default: Any) -> Any:
    """A field the online former reads (the offline replay runs the store's own measured setup):
    listed in :meth:`Policy.params` only when set."""
    return field(default=default, metadata={"online": True})


@dataclass(frozen=True)
class LockstepPolicy(Policy):
    """Coupled lockstep steps. Offline on the store's measured D×T; online on ``attention`` (None:
    the paper's Default, :attr:`serve_attention`), each step taking queued requests FIFO up to
    ``step_tokens`` (≤ ``group_tokens`` per group), placed at step formation (``routing`` "step") or
    on arrival ("arrival"), with DeepSeek's two-micro-batch overlap when ``micro_batch_overlap``."""

    family: ClassVar[str] = "lockstep"
    #: the online D×T when ``attention`` is None: the paper's Default (DP8 × TP4, EP32)
    serve_attention: ClassVar[str] = "8x4"
    k_s: float = 1.0
    attention: str | None = serve_setting(None)
    step_tokens: int = serve_setting(262144)
    group_tokens: int = serve_setting(32768)
    routing: str = serve_setting("step")
    micro_batch_overlap: bool = serve_setting(False)

    def __post_init__(self) -> None:
        from asaptrace.errors import UsageError

        if self.routing not in ROUTINGS:
            raise UsageError(f"routing must be one of {', '.join(ROUTINGS)}, not {self.routing!r}")
        if self.attention is not None:
            parse_attention(self.attention)
        for k in ("step_tokens", "group_tokens"):
            if getattr(self, k) <= 0:
                raise UsageError(f"{self.name} {k} must be positive, not {getattr(self, k)}")

    def serve_groups(self) -> tuple[int, int]:
        """The online deployment: D groups × T dies (EP over all D·T)."""
        return parse_attention(self.attention or self.serve_attention)

    def serve_deployment(self) -> Deployment:
        d, t = self.serve_groups()
        return Deployment("coupled", d, t, d * t)

    def applies(self, wl: MeasuredWork) -> str | None:
        """A lockstep replay runs the store's own D×T: another ``attention`` is an online setting."""
        if self.attention is not None and parse_attention(self.attention) != (wl.n_groups, wl.tp):
            return (
                f"{self.name} replays the measured {wl.n_groups}×{wl.tp} "
                f"(attention {self.attention} is a deployment it serves online)"
            )
        return None

    def on_store(self, wl: MeasuredWork) -> LockstepPolicy:
        return replace(self, attention=f"{wl.n_groups}x{wl.tp}")

    def online_scenario(self, scenario: Scenario) -> Scenario:
        """The scenario with this policy's own settings over it: its collective factor ``k_s``
        multiplies the scenario's (as it multiplies the measured collectives offline)."""
        if self.k_s == 1.0:
            return scenario
        return scenario.with_knobs({"coupled_k_s": scenario.coupled_k_s * self.k_s})

    def capacity(self, scenario: Scenario, new: np.ndarray, prefix: np.ndarray) -> dict[str, float] | None:
        """Lockstep steps on the scenario's coupled D×T (EP over all dies): a step holds at most its
        token cap, or one longer prompt (:func:`~asaptrace.replay.capacity.coupled_bounds`)."""
        sc = self.online_scenario(scenario)
        d, t = self.serve_groups()
        cap = max(min(self.step_tokens, d * self.group_tokens), int(np.max(new)))
        return coupled_bounds(
            sc.costs,
            new,
            prefix,
            layers=sc.layers,
            groups=d,
            tp=t,
            max_step_tokens=cap,
            overlap=self.micro_batch_overlap,
        )

    def step_chains(self, wl: MeasuredWork, step: int, costs: CostModel) -> list[StepChain]:
        """The hook: the chain(s) measured step ``step`` replays as (default: the measured one)."""
        return [wl.chains[step] if wl.chains else chain_of_items(wl, step)]

    def run(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        """Each step's chain(s), one after another on the same devices: a rank starts a step at its
        measured start or when it finished the previous one, whichever is later (open loop)."""
        out: dict[int, list[ChainTimes]] = {}
        wait, events = 0, 0
        free: dict[int, int] = {}  # rank → when it finished its previous step
        ends: dict[int, int] = {}
        for step in wl.steps["step"].to_list():
            times = []
            t = None
            for chain in self.step_chains(wl, step, costs):
                if t is None:
                    start = np.maximum(chain.start, [free.get(int(r), _NEVER) for r in chain.ranks])
                else:
                    start = chain.start - chain.start.min() + t
                ct = run_chain(chain, start=start)
                t = int(ct.step_end.max())
                times.append(ct)
                wait += int(ct.wait_ns.sum())
                events += int(chain.part.sum())
            for ct in times:
                free.update(zip(ct.chain.ranks.tolist(), ct.step_end.tolist(), strict=True))
            out[step] = times
            ends[step] = max(int(ct.step_end.max()) for ct in times)
        groups = wl.n_groups
        return PolicyRun(
            policy=self.name,
            params=self.params(),
            deployment=Deployment("coupled", groups, wl.tp, groups * wl.tp),
            batches=lockstep_batches(wl, ends),
            simulated_wait_ns=wait,
            events=events,
            chains=out,
            busy=self.drawn_busy(wl),
        )

    def drawn_busy(self, wl: MeasuredWork) -> pl.DataFrame | None:
        """Compute rows drawn inside measured chains (None: draw the gaps themselves)."""
        return wl.busy if wl.chains else None


#: the coupled online routings: placed when the step forms, or on arrival (DOMAIN §6)
ROUTINGS = ("step", "arrival")

#: why a policy that re-places a step's requests cannot run on a store without their lengths
NO_COMPOSITION = (
    "the store has no batch composition (no request annotations, no --batches sidecar): "
    "no requests to re-place"
)

#: before any time: a rank that ran no earlier step is free from the start
_NEVER = np.iinfo(np.int64).min


def lockstep_batches(wl: MeasuredWork, ends: dict, *, per_micro_batch: bool = False) -> pl.DataFrame:
    """Batches of a lockstep replay: the measured (step, group, micro-batch)s, each done when its
    step ended (``ends[step]``), or its sub-step (``ends[(step, micro_batch)]``, −1: unknown) with
    ``per_micro_batch``; a step without items is one batch of no group."""
    ready = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
    keys = wl.items.select("step", "dp_group", "micro_batch").unique().sort("step", "dp_group", "micro_batch")

    def end(step: int, mb: int | None) -> int | None:
        return ends.get((step, -1 if mb is None else mb)) if per_micro_batch else ends.get(step)

    rows = [(s, g, m, int(ready[s]), e) for s, g, m in keys.rows() if (e := end(s, m)) is not None]
    if not per_micro_batch:
        have = set(keys["step"].to_list())
        rows += [(s, None, None, int(ready[s]), e) for s, e in ends.items() if s not in have]
    return batch_rows(rows)


def chain_of_items(wl: MeasuredWork, step: int) -> StepChain:
    """A lockstep chain for a store without barriers (disaggregated): micro-batches serialised."""
    it = wl.items.filter(pl.col("step") == step)
    layers = wl.layers
    attn = np.zeros((wl.n_groups, layers), np.int64)
    attn_sum = it.group_by("dp_group", "layer").agg(pl.col("attn_ns").sum())
    attn[attn_sum["dp_group"].to_numpy(), attn_sum["layer"].to_numpy()] = attn_sum["attn_ns"].to_numpy()
    pool = wl.pool.filter(pl.col("step") == step).group_by("layer").agg(pl.col("pool_ns").sum())
    moe = np.zeros(layers, np.int64)
    moe[pool["layer"].to_numpy()] = pool["pool_ns"].to_numpy()
    xf = (
        wl.transfers.filter(pl.col("step") == step)
        .group_by("layer")
        .agg(pl.col("dispatch_ns").sum(), pl.col("combine_ns").sum())
    )
    disp = np.zeros(layers, np.int64)
    comb = np.zeros(layers, np.int64)
    disp[xf["layer"].to_numpy()] = xf["dispatch_ns"].to_numpy()
    comb[xf["layer"].to_numpy()] = xf["combine_ns"].to_numpy()
    start = int(wl.steps.filter(pl.col("step") == step)["start_ns"][0])
    return chain_from_costs(attn, moe, disp, comb, tp=wl.tp, step=step, start_ns=start)


# ---------------------------------------------------------------------------------------- pipelined
@dataclass(frozen=True)
class PipelinedPolicy(Policy):
    family: ClassVar[str] = "pipelined"
    #: try one slot as well as two and keep the faster (see :meth:`run`)
    interleave_choice: ClassVar[bool] = True
    #: the online D×T + E when ``attention`` / ``experts`` are None: the paper's ASAP (4×4 + 16)
    serve_attention: ClassVar[str] = "4x4"
    serve_experts: ClassVar[int] = 16
    searches_split: ClassVar[bool] = True
    attention: str | None = None  # "DxT"; None: half the measured devices in groups of the measured TP
    experts: int | None = None  # None: the rest of the measured device total
    dual_batch: bool = True
    overlap: bool = True
    super_kernel: bool = True
    long_tokens: int = 16384
    buffer_slots: int = 64
    expert_failure: bool = False

    def former(self, wl: MeasuredWork, costs: CostModel, dep: Deployment) -> BatchFormer:
        """The hook: who forms the batches and what each costs on ``dep``."""
        raise NotImplementedError

    def slots(self) -> int:
        return 2 if self.dual_batch else 1

    def deployment(self, wl: MeasuredWork) -> Deployment:
        return resolve_deployment(wl, self.attention, self.experts)

    def applies(self, wl: MeasuredWork) -> str | None:
        """Why this disaggregated what-if does not apply to the store (None: it does)."""
        if wl.world_size < 2:
            return f"the store has {wl.world_size} device: nothing to split into attention and expert dies"
        if wl.pool.height == 0 or int(wl.pool["pool_ns"].sum()) == 0:
            return "the store has no MoE layers (no expert work measured): nothing to disaggregate"
        return None

    def at_devices(self, wl: MeasuredWork, total: int) -> PipelinedPolicy:
        """The same policy on ``total`` devices: the same attention D×T with the rest as experts, or
        (when that leaves no expert die) the default split of ``total``."""
        dep = resolve_deployment(wl, self.attention, self.experts)
        if dep.groups * dep.tp < total:
            return replace(self, attention=f"{dep.groups}x{dep.tp}", experts=total - dep.groups * dep.tp)
        d = max(1, (total // 2) // dep.tp)
        return replace(self, attention=f"{d}x{dep.tp}", experts=max(1, total - d * dep.tp))

    def run(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        """Simulate; ablations that only lengthen items replay the full run's service order.

        1. the full mechanisms (super kernel, overlap) are simulated first coming, first served —
           for ASAP with dual batch, both with two slots and with one, keeping the one of smaller
           makespan (a runtime that can interleave can also not; DOMAIN §6 already turns it off
           per batch) — a run-level choice, so an ablation is never faster by construction;
        2. with the super kernel or the overlap switched off, the same schedule is replayed in the
           same service order with the longer items (:class:`~asaptrace.replay.pipelined.ServiceOrder`),
           so an ablation never makes the replay faster.
        """
        dep = self.deployment(wl)
        former = self.former(wl, costs, dep)
        given = getattr(former, "batches", [])
        keys = {b.batch_id: (b.step, *b.key) for b in given}
        ready = {b.batch_id: b.ready_ns for b in given}
        chosen = self._simulate(dep, former, self.slots(), full=True, launch_ns=costs.launch_ns)
        if self.interleave_choice and self.slots() > 1:
            single = self._simulate(dep, former, 1, full=True, launch_ns=costs.launch_ns)
            if _makespan(single, ready) < _makespan(chosen, ready):
                chosen = single
        trace = chosen
        if not (self.super_kernel and self.overlap):
            trace = self._simulate(
                dep,
                former.placed(chosen.group_of),
                chosen.slots,
                full=False,
                launch_ns=costs.launch_ns,
                order=ServiceOrder.of(chosen),
            )
        return PolicyRun(
            policy=self.name,
            params=self.params(),
            deployment=dep,
            batches=pipelined_batches(trace, keys, ready),
            simulated_wait_ns=0,
            events=trace.events + (chosen.events if trace is not chosen else 0),
            trace=trace,
            batch_keys=keys,
            work=pipeline_work(trace),
        )

    def _simulate(
        self, dep: Deployment, former: BatchFormer, slots: int, *, full: bool, launch_ns: int, order=None
    ) -> PipelineTrace:
        cfg = PipelineConfig(
            groups=dep.groups,
            slots=slots,
            buffer_slots=self.buffer_slots,
            overlap=True if full else self.overlap,
            comm_share=dep.tp / max(self.live_experts(dep), 1),
            launch_ns=0 if (full or self.super_kernel) else launch_ns,
        )
        trace = run_pipeline(cfg, former.fresh(), order=order)
        trace.slots = slots
        return trace

    def live_experts(self, dep: Deployment) -> int:
        return dep.experts - 1 if self.expert_failure else dep.experts

    def serve_deployment(self) -> Deployment:
        """The online deployment: ``attention`` D×T and ``experts`` (None: :attr:`serve_attention`,
        :attr:`serve_experts`) — what ``replay --attention 5x4 --experts 12`` replays is what is
        served."""
        from asaptrace.errors import UsageError

        d, t = parse_attention(self.attention or self.serve_attention)
        e = self.experts if self.experts is not None else self.serve_experts
        if e < 1:
            raise UsageError(f"{self.name} needs at least one expert die, not {e}")
        if self.expert_failure and e < 2:
            raise UsageError("expert_failure needs at least two expert dies")
        return Deployment("disaggregated", d, t, e)

    def on_store(self, wl: MeasuredWork) -> PipelinedPolicy:
        dep = resolve_deployment(wl, self.attention, self.experts)
        return replace(self, attention=f"{dep.groups}x{dep.tp}", experts=dep.experts)

    def capacity(self, scenario: Scenario, new: np.ndarray, prefix: np.ndarray) -> dict[str, float] | None:
        """Attention groups and the pool of the served deployment (items of at most a batch's cap;
        one expert die fewer with ``expert_failure``)."""
        dep = self.serve_deployment()
        return disaggregated_bounds(
            scenario.costs,
            new,
            prefix,
            layers=scenario.layers,
            groups=dep.groups,
            tp=dep.tp,
            experts=self.live_experts(dep),
            max_item_tokens=self.max_item_tokens(),
        )

    def max_item_tokens(self) -> int:
        """The most new tokens the online former puts in one pool item (default: 32K, a prompt's cap)."""
        return 32768


def _makespan(trace: PipelineTrace, ready: dict[int, int]) -> int:
    return max(trace.done.values()) - min(ready[b] for b in trace.done)


def pipelined_batches(trace: PipelineTrace, keys: dict[int, tuple], ready: dict[int, int]) -> pl.DataFrame:
    """Batches of a pipelined replay: each measured batch's key, ready time and completion."""
    rows = []
    for bid, done in sorted(trace.done.items()):
        step, g, mb = keys[bid][:3]
        rows.append((step, g, None if mb is None or mb < 0 else mb, ready[bid], done))
    return batch_rows(rows)


def pipeline_work(trace: PipelineTrace) -> dict[str, Any]:
    """The pool's and each attention group's total busy time (what a makespan cannot be below)."""
    attn: dict[int, int] = {}
    for _b, g, _layer, t0, t1 in trace.attention:
        attn[g] = attn.get(g, 0) + t1 - t0
    return {"pool_ns": sum(t1 - t0 for *_x, t0, t1 in trace.moe), "attention_ns": attn}


def resolve_deployment(wl: MeasuredWork, attention: str | None, experts: int | None) -> Deployment:
    """'DxT' and E, defaulting to the measured device total split in half (DOMAIN §2: 4×4 + 16)."""
    from asaptrace.errors import UsageError

    total = wl.world_size
    if attention is None:
        t = wl.tp
        d = max(1, (total // 2) // t)
    else:
        d, t = parse_attention(attention)
    e = experts if experts is not None else max(1, total - d * t)
    if e < 1:
        raise UsageError(f"--experts must be at least 1, not {e}")
    return Deployment("disaggregated", d, t, e)


def parse_attention(attention: str) -> tuple[int, int]:
    """'4x4' → (4, 4): DP groups × TP; a one-line UsageError otherwise."""
    from asaptrace.errors import UsageError

    try:
        d_s, t_s = attention.lower().replace("×", "x").split("x")
        d, t = int(d_s), int(t_s)
    except ValueError:
        raise UsageError(f"--attention must look like 4x4 (DP groups x TP), not {attention!r}") from None
    if d < 1 or t < 1:
        raise UsageError(f"--attention needs positive counts, not {attention!r}")
    return d, t
