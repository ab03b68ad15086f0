"""The dashboard as a person meets it: seconds to the Overview's first paint and the Timeline, in Chromium.

Serves ``STORE`` as ``asaptrace dashboard`` does (waitress, its default threads) on a free local
port, then in headless Chromium (``/usr/bin/chromium`` through playwright), on a fresh server each
round (nothing cached, the store not yet opened):

* Overview, first paint — from navigation to the findings and headline numbers on the page;
* Overview, advice — until the advice at a glance is drawn (or says why nothing applies);
* Timeline, by its link — then a click on the Timeline link (as a person goes there: no reload)
  until the timeline figure is drawn;
* Timeline — on the same server (the diagnosis cached), from a fresh navigation to /timeline
  (page reload: plotly.js compiled again) until the figure is drawn;
* Timeline, cold — on a fresh server, the Timeline asked for first.

Make the 384-rank run of issue 42 (384 ranks × 61 layers × 2 steps, 3.4 M events) with
``asaptrace synth --preset coupled-384 --steps 2 -o RUN && asaptrace ingest RUN/kineto -o STORE``.

    python benchmarks/dashboard_browser.py STORE [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright
from waitress import create_server

from asaptrace_dashboards import create_app
from asaptrace_dashboards.server import default_threads

CHROMIUM = "/usr/bin/chromium"
DRAWN = "document.querySelector('#{id} .main-svg') !== null"
#: the timeline's figure drawn (not its "loading" placeholder)
TIMELINE_DRAWN = (
    "document.querySelector('#tl-figure .gtitle') !== null && "
    "document.querySelector('#tl-figure .gtitle').textContent.startsWith('Device timeline, ')"
)


class Served:
    """The dashboard of ``store`` behind waitress on a free port, in a thread."""

    def __init__(self, store: Path) -> None:
        self.server = create_server(
            create_app([store]).server, host="127.0.0.1", port=0, threads=default_threads()
        )
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()


def seconds_until(page, url: str, condition: str, timeout_s: float = 120) -> float:
    t0 = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_function(condition, timeout=timeout_s * 1000, polling=50)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for _ in range(args.repeat):
            with Served(args.store) as s:
                first = seconds_until(
                    page, s.url + "/", "document.querySelector('#overview-findings') !== null"
                )
                t0 = time.perf_counter()
                page.wait_for_function(
                    DRAWN.format(id="overview-advice-figure")
                    + " || document.querySelector('#overview-advice-none') !== null"
                    + " || document.querySelector('#overview-advice-lines') !== null",
                    timeout=300_000,
                    polling=50,
                )
                advice = first + time.perf_counter() - t0
                t0 = time.perf_counter()  # a click on the Timeline link: no reload, plotly.js compiled
                page.click("#nav-timeline")
                page.wait_for_function(TIMELINE_DRAWN, timeout=120_000, polling=50)
                clicked = time.perf_counter() - t0
                timeline = seconds_until(page, s.url + "/timeline", TIMELINE_DRAWN)
            with Served(args.store) as s:
                cold = seconds_until(page, s.url + "/timeline", TIMELINE_DRAWN)
            for k, v in (
                ("overview, first paint", first),
                ("timeline, by its link", clicked),
                ("overview, advice drawn", advice),
                ("timeline (diagnosis cached)", timeline),
                ("timeline, cold server", cold),
            ):
                rows.setdefault(k, []).append(v)
        browser.close()
    print(f"{args.store} in Chromium, {args.repeat} rounds (a fresh server each):")
    for k, v in rows.items():
        print(f"  {k:30s} median {statistics.median(v):6.2f} s   ({', '.join(f'{x:.2f}' for x in v)})")


if __name__ == "__main__":
    main()
