"""``afd-pingpong``: attention–FFN disaggregation with a ping-pong pipeline (MegaScale-Infer, Step-3).

All D×T attention workers act as one stage with a barrier across them: a micro-batch's attention
takes the slowest DP group's time. Each step's batch is split into ``m`` micro-batches that
ping-pong between the attention stage and the E-die FFN (MoE) stage, with a transfer T_c each
way. With per-micro-batch stage times T_a (attention), T_e (MoE), T_c and T_f = max(T_a, T_e),
once m is large enough to keep the bottleneck busy (m ≥ 2(1 + T_c/T_f) when T_a = T_e)::

    T_total = (T_a + T_e + 2·T_c) + T_f·(m·L − 1)

Costs of a micro-batch at a layer: attention = max over the D groups of the step's attention
(measured groups dealt longest-first onto D groups, × T_meas/T) / m; MoE and transfers as in
:mod:`asaptrace.replay.mechanics.offline` for 1/m of the step's tokens — the stages' sends are asynchronous,
so a coupled store's measured collectives are ÷ k_s, and the modelled pool and transfer costs take
the fit band's and ``--vary scale``'s factors (``whatif_*_scale``), as asap's do. Runs on the
pipelined mechanics with one attention group of ``m`` slots; its deployment reads D×T + E
(:meth:`AfdPingpong.deployment`). Hook: :meth:`AfdPingpong.former`.

Online (:class:`PingpongFormer` on the pipelined mechanics, one barriered attention "group" with
``m`` slots): when the stage is idle (every micro-batch of the previous step done) and requests
are queued, a step is taken in the former's order (FIFO) up to ``step_tokens`` new tokens (at least
one request: as the coupled former) and dealt longest-first onto ``m`` micro-batches by tokens;
within a micro-batch its requests are dealt longest-first by attention weight onto the D groups,
its attention at a layer the slowest group's, its MoE item M(its tokens, E), its dispatch and
combine X(its tokens / (D·T)) each. The micro-batches ping-pong with the FFN pool; a request's
TTFT ends when its micro-batch's last layer is done, its own time its share of its micro-batch's
items (so ``sync ≥ 0``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np
import polars as pl

from asaptrace.errors import UsageError
from asaptrace.replay.costs import (
    ATTENTION,
    POOL,
    TRANSFER,
    CostModel,
    LayerWork,
    kept_with_parts,
    resource_ns,
)
from asaptrace.replay.mechanics.deployment import Deployment
from asaptrace.replay.mechanics.formers import Batch, BatchFormer, StaticBatches
from asaptrace.replay.mechanics.offline import transfer_factor
from asaptrace.replay.mechanics.pipeline_run import TokenRule
from asaptrace.replay.mechanics.pipelined import PipelineConfig, PipelineTrace
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.mechanics.work import MeasuredWork, kept_per_work
from asaptrace.replay.policies.base import form_setting, serve_setting
from asaptrace.replay.policies.lockstep_cost import piece_weight
from asaptrace.replay.policies.pipelined_base import PipelinedPolicy
from asaptrace.replay.policies.pipelined_online import COMPILED_HOOKS, UNBOUNDED, OnlineFormer, runs_own_hooks
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario

#: the m values its search and its named settings try
M_VALUES = (2, 3, 4, 6)


def pingpong_batches(
    attention_ns: np.ndarray,
    moe_ns: np.ndarray,
    transfer_ns: np.ndarray,
    *,
    m: int,
    ready_ns: int = 0,
    step: int = 0,
) -> list[Batch]:
    """``m`` micro-batches of one step, each with the given per-layer stage times (arrays of L)."""
    return [
        Batch(
            batch_id=step * 10_000 + j,
            ready_ns=ready_ns,
            attention_ns=np.asarray(attention_ns, np.int64),
            dispatch_ns=np.asarray(transfer_ns, np.int64),
            moe_ns=np.asarray(moe_ns, np.int64),
            combine_ns=np.asarray(transfer_ns, np.int64),
            step=step,
            key=(step, 0, j),
        )
        for j in range(m)
    ]


class PingpongFormer(OnlineFormer):
    """Cuts a step when the stage is idle, hands out its micro-batches one per free slot."""

    def __init__(self, req: ServingRequests, sc: Scenario, pol: AfdPingpong) -> None:
        super().__init__(req, sc)
        dep = pol.serve_deployment()
        self.m, self.step_tokens = pol.m, pol.step_tokens
        self.dp, self.tp, self.experts = dep.groups, dep.tp, pol.live_experts(dep)
        self.pending: deque[Batch] = deque()  # the current step's micro-batches not handed out yet

    def admit(self, request: int, batch: list[int], tokens: int) -> bool:
        """A step holds at most ``step_tokens`` new tokens (or one longer prompt)."""
        return tokens + self.new[request] <= self.step_tokens

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | tuple[Batch, int] | int | None:
        if self.next_arrival < self.n_arrivals and self.arrival[self.next_arrival] <= now_ns:
            self.arrive(now_ns)
        if not self.pending:
            if not self.queue:
                return self.quiet_until()  # nothing for the stage before the next arrival
            if not group_idle:
                return None
            self._cut_step(self.take(), now_ns)
        b = self.pending.popleft()
        start = self.start
        for i in self.members[b.batch_id]:  # one or a few: a loop beats a fancy index
            start[i] = now_ns
        if not self.pending and not self.queue:  # its last micro-batch before the next arrival
            return b, self.quiet_until()
        return b

    def _cut_step(self, reqs: list[int], now_ns: int) -> None:
        parts = min(self.m, len(reqs))
        if parts == 1:  # one micro-batch (one request, or m = 1): nothing to place
            self.pending.append(self._micro_batch(reqs, now_ns))
            return
        where = place_longest_first([self.new[i] for i in reqs], parts).tolist()
        for j in range(parts):
            mine = [i for i, w in zip(reqs, where, strict=True) if w == j]
            self.pending.append(self._micro_batch(mine, now_ns))

    def _micro_batch(self, reqs: list[int], now_ns: int) -> Batch:
        new, cached = self.new, self.cached
        a, x, m, _ = self.costs_for(tuple([(new[i], cached[i]) for i in reqs]))
        bid = len(self.members)
        self.members.append(reqs)
        return Batch(bid, now_ns, a, x, m, x)

    def costs_for(self, pieces: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, ...]:
        """A micro-batch's per-layer (attention, dispatch, pool, combine) by its pieces, kept."""
        got = self.kept.get(pieces)
        if got is None:
            one = _micro_batch_costs(self.costs, self.dp, self.tp, self.experts, pieces)
            a, x, m = _per_layer(self.sc.layers, *one)
            got = self.kept[pieces] = (a, x, m, x)
        return got

    def compiled_rule(self) -> TokenRule | None:
        """These very rules for the kernel's compiled former (steps of m micro-batches), unless a
        subclass (or the instance) replaced a hook or a setting is not an integer."""
        if not runs_own_hooks(self, PingpongFormer, _HOOKS, self.m, self.step_tokens) or self.m < 1:
            return None
        return TokenRule(
            arrival_ns=np.asarray(self.arrival, np.int64),
            new_tokens=np.asarray(self.new, np.int64),
            cached_len=np.asarray(self.cached, np.int64),
            min_tokens=_NO_LEAST,
            max_tokens=int(self.step_tokens),
            long_tokens=None,
            cost_of=self.costs_for,
            micro_batches=int(self.m),
        )


