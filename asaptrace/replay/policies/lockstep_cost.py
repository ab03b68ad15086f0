"""What one online lockstep step costs (DOMAIN.md §6), kept by its parts: the hot path of a coupled
serving run (:func:`~asaptrace.replay.policies.lockstep_online.serve_lockstep`).

A step's layer is ``max_g A(group g) + 2·k_s·X(max_g t_g / T) + M(Σ_g t_g)`` (module docstring of
:mod:`~asaptrace.replay.policies.lockstep_online`), so all that a step's shape reads is, per group,
its pieces' attention (and each piece's share of it), and, per step, the largest group's tokens and
the total. :class:`StepCoster` keeps each of these by its own key — a group's (new tokens, prefix)
pieces, a token count — across the steps, runs, rates and seeds of one process: at 96 DP groups a
whole step rarely recurs, its groups' pieces (a store's resampled lengths) nearly always do. Every
number is the one the array formulas give: the same IEEE operations in the same order on the same
values (a numpy element-wise operation on one element is the same operation on a Python float; the
sums are of integers, exact in float64), so the served times are identical to the last bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from asaptrace.replay.costs import (
    ATTENTION,
    K2,
    POOL,
    TRANSFER,
    CostModel,
    K,
    LayerWork,
    causal_pairs,
    kept_with_parts,
    resource_ns,
)
from asaptrace.replay.mechanics.lockstep import chain_from_costs_two_mb, run_chain
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.serving.scenario import Scenario

# a piece: (request, new tokens c, prefix P)
Piece = tuple[int, int, int]
# a step's shape: each group's (new tokens, prefix) pieces — all that its cost reads
Shape = tuple[tuple[tuple[int, int], ...], ...]


class ServedPolicy(Protocol):
    """What the loop reads of a lockstep policy (:class:`~asaptrace.replay.policies.base.LockstepPolicy`
    has it): a protocol, so the loop does not import the policy base that imports it."""

    step_tokens: int
    group_tokens: int
    routing: str
    micro_batch_overlap: bool

    def serve_groups(self) -> tuple[int, int]: ...


@dataclass(frozen=True)
class Served:
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
    def of(cls, sc: Scenario, pol: ServedPolicy) -> Served:
        d, t = pol.serve_groups()
        return cls(sc.layers, d, t, pol.step_tokens, pol.group_tokens, pol.routing, pol.micro_batch_overlap)


#: the step costers of this process by (costs, deployment), the newest last; each keeps at most
#: :data:`KEPT` steps and as many groups, and :data:`KEPT_TOKENS` token counts a table (then starts
#: that table again): a long-lived process does not grow
_COSTERS: dict[tuple[CostModel, Served], StepCoster] = {}
_COSTERS_KEPT = 16
kept_with_parts(_COSTERS.clear)
KEPT = 1 << 16
KEPT_TOKENS = 1 << 20
#: whole token counts a transfer or MoE table is filled with at a time
BLOCK = 4096


def step_coster(costs: CostModel, st: Served) -> StepCoster:
    """The process's :class:`StepCoster` for ``costs`` on ``st`` (one a run: a dictionary look-up)."""
    key = (costs, st)
    got = _COSTERS.pop(key, None) or StepCoster(costs, st)
    _COSTERS[key] = got
    while len(_COSTERS) > _COSTERS_KEPT:
        del _COSTERS[next(iter(_COSTERS))]
    return got


