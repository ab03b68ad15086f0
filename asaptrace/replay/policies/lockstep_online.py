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

The built-in formers' hooks also run compiled (:mod:`asaptrace.replay.mechanics.lockstep_run`: the
same steps, each costed from the parts the same :class:`~asaptrace.replay.policies.lockstep_cost.StepCoster`
keeps), unless a subclass replaced one or the routing is on arrival.

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

import numpy as np

from asaptrace.replay.mechanics.lockstep_run import TOKENS, run_compiled
from asaptrace.replay.mechanics.planner import take_in_order
from asaptrace.replay.policies.lockstep_cost import Piece, Served, ServedPolicy, step_coster
from asaptrace.replay.serving.requests import ServingRequests, ServingResult
from asaptrace.replay.serving.scenario import Scenario

__all__ = ["LockstepFormer", "Piece", "ServedPolicy", "serve_lockstep"]


class LockstepFormer:
    """Coupled's online former: FIFO steps up to ``step_tokens``, longest-first (by tokens) onto the
    group with the fewest (≤ ``group_tokens`` each). A subclass overrides a hook (see the module
    docstring); the loop (:func:`serve_lockstep`) keeps the time."""

    #: new tokens per group per step a prompt is cut to (chunked); 0: whole prompts
    chunk: int = 0
    #: whether ``routing = "arrival"`` is honoured (balanced always places at step formation)
    routes_on_arrival: bool = True
    #: the compiled step former that runs this class's very hooks (None: none does;
    #: :func:`~asaptrace.replay.mechanics.lockstep_run.kernel_mode`)
    kernel_mode: int | None = TOKENS

    def __init__(self, req: ServingRequests, sc: Scenario, pol: ServedPolicy) -> None:
        self.st = Served.of(sc, pol)
        self.costs = sc.costs
        self.new = req.new_tokens.tolist()
        self.remaining = list(self.new)
        self.done = req.cached_len.tolist()  # prefix computed so far
        self.queue: deque[int] = deque()
        self.carry: list[int] = [-1] * self.st.dp  # chunked: a cut request whose tail goes first next step
        self.empty_heap = [(0.0, g) for g in range(self.st.dp)]  # (load, group) before a step's placement

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
        # the default weight (tokens) read off the list, without a call a request; a subclass's, called
        weight_of = remaining.__getitem__ if type(self).weight is LockstepFormer.weight else self.weight
        weight = {i: weight_of(i) for i in taken}
        tokens = [0] * d
        # (load, group): the heap's top is min(range(d), key=load) — the least load, the lowest index
        # among equals — in O(log d) a placement instead of O(d) (D = 96 at 384 ranks)
        least = self.empty_heap.copy()
        groups: list[list[Piece]] = [[] for _ in range(d)]
        back: list[int] = []
        for i in sorted(taken, key=weight.__getitem__, reverse=True):  # stable: FIFO among equals
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
    """Serve ``req`` in lockstep steps formed by ``former`` (its policy's online former): in the
    kernel when it runs the former's hooks (:func:`~asaptrace.replay.mechanics.lockstep_run.run_compiled`,
    the same answer), else here."""
    st = former.st
    coster = step_coster(sc.costs, st)  # the step costs kept by their parts (lockstep_cost)
    by_arrival = st.routing == "arrival" and former.routes_on_arrival
    run = None if by_arrival else run_compiled(former, LockstepFormer, req.arrival_ns, coster)
    if run is not None:
        start_a, end_a, own_a, steps = run
        return ServingResult(
            policy=name,
            arrival_ns=req.arrival_ns,
            start_ns=start_a,
            end_ns=end_a,
            own_ns=np.rint(own_a).astype(np.int64),
            new_tokens=req.new_tokens,
            steps=steps,
            layer_items=steps * st.layers * st.dp,
        )
    n, d = len(req), st.dp
    arrival = req.arrival_ns.tolist()
    new, remaining, done, carry = former.new, former.remaining, former.done, former.carry
    # Python lists in the step loop (a numpy element costs ~10× a list's), arrays at the end: the
    # same int64 times and the same float64 sums
    start = [-1] * n
    end = [-1] * n
    own = [0.0] * n
    gqueues: list[deque[int]] = [deque() for _ in range(d)]
    outstanding = [0] * d  # arrival routing: queued + running new tokens per group
    t, ptr, steps = 0, 0, 0

    def route(upto: int, *, inclusive: bool) -> None:
        nonlocal ptr
        while ptr < n and (arrival[ptr] <= upto if inclusive else arrival[ptr] < upto):
            if by_arrival:
                g = outstanding.index(min(outstanding))  # the fewest, the lowest index
                gqueues[g].append(ptr)
                outstanding[g] += new[ptr]
            else:
                former.queue.append(ptr)
            ptr += 1

    while True:
        route(t, inclusive=True)
        busy = max(carry) >= 0 or (any(gqueues) if by_arrival else bool(former.queue))
        if not busy:
            if ptr >= n:
                break
            t = max(t, arrival[ptr])
            continue
        if by_arrival:
            groups = _fill_own_queues(gqueues, carry, remaining, done, st, former.chunk)
        else:
            groups = former.form_step()
        step_ns, shares = coster.cost(groups)
        t_end = t + step_ns
        steps += 1
        for (i, c, _p), share in zip([pc for g in groups for pc in g], shares, strict=True):
            if start[i] < 0:
                start[i] = t
            own[i] += share
            done[i] += c
            remaining[i] -= c
            if remaining[i] == 0:
                end[i] = t_end
        if by_arrival:  # arrivals during the step see its tokens as outstanding, then they are done
            route(t_end, inclusive=False)
            for g, pieces in enumerate(groups):
                for _, c, _ in pieces:
                    outstanding[g] -= c
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
    st: Served,
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
