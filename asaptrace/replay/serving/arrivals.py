"""Request streams for the serving sweep, with common random numbers across rates.

One seed fixes one stream: unit-rate exponential gaps g_1, g_2, … and one length sequence
s_1, s_2, … (each from its own generator, so drawing more of one never shifts the other). At rate
λ the arrivals are a_i = (g_1 + … + g_i)/λ, cut at the duration: every rate sees the same
requests, in the same order, only closer together. That is what makes a curve monotone in rate on
a fixed seed, and differences between rates and policies free of sampling noise between them.

A store's ``batches`` table (its requests' ``seq_len``, ``cached_len``, ``arrival_ns``) holds tens
to hundreds of requests: replayed as they are, a high rate would be a burst of a few seconds that
can "meet" a mean-TTFT SLO far above what the hardware sustains (DOMAIN.md §8). So its (length,
prefix) pairs are **resampled** with the seed into a steady stream
(:func:`resampled_stream`): Poisson gaps, or its own inter-arrival shape (gaps over their mean,
resampled) when it holds at least two arrivals per DP group. The sweep extends each rate's run to
at least ``min_arrivals`` arrivals (``at_rate``). A trace file (Mooncake JSONL, Azure CSV; read by
:func:`asaptrace.workload.requests.replay_requests`) is rescaled to rate λ as it is (lengths
clipped to ``len_max``, prefix-cache hits kept) when it lasts the duration at that rate, and
resampled the same way when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asaptrace.errors import UsageError
from asaptrace.replay.serving.requests import ServingRequests
from asaptrace.replay.serving.scenario import Scenario

_BLOCK = 8192  # draws are made in fixed blocks, so the stream does not depend on how much is used


@dataclass
class ArrivalStream:
    """Unit-rate arrivals and lengths from one seed (or resampled from a few requests), cut to any rate.

    ``pairs``: (seq_len, cached_len) of the requests to resample (index drawn with the seed,
    length and prefix kept together); ``gap_shape``: unit-mean gaps to resample instead of
    exponential ones (the requests' own inter-arrival shape)."""

    seed: int
    draw_lengths: object = None  # callable(rng, n) -> int64 lengths (None: ``pairs``)
    cached_fraction: object = None  # callable(rng, lengths) -> cached tokens, or None
    pairs: tuple[np.ndarray, np.ndarray] | None = None
    gap_shape: np.ndarray | None = None
    source: str = "poisson"
    _gaps: list[np.ndarray] = field(default_factory=list)
    _lens: list[np.ndarray] = field(default_factory=list)
    _cached: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._g_rng = np.random.default_rng([self.seed, 1])
        self._l_rng = np.random.default_rng([self.seed, 2])
        self._c_rng = np.random.default_rng([self.seed, 3])

    def _extend(self, n: int) -> None:
        while sum(len(b) for b in self._gaps) < n:
            if self.gap_shape is None:
                self._gaps.append(self._g_rng.exponential(1.0, _BLOCK))
            else:
                self._gaps.append(self._g_rng.choice(self.gap_shape, _BLOCK))
            if self.pairs is not None:
                idx = self._l_rng.integers(0, len(self.pairs[0]), _BLOCK)
                self._lens.append(self.pairs[0][idx])
                self._cached.append(self.pairs[1][idx])
                continue
            lens = np.asarray(self.draw_lengths(self._l_rng, _BLOCK), np.int64)  # type: ignore[misc]
            self._lens.append(lens)
            if self.cached_fraction is None:
                self._cached.append(np.zeros(_BLOCK, np.int64))
            else:
                self._cached.append(np.asarray(self.cached_fraction(self._c_rng, lens), np.int64))  # type: ignore[operator]

    def at_rate(self, rate: float, duration_s: float, min_arrivals: int = 0) -> ServingRequests:
        """The requests arriving in [0, duration] at ``rate`` per second, extended past the
        duration to ``min_arrivals`` when fewer arrived in it (DOMAIN §8)."""
        if rate <= 0:
            raise UsageError(f"a rate must be positive, not {rate}")
        need = max(int(rate * duration_s * 1.2) + 64, min_arrivals + 1)
        while True:
            self._extend(need)
            unit = np.cumsum(np.concatenate(self._gaps))
            if unit[-1] / rate > duration_s and len(unit) > min_arrivals:
                break
            need *= 2
        arrival = unit / rate
        k = max(int(np.searchsorted(arrival, duration_s, side="right")), min_arrivals)
        lens = np.concatenate(self._lens)[:k]
        cached = np.concatenate(self._cached)[:k]
        return ServingRequests(
            np.rint(arrival[:k] * 1e9).astype(np.int64), lens, np.minimum(cached, lens - 1)
        )

    def lengths(self, n: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The stream's (new tokens, prefix) over its first ``n`` draws (the requests a run of
        ``n`` arrivals serves; 0: its first block): the lengths capacity bounds read."""
        n = n or _BLOCK
        self._extend(n)
        seq = np.concatenate(self._lens)[:n]
        cached = np.minimum(np.concatenate(self._cached)[:n], seq - 1)
        return (seq - cached).astype(np.float64), cached.astype(np.float64)


def resampled_stream(
    seed: int,
    seq_len: np.ndarray,
    cached_len: np.ndarray,
    arrival_ns: np.ndarray | None,
    *,
    groups: int,
    source: str,
) -> ArrivalStream:
    """A steady stream from a few requests (a store's, a short trace's): each request's (length,
    prefix) pair resampled with the seed; Poisson gaps, or the requests' own inter-arrival shape
    (gaps over their mean, resampled) when they hold at least two arrivals per DP group."""
    seq = np.asarray(seq_len, np.int64)
    cached = np.minimum(np.asarray(cached_len, np.int64), seq - 1)
    shape = None
    if arrival_ns is not None and len(arrival_ns) >= 2 * max(groups, 1) + 1:
        gaps = np.diff(np.sort(np.asarray(arrival_ns, np.int64))).astype(np.float64)
        if gaps.mean() > 0:
            shape = gaps / gaps.mean()
    how = "their inter-arrival shape rescaled" if shape is not None else "Poisson arrivals"
    return ArrivalStream(
        seed,
        pairs=(seq, cached),
        gap_shape=shape,
        source=f"{source}: {len(seq)} requests' lengths resampled, {how}",
    )


@dataclass(frozen=True)
class TraceStream:
    """A request trace's arrivals rescaled to any rate (its own mean rate ↦ λ); at a rate where
    the trace ends before the duration (or holds fewer than the arrivals asked for), its requests
    resampled instead (``fallback``: a trace is never a stream that ends before the duration)."""

    arrival_ns: np.ndarray
    seq_len: np.ndarray
    cached_len: np.ndarray
    source: str
    fallback: ArrivalStream

    @property
    def native_rate(self) -> float:
        span = float(self.arrival_ns[-1] - self.arrival_ns[0]) / 1e9
        return (len(self.arrival_ns) - 1) / span if span > 0 else float("inf")

    def covers(self, rate: float, duration_s: float, min_arrivals: int = 0) -> bool:
        """Whether the trace itself, rescaled to ``rate``, lasts the duration with enough arrivals."""
        span_s = float(self.arrival_ns[-1] - self.arrival_ns[0]) / 1e9 * (self.native_rate / rate)
        return span_s >= duration_s and len(self.arrival_ns) >= max(min_arrivals, rate * duration_s)

    def at_rate(self, rate: float, duration_s: float, min_arrivals: int = 0) -> ServingRequests:
        if rate <= 0:
            raise UsageError(f"a rate must be positive, not {rate}")
        if not self.covers(rate, duration_s, min_arrivals):
            return self.fallback.at_rate(rate, duration_s, min_arrivals)
        t = (self.arrival_ns - self.arrival_ns[0]).astype(np.float64) * (self.native_rate / rate)
        k = int(np.searchsorted(t, duration_s * 1e9, side="right"))
        return ServingRequests(np.rint(t[:k]).astype(np.int64), self.seq_len[:k], self.cached_len[:k])

    def lengths(self, n: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The trace's (new tokens, prefix), every request (``n`` is the resampled stream's)."""
        return (self.seq_len - self.cached_len).astype(np.float64), self.cached_len.astype(np.float64)


