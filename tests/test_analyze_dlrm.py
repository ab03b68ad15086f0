"""Acceptance on a real trace: 8 ranks of one DLRM step (../shared/data/traces/kineto-dlrm-8rank).

Expected answers are derived here from the raw JSON, independently of asaptrace.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store, enrich_store

US = 1000


def _raw(folder):
    """Per rank: its NCCL kernels (name, start µs, end µs) in order, and the first timestamp of the file."""
    out = {}
    for path in sorted(folder.glob("worker*.json")):
        doc = json.loads(path.read_text())
        events = doc["traceEvents"]
        nccl = sorted(
            (e["ts"], e["ts"] + e["dur"], e["name"])
            for e in events
            if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")
        )
        first = min(e["ts"] for e in events if e.get("ph") == "X")
        out[doc["distributedInfo"]["rank"]] = {"nccl": nccl, "first": first}
    return out


@pytest.fixture(scope="module")
def dlrm(shared_data, tmp_path_factory):
    folder = shared_data / "traces" / "kineto-dlrm-8rank"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    store = enrich_store(ingest_paths([folder], tmp_path_factory.mktemp("dlrm") / "s", jobs=1))
    return _raw(folder), store, diagnose_store(store)


def test_every_collective_is_matched_across_all_ranks(dlrm):
    raw, _, diag = dlrm
    assert {len(r["nccl"]) for r in raw.values()} == {8}
    inst = diag.tables["barrier_instances"]
    per = inst.group_by("instance").agg(pl.len(), pl.col("op").first())
    assert per.height == 8 and per.get_column("len").to_list() == [8] * 8
    ops = per.get_column("op").to_list()
    assert sum("SendRecv" in op for op in ops) == 5  # the all_to_alls
    assert sum("AllReduce" in op for op in ops) == 3


def test_traces_start_apart_but_clocks_agree(dlrm):
    raw, store, _ = dlrm
    starts = [r["first"] for r in raw.values()]
    assert max(starts) - min(starts) > 5000  # µs: the files begin > 5 ms apart …
    for k in range(8):  # … yet every collective ends within a few µs on all ranks
        ends = [r["nccl"][k][1] for r in raw.values()]
        assert max(ends) - min(ends) <= 10
    ranks = store.read("ranks")
    assert ranks.get_column("clock_offset_ns").abs().max() <= 5 * US
    assert ranks.get_column("clock_residual_ns").max() <= 5 * US
    assert store.meta["clock"]["status"] == "aligned"


def test_first_all_to_all_names_who_waited_and_who_was_late(dlrm):
    raw, _, diag = dlrm
    first = {r: v["nccl"][0] for r, v in raw.items()}
    earliest = min(first, key=lambda r: first[r][0])
    latest = max(first, key=lambda r: first[r][0])
    assert (earliest, latest) == (1, 7)  # read off the raw files: rank 1 starts 7.6 ms before rank 7
    inst = diag.tables["barrier_instances"]
    i0 = inst.filter(pl.col("instance") == inst.get_column("instance").min())
    assert "SendRecv" in i0.get_column("op")[0]
    assert i0.sort("wait_ns", descending=True).get_column("rank")[0] == earliest
    assert set(i0.get_column("last_rank").to_list()) == {latest}
    expected_wait_ns = (first[latest][0] - first[earliest][0]) * US
    got = i0.filter(pl.col("rank") == earliest).get_column("wait_ns")[0]
    assert abs(got - expected_wait_ns) <= 5 * US  # up to the (µs) clock correction
    longest = next(f for f in diag.findings if f.code == "longest_wait")
    assert longest.data["first_instance_longest_wait_rank"] == earliest
    assert longest.data["first_instance_last_rank"] == latest
    # that wait (7.6 ms) is also the run's longest: the sentence names the kernel as the table does
    # (not cut to 40 characters, "…Sum_int8" for "…Sum_int8_t") and says "first instance" once
    assert f"at {i0.get_column('op')[0].split('(')[0]}, step" in longest.text  # its argument list left out
    assert longest.text.count("first instance") == 1 and "It was the first instance." in longest.text
