"""Link contention: synth's knob, the in-flight counts, the fitted κ and the band that draws it.

Twins are synth's own disaggregated runs (its independent execution model: a send is slowed by
the same-direction sends in flight, :mod:`asaptrace.synth.contention`) with kernel noise σ 0.2;
small (12 layers, one step) to stay fast. Their clocks agree (``offset_max_us`` 0): κ is read from
the kernels' overlaps across ranks, which clocks that disagree by more than a transfer blur.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from asaptrace.replay import contention
from asaptrace.replay.contention import estimate_contention, others_in_flight, transfer_kernels
from asaptrace.replay.costs import fit_costs
from asaptrace.synth.config import config_toml, load_config
from asaptrace.synth.contention import DieSends, Links
from tests._synth_helpers import predict_asap as predict
from tests._synth_helpers import twin_work
from tests._synth_helpers import work_makespan as makespan

SIGMA = 0.2


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("contention-twins")


def twin(root, contention, split=None):
    return twin_work(root, SIGMA, split, contention=contention if split else 0.0, offset_max_us=0)


# ------------------------------------------------------------------------- hand-worked cases
def test_synth_links_slow_a_send_by_the_other_sends_in_flight():
    links = Links(0.5)
    links.place(np.array([0, 20]), np.array([10, 30]))  # one transfer, two dies
    links.place(np.array([5]), np.array([25]))
    # at 7 both run; at 15 only the second; at 30 none (end excluded)
    assert links.slowdown(np.array([7, 15, 30])).tolist() == [2.0, 1.5, 1.0]
    off = Links(0.0)
    off.place(np.array([0]), np.array([10]))
    assert off.slowdown(np.array([5])).tolist() == [1.0]


def test_synth_places_a_dispatch_member_by_member_at_its_start():
    # a group's program ran ahead: its send (members at 100 and 300, 100 ns each before
    # contention) is known before another group's send that starts at 250 (100 ns)
    links = Links(0.5)
    events = links.begin(0, np.array([100, 300]), np.array([100.0, 100.0]))
    assert [(e.t_ns, e.die) for e in events] == [(100, 0), (300, 1)]
    other = links.begin(1, np.array([250]), np.array([100.0]))
    # the engine runs them in time order: 100 (alone: 100 ns → [100, 200)), 250 (nothing in
    # flight: [250, 350)), 300 (the other transfer runs: × 1.5 = 150 ns)
    assert links.started(events[0]) is None
    assert links.started(other[0]).tolist() == [1.0]
    assert links.started(DieSends(300, group=0, die=1)).tolist() == [1.0, 1.5]


def test_in_flight_counts_other_transfers_once():
    # transfer 0: dies [0, 10) and [4, 12) (merged into one segment); transfer 1: [8, 20); 2: [30, 40)
    inst = np.array([0, 0, 1, 2])
    start = np.array([0, 4, 8, 30])
    end = np.array([10, 12, 20, 40])
    assert others_in_flight(inst, start, end).tolist() == [0, 0, 1, 0]


def _sends(layer_offset: int, slow_member_ns: int) -> list[tuple[int, int, int, int]]:
    """(rank, layer, start, duration) of two groups' dispatch-sends of one layer: group 0 (ranks 0,
    1) sends at 0 (nothing in flight: 100 ns) and at 50 (group 1's send runs: the given duration);
    group 1 (ranks 2, 3) sends at 10 and 120, group 0's send in flight at both (180 ns each)."""
    t, layer = 1000 * layer_offset, layer_offset
    return [
        (0, layer, t, 100),
        (1, layer, t + 50, slow_member_ns),
        (2, layer, t + 10, 180),
        (3, layer, t + 120, 180),
    ]


def test_kappa_by_hand_from_a_few_sends():
    # two layers: group 0's member in flight with one other transfer is 1.4× and 1.6× its peer;
    # group 1's members both meet one (no skew: they say nothing about κ). In log duration the
    # least-squares κ is the geometric mean of the ratios: 1 + κ = √(1.4 · 1.6), κ = 0.49666
    rows = _sends(0, 140) + _sends(1, 160)
    dev = pl.DataFrame(
        {
            "rank": [r for r, *_ in rows],
            "kind": "dispatch",
            "ts_ns": [s for *_, s, _ in rows],
            "dur_ns": [d for *_, d in rows],
            "step": 0,
            "layer": [la for _, la, *_ in rows],
            "micro_batch": 0,
        }
    ).with_columns(end_ns=pl.col("ts_ns") + pl.col("dur_ns"))
    ranks = pl.DataFrame({"rank": [0, 1, 2, 3], "role": "attention", "dp_group": [0, 0, 1, 1]})
    kernels = transfer_kernels(dev, ranks, "disaggregated")
    assert kernels.sort("layer", "ts_ns")["in_flight"].to_list() == [0, 1, 1, 1] * 2
    est = estimate_contention(kernels)
    assert est["kappa"] == pytest.approx((1.4 * 1.6) ** 0.5 - 1, abs=1e-6)
    assert est["overlaps"] == 6
    # a coupled store's transfers are collectives: no sender kernels, nothing to read
    assert estimate_contention(transfer_kernels(dev, ranks, "coupled"))["overlaps"] == 0


def test_contention_zero_is_not_written_into_the_config():
    cfg = load_config("disaggregated")
    assert "contention" not in config_toml(cfg) and "contention" not in cfg.to_dict()["costs"]
    on = replace(cfg, costs=replace(cfg.costs, contention=0.5))
    assert "contention = 0.5" in config_toml(on)


# ------------------------------------------------------------------------------------ twins
def test_without_contention_the_fit_is_todays(root):
    quiet = twin(root, 0.0, (4, 4, 16))
    fit = fit_costs(quiet)
    assert fit.model.xfer_contention == 0.0 and fit.quality["transfer"]["contention"] == 0.0
    assert fit.quality["transfer"]["in_flight_mean"] > 0  # the sends overlap, but do not slow
    # exactly the costs fitted without the contention term
    assert fit.model == fit_costs(replace(quiet, contention={})).model
    coupled = fit_costs(twin(root, 0.0))
    assert coupled.model.xfer_contention == 0.0


@pytest.mark.parametrize("contention", [0.25, 0.5])
def test_the_fit_recovers_the_contention_synth_used(root, contention):
    # the trace's in-flight count is synth's n (every send in flight at a die's start), so κ is
    # read within 10 % (measured: 0.243 for 0.25, 0.477 for 0.5; the combine dies' loads differ)
    fit = fit_costs(twin(root, contention, (4, 4, 16)))
    assert fit.model.xfer_contention == pytest.approx(contention, rel=0.10)
    assert fit.quality["transfer"]["contention"] == round(fit.model.xfer_contention, 4)


def test_the_band_draws_the_contention(root):
    wl = twin(root, 0.5, (4, 4, 16))
    fit = fit_costs(wl)
    truth = makespan(wl)
    r = predict(wl, (4, 4, 16))
    assert abs(r.makespan_ns - truth) / truth < 0.05, (r.makespan_ns, truth)
    assert r.band["mc_contention"] == fit.model.xfer_contention and "mc_contention_prior" not in r.band
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"], (r.band, truth)


@pytest.mark.parametrize("split", [(4, 4, 16), (4, 4, 8), (4, 4, 32), (8, 4, 16)])
def test_a_coupled_fit_covers_a_contended_twin_with_the_prior(root, monkeypatch, split):
    # a coupled run shows no link contention (its collectives run one at a time): the point
    # estimate assumes none, and the band's high edge draws κ over the prior. Measured (σ 0.2,
    # contention 0.5): −0.3 % (4×4+16), −1.2 % (4×4+8), −0.8 % (4×4+32), −4.7 % (8×4+16; −2.9 %
    # at contention 0), all in the band (docs/analyses/replay.md has σ 0.1–0.3 × contention 0–0.5)
    truth = makespan(twin(root, 0.5, split))
    coupled = twin(root, 0.0)
    r = predict(coupled, split)
    assert abs(r.makespan_ns - truth) / truth < 0.05, (r.makespan_ns, truth)
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"], (r.band, truth)
    prior = r.band["mc_contention_prior"]
    assert prior["kappa"] == [0.0, 0.5] and prior["in_flight"]["dispatch"] > 0 and prior["why"]
    assert r.costs["xfer_contention"] == 0.0  # the point estimate: none
    if split == (4, 4, 16):  # the prior moves only the high edge
        monkeypatch.setattr(contention, "CONTENTION_PRIOR", (0.0, 0.0))
        plain = predict(coupled, split).band
        assert plain["mc_low_ns"] == r.band["mc_low_ns"] and plain["mc_high_ns"] < r.band["mc_high_ns"]


def test_a_zero_time_kernel_counts_the_others_in_flight_and_never_less_than_none():
    # transfer 0 runs 0-10; transfer 1 is one zero-time kernel at 5 (a run whose transfers were
    # not measured: its kernels last 0); transfer 2 is a lone zero-time kernel at 20
    inst, start, end = np.array([0, 1, 2]), np.array([0, 5, 20]), np.array([10, 5, 20])
    assert others_in_flight(inst, start, end).tolist() == [0, 1, 0]  # was [0, 0, -1]
