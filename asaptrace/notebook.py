"""Results in Jupyter: each shows the tables every face shows (:mod:`asaptrace.views`), escaped.

Imported by ``import asaptrace`` when IPython is running (see :mod:`asaptrace.display`). Figures
are plain plotly figures (``asaptrace.viz``), which a notebook draws inline by itself.
docs/notebooks/diagnose-a-run.py walks a run from traces to advice.
"""

from __future__ import annotations

from html import escape
from typing import Any

from asaptrace.display import register_html
from asaptrace.units import text_ns
from asaptrace.views.advice import advice_lines, advice_view
from asaptrace.views.diagnosis import diagnosis_tables, findings_view
from asaptrace.views.replay import band_text, consistency_text, deployment_text, replay_views
from asaptrace.views.sweep import sweep_header, sweep_views
from asaptrace.views.table import TableView


def table_html(view: TableView) -> str:
    """A :class:`~asaptrace.views.table.TableView` as an HTML table (cells by the one rule, escaped)."""
    if view.rows.height == 0:  # never bare headers: say why there is nothing
        return f"<h4>{escape(view.title)}</h4><p>No rows: {escape(view.reason or 'none')}.</p>"
    headers, rows = view.cells()
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    caption = f"<p><i>{escape(view.caption)}</i></p>" if view.caption else ""
    more = f"<p>… and {view.more:,} more rows</p>" if view.more else ""
    return f"<h4>{escape(view.title)}</h4><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{caption}{more}"


def _page(title: str, parts: list[str]) -> str:
    return f"<div class='asaptrace'><h3>{escape(title)}</h3>{''.join(parts)}</div>"


def _lines(lines: list[str]) -> str:
    return "<ol>" + "".join(f"<li>{escape(line)}</li>" for line in lines) + "</ol>"


def diagnosis_html(diag: Any) -> str:
    parts = [table_html(findings_view(diag))]
    parts += [table_html(v) for v in diagnosis_tables(diag)]
    return _page(f"Diagnosis of {diag.meta.get('store', 'a store')}", parts)


def replay_html(result: Any) -> str:
    j = result.to_json()
    parts = [f"<p>{escape(band_text(j))}. {escape(consistency_text(j))}.</p>"]
    parts += [table_html(v) for v in replay_views(j)]
    return _page(f"Replay: {j['policy']} on {deployment_text(j['deployment'])}", parts)


def sweep_html(res: Any) -> str:
    parts = [f"<p>{escape(line)}</p>" for line in sweep_header(res)]
    parts += [table_html(v) for v in sweep_views(res)]
    parts.append(f"<p>{escape(res['reading'])}</p>")
    return _page("Sweep: SLO-compliant throughput", parts)


def advice_html(advice: Any) -> str:
    j = advice.to_json()
    parts = []
    if advice.ranked:
        parts.append(table_html(advice_view(j)))
    parts.append(_lines(advice_lines(j)))
    makespan = j["measured_makespan_ns"]
    head = f"Advice for {j['store']}: " + (
        f"measured makespan {text_ns(makespan)}" if makespan else "no device work in the trace"
    )
    return _page(head, parts)


register_html("Diagnosis", diagnosis_html)
register_html("ReplayResult", replay_html)
register_html("SweepResult", sweep_html)
register_html("Advice", advice_html)