#: what the compiled former does in place of PingpongFormer's: overriding any keeps the Python former
_HOOKS = (*COMPILED_HOOKS, "_cut_step", "_micro_batch")
_NO_LEAST = (1 << 63) - 1  # a step has no least size (asap's min_batch_tokens): every take is below it


@kept_per_work
def _step_tables(wl: MeasuredWork) -> dict[int, tuple]:
    """Per step (the steps table's order): its items' (dp_group, layer, attention, tokens) rows,
    each group's attention over the layers (by group), and its pool and transfer items by layer."""
    out = {}
    for step in wl.steps["step"].to_list():
        it = wl.items.filter(pl.col("step") == step)
        per = it.group_by("dp_group", "layer").agg(pl.col("attn_ns").sum(), pl.col("tokens").sum())
        tot = per.group_by("dp_group").agg(pl.col("attn_ns").sum()).sort("dp_group")
        pool = (
            wl.pool.filter(pl.col("step") == step)
            .group_by("layer")
            .agg(pl.col("pool_ns").sum(), pl.col("tokens").max())
        )
        xf = (
            wl.transfers.filter(pl.col("step") == step)
            .group_by("layer")
            .agg(
                ((pl.col("dispatch_ns") + pl.col("combine_ns")) / 2).sum().alias("x"),
                pl.col("tokens_per_die").max(),
            )
        )
        out[step] = (list(per.iter_rows()), tot, pool, xf)
    return out


