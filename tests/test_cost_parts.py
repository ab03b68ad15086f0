"""Adding a cost part is its fit + one registration: a per-layer norm kernel of a fixed cost per
token, registered here only, reaches the fit, the cost TOML, the online batch costs, the offline
replay's items and the capacity bounds, each checked against arithmetic worked by hand.

Default constants (DOMAIN §3/§6): c1 = 1.41 ms and c2 = 0.0215 ms per 1K tokens (1K = 1,024), no
c0, φ or per-request term, attn_tp_ref = 4, no dispersion. The norm costs 250 ns per token of a
group's batch, per layer, on the attention dies.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from asaptrace.errors import UsageError
from asaptrace.replay.costs import (
    ATTENTION,
    CostModel,
    CostPart,
    LayerWork,
    fit_costs,
    layer_costs,
    read_costs,
    register_part,
    save_costs,
    unregister_part,
)
from asaptrace.replay.mechanics.formers import batch_costs
from asaptrace.replay.mechanics.offline import item_costs
from asaptrace.replay.serving import capacity
from asaptrace.replay.whatif.measured import extract_measured_work
from asaptrace.replay.whatif.run import replay_measured_work
from tests._replay_helpers import sample_store

NORM_NS = 250.0  # ns per token per layer


def _norm_fit(work, model):
    """The norm's constant 'fitted' to the store: a fixed 250 ns per token (no kernel to fit here)."""
    return {"norm.per_token_ns": NORM_NS}, {"status": "fitted", "n": work.items.height, "note": "fixed"}


@pytest.fixture
def norm():
    """The one registration: its cost for a layer of work, its least cost per request, its fit."""
    register_part(
        CostPart(
            "norm",
            ATTENTION,
            layer_ns=lambda m, w: m.part("norm", "per_token_ns") * np.asarray(w.tokens, np.float64),
            least_ns=lambda m, w: m.part("norm", "per_token_ns") * float(np.mean(w.new)),
            fit=_norm_fit,
            params={"per_token_ns": 0.0},
        )
    )
    yield CostModel().with_parts(norm__per_token_ns=NORM_NS)
    unregister_part("norm")


def test_the_online_batch_pays_the_norm_on_its_tokens(norm):
    # a batch of 1,024 + 2,048 new tokens on a TP-4 group: attention 1.41·3 + 0.0215·(1 + 4) =
    # 4.3375 ms = 4,337,500 ns, plus the norm 250 · 3,072 = 768,000 ns, on every layer
    attn, *_ = batch_costs(
        norm, np.array([1024, 2048]), np.zeros(2), layers=2, dense_layers=0, tp=4, experts=8
    )
    assert attn.tolist() == [4_337_500 + 768_000] * 2
    assert (
        int(layer_costs(norm, LayerWork.of_pieces([1024, 2048], [0, 0], tp=4, experts=8)).attention)
        == 5_105_500
    )


def test_the_capacity_bounds_include_the_norm(norm):
    # least attention per request per layer: (1.4315 + 2.906) / 2 ms = 2,168,750 ns, plus the norm
    # 250 · E[c] = 250 · 1,536 = 384,000 ns; one group, two layers
    new, prefix = np.array([1024.0, 2048.0]), np.zeros(2)
    b = capacity.disaggregated_bounds(
        norm, new, prefix, layers=2, groups=1, tp=4, experts=8, max_item_tokens=4096
    )
    assert b[capacity.ATTENTION] == pytest.approx(1e9 / (2 * (2_168_750 + 384_000)), rel=1e-12)
    plain = capacity.disaggregated_bounds(
        CostModel(), new, prefix, layers=2, groups=1, tp=4, experts=8, max_item_tokens=4096
    )
    assert plain[capacity.ATTENTION] == pytest.approx(1e9 / (2 * 2_168_750), rel=1e-12)
    assert b[capacity.POOL] == plain[capacity.POOL]  # the norm runs on the attention dies only
    # a coupled step pays it too: the steps' work per request grows by 2 layers · 384,000 ns
    kw = {"layers": 2, "groups": 1, "tp": 4, "max_step_tokens": 4096}
    with_norm = capacity.coupled_bounds(norm, new, prefix, **kw)[capacity.STEPS]
    without = capacity.coupled_bounds(CostModel(), new, prefix, **kw)[capacity.STEPS]
    assert 1e9 / with_norm - 1e9 / without == pytest.approx(768_000, rel=1e-9)


def test_the_offline_replay_items_include_the_norm(norm, tmp_path_factory):
    # every (step, group, micro-batch, layer) item of the coupled sample replayed on 4 groups × 4
    # dies + 8 expert dies: its attention grows by 250 ns × its tokens, and nothing else moves
    wl = extract_measured_work(sample_store("coupled", tmp_path_factory.mktemp("parts")), prefill_only=True)
    assert wl.has_tokens
    plain = CostModel()
    for asynchronous in (True, False):
        a = item_costs(wl, plain, tp=4, experts=8, asynchronous=asynchronous)
        b = item_costs(wl, norm, tp=4, experts=8, asynchronous=asynchronous)
        grown = (b["attention_ns"] - a["attention_ns"]).to_numpy()
        tokens = a["tokens"].to_numpy()
        assert np.abs(grown - NORM_NS * tokens).max() <= 1  # ±1 ns: each sum is rounded once
        assert (grown == NORM_NS * tokens).mean() > 0.99
        for col in ("moe_ns", "dispatch_ns", "combine_ns", "moe_all_ns"):
            assert b[col].to_list() == a[col].to_list()
    # the asap replay built on these items ends later, by at most every item's norm end to end; the
    # reference replay (the measured chains, no model) does not move
    r0 = replay_measured_work(wl, "asap", costs=plain, attribute=False, band=False)
    r1 = replay_measured_work(wl, "asap", costs=norm, attribute=False, band=False)
    assert 0 < r1.makespan_ns - r0.makespan_ns <= NORM_NS * float(a["tokens"].sum())
    assert r1.reference_makespan_ns == r0.reference_makespan_ns


