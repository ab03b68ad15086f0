"""Steps are the framework's own annotations, each counted once, each event in the step that owns it
(issue 39, DOMAIN.md §9): a ``ProfilerStep#N`` of any category, a step mirrored on GPU streams,
a GPU running more than a step behind its CPU, gap cuts when nothing is annotated, Ascend step ids.

Every trace is written here, so the truth is known: which step launched each kernel.
"""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import COMM_STREAM, COMPUTE_STREAM, HOST_PID, RankTrace, ingest, write_traces
from tests._ingest_helpers import kd_row, write_kernel_details
from tests._step_invariants import step_violations

US = 1000


def _store(tmp_path, trace: RankTrace):
    store = enrich_store(ingest(write_traces(tmp_path / "t", [trace]), tmp_path / "s"))
    assert step_violations(store) == []  # what must hold of any store's steps
    return store


def _events(store) -> pl.DataFrame:
    return store.read("events").with_columns(pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String))


def _work(store) -> pl.DataFrame:
    """Device work (annotations aside), in time order."""
    return _events(store).filter(pl.col("is_device"), pl.col("kind") != "annotation").sort("ts_ns", "stream")


def _step_span(t: RankTrace, name: str, ts: int, dur: int, cat: str) -> None:
    t.events.append(
        {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": HOST_PID,
            "tid": HOST_PID,
            "ts": ts,
            "dur": dur,
            "args": {},
        }
    )


