"""``asap``: ASAP's disaggregated, asynchronous prefill (docs/analyses/replay.md).

D×T attention dies (``attention="DxT"``) and an E-die MoE pool (``experts``), defaulting to the
measured device total split in half (a 32-die store: 4×4 + 16). Dispatch and combine are
asynchronous with back-pressure (``buffer_slots``), the pool serves (batch, layer) items FIFO in
any order, dual-batch interleaving (``dual_batch``, off for a batch holding a prompt longer than
``long_tokens``), overlap of communication on the pool (``overlap``) and the layer-oblivious super
kernel (``super_kernel``; off: + the cost model's launch overhead per MoE item). With
``expert_failure`` one expert die is lost and its experts move to the others (E − 1 dies serve).

Hook: :meth:`Asap.former` hands out the store's measured batches (one per step, DP group and
micro-batch), costed on the target deployment (:mod:`asaptrace.replay.mechanics.offline`), each ready when
its measured step began. Online (the sweep, ``advise --online``) its former :class:`AsapFormer`
cuts batches from arrivals on the pipelined mechanics
(:mod:`asaptrace.replay.policies.pipelined_online`), asked whenever a group has a free slot
(least-occupied group first) and at every arrival:

* a batch takes queued requests in :meth:`~AsapFormer.order` (FIFO) while
  :meth:`~AsapFormer.admit` lets them in: until it holds ≥ ``min_batch_tokens`` new tokens, never
  more than ``max_batch_tokens`` (with less queued it takes what is there: work-conserving, no
  timeout);
* with dual-batch, a batch holding a prompt of more than ``long_tokens`` new tokens runs alone on
  an idle group: cut for a busy group, it reserves that group, which then takes no other batch
  until it has drained and the long batch has started;
* each batch's per-layer costs come from :func:`asaptrace.replay.mechanics.formers.batch_costs`,
  and each request's own kernel time is its share of them (attention by its variable cost, the
  rest by tokens).

Online ablations are the same switches read by the pipeline: ``dual_batch`` off one slot,
``overlap`` off the pool also serialises (T/E)·(dispatch + combine) per item, ``super_kernel`` off
+ ``launch_ms`` per pool item, ``expert_failure`` E − 1 dies serve.
With ``asynchronous=False`` the same split runs in lockstep, a barrier at every dispatch and
combine (:func:`~asaptrace.replay.mechanics.offline.lockstep_split_steps`): the first step of the
counterfactual sequence.

Counterfactual sequence (recovered time by cause, each the drop from the previous replay; every
replay on the store's device total N, DOMAIN §7):

1. ``split_cost``: coupled → the requested D×T + E (or, when that is not N devices, the same
   attention with N − D·T expert dies) in lockstep, barrier kept, no dual batch, no overlap, host
   launches (may be negative: fewer attention dies);
2. ``barrier_wait_removed``: → asynchronous, no barrier;
3. ``overlap_gained``: + dual-batch interleaving and pool overlap as requested;
4. ``launch_overhead_removed``: + the super kernel as requested;
5. ``expert_failure``: one expert die lost, when asked;
6. ``device_total_changed``: the requested deployment, only when its total is not N.

A coupled store without any matched collective instance shows no barrier to remove: steps 1–2
are then one cause, ``disaggregation``. On a disaggregated store the reference is the measured
split: one cause ``split_and_mechanisms_changed`` (then 6).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import ClassVar

import numpy as np

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel, kept_with_parts
from asaptrace.replay.mechanics.deployment import Deployment
from asaptrace.replay.mechanics.formers import Batch, BatchFormer, FifoBatches, StaticBatches, batch_costs
from asaptrace.replay.mechanics.lockstep import chain_from_costs, run_chain
from asaptrace.replay.mechanics.offline import lockstep_split_steps, offline_batches
from asaptrace.replay.mechanics.pipeline_run import TokenRule
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies.base import Policy, PolicyRun, lockstep_batches, serve_setting
from asaptrace.replay.policies.pipelined_base import PipelinedPolicy
from asaptrace.replay.policies.pipelined_online import COMPILED_HOOKS, OnlineFormer, runs_own_hooks
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario


class AsapFormer(OnlineFormer):
    """asap's online former: batches cut from arrived requests when the pipeline offers a free slot
    (hooks :meth:`order`, inherited FIFO, and :meth:`admit`; see the module docstring). Exactly
    this class runs compiled in the kernel (:meth:`compiled_rule`); a subclass's hooks in Python."""

    def __init__(self, req: ServingRequests, sc: Scenario, pol: Asap) -> None:
        super().__init__(req, sc)
        dep = pol.serve_deployment()
        self.pol, self.tp, self.experts = pol, dep.tp, pol.live_experts(dep)
        self.dual = pol.dual_batch
        self.reserved: dict[int, Batch] = {}  # group → a long batch waiting for it to drain

    def admit(self, request: int, batch: list[int], tokens: int) -> bool:
        """Until the batch holds ``min_batch_tokens``, never past ``max_batch_tokens``."""
        pol = self.pol
        return tokens < pol.min_batch_tokens and tokens + self.new[request] <= pol.max_batch_tokens

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | tuple[Batch, int] | int | None:
        k = self.next_arrival
        if k < self.n_arrivals and self.arrival[k] <= now_ns:
            self.arrive(now_ns)
        elif not self.queue and not self.reserved:
            return self.quiet_until()  # nothing for any group before the next arrival
        if self.reserved and group in self.reserved:
            if not group_idle:
                return None
            return self._hand_out(self.reserved.pop(group), now_ns)
        if not self.queue:
            return None
        batch = self.cut(self.take(), now_ns)
        if batch.alone and not group_idle:
            self.reserved[group] = batch
            return None
        if not self.queue and not self.reserved:  # its last batch before the next arrival
            return self._hand_out(batch, now_ns), self.quiet_until()
        return self._hand_out(batch, now_ns)

    def cut(self, reqs: list[int], now_ns: int) -> Batch:
        """The batch of these requests, costed on the served deployment."""
        new, cached = self.new, self.cached
        attn, disp, moe, comb = self.costs_for(tuple([(new[i], cached[i]) for i in reqs]))
        bid = len(self.members)
        self.members.append(reqs)
        alone = self.dual and max([new[i] for i in reqs]) > self.pol.long_tokens
        return Batch(bid, now_ns, attn, disp, moe, comb, alone=alone)

    def costs_for(self, pieces: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, ...]:
        """A batch's per-layer costs by its pieces' (new tokens, prefix), kept for the run."""
        got = self.kept.get(pieces)
        if got is None:
            got = self.kept[pieces] = costs_of(self.costs, self.sc.layers, self.tp, self.experts, pieces)
        return got

    def compiled_rule(self) -> TokenRule | None:
        """These very rules for the kernel's compiled former, unless a subclass (or the instance)
        replaced a hook or a setting is not an integer: then the Python hooks run."""
        pol = self.pol
        if not runs_own_hooks(
            self, AsapFormer, _HOOKS, pol.min_batch_tokens, pol.max_batch_tokens, pol.long_tokens
        ):
            return None
        return TokenRule(
            arrival_ns=np.asarray(self.arrival, np.int64),
            new_tokens=np.asarray(self.new, np.int64),
            cached_len=np.asarray(self.cached, np.int64),
            min_tokens=int(pol.min_batch_tokens),
            max_tokens=int(pol.max_batch_tokens),
            long_tokens=int(pol.long_tokens) if self.dual else None,
            cost_of=self.costs_for,
        )

    def _hand_out(self, b: Batch, now_ns: int) -> Batch:
        start = self.start
        for i in self.members[b.batch_id]:  # one or a few: a loop beats a fancy index
            start[i] = now_ns
        return b