def test_the_fit_and_the_cost_file_carry_the_norm(norm, tmp_path, tmp_path_factory):
    wl = extract_measured_work(sample_store("coupled", tmp_path_factory.mktemp("parts")), prefill_only=True)
    fit = fit_costs(wl)
    assert fit.model.part("norm", "per_token_ns") == NORM_NS
    assert fit.quality["norm"]["note"] == "fixed"
    assert fit.quality["attention"]["status"] == "fitted"  # the built-in fits still ran
    path = save_costs(fit.model, tmp_path / "costs.toml", quality=fit.quality)
    assert "[norm]\nper_token_ns = 250.0" in path.read_text()
    back, _ = read_costs(path)
    assert back.part("norm", "per_token_ns") == NORM_NS
    assert back.attn_c1_ms == fit.model.attn_c1_ms


def test_without_the_part_nothing_names_it(tmp_path):
    # the registration is the only switch: unregistered, the model's JSON and TOML are the built-in
    # ones and a [norm] section is an unknown one
    assert "parts" not in CostModel().to_dict()
    (tmp_path / "c.toml").write_text("[norm]\nper_token_ns = 1.0\n")
    with pytest.raises(UsageError, match=r"unknown section \[norm\]"):
        read_costs(tmp_path / "c.toml")


def test_costs_kept_by_their_inputs_are_forgotten_when_a_part_comes_or_goes():
    """The online formers keep a batch's costs by its pieces under the cost model (asap's
    ``costs_of``, afd-pingpong's micro-batch and group attention, the lockstep step costers); a
    part registered on the *same* model (no constants of its own) must reach them. By hand: 1,024
    new tokens on one group of 4 dies, a part of 1 µs a token on the attention: + 1,024,000 ns."""
    from asaptrace.replay.policies.afd_pingpong import _micro_batch_costs
    from asaptrace.replay.policies.asap import costs_of

    model, pieces = CostModel(), ((1024, 0),)
    before = (_micro_batch_costs(model, 1, 4, 16, pieces)[0], int(costs_of(model, 1, 4, 16, pieces)[0][0]))
    flat = CostPart(
        "flat",
        ATTENTION,
        layer_ns=lambda m, w: 1000.0 * np.asarray(w.tokens, np.float64),
        least_ns=lambda m, w: 1000.0 * float(np.mean(w.new)),
    )
    register_part(flat)
    try:
        after = (_micro_batch_costs(model, 1, 4, 16, pieces)[0], int(costs_of(model, 1, 4, 16, pieces)[0][0]))
    finally:
        unregister_part("flat")
    assert after == (before[0] + 1_024_000, before[1] + 1_024_000)
    assert _micro_batch_costs(model, 1, 4, 16, pieces)[0] == before[0]  # gone again


def test_a_few_pieces_and_a_scalar_count_cost_what_the_arrays_cost(monkeypatch):
    """The cost model sums a batch of fewer than 8 pieces, and costs one pool item or send of a
    scalar count, on Python floats (the online formers' cost misses): to the nanosecond what its
    numpy path gives for the same numbers (forced with ``FEW = 0`` and one-element arrays), on
    whole and fractional token counts, with and without a prefix, on every TP size."""
    from asaptrace.replay.costs import model as cost_model
    from asaptrace.replay.serving.scenario import load_scenario

    costs = replace(load_scenario("asap-paper").costs, moe_sigma=0.2, attn_phi=0.3)
    rng = np.random.default_rng(5)
    cases = []
    for k in range(3000):
        n = int(rng.integers(1, cost_model.FEW))
        c = rng.random(n) * 10.0 ** int(rng.integers(0, 6))
        c = np.round(c) if k % 2 else c
        p = rng.random(n) * 4096 if k % 3 else 0
        t = float(rng.random() * 10.0 ** int(rng.integers(0, 7)))
        e = float(rng.integers(1, 400))
        cases.append((c, p, [None, 1, 4, 8][k % 4], t, e))
    fast = [
        (costs.attention_ns(c, p, tp=tp), int(costs.moe_ns(t, e)), int(costs.transfer_ns(t)))
        for c, p, tp, t, e in cases
    ]
    monkeypatch.setattr(cost_model, "FEW", 0)
    arrays = [
        (
            costs.attention_ns(c, p, tp=tp),
            int(costs.moe_ns(np.array([t]), e)[0]),
            int(costs.transfer_ns(np.array([t]))[0]),
        )
        for c, p, tp, t, e in cases
    ]
    assert fast == arrays
    assert isinstance(costs.moe_ns(1000.0, 8), np.integer)  # a scalar's answer is still numpy's int64
