"""The dashboard as a person meets it: seconds to the Overview's first paint and the Timeline, in Chromium.

Serves ``STORE`` as ``asaptrace dashboard`` does (waitress, its default threads; the stores
diagnosed on a background thread once it listens, as the CLI does when that exists) on a free local
port, then in headless Chromium (``/usr/bin/chromium`` through playwright), on a fresh server each
round (nothing cached in memory; the diagnosis beside the store read back when present — with
``--drop-cache`` it is deleted before each server, as on a store never diagnosed):

* Overview, first paint — from navigation to the findings and headline numbers on the page;
* Overview, advice — until the advice at a glance is drawn (or says why nothing applies);
* Timeline, by its link — then a click on the Timeline link (as a person goes there: no reload)
  until the timeline figure is drawn; then until its critical path is drawn over it;
* Timeline — on the same server (the diagnosis cached), from a fresh navigation to /timeline
  (page reload: plotly.js compiled again) until the figure is drawn;
* Timeline, cold — on a fresh server, the Timeline asked for first.

The 1-, 5- and 15-minute load averages are printed beside the times (the machine may be shared).
Make the 384-rank run of issue 42 (384 ranks × 61 layers × 2 steps, 3.4 M events) with
``asaptrace synth --preset coupled-384 --steps 2 -o RUN && asaptrace ingest RUN/kineto -o STORE``.

    python benchmarks/dashboard_browser.py STORE [--repeat 3] [--drop-cache]
"""

from __future__ import annotations

import argparse
import os
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
#: the critical path drawn over the timeline's lanes
CRITICAL_DRAWN = (
    "(() => { const g = document.querySelector('#tl-figure .js-plotly-plot');"
    " return !!g && !!g.data && g.data.some(t => t.name === 'critical path'); })()"
)
CACHE = ".diagnosis.zip"  # asaptrace.pipeline.cache.CACHE_NAME (absent before issue 42's cache)


class Served:
    """The dashboard of ``store`` behind waitress on a free port, in a thread."""

    def __init__(self, store: Path) -> None:
        self.app = create_app([store])
        self.server = create_server(self.app.server, host="127.0.0.1", port=0, threads=default_threads())
        self.url = f"http://127.0.0.1:{self.server.effective_port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        warm = getattr(self.app.asaptrace_stores, "warm", None)  # as the CLI does once it listens
        if warm is not None:
            warm()
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
    ap.add_argument(
        "--drop-cache", action="store_true", help="delete the diagnosis kept beside the store first"
    )
    args = ap.parse_args()

    def fresh() -> Served:
        if args.drop_cache:
            (args.store / CACHE).unlink(missing_ok=True)
        return Served(args.store)

    rows: dict[str, list[float]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for _ in range(args.repeat):
            with fresh() as s:
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
                page.wait_for_function(CRITICAL_DRAWN, timeout=300_000, polling=50)
                critical = time.perf_counter() - t0
                timeline = seconds_until(page, s.url + "/timeline", TIMELINE_DRAWN)
            with fresh() as s:
                cold = seconds_until(page, s.url + "/timeline", TIMELINE_DRAWN)
                t0 = time.perf_counter()  # and its walk done (the server is not left walking at exit)
                page.wait_for_function(CRITICAL_DRAWN, timeout=300_000, polling=50)
                cold_critical = cold + time.perf_counter() - t0
            for k, v in (
                ("load average, 1 min", os.getloadavg()[0]),
                ("overview, first paint", first),
                ("timeline, by its link", clicked),
                ("  … its critical path drawn", critical),
                ("overview, advice drawn", advice),
                ("timeline (diagnosis cached)", timeline),
                ("timeline, cold server", cold),
                ("  … critical path drawn (cold)", cold_critical),
            ):
                rows.setdefault(k, []).append(v)
        browser.close()
    cache = "deleted before each server" if args.drop_cache else "kept beside the store, read back"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{args.store} in Chromium, {args.repeat} rounds (a fresh server each; the diagnosis {cache}):")
    print(f"  load average now (1, 5, 15 min): {load}")
    for k, v in rows.items():
        unit = "" if k.startswith("load") else " s"
        print(f"  {k:30s} median {statistics.median(v):6.2f}{unit}   ({', '.join(f'{x:.2f}' for x in v)})")


if __name__ == "__main__":
    main()
