"""ASAP serving: D attention groups and one MoE pool, (batch, layer) items, no barrier (DOMAIN.md §6).

D = ``asap_dp`` groups of T = ``asap_tp`` dies, one pool of E = ``asap_experts`` dies. Whenever a
group has a free slot, a batch is cut from the queue FIFO until it holds ≥ ``asap_min_batch_tokens``
new tokens (never more than ``asap_max_batch_tokens``; with less queued it takes what is there: work-
conserving, no timeout) and goes to the least-occupied group (fewest busy slots, then fewest
tokens in flight, then the lowest index). With dual-batch a group has two slots; a batch holding
a prompt of more than ``asap_alone_tokens`` new tokens runs alone on an idle group: it is assigned
to the least-occupied group, which takes no other batch until it has drained and the long batch
has finished. Each layer of a batch is::

    attention on its group (FCFS with the group's other batch) → dispatch X(t/T) →
    MoE pool (one item at a time, FIFO over every group and layer) → combine X(t/T) → next layer

Sends never block compute (no back-pressure). Ablations: ``no_dual_batch`` one slot per group;
``no_overlap`` the pool also serialises its share of the communication, (T/E)·(dispatch + combine),
with each item; ``no_super_kernel`` adds the host launch (``launch_ms``) to each pool item.

Both the group's compute and the pool are single FCFS servers, so an item's start is
max(ready, server free) computed when its ready event is handled (in time order): two events per
(batch, layer) item — ``AttnReady`` and ``PoolArrive`` — on :class:`asaptrace.replay.engine.Engine`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

import numpy as np

from asaptrace.replay._serving_base import Engine, Event
from asaptrace.replay.scenario import Scenario
from asaptrace.replay.serving import ServingRequests, ServingResult


@dataclass(frozen=True, slots=True)
class Arrival(Event):
    req: int
    priority: ClassVar[int] = 10


@dataclass(frozen=True, slots=True)
class BatchDone(Event):
    batch: int
    priority: ClassVar[int] = 20


@dataclass(frozen=True, slots=True)
class AttnReady(Event):
    batch: int
    priority: ClassVar[int] = 30


@dataclass(frozen=True, slots=True)
class PoolArrive(Event):
    batch: int
    priority: ClassVar[int] = 40


@dataclass(frozen=True)
class Mechanisms:
    dual_batch: bool = True
    overlap: bool = True
    super_kernel: bool = True


class _AsapServer:
    """Bookkeeping of one run: queue, groups' slots and compute, the pool, the batches."""

    def __init__(self, req: ServingRequests, sc: Scenario, mech: Mechanisms) -> None:
        self.sc, self.mech, self.costs = sc, mech, sc.costs
        self.arrival = req.arrival_ns.tolist()
        self.new = req.new_tokens.tolist()
        self.cached = req.cached_len.tolist()
        n = len(req)
        self.start = np.full(n, -1, np.int64)
        self.end = np.full(n, -1, np.int64)
        self.own = np.zeros(n, np.float64)
        d = sc.asap_dp
        self.slots = 2 if mech.dual_batch else 1
        self.used = [0] * d  # busy slots per group (a long batch takes them all)
        self.inflight = [0] * d  # new tokens in flight per group
        self.reserved: list[int] = [-1] * d  # a long batch waiting for its group to drain
        self.comp_free = [0] * d
        self.pool_free = 0
        self.queue: deque[int] = deque()
        # per batch
        self.b_group: list[int] = []
        self.b_reqs: list[list[int]] = []
        self.b_tokens: list[int] = []
        self.b_alone: list[bool] = []
        self.b_layer: list[int] = []
        self.b_attn: list[int] = []
        self.b_disp: list[int] = []
        self.b_pool: list[int] = []

    # --------------------------------------------------------------------------------- events
    def handle(self, ev: Event) -> tuple[Event, ...]:
        if type(ev) is AttnReady:
            b = ev.batch
            g = self.b_group[b]
            s = ev.t_ns if ev.t_ns > self.comp_free[g] else self.comp_free[g]
            e = s + self.b_attn[b]
            self.comp_free[g] = e
            return (PoolArrive(e + self.b_disp[b], b),)
        if type(ev) is PoolArrive:
            b = ev.batch
            s = ev.t_ns if ev.t_ns > self.pool_free else self.pool_free
            e = s + self.b_pool[b]
            self.pool_free = e
            self.b_layer[b] += 1
            nxt = e + self.b_disp[b]  # combine costs what dispatch does (same tokens per die)
            if self.b_layer[b] == self.sc.layers:
                return (BatchDone(nxt, b),)
            return (AttnReady(nxt, b),)
        if type(ev) is Arrival:
            self.queue.append(ev.req)
            out: list[Event] = []
            if ev.req + 1 < len(self.arrival):
                out.append(Arrival(self.arrival[ev.req + 1], ev.req + 1))
            return (*out, *self._admit(ev.t_ns))
        if type(ev) is BatchDone:
            return self._finish(ev.batch, ev.t_ns)
        raise TypeError(f"unexpected event {ev!r}")

    def _finish(self, b: int, t: int) -> tuple[Event, ...]:
        for i in self.b_reqs[b]:
            self.end[i] = t
        g = self.b_group[b]
        self.used[g] -= self.slots if self.b_alone[b] else 1
        self.inflight[g] -= self.b_tokens[b]
        out: list[Event] = []
        r = self.reserved[g]
        if r >= 0 and self.used[g] == 0:
            self.reserved[g] = -1
            out.append(self._start(r, g, t))
        return (*out, *self._admit(t))

    # ------------------------------------------------------------------------------ admission
    def _least_occupied(self, *, need_free_slot: bool) -> int:
        best, key = -1, None
        for g in range(self.sc.asap_dp):
            if self.reserved[g] >= 0 or (need_free_slot and self.used[g] >= self.slots):
                continue
            k = (self.used[g], self.inflight[g], g)
            if key is None or k < key:
                best, key = g, k
        return best

    def _admit(self, t: int) -> list[Event]:
        out: list[Event] = []
        sc = self.sc
        while self.queue:
            g = self._least_occupied(need_free_slot=True)
            if g < 0:
                break
            reqs, tokens = [], 0
            q = self.queue
            while q and (
                not reqs
                or (tokens < sc.asap_min_batch_tokens and tokens + self.new[q[0]] <= sc.asap_max_batch_tokens)
            ):
                i = q.popleft()
                reqs.append(i)
                tokens += self.new[i]
            alone = self.slots > 1 and max(self.new[i] for i in reqs) > sc.asap_alone_tokens
            b = self._new_batch(reqs, tokens, alone)
            if alone and self.used[g] > 0:
                self.b_group[b] = g
                self.reserved[g] = b
                self.inflight[g] += tokens
            else:
                out.append(self._start(b, g, t))
        return out

    def _new_batch(self, reqs: list[int], tokens: int, alone: bool) -> int:
        costs, sc = self.costs, self.sc
        c = np.array([self.new[i] for i in reqs], np.float64)
        p = np.array([self.cached[i] for i in reqs], np.float64)
        attn = int(costs.attention_sums_ns(c.sum(), (c * (2 * p + c)).sum(), len(reqs)))
        disp = int(costs.transfer_ns(tokens / sc.asap_tp))
        pool = int(costs.moe_ns(tokens, sc.asap_experts))
        if not self.mech.overlap:
            pool += round(2 * disp * sc.asap_tp / sc.asap_experts)
        if not self.mech.super_kernel:
            pool += costs.launch_ns
        # own kernel time: share of attention by variable cost, of the rest by tokens
        w = costs.attn_c1_ms * c / 1e3 + costs.attn_c2_ms * c * (2 * p + c) / 1e6
        if w.sum() <= 0:  # no variable cost: the fixed cost splits evenly
            w = np.ones_like(c)
        share = attn * w / w.sum() + (2 * disp + pool) * c / tokens
        for i, s in zip(reqs, share.tolist(), strict=True):
            self.own[i] += sc.layers * s
        b = len(self.b_group)
        self.b_group.append(-1)
        self.b_reqs.append(reqs)
        self.b_tokens.append(tokens)
        self.b_alone.append(alone)
        self.b_layer.append(0)
        self.b_attn.append(attn)
        self.b_disp.append(disp)
        self.b_pool.append(pool)
        return b

    def _start(self, b: int, g: int, t: int) -> Event:
        if self.b_group[b] < 0:
            self.inflight[g] += self.b_tokens[b]
        self.b_group[b] = g
        self.used[g] += self.slots if self.b_alone[b] else 1
        for i in self.b_reqs[b]:
            self.start[i] = t
        return AttnReady(t, b)


def simulate_asap(
    req: ServingRequests, sc: Scenario, *, mech: Mechanisms = Mechanisms(), name: str = "asap"
) -> ServingResult:
    server = _AsapServer(req, sc, mech)
    engine = Engine()
    first = [Arrival(int(req.arrival_ns[0]), 0)] if len(req) else []
    engine.run(server.handle, first)
    nb = len(server.b_group)
    return ServingResult(
        policy=name,
        arrival_ns=req.arrival_ns,
        start_ns=server.start,
        end_ns=server.end,
        own_ns=np.rint(server.own).astype(np.int64),
        new_tokens=req.new_tokens,
        steps=nb,
        layer_items=nb * sc.layers,
    )


VARIANTS = {
    "asap": partial(simulate_asap, name="asap"),
    "asap-no-dual-batch": partial(
        simulate_asap, mech=Mechanisms(dual_batch=False), name="asap-no-dual-batch"
    ),
    "asap-no-overlap": partial(simulate_asap, mech=Mechanisms(overlap=False), name="asap-no-overlap"),
    "asap-no-super-kernel": partial(
        simulate_asap, mech=Mechanisms(super_kernel=False), name="asap-no-super-kernel"
    ),
}