def make_stream(
    sc: Scenario, *, workload: str | Path | None = None, lengths: str = "fit"
) -> ArrivalStream | TraceStream:
    """The scenario's stream: Poisson with ``lengths`` ("fit": the scenario's log-logistic, or a
    synth length profile by name), a store's requests resampled (a store holds a few; DOMAIN §8),
    or a trace file's requests when ``workload`` is given (resampled at a rate it is too short for)."""
    if workload is not None:
        path = Path(workload)
        arrival, seq, cached, groups = _trace_requests(path)
        if len(seq) < 1:
            raise UsageError("a request trace needs at least one request", path=workload)
        seq = np.minimum(seq, sc.len_max)
        cached = np.minimum(cached, seq - 1) if sc.prefix_cache else np.zeros_like(seq)
        if arrival is not None:
            order = np.argsort(arrival, kind="stable")
            arrival, seq, cached = arrival[order], seq[order], cached[order]
        what = f"the store's own requests ({workload})" if path.is_dir() else str(workload)
        fallback = resampled_stream(sc.seed, seq, cached, arrival, groups=groups, source=what)
        if path.is_dir() or arrival is None or len(arrival) < 2:
            return fallback
        return TraceStream(arrival, seq, cached, str(workload), fallback)
    if lengths == "fit":
        return ArrivalStream(sc.seed, sc.lengths.sample)
    from asaptrace.workload.lengths import get_profile

    prof = get_profile(lengths)

    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return np.clip(prof.sample(rng, n), sc.len_min, sc.len_max)

    return ArrivalStream(sc.seed, draw, prof.sample_cached if sc.prefix_cache else None)


