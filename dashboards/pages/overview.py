"""Overview: the findings in plain words, the headline numbers, where the store came from."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html

from asaptrace.units import plural
from asaptrace.views.advice import advice_lines, advice_view
from asaptrace.views.diagnosis import findings_view, headline_rows
from asaptrace.views.store import store_provenance, store_sources
from asaptrace_dashboards.components import message, table, text_table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/", "Overview"


def layout(stores: Any = None) -> html.Div:
    return html.Div(
        [
            html.Div(id="overview-body"),
            dcc.Loading(html.Div(id="overview-advice"), type="dot"),
        ]
    )


def advice_body(stores: Stores, key: Any) -> list:
    """The Advice: the same table and lines as the report and ``asaptrace advise``."""
    try:
        j = stores.get(key).advice()
    except StoreUnavailable as e:
        return [message(str(e))]
    shown: list = [html.H3("Advice: what to change, and what it buys")]
    if any(w["applies"] for w in j["whatifs"]):
        view = advice_view(j)
        shown.append(table(view, id="overview-advice-table"))
        shown.append(html.P(view.caption, className="note", id="overview-advice-legend"))
    shown.append(html.Ol([html.Li(line) for line in advice_lines(j)], id="overview-advice-lines"))
    return shown


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
                text_table(source_headers, sources, id="overview-sources"),
            ]
        ),
        *(html.P(f"note: {n}", className="note") for n in diag.notes),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("overview-body", "children"), Input("store", "value"))(
        lambda key: overview_body(stores, key)
    )
    app.callback(Output("overview-advice", "children"), Input("store", "value"))(
        lambda key: advice_body(stores, key)
    )
