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

Prints one table per N (seconds, peak RSS, events), then the exponent table: k of
``seconds ∝ ranksᵏ`` fitted on log-log over every N, per phase (k ≈ 1: linear; a quadratic step
would drive k towards 2 as N grows, so the slope between the last two N is printed too). With
``--repeat R`` every phase runs R times round-robin and the table shows the best and the spread.
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

#: runs one phase in a fresh interpreter; its last stderr line is {"rss_mb": …}
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
print(json.dumps({{"rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}), file=sys.stderr)
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

    from dashboards import create_app

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


def run_phase(phase: str, args: list[str], profile: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one phase in a fresh process."""
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
    return seconds, json.loads(proc.stderr.strip().splitlines()[-1])["rss_mb"]


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


def exponent(points: list[tuple[int, float]]) -> float:
    """k of ``y ∝ ranks**k``, least squares on log-log."""
    xs = [math.log(r) for r, _ in points]
    ys = [math.log(s) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


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
    print(f"workdir {work}; {a.layers} layers, {a.steps} steps, best of {a.repeat}\n")
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
        runs: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASES}
        for _ in range(a.repeat):
            for phase in PHASES:
                prof = a.profile if n == counts[-1] else ""
                runs[phase].append(run_phase(phase, phase_args(phase, work, n), prof))
        meta = json.loads((work / f"run-{n}.store" / "meta.json").read_text())
        events = meta["accounting"]["kept_by_table"]["events"]
        size = sum(f.stat().st_size for f in (work / f"run-{n}" / "kineto").iterdir())
        print(f"{n} ranks: {events:,} events, {size / 1e6:.1f} MB of Kineto (gzip)")
        print(f"  {'phase':10s} {'time':>8s} {'spread':>14s} {'peak RSS':>9s} {'µs/event':>9s}")
        for phase in PHASES:
            ts = sorted(t for t, _ in runs[phase])
            best_rss = min(r for _, r in runs[phase])
            spread = f"{ts[0]:.1f}–{ts[-1]:.1f} s" if len(ts) > 1 else ""
            times[phase].append((n, ts[0]))
            rss[phase].append((n, best_rss))
            print(
                f"  {phase:10s} {ts[0]:7.2f}s {spread:>14s} {best_rss:7.0f}MB {ts[0] / events * 1e6:9.2f}",
                flush=True,
            )
        print()
    if len(counts) > 1:
        print(f"exponent k (y ∝ ranks^k) over {', '.join(map(str, counts))} ranks")
        print(f"  {'phase':10s} {'k time':>7s} {'k last two':>10s} {'k RSS':>6s}")
        for phase in PHASES:
            t = times[phase]
            last = math.log(t[-1][1] / t[-2][1]) / math.log(t[-1][0] / t[-2][0])
            print(f"  {phase:10s} {exponent(t):7.2f} {last:10.2f} {exponent(rss[phase]):6.2f}")


if __name__ == "__main__":
    main()
