"""The replay's cost model: what a layer's attention, MoE and transfer cost, in int64 ns.

Symbols (DOMAIN.md §3, §6): a *piece* of a request is c new tokens whose prefix P tokens are
already computed (P = cached tokens, or earlier chunks); a batch holds n pieces.

* attention (per layer, per DP group of T dies)::

      A = c0 + c1·[(1 − φ)·Σc + φ·Σc / n] + c2·Σ c·(2P + c) + κ·n

  in ms with token counts in units of 1K = 1,024 tokens (DOMAIN §3). The constants hold for a
  group of ``attn_tp_ref`` dies; on a group of T dies attention scales linearly, × attn_tp_ref / T
  (the one TP rule: serving, replay and synth all pass ``tp`` here). The quadratic term is causal: cutting a prompt of s
  tokens into chunks c_1..c_k (each paying its prefix) gives Σ c_j(2P_j + c_j) = s² — chunking
  never reduces the total quadratic cost. φ is the share of the linear term paid per request and
  amortised over the batch (0: none); κ a fixed cost per request in the batch (0: none; synth's
  ``attn_per_request``).
* MoE pool (per layer item of N tokens on E dies, r = E_ref / E, or 1 when E_ref = 0)::

      M = max(plateau·r, a + b·r·(N/1K)·skew)

  skew = busiest expert die's load / the mean (1: balanced experts).
* transfer (dispatch or combine of t tokens per sending die)::

      X = latency + per_k·(t/1K)

  and a coupled collective costs k_s × X after its barrier.
* launch overhead per MoE item when kernels are launched by the host (no super kernel).
* per-die noise (:mod:`asaptrace.replay.dispersion`): each die's duration is lognormal with
  dispersion σ around the constants' location, so work on k dies that must all finish costs
  G(k, σ) × the location (the expected max of k draws). The MoE constants are the per-die location
  (M above × G(E, σ)); the attention constants hold for the slowest of ``attn_tp_ref`` members
  (on T dies × G(T, σ) / G(tp_ref, σ) as well). σ = 0 (the default): G = 1, no change.

Defaults are DOMAIN.md §3/§6's figures (Ascend 910, DeepSeek-V3.2). Every constant can be set in
a TOML file (:func:`load_costs`; strict — an unknown section or key is a one-line
:class:`~asaptrace.errors.UsageError` naming the file) or fitted from a store
(:func:`fit_costs`, with R² and residuals per part); :func:`save_costs` writes the same TOML
(with the fit quality in an informational ``[fit]`` table) so a later replay or sweep can reuse it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from asaptrace.errors import UsageError
from asaptrace.replay.contention import fit_contention
from asaptrace.replay.dispersion import expected_max, order_factor, pooled_sigma
from asaptrace.userfiles import read_text

_NS_PER_MS = 1_000_000
#: tokens per "1K" (DOMAIN §3: 1K = 1,024 tokens, so 32K = 32,768, the paper's truncation)
K = 1024.0
K2 = K * K
#: a fitted part whose R² is below this is warned about (the fit explains too little of the data)
R2_WARN = 0.8

#: TOML section → (field name in CostModel, key in the file)
_LAYOUT: dict[str, dict[str, str]] = {
    "attention": {
        "c0_ms": "attn_c0_ms",
        "c1_ms": "attn_c1_ms",
        "c2_ms": "attn_c2_ms",
        "phi": "attn_phi",
        "per_request_ms": "attn_per_request_ms",
        "tp_ref": "attn_tp_ref",
        "sigma": "attn_sigma",
    },
    "moe": {
        "plateau_ms": "moe_plateau_ms",
        "a_ms": "moe_a_ms",
        "b_ms": "moe_b_ms",
        "e_ref": "moe_e_ref",
        "sigma": "moe_sigma",
    },
    "transfer": {
        "latency_ms": "xfer_latency_ms",
        "per_k_ms": "xfer_per_k_ms",
        "sigma": "xfer_sigma",
        "contention": "xfer_contention",
    },
    "coupled": {"k_s": "coupled_k_s"},
    "launch": {"per_item_ms": "launch_ms"},
}


def causal_pairs(c: Any, p: Any) -> Any:
    """The attention term of ``c`` new tokens after a prefix of ``p``: c·(2p + c) (causal: each new
    token attends to the prefix and to the new tokens before it, ×2 for the c² half). Works on
    numbers, numpy arrays and polars expressions alike: the one place the formula is written."""
    return c * (2 * p + c)


@dataclass(frozen=True)
class CostModel:
    """Constants of the cost model (ms, per 1K tokens); methods return int64 ns."""

    attn_c0_ms: float = 0.0
    attn_c1_ms: float = 1.41
    attn_c2_ms: float = 0.0215
    attn_phi: float = 0.0
    attn_per_request_ms: float = 0.0
    attn_tp_ref: float = 4.0  # the TP group size the attention constants hold for (DOMAIN §3: TP=4)
    moe_plateau_ms: float = 0.55
    moe_a_ms: float = 0.23
    moe_b_ms: float = 0.286
    moe_e_ref: float = 32.0
    xfer_latency_ms: float = 0.19
    xfer_per_k_ms: float = 0.71
    coupled_k_s: float = 1.0
    launch_ms: float = 0.22
    #: per-die lognormal dispersion (σ of log duration) of attention members, MoE dies, transfers
    attn_sigma: float = 0.0
    moe_sigma: float = 0.0
    xfer_sigma: float = 0.0
    #: κ: a transfer costs × (1 + κ·n) with n transfers in flight (:mod:`asaptrace.replay.contention`)
    xfer_contention: float = 0.0
    #: multipliers on an offline what-if's *modelled* pool and transfer costs (the ``scale`` knob of
    #: ``replay --vary`` and the fit band, :mod:`asaptrace.replay.mechanics.offline`); not in the TOML file
    whatif_moe_scale: float = 1.0
    whatif_transfer_scale: float = 1.0
    #: ≥ 0: one Monte-Carlo draw of an offline what-if's kernel durations (the band's replays,
    #: seeded by (mc_seed, mc_draw)); −1: the expected costs. ``mc_in_flight``: the contention
    #: prior's transfers in flight (dispatch, combine; replay.contention). Not in the TOML file
    mc_draw: int = -1
    mc_seed: int = 0
    mc_in_flight: tuple[float, float] = (0.0, 0.0)
    source: str = "defaults (the ASAP paper's figures, docs/analyses/replay.md)"

    # ------------------------------------------------------------------------------------ costs
    def tp_factor(self, tp: float | None) -> float:
        """Attention on a group of ``tp`` dies relative to the constants' ``attn_tp_ref`` (linear,
        and the slowest of ``tp`` members rather than of ``attn_tp_ref``: G(tp, σ) / G(tp_ref, σ))."""
        if tp is None:
            return 1.0
        return self.attn_tp_ref / float(tp) * order_factor(float(tp), self.attn_tp_ref, self.attn_sigma)

    def attention_ns(self, new_tokens: Any, prefix: Any = 0, *, tp: float | None = None) -> int:
        """One layer's attention for a batch of pieces (arrays of c and P; scalars work) on ``tp`` dies."""
        c = np.atleast_1d(np.asarray(new_tokens, np.float64))
        p = np.broadcast_to(np.asarray(prefix, np.float64), c.shape)
        n = max(len(c), 1)
        sc = c.sum() / K
        linear = self.attn_c1_ms * ((1 - self.attn_phi) * sc + self.attn_phi * sc / n)
        quad = self.attn_c2_ms * float(causal_pairs(c, p).sum()) / K2
        ms = self.attn_c0_ms + linear + quad + self.attn_per_request_ms * len(c)
        return _ns(ms * self.tp_factor(tp))

    def attention_sums_ns(self, tokens: Any, quad: Any, n_req: Any, *, tp: float | None = None) -> np.ndarray:
        """Vectorised attention from sums: Σc, Σc(2P+c) and n per batch (arrays), on ``tp`` dies."""
        t = np.asarray(tokens, np.float64) / K
        q = np.asarray(quad, np.float64) / K2
        n_raw = np.asarray(n_req, np.float64)
        n = np.maximum(n_raw, 1)
        ms = self.attn_c0_ms + self.attn_c1_ms * ((1 - self.attn_phi) * t + self.attn_phi * t / n)
        return _ns_arr((ms + self.attn_c2_ms * q + self.attn_per_request_ms * n_raw) * self.tp_factor(tp))

    def attention_weight(self, new_tokens: Any, prefix: Any = 0) -> Any:
        """The length-dependent part of a piece's attention (c1·c + c2·c(2P+c), ms): what placement
        balances (longest attention cost first). Vectorised; no per-batch constant or TP factor."""
        c = np.asarray(new_tokens, np.float64)
        p = np.asarray(prefix, np.float64)
        return self.attn_c1_ms * c / K + self.attn_c2_ms * causal_pairs(c, p) / K2

    def moe_ns(self, tokens: Any, experts: float, skew: Any = 1.0) -> np.ndarray:
        """One MoE layer item of ``tokens`` on an ``experts``-die pool (vectorised): the per-die
        location × G(experts, σ), the expected slowest of the pool's dies."""
        r = self.moe_e_ref / experts if self.moe_e_ref > 0 else 1.0
        n = np.asarray(tokens, np.float64) / K
        ms = np.maximum(self.moe_plateau_ms * r, self.moe_a_ms + self.moe_b_ms * r * n * np.asarray(skew))
        return _ns_arr(ms * expected_max(experts, self.moe_sigma))

    def transfer_ns(self, tokens_per_die: Any) -> np.ndarray:
        """One dispatch or combine of ``tokens_per_die`` tokens from each sending die (vectorised)."""
        t = np.asarray(tokens_per_die, np.float64) / K
        return _ns_arr(self.xfer_latency_ms + self.xfer_per_k_ms * t)

    @property
    def launch_ns(self) -> int:
        return _ns(self.launch_ms)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "mc_in_flight"}  # one band draw's, not a cost


