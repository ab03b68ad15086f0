"""The replay's cost model: what a layer's attention, MoE and transfer cost, in int64 ns.

Symbols (DOMAIN.md §3, §6): a *piece* of a request is c new tokens whose prefix P tokens are
already computed (P = cached tokens, or earlier chunks); a batch holds n pieces.

* attention (per layer, per DP group of T dies)::

      A = c0 + c1·[(1 − φ)·Σc + φ·Σc / n] + c2·Σ c·(2P + c) + κ·n

  in ms with token counts in thousands. The quadratic term is causal: cutting a prompt of s
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

Defaults are DOMAIN.md §3/§6's figures (Ascend 910, DeepSeek-V3.2). Every constant can be set in
a TOML file (:func:`load_costs`; strict — an unknown section or key is a one-line
:class:`~asaptrace.errors.UsageError` naming the file) or fitted from a store
(:func:`fit_costs`, with R² and residuals per part); :func:`save_costs` writes the same TOML
(with the fit quality in an informational ``[fit]`` table) so a later replay or sweep can reuse it.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from asaptrace.errors import UsageError
from asaptrace.userfiles import read_text

_NS_PER_MS = 1_000_000

#: TOML section → (field name in CostModel, key in the file)
_LAYOUT: dict[str, dict[str, str]] = {
    "attention": {
        "c0_ms": "attn_c0_ms",
        "c1_ms": "attn_c1_ms",
        "c2_ms": "attn_c2_ms",
        "phi": "attn_phi",
        "per_request_ms": "attn_per_request_ms",
    },
    "moe": {"plateau_ms": "moe_plateau_ms", "a_ms": "moe_a_ms", "b_ms": "moe_b_ms", "e_ref": "moe_e_ref"},
    "transfer": {"latency_ms": "xfer_latency_ms", "per_k_ms": "xfer_per_k_ms"},
    "coupled": {"k_s": "coupled_k_s"},
    "launch": {"per_item_ms": "launch_ms"},
}


@dataclass(frozen=True)
class CostModel:
    """Constants of the cost model (ms, per 1K tokens); methods return int64 ns."""

    attn_c0_ms: float = 0.0
    attn_c1_ms: float = 1.41
    attn_c2_ms: float = 0.0215
    attn_phi: float = 0.0
    attn_per_request_ms: float = 0.0
    moe_plateau_ms: float = 0.55
    moe_a_ms: float = 0.23
    moe_b_ms: float = 0.286
    moe_e_ref: float = 32.0
    xfer_latency_ms: float = 0.19
    xfer_per_k_ms: float = 0.71
    coupled_k_s: float = 1.0
    launch_ms: float = 0.22
    source: str = "defaults (DOMAIN.md §3/§6)"

    # ------------------------------------------------------------------------------------ costs
    def attention_ns(self, new_tokens: Any, prefix: Any = 0) -> int:
        """One layer's attention for a batch of pieces (arrays of c and P; scalars work)."""
        c = np.atleast_1d(np.asarray(new_tokens, np.float64))
        p = np.broadcast_to(np.asarray(prefix, np.float64), c.shape)
        n = max(len(c), 1)
        sc = c.sum() / 1e3
        linear = self.attn_c1_ms * ((1 - self.attn_phi) * sc + self.attn_phi * sc / n)
        quad = self.attn_c2_ms * float((c * (2 * p + c)).sum()) / 1e6
        return _ns(self.attn_c0_ms + linear + quad + self.attn_per_request_ms * len(c))

    def attention_sums_ns(self, tokens: Any, quad: Any, n_req: Any) -> np.ndarray:
        """Vectorised attention from sums: Σc, Σc(2P+c) and n per batch (arrays)."""
        t = np.asarray(tokens, np.float64) / 1e3
        q = np.asarray(quad, np.float64) / 1e6
        n_raw = np.asarray(n_req, np.float64)
        n = np.maximum(n_raw, 1)
        ms = self.attn_c0_ms + self.attn_c1_ms * ((1 - self.attn_phi) * t + self.attn_phi * t / n)
        return _ns_arr(ms + self.attn_c2_ms * q + self.attn_per_request_ms * n_raw)

    def moe_ns(self, tokens: Any, experts: float, skew: Any = 1.0) -> np.ndarray:
        """One MoE layer item of ``tokens`` on an ``experts``-die pool (vectorised)."""
        r = self.moe_e_ref / experts if self.moe_e_ref > 0 else 1.0
        n = np.asarray(tokens, np.float64) / 1e3
        ms = np.maximum(self.moe_plateau_ms * r, self.moe_a_ms + self.moe_b_ms * r * n * np.asarray(skew))
        return _ns_arr(ms)

    def transfer_ns(self, tokens_per_die: Any) -> np.ndarray:
        """One dispatch or combine of ``tokens_per_die`` tokens from each sending die (vectorised)."""
        t = np.asarray(tokens_per_die, np.float64) / 1e3
        return _ns_arr(self.xfer_latency_ms + self.xfer_per_k_ms * t)

    @property
    def launch_ns(self) -> int:
        return _ns(self.launch_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ns(ms: float) -> int:
    return round(ms * _NS_PER_MS)


def _ns_arr(ms: Any) -> np.ndarray:
    return np.rint(np.asarray(ms, np.float64) * _NS_PER_MS).astype(np.int64)


# ------------------------------------------------------------------------------------------ TOML
def load_costs(path: str | Path, *, base: CostModel | None = None) -> CostModel:
    """Read a cost TOML file over ``base`` (default: the DOMAIN defaults). Strict about keys."""
    path = Path(path)
    try:
        data = tomllib.loads(read_text(path, "cost file"))
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"not valid TOML ({e})", path=path) from None
    changes: dict[str, Any] = {}
    for section, table in data.items():
        if section == "fit":  # written by save_costs: information only
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
    model = replace(base or CostModel(), **changes, source=f"file {path.name}")
    return model


