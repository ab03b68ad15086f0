"""``asaptrace dashboard``: explore stores in the browser (:func:`dashboards.create_app`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import err, out, user_errors

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
            help="Dash's debug mode (reloader, tracebacks and the dev tools in the browser). Off by "
            "default; never turn it on with a --host others can reach.",
        ),
    ] = False,
) -> None:
    """Open the interactive dashboard on one or more stores: findings, timeline, barriers, imbalance, overlap, replay, sweep, compare.

    Binds to 127.0.0.1 with debug off unless --host / --debug say otherwise.

    Example: asaptrace dashboard coupled.store asap.store --port 8050
    """
    from dashboards import create_app

    if host not in LOCAL_HOSTS:
        err.print(
            f"[bold yellow]warning:[/] serving on {host}: anyone who can reach port {port} sees these stores"
        )
    app = create_app(stores)
    out.print(f"serving {len(stores)} store(s) at http://{host}:{port}/ (Ctrl-C to stop)")
    app.run(host=host, port=port, debug=debug, dev_tools_disable_version_check=True)  # no call home
