"""How a number reads to a human: durations, sizes, shares and table cells — for every face.

Inside asaptrace times are int64 nanoseconds; only faces (the CLI, finding texts, later the report
and the dashboard) turn them into µs/ms/s, and they all do it here so one run reads the same
everywhere.
"""

from __future__ import annotations

from functools import partial

_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))
_BYTE_UNITS = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
#: integer columns shown with thousands separators (counts a reader compares by magnitude)
COUNT_COLUMNS = frozenset({"events"})


def human_ns(ns: float | int | None, *, sig: bool = False, missing: str = "-") -> str:
    """A duration in the largest unit it fills: ``1,234.567 ms`` for tables, or with ``sig`` three
    significant digits for prose (``1.23 s``, ``412 ms``)."""
    if ns is None:
        return missing
    for unit, scale in _TIME_UNITS:
        if abs(ns) >= scale:
            v = ns / scale
            if sig:
                return f"{v:.3g} {unit}" if abs(v) < 100 else f"{v:.0f} {unit}"
            return f"{v:,.3f} {unit}"
    return f"{ns:.0f} ns" if sig else f"{ns} ns"


#: the duration style of finding texts ("unknown" for an unknown, never a bare "?")
text_ns = partial(human_ns, sig=True, missing="unknown")


def human_bytes(n: int) -> str:
    for unit, scale in _BYTE_UNITS:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def percent(x: float | None, digits: int = 0) -> str:
    return "unknown" if x is None else f"{100 * x:.{digits}f}%"


def cell(name: str, value: object) -> str:
    """One table cell, by its column's name: ``*_ns`` durations, shares/efficiencies as %,
    other floats with three significant digits, counts with thousands separators."""
    if value is None:
        return "-"
    if name.endswith("_ns"):
        return human_ns(int(value))  # type: ignore[call-overload]
    if isinstance(value, float):
        return percent(value, 1) if name.endswith(("_share", "efficiency", "utilisation")) else f"{value:.3g}"
    if isinstance(value, int) and name in COUNT_COLUMNS:
        return f"{value:,}"
    return str(value)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 rank``, ``2 ranks``, ``1,024 ranks`` (``many`` for irregular plurals: ``1 batch``, ``2 batches``)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
