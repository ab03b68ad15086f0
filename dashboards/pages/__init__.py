"""One module per page: ``PATH``, ``TITLE``, ``layout()`` (the page's skeleton) and
``register(app, stores, jobs)`` (its callbacks, which fill the skeleton for the selected store).

The callback bodies are plain functions (``*_body``, ``*_figure``…) that tests call directly.
"""

from dashboards.pages import barriers, compare, imbalance, overlap, overview, replay, sweep, timeline

#: In the order of the navigation bar.
PAGES = (overview, timeline, barriers, imbalance, overlap, replay, sweep, compare)

__all__ = ["PAGES"]
