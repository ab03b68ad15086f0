"""The stores a dashboard serves: named once at start, opened and diagnosed lazily, results cached.

The browser only ever names a store by its key ("0", "1", … in the order given on the command
line); a key that is not one of them is refused, so no path ever comes from the browser. A store
is opened and diagnosed the first time a page asks for it (under a per-store lock, so two tabs
asking at once diagnose it once) or when :meth:`Stores.warm`'s thread reaches it, which ``asaptrace
dashboard`` starts once it listens (the URL is never held up; a page asked for meanwhile waits only
for the rest). A store diagnosed before reads its diagnosis from beside its tables
(:mod:`asaptrace.pipeline.cache`: a fraction of a second at 384 ranks instead of 5 s); after that every page reads the cached Diagnosis, and timeline
windows and comparisons are cached per their parameters (:class:`~asaptrace_dashboards._memo.Memo`: the server
runs callbacks on many threads, and two tabs asking for the same window compute it once).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from asaptrace import pipeline
from asaptrace.errors import AsaptraceError
from asaptrace_dashboards._memo import Memo

if TYPE_CHECKING:
    import polars as pl

    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.store import TraceStore

#: Timeline windows kept per store (each is a small frame of one step and layer range).
TIMELINE_CACHE = 32


class StoreUnavailable(Exception):
    """A store the page asked for cannot be shown; ``str()`` is the message the page prints."""


@dataclass
class Loaded:
    """One store, opened and diagnosed, with its caches."""

    label: str
    path: Path
    store: TraceStore
    diag: Diagnosis
    info: dict[str, Any]
    timelines: Memo[pl.DataFrame] = field(default_factory=lambda: Memo(max_items=TIMELINE_CACHE))
    refusals: Memo[str | None] = field(default_factory=Memo)
    _advice: dict[str, Any] | None = None
    _advice_lock: threading.Lock = field(default_factory=threading.Lock)
    critical: Memo[pl.DataFrame | None] = field(default_factory=Memo)

    def advice(self) -> dict[str, Any]:
        """The store's advice (:func:`asaptrace.pipeline.advise_store`, its JSON), made once: a few
        seconds of what-ifs, so the Overview asks for it after it has drawn the rest."""
        with self._advice_lock:  # two pages asking at once run the what-ifs once
            if self._advice is None:
                self._advice = pipeline.advise_store(self.store, diagnosis=self.diag).to_json()
            return self._advice

    def critical_path(self) -> pl.DataFrame | None:
        """The critical path's pieces of every step (made once; None when the store has no steps).
        Its own memo, not the advice's lock: the Timeline must not wait for the what-ifs."""

        def walk() -> pl.DataFrame | None:
            try:
                return pipeline.critical_store(self.path, top=0).path
            except AsaptraceError:
                return None

        return self.critical.get("path", walk)

    def replay_refusal(self, policy: str) -> str | None:
        """Why a replay of ``policy`` would be refused on this store (None: it runs), worked out
        once per policy: the Replay page says it before offering its button."""
        return self.refusals.get(policy, lambda: pipeline.replay_refusal(self.store, policy))

    def timeline(
        self, step: int | None, layers: tuple[int, int] | None, ranks: tuple[int, ...] | None
    ) -> pl.DataFrame:
        """The timeline spans of one window (cached, least recently used dropped first; many tabs
        asking for the same window at once compute it once)."""
        return self.timelines.get(
            (step, layers, ranks),
            lambda: pipeline.timeline_of(self.store, self.diag, step=step, layers=layers, rank_subset=ranks),
        )


class Stores:
    """The stores named at start, by key; each loaded on first use."""

    def __init__(self, paths: list[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]
        names = [p.name or str(p) for p in self.paths]
        self.labels = [
            name if names.count(name) == 1 else f"{name} ({p.parent.name or p.parent})"
            for name, p in zip(names, self.paths, strict=True)
        ]
        self._loaded: dict[str, Loaded] = {}
        self._failed: dict[str, str] = {}
        self._locks = {str(i): threading.Lock() for i in range(len(self.paths))}
        self._compare: Memo[dict[str, pl.DataFrame]] = Memo()

    @property
    def keys(self) -> list[str]:
        return list(self._locks)

    def options(self) -> list[dict[str, str]]:
        """Dropdown options: the label shown, the key sent back (never a path)."""
        return [{"label": label, "value": str(i)} for i, label in enumerate(self.labels)]

    def label(self, key: str) -> str:
        return self.labels[int(key)] if key in self._locks else "?"

    def path(self, key: str) -> Path:
        self._check(key)
        return self.paths[int(key)]

    def _check(self, key: Any) -> None:
        if not isinstance(key, str) or key not in self._locks:
            raise StoreUnavailable("unknown store: this dashboard serves only the stores it was started with")

    def get(self, key: Any) -> Loaded:
        """The loaded store ``key`` (opened and diagnosed once); :class:`StoreUnavailable` when it
        cannot be read (the message names the store and the cause, and is remembered)."""
        self._check(key)
        with self._locks[key]:
            if key in self._failed:
                raise StoreUnavailable(self._failed[key])
            if key not in self._loaded:
                path, label = self.paths[int(key)], self.labels[int(key)]
                try:
                    store = pipeline.open_store(path)
                    diag = pipeline.diagnose_store(store)
                    info = pipeline.store_info(store)
                except AsaptraceError as e:
                    self._failed[key] = f"cannot read store {label}: {e}"
                    raise StoreUnavailable(self._failed[key]) from None
                except Exception as e:  # a damaged file that a lower layer did not name: still one line
                    self._failed[key] = f"cannot read store {label}: {type(e).__name__}: {e}"
                    raise StoreUnavailable(self._failed[key]) from None
                self._loaded[key] = Loaded(label, path, store, diag, info)
            return self._loaded[key]

    def warm(self) -> threading.Thread:
        """Open and diagnose every store on a background thread, in order (a store that cannot be
        read is remembered: its pages say why). Not the critical path: only the Timeline asks for it."""

        def load() -> None:
            for key in self.keys:
                with contextlib.suppress(StoreUnavailable):  # remembered: its pages say why
                    self.get(key)

        thread = threading.Thread(target=load, name="asaptrace-warm", daemon=True)
        thread.start()
        return thread

    def compare(self, a: str, b: str) -> dict[str, pl.DataFrame]:
        """compare_overall and compare_by_group of stores a and b (cached per pair)."""
        la, lb = self.get(a), self.get(b)
        return self._compare.get((a, b), lambda: pipeline.compare_diagnoses(la.diag, lb.diag))
