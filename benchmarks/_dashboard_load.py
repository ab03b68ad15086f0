"""The load half of benchmarks/dashboard.py: N browser-like clients against the real server.

The server is ``asaptrace dashboard`` as a user starts it (a child process, waitress, the coupled
sample and its asap replay as the two stores, ``--port 0``). A *session* is what a user clicking
through every page makes the browser send: for each page the route callback, then each of the
page's callbacks as HTTP POSTs to ``/_dash-update-component`` (the same JSON body Dash's renderer
sends), with a timeline window of its own (a cache miss, as a new user's zoom is), a heatmap
click, a replay and a sweep submitted and polled, and the comparison of the two stores.

A warm-up session first pays what happens once per server (each store opened and diagnosed, the
replay and the sweep run in their worker processes; their results are cached by parameters, so
later sessions get them at once). Then one client alone runs N × ``rounds`` sessions, one after
the other (the baseline: the same requests as the load, so its p99 is not the maximum of a few;
no think time, a lone client's requests never wait for another's), then N clients run ``rounds``
sessions each at once (before each next page a user reads it: ``think`` seconds on average,
uniform in 0.5–1.5× so that independent users drift apart, seeded per client; 0: a stress test, in
lockstep); every request is timed from send to the last
byte. An error is a status other than 200/204, a failed connection, or a reply carrying an error
message box (``message-error``).
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

TL_CONTROLS = (
    "..tl-step.options...tl-step.value...tl-layers.min...tl-layers.max...tl-layers.value..."
    "tl-layers.marks...tl-ranks.options...tl-message.children.."
)
RP_KNOBS = "..rp-attention.disabled...rp-experts.disabled...rp-m.disabled...rp-chunk_tokens.disabled...rp-mech.options.."
RP_RUN, RP_POLL = (
    "..replay-job.data...rp-cancel-msg.children..",
    "..rp-progress.children...rp-result.children...rp-poll.disabled..",
)
SW_RUN, SW_POLL = (
    "..sweep-job.data...sw-cancel-msg.children..",
    "..sw-progress.children...sw-result.children...sw-poll.disabled..",
)
#: The sweep a session submits: small, so the warm-up's one run stays short.
SWEEP_FORM = (["asap"], "1,2", 10, "")


def inp(id_: str, prop: str, value: Any) -> dict:
    return {"id": id_, "property": prop, "value": value}


def callback_body(output: str, inputs: list[dict], state: list[dict] | None = None) -> dict:
    """The JSON body Dash's renderer posts for one callback (``output`` as in ``app.callback_map``)."""
    parts = output.strip(".").split("...")
    outs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1]} for p in parts]
    return {
        "output": output,
        "outputs": outs if output.startswith("..") else outs[0],
        "inputs": inputs,
        "state": state or [],
        "changedPropIds": [],
    }


