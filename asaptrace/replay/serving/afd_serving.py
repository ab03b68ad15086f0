"""afd-pingpong serving: an online former for the attention–FFN ping-pong (MegaScale-Infer, Step-3).

The deployment is the policy's D×T attention dies + E FFN dies
(:meth:`~asaptrace.replay.policies.PipelinedPolicy.serve_deployment`), but the D groups act as one barriered attention
stage: a micro-batch's attention at a layer takes its slowest group's time. On the pipelined
mechanics (:mod:`asaptrace.replay.mechanics.pipelined`) that is one attention "group" with ``m`` slots:

* when the stage is idle (every micro-batch of the previous step done) and requests are queued, a
  step is cut FIFO up to the policy's ``step_tokens`` new tokens (at least one request: as the coupled
  former), and its requests are dealt longest-first onto ``m`` micro-batches by tokens
  (:func:`~asaptrace.replay.mechanics.planner.place_longest_first`; a step of fewer than m requests has fewer);
* within a micro-batch its requests are dealt longest-first by attention weight onto the D groups;
  its attention at a layer is the slowest group's (``CostModel.attention_ns`` on T dies), its MoE
  item M(its tokens, E), its dispatch and combine X(its tokens / (D·T)) each;
* the micro-batches ping-pong: while one is on the FFN pool the next runs attention; a request's
  TTFT ends when its micro-batch's last layer is done.

A request's own time is its share of its micro-batch's items (as ASAP's, :func:`_own_shares`), so
``sync ≥ 0`` holds: a micro-batch's own items never overlap one another.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.formers import Batch
from asaptrace.replay.mechanics.pipelined import PipelineConfig
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.serving.asap_serving import UNBOUNDED, OnlineFormer, serve_on_pipeline
from asaptrace.replay.serving.policy_settings import AfdSettings
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario


class PingpongFormer(OnlineFormer):
    """Cuts a step when the stage is idle, hands out its micro-batches one per free slot."""

    def __init__(self, req: ServingRequests, sc: Scenario, pol: AfdSettings) -> None:
        super().__init__(req, sc)
        dep = pol.serve_deployment()
        self.m, self.step_tokens = pol.m, pol.step_tokens
        self.dp, self.tp, self.experts = dep.groups, dep.tp, pol.live_experts(dep)
        self.pending: deque[Batch] = deque()  # the current step's micro-batches not handed out yet

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        self.arrive(now_ns)
        if not self.pending:
            if not group_idle or not self.queue:
                return None
            self._cut_step(now_ns)
        b = self.pending.popleft()
        for i in self.members[b.batch_id]:
            self.start[i] = now_ns
        return b

    def _cut_step(self, now_ns: int) -> None:
        q = self.queue
        reqs: list[int] = []
        tokens = 0
        while q and (not reqs or tokens + self.new[q[0]] <= self.step_tokens):
            i = q.popleft()
            reqs.append(i)
            tokens += self.new[i]
        parts = min(self.m, len(reqs))
        where = place_longest_first([self.new[i] for i in reqs], parts)
        for j in range(parts):
            mine = [i for i, w in zip(reqs, where.tolist(), strict=True) if w == j]
            self.pending.append(self._micro_batch(mine, now_ns))

    def _micro_batch(self, reqs: list[int], now_ns: int) -> Batch:
        pieces = tuple((self.new[i], self.cached[i]) for i in reqs)
        attn, xfer, moe = _micro_batch_costs(self.costs, self.dp, self.tp, self.experts, pieces)
        layers = self.sc.layers
        bid = len(self.members)
        self.members.append(reqs)
        return Batch(
            bid,
            now_ns,
            np.full(layers, attn, np.int64),
            np.full(layers, xfer, np.int64),
            np.full(layers, moe, np.int64),
            np.full(layers, xfer, np.int64),
        )


@lru_cache(maxsize=1 << 16)
def _micro_batch_costs(
    costs: CostModel, dp: int, tp: int, experts: int, pieces: tuple[tuple[int, int], ...]
) -> tuple[int, int, int]:
    """One layer's (attention of the slowest group, dispatch or combine, pool item) of a micro-batch
    of these (new tokens, prefix) pieces, kept: a resampled stream's micro-batches recur."""
    c = np.array([x[0] for x in pieces], np.float64)
    p = np.array([x[1] for x in pieces], np.float64)
    groups = place_longest_first(costs.attention_weight(c, p), dp)
    attn = max(
        int(costs.attention_ns(c[groups == g], p[groups == g], tp=tp)) if (groups == g).any() else 0
        for g in range(dp)
    )
    tokens = float(c.sum())
    return attn, int(costs.transfer_ns(tokens / (dp * tp))), int(costs.moe_ns(tokens, experts))


def simulate_afd(req: ServingRequests, sc: Scenario, pol: AfdSettings) -> ServingResult:
    former = PingpongFormer(req, sc, pol)
    cfg = PipelineConfig(
        groups=1, slots=pol.m, buffer_slots=UNBOUNDED, overlap=True, comm_share=former.tp / former.experts
    )
    return serve_on_pipeline(req, sc, cfg, former, pol.name)
