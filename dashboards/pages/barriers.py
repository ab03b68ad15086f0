"""Barriers: who waited where (rank × layer heatmap) and who made the others wait; a click on a cell
shows that barrier instance's lanes on the timeline and the order its ranks arrived in.

A run without layers (a training job's all-to-alls and all-reduces) is shown per (rank × collective
instance), with the instances' table; a run without DP groups ranks its ranks by the wait they
imposed. Its barriers are there either way."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc, html

from asaptrace.views.barriers import (
    arrival_order,
    instance_at,
    instance_where,
    instance_window,
    instances_view,
)
from asaptrace.viz.barrier import imposed_wait_ranking, wait_heatmap
from asaptrace.viz.theme import instance_from_label, rank_from_label
from asaptrace.viz.timeline import timeline_figure
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/barriers", "Barriers"
HINT = "Click a cell of the heatmap to see that barrier instance's lanes and its arrival order."
#: rows of the per-instance table (the whole table is in `asaptrace analyze --json`)
INSTANCE_ROWS = 40


def layout(stores: Any = None) -> html.Div:
    return html.Div(
        [
            html.Div(
                [html.Label(["step", dcc.Dropdown(id="bw-step", clearable=False)])], className="controls"
            ),
            html.Div(id="bw-body"),
            html.Div(html.P(HINT, className="note"), id="bw-detail"),
        ]
    )


def step_options(stores: Stores, key: Any) -> tuple[list, Any]:
    try:
        s = stores.get(key)
    except StoreUnavailable:
        return [], None
    steps = sorted(s.diag.tables["step_breakdown"].get_column("step").drop_nulls().unique().to_list())
    return [{"label": "all steps", "value": "all"}] + [
        {"label": f"step {v}", "value": v} for v in steps
    ], "all"


def barriers_body(stores: Stores, key: Any, step: Any) -> list:
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [message(str(e))]
    t = s.diag.tables
    st = None if step in (None, "all") else int(step)
    out = [
        graph(
            "bw-heatmap", wait_heatmap(t["barrier_by_rank_layer"], step=st, instances=t["barrier_instances"])
        ),
        graph("bw-imposed", imposed_wait_ranking(t["barrier_by_group"], by_rank=t["barrier_by_rank"])),
    ]
    view = instances_view(t, step=st, limit=INSTANCE_ROWS)
    if view is not None:
        out.append(table(view, id="bw-instances"))
    return out


def instance_detail(stores: Stores, key: Any, step: Any, click: Any) -> list:
    """The clicked cell's barrier instance: its ranks' lanes in that layer, shaded from the first
    arrival to the release, and the arrival order."""
    if not click or not click.get("points"):
        return [html.P(HINT, className="note")]
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [message(str(e))]
    point = click["points"][0]
    rank, column = rank_from_label(point.get("y", "")), point.get("x")
    if rank is None or column is None:
        return [html.P(HINT, className="note")]
    inst_t = s.diag.tables["barrier_instances"]
    st = None if step in (None, "all") else int(step)
    instance = instance_from_label(column)  # a column of the per-instance heatmap (runs without layers)
    if instance is None:
        layer = int(column)
        instance = instance_at(inst_t, step=st, rank=rank, layer=layer)
        if instance is None:
            return [message(f"r{rank} waited at no barrier in layer {layer}", kind="info")]
    elif inst_t.filter((inst_t["instance"] == instance) & (inst_t["rank"] == rank)).height == 0:
        return [message(f"r{rank} took no part in collective instance {instance}", kind="info")]
    where = instance_window(inst_t, instance)
    layers = None if where["layer"] is None else (where["layer"], where["layer"])
    spans = s.timeline(where["step"], layers, tuple(where["ranks"]))
    title = f"Barrier instance {instance}: {instance_where(inst_t, instance)}"
    if instance_from_label(column) is None:  # a layer's cell: the instance where the rank waited longest
        title += f", where r{rank} waited longest"
    return [
        graph("bw-timeline", timeline_figure(spans, title=title, highlight_ns=where["window_ns"])),
        table(arrival_order(inst_t, instance), id="bw-arrivals"),
    ]


def register(app, stores: Stores, jobs) -> None:
    app.callback(Output("bw-step", "options"), Output("bw-step", "value"), Input("store", "value"))(
        lambda key: step_options(stores, key)
    )
    app.callback(Output("bw-body", "children"), Input("store", "value"), Input("bw-step", "value"))(
        lambda key, step: barriers_body(stores, key, step)
    )
    app.callback(
        Output("bw-detail", "children"),
        Input("bw-heatmap", "clickData"),
        State("store", "value"),
        State("bw-step", "value"),
    )(lambda click, key, step: instance_detail(stores, key, step, click))
