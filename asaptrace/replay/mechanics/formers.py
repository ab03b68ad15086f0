"""Batch formation, the pipelined mechanics' hook: what a batch is, how formers hand batches out.

A :class:`Batch` carries its per-layer costs (int64 ns); a :class:`BatchFormer` is asked for the
next batch whenever a group has a free slot (:mod:`~asaptrace.replay.mechanics.pipelined`). The
offline replay's formers hand out the store's measured batches (:class:`StaticBatches`, placed on
groups up front; :class:`FifoBatches`, FIFO to whichever group asks); each policy's online former
(:mod:`asaptrace.replay.policies`) cuts batches from arrived requests and costs them with
:func:`batch_costs`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from asaptrace.replay.costs import CostModel, LayerWork, layer_costs


def runs_hooks_of(former: object, cls: type, hooks: tuple[str, ...]) -> bool:
    """Whether ``former`` runs ``cls``'s very ``hooks`` (no subclass nor the instance replaced
    one): what a compiled former needs before it runs in a former's place."""
    return not any(getattr(type(former), h) is not getattr(cls, h) or h in vars(former) for h in hooks)


def integer_settings(*values: object) -> bool:
    """Whether every setting is an integer (not a bool): a compiled former's arithmetic is int64."""
    return all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values)


@dataclass(frozen=True)
class Batch:
    """One batch's work: per-layer costs (int64 ns arrays of equal length L).

    ``moe_ns[l] == 0`` marks a dense layer (no pool item: the MLP is in ``attention_ns``).
    ``key`` is what the former wants back in the results (e.g. (step, dp_group, micro_batch)).
    """

    batch_id: int
    ready_ns: int
    attention_ns: np.ndarray
    dispatch_ns: np.ndarray
    moe_ns: np.ndarray
    combine_ns: np.ndarray
    alone: bool = False
    step: int = 0
    key: tuple = ()

    @property
    def layers(self) -> int:
        return len(self.attention_ns)


class BatchFormer(Protocol):
    """The batch-formation hook (see the module docstring)."""

    def wakeups(self) -> Iterable[int]: ...

    def fresh(self) -> BatchFormer:
        """The same former before any batch was handed out (a policy may simulate several runs)."""
        ...

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | tuple[Batch, int] | int | None:
        """A batch for ``group`` (it has a free slot; ``group_idle``: none in use), or None: none
        for it now. An int T > ``now_ns`` says more: no batch for any group before T, whatever the
        groups do meanwhile — the pipeline then asks nobody before T (an online former with nothing
        queued answers its next arrival: at every event, every free group would be asked); a
        ``(batch, T)`` pair is a batch that leaves nothing for anyone before T."""
        ...


@dataclass
class StaticBatches:
    """Offline former: pre-built batches, each placed on a group up front, FIFO per group.

    Placement is decided before the run — given (``placement``: batch id → group, e.g. the groups
    a :class:`FifoBatches` run chose, so that an ablation replays the same schedule with longer
    items) or step by step, longest attention work first onto the group with the least placed
    work (:func:`~asaptrace.replay.mechanics.planner.place_longest_first`). A batch marked ``alone`` waits
    until its group is idle.
    """

    batches: list[Batch]
    groups: int = 1
    placement: dict[int, int] | None = None
    #: with ``placement``: hand each group's batches out in the given order (a former's own order,
    #: :meth:`FifoBatches.placed`) instead of by ready time, then id
    keep_order: bool = False
    _queues: list[deque[Batch]] = field(init=False)

    def __post_init__(self) -> None:
        from asaptrace.replay.mechanics.planner import place_longest_first

        self._queues = [deque() for _ in range(self.groups)]
        order = sorted(self.batches, key=lambda b: (b.ready_ns, b.batch_id))
        if self.placement is not None and self.keep_order:
            order = list(self.batches)
        if self.placement is not None:
            for b in order:
                self._queues[self.placement[b.batch_id]].append(b)
            return
        by_step: dict[int, list[Batch]] = {}
        for b in order:
            by_step.setdefault(b.ready_ns, []).append(b)
        load = np.zeros(self.groups)
        for ready in sorted(by_step):
            step = by_step[ready]
            where = place_longest_first([float(b.attention_ns.sum()) for b in step], self.groups, load=load)
            for b, g in zip(step, where, strict=True):
                self._queues[int(g)].append(b)

    def wakeups(self) -> Iterable[int]:
        return sorted({b.ready_ns for b in self.batches})

    def fresh(self) -> StaticBatches:
        """The same former, before any batch was handed out (for another run; a subclass stays one)."""
        return replace(self)

    def placed(self, group_of: dict[int, int]) -> StaticBatches:
        return StaticBatches(self.batches, self.groups, dict(group_of))

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        q = self._queues[group]
        if not q or q[0].ready_ns > now_ns or (q[0].alone and not group_idle):
            return None
        return q.popleft()


