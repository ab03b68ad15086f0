"""A hostile store for the report's escaping tests: a kernel and a source file named like HTML injections."""

from __future__ import annotations

from pathlib import Path

from asaptrace.pipeline import enrich_store
from asaptrace.store import TraceStore
from tests._analysis_helpers import COMM_STREAM, ingest, moe_scenario, write_traces

SCRIPT_KERNEL = "<script>alert(1)</script>"
#: A collective whose name starts like an injection: the first instance, so a finding quotes it.
SCRIPT_COLLECTIVE = "nccl_AllReduce<script>alert"
IMG_NAME = '"><img src=x onerror=alert(1)>'


def hostile_store(tmp: Path) -> TraceStore:
    """The hand-worked 4-rank scenario plus a kernel named :data:`SCRIPT_KERNEL` in layer 0 of rank 0
    (so the timeline shows it), a step-level all-reduce named :data:`SCRIPT_COLLECTIVE` (the first
    collective instance, so a finding quotes it), and rank 0's file named after :data:`IMG_NAME`."""
    traces = moe_scenario()
    for t in traces:
        t.kernel(SCRIPT_COLLECTIVE, -8, 2, stream=COMM_STREAM, launch_at=-9)
    traces[0].kernel(SCRIPT_KERNEL, 10, 5, stream=30, launch_at=-2)  # launched inside layer#0's annotation
    folder = write_traces(tmp / "traces", traces)
    (folder / "rank0.pt.trace.json").rename(folder / f"rank0{IMG_NAME}.pt.trace.json")
    return enrich_store(ingest(folder, tmp / "hostile.store"))
