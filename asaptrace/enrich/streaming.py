"""Enriching a store's parts into a :class:`~asaptrace.store.StoreWriter`, a group of ranks at a time.

The source may be the writer's own raw parts (``asaptrace ingest``: the driver holds them or
writes them as scratch parts, this enriches them before the single commit) or another store
(re-enrichment). Ranks are taken in groups of consecutive ranks holding at most ``group_events``
events (a rank larger than that is a group of its own), and every step of
:mod:`asaptrace.enrich.frames` runs on a whole group at once — a few vectorised passes whose
polars queries are paid per group, not per rank:

1. **facts**: each group is read (one query per table, over only the parts holding its ranks),
   segmented and classified; what needs every rank is kept (the event names for the taxonomy are
   read first, then per group: the idle gaps of ranks without step annotations, the collective
   kernels for clock alignment, kinds for roles, annotation spans for DP groups and batches). Ranks
   without step annotations wait for the run-wide step plan and are filled in a second round
   (a large rank enriched as its file was read, :class:`EarlyPass`, was cut by its own gaps and
   joins that round only if the plan cuts them otherwise).
2. **decide**: the cross-rank decisions (step plan, topology, clock offsets, batches) are taken on
   that small data.
3. **write**: each group's final parts are written once, one part per rank, staged beside the raw
   parts until all are written.

A rank is segmented once: its frames wait for the next round in memory within a budget (the last
group's in any case) and in Arrow IPC files of the staging folder beyond it (:class:`_Cache`).
Peak memory is about one group plus the cross-rank data, not the whole run.
"""

from __future__ import annotations

import shutil
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.enrich.frames import (
    RankFacts,
    RankSegments,
    decide,
    facts_of,
    fill_ranks,
    finish_ranks,
    plan_of,
    segment_ranks,
    stepless_gaps,
    taxonomy_for,
)
from asaptrace.enrich.segment import StepPlan, same_cut
from asaptrace.enrich.taxonomy import Profile, Taxonomy
from asaptrace.enrich.topology import ParallelConfig
from asaptrace.memory import give_back
from asaptrace.schema import TABLE_SCHEMAS
from asaptrace.store import PARTED_TABLES, StoreWriter, TraceStore, scan_parts

#: ``(phase, done, total)``: what the enrichment is doing (phases: names, segment, segment ranks
#: without steps, align clocks, roles, batches, write; done/total count ranks, or 0/1 for a phase)
EnrichProgress = Callable[[str, int, int], None]

#: Events per group of ranks enriched together: bounds the memory (≈ 1 KB per event at the peak
#: of segmentation) while keeping the polars queries per group, not per rank.
GROUP_EVENTS = 50_000


#: A part of a parted table: a Parquet file, or a raw part held in memory (``StoreWriter.held``).
Part = Path | pa.Table


@dataclass(frozen=True)
class _Index:
    """Where each rank's rows are: per parted table, rank → the parts holding them (scan order)."""

    parts: dict[str, dict[int, list[Part]]]
    position: dict[int, int]  # id() of a part → its place in its table's scan order
    events: dict[int, int]  # rank → event rows

    @classmethod
    def of(cls, src: TraceStore, held: dict[str, dict[str, pa.Table]] | None = None) -> _Index:
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
            seen.update(_names(p))
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
        frames = [scan_parts([p]) if isinstance(p, Path) else _frame(p).lazy() for p in order]
        return pl.concat(frames).filter(keep).collect()


def _frame(table: pa.Table) -> pl.DataFrame:
    """A held part as the frame polars reads from its Parquet file (same dtypes)."""
    return pl.from_arrow(table)  # type: ignore[return-value]


@dataclass
class _Early:
    """A rank's first pass, done as its file was read: its facts and final frames (in memory or
    spilled). A rank without step annotations is cut into steps by its own gaps (``guess``); the
    cut stands if the run-wide plan cuts its gaps alike (:func:`~asaptrace.enrich.segment.same_cut`),
    else the rank is segmented again in the usual second round."""

    facts: RankFacts
    frames: _Kept  # (filled, args)
    gaps: pl.DataFrame | None = None  # the step gaps of a rank without step annotations
    guess: StepPlan | None = None  # the plan its own gaps give (what it was filled by)


