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

import json
import re
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace, UnsupportedFormat
from asaptrace.ingest import columns as col
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, RankInfo, dictionary, register_format
from asaptrace.ingest.nsys.schema import (
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    READ_TABLES,
    RUNTIME,
    SQLITE_MAGIC,
    NsysSchema,
    check_supported,
    connect,
    probe,
    require,
)
from asaptrace.schema import (
    ANNOTATION_ARG_KEYS,
    ARGS_SCHEMA,
    EVENTS_SCHEMA,
    FLOWS_SCHEMA,
    STREAMS_SCHEMA,
    Kind,
)

FORMAT_NAME = "nsys"

#: CUpti_ActivityMemcpyKind → the short label Kineto uses in memcpy names.
COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
#: NVTX event types (ENUM_NSYS_EVENT_TYPE names; ids used when the export has no enum table).
NVTX_RANGE_TYPES = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
}
NVTX_MARK_TYPES = {"NvtxMark": 34}
NVTX_META_TYPES = {"NvtxCategory": 33, "NvtxThread": 39, "NvtxDomainCreate": 75, "NvtxDomainDestroy": 76}
_RANK_IN_NAME = re.compile(r"\brank[\s_-]*(\d+)\b", re.IGNORECASE)
_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_WORLD_ENV = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
_ANNOTATION_KEYS = ANNOTATION_ARG_KEYS


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
    strings = _Strings(conn, schema)
    base_ns = _session_start(conn, schema)
    reader = _Reader(conn, schema, strings, path, base_ns)
    reader.device(KERNEL, Kind.COMPUTE.value, "kernel")
    reader.device(MEMCPY, Kind.MEMCPY.value, "gpu_memcpy")
    reader.device(MEMSET, Kind.MEMCPY.value, "gpu_memset")
    reader.runtime()
    reader.nvtx()
    events = pa.concat_tables(reader.parts) if reader.parts else EVENTS_SCHEMA.empty_table()
    acc = Accounting(read=reader.read, kept=reader.kept, rejected=reader.rejected).check(str(path))
    env = _environment(conn, schema)
    info = _rank_info(reader.thread_names, env, events)
    unread = {
        t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0])
        for t in sorted(schema.tables)
        if t.startswith("CUPTI_ACTIVITY_KIND_") and t not in READ_TABLES
    }
    return IngestResult(
        path=str(path),
        format=FORMAT_NAME,
        events=events,
        args=_args_table(reader.args),
        flows=FLOWS_SCHEMA.empty_table(),
        streams=_streams(conn, schema, strings, events, reader.thread_names),
        accounting=acc,
        rank_info=info,
        notes={
            "export_schema_version": schema.version,
            "time_base_ns": base_ns or None,
            "unread_tables": {t: n for t, n in unread.items() if n},
        },
    )


class _Strings:
    """The export's string table, looked up in bulk (ids → Arrow strings)."""

    def __init__(self, conn: sqlite3.Connection, schema: NsysSchema) -> None:
        table = schema.strings
        rows = conn.execute(f'SELECT id, value FROM "{table}"').fetchall() if table else []
        self.ids = pa.array([r[0] for r in rows], pa.int64())
        self.values = col.strings([r[1] for r in rows])

    def lookup(self, ids: pa.Array) -> pa.Array:
        if len(self.ids) == 0:
            return pa.nulls(len(ids), pa.string())
        return pc.take(self.values, pc.index_in(ids.cast(pa.int64()), value_set=self.ids))


def _session_start(conn: sqlite3.Connection, schema: NsysSchema) -> int:
    if not schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        return 0
    row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else 0


def _column(rows: list[tuple[Any, ...]], i: int) -> list[Any]:
    return [r[i] for r in rows]


