"""The event tables of an nsys export read into canonical event parts, every row counted.

Why a module: reading ``CUPTI_ACTIVITY_KIND_KERNEL``/``_MEMCPY``/``_MEMSET`` (device work),
``CUPTI_ACTIVITY_KIND_RUNTIME`` (CUDA API calls) and ``NVTX_EVENTS`` (ranges, marks, metadata) is the
bulk of the format: probing optional columns, naming through the string table, validating each row
into kept or rejected. :class:`EventReader` does that table by table; the reader assembles the rest.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.ingest import columns as col
from asaptrace.ingest.base import dictionary
from asaptrace.ingest.nsys.schema import KERNEL, MEMCPY, NVTX, RUNTIME, NsysSchema, require
from asaptrace.ingest.nsys.strings import StringTable
from asaptrace.schema import ANNOTATION_ARG_KEYS, EVENTS_SCHEMA, Kind

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
_ANNOTATION_KEYS = ANNOTATION_ARG_KEYS


def _column(rows: list[tuple[Any, ...]], i: int) -> list[Any]:
    return [r[i] for r in rows]


class EventReader:
    """Reads the event tables one by one into event parts, counting every row."""

    def __init__(
        self, conn: sqlite3.Connection, schema: NsysSchema, strings: StringTable, path: Path, base_ns: int
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
        pid, tid = split_tid(col.ints(_column(rows, 2)))
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
        types = nvtx_types(self.conn, self.schema)
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
        pid, tid = split_tid(pc.take(gtid, pa.array(keep)))
        extras = [nvtx_extra(r[6], domains, r[7]) for r in sel]
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


def split_tid(gtid: pa.Array) -> tuple[pa.Array, pa.Array]:
    """nsys' serialized globalTid → (OS pid, OS thread id); null stays null."""
    g = gtid.cast(pa.int64())
    pid = pc.bit_wise_and(pc.shift_right(g, 24), 0xFFFFFF).cast(pa.int32())
    tid = pc.bit_wise_and(g, 0xFFFFFF).cast(pa.int32())
    return pid, tid


def nvtx_types(conn: sqlite3.Connection, schema: NsysSchema) -> dict[str, Any]:
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


def nvtx_extra(domain_id: Any, domains: dict[Any, str], json_text: Any) -> str | None:
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
