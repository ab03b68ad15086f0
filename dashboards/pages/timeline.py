"""Timeline: the device Gantt of one step, a layer range and chosen ranks, barrier wait in its band,
the step's critical path drawn over the lanes."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, dcc, html

from asaptrace.viz.theme import empty_figure
from asaptrace.viz.timeline import timeline_caption, timeline_figure, worst_window
from asaptrace_dashboards.components import graph, message
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/timeline", "Timeline"


def layout(stores: Any = None) -> html.Div:
    return html.Div(
        [
            html.Div(
                [
                    html.Label(["step", dcc.Dropdown(id="tl-step", clearable=False)]),
                    html.Label(["ranks (none: all)", dcc.Dropdown(id="tl-ranks", multi=True)]),
                    html.Label(
                        ["layers", dcc.RangeSlider(id="tl-layers", min=0, max=1, step=1, allowCross=False)],
                        id="tl-layers-box",  # hidden on a store without layers (nothing to choose)
                    ),
                ],
                className="controls",
            ),
            html.Div(id="tl-message"),
            graph("tl-figure", empty_figure("Device timeline", "loading")),
            html.P(id="tl-caption", className="note"),
        ]
    )


def timeline_controls(stores: Stores, key: Any) -> tuple:
    """Step options and the worst window as the first choice; layer range bounds; rank options."""
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [], None, 0, 1, None, {}, [], message(str(e))
    t = s.diag.tables
    steps = sorted(t["step_breakdown"].get_column("step").drop_nulls().unique().to_list())
    # the layers that have waits (barrier or receive) are the ones a wait band can show
    events_layers = sorted(t["barrier_by_rank_layer"].get_column("layer").drop_nulls().unique().to_list())
    step, window = worst_window(t["barrier_by_rank_layer"], t["step_breakdown"])
    lo, hi = (0, max(events_layers)) if events_layers else (0, 0)  # layers count from 0
    marks = {int(v): str(v) for v in events_layers[:: max(1, len(events_layers) // 12)]}
    ranks = sorted(r["rank"] for r in s.info["ranks"])
    return (
        [{"label": f"step {v}", "value": v} for v in steps],
        step,
        lo,
        hi,
        list(window) if window else None,
        marks,
        [{"label": f"r{r}", "value": r} for r in ranks],
        None,
    )


def timeline_fig(stores: Stores, key: Any, step: Any, layers: Any, ranks: Any):
    try:
        s = stores.get(key)
    except StoreUnavailable:
        return empty_figure("Device timeline", "no store")
    window = (int(layers[0]), int(layers[1])) if layers else None
    subset = tuple(sorted(int(r) for r in ranks)) if ranks else None
    spans = s.timeline(None if step is None else int(step), window, subset)
    where = f"step {step}" + (f", layers {window[0]}–{window[1]}" if window else "")
    return timeline_figure(spans, title=f"Device timeline, {where}", critical=_critical(s, step, spans))


def _critical(s: Any, step: Any, spans: Any) -> Any:
    """The critical path's pieces of the step inside the drawn window (None when there are none)."""
    import polars as pl

    path = s.critical_path()
    if path is None or step is None or spans.height == 0:
        return None
    lo, hi = spans.get_column("start_ns").min(), spans.get_column("end_ns").max()
    return path.filter(
        (pl.col("window") == int(step)) & (pl.col("end_ns") >= lo) & (pl.col("start_ns") <= hi)
    ).filter(pl.col("rank").is_in(spans.get_column("rank").unique().to_list()))


def timeline_note(stores: Stores, key: Any, step: Any, layers: Any, ranks: Any) -> str:
    """The line under the figure, true for the window shown (its spans are cached: no second read)."""
    try:
        s = stores.get(key)
    except StoreUnavailable:
        return ""
    window = (int(layers[0]), int(layers[1])) if layers else None
    subset = tuple(sorted(int(r) for r in ranks)) if ranks else None
    spans = s.timeline(None if step is None else int(step), window, subset)
    caption = timeline_caption(spans)
    path = _critical(s, step, spans)
    if path is not None and path.height:
        caption += "; the black line is the step's critical path (asaptrace critical)"
    return "Drag to zoom, double-click to zoom out" + (f"; {caption}." if caption else ".")


def layers_box(stores: Stores, key: Any) -> dict[str, str]:
    """The layers slider's box: hidden on a store without layers (a slider fixed at 0 chooses nothing)."""
    try:
        t = stores.get(key).diag.tables
    except StoreUnavailable:
        return {"display": "none"}
    return {} if t["barrier_by_rank_layer"].get_column("layer").drop_nulls().len() else {"display": "none"}


def register(app, stores: Stores, jobs) -> None:
    app.callback(
        Output("tl-step", "options"),
        Output("tl-step", "value"),
        Output("tl-layers", "min"),
        Output("tl-layers", "max"),
        Output("tl-layers", "value"),
        Output("tl-layers", "marks"),
        Output("tl-ranks", "options"),
        Output("tl-message", "children"),
        Input("store", "value"),
    )(lambda key: timeline_controls(stores, key))
    app.callback(Output("tl-layers-box", "style"), Input("store", "value"))(
        lambda key: layers_box(stores, key)
    )
    app.callback(
        Output("tl-caption", "children"),
        Input("store", "value"),
        Input("tl-step", "value"),
        Input("tl-layers", "value"),
        Input("tl-ranks", "value"),
    )(lambda key, step, layers, ranks: timeline_note(stores, key, step, layers, ranks))
    app.callback(
        Output("tl-figure", "figure"),
        Input("store", "value"),
        Input("tl-step", "value"),
        Input("tl-layers", "value"),
        Input("tl-ranks", "value"),
    )(lambda key, step, layers, ranks: timeline_fig(stores, key, step, layers, ranks))
