"""``chunked``: Sarathi-style chunked prefill on the coupled deployment.

Each DP group takes at most ``chunk_tokens`` new tokens per sub-step: its requests are cut into
pieces in order, a prompt's tail staying on its group and going first in the next sub-step. A
later piece pays its prefix (causal attention: c·(2P + c)), so chunking bounds each sub-step's
work but not the total quadratic cost. A measured step becomes as many lockstep sub-steps as its
fullest group needs; sub-step costs are the measured ones rescaled by the cost model:

* attention of group g = measured (all micro-batches) × A(its sub-step pieces) / A(all its pieces);
* MoE = measured pool time × M(sub-step tokens) / M(step tokens) on the measured EP ranks;
* dispatch/combine = measured × X(largest group's sub-step tokens per die) / X(measured).

Sub-steps run one micro-batch each (the measured two-micro-batch overlap is not modelled).
Hook: :meth:`Chunked.step_chains`. Needs the batch composition.

Online (:class:`ChunkedFormer`, its step-forming hook): a budget of ``chunk_tokens`` per group and
step; tails first on their groups, then FIFO to the total budget, longest-first onto the group with
the fewest tokens this step, a prompt cut to fill it and its tail going first next step.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import polars as pl

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.lockstep import chain_from_costs
from asaptrace.replay.mechanics.lockstep_run import CHUNKS
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain
from asaptrace.replay.policies.base import NO_COMPOSITION, LockstepPolicy, form_setting
from asaptrace.replay.policies.lockstep_online import LockstepFormer, Piece
from asaptrace.replay.serving.requests import ServingRequests
from asaptrace.replay.serving.scenario import Scenario


class ChunkedFormer(LockstepFormer):
    """Online chunked prefill: sub-steps of at most ``chunk_tokens`` per group (module docstring)."""

    kernel_mode = CHUNKS  # its form_step, compiled (lockstep_run)

    def __init__(self, req: ServingRequests, sc: Scenario, pol: Chunked) -> None:
        super().__init__(req, sc, pol)
        self.chunk = pol.chunk_tokens

    def form_step(self) -> list[list[Piece]]:
        """Tails first on their groups, then FIFO to the total budget, longest-first, cut to fit."""
        if not self.chunk:  # no budget: whole prompts, as coupled
            return super().form_step()
        queue, carry, remaining, done = self.queue, self.carry, self.remaining, self.done
        d, budget = self.st.dp, self.chunk
        groups: list[list[Piece]] = [[] for _ in range(d)]
        room = [budget] * d
        for g in range(d):
            i = carry[g]
            if i >= 0:
                c = min(remaining[i], budget)
                groups[g].append((i, c, done[i]))
                room[g] -= c
                if c == remaining[i]:
                    carry[g] = -1
        taken: list[int] = []
        total, free = 0, sum(room)
        while queue and total < free:
            i = queue.popleft()
            taken.append(i)
            total += remaining[i]
        back: list[int] = []
        # the open groups as (tokens this step, group): the top is the one with the fewest tokens, the
        # lowest index among equals (as min over the open groups), in O(log d) a piece
        fewest = [(budget - room[g], g) for g in range(d) if room[g] > 0]
        heapq.heapify(fewest)
        for i in sorted(taken, key=remaining.__getitem__, reverse=True):  # stable: FIFO among equals
            if not fewest:
                back.append(i)
                continue
            g = fewest[0][1]
            c = min(remaining[i], room[g])
            groups[g].append((i, c, done[i]))
            room[g] -= c
            if room[g] > 0:
                heapq.heapreplace(fewest, (budget - room[g], g))
            else:
                heapq.heappop(fewest)
            if c < remaining[i]:
                carry[g] = i
        if back:
            queue.extendleft(sorted(back, reverse=True))
        return groups


def chunk_pieces(seq_len: list[int], cached: list[int], budget: int) -> list[list[tuple[int, int]]]:
    """Cut one group's requests into sub-steps of ≤ ``budget`` new tokens: [[(c, P), ...], ...]."""
    if budget < 1:
        raise UsageError(f"--chunk-tokens must be positive, not {budget}")
    subs: list[list[tuple[int, int]]] = [[]]
    room = budget
    for s, p in zip(seq_len, cached, strict=True):
        done = p
        while done < s:
            if room == 0:
                subs.append([])
                room = budget
            c = min(s - done, room)
            subs[-1].append((c, done))
            done += c
            room -= c
    return subs


