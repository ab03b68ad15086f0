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
:data:`asaptrace.replay.policies.POLICIES` (the one registry; a policy's :meth:`serve` is its online former):
``coupled`` (alias ``default``), ``chunked`` and ``balanced`` (lockstep steps, vectorised per step:
:mod:`asaptrace.replay.policies.lockstep_online`) and ``asap`` with its ablations (an online batch former on the replay's pipelined mechanics,
:mod:`asaptrace.replay.mechanics.pipelined`, via :mod:`asaptrace.replay.policies.pipelined_online`). All costs
come from :class:`asaptrace.replay.costs.CostModel` (the scenario's, at its ``cost_scale``).
"""

from __future__ import annotations

from dataclasses import replace

from asaptrace.errors import UsageError
from asaptrace.replay.policies import Policy, policy_of, policy_specs
from asaptrace.replay.serving.requests import ServingRequests, ServingResult, check_identity
from asaptrace.replay.serving.scenario import Scenario

__all__ = [
    "ServingRequests",
    "ServingResult",
    "check_identity",
    "policy_names",
    "serving_policy",
    "simulate",
]


def serving_policy(spec: str | Policy) -> Policy:
    """The registered policy a spec names, refused (UsageError) when it has no online former."""
    pol = policy_of(spec) if isinstance(spec, str) else spec
    if not pol.online():
        raise UsageError(
            f"policy {pol.name!r} replays stores only: it has no online batch former "
            f"(the sweep serves: {', '.join(policy_names())})"
        )
    return pol


def simulate(policy: str | Policy, requests: ServingRequests, scenario: Scenario) -> ServingResult:
    """Run ``requests`` through ``policy``'s online former under ``scenario`` (drained to the end):
    the policy object is the deployment and mechanisms served, the scenario the layers and costs;
    the result is labelled with the spec as given (``asap-no-dual-batch``, ``default``)."""
    pol = serving_policy(policy)
    label = policy if isinstance(policy, str) else pol.name
    res = pol.serve(requests, scenario)
    return check_identity(res if res.policy == label else replace(res, policy=label))


def policy_names() -> list[str]:
    """What the sweep can serve: every online policy and its named ablations."""
    return policy_specs(online=True)
