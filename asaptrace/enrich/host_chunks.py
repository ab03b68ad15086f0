"""A big rank's host chunks through the enrichment, never held whole.

The reader wrote most of a big rank's host rows and flows in chunks (:mod:`asaptrace.chunks`) and
handed the rest over as the rank's tables. A host row needs little of the enrichment: its step,
layer and micro-batch come from the innermost host annotation span around it on its own thread,
else from the step span around it on its rank (:mod:`asaptrace.enrich.segment`, rules 2 and 3c);
kinds, steps from gaps, layers from comm order and the facts the cross-rank decisions read are
all about device work and annotations, which are in the rest. What the rest needs of the host
rows is what the kernels they launched inherit: the span of each correlation id's first launch
and its earliest start.

So :class:`HostPass` goes over the chunks twice, a chunk or two in memory at a time: once while the
rest is segmented (:meth:`HostPass.launches`, the ``outside`` of
:func:`~asaptrace.enrich.segment.segment`, keeping each row's span: 4 bytes a row), and once to
write the rank's final parts (:meth:`HostPass.write`): each chunk's rows given their values and
clock offset, merged with the rest's final rows in event-id order (flows: in file order), written
a row group at a time into the rank's one part per table. The store is the one the whole rank
would give.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, closing

import numpy as np
import polars as pl
import pyarrow as pa

from asaptrace.chunks import POSITION, HostChunks, with_position
from asaptrace.enrich.clock import apply_offsets
from asaptrace.enrich.segment import innermost, span_values, step_from_rank_spans
from asaptrace.executors import ahead_in_order
from asaptrace.schema import TABLE_SCHEMAS, conform
from asaptrace.store import StoreWriter

_BY = ["rank", "pid", "stream"]


class HostPass:
    """One rank's host chunks in the enrichment (see the module docstring)."""

    def __init__(self, chunks: HostChunks, recorded: pl.DataFrame) -> None:
        self.chunks = chunks
        self.recorded = recorded  # rank, clock_offset_ns: an earlier alignment, undone on reading
        self.spans: pl.DataFrame | None = None
        self.span_of: list[np.ndarray] = []

    def _events(self, i: int) -> pl.DataFrame:
        """Chunk ``i``'s events, their times as recorded (its args are not read)."""
        return self._as_recorded(self.chunks.read(i, "events"))

    def _as_recorded(self, table: pa.Table) -> pl.DataFrame:
        """``table``'s times as recorded (an earlier alignment undone)."""
        frame: pl.DataFrame = pl.from_arrow(table)  # type: ignore[assignment]
        return apply_offsets(frame, self.recorded.rename({"clock_offset_ns": "offset_ns"}), sign=+1)

    def launches(self, spans: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Each chunk's rows given their innermost host span (kept for :meth:`write`); returns
        what :class:`~asaptrace.enrich.segment.OutsideRows` says."""
        self.spans, self.span_of = spans, []
        first: list[pl.DataFrame] = []
        earliest: list[pl.DataFrame] = []
        # two chunks at a time (polars lets go of the GIL): each holds one chunk's rows at most
        for span_of, f, e in ahead_in_order(
            lambda i: self._launches(i, spans), range(len(self.chunks.chunks)), workers=2
        ):
            self.span_of.append(span_of)
            first.append(f)
            earliest.append(e)
        return pl.concat(first), pl.concat(earliest)

    def _launches(self, i: int, spans: pl.DataFrame) -> tuple[np.ndarray, pl.DataFrame, pl.DataFrame]:
        """Chunk ``i``'s rows' innermost host spans (-1: none), and its launches: the first launch
        of each correlation id inside a span (rank, corr, eid, _span) and the earliest of each
        (rank, corr, _launch)."""
        ev = self._events(i)
        keys = ev.select(*_BY, "ts_ns", "corr", "eid").with_row_index("_row")
        rows, idx = innermost(keys, spans, False, _BY)
        span_of = np.full(ev.height, -1, np.int32)
        span_of[rows] = idx
        launch = keys.select("rank", "corr", "eid", "ts_ns", _span=pl.Series(span_of, dtype=pl.Int64)).filter(
            pl.col("corr").is_not_null()
        )
        first = (
            launch.filter(pl.col("_span") >= 0)
            .group_by("rank", "corr")
            .agg(pl.col("eid").first(), pl.col("_span").first())  # rows in eid order
            .select("rank", "corr", "eid", "_span")
        )
        return span_of, first, launch.group_by("rank", "corr").agg(pl.col("ts_ns").min().alias("_launch"))

    def final(self, i: int, offsets: pl.DataFrame) -> tuple[pa.Table, pa.Table]:
        """Chunk ``i``'s final events (values from the spans, clock aligned) and args."""
        ev, args = self._events(i), self.chunks.read(i, "args")
        spans = self.spans
        if spans is not None and spans.height:  # else no span gives a host row anything
            values = span_values(spans, self.span_of[i].astype(np.int64))[:3]  # context: not stored
            ev = step_from_rank_spans(ev.drop("step", "layer", "micro_batch").with_columns(values), spans)
        return conform(apply_offsets(ev, offsets).to_arrow(), "events"), args

    def final_flows(self, i: int, offsets: pl.DataFrame) -> pa.Table:
        """Chunk ``i``'s final flows (clock aligned), with their places in the file."""
        flows = self._as_recorded(self.chunks.read(i, "flows"))
        return apply_offsets(flows, offsets).to_arrow()

    def _finals(self, i: int, offsets: pl.DataFrame) -> dict[str, pa.Table]:
        events, args = self.final(i, offsets)
        return {"events": events, "args": args, "flows": self.final_flows(i, offsets)}

    def write(
        self,
        writer: StoreWriter,
        part_id: str,
        events: pa.Table,
        args: pa.Table,
        flows: pa.Table,
        offsets: pl.DataFrame,
    ) -> None:
        """The rank's final events, args and flows parts: ``events``/``args``/``flows`` (the
        rest's, final) and every chunk's, in event-id order (flows: in file order), a row group per
        chunk (the chunk being written and the next)."""
        flows = conform(flows, "flows") if flows.num_rows else TABLE_SCHEMAS["flows"].empty_table()
        rest = {
            "events": _Rest(conform(events, "events"), "eid"),
            "args": _Rest(conform(args, "args"), "eid"),
            "flows": _Rest(with_position(flows, self.chunks.rest_flows), POSITION),
        }
        chunks = self.chunks.chunks
        rows = {
            "events": 1,  # a rank always has its events part
            "args": args.num_rows + sum(c.args_rows for c in chunks),
            "flows": flows.num_rows + self.chunks.flow_rows,
        }
        with ExitStack() as stack:
            out = {  # as for any rank: no empty args nor flows part
                name: stack.enter_context(writer.staged_writer(name, part_id))
                for name, n in rows.items()
                if n
            }
            made = stack.enter_context(  # the next chunk made while this one is encoded
                closing(ahead_in_order(lambda i: self._finals(i, offsets), range(len(chunks)), workers=1))
            )
            for c, finals in zip(chunks, made, strict=True):
                for name, w in out.items():
                    for piece in rest[name].merged(c.first_eid, c.end_eid, finals[name]):
                        w.write_table(_stored(piece, name))
                del finals
            for name, w in out.items():
                if (tail := rest[name].tail()) is not None:
                    w.write_table(_stored(tail, name))


def _stored(table: pa.Table, name: str) -> pa.Table:
    """Rows as the store holds them (a flow's place in the file is not stored)."""
    return conform(table, name) if name == "flows" else table


def _in_order(keys: np.ndarray) -> bool:
    return len(keys) < 2 or not bool((keys[1:] < keys[:-1]).any())


class _Rest:
    """The rest's final rows of a table (sorted by ``key``: the event id, a flow's place in the
    file), handed out range by range."""

    def __init__(self, table: pa.Table, key: str) -> None:
        at = table.column(key).to_numpy()
        if not _in_order(at):
            table = table.sort_by(key)
            at = table.column(key).to_numpy()
        self.table, self.key, self.keys, self.at = table, key, at, 0

    def merged(self, first: int, end: int, chunk: pa.Table) -> Iterator[pa.Table]:
        """The rows before ``first`` not handed out yet, then those of [first, end) merged
        with ``chunk`` (the chunk's rows, all in that range) in key order."""
        lo, hi = (int(x) for x in np.searchsorted(self.keys, [first, end]))
        if lo > self.at:
            yield self.table.slice(self.at, lo - self.at)
        if hi == lo and _in_order(chunk.column(self.key).to_numpy()):  # the chunk's rows alone
            if chunk.num_rows:
                yield chunk.cast(self.table.schema)
        else:
            both = (
                pa.concat_tables([self.table.slice(lo, hi - lo), chunk.cast(self.table.schema)])
                .unify_dictionaries()
                .combine_chunks()
            )
            yield both.sort_by(self.key)
        self.at = max(self.at, hi)

    def tail(self) -> pa.Table | None:
        """The rows after the last range."""
        return self.table.slice(self.at) if self.at < len(self.keys) else None
