"""Where an SLO search starts: each policy's grid of rates before the bisection.

:func:`~asaptrace.replay.whatif.sweep.search_slo` brackets each policy's SLO rate on a grid, then
halves the bracket. The answer (:func:`~asaptrace.replay.whatif.sweep.slo_rate`) reads only the
highest rate that met the SLO and the next one above it, so the grid walks from where the answers
usually lie (:data:`START` of :data:`BOUND_FRACTIONS` of the policy's capacity bound) up while
rates meet the SLO and down while they miss: two or three points a policy where a walk from the
bottom took up to five. The fractions below the first that met change no answer; a face that
draws the curve's low-load end asks them of :func:`curve_points`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class Runner(Protocol):
    """What a grid reads of the search's runner (:class:`~asaptrace.replay.whatif.sweep._Runner`):
    its options (``rates``, ``min_arrivals``, ``policies``) and capacity bounds; points run and read."""

    opt: Any
    caps: dict[str, Any]

    def run(self, wanted: Iterable[tuple[str, float]], *, kind: str = "grid") -> None: ...

    def mean(self, policy: str, rate: float) -> float: ...


#: the grid without a bound (a policy that does not say its capacity): doubling rates from 0.5/s
AUTO_RATES = tuple(0.5 * 2**k for k in range(12))
#: a steady-state search's grid, as fractions of each policy's capacity bound (the SLO rate lies
#: below the bound; halved further down while the lowest misses, to 1/64 of it)
BOUND_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)
#: where a policy's walk starts: the bundled samples' SLO rates lie at 0.2–0.96 of their bounds
START = 1


def grid(runner: Runner, slo_ns: float) -> dict[str, list[float]]:
    """Each policy's grid, run: the options' ``rates``; else the bound's fractions
    (:func:`bound_grid`) when every policy has a bound; else :data:`AUTO_RATES` until one misses."""
    opt = runner.opt
    if opt.rates is not None:
        rates = sorted(set(opt.rates))
        runner.run((p, r) for p in opt.policies for r in rates)
        return {p: rates for p in opt.policies}
    if opt.min_arrivals and all(b is not None for b in runner.caps.values()):
        return bound_grid(runner, slo_ns, {p: b["bound_rps"] for p, b in runner.caps.items()})  # type: ignore[index]
    out: dict[str, list[float]] = {p: [] for p in opt.policies}
    live = list(opt.policies)
    for rate in AUTO_RATES:
        if not live:
            break
        runner.run((p, rate) for p in live)
        for p in list(live):
            out[p].append(rate)
            if runner.mean(p, rate) > slo_ns:
                live.remove(p)
    return out


def bound_grid(runner: Runner, slo_ns: float, bound: dict[str, float]) -> dict[str, list[float]]:
    """Rates at fractions of each policy's bound from :data:`START`'s: up while they meet the SLO
    (to the first that misses), down while they miss (to the first that meets; below the first
    fraction, halvings to 1/64 of the bound). Each policy's rates sorted."""
    out: dict[str, list[float]] = {p: [] for p in bound}

    def step(live: list[str], f: float, up: bool) -> list[str]:
        """Run ``live`` at fraction ``f``: those that go on (met the SLO going up, missed going down)."""
        rate = {p: round(bound[p] * f, 4) for p in live}
        runner.run(rate.items())
        for p in live:
            out[p].insert(len(out[p]) if up else 0, rate[p])
        return [p for p in live if (runner.mean(p, rate[p]) <= slo_ns) == up]

    up = step(list(bound), BOUND_FRACTIONS[START], up=True)
    down = [p for p in bound if p not in up]
    for f in BOUND_FRACTIONS[START + 1 :]:
        if not up:
            break
        up = step(up, f, up=True)
    below = list(BOUND_FRACTIONS[:START][::-1])
    while below[-1] > 1 / 64:
        below.append(below[-1] / 2)
    for f in below:
        if not down:
            break
        down = step(down, f, up=False)
    return out


def curve_points(runner: Runner, policies: tuple[str, ...]) -> None:
    """The bound's fractions below :data:`START`'s that the walk did not need (the curve's low-load
    end, for a face that draws it), run as grid points; no answer reads them (each lies below a rate
    that met the SLO, or the walk ran it). Only where the grid was the bound's."""
    opt, caps = runner.opt, runner.caps
    if opt.rates is None and opt.min_arrivals and all(b is not None for b in caps.values()):
        low = BOUND_FRACTIONS[:START]
        runner.run(((p, round(caps[p]["bound_rps"] * f, 4)) for p in policies for f in low), kind="grid")
