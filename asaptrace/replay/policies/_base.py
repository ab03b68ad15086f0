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

Every policy is a frozen dataclass whose fields are its parameters (``params()``), and says which
*counterfactual sequence* attributes its recovered time (:meth:`Policy.counterfactuals`): a list
of (cause, policy) replays run in order from the coupled replay; each cause gets the drop from the
previous replay to its own, so the causes add up to coupled − final exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import numpy as np
import polars as pl

from asaptrace.replay.costs import CostModel
from asaptrace.replay.lockstep import ChainTimes, chain_from_costs, run_chain
from asaptrace.replay.pipelined import BatchFormer, PipelineConfig, PipelineTrace, ServiceOrder, run_pipeline
from asaptrace.replay.workload import StepChain, Workload


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
    """What one policy replay produced (the store writer draws it; api turns it into numbers)."""

    policy: str
    params: dict[str, Any]
    deployment: Deployment
    step_ns: dict[int, int]  # replayed step time per measured step
    simulated_wait_ns: int  # Σ barrier wait over ranks and instances (0 without barriers)
    events: int  # simulated events (chain instances × ranks, or engine events)
    chains: dict[int, list[ChainTimes]] = field(default_factory=dict)
    trace: PipelineTrace | None = None
    batch_keys: dict[int, tuple] = field(default_factory=dict)
    busy: pl.DataFrame | None = None  # compute to draw in measured chains (lockstep only)


@dataclass(frozen=True)
class Policy:
    """Base of every policy (see the module docstring)."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = ""

    def run(self, wl: Workload, costs: CostModel) -> PolicyRun:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        return asdict(self)

    def counterfactuals(self, wl: Workload) -> list[tuple[str, Policy]]:
        """(cause, replay) in order; the last replay is this policy. Default: one cause, its name."""
        return [(self.name.replace("-", "_"), self)]

    @classmethod
    def param_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


# ----------------------------------------------------------------------------------------- lockstep
@dataclass(frozen=True)
class LockstepPolicy(Policy):
    family: ClassVar[str] = "lockstep"
    k_s: float = 1.0

    def step_chains(self, wl: Workload, step: int, costs: CostModel) -> list[StepChain]:
        """The hook: the chain(s) measured step ``step`` replays as (default: the measured one)."""
        return [wl.chains[step] if wl.chains else chain_of_items(wl, step)]

    def run(self, wl: Workload, costs: CostModel) -> PolicyRun:
        out: dict[int, list[ChainTimes]] = {}
        step_ns, wait, events = {}, 0, 0
        for step in wl.steps["step"].to_list():
            times = []
            t = None
            for chain in self.step_chains(wl, step, costs):
                start = chain.start if t is None else chain.start - chain.start.min() + t
                ct = run_chain(chain, start=start)
                t = int(ct.step_end.max())
                times.append(ct)
                wait += int(ct.wait_ns.sum())
                events += int(chain.part.sum())
            out[step] = times
            step_ns[step] = int(times[-1].step_end.max() - times[0].start.min())
        groups = wl.n_groups
        return PolicyRun(
            policy=self.name,
            params=self.params(),
            deployment=Deployment("coupled", groups, wl.tp, groups * wl.tp),
            step_ns=step_ns,
            simulated_wait_ns=wait,
            events=events,
            chains=out,
            busy=self.drawn_busy(wl),
        )

    def drawn_busy(self, wl: Workload) -> pl.DataFrame | None:
        """Compute rows drawn inside measured chains (None: draw the gaps themselves)."""
        return wl.busy if wl.chains else None


def chain_of_items(wl: Workload, step: int) -> StepChain:
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
    attention: str | None = None  # "DxT"; None: half the measured devices in groups of the measured TP
    experts: int | None = None  # None: the rest of the measured device total
    dual_batch: bool = True
    overlap: bool = True
    super_kernel: bool = True
    long_tokens: int = 16384
    buffer_slots: int = 64
    expert_failure: bool = False

    def former(self, wl: Workload, costs: CostModel, dep: Deployment) -> BatchFormer:
        """The hook: who forms the batches and what each costs on ``dep``."""
        raise NotImplementedError

    def slots(self) -> int:
        return 2 if self.dual_batch else 1

    def deployment(self, wl: Workload) -> Deployment:
        return resolve_deployment(wl, self.attention, self.experts)

    def run(self, wl: Workload, costs: CostModel) -> PolicyRun:
        """Simulate; ablations that only lengthen items replay the full run's service order.

        1. the full mechanisms (super kernel, overlap) are simulated first coming, first served —
           for ASAP with dual batch, both with two slots and with one, keeping the faster (a
           runtime that can interleave can also not; DOMAIN §6 already turns it off per batch);
        2. with the super kernel or the overlap switched off, the same schedule is replayed in the
           same service order with the longer items (:class:`~asaptrace.replay.pipelined.ServiceOrder`),
           so an ablation never makes the replay faster.
        """
        dep = self.deployment(wl)
        former = self.former(wl, costs, dep)
        keys = {b.batch_id: (b.step, *b.key) for b in getattr(former, "batches", [])}
        starts = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
        chosen = self._simulate(dep, former, self.slots(), full=True, launch_ns=costs.launch_ns)
        if self.interleave_choice and self.slots() > 1:
            single = self._simulate(dep, former, 1, full=True, launch_ns=costs.launch_ns)
            if sum(_step_ns(single, keys, starts).values()) < sum(_step_ns(chosen, keys, starts).values()):
                chosen = single
        trace = chosen
        if not (self.super_kernel and self.overlap):
            trace = self._simulate(
                dep,
                former,
                chosen.slots,
                full=False,
                launch_ns=costs.launch_ns,
                order=ServiceOrder.of(chosen),
            )
        return PolicyRun(
            policy=self.name,
            params=self.params(),
            deployment=dep,
            step_ns=_step_ns(trace, keys, starts),
            simulated_wait_ns=0,
            events=trace.events + (chosen.events if trace is not chosen else 0),
            trace=trace,
            batch_keys=keys,
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


def _step_ns(trace: PipelineTrace, keys: dict[int, tuple], starts: dict[int, int]) -> dict[int, int]:
    """Per measured step: its last batch's completion − the step's measured start."""
    end: dict[int, int] = {}
    for bid, t in trace.done.items():
        s = keys[bid][0]
        end[s] = max(end.get(s, t), t)
    return {s: int(end[s] - starts[s]) for s in sorted(end)}


def resolve_deployment(wl: Workload, attention: str | None, experts: int | None) -> Deployment:
    """'DxT' and E, defaulting to the measured device total split in half (DOMAIN §2: 4×4 + 16)."""
    from asaptrace.errors import UsageError

    total = wl.world_size
    if attention is None:
        t = wl.tp
        d = max(1, (total // 2) // t)
    else:
        try:
            d_s, t_s = attention.lower().split("x")
            d, t = int(d_s), int(t_s)
        except ValueError:
            raise UsageError(f"--attention must look like 4x4 (DP groups x TP), not {attention!r}") from None
        if d < 1 or t < 1:
            raise UsageError(f"--attention needs positive counts, not {attention!r}")
    e = experts if experts is not None else max(1, total - d * t)
    if e < 1:
        raise UsageError(f"--experts must be at least 1, not {e}")
    return Deployment("disaggregated", d, t, e)
