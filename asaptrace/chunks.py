"""A big rank's plain host events and flows, written by its reader in chunks instead of held in memory.

Most of a big rank file's rows are host operators, runtime calls and Python functions (≈ 65 % in
a PyTorch trace) and the flow events that link a launch to its kernel (≈ 25 %). A host row is
one row the enrichment gives a step and a layer from the annotation span around it; a flow is
only shifted by its rank's clock offset; nothing about either feeds a decision over the rank
(kinds, steps from gaps, layers from comm order, clock alignment: all device work). A reader that
reads a file in pieces writes those rows as it goes, a chunk per piece (Arrow IPC files under the
store's staging folder), and hands back only the rest — device work, annotations, metadata and
anything odd — as its tables. :class:`HostChunks` is the handle: where the chunks are and what
the driver and the enrichment need to know of them without reading them (rows, names, time range,
where the rest's flows fall among the chunks').

A chunk is stored as its reader left it: rank -1 and times without the file's base time, which
the reader learns only at the end of the file (``baseTimeNanoseconds`` is in its tail).
:meth:`HostChunks.read` gives a chunk's table as the store holds it:
rank filled, times shifted. The enrichment (:mod:`asaptrace.enrich.host_chunks`) writes each
rank's final parts from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.schema import TABLE_SCHEMAS, conform
from asaptrace.store import write_arrow

#: The staging folder's subfolder for host chunks (removed before the store is committed).
CHUNK_DIR = ".host-chunks"


#: The column of a chunk's flows (and of the rest's, in the enrichment) that orders them as the
#: file does: each flow row's place in the file (flows have no event id of their own).
POSITION = "_pos"


@dataclass(frozen=True)
class Chunk:
    """One piece's host rows and flows: its events, args and flows files (event ids and flow
    positions counted from the piece's first row), rows, the piece's first and past-last event id
    in the file, args rows and flow rows."""

    events: str
    args: str
    rows: int
    first_eid: int
    end_eid: int
    args_rows: int
    flows: str | None = None
    flow_rows: int = 0


@dataclass(frozen=True)
class HostChunks:
    """A rank's host rows and flows on disk (see the module docstring)."""

    chunks: tuple[Chunk, ...]
    ts_shift: int  # the file's baseTimeNanoseconds, added to every time when read
    names: tuple[str, ...]  # the distinct event names of the rows
    start_ns: int | None  # the rows' time range (shifted), None when there are none
    end_ns: int | None
    rank: int = -1
    #: the places in the file of the flows left in the rest's flows table, in its row order
    rest_flows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), compare=False)

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.chunks)

    @property
    def flow_rows(self) -> int:
        return sum(c.flow_rows for c in self.chunks)

    def with_rank(self, rank: int) -> HostChunks:
        return replace(self, rank=rank)

    def read(self, i: int, name: str) -> pa.Table:
        """Chunk ``i``'s ``name`` table (events, args or flows) as the store holds it: rank filled,
        event ids counted from the start of the file, times shifted; flows with their places in
        the file (:data:`POSITION`). Only that table's file is read."""
        c = self.chunks[i]
        path = {"events": c.events, "args": c.args, "flows": c.flows}[name]
        if path is None:  # a chunk with no flows
            return with_position(TABLE_SCHEMAS["flows"].empty_table(), np.zeros(0, np.int64))
        return self._fixed(_read_ipc(path), name, c.first_eid)

    def _fixed(self, table: pa.Table, name: str, first_eid: int) -> pa.Table:
        n = table.num_rows
        table = table.set_column(
            table.schema.get_field_index("rank"), "rank", pa.array(np.full(n, self.rank, np.int32))
        )
        shifts = {
            "eid" if name != "flows" else POSITION: first_eid,
            "ts_ns": self.ts_shift if name != "args" else 0,
        }
        for column, by in shifts.items():
            if by:  # a chunk counts its event ids from its piece's first row; times lack the base time
                at = table.schema.get_field_index(column)
                table = table.set_column(at, column, pc.add(table.column(at), pa.scalar(by, pa.int64())))
        return table


def write_chunk(
    folder: Path,
    i: int,
    events: pa.Table,
    args: pa.Table,
    first_eid: int,
    end_eid: int,
    flows: tuple[pa.Table, np.ndarray] | None = None,
) -> Chunk:
    """Write piece ``i``'s host rows, and its flows (their table and their rows in the piece),
    under ``folder`` (Arrow IPC: no encoding either way)."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = {"events": conform(events, "events"), "args": conform(args, "args")}
    if flows is not None:
        tables["flows"] = with_position(conform(flows[0], "flows"), flows[1])
    paths = {}
    for name, table in tables.items():
        path = folder / f"{name}-{i:05d}.arrow"
        write_arrow(table, path)
        paths[name] = str(path)
    return Chunk(
        paths["events"],
        paths["args"],
        events.num_rows,
        first_eid,
        end_eid,
        args.num_rows,
        paths.get("flows"),
        0 if flows is None else flows[0].num_rows,
    )


def with_position(flows: pa.Table, position: np.ndarray) -> pa.Table:
    """``flows`` with each row's place in the file (:data:`POSITION`)."""
    return flows.append_column(POSITION, pa.array(np.asarray(position, np.int64)))


def _read_ipc(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()
