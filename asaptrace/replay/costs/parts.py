"""Cost parts: a layer's cost as named parts composed in one place (:func:`layer_costs`).

A *part* is one kind of kernel a layer runs (attention, the MoE experts, a dispatch or combine,
a norm, …) on one *resource*: an attention group's dies (:data:`ATTENTION`), the MoE pool
(:data:`POOL`) or each send (:data:`TRANSFER`, dispatch and combine alike). Registered once
(:func:`register_part`), a part says

* ``layer_ns(model, work)`` — what it costs for one layer of a given piece of work
  (:class:`LayerWork`: each group's pieces or their sums, the pool item's tokens, each die's send);
* ``least_ns(model, work)`` — the least it can cost per request (attention: ns per request per
  layer, the workload's mean; pool and transfer: ns per token per layer) for the capacity bounds
  (:mod:`asaptrace.replay.serving.capacity`), batching amortising whatever it can;
* ``fit(work, model)`` — its constants fitted to a store's measured work (``None``: not fitted),
  returning the model changes and the part's quality entry (:func:`~asaptrace.replay.costs.fit.fit_costs`
  runs every part's fit);
* ``params`` — its constants and their defaults (a ``[name]`` section of the cost TOML; the
  built-in parts keep theirs in :class:`~asaptrace.replay.costs.model.CostModel`'s fields);
* ``in_measured`` — whether a store's measured attention, pool and transfer times already hold
  its kernels (the built-in parts): the offline replay rescales those measured times and adds the
  modelled cost of every part that is not in them.

Every consumer — the offline replay's items, the online formers, the lockstep step cost, the
capacity bounds — calls :func:`layer_costs` / :func:`resource_ns` / :func:`least_ns`, so adding
a part is its fit + one :func:`register_part` (docs/analyses/replay.md, "Adding a cost part").
The built-in parts come first on their resource and the others are added after them, so with the
built-in parts alone every sum is the built-in part's own value, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from asaptrace.replay.costs.model import EXTRA_LAYOUT, CostModel

ATTENTION = "attention"
POOL = "pool"
TRANSFER = "transfer"
RESOURCES = (ATTENTION, POOL, TRANSFER)


class LayerWork(NamedTuple):
    """One layer's work. Attention: one group's pieces (``new`` c and ``prefix`` P, exact) or, for
    several groups at once, each group's sums (``tokens`` Σc, ``quad`` Σc(2P+c), ``n`` pieces);
    the pool item's ``pool_tokens`` on ``experts`` dies; ``sent_per_die`` tokens each sending die
    dispatches (and combines). Arrays broadcast: a part returns one value per group or item. (A
    named tuple: the online formers build one per batch.)"""

    tokens: Any
    tp: float | None = None
    experts: float = 1.0
    pool_tokens: Any = 0.0
    sent_per_die: Any = 0.0
    quad: Any = 0.0
    n: Any = 1.0
    new: np.ndarray | None = None
    prefix: Any = 0

    @classmethod
    def of_pieces(
        cls, new: Any, prefix: Any, *, tp: int, experts: float, sent_per_die: float | None = None
    ) -> LayerWork:
        """One batch of pieces on a group of ``tp`` dies; its tokens make the pool item and each
        die sends its share (``sent_per_die``: another sender count's share)."""
        c = np.asarray(new, np.float64)
        tokens = float(c.sum())
        sent = tokens / tp if sent_per_die is None else sent_per_die
        return cls(tokens, tp, experts, tokens, sent, 0.0, float(len(c)), c, prefix)


@dataclass(frozen=True)
class LeastWork:
    """The workload a capacity bound reads: every request's ``new`` tokens and ``prefix``, on groups
    of ``tp`` dies, a pool of ``experts`` dies whose items hold at most ``n_cap`` tokens."""

    new: np.ndarray
    prefix: np.ndarray
    tp: int
    experts: float
    n_cap: float


@dataclass(frozen=True)
class CostPart:
    """One registered cost part (see the module docstring for each hook)."""

    name: str
    resource: str
    layer_ns: Callable[[CostModel, LayerWork], Any]
    least_ns: Callable[[CostModel, LeastWork], float]
    fit: Callable[[Any, CostModel], tuple[dict[str, Any], dict[str, Any]]] | None = None
    params: Mapping[str, float] = field(default_factory=dict)
    in_measured: bool = False


#: name → part, the built-in parts first (asaptrace.replay.costs.builtin registers them)
PARTS: dict[str, CostPart] = {}
_ON: dict[str, tuple[CostPart, ...]] = {r: () for r in RESOURCES}


#: what forgets costs kept by their inputs (a policy's batch costs by pieces, the lockstep step
#: costers): their keys hold the cost model, not the parts, so a part registered or removed
#: clears them (:func:`kept_with_parts`)
_FORGET: list[Callable[[], None]] = []


def kept_with_parts(kept: Any) -> Any:
    """Forget ``kept`` whenever the parts change: an ``lru_cache``-d function (a decorator: its
    ``cache_clear``), or a callable that forgets. Returns ``kept``."""
    _FORGET.append(getattr(kept, "cache_clear", kept))
    return kept


def register_part(part: CostPart) -> CostPart:
    """Register ``part`` after the parts already on its resource (replacing one of the same name)."""
    if part.resource not in RESOURCES:
        raise ValueError(f"cost part {part.name!r}: resource must be one of {RESOURCES}")
    PARTS[part.name] = part
    if part.params:
        EXTRA_LAYOUT[part.name] = dict(part.params)
    _reindex()
    return part


def unregister_part(name: str) -> None:
    """Remove a registered part (a test's, or a what-if's)."""
    PARTS.pop(name, None)
    EXTRA_LAYOUT.pop(name, None)
    _reindex()


def _reindex() -> None:
    for r in RESOURCES:
        _ON[r] = tuple(p for p in PARTS.values() if p.resource == r)
    for forget in _FORGET:
        forget()


def resource_ns(costs: CostModel, work: LayerWork, resource: str, *, measured: bool = True) -> Any:
    """Σ over the parts on ``resource`` of their cost for ``work`` (``measured=False``: only the
    parts a store's measured times do not hold, 0 when there is none)."""
    on = _ON[resource]
    if measured and len(on) == 1:  # the built-in part alone: its own value (the common case, fast)
        return on[0].layer_ns(costs, work)
    total: Any = 0
    first = True
    for p in on:
        if not measured and p.in_measured:
            continue
        v = p.layer_ns(costs, work)
        total, first = (v if first else total + v), False
    return total


class LayerCosts(NamedTuple):
    """One layer's cost per resource (ns; one value per group or item when the work is arrays)."""

    attention: Any
    moe: Any
    transfer: Any


def layer_costs(costs: CostModel, work: LayerWork) -> LayerCosts:
    """A layer's attention, MoE pool item and send (each of dispatch and combine): every registered
    part composed on its resource."""
    return LayerCosts(
        resource_ns(costs, work, ATTENTION),
        resource_ns(costs, work, POOL),
        resource_ns(costs, work, TRANSFER),
    )


def has_unmeasured(resource: str) -> bool:
    """Whether a part on ``resource`` is not in a store's measured times (the offline replay adds it)."""
    return any(not p.in_measured for p in _ON[resource])


def least_ns(costs: CostModel, work: LeastWork, resource: str) -> float:
    """Σ over the parts on ``resource`` of their least cost per request (attention) or per token."""
    total = 0.0
    first = True
    for p in _ON[resource]:
        v = p.least_ns(costs, work)
        total, first = (v if first else total + v), False
    return total
