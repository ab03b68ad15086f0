"""Dashboard callback latency on the 32-rank coupled sample: the first (uncached) load vs later callbacks.

Ingests ``sample_traces/coupled/kineto`` into a temporary store (not timed), builds the app, then
times in this process, through the Flask test client (the real request path: JSON in, callback,
figure serialised to JSON out):

* baseline — the first request for a store: open + diagnose + the Overview (what a user waits for
  once per store);
* every page's callbacks after that, each the median of ``--repeat`` requests (the Diagnosis is
  cached; timeline windows are cached per (step, layers, ranks), so a new window is timed too; the
  kept replies are dropped before each request, so the callback is computed, and a kept reply is
  timed apart);
* a background replay (asap), submit to result (a worker process: spawn + replay).

Prints each figure and its ratio to the first load.

With ``--clients N`` it load-tests the real server instead (benchmarks/_dashboard_load.py): the
dashboard started as a user starts it (waitress), every page's callbacks posted over HTTP by N
concurrent browser-like clients, p50/p99 and errors against one client alone in the same run.

    python benchmarks/dashboard.py
    python benchmarks/dashboard.py --repeat 10
    python benchmarks/dashboard.py --clients 16 [--rounds 3] [--threads T] [--think 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store
from asaptrace_dashboards import create_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _dashboard_load import callback_body, inp, load_test

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "coupled" / "kineto"


def call(client, output: str, inputs: list[dict], state: list[dict] | None = None) -> float:
    """One callback request as the browser sends it; returns seconds."""
    body = callback_body(output, inputs, state)
    t0 = time.perf_counter()
    r = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    dt = time.perf_counter() - t0
    if r.status_code not in (200, 204):
        raise SystemExit(f"callback {output} failed: {r.status_code} {r.data[:300]!r}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clients", type=int, default=0, help="load-test the real server with N clients")
    ap.add_argument("--rounds", type=int, default=3, help="sessions per client (with --clients)")
    ap.add_argument("--threads", type=int, default=None, help="server threads (default: the CLI's)")
    ap.add_argument("--think", type=float, default=0.0, help="seconds between a client's pages (0: stress)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = enrich_store(ingest_paths([SAMPLE], Path(tmp) / "coupled.store", jobs=2))
        if args.clients:
            load(store, Path(tmp), args)
            return
        app = create_app([store.path])
        client = app.server.test_client()
        first = call(client, "overview-body.children", [inp("store", "value", "0")])
        print(f"first load (open + diagnose + overview): {first * 1000:8.1f} ms  (baseline)")
        d = app.asaptrace_stores.get("0").diag
        from asaptrace.viz.timeline import worst_window

        step, window = worst_window(d.tables["barrier_by_rank_layer"], d.tables["step_breakdown"])
        cases = {
            "overview": ("overview-body.children", [inp("store", "value", "0")], None),
            "timeline (worst window, cached)": (
                "tl-figure.figure",
                [
                    inp("store", "value", "0"),
                    inp("tl-step", "value", step),
                    inp("tl-layers", "value", list(window)),
                    inp("tl-ranks", "value", None),
                ],
                None,
            ),
            "barriers (heatmap + ranking)": (
                "bw-body.children",
                [inp("store", "value", "0"), inp("bw-step", "value", "all")],
                None,
            ),
            "heatmap click (instance timeline + arrivals)": (
                "bw-detail.children",
                [inp("bw-heatmap", "clickData", {"points": [{"x": 5, "y": "r3 · DP0"}]})],
                [inp("store", "value", "0"), inp("bw-step", "value", "all")],
            ),
            "imbalance": (
                "imb-body.children",
                [inp("store", "value", "0"), inp("imb-step", "value", "all")],
                None,
            ),
            "overlap": ("ov-body.children", [inp("store", "value", "0")], None),
        }
        replies = app.asaptrace_replies  # kept replies (dashboards/replies.py): dropped before each
        for name, (output, inputs, state) in cases.items():  # request, so a callback is computed
            times = []
            for _ in range(args.repeat):
                replies.clear()
                times.append(call(client, output, inputs, state))
            med = statistics.median(times)
            print(f"{name:46s} {med * 1000:8.1f} ms  ({med / first:.3f}× the first load)")
        kept = statistics.median(
            call(client, *cases["barriers (heatmap + ranking)"]) for _ in range(args.repeat)
        )
        print(
            f"{'a kept reply (barriers asked again)':46s} {kept * 1000:8.1f} ms  ({kept / first:.3f}× the first load)"
        )
        fresh = [
            call(
                client,
                "tl-figure.figure",
                [
                    inp("store", "value", "0"),
                    inp("tl-step", "value", step),
                    inp("tl-layers", "value", [lo, lo + 2]),
                    inp("tl-ranks", "value", None),
                ],
            )
            for lo in range(10, 10 + 3 * args.repeat, 3)
        ]
        med = statistics.median(fresh)
        print(
            f"{'timeline (a new window each time)':46s} {med * 1000:8.1f} ms  ({med / first:.3f}× the first load)"
        )
        jobs = app.asaptrace_jobs
        t0 = time.perf_counter()
        job = jobs.submit("replay", "bench", {"store_path": str(store.path), "policy": "asap", "params": {}})
        while jobs.status(job)["state"] == "running":
            time.sleep(0.05)
        dt = time.perf_counter() - t0
        print(
            f"{'background replay asap (submit → result)':46s} {dt * 1000:8.1f} ms  ({dt / first:.2f}× the first load)"
        )


def load(store, tmp: Path, args) -> None:
    """The --clients mode: the coupled store and its asap replay (for Compare) behind the real server."""
    from asaptrace.pipeline import diagnose_store, replay_store
    from asaptrace.viz.timeline import worst_window

    replay_store(store.path, "asap", out=tmp / "asap.store")
    d = diagnose_store(store)
    step, window = worst_window(d.tables["barrier_by_rank_layer"], d.tables["step_breakdown"])
    layers = int(d.tables["barrier_by_rank_layer"].get_column("layer").max()) + 1
    steps = sorted(d.tables["step_breakdown"].get_column("step").drop_nulls().unique().to_list())
    load_test(
        [store.path, tmp / "asap.store"],
        clients=args.clients,
        rounds=args.rounds,
        threads=args.threads,
        think=args.think,
        worst=(step, list(window)),
        layers=layers,
        steps=steps,
    )


if __name__ == "__main__":
    main()
