"""Screenshot the top of reports/coupled.html into docs/img/report.png (run: python reports/screenshot.py).

Uses headless Chromium (/usr/bin/chromium, Debian's `chromium`) through playwright, as the browser
tests do; never `playwright install`.
"""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]


def main(
    report: Path = ROOT / "reports" / "coupled.html", target: Path = ROOT / "docs" / "img" / "report.png"
) -> None:
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(report.resolve().as_uri())
        page.wait_for_function("document.querySelectorAll('.plot .main-svg').length >= 7", timeout=30_000)
        target.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(
            path=str(target), full_page=True, clip={"x": 0, "y": 0, "width": 1300, "height": 2200}
        )
        browser.close()
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
