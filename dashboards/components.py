"""Small pieces every page uses: a table from a TableView, a message box, a figure holder.

Every string here reaches the browser as a text child (React escapes it); nothing is ever set as
raw HTML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dash import dcc, html

from asaptrace.views.table import TableView

#: Rows a dashboard table shows (the whole table stays in `asaptrace analyze --json`).
MAX_ROWS = 40


def table(view: TableView, *, id: str | None = None, max_rows: int = MAX_ROWS) -> html.Div:
    """A TableView as an HTML table, by the one rule of every face (:meth:`TableView.cells`:
    durations in one unit per column, named in its header)."""
    shown = replace(view, rows=view.rows.head(max_rows))
    headers, cells = shown.cells()
    body = [html.Tr([html.Td(c) for c in row]) for row in cells]
    more = view.rows.height - shown.rows.height + view.more
    if view.rows.height == 0:  # never bare headers: say why there is nothing
        return html.Div(
            [html.H4(view.title), html.P(f"No rows: {view.reason or 'none'}.", className="note")],
            id=id or f"table-{view.title.split(' ')[0]}",
            className="table-box",
        )
    return html.Div(
        [
            html.H4(view.title),
            html.Table([html.Thead(html.Tr([html.Th(h) for h in headers])), html.Tbody(body)]),
            html.P(f"… and {more:,} more rows", className="note") if more > 0 else None,
        ],
        id=id or f"table-{view.title.split(' ')[0]}",
        className="table-box",
    )


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, id: str) -> html.Table:
    """A table of already formatted text cells."""
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h) for h in headers])),
            html.Tbody([html.Tr([html.Td(str(c)) for c in r]) for r in rows]),
        ],
        id=id,
    )


def message(text: str, *, kind: str = "error", id: str | None = None) -> html.Div:
    """A box saying why a page has nothing to show (an unreadable store, a missing feature)."""
    return html.Div(text, className=f"message message-{kind}", id=id or f"message-{kind}")


def graph(id: str, figure: Any, **kwargs: Any) -> dcc.Graph:
    """A figure; plotly's mode bar without its 'edit in Chart Studio' link (no external link)."""
    return dcc.Graph(id=id, figure=figure, config={"displaylogo": False, "showLink": False}, **kwargs)
