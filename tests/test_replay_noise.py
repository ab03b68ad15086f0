"""Noise-aware costs and the Monte-Carlo band, against independently simulated twins.

A twin is the same requests run by synth's own disaggregated model (its ASAP runs keep an
independent execution model: every die of the pool and every attention member runs its own queue,
each kernel's duration lognormal with the configured σ). The coupled run is fitted, the replay
predicts the twin's split, and the twin's measured makespan is the ground truth. Small runs (12
layers, one step) keep this fast; the splits keep TP4 (synth's attention does not scale with T).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from asaptrace.replay.costs import fit_costs
from asaptrace.replay.dispersion import expected_max, fork_join_share, max_draws
from tests._synth_helpers import predict_asap as predict
from tests._synth_helpers import twin_work
from tests._synth_helpers import work_makespan as makespan


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("noise-twins")


def twin(root, sigma, split=None):
    return twin_work(root, sigma, split)


# ---------------------------------------------------------------------------------- formulas
def test_expected_max_has_its_closed_forms():
    s = 0.3
    assert expected_max(1, s) == pytest.approx(math.exp(s * s / 2), rel=1e-9)
    # max of two lognormals: 2·e^(σ²/2)·Φ(σ/√2)
    two = 2 * math.exp(s * s / 2) * 0.5 * (1 + math.erf(s / math.sqrt(2) / math.sqrt(2)))
    assert expected_max(2, s) == pytest.approx(two, rel=1e-9)
    assert expected_max(32, 0.0) == 1.0
    assert expected_max(8, s) < expected_max(32, s)


def test_max_draws_agree_with_sampling():
    rng = np.random.default_rng(7)
    z = np.exp(0.2 * rng.standard_normal((200_000, 8)))
    assert expected_max(8, 0.2) == pytest.approx(z.max(axis=1).mean(), rel=2e-3)
    assert max_draws(np.random.default_rng(1), 8, 0.2, 200_000).mean() == pytest.approx(1.0, abs=3e-3)


def test_a_busy_pool_pays_between_its_slowest_and_its_mean_die():
    s = 0.2
    # one item in flight: every item waits for its slowest die; one die: always busy, its mean
    assert fork_join_share(8, s, 1) == pytest.approx(expected_max(8, s), rel=1e-12)
    assert fork_join_share(1, s, 16) == pytest.approx(expected_max(1, s), rel=1e-12)
    assert fork_join_share(8, 0.0, 4) == 1.0
    shares = [fork_join_share(8, s, w) for w in (1, 2, 4, 8, 64)]
    assert shares == sorted(shares, reverse=True)  # more in flight: the dies drift further apart
    assert expected_max(1, s) < shares[-1] < 1.01 * expected_max(1, s)  # many in flight: the mean die
    assert fork_join_share(8, s, 8) == fork_join_share(8.0, s, 8)  # one value per argument set


@pytest.mark.parametrize(("k", "window"), [(2, 2), (8, 8), (16, 3)])
def test_the_busy_pool_rate_matches_a_recurrence(k, window):
    """The loop written another way: every die is FIFO, so items end in order and item j is
    released when item j − window ends; each die's end is max(its previous end, that release) +
    its draw. The long-run rate of that recurrence (other draws) is the simulated share."""
    rng = np.random.default_rng(12345)
    n = 30_000
    x = np.exp(0.2 * rng.standard_normal((n, k)))
    free = np.zeros(k)
    done = np.zeros(n)
    for j in range(n):
        free = np.maximum(free, done[j - window] if j >= window else 0.0) + x[j]
        done[j] = free.max()
    rate = (done[-1] - done[n // 2 - 1]) / (n - n // 2)
    assert fork_join_share(k, 0.2, window) == pytest.approx(rate, rel=0.01)


# ------------------------------------------------------------------------------------ twins
def test_the_fit_reports_the_dispersion_it_found(root):
    q = fit_costs(twin(root, 0.2)).quality
    assert 0.15 <= q["moe"]["sigma"] <= 0.25
    assert 0.15 <= q["attention"]["sigma"] <= 0.25
    quiet = fit_costs(twin(root, 0.0)).quality
    assert quiet["attention"]["sigma"] == 0.0  # members identical without noise


@pytest.mark.parametrize("split", [(4, 4, 16), (4, 4, 8), (4, 4, 32), (8, 4, 16)])
def test_every_split_lands_within_5pct_of_a_noisy_twin_and_inside_the_band(root, split):
    measured = twin(root, 0.2)
    truth = makespan(twin(root, 0.2, split))
    r = predict(measured, split)
    assert abs(r.makespan_ns - truth) / truth < 0.05, (r.makespan_ns, truth)
    assert r.band["mc_status"] == "drawn" and r.band["mc_runs"] == 32
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"], (r.band, truth)


def test_the_pool_bound_split_at_low_noise(root):
    split = (4, 4, 8)  # 8 expert dies: E[max of 8] < E[max of the 32 measured]
    truth = makespan(twin(root, 0.1, split))
    r = predict(twin(root, 0.1), split)
    assert abs(r.makespan_ns - truth) / truth < 0.05
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"]


def test_a_busy_pool_is_not_predicted_slow_under_independent_noise(root):
    """The pool-bound split 4×4 + 8 (8 dies, 8 items in flight) under the noise the model assumes:
    every kernel lognormal σ 0.2, independent per die and item (routing_skew 0: no layer makes one
    die the hot one for all its items). The same requests under four draws of the noise (noise
    seeds 11–14): the mean error is the model's bias. A busy pool costed as its slowest die's mean
    over the items in flight (a lognormal window) read +5.3 / +3.8 / +0.2 / +6.1 % (mean +3.8 %);
    the closed loop's rate reads +0.7 / +3.2 / −3.7 / +1.1 % (mean +0.3 %)."""
    errors = []
    for noise in (11, 12, 13, 14):
        kw = {"noise_seed": noise, "routing_skew": 0.0}
        truth = makespan(twin_work(root, 0.2, (4, 4, 8), **kw))
        errors.append((predict(twin_work(root, 0.2, None, **kw), (4, 4, 8)).makespan_ns - truth) / truth)
    assert abs(np.mean(errors)) < 0.02, errors
    assert max(abs(e) for e in errors) < 0.05, errors


