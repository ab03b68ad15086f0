"""The batch planner: which requests run in which step, DP group and micro-batch.

The one planner of the project: synth plans its runs with it (imported directly), and the online
serving sweep's Default former can cut its steps with it.

Admission is FIFO: a step takes the longest prefix of the waiting queue whose new tokens fit in
``step_tokens`` (always at least one request). The admitted requests are then spread over batch
slots by **token count** — longest first onto the least-loaded slot — the way production
schedulers balance DP groups. Token counts come out nearly equal while Σs² does not, which is
exactly the imbalance the coupled deployment pays for at every MoE barrier (DOMAIN.md §1).
The coupled and disaggregated runs admit the same requests per step from the same workload.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from asaptrace.errors import UsageError


class Requests(Protocol):
    """What the planner reads of a request list (columnar, in arrival order)."""

    arrival_ns: np.ndarray
    seq_len: np.ndarray
    cached_len: np.ndarray

    def __len__(self) -> int: ...


@dataclass(frozen=True)
class StepPlan:
    """One prefill step: its requests and how they are split into (group, micro_batch) slots."""

    step: int
    ready_ns: int  # the last admitted request's arrival (the step cannot start before)
    slots: dict[tuple[int, int], np.ndarray]  # (dp_group, micro_batch) -> request indexes (ascending)


def new_tokens(reqs: Requests) -> np.ndarray:
    return reqs.seq_len - reqs.cached_len


def admit(reqs: Requests, steps: int, step_tokens: int) -> list[np.ndarray]:
    """FIFO request indexes per step (fewer steps when the workload runs out)."""
    tok = new_tokens(reqs)
    out, i, n = [], 0, len(reqs)
    while len(out) < steps and i < n:
        j, total = i, 0
        while j < n and (j == i or total + tok[j] <= step_tokens):
            total += int(tok[j])
            j += 1
        out.append(np.arange(i, j))
        i = j
    if not out:
        raise UsageError("workload has no requests to schedule")
    return out


def place_longest_first(weights: Any, bins: int, *, load: np.ndarray | None = None) -> np.ndarray:
    """The one placement rule: items by descending weight (ties: lower index first), each onto the
    bin with the least placed weight (ties: the lower bin). Returns each item's bin; ``load`` (the
    bins' weight so far) is updated in place when given."""
    if load is None and isinstance(weights, list) and len(weights) <= 64:
        return _place_few(weights, max(int(bins), 1))
    w = np.asarray(weights, np.float64)
    load = np.zeros(max(int(bins), 1)) if load is None else load
    where = np.zeros(len(w), np.int64)
    for i in np.argsort(-w, kind="stable"):
        b = int(np.argmin(load))
        where[i] = b
        load[b] += w[i]
    return where


def _place_few(weights: list, bins: int) -> np.ndarray:
    """:func:`place_longest_first` of a short list on Python floats (an online step's few requests,
    cut ~10⁵ times a search): the same order (a stable sort by descending weight), the same first
    least-loaded bin and the same float64 sums, without numpy's per-call cost."""
    w = [float(x) for x in weights]
    load = [0.0] * bins
    where = [0] * len(w)
    for i in sorted(range(len(w)), key=lambda i: -w[i]):
        b = load.index(min(load))
        where[i] = b
        load[b] += w[i]
    return np.array(where, np.int64)


def balance(idx: np.ndarray, tokens: np.ndarray, bins: int) -> list[np.ndarray]:
    """Longest-processing-time assignment of requests to ``bins`` by token count."""
    idx = np.asarray(idx, np.int64)
    where = place_longest_first(np.asarray(tokens)[idx], bins)
    return [np.sort(idx[where == b]) for b in range(bins)]


def plan_coupled(reqs: Requests, steps: int, step_tokens: int, dp: int, micro_batches: int) -> list[StepPlan]:
    """Token-balanced DP groups, each split into ``micro_batches`` token-balanced halves."""
    tok = new_tokens(reqs)
    plans = []
    for s, idx in enumerate(admit(reqs, steps, step_tokens)):
        slots = {}
        for g, members in enumerate(balance(idx, tok, dp)):
            for m, part in enumerate(balance(members, tok, micro_batches)):
                slots[(g, m)] = part
        plans.append(StepPlan(s, int(reqs.arrival_ns[idx].max()), slots))
    return plans


def plan_disaggregated(
    reqs: Requests, steps: int, step_tokens: int, groups: int, dual_batch: bool
) -> list[StepPlan]:
    """The same admitted requests spread over ``groups × 2`` interleaved batches (or ``groups``)."""
    tok = new_tokens(reqs)
    per_group = 2 if dual_batch else 1
    plans = []
    for s, idx in enumerate(admit(reqs, steps, step_tokens)):
        parts = balance(idx, tok, groups * per_group)
        slots = {(k % groups, k // groups): part for k, part in enumerate(parts)}
        plans.append(StepPlan(s, int(reqs.arrival_ns[idx].max()), slots))
    return plans


def take_in_order(
    queue: deque[int], ordered: Iterable[int], admit: Callable[[int, list[int], int], bool], size: list[int]
) -> tuple[list[int], deque[int]]:
    """One batch off an online former's queue: requests in ``ordered`` (the former's order of
    ``queue``; ``queue`` itself: FIFO) while ``admit(request, taken, tokens)`` says yes — the first
    always joins; ``size[i]`` its new tokens. Returns the batch and the queue left (arrival order)."""
    taken: list[int] = []
    tokens = 0
    if ordered is queue:  # FIFO: a prefix of the queue, popped in place
        while queue and (not taken or admit(queue[0], taken, tokens)):
            i = queue.popleft()
            taken.append(i)
            tokens += size[i]
        return taken, queue
    for i in ordered:
        if taken and not admit(i, taken, tokens):
            break
        taken.append(i)
        tokens += size[i]
    chosen = set(taken)
    return taken, deque(i for i in queue if i not in chosen)
