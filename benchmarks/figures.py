"""Timeline figure size and speed at 384 ranks: the downsampled WebGL figure vs one shape per span.

A coupled DeepSeek-V3-class run of ``--ranks`` devices (default 384 = DP96×TP4, 61 layers, two
micro-batches, one step; 384 experts, one per device, as 256 do not divide over 384) is generated with ``asaptrace synth``, ingested and diagnosed (not timed).
For the layer window the report shows (3 layers around the largest wait) and for a whole step, it
then measures, in this process:

* asaptrace — ``timeline_spans`` + ``timeline_figure`` (per-lane merge below one pixel, one
  ``Scattergl`` trace per kind) and its JSON;
* baseline — the naive figure: one ``layout.shapes`` rectangle per span, the usual plotly Gantt;

and prints build time, JSON size and the ratios. With ``/usr/bin/chromium`` and playwright
present it also times ``Plotly.newPlot`` of each figure in headless Chromium (software WebGL, so
an upper bound of what a desktop GPU does). Finally the whole report of the run (size, build time).

    python benchmarks/figures.py                # 384 ranks
    python benchmarks/figures.py --ranks 32 --keep /tmp/fig-bench
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl

from asaptrace.pipeline import build_store, diagnose_store, report_store
from asaptrace.synth import load_config, synthesize
from asaptrace.viz.theme import kind_colour
from asaptrace.viz.timeline import lanes, timeline_figure, timeline_spans, worst_window

TP = 4
CHROMIUM = Path("/usr/bin/chromium")
#: Longest a figure may take to draw before it counts as "did not draw" (printed as > cap).
RENDER_CAP_S = 180
#: Figures larger than this are not drawn in the browser (the naive whole-step figure: ~46 MB).
RENDER_MAX_BYTES = 20_000_000


def naive_figure(spans: pl.DataFrame) -> go.Figure:
    """One rectangle shape per span (what a straightforward plotly Gantt does)."""
    lane_t = lanes(spans)
    s = spans.join(lane_t, on=["rank", "dp_group", "stream"], how="left", nulls_equal=True)
    t0 = int(s.get_column("start_ns").min())  # type: ignore[arg-type]
    shapes = [
        {
            "type": "rect",
            "x0": (a - t0) / 1e6,
            "x1": (b - t0) / 1e6,
            "y0": lane - 0.4,
            "y1": lane + 0.4,
            "fillcolor": kind_colour(k),
            "line": {"width": 0},
        }
        for a, b, lane, k in s.select("start_ns", "end_ns", "lane", "kind").iter_rows()
    ]
    fig = go.Figure()
    fig.update_layout(shapes=shapes, height=2400)
    fig.update_xaxes(range=[0, (int(s.get_column("end_ns").max()) - t0) / 1e6])  # type: ignore[arg-type]
    fig.update_yaxes(range=[lane_t.height, -1])
    return fig


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def browser_render_seconds(figures: dict[str, str]) -> dict[str, float | None] | None:
    """Seconds of Plotly.newPlot per figure JSON in headless Chromium (None without a browser)."""
    if not CHROMIUM.exists():
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    from plotly.offline import get_plotlyjs

    out: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        page = b.new_page(viewport={"width": 1600, "height": 1000})
        for name, fig_json in figures.items():
            if len(fig_json) > RENDER_MAX_BYTES:
                out[name] = None  # not attempted: the browser takes minutes (measured once: > 15 min)
                continue
            html = Path(tmp) / f"{name}.html"
            html.write_text(
                f"<html><body><div id='f'></div><script>{get_plotlyjs()}</script><script>"
                f"var fig = {fig_json}; var t0 = performance.now();"
                "Plotly.newPlot('f', fig.data, fig.layout).then(function () {"
                " window.renderMs = performance.now() - t0; });</script></body></html>"
            )
            page.goto(html.as_uri(), wait_until="commit")
            try:
                page.wait_for_function("window.renderMs !== undefined", timeout=RENDER_CAP_S * 1000)
                out[name] = page.evaluate("window.renderMs") / 1000
            except Exception:  # the page is still drawing (or died) after the cap
                out[name] = float("inf")
                page = b.new_page(viewport={"width": 1600, "height": 1000})
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=384)
    ap.add_argument("--keep", type=Path, help="keep the generated run and store in this folder")
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium render timing")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="asaptrace-figbench-"))
    work.mkdir(parents=True, exist_ok=True)
    store_path = work / f"r{args.ranks}.store"
    if not store_path.exists():
        conf = work / f"r{args.ranks}.toml"
        experts = (
            256 if 256 % args.ranks == 0 else args.ranks
        )  # one expert per device when 256 does not divide
        conf.write_text(
            f'[model]\nexperts = {experts}\n[deployment]\nmode = "coupled"\ndp = {args.ranks // TP}\ntp = {TP}\n'
            "micro_batches = 2\n"
        )
        run, secs = timed(
            lambda: synthesize(load_config("coupled", conf, steps=1, fmt="kineto"), work / "run")
        )
        print(f"synth {args.ranks} ranks: {run.events:,} events in {secs:.1f} s")
        _, secs = timed(lambda: build_store([run.out_dir / "kineto"], store_path, overwrite=True))
        print(f"ingest + enrich: {secs:.1f} s")
    from asaptrace.store import TraceStore

    store = TraceStore.open(store_path)
    diag, secs = timed(lambda: diagnose_store(store))
    print(f"diagnose: {secs:.1f} s")
    step, layers = worst_window(diag.tables["barrier_by_rank_layer"], diag.tables["step_breakdown"])
    rows = []
    jsons: dict[str, str] = {}
    for label, window in (("3 layers", layers), ("whole step", None)):
        spans, t_prep = timed(
            lambda w=window: timeline_spans(
                store.events(), store.ranks(), diag.tables["barrier_instances"], step=step, layers=w
            )
        )
        fig, t_fig = timed(lambda s=spans: timeline_figure(s))
        js, t_js = timed(lambda f=fig: pio.to_json(f, validate=False, engine="json"))
        naive, t_naive = timed(lambda s=spans: naive_figure(s))
        njs, t_njs = timed(lambda f=naive: pio.to_json(f, validate=False, engine="json"))
        segs = sum(len(tr.x) // 3 for tr in fig.data)
        rows.append((label, spans.height, segs, t_prep + t_fig + t_js, len(js), t_naive + t_njs, len(njs)))
        jsons[f"asaptrace {label}"] = js
        jsons[f"naive {label}"] = njs
    print(f"\ntimeline at {args.ranks} ranks (step {step}, layers {layers}):")
    print(
        f"{'window':<11} {'spans':>9} {'segments':>9} | {'build s':>8} {'JSON MB':>8} | {'naive s':>8} {'naive MB':>9} | {'size ratio':>10} {'time ratio':>10}"
    )
    for label, n, segs, t, size, tn, sn in rows:
        print(
            f"{label:<11} {n:>9,} {segs:>9,} | {t:>8.2f} {size / 1e6:>8.2f} | {tn:>8.2f} {sn / 1e6:>9.2f} | "
            f"{sn / size:>9.1f}× {tn / t:>9.1f}×"
        )
    if not args.no_browser:
        render = browser_render_seconds(jsons)
        if render:
            print("\nPlotly.newPlot in headless Chromium (software WebGL):")
            for name, s in render.items():
                if s is None:
                    print(f"  {name:<24} not attempted (JSON > {RENDER_MAX_BYTES / 1e6:.0f} MB)")
                elif s == float("inf"):
                    print(f"  {name:<24} > {RENDER_CAP_S} s (did not finish)")
                else:
                    print(f"  {name:<24} {s:>7.2f} s")
    out, secs = timed(lambda: report_store(store_path, work / "report.html", command="benchmarks/figures.py"))
    print(f"\nreport of the {args.ranks}-rank run: {out.stat().st_size / 1e6:.1f} MB in {secs:.1f} s")
    print(json.dumps({"ranks": args.ranks, "rows": rows}, default=str))


if __name__ == "__main__":
    main()
