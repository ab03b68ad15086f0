"""One module per page: ``PATH``, ``TITLE``, ``layout()`` (the page's skeleton) and
``register(app, stores, jobs)`` (its callbacks, which fill the skeleton for the selected store).

The callback bodies are plain functions (``*_body``, ``*_figure``…) that tests call directly.

Pages, in the order of the navigation bar: ``overview``, ``timeline``, ``barriers``, ``imbalance``,
``overlap``, ``replay``, ``sweep``, ``compare``; ``_jobs_ui`` is what the Replay and Sweep pages
share (run / cancel, progress, polling a job).
"""

from asaptrace_dashboards.pages import (
    barriers,
    compare,
    imbalance,
    overlap,
    overview,
    replay,
    sweep,
    timeline,
)

#: In the order of the navigation bar.
PAGES = (overview, timeline, barriers, imbalance, overlap, replay, sweep, compare)

__all__ = ["PAGES"]
