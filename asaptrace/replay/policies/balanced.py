"""``balanced``: the coupled deployment with an oracle scheduler that balances Σs² across DP groups.

What a perfect scheduler would win with no new hardware. Per step, the step's requests are
re-partitioned over the DP groups longest-first onto the group with the least attention cost
(:meth:`CostModel.attention_ns` of the pieces it holds); each group's attention time per layer
becomes the measured mean over groups × (its modelled cost / the mean modelled cost), so the
total attention work is kept and only its split changes. Without the batch composition the oracle
gives every group the mean. Hook: :meth:`Balanced.step_chains` shifts every rank's gap before each
dispatch by (new − measured) attention time of its group.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import polars as pl

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.lockstep import scale_transfers
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain
from asaptrace.replay.policies.base import NO_COMPOSITION, LockstepPolicy
from asaptrace.replay.policies.lockstep_cost import piece_weight
from asaptrace.replay.policies.lockstep_online import LockstepFormer
from asaptrace.schema import Kind


class BalancedFormer(LockstepFormer):
    """Online, the oracle: coupled steps whose heaviest attention work goes first onto the group
    with the least attention work (:meth:`CostModel.attention_weight`, the variable cost
    c1·c + c2·c(2P+c), on Python floats: :func:`piece_weight`), so Σs² is balanced, not tokens); it always places at step formation."""

    routes_on_arrival = False

    def weight(self, request: int) -> float:
        return piece_weight(self.costs, self.remaining[request], self.done[request])


@dataclass(frozen=True)
class Balanced(LockstepPolicy):
    name: ClassVar[str] = "balanced"
    label: ClassVar[str] = "Σs²-balanced placement"
    answers: ClassVar[tuple[str, ...]] = ("sumsq_imbalance", "straggler_group")
    needs_deployment: ClassVar[str | None] = "coupled"
    online_former: ClassVar[type | None] = BalancedFormer

    def applies(self, wl: MeasuredWork) -> str | None:
        if (why := super().applies(wl)) is not None:
            return why
        if wl.n_groups < 2:
            return "the store has one DP group: nothing to balance across"
        return None if wl.batches.height else NO_COMPOSITION

    def step_chains(self, wl: MeasuredWork, step: int, costs: CostModel) -> list[StepChain]:
        chain = scale_transfers(super().step_chains(wl, step, costs)[0], self.k_s)
        share = oracle_shares(wl, step, costs)  # (G,) new / mean attention
        it = wl.items.filter(pl.col("step") == step)
        group_of = dict(zip(wl.ranks["rank"].to_list(), wl.ranks["dp_group"].to_list(), strict=True))
        g_of = np.array([group_of[int(r)] for r in chain.ranks]) if wl.chains else chain.ranks // wl.tp
        gap = chain.gap.copy()
        for k, kind in enumerate(chain.kind):
            if kind != Kind.DISPATCH.value:
                continue
            sel = it.filter(
                (pl.col("layer") == int(chain.layer[k]))
                & (pl.col("micro_batch").fill_null(-1) == int(chain.micro_batch[k]))
            )
            if sel.height == 0 and not wl.chains:
                sel = (
                    it.filter(pl.col("layer") == int(chain.layer[k]))
                    .group_by("dp_group")
                    .agg(pl.col("attn_ns").sum())
                )
            if sel.height == 0:
                continue
            measured = np.zeros(len(share))
            measured[sel["dp_group"].to_numpy()] = sel["attn_ns"].to_numpy()
            target = measured.mean() * share
            delta = np.rint(target - measured).astype(np.int64)
            gap[k] = np.where(chain.part[k], np.maximum(gap[k] + delta[g_of], 0), 0)
        return [replace(chain, gap=gap)]


def oracle_shares(wl: MeasuredWork, step: int, costs: CostModel) -> np.ndarray:
    """Per DP group: its attention cost after the oracle re-partition, over the mean (sums to G)."""
    g_n = wl.n_groups
    b = wl.batches.filter(pl.col("step") == step) if wl.batches.height else wl.batches
    if b.height == 0:
        return np.ones(g_n)
    c = (b["seq_len"] - b["cached_len"].fill_null(0)).to_numpy().astype(np.float64)
    p = b["cached_len"].fill_null(0).to_numpy().astype(np.float64)
    single = np.array([costs.attention_ns(ci, pi) for ci, pi in zip(c, p, strict=True)], np.float64)
    where = place_longest_first(single, g_n)
    order = np.argsort(-single, kind="stable")  # each group's members in the order they were placed
    members = [[int(i) for i in order if where[i] == g] for g in range(g_n)]
    model = np.array([costs.attention_ns(c[m], p[m]) if m else 0 for m in members], np.float64)
    return model / model.mean() if model.mean() > 0 else np.ones(g_n)
