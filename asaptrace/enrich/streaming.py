"""Enriching a store's parts into a :class:`~asaptrace.store.StoreWriter`, a group of ranks at a time.

The source may be the writer's own raw parts (``asaptrace ingest``: the driver holds them or
writes them as scratch parts, this enriches them before the single commit) or another store
(re-enrichment). Ranks are taken in groups of consecutive ranks holding at most ``group_events``
events (a rank larger than that is a group of its own), and every step of
:mod:`asaptrace.enrich.frames` runs on a whole group at once — a few vectorised passes whose
polars queries are paid per group, not per rank:

1. **facts** (:func:`first_round`, :func:`second_round`): each group is read (one query per table,
   over only the parts holding its ranks), segmented and classified; what needs every rank is kept
   (the event names for the taxonomy are read first, then per group: the idle gaps of ranks without
   step annotations, the collective kernels for clock alignment, kinds for roles, annotation spans
   for DP groups and batches). Ranks without step annotations wait for the run-wide step plan and
   are filled in a second round (a large rank enriched as its file was read,
   :class:`~asaptrace.enrich.early_pass.EarlyPass`, was cut by its own gaps and joins that round
   only if the plan cuts them otherwise).
2. **decide**: the cross-rank decisions (step plan, topology, clock offsets, batches) are taken on
   that small data, on a thread of their own while the writing pass reads its first groups back.
3. **write** (:func:`write_round`): each group's final parts are written once, one part per rank,
   staged beside the raw parts until all are written; every rank must be written exactly once
   (:func:`check_every_rank_once`, an :class:`~asaptrace.errors.AccountingError` otherwise).

A rank is segmented once: its frames wait for the next round in memory within a budget (the last
group's in any case) and in Arrow IPC files of the staging folder beyond it
(:mod:`asaptrace.enrich.spill_cache`). Where the parts are and how they are written back is
:mod:`asaptrace.enrich.store_parts`. Peak memory is about one group plus the cross-rank data, not
the whole run.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from asaptrace.chunks import CHUNK_DIR, HostChunks
from asaptrace.enrich.early_pass import Early, EarlyPass
from asaptrace.enrich.frames import (
    Decision,
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
from asaptrace.enrich.host_chunks import HostPass
from asaptrace.enrich.spill_cache import Kept, SpillCache
from asaptrace.enrich.store_parts import BackgroundWrites, PartsIndex, rank_parts
from asaptrace.enrich.structure import StepPlan
from asaptrace.enrich.taxonomy import Profile, Taxonomy
from asaptrace.enrich.topology import ParallelConfig
from asaptrace.errors import AccountingError
from asaptrace.executors import ahead_in_order
from asaptrace.memory import give_back
from asaptrace.store import StoreWriter, TraceStore

__all__ = [
    "GROUP_EVENTS",
    "EarlyPass",
    "EnrichProgress",
    "Enrichment",
    "FirstRound",
    "check_every_rank_once",
    "enrich_streaming",
    "first_round",
    "ingest_enrichment",
    "second_round",
    "write_round",
]

#: ``(phase, done, total)``: what the enrichment is doing (phases: names, segment, segment ranks
#: without steps, align clocks, roles, batches, write; done/total count ranks, or 0/1 for a phase)
EnrichProgress = Callable[[str, int, int], None]

#: Events per group of ranks enriched together: bounds the memory (≈ 1 KB per event at the peak
#: of segmentation) while keeping the polars queries per group, not per rank.
GROUP_EVENTS = 50_000


@dataclass(frozen=True)
class Enrichment:
    """What every round of one enrichment reads: where the parts are, the ranks table, the
    taxonomy chosen from every rank's names, the frames kept between rounds, the progress."""

    index: PartsIndex
    ranks: pl.DataFrame
    tax: Taxonomy
    cache: SpillCache
    tell: EnrichProgress
    host: dict[int, HostPass] = field(default_factory=dict)  # big ranks' host chunks (a group alone)

    @property
    def rank_ids(self) -> list[int]:
        return self.ranks.get_column("rank").to_list()

    def segmented(self, group: list[int]) -> tuple[RankSegments, pl.DataFrame]:
        """A group's raw events and args read and segmented (its args too: the facts need them)."""
        args = self.index.read("args", group)
        outside = self.host.get(group[0]) if len(group) == 1 else None
        return segment_ranks(self.index.read("events", group), args, self.ranks, self.tax, outside), args


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
    host_chunks: dict[int, HostChunks] | None = None,
) -> dict[str, Any]:
    """Enrich ``src``'s parts group of ranks by group into ``writer`` (ranks, batches and parted
    tables; see the module docstring); returns the enrichment's meta. ``src`` may be the writer's
    own temporary directory, whose raw parts may partly be ``held`` in memory (the writer's
    :attr:`~asaptrace.store.StoreWriter.held`); ``group_events`` defaults to :data:`GROUP_EVENTS`.
    A rank is segmented once: its frames are kept for the next round, up to ``cache_bytes`` in
    memory (and the last group's in any case) and spilled to the writer's staging folder beyond
    (0: memory bounded by about one group). ``early`` holds the first pass of ranks already
    segmented as their files were read (:class:`EarlyPass`); ``host_chunks`` the host rows of big
    ranks their reader wrote in chunks (rank → :class:`~asaptrace.chunks.HostChunks`), each
    such rank enriched alone (:mod:`asaptrace.enrich.host_chunks`)."""
    ranks = src.read("ranks")
    tell = progress or (lambda phase, done, total: None)
    tell("names", 0, ranks.height)
    index = PartsIndex.of(src, held)
    host_chunks = host_chunks or {}
    names = set(index.names()).union(*(c.names for c in host_chunks.values()))
    tax = taxonomy_for(sorted(names), taxonomy)
    cache = early.cache if early is not None else SpillCache(cache_bytes)
    recorded = ranks.select("rank", "clock_offset_ns")
    host = {r: HostPass(c, recorded) for r, c in host_chunks.items()}
    run = Enrichment(index, ranks, tax, cache, tell, host)
    with cache.spilling(writer.tmp):
        first = first_round(run, early.take(tax) if early is not None else {}, group_events or GROUP_EVENTS)
        facts = first.facts
        facts += second_round(run, first.jobs, first.plan)
        give_back()  # the first pass's buffers are freed: the decision and writes reuse their pages
        tell("align clocks, roles, batches", 0, 1)
        existing = src.read("batches") if (src.path / "batches.parquet").is_file() else None
        # decided on a thread of its own while the writing pass reads its first groups' frames back
        # (what needs no decision), instead of before it with a core idle
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="asaptrace-decide") as pool:
            deciding = pool.submit(
                decide,
                facts,
                ranks,
                tax,
                first.plan,
                existing_batches=existing,
                parallel=parallel,
                batches=batches,
            )
            write_round(run, writer, deciding.result)
            decision = deciding.result()
        facts.clear()
        return decision.meta


