"""The string table of an nsys export (``StringIds``), looked up in bulk.

Why a module: kernel names, runtime call names, NVTX texts and thread names are all stored as ids
into one table; both the event reader and the streams table resolve them the same way.
"""

from __future__ import annotations

import sqlite3

import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.ingest import columns as col
from asaptrace.ingest.nsys.schema import NsysSchema


class StringTable:
    """The export's string table, looked up in bulk (ids → Arrow strings)."""

    def __init__(self, conn: sqlite3.Connection, schema: NsysSchema) -> None:
        table = schema.strings
        rows = conn.execute(f'SELECT id, value FROM "{table}"').fetchall() if table else []
        self.ids = pa.array([r[0] for r in rows], pa.int64())
        self.values = col.strings([r[1] for r in rows])

    def lookup(self, ids: pa.Array) -> pa.Array:
        """The strings of ``ids`` (null where an id is not in the table)."""
        if len(self.ids) == 0:
            return pa.nulls(len(ids), pa.string())
        return pc.take(self.values, pc.index_in(ids.cast(pa.int64()), value_set=self.ids))
