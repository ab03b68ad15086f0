"""How a number reads to a human: durations, sizes, shares and table cells — for every face.

Inside asaptrace times are int64 nanoseconds; only faces (the CLI, finding texts, later the report
and the dashboard) turn them into µs/ms/s, and they all do it here so one run reads the same
everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from functools import partial
from typing import Any

_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))
_BYTE_UNITS = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
#: what a table cell or a value shows when there is none
MISSING = "–"
#: integer columns that name something (shown as they are); other integers get thousands separators
ID_COLUMNS = frozenset(
    {
        "rank",
        "dp_group",
        "step",
        "layer",
        "instance",
        "micro_batch",
        "tp_index",
        "ep_index",
        "max_sum_sq_group",
    }
)
_SHARES = ("share", "efficiency", "utilisation")


def human_ns(ns: float | int | None, *, sig: bool = False, missing: str = MISSING) -> str:
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
    return f"{ns:.0f} ns" if sig else f"{ns:,.0f} ns"


#: the duration style of finding texts ("unknown" for an unknown, never a bare "?")
text_ns = partial(human_ns, sig=True, missing="unknown")


def human_bytes(n: int) -> str:
    for unit, scale in _BYTE_UNITS:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def percent(x: float | None, digits: int = 0) -> str:
    """A share as a percentage, a half rounded up as people do (5 of 8 barriers: ``63%``, not the
    ``62%`` of round-half-even beside a table's ``62.5%``)."""
    if x is None:
        return "unknown"
    if not math.isfinite(x):
        return f"{100 * x:.{digits}f}%"
    q = Decimal(repr(100 * x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{q:.{digits}f}%"


def points(x: float | None, digits: int = 1) -> str:
    """A difference of two shares in percentage points: 45.3% → 51.7% is ``+6.4 pp`` (not "6.4%",
    which would read as a relative change)."""
    return "unknown" if x is None else f"{100 * x:+.{digits}f} pp"


def time_unit(values: Iterable[float | int | None]) -> str:
    """The one unit a column of durations (ns) is shown in: the largest its largest value fills,
    at least µs (a column of zeros or of sub-µs values reads ``0.000``, ``0.350`` µs: never a raw
    nanosecond count under "(ns)")."""
    top = max((abs(v) for v in values if v is not None), default=0)
    return next((unit for unit, scale in _TIME_UNITS if top >= scale), "µs")


def _base(column: str) -> str:
    """A column's kind: compare tables add ``_a`` / ``_b`` / ``_delta`` to the names they pair."""
    return column.removesuffix("_delta").removesuffix("_a").removesuffix("_b")


def header(column: str, unit: str | None = None) -> str:
    """A column's header: ``mean_wait_ns`` shown in seconds → ``mean wait (s)``; ``last_share`` →
    ``last share``. Spaces let a narrow terminal wrap a header between words."""
    name = column.removesuffix("_ns").replace("_ns_", "_")
    return name.replace("_", " ") + (f" ({unit})" if unit else "")


def cell(name: str, value: object, unit: str | None = None) -> str:
    """One table cell, by its column's name (the rule of every face: CLI, report, dashboard):

    * ``*_ns`` durations: in ``unit`` (the column's, see :func:`time_unit`; named in the header) as
      a plain number with three decimals, or without a unit in the largest unit the value fills;
    * ``*share`` / ``*efficiency`` / ``*utilisation``: a percentage (a ``*_delta`` of one: percentage
      points, ``+6.4 pp``); ``*ratio``: ``2.20×``;
    * booleans yes/no; counts with thousands separators (not the ids of :data:`ID_COLUMNS`);
      other floats with four significant digits; ``–`` for none.
    """
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    column = _base(name)
    if column.endswith("_ns") and isinstance(value, (int, float)):
        if unit is None:
            return human_ns(value)
        scale = dict(_TIME_UNITS).get(unit, 1.0)
        return f"{value:,.0f}" if scale == 1.0 else f"{value / scale:,.3f}"
    if isinstance(value, float):
        if column.endswith(_SHARES):
            return points(value) if name.endswith("_delta") else percent(value, 1)
        if column.endswith("ratio"):
            return f"{value:.2f}×"
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return str(value) if column in ID_COLUMNS else f"{value:,}"
    return str(value)


def format_table(
    columns: Sequence[str], rows: Iterable[Mapping[str, Any]], labels: Sequence[str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Headers and cells of a table by the rule of :func:`cell`: each ``*_ns`` column in one unit,
    chosen from its largest value and named in its header (after its label, when ``labels`` gives
    the columns human names)."""
    rows = list(rows)
    units = {  # a column with no value has no unit to name (never "(ns)" over an empty column)
        c: time_unit(r.get(c) for r in rows)
        for c in columns
        if _base(c).endswith("_ns") and any(r.get(c) is not None for r in rows)
    }
    if labels is None:
        headers = [header(c, units.get(c)) for c in columns]
    else:
        headers = [
            lab + (f" ({units[c]})" if c in units else "") for c, lab in zip(columns, labels, strict=True)
        ]
    return headers, [[cell(c, r.get(c), units.get(c)) for c in columns] for r in rows]


def metric_value(unit: str, metric: str, value: float | None, *, delta: bool = False) -> str:
    """A headline metric's value, in its own unit (rows of different metrics share no column unit);
    ``delta``: a signed difference of two such values (shares in percentage points, ratios as a
    plain difference: ``-0.17``, not ``-0.17×``)."""
    if value is None:
        return MISSING
    sign = "+" if delta and value > 0 else ""
    if unit == "ns":
        return sign + human_ns(value)
    if delta and metric.endswith(_SHARES):
        return points(value)
    if delta and metric.endswith("ratio"):
        return f"{value:+.2f}"
    if metric.endswith(_SHARES) or metric.endswith("ratio"):
        return cell(metric, float(value))
    return f"{sign}{value:,.0f}"


#: short names of the headline metrics, for a table cell (the metric's meaning is in the docs)
_METRIC_LABELS = {
    "n_ranks": "ranks",
    "n_steps": "steps",
    "sum_sq_ratio": "Σs² ratio",
    "transfer_ns": "exposed transfer",
}


def metric_label(metric: str) -> str:
    """A headline metric as a human reads it: ``mean_step_time_ns`` → ``mean step time`` (its unit is
    in its value), ``sum_sq_ratio`` → ``Σs² ratio``."""
    return _METRIC_LABELS.get(metric) or metric.removesuffix("_ns").replace("_", " ")


def rps_text(value: float | None, censored: bool | None = False, *, prose: bool = False) -> str:
    """An SLO throughput (requests/s): ``≥ 5.64`` when the SLO held at every rate swept (a lower
    bound), ``< lowest`` (``prose``: "below the lowest rate") when it was missed at the lowest."""
    if value is None:
        return "below the lowest rate" if prose else "< lowest"
    return ("≥ " if censored else "") + f"{value:.2f}"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 rank``, ``2 ranks``, ``1,024 ranks`` (``many`` for irregular plurals: ``1 batch``, ``2 batches``)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def more_rows(n: int) -> str:
    """What a table cut short says under it."""
    return f"… and {plural(n, 'more row')} (--json has them all)"


def text_width(text: str) -> int:
    """The columns a line of ``text`` is budgeted on a terminal: its UTF-8 bytes. That is never
    less than the cells it takes in any terminal (where East Asian ambiguous characters are wide,
    µ, ×, Σ, – and — take two), and tools that measure lines in bytes agree, so a line kept
    within a width this way fits an 80-column terminal whatever it holds."""
    return len(text.encode("utf-8"))
