"""What a report is made of: figures, tables and sections — and the hook for sections of other layers.

The report's built-in sections come from a Diagnosis. Other layers add theirs by passing
:class:`Section` objects to :func:`asaptrace.report.render.render_report` (``sections=``): the
replay (measured vs replayed waterfall, TTFT CDFs per policy, replay error) and the SLO sweep
(rate vs TTFT curves, tornado) build their figures with ``asaptrace.viz`` and their tables as
:class:`~asaptrace.views.table.TableView` (the one every face shows), wrap them in a Section, and
the report places them after the built-in figures, with the same look, escaping and table formatting. See docs/report.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import plotly.graph_objects as go

from asaptrace.views.table import TableView


@dataclass(frozen=True)
class FigureView:
    """A figure with a stable id (the HTML div id: fixed, so a report is byte-for-byte reproducible)."""

    id: str
    figure: go.Figure
    caption: str = ""


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
