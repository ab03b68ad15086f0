"""Serve a dashboard: waitress (a production WSGI server) by default, Dash's own server with ``debug``.

Flask's development server, which ``app.run`` starts, tells every user "Do not use it in a
production deployment", serves one request per thread without bounds and has no connection
limit. waitress is pure Python on every platform: a fixed pool of worker threads behind one
asynchronous accept loop, requests queued when all workers are busy. ``debug`` keeps Dash's own
server, for its reloader and in-browser dev tools.

Threads: a callback is mostly polars (which runs on its own thread pool, outside the GIL) and
figure serialisation (inside it), so a few workers per core keep the cores busy while a poll or a
cached page is never stuck behind a long callback; :func:`default_threads` is that figure, and
``benchmarks/dashboard.py --clients N --threads T`` measures others.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from asaptrace.errors import UsageError

#: Worker threads per core (see the module docstring), and the bounds of the pool.
THREADS_PER_CORE, MIN_THREADS, MAX_THREADS = 4, 4, 32


def default_threads(cores: int | None = None) -> int:
    """Worker threads for this machine: :data:`THREADS_PER_CORE` per usable core, within bounds."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(MIN_THREADS, min(MAX_THREADS, THREADS_PER_CORE * cores))


def serve(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 8050,
    debug: bool = False,
    threads: int | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the Dash ``app`` until interrupted; ``ready(url)`` is called once it listens (port 0: a
    free port, the URL says which). A port that cannot be bound is a :class:`UsageError`."""
    if debug:
        if ready is not None:
            ready(f"http://{host}:{port}/")
        app.run(host=host, port=port, debug=True, dev_tools_disable_version_check=True)  # no call home
        return
    from waitress import create_server

    # waitress warns "Task queue depth is N" each time a request waits for a worker: under load that
    # is every other request, and queueing is the design (a bounded pool), not a fault
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)

    try:
        server = create_server(
            app.server, host=host, port=port, threads=threads or default_threads(), ident="asaptrace"
        )
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    if ready is not None:
        bound = getattr(server, "effective_port", port)
        ready(f"http://{host}:{bound}/")
    server.run()  # returns on Ctrl-C (waitress stops its workers)
