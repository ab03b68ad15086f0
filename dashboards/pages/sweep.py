"""Sweep: rate → mean TTFT per policy with the SLO line, the sensitivity tornado; a small sweep run
from the page in the background.

It calls ``asaptrace.pipeline.sweep(scenario, *, policies, rates, knobs, vary, progress) -> dict``
(the object of docs/reference/sweep-json.md). A build whose pipeline has no ``sweep`` shows a
message instead of the form.
"""

from __future__ import annotations

from typing import Any

from dash import Input, Output, State, dcc, html, no_update

from asaptrace import pipeline
from asaptrace.views.sweep import sweep_header, sweep_views
from asaptrace.views.table import PAPER_QUESTION
from asaptrace.viz.sweep import sensitivity_tornado, ttft_curves
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.jobs import Jobs, JobsBusy
from asaptrace_dashboards.pages._jobs_ui import POLL_MS, buttons, register_job_controls

PATH, TITLE = "/sweep", "Sweep"
#: Its callbacks follow a background job: their replies are never kept (dashboards/replies.py).
RUNS_JOBS = True
UNAVAILABLE = "The SLO sweep is not available in this build (asaptrace.pipeline has no sweep)."
#: the sweep's choices, from the one policy registry (online policies and their ablations)
CATALOGUE = pipeline.policy_catalogue()
POLICIES = tuple(s for p in CATALOGUE if p["online"] for s in (p["name"], *p["variants"]))
CHOSEN = [p["name"] for p in CATALOGUE if p["sweep_default"]]
#: a small sweep by default: a page run should take seconds, not the paper's 300 s per rate
#: (one seed: no range; 5 seeds give the median and min–max every online answer shows)
DEFAULTS = {"rates": "1,2,4,8", "duration_s": 30, "vary": "k_s=1,2", "seeds": 1}


def available() -> bool:
    return hasattr(pipeline, "sweep")


def layout(stores: Any = None) -> html.Div:
    if not available():
        return html.Div(message(UNAVAILABLE, kind="info", id="sw-unavailable"))
    return html.Div(
        [
            html.Div(
                [
                    dcc.Checklist(id="sw-policies", options=list(POLICIES), value=CHOSEN),
                    html.Label(
                        [
                            "rates (1/s, comma-separated)",
                            dcc.Input(id="sw-rates", type="text", value=DEFAULTS["rates"]),
                        ]
                    ),
                    html.Label(
                        [
                            "arrivals per rate (s)",
                            dcc.Input(id="sw-duration", type="number", value=DEFAULTS["duration_s"]),
                        ]
                    ),
                    html.Label(
                        [
                            "seeds (the median, with the range over them)",
                            dcc.Input(id="sw-seeds", type="number", min=1, value=DEFAULTS["seeds"]),
                        ]
                    ),
                    html.Label(
                        [
                            "vary one knob (KNOB=V1,V2; empty: none)",
                            dcc.Input(id="sw-vary", type="text", value=DEFAULTS["vary"]),
                        ]
                    ),
                ],
                className="controls",
            ),
            buttons("sw", "Run sweep"),
            html.Div(id="sw-cancel-msg"),
            html.Div(id="sw-progress"),
            html.Div(id="sw-result"),
            dcc.Interval(id="sw-poll", interval=POLL_MS, disabled=True),
        ]
    )


def sweep_args(policies: Any, rates: Any, duration: Any, vary: Any, seeds: Any = 1) -> dict[str, Any]:
    """The form → ``pipeline.sweep``'s keyword arguments (ValueError: the message to show)."""
    pols = [p for p in POLICIES if p in (policies or [])]
    if not pols:
        raise ValueError("choose at least one policy")
    try:
        rate_list = [float(r) for r in str(rates or "").split(",") if r.strip()]
    except ValueError:
        raise ValueError(f"rates must be numbers separated by commas, not {rates!r}") from None
    if not rate_list or min(rate_list) <= 0:
        raise ValueError("give at least one positive rate")
    if duration is None or float(duration) <= 0:
        raise ValueError("arrivals per rate must be a positive number of seconds")
    if seeds is None or int(seeds) < 1:
        raise ValueError("seeds must be a whole number, at least 1")
    return {
        "scenario": "asap-paper",
        "policies": tuple(pols),
        "rates": tuple(rate_list),
        "knobs": {"duration_s": float(duration)},
        "vary": [str(vary).strip()] if vary and str(vary).strip() else [],
        **({"seeds": int(seeds)} if int(seeds) > 1 else {}),
    }


def start_sweep(jobs: Jobs, policies: Any, rates: Any, duration: Any, vary: Any, seeds: Any = 1) -> tuple:
    if not available():
        return no_update, message(UNAVAILABLE, kind="info")
    try:
        args = sweep_args(policies, rates, duration, vary, seeds)
    except ValueError as e:
        return no_update, message(str(e))
    key = "sweep|" + repr(sorted(args.items()))
    try:
        return {"id": jobs.submit("sweep", key, args)}, None
    except JobsBusy as e:
        return no_update, message(str(e), kind="info")


#: the sweep's words that name a CLI flag or a repository file, as this page names them (its fields)
ON_THIS_PAGE = (
    (" (docs/analyses/replay.md)", ""),
    ("(run with --vary to see how far)", "(vary one knob above to see how far)"),
    ("sweep a wider range of --rates", "sweep a wider range of rates"),
    ("not from replay --save-costs", "not saved from a replay"),
)


def on_this_page(text: str) -> str:
    """The sweep's text as this page says it: no pointer to a flag or file the page does not have."""
    for cli, page in ON_THIS_PAGE:
        text = text.replace(cli, page)
    return text


def sweep_result(result: dict[str, Any]) -> list:
    """A finished sweep: the question it answers, its reading, every table as the CLI and the
    report show them (:func:`asaptrace.views.sweep.sweep_views`; the SLO table's legend says what
    its bound and seeds columns are), the curves and the tornado."""
    warnings = [message(f"warning: {w}", kind="info") for w in result.get("cost_warnings") or []]
    shown: list = []
    for view in sweep_views(result):
        shown.append(table(view, id=f"sw-{view.name.removeprefix('sweep-')}"))
        if view.name == "sweep-slo":
            shown.append(html.P(view.caption, className="note", id="sw-slo-legend"))
    return [
        html.P(
            on_this_page(
                f"The question: {result.get('question') or PAPER_QUESTION}. "
                + " ".join(sweep_header(result)[:1])
            ),
            id="sw-question",
        ),
        html.P(on_this_page(result.get("reading", "")), id="sw-reading"),
        *warnings,
        *shown,
        graph("sw-curves", ttft_curves(result)),
        graph("sw-tornado", sensitivity_tornado(result)),
    ]


def register(app, stores, jobs: Jobs) -> None:
    if not available():
        return

    @app.callback(
        Output("sweep-job", "data"),
        Output("sw-cancel-msg", "children"),
        Input("sw-run", "n_clicks"),
        State("sw-policies", "value"),
        State("sw-rates", "value"),
        State("sw-duration", "value"),
        State("sw-vary", "value"),
        State("sw-seeds", "value"),
        prevent_initial_call=True,
    )
    def _run(n, policies, rates, duration, vary, seeds):
        if not n:  # the button was (re)drawn, not clicked
            return no_update, no_update
        return start_sweep(jobs, policies, rates, duration, vary, seeds)

    register_job_controls(app, jobs, prefix="sw", job_store="sweep-job", render=sweep_result)