class EarlyPass:
    """The enrichment's first pass, rank by rank, on the reader threads as each file is read.

    :meth:`add` segments a rank's raw tables the moment they exist, so that work overlaps the
    reading of the next files instead of waiting for the last one. It needs the taxonomy, which
    is chosen from the event names of *every* rank: it is guessed from the first file read, and
    :func:`enrich_streaming` uses the early results only if the taxonomy chosen from all names
    is that guess (runs whose ranks share their kernel names, the usual case); otherwise they are
    dropped and the pass runs as usual. Either way the store is the same. The frames the next
    round needs are kept in memory within ``cache_bytes`` and spilled to the staging folder
    beyond it (:class:`_Cache`). Only ranks that would be a group of their own are taken (see
    :meth:`add`).
    """

    def __init__(self, taxonomy: Taxonomy | Profile | str | Path | None, cache_bytes: int) -> None:
        self.user = taxonomy
        self.lock = threading.Lock()
        self.taxonomy: Taxonomy | None = None
        self.cache = _Cache(cache_bytes)
        self.ranks: dict[int, _Early] = {}

    def add(self, root: Path, rank: int, events: pa.Table, args: pa.Table) -> None:
        """Segment one rank's raw tables (a file's, with its rank filled in; ``root`` is the
        store's staging folder, where frames beyond the budget are spilled); thread-safe. A rank
        of fewer than :data:`GROUP_EVENTS` events is left to the usual pass, which enriches it
        in a group with its neighbours (its polars queries paid per group, not per rank)."""
        if events.num_rows < GROUP_EVENTS:
            return
        give_back()  # the file's scan is freed: its segmentation reuses those pages (−35 MB at 0.5 GB)
        with self.lock:
            if self.taxonomy is None:
                self.taxonomy = taxonomy_for(_names(events), self.user)
                self.cache.spill_to(Path(root))
            tax = self.taxonomy
        try:
            early = self._first_pass(rank, events, args, tax, self.cache)
        except Exception:  # left to the usual pass, which raises it if it is real: made with a
            return  # taxonomy that may be a wrong guess, an error here must not fail the run
        with self.lock:
            self.ranks[rank] = early

    @staticmethod
    def _first_pass(rank: int, events: pa.Table, args: pa.Table, tax: Taxonomy, cache: _Cache) -> _Early:
        ev, ar = _frame(events), _frame(args)
        recorded = pl.DataFrame(
            {"rank": [rank], "clock_offset_ns": [0]}, schema={"rank": pl.Int32, "clock_offset_ns": pl.Int64}
        )
        seg = segment_ranks(ev, ar, recorded, tax)
        del ev
        gaps = stepless_gaps(seg)
        guess = plan_of([gaps]) if gaps is not None else None
        filled, notes = fill_ranks(seg, guess)
        return _Early(facts_of(seg, filled, notes, ar), cache.keep(filled, ar), gaps, guess)

    def take(self, tax: Taxonomy) -> dict[int, _Early]:
        """The early results, if they were made with ``tax`` (else none, and what they kept is
        let go of); the pass lets go of them."""
        with self.lock:
            out, self.ranks = self.ranks, {}
        if self.taxonomy != tax:
            for e in out.values():
                self.cache.drop(e.frames)
            out = {}
        return out


def _names(table: pa.Table) -> list[str]:
    """The distinct names a raw events part uses (its dictionary's codes in use, not all entries)."""
    name = table.column("name").combine_chunks()
    if not isinstance(name, pa.DictionaryArray):
        return pc.unique(name).drop_null().to_pylist()
    return name.dictionary.take(pc.unique(name.indices).drop_null()).to_pylist()