@dataclass
class FirstRound:
    """What the first round found: the facts of the ranks it finished, the run-wide step plan
    (None: every rank has steps), and the second round's jobs — each a group of ranks without
    step annotations with its segmented frames, or (None) a group to segment again."""

    facts: list[RankFacts] = field(default_factory=list)
    plan: StepPlan | None = None
    jobs: list[tuple[list[int], Kept | None]] = field(default_factory=list)


def first_round(run: Enrichment, ready: dict[int, Early], budget: int) -> FirstRound:
    """Segment every group of ``budget`` events (each rank of ``ready``, segmented as its file was
    read, a group alone); a group's ranks with steps are filled and kept for the writing pass,
    those without wait for the run-wide plan made from every such rank's gaps."""
    out = FirstRound()
    gaps: list[pl.DataFrame] = []
    stepless: list[tuple[list[int], Kept]] = []
    guessed: list[tuple[list[int], Early]] = []  # early ranks cut by their own gaps
    cache, total, done = run.cache, run.ranks.height, 0
    for group in first_round_groups(run.index, run.rank_ids, set(ready) | set(run.host), budget):
        run.tell("segment", done, total)
        done += len(group)
        if group[0] in ready:  # segmented as its file was read
            e = ready.pop(group[0])
            if e.gaps is not None:  # cut by its own gaps: checked against the plan below
                gaps.append(e.gaps)
                guessed.append((group, e))
            else:
                out.facts.append(e.facts)
                cache.final_kept(group, e.frames)
            del e
            continue
        seg, args = run.segmented(group)
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
            out.facts.append(facts_of(seg, filled, notes, args))
            cache.final(group, filled, args)
        del seg, args
    out.plan = plan_of(gaps)
    gaps.clear()
    again: list[list[int]] = []  # ranks cut by their own gaps otherwise than by the plan
    for group, e in guessed:
        if e.cut_stands(out.plan):
            out.facts.append(e.facts)
            cache.final_kept(group, e.frames)
        else:
            cache.drop(e.frames)
            again.append(group)
    out.jobs = [*stepless, *((group, None) for group in again)]
    return out


