"""One way to open a watched page in headless Chromium (Debian's /usr/bin/chromium through
Playwright; never `playwright install`), shared by the report's and the dashboard's browser tests.

The page carries ``page.log``: ``errors`` (console errors and page errors: a callback that raises on
a Dash server shows up here), ``requests`` (every URL the page asked for), ``external`` (those not
starting with one of the ``local`` prefixes, ``data:`` or ``blob:``) and ``dialogs`` (alerts,
dismissed: a script injected through a trace name would raise one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: mark a module's tests as browser tests that skip, with the reason, where Chromium is absent
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is absent (apt-get install chromium)"),
]


def watch(pg: Any, log: dict[str, list[str]], local: Sequence[str]) -> None:
    """Record ``pg``'s console errors, page errors, requests and dialogs into ``log``."""
    allowed = (*local, "data:", "blob:")
    pg.on("console", lambda m: log["errors"].append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: log["errors"].append(str(e)))
    pg.on(
        "request",
        lambda r: (log["requests"].append(r.url), r.url.startswith(allowed) or log["external"].append(r.url)),
    )
    pg.on("dialog", lambda d: (log["dialogs"].append(d.message), d.dismiss()))


@contextmanager
def watched_page(*, width: int, height: int, local: Sequence[str] = ()) -> Iterator[Any]:
    """A fresh Chromium page of ``width`` × ``height`` with ``page.log`` (see the module docstring)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
    )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            pg = browser.new_page(viewport={"width": width, "height": height})
            pg.log = {"errors": [], "requests": [], "external": [], "dialogs": []}
            watch(pg, pg.log, local)
            yield pg
        finally:
            browser.close()
