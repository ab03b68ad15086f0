"""What online serving takes and gives: a request stream (:class:`ServingRequests`) and one policy's
per-request times (:class:`ServingResult`), with the TTFT identity check (:func:`check_identity`).

Below every policy's online former (:mod:`asaptrace.replay.policies`: each policy's own module,
its family's loop in ``lockstep_online`` / ``pipelined_online``) and the sweep that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asaptrace.errors import AccountingError


@dataclass(frozen=True)
class ServingRequests:
    """Columnar requests in arrival order (int64 arrays)."""

    arrival_ns: np.ndarray
    seq_len: np.ndarray
    cached_len: np.ndarray

    def __post_init__(self) -> None:
        if len(self.arrival_ns) and np.any(np.diff(self.arrival_ns) < 0):
            raise ValueError("requests must be in arrival order")

    @property
    def new_tokens(self) -> np.ndarray:
        return self.seq_len - self.cached_len

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(new tokens, prefix) as floats: what a capacity bound reads of these requests."""
        return self.new_tokens.astype(np.float64), self.cached_len.astype(np.float64)

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass(frozen=True)
class ServingResult:
    """What one policy did with one request stream: per-request times (int64 ns) and counts."""

    policy: str
    arrival_ns: np.ndarray
    start_ns: np.ndarray  # first work (start of the first step / batch holding the request)
    end_ns: np.ndarray  # last layer done
    own_ns: np.ndarray
    new_tokens: np.ndarray
    steps: int  # lockstep steps, or ASAP batches
    layer_items: int  # (group or batch, layer) items simulated
    events: int = 0  # engine events handled (0: a lockstep policy, which needs no event queue)

    @property
    def ttft_ns(self) -> np.ndarray:
        return self.end_ns - self.arrival_ns

    @property
    def queue_ns(self) -> np.ndarray:
        return self.start_ns - self.arrival_ns

    @property
    def sync_ns(self) -> np.ndarray:
        return self.ttft_ns - self.queue_ns - self.own_ns


def check_identity(res: ServingResult) -> ServingResult:
    """Every request finished, after it started, after it arrived; own ≤ TTFT − queue."""
    if len(res.end_ns) and (res.end_ns < 0).any():
        raise AccountingError(f"{res.policy}: {(res.end_ns < 0).sum()} requests never finished")
    if (res.queue_ns < 0).any() or (res.end_ns < res.start_ns).any():
        raise AccountingError(f"{res.policy}: a request started before it arrived or ended before it started")
    # own is a share of kernels the request was in, so it cannot exceed its time in service
    # (1 ns per layer and piece of rounding slack)
    if (res.sync_ns < -res.new_tokens.clip(1, None)).any():
        raise AccountingError(f"{res.policy}: own kernel time exceeds time in service (sync < 0)")
    return res
