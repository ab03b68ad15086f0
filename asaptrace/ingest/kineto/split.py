"""A big Kineto file read in pieces, its plain host rows and flows written in chunks as they come.

Read in pieces (:mod:`asaptrace.ingest.kineto.pieces`) and joined (:mod:`~asaptrace.ingest.kineto.merge`),
a 2 GB rank still ends as 1 GB of tables in memory. Here each piece is split as soon as it is
scanned, and two kinds of rows that are kept as they are and need nothing from the rest of the
file go to a chunk on disk (:func:`~asaptrace.chunks.write_chunk`), built as the one-piece reader
builds them:

- its *plain host rows*: complete or instant events of a host category (operators, runtime
  calls, Python functions; not annotations, nor a ``ProfilerStep#N`` written as an operator,
  which the enrichment reads as a step annotation), with a name, int pid and tid, a time and a
  usable duration;
- its *plain flows*: flow events (``s``/``t``/``f``) with an id, int pid and tid and a time.

Everything else (device work, annotations, B/E pairs, other flows, metadata, rows to reject) is
compacted — only its rows, their args decoded now — and joined at the end into columns for the
usual tables (:func:`~asaptrace.ingest.kineto.tables.tables_of`, with each row's event id in the
whole file). So the store is the one-piece read's, row for row (tests/test_kineto_split.py).

Three things are known only at the end of the file, and each is checked there: the base time
(added when a chunk is read; a sum past int64 would make a row ``bad_ts`` or ``bad_flow``), the
GPU pids of the metadata (a host row on a GPU pid is device work), and that some row is left for
the tables. If any fails, :class:`~asaptrace.ingest.kineto.pieces.NotInPieces` is raised, the
chunks are removed and the reader reads the file the usual way.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.chunks import Chunk, HostChunks, write_chunk
from asaptrace.ingest import columns as col
from asaptrace.ingest.base import IngestOptions, IngestResult
from asaptrace.ingest.kineto import pieces
from asaptrace.ingest.kineto.args import args_table
from asaptrace.ingest.kineto.decode import EventArgs, EventColumns, IdColumn, Times
from asaptrace.ingest.kineto.dictionary import dict_codes
from asaptrace.ingest.kineto.flows import flows, kept_flows
from asaptrace.ingest.kineto.merge import Piece, merge
from asaptrace.ingest.kineto.streams import streams_from_metadata
from asaptrace.ingest.kineto.tables import (
    CATEGORY_KIND,
    DEVICE_CATS,
    FLOW_PHASES,
    INSTANT_PHASES,
    Outside,
    Phases,
    base_time_ns,
    events_table,
    shifted_times,
    tables_of,
)
from asaptrace.schema import Kind
from asaptrace.store import event_names

_HOST_PHASES = ("X", *INSTANT_PHASES)


def read_split(path: Path, options: IngestOptions, folder: Path, sha256: Any) -> IngestResult:
    """``path`` read in pieces, its plain host rows written as chunks under ``folder`` (the
    result's ``host_chunks``), the rest in its tables (raises ``NotInPieces`` when it cannot be)."""
    try:
        return _read_split(path, options, folder, sha256)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _read_split(path: Path, options: IngestOptions, folder: Path, sha256: Any) -> IngestResult:
    held: list[Piece] = []
    eids: list[np.ndarray] = []
    found = _Found()
    start = 0
    for part in pieces.scan_pieces(
        path,
        max_bytes=options.max_decompressed_bytes,
        sha256=sha256,
        then=lambda piece, i: _split(piece, i, folder),  # on the scanning threads
    ):
        held.append(part.held)
        eids.append(part.rest + start)
        found.add(part, start)
        start += part.n
        del part
    cols = merge(held)
    del held
    base = base_time_ns(cols.header)
    if cols.n_read == 0 or not found.fits(base) or {p for p, _ in found.pairs} & _gpu_pids(cols):
        raise pieces.NotInPieces("host rows that need the whole file")
    streams = pa.table(
        {
            "pid": pa.array([p for p, _ in found.pairs], pa.int32()),
            "stream": pa.array([s for _, s in found.pairs], pa.int32()),
            "is_device": pa.array([False] * len(found.pairs)),
        }
    )
    places = np.concatenate(eids)
    result = tables_of(cols, path, eids=places, outside=Outside(found.rows, streams, found.flows))
    chunks = HostChunks(
        chunks=tuple(found.chunks),
        ts_shift=base,
        names=tuple(sorted(found.names)),
        start_ns=None if found.lo is None else found.lo + base,
        end_ns=None if found.end is None else found.end + base,
        rest_flows=places[_kept_flow_rows(cols, base)],
    )
    return IngestResult(**{**result.__dict__, "host_chunks": chunks if found.chunks else None})


@dataclass
class _Part:
    """One piece, split: its rest compacted (``rest``: their rows in the piece), its host rows'
    chunk (event ids counted from the piece's first row) and what the chunk holds."""

    held: Piece
    rest: np.ndarray
    n: int  # the piece's rows
    chunk: Chunk | None = None
    names: set[str] = field(default_factory=set)
    pairs: set[tuple[int, int]] = field(default_factory=set)
    times: tuple[int, int, int] | None = None  # first ts, last ts, last end (without the base time)
    flow_times: tuple[int, int] | None = None  # the flows' first and last ts (without the base time)


def _split(piece: Piece, i: int, folder: Path) -> _Part:
    """Piece ``i`` split (on a scanning thread; the event ids of its chunk count from 0)."""
    c = piece.cols
    ph = Phases(c.ph)
    instant = ph.mask(INSTANT_PHASES)
    int_keys = _int_keys(c.pid) & _int_keys(c.tid)
    plain = _plain_host(c, ph, instant, int_keys)
    host = np.flatnonzero(plain)
    flow_rows, flow_table = _plain_flows(c, ph, int_keys)
    plain[flow_rows] = True
    rest = np.flatnonzero(~plain)
    streamed = len(host) + len(flow_rows)
    out = _Part(Piece(_compact(c, rest, streamed, ph.mask(("M",))[rest]), piece.header_present), rest, c.n)
    if streamed:
        events, args = _host_tables(c, host, instant[host])
        out.chunk = write_chunk(
            folder, i, events, args, 0, c.n, (flow_table, flow_rows) if len(flow_rows) else None
        )
    if len(flow_rows):
        ts = c.ts.values[flow_rows]
        out.flow_times = (int(ts.min()), int(ts.max()))
    if len(host):
        out.names = set(event_names(events))
        out.pairs = {
            (r["pid"], r["stream"]) for r in events.group_by(["pid", "stream"]).aggregate([]).to_pylist()
        }
        ts = events.column("ts_ns").to_numpy()
        end = ts + events.column("dur_ns").to_numpy()
        out.times = (int(ts.min()), int(ts.max()), int(end.max()))
    return out


class _Found:
    """What the chunks written so far hold (host rows, names, streams, time range; flows)."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.rows = 0
        self.flows = 0
        self.names: set[str] = set()
        self.pairs: set[tuple[int, int]] = set()
        self.lo: int | None = None  # the host rows' first ts (without the base time)
        self.hi: int | None = None  # last ts
        self.end: int | None = None  # last ts + dur
        self.flow_lo: int | None = None  # the flows' first and last ts
        self.flow_hi: int | None = None

    def add(self, part: _Part, start: int) -> None:
        """Add ``part``'s chunk, its event ids now counted from ``start`` (its first row's place)."""
        if part.chunk is None:
            return
        self.chunks.append(replace(part.chunk, first_eid=start, end_eid=start + part.n))
        self.rows += part.chunk.rows
        self.flows += part.chunk.flow_rows
        self.names |= part.names
        self.pairs |= part.pairs
        if part.times is not None:
            lo, hi, e = part.times
            self.lo = lo if self.lo is None else min(self.lo, lo)
            self.hi = hi if self.hi is None else max(self.hi, hi)
            self.end = e if self.end is None else max(self.end, e)
        if part.flow_times is not None:
            lo, hi = part.flow_times
            self.flow_lo = lo if self.flow_lo is None else min(self.flow_lo, lo)
            self.flow_hi = hi if self.flow_hi is None else max(self.flow_hi, hi)

    def fits(self, base: int) -> bool:
        """Whether every time shifted by ``base`` stays an int64 (else the tables would reject some)."""
        lows = [t for t in (self.lo, self.flow_lo) if t is not None]
        highs = [t for t in (self.hi, self.end, self.flow_hi) if t is not None]
        return not base or (
            all(t <= col.INT64_MAX - base for t in highs) and all(t >= col.INT64_MIN - base for t in lows)
        )


def _plain_host(c: EventColumns, ph: Phases, instant: np.ndarray, int_keys: np.ndarray) -> np.ndarray:
    """The rows kept as they are whatever the rest of the file says (see the module docstring;
    ``ph``: the piece's phases, ``instant``: its instant rows, ``int_keys``: its rows whose pid and
    tid are ints, :func:`_int_keys`)."""
    cats = c.cat.dictionary.to_pylist()
    host_cat = np.array(
        [v not in DEVICE_CATS and CATEGORY_KIND.get(v, Kind.HOST) == Kind.HOST for v in cats] + [False], bool
    )
    ok = ph.mask(_HOST_PHASES) & host_cat[dict_codes(c.cat)]
    ok &= c.name.is_valid().to_numpy(zero_copy_only=False)
    # a ProfilerStep#N of a host category (older Kineto's Operator) is a step annotation: the
    # enrichment reads it among the rest (asaptrace.enrich.step_links)
    names = c.name.dictionary.to_pylist()
    step = np.array([isinstance(v, str) and v.startswith("ProfilerStep#") for v in names] + [False], bool)
    ok &= ~step[dict_codes(c.name)]
    ok &= int_keys
    ok &= c.ts.valid & (instant | (c.dur.valid & (c.dur.values >= 0)))
    return ok


def _plain_flows(c: EventColumns, ph: Phases, int_keys: np.ndarray) -> tuple[np.ndarray, pa.Table]:
    """The plain flows of a piece (flow rows with an id, a time and int pid and tid: kept as they
    are whatever the rest of the file says) and their flows table, as the one-piece reader builds
    it (times without the base time)."""
    idx = np.flatnonzero(ph.mask(FLOW_PHASES) & int_keys)
    ids = c.flow_ids(idx)
    ok = kept_flows(ids, c.ts.valid[idx])
    table, _ = flows(c, idx[ok], c.ts, ids.filter(pa.array(ok)))
    return idx[ok], table


def _kept_flow_rows(c: EventColumns, base: int) -> np.ndarray:
    """The rows of ``c`` (the rest) that its flows table keeps, in its row order."""
    idx = np.flatnonzero(Phases(c.ph).mask(FLOW_PHASES))
    return idx[kept_flows(c.flow_ids(idx), shifted_times(c.ts, base).valid[idx])]


def _int_keys(ids: IdColumn) -> np.ndarray:
    """Rows whose pid (tid) is an int: its id is the value itself in any piece and in the whole file."""
    own = np.array(
        sorted(v for k, v in ids.table.items() if isinstance(k, int) and not isinstance(k, bool) and k == v),
        np.int64,
    )
    return ~ids.missing & np.isin(ids.ids, own)


def _host_tables(c: EventColumns, idx: np.ndarray, instant: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """The events and args of the plain host rows ``idx`` (``instant``: which of them are instants;
    as the one-piece reader builds them: event ids counted from the piece's first row, times
    without the base time)."""
    cat = pc.take(c.cat, pa.array(idx))
    dur = np.where(instant, 0, c.dur.values[idx])
    events = events_table(c, idx, cat, np.zeros(len(idx), bool), c.ts.values[idx], dur, idx)
    return events, args_table(c, idx, cat)


def _compact(c: EventColumns, rows: np.ndarray, streamed: int, is_meta: np.ndarray) -> EventColumns:
    """``c`` restricted to ``rows`` (``streamed`` rows were written out; ``is_meta``: which of
    ``rows`` are metadata), everything the tables ask of those rows decoded now, so that the
    piece's scan can be let go of. The pid/tid tables
    stay whole: the join numbers the whole file's keys in order of first appearance."""
    take = pa.array(rows)
    corr, external, flow_ids = c.corr(rows), c.external_id(rows), c.flow_ids(rows)
    dims = c.has_dims(rows)
    texts = c.shape_texts(rows)
    candidate = np.zeros(len(rows), bool)
    candidate[c.rich_candidates(rows)] = True
    need = np.flatnonzero(candidate | is_meta)
    decoded: dict[int, EventArgs | None] = dict(zip(need.tolist(), c.args(rows[need]), strict=True))

    def pick(arr: pa.Array) -> Any:
        return lambda q: arr.take(pa.array(q, pa.int64()))

    return EventColumns(
        decoder=c.decoder,
        n_read=c.n_read - streamed,
        rejected=c.rejected,
        header=c.header,
        ph=pc.take(c.ph, take),
        name=pc.take(c.name, take),
        cat=pc.take(c.cat, take),
        ts=Times(c.ts.values[rows], c.ts.valid[rows]),
        dur=Times(c.dur.values[rows], c.dur.valid[rows]),
        pid=IdColumn(c.pid.ids[rows], c.pid.table, c.pid.missing[rows]),
        tid=IdColumn(c.tid.ids[rows], c.tid.table, c.tid.missing[rows]),
        corr=pick(corr),
        external_id=pick(external),
        flow_ids=pick(flow_ids),
        args=lambda q: [decoded[i] for i in q.tolist()],
        rich_candidates=lambda q: np.flatnonzero(candidate[q]),
        has_dims=lambda q: dims[q],
        shape_texts=lambda q: (pick(texts[0])(q), pick(texts[1])(q)),
    )


def _gpu_pids(c: EventColumns) -> set[int]:
    """The pids the metadata labels as devices."""
    return streams_from_metadata(c, np.flatnonzero(Phases(c.ph).mask(("M",))))[1]
