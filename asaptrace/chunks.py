"""A big rank's plain host events, written by its reader in chunks instead of held in memory.

Most of a big rank file's events (≈ 85 % in a PyTorch trace) are host operators, runtime calls and
Python functions: each is one row the enrichment gives a step and a layer from the annotation
span around it, and nothing about it feeds a decision over the rank (kinds, steps from gaps,
layers from comm order, clock alignment: all device work). A reader that reads a file in pieces
writes those rows as it goes, a chunk per piece (Arrow IPC files under the store's staging folder),
and hands back only the rest — device work, annotations, flows, metadata and anything odd — as
its tables. :class:`HostChunks` is the handle: where the chunks are and what the driver and the
enrichment need to know of them without reading them (rows, names, time range).

A chunk is stored as its reader left it: rank -1 and times without the file's base time, which
the reader learns only at the end of the file (``baseTimeNanoseconds`` is in its tail).
:meth:`HostChunks.read` gives a chunk as the store holds it: rank filled, times shifted. The
enrichment (:mod:`asaptrace.enrich.host_chunks`) writes each rank's final parts from them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.schema import conform

#: The staging folder's subfolder for host chunks (removed before the store is committed).
CHUNK_DIR = ".host-chunks"


@dataclass(frozen=True)
class Chunk:
    """One piece's host rows: its events and args files (event ids counted from the piece's first
    row), rows, the piece's first and past-last event id in the file, and args rows."""

    events: str
    args: str
    rows: int
    first_eid: int
    end_eid: int
    args_rows: int


@dataclass(frozen=True)
class HostChunks:
    """A rank's host rows on disk (see the module docstring)."""

    chunks: tuple[Chunk, ...]
    ts_shift: int  # the file's baseTimeNanoseconds, added to every time when read
    names: tuple[str, ...]  # the distinct event names of the rows
    start_ns: int | None  # the rows' time range (shifted), None when there are none
    end_ns: int | None
    rank: int = -1

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.chunks)

    def with_rank(self, rank: int) -> HostChunks:
        return replace(self, rank=rank)

    def read(self, i: int) -> tuple[pa.Table, pa.Table]:
        """Chunk ``i``'s events and args as the store holds them (rank filled, event ids counted
        from the start of the file, times shifted)."""
        c = self.chunks[i]
        return (
            self._fixed(_read_ipc(c.events), "events", c.first_eid),
            self._fixed(_read_ipc(c.args), "args", c.first_eid),
        )

    def _fixed(self, table: pa.Table, name: str, first_eid: int) -> pa.Table:
        n = table.num_rows
        table = table.set_column(
            table.schema.get_field_index("rank"), "rank", pa.array(np.full(n, self.rank, np.int32))
        )
        shifts = {"eid": first_eid, "ts_ns": self.ts_shift if name == "events" else 0}
        for column, by in shifts.items():
            if by:  # a chunk counts its event ids from its piece's first row; times lack the base time
                at = table.schema.get_field_index(column)
                table = table.set_column(at, column, pc.add(table.column(at), pa.scalar(by, pa.int64())))
        return table


def write_chunk(
    folder: Path, i: int, events: pa.Table, args: pa.Table, first_eid: int, end_eid: int
) -> Chunk:
    """Write piece ``i``'s host rows under ``folder`` (Arrow IPC: no encoding either way)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, table in (("events", events), ("args", args)):
        path = folder / f"{name}-{i:05d}.arrow"
        table = conform(table, name)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
            out.write_table(table)
        paths[name] = str(path)
    return Chunk(paths["events"], paths["args"], events.num_rows, first_eid, end_eid, args.num_rows)


def _read_ipc(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()
