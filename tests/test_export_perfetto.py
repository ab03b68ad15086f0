"""Perfetto / Chrome trace export: hand-worked waits and arrows, and the round trip through `ingest`."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

import polars as pl
import pytest

from asaptrace.export.perfetto import (
    FLOW_CAT,
    WAIT_CAT,
    WAIT_TID,
    encode_trace,
    export_perfetto,
    split_by_rank,
    write_trace,
)
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store, enrich_store
from tests._analysis_helpers import (
    EXPECTED_COMBINE_WAIT_US,
    EXPECTED_DISPATCH_WAIT_US,
    ingest,
    moe_scenario,
    write_traces,
)

US = 1000


def _device(store) -> pl.DataFrame:
    return (
        store.events()
        .filter(pl.col("is_device"))
        .select("rank", "stream", pl.col("name").cast(pl.String), "ts_ns", "dur_ns")
        .sort(pl.all())
        .collect()
    )


def _export(store, diag, **kw):
    return export_perfetto(
        store.events(), store.ranks(), diag.tables["barrier_instances"], streams=store.read("streams"), **kw
    )


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    store = enrich_store(ingest(write_traces(tmp / "traces", moe_scenario()), tmp / "raw.store"))
    return store, diagnose_store(store)


def test_wait_slices_and_arrows_of_the_hand_worked_scenario(scenario):
    store, diag = scenario
    trace = _export(store, diag)
    evs = trace["traceEvents"]
    waits = [e for e in evs if e.get("cat") == WAIT_CAT]
    assert {e["tid"] for e in waits} == {WAIT_TID}
    # per rank, 2 layers × (dispatch + combine) waits of the scenario's docstring, in µs
    per_rank = {r: sum(e["dur"] for e in waits if e["pid"] == r) for r in range(4)}
    expected = {r: 2 * (EXPECTED_DISPATCH_WAIT_US[r] + EXPECTED_COMBINE_WAIT_US[r]) for r in range(4)}
    assert per_rank == expected == {0: 480, 1: 480, 2: 80, 3: 40}
    # rank 0's first wait: the layer-0 dispatch, from its arrival (100 µs) to the release (300 µs)
    first = min((e for e in waits if e["pid"] == 0), key=lambda e: e["ts"])
    assert (first["ts"] + Decimal(trace["baseTimeNanoseconds"]) / 1000, first["dur"]) == (100, 200)
    assert first["args"]["last_rank"] == 2
    # arrows: rank 2 is last at both dispatches (waiters 0, 1, 3), rank 3 at both combines (0, 1, 2)
    starts = {e["id"]: e for e in evs if e["ph"] == "s" and e["cat"] == FLOW_CAT}
    ends = {e["id"]: e for e in evs if e["ph"] == "f" and e["cat"] == FLOW_CAT}
    assert len(starts) == len(ends) == 12
    pairs = sorted((starts[i]["pid"], ends[i]["pid"]) for i in starts)
    assert pairs == sorted([(2, 0), (2, 1), (2, 3)] * 2 + [(3, 0), (3, 1), (3, 2)] * 2)
    assert all(ends[i]["tid"] == WAIT_TID and ends[i]["bp"] == "e" for i in ends)
    # the arrow leaves the last rank at the release, from its communication stream (20)
    assert {starts[i]["tid"] for i in starts} == {20}


def test_processes_are_named_with_role_and_dp_group(scenario):
    store, diag = scenario
    names = {
        e["pid"]: e["args"]["name"]
        for e in _export(store, diag)["traceEvents"]
        if e["name"] == "process_name"
    }
    assert names == {
        0: "rank 0 · fused · DP 0",
        1: "rank 1 · fused · DP 0",
        2: "rank 2 · fused · DP 1",
        3: "rank 3 · fused · DP 1",
    }


def test_times_are_exact_decimals_relative_to_the_base(scenario):
    store, diag = scenario
    trace = _export(store, diag)
    base = trace["baseTimeNanoseconds"]
    dev = _device(store)
    # the first exported time: a kernel's, or the launch (host, with a correlation) before it
    launches = store.events().filter(~pl.col("is_device") & pl.col("corr").is_not_null()).collect()
    assert launches.height == dev.height  # every kernel of the scenario has its launch
    assert base == min(dev.get_column("ts_ns").min(), launches.get_column("ts_ns").min())
    # a time 1 ns after the base is written as 0.001 µs, not a float approximation
    probe = export_perfetto(
        pl.DataFrame(
            {
                "rank": [0],
                "stream": [7],
                "is_device": [True],
                "kind": ["compute"],
                "name": ["k"],
                "cat": ["kernel"],
                "ts_ns": [1_750_000_000_000_000_001],
                "dur_ns": [1],
                "step": [None],
                "layer": [None],
                "micro_batch": [None],
            }
        ),
        pl.DataFrame({"rank": [0], "dp_group": [None], "role": ["fused"]}),
        pl.DataFrame(
            {"wait_ns": [], "instance": [], "rank": [], "arrival_ns": []},
            schema={"wait_ns": pl.Int64, "instance": pl.Int64, "rank": pl.Int32, "arrival_ns": pl.Int64},
        ),
        counters=pl.DataFrame(
            {"rank": [0], "name": ["in_flight"], "ts_ns": [1_750_000_000_000_000_000], "value": [3]}
        ),
    )
    text = encode_trace(probe)
    assert b'"ts":0.001,"dur":0.001' in text and b'"baseTimeNanoseconds": 1750000000000000000' in text
    (counter,) = [e for e in probe["traceEvents"] if e["ph"] == "C"]
    assert counter["ts"] == 0 and counter["args"] == {"in_flight": 3}


def test_round_trip_of_the_coupled_sample(coupled_store, coupled_diagnosis, tmp_path):
    trace = _export(coupled_store, coupled_diagnosis)
    # one file per rank → `ingest` gives back the same device events, rank by rank
    per_rank = tmp_path / "per_rank"
    per_rank.mkdir()
    for r, doc in split_by_rank(trace).items():
        write_trace(per_rank / f"rank{r}.json.gz", doc)
    back = ingest_paths([per_rank], tmp_path / "back.store", jobs=1)
    want = _device(coupled_store)
    assert want.height == 83_328
    assert _device(back).equals(want)
    acc = back.meta["accounting"]
    assert acc["read"] == acc["kept"] and not acc["rejected"]
    # the single run.json.gz is a Chrome trace the Kineto reader accepts; pid = rank
    single = write_trace(tmp_path / "run.json.gz", trace)
    assert json.loads(gzip.decompress(single.read_bytes()))["traceEvents"]
    one = ingest_paths([single], tmp_path / "one.store", jobs=1, rank_from="order")
    assert one.meta["sources"][0]["format"] == "kineto"
    pid_as_rank = (
        one.events()
        .filter(pl.col("is_device"))
        .select(pl.col("pid").alias("rank"), "stream", pl.col("name").cast(pl.String), "ts_ns", "dur_ns")
        .sort(pl.all())
        .collect()
    )
    assert pid_as_rank.equals(want)
    assert not list(tmp_path.glob(".*tmp*"))  # the atomic writer left nothing behind


def test_wait_slices_sum_to_the_barrier_analysis_per_rank(coupled_store, coupled_diagnosis):
    trace = _export(coupled_store, coupled_diagnosis)
    got: dict[int, int] = {}
    for e in trace["traceEvents"]:
        if e.get("cat") == WAIT_CAT:
            got[e["pid"]] = got.get(e["pid"], 0) + int(e["dur"] * 1000)
    want = dict(coupled_diagnosis.tables["barrier_by_rank"].select("rank", "wait_ns").iter_rows())
    assert len(want) == 32 and got == want
