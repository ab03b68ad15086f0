"""Prompt lengths of the ASAP paper's scenario: a log-logistic fitted to the paper's four facts.

The paper (DOMAIN.md §6) gives its production profile only as facts: mean ≈ 5K tokens, mode ≈ 2.5K,
CDF 0.90 at 10K and 0.98 at 20K, truncated to [31, 32K]. A log-logistic (α scale, β shape),

    F(x) = 1 / (1 + (x/α)^-β),      mode = α·((β−1)/(β+1))^(1/β),

is fitted to those facts **as the sweep uses it: truncated to [lo, hi] and renormalised** (a draw
outside the range is not clamped to it; it is never drawn). So the mean and the CDF values the fit
matches are those of the truncated distribution; the mode is the untruncated one (truncation does
not move it when it lies inside the range). The fit minimises the squared residuals, each divided
by its tolerance (mean 5 %, CDF 0.02, mode 20 %: the paper says "≈"), by a zooming grid search, so
it is deterministic and needs nothing beyond numpy. Draws are by inverse CDF from uniforms, rounded
to whole tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

#: quantile levels printed with a fit
QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.98, 0.99)


@dataclass(frozen=True)
class LengthTargets:
    """What the paper says about its lengths (tokens)."""

    mean: float = 5000.0
    mode: float = 2500.0
    at_p90: float = 10_000.0  # CDF 0.90 here
    at_p98: float = 20_000.0  # CDF 0.98 here
    lo: int = 31
    hi: int = 32_768


@dataclass(frozen=True)
class LogLogistic:
    """A log-logistic truncated to [lo, hi] (renormalised)."""

    alpha: float
    beta: float
    lo: int
    hi: int

    def _cdf_raw(self, x: np.ndarray | float) -> np.ndarray:
        return 1.0 / (1.0 + (np.asarray(x, dtype=float) / self.alpha) ** -self.beta)

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """CDF of the truncated distribution."""
        fa, fb = self._cdf_raw(self.lo), self._cdf_raw(self.hi)
        return np.clip((self._cdf_raw(x) - fa) / (fb - fa), 0.0, 1.0)

    def quantile(self, p: np.ndarray | float) -> np.ndarray:
        """Inverse CDF of the truncated distribution (continuous)."""
        fa, fb = self._cdf_raw(self.lo), self._cdf_raw(self.hi)
        u = fa + np.asarray(p, dtype=float) * (fb - fa)
        return self.alpha * (u / (1.0 - u)) ** (1.0 / self.beta)

    def mean(self) -> float:
        return float(_truncated_mean(np.array([self.alpha]), np.array([self.beta]), self.lo, self.hi)[0])

    def mode(self) -> float:
        return float(self.alpha * ((self.beta - 1) / (self.beta + 1)) ** (1 / self.beta))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` whole-token lengths in [lo, hi] (int64)."""
        x = np.rint(self.quantile(rng.random(n)))
        return np.clip(x, self.lo, self.hi).astype(np.int64)

    def summary(self) -> dict[str, float]:
        """The fitted parameters, the facts it reproduces, and its quantiles (for printing)."""
        out = {"alpha": self.alpha, "beta": self.beta, "lo": self.lo, "hi": self.hi}
        out |= {"mean": self.mean(), "mode": self.mode()}
        out |= {f"q{round(100 * p)}": float(self.quantile(p)) for p in QUANTILE_LEVELS}
        return out


def _truncated_mean(alpha: np.ndarray, beta: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """E[X | lo ≤ X ≤ hi] for arrays of parameters: lo + ∫ (F(hi) − F(x)) / (F(hi) − F(lo)) dx."""
    x = np.geomspace(lo, hi, 4001)
    a, b = alpha[:, None], beta[:, None]
    f = 1.0 / (1.0 + (x[None, :] / a) ** -b)
    fa, fb = f[:, :1], f[:, -1:]
    s = (fb - f) / (fb - fa)
    return lo + np.trapezoid(s, x, axis=1)


def _residuals(alpha: np.ndarray, beta: np.ndarray, t: LengthTargets) -> np.ndarray:
    def cdf(x: float) -> np.ndarray:
        raw = lambda v: 1.0 / (1.0 + (v / alpha) ** -beta)  # noqa: E731
        return (raw(x) - raw(t.lo)) / (raw(t.hi) - raw(t.lo))

    mode = alpha * ((beta - 1) / (beta + 1)) ** (1 / beta)
    r = [
        (_truncated_mean(alpha, beta, t.lo, t.hi) / t.mean - 1) / 0.05,
        (cdf(t.at_p90) - 0.90) / 0.02,
        (cdf(t.at_p98) - 0.98) / 0.02,
        (mode / t.mode - 1) / 0.20,
    ]
    return np.sum(np.square(r), axis=0)


@cache
def fit_log_logistic(targets: LengthTargets = LengthTargets()) -> LogLogistic:
    """The log-logistic truncated to [lo, hi] closest to ``targets`` (zooming grid search)."""
    a_lo, a_hi, b_lo, b_hi = 0.2 * targets.mean, 2.0 * targets.mean, 1.05, 6.0
    for _ in range(6):
        a_grid, b_grid = np.linspace(a_lo, a_hi, 41), np.linspace(b_lo, b_hi, 41)
        aa, bb = (g.ravel() for g in np.meshgrid(a_grid, b_grid))
        i = int(np.argmin(_residuals(aa, bb, targets)))
        a, b = float(aa[i]), float(bb[i])
        da, db = 2 * (a_grid[1] - a_grid[0]), 2 * (b_grid[1] - b_grid[0])
        a_lo, a_hi, b_lo, b_hi = max(1.0, a - da), a + da, max(1.01, b - db), b + db
    return LogLogistic(alpha=a, beta=b, lo=targets.lo, hi=targets.hi)
