"""The one shape every face renders: :class:`TableView`, a titled table of raw values (cells
formatted by :mod:`asaptrace.units` only when shown), and the rules every result's views share: how
many rows a terminal shows, when a terminal is narrow, how a line wraps, which question a number answers.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from asaptrace.questions import ONLINE_QUESTION, PAPER_QUESTION, REPLAY_QUESTION
from asaptrace.units import format_table, text_width

#: rows a terminal shows per table
ROW_LIMIT = 12
#: a terminal this wide (columns) shows every column; narrower ones the short layout
WIDE = 120
#: the question each face's numbers answer, printed beside them (the words: asaptrace.questions)
QUESTIONS = {"replay": REPLAY_QUESTION, "advise --online": ONLINE_QUESTION, "sweep": PAPER_QUESTION}


@dataclass(frozen=True)
class TableView:
    """A titled table of raw values, to be shown by any face (the CLI, the report, the dashboard, a
    notebook): ``rows`` holds exactly ``columns``; ``more`` rows were left out (said under the table);
    no rows shows as ``reason`` ("none" when not given). ``name`` identifies it (the report's HTML id is
    ``table-<name>``); the report and the dashboard show at most ``max_rows`` rows, a terminal
    :data:`ROW_LIMIT` (:meth:`head`)."""

    title: str
    columns: list[str]
    rows: pl.DataFrame
    more: int = 0
    caption: str = ""
    name: str = ""
    labels: list[str] | None = None  # human column names (default: from the column names)
    reason: str = ""  # why the table has no rows, said in its place (never bare headers)
    max_rows: int = 40  # rows the report shows

    def head(self, limit: int) -> TableView:
        """The first ``limit`` rows; the rest counted in ``more``."""
        return replace(self, rows=self.rows.head(limit), more=self.more + max(self.rows.height - limit, 0))

    def cells(self) -> tuple[list[str], list[list[str]]]:
        """Headers and cells by the one rule of :func:`asaptrace.units.format_table`."""
        return format_table(self.columns, self.rows.iter_rows(named=True), self.labels)


def rows_view(
    title: str,
    columns: dict[str, str],
    rows: list,
    *,
    name: str,
    caption: str = "",
    dtypes: dict[str, Any] | None = None,
) -> TableView:
    """A view of row tuples: ``columns`` maps each column to its human label, in order; a column not
    in ``dtypes`` has its type inferred (give one where a table may be empty)."""
    schema = {c: (dtypes or {}).get(c) for c in columns}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return TableView(title, list(columns), frame, caption=caption, name=name, labels=list(columns.values()))


def flat_frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    """``rows`` (dicts) as a frame of exactly ``schema``'s columns and types, so an empty result
    still has its columns."""
    return pl.DataFrame([{k: r.get(k) for k in schema} for r in rows], schema=schema, orient="row")


def narrow(width: int | None) -> bool:
    """Whether a face of ``width`` columns gets the short layout (``None``: no terminal, complete)."""
    return width is not None and width < WIDE


#: a number and the unit or noun after it ("7.2 s", "32 ranks"), never split across lines
_NUMBER_UNIT = re.compile(
    r"(?<=\d) (?=(?:ns|µs|us|ms|s|min|h|B|KB|MB|GB|TB|KiB|MiB|GiB|TiB|pp|%|×|GB/s|MB/s|"
    r"(?:rank|event|step|device|file|layer|request|group|row|token|instance|barrier|lane)s?)(?![\w/]))"
    r"|(?<=asaptrace) (?=\d)"  # a version: "asaptrace 0.1.0"
)
_KEEP = "\x1f"  # a character textwrap does not break at, standing for a kept space while wrapping


def wrap(text: str, width: int | None, *, first: str = "", indent: str = "") -> list[str]:
    """``first + text`` wrapped to ``width`` columns between words, continuation lines indented by
    ``indent`` (one line when ``width`` is None): how the CLI prints a numbered line or a reading.
    Columns are :func:`~asaptrace.units.text_width`'s: a line holding µ or — is wrapped earlier.
    A number keeps its unit on its line ("7.2 s", "32 ranks")."""
    if width is None:
        return [first + text]
    kept = _NUMBER_UNIT.sub(_KEEP, text)
    limit = at = max(width, 20)
    while True:
        lines = [
            line.replace(_KEEP, " ")
            for line in textwrap.wrap(
                kept,
                at,
                initial_indent=first,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=True,  # only a token longer than the terminal (a path) is cut
            )
        ] or [first]
        over = max(text_width(line) for line in lines) - limit
        if over <= 0 or at <= 20:
            return lines
        at = max(at - over, 20)