def enrich_streaming(
    src: TraceStore,
    writer: StoreWriter,
    *,
    parallel: ParallelConfig | str | None,
    taxonomy: Taxonomy | Profile | str | Path | None,
    batches: pl.DataFrame | str | Path | None,
    progress: EnrichProgress | None = None,
    group_events: int | None = None,
    held: dict[str, dict[str, pa.Table]] | None = None,
    cache_bytes: int = 0,
    early: EarlyPass | None = None,
) -> dict[str, Any]:
    """Enrich ``src``'s parts group of ranks by group into ``writer`` (ranks, batches and parted
    tables; see the module docstring); returns the enrichment's meta. ``src`` may be the writer's
    own temporary directory, whose raw parts may partly be ``held`` in memory (the writer's
    :attr:`~asaptrace.store.StoreWriter.held`); ``group_events`` defaults to :data:`GROUP_EVENTS`.
    A rank is segmented once: its frames are kept for the next round, up to ``cache_bytes`` in
    memory (and the last group's in any case) and spilled to the writer's staging folder beyond
    (0: memory bounded by about one group). ``early`` holds the first pass of ranks already
    segmented as their files were read (:class:`EarlyPass`)."""
    group_events = group_events or GROUP_EVENTS
    ranks = src.read("ranks")
    rank_ids = ranks.get_column("rank").to_list()
    tell = progress or (lambda phase, done, total: None)
    tell("names", 0, len(rank_ids))
    index = _Index.of(src, held)
    tax = taxonomy_for(index.names(), taxonomy)
    cache = early.cache if early is not None else _Cache(cache_bytes)
    with cache.spilling(writer.tmp):

        def segmented(group: list[int]) -> tuple[RankSegments, pl.DataFrame]:
            args = index.read("args", group)
            return segment_ranks(index.read("events", group), args, ranks, tax), args

        # pass 1: the cross-rank facts; ranks without step annotations wait for the run-wide step plan
        # (a second round). Every group's frames are kept for the next round (in memory or spilled).
        facts: list[RankFacts] = []
        gaps: list[pl.DataFrame] = []
        stepless: list[tuple[list[int], _Kept]] = []  # round 2's groups
        guessed: list[tuple[list[int], _Early]] = []  # early ranks cut by their own gaps

        done = 0
        ready = early.take(tax) if early is not None else {}
        for group in _pass_one_groups(index, rank_ids, ready, group_events):
            tell("segment", done, len(rank_ids))
            done += len(group)
            if group[0] in ready:  # segmented as its file was read
                e = ready.pop(group[0])
                if e.gaps is not None:  # cut by its own gaps: checked against the plan below
                    gaps.append(e.gaps)
                    guessed.append((group, e))
                else:
                    facts.append(e.facts)
                    cache.final_kept(group, e.frames)
                del e
                continue
            seg, args = segmented(group)
            g = stepless_gaps(seg)
            if g is not None:
                gaps.append(g)
                without = set(g.get_column("rank").unique().to_list())
                mine = [r for r in group if r in without]
                group = [r for r in group if r not in without]
                stepless.append(
                    (mine, cache.keep_segments(seg.only(mine), args.filter(pl.col("rank").is_in(mine))))
                )
                seg, args = seg.only(group), args.filter(pl.col("rank").is_in(group))
            if group:
                filled, notes = fill_ranks(seg, None)
                facts.append(facts_of(seg, filled, notes, args))
                cache.final(group, filled, args)
            del seg, args
        plan = plan_of(gaps)
        gaps.clear()
        again: list[list[int]] = []  # ranks cut by their own gaps otherwise than by the plan
        for group, e in guessed:
            assert e.gaps is not None and e.guess is not None and plan is not None
            if same_cut(e.gaps, e.guess, plan):
                facts.append(e.facts)
                cache.final_kept(group, e.frames)
            else:
                cache.drop(e.frames)
                again.append(group)
        guessed.clear()
        # round 2: the ranks without steps, filled by the plan, two groups side by side
        jobs: list[tuple[list[int], _Kept | None]] = [*stepless, *((group, None) for group in again)]
        total = sum(len(group) for group, _ in jobs)

        def filled_with_plan(i: int) -> tuple[list[int], RankFacts]:
            group, kept = jobs[i]
            seg, args = cache.take_segments(kept) if kept is not None else segmented(group)
            filled, notes = fill_ranks(seg, plan)
            found = facts_of(seg, filled, notes, args)
            cache.final(group, filled, args)
            return group, found

        done = 0
        for group, group_facts in _ahead(filled_with_plan, len(jobs), workers=2):
            tell("segment ranks without steps", done, total)
            done += len(group)
            facts.append(group_facts)
        jobs.clear()
        give_back()  # the first pass's buffers are freed: the decision and writes reuse their pages
        tell("align clocks, roles, batches", 0, 1)
        decision = decide(
            facts,
            ranks,
            tax,
            plan,
            existing_batches=src.read("batches") if (src.path / "batches.parquet").is_file() else None,
            parallel=parallel,
            batches=batches,
        )
        facts.clear()
        # pass 2: each group's final parts, written once
        order = cache.take_final()
        assert sorted(r for group, _ in order for r in group) == sorted(rank_ids), "every rank is kept once"

        def final_parts(i: int) -> list[tuple[int, dict[str, pa.Table]]]:
            """Group ``i``'s final parts, rank by rank (run on a helper thread, a few groups ahead)."""
            group, kept = order[i]
            filled, args = cache.take(kept)
            events, flows = finish_ranks(filled, index.read("flows", group), ranks, decision.offsets)
            del filled
            tables = {"events": events, "args": args, "flows": flows}
            del events, args, flows
            return [
                (rank, {name: part.to_arrow() for name, part in parts.items()})  # type: ignore[misc]
                for rank, parts in _rank_parts(group, tables)
            ]

        done = 0
        with _BackgroundWrites(writer) as parts_out:
            for parts_of_group in _ahead(final_parts, len(order), workers=2):
                for rank, parts in parts_of_group:
                    tell("write", done, len(rank_ids))
                    done += 1
                    for name, table in parts.items():
                        parts_out.put(name, f"{int(rank):05d}", table)
                del parts_of_group
        writer.promote_staged()
        writer.write_table("ranks", decision.ranks.to_arrow())
        writer.write_table("batches", decision.batches.to_arrow())
        tell("write", len(rank_ids), len(rank_ids))
        return decision.meta


