"""synth's kernel costs: the replay's :class:`~asaptrace.replay.costs.CostModel` plus kernel shapes.

The project has one cost model. Attention, the routed experts' grouped GEMM and the
dispatch/combine transfers come from :class:`CostModel`'s formulas (attention
c0 + c1·Σc + c2·Σc(2P+c) + a per-request term, MoE max(plateau, a + b·N·skew) with E_ref scaling,
transfer latency + per_k·t). What stays here is what only a kernel-level trace needs on top: the
kernels the replay folds into its items (gate, ``get_dispatch_layout``, shared expert, dense MLP,
DeepEP's ``notify_dispatch`` count exchange, the step all-gather, the receive-buffer copy), the
combine's heavier payload, host launch timing, the scheduler's step gap, and noise.

The user's ``[costs]`` keys (synth's TOML, :class:`~asaptrace.synth.config.CostConfig`) map onto
CostModel fields in :func:`cost_model`:

====================  =======================================================================
``[costs]`` key       CostModel field
====================  =======================================================================
``attn_c0/c1/c2``     ``attn_c0_ms``, ``attn_c1_ms``, ``attn_c2_ms`` (``attn_phi`` = 0)
``attn_per_request``  ``attn_per_request_ms``
``moe_floor``         ``moe_plateau_ms``, with ``moe_e_ref`` = the EP size (so r = 1)
``moe_c0``            ``moe_a_ms``
``moe_c1``            ``moe_b_ms`` = moe_c1 · top_k / EP (per 1K assignments on a device →
                      per 1K tokens of the item, the busiest device's share as ``skew``)
``dispatch_c0/c1``    ``xfer_latency_ms``, ``xfer_per_k_ms`` (dispatch and combine alike)
====================  =======================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asaptrace.replay.costs import CostModel
from asaptrace.synth.config import CostConfig, SynthConfig


def cost_model(cfg: SynthConfig) -> CostModel:
    """The shared cost model a synthetic run uses (see the module docstring for the mapping)."""
    c, m, ep = cfg.costs, cfg.model, _ep(cfg)
    return CostModel(
        attn_c0_ms=c.attn_c0,
        attn_c1_ms=c.attn_c1,
        attn_c2_ms=c.attn_c2,
        attn_phi=0.0,
        attn_per_request_ms=c.attn_per_request,
        moe_plateau_ms=c.moe_floor,
        moe_a_ms=c.moe_c0,
        moe_b_ms=c.moe_c1 * m.top_k / ep,
        moe_e_ref=float(ep),
        xfer_latency_ms=c.dispatch_c0,
        xfer_per_k_ms=c.dispatch_c1,
        source=f"synth [costs] ({cfg.preset or 'custom'})",
    )


@dataclass(frozen=True)
class KernelCosts:
    """Per-kernel durations of a synthetic run (ns, before noise); ``model`` is the shared part."""

    model: CostModel
    shape: CostConfig  # synth-only kernel shapes: gate, layout, notify, shared, dense, recv, allgather, …
    top_k: int
    experts_ep: int

    def attention_ns(self, tokens: np.ndarray, quad: np.ndarray, n_req: np.ndarray) -> np.ndarray:
        """Attention of batches from Σc, Σc(2P+c) (= Σ s² − P²) and request counts (arrays)."""
        return self.model.attention_sums_ns(tokens, quad, n_req)

    def moe_ns(self, loads: np.ndarray) -> np.ndarray:
        """Grouped GEMM on each expert device from its (token, expert) assignments (one item)."""
        loads = np.asarray(loads, np.float64)
        total = loads.sum()
        tokens = total / self.top_k
        skew = loads * self.experts_ep / total if total > 0 else np.ones_like(loads)
        return self.model.moe_ns(tokens, self.experts_ep, skew)

    def transfer_ns(self, tokens_per_die: float | np.ndarray) -> np.ndarray:
        """Dispatch of ``tokens_per_die`` tokens from each sending die."""
        return self.model.transfer_ns(tokens_per_die)

    def combine_ns(self, tokens_per_die: float | np.ndarray) -> np.ndarray:
        """Combine: the same transfer with the results' heavier payload (``combine_payload`` × bytes)."""
        return self.model.transfer_ns(np.asarray(tokens_per_die, np.float64) * self.shape.combine_payload)

    def linear_ns(self, c0_ms: float, c1_ms: float, tokens: float | np.ndarray) -> np.ndarray:
        """A kernel-shape term ``c0 + c1·t/1K`` ms (gate, shared expert, dense MLP, receive copy)."""
        ms = c0_ms + c1_ms * np.asarray(tokens, np.float64) / 1e3
        return np.rint(np.asarray(ms) * 1e6).astype(np.int64)


def kernel_costs(cfg: SynthConfig) -> KernelCosts:
    """The kernel costs of ``cfg``: the shared model of :func:`cost_model` plus synth's kernel shapes."""
    return KernelCosts(cost_model(cfg), cfg.costs, cfg.model.top_k, _ep(cfg))


def _ep(cfg: SynthConfig) -> int:
    d = cfg.deployment
    return d.dp * d.tp if d.mode == "coupled" else d.expert_devices
