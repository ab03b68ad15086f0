"""Ingest speed of the Ascend and Nsight Systems readers, each against a baseline timed in the same run.

Usage:  python benchmarks/ingest_formats.py [--size-mb 100] [--workdir DIR]

* Ascend: a generated torch_npu rank folder (trace_view.json with Python / CANN / Ascend Hardware /
  Communication / Overlap Analysis processes and their flow arrows, plus kernel_details.csv and
  communication.json); ``read_ascend`` against a ``json.load`` + per-event loop (what a plain
  Python reader costs) and against ``read_kineto`` on the same timeline (the price of the Ascend
  layer: roles, launch links, companions).
* nsys: a generated SQLite export (kernels, runtime calls, NVTX ranges, memcpys, StringIds);
  ``read_nsys`` against ``SELECT *`` + ``fetchall`` of the same tables (the floor of any
  sqlite3-based reader).

``bench_formats(workdir)`` returns one row per format — {format, mb, seconds, mb_per_s, baseline,
baseline_seconds} — and is called by ``benchmarks/ingest.py``; run alone, this prints a table.
Generated inputs are kept in the work directory and reused.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import random
import sqlite3
import tempfile
import time
from pathlib import Path

_PY, _CANN, _HW, _HCCL, _OV = 437675, 43767502, 800, 900, 4376751100
_KERNELS = [
    "aclnnGroupedMatmul_GroupedMatmul_GroupedMatmul",
    "aclnnFusedInferAttentionScore_FIA_FIA",
    "aclnnMoeDistributeDispatch_MoeDistributeDispatch",
    "aclnnMoeDistributeCombine_MoeDistributeCombine",
    "aclnnAdd_AddAiCore_Add",
    "aclnnRmsNorm_RmsNorm_RmsNorm",
    "aclnnMatmul_MatMulV3Common_MatMulV3",
]


def generate_ascend(folder: Path, size_mb: float, seed: int = 0) -> Path:
    """A torch_npu rank folder of about ``size_mb`` MB; returns its trace_view.json."""
    out = folder / "dp0_pp0_tp0_ep0_rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    timeline = out / "trace_view.json"
    rng = random.Random(seed)
    parts: list[str] = []
    kd_rows: list[list[str]] = []
    comm: dict[str, dict] = {}
    written, t, i = 0, 1_704_161_511_000_000.0, 0
    target = size_mb * 1e6
    while written < target:
        name = _KERNELS[i % len(_KERNELS)]
        op = name.split("_")[0]
        dur = rng.uniform(5, 400)
        dev_t = t + 40
        ev = [
            {
                "ph": "X",
                "name": f"aten::{op}",
                "pid": _PY,
                "tid": _PY,
                "ts": f"{t:.3f}",
                "dur": 30.0,
                "cat": "cpu_op",
                "args": {"Sequence number": i, "Fwd thread id": 0},
            },
            {
                "ph": "X",
                "name": op,
                "pid": _PY,
                "tid": _PY,
                "ts": f"{t + 2:.3f}",
                "dur": 20.0,
                "cat": "cpu_op",
                "args": {},
            },
            {
                "ph": "X",
                "name": "Enqueue",
                "pid": _PY,
                "tid": _PY,
                "ts": f"{t + 3:.3f}",
                "dur": 5.0,
                "cat": "enqueue",
                "args": {"correlation_id": i},
            },
            {
                "ph": "X",
                "name": f"Dequeue@{op}",
                "pid": _PY,
                "tid": _PY + 1,
                "ts": f"{t + 9:.3f}",
                "dur": 25.0,
                "cat": "dequeue",
                "args": {"correlation_id": i},
            },
            {
                "ph": "X",
                "name": f"AscendCL@{op}",
                "pid": _CANN,
                "tid": _PY + 1,
                "ts": f"{t + 10:.3f}",
                "dur": 20.0,
                "args": {"Thread Id": _PY + 1, "Mode": "ACL_RTS", "connection_id": i},
            },
            {
                "ph": "X",
                "name": name,
                "pid": _HW,
                "tid": 2 + i % 2,
                "ts": f"{dev_t:.3f}",
                "dur": round(dur, 3),
                "args": {
                    "Model Id": 4294967295,
                    "Task Type": "AI_CORE",
                    "Stream Id": 2 + i % 2,
                    "Task Id": i,
                    "connection_id": i,
                },
            },
            {
                "ph": "X",
                "name": "Computing",
                "pid": _OV,
                "tid": 0,
                "ts": f"{dev_t:.3f}",
                "dur": round(dur, 3),
            },
            {
                "ph": "s",
                "bp": "e",
                "name": "HostToDevice",
                "id": str((i << 32) | 0xFFFFFFFF),
                "pid": _CANN,
                "tid": _PY + 1,
                "ts": f"{t + 15:.3f}",
                "cat": "HostToDevice",
            },
            {
                "ph": "f",
                "bp": "e",
                "name": "HostToDevice",
                "id": str((i << 32) | 0xFFFFFFFF),
                "pid": _HW,
                "tid": 2 + i % 2,
                "ts": f"{dev_t:.3f}",
                "cat": "HostToDevice",
            },
            {
                "ph": "s",
                "bp": "e",
                "name": "torch_to_npu",
                "id": i,
                "pid": _PY,
                "tid": _PY,
                "ts": f"{t + 2:.3f}",
                "cat": "async_npu",
            },
            {
                "ph": "f",
                "bp": "e",
                "name": "torch_to_npu",
                "id": i,
                "pid": _HW,
                "tid": 2 + i % 2,
                "ts": f"{dev_t:.3f}",
                "cat": "async_npu",
            },
        ]
        if i % 50 == 0:
            hname = f"hcom_alltoallv__{i}_0_1"
            ev += [
                {"ph": "X", "name": hname, "pid": _HCCL, "tid": 1, "ts": f"{dev_t:.3f}", "dur": 300.0},
                {
                    "ph": "X",
                    "name": "Notify_Wait",
                    "pid": _HCCL,
                    "tid": 2,
                    "ts": f"{dev_t:.3f}",
                    "dur": 200.0,
                },
                {
                    "ph": "X",
                    "name": "RDMASend",
                    "pid": _HCCL,
                    "tid": 2,
                    "ts": f"{dev_t + 200:.3f}",
                    "dur": 90.0,
                },
            ]
            comm[f"{hname}@123"] = {
                "Communication Time Info": {
                    "Start Timestamp(us)": round(dev_t, 3),
                    "Elapse Time(ms)": 0.3,
                    "Transit Time(ms)": 0.09,
                    "Wait Time(ms)": 0.2,
                    "Synchronization Time(ms)": 0.15,
                    "Idle Time(ms)": 0.0,
                }
            }
        kd_rows.append(
            [
                "1",
                "4294967295",
                str(i),
                str(2 + i % 2),
                name,
                op,
                "dynamic",
                "AI_CORE",
                f"{dev_t:.3f}\t",
                f"{dur:.3f}",
                "0",
                "24",
                '"4096,7168;7168,2048"',
                "DT_BF16",
            ]
        )
        chunk = ",\n".join(json.dumps(e) for e in ev)
        parts.append(chunk)
        written += len(chunk) + 2
        t += 60
        i += 1
    meta = [
        {"ph": "M", "name": "process_name", "pid": _PY, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": _CANN, "tid": 0, "args": {"name": "CANN"}},
        {"ph": "M", "name": "process_name", "pid": _HW, "tid": 0, "args": {"name": "Ascend Hardware"}},
        {"ph": "M", "name": "process_labels", "pid": _HW, "tid": 0, "args": {"labels": "NPU"}},
        {"ph": "M", "name": "process_name", "pid": _HCCL, "tid": 0, "args": {"name": "Communication"}},
        {
            "ph": "M",
            "name": "thread_name",
            "pid": _HCCL,
            "tid": 1,
            "args": {"name": "Group 123 Communication"},
        },
        {"ph": "M", "name": "thread_name", "pid": _HCCL, "tid": 2, "args": {"name": "Plane 0"}},
        {"ph": "M", "name": "process_name", "pid": _OV, "tid": 0, "args": {"name": "Overlap Analysis"}},
    ]
    half = len(parts) // 2  # torch_npu writes the process names in the middle of the file
    body = [*parts[:half], ",\n".join(json.dumps(m) for m in meta), *parts[half:]]
    timeline.write_text("[\n" + ",\n".join(body) + "\n]\n")
    with open(out / "kernel_details.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "Step Id",
                "Model ID",
                "Task ID",
                "Stream ID",
                "Name",
                "Type",
                "OP State",
                "Accelerator Core",
                "Start Time(us)",
                "Duration(us)",
                "Wait Time(us)",
                "Block Dim",
                "Input Shapes",
                "Input Data Types",
            ]
        )
        w.writerows(kd_rows)
    (out / "communication.json").write_text(json.dumps({"step": {"collective": comm, "p2p": {}}}))
    return timeline


def generate_nsys(path: Path, size_mb: float, seed: int = 0) -> Path:
    """An nsys-style SQLite export of about ``size_mb`` MB."""
    rng = random.Random(seed)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
            globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
            gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,
            registersPerThread INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
            eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
            returnValue INTEGER NOT NULL, callchainId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
            globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
            rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
            textId INTEGER, domainId INTEGER, jsonText TEXT);
    """)
    names = [
        "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)",
        "void deep_ep::internode::dispatch<8, 4>(int4*, float*)",
        "fused_moe_kernel",
        "void deep_ep::internode::combine<8, 4>(int4*, float*)",
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
    ]
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(names)))
    conn.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
        [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", "3.11.1")],
    )
    gtid = (1 << 56) | (4242 << 24) | 4242
    n = int(size_mb * 1e6 / 130)  # ≈ bytes per kernel + its launch, measured on this layout
    t = 1_000_000

    def kernels():
        for i in range(n):
            k = i % 4
            yield (
                t + i * 5000 + 800,
                t + i * 5000 + 800 + rng.randint(500, 4000),
                0,
                1,
                7 + (k % 2),
                i,
                4242,
                k,
                k,
                None,
                128,
                1,
                1,
                256,
                1,
                1,
                64,
                0,
                4096,
            )

    def launches():
        for i in range(n):
            yield t + i * 5000, t + i * 5000 + 600, 67, gtid, i, 4, 0, None

    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (" + ",".join("?" * 19) + ")", kernels())
    conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)", launches())
    conn.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?)",
        (
            (t + i * 500_000, t + i * 500_000 + 9000, 0, 1, 7, n + i, 4242, 1 << 20, 1)
            for i in range(n // 100)
        ),
    )
    conn.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES "
        "(?, ?, 59, ?, ?, 0)",
        ((t + i * 50_000, t + (i + 1) * 50_000 - 10, f"layer#{i % 61}", gtid) for i in range(n // 10)),
    )
    conn.commit()
    conn.close()
    return path


def _time(fn) -> tuple[float, object]:
    gc.collect()
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _json_loop(path: Path) -> int:
    with open(path) as f:
        doc = json.load(f)
    rows = []
    for e in doc:
        if e.get("ph") == "X":
            rows.append(
                (e["name"], e["pid"], e["tid"], int(float(e["ts"]) * 1000), int(float(e["dur"]) * 1000))
            )
    return len(rows)


def _fetch_all(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    n = 0
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "NVTX_EVENTS",
        "StringIds",
    ):
        n += len(conn.execute(f"SELECT * FROM {table}").fetchall())
    conn.close()
    return n


def bench_formats(workdir: Path, size_mb: float = 100) -> list[dict]:
    """Generate (once) and time the Ascend and nsys readers; one row per format."""
    from asaptrace.ingest.ascend import read_ascend
    from asaptrace.ingest.kineto import read_kineto
    from asaptrace.ingest.nsys import read_nsys

    workdir = Path(workdir)
    asc_dir = workdir / f"ascend-{size_mb:g}mb"
    timeline = asc_dir / "dp0_pp0_tp0_ep0_rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    if not timeline.exists():
        generate_ascend(asc_dir, size_mb)
    db = workdir / f"nsys-{size_mb:g}mb.sqlite"
    if not db.exists():
        generate_nsys(db, size_mb)
    rows = []
    asc_mb = sum(p.stat().st_size for p in timeline.parent.iterdir()) / 1e6
    sec, result = _time(lambda: read_ascend(timeline))
    base, _ = _time(lambda: _json_loop(timeline))
    kin, _ = _time(lambda: read_kineto(timeline))
    rows.append(
        {
            "format": "ascend",
            "mb": asc_mb,
            "seconds": sec,
            "mb_per_s": asc_mb / sec,
            "events": result.accounting.read,
            "baseline": "json.load + per-event loop",
            "baseline_seconds": base,
            "kineto_reader_seconds": kin,
        }
    )
    del result
    nsys_mb = db.stat().st_size / 1e6
    sec, result = _time(lambda: read_nsys(db))
    base, _ = _time(lambda: _fetch_all(db))
    rows.append(
        {
            "format": "nsys",
            "mb": nsys_mb,
            "seconds": sec,
            "mb_per_s": nsys_mb / sec,
            "events": result.accounting.read,
            "baseline": "sqlite3 SELECT * + fetchall",
            "baseline_seconds": base,
        }
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-bench-formats-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = bench_formats(work, args.size_mb)
    print(
        f"{'format':8s} {'MB':>7s} {'events':>10s} {'s':>7s} {'MB/s':>7s}   baseline (same input, same run)"
    )
    for r in rows:
        extra = (
            f"{r['baseline']}: {r['baseline_seconds']:.2f} s → {r['baseline_seconds'] / r['seconds']:.2f}x"
        )
        if "kineto_reader_seconds" in r:
            extra += (
                f"; Kineto reader alone: {r['kineto_reader_seconds']:.2f} s "
                f"(Ascend layer costs {r['seconds'] / r['kineto_reader_seconds']:.2f}x)"
            )
        print(
            f"{r['format']:8s} {r['mb']:7.0f} {r['events']:10,d} {r['seconds']:7.2f} {r['mb_per_s']:7.0f}   {extra}"
        )


if __name__ == "__main__":
    main()
