"""Export of replayed stores: the Kineto round trip of a replayed ASAP (disaggregated) and a replayed
coupled store, the wait slices against the barrier analysis, and the in-flight MoE counter track."""

from __future__ import annotations

import gzip
import json

import polars as pl
import pytest

from asaptrace import pipeline
from asaptrace.analyze.in_flight import IN_FLIGHT_NAME, in_flight_moe_items
from asaptrace.export.perfetto import WAIT_CAT
from asaptrace.store import TraceStore
from tests._cli import run_cli


def _events(rows: list[tuple[int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"rank": r, "kind": k, "ts_ns": ts, "dur_ns": d, "step": 0, "layer": 0, "micro_batch": 0}
            for r, k, ts, d in rows
        ]
    )


def test_in_flight_items_hand_worked():
    # ranks 0, 1: attention group 0 (TP 2); rank 2: attention group 1; ranks 3, 4: the expert pool
    ranks = pl.DataFrame(
        {
            "rank": [0, 1, 2, 3, 4],
            "role": ["attention"] * 3 + ["expert"] * 2,
            "dp_group": [0, 0, 1, None, None],
        }
    )
    events = _events(
        [
            (0, "dispatch", 5, 5),  # group 0's item: rank 0 done at 10, rank 1 at 12 → arrives at 12
            (1, "dispatch", 8, 4),
            (2, "dispatch", 0, 11),  # group 1's item arrives at 11
            (0, "attention", 0, 5),  # not an item
            (3, "moe", 11, 9),  # group 1's item runs 11–20 on both expert ranks: one finish at 20
            (4, "moe", 11, 9),
            (3, "moe", 20, 10),  # group 0's item runs 20–30: finish at 30
            (4, "moe", 20, 10),
        ]
    )
    got = in_flight_moe_items(events, ranks)
    # 11: one arrived → 1; 12: the second → 2; 20: the first done → 1; 30: both done → 0
    assert got.select("ts_ns", "value").rows() == [(11, 1), (12, 2), (20, 1), (30, 0)]
    assert set(got.get_column("rank")) == {3} and set(got.get_column("name")) == {IN_FLIGHT_NAME}


def test_in_flight_items_empty_without_a_pool():
    ranks = pl.DataFrame({"rank": [0, 1], "role": ["fused", "fused"], "dp_group": [0, 1]})
    assert in_flight_moe_items(_events([(0, "moe", 0, 5), (1, "dispatch", 0, 3)]), ranks).height == 0


@pytest.fixture(scope="module")
def replayed(coupled_store, tmp_path_factory):
    """The coupled sample replayed under asap (disaggregated: 4×4 attention + 16 experts) and coupled."""
    tmp = tmp_path_factory.mktemp("replayed")
    return {
        policy: (
            pipeline.replay_store(coupled_store.path, policy, out=tmp / f"{policy}.store"),
            tmp / f"{policy}.store",
        )
        for policy in ("asap", "coupled")
    }


def _device(store: TraceStore) -> pl.DataFrame:
    return (
        store.events()
        .filter(pl.col("is_device"))
        .select(pl.col("rank").cast(pl.Int64), pl.col("name").cast(pl.String), "ts_ns", "dur_ns")
        .sort(pl.all())
        .collect()
    )


@pytest.mark.parametrize("policy", ["asap", "coupled"])
def test_export_of_a_replayed_store_round_trips_through_ingest(replayed, policy, tmp_path):
    _, path = replayed[policy]
    r = run_cli("export", path, "--per-rank", "-o", tmp_path / "ranks")
    assert r.code == 0, r.stderr
    assert len(list((tmp_path / "ranks").glob("rank*.json.gz"))) == 32
    r = run_cli("ingest", tmp_path / "ranks", "-o", tmp_path / "back.store", "--no-enrich", "--json")
    assert r.code == 0, r.stderr
    back = TraceStore.open(tmp_path / "back.store")
    want = _device(TraceStore.open(path))
    assert want.height > 0 and want.get_column("name").str.starts_with("replay::").all()
    assert _device(back).equals(want)  # names, ns times, ranks
    acc = back.meta["accounting"]
    assert acc["read"] == acc["kept"] + sum(acc["rejected"].values())
    # the only events the reader does not take are the counter samples (asap's in-flight track)
    assert set(acc["rejected"]) <= ({"unsupported_phase:C"} if policy == "asap" else set())
    assert acc["kept_by_table"]["events"] >= want.height


def _trace(path, tmp_path) -> dict:
    out = pipeline.export_store(path, tmp_path / "run.json.gz")[0]
    return json.loads(gzip.decompress(out.read_bytes()))


def test_wait_slices_of_the_replayed_coupled_store_sum_to_the_barrier_analysis(replayed, tmp_path):
    result, path = replayed["coupled"]
    got: dict[int, int] = {}
    for e in _trace(path, tmp_path)["traceEvents"]:
        if e.get("cat") == WAIT_CAT:
            got[e["pid"]] = got.get(e["pid"], 0) + round(e["dur"] * 1000)
    diag = pipeline.diagnose_store(TraceStore.open(path))
    want = dict(diag.tables["barrier_by_rank"].select("rank", "wait_ns").iter_rows())
    assert len(want) == 32 and got == {r: w for r, w in want.items() if w}
    # and both are the wait the replay simulated
    assert sum(got.values()) == result.simulated_wait_ns > 0


def test_export_of_the_replayed_asap_store_has_the_in_flight_counter(replayed, tmp_path):
    _, path = replayed["asap"]
    counters = [e for e in _trace(path, tmp_path)["traceEvents"] if e["ph"] == "C"]
    ranks = TraceStore.open(path).ranks().collect()
    pool = ranks.filter(pl.col("role") == "expert").get_column("rank").min()
    assert counters and {e["pid"] for e in counters} == {pool}
    values = [e["args"][IN_FLIGHT_NAME] for e in counters]
    assert min(values) >= 0 and max(values) >= 1
    assert values[-1] == 0  # every item that reached the pool was finished
    # one arrival per (group, step, layer, micro-batch) dispatched: each is counted in and out once
    assert [e["ts"] for e in counters] == sorted(e["ts"] for e in counters)
