"""The replay's input as types: a store's measured work with the waiting taken out.

:class:`MeasuredWork` (per step, per item, per pool item, per transfer, and the coupled chains),
:class:`StepChain` (one step's collective instances per rank, what the lockstep chain re-runs,
:mod:`~asaptrace.replay.mechanics.lockstep`) and :class:`ChainKernels` (a chain built from a kernel
program). :func:`asaptrace.replay.whatif.measured.extract_measured_work` fills them from a store;
the column tables are described there.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import polars as pl

T = TypeVar("T")


@dataclass(frozen=True)
class ChainKernels:
    """A chain whose positions are the kernels of a program, in launch order (cost-built chains).

    Each position is one kernel on every rank: a collective (``barrier``: it ends at the last
    arrival + its transfer) or a local kernel (ends at its own start + its duration, no wait).
    ``after[k]`` is the previous kernel on the same stream (−1: none), whose end also bounds the
    start: a stream runs one kernel at a time. The host launches the positions in order, one every
    ``launch_ns``; a kernel starts no earlier than ``launch_latency_ns`` after its launch; after a
    ``sync`` position the host waits for its end before launching the next (DeepEP's normal
    dispatch reads the received counts on the host). Measured chains have none of this: their
    positions are collective instances and their gaps the measured work between them.
    """

    op: list[str]  # (K,) kernel names (attention, moe, dispatch, combine, …)
    stream: np.ndarray  # (K,) stream id
    barrier: np.ndarray  # (K,) bool
    after: np.ndarray  # (K,) int
    sync: np.ndarray  # (K,) bool
    launch_ns: int = 0
    launch_latency_ns: int = 0


@dataclass(frozen=True)
class StepChain:
    """One step of a lockstep deployment: K collective instances (in release order) × R ranks.

    Arrays are (K, R) int64 unless said; ``part`` marks the ranks taking part in an instance,
    ``ref[k, r]`` is the position whose end the gap counts from (−1: the rank's step start) and
    ``ref2[k, r]`` (optional) one whose arrival must also have passed.
    """

    step: int
    ranks: np.ndarray  # (R,) rank ids
    kind: list[str]  # (K,) dispatch / combine / collective
    layer: np.ndarray  # (K,) −1 when none
    micro_batch: np.ndarray  # (K,) −1 when none
    part: np.ndarray  # (K, R) bool
    gap: np.ndarray
    ref: np.ndarray
    tail: np.ndarray  # end − release per rank
    transfer: np.ndarray  # (K,) x
    start: np.ndarray  # (R,) step start per rank
    end_ref: np.ndarray  # (R,) position the rank's step end counts from (−1: start)
    end_tail: np.ndarray  # (R,) step end − that position's end
    measured_arrival: np.ndarray
    measured_end: np.ndarray
    #: (K, R) an instance whose *arrival* also bounds the gap's start (−1: none) — the compute
    #: stream's previous work in a cost-built two-micro-batch chain; None for measured chains
    ref2: np.ndarray | None = None
    #: the chain is a kernel program (None: its positions are collective instances)
    kernels: ChainKernels | None = None

    @property
    def n_instances(self) -> int:
        return len(self.kind)


@dataclass(frozen=True)
class MeasuredWork:
    """What a store's run did (tables documented in the module docstring)."""

    source: str
    deployment: str  # coupled | disaggregated
    ranks: pl.DataFrame
    n_groups: int
    tp: int
    micro_batches: int
    expert_ranks: int
    layers: int
    steps: pl.DataFrame
    items: pl.DataFrame
    pool: pl.DataFrame
    transfers: pl.DataFrame
    busy: pl.DataFrame
    batches: pl.DataFrame
    chains: dict[int, StepChain] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: where the request lengths came from ("annotations", "sidecar …"; "" when the store has none)
    batches_source: str = ""
    #: link contention read from the sender kernels (:func:`asaptrace.replay.contention.estimate_contention`)
    contention: dict[str, float] = field(default_factory=dict)

    @property
    def world_size(self) -> int:
        return self.ranks.height

    @property
    def has_tokens(self) -> bool:
        return self.items.height > 0 and self.items["tokens"].null_count() == 0


def kept_per_work(fn: Callable[[MeasuredWork], T]) -> Callable[[MeasuredWork], T]:
    """``fn(work)`` kept for each work while it lives (by identity, a weak reference checking it is
    the same; at most 16 works): what a what-if search derives from a work and nothing else, when
    it replays that work dozens of times (every split, every setting, every Monte-Carlo draw)."""
    kept: dict[int, tuple[weakref.ref, T]] = {}

    @functools.wraps(fn)
    def wrapper(wl: MeasuredWork) -> T:
        hit = kept.get(id(wl))
        if hit is not None and hit[0]() is wl:
            return hit[1]
        got = fn(wl)
        if len(kept) >= 16:
            kept.clear()
        kept[id(wl)] = (weakref.ref(wl), got)
        return got

    return wrapper
