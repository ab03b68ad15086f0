"""Overview: the findings in plain words, the headline numbers, where the store came from; then
the advice at a glance, its table and lines.

The advice takes seconds of what-ifs (8 s at 384 ranks) and its replay kernel holds the
interpreter while it runs, so it is asked for only once the findings are on the page (its callback
listens to them) and a note stands in its place meanwhile: the page paints as soon as the store is
diagnosed."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, html

from asaptrace.units import plural
from asaptrace.views.advice import advice_lines, advice_view, nothing_applies_text
from asaptrace.views.diagnosis import findings_view, headline_rows
from asaptrace.views.store import store_provenance, store_sources
from asaptrace.viz.advice import advice_figure
from asaptrace_dashboards.components import MAX_ROWS, graph, message, table, text_table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/", "Overview"


def layout(stores: Any = None) -> html.Div:
    return html.Div(
        [
            html.Div(
                message(
                    "Working out the advice: every what-if that applies is replayed (a few seconds on"
                    " a large run)…",
                    kind="info",
                    id="overview-advice-progress",
                ),
                id="overview-advice",
            ),
            html.Div(id="overview-body"),
            html.Div(id="overview-advice-detail"),
        ]
    )


def advice_body(stores: Stores, key: Any) -> tuple[list, list]:
    """The Advice: at a glance first (or why nothing applies, in its place), above the findings;
    below them the same table and lines as the report and ``asaptrace advise``."""
    try:
        j = stores.get(key).advice()
    except StoreUnavailable as e:
        return [message(str(e))], []
    fig = advice_figure(j)
    glance: list = []  # the figure's title says what it is
    detail: list = [html.H3("Advice: what to change, and what it buys")]
    if fig is None:  # the reason in place of the figure
        glance += [
            html.H3("Advice"),
            html.P(nothing_applies_text(j), className="advice-none", id="overview-advice-none"),
        ]
    else:
        glance.append(graph("overview-advice-figure", fig))
        view = advice_view(j)
        detail.append(table(view, id="overview-advice-table"))
        detail.append(html.P(view.caption, className="note", id="overview-advice-legend"))
    detail.append(html.Ol([html.Li(line) for line in advice_lines(j)], id="overview-advice-lines"))
    return glance, detail


def overview_body(stores: Stores, key: Any) -> list:
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [message(str(e))]
    diag, info, meta = s.diag, s.info, s.store.meta
    provenance = store_provenance(s.label, diag, info, meta)
    source_headers, sources = store_sources(meta)
    return [
        html.H2(f"{s.label}"),
        table(findings_view(diag), id="overview-findings"),
        html.H4("headline numbers"),
        text_table(["metric", "meaning", "value"], headline_rows(diag), id="overview-headline"),
        html.H4("provenance"),
        text_table(["", ""], provenance, id="overview-provenance"),
        html.Details(
            [
                html.Summary(plural(len(sources), "source file")),
                # at most MAX_ROWS: 384 rows are 2,700 components the page takes seconds to lay out
                text_table(source_headers, sources[:MAX_ROWS], id="overview-sources"),
                html.P(f"… and {plural(len(sources) - MAX_ROWS, 'more source file')}", className="note")
                if len(sources) > MAX_ROWS
                else None,
            ]
        ),
        *(html.P(f"note: {n}", className="note") for n in diag.notes),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("overview-body", "children"), Input("store", "value"))(
        lambda key: overview_body(stores, key)
    )
    # after the findings are drawn (module docstring): the advice waits for the body's reply
    app.callback(
        Output("overview-advice", "children"),
        Output("overview-advice-detail", "children"),
        Input("overview-body", "children"),
        State("store", "value"),
    )(lambda _body, key: advice_body(stores, key))
