"""How a report writes a number: ns as ms/s, shares as %, ratios with two decimals (faces only)."""

from __future__ import annotations

from typing import Any

from asaptrace.units import metric_value

__all__ = ["cell", "human_ns", "metric_value"]


def human_ns(ns: float | int | None) -> str:
    """A duration for people: ``6,254.491 ms``, ``3.650 s``, ``49.000 µs``."""
    if ns is None:
        return "–"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:,.0f} ns"


def cell(column: str, value: Any) -> str:
    """One table cell, formatted by what its column name says it holds (docs/reference/columns.md)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    column = column.removesuffix("_delta").removesuffix("_a").removesuffix("_b")  # compare_by_group
    if column.endswith("_ns"):
        return human_ns(value)
    if isinstance(value, float):
        if column.endswith(("share", "efficiency", "utilisation")):
            return f"{100 * value:.1f}%"
        if column.endswith("ratio"):
            return f"{value:.2f}×"
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}" if column not in ("rank", "dp_group", "step", "layer", "instance") else str(value)
    return str(value)
