"""The report's Advice section, at the top: the ranked what-ifs of :func:`asaptrace.advise.advise`.

Pure: the advice's JSON in, a :class:`~asaptrace.report.sections.Section` out: the advice at a
glance first (:func:`asaptrace.viz.advice.advice_figure`; where nothing applies, the reason in its
place), then the same
table (:func:`asaptrace.views.advice.advice_view`) and lines (:func:`asaptrace.views.advice.advice_lines`) the
CLI prints and the dashboard's Overview shows.
"""

from __future__ import annotations

from typing import Any

from asaptrace.report.sections import FigureView, Section
from asaptrace.units import plural, text_ns
from asaptrace.views.advice import advice_lines, advice_view, nothing_applies_text
from asaptrace.views.table import ONLINE_QUESTION, REPLAY_QUESTION
from asaptrace.viz.advice import advice_figure


def advice_section(j: dict[str, Any]) -> Section:
    """The Advice section of an advice's JSON (docs/analyses/advise.md)."""
    applying = [w for w in j["whatifs"] if w["applies"]]
    if applying:
        text = (
            f"The question: {REPLAY_QUESTION} (offline; `asaptrace advise --online` adds {ONLINE_QUESTION},"
            " each beside its capacity bound and its range over seeds). "
            f"What each change would win back on this run ({j.get('deployment_phrase') or plural(j['devices'], 'device')}), "
            f"replayed against the reference replay's makespan of {text_ns(j['reference_makespan_ns'])} "
            "(each at its best setting, with the range over what the store cannot pin and the cost fit it "
            "rests on; `asaptrace advise` prints the same, `--json` for machines)."
        )
    else:  # the reason in place of the figure
        text = nothing_applies_text(j)
    view = advice_view(j)
    tables = (view,) if applying else ()
    fig = advice_figure(j)
    figures = (FigureView("fig-advice", fig),) if fig is not None else ()
    return Section(
        "advice", "Advice", text, figures=figures, tables=tables, lines=tuple(advice_lines(j)), top=True
    )