def _ns(ms: float) -> int:
    return round(ms * _NS_PER_MS)


def _ns_arr(ms: Any) -> np.ndarray:
    return np.rint(np.asarray(ms, np.float64) * _NS_PER_MS).astype(np.int64)


# ------------------------------------------------------------------------------------------ TOML
def load_costs(path: str | Path, *, base: CostModel | None = None) -> CostModel:
    """Read a cost TOML file over ``base`` (default: the DOMAIN defaults). Strict about keys."""
    return read_costs(path, base=base)[0]


def read_costs(path: str | Path, *, base: CostModel | None = None) -> tuple[CostModel, dict[str, Any] | None]:
    """A cost TOML file's model and its ``[fit]`` table (the quality :func:`save_costs` kept; None)."""
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path, "cost file"))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"not valid TOML ({e})", path=path) from None
    changes: dict[str, Any] = {}
    quality: dict[str, Any] | None = None
    for section, table in data.items():
        if section == "fit":  # written by save_costs: the fit quality, kept with the model
            if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
                raise UsageError("[fit] must hold one table per cost part ([fit.attention], …)", path=path)
            quality = {part: dict(q) for part, q in table.items()}
            continue
        keys = _LAYOUT.get(section)
        if keys is None or not isinstance(table, dict):
            raise UsageError(f"unknown section [{section}] (known: {', '.join(_LAYOUT)}, fit)", path=path)
        for key, value in table.items():
            if key not in keys:
                raise UsageError(f"unknown key {section}.{key} (known: {', '.join(keys)})", path=path)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise UsageError(f"{section}.{key} must be a finite number, not {value!r}", path=path)
            changes[keys[key]] = float(value)
    if changes.get("attn_tp_ref", 1.0) <= 0:
        raise UsageError("attention.tp_ref must be positive", path=path)
    model = replace(base or CostModel(), **changes, source=f"file {path.name}")
    return model, quality


