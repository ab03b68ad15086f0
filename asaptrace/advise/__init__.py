"""From diagnosis to advice: every finding paired with the what-if that would fix it.

The diagnosis (:mod:`asaptrace.analyze`) says where time goes; the replay (:mod:`asaptrace.replay`)
says what a change would win back. :func:`advise` joins them for one store: it runs the what-ifs
that apply to its deployment (:mod:`asaptrace.advise.candidates`), each at its best setting, with
the range of its recovered time over what the store cannot pin and the quality of the cost fit it
rests on, and ranks them; :mod:`asaptrace.advise.advice` holds the typed, versioned result and the
one wording every face shows; ``online`` serves the same candidates under load (``advise --online``).
docs/analyses/advise.md documents the rules and the JSON.
"""

from __future__ import annotations

from typing import Any

from asaptrace.advise.advice import Advice, WhatIf
from asaptrace.advise.candidates import advise, nothing_applies
from asaptrace.errors import UsageError

__all__ = ["Advice", "WhatIf", "advise", "advise_store_workload"]


def advise_store_workload(
    store: Any,
    diag: Any,
    *,
    costs: Any = None,
    online: bool = False,
    source: str = "",
    progress: Any = None,
    pool: Any = None,
) -> Advice:
    """The advice of an opened, diagnosed store: its workload's what-ifs (and ``online`` their SLO
    sweep, :func:`asaptrace.advise.online.advise_online`, its searches and the what-ifs'
    Monte-Carlo bands tasks of ``pool``, an :class:`~asaptrace.executors.TaskPool`: default this
    process); a store with no work to replay gets every what-if "does not apply", for that reason."""
    from asaptrace.replay.whatif.measured import extract_measured_work

    try:
        wl = extract_measured_work(store)
    except UsageError as e:  # its message alone: the store is named once, in the advice's header
        advice = nothing_applies(diag, e.message, source=source)
        if online:  # asked for: the online block says why none was served, as on other stores
            from asaptrace.advise.online import not_served

            advice = not_served(advice, e.message)
        return advice
    if not online:
        return advise(wl, diag, costs=costs, source=source, progress=progress)
    from asaptrace.advise.online import advise_online, start_online
    from asaptrace.executors import TaskPool

    pool = pool or TaskPool(1)
    # the measured policy's searches need no offline what-if, and each what-if's only its own
    # replay: on workers they run while the offline advice goes on
    start = (
        None if pool.inline or wl.layers < 1 else start_online(wl, pool, workload=source or None, costs=costs)
    )
    add = None if start is None else start.add
    advice = advise(wl, diag, costs=costs, source=source, progress=progress, on_whatif=add, pool=pool)
    return advise_online(advice, wl, costs=costs, progress=progress, pool=pool, start=start)
