"""Online serving: requests arriving over time, scheduled by one policy, each with its TTFT explained.

Symbols: a request i arrives at a_i with s_i prompt tokens of which p_i are already in the prefix
cache (0 unless the scenario's ``prefix_cache`` is on and the workload says so); it needs
c_i = s_i − p_i new tokens, computed with prefix p_i. Its TTFT is end_i − a_i, where end_i is
when its last layer's last piece is done (the first token then follows), split as

    TTFT = queue + own + sync
    queue = first_start_i − a_i           (arrival → the first step / batch it is in starts)
    own   = Σ over the kernels it is in of its share of them (attention split by each piece's
            variable cost, MoE and dispatch/combine by its tokens)
    sync  = the rest: barrier wait (its group vs the slowest), its batch-mates' work, time
            between chunks, and (ASAP) waiting for the group's compute or the MoE pool

so ``sync ≥ 0`` and the identity holds exactly; :func:`check_identity` checks it (a failure is an
:class:`AccountingError`, a bug). The schedulers are DOMAIN.md §6's, registered by name in
:data:`SERVING_POLICIES`: ``default``, ``chunked`` and ``balanced`` (lockstep steps, vectorised per step:
:mod:`asaptrace.replay._serving_lockstep`) and ``asap`` with its ablations (an online batch former on the replay's pipelined mechanics,
:mod:`asaptrace.replay.pipelined`, via :mod:`asaptrace.replay._serving_asap`). All costs
come from :class:`asaptrace.replay.costs.CostModel` (the scenario's, at its ``cost_scale``).
"""

from __future__ import annotations

from collections.abc import Callable

from asaptrace.registry import Registry
from asaptrace.replay import _serving_asap, _serving_lockstep
from asaptrace.replay.scenario import Scenario
from asaptrace.replay.serving_types import ServingRequests, ServingResult, check_identity

__all__ = [
    "SERVING_POLICIES",
    "ServingRequests",
    "ServingResult",
    "check_identity",
    "policy_names",
    "simulate",
]

Simulator = Callable[[ServingRequests, Scenario], ServingResult]

#: serving schedulers by policy name (DOMAIN.md §6); built-ins register like extensions
SERVING_POLICIES: Registry[Simulator] = Registry("serving policy")
SERVING_POLICIES.register("default", _serving_lockstep.simulate_default)
SERVING_POLICIES.register("chunked", _serving_lockstep.simulate_chunked)
SERVING_POLICIES.register("balanced", _serving_lockstep.simulate_balanced)
for _name, _sim in _serving_asap.VARIANTS.items():
    SERVING_POLICIES.register(_name, _sim)


def simulate(policy: str, requests: ServingRequests, scenario: Scenario) -> ServingResult:
    """Run ``requests`` through ``policy``'s scheduler under ``scenario`` (drained to the end)."""
    return check_identity(SERVING_POLICIES.get(policy)(requests, scenario))


def policy_names() -> list[str]:
    return SERVING_POLICIES.names()