def save_costs(model: CostModel, path: str | Path, *, quality: dict[str, Any] | None = None) -> Path:
    """Write ``model`` as a TOML file :func:`read_costs` reads back (fit quality as ``[fit.PART]``)."""
    values = model.to_dict()
    lines = [f"# asaptrace cost model ({model.source}); ms, token counts per 1K = 1,024 tokens", ""]
    for section, keys in _LAYOUT.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {values[name]!r}" for key, name in keys.items()]
        lines.append("")
    if quality:
        for part, q in quality.items():
            lines.append(f"[fit.{part}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in q.items() if v is not None]
            lines.append("")
    path = Path(path)
    path.write_text("\n".join(lines))
    return path


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(float(v)) if isinstance(v, float) else repr(v)


# ------------------------------------------------------------------------------------------- fit
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


#: the latency + per-token line is kept only when its slope explains this much more than the
#: default shape scaled (an F statistic on one extra parameter; ≈ p < 0.002)
F_SLOPE = 10.0


def _transfer_line(t: np.ndarray, y: np.ndarray, base: CostModel) -> tuple[np.ndarray, np.ndarray, str]:
    """latency + per_k·t fitted to the transfers, or — when the tokens per die vary too little
    for the slope to stand out of the noise — the base shape scaled to their level (a noisy run
    of near-equal batches otherwise puts everything in the latency, and a what-if with smaller
    batches keeps the measured transfer whole)."""
    beta, pred = least_squares(np.column_stack([np.ones(len(y)), t]), y)
    shape = base.xfer_latency_ms + base.xfer_per_k_ms * t
    scale = float((shape * y).sum() / max(float((shape * shape).sum()), 1e-300))
    ss2, ss1 = float(((y - pred) ** 2).sum()), float(((y - scale * shape) ** 2).sum())
    n = len(y)
    if n > 2 and ss1 > ss2 and (ss1 - ss2) > F_SLOPE * ss2 / (n - 2):
        return beta, pred, ""
    how = "tokens per die vary too little to fit the slope: the default shape scaled to the measured level"
    return np.array([base.xfer_latency_ms * scale, base.xfer_per_k_ms * scale]), scale * shape, how


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
    """Fit the attention, MoE and transfer constants to a store's measured work.

    ``work`` is a :class:`~asaptrace.replay.mechanics.work.MeasuredWork`. Attention is fitted per
    (step, DP group, layer) on [1, Σc, Σc(2P+c)] (needs the batch composition; the constants then
    hold for the store's TP, ``attn_tp_ref``), the MoE pool per (step, layer) on [1, N] above the
    plateau (the plateau from items below the knee), transfers on [1, tokens per die]. A part with
    too few points or no token counts keeps ``base``'s constants and says why in its quality entry
    (:func:`default_quality`); :func:`fit_warnings` turns those and poor fits into one line each.
    """
    model = base or CostModel()
    quality: dict[str, dict[str, Any]] = {}
    changes: dict[str, float] = {}
    n_mb = max(int(work.micro_batches), 1)
    data = work.batches_source
    # attention per (step, group, layer), summed over micro-batches (the store may not say which
    # request ran in which micro-batch, only the group's whole batch)
    it = (
        work.items.filter(pl.col("tokens").is_not_null())
        .group_by("step", "dp_group", "layer")
        .agg(pl.col("attn_ns").sum(), pl.col("tokens").sum(), pl.col("quad").sum())
        .filter(pl.col("attn_ns") > 0)
        .sort("step", "dp_group", "layer")  # rows in one order: the fit's last digits never drift
    )
    dispersion = _dispersion(work)
    changes.update(dispersion)
    if it.height >= 4:
        x = np.column_stack([np.ones(it.height), it["tokens"].to_numpy() / K, it["quad"].to_numpy() / K2])
        y = it["attn_ns"].to_numpy() / _NS_PER_MS
        beta, pred = least_squares(x.astype(np.float64), y)
        changes.update(
            attn_c0_ms=float(beta[0]),
            attn_c1_ms=float(beta[1]),
            attn_c2_ms=float(beta[2]),
            attn_tp_ref=float(work.tp),
        )
        quality["attention"] = part_quality(
            y, pred, data=f"(step, DP group, layer) items; lengths from {data}"
        )
        quality["attention"]["sigma"] = round(dispersion["attn_sigma"], 4)
    else:
        why = (
            "the store has no request lengths (no annotations, no --batches sidecar)"
            if not data
            else "fewer than 4 items with lengths"
        )
        quality["attention"] = default_quality(it.height, why)
    # MoE and transfers per (step, layer), averaged over micro-batches
    pool = (
        work.pool.filter(pl.col("tokens").is_not_null())
        .group_by("step", "layer")
        .agg((pl.col("pool_ns").sum() / n_mb).alias("y"), pl.col("tokens").sum().alias("n"))
        .filter(pl.col("y") > 0)
        .sort("step", "layer")
    )
    if pool.height >= 4:
        # the constants are fitted on the store's own pool: E_fit = its expert ranks (r = 1 there);
        # a measured item is the slowest of the E_fit dies: the per-die location is y / G(E_fit, σ)
        e = float(work.expert_ranks)
        r = 1.0
        g = expected_max(e, dispersion["moe_sigma"])
        y_max = pool["y"].to_numpy() / _NS_PER_MS
        y = y_max / g
        n = pool["n"].to_numpy() / K / n_mb
        beta, pred = least_squares(np.column_stack([np.ones(len(y)), r * n]), y)
        changes.update(moe_a_ms=float(beta[0]), moe_b_ms=float(beta[1]), moe_e_ref=e)
        # the plateau: only measured items below the linear part's knee say where it is (the
        # default plateau is read on E_ref dies: on the store's pool it is × E_ref / E)
        plateau = model.moe_plateau_ms * (model.moe_e_ref / e if model.moe_e_ref > 0 else 1.0) / g
        knee = (plateau - beta[0]) / max(beta[1], 1e-12)
        flat = y[n < knee]
        q = part_quality(
            y_max, np.maximum(pred, plateau) * g, data=f"(step, layer) pool items; tokens from {data}"
        )
        if len(flat) >= 2:
            changes["moe_plateau_ms"] = float(np.median(flat))
            q["note"] = f"plateau from {len(flat)} items below the knee"
        else:
            changes["moe_plateau_ms"] = plateau
            q["note"] = "no item on the plateau: the default plateau kept (read on this pool)"
        quality["moe"] = q
    else:
        why = "no MoE pool items with token counts" if work.pool.height else "the store has no MoE layers"
        quality["moe"] = default_quality(pool.height, why)
    quality["moe"]["sigma"] = round(dispersion["moe_sigma"], 4)
    xf = (
        work.transfers.filter(pl.col("tokens_per_die").is_not_null())
        .group_by("step", "layer")
        .agg(
            (pl.col("dispatch_ns").sum() / n_mb).alias("d"),
            (pl.col("combine_ns").sum() / n_mb).alias("c"),
            (pl.col("tokens_per_die").sum() / n_mb).alias("t"),
            pl.col("dispatch_in_flight").mean().fill_null(0.0).alias("nd"),
            pl.col("combine_in_flight").mean().fill_null(0.0).alias("nc"),
        )
        .sort("step", "layer")
    )
    if xf.height >= 4:
        y = np.concatenate([xf["d"].to_numpy(), xf["c"].to_numpy()]) / _NS_PER_MS
        t = np.tile(xf["t"].to_numpy() / K, 2)
        n = np.concatenate([xf["nd"].to_numpy(), xf["nc"].to_numpy()])
        kappa, beta, pred, how, contention = fit_contention(
            t, y, n, work.contention, lambda t, y: _transfer_line(t, y, model)
        )
        changes.update(xfer_latency_ms=float(beta[0]), xfer_per_k_ms=float(beta[1]), xfer_contention=kappa)
        quality["transfer"] = (
            part_quality(y, pred, data=f"dispatch and combine per (step, layer); tokens from {data}")
            | contention
        )
        if how:
            quality["transfer"]["note"] = how
        # the transfers' dispersion: σ of log(measured / fitted), what the Monte-Carlo band redraws
        ok = (y > 0) & (pred > 0)
        sx = float(np.std(np.log(y[ok] / pred[ok]), ddof=1)) if ok.sum() >= 4 else 0.0
        changes["xfer_sigma"] = sx
        quality["transfer"]["sigma"] = round(sx, 4)
    else:
        why = (
            "no dispatch/combine with token counts"
            if work.transfers.height
            else "the store has no dispatch/combine"
        )
        quality["transfer"] = default_quality(xf.height, why)
    fitted = [p for p, q in quality.items() if q["status"] == "fitted"]
    src = (
        f"fitted to {work.source} ({', '.join(fitted)}; the rest the paper's defaults)"
        if fitted and len(fitted) < 3
        else (
            f"fitted to {work.source}"
            if fitted
            else f"the paper's defaults (nothing in {work.source} could be fitted)"
        )
    )
    return CostFit(replace(model, **changes, source=src), quality)
