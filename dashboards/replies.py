"""Callback replies kept and served again: a page over stores answers the same request the same way.

A dashboard serves only the stores it was started with, and a store does not change while it is
served, so a callback of a page that only *shows* stores (overview, timeline, barriers, imbalance,
overlap, compare, the routing) returns the same reply for the same request body. Most of a
request's time is building that reply (plotly figures validate their data in Python, under the
GIL); under load the same few replies are asked for again and again (every tab opening the same
page), so the reply bytes are kept (:class:`~asaptrace_dashboards._memo.Memo`: least recently used out first,
:data:`MAX_BYTES` in all, one computation per request even when many tabs send it at once).

Callbacks of pages that run jobs (replay, sweep: submit, poll, cancel) change with the job and are
never kept; neither is any reply but a 200.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from asaptrace_dashboards._memo import Memo

#: Bytes of replies kept (a timeline figure is ≈ 0.2 MB, a page's tables tens of kB).
MAX_BYTES = 128 * 1024**2
#: The route Dash serves callbacks on.
ENDPOINT = "/_dash-update-component"


def output_ids(output: str) -> set[str]:
    """The component ids of a callback's ``output`` string (``a.b`` or ``..a.b...c.d..``; ``@hash``
    of a duplicate output dropped)."""
    return {part.split("@", 1)[0].rsplit(".", 1)[0] for part in output.strip(".").split("...") if part}


def _key(body: dict[str, Any]) -> str:
    """What a reply depends on: the callback, its inputs and state, and which input changed."""
    return json.dumps(
        [body.get("output"), body.get("inputs"), body.get("state"), body.get("changedPropIds")],
        sort_keys=True,
    )


def keep_replies(server: Any, volatile: Iterable[str], *, max_bytes: int = MAX_BYTES) -> Memo:
    """Wrap the Flask ``server``'s callback route so replies are kept (see the module docstring);
    callbacks that write any component id in ``volatile`` are passed through. Returns the memo."""
    from flask import Response, request

    volatile = frozenset(volatile)
    memo: Memo[tuple[int, list[tuple[str, str]], bytes]] = Memo(
        max_bytes=max_bytes, size=lambda r: len(r[2]), keep=lambda r: r[0] == 200
    )
    view = server.view_functions[ENDPOINT]

    @functools.wraps(view)
    def replies(*args: Any, **kwargs: Any) -> Any:
        body = request.get_json(silent=True)  # Flask keeps the parsed body: Dash reads it again
        output = body.get("output") if isinstance(body, dict) else None
        if not isinstance(output, str) or output_ids(output) & volatile:
            return view(*args, **kwargs)

        def render() -> tuple[int, list[tuple[str, str]], bytes]:
            r = server.make_response(view(*args, **kwargs))
            return r.status_code, list(r.headers.items()), r.get_data()

        status, headers, data = memo.get(_key(body), render)
        return Response(data, status=status, headers=headers)

    server.view_functions[ENDPOINT] = replies
    return memo
