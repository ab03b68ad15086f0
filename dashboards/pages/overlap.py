"""Overlap: per device, compute alone / copies alone / communication under them / exposed
communication / idle; per rank and per DP group, where step time goes (the step breakdown's parts)."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, html

from asaptrace.views.diagnosis import overlap_roles_view
from asaptrace.viz.breakdown import group_stacked_bars, overlap_per_device, rank_stacked_bars
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/overlap", "Overlap"


def layout(stores: Any = None) -> html.Div:
    return html.Div(id="ov-body")


def overlap_body(stores: Stores, key: Any) -> list:
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [message(str(e))]
    t = s.diag.tables
    return [
        graph("ov-devices", overlap_per_device(t["overlap_by_rank"])),
        graph("ov-ranks", rank_stacked_bars(t["step_breakdown"])),
        graph("ov-groups", group_stacked_bars(t["step_breakdown"], t["stragglers"])),
        table(overlap_roles_view(t), id="ov-table"),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("ov-body", "children"), Input("store", "value"))(
        lambda key: overlap_body(stores, key)
    )
