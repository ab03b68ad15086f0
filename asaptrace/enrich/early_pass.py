"""The enrichment's first pass of a large rank, run on the reader threads as its file is read.

:class:`EarlyPass` segments a rank the moment its raw tables exist, so that work overlaps the
reading of the next files; :mod:`asaptrace.enrich.streaming` takes its results (:class:`Early`)
when the taxonomy it guessed is the run's, and checks a rank it cut by its own gaps against the
run-wide step plan (:meth:`Early.cut_stands`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from asaptrace.enrich.frames import (
    RankFacts,
    facts_of,
    fill_ranks,
    plan_of,
    segment_ranks,
    stepless_gaps,
    taxonomy_for,
)
from asaptrace.enrich.spill_cache import Kept, SpillCache
from asaptrace.enrich.store_parts import frame_of
from asaptrace.enrich.structure import StepPlan, same_cut
from asaptrace.enrich.taxonomy import Profile, Taxonomy
from asaptrace.memory import give_back
from asaptrace.store import event_names


@dataclass
class Early:
    """A rank's first pass, done as its file was read: its facts and final frames (in memory or
    spilled). A rank without step annotations is cut into steps by its own gaps (``guess``); the
    cut stands if the run-wide plan cuts its gaps alike (:func:`~asaptrace.enrich.structure.same_cut`),
    else the rank is segmented again in the usual second round."""

    facts: RankFacts
    frames: Kept  # (filled, args)
    gaps: pl.DataFrame | None = None  # the step gaps of a rank without step annotations
    guess: StepPlan | None = None  # the plan its own gaps give (what it was filled by)

    def cut_stands(self, plan: StepPlan | None) -> bool:
        """Whether the run-wide ``plan`` cuts this rank into the steps it was filled by (a rank
        with step annotations: always; one cut by its own gaps: when ``plan`` cuts them alike)."""
        if self.gaps is None or self.guess is None:
            return True
        return plan is not None and same_cut(self.gaps, self.guess, plan)


class EarlyPass:
    """The enrichment's first pass, rank by rank, on the reader threads as each file is read.

    :meth:`add` segments a rank's raw tables the moment they exist, so that work overlaps the
    reading of the next files instead of waiting for the last one. It needs the taxonomy, which
    is chosen from the event names of *every* rank: it is guessed from the first file read, and
    :func:`~asaptrace.enrich.streaming.enrich_streaming` uses the early results only if the taxonomy chosen from all names
    is that guess (runs whose ranks share their kernel names, the usual case); otherwise they are
    dropped and the pass runs as usual. Either way the store is the same. The frames the next
    round needs are kept in memory within ``cache_bytes`` and spilled to the staging folder
    beyond it (:class:`~asaptrace.enrich.spill_cache.SpillCache`). Only ranks that would be a group
    of their own, of ``min_events`` events or more, are taken (see :meth:`add`).
    """

    def __init__(
        self, taxonomy: Taxonomy | Profile | str | Path | None, cache_bytes: int, *, min_events: int
    ) -> None:
        self.user = taxonomy
        self.min_events = min_events
        self.lock = threading.Lock()
        self.taxonomy: Taxonomy | None = None
        self.cache = SpillCache(cache_bytes)
        self.ranks: dict[int, Early] = {}

    def add(self, root: Path, rank: int, events: pa.Table, args: pa.Table) -> None:
        """Segment one rank's raw tables (a file's, with its rank filled in; ``root`` is the
        store's staging folder, where frames beyond the budget are spilled); thread-safe. A rank
        of fewer than ``min_events`` events (a group's budget) is left to the usual pass, which enriches it
        in a group with its neighbours (its polars queries paid per group, not per rank)."""
        if events.num_rows < self.min_events:
            return
        give_back()  # the file's scan is freed: its segmentation reuses those pages (−35 MB at 0.5 GB)
        with self.lock:
            if self.taxonomy is None:
                self.taxonomy = taxonomy_for(event_names(events), self.user)
                self.cache.spill_to(Path(root))
            tax = self.taxonomy
        try:
            early = self._first_pass(rank, events, args, tax, self.cache)
        except Exception:  # left to the usual pass, which raises it if it is real: made with a
            return  # taxonomy that may be a wrong guess, an error here must not fail the run
        with self.lock:
            self.ranks[rank] = early

    @staticmethod
    def _first_pass(rank: int, events: pa.Table, args: pa.Table, tax: Taxonomy, cache: SpillCache) -> Early:
        ev, ar = frame_of(events), frame_of(args)
        recorded = pl.DataFrame(
            {"rank": [rank], "clock_offset_ns": [0]}, schema={"rank": pl.Int32, "clock_offset_ns": pl.Int64}
        )
        seg = segment_ranks(ev, ar, recorded, tax)
        del ev
        gaps = stepless_gaps(seg)
        guess = plan_of([gaps]) if gaps is not None else None
        filled, notes = fill_ranks(seg, guess)
        return Early(facts_of(seg, filled, notes, ar), cache.keep(filled, ar), gaps, guess)

    def take(self, tax: Taxonomy) -> dict[int, Early]:
        """The early results, if they were made with ``tax`` (else none, and what they kept is
        let go of); the pass lets go of them."""
        with self.lock:
            out, self.ranks = self.ranks, {}
        if self.taxonomy != tax:
            for e in out.values():
                self.cache.drop(e.frames)
            out = {}
        return out
