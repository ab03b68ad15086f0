"""Replay: a policy and its knobs, run in the background; measured vs replayed, recovered time by cause."""

from __future__ import annotations

import json
import re
from typing import Any

from dash import Input, Output, State, dcc, html, no_update

from asaptrace import pipeline
from asaptrace.units import human_ns
from asaptrace.views.replay import (
    band_text,
    consistency_text,
    cost_fit_view,
    deployment_text,
    replay_causes_view,
)
from asaptrace.views.table import ONLINE_QUESTION, PAPER_QUESTION, REPLAY_QUESTION
from asaptrace.viz.replay import recovered_waterfall, replay_steps
from asaptrace_dashboards.components import graph, message, table
from asaptrace_dashboards.jobs import Jobs, JobsBusy
from asaptrace_dashboards.pages._jobs_ui import POLL_MS, buttons, register_job_controls
from asaptrace_dashboards.state import Stores, StoreUnavailable

PATH, TITLE = "/replay", "Replay"
#: Its callbacks follow a background job: their replies are never kept (dashboards/replies.py).
RUNS_JOBS = True
_DXT = re.compile(r"^\s*\d+\s*x\s*\d+\s*$")


def _params() -> dict[str, dict[str, Any]]:
    """Every registered policy's parameters with their defaults (the one catalogue)."""
    return {p["name"]: p["params"] for p in pipeline.policy_catalogue()}


def form_settings() -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str]]]:
    """The form, generated from the registry's schema (each policy's settings marked for a form,
    :func:`asaptrace.replay.policies.base.form_setting`): the knobs (setting, form id, label, its
    type) in registry order, and the on/off mechanisms (setting, label), those on by default first.
    A knob a policy lacks is greyed out."""
    knobs: dict[str, tuple[str, str, str, str]] = {}
    mechanisms: dict[str, tuple[str, bool]] = {}
    for p in pipeline.policy_catalogue():
        for name, label in p["form"].items():
            kind = p["kinds"][name].split("|")[0].strip()
            if kind == "bool":
                mechanisms.setdefault(name, (label, bool(p["params"][name])))
            else:
                knobs.setdefault(name, (name, f"rp-{name}", label, kind))
    on_first = sorted(mechanisms.items(), key=lambda kv: not kv[1][1])  # stable
    return list(knobs.values()), [(name, label) for name, (label, _) in on_first]


def layout(stores: Any = None) -> html.Div:
    policies = list(_params())
    knobs, mechanisms = form_settings()
    return html.Div(
        [
            html.Div(id="rp-applies"),
            html.Div(
                [
                    html.Label(
                        [
                            "policy",
                            dcc.Dropdown(id="rp-policy", options=policies, value="asap", clearable=False),
                        ]
                    ),
                    *(
                        html.Label(
                            [
                                label,
                                dcc.Input(
                                    id=fid,
                                    type="number" if kind in ("int", "float") else "text",
                                    debounce=True,
                                ),
                            ]
                        )
                        for _, fid, label, kind in knobs
                    ),
                    dcc.Checklist(
                        id="rp-mech",
                        options=[{"label": label, "value": name} for name, label in mechanisms],
                        value=[name for name, _ in mechanisms if _on_by_default(name)],
                    ),
                ],
                className="controls",
            ),
            buttons("rp", "Run replay"),
            html.Div(id="rp-cancel-msg"),
            html.Div(id="rp-progress"),
            html.Div(id="rp-result"),
            dcc.Interval(id="rp-poll", interval=POLL_MS, disabled=True),
        ]
    )


def _on_by_default(name: str) -> bool:
    """Whether a mechanism is on in every policy that has it (its form's default)."""
    return all(params.get(name, True) for params in _params().values())


def knob_state(policy: str) -> tuple:
    """Which knobs the policy has: (disabled per knob..., mechanism options)."""
    names = _params().get(policy, {})
    knobs, mechanisms = form_settings()
    disabled = tuple(p not in names for p, _, _, _ in knobs)
    options = [{"label": label, "value": n, "disabled": n not in names} for n, label in mechanisms]
    return (*disabled, options)


def replay_params(policy: str, values: dict[str, Any], mechanisms: list[str] | None) -> dict[str, Any]:
    """The form → the policy's parameters (only those it has; empty fields keep its defaults).

    Raises ValueError with the message to show when a field cannot be used."""
    names = _params().get(policy)
    if names is None:
        raise ValueError(f"unknown policy {policy!r}")
    params: dict[str, Any] = {}
    knobs, switches = form_settings()
    for p, _, label, kind in knobs:
        v = values.get(p)
        if p not in names or v in (None, ""):
            continue
        if p == "attention":
            if not _DXT.match(str(v)):
                raise ValueError(f"attention must be DxT (e.g. 4x4), not {v!r}")
            params[p] = str(v).replace(" ", "")
        elif kind in ("int", "float"):
            x, what = float(v), label.split(" (")[0]
            if kind == "int" and x != int(x):
                raise ValueError(f"{what} must be a whole number")
            if x < 1 if kind == "int" else x <= 0:
                raise ValueError(f"{what} must be {'at least 1' if kind == 'int' else 'positive'}")
            params[p] = int(x) if kind == "int" else x
        else:
            params[p] = str(v).strip()
    for name, _ in switches:
        if name in names:
            params[name] = name in (mechanisms or [])
    if not params.get("expert_failure"):
        params.pop("expert_failure", None)
    return params


