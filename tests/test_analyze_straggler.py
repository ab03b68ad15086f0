"""Stragglers: who arrives last, and whether the device, an expert or the load is to blame."""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.analyze import barrier as bw
from asaptrace.analyze.imbalance import imbalance_by_group
from asaptrace.analyze.straggler import dixon_or_3sigma, straggler_groups, stragglers
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import ingest, moe_scenario, write_traces


def test_dixon_q_for_few_values():
    # Q = (1.30 − 1.01) / (1.30 − 0.99) = 0.935 > 0.829 (n = 4, 95 %)
    flags, test = dixon_or_3sigma(np.array([1.0, 1.01, 0.99, 1.30]))
    assert test == "dixon_q95" and flags.tolist() == [False, False, False, True]
    # Q = (1.02 − 1.01) / 0.03 = 0.33: no outlier
    flags, _ = dixon_or_3sigma(np.array([1.0, 1.01, 0.99, 1.02]))
    assert not flags.any()


def test_three_sigma_for_many_values():
    values = np.array([1.0 + 0.01 * ((i % 5) - 2) for i in range(31)] + [1.25])
    flags, test = dixon_or_3sigma(values)
    assert test == "3sigma" and np.flatnonzero(flags).tolist() == [31]
    # a tiny but "significant" deviation from identical peers is not a straggler (under 5 %)
    flags, _ = dixon_or_3sigma(np.array([1.0] * 20 + [1.001]))
    assert not flags.any()


def test_scenario_names_the_hot_expert_and_the_straggler_group(tmp_path):
    store = enrich_store(ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "s"))
    barrier = bw.barrier_wait(store.events(), store.ranks())
    st = stragglers(store.events(), store.ranks(), barrier=barrier).sort("rank")
    # MoE time: ranks 0-2 2 × 50 µs, rank 3 2 × 90 µs → 1.8× the median; Dixon Q = 1 > 0.829
    r3 = st.row(3, named=True)
    assert r3["moe_ratio"] == 1.8 and r3["cause"] == "hot_expert" and r3["outlier_test"] == "dixon_q95"
    assert st.get_column("outlier").to_list() == [False, False, False, True]
    # rank 2 is last at both dispatches, rank 3 at both combines
    assert st.get_column("last_count").to_list() == [0, 0, 2, 2]
    assert st.get_column("last_share").to_list() == [0.0, 0.0, 0.5, 0.5]
    imb = imbalance_by_group(store.events(), store.ranks(), batches=None)
    groups = straggler_groups(barrier, imb)
    g = groups.row(0, named=True)
    # group 1 is ready last everywhere, and it has the most attention work: load-induced
    assert (g["dp_group"], g["last_count"], g["last_share"], g["cause"]) == (1, 4, 1.0, "load")
    assert groups.filter(pl.col("dp_group") == 0).height == 0
