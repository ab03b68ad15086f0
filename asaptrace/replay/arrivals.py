"""Request streams for the serving sweep, with common random numbers across rates.

One seed fixes one stream: unit-rate exponential gaps g_1, g_2, … and one length sequence
s_1, s_2, … (each from its own generator, so drawing more of one never shifts the other). At rate
λ the arrivals are a_i = (g_1 + … + g_i)/λ, cut at the duration: every rate sees the same
requests, in the same order, only closer together. That is what makes a curve monotone in rate on
a fixed seed, and differences between rates and policies free of sampling noise between them.

A trace file (Mooncake JSONL, Azure CSV; read by :func:`asaptrace.workload.requests.replay_requests`)
or a store's ``batches`` table (its requests' ``arrival_ns``, ``seq_len``, ``cached_len``) works the
same way: its own arrival times are compressed or stretched to rate λ, and its lengths
(clipped to the scenario's ``len_max``) and prefix-cache hits are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asaptrace.errors import UsageError
from asaptrace.replay.scenario import Scenario
from asaptrace.replay.serving_types import ServingRequests

_BLOCK = 8192  # draws are made in fixed blocks, so the stream does not depend on how much is used


@dataclass
class ArrivalStream:
    """Unit-rate arrivals and lengths from one seed (or from a trace), cut to any rate."""

    seed: int
    draw_lengths: object  # callable(rng, n) -> int64 lengths
    cached_fraction: object = None  # callable(rng, lengths) -> cached tokens, or None
    _gaps: list[np.ndarray] = field(default_factory=list)
    _lens: list[np.ndarray] = field(default_factory=list)
    _cached: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._g_rng = np.random.default_rng([self.seed, 1])
        self._l_rng = np.random.default_rng([self.seed, 2])
        self._c_rng = np.random.default_rng([self.seed, 3])

    def _extend(self, n: int) -> None:
        while sum(len(b) for b in self._gaps) < n:
            self._gaps.append(self._g_rng.exponential(1.0, _BLOCK))
            lens = np.asarray(self.draw_lengths(self._l_rng, _BLOCK), np.int64)  # type: ignore[operator]
            self._lens.append(lens)
            if self.cached_fraction is None:
                self._cached.append(np.zeros(_BLOCK, np.int64))
            else:
                self._cached.append(np.asarray(self.cached_fraction(self._c_rng, lens), np.int64))  # type: ignore[operator]

    def at_rate(self, rate: float, duration_s: float) -> ServingRequests:
        """The requests arriving in [0, duration] at ``rate`` per second."""
        if rate <= 0:
            raise UsageError(f"a rate must be positive, not {rate}")
        need = int(rate * duration_s * 1.2) + 64
        while True:
            self._extend(need)
            unit = np.cumsum(np.concatenate(self._gaps))
            if unit[-1] / rate > duration_s:
                break
            need *= 2
        arrival = unit / rate
        k = int(np.searchsorted(arrival, duration_s, side="right"))
        lens = np.concatenate(self._lens)[:k]
        cached = np.concatenate(self._cached)[:k]
        return ServingRequests(
            np.rint(arrival[:k] * 1e9).astype(np.int64), lens, np.minimum(cached, lens - 1)
        )


@dataclass(frozen=True)
class TraceStream:
    """A request trace's arrivals rescaled to any rate (its own mean rate ↦ λ)."""

    arrival_ns: np.ndarray
    seq_len: np.ndarray
    cached_len: np.ndarray
    source: str

    @property
    def native_rate(self) -> float:
        span = float(self.arrival_ns[-1] - self.arrival_ns[0]) / 1e9
        return (len(self.arrival_ns) - 1) / span if span > 0 else float("inf")

    def at_rate(self, rate: float, duration_s: float) -> ServingRequests:
        if rate <= 0:
            raise UsageError(f"a rate must be positive, not {rate}")
        t = (self.arrival_ns - self.arrival_ns[0]).astype(np.float64) * (self.native_rate / rate)
        k = int(np.searchsorted(t, duration_s * 1e9, side="right"))
        return ServingRequests(np.rint(t[:k]).astype(np.int64), self.seq_len[:k], self.cached_len[:k])


def make_stream(
    sc: Scenario, *, workload: str | Path | None = None, lengths: str = "fit"
) -> ArrivalStream | TraceStream:
    """The scenario's stream: Poisson with ``lengths`` ("fit": the scenario's log-logistic, or a
    synth length profile by name), or a trace file's requests when ``workload`` is given."""
    if workload is not None:
        arrival, seq, cached = _trace_requests(Path(workload))
        if len(arrival) < 2:
            raise UsageError("a request trace needs at least two requests", path=workload)
        seq = np.minimum(seq, sc.len_max)
        cached = np.minimum(cached, seq - 1) if sc.prefix_cache else np.zeros_like(seq)
        order = np.argsort(arrival, kind="stable")
        return TraceStream(arrival[order], seq[order], cached[order], str(workload))
    if lengths == "fit":
        return ArrivalStream(sc.seed, sc.lengths.sample)
    from asaptrace.workload.lengths import get_profile

    prof = get_profile(lengths)

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.clip(prof.sample(rng, n), sc.len_min, sc.len_max)

    return ArrivalStream(sc.seed, draw, prof.sample_cached if sc.prefix_cache else None)


def _trace_requests(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_ns, seq_len, cached_len) of a Mooncake / Azure file, or of a store's ``batches``
    (a directory: every request with an arrival time; one without is counted and refused)."""
    if not path.is_dir():
        from asaptrace.workload.requests import replay_requests

        reqs = replay_requests(path)
        return reqs.arrival_ns, reqs.seq_len, reqs.cached_len
    from asaptrace.store import TraceStore

    b = TraceStore.open(path).read("batches")
    if b.height == 0:
        raise UsageError("the store has no batches table to take requests from", path=path)
    missing = b["arrival_ns"].null_count()
    if missing:
        raise UsageError(
            f"{missing} of {b.height} batch rows have no arrival_ns; cannot serve them online", path=path
        )
    cached = b["cached_len"].fill_null(0)
    return b["arrival_ns"].to_numpy(), b["seq_len"].to_numpy(), cached.to_numpy()