@dataclass
class FifoBatches:
    """Offline former of DOMAIN §7: pre-built batches handed out FIFO (ready time, then id) to
    whichever group asks — the pipeline asks the least-occupied group with a free slot first. A
    batch holding a long prompt (``alone``) is reserved for the group that asked and handed out
    when that group is idle (as the online former does). Hook: :meth:`order` (a subclass's order
    survives :meth:`fresh`)."""

    batches: list[Batch]
    groups: int = 1
    _queue: deque[Batch] = field(init=False)
    _reserved: dict[int, Batch] = field(init=False)

    def __post_init__(self) -> None:
        self._queue = deque(self.order(self.batches))
        self._reserved = {}

    def order(self, batches: list[Batch]) -> list[Batch]:
        """The hook: the order batches are handed out in (default FIFO: ready time, then id); a
        batch is handed out only once ready, so a later-ready batch first holds back those after it."""
        return sorted(batches, key=lambda b: (b.ready_ns, b.batch_id))

    def wakeups(self) -> Iterable[int]:
        return sorted({b.ready_ns for b in self.batches})

    def fresh(self) -> FifoBatches:
        """The same former, before any batch was handed out (a subclass, with its order, stays one)."""
        return replace(self)

    def placed(self, group_of: dict[int, int]) -> StaticBatches:
        """The schedule a run chose, fixed (for a replay in the same service order): each group's
        batches in this former's :meth:`order`."""
        return StaticBatches(self.order(self.batches), self.groups, dict(group_of), keep_order=True)

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        if group in self._reserved:
            return self._reserved.pop(group) if group_idle else None
        if not self._queue or self._queue[0].ready_ns > now_ns:
            return None
        b = self._queue.popleft()
        if b.alone and not group_idle:
            self._reserved[group] = b
            return None
        return b


def batch_costs(
    costs: CostModel,
    new_tokens: np.ndarray,
    prefix: np.ndarray,
    *,
    layers: int,
    dense_layers: int,
    tp: int,
    experts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-layer (attention, dispatch, moe, combine) ns of a batch of pieces, from the cost model.

    For formers that build batches from requests (the online sweep): attention on a TP group of
    ``tp`` dies (the cost model's one TP rule, × attn_tp_ref / tp), dispatch/combine of the batch's tokens per sending die, MoE of its tokens on the
    ``experts``-die pool; the first ``dense_layers`` layers have no pool item.
    """
    lc = layer_costs(costs, LayerWork.of_pieces(new_tokens, prefix, tp=tp, experts=experts))
    attn, xfer, moe = int(lc.attention), int(lc.transfer), int(lc.moe)
    dense = min(max(dense_layers, 0), layers)
    disp = np.zeros(layers, np.int64)
    disp[dense:] = xfer
    pool = np.zeros(layers, np.int64)
    pool[dense:] = moe
    return np.full(layers, attn, np.int64), disp, pool, disp.copy()
