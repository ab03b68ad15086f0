"""What a report is made of: figures, tables and sections — and the hook for sections of other layers.

The report's built-in sections come from a Diagnosis. Other layers add theirs by passing
:class:`Section` objects to :func:`asaptrace.report.render.render_report` (``sections=``): the
replay (measured vs replayed waterfall, TTFT CDFs per policy, replay error) and the SLO sweep
(rate vs TTFT curves, tornado) build their figures with ``asaptrace.viz`` and their tables as polars
frames, wrap them in a Section, and the report places them after the built-in figures, with the
same look, escaping and table formatting. See docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go
import polars as pl

from asaptrace import views


@dataclass(frozen=True)
class FigureView:
    """A figure with a stable id (the HTML div id: fixed, so a report is byte-for-byte reproducible)."""

    id: str
    figure: go.Figure
    caption: str = ""


@dataclass(frozen=True)
class TableView:
    """A table shown in the report: which columns, and at most how many rows."""

    id: str
    title: str
    table: pl.DataFrame
    columns: tuple[str, ...] = ()
    max_rows: int = 40
    caption: str = ""
    labels: tuple[str, ...] | None = None  # human names of ``columns`` (default: from the names)
    reason: str = ""  # why it has no rows: shown instead of bare headers ("none" when not given)


def table_of(view: views.TableView, id: str, *, max_rows: int = 40) -> TableView:
    """A face-neutral view (:mod:`asaptrace.views`) as a report table: the same columns, labels and
    caption as the CLI and the dashboard show."""
    labels = tuple(view.labels) if view.labels else None
    return TableView(
        id, view.title, view.rows, tuple(view.columns), max_rows, view.caption, labels, view.reason
    )


@dataclass(frozen=True)
class Section:
    """A titled part of the report: an introduction in plain words, figures, tables."""

    id: str
    title: str
    text: str = ""
    figures: tuple[FigureView, ...] = ()
    tables: tuple[TableView, ...] = field(default_factory=tuple)
    lines: tuple[str, ...] = ()  # an ordered list shown after the text (the advice lines)
    top: bool = False  # shown right after the summary (the advice) instead of after the tables
