"""The one discrete-event engine of asaptrace: a heap loop over typed, frozen events.

Every simulation that needs an event queue (the ASAP pipeline, the AFD ping-pong, the online
serving sweep built on them) runs on :class:`Engine`. The rules (STYLE 8):

* an event is a frozen dataclass deriving from :class:`Event`: it carries ``t_ns`` (int64 ns),
  a class-level ``priority`` (lower runs first at equal time) and a ``seq`` stamped by the engine;
* the heap key ``(t_ns, priority, seq)`` is the *only* definition of order — events never
  compare themselves;
* ``seq`` comes from a counter owned by the engine instance (two engines never share ids);
* a handler receives one event and returns the follow-up events; the engine pushes them, and
  writes nothing itself (no files, no printing): what a run produced is whatever the handler's
  owner recorded.

Semantics that need no queue are not run through it: a coupled (lockstep) step is a max over
ranks per collective instance, vectorised over ranks in :mod:`asaptrace.replay.mechanics.lockstep`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import ClassVar


@dataclass(frozen=True)
class Event:
    """Base of every event: the time it happens and the engine-assigned sequence number."""

    t_ns: int
    seq: int = field(default=-1, kw_only=True)
    #: order among events of the same time (lower first); each event type sets its own
    priority: ClassVar[int] = 50


Handler = Callable[[Event], Iterable[Event]]


class Engine:
    """Pop the earliest event, hand it to the handler, push what it returns; until empty."""

    def __init__(self, start_ns: int = 0) -> None:
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = itertools.count()
        self.now_ns = start_ns  # a store's clock may start before 0 (its times are its own)
        self.handled = 0

    def push(self, event: Event) -> Event:
        """Schedule ``event`` (stamped with this engine's next seq); returns the stamped event."""
        if event.t_ns < self.now_ns:
            raise ValueError(
                f"event {type(event).__name__} at {event.t_ns} ns is in the past ({self.now_ns})"
            )
        # an event is stamped once, when first pushed (before anyone else holds it); pushing an
        # already stamped event again pushes a stamped copy
        stamped = event if event.seq < 0 else replace(event)
        seq = next(self._seq)
        object.__setattr__(stamped, "seq", seq)
        heapq.heappush(self._heap, (stamped.t_ns, stamped.priority, seq, stamped))
        return stamped

    def run(self, handler: Handler, initial: Iterable[Event] = (), *, until_ns: int | None = None) -> int:
        """Run to exhaustion (or to ``until_ns``); returns the time of the last handled event."""
        for ev in initial:
            self.push(ev)
        heap = self._heap
        while heap:
            if until_ns is not None and heap[0][0] > until_ns:
                break
            t, _, _, ev = heapq.heappop(heap)
            self.now_ns = t
            self.handled += 1
            for follow in handler(ev):
                self.push(follow)
        return self.now_ns

    def __len__(self) -> int:
        return len(self._heap)
