"""Link contention of a disaggregated run: a transfer slowed by the transfers already in flight.

The ASAP pool's links carry two directions: dispatch-sends into the pool (one transfer per
attention group's work item, a kernel on each of its T members) and combine-sends out of it (one
transfer per served item, a kernel on each of the E MoE dies). A die's kernel of a transfer that
starts at time s meets the n *other* transfers of the same direction one of whose kernels runs at
s (``start ≤ s < end``), and lasts::

    duration = nominal × jitter × (1 + contention × n)

n counts every such transfer, whichever was simulated first: a group's program runs ahead of the
engine (it places its kernels as soon as their inputs are known), so its dispatch members are
placed one by one when the engine reaches each one's start (:class:`DieSends`), by then every
kernel that started earlier is on the links. The pool serves items one at a time in arrival
order, so its combines are placed in start order as they are served. This n is exactly the
in-flight count the replay reads from a trace whose clocks agree
(:func:`asaptrace.replay.contention.transfer_kernels`).

``contention`` = 0 (the default) leaves every duration, every draw of the random stream and so
every trace unchanged. The coupled run has no such term (its dispatch and combine are collectives
over all ranks, one at a time). The model is synth's own (it calls none of the replay's cost
code): the replay fits its contention term from the measured transfers and a twin generated here
checks that fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asaptrace.replay.mechanics.engine import Event


@dataclass(frozen=True)
class DieSends(Event):
    """One member's kernel of a group's dispatch-send starts at ``t_ns``."""

    group: int = 0
    die: int = 0


class Links:
    """The kernels placed on one direction's links so far, and the slowdown a new one meets."""

    def __init__(self, contention: float) -> None:
        self.contention = float(contention)
        self._kernels: list[np.ndarray] = []  # (inst, start, end) rows, one array per placement
        self._transfers = 0
        self._pending: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}

    @property
    def on(self) -> bool:
        return self.contention > 0

    def slowdown(self, starts: np.ndarray, own: int = -1) -> np.ndarray:
        """1 + contention × (other transfers in flight at each start); ones when contention is 0."""
        starts = np.asarray(starts, np.int64)
        if not self.on or not self._kernels:
            return np.ones(starts.shape)
        if len(self._kernels) > 1:
            self._kernels = [np.concatenate(self._kernels)]
        table = self._kernels[0]
        inst, lo, hi = table[table[:, 2] > starts.min()].T  # only kernels still running can cover
        cover = (lo[None, :] <= starts[:, None]) & (starts[:, None] < hi[None, :]) & (inst != own)
        return 1.0 + self.contention * np.array([len(np.unique(inst[row])) for row in cover])

    def place(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Record one transfer (its dies' kernels: starts and ends)."""
        if self.on:
            self._add(self._transfers, np.asarray(starts, np.int64), np.asarray(ends, np.int64))
            self._transfers += 1

    def begin(self, group: int, starts: np.ndarray, durs: np.ndarray) -> list[DieSends]:
        """A group's transfer (its members' starts and durations before contention), to be placed
        member by member at their starts: the events the engine runs then (:meth:`started`)."""
        self._pending[group] = (self._transfers, starts, durs, np.full(len(starts), np.nan))
        self._transfers += 1
        return [DieSends(int(s), group=group, die=i) for i, s in enumerate(starts)]

    def started(self, ev: DieSends) -> np.ndarray | None:
        """Place one member's kernel; once every member of the transfer is placed, their slowdowns."""
        inst, starts, durs, slow = self._pending[ev.group]
        s = starts[ev.die : ev.die + 1]
        slow[ev.die] = self.slowdown(s, own=inst)[0]
        self._add(inst, s, s + np.rint(durs[ev.die : ev.die + 1] * slow[ev.die]).astype(np.int64))
        if np.isnan(slow).any():
            return None
        del self._pending[ev.group]
        return slow

    def _add(self, inst: int, starts: np.ndarray, ends: np.ndarray) -> None:
        self._kernels.append(np.column_stack([np.full(len(starts), inst), starts, ends]).astype(np.int64))
