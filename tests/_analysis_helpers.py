"""Builders of small hand-worked traces for the enrich/analyze tests.

Traces are written as real Kineto JSON files (one per rank) and ingested with the real ingester,
so the tests exercise the whole path a user's trace takes. Times are whole µs in the files.

The reference scenario (:func:`moe_scenario`) is worked out by hand in its docstring; tests state
the numbers they expect from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asaptrace.ingest.driver import ingest_paths
from asaptrace.store import TraceStore

DISPATCH = "void deep_ep::internode::dispatch<true, 4, 2, 32, 8>(int4*, float*)"
NOTIFY = "void deep_ep::internode::notify_dispatch<true, 32>(int const*, int*)"
COMBINE = "void deep_ep::internode::combine<__nv_bfloat16, 4, 2, 32, 8>(int4*, float*)"
ATTENTION = "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576>>(Flash_fwd_mla_params)"
MOE = "void deep_gemm::fp8_gemm_kernel<deep_gemm::m_grouped_gemm_contiguous>(__nv_bfloat16*)"
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>(Params)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMPUTE_STREAM, COMM_STREAM = 7, 20
HOST_PID = 4242


@dataclass
class RankTrace:
    """Events of one rank, built up by the helpers below; ``offset_us`` shifts every time written."""

    rank: int
    world: int
    offset_us: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 1

    def kernel(
        self,
        name: str,
        ts: int,
        dur: int,
        *,
        stream: int = COMPUTE_STREAM,
        launch_at: int | None = None,
        cat: str = "kernel",
    ) -> None:
        """A device kernel; with ``launch_at`` also its host cudaLaunchKernel (same correlation id)."""
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.rank % 8,
            "tid": stream,
            "ts": ts + self.offset_us,
            "dur": dur,
            "args": {"stream": stream},
        }
        if launch_at is not None:
            corr = self._corr
            self._corr += 1
            ev["args"]["correlation"] = corr
            self.events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": HOST_PID,
                    "tid": HOST_PID,
                    "ts": launch_at + self.offset_us,
                    "dur": 1,
                    "args": {"correlation": corr},
                }
            )
        self.events.append(ev)

    def annotation(
        self,
        name: str,
        ts: int,
        dur: int,
        args: dict[str, Any] | None = None,
        *,
        device: bool = False,
        stream: int = COMPUTE_STREAM,
    ) -> None:
        """A ``user_annotation`` span on the host thread (or its ``gpu_user_annotation`` device copy)."""
        self.events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation" if device else "user_annotation",
                "name": name,
                "pid": self.rank % 8 if device else HOST_PID,
                "tid": stream if device else HOST_PID,
                "ts": ts + self.offset_us,
                "dur": dur,
                "args": dict(args or {}),
            }
        )

    def document(self) -> dict[str, Any]:
        meta = [
            {"name": "process_labels", "ph": "M", "pid": HOST_PID, "tid": 0, "args": {"labels": "CPU"}},
            {
                "name": "process_labels",
                "ph": "M",
                "pid": self.rank % 8,
                "tid": 0,
                "args": {"labels": f"GPU {self.rank % 8}"},
            },
        ]
        return {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": self.rank, "world_size": self.world},
            "traceEvents": meta + self.events,
        }


def write_traces(directory: Path, traces: list[RankTrace]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for t in traces:
        (directory / f"rank{t.rank}.pt.trace.json").write_text(json.dumps(t.document()))
    return directory


def ingest(directory: Path, out: Path) -> TraceStore:
    """Raw ingest (no enrichment), one process."""
    return ingest_paths([directory], out, jobs=1)


# ------------------------------------------------------------------------------------- the scenario
#: Per-rank attention and MoE kernel durations (µs) of :func:`moe_scenario`.
ATTN_US = (100, 100, 300, 280)
MOE_US = (50, 50, 50, 90)
DISPATCH_TRANSFER_US, COMBINE_TRANSFER_US = 20, 10
LAYER_START_US = (0, 430)  # layer 1 starts after a 10 µs host gap

#: Expected waits (µs) per rank, worked out in :func:`moe_scenario`'s docstring.
EXPECTED_DISPATCH_WAIT_US = (200, 200, 0, 20)
EXPECTED_COMBINE_WAIT_US = (40, 40, 40, 0)


def moe_scenario(
    *,
    annotations: bool = True,
    offsets_us: tuple[int, ...] = (0, 0, 0, 0),
    seq_lens: dict[int, list[int]] | None = None,
) -> list[RankTrace]:
    """Four ranks (DP groups {0, 1} and {2, 3}, TP2), one prefill step, two MoE layers, DeepEP names.

    Per layer each rank runs attention (ATTN_US) on stream 7, dispatch on stream 20 from the end of
    its attention until release + 20 µs, MoE (MOE_US) from the end of the dispatch, combine from
    the end of its MoE until release + 10 µs. Worked out by hand (µs):

    layer 0 (starts at 0): dispatch arrivals 100, 100, 300, 280 → release 300, all end at 320;
      waits 200, 200, 0, 20. MoE ends 370, 370, 370, 410 → combine release 410, ends 420;
      waits 40, 40, 40, 0.
    layer 1 (starts at 430, a 10 µs idle gap): dispatch arrivals 530, 530, 730, 710 → release 730,
      ends 750; waits 200, 200, 0, 20. MoE ends 800, 800, 800, 840 → combine release 840, ends 850;
      waits 40, 40, 40, 0.

    Total waits: ranks 0, 1: 480; rank 2: 80; rank 3: 40. Last arrivals: rank 2 at both dispatches,
    rank 3 at both combines. Step window [0, 850] on every rank; rank 0: compute 300 (attention
    200 + MoE 100), wait 480, transfer 60, idle 10. Rank 3: compute 740, wait 40, transfer 60,
    idle 10. DP group 1 is ready last at all 4 instances; the time it alone held the barrier
    (imposed) = 200 + 40 + 200 + 40 = 480; the waits of group 0's ranks it caused = 2 × 480 = 960.
    """
    world = 4
    traces = [RankTrace(r, world, offsets_us[r]) for r in range(world)]
    for layer, t0 in enumerate(LAYER_START_US):
        arrive = [t0 + ATTN_US[r] for r in range(world)]
        d_end = max(arrive) + DISPATCH_TRANSFER_US
        moe_end = [d_end + MOE_US[r] for r in range(world)]
        c_end = max(moe_end) + COMBINE_TRANSFER_US
        for r, t in enumerate(traces):
            host = t0 - 5  # host launches run ahead of the device
            kernels = [
                (ATTENTION, t0, ATTN_US[r], COMPUTE_STREAM),
                (DISPATCH, arrive[r], d_end - arrive[r], COMM_STREAM),
                (MOE, d_end, MOE_US[r], COMPUTE_STREAM),
                (COMBINE, moe_end[r], c_end - moe_end[r], COMM_STREAM),
            ]
            for k, (name, ts, dur, stream) in enumerate(kernels):
                t.kernel(name, ts, dur, stream=stream, launch_at=host + k if annotations else None)
            if annotations:
                t.annotation(f"layer#{layer}", host, 4, {"step": 0, "layer": layer, "micro_batch": 0})
    if annotations:
        for r, t in enumerate(traces):
            args: dict[str, Any] = {"step": 0, "dp_group": r // 2}
            if seq_lens is not None:
                args["seq_lens"] = seq_lens[r // 2]
            t.annotation("prefill_step#0", -10, 900, args)
    return traces


def check_one_meaning(tables: dict, events=None) -> None:
    """One meaning of *exposed* (docs/analyses/findings.md), per rank of a Diagnosis:
    Σ over steps of the breakdown's exposed transfer ≤ overlap's exposed communication ≤ its
    communication; and every nanosecond once (DOMAIN §9): the breakdown's parts sum to each step's
    time, a rank's windows never overlap and add up to its device span, and its compute is the
    time some kernel that is neither communication nor a copy runs — from ``events`` (when given)
    recomputed here, so a memcpy counted as compute anywhere breaks it. Raises AssertionError
    naming the rank and the numbers."""
    import polars as pl

    bd = tables["step_breakdown"]
    transfer = bd.group_by("rank").agg(pl.col("transfer_ns").sum())
    ov = tables["overlap_by_rank"].select(pl.col("rank").cast(pl.Int64), "exposed_comm_ns", "comm_ns")
    both = ov.join(transfer.with_columns(pl.col("rank").cast(pl.Int64)), on="rank", how="full", coalesce=True)
    for r in both.fill_null(0).iter_rows(named=True):
        assert r["transfer_ns"] <= r["exposed_comm_ns"] <= r["comm_ns"], (
            f"rank {r['rank']}: exposed transfer {r['transfer_ns']} ns, exposed communication "
            f"{r['exposed_comm_ns']} ns, communication {r['comm_ns']} ns"
        )
    check_every_nanosecond_once(bd, tables["overlap_by_rank"], events)


_PARTS = ("compute_ns", "copy_ns", "transfer_ns", "wait_ns", "idle_host_ns", "idle_sync_ns", "idle_other_ns")
_NOT_COMPUTE = ("annotation", "dispatch", "combine", "collective", "memcpy")
_COPY_CATS = ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "Memcpy_async")


def check_every_nanosecond_once(bd, overlap, events=None) -> None:
    """The identities of DOMAIN §9 on a step breakdown (see :func:`check_one_meaning`)."""
    import numpy as np
    import polars as pl

    for r in bd.iter_rows(named=True):
        parts = sum(r[c] for c in _PARTS)
        assert parts == r["step_time_ns"], (
            f"rank {r['rank']} step {r['step']}: parts {parts} != {r['step_time_ns']}"
        )
    for (rank,), w in bd.sort("start_ns").group_by("rank", maintain_order=True):
        starts, ends = w["start_ns"].to_list(), w["end_ns"].to_list()
        overlaps = [(a, b) for a, b in zip(ends[:-1], starts[1:], strict=True) if a > b]
        assert not overlaps, f"rank {rank}: step windows overlap (end, next start): {overlaps[:3]}"
    spans = {r["rank"]: r for r in overlap.iter_rows(named=True)}
    sums = bd.group_by("rank").agg(pl.col("step_time_ns").sum(), pl.col("compute_ns").sum())
    for r in sums.iter_rows(named=True):
        o = spans[r["rank"]]
        assert r["step_time_ns"] == o["span_ns"], (
            f"rank {r['rank']}: Σ step time {r['step_time_ns']} != span {o['span_ns']}"
        )
        assert r["compute_ns"] == o["compute_ns"], (
            f"rank {r['rank']}: Σ compute {r['compute_ns']} != {o['compute_ns']}"
        )
    if events is None:
        return
    ev = events.lazy() if isinstance(events, pl.DataFrame) else events
    kern = (
        ev.filter(
            pl.col("is_device")
            & ~pl.col("kind").cast(pl.String).is_in(_NOT_COMPUTE)
            & ~pl.col("cat").cast(pl.String).fill_null("").is_in(_COPY_CATS)
        )
        .select("rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
        .collect()
    )
    computed = {r: 0 for r in sums["rank"].to_list()}
    for (rank,), k in kern.group_by("rank"):
        order = np.argsort(k["ts_ns"].to_numpy(), kind="stable")
        s, e = k["ts_ns"].to_numpy()[order], k["end"].to_numpy()[order]
        reach = np.maximum.accumulate(e)
        new = np.r_[True, s[1:] > reach[:-1]]  # a merged piece starts where nothing before reaches
        first = np.flatnonzero(new)
        last = np.r_[first[1:], len(s)] - 1
        computed[rank] = int((reach[last] - s[first]).sum())
    for r in sums.iter_rows(named=True):
        assert r["compute_ns"] == computed.get(r["rank"], 0), (
            f"rank {r['rank']}: Σ compute {r['compute_ns']} != time a non-copy, non-communication kernel "
            f"runs {computed.get(r['rank'], 0)} (a copy or communication counted as compute?)"
        )