def save_costs(model: CostModel, path: str | Path, *, quality: dict[str, Any] | None = None) -> Path:
    """Write ``model`` as a TOML file :func:`load_costs` reads back (fit quality as ``[fit]``)."""
    values = model.to_dict()
    lines = [f"# asaptrace cost model ({model.source}); ms, token counts per 1K", ""]
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
    """A fitted model and its quality per part (n points, R², residual RMS and max in ns)."""

    model: CostModel
    quality: dict[str, dict[str, Any]]


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """Non-negative-ish least squares y ≈ x·β (negative coefficients clipped to 0 and refitted)."""
    keep = np.ones(x.shape[1], bool)
    beta = np.zeros(x.shape[1])
    for _ in range(x.shape[1]):
        b, *_ = np.linalg.lstsq(x[:, keep], y, rcond=None)
        beta[:] = 0
        beta[keep] = b
        if (b >= 0).all():
            break
        keep[np.flatnonzero(keep)[b < 0]] = False
    pred = x @ beta
    return beta, _quality(y, pred)


def _quality(y: np.ndarray, pred: np.ndarray) -> dict[str, Any]:
    res = y - pred
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float((res**2).sum()) / ss_tot if ss_tot > 0 else (1.0 if np.allclose(res, 0) else 0.0)
    return {
        "n": len(y),
        "r2": round(r2, 6),
        "rms_residual_ns": round(float(np.sqrt((res**2).mean())) * _NS_PER_MS) if len(y) else 0,
        "max_residual_ns": round(float(np.abs(res).max()) * _NS_PER_MS) if len(y) else 0,
    }