class StepCoster:
    """Step time (ns) and each piece's own kernel time in it (ns, float, per group), by the step's
    shape; its parts kept by their own keys (module docstring)."""

    def __init__(self, costs: CostModel, st: Served) -> None:
        self.costs, self.st = costs, st
        self.steps: dict[Shape, tuple[int, list[list[float]]]] = {}
        #: a group's pieces -> (its tokens, its attention ns, each piece's share of it, its
        #: dispatch + combine 2·k_s·X(tokens / T) as a float)
        self.groups: dict[tuple[tuple[int, int], ...], tuple[float, int, list[float], float]] = {}
        self._moe_of = lambda n: moe_ns(costs, n, st.dp * st.tp)
        #: token counts by blocks of :data:`BLOCK` (index: count // BLOCK): the step's tokens -> M on
        #: all D·T dies; a group's tokens -> X(tokens / T)
        self.moe: dict[int, list[int]] = {}
        self.xfer: dict[int, list[int]] = {}

    def cost(self, groups: list[list[Piece]]) -> tuple[int, list[float]]:
        """The step's time (ns) and each piece's own kernel time (ns, float), the pieces in the
        order of ``groups`` flattened (group 0's first)."""
        keys = tuple([tuple([(c, p) for _, c, p in g]) if g else () for g in groups])
        got = self.steps.get(keys)
        if got is None:
            if len(self.steps) >= KEPT:
                self.steps.clear()
            if self.st.overlap:
                step_ns, shares = _step_cost_overlapped(groups, self.costs, self.st)
                got = (step_ns, [x for sh in shares for x in sh])
            else:
                got = self._cost(keys)
            self.steps[keys] = got
        return got

    def _cost(self, keys: Shape) -> tuple[int, list[float]]:
        """:func:`_step_cost`'s numbers from the kept parts (the shares flattened); the lockstep
        kernel does the same arithmetic on the same parts (``step_cost_c``)."""
        k_s, n_l = self.costs.coupled_k_s, self.st.layers
        parts = self.group_parts(keys)
        toks = [p[0] for p in parts]
        n_total = float(sum(toks))
        xfer = round(k_s * self.xfer_at(max(toks)))
        moe = self.moe_at(n_total)
        layer = max([p[1] for p in parts]) + xfer + moe + xfer
        shares: list[float] = []
        for key, (tg, _, sh, x2) in zip(keys, parts, strict=True):
            if key:
                shares += [
                    n_l * (s + x2 * c / tg + moe * c / n_total) for s, (c, _) in zip(sh, key, strict=True)
                ]
        return n_l * layer, shares

    def group_parts(
        self, keys: Sequence[tuple[tuple[int, int], ...]]
    ) -> list[tuple[float, int, list[float], float]]:
        """Each group's (tokens, attention ns, its pieces' shares of it, dispatch + combine
        2·k_s·X as a float) by its pieces' (new, prefix), kept: what a step's cost is made of (here
        and in the lockstep kernel, :func:`~asaptrace.replay.mechanics.lockstep_run.run_compiled`)."""
        try:
            return [self.groups[k] for k in keys]
        except KeyError:
            self._add_groups(tuple(keys))
            return [self.groups[k] for k in keys]

    def moe_at(self, tokens: float) -> int:
        """M(tokens) on all D·T dies, as a step's cost reads it."""
        return self._table(self.moe, tokens, self._moe_of)

    def xfer_at(self, tokens: float) -> int:
        """X(tokens / T): one send of a group of ``tokens``, before k_s."""
        return self._table(self.xfer, tokens, lambda n: send_ns(self.costs, n / self.st.tp))

    @staticmethod
    def _table(blocks: dict[int, list[int]], tokens: float, of: Callable[[np.ndarray], np.ndarray]) -> int:
        """``of(tokens)`` from its block of :data:`BLOCK` whole token counts, the block filled by one
        array call when first asked (a step's counts are whole: sums of whole pieces)."""
        n = int(tokens)
        if n != tokens or n < 0:
            return int(of(np.float64(tokens)))
        got = blocks.get(n // BLOCK)
        if got is None:
            if len(blocks) >= KEPT_TOKENS // BLOCK:
                blocks.clear()
            lo = n // BLOCK * BLOCK
            got = blocks[n // BLOCK] = of(np.arange(lo, lo + BLOCK, dtype=np.float64)).tolist()
        return got[n % BLOCK]

    def _add_groups(self, keys: Shape) -> None:
        """Keep each new group's tokens, attention (one array call for the step's new groups) and
        its pieces' shares of it."""
        if len(self.groups) >= KEPT:
            self.groups.clear()
        new = [k for k in dict.fromkeys(keys) if k not in self.groups]
        tok = [float(sum(c for c, _ in k)) for k in new]
        quad = [float(sum(causal_pairs(c, p) for c, p in k)) for k in new]
        cnt = np.array([float(len(k)) for k in new])
        attn = np.where(cnt > 0, attention_ns(self.costs, np.array(tok), np.array(quad), cnt, self.st.tp), 0)
        attn_l = attn.tolist()
        shares = _attention_shares(
            [[(j, c, p) for j, (c, p) in enumerate(k)] for k in new], attn_l, self.costs
        )
        k_s = self.costs.coupled_k_s
        for k, t, a, sh in zip(new, tok, attn_l, shares, strict=True):
            self.groups[k] = (t, a, sh, 2 * (k_s * float(self.xfer_at(t))) if k else 0.0)


# --------------------------------------------------- a step's parts, through the cost registry
def attention_ns(costs: CostModel, tok: np.ndarray, quad: np.ndarray, cnt: np.ndarray, tp: int) -> np.ndarray:
    """Each group's attention from its sums (Σc, Σc(2P+c), pieces): every attention part."""
    return resource_ns(costs, LayerWork(tok, tp, quad=quad, n=cnt), ATTENTION)


def moe_ns(costs: CostModel, tokens: Any, experts: float) -> Any:
    """The step's MoE of ``tokens`` on every one of ``experts`` dies: every pool part."""
    return resource_ns(costs, LayerWork(tokens, experts=experts, pool_tokens=tokens), POOL)


def send_ns(costs: CostModel, per_die: Any) -> Any:
    """One dispatch (or combine) of ``per_die`` tokens from each die: every transfer part."""
    return resource_ns(costs, LayerWork(0.0, sent_per_die=per_die), TRANSFER)


def _group_sums(groups: list[list[Piece]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tok = np.array([sum(c for _, c, _ in p) for p in groups], np.float64)
    quad = np.array([sum(causal_pairs(c, pp) for _, c, pp in p) for p in groups], np.float64)
    cnt = np.array([len(p) for p in groups], np.float64)
    return tok, quad, cnt


def piece_weight(costs: CostModel, c: int, p: int) -> float:
    """:meth:`CostModel.attention_weight` of one piece on Python floats: the same IEEE operations in
    the same order as numpy's, without a numpy scalar (a step's placement reads one a request)."""
    cf, pf = float(c), float(p)
    return costs.attn_c1_ms * cf / K + costs.attn_c2_ms * causal_pairs(cf, pf) / K2


def _attention_shares(groups: list[list[Piece]], attn: list[int], costs: CostModel) -> list[list[float]]:
    """Each piece's share of its group's attention, by its variable cost (linear + causal term:
    :meth:`CostModel.attention_weight`'s formula on Python floats, the same IEEE operations in the
    same order as numpy's, without a numpy scalar per piece — the hot loop of a coupled run)."""
    out = []
    for g, pieces in enumerate(groups):
        w = [piece_weight(costs, c, p) for _, c, p in pieces]
        total = sum(w)
        if total <= 0:  # no variable cost: the fixed cost splits evenly
            w, total = [1.0] * len(pieces), float(len(pieces) or 1)
        a = float(attn[g])
        out.append([a * x / total for x in w])
    return out


def _step_cost(groups: list[list[Piece]], costs: CostModel, st: Served) -> tuple[int, list[list[float]]]:
    """Step time (ns) and each piece's own kernel time in it (ns, float), per group."""
    if st.overlap:
        return _step_cost_overlapped(groups, costs, st)
    t, k_s = st.tp, costs.coupled_k_s
    tok, quad, cnt = _group_sums(groups)
    attn = np.where(cnt > 0, attention_ns(costs, tok, quad, cnt, t), 0)
    n_total = float(tok.sum())
    xfer_g = (k_s * send_ns(costs, tok / t).astype(np.float64)).tolist()  # each group's own collective
    xfer = round(k_s * int(send_ns(costs, tok.max() / t)))
    moe = int(moe_ns(costs, n_total, st.dp * t))
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
    groups: list[list[Piece]], costs: CostModel, st: Served
) -> tuple[int, list[list[float]]]:
    """Two micro-batches on the replay's two-micro-batch lockstep chain, L layers."""
    halves = [_split_micro_batches(p) for p in groups]
    t, k_s, e = st.tp, costs.coupled_k_s, st.dp * st.tp
    a_ns, x_ns, m_ns, shares_mb = [], [], [], []
    for k in (0, 1):
        mgroups = [h[k] for h in halves]
        tok, quad, cnt = _group_sums(mgroups)
        attn = np.where(cnt > 0, attention_ns(costs, tok, quad, cnt, t), 0)
        xfer_g = k_s * send_ns(costs, tok / t).astype(np.float64)
        xfer = round(k_s * int(send_ns(costs, tok.max() / t))) if tok.max() > 0 else 0
        moe = int(moe_ns(costs, tok.sum(), e)) if tok.sum() > 0 else 0
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
