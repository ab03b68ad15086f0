"""Fitting the cost model to a store's measured work: every registered part's fit, and their quality.

:func:`fit_costs` runs each part's ``fit`` (:mod:`asaptrace.replay.costs.parts`; the built-in
attention, MoE and transfer fits are in :mod:`asaptrace.replay.costs.builtin`) on the measured
work, after the per-die dispersion every part reads; the helpers here (least squares, R² and
residuals, a default's reason, warnings) are what a part's fit reports with.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from asaptrace.replay.costs.model import _NS_PER_MS, CostModel
from asaptrace.replay.costs.parts import PARTS
from asaptrace.replay.dispersion import pooled_sigma

#: a fitted part whose R² is below this is warned about (the fit explains too little of the data)
R2_WARN = 0.8


@dataclass(frozen=True)
class CostFit:
    """A fitted model and its quality per part (see :func:`part_quality` for the keys)."""

    model: CostModel
    quality: dict[str, dict[str, Any]]

    @property
    def warnings(self) -> list[str]:
        return fit_warnings(self.quality)


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative-ish least squares y ≈ x·β (negative coefficients clipped to 0 and refitted);
    returns β and the prediction."""
    keep = np.ones(x.shape[1], bool)
    beta = np.zeros(x.shape[1])
    for _ in range(x.shape[1]):
        b, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        beta[:] = 0
        beta[keep] = b
        if (b >= 0).all():
            break
        keep[np.flatnonzero(keep)[b < 0]] = False
    return beta, x @ beta


def part_quality(y_ms: np.ndarray, pred_ms: np.ndarray, *, data: str) -> dict[str, Any]:
    """Quality of one fitted part: points, R², residuals (ns and % of the measured value).

    Keys: ``status`` "fitted", ``data`` (what the points are), ``n``, ``r2``, ``rms_residual_ns``,
    ``max_residual_ns``, ``residual_p50_pct`` / ``residual_p95_pct`` (|measured − fitted| /
    measured, median and 95th percentile: the band a what-if built on this part is quoted with).
    """
    res = y_ms - pred_ms
    ss_tot = float(((y_ms - y_ms.mean()) ** 2).sum())
    r2 = 1 - float((res**2).sum()) / ss_tot if ss_tot > 0 else (1.0 if np.allclose(res, 0) else 0.0)
    rel = np.abs(res) / np.maximum(np.abs(y_ms), 1e-9) * 100
    return {
        "status": "fitted",
        "data": data,
        "n": len(y_ms),
        "r2": round(r2, 4),
        "rms_residual_ns": round(float(np.sqrt((res**2).mean())) * _NS_PER_MS),
        "max_residual_ns": round(float(np.abs(res).max()) * _NS_PER_MS),
        "residual_p50_pct": round(float(np.percentile(rel, 50)), 2),
        "residual_p95_pct": round(float(np.percentile(rel, 95)), 2),
    }


def default_quality(n: int, reason: str) -> dict[str, Any]:
    """A part that could not be fitted: the defaults are kept, and why."""
    return {"status": "default", "n": n, "reason": reason}


def fit_warnings(quality: dict[str, dict[str, Any]] | None) -> list[str]:
    """One line per part that fell back to the defaults or whose R² is below :data:`R2_WARN`."""
    out: list[str] = []
    for part, q in (quality or {}).items():
        if q.get("status") == "default":
            out.append(f"cost part {part} kept the paper's defaults: {q.get('reason', 'not fitted')}")
        elif q.get("r2") is not None and float(q["r2"]) < R2_WARN:
            out.append(
                f"cost part {part} fits poorly (R² {float(q['r2']):.2f} < {R2_WARN}, residual p95 "
                f"{float(q.get('residual_p95_pct', 0)):.0f}% over {q.get('n')} points): what-ifs that "
                "rescale it are uncertain"
            )
    return out


def _dispersion(work: Any) -> dict[str, float]:
    """σ of the attention members' and the MoE dies' log durations around each item (every item,
    tokens or not; :func:`~asaptrace.replay.dispersion.log_spread` took out each die's level)."""
    out = {}
    for name, table, col in (("attn_sigma", work.items, "attn"), ("moe_sigma", work.pool, "moe")):
        if f"{col}_log_ss" in table.columns:
            out[name] = pooled_sigma(table[f"{col}_log_ss"].to_numpy(), table[f"{col}_dies"].to_numpy())[0]
        else:
            out[name] = 0.0
    return out


def fit_costs(work: Any, *, base: CostModel | None = None) -> CostFit:
    """Fit every registered part's constants to a store's measured work.

    ``work`` is a :class:`~asaptrace.replay.mechanics.work.MeasuredWork`. The dies' dispersion
    (σ of attention members and MoE dies) first, then each part's ``fit`` in registration order on
    ``base`` with that dispersion (the built-in ones: attention per (step, DP group, layer) on
    [1, Σc, Σc(2P+c)], the MoE pool per (step, layer) on [1, N] above its plateau, transfers on
    [1, tokens per die]: :mod:`asaptrace.replay.costs.builtin`). A part with too few points or no
    token counts keeps ``base``'s constants and says why in its quality entry
    (:func:`default_quality`); :func:`fit_warnings` turns those and poor fits into one line each.
    """
    model = base or CostModel()
    dispersion = _dispersion(work)
    with_sigma = replace(model, **dispersion)
    changes: dict[str, Any] = dict(dispersion)
    quality: dict[str, dict[str, Any]] = {}
    fits = [p for p in PARTS.values() if p.fit is not None]
    for part in fits:
        assert part.fit is not None
        part_changes, quality[part.name] = part.fit(work, with_sigma)
        changes.update(part_changes)
    fitted = [p for p, q in quality.items() if q["status"] == "fitted"]
    src = (
        f"fitted to {work.source} ({', '.join(fitted)}; the rest the paper's defaults)"
        if fitted and len(fitted) < len(fits)
        else (
            f"fitted to {work.source}"
            if fitted
            else f"the paper's defaults (nothing in {work.source} could be fitted)"
        )
    )
    extra = {k.replace(".", "__"): v for k, v in changes.items() if "." in k}
    out = replace(model, **{k: v for k, v in changes.items() if "." not in k}, source=src)
    return CostFit(out.with_parts(**extra) if extra else out, quality)