#: what the compiled former does in place of AsapFormer's: overriding any keeps the Python former
_HOOKS = (*COMPILED_HOOKS, "cut", "_hand_out")


@kept_with_parts
@lru_cache(maxsize=1 << 16)
def costs_of(
    costs: CostModel, layers: int, tp: int, experts: int, pieces: tuple[tuple[int, int], ...]
) -> tuple[np.ndarray, ...]:
    """A batch's per-layer costs (:func:`batch_costs`) by its pieces' (new tokens, prefix), kept:
    a resampled stream draws its lengths from a store's few requests, so most batches (one
    prompt of ≥ 2,048 tokens fills one) recur thousands of times a sweep. Read-only arrays."""
    c = np.array([x[0] for x in pieces], np.float64)
    p = np.array([x[1] for x in pieces], np.float64)
    out = batch_costs(costs, c, p, layers=layers, dense_layers=0, tp=tp, experts=experts)
    for a in out:
        a.flags.writeable = False
    return out


@dataclass(frozen=True)
class Asap(PipelinedPolicy):
    name: ClassVar[str] = "asap"
    variants: ClassVar[dict[str, dict]] = {
        "no-dual-batch": {"dual_batch": False},
        "no-overlap": {"overlap": False},
        "no-super-kernel": {"super_kernel": False},
        "expert-failure": {"expert_failure": True},
    }
    answers: ClassVar[tuple[str, ...]] = (
        "barrier_wait",
        "straggler_group",
        "sumsq_imbalance",
        "hot_expert",
        "slow_device",
    )
    robustness: ClassVar[tuple[str, ...]] = ("expert-failure",)
    online_former: ClassVar[type[OnlineFormer] | None] = AsapFormer
    asynchronous: bool = True
    #: "fifo": a ready batch goes to the least-occupied group with a free slot (DOMAIN §7);
    #: "measured": each batch on the group it ran on (the reference replay of a disaggregated store)
    placement: str = "fifo"
    #: online: a batch is cut FIFO until it holds ≥ min_batch_tokens new tokens (less when less is
    #: queued: work-conserving), never more than max_batch_tokens
    min_batch_tokens: int = serve_setting(2048)
    max_batch_tokens: int = serve_setting(32768)

    @classmethod
    def whatif_label(cls, params: dict) -> str:
        head = cls.label or cls.name  # a subclass says its own name, not "asap"
        if "attention" not in params:
            return f"{head} with one expert die lost" if params.get("expert_failure") else head
        split = f"{str(params['attention']).replace('x', '×')} + {params['experts']}"
        if params.get("expert_failure"):
            return f"{head} at {split} with one expert die lost ({int(params['experts']) - 1} serve)"
        return f"{head} at {split}"

    def max_item_tokens(self) -> int:
        return self.max_batch_tokens

    def former(self, wl: MeasuredWork, costs: CostModel, dep: Deployment) -> BatchFormer:
        long = self.long_tokens if self.dual_batch else None
        # the dies run ahead of their slowest by at most the items in flight (per-die noise)
        windows = (self.slots(), dep.groups * self.slots())
        batches = offline_batches(
            wl, costs, tp=dep.tp, experts=self.live_experts(dep), long_tokens=long, windows=windows
        )
        if self.placement == "measured":
            if dep.groups != wl.n_groups:
                raise UsageError("placement 'measured' needs the measured number of attention groups")
            return StaticBatches(batches, dep.groups, {b.batch_id: b.key[1] for b in batches})
        if self.placement != "fifo":
            raise UsageError(f"asap placement is fifo or measured, not {self.placement!r}")
        return FifoBatches(batches, groups=dep.groups)

    def run(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        return super().run(wl, costs) if self.asynchronous else self._run_lockstep(wl, costs)

    def makespan(self, wl: MeasuredWork, costs: CostModel) -> int:
        return super().makespan(wl, costs) if self.asynchronous else self._run_lockstep(wl, costs).makespan_ns

    def serve(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: :class:`AsapFormer` on its D×T + E (:meth:`serve_deployment`), with its
        mechanisms; ``expert_failure``: E − 1 expert dies."""
        if not self.asynchronous:
            raise UsageError(
                f"{self.name} online runs asynchronously (asynchronous=false is an offline step)"
            )
        return super().serve(requests, scenario)

    def _run_lockstep(self, wl: MeasuredWork, costs: CostModel) -> PolicyRun:
        """The split in lockstep: each measured (step, micro-batch) a barriered sub-step, in order."""
        dep = self.deployment(wl)
        launch = 0 if self.super_kernel else costs.launch_ns
        free = None
        ends: dict[tuple[int, int], int] = {}
        chains: dict[int, list] = {}
        wait = events = 0
        for sc in lockstep_split_steps(
            wl, costs, groups=dep.groups, tp=dep.tp, experts=self.live_experts(dep)
        ):
            start = sc.ready_ns if free is None else max(sc.ready_ns, free)
            moe = sc.moe_ns + np.where(sc.moe_ns > 0, launch, 0)
            chain = chain_from_costs(
                sc.attention_ns, moe, sc.dispatch_ns, sc.combine_ns, tp=dep.tp, step=sc.step, start_ns=start
            )
            ct = run_chain(chain)
            free = int(ct.step_end.max())
            ends[(sc.step, sc.micro_batch)] = free
            chains.setdefault(sc.step, []).append(ct)
            wait += int(ct.wait_ns.sum())
            events += int(chain.part.sum())
        return PolicyRun(
            policy=self.name,
            params=self.params(),
            deployment=dep,
            batches=lockstep_batches(wl, ends, per_micro_batch=True),
            simulated_wait_ns=wait,
            events=events,
            chains=chains,
        )

    def counterfactuals(self, wl: MeasuredWork) -> list[tuple[str, Policy]]:
        total = wl.world_size
        here = self.at_devices(wl, total)
        tail: list[tuple[str, Policy]] = []
        if here.deployment(wl).devices != self.deployment(wl).devices:
            tail = [("device_total_changed", self)]
        if wl.deployment != "coupled":
            return [("split_and_mechanisms_changed", here if tail else self), *tail]
        plain = replace(
            here,
            asynchronous=False,
            dual_batch=False,
            overlap=False,
            super_kernel=False,
            expert_failure=False,
        )
        unbarriered = replace(plain, asynchronous=True)
        overlapped = replace(unbarriered, dual_batch=self.dual_batch, overlap=self.overlap)
        launched = replace(overlapped, super_kernel=self.super_kernel)
        seq: list[tuple[str, Policy]] = []
        if any(ch.n_instances for ch in wl.chains.values()):
            seq += [("split_cost", plain), ("barrier_wait_removed", unbarriered)]
        else:
            seq += [("disaggregation", unbarriered)]
        seq += [("overlap_gained", overlapped), ("launch_overhead_removed", launched)]
        if self.expert_failure:
            seq.append(("expert_failure", replace(launched, expert_failure=True)))
        if not tail:  # the last replay is this very policy (same deployment, perhaps spelled differently)
            seq[-1] = (seq[-1][0], self)
        return seq + tail