@lru_cache(maxsize=1 << 16)
def _per_layer(layers: int, attn: int, xfer: int, moe: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A micro-batch's per-layer (attention, dispatch = combine, pool) arrays, kept and read-only
    (every layer costs the same; the pipeline only reads them)."""
    out = tuple(np.full(layers, v, np.int64) for v in (attn, xfer, moe))
    for a in out:
        a.flags.writeable = False
    return out  # type: ignore[return-value]


@kept_with_parts
@lru_cache(maxsize=1 << 16)
def _group_attention(costs: CostModel, tp: int, experts: int, pieces: tuple[tuple[int, int], ...]) -> int:
    """One attention group's layer of these (new tokens, prefix) pieces, kept: a micro-batch's
    groups (one or two prompts each) recur far more often than the micro-batch itself."""
    c = np.array([x[0] for x in pieces], np.float64)
    p = np.array([x[1] for x in pieces], np.float64)
    return int(resource_ns(costs, LayerWork.of_pieces(c, p, tp=tp, experts=experts), ATTENTION))


@kept_with_parts
@lru_cache(maxsize=1 << 16)
def _micro_batch_costs(
    costs: CostModel, dp: int, tp: int, experts: int, pieces: tuple[tuple[int, int], ...]
) -> tuple[int, int, int]:
    """One layer's (attention of the slowest group, dispatch or combine, pool item) of a micro-batch
    of these (new tokens, prefix) pieces, kept: a resampled stream's micro-batches recur."""
    # the pieces' weights on Python floats (the same IEEE operations as the array formula,
    # :func:`piece_weight`), as a list: the short-list placement, the same bins as numpy's loop
    where = place_longest_first([piece_weight(costs, c, p) for c, p in pieces], dp).tolist()
    used = sorted(set(where))  # an empty group's attention is 0: only the others are costed
    attn = max(
        _group_attention(costs, tp, experts, tuple([x for x, g in zip(pieces, where, strict=True) if g == h]))
        for h in used
    )
    attn = max(attn, 0) if len(used) < dp else attn
    tokens = float(sum([x[0] for x in pieces]))  # whole tokens: the array's float sum to the bit
    work = LayerWork(tokens, tp, experts, pool_tokens=tokens, sent_per_die=tokens / (dp * tp))
    return attn, int(resource_ns(costs, work, TRANSFER)), int(resource_ns(costs, work, POOL))


@dataclass(frozen=True)
class AfdPingpong(PipelinedPolicy):
    name: ClassVar[str] = "afd-pingpong"
    interleave_choice: ClassVar[bool] = False
    #: named settings of m (the sweep takes policies by name: ``afd-pingpong-m4``)
    variants: ClassVar[dict[str, dict]] = {f"m{m}": {"m": m} for m in M_VALUES}
    answers: ClassVar[tuple[str, ...]] = ("barrier_wait",)
    search_settings: ClassVar[dict[str, tuple]] = {"m": M_VALUES}
    online_former: ClassVar[type[OnlineFormer] | None] = PingpongFormer
    m: int = form_setting(2, "micro-batches (afd-pingpong)")
    #: online: a step takes queued requests FIFO up to this many new tokens
    step_tokens: int = serve_setting(262144)

    @classmethod
    def whatif_label(cls, params: dict) -> str:
        split = f"{str(params.get('attention')).replace('x', '×')} + {params.get('experts')}"
        return f"{cls.name} at {split}, m {params.get('m')}" if "attention" in params else cls.name

    def serve(self, requests: ServingRequests, scenario: Scenario) -> ServingResult:
        """Online: steps cut FIFO when the attention stage is idle, split into m micro-batches that
        ping-pong with the FFN pool on its D×T + E (:class:`PingpongFormer`)."""
        if self.m < 1:
            raise UsageError(f"--m must be at least 1, not {self.m}")
        return super().serve(requests, scenario)

    def online_config(self, scenario: Scenario) -> PipelineConfig:
        """One barriered attention stage of m slots (the D groups act as one)."""
        dep = self.serve_deployment()
        return PipelineConfig(
            groups=1,
            slots=self.m,
            buffer_slots=UNBOUNDED,
            overlap=True,
            comm_share=dep.tp / self.live_experts(dep),
        )

    def max_item_tokens(self) -> int:
        """A micro-batch holds at most a step's tokens (or one longer prompt)."""
        return self.step_tokens

    def slots(self) -> int:
        return self.m

    def _simulate(self, dep: Deployment, former: BatchFormer, slots: int, **kw) -> PipelineTrace:
        """The D×T attention dies run as one barriered stage: one group of m slots."""
        return super()._simulate(
            Deployment(dep.kind, 1, dep.groups * dep.tp, dep.experts), former, slots, **kw
        )

    def former(self, wl: MeasuredWork, costs: CostModel, dep: Deployment) -> BatchFormer:
        if self.m < 1:
            raise UsageError(f"--m must be at least 1, not {self.m}")
        inner = dep
        xs = transfer_factor(wl, costs, asynchronous=True) * costs.whatif_transfer_scale
        starts = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
        batches: list[Batch] = []
        layers = wl.layers
        for step, (per, tot, pool, xf) in _step_tables(wl).items():
            # deal measured groups longest-first onto the D attention groups (attention summed over layers)
            placed = place_longest_first(tot["attn_ns"].to_numpy(), inner.groups)
            where = dict(zip(tot["dp_group"].to_list(), placed.tolist(), strict=True))
            stage = np.zeros((inner.groups, layers))
            for g, layer, a, _ in per:
                stage[where[g], layer] += a
            attn = stage.max(axis=0) * wl.tp / inner.tp / self.m
            moe = np.zeros(layers)
            n_tot = float(pool["tokens"].max() or 0) * max(wl.micro_batches, 1)
            scale = (
                float(costs.moe_ns(n_tot / self.m, self.live_experts(inner)))
                / max(float(costs.moe_ns(n_tot, wl.expert_ranks)), 1.0)
                if wl.has_tokens
                else wl.expert_ranks / self.live_experts(inner) / self.m
            )
            moe[pool["layer"].to_numpy()] = pool["pool_ns"].to_numpy() * scale * costs.whatif_moe_scale
            x = np.zeros(layers)
            if wl.has_tokens and xf.height:
                tpd = float(xf["tokens_per_die"].max() or 0)
                xr = float(costs.transfer_ns(n_tot / self.m / (inner.groups * inner.tp))) / max(
                    float(costs.transfer_ns(tpd)), 1.0
                )
            else:
                xr = 1.0 / self.m
            x[xf["layer"].to_numpy()] = xf["x"].to_numpy() * xr * xs
            batches += pingpong_batches(
                np.rint(attn),
                np.rint(moe),
                np.where(moe > 0, np.rint(x), 0),
                m=self.m,
                ready_ns=int(starts[step]),
                step=step,
            )
        return StaticBatches(batches, groups=1)
