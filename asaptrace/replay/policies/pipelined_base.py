"""The disaggregated, asynchronous base: :class:`PipelinedPolicy` on the event engine.

It runs a policy's batch former (hook :meth:`PipelinedPolicy.former`: asap's measured batches on D
groups, afd-pingpong's m micro-batches on one barriered stage) through
:func:`asaptrace.replay.mechanics.pipeline_run.run_pipeline` offline; online it runs the policy's
``online_former`` class (an :class:`~asaptrace.replay.policies.pipelined_online.OnlineFormer`) on
the pipeline configured by :meth:`PipelinedPolicy.online_config`, and owns the online deployment
(:meth:`PipelinedPolicy.serve_deployment`) and its capacity bound. The shared
bookkeeping (:class:`~asaptrace.replay.policies.base.Policy`, :class:`PolicyRun`, the D×T
parsing) is :mod:`asaptrace.replay.policies.base`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.deployment import Deployment
from asaptrace.replay.mechanics.formers import BatchFormer
from asaptrace.replay.mechanics.pipeline_run import run_recorded
from asaptrace.replay.mechanics.pipelined import PipelineConfig, PipelineTrace, ServiceOrder
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies.base import (
    Policy,
    PolicyRun,
    batch_rows,
    form_setting,
    parse_attention,
    resolve_deployment,
)
from asaptrace.replay.policies.pipelined_online import UNBOUNDED, serve_on_pipeline
from asaptrace.replay.serving.capacity import disaggregated_bounds

if TYPE_CHECKING:
    from asaptrace.replay.serving.requests import ServingRequests, ServingResult
    from asaptrace.replay.serving.scenario import Scenario


@dataclass(frozen=True)
class PipelinedPolicy(Policy):
    family: ClassVar[str] = "pipelined"
    #: try one slot as well as two and keep the faster (see :meth:`run`)
    interleave_choice: ClassVar[bool] = True
    #: the online D×T + E when ``attention`` / ``experts`` are None: the paper's ASAP (4×4 + 16)
    serve_attention: ClassVar[str] = "4x4"
    serve_experts: ClassVar[int] = 16
    searches_split: ClassVar[bool] = True
    #: "DxT"; None: half the measured devices in groups of the measured TP
    attention: str | None = form_setting(None, "attention dies (DxT, empty: half the measured devices)")
    #: None: the rest of the measured device total
    experts: int | None = form_setting(None, "expert dies (empty: the rest)")
    dual_batch: bool = form_setting(True, "dual-batch interleaving")
    overlap: bool = form_setting(True, "overlap on expert dies")
    super_kernel: bool = form_setting(True, "device-launched MoE (super kernel)")
    long_tokens: int = 16384
    buffer_slots: int = 64
    expert_failure: bool = form_setting(False, "lose one expert die")

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
           same service order with the longer items (:class:`~asaptrace.replay.mechanics.pipelined.ServiceOrder`),
           so an ablation never makes the replay faster.
        """
        dep = self.deployment(wl)
        former = self.former(wl, costs, dep)
        given = getattr(former, "batches", [])
        keys = {b.batch_id: (b.step, *b.key) for b in given}
        ready = {b.batch_id: b.ready_ns for b in given}
        chosen = self._full_run(dep, former, ready, costs.launch_ns)
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

    def makespan(self, wl: MeasuredWork, costs: CostModel) -> int:
        """:meth:`run`'s makespan from its first simulation (no spans, no batches frame), when the
        full mechanisms are on (the run then stops there); with an ablation, :meth:`run`'s."""
        if not (self.super_kernel and self.overlap):
            return super().makespan(wl, costs)
        dep = self.deployment(wl)
        former = self.former(wl, costs, dep)
        ready = {b.batch_id: b.ready_ns for b in getattr(former, "batches", [])}
        return _makespan(self._full_run(dep, former, ready, costs.launch_ns, spans=False), ready)

    def _full_run(
        self,
        dep: Deployment,
        former: BatchFormer,
        ready: dict[int, int],
        launch_ns: int,
        *,
        spans: bool = True,
    ) -> PipelineTrace:
        """The full mechanisms' simulation (:meth:`run`'s first): with an interleave choice and
        two slots, the one-slot run instead when its makespan is shorter."""
        chosen = self._simulate(dep, former, self.slots(), full=True, launch_ns=launch_ns, spans=spans)
        if self.interleave_choice and self.slots() > 1:
            single = self._simulate(dep, former, 1, full=True, launch_ns=launch_ns, spans=spans)
            if _makespan(single, ready) < _makespan(chosen, ready):
                chosen = single
        return chosen

    def _simulate(
        self,
        dep: Deployment,
        former: BatchFormer,
        slots: int,
        *,
        full: bool,
        launch_ns: int,
        order=None,
        spans: bool = True,
    ) -> PipelineTrace:
        cfg = PipelineConfig(
            groups=dep.groups,
            slots=slots,
            buffer_slots=self.buffer_slots,
            overlap=True if full else self.overlap,
            comm_share=dep.tp / max(self.live_experts(dep), 1),
            launch_ns=0 if (full or self.super_kernel) else launch_ns,
        )
        trace = run_recorded(cfg, former.fresh(), order=order, spans=spans)[0]
        trace.slots = slots
        return trace

    def serve_former(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: its ``online_former`` on the pipeline of :meth:`online_config`."""
        former = type(self).online_former(requests, scenario, self)  # type: ignore[misc]
        return serve_on_pipeline(requests, scenario, self.online_config(scenario), former, self.name)

    def online_config(self, scenario: Scenario) -> PipelineConfig:
        """The pipeline it serves on: its D×T + E, its slots, overlap and super kernel (sends never
        block: an unbounded receive buffer)."""
        dep = self.serve_deployment()
        return PipelineConfig(
            groups=dep.groups,
            slots=self.slots(),
            buffer_slots=UNBOUNDED,
            overlap=self.overlap,
            comm_share=dep.tp / self.live_experts(dep),
            launch_ns=0 if self.super_kernel else scenario.costs.launch_ns,
        )

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
