"""Nsight Systems ``nsys export --type sqlite`` databases → canonical tables.

Read (each row counted in the accounting): ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET``
(device work: pid = deviceId, stream = streamId, times in ns, kernel names through the strings
table, preferring the full demangled name as Kineto does), ``CUPTI_ACTIVITY_KIND_RUNTIME`` (CUDA API
calls on their host thread; ``correlationId`` → ``corr``, the same value as the kernel they launched)
and ``NVTX_EVENTS`` (push/pop and start/end ranges → ``annotation`` spans, marks → instants; domain,
category and thread-naming records are metadata). Other tables are not read; the row counts of
unread ``CUPTI_ACTIVITY_KIND_*`` tables are listed in the notes.

Host ids come from nsys' serialized ``globalTid``: pid = (globalTid >> 24) & 0xFFFFFF, thread id =
globalTid & 0xFFFFFF. Times are shifted by ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` when the
export has it, so that files of different ranks start on a common (wall-clock) base as Kineto's do.
The rank comes from an NVTX thread name such as ``MPI Rank 3`` (nsys' MPI tracing writes it), then
from the launch environment the export records (``RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``,
``SLURM_PROCID``), else the driver uses the file name or a mapping.

The database is opened read-only and immutable; tables and columns are probed
(:mod:`.schema`), an unknown export schema major version or a SQLite file that is not an nsys
export is a one-line error.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace, UnsupportedFormat
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, register_format
from asaptrace.ingest.nsys.events import EventReader
from asaptrace.ingest.nsys.rank import environment, rank_info
from asaptrace.ingest.nsys.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    READ_TABLES,
    SQLITE_MAGIC,
    NsysSchema,
    check_supported,
    connect,
    probe,
)
from asaptrace.ingest.nsys.streams import streams_table
from asaptrace.ingest.nsys.strings import StringTable
from asaptrace.schema import ARGS_SCHEMA, EVENTS_SCHEMA, FLOWS_SCHEMA, Kind

FORMAT_NAME = "nsys"


def sniff(path: Path, head: bytes) -> bool:
    """A SQLite database (magic bytes on disk) whose tables are those of an nsys export."""
    if not head.startswith(SQLITE_MAGIC):
        return False
    try:
        with open(path, "rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False  # compressed: SQLite cannot open it in place
        conn = connect(path)
    except Exception:  # a sniffer answers yes or no, it never raises
        return False
    try:
        return probe(conn, path).is_nsys
    except Exception:
        return False
    finally:
        conn.close()


def read_nsys(path: str | Path, options: IngestOptions | None = None) -> IngestResult:
    """Read one nsys SQLite export into canonical tables (rank column = -1; the driver fills it)."""
    del options  # nothing is decompressed: the size cap does not apply to a database read in place
    path = Path(path)
    with open(path, "rb") as f:
        if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise UnsupportedFormat(
                "not a SQLite database (an nsys report must be exported with 'nsys export --type sqlite')",
                path=path,
            )
    conn = connect(path)
    try:
        return _read(conn, path)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # a damaged page's error text may not decode
        raise CorruptTrace(f"cannot read the SQLite database ({err})", path=path) from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path) -> IngestResult:
    schema = probe(conn, path)
    check_supported(schema, path)
    strings = StringTable(conn, schema)
    base_ns = _session_start(conn, schema)
    reader = EventReader(conn, schema, strings, path, base_ns)
    reader.device(KERNEL, Kind.COMPUTE.value, "kernel")
    reader.device(MEMCPY, Kind.MEMCPY.value, "gpu_memcpy")
    reader.device(MEMSET, Kind.MEMCPY.value, "gpu_memset")
    reader.runtime()
    reader.nvtx()
    events = pa.concat_tables(reader.parts) if reader.parts else EVENTS_SCHEMA.empty_table()
    acc = Accounting(read=reader.read, kept=reader.kept, rejected=reader.rejected).check(str(path))
    env = environment(conn, schema)
    info = rank_info(reader.thread_names, env, events)
    unread = {
        t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0])
        for t in sorted(schema.tables)
        if t.startswith("CUPTI_ACTIVITY_KIND_") and t not in READ_TABLES
    }
    return IngestResult(
        path=str(path),
        format=FORMAT_NAME,
        events=events,
        args=args_table(reader.args),
        flows=FLOWS_SCHEMA.empty_table(),
        streams=streams_table(conn, schema, strings, events, reader.thread_names),
        accounting=acc,
        rank_info=info,
        notes={
            "export_schema_version": schema.version,
            "time_base_ns": base_ns or None,
            "unread_tables": {t: n for t, n in unread.items() if n},
        },
    )


def _session_start(conn: sqlite3.Connection, schema: NsysSchema) -> int:
    """The session's wall-clock start (ns) when the export has it, else 0: the base every time is shifted by."""
    if not schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        return 0
    row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else 0


def args_table(rows: list[dict[str, Any]]) -> pa.Table:
    """The args rows the NVTX ranges carry (domain, annotation keys), other columns null."""
    full = [{name: None for name in ARGS_SCHEMA.names} | {"rank": -1} | r for r in rows]
    return pa.Table.from_pylist(full, schema=ARGS_SCHEMA)


NSYS = register_format(
    Format(
        name=FORMAT_NAME,
        priority=10,
        sniff=sniff,
        suffixes=(".sqlite", ".db"),
        read=read_nsys,
        description="Nsight Systems SQLite export (nsys export --type sqlite)",
    )
)
