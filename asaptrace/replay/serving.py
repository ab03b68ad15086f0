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
from dataclasses import dataclass

import numpy as np

from asaptrace.errors import AccountingError
from asaptrace.registry import Registry
from asaptrace.replay.scenario import Scenario


@dataclass(frozen=True)
class ServingRequests:
    """Columnar requests in arrival order (int64 arrays)."""

    arrival_ns: np.ndarray
    seq_len: np.ndarray
    cached_len: np.ndarray

    def __post_init__(self) -> None:
        if len(self.arrival_ns) and np.any(np.diff(self.arrival_ns) < 0):
            raise ValueError("requests must be in arrival order")

    @property
    def new_tokens(self) -> np.ndarray:
        return self.seq_len - self.cached_len

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass(frozen=True)
class ServingResult:
    """What one policy did with one request stream: per-request times (int64 ns) and counts."""

    policy: str
    arrival_ns: np.ndarray
    start_ns: np.ndarray  # first work (start of the first step / batch holding the request)
    end_ns: np.ndarray  # last layer done
    own_ns: np.ndarray
    new_tokens: np.ndarray
    steps: int  # lockstep steps, or ASAP batches
    layer_items: int  # (group or batch, layer) items simulated
    events: int = 0  # engine events handled (0: a lockstep policy, which needs no event queue)

    @property
    def ttft_ns(self) -> np.ndarray:
        return self.end_ns - self.arrival_ns

    @property
    def queue_ns(self) -> np.ndarray:
        return self.start_ns - self.arrival_ns

    @property
    def sync_ns(self) -> np.ndarray:
        return self.ttft_ns - self.queue_ns - self.own_ns


def check_identity(res: ServingResult) -> ServingResult:
    """Every request finished, after it started, after it arrived; own ≤ TTFT − queue."""
    if len(res.end_ns) and (res.end_ns < 0).any():
        raise AccountingError(f"{res.policy}: {(res.end_ns < 0).sum()} requests never finished")
    if (res.queue_ns < 0).any() or (res.end_ns < res.start_ns).any():
        raise AccountingError(f"{res.policy}: a request started before it arrived or ended before it started")
    # own is a share of kernels the request was in, so it cannot exceed its time in service
    # (1 ns per layer and piece of rounding slack)
    if (res.sync_ns < -res.new_tokens.clip(1, None)).any():
        raise AccountingError(f"{res.policy}: own kernel time exceeds time in service (sync < 0)")
    return res


Simulator = Callable[[ServingRequests, Scenario], ServingResult]

#: serving schedulers by policy name (DOMAIN.md §6); built-ins register like extensions
SERVING_POLICIES: Registry[Simulator] = Registry("serving policy")


def simulate(policy: str, requests: ServingRequests, scenario: Scenario) -> ServingResult:
    """Run ``requests`` through ``policy``'s scheduler under ``scenario`` (drained to the end)."""
    _register_builtins()
    return check_identity(SERVING_POLICIES.get(policy)(requests, scenario))


def policy_names() -> list[str]:
    _register_builtins()
    return SERVING_POLICIES.names()


def _register_builtins() -> None:
    if "default" in SERVING_POLICIES:
        return
    from asaptrace.replay import _serving_asap, _serving_lockstep

    SERVING_POLICIES.register("default", _serving_lockstep.simulate_default)
    SERVING_POLICIES.register("chunked", _serving_lockstep.simulate_chunked)
    SERVING_POLICIES.register("balanced", _serving_lockstep.simulate_balanced)
    for name, sim in _serving_asap.VARIANTS.items():
        SERVING_POLICIES.register(name, sim)
