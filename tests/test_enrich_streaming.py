"""The store is enriched a group of ranks at a time; the result must equal enriching every table at once.

The streaming path (``asaptrace.enrich.streaming``, behind ``enrich_store`` / ``build_store``)
decides the cross-rank things (taxonomy, step cut from idle gaps, roles, clock offsets, batches)
from the facts of each group of ranks; the in-memory path (``enrich_frames``) sees every table.
Scenarios where the cross-rank decision is what matters: steps from gaps on every rank (a run-wide
median gap threshold), ranks that disagree on the number of steps (everything goes to step 0 with
one note), clock offsets that need the collective instances of all ranks, and a run where some
ranks have step annotations and others not (a group is split between the two rounds). Each runs
with one rank per group, two, and every rank in one group, and with no frames, some or all kept
between the rounds.

The streaming enrichment's polars queries are paid per group, not per rank: counted (not timed)
on synthetic runs of 4 and 16 ranks.
"""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.enrich import enrich_frames, streaming
from asaptrace.errors import AccountingError
from asaptrace.pipeline import build_store, enrich_store, read_tables
from asaptrace.synth.run import synthesize
from benchmarks._polars_queries import count_queries
from tests._analysis_helpers import ingest, moe_scenario, write_traces
from tests._synth_helpers import tiny


def _canonical(df: pl.DataFrame) -> pl.DataFrame:
    df = df.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
    return df.sort(df.columns, nulls_last=True)


def _scenario(name: str):
    if name == "annotated":
        return moe_scenario(offsets_us=(0, 7, -3, 12))  # clocks skewed: offsets need every rank
    traces = moe_scenario(annotations=False)
    later = moe_scenario(annotations=False, offsets_us=(50_000,) * 4)
    if name == "disagreeing":
        later = later[:2]  # ranks 0-1 have two steps, ranks 2-3 one: the cut must be dropped everywhere
    for t, again in zip(traces, later, strict=False):
        t.events += again.events
    if name == "mixed":  # ranks 0, 2 annotated; 1, 3 cut into two steps by their idle gap (19, 16 events)
        annotated = moe_scenario()
        traces = [annotated[r] if r % 2 == 0 else traces[r] for r in range(4)]
    return traces


@pytest.mark.parametrize("cache", [0, 1_500, 10**12], ids=["no-cache", "some-cached", "all-cached"])
@pytest.mark.parametrize("group_events", [1, 38, 10**9], ids=["rank-by-rank", "two-ranks", "one-group"])
@pytest.mark.parametrize("name", ["annotated", "gaps", "disagreeing", "mixed"])
def test_streaming_enrichment_equals_whole_table_enrichment(tmp_path, monkeypatch, name, group_events, cache):
    # ``cache``: bytes of segmented frames kept between rounds instead of segmenting ranks again
    monkeypatch.setattr(streaming, "GROUP_EVENTS", group_events)
    monkeypatch.setitem(streaming.enrich_streaming.__kwdefaults__, "cache_bytes", cache)
    raw = ingest(write_traces(tmp_path / "t", _scenario(name)), tmp_path / "raw")
    whole = enrich_frames(read_tables(raw))
    streamed = enrich_store(raw, tmp_path / "streamed")
    for table in ("events", "args", "flows", "ranks", "batches"):
        a = _canonical(whole.tables[table].drop("context", strict=False))
        b = _canonical(streamed.read(table).select(a.columns).cast(a.schema))  # type: ignore[arg-type]
        assert a.equals(b), table
    for key in ("segmentation", "clock", "parallel", "taxonomy_profile", "batches_source"):
        assert streamed.meta[key] == whole.meta[key], key
    if name == "disagreeing":
        assert streamed.meta["segmentation"]["step_source"] == "single"
        assert streamed.read("events").filter(pl.col("is_device")).get_column("step").unique().to_list() == [
            0
        ]
    if name == "gaps":
        assert streamed.meta["segmentation"]["step_source"] == "gaps"
    if name == "mixed":  # the scenario is what it says: the stepless ranks were cut by their gap
        device = streamed.read("events").filter(pl.col("is_device"), pl.col("rank") == 1)
        assert device.get_column("step").unique().sort().to_list() == [0, 1]


def _queries_of_ingest(tmp_path, dp: int) -> tuple[int, int]:
    """(ranks, polars queries) of ``build_store`` on a one-step synthetic run of ``dp`` × TP2 ranks."""
    run = tmp_path / f"dp{dp}"
    synthesize(tiny("coupled", run={"steps": 1}, deployment={"dp": dp}), run)
    with count_queries() as n:
        store = build_store([run / "kineto"], tmp_path / f"dp{dp}.store", jobs=1)
    return store.read("ranks").height, n.queries


def test_polars_queries_of_an_ingest_do_not_grow_with_ranks(tmp_path):
    # rank by rank, enrichment ran ≈ 180 queries per rank; by groups it is a constant per group,
    # and one group holds every rank of these small runs
    small, q_small = _queries_of_ingest(tmp_path, 2)
    large, q_large = _queries_of_ingest(tmp_path, 8)
    assert (small, large) == (4, 16)
    assert q_small < 400
    assert q_large - q_small <= 2 * (large - small), (q_small, q_large)


def test_a_rank_lost_or_written_twice_is_an_accounting_error_not_an_assert():
    # the writing pass must hold every rank of the store once: groups [0, 1] and [3] of ranks
    # 0-3 lose rank 2; groups [0, 1] and [1, 2] of ranks 0-2 hold rank 1 twice
    streaming.check_every_rank_once([[0, 1], [2]], [0, 1, 2])  # every rank once: nothing raised
    with pytest.raises(AccountingError, match=r"ranks \[2\] lost"):
        streaming.check_every_rank_once([[0, 1], [3]], [0, 1, 2, 3])
    with pytest.raises(AccountingError, match=r"ranks \[1\] kept more than once"):
        streaming.check_every_rank_once([[0, 1], [1, 2]], [0, 1, 2])


def test_an_enrichment_that_loses_a_rank_writes_no_store(tmp_path, monkeypatch):
    # a bug that dropped a group before the writing pass (here: rank 0's, a group of its own)
    # fails the enrichment with the accounting error (an assert would vanish under `python -O`)
    # and leaves no store
    from asaptrace.enrich.spill_cache import SpillCache

    raw = ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "raw")
    real = SpillCache.take_final
    monkeypatch.setattr(SpillCache, "take_final", lambda self: [g for g in real(self) if 0 not in g[0]])
    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)  # a group per rank
    with pytest.raises(AccountingError, match=r"ranks \[0\] lost"):
        enrich_store(raw, tmp_path / "streamed")
    assert not (tmp_path / "streamed").exists()
