"""The SLO search started from a known answer: the cost-fit band's two ends (``advise --online``).

:func:`~asaptrace.replay.whatif.sweep.search_slo` finds a rate from nothing: a grid at fractions of
the capacity bound until one misses, then four halvings of the bracket (≈ 8 points a policy). At a
band's end the answer is already known up to a few per cent: the same seed's rate at the fitted
costs, scaled by how far the bound moved (:func:`search_near`). So the search starts with a bracket
of ± :data:`SPREAD` around that guess (widened while it does not hold the SLO), halves it
:data:`HALVINGS` times and interpolates as the full search does (≈ 4 points a policy). Its rate
differs from the full search's as two grids read one noisy curve differently (on the bundled
sample 0.3 % on average, at most 1.7 %; docs/performance.md). A policy with no guess (its rate
None or censored), or none bracketed within :data:`WIDENINGS`, is searched in full.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from asaptrace.replay.serving.scenario import Scenario
from asaptrace.replay.whatif.sweep import SweepOptions, _Runner, _search, search_slo, slo_rate

#: the first bracket: the guess × (1 ∓ SPREAD)
SPREAD = 0.1
#: halvings of the bracket once it holds the SLO
HALVINGS = 2
#: times a bracket that does not hold the SLO is moved out by 2 × SPREAD before giving up
WIDENINGS = 4


def search_near(
    sc: Scenario, opt: SweepOptions, known: dict[str, tuple[float | None, float | None]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each policy's SLO rate on ``sc`` searched near ``known[policy]`` = (its rate on the same seed
    under other costs, its bound there): {policy: {slo_rps, censored}} and the capacity bounds
    here. A policy with no usable guess is searched in full (:func:`search_slo`)."""
    near = replace(opt, bisection_steps=HALVINGS)
    runner = _Runner(sc, near, None)
    try:
        slo_ns = sc.slo_ttft_s * 1e9
        guess = {}
        for p in opt.policies:
            rate, bound = known.get(p, (None, None))
            here = (runner.caps.get(p) or {}).get("bound_rps")
            if rate and bound and here:
                guess[p] = rate * here / bound
        grid = {p: [round(g * (1 - SPREAD), 4), round(g * (1 + SPREAD), 4)] for p, g in guess.items()}
        runner.run(((p, r) for p, rates in grid.items() for r in rates), kind="grid")
        for _ in range(WIDENINGS):
            moves = {}
            for p, rates in grid.items():
                lo, hi = rates[0], rates[-1]
                if runner.mean(p, lo) > slo_ns:  # even the lowest misses: further down
                    moves[p] = (0, round(lo * (1 - 2 * SPREAD), 4))
                elif runner.mean(p, hi) <= slo_ns:  # even the highest meets: further up
                    moves[p] = (len(rates), round(hi * (1 + 2 * SPREAD), 4))
            if not moves:
                break
            runner.run(((p, r) for p, (_, r) in moves.items()), kind="grid")
            for p, (at, r) in moves.items():
                grid[p].insert(at, r)
        for p, rates in list(grid.items()):  # still no bracket: searched in full below
            if runner.mean(p, rates[0]) > slo_ns or runner.mean(p, rates[-1]) <= slo_ns:
                del grid[p], guess[p]
        _search(runner, tuple(grid), grid, slo_ns)
        out = {}
        for p in grid:
            curve = [(r, runner.mean(q, r)) for (q, r) in runner.points if q == p]
            rate, censored = slo_rate(curve, slo_ns)
            out[p] = {"slo_rps": None if rate is None else round(rate, 4), "censored": censored}
        caps = dict(runner.caps)
    finally:
        runner.close()
    rest = tuple(p for p in opt.policies if p not in guess)
    if rest:
        full, _ = search_slo(sc, replace(opt, policies=rest), reference=False)
        out |= full
    return {p: out[p] for p in opt.policies}, caps
