"""The cost-fit band's ends searched near the main answer (``asaptrace.replay.whatif.sweep_near``):
the rate a full search finds, within the interpolation of a similar final bracket, in fewer points."""

from __future__ import annotations

import pytest

from asaptrace.replay.policies import policy_of
from asaptrace.replay.serving.scenario import load_scenario
from asaptrace.replay.whatif import sweep as sweep_mod
from asaptrace.replay.whatif.sweep import SweepOptions, run_sweep
from tests.test_replay_steady_state import HAND, _store


def test_the_band_searched_near_the_answer_finds_the_full_searchs_rate_in_fewer_points(tmp_path, monkeypatch):
    from asaptrace.advise.online import cost_band

    # one group, 100 ms of work per 1K tokens; an SLO of 3 s puts each end's answer inside its
    # bracket (at 5 s the full search's grid point at exactly the low-cost bound met the SLO over a
    # finite run, a queue at full load, and the full search answered the bound itself)
    sc = load_scenario().with_knobs(HAND | {"slo_ttft_s": 3.0})
    one = policy_of("coupled", {"attention": "1x1"})
    store = _store(tmp_path / "s.store", [256, 512, 1024, 1536, 3072] * 20)  # mean 1,280: bound ≈ 8/s
    opt = SweepOptions(
        policies=("coupled",), workload=store, min_arrivals=1000, configured=(("coupled", one),), seeds=(0, 1)
    )
    quality = {"attention": {"status": "fitted", "residual_p95_pct": 20.0}}
    main = run_sweep(sc, opt)
    points: list[float] = []
    real = sweep_mod.evaluate
    monkeypatch.setattr(sweep_mod, "evaluate", lambda p, r, s, o: points.append(r) or real(p, r, s, o))
    full = cost_band(sc, opt, quality)
    n_full = len(points)
    near = cost_band(sc, opt, quality, main)
    n_near = len(points) - n_full
    for end in ("low_costs", "high_costs"):
        a, b = full[end]["coupled"], near[end]["coupled"]
        assert b["bound_rps"] == a["bound_rps"]
        assert b["slo_rps"] == pytest.approx(a["slo_rps"], rel=0.03) and b["slo_rps"] <= b["bound_rps"]
    # the cheaper costs serve more, and the band holds the main answer's first seed between its ends
    assert near["high_costs"]["coupled"]["slo_rps"] < main["slo_by_seed"]["coupled"][0]
    assert main["slo_by_seed"]["coupled"][0] < near["low_costs"]["coupled"]["slo_rps"]
    assert n_near < n_full
