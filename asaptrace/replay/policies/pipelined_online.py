"""The pipelined family's online loop: a batch former over arrivals on the replay's pipelined mechanics.

The deployment and its per-layer semantics are :mod:`asaptrace.replay.mechanics.pipelined`'s (D
groups of T dies, slots sharing each group's compute FCFS, one E-die pool serving (batch, layer)
items FIFO; attention → dispatch → pool → combine → next layer; no barrier). A policy's online
former (asap's :class:`~asaptrace.replay.policies.asap.AsapFormer`, afd-pingpong's
:class:`~asaptrace.replay.policies.afd_pingpong.PingpongFormer`) subclasses
:class:`OnlineFormer` and is asked for a batch whenever a group has a free slot and at every
arrival. Its hooks:

* :meth:`OnlineFormer.order` — the queued requests in the order a batch takes them (FIFO);
* :meth:`OnlineFormer.admit` — whether the next request in that order joins the batch being cut;
* ``next_batch`` — when a batch is cut and where it goes (asap: a long prompt's batch alone on an
  idle group; afd-pingpong: a step split into m micro-batches); with nothing queued or held back
  it answers :meth:`OnlineFormer.quiet_until`, the next arrival (alone, or paired with the batch
  that emptied the queue), so that the pipeline asks no group before it (the kernel would
  otherwise ask every free group at every event, for nothing).

:func:`serve_on_pipeline` runs a former and gives each request its batch's end and its own share
of its batch's items (:func:`_own_shares`). Sends never block compute here (:data:`UNBOUNDED`).
A built-in former whose hooks no subclass replaced says so by :meth:`OnlineFormer.compiled_rule`
and runs compiled inside the pipeline kernel instead, with the same answers (≈ 2× faster a serve);
the Python hooks stay the reference and what a subclass runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from asaptrace.replay.mechanics.formers import Batch, integer_settings, runs_hooks_of
from asaptrace.replay.mechanics.pipeline_run import FormedRun, TokenRule, run_formed, run_recorded
from asaptrace.replay.mechanics.pipelined import PipelineConfig
from asaptrace.replay.mechanics.planner import take_in_order
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario

UNBOUNDED = 1 << 62  # receive-buffer slots: sends never block
NEVER = 1 << 62  # no arrival left: nothing for anyone, ever


class OnlineFormer:
    """What every online former on the pipelined mechanics keeps: the requests (arrival, new and
    cached tokens), the queue of those arrived, and per request its start and own time, per
    batch its requests (``members``) — what :func:`serve_on_pipeline` reads."""

    def __init__(self, req: ServingRequests, sc: Scenario) -> None:
        self.sc, self.costs = sc, sc.costs
        self.arrival = req.arrival_ns.tolist()
        self.new = req.new_tokens.tolist()
        self.cached = req.cached_len.tolist()
        n = self.n_arrivals = len(req)
        self.start = np.full(n, -1, np.int64)
        self.own = np.zeros(n, np.float64)
        self.members: list[list[int]] = []  # batch id → its requests
        #: a batch's costs by its pieces in this run, before the module's cache (whose key hashes
        #: the cost model, a dataclass of a dozen floats, at every call)
        self.kept: dict[tuple[tuple[int, int], ...], tuple] = {}
        self.queue: deque[int] = deque()
        self.next_arrival = 0

    def wakeups(self) -> Iterable[int]:
        return sorted(set(self.arrival))

    def arrive(self, now_ns: int) -> None:
        """Queue every request that has arrived by ``now_ns``, in arrival order (asked at every
        wakeup and free slot, ~10⁶ times a search: locals, not attributes, in the loop)."""
        arrival, k = self.arrival, self.next_arrival
        n = len(arrival)
        if k < n and arrival[k] <= now_ns:
            queue = self.queue
            while k < n and arrival[k] <= now_ns:
                queue.append(k)
                k += 1
            self.next_arrival = k

    def quiet_until(self) -> int:
        """The next arrival (:data:`NEVER` after the last): what ``next_batch`` answers when nothing
        is queued or held back — no batch for any group before it (the pipeline asks nobody)."""
        k = self.next_arrival
        return self.arrival[k] if k < self.n_arrivals else NEVER

    # ------------------------------------------------------------------------------------- hooks
    def order(self, queue: deque[int]) -> Iterable[int]:
        """The hook: the queued requests in the order a batch takes them (default: FIFO, the queue
        itself). Another order returns another sequence of the same requests (shortest-first:
        ``sorted(queue, key=self.new.__getitem__)``)."""
        return queue

    def admit(self, request: int, batch: list[int], tokens: int) -> bool:
        """The hook: whether ``request`` (next in :meth:`order`) joins ``batch`` (non-empty, holding
        ``tokens`` new tokens); the first request always joins. Default: every queued request."""
        return True

    def compiled_rule(self) -> TokenRule | None:
        """The rules of this former when the kernel can run them itself (:func:`serve_on_pipeline`);
        None (the default): its Python hooks run, asked at every free slot and arrival."""
        return None

    def take(self) -> list[int]:
        """One batch's requests off the queue: in :meth:`order` while :meth:`admit` says yes (the
        rest stay queued in arrival order)."""
        reqs, self.queue = take_in_order(self.queue, self.order(self.queue), self.admit, self.new)
        return reqs


#: the hooks every built-in online former's compiled rule replaces (each adds its own)
COMPILED_HOOKS = ("wakeups", "arrive", "quiet_until", "order", "admit", "take", "next_batch", "costs_for")


def runs_own_hooks(former: OnlineFormer, cls: type, hooks: tuple[str, ...], *settings: object) -> bool:
    """Whether ``former`` runs ``cls``'s very ``hooks`` (no subclass nor the instance replaced one)
    on integer ``settings``: what its :meth:`~OnlineFormer.compiled_rule` needs to be exact."""
    if not runs_hooks_of(former, cls, hooks) or not integer_settings(*settings):
        return False
    new, cached = np.asarray(former.new), np.asarray(former.cached)
    return not new.size or (new.dtype.kind == "i" and cached.dtype.kind == "i")  # (not float tokens)


def _own_shares(
    former: OnlineFormer, sizes: np.ndarray, reqs: np.ndarray, attn: np.ndarray, rest: np.ndarray
) -> None:
    """Each request's own kernel time: its share of its batch's items as the pipeline ran them.

    ``sizes`` per batch id its request count, ``reqs`` the batches' requests one after another,
    ``attn`` / ``rest`` per batch its totals (:func:`_totals`). A request's share is A·w/Σw + R·c/Σc
    over its batch (A the batch's attention, w the requests' attention weights, R the rest: dispatch
    + pool + combine, c new tokens). Computed for all batches at once and the same to the bit as a
    per-batch loop (a serving sweep cuts ~30 k batches a point): each batch's float sum Σw as
    ``w[i:j].sum()`` gives it (the batches of one size as the rows of one matrix: numpy sums each
    row with the same inner loop as a 1-d slice — not ``reduceat``, which adds in another order),
    the integer-valued sums exactly in int64.
    """
    c = np.asarray(former.new, np.float64)[reqs]
    w = former.costs.attention_weight(c, np.asarray(former.cached, np.float64)[reqs])
    ends = np.cumsum(sizes)
    starts = ends - sizes
    w_sum = np.empty(len(sizes), np.float64)
    for n in np.unique(sizes).tolist():
        rows = np.flatnonzero(sizes == n)
        w_sum[rows] = w[starts[rows, None] + np.arange(n)].sum(axis=1)
    for k in np.flatnonzero(w_sum <= 0).tolist():  # no variable cost: the fixed cost splits evenly
        i, j = int(starts[k]), int(ends[k])
        w[i:j] = 1.0
        w_sum[k] = float(j - i)
    c_sum = np.add.reduceat(c.astype(np.int64), starts).astype(np.float64)  # integers: exact
    share = np.repeat(attn, sizes) * w / np.repeat(w_sum, sizes) + np.repeat(rest, sizes) * c / np.repeat(
        c_sum, sizes
    )
    former.own[reqs] += share


def _distinct_costs(per: list[Batch]) -> tuple[np.ndarray, list[tuple]]:
    """Each batch's index into the distinct sets of its cost arrays (the formers hand out kept
    arrays: a few thousand a run), and those sets."""
    seen: dict[tuple[int, int, int, int], int] = {}
    costs: list[tuple] = []
    index = np.empty(len(per), np.int64)
    for k, b in enumerate(per):
        arrays = (b.attention_ns, b.dispatch_ns, b.moe_ns, b.combine_ns)
        got = seen.get(key := tuple(map(id, arrays)))
        if got is None:
            got = seen[key] = len(costs)
            costs.append(arrays)
        index[k] = got
    return index, costs


def _totals(costs: list[tuple], cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """Per set of (attention, dispatch, moe, combine) arrays its attention A and rest R (dispatch +
    pool + combine over its layers; the pool item with the launch overhead and, without overlap,
    the pool's share of the communication), as float64 of exact int64 sums."""
    attn = np.empty(len(costs), np.float64)
    rest = np.empty(len(costs), np.float64)
    for k, (attention, dispatch, moe_ns, combine) in enumerate(costs):
        comm = dispatch + combine
        moe = np.asarray(moe_ns).astype(np.int64)
        pool = moe + cfg.launch_ns * (moe > 0)
        if not cfg.overlap:
            pool = pool + np.rint(cfg.comm_share * comm).astype(np.int64)
        attn[k] = float(int(np.asarray(attention).astype(np.int64).sum()))
        rest[k] = float(int(comm.astype(np.int64).sum()) + int(pool.sum()))
    return attn, rest


def _formed_totals(formed: FormedRun, cfg: PipelineConfig) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_totals` of a compiled run's costs: the kernel's int64 sums where they are the same
    numbers (int64 arrays of one length), :func:`_totals` itself for any other answer."""
    attn = formed.attention_total.astype(np.float64)
    rest = formed.rest_total.astype(np.float64)
    other = np.flatnonzero(~formed.exact)
    if other.size:
        attn[other], rest[other] = _totals([formed.costs[k] for k in other.tolist()], cfg)
    return attn, rest


def serve_on_pipeline(
    req: ServingRequests, sc: Scenario, cfg: PipelineConfig, former: OnlineFormer, name: str
) -> ServingResult:
    """Run an online former on the pipelined mechanics: each request ends with its batch, its own
    time its share of its batch's items (:func:`_own_shares`). A former needs ``members`` (batch id
    → requests), ``start``, ``own``, ``new``, ``cached`` and ``costs`` (:class:`OnlineFormer`'s).
    A former whose :meth:`~OnlineFormer.compiled_rule` is not None runs in the kernel
    (:func:`~asaptrace.replay.mechanics.pipeline_run.run_formed`, the same answers; ``members``
    then stays empty) unless the Python engine is picked."""
    rule = former.compiled_rule()
    formed = run_formed(cfg, rule) if rule is not None else None
    if formed is not None:
        former.start[:] = formed.start_ns
        sizes, reqs, done, events = formed.sizes, formed.reqs, formed.done_ns, formed.events
        index = formed.cost_index
        totals = _formed_totals(formed, cfg)
    else:
        trace, batches = run_recorded(cfg, former, spans=False)
        nb = len(former.members)
        sizes = np.fromiter((len(r) for r in former.members), np.int64, nb)
        reqs = np.fromiter((i for r in former.members for i in r), np.int64, int(sizes.sum()))
        done = np.fromiter((trace.done[bid] for bid in range(nb)), np.int64, nb)
        index, costs = _distinct_costs([batches[bid] for bid in range(nb)])
        totals = _totals(costs, cfg)
        events = trace.events
    end = np.full(len(req), -1, np.int64)
    if len(sizes):  # each request ends with its batch (a request is in one batch)
        attn, rest = totals
        _own_shares(former, sizes, reqs, attn[index], rest[index])
        end[reqs] = np.repeat(done, sizes)
    return ServingResult(
        policy=name,
        arrival_ns=req.arrival_ns,
        start_ns=former.start,
        end_ns=end,
        own_ns=np.rint(former.own).astype(np.int64),
        new_tokens=req.new_tokens,
        steps=len(sizes),
        layer_items=len(sizes) * sc.layers,
        events=events,
    )
