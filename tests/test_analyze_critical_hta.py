"""The critical path against HTA's on the same traces, and across ranks on the coupled sample.

HTA's own test traces (``../shared/data/traces/kineto-hta-samples``) are walked by both: HTA's
``critical_path_analysis`` (run in its own process by tests/_hta_critical.py) and ours; the kernels
and copies on the path are the same (by correlation id) and the lengths agree within 1 %.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from asaptrace.analyze.barrier import barrier_wait
from asaptrace.analyze.critical import critical_path
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store
from tests._kineto_helpers import cpu_op, gpu_process, kernel, write_trace

pytest.importorskip("hta", reason="HTA (holistictraceanalysis) is in the test extras")
HERE = Path(__file__).resolve().parent


def _hta(trace_dir: Path, annotation: str, instance: int) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "_hta_critical.py"), str(trace_dir), annotation, str(instance)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"HTA could not walk {trace_dir.name}: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("trace", ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"])
def test_path_equals_htas(shared_data, tmp_path, trace):
    src = shared_data / "traces" / "kineto-hta-samples" / trace
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(src, folder / trace)  # HTA reads a folder: this file alone
    _same_path_as_htas(folder, tmp_path)


def _runtime(name: str, ts: int, dur: int, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": corr},
    }


@pytest.mark.parametrize(
    ("call", "record"), [("cudaStreamSynchronize", "Stream Sync"), ("cudaDeviceSynchronize", "Context Sync")]
)
def test_path_through_a_synchronisation_equals_htas(tmp_path, call, record):
    # the host waits in `call` for the copy queued behind a long gemm; the path runs launch → gemm →
    # copy → (the sync record) → the host op after the wait; HTA walks the same trace
    folder = tmp_path / "trace"
    sync = {
        "ph": "X",
        "cat": "cuda_sync",
        "name": record,
        "pid": 0,
        "tid": 7,
        "ts": 130,
        "dur": 320,
        "args": {
            "cuda_sync_kind": record,
            "stream": 7 if record == "Stream Sync" else -1,
            "correlation": 4,
            "device": 0,
        },
    }
    events = [
        *gpu_process(0),
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 100,
            "tid": 100,
            "ts": 0,
            "dur": 1000,
        },
        cpu_op("aten::mm", 10, 50),
        _runtime("cudaLaunchKernel", 20, 10, 1),
        kernel("gemm", 35, 365, corr=1, tid=7),
        cpu_op("aten::add", 70, 30),
        _runtime("cudaLaunchKernel", 75, 10, 2),
        kernel("add", 90, 30, corr=2, tid=8),
        cpu_op("aten::copy_", 110, 350),
        _runtime("cudaMemcpyAsync", 115, 10, 3),
        kernel("Memcpy DtoH (Device -> Pinned)", 400, 20, corr=3, tid=7, cat="gpu_memcpy"),
        _runtime(call, 130, 320, 4),
        sync,
        cpu_op("aten::relu", 470, 30),
        _runtime("cudaLaunchKernel", 475, 10, 5),
        kernel("relu", 490, 5, corr=5, tid=7),
    ]
    write_trace(folder / "rank0.json", events)
    ours = _same_path_as_htas(folder, tmp_path)
    # by hand: launch 15 + gemm 365 + copy 20, then the host after the wait: 450 µs in all
    assert ours.steps.get_column("length_ns")[0] == 450_000
    assert ours.steps.get_column("sync_ns")[0] == 0  # the wait itself is the device's time


def _same_path_as_htas(folder: Path, tmp_path: Path):
    store = ingest_paths([folder], tmp_path / "s", jobs=1)
    ours = critical_path(store.events(), store.ranks(), args=store.scan("args"), annotation="ProfilerStep")
    hta = _hta(folder, "ProfilerStep", 0)
    assert hta["ok"]
    # HTA's times are µs on these traces (kernel durations below say so too); ours ns
    length = ours.steps.filter(pl.col("window") == 0).get_column("length_ns")[0]
    assert length == pytest.approx(hta["length"] * 1000, rel=0.01)
    device = (
        store.events()
        .filter(pl.col("is_device"))
        .select("rank", pl.col("name").cast(pl.String), pl.col("ts_ns").alias("start_ns"), "corr", "dur_ns")
    )
    mine = (
        ours.path.filter((pl.col("window") == 0) & pl.col("kind").is_in(["compute", "copy", "transfer"]))
        .join(device.collect(), on=["rank", "name", "start_ns"], how="left")
        .select("name", "corr", "dur_ns")
    )
    assert sorted(zip(mine["name"], mine["corr"], strict=True)) == sorted(
        (n, c) for n, c, _ in hta["kernels"]
    )
    assert sorted(mine["dur_ns"].to_list()) == sorted(round(d * 1000) for *_, d in hta["kernels"])
    assert mine.height > 0  # the path runs through the device, not only the host
    return ours


def test_coupled_path_hops_to_the_last_arriving_group(sample_run):
    _truth, store, _diag = sample_run("coupled")
    events, ranks = store.events(), store.ranks()
    cp = critical_path(events, ranks, top=0)
    bw = barrier_wait(events, ranks)
    groups = dict(ranks.select("rank", "dp_group").collect().rows())
    # every hop: the path enters the instance released at start_ns from a rank of the DP group
    # that analyze says was ready last there
    hops = cp.path.filter(pl.col("kind") == "barrier").join(cp.steps.select("window"), on="window")
    assert hops.height >= 1
    last = bw.select("step", "release_ns", "last_dp_group").unique()
    joined = hops.join(last, left_on=["window", "start_ns"], right_on=["step", "release_ns"], how="left")
    assert joined.get_column("last_dp_group").null_count() == 0
    got = [groups[r] for r in joined.get_column("rank").to_list()]
    assert got == joined.get_column("last_dp_group").to_list()
    # the barrier wait of the others is never on the path
    assert cp.steps.get_column("barrier_ns").sum() == 0
    assert (
        cp.steps.get_column("hops").to_list()
        == cp.path.filter(pl.col("kind") == "barrier")
        .group_by("window")
        .len()
        .sort("window")
        .get_column("len")
        .to_list()
    )


def test_event_record_and_waits_by_hand(tmp_path):
    # stream 8's kernel K2 waits (cudaStreamWaitEvent) on the event recorded after K1 on stream 7, and
    # the host waits (cudaEventSynchronize) on the same event before aten::relu [130, 170] µs:
    #   L1 [0, 5] → K1 on stream 7 [10, 110]; record [6, 8]; wait [9, 11]; L4 [12, 17] → K2 on 8 [110, 130]
    # path: launch delay 10 + K1 100 → (event sync, 0) → the waiting call's end → relu 40 = 150 µs; the
    # kernel chain through the stream wait is 10 + 100 + 0 + 20 = 130. Without the event edges the host
    # chain (54) and K2's launch delay (5 + 2 + 2 + 98 + 20 = 127) would be all there is.
    def wait_record(kind: str, ts: int, corr: int, stream: int) -> dict:
        args = {
            "cuda_sync_kind": kind,
            "stream": stream,
            "correlation": corr,
            "device": 0,
            "wait_on_stream": 7,
            "wait_on_cuda_event_record_corr_id": 2,
        }
        return {
            "ph": "X",
            "cat": "cuda_sync",
            "name": kind,
            "pid": 0,
            "tid": stream,
            "ts": ts,
            "dur": 1,
            "args": args,
        }

    events = [
        *gpu_process(0),
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 100,
            "tid": 100,
            "ts": 0,
            "dur": 200,
        },
        _runtime("cudaLaunchKernel", 0, 5, 1),
        kernel("K1", 10, 100, corr=1, tid=7),
        _runtime("cudaEventRecord", 6, 2, 2),
        _runtime("cudaStreamWaitEvent", 9, 2, 3),
        wait_record("Stream Wait Event", 11, 3, 8),
        _runtime("cudaLaunchKernel", 12, 5, 4),
        kernel("K2", 110, 20, corr=4, tid=8),
        _runtime("cudaEventSynchronize", 20, 105, 5),
        wait_record("Event Sync", 124, 5, -1),
        cpu_op("aten::relu", 130, 40),
    ]
    write_trace(tmp_path / "trace" / "rank0.json", events)
    store = ingest_paths([tmp_path / "trace"], tmp_path / "s", jobs=1)
    cp = critical_path(store.events(), store.ranks(), args=store.scan("args"), annotation="ProfilerStep")
    step = cp.steps.row(0, named=True)
    assert (step["length_ns"], step["launch_ns"], step["compute_ns"], step["host_ns"]) == (
        150_000,
        10_000,
        100_000,
        40_000,
    )
    assert cp.path.get_column("name").to_list() == ["K1", "K1", "aten::relu"]
    # K2 made 20 % faster: off the path, no gain; K1: on it, all of its 20 µs
    gains = dict(cp.kernels.select("name", "gain_ns").rows())
    assert gains == {"K1": 20_000}
    assert cp.notes == []  # its waits are recorded: no note that streams are blind to each other
    # without the args (no record → wait links) the path is the launch-delayed K2 chain
    blind = critical_path(store.events(), store.ranks(), annotation="ProfilerStep")
    assert blind.steps.get_column("length_ns")[0] == 127_000


@pytest.mark.parametrize(
    "trace",
    [
        "kineto-dlrm-8rank",
        "kineto-hta-samples/nccl_data.json.gz",
        "tracelens-serving/sglang_Qwen3-8B_prefilldecode.json.gz",
        "nsys-sample",
        "ascend-sample/trace_view.json",
    ],
)
def test_identities_on_real_traces(shared_data, tmp_path, trace):
    # every real trace: the split and the ranks each sum to the length, the length never exceeds the
    # window's extent, the path runs forward in time, and each what-if gains within [0, shortening]
    store = enrich_store(ingest_paths([shared_data / "traces" / trace], tmp_path / "s", jobs=1))
    cp = critical_path(store.events(), store.ranks(), args=store.scan("args"), top=3)
    assert cp.steps.height >= 1
    split = pl.sum_horizontal(
        [f"{k}_ns" for k in ("compute", "copy", "transfer", "barrier", "launch", "sync", "host", "gap")]
    )
    assert cp.steps.select((split == pl.col("length_ns")).all()).item()
    assert cp.steps.select((pl.col("length_ns") <= pl.col("span_ns")).all()).item()
    on_rank = cp.by_rank.group_by("window").agg(pl.col("on_path_ns").sum())
    assert (
        on_rank.join(cp.steps, on="window").select((pl.col("on_path_ns") == pl.col("length_ns")).all()).item()
    )
    for part in cp.path.partition_by("window"):
        ends = part.get_column("end_ns").to_list()
        assert ends == sorted(ends)
    k = cp.kernels
    assert k.select(((pl.col("gain_ns") >= 0) & (pl.col("gain_ns") <= pl.col("shortening_ns"))).all()).item()
