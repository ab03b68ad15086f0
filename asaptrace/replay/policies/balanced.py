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
from asaptrace.replay.mechanics.lockstep_run import WEIGHTS
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain, kept_per_work
from asaptrace.replay.policies.base import NO_COMPOSITION, LockstepPolicy
from asaptrace.replay.policies.lockstep_cost import piece_weight
from asaptrace.replay.policies.lockstep_online import LockstepFormer
from asaptrace.schema import Kind


class BalancedFormer(LockstepFormer):
    """Online, the oracle: coupled steps whose heaviest attention work goes first onto the group
    with the least attention work (:meth:`CostModel.attention_weight`, the variable cost
    c1·c + c2·c(2P+c), on Python floats: :func:`piece_weight`), so Σs² is balanced, not tokens); it always places at step formation."""

    routes_on_arrival = False
    kernel_mode = WEIGHTS  # its weight, compiled (lockstep_run)

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
        by_item, by_layer = _dispatch_attention(wl)[step]
        group_of = dict(zip(wl.ranks["rank"].to_list(), wl.ranks["dp_group"].to_list(), strict=True))
        g_of = np.array([group_of[int(r)] for r in chain.ranks]) if wl.chains else chain.ranks // wl.tp
        gap = chain.gap.copy()
        for k, kind in enumerate(chain.kind):
            if kind != Kind.DISPATCH.value:
                continue
            layer = int(chain.layer[k])
            sel = by_item.get((layer, int(chain.micro_batch[k])))
            if sel is None and not wl.chains:
                sel = by_layer.get(layer)
            if sel is None:
                continue
            measured = np.zeros(len(share))
            measured[sel[0]] = sel[1]
            target = measured.mean() * share
            delta = np.rint(target - measured).astype(np.int64)
            gap[k] = np.where(chain.part[k], np.maximum(gap[k] + delta[g_of], 0), 0)
        return [replace(chain, gap=gap)]


@kept_per_work
def _dispatch_attention(wl: MeasuredWork) -> dict[int, tuple[dict, dict]]:
    """Per step, each dispatch's measured attention by DP group: by (layer, micro-batch; an unknown
    one -1) its items' (groups, attention), and by layer the groups' sums over micro-batches."""
    out: dict[int, tuple[dict, dict]] = {}
    items = wl.items.with_columns(pl.col("micro_batch").fill_null(-1).cast(pl.Int64).alias("_mb"))
    for step in wl.steps["step"].to_list():
        it = items.filter(pl.col("step") == step)
        by_item = {
            (int(layer), int(mb)): (part["dp_group"].to_numpy(), part["attn_ns"].to_numpy())
            for (layer, mb), part in it.partition_by(
                "layer", "_mb", as_dict=True, maintain_order=True
            ).items()
        }
        sums = it.group_by("layer", "dp_group").agg(pl.col("attn_ns").sum())
        by_layer = {
            int(layer): (part["dp_group"].to_numpy(), part["attn_ns"].to_numpy())
            for (layer,), part in sums.partition_by("layer", as_dict=True).items()
        }
        out[step] = (by_item, by_layer)
    return out


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
