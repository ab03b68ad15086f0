"""The report's Critical path section: the chain of work that set each step, across ranks.

Pure: a :class:`~asaptrace.analyze.critical.CriticalPaths` in, a
:class:`~asaptrace.report.sections.Section` out, with the tables ``asaptrace critical`` prints
(:func:`asaptrace.views.critical.critical_views`). See docs/analyses/critical-path.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asaptrace.report.sections import Section
from asaptrace.units import percent, text_ns
from asaptrace.views.critical import critical_views

if TYPE_CHECKING:
    from asaptrace.analyze.critical import CriticalPaths

_KINDS = ("compute", "copy", "transfer", "barrier", "launch", "sync", "host", "gap")


def critical_section(cp: CriticalPaths) -> Section:
    """The Critical path section (its lead sentence names the longest window's largest kind)."""
    steps = cp.steps
    if steps.height == 0:
        return Section("critical-path", "Critical path", "No window to walk.")
    worst = steps.sort("length_ns", descending=True).row(0, named=True)
    kind = max(_KINDS, key=lambda k: worst[f"{k}_ns"])
    share = worst[f"{kind}_ns"] / worst["length_ns"] if worst["length_ns"] else None
    hops = f", crossing {worst['hops']} collective instances to their last arrival" if worst["hops"] else ""
    text = (
        f"The longest chain of dependent work of {worst['label']} is {text_ns(worst['length_ns'])}{hops}; "
        f"{percent(share)} of it is {kind}. The path runs through host ops in thread order, launches, "
        "kernels in stream order and synchronisations, as HTA's critical-path analysis does, and joins the "
        "ranks at each matched collective from the last rank to arrive, so no rank's barrier wait is on it. "
        "`asaptrace critical` prints the same tables, `--json` the whole path."
    )
    text += "".join(f" Note: {n}." for n in cp.notes)
    return Section("critical-path", "Critical path", text, tables=tuple(critical_views(cp, path_rows=10)))
