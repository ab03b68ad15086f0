"""The asaptrace dashboard (Dash): ``create_app(stores) -> dash.Dash``, served by ``asaptrace dashboard``.

The repository's ``dashboards/`` folder installs as the package ``asaptrace_dashboards`` (pyproject.toml's
``package-dir``), a top-level name no other distribution takes.

Built only on ``asaptrace.pipeline`` (library calls), ``asaptrace.views`` (what a human sees),
``asaptrace.units`` (how numbers read) and ``asaptrace.viz`` (the figures the report draws too);
no analysis and no figure code lives here (import-linter checks it). See docs/dashboard.md.

Modules: ``server`` (waitress, or Dash's own with debug), ``app`` (create_app, routing), ``state``
(the stores, loaded lazily and cached, on ``_memo``, a bounded thread-safe memo), ``replies``
(callback replies kept and served again), ``jobs`` (replay and sweep in worker processes,
cancellable), ``components`` (tables, messages), ``pages/`` (one module per page).
"""

from asaptrace_dashboards.app import create_app

__all__ = ["create_app"]
