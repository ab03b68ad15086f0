"""Builders of small Ascend (torch_npu) folders and nsys SQLite exports for the ingest tests."""

from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------- Ascend

PY, CANN, HW, HCCL, OVERLAP = 1000, 1001, 800, 900, 4000000000  # pids (the last does not fit int32)


def meta(pid: int, process: str, threads: dict[int, str], label: str = "CPU") -> list[dict]:
    """``M`` events naming a process and its threads, as torch_npu writes them."""
    out = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}},
    ]
    out += [
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": t, "args": {"name": n}}
        for t, n in threads.items()
    ]
    return out


def span(name: str, pid: int, tid: int, ts: str, dur: float, cat: str | None = None, **args: Any) -> dict:
    """A complete event with ``ts`` as a decimal string in µs (torch_npu's way)."""
    e: dict[str, Any] = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    if cat is not None:
        e["cat"] = cat
    return e


def flow(ph: str, cat: str, fid: Any, pid: int, tid: int, ts: str) -> dict:
    return {"ph": ph, "bp": "e", "name": cat, "cat": cat, "id": fid, "pid": pid, "tid": tid, "ts": ts}


def standard_meta() -> list[dict]:
    return [
        *meta(PY, "Python", {PY: "Thread 1000"}),
        *meta(CANN, "CANN", {PY: "Thread 1000"}),
        *meta(HW, "Ascend Hardware", {3: "Stream 3", 5: "Stream 5"}, label="NPU"),
        *meta(HCCL, "Communication", {1: "Group hccl_world_group Communication", 2: "Plane 0"}, label="NPU"),
        *meta(OVERLAP, "Overlap Analysis", {0: "Computing", 1: "Communication", 3: "Free"}, label="NPU"),
    ]


def write_json(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


KD_HEADER = [
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


def kd_row(
    name: str,
    start_us: str,
    dur_us: str,
    *,
    stream: int = 3,
    op_type: str = "MatMulV2",
    shapes: str = '"8192,512"',
    core: str = "AI_CORE",
) -> list[str]:
    """A kernel_details.csv row; the start time gets torch_npu's trailing tab."""
    return [
        "1",
        "4294967295",
        "1",
        str(stream),
        name,
        op_type,
        "dynamic",
        core,
        f"{start_us}\t",
        dur_us,
        "0",
        "16",
        shapes,
        "DT_BF16",
    ]


def write_kernel_details(
    path: Path, rows: list[list[str]], header: list[str] | None = None, extra_lines: list[str] = ()
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(header or KD_HEADER)
        w.writerows(rows)
        for line in extra_lines:
            f.write(line + "\n")
    return path


def comm_op(
    start_us: float | None, elapse_ms: float, transit_ms: float, wait_ms: float, sync_ms: float
) -> dict:
    info = {
        "Elapse Time(ms)": elapse_ms,
        "Transit Time(ms)": transit_ms,
        "Wait Time(ms)": wait_ms,
        "Synchronization Time(ms)": sync_ms,
        "Idle Time(ms)": 0,
    }
    if start_us is not None:
        info["Start Timestamp(us)"] = start_us
    return {
        "Communication Time Info": info,
        "Communication Bandwidth Info": {"HCCS": {"Transit Size(MB)": 4.0, "Transit Time(ms)": transit_ms}},
    }


def rank_folder(
    root: Path,
    name: str,
    events: list[dict],
    *,
    kernel_details: list[list[str]] | None = None,
    communication: dict | None = None,
) -> Path:
    """``root/name/ASCEND_PROFILER_OUTPUT/trace_view.json`` (+ companions); returns the timeline path."""
    out = root / name / "ASCEND_PROFILER_OUTPUT"
    timeline = write_json(out / "trace_view.json", events)
    if kernel_details is not None:
        write_kernel_details(out / "kernel_details.csv", kernel_details)
    if communication is not None:
        write_json(out / "communication.json", communication)
    return timeline


# ---------------------------------------------------------------- nsys

_KERNEL_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
    "streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
)


def global_tid(pid: int, tid: int) -> int:
    """nsys' serialized globalTid for an OS (pid, tid)."""
    return (1 << 56) | (pid << 24) | tid


def nsys_db(
    path: Path,
    *,
    strings: dict[int, str],
    kernels: list[tuple] = (),
    runtime: list[tuple] = (),
    nvtx: list[tuple] = (),
    memcpy: list[tuple] = (),
    version: str | None = "3.11.1",
    meta_table: str = "META_DATA_EXPORT",
    name_column: str = "shortName",
    env: str | None = None,
    enum_types: dict[str, int] | None = None,
) -> Path:
    """A minimal nsys export.

    kernels: (start, end, deviceId, streamId, correlationId, name string id);
    runtime: (start, end, globalTid, correlationId, name string id);
    nvtx: (start, end, eventType, text, textId, globalTid, domainId);
    memcpy: (start, end, deviceId, streamId, correlationId, copyKind).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", sorted(strings.items()))
    if version is not None:
        conn.execute(f"CREATE TABLE {meta_table} (name TEXT NOT NULL, value TEXT)")
        conn.executemany(
            f"INSERT INTO {meta_table} VALUES (?, ?)",
            [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", version)],
        )
    conn.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({_KERNEL_COLS}{name_column} INTEGER NOT NULL)")
    conn.executemany(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, "
        f"{name_column}) VALUES (?, ?, ?, ?, ?, ?)",
        kernels,
    )
    conn.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY ({_KERNEL_COLS}bytes INTEGER, copyKind INTEGER)")
    conn.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, "
        "copyKind) VALUES (?, ?, ?, ?, ?, ?)",
        memcpy,
    )
    conn.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, "
        "eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL)"
    )
    conn.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) "
        "VALUES (?, ?, ?, ?, ?)",
        runtime,
    )
    conn.execute(
        "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, "
        "text TEXT, textId INTEGER, globalTid INTEGER, domainId INTEGER, jsonText TEXT)"
    )
    conn.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        nvtx,
    )
    if env is not None:
        conn.execute(
            "CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, "
            "nameEnum INTEGER, value TEXT)"
        )
        conn.execute(
            "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local', 'DeviceEnvironment', 610, ?)", (env,)
        )
    if enum_types is not None:
        conn.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        conn.executemany(
            "INSERT INTO ENUM_NSYS_EVENT_TYPE (id, name) VALUES (?, ?)",
            [(v, k) for k, v in enum_types.items()],
        )
    conn.commit()
    conn.close()
    return path
