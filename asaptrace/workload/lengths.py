"""Prompt-length profiles: quantile tables shipped as package data, sampled by inverse CDF.

A profile is a table of (probability, tokens) points; a length is drawn by taking a uniform u and
interpolating linearly between the two points around it, then rounding. The tables come from
public traces (see ``data/lengths.toml`` for sources and licences, and ``derive_lengths.py`` for how
they are made), so a synthetic workload has the length mix of a real service without shipping the
trace itself. The Mooncake profile also carries the prefix-cache hit fraction of its requests.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from asaptrace.errors import UsageError


@dataclass(frozen=True)
class LengthProfile:
    """One prompt-length distribution (tokens) and, when known, its cached-prefix fraction."""

    name: str
    source: str
    licence: str
    probabilities: tuple[float, ...]
    quantiles: tuple[float, ...]
    cached_fraction: tuple[float, ...] | None = None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` prompt lengths (int64, ≥ 1)."""
        u = rng.random(n)
        return np.maximum(1, np.rint(np.interp(u, self.probabilities, self.quantiles))).astype(np.int64)

    def sample_cached(self, rng: np.random.Generator, lengths: np.ndarray) -> np.ndarray:
        """Cached-prefix tokens for each length (0 when the profile has no cache data); < length."""
        if self.cached_fraction is None:
            return np.zeros(len(lengths), dtype=np.int64)
        frac = np.interp(rng.random(len(lengths)), self.probabilities, self.cached_fraction)
        return np.minimum(np.floor(frac * lengths), lengths - 1).clip(0).astype(np.int64)


@cache
def load_profiles() -> dict[str, LengthProfile]:
    """Every shipped profile, by name."""
    text = resources.files("asaptrace.workload").joinpath("data/lengths.toml").read_text()
    doc = tomllib.loads(text)
    probs = tuple(float(p) for p in doc["probabilities"])
    out = {}
    for name, prof in doc["profiles"].items():
        q = tuple(float(v) for v in prof["quantiles"])
        if len(q) != len(probs) or any(b < a for a, b in itertools.pairwise(q)):
            raise ValueError(f"lengths.toml: profile {name!r} is not a monotone table of {len(probs)} points")
        cf = prof.get("cached_fraction")
        out[name] = LengthProfile(
            name=name,
            source=prof["source"],
            licence=prof["licence"],
            probabilities=probs,
            quantiles=q,
            cached_fraction=None if cf is None else tuple(float(v) for v in cf),
        )
    return out


def get_profile(name: str) -> LengthProfile:
    profiles = load_profiles()
    if name not in profiles:
        raise UsageError(f"unknown length profile {name!r} (known: {', '.join(sorted(profiles))})")
    return profiles[name]
