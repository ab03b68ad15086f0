"""Capacity bounds: the highest request rate a deployment can sustain on a workload (DOMAIN.md §8).

A resource that must do W seconds of work per request cannot serve more than 1/W requests per
second, whatever the scheduler: this is the bound a steady-state SLO throughput is checked
against (never above the smallest one), and the binding resource is the one that sets it.
Every bound takes the *least* work a request can cost on its resource, so it is an upper bound
on the rate (a scheduler that batches perfectly could reach it, none can pass it); each resource's
least work is the sum of its registered cost parts' (:func:`~asaptrace.replay.costs.least_ns`;
the built-in parts' terms below):

* attention: a request of c new tokens after a prefix P costs, per layer, at least its variable
  work a(c, P) = c1·(1 − φ)·c/1K + c2·c(2P + c)/1K² + per_request (ms, × attn_tp_ref / T for a
  group of T dies); the per-batch c0 and the φ share are amortised away. D groups share the
  work, so the attention bound is D / (L · E[a]).
* MoE pool: an item of N tokens costs M(N) = max(plateau·r, a + b·r·N/1K); per token M(N)/N falls
  with N, so a request costs at least c · M(N_cap)/N_cap per layer, N_cap the largest item a
  former can cut (its batch cap, or a longer single prompt). Bound: 1 / (L · E[c] · M(N_cap)/N_cap).
* coupled steps: attention and MoE run on the same dies one after the other, and each layer's
  dispatch and combine sit on the critical path after the barrier; the slowest group's attention
  is at least the groups' mean, so a step's work per request is L · (E[a]/D + E[c] · (M(N_cap)/N_cap
  + 2·k_s·X per token)), X's latency amortised over N_cap tokens. That sum is the binding bound;
  its two parts are shown beside it.

Units: rates in requests per second; the lengths are the workload's (every request it may draw).
"""

from __future__ import annotations

import numpy as np

from asaptrace.replay.costs import CostModel, LeastWork, least_ns, parts

#: the resource names a bound can carry (the faces print them)
ATTENTION = "attention groups"
POOL = "MoE pool"
STEPS = "coupled steps"
SAME_DIES_MOE = "MoE on the attention dies"


def attention_work_ns(costs: CostModel, new: np.ndarray, prefix: np.ndarray, *, tp: int) -> float:
    """Mean least attention work of one request for one layer on a group of ``tp`` dies (ns)."""
    return least_ns(costs, LeastWork(new, prefix, tp, 1.0, 1.0), parts.ATTENTION)


def moe_ns_per_token(costs: CostModel, experts: int, n_cap: float) -> float:
    """The least pool time per token of an item on ``experts`` dies holding at most ``n_cap`` tokens."""
    return least_ns(costs, LeastWork(np.zeros(0), np.zeros(0), 1, experts, n_cap), parts.POOL)


def _rate(work_ns: float) -> float:
    return float("inf") if work_ns <= 0 else 1e9 / work_ns


def disaggregated_bounds(
    costs: CostModel,
    new: np.ndarray,
    prefix: np.ndarray,
    *,
    layers: int,
    groups: int,
    tp: int,
    experts: int,
    max_item_tokens: float,
) -> dict[str, float]:
    """Attention groups and the MoE pool of a D×T + E deployment (asap, afd-pingpong)."""
    new = np.asarray(new, np.float64)
    n_cap = max(max_item_tokens, float(new.max()) if len(new) else 1.0)
    attn = layers * attention_work_ns(costs, new, prefix, tp=tp) / groups
    pool = layers * float(new.mean()) * moe_ns_per_token(costs, experts, n_cap)
    return {ATTENTION: _rate(attn), POOL: _rate(pool)}


def coupled_bounds(
    costs: CostModel,
    new: np.ndarray,
    prefix: np.ndarray,
    *,
    layers: int,
    groups: int,
    tp: int,
    max_step_tokens: float,
    overlap: bool = False,
) -> dict[str, float]:
    """A lockstep deployment of D groups × T dies with EP over all of them (coupled, chunked,
    balanced). With two-micro-batch ``overlap`` the collectives may hide, so they are left out."""
    new = np.asarray(new, np.float64)
    n_cap = max(float(max_step_tokens), 1.0)
    attn = layers * attention_work_ns(costs, new, prefix, tp=tp) / groups
    moe = layers * float(new.mean()) * moe_ns_per_token(costs, groups * tp, n_cap)
    xfer = 0.0
    if not overlap:
        per_tok = least_ns(costs, LeastWork(new, np.asarray(prefix), tp, groups * tp, n_cap), parts.TRANSFER)
        xfer = layers * float(new.mean()) * 2 * costs.coupled_k_s * per_tok
    return {ATTENTION: _rate(attn), SAME_DIES_MOE: _rate(moe), STEPS: _rate(attn + moe + xfer)}


def binding(bounds: dict[str, float]) -> tuple[str, float]:
    """The resource whose bound is smallest, and that bound."""
    name = min(bounds, key=bounds.__getitem__)
    return name, bounds[name]
