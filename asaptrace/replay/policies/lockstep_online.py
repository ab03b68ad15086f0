"""The lockstep family's online loop: steps on the coupled deployment (DOMAIN.md §6).

D groups of T dies (the policy's ``attention``, :meth:`LockstepPolicy.serve_groups`) run attention; EP over all D·T dies runs the
MoE layer. A step starts as soon as the previous one ends and a request is queued (work-
conserving). Every layer of a step costs the same (the same pieces are in it), so

    layer = max_g A(group g's pieces) + 2·k_s·X(max_g t_g / T) + M(Σ_g t_g on D·T dies)
    step  = L · layer

(A attention on a group of T dies — the cost model's TP rule, × attn_tp_ref / T —, X transfer,
M MoE of :class:`~asaptrace.replay.costs.CostModel`; dispatch and
combine cost k_s × X for the largest group, after the barrier), run as a one-layer chain of the
replay's lockstep mechanics (:func:`asaptrace.replay.mechanics.lockstep.chain_from_costs`). With
the policy's ``micro_batch_overlap`` each group's pieces are split longest-first into two
micro-batches and the L layers run on the replay's two-micro-batch chain
(:func:`asaptrace.replay.mechanics.lockstep.chain_from_costs_two_mb`: compute attention A, B, MoE A, B per
layer; each collective after its micro-batch's barrier). All requests of a
step finish at its end (a chunked request at the end of the step holding its last chunk).

Which pieces a step holds is the policy's :class:`LockstepFormer` (its ``online_former``), by hooks:

* :meth:`LockstepFormer.order` — the queued requests in the order a step takes them (FIFO);
* :meth:`LockstepFormer.admit` — whether the next one joins (default: up to ``step_tokens``);
* :meth:`LockstepFormer.weight` — what placement balances (default: tokens);
* :meth:`LockstepFormer.form_step` — the step-forming hook itself (default: take by order and
  admit, then longest-first by weight onto the group with the least; chunked overrides it).

Placement (the policy's ``routing = "step"``): the step takes queued requests FIFO up to
its ``step_tokens`` and places them longest-first on the group with the fewest tokens
(≤ ``group_tokens`` per group; a request that does not fit goes back to the queue's
front, keeping FIFO order). ``"arrival"``: each request joins, when it arrives, the queue of the
group with the fewest outstanding (queued or running) tokens, and each group fills its step from
its own queue FIFO (chunked: at most its ``chunk`` per group, cut to fit). Ties go to the lowest
group index; among equal weights the FIFO order is kept (a stable sort).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from asaptrace.replay.costs import K2, CostModel, K, LayerWork, causal_pairs, layer_costs
from asaptrace.replay.mechanics.lockstep import chain_from_costs_two_mb, run_chain
from asaptrace.replay.mechanics.planner import place_longest_first, take_in_order
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario


class ServedPolicy(Protocol):
    """What the loop reads of a lockstep policy (:class:`~asaptrace.replay.policies.base.LockstepPolicy`
    has it): a protocol, so this module does not import the policy base that imports it."""

    step_tokens: int
    group_tokens: int
    routing: str
    micro_batch_overlap: bool

    def serve_groups(self) -> tuple[int, int]: ...


# a piece: (request, new tokens c, prefix P)
Piece = tuple[int, int, int]


@dataclass(frozen=True)
class _Served:
    """The coupled deployment one run serves on: read once from the policy (its D×T, step and group
    budgets, routing, overlap) and the scenario (its layers)."""

    layers: int
    dp: int
    tp: int
    step_tokens: int
    group_tokens: int
    routing: str
    overlap: bool

    @classmethod
    def of(cls, sc: Scenario, pol: ServedPolicy) -> _Served:
        d, t = pol.serve_groups()
        return cls(sc.layers, d, t, pol.step_tokens, pol.group_tokens, pol.routing, pol.micro_batch_overlap)


class LockstepFormer:
    """Coupled's online former: FIFO steps up to ``step_tokens``, longest-first (by tokens) onto the
    group with the fewest (≤ ``group_tokens`` each). A subclass overrides a hook (see the module
    docstring); the loop (:func:`serve_lockstep`) keeps the time."""

    #: new tokens per group per step a prompt is cut to (chunked); 0: whole prompts
    chunk: int = 0
    #: whether ``routing = "arrival"`` is honoured (balanced always places at step formation)
    routes_on_arrival: bool = True

    def __init__(self, req: ServingRequests, sc: Scenario, pol: ServedPolicy) -> None:
        self.st = _Served.of(sc, pol)
        self.costs = sc.costs
        self.new = req.new_tokens.tolist()
        self.remaining = list(self.new)
        self.done = req.cached_len.tolist()  # prefix computed so far
        self.queue: deque[int] = deque()
        self.carry: list[int] = [-1] * self.st.dp  # chunked: a cut request whose tail goes first next step

    # ------------------------------------------------------------------------------------- hooks
    def order(self, queue: deque[int]) -> Iterable[int]:
        """The queued requests in the order a step takes them (default: FIFO, the queue itself)."""
        return queue

    def admit(self, request: int, taken: list[int], tokens: int) -> bool:
        """Whether ``request`` joins a step already holding ``taken`` (``tokens`` new tokens); the
        first always joins. Default: up to ``step_tokens``."""
        return tokens + self.remaining[request] <= self.st.step_tokens

    def weight(self, request: int) -> float:
        """What placement balances across groups (default: the request's remaining tokens)."""
        return self.remaining[request]

    def take(self) -> list[int]:
        """The step's requests off the queue: in :meth:`order` while :meth:`admit` says yes."""
        taken, self.queue = take_in_order(self.queue, self.order(self.queue), self.admit, self.remaining)
        return taken

    def form_step(self) -> list[list[Piece]]:
        """The step-forming hook: each group's pieces. Default: :meth:`take`, then the heaviest
        :meth:`weight` first onto the group with the least (≤ ``group_tokens`` each; a request
        that does not fit goes back to the queue's front, in arrival order)."""
        st, remaining, done = self.st, self.remaining, self.done
        d, cap = st.dp, st.group_tokens
        taken = self.take()
        weight = {i: self.weight(i) for i in taken}
        tokens = [0] * d
        # (load, group): the heap's top is min(range(d), key=load) — the least load, the lowest index
        # among equals — in O(log d) a placement instead of O(d) (D = 96 at 384 ranks)
        least = [(0.0, g) for g in range(d)]
        groups: list[list[Piece]] = [[] for _ in range(d)]
        back: list[int] = []
        for i in sorted(taken, key=lambda i: -weight[i]):  # stable: FIFO among equals
            load, g = least[0]
            c = remaining[i]
            if tokens[g] and tokens[g] + c > cap:
                back.append(i)
                continue
            groups[g].append((i, c, done[i]))
            tokens[g] += c
            heapq.heapreplace(least, (load + weight[i], g))
        if back:  # did not fit: back to the front, in FIFO order
            self.queue.extendleft(sorted(back, reverse=True))
        return groups


def serve_lockstep(req: ServingRequests, sc: Scenario, former: LockstepFormer, name: str) -> ServingResult:
    """Serve ``req`` in lockstep steps formed by ``former`` (its policy's online former)."""
    st = former.st
    n, d = len(req), st.dp
    arrival = req.arrival_ns.tolist()
    new, remaining, done, carry = former.new, former.remaining, former.done, former.carry
    # Python lists in the step loop (a numpy element costs ~10× a list's), arrays at the end: the
    # same int64 times and the same float64 sums
    start = [-1] * n
    end = [-1] * n
    own = [0.0] * n
    costs = sc.costs
    by_arrival = st.routing == "arrival" and former.routes_on_arrival
    gqueues: list[deque[int]] = [deque() for _ in range(d)]
    outstanding = [0] * d  # arrival routing: queued + running new tokens per group
    t, ptr, steps = 0, 0, 0
    kept: dict[tuple, tuple[int, tuple[tuple[float, ...], ...]]] = {}

    def route(upto: int, *, inclusive: bool) -> None:
        nonlocal ptr
        while ptr < n and (arrival[ptr] <= upto if inclusive else arrival[ptr] < upto):
            if by_arrival:
                g = min(range(d), key=outstanding.__getitem__)
                gqueues[g].append(ptr)
                outstanding[g] += new[ptr]
            else:
                former.queue.append(ptr)
            ptr += 1

    while True:
        route(t, inclusive=True)
        busy = any(c >= 0 for c in carry) or (any(gqueues) if by_arrival else bool(former.queue))
        if not busy:
            if ptr >= n:
                break
            t = max(t, arrival[ptr])
            continue
        if by_arrival:
            groups = _fill_own_queues(gqueues, carry, remaining, done, st, former.chunk)
        else:
            groups = former.form_step()
        shape = tuple([tuple([(c, p) for _, c, p in g]) for g in groups])
        got = kept.get(shape)  # this run's, before the module's cache (which hashes costs and st)
        if got is None:
            got = kept[shape] = _step_cost_of(costs, st, shape)
        step_ns, shares = got
        t_end = t + step_ns
        steps += 1
        for g, pieces in enumerate(groups):
            for (i, c, _p), share in zip(pieces, shares[g], strict=True):
                if start[i] < 0:
                    start[i] = t
                own[i] += share
                done[i] += c
                remaining[i] -= c
                if remaining[i] == 0:
                    end[i] = t_end
                if by_arrival:
                    outstanding[g] -= c
        if by_arrival:  # arrivals during the step see its tokens as outstanding
            for g, pieces in enumerate(groups):
                outstanding[g] += sum(c for _, c, _ in pieces)
            route(t_end, inclusive=False)
            for g, pieces in enumerate(groups):
                outstanding[g] -= sum(c for _, c, _ in pieces)
        t = t_end
    return ServingResult(
        policy=name,
        arrival_ns=req.arrival_ns,
        start_ns=np.array(start, np.int64),
        end_ns=np.array(end, np.int64),
        own_ns=np.rint(np.array(own, np.float64)).astype(np.int64),
        new_tokens=req.new_tokens,
        steps=steps,
        layer_items=steps * st.layers * d,
    )


def _fill_own_queues(
    gqueues: list[deque[int]],
    carry: list[int],
    remaining: list[int],
    done: list[int],
    st: _Served,
    chunk: int,
) -> list[list[Piece]]:
    """Arrival routing: each group fills its step from its own queue (its tail first)."""
    cap = chunk or st.group_tokens
    groups: list[list[Piece]] = []
    for g, q in enumerate(gqueues):
        pieces: list[Piece] = []
        load = 0
        i = carry[g]
        if i >= 0:
            c = min(remaining[i], cap)
            pieces.append((i, c, done[i]))
            load += c
            if c == remaining[i]:
                carry[g] = -1
        while q and load < cap:
            i = q[0]
            c = remaining[i]
            if chunk:
                c = min(c, cap - load)
                if c < remaining[i]:
                    carry[g] = i
            elif pieces and load + c > cap:
                break
            q.popleft()
            pieces.append((i, c, done[i]))
            load += c
        groups.append(pieces)
    return groups


# ----------------------------------------------------------------------------------- step cost
def _group_sums(groups: list[list[Piece]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tok = np.array([sum(c for _, c, _ in p) for p in groups], np.float64)
    quad = np.array([sum(causal_pairs(c, pp) for _, c, pp in p) for p in groups], np.float64)
    cnt = np.array([len(p) for p in groups], np.float64)
    return tok, quad, cnt


def _attention_shares(groups: list[list[Piece]], attn: list[int], costs: CostModel) -> list[list[float]]:
    """Each piece's share of its group's attention, by its variable cost (linear + causal term:
    :meth:`CostModel.attention_weight`'s formula on Python floats, the same IEEE operations in the
    same order as numpy's, without a numpy scalar per piece — the hot loop of a coupled run)."""
    c1, c2 = costs.attn_c1_ms, costs.attn_c2_ms
    out = []
    for g, pieces in enumerate(groups):
        w = []
        for _, c, p in pieces:
            cf, pf = float(c), float(p)
            w.append(c1 * cf / K + c2 * causal_pairs(cf, pf) / K2)
        total = sum(w)
        if total <= 0:  # no variable cost: the fixed cost splits evenly
            w, total = [1.0] * len(pieces), float(len(pieces) or 1)
        a = float(attn[g])
        out.append([a * x / total for x in w])
    return out


@lru_cache(maxsize=1 << 15)
def _step_cost_of(
    costs: CostModel, st: _Served, shape: tuple[tuple[tuple[int, int], ...], ...]
) -> tuple[int, tuple[tuple[float, ...], ...]]:
    """:func:`_step_cost` by the step's shape (each group's (new tokens, prefix) pieces), kept: the
    cost reads no request id, and a resampled stream's steps recur across a run, its rates and
    its seeds (pieces numbered by their place in their group, which is all the split reads)."""
    groups = [[(k, c, p) for k, (c, p) in enumerate(g)] for g in shape]
    step_ns, shares = _step_cost(groups, costs, st)
    return step_ns, tuple(tuple(s) for s in shares)


def _step_cost(groups: list[list[Piece]], costs: CostModel, st: _Served) -> tuple[int, list[list[float]]]:
    """Step time (ns) and each piece's own kernel time in it (ns, float), per group."""
    if st.overlap:
        return _step_cost_overlapped(groups, costs, st)
    t, k_s = st.tp, costs.coupled_k_s
    tok, quad, cnt = _group_sums(groups)
    n_total = float(tok.sum())
    lc = layer_costs(costs, LayerWork(tok, t, st.dp * t, n_total, tok / t, quad, cnt))
    attn = np.where(cnt > 0, lc.attention, 0)
    xfer_g = (k_s * lc.transfer.astype(np.float64)).tolist()  # each group's own collective
    xfer = round(k_s * int(lc.transfer[tok.argmax()]))  # the largest group's send
    moe = int(lc.moe)
    layer = _layer_ns(attn, moe, xfer)
    shares = _attention_shares(groups, attn.tolist(), costs)
    n_l, tok_g = st.layers, tok.tolist()
    for g, pieces in enumerate(groups):
        sh, x2, tg = shares[g], 2 * xfer_g[g], tok_g[g]
        for k, (_, c, _) in enumerate(pieces):
            sh[k] = n_l * (sh[k] + x2 * c / tg + moe * c / n_total)
    return n_l * layer, shares


def _layer_ns(attn: np.ndarray, moe: int, xfer: int) -> int:
    """One layer of the step on the replay's lockstep mechanics: each group's attention, the
    dispatch barrier, MoE on every die, the combine barrier (every layer of a step is the same,
    so the step is L of these). The one-layer chain of
    :func:`~asaptrace.replay.mechanics.lockstep.chain_from_costs` run by
    :func:`~asaptrace.replay.mechanics.lockstep.run_chain` in closed form: the dispatch releases
    at the slowest group's attention, every rank then waits its transfer, its MoE and the
    combine's transfer (tests/test_policy_lockstep_step.py holds the two equal)."""
    return int(np.asarray(attn, np.int64).max()) + xfer + moe + xfer


def _split_micro_batches(pieces: list[Piece]) -> tuple[list[Piece], list[Piece]]:
    """Longest-first onto the lighter of two micro-batches (by tokens), each in placement order."""
    tokens = [p[1] for p in pieces]
    where = place_longest_first(tokens, 2)
    order = sorted(range(len(pieces)), key=lambda i: -tokens[i])  # stable: the order they were placed
    return [pieces[i] for i in order if where[i] == 0], [pieces[i] for i in order if where[i] == 1]


def _step_cost_overlapped(
    groups: list[list[Piece]], costs: CostModel, st: _Served
) -> tuple[int, list[list[float]]]:
    """Two micro-batches on the replay's two-micro-batch lockstep chain, L layers."""
    halves = [_split_micro_batches(p) for p in groups]
    t, k_s, e = st.tp, costs.coupled_k_s, st.dp * st.tp
    a_ns, x_ns, m_ns, shares_mb = [], [], [], []
    for k in (0, 1):
        mgroups = [h[k] for h in halves]
        tok, quad, cnt = _group_sums(mgroups)
        lc = layer_costs(costs, LayerWork(tok, t, e, tok.sum(), tok / t, quad, cnt))
        attn = np.where(cnt > 0, lc.attention, 0)
        xfer_g = k_s * lc.transfer.astype(np.float64)
        xfer = round(k_s * int(lc.transfer[tok.argmax()])) if tok.max() > 0 else 0
        moe = int(lc.moe) if tok.sum() > 0 else 0
        a_ns.append(attn)
        x_ns.append(xfer)
        m_ns.append(moe)
        sh = _attention_shares(mgroups, attn.tolist(), costs)
        for g, pieces in enumerate(mgroups):
            for j, (_, c, _) in enumerate(pieces):
                sh[g][j] = st.layers * (sh[g][j] + 2 * xfer_g[g] * c / tok[g] + moe * c / tok.sum())
        shares_mb.append((mgroups, sh))
    n_l = st.layers
    attn_gl = np.repeat(np.stack(a_ns).astype(np.int64)[:, :, None], n_l, axis=2)  # (2, G, L)
    moe_l = np.repeat(np.array(m_ns, np.int64)[:, None], n_l, axis=1)  # (2, L)
    xfer_l = np.repeat(np.array(x_ns, np.int64)[:, None], n_l, axis=1)
    times = run_chain(chain_from_costs_two_mb(attn_gl, moe_l, xfer_l, xfer_l, tp=t))
    step = int(times.step_end.max())  # both micro-batches' last combines are done (run_chain)
    # shares back in the order of the group's pieces
    shares: list[list[float]] = []
    for g, pieces in enumerate(groups):
        by_piece = {}
        for mgroups, sh in shares_mb:
            for piece, s in zip(mgroups[g], sh[g], strict=True):
                by_piece[piece] = s
        shares.append([by_piece[p] for p in pieces])
    return step, shares