def _pass_one_groups(
    index: _Index, rank_ids: list[int], ready: dict[int, _Early], budget: int
) -> list[list[int]]:
    """The first pass's groups, in rank order: each rank done early alone, the others grouped as usual."""
    out: list[list[int]] = []
    run: list[int] = []
    for rank in rank_ids:
        if rank in ready:
            out += [*index.groups(run, budget), [rank]]
            run = []
        else:
            run.append(rank)
    return out + index.groups(run, budget)


def _ahead(fn: Callable[[int], Any], n: int, *, workers: int) -> Iterator[Any]:
    """``fn(0) … fn(n - 1)`` in order, computed on ``workers`` threads at most ``workers`` ahead
    of the consumer (polars and Arrow release the GIL, so groups are enriched side by side while
    memory stays a few groups). The first error is raised in order; nothing is started after it."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="asaptrace-enrich") as pool:
        pending: deque[Future[Any]] = deque()
        try:
            for i in range(n):
                pending.append(pool.submit(fn, i))
                if len(pending) > workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()


class _BackgroundWrites:
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

    def __enter__(self) -> _BackgroundWrites:
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


class _Kept:
    """Frames kept for a later round of the enrichment: in memory, or spilled to Arrow IPC files
    (writing and reading a rank's columns back costs a fraction of segmenting it again)."""

    __slots__ = ("items", "paths", "size")

    def __init__(self, items: tuple[Any, ...], size: int, paths: dict[int, Path] | None = None) -> None:
        self.items = items  # a spilled frame's place holds None
        self.size = size  # bytes counted against the cache's budget (0 when spilled)
        self.paths = paths or {}


#: The staging folder's subfolder for spilled frames (removed before the store is committed).
SPILL_DIR = ".spill"


class _Cache:
    """The enrichment's frames between rounds: in memory while they fit in ``budget`` bytes,
    spilled to the staging folder beyond it; the last group's final frames stay in memory in any
    case (a run that fits in one group is never spilled). Thread-safe: reader and enrichment
    threads keep and take frames side by side."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.lock = threading.Lock()
        self.spill: Path | None = None
        self.spilled = 0  # frames written so far (their file names)
        self.groups: list[tuple[list[int], _Kept]] = []
        self.last: tuple[list[int], _Kept] | None = None

    def spill_to(self, root: Path) -> None:
        """Spill under ``root`` (the store's staging folder) from now on."""
        self.spill = root / SPILL_DIR

    def keep(self, *items: Any) -> _Kept:
        """Keep ``items`` (frames and small objects) for a later round: in memory if the frames
        fit beside what is kept, else the frames are written to the spill folder."""
        size = _size(items)
        with self.lock:
            fits = self.used + size <= self.budget or self.spill is None
            if fits:
                self.used += size
        return _Kept(items, size) if fits else self._spilled(items)

    def keep_segments(self, seg: RankSegments, args: pl.DataFrame) -> _Kept:
        return self.keep(seg.events, seg.spans, seg.notes, args)

    def take(self, kept: _Kept) -> tuple[Any, ...]:
        """The items kept (read back if spilled); the cache lets go of them."""
        items = list(kept.items)
        for i, path in kept.paths.items():
            items[i] = pl.read_ipc(path)
        self.drop(kept)
        return tuple(items)

    def take_segments(self, kept: _Kept) -> tuple[RankSegments, pl.DataFrame]:
        events, spans, notes, args = self.take(kept)
        return RankSegments(events, spans, notes), args

    def drop(self, kept: _Kept) -> None:
        """Let go of ``kept`` (its spilled files removed, its bytes no longer counted)."""
        for path in kept.paths.values():
            path.unlink(missing_ok=True)
        with self.lock:
            self.used -= kept.size
        kept.items, kept.paths, kept.size = (), {}, 0

    def final(self, group: list[int], filled: pl.DataFrame, args: pl.DataFrame) -> None:
        """Keep a group's final frames for the writing pass: in memory within the budget, else as
        the last group (in memory all the same), the previous last group spilled in its place."""
        kept = _Kept((filled, args), _size((filled, args)))
        with self.lock:
            if self.used + kept.size <= self.budget or self.spill is None:
                self.used += kept.size
                self.groups.append((group, kept))
                return
            kept.size = 0
            before, self.last = self.last, (group, kept)
        if before is not None:
            spilled = self._spilled(before[1].items)
            with self.lock:
                self.groups.append((before[0], spilled))

    def final_kept(self, group: list[int], kept: _Kept) -> None:
        """Keep frames :meth:`keep` kept as a group's final frames, where they are."""
        with self.lock:
            self.groups.append((group, kept))

    def take_final(self) -> list[tuple[list[int], _Kept]]:
        """Every group's final frames, the last group first; the cache holds none after."""
        with self.lock:
            out = ([self.last] if self.last is not None else []) + self.groups
            self.groups, self.last = [], None
        return out

    @contextmanager
    def spilling(self, root: Path) -> Iterator[None]:
        """Spill under ``root`` in the block; the spill folder is removed on leaving it."""
        self.spill_to(root)
        try:
            yield
        finally:
            shutil.rmtree(root / SPILL_DIR, ignore_errors=True)

    def _spilled(self, items: tuple[Any, ...]) -> _Kept:
        assert self.spill is not None
        with self.lock:
            first, self.spilled = self.spilled, self.spilled + len(items)
        self.spill.mkdir(exist_ok=True)
        out: list[Any] = list(items)
        paths: dict[int, Path] = {}
        for i, item in enumerate(items):
            if isinstance(item, pl.DataFrame):
                paths[i] = self.spill / f"{first + i}.arrow"
                item.write_ipc(paths[i])
                out[i] = None
        return _Kept(tuple(out), 0, paths)


def _size(items: tuple[Any, ...]) -> int:
    return sum(f.estimated_size() for f in items if isinstance(f, pl.DataFrame))


def _rank_parts(group: list[int], tables: dict[str, pl.DataFrame]) -> Iterator[tuple[int, dict]]:
    """Each rank of ``group`` with its part of each table: events always (an empty one for a rank
    without events), args and flows when the rank has rows there."""
    split = {name: _by_rank(table) for name, table in tables.items()}
    for rank in group:
        parts = {name: split[name][rank] for name in tables if rank in split[name]}
        if "events" not in parts:
            parts["events"] = tables["events"].clear()
        yield rank, parts


def _by_rank(table: pl.DataFrame) -> dict[int, pl.DataFrame]:
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


def ingest_enrichment(
    *,
    parallel: ParallelConfig | None,
    taxonomy: Profile | None,
    batches: pl.DataFrame | None,
    progress: Any = None,
    budget: int,
) -> tuple[Callable[[StoreWriter, dict[str, Any]], dict[str, Any]], Callable[..., Any]]:
    """The two hooks a new store's ingest calls (:func:`asaptrace.ingest.driver.ingest_paths`):
    ``after_read`` runs a large rank's first enrichment pass as its file is read (:class:`EarlyPass`),
    ``finish`` enriches the raw parts in the store's staging folder before the one commit, holding
    up to ``budget`` bytes of raw tables and frames in memory; returns (finish, after_read)."""
    early = EarlyPass(taxonomy, budget)

    def finish(writer: StoreWriter, meta: dict[str, Any]) -> dict[str, Any]:
        raw = TraceStore(path=writer.tmp, meta=meta)
        enriched = enrich_streaming(
            raw,
            writer,
            parallel=parallel,
            taxonomy=taxonomy,
            batches=batches,
            progress=progress,
            held=writer.held,
            cache_bytes=budget,
            early=early,
        )
        return {**meta, **enriched}

    return finish, early.add