class _Reader:
    """Reads the event tables one by one into event parts, counting every row."""

    def __init__(
        self, conn: sqlite3.Connection, schema: NsysSchema, strings: _Strings, path: Path, base_ns: int
    ) -> None:
        self.conn, self.schema, self.strings, self.path, self.base_ns = conn, schema, strings, path, base_ns
        self.read = 0
        self.kept: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.parts: list[pa.Table] = []
        self.args: list[dict[str, Any]] = []
        self.thread_names: dict[int, str] = {}  # globalTid → name

    def _select(self, table: str, exprs: list[str]) -> list[tuple[Any, ...]]:
        return self.conn.execute(f'SELECT {", ".join(exprs)} FROM "{table}"').fetchall()

    def _opt(self, table: str, column: str) -> str:
        return f'"{column}"' if column in self.schema.tables[table] else "NULL"

    def device(self, table: str, kind: str, cat: str) -> None:
        if table not in self.schema.tables:
            return
        require(self.schema, table, ("start", "end", "deviceId", "streamId"), self.path)
        name_col = self.schema.first(table, "demangledName", "shortName", "mangledName", "name")
        extra_col = {KERNEL: name_col, MEMCPY: self.schema.first(table, "copyKind")}.get(table)
        rows = self._select(
            table,
            [
                "start",
                '"end"',
                "deviceId",
                "streamId",
                self._opt(table, "correlationId"),
                f'"{extra_col}"' if extra_col else "NULL",
            ],
        )
        if table == KERNEL:
            raw = _column(rows, 5)
            if name_col is None:
                names = pa.nulls(len(rows), pa.string())
            elif self.schema.is_text(table, name_col):
                names = col.strings(raw)
            else:
                names = self.strings.lookup(col.ints(raw))
        elif table == MEMCPY:
            names = pa.array(
                [
                    f"Memcpy {COPY_KINDS.get(k, 'Unknown') if isinstance(k, int) else 'Unknown'}"
                    for k in _column(rows, 5)
                ],
                pa.string(),
            )
        else:
            names = pa.array(["Memset"] * len(rows), pa.string())
        self._add(
            rows,
            pid=col.ints(_column(rows, 2), pa.int32()),
            stream=col.ints(_column(rows, 3), pa.int32()),
            is_device=True,
            kind=kind,
            names=names,
            cat=cat,
            corr=col.ints(_column(rows, 4)),
        )
        self.read += len(rows)

    def runtime(self) -> None:
        t = RUNTIME
        if t not in self.schema.tables:
            return
        require(self.schema, t, ("start", "end", "globalTid"), self.path)
        name_col = self.schema.first(t, "nameId", "name")
        if name_col is None:
            require(self.schema, t, ("nameId",), self.path)
        rows = self._select(
            t, ["start", '"end"', "globalTid", self._opt(t, "correlationId"), f'"{name_col}"']
        )
        raw = _column(rows, 4)
        names = col.strings(raw) if self.schema.is_text(t, name_col) else self.strings.lookup(col.ints(raw))
        pid, tid = _split_tid(col.ints(_column(rows, 2)))
        self._add(
            rows,
            pid=pid,
            stream=tid,
            is_device=False,
            kind=Kind.HOST.value,
            names=names,
            cat="cuda_runtime",
            corr=col.ints(_column(rows, 3)),
        )
        self.read += len(rows)

    def nvtx(self) -> None:
        t = NVTX
        if t not in self.schema.tables:
            return
        require(self.schema, t, ("start", "eventType"), self.path)
        rows = self._select(
            t,
            [
                "start",
                self._opt(t, "end"),
                "eventType",
                self._opt(t, "text"),
                self._opt(t, "textId"),
                self._opt(t, "globalTid"),
                self._opt(t, "domainId"),
                self._opt(t, "jsonText"),
            ],
        )
        types = _nvtx_types(self.conn, self.schema)
        etype = np.array([v if isinstance(v, int) else -1 for v in _column(rows, 2)], np.int64)
        text = col.strings(_column(rows, 3))
        names = pc.coalesce(text, self.strings.lookup(col.ints(_column(rows, 4))))
        gtid = col.ints(_column(rows, 5))
        is_range = np.isin(etype, list(types["range"]))
        is_mark = np.isin(etype, list(types["mark"]))
        is_meta = np.isin(etype, list(types["meta"]))
        domains = {r[6]: r[3] for r, m in zip(rows, etype == types["domain"], strict=True) if m and r[3]}
        for r, m in zip(rows, etype == types["thread"], strict=True):
            if m and r[3] and isinstance(r[5], int):
                self.thread_names[r[5]] = r[3]
        meta_n = int(is_meta.sum())
        if meta_n:
            self.kept["metadata"] += meta_n
        other = ~(is_range | is_mark | is_meta)
        for v, c in Counter(etype[other].tolist()).items():
            self.rejected[f"nvtx_event_type:{v}"] += c
        keep = np.flatnonzero(is_range | is_mark)
        sel = [rows[i] for i in keep]
        ends = col.ints(
            [
                r[1] if not m else (r[1] if r[1] is not None else r[0])
                for r, m in zip(sel, is_mark[keep], strict=True)
            ]
        )
        pid, tid = _split_tid(pc.take(gtid, pa.array(keep)))
        extras = [_nvtx_extra(r[6], domains, r[7]) for r in sel]
        self._add(
            sel,
            pid=pid,
            stream=tid,
            is_device=False,
            kind=Kind.ANNOTATION.value,
            names=pc.take(names, pa.array(keep)),
            cat="nvtx",
            corr=pa.nulls(len(sel), pa.int64()),
            ends=ends,
            unterminated="nvtx_unterminated_range",
            extras=extras,
            positions=keep,
        )
        self.read += len(rows)

    def _add(
        self,
        rows: list[tuple[Any, ...]],
        *,
        pid: pa.Array,
        stream: pa.Array,
        is_device: bool,
        kind: str,
        names: pa.Array,
        cat: str,
        corr: pa.Array,
        ends: pa.Array | None = None,
        unterminated: str = "bad_dur",
        extras: list[str | None] | None = None,
        positions: np.ndarray | None = None,
    ) -> None:
        """Validate one table's rows and append the good ones as events.

        ``eid`` = rows read before this table + the row's position in it (``positions``, when only
        some rows of the table are spans). The caller adds the table's row count to ``read``.
        """
        n = len(rows)
        start = col.ints(_column(rows, 0))
        end = ends if ends is not None else col.ints(_column(rows, 1))
        s = start.to_numpy(zero_copy_only=False).astype("float64")
        e = end.to_numpy(zero_copy_only=False).astype("float64")
        reasons = [
            ("missing_name", pc.is_null(names).to_numpy(zero_copy_only=False)),
            (
                "missing_pid_or_tid",
                (
                    pc.is_null(pid).to_numpy(zero_copy_only=False)
                    | pc.is_null(stream).to_numpy(zero_copy_only=False)
                ),
            ),
            ("bad_ts", np.isnan(s)),
            (unterminated, np.isnan(e)),
            ("negative_dur", e < s),
        ]
        good = np.ones(n, bool)
        for reason, bad in reasons:
            hit = good & bad
            if hit.any():
                self.rejected[reason] += int(hit.sum())
                good &= ~hit
        idx = np.flatnonzero(good)
        take = pa.array(idx, pa.int64())
        pos = np.arange(n, dtype=np.int64) if positions is None else positions.astype(np.int64)
        eid = self.read + pos[idx]
        k = len(idx)
        ts = pc.take(start, take)
        self.parts.append(
            pa.table(
                {
                    "rank": pa.array(np.full(k, -1, np.int32)),
                    "pid": pc.take(pid, take).cast(pa.int32()),
                    "stream": pc.take(stream, take).cast(pa.int32()),
                    "is_device": pa.array(np.full(k, is_device)),
                    "kind": dictionary(pa.array([kind] * k, pa.string())),
                    "name": dictionary(pc.take(names, take)),
                    "cat": dictionary(pa.array([cat] * k, pa.string())),
                    "ts_ns": pc.add(ts, self.base_ns) if self.base_ns else ts,
                    "dur_ns": pc.subtract(pc.take(end, take), ts),
                    "step": pa.nulls(k, pa.int32()),
                    "layer": pa.nulls(k, pa.int16()),
                    "micro_batch": pa.nulls(k, pa.int8()),
                    "corr": pc.take(corr, take),
                    "eid": pa.array(eid),
                },
                schema=EVENTS_SCHEMA,
            )
        )
        if extras is not None:
            for j, e_id in zip(idx.tolist(), eid.tolist(), strict=True):
                if extras[j] is not None:
                    self.args.append({"eid": e_id, "extra": extras[j]})
        if k:
            self.kept["events"] += k


