"""Real public traces (../shared/data): expected numbers are read off the raw JSON independently."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal

import polars as pl
import pytest

from asaptrace.ingest.driver import ingest_paths


def _raw(path):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def dlrm_store(tmp_path_factory, shared_data):
    folder = shared_data / "traces" / "kineto-dlrm-8rank"
    return folder, ingest_paths([folder], tmp_path_factory.mktemp("dlrm") / "store", jobs=2)


def test_dlrm_all_eight_ranks_with_balanced_accounting(dlrm_store):
    folder, store = dlrm_store
    ranks = store.read("ranks")
    assert ranks["rank"].to_list() == list(range(8))
    assert set(ranks["rank_source"]) == {"distributedInfo"}
    raw_total = sum(len(_raw(f)["traceEvents"]) for f in folder.glob("*.json"))
    acc = store.meta["accounting"]
    assert acc["read"] == raw_total
    assert acc["read"] == acc["kept"] + sum(acc["rejected"].values())


def test_dlrm_every_nccl_kernel_with_stream_and_correlation(dlrm_store):
    folder, store = dlrm_store
    events = store.events().filter(pl.col("cat").cast(pl.String) == "kernel").collect()
    for f in sorted(folder.glob("*.json")):
        doc = _raw(f)
        rank = doc["distributedInfo"]["rank"]
        expected = sorted(
            (
                e["name"],
                int(e["ts"]) * 1000,
                int(e["dur"]) * 1000,
                e["args"]["stream"],
                e["args"]["correlation"],
            )
            for e in doc["traceEvents"]
            if e.get("cat") == "kernel" and "nccl" in e["name"]
        )
        got = sorted(
            events.filter(pl.col("rank") == rank, pl.col("name").cast(pl.String).str.contains("nccl"))
            .select(pl.col("name").cast(pl.String), "ts_ns", "dur_ns", "stream", "corr")
            .rows()
        )
        assert len(expected) > 0 and got == expected, f"rank {rank}"


def test_hta_sampled_ranks(tmp_path, shared_data):
    folder = shared_data / "traces" / "kineto-hta-samples"
    files = sorted(folder.glob("sampled_rank-*.json.gz"))
    store = ingest_paths(files, tmp_path / "s", jobs=1)
    assert store.read("ranks")["rank"].to_list() == [0, 1]
    per_rank = store.events().group_by("rank").len().sort("rank").collect()["len"].to_list()
    expected = []
    for f in files:
        c = Counter(e.get("ph") for e in _raw(f)["traceEvents"])
        expected.append(c["X"] + c["i"])
    assert per_rank == expected


def test_nccl_data_ms_display_unit_base_time_and_collective_metadata(tmp_path, shared_data):
    path = shared_data / "traces" / "kineto-hta-samples" / "nccl_data.json.gz"
    doc = _raw(path)
    assert doc["displayTimeUnit"] == "ms"
    base = doc["baseTimeNanoseconds"]
    first = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "AllReduce" in e["name"])
    # ts stays in µs whatever displayTimeUnit says; Kineto's ts are relative to baseTimeNanoseconds
    with gzip.open(path, "rt") as f:
        text = f.read()
    store = ingest_paths([path], tmp_path / "s", jobs=1)
    ev = store.events().filter(pl.col("corr") == first["args"]["correlation"], pl.col("is_device")).collect()
    assert ev.height == 1
    ts_text = json.dumps(first["ts"])
    assert ts_text in text  # the float as written
    expected_ts = base + int((Decimal(ts_text) * 1000).to_integral_value())
    assert abs(ev["ts_ns"][0] - expected_ts) <= 1  # float64 parse of µs with 3 decimals: within 1 ns
    assert abs(ev["dur_ns"][0] - round(first["dur"] * 1000)) <= 1
    args = store.read("args").join(store.read("events").select("rank", "eid", "corr"), on=["rank", "eid"])
    meta = args.filter(pl.col("corr") == first["args"]["correlation"]).row(0, named=True)
    assert meta["collective"] == first["args"]["Collective name"] == "allreduce"
    assert meta["in_nelems"] == first["args"]["In msg nelems"]
    assert meta["group_size"] == first["args"]["Group size"]
    assert meta["pg_ranks"] == first["args"]["Process Group Ranks"]
    n_coll = sum(
        1 for e in doc["traceEvents"] if "Collective name" in e.get("args", {}) and e.get("ph") == "X"
    )
    assert args.filter(pl.col("collective").is_not_null()).height == n_coll
