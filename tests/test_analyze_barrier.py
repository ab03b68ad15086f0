"""Barrier wait on the hand-worked scenario of tests/_analysis_helpers.py (numbers from its docstring)."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.analyze import barrier as bw
from asaptrace.analyze.breakdown import PARTS, BreakdownIdentityError, check_identity, step_breakdown
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import (
    EXPECTED_COMBINE_WAIT_US,
    EXPECTED_DISPATCH_WAIT_US,
    ingest,
    moe_scenario,
    write_traces,
)

US = 1000


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("barrier")
    raw = ingest(write_traces(tmp / "traces", moe_scenario()), tmp / "raw.store")
    return enrich_store(raw)


@pytest.fixture(scope="module")
def barrier(store):
    return bw.barrier_wait(store.events(), store.ranks())


def test_each_rank_waits_for_the_last_arrival(barrier):
    # dispatch: arrivals 100, 100, 300, 280 µs → waits 200, 200, 0, 20; combine: 40, 40, 40, 0
    for kind, expected in (("dispatch", EXPECTED_DISPATCH_WAIT_US), ("combine", EXPECTED_COMBINE_WAIT_US)):
        got = barrier.filter(pl.col("kind") == kind).sort("layer", "rank")
        assert got.height == 8  # 2 layers × 4 ranks
        for layer in (0, 1):
            waits = got.filter(pl.col("layer") == layer).get_column("wait_ns").to_list()
            assert waits == [w * US for w in expected]


def test_release_transfer_and_last_rank(barrier):
    d0 = barrier.filter((pl.col("kind") == "dispatch") & (pl.col("layer") == 0))
    assert set(d0.get_column("release_ns").to_list()) == {300 * US}
    assert set(d0.get_column("transfer_ns").to_list()) == {20 * US}  # the last arrival's kernel: 320 − 300
    assert set(d0.get_column("last_rank").to_list()) == {2}
    assert d0.filter(pl.col("is_last")).get_column("rank").to_list() == [2]
    c1 = barrier.filter((pl.col("kind") == "combine") & (pl.col("layer") == 1))
    assert set(c1.get_column("release_ns").to_list()) == {840 * US}
    assert set(c1.get_column("last_rank").to_list()) == {3}
    assert set(c1.get_column("last_dp_group").to_list()) == {1}


def test_rollups_by_rank_group_layer(store, barrier):
    breakdown = step_breakdown(store.events(), store.ranks(), barrier=barrier)
    by_rank = bw.wait_by_rank(barrier, breakdown).sort("rank")
    assert by_rank.get_column("wait_ns").to_list() == [480 * US, 480 * US, 80 * US, 40 * US]
    assert by_rank.get_column("last_count").to_list() == [0, 0, 2, 2]
    assert by_rank.get_column("step_time_ns").to_list() == [850 * US] * 4
    assert by_rank.get_column("wait_share")[0] == pytest.approx(480 / 850)

    by_group = bw.wait_by_group(barrier).sort("dp_group")
    g1 = by_group.filter(pl.col("dp_group") == 1).row(0, named=True)
    assert g1["last_count"] == 4 and g1["last_share"] == 1.0
    assert g1["imposed_wait_ns"] == 480 * US  # 200 + 40 + 200 + 40
    assert g1["caused_wait_ns"] == 960 * US  # group 0's two ranks, 480 each
    assert by_group.filter(pl.col("dp_group") == 0).row(0, named=True)["imposed_wait_ns"] == 0

    by_layer = bw.wait_by_layer(barrier).sort("layer")
    # per layer: dispatch 200+200+0+20 + combine 40+40+40+0 = 540
    assert by_layer.get_column("wait_ns").to_list() == [540 * US, 540 * US]
    per_rank_layer = bw.wait_by_rank_layer(barrier).filter(pl.col("rank") == 3).sort("layer")
    assert per_rank_layer.get_column("wait_ns").to_list() == [20 * US, 20 * US]
    assert per_rank_layer.get_column("dispatch_wait_ns").to_list() == [20 * US, 20 * US]


def test_step_breakdown_adds_up(store, barrier):
    bd = step_breakdown(store.events(), store.ranks(), barrier=barrier).sort("rank")
    r0, r3 = bd.row(0, named=True), bd.row(3, named=True)
    # rank 0: compute 300, wait 480, transfer 60, idle 10 (the host gap before layer 1) = 850
    assert (r0["compute_ns"], r0["wait_ns"], r0["transfer_ns"], r0["idle_ns"]) == (
        300 * US,
        480 * US,
        60 * US,
        10 * US,
    )
    # rank 3: compute 740, wait 40, transfer 60, idle 10 = 850
    assert (r3["compute_ns"], r3["wait_ns"], r3["transfer_ns"], r3["idle_ns"]) == (
        740 * US,
        40 * US,
        60 * US,
        10 * US,
    )
    total = bd.select(pl.col("compute_ns") + pl.col("wait_ns") + pl.col("transfer_ns") + pl.col("idle_ns"))
    assert total.to_series().to_list() == bd.get_column("step_time_ns").to_list()


def test_identity_violation_is_a_named_error():
    bad = pl.DataFrame(
        {
            "rank": [0],
            "step": [0],
            **{c: [1] for c in PARTS},
            "step_time_ns": [len(PARTS) + 1],
        }
    )
    with pytest.raises(BreakdownIdentityError, match="does not add up"):
        check_identity(bad)
