"""The part the Replay and Sweep pages share: run / cancel buttons, a progress line, polling a job."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dash import Input, Output, State, html, no_update

from asaptrace_dashboards._memo import Memo
from asaptrace_dashboards.components import message
from asaptrace_dashboards.jobs import Jobs

#: How often a page asks for its job's progress (ms).
POLL_MS = 400
#: Finished jobs whose drawn result a page keeps (a result is immutable once the job is done).
RENDERED_JOBS = 16


def buttons(prefix: str, run_label: str) -> html.Div:
    return html.Div(
        [
            html.Button(run_label, id=f"{prefix}-run", n_clicks=0, className="run"),
            html.Button("Cancel", id=f"{prefix}-cancel", n_clicks=0, className="cancel"),
        ],
        className="buttons",
    )


def poll(
    jobs: Jobs, job: Any, render: Callable[[Any], list], rendered: Memo | None = None
) -> tuple[Any, Any, bool]:
    """(progress children, result children, poll disabled) for the tab's job; a finished run's result
    is drawn once (``rendered``, by the job's key: every tab and every poll showing that run's
    result get the same drawing; a run's result does not change)."""
    job_id = (job or {}).get("id")
    st = jobs.status(job_id)
    if st is None:
        return None, None, True
    last = st["messages"][-1] if st["messages"] else ""
    if st["state"] == "running":
        return (
            html.Div(
                [html.Progress(className="busy"), html.Span(f" running for {st['elapsed_s']:.1f} s: {last}")],
                id="job-progress",
            ),
            None,
            False,
        )
    if st["state"] == "done":
        return (
            html.Div(f"done in {st['elapsed_s']:.1f} s ({last})", id="job-progress"),
            render(st["result"])
            if rendered is None
            else rendered.get(st["key"], lambda: render(st["result"])),
            True,
        )
    if st["state"] == "cancelled":
        return html.Div("cancelled", id="job-progress"), None, True
    return html.Div("failed", id="job-progress"), message(st["error"] or "failed"), True


def register_job_controls(
    app: Any, jobs: Jobs, *, prefix: str, job_store: str, render: Callable[[Any], list]
) -> None:
    """The Cancel button and the progress poll of a page's background job (ids ``{prefix}-cancel``,
    ``{prefix}-cancel-msg``, ``{prefix}-poll``, ``{prefix}-progress``, ``{prefix}-result``; the tab's
    job in the ``job_store`` dcc.Store)."""

    @app.callback(
        Output(f"{prefix}-cancel-msg", "children", allow_duplicate=True),
        Input(f"{prefix}-cancel", "n_clicks"),
        State(job_store, "data"),
        prevent_initial_call=True,
    )
    def _cancel(n, job):
        if not n:
            return no_update
        return None if jobs.cancel((job or {}).get("id")) else html.P("nothing running", className="note")

    rendered: Memo = Memo(max_items=RENDERED_JOBS)
    app.callback(
        Output(f"{prefix}-progress", "children"),
        Output(f"{prefix}-result", "children"),
        Output(f"{prefix}-poll", "disabled"),
        Input(f"{prefix}-poll", "n_intervals"),
        Input(job_store, "data"),
    )(lambda _n, job: poll(jobs, job, render, rendered))
