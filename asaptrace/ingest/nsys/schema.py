"""What an ``nsys export --type sqlite`` database holds, found by probing rather than assumed.

Nsight Systems has changed its export schema many times: the metadata table is ``EXPORT_META_DATA``
(schema 2.x) or ``META_DATA_EXPORT`` (3.x); strings live in ``StringIds`` (or, in the oldest
exports, ``StringTable``); kernel names are ids in ``demangledName`` / ``shortName`` /
``mangledName``, or text in ``name``; tables are created lazily, so any of them may be absent.
:func:`probe` reads the catalogue once and :class:`NsysSchema` answers "which column / table".
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from asaptrace.errors import CorruptTrace, IngestError, UnsupportedFormat

SQLITE_MAGIC = b"SQLite format 3\x00"
KNOWN_SCHEMA_MAJORS = (2, 3)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
#: Tables whose rows we read (and count in the accounting).
READ_TABLES = (KERNEL, MEMCPY, MEMSET, RUNTIME, NVTX)
_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
_STRING_TABLES = ("StringIds", "StringTable")


@dataclass
class NsysSchema:
    """Tables and their columns (name → declared type), plus the export's own version."""

    tables: dict[str, dict[str, str]] = field(default_factory=dict)
    version: str | None = None
    product: str | None = None

    def has(self, table: str, *columns: str) -> bool:
        cols = self.tables.get(table)
        return cols is not None and all(c in cols for c in columns)

    def first(self, table: str, *candidates: str) -> str | None:
        cols = self.tables.get(table, {})
        return next((c for c in candidates if c in cols), None)

    def is_text(self, table: str, column: str) -> bool:
        return "CHAR" in self.tables[table][column].upper() or "TEXT" in self.tables[table][column].upper()

    @property
    def strings(self) -> str | None:
        return next((t for t in _STRING_TABLES if self.has(t, "id", "value")), None)

    @property
    def is_nsys(self) -> bool:
        by_meta = self.product is not None and "nsight" in self.product.lower()
        by_tables = any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables)
        return by_meta or by_tables or (NVTX in self.tables and self.strings is not None)


def connect(path: Path) -> sqlite3.Connection:
    """Open read-only (and immutable: no journal or lock files are created next to the trace)."""
    uri = f"file:{quote(str(Path(path).resolve()))}?mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as err:
        raise IngestError(f"cannot open SQLite database ({err})", path=path) from None
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # exports can hold invalid UTF-8
    return conn


def probe(conn: sqlite3.Connection, path: Path) -> NsysSchema:
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        schema = NsysSchema()
        for t in names:
            schema.tables[t] = {r[1]: (r[2] or "") for r in conn.execute(f'PRAGMA table_info("{t}")')}
        meta = next((t for t in _META_TABLES if schema.has(t, "name", "value")), None)
        if meta is not None:
            kv = dict(conn.execute(f'SELECT name, value FROM "{meta}"').fetchall())
            schema.version = kv.get("EXPORT_SCHEMA_VERSION")
            schema.product = kv.get("EXPORT_PRODUCT_NAME")
    except (sqlite3.DatabaseError, UnicodeDecodeError) as err:  # a damaged schema's error text may not decode
        raise CorruptTrace(f"not a readable SQLite database ({err})", path=path) from None
    return schema


def check_supported(schema: NsysSchema, path: Path) -> None:
    """Refuse a SQLite file that is not an nsys export, or an export schema we do not know."""
    if not schema.is_nsys:
        raise UnsupportedFormat(
            "SQLite database is not an Nsight Systems export (no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS "
            "tables, no 'NVIDIA Nsight Systems' export metadata)",
            path=path,
        )
    if schema.version is not None:
        major = schema.version.split(".", 1)[0]
        if not major.isdigit() or int(major) not in KNOWN_SCHEMA_MAJORS:
            known = ", ".join(f"{m}.x" for m in KNOWN_SCHEMA_MAJORS)
            raise UnsupportedFormat(
                f"nsys export schema version {schema.version} is not supported (known: {known}); "
                "re-export with a supported Nsight Systems or report the version",
                path=path,
            )


def require(schema: NsysSchema, table: str, columns: tuple[str, ...], path: Path) -> None:
    missing = [c for c in columns if c not in schema.tables.get(table, {})]
    if missing:
        raise CorruptTrace(
            f"table {table} lacks column(s) {', '.join(missing)} (export schema {schema.version or 'unknown'})",
            path=path,
        )