class Client:
    """One browser tab: a keep-alive connection, every request timed."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        self.times: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.conn.request("GET", "/_dash-dependencies")  # as the page does on load: what it may call
        self.callbacks = {d["output"] for d in json.loads(self.conn.getresponse().read())}

    def post(self, name: str, output: str, inputs: list[dict], state: list[dict] | None = None) -> Any:
        body = json.dumps(callback_body(output, inputs, state))
        t0 = time.perf_counter()
        try:
            self.conn.request("POST", "/_dash-update-component", body, {"Content-Type": "application/json"})
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException) as e:
            self.conn.close()
            self.errors.append(f"{name}: {type(e).__name__}: {e}")
            return None
        self.times[name].append(time.perf_counter() - t0)
        if r.status not in (200, 204):
            self.errors.append(f"{name}: HTTP {r.status} {data[:200]!r}")
            return None
        if b"message-error" in data:
            self.errors.append(f"{name}: the page shows an error: {data[:300]!r}")
        return json.loads(data) if r.status == 200 else None


def session(
    c: Client,
    worst: tuple[int, list[int]],
    fresh: tuple[int, list[int]],
    *,
    wait: bool = False,
    think: float = 0.0,
    rng: random.Random | None = None,
) -> None:
    """Every page's callbacks once, as the browser fires them on visiting it; ``think`` seconds
    before each next page (a user reading one before clicking the next; 0: a stress test)."""
    s0 = inp("store", "value", "0")

    def visit(*args: Any) -> None:
        if think:
            time.sleep(think * (rng or random).uniform(0.5, 1.5))
        c.post(*args)

    c.post("route", "page.children", [inp("url", "pathname", "/")])
    c.post("overview", "overview-body.children", [s0])
    advice = "..overview-advice.children...overview-advice-detail.children.."
    if advice in c.callbacks:  # builds whose Overview draws the advice once the findings are drawn
        c.post("overview advice", advice, [inp("overview-body", "children", None)], [s0])
    elif "overview-advice.children" in c.callbacks:  # builds whose Overview shows the advice
        c.post("overview advice", "overview-advice.children", [s0])
    visit("route", "page.children", [inp("url", "pathname", "/timeline")])
    c.post("timeline controls", TL_CONTROLS, [s0])
    for name, (step, layers) in (("timeline worst window", worst), ("timeline new window", fresh)):
        c.post(
            name,
            "tl-figure.figure",
            [
                s0,
                inp("tl-step", "value", step),
                inp("tl-layers", "value", layers),
                inp("tl-ranks", "value", None),
            ],
        )
    visit("route", "page.children", [inp("url", "pathname", "/barriers")])
    c.post("barriers steps", "..bw-step.options...bw-step.value..", [s0])
    c.post("barriers body", "bw-body.children", [s0, inp("bw-step", "value", "all")])
    click = {"points": [{"x": fresh[1][0], "y": "r3 · DP0"}]}
    c.post(
        "barriers click",
        "bw-detail.children",
        [inp("bw-heatmap", "clickData", click)],
        [s0, inp("bw-step", "value", "all")],
    )
    visit("route", "page.children", [inp("url", "pathname", "/imbalance")])
    c.post("imbalance steps", "..imb-step.options...imb-step.value..", [s0])
    c.post("imbalance body", "imb-body.children", [s0, inp("imb-step", "value", "all")])
    visit("route", "page.children", [inp("url", "pathname", "/overlap")])
    c.post("overlap", "ov-body.children", [s0])
    visit("route", "page.children", [inp("url", "pathname", "/replay")])
    c.post("replay knobs", RP_KNOBS, [inp("rp-policy", "value", "asap")])
    knobs = [inp(f"rp-{k}", "value", None) for k in ("attention", "experts", "m", "chunk")]
    job = c.post(
        "replay run",
        RP_RUN,
        [inp("rp-run", "n_clicks", 1)],
        [s0, inp("rp-policy", "value", "asap"), *knobs, inp("rp-mech", "value", [])],
    )
    _poll(c, "replay poll", RP_POLL, "rp-poll", "replay-job", job, wait)
    visit("route", "page.children", [inp("url", "pathname", "/sweep")])
    pols, rates, duration, vary = SWEEP_FORM
    form = [
        inp("sw-policies", "value", pols),
        inp("sw-rates", "value", rates),
        inp("sw-duration", "value", duration),
        inp("sw-vary", "value", vary),
    ]
    job = c.post("sweep run", SW_RUN, [inp("sw-run", "n_clicks", 1)], form)
    _poll(c, "sweep poll", SW_POLL, "sw-poll", "sweep-job", job, wait)
    visit("route", "page.children", [inp("url", "pathname", "/compare")])
    c.post("compare", "cmp-body.children", [inp("cmp-a", "value", "0"), inp("cmp-b", "value", "1")])


def _poll(c: Client, name: str, output: str, poll_id: str, store_id: str, job: Any, wait: bool) -> None:
    """Poll the job the run started (once; with ``wait``, until it is done, as the page's interval does)."""
    data = ((job or {}).get("response", {}).get(store_id) or {}).get("data")
    if not data:
        c.errors.append(f"{name}: the run started no job: {json.dumps(job)[:300]}")
        return
    for n in itertools.count(1):
        reply = c.post(name, output, [inp(poll_id, "n_intervals", n), inp(store_id, "data", data)])
        disabled = ((reply or {}).get("response", {}).get(poll_id) or {}).get("disabled")
        if disabled or not wait or reply is None:
            return
        time.sleep(0.4)


def start_server(stores: list[Path], threads: int | None) -> tuple[subprocess.Popen, str]:
    """``asaptrace dashboard STORES --port 0`` in a child process; returns it and its URL."""
    cmd = [sys.executable, "-m", "asaptrace.cli", "dashboard", *map(str, stores), "--port", "0"]
    if threads:
        cmd += ["--threads", str(threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "serving 2 store(s) at http://127.0.0.1:PORT/ (Ctrl-C to stop)"
    if " at http" not in line:
        proc.kill()
        raise SystemExit(f"the dashboard did not start: {line}{proc.stderr.read()}")
    return proc, line.split(" at ", 1)[1].split()[0]


def run_clients(
    url: str, n: int, rounds: int, windows: Any, worst: tuple, think: float
) -> tuple[list[Client], float]:
    """``n`` clients, ``rounds`` sessions each, started together; returns them and the wall time."""
    clients = [Client(url) for _ in range(n)]
    plans = [[next(windows) for _ in range(rounds)] for _ in clients]
    gate = threading.Barrier(n)

    def work(c: Client, plan: list, rng: random.Random) -> None:
        gate.wait()
        for fresh in plan:
            session(c, worst, fresh, think=think, rng=rng)

    threads = [
        threading.Thread(target=work, args=(c, p, random.Random(i)))
        for i, (c, p) in enumerate(zip(clients, plans, strict=True))
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return clients, time.perf_counter() - t0


def summary(clients: list[Client]) -> tuple[dict[str, np.ndarray], np.ndarray, list[str]]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for c in clients:
        for k, v in c.times.items():
            by_name[k] += v
    every = np.array([t for v in by_name.values() for t in v])
    return {k: np.array(v) for k, v in by_name.items()}, every, [e for c in clients for e in c.errors]


def load_test(
    stores: list[Path],
    *,
    clients: int,
    rounds: int,
    threads: int | None,
    think: float,
    worst: tuple,
    layers: int,
    steps: list[int],
) -> None:
    # a window of its own for every session: (step, [lo, lo + width]) never asked before
    windows = iter([(s, [lo, lo + w]) for w in (2, 1, 3) for lo in range(layers - w) for s in steps])
    proc, url = start_server(stores, threads)
    try:
        t0 = time.perf_counter()
        warm = Client(url)
        session(warm, worst, next(windows), wait=True)
        if warm.errors:
            raise SystemExit("warm-up failed:\n" + "\n".join(warm.errors))
        print(f"server: asaptrace dashboard (waitress), {threads or 'default'} threads, at {url}")
        print(
            f"warm-up session (both stores opened and diagnosed, the replay and the sweep run once): {time.perf_counter() - t0:.1f} s"
        )
        print(
            f"think time between pages: {think:g} s on average (uniform 0.5–1.5×)"
            + (" (a stress test: every client sends as fast as it is answered)" if not think else "")
        )
        one, wall1 = run_clients(
            url, 1, rounds * clients, windows, worst, 0.0
        )  # alone: no overlap to wait for
        many, wall_n = run_clients(url, clients, rounds, windows, worst, think)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    by1, all1, err1 = summary(one)
    byn, alln, errn = summary(many)
    q = lambda a, p: 1000 * float(np.quantile(a, p))  # noqa: E731
    print(
        f"\n{'callback':28s} {'1 client p50':>12s} {'p99':>8s} {f'{clients} clients p50':>16s} {'p99':>8s}  (ms)"
    )
    for name in by1:
        print(
            f"{name:28s} {q(by1[name], 0.5):12.1f} {q(by1[name], 0.99):8.1f} {q(byn[name], 0.5):16.1f} {q(byn[name], 0.99):8.1f}"
        )
    p50_1, p99_1, p50_n, p99_n = q(all1, 0.5), q(all1, 0.99), q(alln, 0.5), q(alln, 0.99)
    print(f"{'every request':28s} {p50_1:12.1f} {p99_1:8.1f} {p50_n:16.1f} {p99_n:8.1f}")
    print(
        f"\n1 client: {all1.size} requests, {all1.size / wall1:.1f}/s, errors {len(err1)}; "
        f"{clients} clients: {alln.size} requests, {alln.size / wall_n:.1f}/s, errors {len(errn)}"
    )
    ratio = p99_n / p99_1
    print(
        f"p50 {p50_n / p50_1:.2f}× and p99 {ratio:.2f}× the single-client figure (goal: 0 errors, p99 within 3×): "
        f"{'met' if not errn and ratio <= 3 else 'NOT met'}"
    )
    for e in (err1 + errn)[:10]:
        print("error:", e)
    noisy = [ln for ln in stderr.splitlines() if ln.strip()]
    if noisy:
        print(f"server stderr ({len(noisy)} lines), first: {noisy[0][:200]}")
