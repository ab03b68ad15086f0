"""ASAP serving: an online batch former on the replay's pipelined mechanics (DOMAIN.md §6).

The deployment and its per-layer semantics are :mod:`asaptrace.replay.mechanics.pipelined`'s, on the
policy's own D×T + E (:meth:`~asaptrace.replay.policies.PipelinedPolicy.serve_deployment`: D
groups of T dies with two slots sharing each group's compute FCFS, one E-die pool serving (batch,
layer) items one at a time, FIFO, any group and layer; attention → dispatch → pool → combine →
next layer; no barrier). Every setting is read off the :class:`~asaptrace.replay.policies.Asap`
object served. This module is only the batch-formation hook (:class:`ServingFormer`) that the
pipeline calls whenever a group has a free slot (least-occupied group first) and at every arrival:

* a batch is cut from the queue of arrived requests FIFO until it holds ≥ the policy's
  ``min_batch_tokens`` new tokens (never more than ``max_batch_tokens``; with less queued it takes
  what is there: work-conserving, no timeout);
* with dual-batch, a batch holding a prompt of more than ``long_tokens`` new tokens runs
  alone on an idle group: cut for a busy group, it reserves that group, which then takes no other
  batch until it has drained and the long batch has started;
* each batch's per-layer costs come from :func:`asaptrace.replay.mechanics.formers.batch_costs`, and each
  request's own kernel time is its share of them (attention by its variable cost, the rest by
  tokens).

Sends never block compute here (the pipeline's receive buffer is unbounded). Ablations are the
policy's switches read by the pipeline: ``dual_batch`` off one slot, ``overlap`` off the pool also
serialises (T/E)·(dispatch + combine) per item, ``super_kernel`` off + ``launch_ms`` per pool item,
``expert_failure`` E − 1 dies serve.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from functools import lru_cache

import numpy as np

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.formers import Batch, batch_costs
from asaptrace.replay.mechanics.pipeline_run import run_recorded
from asaptrace.replay.mechanics.pipelined import PipelineConfig
from asaptrace.replay.serving.policy_settings import AsapSettings
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario

UNBOUNDED = 1 << 62  # receive-buffer slots: sends never block


class OnlineFormer:
    """What every online former on the pipelined mechanics keeps: the requests (arrival, new and
    cached tokens), the FIFO queue of those arrived, and per request its start and own time, per
    batch its requests (``members``) — what :func:`serve_on_pipeline` reads."""

    def __init__(self, req: ServingRequests, sc: Scenario) -> None:
        self.sc, self.costs = sc, sc.costs
        self.arrival = req.arrival_ns.tolist()
        self.new = req.new_tokens.tolist()
        self.cached = req.cached_len.tolist()
        n = len(req)
        self.start = np.full(n, -1, np.int64)
        self.own = np.zeros(n, np.float64)
        self.members: list[list[int]] = []  # batch id → its requests
        self.queue: deque[int] = deque()
        self.next_arrival = 0

    def wakeups(self) -> Iterable[int]:
        return sorted(set(self.arrival))

    def arrive(self, now_ns: int) -> None:
        """Queue every request that has arrived by ``now_ns``, in arrival order."""
        while self.next_arrival < len(self.arrival) and self.arrival[self.next_arrival] <= now_ns:
            self.queue.append(self.next_arrival)
            self.next_arrival += 1


class ServingFormer(OnlineFormer):
    """Cuts batches from arrived requests when the pipeline offers a free slot."""

    def __init__(self, req: ServingRequests, sc: Scenario, pol: AsapSettings) -> None:
        super().__init__(req, sc)
        dep = pol.serve_deployment()
        self.pol, self.tp, self.experts = pol, dep.tp, pol.live_experts(dep)
        self.dual = pol.dual_batch
        self.reserved: dict[int, Batch] = {}  # group → a long batch waiting for it to drain

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        self.arrive(now_ns)
        if group in self.reserved:
            if not group_idle:
                return None
            return self._hand_out(self.reserved.pop(group), now_ns)
        if not self.queue:
            return None
        batch = self._cut(now_ns)
        if batch.alone and not group_idle:
            self.reserved[group] = batch
            return None
        return self._hand_out(batch, now_ns)

    def _cut(self, now_ns: int) -> Batch:
        sc, q, pol = self.sc, self.queue, self.pol
        reqs: list[int] = []
        tokens = 0
        while q and (
            not reqs or (tokens < pol.min_batch_tokens and tokens + self.new[q[0]] <= pol.max_batch_tokens)
        ):
            i = q.popleft()
            reqs.append(i)
            tokens += self.new[i]
        pieces = tuple((self.new[i], self.cached[i]) for i in reqs)
        attn, disp, moe, comb = costs_of(self.costs, sc.layers, self.tp, self.experts, pieces)
        bid = len(self.members)
        self.members.append(reqs)
        alone = self.dual and max(self.new[i] for i in reqs) > pol.long_tokens
        return Batch(bid, now_ns, attn, disp, moe, comb, alone=alone)

    def _hand_out(self, b: Batch, now_ns: int) -> Batch:
        reqs = self.members[b.batch_id]
        for i in reqs:
            self.start[i] = now_ns
        return b


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


def _own_shares(former: OnlineFormer, batches: dict[int, Batch], cfg: PipelineConfig, sc: Scenario) -> None:
    """Each request's own kernel time: its share of its batch's items as the pipeline ran them.

    A request's share is A·w/Σw + R·c/Σc over its batch (A the batch's attention, w the requests'
    attention weights, R the rest: dispatch + pool + combine, c new tokens). Computed for all
    batches at once — each batch's float sums (Σw) on its own contiguous slice, as a per-batch
    ``sum()`` would, and the integer-valued sums exactly in int64 — so the result is the same to
    the bit as the per-batch loop it replaced (a serving sweep cuts ~30 k batches).
    """
    if not former.members:
        return
    members = former.members
    sizes = np.fromiter((len(r) for r in members), np.int64, len(members))
    reqs = np.fromiter((i for r in members for i in r), np.int64, int(sizes.sum()))
    c = np.asarray(former.new, np.float64)[reqs]
    w = former.costs.attention_weight(c, np.asarray(former.cached, np.float64)[reqs])
    ends = np.cumsum(sizes)
    cuts = list(zip((ends - sizes).tolist(), ends.tolist(), strict=True))
    w_sum = np.array([w[i:j].sum() for i, j in cuts])
    for k in np.flatnonzero(w_sum <= 0).tolist():  # no variable cost: the fixed cost splits evenly
        i, j = cuts[k]
        w[i:j] = 1.0
        w_sum[k] = float(j - i)
    c_sum = np.add.reduceat(c.astype(np.int64), ends - sizes).astype(np.float64)  # integers: exact
    per = [batches[bid] for bid in range(len(members))]
    lens = np.fromiter((b.layers for b in per), np.int64, len(per))
    at = np.cumsum(lens) - lens

    def total(arrays: list[np.ndarray]) -> np.ndarray:  # per-batch Σ of integer ns (exact)
        return np.add.reduceat(np.concatenate(arrays).astype(np.int64), at)

    # (every batch here comes from batch_costs: its four arrays have sc.layers entries each)
    comm = np.concatenate([b.dispatch_ns + b.combine_ns for b in per])
    moe = np.concatenate([b.moe_ns for b in per]).astype(np.int64)
    pool = moe + cfg.launch_ns * (moe > 0)
    if not cfg.overlap:
        pool = pool + np.rint(cfg.comm_share * comm).astype(np.int64)
    rest = (np.add.reduceat(comm.astype(np.int64), at) + np.add.reduceat(pool, at)).astype(np.float64)
    attn = total([b.attention_ns for b in per]).astype(np.float64)
    share = np.repeat(attn, sizes) * w / np.repeat(w_sum, sizes) + np.repeat(rest, sizes) * c / np.repeat(
        c_sum, sizes
    )
    former.own[reqs] += share


def simulate_asap(req: ServingRequests, sc: Scenario, pol: AsapSettings) -> ServingResult:
    """Serve ``req`` on the policy's D×T + E with its mechanisms (the policy object is the whole
    configuration: its deployment, batch budgets, long-prompt rule and switches)."""
    former = ServingFormer(req, sc, pol)
    dep = pol.serve_deployment()
    cfg = PipelineConfig(
        groups=dep.groups,
        slots=pol.slots(),
        buffer_slots=UNBOUNDED,
        overlap=pol.overlap,
        comm_share=dep.tp / pol.live_experts(dep),
        launch_ns=0 if pol.super_kernel else sc.costs.launch_ns,
    )
    return serve_on_pipeline(req, sc, cfg, former, pol.name)


def serve_on_pipeline(
    req: ServingRequests, sc: Scenario, cfg: PipelineConfig, former: OnlineFormer, name: str
) -> ServingResult:
    """Run an online former on the pipelined mechanics: each request ends with its batch, its own
    time its share of its batch's items (:func:`_own_shares`). A former needs ``members`` (batch id
    → requests), ``start``, ``own``, ``new``, ``cached`` and ``costs`` (ASAP's, afd-pingpong's)."""
    trace, pipeline_batches = run_recorded(cfg, former, spans=False)
    _own_shares(former, pipeline_batches, cfg, sc)
    end = np.full(len(req), -1, np.int64)
    for bid, reqs in enumerate(former.members):
        end[reqs] = trace.done[bid]
    nb = len(former.members)
    return ServingResult(
        policy=name,
        arrival_ns=req.arrival_ns,
        start_ns=former.start,
        end_ns=end,
        own_ns=np.rint(former.own).astype(np.int64),
        new_tokens=req.new_tokens,
        steps=nb,
        layer_items=nb * sc.layers,
        events=trace.events,
    )
