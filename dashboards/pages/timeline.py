"""Timeline: the device Gantt of one step, a layer range and chosen ranks, barrier wait in its band,
the step's critical path drawn over the lanes.

On a big run (more than :data:`~asaptrace.viz.timeline.FOCUS_ABOVE` ranks) it opens on a few whole
DP groups (:func:`~asaptrace.viz.timeline.focus_ranks`: the last to arrive and those that wait
longest for it), named in the ranks box and the caption: Chromium takes 3–6 s to draw the 1,536
lanes of 384 ranks, a few dozen draw at once; clearing the box draws them all. The lanes are drawn
first and the critical path added when it is walked (12 s once at 384 ranks, then cached): the
page never waits for it."""

from __future__ import annotations

from typing import Any

from dash import Input, Output, Patch, dcc, html, no_update

from asaptrace.units import plural
from asaptrace.viz.theme import empty_figure
from asaptrace.viz.timeline import (
    FOCUS_ABOVE,
    critical_overlay,
    focus_ranks,
    timeline_caption,
    timeline_figure,
    worst_window,
)
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
            dcc.Store(id="tl-drawn"),  # the window the figure shows: the critical path follows it
            html.P([html.Span(id="tl-caption"), html.Span(id="tl-critical-note")], className="note"),
        ]
    )


def timeline_controls(stores: Stores, key: Any) -> tuple:
    """Step options and the worst window as the first choice; layer range bounds; rank options, and
    on a big run the ranks it opens on (module docstring)."""
    try:
        s = stores.get(key)
    except StoreUnavailable as e:
        return [], None, 0, 1, None, {}, [], None, message(str(e))
    t = s.diag.tables
    steps = sorted(t["step_breakdown"].get_column("step").drop_nulls().unique().to_list())
    # the layers that have waits (barrier or receive) are the ones a wait band can show
    events_layers = sorted(t["barrier_by_rank_layer"].get_column("layer").drop_nulls().unique().to_list())
    step, window = worst_window(t["barrier_by_rank_layer"], t["step_breakdown"])
    lo, hi = (0, max(events_layers)) if events_layers else (0, 0)  # layers count from 0
    marks = {int(v): str(v) for v in events_layers[:: max(1, len(events_layers) // 12)]}
    ranks = sorted(r["rank"] for r in s.info["ranks"])
    focus = _focus(s, step, window)[0] if len(ranks) > FOCUS_ABOVE else None
    return (
        [{"label": f"step {v}", "value": v} for v in steps],
        step,
        lo,
        hi,
        list(window) if window else None,
        marks,
        [{"label": f"r{r}", "value": r} for r in ranks],
        focus,
        None,
    )


def _focus(s: Any, step: Any, window: Any) -> tuple[list[int], str]:
    """The ranks a big run's Timeline opens on in this window, and why (:func:`focus_ranks`)."""
    import polars as pl

    t = s.diag.tables
    ranks = pl.DataFrame(s.info["ranks"]).select("rank", "dp_group") if s.info["ranks"] else None
    if ranks is None:
        return [], ""
    window = (int(window[0]), int(window[1])) if window else None
    return focus_ranks(t["barrier_instances"], ranks, step=None if step is None else int(step), layers=window)


def timeline_fig(stores: Stores, key: Any, step: Any, layers: Any, ranks: Any):
    try:
        s = stores.get(key)
    except StoreUnavailable:
        return empty_figure("Device timeline", "no store")
    window = (int(layers[0]), int(layers[1])) if layers else None
    subset = tuple(sorted(int(r) for r in ranks)) if ranks else None
    spans = s.timeline(None if step is None else int(step), window, subset)
    where = f"step {step}" + (f", layers {window[0]}–{window[1]}" if window else "")
    return timeline_figure(spans, title=f"Device timeline, {where}")


def drawn_window(key: Any, step: Any, layers: Any, ranks: Any) -> dict[str, Any]:
    """What the figure now shows, for the critical path's callback (it fires after the figure's)."""
    return {"key": key, "step": step, "layers": layers, "ranks": ranks}


def critical_patch(stores: Stores, drawn: Any) -> tuple[Any, str]:
    """The critical path added over the drawn lanes (a Patch: the lanes are not sent again), and
    the caption's words for it; nothing when the store has no path or none falls in the window."""
    if not drawn:
        return no_update, ""
    try:
        s = stores.get(drawn["key"])
    except StoreUnavailable:
        return no_update, ""
    layers, ranks, step = drawn["layers"], drawn["ranks"], drawn["step"]
    window = (int(layers[0]), int(layers[1])) if layers else None
    subset = tuple(sorted(int(r) for r in ranks)) if ranks else None
    spans = s.timeline(None if step is None else int(step), window, subset)
    path = _critical(s, step, spans)
    trace = critical_overlay(spans, path) if path is not None else None
    if trace is None:
        return no_update, ""
    fig = Patch()
    fig["data"].append(trace)
    return fig, " The black line is the step's critical path (asaptrace critical)."


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
    n_ranks = len(s.info["ranks"])
    if subset and len(subset) < n_ranks:
        focus, why = _focus(s, step, layers) if n_ranks > FOCUS_ABOVE else ([], "")
        chosen = f"{len(subset)} of {plural(n_ranks, 'rank')} shown"
        chosen += f": {why}" if list(subset) == focus and why else " (chosen above)"
        if n_ranks > FOCUS_ABOVE:
            chosen += f"; clear the ranks box to draw all {n_ranks} (seconds in the browser)"
        caption = f"{chosen}; {caption}" if caption else chosen
    # the critical path's words follow in their own span once it is drawn (critical_patch)
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
        Output("tl-ranks", "value"),
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
        Output("tl-drawn", "data"),
        Input("store", "value"),
        Input("tl-step", "value"),
        Input("tl-layers", "value"),
        Input("tl-ranks", "value"),
    )(
        lambda key, step, layers, ranks: (
            timeline_fig(stores, key, step, layers, ranks),
            drawn_window(key, step, layers, ranks),
        )
    )
    # after the lanes are on the page (tl-drawn is set with them): the walk never holds them up
    app.callback(
        Output("tl-figure", "figure", allow_duplicate=True),
        Output("tl-critical-note", "children"),
        Input("tl-drawn", "data"),
        prevent_initial_call=True,
    )(lambda drawn: critical_patch(stores, drawn))