def fit_costs(workload: Any, *, base: CostModel | None = None) -> CostFit:
    """Fit the attention, MoE and transfer constants to a store's measured workload.

    ``workload`` is a :class:`~asaptrace.replay.workload.Workload`. Attention is fitted per
    (step, DP group, micro-batch, layer) item on [1, Σc, Σc(2P+c)] (needs the batch composition),
    the MoE pool per (step, layer, micro-batch) on [1, N] above the plateau (the plateau is the
    lowest measured item), transfers on [1, tokens per die]. A part with too few points or no
    token counts keeps ``base``'s constants and says so in its quality entry.
    """
    model = base or CostModel()
    quality: dict[str, dict[str, Any]] = {}
    changes: dict[str, float] = {}
    n_mb = max(int(workload.micro_batches), 1)
    # attention per (step, group, layer), summed over micro-batches (the store may not say which
    # request ran in which micro-batch, only the group's whole batch)
    it = (
        workload.items.filter(pl.col("tokens").is_not_null())
        .group_by("step", "dp_group", "layer")
        .agg(pl.col("attn_ns").sum(), pl.col("tokens").sum(), pl.col("quad").sum())
        .filter(pl.col("attn_ns") > 0)
    )
    if it.height >= 4:
        x = np.column_stack(
            [np.ones(it.height), it["tokens"].to_numpy() / 1e3, it["quad"].to_numpy() / 1e6]
        ).astype(np.float64)
        beta, q = least_squares(x, it["attn_ns"].to_numpy() / _NS_PER_MS)
        changes.update(attn_c0_ms=float(beta[0]), attn_c1_ms=float(beta[1]), attn_c2_ms=float(beta[2]))
        quality["attention"] = q
    else:
        quality["attention"] = {"n": it.height, "note": "no batch composition: constants kept"}
    # MoE and transfers per (step, layer), averaged over micro-batches
    pool = (
        workload.pool.filter(pl.col("tokens").is_not_null())
        .group_by("step", "layer")
        .agg((pl.col("pool_ns").sum() / n_mb).alias("y"), pl.col("tokens").sum().alias("n"))
        .filter(pl.col("y") > 0)
    )
    if pool.height >= 4:
        e = float(workload.expert_ranks)
        r = model.moe_e_ref / e if model.moe_e_ref > 0 else 1.0
        y = pool["y"].to_numpy() / _NS_PER_MS
        n = pool["n"].to_numpy() / 1e3 / n_mb
        beta, q = least_squares(np.column_stack([np.ones(len(y)), r * n]), y)
        changes.update(moe_a_ms=float(beta[0]), moe_b_ms=float(beta[1]))
        # the plateau: only measured items below the linear part's knee say where it is
        knee = (model.moe_plateau_ms * r - beta[0]) / max(beta[1] * r, 1e-12)
        flat = y[n < knee]
        if len(flat) >= 2:
            changes["moe_plateau_ms"] = float(np.median(flat)) / r
            q["note"] = f"plateau from {len(flat)} items below the knee"
        else:
            q["note"] = "no item on the plateau: plateau kept"
        quality["moe"] = q
    else:
        quality["moe"] = {"n": pool.height, "note": "no token counts: constants kept"}
    xf = (
        workload.transfers.filter(pl.col("tokens_per_die").is_not_null())
        .group_by("step", "layer")
        .agg(
            (pl.col("dispatch_ns").sum() / n_mb).alias("d"),
            (pl.col("combine_ns").sum() / n_mb).alias("c"),
            (pl.col("tokens_per_die").sum() / n_mb).alias("t"),
        )
    )
    if xf.height >= 4:
        y = np.concatenate([xf["d"].to_numpy(), xf["c"].to_numpy()]) / _NS_PER_MS
        t = np.tile(xf["t"].to_numpy() / 1e3, 2)
        beta, q = least_squares(np.column_stack([np.ones(len(y)), t]), y)
        changes.update(xfer_latency_ms=float(beta[0]), xfer_per_k_ms=float(beta[1]))
        quality["transfer"] = q
    else:
        quality["transfer"] = {"n": xf.height, "note": "no token counts: constants kept"}
    return CostFit(replace(model, **changes, source=f"fitted to {workload.source}"), quality)


def cost_fields() -> list[str]:
    """Names of the numeric constants (for docs and tests)."""
    return [f.name for f in fields(CostModel) if f.name != "source"]
