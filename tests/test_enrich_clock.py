"""Clock alignment: offsets from matched collective instances whose end times must coincide."""

from __future__ import annotations

import polars as pl

from asaptrace.analyze import barrier as bw
from asaptrace.enrich.clock import estimate_offsets
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import (
    ALLREDUCE,
    COMM_STREAM,
    EXPECTED_DISPATCH_WAIT_US,
    RankTrace,
    ingest,
    moe_scenario,
    write_traces,
)

US = 1000


def _instances(ends: dict[int, list[int]]) -> pl.DataFrame:
    rows = [
        {"instance": i, "rank": r, "end_ns": e, "complete": True, "n_ranks": len(ends)}
        for r, es in ends.items()
        for i, e in enumerate(es)
    ]
    return pl.DataFrame(
        rows,
        schema={
            "instance": pl.Int64,
            "rank": pl.Int32,
            "end_ns": pl.Int64,
            "complete": pl.Boolean,
            "n_ranks": pl.Int32,
        },
    )


def test_offsets_recovered_and_an_outlier_ignored():
    # true ends 1000, 2000, 3000, 4000, 5000 ns; rank 1 runs +700 ns, rank 2 −300 ns;
    # at instance 4 rank 2's end is 90 ns late (one outlier): the medians must not follow it
    true = [1000, 2000, 3000, 4000, 5000]
    ends = {0: true, 1: [t + 700 for t in true], 2: [t - 300 for t in true]}
    ends[2][4] += 90
    offsets, notes = estimate_offsets(_instances(ends), [0, 1, 2])
    assert offsets.get_column("offset_ns").to_list() == [0, 700, -300]
    assert offsets.get_column("residual_ns").to_list() == [0, 0, 0]  # medians of |disagreement|
    assert notes.status == "aligned" and notes.reference_rank == 0


def test_alignment_impossible_without_shared_collectives():
    offsets, notes = estimate_offsets(_instances({}), [0, 1])
    assert notes.status == "impossible"
    assert "impossible" in notes.notes[0]
    assert offsets.get_column("offset_ns").to_list() == [0, 0]
    assert offsets.get_column("residual_ns").to_list() == [None, None]


def test_rank_without_shared_instance_is_reported_not_guessed():
    inst = _instances({0: [100, 200, 300], 1: [150, 250, 350]})
    lonely = pl.DataFrame(
        {
            "instance": [7, 7, 8, 8, 9, 9],
            "rank": [2, 3] * 3,
            "end_ns": [10, 20, 30, 40, 50, 60],
            "complete": [True] * 6,
            "n_ranks": [2] * 6,
        },
        schema=inst.schema,
    )
    offsets, notes = estimate_offsets(pl.concat([inst, lonely]), [0, 1, 2, 3])
    assert offsets.get_column("offset_ns").to_list() == [0, 50, 0, 0]
    assert offsets.get_column("aligned").to_list() == [True, True, False, False]
    assert notes.status == "partial" and "2, 3" in notes.notes[0]


def test_skewed_trace_files_are_aligned_before_waits_are_measured(tmp_path):
    offsets_us = (0, 5000, -2000, 123)  # each rank's clock runs this far from rank 0's
    raw = ingest(write_traces(tmp_path / "t", moe_scenario(offsets_us=offsets_us)), tmp_path / "s")
    store = enrich_store(raw)
    ranks = store.read("ranks").sort("rank")
    assert ranks.get_column("clock_offset_ns").to_list() == [o * US for o in offsets_us]
    assert ranks.get_column("clock_residual_ns").to_list() == [0, 0, 0, 0]
    b = bw.barrier_wait(store.events(), store.ranks())
    d0 = b.filter((pl.col("kind") == "dispatch") & (pl.col("layer") == 0)).sort("rank")
    assert d0.get_column("wait_ns").to_list() == [w * US for w in EXPECTED_DISPATCH_WAIT_US]


