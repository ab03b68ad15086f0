"""A 384-rank run end to end, phase by phase, and how each phase grows with the rank count.

Usage:  python benchmarks/scale.py [--ranks 32,128,384] [--layers 61] [--steps 2] [--repeat 1]
                                   [--workdir DIR] [--profile PHASE]

For each rank count N, ``asaptrace synth --preset coupled-384`` (DP96×TP4 / EP384, 61 layers,
2 steps) writes the run, resized by a ``--config`` overlay to ``dp = N/4`` (``tp = 4``, the
preset's 384 experts, ``step_tokens = dp × 32K``: the work per rank stays the same, so a linear
path takes time ∝ N). Then each phase runs as a user runs it, in a fresh process (start-up and
imports included, timed from outside; peak RSS read from ``ru_maxrss`` inside):

* ``synth``      — writing the Kineto folder (for the record; not a user's phase);
* ``ingest``     — ``asaptrace ingest KINETO -o STORE`` (parse, hash, enrich, Parquet);
* ``analyze``    — ``asaptrace analyze STORE`` (the diagnosis and its tables);
* ``replay``     — ``asaptrace replay STORE --policy asap`` (fit, reference, what-if, attribution);
* ``report``     — ``asaptrace report STORE -o report.html``;
* ``dashboard``  — the dashboard's first Timeline page: ``create_app``, the page's layout request,
  its controls callback (open + diagnose + the worst window) and its figure callback, through the
  Flask test client (what a browser asks for; no browser drawing).

Prints one table per N (wall seconds, CPU seconds of all the process's threads, peak RSS, wall
µs per event), then the exponent table: k of ``y ∝ ranksᵏ`` fitted on log-log over every N, per
phase, for the wall time, the wall time above the start-up (``asaptrace --version``, measured in
the same run) and the CPU time (k ≈ 1: linear; a quadratic step would drive k towards 2 as N
grows, so the slope between the last two N is printed too). CPU time is the steadier figure on a
shared machine: other jobs stretch the wall clock, not the work. With ``--repeat R`` every
(N, phase) runs R times, round-robin over N, and the tables show the best and the spread.
``--profile PHASE`` runs that phase at the largest N under cProfile and prints its top functions.
The machine is shared: compare exponents and ratios from one run, not absolute times.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.ingest_ranks import exponent  # noqa: E402  (k of y ∝ ranks^k, least squares on log-log)

#: runs one phase in a fresh interpreter; its last stderr line is {"rss_mb": …, "cpu_s": …}
_WRAP = r"""
import json, resource, sys
sys.path.insert(0, {root!r})
phase, args = sys.argv[1], sys.argv[2:]
def cli():
    from asaptrace.cli import main
    sys.argv = ["asaptrace", *args]
    try:
        main()
    except SystemExit as e:
        if e.code:
            raise
def dashboard():
    from benchmarks.scale import first_timeline_page
    first_timeline_page(args[0])
run = dashboard if phase == "dashboard" else cli
if {profile!r} == phase:
    import cProfile, pstats
    prof = cProfile.Profile()
    prof.runcall(run)
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
else:
    run()
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"rss_mb": u.ru_maxrss / 1024, "cpu_s": u.ru_utime + u.ru_stime}}), file=sys.stderr)
"""

_OVERLAY = """[deployment]
dp = {dp}
tp = 4
step_tokens = {tokens}
[model]
layers = {layers}
dense_layers = {dense}
[workload]
requests = {requests}
[run]
steps = {steps}
"""

PHASES = ("synth", "ingest", "analyze", "replay", "report", "dashboard")


def first_timeline_page(store: str) -> None:
    """What the dashboard serves for a first visit of /timeline: the page, its controls, its figure."""
    import json as _json

    from asaptrace_dashboards import create_app

    app = create_app([store])
    client = app.server.test_client()
    if client.get("/timeline").status_code != 200:
        raise SystemExit("GET /timeline failed")

    def callback(output: str, outputs: list[tuple[str, str]], inputs: list[tuple[str, str, object]]):
        outs = [{"id": i, "property": p} for i, p in outputs]
        body = {
            "output": output,
            "outputs": outs if len(outs) > 1 else outs[0],
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "state": [],
            "changedPropIds": [],
        }
        r = client.post("/_dash-update-component", data=_json.dumps(body), content_type="application/json")
        if r.status_code != 200:
            raise SystemExit(f"callback {output} failed: {r.status_code} {r.data[:300]!r}")
        return r.get_json()["response"]

    names = ("options", "value", "min", "max", "value", "marks", "options", "children")
    ids = ("tl-step", "tl-step", "tl-layers", "tl-layers", "tl-layers", "tl-layers", "tl-ranks", "tl-message")
    outs = list(zip(ids, names, strict=True))
    controls = callback(
        ".." + "...".join(f"{i}.{p}" for i, p in outs) + "..", outs, [("store", "value", "0")]
    )
    step, window = controls["tl-step"]["value"], controls["tl-layers"]["value"]
    figure = callback(
        "tl-figure.figure",
        [("tl-figure", "figure")],
        [
            ("store", "value", "0"),
            ("tl-step", "value", step),
            ("tl-layers", "value", window),
            ("tl-ranks", "value", None),
        ],
    )
    if not figure["tl-figure"]["figure"]["data"]:
        raise SystemExit("the timeline figure is empty")


def run_phase(phase: str, args: list[str], profile: str) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB, CPU seconds of all its threads) of one phase in a fresh process."""
    code = _WRAP.format(root=str(ROOT), profile=profile)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code, phase, *args], capture_output=True, text=True, cwd=ROOT
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{proc.stderr[-3000:]}")
    if profile == phase:
        print(proc.stderr, file=sys.stderr)
    got = json.loads(proc.stderr.strip().splitlines()[-1])
    return seconds, got["rss_mb"], got["cpu_s"]


