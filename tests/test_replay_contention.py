"""Link contention: synth's knob, the in-flight counts, the fitted κ and the band that draws it.

Twins are synth's own disaggregated runs (its independent execution model: a send is slowed by
the same-direction sends already in flight, :mod:`asaptrace.synth.contention`) with kernel noise
σ 0.2; small (12 layers, one step) to stay fast.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store
from asaptrace.replay.contention import _others_in_flight
from asaptrace.replay.costs import fit_costs
from asaptrace.replay.whatif.measured import extract_measured_work
from asaptrace.replay.whatif.run import replay_measured_work
from asaptrace.synth.config import config_toml, load_config
from asaptrace.synth.contention import Links
from asaptrace.synth.run import synthesize

SIGMA = 0.2


def _run(root, contention: float, split: tuple[int, int, int] | None):
    cfg = load_config("coupled")
    dep = replace(cfg.deployment, step_tokens=131072, micro_batches=1)
    if split:
        d, t, e = split
        dep = replace(dep, mode="disaggregated", attn_dp=d, attn_tp=t, expert_devices=e, dual_batch=d < 8)
    cfg = replace(
        cfg,
        model=replace(cfg.model, layers=12, dense_layers=1),
        deployment=dep,
        costs=replace(cfg.costs, jitter=SIGMA, contention=contention),
        run=replace(cfg.run, steps=1, seed=3),
    )
    out = root / f"{contention}-{split}".replace(" ", "")
    synthesize(cfg, out / "run")
    return extract_measured_work(
        enrich_store(ingest_paths([out / "run" / "kineto"], out / "s.store", jobs=1))
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("contention-twins")


_cache: dict = {}


def twin(root, contention, split=None):
    key = (contention, split)
    if key not in _cache:
        _cache[key] = _run(root, contention, split)
    return _cache[key]


def predict(wl, split):
    d, t, e = split
    params = {"attention": f"{d}x{t}", "experts": e, "long_tokens": 0, "dual_batch": d < 8}
    return replay_measured_work(wl, "asap", params=params, attribute=False)


def makespan(wl) -> int:
    return int(wl.steps["end_ns"].max() - wl.steps["start_ns"].min())


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


def test_in_flight_counts_other_transfers_once():
    # transfer 0: dies [0, 10) and [4, 12) (merged into one segment); transfer 1: [8, 20); 2: [30, 40)
    inst = np.array([0, 0, 1, 2])
    start = np.array([0, 4, 8, 30])
    end = np.array([10, 12, 20, 40])
    assert _others_in_flight(inst, start, end).tolist() == [0, 0, 1, 0]


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
def test_contention_is_found_and_reported(root, contention):
    fit = fit_costs(twin(root, contention, (4, 4, 16)))
    # biased low (synth counts only the sends it has placed): found, not recovered
    assert 0 < fit.model.xfer_contention <= contention
    assert fit.quality["transfer"]["contention"] == round(fit.model.xfer_contention, 4)


def test_the_band_draws_the_contention(root):
    wl = twin(root, 0.5, (4, 4, 16))
    fit = fit_costs(wl)
    truth = makespan(wl)
    r = predict(wl, (4, 4, 16))
    assert abs(r.makespan_ns - truth) / truth < 0.05, (r.makespan_ns, truth)
    assert r.band["mc_contention"] == fit.model.xfer_contention
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"], (r.band, truth)


@pytest.mark.xfail(
    reason="a coupled run shows no link contention (its collectives run one at a time), so a fit "
    "on it cannot see the ASAP twin's: at 4×4+16 the band misses the twin by 1 % (issue 41)",
    strict=False,
)
@pytest.mark.parametrize("split", [(4, 4, 16)])
def test_a_coupled_fit_covers_a_contended_twin(root, split):
    truth = makespan(twin(root, 0.5, split))
    r = predict(twin(root, 0.0), split)
    assert abs(r.makespan_ns - truth) / truth < 0.05
    assert r.band["mc_low_ns"] <= truth <= r.band["mc_high_ns"]
