"""Where the streaming enrichment reads a store's parts and how it writes them back.

:class:`PartsIndex` says which parts hold each rank's rows (Parquet files, or raw parts the writer
still holds in memory) and reads a group of ranks with one query per table; :func:`rank_parts` cuts a
group's final tables into one part per rank, and :class:`BackgroundWrites` encodes and writes
those parts on background threads while the next group is enriched. Used by
:mod:`asaptrace.enrich.streaming` (the passes) and :mod:`asaptrace.enrich.early_pass`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.schema import TABLE_SCHEMAS
from asaptrace.store import PARTED_TABLES, StoreWriter, TraceStore, event_names, scan_parts

#: A part of a parted table: a Parquet file, or a raw part held in memory (``StoreWriter.held``).
Part = Path | pa.Table


@dataclass(frozen=True)
class PartsIndex:
    """Where each rank's rows are: per parted table, rank → the parts holding them (scan order)."""

    parts: dict[str, dict[int, list[Part]]]
    position: dict[int, int]  # id() of a part → its place in its table's scan order
    events: dict[int, int]  # rank → event rows

    @classmethod
    def of(cls, src: TraceStore, held: dict[str, dict[str, pa.Table]] | None = None) -> PartsIndex:
        parts: dict[str, dict[int, list[Part]]] = {}
        position: dict[int, int] = {}
        events: dict[int, int] = {}
        for name in PARTED_TABLES:
            files = src.parts(name)
            kept = (held or {}).get(name, {})
            # file parts and held parts in one scan order: by part id (the source file's index)
            named = [(f.stem, f) for f in files] + [(f"part-{k}", t) for k, t in kept.items()]
            order: list[Part] = [p for _, p in sorted(named, key=lambda e: e[0])]
            parts[name] = {}
            position.update({id(p): i for i, p in enumerate(order)})
            rows: list[tuple[Part, int, int]] = []
            if files:
                where = (
                    scan_parts(files, include_file_paths="_file")
                    .group_by("_file", "rank")
                    .agg(pl.len().alias("n"))
                    .collect()
                )
                path_of = {str(f): f for f in files}
                rows += [(path_of[file], rank, n) for file, rank, n in where.iter_rows()]
            for table in kept.values():
                counts = pc.value_counts(table.column("rank")).to_pylist()
                rows += [(table, c["values"], c["counts"]) for c in counts]
            for part, rank, n in sorted(rows, key=lambda r: position[id(r[0])]):
                parts[name].setdefault(rank, []).append(part)
                if name == "events":
                    events[rank] = events.get(rank, 0) + n
        return cls(parts, position, events)

    def names(self) -> list[str]:
        """The distinct event names of every rank (the taxonomy is chosen from them)."""
        seen: set[str] = set()
        files = [p for ps in self.parts["events"].values() for p in ps if isinstance(p, Path)]
        if files:
            names = scan_parts(sorted(set(files))).select(pl.col("name").cast(pl.String).unique()).collect()
            seen.update(names.get_column("name").drop_nulls().to_list())
        for p in {
            id(p): p for ps in self.parts["events"].values() for p in ps if not isinstance(p, Path)
        }.values():
            seen.update(event_names(p))
        return sorted(seen)

    def groups(self, ranks: list[int], budget: int) -> list[list[int]]:
        """``ranks`` cut, in their order, into groups of at most ``budget`` events (at least one rank)."""
        groups: list[list[int]] = []
        rows = 0
        for rank in ranks:
            n = self.events.get(rank, 0)
            if not groups or rows + n > budget:
                groups.append([])
                rows = 0
            groups[-1].append(rank)
            rows += n
        return groups

    def read(self, name: str, ranks: list[int]) -> pl.DataFrame:
        """Table ``name``'s rows of ``ranks``, in scan order (one query over the file parts that hold
        them; held parts are taken as they are)."""
        by_rank = self.parts[name]
        found = {id(p): p for r in ranks for p in by_rank.get(r, ())}
        order = sorted(found.values(), key=lambda p: self.position[id(p)])
        if not order:
            return pl.from_arrow(TABLE_SCHEMAS[name].empty_table())  # type: ignore[return-value]
        keep = pl.col("rank").is_in(ranks)
        if all(isinstance(p, Path) for p in order):
            return scan_parts(order).filter(keep).collect()
        frames = [scan_parts([p]) if isinstance(p, Path) else frame_of(p).lazy() for p in order]
        return pl.concat(frames).filter(keep).collect()


def frame_of(table: pa.Table) -> pl.DataFrame:
    """A held part as the frame polars reads from its Parquet file (same dtypes)."""
    return pl.from_arrow(table)  # type: ignore[return-value]


class BackgroundWrites:
    """The writing pass's Parquet parts, encoded and written on ``workers`` background threads
    (pyarrow releases the GIL) while the next group is enriched; at most ``pending`` parts wait, so memory
    stays about one group. The first write error is raised by the next :meth:`put` or on leaving
    the ``with`` block, which waits for every write."""

    def __init__(self, writer: StoreWriter, pending: int = 6, workers: int = 2) -> None:
        self.writer = writer
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asaptrace-write")
        self.futures: deque[Future[None]] = deque()
        self.pending = pending
        self.failed: BaseException | None = None

    def put(self, name: str, part_id: str, table: pa.Table) -> None:
        while len(self.futures) >= self.pending:
            self.futures.popleft().result()
        self.futures.append(self.pool.submit(self._write, name, part_id, table))

    def _write(self, name: str, part_id: str, table: pa.Table) -> None:
        if self.failed is not None:  # after a failed write (a full disk) nothing more is tried
            raise self.failed
        try:
            self.writer.write_staged_part(name, part_id, table)
        except BaseException as err:
            self.failed = err
            raise

    def __enter__(self) -> BackgroundWrites:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Wait for every write (none may land after the store is removed); raise the first
        write error unless the block is already leaving by an error."""
        try:
            while self.futures:
                err = self.futures.popleft().exception()
                if err is not None and exc is None:
                    raise err
        finally:
            for f in self.futures:
                f.cancel()
            self.pool.shutdown(wait=True)


def rank_parts(group: list[int], tables: dict[str, pl.DataFrame]) -> Iterator[tuple[int, dict]]:
    """Each rank of ``group`` with its part of each table: events always (an empty one for a rank
    without events), args and flows when the rank has rows there."""
    split = {name: by_rank(table) for name, table in tables.items()}
    for rank in group:
        parts = {name: split[name][rank] for name in tables if rank in split[name]}
        if "events" not in parts:
            parts["events"] = tables["events"].clear()
        yield rank, parts


def by_rank(table: pl.DataFrame) -> dict[int, pl.DataFrame]:
    """Each rank's rows, in their order: one stable sort (only when out of rank order), then
    zero-copy slices (no query per rank)."""
    if not table.height:
        return {}
    rank = table.get_column("rank").to_numpy()
    if (rank[1:] < rank[:-1]).any():  # events come sorted from finish_ranks: a sort copies every column
        table = table.sort("rank", maintain_order=True)
        rank = table.get_column("rank").to_numpy()
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    ends = np.r_[starts[1:], len(rank)]
    return {int(rank[a]): table.slice(a, b - a) for a, b in zip(starts, ends, strict=True)}