def _split_tid(gtid: pa.Array) -> tuple[pa.Array, pa.Array]:
    """nsys' serialized globalTid → (OS pid, OS thread id); null stays null."""
    g = gtid.cast(pa.int64())
    pid = pc.bit_wise_and(pc.shift_right(g, 24), 0xFFFFFF).cast(pa.int32())
    tid = pc.bit_wise_and(g, 0xFFFFFF).cast(pa.int32())
    return pid, tid


def _nvtx_types(conn: sqlite3.Connection, schema: NsysSchema) -> dict[str, Any]:
    """Event-type ids, from the export's own enum table when it has one."""
    ids: dict[str, int] = {**NVTX_RANGE_TYPES, **NVTX_MARK_TYPES, **NVTX_META_TYPES}
    if schema.has("ENUM_NSYS_EVENT_TYPE", "id", "name"):
        named = dict(conn.execute("SELECT name, id FROM ENUM_NSYS_EVENT_TYPE").fetchall())
        ids = {k: int(named[k]) if isinstance(named.get(k), int) else v for k, v in ids.items()}
    return {
        "range": {ids[k] for k in NVTX_RANGE_TYPES},
        "mark": {ids[k] for k in NVTX_MARK_TYPES},
        "meta": {ids[k] for k in NVTX_META_TYPES},
        "domain": ids["NvtxDomainCreate"],
        "thread": ids["NvtxThread"],
    }


