"""``create_app(stores) -> dash.Dash``: the asaptrace dashboard over the stores named at start.

One page of navigation (``dcc.Location`` + links) over eight pages (``asaptrace_dashboards.pages``). The
store picker sends a key, never a path (``asaptrace_dashboards.state``); per-tab state (the job a tab
follows) lives in the tab's ``dcc.Store``; long work runs in worker processes
(``asaptrace_dashboards.jobs``). Everything is served from this process: Dash's own bundles
(``serve_locally``), the CSS in ``dashboards/assets``; no CDN, no external stylesheet, and no
trace-derived string is ever set as HTML. Replies of the pages that only show stores are kept
and served again (``asaptrace_dashboards.replies``; the stores do not change while served).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dash
from dash import Input, Output, dcc, html

from asaptrace_dashboards.components import message
from asaptrace_dashboards.jobs import Jobs
from asaptrace_dashboards.pages import PAGES
from asaptrace_dashboards.replies import keep_replies, output_ids
from asaptrace_dashboards.state import Stores

ASSETS = Path(__file__).parent / "assets"


def create_app(stores: Sequence[str | Path], *, jobs: Jobs | None = None) -> dash.Dash:
    """The Dash app serving ``stores`` (each opened and diagnosed on first use)."""
    if not stores:
        raise ValueError("the dashboard needs at least one store")
    registry = Stores(list(stores))
    jobs = jobs or Jobs()
    app = dash.Dash(
        __name__,
        title="asaptrace",
        update_title=None,
        assets_folder=str(ASSETS),
        serve_locally=True,
        suppress_callback_exceptions=True,  # pages are rendered on navigation
        enable_mcp=False,
    )
    app.layout = html.Div(
        [
            dcc.Location(id="url"),
            dcc.Store(id="replay-job", storage_type="memory"),  # per tab: the job this tab follows
            dcc.Store(id="sweep-job", storage_type="memory"),
            html.Header(
                [
                    html.H1("asaptrace"),
                    html.Label(
                        [
                            "store ",
                            dcc.Dropdown(
                                id="store",
                                options=registry.options(),
                                value="0",
                                clearable=False,
                                persistence=True,  # a reload keeps the tab's store (sessionStorage: per tab)
                                persistence_type="session",
                            ),
                        ],
                        className="store-picker",
                    ),
                    html.Nav([dcc.Link(p.TITLE, href=p.PATH, id=f"nav-{p.TITLE.lower()}") for p in PAGES]),
                ]
            ),
            html.Main(id="page"),
        ]
    )
    by_path = {p.PATH: p for p in PAGES}

    @app.callback(Output("page", "children"), Input("url", "pathname"))
    def _route(pathname: str | None) -> Any:
        return route(registry, pathname, by_path)

    volatile: set[str] = set()  # component ids the job pages' callbacks write
    for page in PAGES:
        before = set(app.callback_map)
        page.register(app, registry, jobs)
        if getattr(page, "RUNS_JOBS", False):
            volatile |= {i for out in set(app.callback_map) - before for i in output_ids(out)}
    app.asaptrace_replies = keep_replies(app.server, volatile)  # type: ignore[attr-defined]
    app.asaptrace_stores = registry  # type: ignore[attr-defined]  # for the CLI and tests
    app.asaptrace_jobs = jobs  # type: ignore[attr-defined]
    return app


def route(registry: Stores, pathname: str | None, by_path: dict[str, Any]) -> Any:
    page = by_path.get((pathname or "/").rstrip("/") or "/")
    if page is None:
        return message(f"no page at {pathname} (pages: {', '.join(by_path)})", kind="info")
    return html.Div([html.H2(page.TITLE), page.layout(registry)], id=f"page-{page.TITLE.lower()}")
