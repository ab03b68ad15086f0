"""Screenshot the top of reports/coupled.html into docs/img/report.png, and the coupled sample's
advice at a glance (offline and online: ``advise --online``, about a minute) into
docs/img/advice.png, the README's picture (run: python reports/screenshot.py).

Uses headless Chromium (/usr/bin/chromium, Debian's `chromium`) through playwright, as the browser
tests do; never `playwright install`.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]


def _chromium(p):
    """Debian's Chromium, headless (as the browser tests launch it)."""
    return p.chromium.launch(
        executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
    )


def main(
    report: Path = ROOT / "reports" / "coupled.html", target: Path = ROOT / "docs" / "img" / "report.png"
) -> None:
    with sync_playwright() as p:
        browser = _chromium(p)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(report.resolve().as_uri())
        page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 7", timeout=30_000)
        target.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(
            path=str(target), full_page=True, clip={"x": 0, "y": 0, "width": 1300, "height": 2200}
        )
        browser.close()
    print(f"wrote {target}")


def advice(target: Path = ROOT / "docs" / "img" / "advice.png") -> None:
    """The coupled sample ingested, advised offline and online, its advice figure drawn by plotly.js
    (as the report draws it) and screenshot at the report's width."""
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from asaptrace.pipeline import advise_store, build_store
    from asaptrace.viz.advice import advice_figure

    with tempfile.TemporaryDirectory() as tmp:
        store = build_store([ROOT / "sample_traces" / "coupled" / "kineto"], Path(tmp) / "coupled.store")
        j = json.loads(json.dumps(advise_store(str(store.path), online=True).to_json()))
        page_file = Path(tmp) / "advice.html"
        page_file.write_text(
            "<html><body style='margin:0'><div id='f' style='width:1000px'></div>"
            f"<script>{get_plotlyjs()}</script><script>var fig = {pio.to_json(advice_figure(j))};"
            "Plotly.newPlot('f', fig.data, fig.layout, {displayModeBar: false})"
            ".then(function () { window.drawn = true; });</script></body></html>"
        )
        with sync_playwright() as p:
            browser = _chromium(p)
            page = browser.new_page(viewport={"width": 1000, "height": 800})
            page.goto(page_file.as_uri())
            page.wait_for_function("window.drawn === true", timeout=30_000)
            page.locator("#f .main-svg").first.screenshot(path=str(target))
            browser.close()
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
    advice()
