"""Bases of the replay policies: each owns the bookkeeping, a policy overrides one hook.

* :class:`LockstepPolicy` — coupled deployments. It runs each step's chain(s) through
  :func:`~asaptrace.replay.mechanics.lockstep.run_chain` and keeps the per-instance barrier state. Hook:
  :meth:`LockstepPolicy.step_chains` — which chain(s) a measured step becomes (coupled: the
  measured chain, with k_s and an expert failure applied; balanced: attention rebalanced across
  groups; chunked: one chain per chunk sub-step built from costs).
* :class:`~asaptrace.replay.policies.pipelined_base.PipelinedPolicy` (its own module) —
  disaggregated, asynchronous deployments on the event engine (:mod:`asaptrace.replay.mechanics.pipelined`).
  Hook: ``PipelinedPolicy.former`` — the batch former (asap: the store's batches on D groups;
  afd-pingpong: each step split into m micro-batches on one barriered attention group).

Every policy is a frozen dataclass whose fields are its parameters (``params()``; an ablation is a
parameter, and a named ablation such as ``asap-no-dual-batch`` is an entry of ``variants``). A
policy that can serve a request stream online names its online batch former class
(``online_former``: arrivals → batches → per-request times under a
:class:`~asaptrace.replay.serving.scenario.Scenario`, DOMAIN.md §6), which its family's loop runs
(:meth:`Policy.serve`); the one registry (:data:`asaptrace.replay.policies.POLICIES`) serves the
replay and the sweep alike. A subclass keeps its own ``label``, ``variants`` and ``robustness``
(each class declares its own: an asap subclass is not labelled "asap" nor runs asap's ablations). Every policy also says which
*counterfactual sequence* attributes its recovered time (:meth:`Policy.counterfactuals`): a list
of (cause, policy) replays run in order from the coupled replay; each cause gets the drop from the
previous replay to its own, so the causes add up to coupled − final exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.deployment import Deployment
from asaptrace.replay.mechanics.lockstep import ChainTimes, chain_from_costs, run_chain
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain
from asaptrace.replay.policies.lockstep_online import serve_lockstep
from asaptrace.replay.serving.capacity import coupled_bounds

if TYPE_CHECKING:
    from asaptrace.replay.mechanics.pipelined import PipelineTrace
    from asaptrace.replay.serving.requests import ServingRequests, ServingResult
    from asaptrace.replay.serving.scenario import Scenario


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
    #: its online batch former (a class its family's loop runs; None: replay-only)
    online_former: ClassVar[type | None] = None

    def __init_subclass__(cls, **kw: Any) -> None:
        """What names a policy is its own: a subclass that does not declare a label, variants or
        robustness what-ifs has none (it does not say "asap" nor run asap's ablations)."""
        super().__init_subclass__(**kw)
        for own, empty in (("label", ""), ("variants", {}), ("robustness", ())):
            if own not in cls.__dict__:
                setattr(cls, own, empty)

    def run(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        """Offline: replay a store's measured work on this policy's deployment."""
        raise NotImplementedError

    def makespan(self, wl: MeasuredWork, costs: CostModel) -> int:
        """:meth:`run`'s makespan alone (a Monte-Carlo band's draw needs nothing else): a family
        that can reach it without building the rest of the run says so by overriding this."""
        return self.run(wl, costs).makespan_ns

    def serve(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: arrivals → batches → per-request times on this policy's own deployment and
        mechanisms (its fields), under ``scenario``'s layers, costs and SLO (DOMAIN.md §6): its
        ``online_former`` on its family's loop (:meth:`serve_former`). No former: replay-only."""
        if type(self).online_former is None:
            raise NotImplementedError(f"{self.name} has no online former")
        return self.serve_former(requests, scenario)

    def serve_former(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """The family's online loop running ``online_former`` (lockstep steps, the pipeline)."""
        raise NotImplementedError

    def capacity(self, scenario: Scenario, new: np.ndarray, prefix: np.ndarray) -> dict[str, float] | None:
        """Online: the highest rate each resource of this policy's deployment can sustain on a
        workload of these request lengths (:mod:`asaptrace.replay.serving.capacity`); None: not known (a
        user policy that does not say), and its SLO throughput is then printed without a bound."""
        return None

    @classmethod
    def online(cls) -> bool:
        """Whether the policy has an online batch former (the sweep can run it)."""
        return cls.online_former is not None or cls.serve is not Policy.serve

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
    #: advise searches its D×T + E split by replay (:func:`asaptrace.replay.whatif.explore.best_split`)
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

    def served(self) -> dict[str, Any]:
        """What it is served with (a sweep's ``policy_settings``): its deployment (kind, groups,
        tp, experts, devices; None when it does not say) and every setting."""
        dep = self.serve_deployment()
        return {
            "deployment": None if dep is None else {**asdict(dep), "devices": dep.devices},
            "settings": self.settings(),
        }

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


def form_setting(default: Any, text: str) -> Any:
    """A setting a face's form offers, said in ``text`` (the dashboard's Replay page generates one
    input per such setting of the registry, a checkbox for a bool: :func:`~asaptrace.replay.policies.catalogue`)."""
    return field(default=default, metadata={"form": text})


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

    def serve_former(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: its ``online_former`` (a :class:`~asaptrace.replay.policies.lockstep_online.LockstepFormer`)
        in lockstep steps, under the scenario with its own settings over it (:meth:`online_scenario`)."""
        sc = self.online_scenario(scenario)
        former = type(self).online_former(requests, sc, self)  # type: ignore[misc]
        return serve_lockstep(requests, sc, former, self.name)

    def capacity(self, scenario: Scenario, new: np.ndarray, prefix: np.ndarray) -> dict[str, float] | None:
        """Lockstep steps on its online D×T (EP over all dies): a step holds at most its
        token cap, or one longer prompt (:func:`~asaptrace.replay.serving.capacity.coupled_bounds`)."""
        sc = self.online_scenario(scenario)
        d, t = self.serve_groups()
        return coupled_bounds(
            sc.costs,
            new,
            prefix,
            layers=sc.layers,
            groups=d,
            tp=t,
            max_step_tokens=self.step_token_cap(d, new),
            overlap=self.micro_batch_overlap,
        )

    def step_token_cap(self, groups: int, new: np.ndarray) -> int:
        """The most new tokens one online step holds: its token cap, or one longer prompt."""
        return max(min(self.step_tokens, groups * self.group_tokens), int(np.max(new)))

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
