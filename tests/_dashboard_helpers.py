"""A dashboard served on 127.0.0.1 (a free port) from a thread, for the browser tests."""

from __future__ import annotations

import threading

from werkzeug.serving import make_server

#: True when the page has no callback in flight (Dash's store is idle).
DASH_IDLE = """() => { const st = window.store && window.store.getState(); if (!st) return false;
  const cb = Object.assign({}, st.callbacks); delete cb.stored; delete cb.completed;
  return !st.isLoading && Object.values(cb).every(a => !a || a.length === 0); }"""
#: True when every graph on the page has been drawn.
GRAPHS_DRAWN = """() => { const g = document.querySelectorAll('.dash-graph');
  return Array.from(g).every(e => e.querySelector('.main-svg')); }"""


class LiveDash:
    """A werkzeug server in a daemon thread; port 0 picks a free port."""

    def __init__(self, app) -> None:
        self.httpd = make_server("127.0.0.1", 0, app.server, threaded=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> LiveDash:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
