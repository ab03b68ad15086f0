"""Enriching a store's parts into a :class:`~asaptrace.store.StoreWriter`, a group of ranks at a time.

The source may be the writer's own raw parts (``asaptrace ingest``: the driver writes them, this
enriches them before the single commit) or another store (re-enrichment). Ranks are taken in
groups of consecutive ranks holding at most ``group_events`` events (a rank larger than that is a
group of its own), and every step of :mod:`asaptrace.enrich.frames` runs on a whole group at once —
a few vectorised passes whose polars queries are paid per group, not per rank:

1. **facts**: each group is read (one query per table, over only the parts holding its ranks),
   segmented and classified; what needs every rank is kept (the event names for the taxonomy are
   read first, then per group: the idle gaps of ranks without step annotations, the collective
   kernels for clock alignment, kinds for roles, annotation spans for DP groups and batches). Ranks
   without step annotations wait for the run-wide step plan and are filled in a second round.
2. **decide**: the cross-rank decisions (step plan, topology, clock offsets, batches) are taken on
   that small data.
3. **write**: each group is enriched again and its ranks' final parts are written once, one part
   per rank, staged beside the raw parts until all are written. The group enriched last in the
   first pass is kept and written first (a run that fits in one group is segmented once).

Peak memory is about one group plus the cross-rank data, not the whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

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
from asaptrace.enrich.segment import StepPlan
from asaptrace.enrich.taxonomy import Profile, Taxonomy
from asaptrace.enrich.topology import ParallelConfig
from asaptrace.schema import TABLE_SCHEMAS
from asaptrace.store import PARTED_TABLES, StoreWriter, TraceStore

#: ``(phase, done, total)``: what the enrichment is doing (phases: names, segment, segment ranks
#: without steps, align clocks, roles, batches, write; done/total count ranks, or 0/1 for a phase)
EnrichProgress = Callable[[str, int, int], None]

#: Events per group of ranks enriched together: bounds the memory (≈ 1 KB per event at the peak
#: of segmentation) while keeping the polars queries per group, not per rank.
GROUP_EVENTS = 50_000


@dataclass(frozen=True)
class _Index:
    """Where each rank's rows are: per parted table, rank → the parts holding them (scan order)."""

    parts: dict[str, dict[int, list[Path]]]
    position: dict[Path, int]  # a part's place in its table's scan order
    events: dict[int, int]  # rank → event rows

    @classmethod
    def of(cls, src: TraceStore) -> _Index:
        parts: dict[str, dict[int, list[Path]]] = {}
        position: dict[Path, int] = {}
        events: dict[int, int] = {}
        for name in PARTED_TABLES:
            files = src.parts(name)
            parts[name] = {}
            if not files:
                continue
            where = (
                pl.scan_parquet(files, include_file_paths="_file")
                .group_by("_file", "rank")
                .agg(pl.len().alias("n"))
                .collect()
            )
            position.update({f: i for i, f in enumerate(files)})
            path_of = {str(f): f for f in files}
            for file, rank, n in where.iter_rows():
                parts[name].setdefault(rank, []).append(path_of[file])
                if name == "events":
                    events[rank] = events.get(rank, 0) + n
        return cls(parts, position, events)

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
        """Table ``name``'s rows of ``ranks`` (one query over the parts that hold them)."""
        by_rank = self.parts[name]
        files = sorted({f for r in ranks for f in by_rank.get(r, ())}, key=self.position.__getitem__)
        if not files:
            return pl.from_arrow(TABLE_SCHEMAS[name].empty_table())  # type: ignore[return-value]
        return pl.scan_parquet(files).filter(pl.col("rank").is_in(ranks)).collect()


def enrich_streaming(
    src: TraceStore,
    writer: StoreWriter,
    *,
    parallel: ParallelConfig | str | None,
    taxonomy: Taxonomy | Profile | str | Path | None,
    batches: pl.DataFrame | str | Path | None,
    progress: EnrichProgress | None = None,
    group_events: int | None = None,
) -> dict[str, Any]:
    """Enrich ``src``'s parts group of ranks by group into ``writer`` (ranks, batches and parted
    tables; see the module docstring); returns the enrichment's meta. ``src`` may be the writer's
    own temporary directory; ``group_events`` defaults to :data:`GROUP_EVENTS`."""
    group_events = group_events or GROUP_EVENTS
    ranks = src.read("ranks")
    rank_ids = ranks.get_column("rank").to_list()
    tell = progress or (lambda phase, done, total: None)
    tell("names", 0, len(rank_ids))
    names = (
        src.events().select(pl.col("name").cast(pl.String).unique()).collect().get_column("name").drop_nulls()
    )
    tax = taxonomy_for(names.to_list(), taxonomy)
    index = _Index.of(src)

    def segmented(group: list[int]) -> tuple[RankSegments, pl.DataFrame]:
        args = index.read("args", group)
        return segment_ranks(index.read("events", group), args, ranks, tax), args

    # pass 1: the cross-rank facts; ranks without step annotations wait for the run-wide step plan
    # (a second round). The group enriched last is kept (never two groups' frames) and written first.
    facts: list[RankFacts] = []
    gaps: list[pl.DataFrame] = []
    stepless: list[int] = []
    kept: tuple[list[int], pl.DataFrame, pl.DataFrame] | None = None

    def facts_round(phase: str, todo: list[int], plan: StepPlan | None) -> None:
        nonlocal kept
        done = 0
        for group in index.groups(todo, group_events):
            tell(phase, done, len(todo))
            done += len(group)
            kept = None
            seg, args = segmented(group)
            g = stepless_gaps(seg) if plan is None else None
            if g is not None:
                gaps.append(g)
                without = set(g.get_column("rank").unique().to_list())
                stepless.extend(r for r in group if r in without)
                group = [r for r in group if r not in without]
                seg = seg.only(group)
            if group:
                filled, notes = fill_ranks(seg, plan)
                facts.append(facts_of(seg, filled, notes, args))
                kept = (group, filled, args) if g is None else None
                del filled
            del seg, args

    facts_round("segment", rank_ids, None)
    plan = plan_of(gaps)
    gaps.clear()
    facts_round("segment ranks without steps", stepless, plan)
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
    first = kept[0] if kept is not None else []
    rest = [r for r in rank_ids if r not in set(first)]
    order = ([first] if first else []) + index.groups(rest, group_events)
    done = 0
    for group in order:
        if kept is not None:
            _, filled, args = kept
            kept = None
        else:
            seg, args = segmented(group)
            filled = fill_ranks(seg, plan)[0]
            del seg
        events, flows = finish_ranks(filled, index.read("flows", group), ranks, decision.offsets)
        del filled
        tables = {"events": events, "args": args, "flows": flows}
        del events, args, flows
        for rank, parts in _rank_parts(group, tables):
            tell("write", done, len(rank_ids))
            done += 1
            for name, part in parts.items():
                writer.write_staged_part(name, f"{int(rank):05d}", part.to_arrow())  # type: ignore[arg-type]
        del tables
    writer.promote_staged()
    writer.write_table("ranks", decision.ranks.to_arrow())
    writer.write_table("batches", decision.batches.to_arrow())
    tell("write", len(rank_ids), len(rank_ids))
    return decision.meta


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
    """Each rank's rows, in their order: one stable sort, then zero-copy slices (no query per rank)."""
    if not table.height:
        return {}
    table = table.sort("rank", maintain_order=True)
    rank = table.get_column("rank").to_numpy()
    starts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1]])
    ends = np.r_[starts[1:], len(rank)]
    return {int(rank[a]): table.slice(a, b - a) for a, b in zip(starts, ends, strict=True)}
