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
  + 2·k_s·X per token)), X's latency amortised over N_cap tokens, N_cap the most new tokens a step
  holds (coupled's step cap or one longer prompt; chunked's D × chunk_tokens, prompts being cut,
  whose chunks' causal pairs add up to the prompt's). That sum is the binding bound; its two parts
  are shown beside it. Exact for chunked on one group when every step is full.

Which requests: every rate's run is checked against the bound of the very requests it serves (a
rate above it is unstable), and the bound a sweep reports is :func:`served_bounds`, the bound of
the requests a run at that bound's own rate serves. A resampled stream's mean length wanders with
how many requests a run draws (± 10 % between the first 1,000 and the first 10,000 draws of a
40-request store with heavy-tailed lengths), so a bound read off the shortest run's requests sat a
few per cent under what a long run served (chunked at 384 ranks, issue 40), while on the same
requests no run serves faster than its bound (tests/test_capacity_bound.py).

Units: rates in requests per second; the lengths are the workload's (every request it may draw).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from asaptrace.replay.costs import CostModel, LeastWork, least_ns, parts
from asaptrace.replay.serving.requests import ServingRequests

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


#: rounds of :func:`served_bounds`' fixed point (it settles in two or three: a few per cent more or
#: fewer requests move a long run's mean length by a fraction of that)
FIXED_POINT_ROUNDS = 8


class Served(Protocol):
    """What :func:`served_bounds` reads of a request stream (an arrival stream, a trace's)."""

    def lengths(self, n: int = 0) -> tuple[np.ndarray, np.ndarray]: ...

    def at_rate(self, rate: float, duration_s: float, min_arrivals: int = 0) -> ServingRequests: ...


def served_bounds(
    bounds_of: Callable[[np.ndarray, np.ndarray], dict[str, float] | None],
    stream: Served,
    duration_s: float,
    least: int,
) -> tuple[dict[str, float] | None, tuple[np.ndarray, np.ndarray]]:
    """The bounds of the requests a run at the binding bound's own rate serves, and those requests'
    (new tokens, prefix). From the least a run serves (the stream's first ``least``), the bound b,
    then the requests of a run at b (``duration_s`` of arrivals, at least ``least``: the stream's
    first n(b)), their bound, until the run's size holds. At that fixed point a rate r > b serves
    those requests and ≈ (r − b) × duration more, of the same work each on average, so its own
    bound (every run's check) stays ≈ b < r: a rate above the reported bound is unstable by
    construction, not by a slack."""
    lengths = stream.lengths(least)
    bounds = bounds_of(*lengths)
    for _ in range(FIXED_POINT_ROUNDS):
        rate = binding(bounds)[1] if bounds else float("inf")
        if not np.isfinite(rate):
            break
        served = stream.at_rate(rate, duration_s, least).lengths()
        if all(np.array_equal(a, b) for a, b in zip(served, lengths, strict=True)):
            break
        lengths = served
        bounds = bounds_of(*lengths)
    return bounds, lengths
