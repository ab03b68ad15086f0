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

from asaptrace.errors import UsageError
from asaptrace.replay.dispersion import expected_max, order_factor
from asaptrace.userfiles import read_text

_NS_PER_MS = 1_000_000
#: tokens per "1K" (DOMAIN §3: 1K = 1,024 tokens, so 32K = 32,768, the paper's truncation)
K = 1024.0
K2 = K * K

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


#: the TOML sections of parts registered beyond the built-in ones: part name → key → default
#: (filled by :func:`~asaptrace.replay.costs.parts.register_part`)
EXTRA_LAYOUT: dict[str, dict[str, float]] = {}


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
    #: the constants of parts registered beyond the built-in ones (:mod:`asaptrace.replay.costs.parts`),
    #: as sorted ("part.key", value) pairs (hashable: the online caches key on the model); () when none
    parts: tuple[tuple[str, float], ...] = ()
    source: str = "defaults (the ASAP paper's figures, docs/analyses/replay.md)"

    # ------------------------------------------------------------------------------------ costs
    def tp_factor(self, tp: float | None) -> float:
        """Attention on a group of ``tp`` dies relative to the constants' ``attn_tp_ref`` (linear,
        and the slowest of ``tp`` members rather than of ``attn_tp_ref``: G(tp, σ) / G(tp_ref, σ))."""
        if tp is None:
            return 1.0
        return self.attn_tp_ref / float(tp) * order_factor(float(tp), self.attn_tp_ref, self.attn_sigma)

    def attention_ns(self, new_tokens: Any, prefix: Any = 0, *, tp: float | None = None) -> int:
        """One layer's attention for a batch of pieces (arrays of c and P; scalars work) on ``tp`` dies.
        A batch of fewer than :data:`FEW` pieces is summed on Python floats (:func:`_few_attention_ms`)."""
        few = _few_attention_ms(self, new_tokens, prefix)
        if few is not None:
            return _ns(few * self.tp_factor(tp))
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
        location × G(experts, σ), the expected slowest of the pool's dies. (One item of a scalar
        count: the same operations on Python floats, an int64 scalar.)"""
        r = self.moe_e_ref / experts if self.moe_e_ref > 0 else 1.0
        if type(tokens) in _SCALARS and type(skew) in _SCALARS:
            ms = max(
                self.moe_plateau_ms * r, self.moe_a_ms + self.moe_b_ms * r * (float(tokens) / K) * float(skew)
            )
            return np.int64(round(ms * expected_max(experts, self.moe_sigma) * _NS_PER_MS))  # type: ignore[return-value]
        n = np.asarray(tokens, np.float64) / K
        ms = np.maximum(self.moe_plateau_ms * r, self.moe_a_ms + self.moe_b_ms * r * n * np.asarray(skew))
        return _ns_arr(ms * expected_max(experts, self.moe_sigma))

    def transfer_ns(self, tokens_per_die: Any) -> np.ndarray:
        """One dispatch or combine of ``tokens_per_die`` tokens from each sending die (vectorised;
        a scalar count on Python floats, an int64 scalar)."""
        if type(tokens_per_die) in _SCALARS:
            ms = self.xfer_latency_ms + self.xfer_per_k_ms * (float(tokens_per_die) / K)
            return np.int64(round(ms * _NS_PER_MS))  # type: ignore[return-value]
        t = np.asarray(tokens_per_die, np.float64) / K
        return _ns_arr(self.xfer_latency_ms + self.xfer_per_k_ms * t)

    @property
    def launch_ns(self) -> int:
        return _ns(self.launch_ms)

    def part(self, name: str, key: str) -> float:
        """A registered part's constant ``key`` (its registered default when the model has none)."""
        for k, v in self.parts:
            if k == f"{name}.{key}":
                return v
        return EXTRA_LAYOUT[name][key]

    def with_parts(self, **values: float) -> CostModel:
        """This model with registered parts' constants set (keys ``part.key`` spelt ``part__key``)."""
        merged = dict(self.parts) | {k.replace("__", "."): float(v) for k, v in values.items()}
        return replace(self, parts=tuple(sorted(merged.items())))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["mc_in_flight"]  # one band draw's, not a cost
        if not self.parts:  # the built-in parts only: the JSON every face wrote before parts existed
            del out["parts"]
        else:
            out["parts"] = dict(self.parts)
        return out


