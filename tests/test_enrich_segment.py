"""Segmentation: steps, layers and micro-batches from annotations, or from gaps and dispatch/combine order."""

from __future__ import annotations

import polars as pl

from asaptrace.analyze import barrier as bw
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import (
    ATTENTION,
    COMBINE,
    COMM_STREAM,
    DISPATCH,
    EXPECTED_DISPATCH_WAIT_US,
    GEMM,
    RankTrace,
    ingest,
    moe_scenario,
    write_traces,
)

US = 1000


def _device(store) -> pl.DataFrame:
    return (
        store.read("events")
        .filter(pl.col("is_device"))
        .with_columns(pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String))
    )


def test_annotated_kernels_get_step_and_layer_of_their_launch(tmp_path):
    store = enrich_store(ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "s"))
    dev = _device(store)
    assert dev.get_column("step").to_list() == [0] * dev.height
    # the scenario's second layer starts at 430 µs: every kernel from then on is layer 1
    expected = (pl.col("ts_ns") >= 430 * US).cast(pl.Int16)
    assert dev.filter(pl.col("layer") != expected).height == 0
    assert dev.get_column("micro_batch").to_list() == [0] * dev.height
    assert store.meta["segmentation"]["layer_source"] == "annotations"


def test_deepep_trace_without_annotations_is_segmented_from_comm_order(tmp_path):
    store = enrich_store(
        ingest(write_traces(tmp_path / "t", moe_scenario(annotations=False)), tmp_path / "s")
    )
    dev = _device(store)
    # dispatch and combine recognised from DeepEP names alone
    assert dev.filter(pl.col("name") == DISPATCH).get_column("kind").unique().to_list() == ["dispatch"]
    assert dev.filter(pl.col("name") == COMBINE).get_column("kind").unique().to_list() == ["combine"]
    # layers numbered 0 and 1 (the second starts at 430 µs), one step
    assert dev.filter(pl.col("layer") != (pl.col("ts_ns") >= 430 * US).cast(pl.Int16)).height == 0
    assert dev.get_column("step").unique().to_list() == [0]
    assert store.meta["segmentation"]["layer_source"] == "comm_order"
    # and the barrier waits are the same as with annotations
    b = bw.barrier_wait(store.events(), store.ranks())
    d = b.filter((pl.col("kind") == "dispatch") & (pl.col("layer") == 1)).sort("rank")
    assert d.get_column("wait_ns").to_list() == [w * US for w in EXPECTED_DISPATCH_WAIT_US]


def test_steps_from_idle_gaps_without_annotations(tmp_path):
    traces = moe_scenario(annotations=False)
    later = moe_scenario(annotations=False, offsets_us=(50_000,) * 4)  # the same step again, 50 ms later
    for t, again in zip(traces, later, strict=True):
        t.events += again.events
    store = enrich_store(ingest(write_traces(tmp_path / "t", traces), tmp_path / "s"))
    dev = _device(store)
    assert dev.filter(pl.col("step") != (pl.col("ts_ns") >= 50_000 * US).cast(pl.Int32)).height == 0
    assert store.meta["segmentation"]["step_source"] == "gaps"
    # each step has its own layers 0 and 1
    assert sorted(dev.filter(pl.col("step") == 1).get_column("layer").unique().to_list()) == [0, 1]


def test_overlapping_micro_batches_follow_their_launch(tmp_path):
    """Micro-batch 1's attention runs while micro-batch 0's dispatch spins: time alone cannot tell them apart."""
    t = RankTrace(0, 1)
    # host: layer#0 of micro-batch 0 launches attention and dispatch, then micro-batch 1 launches attention
    t.annotation("prefill_step#0", 0, 1000, {"step": 0})
    t.annotation("layer#0", 10, 10, {"step": 0, "layer": 0, "micro_batch": 0})
    t.annotation("layer#0", 20, 10, {"step": 0, "layer": 0, "micro_batch": 1})
    t.kernel(ATTENTION, 100, 100, launch_at=11)
    t.kernel(DISPATCH, 200, 200, stream=COMM_STREAM, launch_at=12)
    t.kernel(ATTENTION, 200, 100, launch_at=21)
    # device copies of the layer spans overlap in time on the compute stream
    t.annotation("layer#0", 100, 300, {"step": 0, "layer": 0, "micro_batch": 0}, device=True)
    t.annotation("layer#0", 200, 100, {"step": 0, "layer": 0, "micro_batch": 1}, device=True)
    store = enrich_store(ingest(write_traces(tmp_path / "t", [t]), tmp_path / "s"))
    dev = _device(store).filter(pl.col("kind") != "annotation").sort("ts_ns", "stream")
    assert dev.select("kind", "micro_batch").rows() == [("attention", 0), ("attention", 1), ("dispatch", 0)]


def test_annotation_context_names_the_gemm(tmp_path):
    t = RankTrace(0, 1)
    t.annotation("prefill_step#0", 0, 100, {"step": 0})
    t.annotation("layer#3", 1, 50, {"step": 0, "layer": 3, "micro_batch": 0})
    t.annotation("shared_expert", 2, 2, {"step": 0, "layer": 3, "micro_batch": 0})
    t.kernel(GEMM, 200, 10, launch_at=2)  # launched inside "shared_expert"
    t.kernel(GEMM, 300, 10, launch_at=10)  # the same kernel launched outside it
    store = enrich_store(ingest(write_traces(tmp_path / "t", [t]), tmp_path / "s"))
    dev = _device(store).filter(pl.col("name") == GEMM).sort("ts_ns")
    assert dev.get_column("kind").to_list() == ["shared_expert", "compute"]
    assert dev.get_column("layer").to_list() == [3, 3]
