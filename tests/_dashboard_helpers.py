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


def page_texts(component) -> list[str]:
    """Every text a dashboard component tree shows: its strings, its tables' headers and cells,
    its options' labels, and its figures' titles, axis titles and annotations (as Dash sends them)."""
    import json

    from plotly.utils import PlotlyJSONEncoder

    out: list[str] = []

    def walk(c) -> None:
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, (list, tuple)):
            for x in c:
                walk(x)
        elif c is not None and not isinstance(c, (int, float)):
            if (fig := getattr(c, "figure", None)) is not None:
                layout = json.loads(json.dumps(fig, cls=PlotlyJSONEncoder)).get("layout", {})
                for key, value in layout.items():
                    if key == "title" or key.startswith(("xaxis", "yaxis")):
                        title = value.get("title", value) if isinstance(value, dict) else None
                        out.append((title or {}).get("text") or "" if isinstance(title, dict) else "")
                out.extend(a.get("text") or "" for a in layout.get("annotations") or [])
            for attr in ("children", "title", "placeholder", "label"):
                walk(getattr(c, attr, None))
            for attr in ("data", "columns", "options"):
                for row in getattr(c, attr, None) or []:
                    if isinstance(row, dict):
                        out.extend(v for v in row.values() if isinstance(v, str))

    walk(component)
    return [t for t in out if t]