@pytest.mark.parametrize("category", ["Operator", "cpu_op", "user_annotation"])
def test_profiler_step_of_any_category_cuts_the_steps(tmp_path, category):
    """Older Kineto writes ``ProfilerStep#N`` as an ``Operator`` (a ResNet50 trace), torch_npu as a
    ``cpu_op``: each is a step, and the 4 ms idle gap inside every step is no step boundary."""
    t = RankTrace(0, 1)
    truth = []  # (kernel start µs, step that launched it)
    for n in range(3):
        start = 20 + n * 10_500  # steps of 10 ms, 0.5 ms apart
        _step_span(t, f"ProfilerStep#{n + 5}", start, 10_000, category)
        for burst in (100, 6_000):  # two bursts of kernels, 4+ ms of idle between them
            for j in range(5):
                ts = start + burst + 50 + j * 100
                t.kernel("gemm_kernel", ts, 90, launch_at=ts - 40, cat="Kernel")
                truth.append((ts, n + 5))
    store = _store(tmp_path, t)
    work = _work(store)
    assert work.select((pl.col("ts_ns") // US).alias("ts"), "step").rows() == truth
    seg = store.meta["segmentation"]
    assert seg["step_source"] == "annotations"
    assert not any("idle gaps" in n for n in seg["notes"]), seg["notes"]
    assert [s["step"] for s in seg["steps"]] == [5, 6, 7]
    kinds = _events(store).filter(pl.col("name").str.starts_with("ProfilerStep#")).get_column("kind")
    assert kinds.to_list() == ["annotation"] * 3  # a step, not a host op spanning the whole step


@pytest.mark.parametrize("external_id", [True, False])
def test_a_step_mirrored_on_two_gpu_streams_is_one_step(tmp_path, external_id):
    """vLLM's ``execute_…`` annotation (no step number in its name) copied by Kineto onto the two
    GPU streams that ran its work: two steps, not four, with or without the ``External id`` link."""
    t = RankTrace(0, 1)
    names = ["execute_context_1(100)_generation_2(2)", "execute_context_0(0)_generation_3(3)"]
    truth = []
    for n, name in enumerate(names):
        start = 10 + n * 6_000
        ext = {"External id": 100 + n} if external_id else {}
        t.annotation(name, start, 5_000, ext)
        for stream, first in ((COMPUTE_STREAM, 200), (COMM_STREAM, 300)):
            for j in range(3):
                ts = start + first + j * 1_000
                t.kernel("vllm::fused_moe_kernel", ts, 500, stream=stream, launch_at=ts - 150)
                truth.append((ts, stream, n))
            t.annotation(name, start + first, 2_500, ext, device=True, stream=stream)
    store = _store(tmp_path, t)
    truth.sort()
    assert _work(store).select((pl.col("ts_ns") // US).alias("ts"), "stream", "step").rows() == truth
    seg = store.meta["segmentation"]
    assert [(s["step"], s["phase"]) for s in seg["steps"]] == [(0, "mixed"), (1, "decode")]
    ann = _events(store).filter(pl.col("kind") == "annotation")
    mirrored = ann.group_by("name").agg(pl.col("step").unique().sort()).sort("name")
    assert mirrored.rows() == [(names[1], [1]), (names[0], [0])]  # host and both device copies


def test_serving_steps_inside_one_profiler_step_stay_apart(tmp_path):
    """A profiler schedule around a serving loop: one ``ProfilerStep#7`` holding two vLLM engine
    steps. The framework's own steps come first (DOMAIN.md §9): two steps, not one."""
    t = RankTrace(0, 1)
    t.annotation("ProfilerStep#7", 0, 12_000)
    truth = []
    for n, name in enumerate(
        ["execute_context_1(100)_generation_2(2)", "execute_context_0(0)_generation_3(3)"]
    ):
        start = 10 + n * 6_000
        t.annotation(name, start, 5_000)
        for j in range(3):
            ts = start + 200 + j * 1_000
            t.kernel("vllm::fused_moe_kernel", ts, 500, launch_at=ts - 150)
            truth.append((ts, n))
    store = _store(tmp_path, t)
    assert _work(store).select((pl.col("ts_ns") // US).alias("ts"), "step").rows() == truth
    assert [(s["step"], s["phase"]) for s in store.meta["segmentation"]["steps"]] == [
        (0, "mixed"),
        (1, "decode"),
    ]


def test_gpu_behind_its_cpu_by_more_than_a_step_keeps_each_kernel_in_its_launching_step(tmp_path):
    """Each ``ProfilerStep#N`` lasts 10 ms on the host and its kernels run 16 ms after their launch:
    while the host is in step N+1 or N+2 the GPU still runs step N's kernels. A copy with no launch
    link runs inside step 1's device work, at a time the host is in step 3: step 1 by device time."""
    t = RankTrace(0, 1)
    lag, truth = 16_000, []
    for n in range(4):
        start = 10 + n * 10_000
        t.annotation(f"ProfilerStep#{n}", start, 10_000)
        first = start + 100 + lag
        for j in range(4):
            ts = start + 100 + j * 2_000 + lag
            t.kernel("gemm_kernel", ts, 1_500, launch_at=ts - lag)
            truth.append((ts, COMPUTE_STREAM, n))
        t.annotation(f"ProfilerStep#{n}", first, 7_500, device=True)  # Kineto's device copy
    t.kernel("Memset (Device)", 30_000, 100, stream=COMM_STREAM, cat="gpu_memset")  # no correlation
    truth.append((30_000, COMM_STREAM, 1))
    store = _store(tmp_path, t)
    truth.sort()
    assert _work(store).select((pl.col("ts_ns") // US).alias("ts"), "stream", "step").rows() == truth
    assert [s["step"] for s in store.meta["segmentation"]["steps"]] == [0, 1, 2, 3]


def test_without_annotations_a_gap_cut_never_runs_through_a_kernel(tmp_path):
    """No annotation: steps are cut at idle gaps where no device work runs on any stream. Stream 7
    idles 2 ms between bursts A and B while a 2.5 ms kernel runs on stream 20: no cut there. The only
    gap of the whole device is the 5 ms before burst C."""
    t = RankTrace(0, 1)
    truth = []
    for burst, step in ((0, 0), (3_000, 0), (9_000, 1)):
        n = 30 if burst == 9_000 else 10  # C lasts 3 ms: longer than the longest kernel
        for j in range(n):
            ts = 10 + burst + j * 100
            t.kernel("gemm_kernel", ts, 90)
            truth.append((ts, COMPUTE_STREAM, step))
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 510, 2_500, stream=COMM_STREAM)
    truth.append((510, COMM_STREAM, 0))
    store = _store(tmp_path, t)
    truth.sort()
    assert _work(store).select((pl.col("ts_ns") // US).alias("ts"), "stream", "step").rows() == truth
    seg = store.meta["segmentation"]
    assert seg["step_source"] == "gaps"
    assert any("2 steps found from idle gaps" in n and "any stream" in n for n in seg["notes"]), seg["notes"]


def _kd(step: int, name: str, start_us: float, dur_us: float) -> list[str]:
    row = kd_row(name, f"{start_us:.3f}", f"{dur_us:.3f}")
    row[0] = str(step)
    return row


def test_ascend_kernel_details_step_ids_are_the_steps(tmp_path):
    """A ``kernel_details.csv`` read alone: its ``Step Id`` column says each kernel's step, even
    across a 5 ms idle gap inside step 3 that a gap cut would have split."""
    base = 1_736_413_971_000_000.0
    rows, truth = [], []
    for step, starts in ((3, (0, 200, 5_400)), (4, (6_000, 6_200, 6_400))):
        for s in starts:
            rows.append(_kd(step, "aclnnMatmul_MatMulV2", base + s, 150))
            truth.append(step)
    csv = write_kernel_details(tmp_path / "kd" / "kernel_details.csv", rows)
    from asaptrace.ingest.driver import ingest_paths

    store = enrich_store(ingest_paths([csv], tmp_path / "s", jobs=1))
    assert _work(store).get_column("step").to_list() == truth
    seg = store.meta["segmentation"]
    assert seg["step_source"] == "annotations"
    assert [s["step"] for s in seg["steps"]] == [3, 4]
    assert any("Step Id" in n for n in seg["notes"]), seg["notes"]


def test_ingest_of_a_kernel_details_csv_reads_that_file_not_the_timeline_beside_it(shared_data, tmp_path):
    """The real Ascend sample holds a ``trace_view.json`` and a ``kernel_details.csv`` of another
    run; naming the CSV ingests its 29 kernels, all of ``Step Id`` 19."""
    from asaptrace.ingest.driver import ingest_paths

    csv = shared_data / "traces" / "ascend-sample" / "kernel_details.csv"
    lines = csv.read_text().splitlines()[1:]
    store = enrich_store(ingest_paths([csv], tmp_path / "s", jobs=1))
    work = _work(store)
    assert work.height == len(lines) == 29
    assert sorted(work.get_column("name").to_list()) == sorted(line.split(",")[4] for line in lines)
    assert work.get_column("step").unique().to_list() == [19]