def _nvtx_extra(domain_id: Any, domains: dict[Any, str], json_text: Any) -> str | None:
    """The range's NVTX domain (when named) and any annotation keys of its JSON payload."""
    extra: dict[str, Any] = {}
    if isinstance(json_text, str) and json_text.lstrip().startswith("{"):
        try:
            payload = json.loads(json_text)
        except ValueError:
            payload = None
        if isinstance(payload, dict):
            extra |= {k: payload[k] for k in _ANNOTATION_KEYS if k in payload}
    if domain_id in domains:
        extra["nvtx_domain"] = domains[domain_id]
    return json.dumps(extra) if extra else None


def _args_table(rows: list[dict[str, Any]]) -> pa.Table:
    full = [{name: None for name in ARGS_SCHEMA.names} | {"rank": -1} | r for r in rows]
    return pa.Table.from_pylist(full, schema=ARGS_SCHEMA)


def _environment(conn: sqlite3.Connection, schema: NsysSchema) -> dict[str, str]:
    """Target facts (Hostname, …) and the launch environment (``DeviceEnvironment``) of the export."""
    if not schema.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        return {}
    out: dict[str, str] = {}
    for name, value in conn.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"):
        if not isinstance(value, str):
            continue
        if name == "DeviceEnvironment":
            for item in value.split("\x00"):
                k, sep, v = item.partition("=")
                if sep and k not in out:
                    out[k] = v
        elif isinstance(name, str):
            out[f"target:{name}"] = value
    return out


def _rank_info(thread_names: dict[int, str], env: dict[str, str], events: pa.Table) -> RankInfo:
    ranks = {int(m.group(1)) for n in thread_names.values() if (m := _RANK_IN_NAME.search(n))}
    rank, source = (ranks.pop(), "nvtx") if len(ranks) == 1 else (None, "unknown")
    if rank is None:
        for key in _RANK_ENV:
            if env.get(key, "").strip().isdigit():
                rank, source = int(env[key]), f"env:{key}"
                break
    world = next((int(env[k]) for k in _WORLD_ENV if env.get(k, "").strip().isdigit()), None)
    dev = events.filter(events["is_device"]) if events.num_rows else events
    device = None
    if dev.num_rows:
        counts = pc.value_counts(dev["pid"]).to_pylist()
        device = int(max(counts, key=lambda c: c["counts"])["values"])
    return RankInfo(
        rank=rank, source=source, world_size=world, host=env.get("target:Hostname"), device=device
    )


def _streams(
    conn: sqlite3.Connection,
    schema: NsysSchema,
    strings: _Strings,
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