def first_round_groups(
    index: PartsIndex, rank_ids: list[int], alone: set[int], budget: int
) -> list[list[int]]:
    """The first pass's groups, in rank order: each rank of ``alone`` (done early, or with host
    chunks) a group of its own, the others grouped as usual."""
    out: list[list[int]] = []
    run: list[int] = []
    for rank in rank_ids:
        if rank in alone:
            out += [*index.groups(run, budget), [rank]]
            run = []
        else:
            run.append(rank)
    return out + index.groups(run, budget)


def second_round(
    run: Enrichment, jobs: list[tuple[list[int], Kept | None]], plan: StepPlan | None
) -> list[RankFacts]:
    """The ranks without steps filled by the run-wide ``plan``, two groups side by side; their
    facts, in the jobs' order (``jobs`` is emptied: its frames are let go of)."""
    total = sum(len(group) for group, _ in jobs)

    def filled_with_plan(i: int) -> tuple[list[int], RankFacts]:
        group, kept = jobs[i]
        seg, args = run.cache.take_segments(kept) if kept is not None else run.segmented(group)
        filled, notes = fill_ranks(seg, plan)
        found = facts_of(seg, filled, notes, args)
        run.cache.final(group, filled, args)
        return group, found

    facts: list[RankFacts] = []
    done = 0
    for group, group_facts in ahead_in_order(
        filled_with_plan, range(len(jobs)), workers=2, name="asaptrace-enrich"
    ):
        run.tell("segment ranks without steps", done, total)
        done += len(group)
        facts.append(group_facts)
    jobs.clear()
    return facts


def check_every_rank_once(groups: list[list[int]], rank_ids: list[int]) -> None:
    """The enrichment's accounting: the groups about to be written hold every rank of the
    store exactly once (a rank lost or written twice would change the store silently)."""
    kept, wanted = Counter(r for group in groups for r in group), Counter(rank_ids)
    if kept == wanted:
        return
    lost = sorted((wanted - kept).elements())
    twice = sorted((kept - wanted).elements())
    said = [f"ranks {lost} lost" if lost else "", f"ranks {twice} kept more than once" if twice else ""]
    raise AccountingError(
        f"the enrichment would write {', '.join(s for s in said if s)}: nothing was written"
    )


def write_round(run: Enrichment, writer: StoreWriter, decided: Callable[[], Decision]) -> None:
    """Each group's final parts (events with their clocks aligned, args, flows), a part per rank,
    staged on background threads; then the staged parts promoted and the ranks and batches tables
    written. ``decided()`` gives the run-wide decision, waiting for it: the first groups' frames
    are read back while it is taken."""
    order = run.cache.take_final()
    check_every_rank_once([group for group, _ in order], run.rank_ids)

    def final_parts(i: int) -> list[tuple[int, dict[str, pa.Table]]]:
        """Group ``i``'s final parts, rank by rank (run on a helper thread, a few groups ahead)."""
        group, kept = order[i]
        filled, args = run.cache.take(kept)
        raw_flows = run.index.read("flows", group)
        decision = decided()
        events, flows = finish_ranks(filled, raw_flows, run.ranks, decision.offsets)
        del filled
        if len(group) == 1 and group[0] in run.host:  # its events, args and flows merged with its chunks'
            rank = group[0]
            run.host[rank].write(
                writer, f"{rank:05d}", events.to_arrow(), args.to_arrow(), flows.to_arrow(), decision.offsets
            )
            return [(rank, {})]
        tables = {"events": events, "args": args, "flows": flows}
        del events, args, flows
        return [
            (rank, {name: part.to_arrow() for name, part in parts.items()})  # type: ignore[misc]
            for rank, parts in rank_parts(group, tables)
        ]

    total, done = run.ranks.height, 0
    with BackgroundWrites(writer) as parts_out:
        for parts_of_group in ahead_in_order(
            final_parts, range(len(order)), workers=2, name="asaptrace-enrich"
        ):
            for rank, parts in parts_of_group:
                run.tell("write", done, total)
                done += 1
                for name, table in parts.items():
                    parts_out.put(name, f"{int(rank):05d}", table)
            del parts_of_group
    writer.promote_staged()
    decision = decided()
    writer.write_table("ranks", decision.ranks.to_arrow())
    writer.write_table("batches", decision.batches.to_arrow())
    run.tell("write", total, total)


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
    early = EarlyPass(taxonomy, budget, min_events=GROUP_EVENTS)

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
            host_chunks=writer.host_chunks,
        )
        shutil.rmtree(writer.tmp / CHUNK_DIR, ignore_errors=True)  # every rank's chunks: written back
        return {**meta, **enriched}

    return finish, early.add
