"""Σs² imbalance: ratios per step, the attention-time fit, and the fallback without lengths."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.analyze.imbalance import fit_attention, imbalance_by_group, imbalance_by_step
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import ingest, moe_scenario, write_traces

US = 1000
# group 0 runs two 1000-token requests, group 1 one 2000-token request: same tokens, Σs² 2M vs 4M
SEQ = {0: [1000, 1000], 1: [2000]}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imb")
    return enrich_store(ingest(write_traces(tmp / "t", moe_scenario(seq_lens=SEQ)), tmp / "s"))


def test_lengths_come_from_step_annotations(store):
    b = store.read("batches").sort("dp_group", "seq_len")
    assert b.select("step", "dp_group", "seq_len").rows() == [(0, 0, 1000), (0, 0, 1000), (0, 1, 2000)]
    assert store.meta["batches_source"] == "annotations"


def test_ratios_are_exact(store):
    g = imbalance_by_group(store.events(), store.ranks(), batches=store.scan("batches")).sort("dp_group")
    assert g.get_column("tokens").to_list() == [2000, 2000]
    assert g.get_column("sum_sq").to_list() == [2_000_000, 4_000_000]
    # attention per rank: group 0: 100 + 100 µs on both ranks; group 1: 600 and 560 → mean 580
    assert g.get_column("attention_ns").to_list() == [200 * US, 580 * US]
    s = imbalance_by_step(g).row(0, named=True)
    assert s["tokens_ratio"] == 1.0
    assert s["sum_sq_ratio"] == pytest.approx(4 / 3)  # 4M / mean(2M, 4M)
    assert s["attention_ratio"] == pytest.approx(580 / 390)
    assert s["max_sum_sq_group"] == 1 and s["max_attention_group"] == 1


def test_cached_prefix_is_not_new_work():
    batches = pl.DataFrame(
        {"step": [0, 0], "dp_group": [0, 1], "seq_len": [3000, 2000], "cached_len": [1000, 0]}
    )
    events = pl.DataFrame(
        schema={
            "rank": pl.Int32,
            "stream": pl.Int32,
            "is_device": pl.Boolean,
            "kind": pl.String,
            "step": pl.Int32,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
        }
    )
    ranks = pl.DataFrame({"rank": [0, 1], "dp_group": [0, 1], "role": ["fused", "fused"]})
    g = imbalance_by_group(events, ranks, batches=batches).sort("dp_group")
    # group 0: 3000 − 1000 new tokens, 3000² − 1000² = 8M; group 1: 2000, 4M
    assert g.get_column("tokens").to_list() == [2000, 2000]
    assert g.get_column("sum_sq").to_list() == [8_000_000, 4_000_000]


def test_fit_recovers_the_cost_model():
    # attention = 5000 + 30·T + 0.002·Σs² ns exactly, at four (step, group) points
    t = [1000, 2000, 3000, 1500]
    q = [1_000_000, 4_000_000, 3_000_000, 2_250_000]
    a = [round(5000 + 30 * x + 0.002 * y) for x, y in zip(t, q, strict=True)]
    by_group = pl.DataFrame(
        {"tokens": t, "sum_sq": q, "attention_ns": a, "wait_ns": [None] * 4, "predicted_wait_ns": [None] * 4},
        schema_overrides={"wait_ns": pl.Int64, "predicted_wait_ns": pl.Int64},
    )
    f = fit_attention(by_group).row(0, named=True)
    assert f["cost_basis"] == "seq_lens"
    assert f["c0_ns"] == pytest.approx(5000, abs=1e-3)
    assert f["c1_ns_per_token"] == pytest.approx(30, rel=1e-9)
    assert f["c2_ns_per_token2"] == pytest.approx(0.002, rel=1e-9)
    assert f["r2"] == pytest.approx(1.0)


def test_without_lengths_measured_attention_is_the_cost(tmp_path):
    store = enrich_store(ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "s"))
    g = imbalance_by_group(store.events(), store.ranks(), batches=store.scan("batches"))
    assert g.get_column("sum_sq").is_null().all()
    assert fit_attention(g).row(0, named=True)["cost_basis"] == "measured_attention"
    assert imbalance_by_step(g).row(0, named=True)["attention_ratio"] == pytest.approx(580 / 390)
