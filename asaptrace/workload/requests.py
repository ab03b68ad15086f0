"""Requests for the synthetic run: arrival times and prompt lengths, drawn or replayed.

Two sources: a Poisson arrival process at a given rate with lengths from a shipped profile (see
:mod:`asaptrace.workload.lengths`), or a replay of a request trace file (Azure LLM inference CSV or
Mooncake JSONL, the layouts of ``../shared/data/workloads``). Mooncake's ``hash_ids`` give each
request's prefix-cache hit exactly; a profile that carries cache data samples it instead.
Everything is drawn from a ``numpy.random.Generator`` so one seed reproduces the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from asaptrace.errors import UsageError
from asaptrace.workload.derive_lengths import MOONCAKE_BLOCK_TOKENS
from asaptrace.workload.lengths import get_profile


@dataclass(frozen=True)
class Requests:
    """Columnar request list, in arrival order."""

    ids: list[str]
    arrival_ns: np.ndarray  # int64, from the first arrival (0)
    seq_len: np.ndarray  # int64 prompt tokens
    cached_len: np.ndarray  # int64 tokens already in the prefix cache (< seq_len)

    def __len__(self) -> int:
        return len(self.ids)

    def batch_args(self, idx: list[int]) -> dict[str, list]:
        """The step annotation's description of the requests ``idx`` (what a serving engine logs).

        ``arrivals_ns`` are on the run's true clock here; the trace writers stamp them on the
        reference rank's clock (:func:`asaptrace.synth.timeline.written_args`).
        """
        return {
            "seq_lens": [int(self.seq_len[i]) for i in idx],
            "cached_lens": [int(self.cached_len[i]) for i in idx],
            "request_ids": [self.ids[i] for i in idx],
            "arrivals_ns": [int(self.arrival_ns[i]) for i in idx],
        }


@dataclass(frozen=True)
class WorkloadConfig:
    """Where requests come from (``[workload]`` in the TOML configuration)."""

    profile: str = "production"  # length profile name (ignored when replaying)
    rate_per_s: float = 40.0  # Poisson arrival rate
    requests: int = 2000  # how many to draw (the scheduler takes what it needs)
    prefix_cache: bool = False  # sample cached prefixes from the profile (when it has cache data)
    replay: str = ""  # a request trace to replay instead (Azure CSV or Mooncake JSONL)
    max_len: int = 0  # truncate prompts to this many tokens (0: no truncation)


def make_requests(cfg: WorkloadConfig, rng: np.random.Generator) -> Requests:
    """The request list of a run (drawn from ``rng`` or replayed from ``cfg.replay``)."""
    if cfg.replay:
        reqs = replay_requests(Path(cfg.replay))
    else:
        if cfg.rate_per_s <= 0 or cfg.requests <= 0:
            raise UsageError("workload: rate_per_s and requests must be positive")
        prof = get_profile(cfg.profile)
        gaps = rng.exponential(1e9 / cfg.rate_per_s, cfg.requests)
        arrival = np.concatenate([[0], np.cumsum(gaps[1:])]).astype(np.int64)
        seq = prof.sample(rng, cfg.requests)
        cached = prof.sample_cached(rng, seq) if cfg.prefix_cache else np.zeros_like(seq)
        reqs = Requests([f"r{i:05d}" for i in range(cfg.requests)], arrival, seq, cached)
    if cfg.max_len > 0:
        seq = np.minimum(reqs.seq_len, cfg.max_len)
        reqs = Requests(reqs.ids, reqs.arrival_ns, seq, np.minimum(reqs.cached_len, seq - 1))
    return reqs


def replay_requests(path: Path) -> Requests:
    """Read an Azure LLM inference CSV or a Mooncake JSONL request trace."""
    if not path.is_file():
        raise UsageError("no such request trace", path=path)
    try:
        if path.suffix == ".csv":
            return _azure(path)
        return _mooncake(path)
    except (ValueError, KeyError, TypeError) as err:
        raise UsageError(f"not an Azure CSV or Mooncake JSONL request trace ({err})", path=path) from None


def _azure(path: Path) -> Requests:
    times, lens = [], []
    with path.open() as f:
        header = f.readline().strip().split(",")
        i_ts, i_ctx = header.index("TIMESTAMP"), header.index("ContextTokens")
        for line in f:
            if not line.strip():
                continue
            parts = line.rstrip("\n").split(",")
            stamp = parts[i_ts].strip()
            head, _, frac = stamp.partition(".")
            t = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
            times.append(int(t.timestamp()) * 10**9 + int((frac + "000000000")[:9]))
            lens.append(max(1, int(parts[i_ctx])))
    if not lens:
        raise ValueError("no requests")
    t0 = min(times)
    order = np.argsort(np.array(times), kind="stable")
    arrival = (np.array(times, dtype=np.int64) - t0)[order]
    seq = np.array(lens, dtype=np.int64)[order]
    return Requests([f"r{i:05d}" for i in range(len(seq))], arrival, seq, np.zeros_like(seq))


def _mooncake(path: Path) -> Requests:
    rows = [json.loads(line) for line in path.open() if line.strip()]
    if not rows:
        raise ValueError("no requests")
    seen: set[int] = set()
    arrival, seq, cached = [], [], []
    for row in rows:
        n = max(1, int(row["input_length"]))
        hit = 0
        for block in row.get("hash_ids", []):
            if block not in seen:
                break
            hit += 1
        seen.update(row.get("hash_ids", []))
        arrival.append(int(row["timestamp"]) * 1_000_000)
        seq.append(n)
        cached.append(max(0, min(hit * MOONCAKE_BLOCK_TOKENS, n - 1)))
    a = np.array(arrival, dtype=np.int64)
    return Requests(
        [f"r{i:05d}" for i in range(len(rows))],
        a - a.min(),
        np.array(seq, np.int64),
        np.array(cached, np.int64),
    )
