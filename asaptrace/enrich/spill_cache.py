"""The streaming enrichment's frames between its rounds: in memory within a budget, spilled beyond.

A rank is segmented once (:mod:`asaptrace.enrich.streaming`): the frames its next round needs
are kept here — in memory while they fit in the budget, written as Arrow IPC files under the
store's staging folder beyond it (writing and reading a rank's columns back costs a fraction of
segmenting it again). :class:`Kept` is one handle on such frames; :class:`SpillCache` keeps,
hands back and drops them, and holds every group's final frames for the writing pass.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.enrich.frames import RankSegments


class Kept:
    """Frames kept for a later round of the enrichment: in memory, or spilled to Arrow IPC files
    (writing and reading a rank's columns back costs a fraction of segmenting it again)."""

    __slots__ = ("items", "paths", "size")

    def __init__(self, items: tuple[Any, ...], size: int, paths: dict[int, Path] | None = None) -> None:
        self.items = items  # a spilled frame's place holds None
        self.size = size  # bytes counted against the cache's budget (0 when spilled)
        self.paths = paths or {}


#: The staging folder's subfolder for spilled frames (removed before the store is committed).
SPILL_DIR = ".spill"


class SpillCache:
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
        self.groups: list[tuple[list[int], Kept]] = []
        self.last: tuple[list[int], Kept] | None = None

    def spill_to(self, root: Path) -> None:
        """Spill under ``root`` (the store's staging folder) from now on."""
        self.spill = root / SPILL_DIR

    def keep(self, *items: Any) -> Kept:
        """Keep ``items`` (frames and small objects) for a later round: in memory if the frames
        fit beside what is kept, else the frames are written to the spill folder."""
        size = frames_size(items)
        with self.lock:
            spill = self.spill
            fits = self.used + size <= self.budget or spill is None
            if fits:
                self.used += size
        return Kept(items, size) if fits or spill is None else self._spilled(items, spill)

    def keep_segments(self, seg: RankSegments, args: pl.DataFrame) -> Kept:
        return self.keep(seg.events, seg.spans, seg.notes, args)

    def take(self, kept: Kept) -> tuple[Any, ...]:
        """The items kept (read back if spilled); the cache lets go of them."""
        items = list(kept.items)
        for i, path in kept.paths.items():
            items[i] = pl.read_ipc(path)
        self.drop(kept)
        return tuple(items)

    def take_segments(self, kept: Kept) -> tuple[RankSegments, pl.DataFrame]:
        events, spans, notes, args = self.take(kept)
        return RankSegments(events, spans, notes), args

    def drop(self, kept: Kept) -> None:
        """Let go of ``kept`` (its spilled files removed, its bytes no longer counted)."""
        for path in kept.paths.values():
            path.unlink(missing_ok=True)
        with self.lock:
            self.used -= kept.size
        kept.items, kept.paths, kept.size = (), {}, 0

    def final(self, group: list[int], filled: pl.DataFrame, args: pl.DataFrame) -> None:
        """Keep a group's final frames for the writing pass: in memory within the budget, else as
        the last group (in memory all the same), the previous last group spilled in its place."""
        kept = Kept((filled, args), frames_size((filled, args)))
        with self.lock:
            spill = self.spill
            if self.used + kept.size <= self.budget or spill is None:
                self.used += kept.size
                self.groups.append((group, kept))
                return
            kept.size = 0
            before, self.last = self.last, (group, kept)
        if before is not None:
            spilled = self._spilled(before[1].items, spill)
            with self.lock:
                self.groups.append((before[0], spilled))

    def final_kept(self, group: list[int], kept: Kept) -> None:
        """Keep frames :meth:`keep` kept as a group's final frames, where they are."""
        with self.lock:
            self.groups.append((group, kept))

    def take_final(self) -> list[tuple[list[int], Kept]]:
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

    def _spilled(self, items: tuple[Any, ...], spill: Path) -> Kept:
        """``items`` with their frames written under ``spill`` (their places hold None)."""
        with self.lock:
            first, self.spilled = self.spilled, self.spilled + len(items)
        spill.mkdir(exist_ok=True)
        out: list[Any] = list(items)
        paths: dict[int, Path] = {}
        for i, item in enumerate(items):
            if isinstance(item, pl.DataFrame):
                paths[i] = spill / f"{first + i}.arrow"
                item.write_ipc(paths[i])
                out[i] = None
        return Kept(tuple(out), 0, paths)


def frames_size(items: tuple[Any, ...]) -> int:
    """The bytes the frames among ``items`` hold (what counts against the budget)."""
    return sum(f.estimated_size() for f in items if isinstance(f, pl.DataFrame))