def test_without_noise_the_twins_stay_within_1pct(root):
    truth = makespan(twin(root, 0.0, (4, 4, 16)))
    r = predict(twin(root, 0.0), (4, 4, 16))
    assert abs(r.makespan_ns - truth) / truth < 0.01


def test_without_noise_the_pool_bound_split_is_within_2pct(root):
    """4×4 + 8 without kernel noise reads −1.3 % (routing_skew 0, σ read 0.005: −1.5 %), under the
    1 % the other splits hold: its pool items are an eighth of the one item per layer the coupled
    run measured, and one token count cannot tell the MoE cost's intercept from its slope (the
    pool's predicted work is 2.3 % under the twin's). Costing a busy pool as a lognormal window read
    −0.3 % here only because it priced synth's per-layer routing levels (σ read 0.05) as a slower
    pool: −1.3 % too with routing_skew 0."""
    for skew in (None, 0.0):
        truth = makespan(twin_work(root, 0.0, (4, 4, 8), routing_skew=skew))
        r = predict(twin_work(root, 0.0, None, routing_skew=skew), (4, 4, 8))
        assert abs(r.makespan_ns - truth) / truth < 0.02


# ------------------------------------------------------------------ a disaggregated pool's noise
def test_a_disaggregated_pool_reads_each_served_items_noise_not_their_sums():
    """By hand: one (step, layer, micro-batch) of two groups' batches, served as two items on two
    expert dies, each item's dies at loc·e^(±s) (rank 0 slow on the first, rank 1 on the second).
    Per item the log residuals are ±s: Σ of squares 2s² on one degree of freedom each, σ = s·√2,
    and the pool pays each item's slowest die (2·loc·e^s). Read as the dies' sums over the two
    items (as a coupled store's one item), both dies took loc·(e^s + e^-s): no noise at all."""
    import polars as pl

    from asaptrace.replay.dispersion import pooled_sigma
    from asaptrace.replay.whatif.measured_pool import pool_items

    loc, s = 1_000_000.0, 0.25
    hi, lo = round(loc * math.exp(s)), round(loc * math.exp(-s))
    keys = {"step": [0] * 4, "layer": [0] * 4, "micro_batch": [0] * 4}
    dev = pl.DataFrame(
        keys
        | {
            "rank": [8, 8, 9, 9],
            "kind": ["moe"] * 4,
            "ts_ns": [0, 10_000_000, 0, 10_000_000],
            "dur_ns": [hi, lo, lo, hi],
        }
    )
    expert = pl.DataFrame({"rank": [8, 9]})
    items = pl.DataFrame(
        {"step": [0, 0], "layer": [0, 0], "micro_batch": [0, 0], "dp_group": [0, 1], "tokens": [8.0, 8.0]}
    )
    pool = pool_items(dev, expert, items, "disaggregated")
    assert pool["pool_ns"].to_list() == [2 * hi]
    sigma, dof = pooled_sigma(pool["moe_log_ss"].to_numpy(), pool["moe_dies"].to_numpy())
    assert dof == 2 and sigma == pytest.approx(s * math.sqrt(2), rel=1e-3)
    summed = pool_items(dev, expert, items, "coupled")  # one item: the dies' sums
    assert summed["pool_ns"].to_list() == [hi + lo]
    assert pooled_sigma(summed["moe_log_ss"].to_numpy(), summed["moe_dies"].to_numpy())[0] < 1e-9


def test_a_disaggregated_twin_reads_the_noise_it_was_made_with(root):
    """Each expert die runs one GEMM per served batch, lognormal σ 0.2: the fit on the 4×4 + 16
    twin reads it (it read 0.10, the spread of the four batches' sums, before)."""
    q = fit_costs(twin(root, 0.2, (4, 4, 16))).quality
    assert 0.17 <= q["moe"]["sigma"] <= 0.23


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("asap", {"attention": "4x4", "experts": 16}),
        ("asap", {"attention": "2x4", "experts": 8, "dual_batch": False}),
        ("asap", {"attention": "4x4", "experts": 16, "overlap": False}),  # an ablation: run()'s path
        ("asap", {"attention": "4x4", "experts": 16, "asynchronous": False}),  # lockstep
        ("afd-pingpong", {"attention": "4x4", "experts": 16, "m": 3}),
    ],
)
def test_a_band_draws_makespan_alone_is_the_whole_runs(root, name, params):
    """The Monte-Carlo band reads each draw's makespan from :meth:`Policy.makespan` (no spans, no
    batches frame): on a noisy twin's work, at the fitted costs and at four band draws, it is the
    whole replay's makespan to the nanosecond, dual batch or not, with an ablation, in lockstep."""
    from dataclasses import replace

    from asaptrace.replay.policies import policy_of

    wl = twin(root, 0.2)
    costs = fit_costs(wl).model
    pol = policy_of(name, params)
    for c in [costs, *(replace(costs, mc_draw=i, mc_seed=0) for i in range(4))]:
        assert pol.makespan(wl, c) == pol.run(wl, c).makespan_ns
