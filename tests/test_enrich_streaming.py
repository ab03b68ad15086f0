"""The store is enriched one rank at a time; the result must equal enriching every table at once.

The streaming path (``asaptrace.pipeline.enrich_store`` / ``build_store``) decides the cross-rank
things (taxonomy, step cut from idle gaps, roles, clock offsets, batches) from per-rank facts; the
in-memory path (``enrich_frames``) sees every table. Scenarios where the cross-rank decision is
what matters: steps from gaps on every rank (a run-wide median gap threshold), ranks that disagree
on the number of steps (everything goes to step 0 with one note), and clock offsets that need the
collective instances of all ranks.
"""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.enrich import enrich_frames
from asaptrace.pipeline import enrich_store, read_tables
from tests._analysis_helpers import ingest, moe_scenario, write_traces


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
    return traces


@pytest.mark.parametrize("name", ["annotated", "gaps", "disagreeing"])
def test_streaming_enrichment_equals_whole_table_enrichment(tmp_path, name):
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
