"""The step breakdown on hand-worked timelines (DOMAIN §9): windows that tile the device time, each
precedence rule (compute > copy > transfer > wait > idle), each idle cause, copies never compute.

Every expected number is worked out by hand in the comment above it (µs on a made-up clock).
"""

from __future__ import annotations

import polars as pl

from asaptrace.analyze.barrier import _empty as empty_barrier
from asaptrace.analyze.breakdown import PARTS, breakdown_tables, step_breakdown
from asaptrace.analyze.overlap import overlap_by_rank

US = 1000
_RANKS = pl.DataFrame(
    {"rank": [0], "dp_group": [None], "role": ["fused"]}, schema_overrides={"dp_group": pl.Int32}
)


def _events(rows: list[tuple]) -> pl.DataFrame:
    """(stream, is_device, kind, name, cat, start µs, dur µs, step, corr) of rank 0."""
    cols = ["stream", "is_device", "kind", "name", "cat", "ts_ns", "dur_ns", "step", "corr"]
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    data["ts_ns"] = [v * US for v in data["ts_ns"]]
    data["dur_ns"] = [v * US for v in data["dur_ns"]]
    n = len(rows)
    return pl.DataFrame(
        {"rank": [0] * n, **data, "layer": [None] * n, "micro_batch": [None] * n},
        schema_overrides={
            "rank": pl.Int32,
            "step": pl.Int32,
            "corr": pl.Int64,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
        },
    )


def _host(ev: pl.DataFrame) -> pl.DataFrame:
    from asaptrace.analyze._idle import host_frame

    frame = host_frame(ev.lazy())
    assert frame is not None
    return frame


def _barrier(arrival: int, release: int, end: int) -> pl.DataFrame:
    row = {c: None for c in empty_barrier().columns}
    row |= {"rank": 0, "arrival_ns": arrival * US, "release_ns": release * US, "end_ns": end * US}
    row |= {"wait_ns": (release - arrival) * US, "instance": 0, "step": 0, "kind": "collective"}
    return pl.DataFrame([row], schema=empty_barrier().schema)


def _row(bd: pl.DataFrame, step: int | None = 0) -> dict:
    return bd.filter(pl.col("step").eq_missing(step)).row(0, named=True)


def test_each_part_by_precedence():
    ev = _events(
        [
            (7, True, "compute", "gemm", "kernel", 0, 100, 0, None),
            (8, True, "memcpy", "Memcpy HtoD", "gpu_memcpy", 50, 100, 0, None),  # 50..150
            (9, True, "collective", "ncclAllReduce", "kernel", 140, 160, 0, None),  # 140..300
            (7, True, "compute", "gemm", "kernel", 400, 20, 0, None),
        ]
    )
    # the all-reduce arrives at 140, its last peer at 200: wait [140, 200), transfer [200, 300)
    r = _row(step_breakdown(ev, _RANKS, barrier=_barrier(140, 200, 300)))
    # compute 0..100 and 400..420 = 120; copy 100..150 (50..100 is under the GEMM) = 50;
    # wait 150..200 (140..150 is under the copy) = 50; transfer 200..300 = 100; idle 300..400 = 100
    assert r["step_time_ns"] == 420 * US
    assert (r["compute_ns"], r["copy_ns"], r["wait_ns"], r["transfer_ns"]) == (
        120 * US,
        50 * US,
        50 * US,
        100 * US,
    )
    assert r["idle_other_ns"] == 100 * US and r["idle_host_ns"] == r["idle_sync_ns"] == 0  # no host data
    assert r["overlapped_ns"] == 10 * US  # the all-reduce under the copy, 140..150: beside the parts
    assert sum(r[c] for c in PARTS) == r["step_time_ns"]


def test_transfer_beats_wait():
    # X [0, 100) waits for its last peer until 80; Y [50, 150) belongs to no instance (all transfer):
    # 0..50 wait, 50..150 transfer (Y transfers while X still waits)
    ev = _events(
        [
            (9, True, "collective", "ncclAllReduce", "kernel", 0, 100, 0, None),
            (10, True, "collective", "ncclAllGather", "kernel", 50, 100, 0, None),
        ]
    )
    r = _row(step_breakdown(ev, _RANKS, barrier=_barrier(0, 80, 100)))
    assert (r["wait_ns"], r["transfer_ns"], r["step_time_ns"]) == (50 * US, 100 * US, 150 * US)


def test_copies_are_never_compute():
    # a memcpy a taxonomy rule would have called compute (its category says copy) and a memset
    ev = _events(
        [
            (7, True, "compute", "gemm", "kernel", 0, 10, 0, None),
            (8, True, "compute", "Memcpy DtoD", "gpu_memcpy", 10, 30, 0, None),
            (8, True, "memcpy", "Memset", "gpu_memset", 40, 20, 0, None),
        ]
    )
    r = _row(step_breakdown(ev, _RANKS, barrier=empty_barrier()))
    assert (r["compute_ns"], r["copy_ns"], r["step_time_ns"]) == (10 * US, 50 * US, 60 * US)
    ov = overlap_by_rank(ev, _RANKS).row(0, named=True)
    assert (ov["compute_ns"], ov["copy_ns"], ov["utilisation"]) == (10 * US, 50 * US, 10 / 60)


