"""The event engine: one ordering key (time, priority, seq), ids per engine, handlers return follow-ups."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass
from typing import ClassVar

import pytest

from asaptrace.replay.mechanics.engine import Engine, Event


@dataclass(frozen=True)
class Late(Event):
    label: str = ""
    priority: ClassVar[int] = 90


@dataclass(frozen=True)
class Early(Event):
    label: str = ""
    priority: ClassVar[int] = 10


def test_order_is_time_then_priority_then_insertion():
    seen = []
    # pushed in this order: a Late at 5, an Early at 5, a Late at 1, another Late at 5
    initial = [Late(5, label="L5a"), Early(5, label="E5"), Late(1, label="L1"), Late(5, label="L5b")]
    Engine().run(lambda ev: seen.append(ev.label) or (), initial)
    # time 1 first; at time 5 the Early (priority 10) before the Lates, which keep insertion order
    assert seen == ["L1", "E5", "L5a", "L5b"]


def test_handlers_return_follow_ups_and_the_engine_counts_them():
    seen = []

    def handler(ev):
        seen.append((ev.t_ns, ev.label))
        if ev.label == "start":
            return [Early(ev.t_ns + 10, label="next"), Late(ev.t_ns + 10, label="after")]
        return []

    engine = Engine()
    last = engine.run(handler, [Early(0, label="start")])
    assert seen == [(0, "start"), (10, "next"), (10, "after")]
    assert last == 10 and engine.handled == 3 and len(engine) == 0


def test_seq_comes_from_the_engine_instance():
    a, b = Engine(), Engine()
    assert [a.push(Early(0)).seq for _ in range(3)] == [0, 1, 2]
    assert b.push(Early(0)).seq == 0  # a second engine starts its own count


def test_events_are_frozen_and_the_past_is_refused():
    ev = Early(3)
    with pytest.raises(FrozenInstanceError):
        ev.t_ns = 4  # type: ignore[misc]
    engine = Engine()
    engine.run(lambda e: (), [Early(100)])
    with pytest.raises(ValueError, match="in the past"):
        engine.push(Early(50))


def test_run_until_stops_before_later_events():
    seen = []
    engine = Engine()
    engine.run(lambda ev: seen.append(ev.t_ns) or (), [Early(1), Early(7), Early(20)], until_ns=10)
    assert seen == [1, 7] and len(engine) == 1