def phase_args(phase: str, work: Path, n: int) -> list[str]:
    run, store = work / f"run-{n}", work / f"run-{n}.store"
    return {
        "synth": [
            "synth",
            "--preset",
            "coupled-384",
            "--config",
            str(work / f"run-{n}.toml"),
            "-o",
            str(run),
        ],
        "ingest": ["ingest", str(run / "kineto"), "-o", str(store), "--force"],
        "analyze": ["analyze", str(store)],
        "replay": ["replay", str(store), "--policy", "asap"],
        "report": ["report", str(store), "-o", str(work / f"report-{n}.html")],
        "dashboard": [str(store)],
    }[phase]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="32,128,384", help="comma-separated rank counts (multiples of 4)")
    ap.add_argument("--layers", type=int, default=61)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1, help="runs of every phase (round-robin); best kept")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument(
        "--profile", default="", choices=("", *PHASES), help="cProfile this phase at the largest N"
    )
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    counts = [int(n) for n in a.ranks.split(",")]
    times: dict[str, list[tuple[int, float]]] = {p: [] for p in PHASES}
    rss: dict[str, list[tuple[int, float]]] = {p: [] for p in PHASES}
    cpu: dict[str, list[tuple[int, float]]] = {p: [] for p in PHASES}
    print(f"workdir {work}; {a.layers} layers, {a.steps} steps, best of {a.repeat} (round-robin over N)\n")
    for n in counts:
        dp = n // 4
        (work / f"run-{n}.toml").write_text(
            _OVERLAY.format(
                dp=dp,
                tokens=dp * 32768,
                layers=a.layers,
                dense=min(3, a.layers - 1),
                requests=max(2000, 40 * dp),
                steps=a.steps,
            )
        )
    # every repetition runs every N and phase once, so a busy minute on a shared machine falls on
    # all of them alike; ``asaptrace --version`` is the start-up every phase pays (the baseline)
    runs: dict[tuple[int, str], list[tuple[float, float, float]]] = {
        (n, p): [] for n in counts for p in PHASES
    }
    startup: list[float] = []
    for _ in range(a.repeat):
        startup.append(run_phase("start-up", ["--version"], "")[0])
        for n in counts:
            for phase in PHASES:
                prof = a.profile if n == counts[-1] else ""
                runs[(n, phase)].append(run_phase(phase, phase_args(phase, work, n), prof))
    base = min(startup)
    print(f"start-up (asaptrace --version): {base:.2f} s (spread {min(startup):.2f}–{max(startup):.2f} s)\n")
    for n in counts:
        meta = json.loads((work / f"run-{n}.store" / "meta.json").read_text())
        events = meta["accounting"]["kept_by_table"]["events"]
        size = sum(f.stat().st_size for f in (work / f"run-{n}" / "kineto").iterdir())
        print(f"{n} ranks: {events:,} device and host events, {size / 1e6:.1f} MB of Kineto (gzip)")
        print(f"  {'phase':10s} {'time':>8s} {'spread':>14s} {'CPU':>7s} {'peak RSS':>9s} {'µs/event':>9s}")
        for phase in PHASES:
            ts = sorted(t for t, _, _ in runs[(n, phase)])
            best_rss = min(r for _, r, _ in runs[(n, phase)])
            best_cpu = min(c for _, _, c in runs[(n, phase)])
            spread = f"{ts[0]:.1f}–{ts[-1]:.1f} s" if len(ts) > 1 else ""
            times[phase].append((n, ts[0]))
            rss[phase].append((n, best_rss))
            cpu[phase].append((n, best_cpu))
            print(
                f"  {phase:10s} {ts[0]:7.2f}s {spread:>14s} {best_cpu:6.2f}s {best_rss:7.0f}MB "
                f"{ts[0] / events * 1e6:9.2f}",
                flush=True,
            )
        print()
    if len(counts) > 1:
        print(f"exponent k (y ∝ ranks^k) over {', '.join(map(str, counts))} ranks")
        print(
            f"  {'phase':10s} {'k time':>7s} {'last two':>8s} {'above start-up':>14s} "
            f"{'k CPU':>6s} {'last two':>8s} {'k RSS':>6s}"
        )
        for phase in PHASES:
            t, c = times[phase], cpu[phase]
            above = exponent([(n, max(s - base, 1e-3)) for n, s in t])
            print(
                f"  {phase:10s} {exponent(t):7.2f} {_last_two(t):8.2f} {above:14.2f} "
                f"{exponent(c):6.2f} {_last_two(c):8.2f} {exponent(rss[phase]):6.2f}"
            )


def _last_two(points: list[tuple[int, float]]) -> float:
    """k between the two largest rank counts (where a quadratic term would show first)."""
    (r0, y0), (r1, y1) = points[-2], points[-1]
    return math.log(y1 / y0) / math.log(r1 / r0)


if __name__ == "__main__":
    main()
