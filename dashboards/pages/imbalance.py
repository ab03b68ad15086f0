"""Imbalance: measured attention time against Σs² per DP group and step, and the per-step ratios."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Input, Output, dcc, html

from asaptrace.views.diagnosis import imbalance_steps_view
from asaptrace.viz.imbalance import attention_vs_sum_sq, imbalance_ratios
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/imbalance", "Imbalance"


def layout(stores: Any = None) -> html.Div:
    return html.Div(
        [
            html.Div(
                [html.Label(["step", dcc.Dropdown(id="imb-step", clearable=False)])], className="controls"
            ),
            html.Div(id="imb-body"),
        ]
    )


def step_options(stores: Stores, key: Any) -> tuple[list, Any]:
    try:
        s = stores.get(key)
    except StoreUnavailable:
        return [], None
    steps = sorted(s.diag.tables["imbalance_by_group"].get_column("step").drop_nulls().unique().to_list())
    return [{"label": "all steps", "value": "all"}] + [
        {"label": f"step {v}", "value": v} for v in steps
    ], "all"


def imbalance_body(stores: Stores, key: Any, step: Any) -> list:
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [message(str(e))]
    t = s.diag.tables
    by_group = t["imbalance_by_group"]
    if step not in (None, "all"):
        by_group = by_group.filter(pl.col("step") == int(step))
    by_step = t["imbalance_by_step"]
    return [
        graph("imb-scatter", attention_vs_sum_sq(by_group, t["imbalance_fit"])),
        graph("imb-ratios", imbalance_ratios(by_step)),
        table(imbalance_steps_view(by_step), id="imb-table"),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("imb-step", "options"), Output("imb-step", "value"), Input("store", "value"))(
        lambda key: step_options(stores, key)
    )
    app.callback(Output("imb-body", "children"), Input("store", "value"), Input("imb-step", "value"))(
        lambda key, step: imbalance_body(stores, key, step)
    )
