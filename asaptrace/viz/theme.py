"""The one look of every asaptrace figure: a colour per kind, the wait/idle colours, the template, time units.

Every figure builder takes its colours from :data:`KIND_COLOURS` (keyed by :class:`~asaptrace.schema.Kind`)
and the named colours below, so an attention kernel is the same blue in the timeline, the stacked bars
and the dashboard. Times are int64 ns in every table; they become ms or s **only here**
(:func:`time_unit`, :func:`scaled`), and the unit is written into the axis title.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Iterable

import plotly.graph_objects as go
import polars as pl

from asaptrace.schema import Kind

#: One colour per kind, everywhere (Okabe–Ito-like, readable by colour-blind readers).
KIND_COLOURS: dict[str, str] = {
    Kind.ATTENTION: "#0072B2",
    Kind.MOE: "#E69F00",
    Kind.DISPATCH: "#009E73",
    Kind.COMBINE: "#56B4E9",
    Kind.GATE: "#CC79A7",
    Kind.SHARED_EXPERT: "#F0E442",
    Kind.DENSE_MLP: "#8C564B",
    Kind.COLLECTIVE: "#2CA02C",
    Kind.MEMCPY: "#7F7F7F",
    Kind.COMPUTE: "#9467BD",
    Kind.ANNOTATION: "#C7C7C7",
    Kind.HOST: "#BCBD22",
    Kind.OTHER: "#AAAAAA",
}
#: Barrier wait (its own band in the timeline, "exposed wait" in bars and heatmaps).
WAIT_COLOUR = "#D55E00"
#: Waiting for one's own results where there is no barrier (a disaggregated run's combine receive).
RECEIVE_WAIT_COLOUR = "#F4A582"
#: Device idle (its cause unknown), idle waiting on the host to launch, idle while the host synchronises.
IDLE_COLOUR = "#E5E5E5"
IDLE_HOST_COLOUR = "#FDB863"
IDLE_SYNC_COLOUR = "#B2ABD2"
#: Communication that runs under compute (overlapped) vs alone (exposed).
OVERLAPPED_COLOUR = "#A6D96A"
EXPOSED_COMM_COLOUR = KIND_COLOURS[Kind.DISPATCH]
#: Sequential colour scale for wait heatmaps (white = no wait).
WAIT_SCALE = [[0.0, "#FFFFFF"], [0.25, "#FDD0A2"], [0.6, "#F16913"], [1.0, "#7F2704"]]
#: Marker symbols for steps (scatter figures with one trace per step).
STEP_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down")

FONT = "Liberation Sans, Arial, Helvetica, sans-serif"

#: where a figure's title starts, from its top: below the modebar
TITLE_TOP_PX = 38
#: pixels per category row of a bar chart (a 12 px label, its bar and the text beside it) or heatmap
ROW_PX = 28
HEATMAP_ROW_PX = 16
#: the width a figure is laid out for (a report column, a dashboard page); narrower: fit_top
WIDTH_PX = 1000
#: the top margin a figure is given before fit_top sizes it
DEFAULT_TOP_PX = 100

#: The template every figure uses (small on purpose: it is serialised into each figure).
TEMPLATE = go.layout.Template(
    layout=go.Layout(
        font={"family": FONT, "size": 12, "color": "#222222"},
        paper_bgcolor="#FFFFFF",
        plot_bgcolor="#FFFFFF",
        colorway=[KIND_COLOURS[k] for k in Kind],
        margin={"l": 70, "r": 20, "t": 100, "b": 60},
        xaxis={
            "automargin": True,
            "showgrid": True,
            "gridcolor": "#EEEEEE",
            "zeroline": False,
            "linecolor": "#888888",
        },
        yaxis={
            "automargin": True,
            "showgrid": True,
            "gridcolor": "#EEEEEE",
            "zeroline": False,
            "linecolor": "#888888",
        },
        legend={
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.01,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        },
        hoverlabel={"font": {"family": FONT}},
        title={
            "x": 0,
            "xanchor": "left",
            "xref": "container",
            "y": 1,
            "yanchor": "top",
            "yref": "container",
            # below the modebar (≈ 28 px, top right, shown on hover): a long title never runs under it
            "pad": {"t": TITLE_TOP_PX, "l": 8},
            "font": {"size": 15},
            "subtitle": {"font": {"size": 11, "color": "#555555"}},
        },
        # text inside or beside a bar is never smaller than the axis labels (12 px)
        uniformtext={"minsize": 12, "mode": "show"},
    )
)

_UNITS = (("s", 1_000_000_000), ("ms", 1_000_000), ("µs", 1_000))


def kind_colour(kind: str) -> str:
    """The colour of a kind (unknown kinds get the colour of ``other``)."""
    return KIND_COLOURS.get(kind, KIND_COLOURS[Kind.OTHER])


def time_unit(values_ns: Iterable[int | float | None] | pl.Series) -> tuple[str, int]:
    """The unit ("s", "ms", "µs" or "ns") and its divisor for showing these ns values.

    Chosen by the largest magnitude: ms up to 10 s, s beyond (so a 6 s step reads 6,254 ms and a
    2-minute run 120 s); µs below 1 ms.
    """
    vals = values_ns.drop_nulls().abs() if isinstance(values_ns, pl.Series) else None
    top = (
        (float(vals.max()) if len(vals) else 0.0)  # type: ignore[arg-type]
        if vals is not None
        else max((abs(float(v)) for v in values_ns if v is not None), default=0.0)
    )
    if top >= 10 * 1_000_000_000:
        return _UNITS[0]
    if top >= 1_000_000:
        return _UNITS[1]
    if top >= 1_000:
        return _UNITS[2]
    return ("ns", 1)


def scaled(series: pl.Series, divisor: int) -> list[float | None]:
    """ns values divided into the display unit (rounded to 6 significant digits to keep JSON small)."""
    return [None if v is None else float(f"{v / divisor:.6g}") for v in series.to_list()]


def styled(
    fig: go.Figure,
    *,
    title: str,
    x_title: str,
    y_title: str,
    height: int | None = None,
    subtitle: str | None = None,
) -> go.Figure:
    """Apply the template, the title (and a smaller subtitle) and the axis titles (with their units)
    to a figure. The top margin holds the title below the modebar and the legend's rows above the
    plot, so neither covers the other (:func:`fit_top`, for a figure :data:`WIDTH_PX` wide)."""
    fig.update_layout(
        template=TEMPLATE,
        title={"text": title, **({"subtitle": {"text": subtitle}} if subtitle else {})},
        height=height,
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)
    return fit_top(fig, WIDTH_PX)


def fit_top(fig: go.Figure, width_px: int) -> go.Figure:
    """Make room above the plot for a figure ``width_px`` wide: the title and subtitle wrapped
    between words to that width (plotly never wraps them: a long title ran off the figure), then
    the legend's rows (estimated from its entries' text), below the modebar. A figure of fixed
    height grows by the room added, so its rows keep their size. A face that shows a figure
    narrower than :data:`WIDTH_PX` (side by side) calls this again with its width."""
    title = fig.layout.title
    base = fig.layout.height
    old_top = fig.layout.margin.t if fig.layout.margin.t is not None else DEFAULT_TOP_PX
    text = _wrap_title((title.text or "").replace("<br>", " "), (width_px - 16) // 8)
    sub = _wrap_title((title.subtitle.text or "").replace("<br>", " "), (width_px - 16) // 6)
    names = [t.name for t in fig.data if t.name and t.showlegend is not False]
    rows, used = (0, width_px) if len(names) < 2 else (1, 0)
    for name in names if rows else ():
        w = 40 + 7 * len(name)  # symbol, gap and about 7 px a character at 12 px
        if used and used + w > width_px - 80:
            rows, used = rows + 1, 0
        used += w
    lines = text.count("<br>") + 1 if text else 0
    top = TITLE_TOP_PX + 20 * lines + (15 * (sub.count("<br>") + 1) if sub else 0) + 24 * rows + 14
    fig.update_layout(title={"text": text, "subtitle": {"text": sub or None}}, margin={"t": top})
    if base is not None:
        fig.update_layout(height=int(base + top - old_top))
    return fig


def _wrap_title(text: str, chars: int) -> str:
    return "<br>".join(textwrap.wrap(text, max(chars, 20), break_long_words=False)) if text else ""


def rows_height(n_rows: int, *, per_row: int = ROW_PX, other_px: int = 200, cap: int = 4000) -> int:
    """A figure's height for ``n_rows`` category rows: ``per_row`` pixels each plus the title,
    legend and axis (``other_px``), at least 260 px; ∝ N up to ``cap`` (then rows get thinner)."""
    return int(min(max(260, other_px + per_row * n_rows), cap))


def label_every(fig: go.Figure, axis: str, categories: list[str]) -> None:
    """Name every category on ``axis`` ("x" or "y"), in order: plotly skips labels it finds
    crowded, which left the dominant bar of a chart unnamed."""
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="category", tickmode="array", tickvals=categories, ticktext=categories)


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure that says why it has nothing to show (rather than an empty plot)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(template=TEMPLATE, title={"text": title}, height=220)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def rank_label(rank: int, dp_group: int | None) -> str:
    """How a rank is named on an axis: "r5 · DP1" (or "r5" without a DP group)."""
    return f"r{rank}" if dp_group is None else f"r{rank} · DP{dp_group}"


def rank_from_label(label: str) -> int | None:
    """The rank an axis label of :func:`rank_label` names ("r5 · DP1" → 5), None for another text
    (how a click on a heatmap row is turned back into a rank)."""
    head = str(label).split(" · ", 1)[0]
    return int(head[1:]) if head.startswith("r") and head[1:].isdigit() else None


def instance_label(instance: int) -> str:
    """How a collective instance is named on an axis: "#7"."""
    return f"#{instance}"


def instance_from_label(label: object) -> int | None:
    """The instance an axis label of :func:`instance_label` names ("#7" → 7), None for another
    text (a layer number: how a click on a heatmap column is turned back into its barrier)."""
    text = str(label)
    return int(text[1:]) if text.startswith("#") and text[1:].isdigit() else None


def plain(text: str) -> str:
    """A trace-derived string made inert for plotly's pseudo-HTML labels (``<b>``, ``<a href>``…).

    Plotly renders a few tags in hover and tick text; a kernel named ``<a href=…>`` must show as
    text, so ``&``, ``<`` and ``>`` become entities (which plotly displays as the characters).
    """
    return html.escape(text, quote=False)
