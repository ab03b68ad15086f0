"""The streams table of an nsys export: one row per (pid, stream) the kept events use.

Why a module: nsys has no Kineto-style metadata events; names come from ``TARGET_INFO_GPU``,
``PROCESSES``, ``ThreadNames`` and NVTX thread names, and GPU streams are named as Kineto names
them so that stores from both formats read alike.
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from asaptrace.ingest import columns as col
from asaptrace.ingest.nsys.schema import NsysSchema
from asaptrace.ingest.nsys.strings import StringTable
from asaptrace.schema import STREAMS_SCHEMA


def streams_table(
    conn: sqlite3.Connection,
    schema: NsysSchema,
    strings: StringTable,
    events: pa.Table,
    nvtx_threads: dict[int, str],
) -> pa.Table:
    """One row per (pid, stream): GPU streams named like Kineto's, host threads by their OS names."""
    gpu_names: dict[int, str] = {}
    if schema.has("TARGET_INFO_GPU", "id", "name"):
        gpu_names = {
            i: n for i, n in conn.execute("SELECT id, name FROM TARGET_INFO_GPU") if isinstance(i, int)
        }
    procs: dict[int, str] = {}
    if schema.has("PROCESSES", "pid", "name"):
        procs = {p: n for p, n in conn.execute("SELECT pid, name FROM PROCESSES") if isinstance(p, int)}
    threads: dict[int, str] = {}
    if schema.has("ThreadNames", "nameId", "globalTid") and schema.strings:
        rows = conn.execute("SELECT globalTid, nameId FROM ThreadNames").fetchall()
        names = strings.lookup(col.ints([r[1] for r in rows])).to_pylist()
        threads = {r[0]: n for r, n in zip(rows, names, strict=True) if isinstance(r[0], int) and n}
    threads |= nvtx_threads
    by_thread = {((g >> 24) & 0xFFFFFF, g & 0xFFFFFF): n for g, n in threads.items()}
    out = []
    pairs = (
        events.group_by(["pid", "stream", "is_device"]).aggregate([]).to_pylist() if events.num_rows else []
    )
    for r in sorted(pairs, key=lambda r: (not r["is_device"], r["pid"], r["stream"])):
        pid, stream, dev = r["pid"], r["stream"], r["is_device"]
        out.append(
            {
                "rank": -1,
                "pid": pid,
                "stream": stream,
                "is_device": dev,
                "source_pid": str(pid),
                "source_tid": str(stream),
                "process_name": f"GPU {pid}" if dev else procs.get(pid),
                "process_label": gpu_names.get(pid) if dev else "CPU",
                "thread_name": f"stream {stream}" if dev else by_thread.get((pid, stream)),
            }
        )
    return pa.Table.from_pylist(out, schema=STREAMS_SCHEMA)
