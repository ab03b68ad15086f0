"""``coupled``: the measured deployment replayed as it ran — DP attention + EP experts on the same
devices, a barrier at every dispatch/combine (and every other collective), any measured
micro-batch overlap kept (online: the micro_batch_overlap setting, off as in the paper's Default).

Hook: :meth:`Coupled.step_chains` returns the measured chain with the coupled collective factor
k_s applied (:func:`~asaptrace.replay.mechanics.lockstep.scale_transfers`) and, with ``expert_failure``,
the MoE work of ``failed_rank`` moved evenly onto the other ranks at every combine (its attention
stays: only its experts are lost). Replaying the measured chain unchanged reproduces the measured
step times — the reproduction error every what-if is quoted with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import polars as pl

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.lockstep import scale_transfers
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain
from asaptrace.replay.policies.base import LockstepPolicy, Policy, form_setting
from asaptrace.replay.policies.lockstep_online import LockstepFormer
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario
from asaptrace.schema import Kind


@dataclass(frozen=True)
class Coupled(LockstepPolicy):
    name: ClassVar[str] = "coupled"
    #: online: FIFO steps on its coupled D×T (``attention``), longest-first onto groups, its k_s
    online_former: ClassVar[type | None] = LockstepFormer

    def serve(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: :class:`LockstepFormer`'s steps. An expert failure is an offline what-if only
        (said, not ignored)."""
        if self.expert_failure:
            raise UsageError(
                f"{self.name} with expert_failure replays stores only: no online former loses a die"
            )
        return super().serve(requests, scenario)

    expert_failure: bool = form_setting(False, "lose one expert die")
    failed_rank: int = 0

    def counterfactuals(self, wl: MeasuredWork) -> list[tuple[str, Policy]]:
        """On a coupled store plain coupled recovers nothing, and with a knob turned the whole change
        is that knob's. On a disaggregated store the move to the coupled deployment comes first
        (``coupled_deployment``, usually negative: the barrier comes back), then the knob's."""
        knob: list[tuple[str, Policy]] = []
        if self.expert_failure:
            knob = [("expert_failure", self)]
        elif self.k_s != 1.0:
            knob = [("collective_factor", self)]
        if wl.deployment == "coupled":
            return knob
        plain = replace(self, expert_failure=False, k_s=1.0)
        return [("coupled_deployment", plain if knob else self), *knob]

    def step_chains(self, wl: MeasuredWork, step: int, costs: CostModel) -> list[StepChain]:
        chain = scale_transfers(super().step_chains(wl, step, costs)[0], self.k_s)
        if self.expert_failure:
            chain = move_experts(chain, wl, self.failed_rank)
        return [chain]


def move_experts(chain: StepChain, wl: MeasuredWork, failed_rank: int) -> StepChain:
    """``failed_rank``'s MoE time before each combine spread evenly over the other taking-part ranks."""
    where = np.flatnonzero(chain.ranks == failed_rank)
    if len(where) == 0:
        raise UsageError(f"--failed-rank {failed_rank} is not a rank of this store")
    jf = int(where[0])
    combine = np.array([k == Kind.COMBINE.value for k in chain.kind], bool)
    moe = np.zeros_like(chain.gap)
    if wl.chains:
        b = wl.busy.filter(
            (pl.col("step") == chain.step) & (pl.col("kind") == Kind.MOE.value) & (pl.col("pos") >= 0)
        )
        b = b.group_by("rank", "pos").agg(pl.col("busy_ns").sum())
        r_of = {int(r): j for j, r in enumerate(chain.ranks)}
        moe[b["pos"].to_numpy(), [r_of[int(r)] for r in b["rank"].to_numpy()]] = b["busy_ns"].to_numpy()
    else:
        moe = np.where(combine[:, None], chain.gap, 0)
    lost = np.where(combine, moe[:, jf], 0)
    others = chain.part.copy()
    others[:, jf] = False
    n_others = np.maximum(others.sum(axis=1), 1)
    gap = chain.gap + np.where(others, np.rint(lost / n_others)[:, None].astype(np.int64), 0)
    gap[:, jf] -= lost
    return replace(chain, gap=np.maximum(gap, 0))
