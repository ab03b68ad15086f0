"""``asap``: ASAP's disaggregated, asynchronous prefill (DOMAIN.md §2, §6).

D×T attention dies (``attention="DxT"``) and an E-die MoE pool (``experts``), defaulting to the
measured device total split in half (a 32-die store: 4×4 + 16). Dispatch and combine are
asynchronous with back-pressure (``buffer_slots``), the pool serves (batch, layer) items FIFO in
any order, dual-batch interleaving (``dual_batch``, off for a batch holding a prompt longer than
``long_tokens``), overlap of communication on the pool (``overlap``) and the layer-oblivious super
kernel (``super_kernel``; off: + the cost model's launch overhead per MoE item). With
``expert_failure`` one expert die is lost and its experts move to the others (E − 1 dies serve).

Hook: :meth:`Asap.former` hands out the store's measured batches (one per step, DP group and
micro-batch), costed on the target deployment (:mod:`asaptrace.replay.offline`), each ready when
its measured step began. The online sweep swaps in a former that cuts batches from arrivals.

Counterfactual sequence (recovered time by cause, each the drop from the previous replay):

1. ``barrier_wait_removed``: coupled → asap on the measured device counts with dual batch,
   overlap and super kernel off (the barrier is the only change);
2. ``overlap_gained``: + dual-batch interleaving and pool overlap as requested;
3. ``launch_overhead_removed``: + the super kernel as requested;
4. ``device_count_changed``: + the requested D×T and E (and the expert failure).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from asaptrace.replay.costs import CostModel
from asaptrace.replay.offline import offline_batches
from asaptrace.replay.pipelined import BatchFormer, StaticBatches
from asaptrace.replay.policies._base import Deployment, PipelinedPolicy, Policy
from asaptrace.replay.workload import Workload


@dataclass(frozen=True)
class Asap(PipelinedPolicy):
    name: ClassVar[str] = "asap"

    def former(self, wl: Workload, costs: CostModel, dep: Deployment) -> BatchFormer:
        long = self.long_tokens if self.dual_batch else None
        return StaticBatches(
            offline_batches(wl, costs, tp=dep.tp, experts=self.live_experts(dep), long_tokens=long),
            groups=dep.groups,
        )

    def counterfactuals(self, wl: Workload) -> list[tuple[str, Policy]]:
        measured = replace(
            self,
            attention=f"{wl.n_groups}x{wl.tp}",
            experts=wl.expert_ranks,
            dual_batch=False,
            overlap=False,
            super_kernel=False,
            expert_failure=False,
        )
        overlapped = replace(measured, dual_batch=self.dual_batch, overlap=self.overlap)
        launched = replace(overlapped, super_kernel=self.super_kernel)
        return [
            ("barrier_wait_removed", measured),
            ("overlap_gained", overlapped),
            ("launch_overhead_removed", launched),
            ("device_count_changed", self),
        ]
