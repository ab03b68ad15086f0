"""``asaptrace dashboard``: explore stores in the browser (:func:`asaptrace_dashboards.create_app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import out, print_warning, user_errors

#: Hosts that only this machine can reach.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@user_errors
def dashboard(
    stores: Annotated[
        list[Path],
        typer.Argument(help="Store directories to serve (only these; the browser cannot name others)."),
    ],
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8050,
    host: Annotated[
        str,
        typer.Option(
            help="Address to bind. The default, 127.0.0.1, is reachable from this machine only; "
            "--host 0.0.0.0 serves every network interface (there is no authentication: anyone who "
            "can reach the port sees the stores)."
        ),
    ] = "127.0.0.1",
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Dash's debug mode on Dash's own (development) server: reloader, tracebacks and the dev "
            "tools in the browser. Off by default (waitress serves); never turn it on with a --host "
            "others can reach.",
        ),
    ] = False,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1, help="waitress worker threads (default: 4 per core, 4 to 32). Ignored with --debug."
        ),
    ] = None,
) -> None:
    """Open the interactive dashboard on one or more stores: findings, timeline, barriers, imbalance, overlap, replay, sweep, compare.

    Served by waitress, a production WSGI server; binds to 127.0.0.1 with debug off unless --host /
    --debug say otherwise (--port 0 picks a free port).

    Example: asaptrace dashboard coupled.store asap.store --port 8050
    """
    from asaptrace.pipeline import open_store
    from asaptrace_dashboards import create_app
    from asaptrace_dashboards.server import serve

    for path in stores:  # each must be a store before anything is served (one line if not)
        open_store(path)
    if host not in LOCAL_HOSTS:
        print_warning(f"serving on {host}: anyone who can reach port {port} sees these stores")
    app = create_app(stores)

    def ready(url: str) -> None:
        out.print(f"serving {len(stores)} store(s) at {url} (Ctrl-C to stop)")
        app.asaptrace_stores.warm()  # diagnosed while the browser opens, never before the URL

    serve(app, host=host, port=port, debug=debug, threads=threads, ready=ready)