@dataclass(frozen=True)
class Chunked(LockstepPolicy):
    name: ClassVar[str] = "chunked"
    label: ClassVar[str] = "chunked prefill"
    answers: ClassVar[tuple[str, ...]] = ("sumsq_imbalance", "straggler_group")
    needs_deployment: ClassVar[str | None] = "coupled"
    search_settings: ClassVar[dict[str, tuple]] = {"chunk_tokens": (2048, 4096, 8192, 16384)}
    search_words: ClassVar[dict[str, str]] = {"chunk_tokens": "chunk sizes"}
    online_former: ClassVar[type | None] = ChunkedFormer
    chunk_tokens: int = form_setting(8192, "tokens per group per step (chunked)")

    @classmethod
    def whatif_label(cls, params: dict) -> str:
        c = params.get("chunk_tokens")
        return f"chunked prefill at {c:,} tokens" if c else cls.label

    def applies(self, wl: MeasuredWork) -> str | None:
        if wl.batches.height == 0:
            return NO_COMPOSITION
        if wl.layers == 0:  # sub-steps are rebuilt layer by layer from the measured layer costs
            return "the store has no layers (no MoE dispatch/combine to cut them at): no sub-steps to rebuild"
        return super().applies(wl)

    def step_token_cap(self, groups: int, new: np.ndarray) -> int:
        """A sub-step holds at most D × chunk_tokens new tokens (a longer prompt is cut): the N_cap of
        its coupled-steps bound, reached by every step of a saturated run (tests/test_capacity_bound.py
        works one out by hand: bound and simulation alike)."""
        return groups * self.chunk_tokens

    def step_chains(self, wl: MeasuredWork, step: int, costs: CostModel) -> list[StepChain]:
        b = wl.batches.filter(pl.col("step") == step) if wl.batches.height else wl.batches
        if b.height == 0:
            raise UsageError("the chunked policy needs the batch composition (batches table or --batches)")
        g_n, layers = wl.n_groups, wl.layers
        it = (
            wl.items.filter(pl.col("step") == step).group_by("dp_group", "layer").agg(pl.col("attn_ns").sum())
        )
        attn = np.zeros((g_n, layers))
        attn[it["dp_group"].to_numpy(), it["layer"].to_numpy()] = it["attn_ns"].to_numpy()
        pool = wl.pool.filter(pl.col("step") == step).group_by("layer").agg(pl.col("pool_ns").sum())
        moe = np.zeros(layers)
        moe[pool["layer"].to_numpy()] = pool["pool_ns"].to_numpy()
        xf = (
            wl.transfers.filter(pl.col("step") == step)
            .group_by("layer")
            .agg(pl.col("dispatch_ns").sum(), pl.col("combine_ns").sum())
        )
        disp, comb = np.zeros(layers), np.zeros(layers)
        disp[xf["layer"].to_numpy()] = xf["dispatch_ns"].to_numpy()
        comb[xf["layer"].to_numpy()] = xf["combine_ns"].to_numpy()
        subs, full_attn, full_tok = [], np.zeros(g_n), np.zeros(g_n)
        for g in range(g_n):
            mine = b.filter(pl.col("dp_group") == g)
            seq, cached = mine["seq_len"].to_list(), mine["cached_len"].fill_null(0).to_list()
            subs.append(chunk_pieces(seq, cached, self.chunk_tokens))
            full_attn[g] = costs.attention_ns(np.subtract(seq, cached), cached) if seq else 0
            full_tok[g] = float(np.subtract(seq, cached).sum()) if seq else 0.0
        n_sub = max(len(s) for s in subs)
        n_tot = full_tok.sum()
        x_ref = max(float(costs.transfer_ns(full_tok.max() / wl.tp)), 1.0)
        m_ref = max(float(costs.moe_ns(n_tot, wl.expert_ranks)), 1.0)
        start = int(wl.steps.filter(pl.col("step") == step)["start_ns"][0])
        chains = []
        for j in range(n_sub):
            a_j = np.zeros((g_n, layers))
            tok = np.zeros(g_n)
            for g in range(g_n):
                pieces = subs[g][j] if j < len(subs[g]) else []
                if not pieces or full_attn[g] == 0:
                    continue
                c, p = np.array(pieces, np.float64).T
                a_j[g] = attn[g] * costs.attention_ns(c, p) / full_attn[g]
                tok[g] = c.sum()
            m_j = moe * float(costs.moe_ns(tok.sum(), wl.expert_ranks)) / m_ref
            x_j = float(costs.transfer_ns(tok.max() / wl.tp)) / x_ref
            chains.append(
                chain_from_costs(
                    np.rint(a_j).astype(np.int64),
                    np.rint(np.where(moe > 0, m_j, 0)).astype(np.int64),
                    np.rint(disp * x_j).astype(np.int64),
                    np.rint(comb * x_j).astype(np.int64),
                    tp=wl.tp,
                    step=step,
                    start_ns=start,
                )
            )
        return chains

    def drawn_busy(self, wl: MeasuredWork) -> None:
        return None
