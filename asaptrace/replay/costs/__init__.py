"""The replay's cost model: what a layer's parts cost, in int64 ns (the formulas:
:mod:`~asaptrace.replay.costs.model`).

* :mod:`~asaptrace.replay.costs.model` — :class:`CostModel` (DOMAIN §3/§6 defaults, the one TP
  rule), the strict cost TOML (:func:`load_costs`, :func:`read_costs`, :func:`save_costs`);
* :mod:`~asaptrace.replay.costs.parts` — the registry of cost parts and :func:`layer_costs`, the one
  place a layer's parts are composed (every consumer calls it); *a new cost part is its fit + one
  :func:`register_part`*;
* :mod:`~asaptrace.replay.costs.builtin` — the built-in parts (attention, MoE pool, transfer);
* :mod:`~asaptrace.replay.costs.fit` — :func:`fit_costs`: every part's fit, with R² and residuals.
"""

from asaptrace.replay.costs import builtin  # noqa: F401  (registers the built-in parts)
from asaptrace.replay.costs.fit import (
    R2_WARN,
    CostFit,
    default_quality,
    fit_costs,
    fit_warnings,
    least_squares,
    part_quality,
)
from asaptrace.replay.costs.model import K2, CostModel, K, causal_pairs, load_costs, read_costs, save_costs
from asaptrace.replay.costs.parts import (
    ATTENTION,
    POOL,
    TRANSFER,
    CostPart,
    LayerCosts,
    LayerWork,
    LeastWork,
    has_unmeasured,
    kept_with_parts,
    layer_costs,
    least_ns,
    register_part,
    resource_ns,
    unregister_part,
)

__all__ = [
    "ATTENTION",
    "K2",
    "POOL",
    "R2_WARN",
    "TRANSFER",
    "CostFit",
    "CostModel",
    "CostPart",
    "K",
    "LayerCosts",
    "LayerWork",
    "LeastWork",
    "causal_pairs",
    "default_quality",
    "fit_costs",
    "fit_warnings",
    "has_unmeasured",
    "kept_with_parts",
    "layer_costs",
    "least_ns",
    "least_squares",
    "load_costs",
    "part_quality",
    "read_costs",
    "register_part",
    "resource_ns",
    "save_costs",
    "unregister_part",
]