#: DP groups a request file is taken to have been served on (the paper's Default, DP8): its
#: inter-arrival shape is kept when it holds at least two arrivals per group
FILE_GROUPS = 8


#: the request files read lately, by path, size and mtime (a search builds one stream per seed from
#: the same file, and opening a store checks its every file): read-only arrays, at most 4 files
_READ: dict[tuple[str, int, int], tuple[np.ndarray | None, np.ndarray, np.ndarray, int]] = {}


def _trace_requests(path: Path) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, int]:
    """(arrival_ns, seq_len, cached_len, DP groups) of a Mooncake / Azure file, or of a store's
    ``batches`` (a directory: each request once; arrival_ns None when any request has no arrival
    time; its own DP groups). Kept while the file's size and mtime stay (:data:`_READ`)."""
    try:
        st = path.stat()
    except OSError:
        return _read_requests(path)  # (its own error, naming the file)
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _READ:
        got = _read_requests(path)
        for a in got[:3]:
            if a is not None:
                a.flags.writeable = False
        if len(_READ) >= 4:
            _READ.clear()
        _READ[key] = got
    return _READ[key]


def _read_requests(path: Path) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, int]:
    if not path.is_dir():
        from asaptrace.workload.requests import replay_requests

        reqs = replay_requests(path)
        return reqs.arrival_ns, reqs.seq_len, reqs.cached_len, FILE_GROUPS
    from asaptrace.store import TraceStore

    b = TraceStore.open(path).read("batches")
    if b.height == 0:
        raise UsageError("the store has no batches table to take requests from", path=path)
    if "request_id" in b.columns:  # a request cut over several steps is one request
        b = b.unique("request_id", keep="first", maintain_order=True)
    cached = b["cached_len"].fill_null(0).to_numpy()
    arrival = None if b["arrival_ns"].null_count() else b["arrival_ns"].to_numpy()
    groups = int(b["dp_group"].n_unique()) if "dp_group" in b.columns else FILE_GROUPS
    return arrival, b["seq_len"].to_numpy(), cached, groups