def test_windows_tile_the_device_time_and_the_lag_is_apart():
    # host: step 0's annotation at 0, step 1's at 100; the GPU runs 150 µs behind.
    # device: step 0's kernels [150, 250) and [250, 280) (the latter runs into step 1's window),
    # step 1's kernel [280, 300)... no: step 1's first work starts at 260 on another stream
    ev = _events(
        [
            (1, False, "annotation", "ProfilerStep#0", "user_annotation", 0, 100, 0, None),
            (1, False, "annotation", "ProfilerStep#1", "user_annotation", 100, 100, 1, None),
            (7, True, "compute", "a", "kernel", 150, 100, 0, None),
            (7, True, "compute", "b", "kernel", 250, 30, 0, None),
            (8, True, "compute", "c", "kernel", 260, 40, 1, None),
        ]
    )
    bd = step_breakdown(ev, _RANKS, barrier=empty_barrier(), host=_host(ev))
    s0, s1 = _row(bd, 0), _row(bd, 1)
    # windows [150, 260) and [260, 300): they tile the span 150..300, the sum is 150, not the
    # 130 + 40 of launch spans (150..280 and 260..300 overlap by 20)
    assert (s0["start_ns"], s0["end_ns"], s1["start_ns"], s1["end_ns"]) == (
        150 * US,
        260 * US,
        260 * US,
        300 * US,
    )
    assert s0["step_time_ns"] + s1["step_time_ns"] == 150 * US
    assert (s0["compute_ns"], s1["compute_ns"]) == (110 * US, 40 * US)  # b's 260..280 is step 1's by time
    assert (s0["lag_ns"], s1["lag_ns"]) == (150 * US, 160 * US)  # reported, not added
    assert s0["last_end_ns"] == 280 * US  # step 0's results are out when b ends, inside step 1's window


def test_work_before_the_first_step_is_a_row_of_its_own():
    ev = _events(
        [
            (7, True, "compute", "warmup", "kernel", 0, 10, None, None),
            (7, True, "compute", "a", "kernel", 20, 10, 0, None),
        ]
    )
    bd = step_breakdown(ev, _RANKS, barrier=empty_barrier())
    assert bd.select("step", "start_ns", "end_ns").rows() == [(None, 0, 20 * US), (0, 20 * US, 30 * US)]


def test_each_idle_cause():
    ev = _events(
        [
            # K1 [0, 10); K2 [50, 53) launched at 40 by thread 1, busy in an op over [5, 40):
            # the gap 10..50 is the host's (launch after the gap began, thread busy 30 of 30 µs)
            (7, True, "compute", "k1", "kernel", 0, 10, 0, 1),
            (1, False, "host", "aten::linear", "cpu_op", 5, 35, 0, None),
            (1, False, "host", "cudaLaunchKernel", "cuda_runtime", 40, 5, 0, 2),
            (7, True, "compute", "k2", "kernel", 50, 3, 0, 2),
            # K3 [100, 110) launched at 55; the host synchronises over [70, 90): gap 53..100 is
            # 20 sync, and the rest 27 other (the launch at 55 came 2 µs after the gap began, with
            # the thread idle between: not the host's)
            (1, False, "host", "cudaLaunchKernel", "cuda_runtime", 55, 3, 0, 3),
            (1, False, "host", "cudaStreamSynchronize", "cuda_runtime", 70, 20, 0, None),
            (7, True, "compute", "k3", "kernel", 100, 10, 0, 3),
            # K4 [200, 210) launched at 190 by a thread busy only over [110, 112): gap 110..200 other
            (1, False, "host", "aten::add", "cpu_op", 110, 2, 0, None),
            (1, False, "host", "cudaLaunchKernel", "cuda_runtime", 190, 5, 0, 4),
            (7, True, "compute", "k4", "kernel", 200, 10, 0, 4),
            # K5 [400, 410) launched over [220, 225) by a thread busy over [210, 220): the device
            # waited on the host until 225 + 20 µs of launch latency = 35 µs of the gap 210..400;
            # the 155 µs K5 then sat in its queue are other (a dependency, not the host)
            (1, False, "host", "aten::mul", "cpu_op", 210, 10, 0, None),
            (1, False, "host", "cudaLaunchKernel", "cuda_runtime", 220, 5, 0, 5),
            (7, True, "compute", "k5", "kernel", 400, 10, 0, 5),
        ]
    )
    bd, ops = breakdown_tables(ev, _RANKS, barrier=empty_barrier(), host=_host(ev))
    r = _row(bd)
    assert (r["idle_host_ns"], r["idle_sync_ns"], r["idle_other_ns"]) == (75 * US, 20 * US, 272 * US)
    assert (r["n_host_gaps"], r["n_host_gaps_short"]) == (2, 1)  # K2 runs 3 µs, under 5
    assert sum(r[c] for c in PARTS) == r["step_time_ns"] == 410 * US
    assert ops.select("cause", "name", "ns").rows() == [
        ("host", "cudaLaunchKernel", 75 * US),
        ("sync", "cudaStreamSynchronize", 20 * US),
    ]