def _ns(ms: float) -> int:
    return round(ms * _NS_PER_MS)


#: the scalar types the cost model computes on Python floats (the same IEEE operations in the same
#: order as on numpy's float64, and round() rounds half to even as np.rint does)
_SCALARS = frozenset({int, float, np.float64, np.int64})
#: a batch of fewer pieces than this is summed one piece after the other, as numpy sums fewer than 8
FEW = 8


def _few_attention_ms(costs: CostModel, new_tokens: Any, prefix: Any) -> float | None:
    """:meth:`CostModel.attention_ns`'s ms before the TP factor for a 1-d float64 array of fewer
    than :data:`FEW` pieces and a prefix array of its length or a scalar, on Python floats (numpy
    adds fewer than 8 values one after the other, as this does); None for anything else."""
    if not (isinstance(new_tokens, np.ndarray) and new_tokens.ndim == 1 and 0 < len(new_tokens) < FEW):
        return None
    if new_tokens.dtype != np.float64:
        return None
    c = new_tokens.tolist()
    if isinstance(prefix, np.ndarray):
        if prefix.dtype != np.float64 or prefix.shape != new_tokens.shape:
            return None
        p = prefix.tolist()
    elif type(prefix) in _SCALARS:
        p = [float(prefix)] * len(c)
    else:
        return None
    n = len(c)
    total = 0.0
    pairs = 0.0
    for ci, pi in zip(c, p, strict=True):
        total += ci
        pairs += ci * (2 * pi + ci)
    sc = total / K
    linear = costs.attn_c1_ms * ((1 - costs.attn_phi) * sc + costs.attn_phi * sc / n)
    quad = costs.attn_c2_ms * pairs / K2
    return costs.attn_c0_ms + linear + quad + costs.attn_per_request_ms * n


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
        keys = _LAYOUT.get(section) or {k: f"{section}.{k}" for k in EXTRA_LAYOUT.get(section, {})}
        if not keys or not isinstance(table, dict):
            known = ", ".join([*_LAYOUT, *EXTRA_LAYOUT])
            raise UsageError(f"unknown section [{section}] (known: {known}, fit)", path=path)
        for key, value in table.items():
            if key not in keys:
                raise UsageError(f"unknown key {section}.{key} (known: {', '.join(keys)})", path=path)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise UsageError(f"{section}.{key} must be a finite number, not {value!r}", path=path)
            changes[keys[key]] = float(value)
    if changes.get("attn_tp_ref", 1.0) <= 0:
        raise UsageError("attention.tp_ref must be positive", path=path)
    extra = {k: v for k, v in changes.items() if "." in k}
    model = replace(base or CostModel(), **{k: v for k, v in changes.items() if "." not in k})
    if extra:
        model = model.with_parts(**{k.replace(".", "__"): v for k, v in extra.items()})
    return replace(model, source=f"file {path.name}"), quality


def save_costs(model: CostModel, path: str | Path, *, quality: dict[str, Any] | None = None) -> Path:
    """Write ``model`` as a TOML file :func:`read_costs` reads back (fit quality as ``[fit.PART]``)."""
    values = model.to_dict()
    lines = [f"# asaptrace cost model ({model.source}); ms, token counts per 1K = 1,024 tokens", ""]
    for section, keys in _LAYOUT.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {values[name]!r}" for key, name in keys.items()]
        lines.append("")
    for section, keys in EXTRA_LAYOUT.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {model.part(section, key)!r}" for key in keys]
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
