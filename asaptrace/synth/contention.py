"""Link contention of a disaggregated run: a transfer slowed by the transfers already in flight.

The ASAP pool's links carry two directions: dispatch-sends into the pool (one transfer per
attention group's work item, a kernel on each of its T members) and combine-sends out of it (one
transfer per served item, a kernel on each of the E MoE dies). When a die starts its kernel of a
new transfer at time s, the transfers in flight are the *other* transfers of the same direction
the run has already placed one of whose kernels runs at s (``start ≤ s < end``; synth places
transfers in event order, which is time order but for a group's program running ahead of the
pool), n of them, and the die's kernel lasts::

    duration = nominal × jitter × (1 + contention × n)

``contention`` = 0 (the default) leaves every duration, every draw of the random stream and so
every trace unchanged. The coupled run has no such term (its dispatch and combine are collectives
over all ranks, one at a time). The model is synth's own (it calls none of the replay's cost
code): the replay fits its contention term from the measured transfers
(:mod:`asaptrace.replay.contention`) and a twin generated here checks that fit.
"""

from __future__ import annotations

import numpy as np


class Links:
    """The transfers placed on the pool's links so far, and the slowdown a new one meets."""

    def __init__(self, contention: float) -> None:
        self.contention = float(contention)
        self._inst: list[np.ndarray] = []
        self._start: list[np.ndarray] = []
        self._end: list[np.ndarray] = []

    @property
    def on(self) -> bool:
        return self.contention > 0

    def slowdown(self, starts: np.ndarray) -> np.ndarray:
        """1 + contention × (transfers in flight at each die's start); ones when contention is 0."""
        starts = np.asarray(starts, np.int64)
        if not self.on or not self._start:
            return np.ones(starts.shape)
        inst = np.concatenate(self._inst)
        lo, hi = np.concatenate(self._start), np.concatenate(self._end)
        cover = (lo[None, :] <= starts[:, None]) & (starts[:, None] < hi[None, :])
        n = np.array([len(np.unique(inst[row])) for row in cover])
        return 1.0 + self.contention * n

    def place(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Record one transfer (its dies' kernels: starts and ends)."""
        if self.on:
            starts = np.asarray(starts, np.int64)
            self._inst.append(np.full(len(starts), len(self._inst)))
            self._start.append(starts)
            self._end.append(np.asarray(ends, np.int64))