def start_replay(
    stores: Stores, jobs: Jobs, key: Any, policy: str, values: dict[str, Any], mech: Any
) -> tuple:
    """Submit the replay; returns (the tab's job, a message)."""
    try:
        path = stores.path(key)
        stores.get(key)  # an unreadable store says so here, not in a worker
        params = replay_params(policy, values, mech)
    except (StoreUnavailable, ValueError) as e:
        return no_update, message(str(e))
    job_key = f"replay|{key}|{policy}|{json.dumps(params, sort_keys=True)}"
    try:
        job_id = jobs.submit("replay", job_key, {"store_path": str(path), "policy": policy, "params": params})
    except JobsBusy as e:
        return no_update, message(str(e), kind="info")
    return {"id": job_id, "store": key}, None


def replay_result(result: dict[str, Any]) -> list:
    """A replay's JSON form as the page shows it: the makespans, the band and the consistency check,
    the figures, then the causes and the cost fit (the views every face shows)."""
    dep = result["deployment"]
    measured, replayed = result["measured_ns"], result["replayed_ns"]
    reference = result.get("baseline_ns", measured)
    change = f"{100 * (replayed - measured) / measured:+.1f}%" if measured else "-"
    recovered = result.get("recovered_total_ns") or 0
    ref = result.get("reference_policy", "coupled")
    return [
        html.P(
            f"{result['policy']} ({deployment_text(dep)}): measured {human_ns(measured)}, "
            f"makespan {human_ns(replayed)} ({change}); "
            + (
                f"recovered {human_ns(recovered)} from the {ref} replay"
                if recovered >= 0
                else f"{human_ns(-recovered)} slower than the {ref} replay"
            )
            + ("" if reference == measured else f" ({human_ns(reference)})"),
            id="rp-summary",
        ),
        html.P(
            f"The question: {REPLAY_QUESTION}, under another deployment (offline). Served under load,"
            f" {ONLINE_QUESTION.removeprefix('served under load, ')}, is `asaptrace advise --online`'s"
            f" question; {PAPER_QUESTION}, the Sweep page's.",
            id="rp-question",
            className="note",
        ),
        *([html.P(band_text(result), id="rp-band")] if "band" in result else []),
        html.P(
            f"{consistency_text(result)}; costs: {result['costs'].get('source', '-')}",
            className="note",
        ),
        *(html.P(f"warning: {w}", className="note warning") for w in result.get("warnings") or []),
        graph("rp-steps", replay_steps(result)),
        graph("rp-waterfall", recovered_waterfall(result)),
        *([table(replay_causes_view(result), id="rp-causes")] if result.get("counterfactuals") else []),
        *([table(cost_fit_view(result["cost_fit"]), id="rp-fit")] if result.get("cost_fit") else []),
        *(html.P(f"note: {n}", className="note") for n in result.get("notes", [])),
    ]


def applies_note(stores: Stores, key: Any, policy: str | None = "asap") -> tuple[Any, bool]:
    """What the page says before a run, and whether the Run button is offered: why the chosen
    policy's replay would be refused on this store (a training or decode run, one device, no MoE
    layers: the words ``asaptrace replay`` refuses with), checked before the click."""
    try:
        reason = stores.get(key).replay_refusal(policy or "asap")
    except StoreUnavailable:
        return None, False  # the run says why, in the store's own words
    if not reason:
        return None, False
    return message(reason, kind="info", id="rp-no-prefill"), True


def register(app, stores: Stores, jobs: Jobs) -> None:
    app.callback(
        Output("rp-applies", "children"),
        Output("rp-run", "disabled"),
        Input("store", "value"),
        Input("rp-policy", "value"),
    )(lambda key, policy: applies_note(stores, key, policy))
    knobs, _ = form_settings()
    app.callback(
        *(Output(fid, "disabled") for _, fid, _, _ in knobs),
        Output("rp-mech", "options"),
        Input("rp-policy", "value"),
    )(knob_state)

    @app.callback(
        Output("replay-job", "data"),
        Output("rp-cancel-msg", "children"),
        Input("rp-run", "n_clicks"),
        State("store", "value"),
        State("rp-policy", "value"),
        *(State(fid, "value") for _, fid, _, _ in knobs),
        State("rp-mech", "value"),
        prevent_initial_call=True,
    )
    def _run(n, key, policy, *rest):
        if not n:  # the button was (re)drawn, not clicked
            return no_update, no_update
        *vals, mech = rest
        return start_replay(
            stores, jobs, key, policy, {k[0]: v for k, v in zip(knobs, vals, strict=True)}, mech
        )

    register_job_controls(app, jobs, prefix="rp", job_store="replay-job", render=replay_result)
