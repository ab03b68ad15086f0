"""The steady state every online face judges by (DOMAIN.md §8): how long a rate's run lasts, whether
its backlog grows, and the one rule of SLO compliance.

* **How many**: every rate's run holds at least :data:`MIN_ARRIVALS` arrivals **and** at least
  :data:`SLO_INTERVALS` SLO intervals of arrivals (the scenario's duration extended when shorter):
  a sweep's short ``--duration`` too. A run of 240 arrivals at 8/s is a burst, not a steady state.
* **Stability**: the backlog B(t) is the new tokens of the requests arrived by t and not yet started.
  A run is stable only if B at the end of arrivals exceeds B at half the arrivals by at most
  :data:`GROWTH` (1 %) of the new tokens offered in between. A queue fed faster than it drains
  grows by (1 − capacity / rate) of what it is offered, so at 8 % over capacity ≈ 7 % of the
  tokens offered pile up: unstable, whatever the mean TTFT of the requests it finished. (The old
  rule, B at the end ≤ one SLO interval of drain, let a 60 s run sit ≈ SLO / 60 over capacity.)
* **Compliance**: a point meets the SLO when it is stable and its mean TTFT (every arrival,
  drained) is at most the SLO: :func:`meets_slo`, the one helper the SLO search, the sensitivity
  and tornado tables, the TTFT-by-rate table and the dashboard all read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asaptrace.replay.serving.requests import ServingResult

#: at least this many arrivals at every rate (DOMAIN §8)
MIN_ARRIVALS = 2000
#: and at least this many SLO intervals of arrivals
SLO_INTERVALS = 20
#: the backlog may grow by at most this share of the new tokens offered over the second half
GROWTH = 0.01


def run_length(duration_s: float, slo_s: float, min_arrivals: int) -> tuple[float, int]:
    """(seconds of arrivals, least arrivals) of one rate's run: the duration extended to
    :data:`SLO_INTERVALS` SLO intervals, and at least ``min_arrivals`` arrivals."""
    return max(float(duration_s), SLO_INTERVALS * float(slo_s)), int(min_arrivals)


def backlog_tokens(arrival_ns: np.ndarray, start_ns: np.ndarray, new_tokens: np.ndarray, at_ns: int) -> int:
    """New tokens queued at ``at_ns``: of the requests arrived by then, those not yet started."""
    queued = (arrival_ns <= at_ns) & (start_ns > at_ns)
    return int(new_tokens[queued].sum())


def steady_state(res: ServingResult) -> dict[str, Any]:
    """The backlog at half the arrivals and at their end, the new tokens offered in between, and
    whether the run is stable (the growth at most :data:`GROWTH` of them)."""
    n = len(res.arrival_ns)
    if n < 2:
        return {"stable": True}
    half = n // 2
    t_half, t_end = int(res.arrival_ns[half - 1]), int(res.arrival_ns[-1])
    b_half = backlog_tokens(res.arrival_ns, res.start_ns, res.new_tokens, t_half)
    b_end = backlog_tokens(res.arrival_ns, res.start_ns, res.new_tokens, t_end)
    offered = int(res.new_tokens[half:].sum())
    return {
        "arrivals_end_ns": t_end,
        "backlog_half_tokens": b_half,
        "backlog_tokens": b_end,
        "offered_tokens": offered,
        "stable": b_end - b_half <= GROWTH * offered,
    }


def meets_slo(point: dict[str, Any], slo_ns: float) -> bool:
    """Whether a curve point is SLO-compliant: stable (not marked otherwise) and its mean TTFT at
    most the SLO. The one rule every face reads."""
    m = point.get("mean_ttft_ns")
    return m is not None and point.get("stable") is not False and float(m) <= slo_ns


def search_ttft_ns(point: dict[str, Any]) -> float:
    """A point's mean TTFT as the SLO search reads it: infinite when it is not stable."""
    m = point.get("mean_ttft_ns")
    return float("inf") if m is None or point.get("stable") is False else float(m)


#: a seed's SLO rate may sit this far over its policy's bound (the bound is that of the requests a
#: run at it serves, so a seed over it is one by chance: a run a little faster drawing requests a
#: little lighter); beyond it, a defect to name
BOUND_SLACK = 1.05


def above_bound(per: dict[str, list[float | None]], capacity: dict[str, Any]) -> list[str]:
    """The policies any seed of which served above :data:`BOUND_SLACK` × its capacity bound: a
    failure of the steady state or of the model, said (never clipped). Empty when all is well."""
    out = []
    for p, vals in per.items():
        bound = (capacity.get(p) or {}).get("bound_rps")
        if bound is not None and any(v is not None and v > BOUND_SLACK * bound for v in vals):
            out.append(p)
    return out