def test_enrich_is_idempotent(tmp_path):
    raw = ingest(write_traces(tmp_path / "t", moe_scenario(offsets_us=(0, 5000, -2000, 123))), tmp_path / "s")
    once = enrich_store(raw, tmp_path / "once")
    once_events = once.read("events").sort("rank", "eid")
    twice = enrich_store(once)  # in place, from an already aligned store
    assert (
        twice.read("ranks").get_column("clock_offset_ns").to_list()
        == once.read("ranks").get_column("clock_offset_ns").to_list()
    )
    assert twice.read("events").sort("rank", "eid").equals(once_events)


def test_collective_instances_of_a_plain_nccl_trace(tmp_path):
    # two ranks, three all-reduces; rank 1's clock is 40 µs ahead; true ends 100, 300, 500 µs
    traces = [RankTrace(0, 2), RankTrace(1, 2, offset_us=40)]
    for start0, start1, end in ((50, 90, 100), (280, 200, 300), (450, 490, 500)):
        traces[0].kernel(ALLREDUCE, start0, end - start0, stream=COMM_STREAM)
        traces[1].kernel(ALLREDUCE, start1, end - start1, stream=COMM_STREAM)
    store = enrich_store(ingest(write_traces(tmp_path / "t", traces), tmp_path / "s"))
    assert store.read("ranks").sort("rank").get_column("clock_offset_ns").to_list() == [0, 40 * US]
    b = bw.barrier_wait(store.events(), store.ranks()).sort("instance", "rank")
    # waits: (90−50, 0), (0, 280−200), (490−450, 0) µs
    assert b.get_column("wait_ns").to_list() == [40 * US, 0, 0, 80 * US, 40 * US, 0]
    assert store.meta["clock"]["status"] == "aligned"


def test_store_without_collectives_says_alignment_is_impossible(tmp_path):
    t = RankTrace(0, 2)
    t.kernel("some_kernel", 0, 10)
    u = RankTrace(1, 2)
    u.kernel("some_kernel", 5, 10)
    store = enrich_store(ingest(write_traces(tmp_path / "t", [t, u]), tmp_path / "s"))
    assert store.meta["clock"]["status"] == "impossible"
    assert store.read("ranks").get_column("clock_offset_ns").to_list() == [0, 0]


def test_two_shared_instances_are_too_few_to_align():
    # a median of two points is a guess: rank 1 is left as recorded, and the notes say why
    offsets, notes = estimate_offsets(_instances({0: [100, 200], 1: [150, 250]}), [0, 1])
    assert notes.status == "impossible" and "no 3 collective instances" in notes.notes[0]
    assert offsets.get_column("offset_ns").to_list() == [0, 0]


def test_group_medians_are_exactly_each_groups_median():
    # the offsets are alternating medians over instances and ranks; the vectorised per-group
    # median must be the textbook one, bit for bit (statistics.median: (a + b) / 2 for an even size)
    import statistics

    import numpy as np

    from asaptrace.enrich.clock import _Groups

    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        groups = rng.integers(0, n, int(rng.integers(0, 600)))
        values = rng.normal(0, 1e6, len(groups)).round(int(rng.integers(0, 3)))  # ties too
        got = _Groups(groups, n).median(values)
        for k in range(n):
            members = values[groups == k].tolist()
            want = statistics.median(members) if members else float("nan")
            assert got[k] == want or (np.isnan(got[k]) and not members), (k, members)
    # a rank's group holds thousands of instances (its middle found by partition, not a sort):
    # sizes odd and even, equal and not, with ties
    for _ in range(30):
        n = int(rng.integers(1, 5))
        sizes = rng.integers(65, 3000, n) if rng.random() < 0.5 else np.full(n, int(rng.integers(65, 3000)))
        groups = rng.permutation(np.repeat(np.arange(n), sizes))
        values = rng.normal(0, 1e6, len(groups)).round(int(rng.integers(-4, 2)))
        got = _Groups(groups, n).median(values)
        for k in range(n):
            assert got[k] == statistics.median(values[groups == k].tolist()), (k, sizes)
