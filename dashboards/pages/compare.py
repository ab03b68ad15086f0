"""Compare: two stores side by side (e.g. measured coupled vs replayed ASAP): headline numbers with
deltas (B − A), per DP group, and each store's step-time bars."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html

from asaptrace import pipeline
from asaptrace.views.compare import compare_views
from asaptrace.viz.breakdown import group_stacked_bars
from asaptrace.viz.theme import fit_top
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/compare", "Compare"
#: the width of each of the two figures side by side, on a narrow screen (their titles and legends fit it)
HALF_WIDTH_PX = 420


def layout(stores: Stores) -> html.Div:
    opts = stores.options()
    b = opts[1]["value"] if len(opts) > 1 else opts[0]["value"]
    return html.Div(
        [
            html.Div(
                [
                    html.Label(
                        ["A", dcc.Dropdown(id="cmp-a", options=opts, value=opts[0]["value"], clearable=False)]
                    ),
                    html.Label(["B", dcc.Dropdown(id="cmp-b", options=opts, value=b, clearable=False)]),
                ],
                className="controls",
            ),
            html.Div(id="cmp-body"),
        ]
    )


def compare_body(stores: Stores, a: Any, b: Any) -> list:
    try:
        la, lb = stores.get(a), stores.get(b)
        # as `asaptrace compare` does: runs with nothing in common are refused, differences said
        warnings, refusal = pipeline.comparability_of(la.diag, lb.diag, (la.label, lb.label))
        if refusal is not None:  # the CLI's way past it is a flag this page has no control for
            return [message(refusal.split(" (--force")[0], id="cmp-refused")]
        tables = stores.compare(a, b)
    except StoreUnavailable as e:
        return [message(str(e))]
    overall, by_group = compare_views(tables, "A", "B")
    return [
        *(message(w, kind="info", id=f"cmp-warning-{i}") for i, w in enumerate(warnings)),
        html.H4(f"A = {la.label}, B = {lb.label} (delta = B − A)"),
        table(overall, id="cmp-overall"),
        table(by_group, id="cmp-groups"),
        html.Div(
            [
                html.Div(
                    [
                        html.H4(f"A: {la.label}"),
                        graph(
                            "cmp-bars-a",
                            fit_top(
                                group_stacked_bars(
                                    la.diag.tables["step_breakdown"], la.diag.tables["stragglers"]
                                ),
                                HALF_WIDTH_PX,
                            ),
                        ),
                    ]
                ),
                html.Div(
                    [
                        html.H4(f"B: {lb.label}"),
                        graph(
                            "cmp-bars-b",
                            fit_top(
                                group_stacked_bars(
                                    lb.diag.tables["step_breakdown"], lb.diag.tables["stragglers"]
                                ),
                                HALF_WIDTH_PX,
                            ),
                        ),
                    ]
                ),
            ],
            className="side-by-side",
        ),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("cmp-body", "children"), Input("cmp-a", "value"), Input("cmp-b", "value"))(
        lambda a, b: compare_body(stores, a, b)
    )
