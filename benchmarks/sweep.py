"""How fast the serving sweep runs: 3 policies × 10 rates × 5 simulated minutes at DeepSeek-V3 scale.

The asap-paper scenario (61 layers, Default DP8×TP4/EP32, ASAP 4×4 + 16 dies) at rates
2, 4, …, 20 per second (the paper's range), 300 s of Poisson arrivals each, drained. It times:

* the whole serial sweep twice in this process, once on the Python pipeline engine (the
  reference) and once on the compiled kernel (``_pkernel``), each policy's wall time, simulated
  requests/s, layer-items/s ((group, layer) items for the lockstep policies, (batch, layer) items
  for ASAP); then the ratio and whether the two sweeps' JSON (every point's
  :func:`~asaptrace.replay.whatif.sweep.point_stats`, buckets included) is identical byte for byte;
* baseline — the bare event engine handling as many no-op events as the ASAP runs did (the
  floor any Python heap simulation pays), so the ratio says how close each engine's per-event
  work is to that loop;
* the same 30 points over a 2-process pool (``--jobs``; spawned, as the sweep does, since a
  forked child of a process with polars threads can deadlock), so the ratio says whether it pays;
* ``--scale``: one row at 384 dies (Default DP96×TP4/EP384, ASAP 48×4 + 192), rates × 12.

Usage::

    python benchmarks/sweep.py                  # 32 dies: reference and kernel, then 2 processes
    python benchmarks/sweep.py --no-reference   # the kernel only (no comparison)
    python benchmarks/sweep.py --scale          # plus the 384-die row
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor

from asaptrace.replay.mechanics.engine import Engine, Event
from asaptrace.replay.mechanics.pipeline_run import ENGINE_ENV, kernel_available
from asaptrace.replay.policies import Policy, policy_of
from asaptrace.replay.policies.settings import apply_settings
from asaptrace.replay.serving.arrivals import make_stream
from asaptrace.replay.serving.scenario import Scenario, load_scenario
from asaptrace.replay.whatif.simulate import simulate
from asaptrace.replay.whatif.sweep import point_stats

POLICIES = ("default", "chunked", "asap")
RATES = tuple(float(r) for r in range(2, 21, 2))
#: the deployments at 384 dies: the policies' own settings (coupled DP96×TP4, asap 48×4 + 192)
SCALE_384 = {
    "coupled.attention": "96x4",
    "chunked.attention": "96x4",
    "asap.attention": "48x4",
    "asap.experts": 192,
}


def run_point(args: tuple[str | Policy, float, Scenario]) -> tuple[int, int, int, dict]:
    policy, rate, sc = args
    reqs = make_stream(sc).at_rate(rate, sc.duration_s)
    res = simulate(policy, reqs, sc)
    return len(reqs), res.layer_items, res.events, point_stats(res, rate, reqs.seq_len)


def bare_engine(n_events: int) -> float:
    """Seconds for the engine to handle ``n_events`` no-op events (two live at a time)."""

    class Tick(Event):
        pass

    left = [n_events]

    def handler(ev: Event) -> tuple[Event, ...]:
        left[0] -= 1
        return (Tick(ev.t_ns + 1),) if left[0] > 1 else ()

    t = time.perf_counter()
    Engine().run(handler, [Tick(0), Tick(0)])
    return time.perf_counter() - t


def serial_sweep(sc: Scenario, engine: str) -> tuple[float, float, int, str]:
    """The 3 × 10 points on one pipeline engine: (total s, asap s, asap events, JSON of the points)."""
    os.environ[ENGINE_ENV] = engine
    total, asap_s, asap_events, points = 0.0, 1.0, 0, []
    for policy in POLICIES:
        t = time.perf_counter()
        done = [run_point((policy, r, sc)) for r in RATES]
        dt = time.perf_counter() - t
        total += dt
        n, items = sum(d[0] for d in done), sum(d[1] for d in done)
        if policy == "asap":
            asap_events, asap_s = sum(d[2] for d in done), dt
        points += [{"policy": policy} | d[3] for d in done]
        print(f"{engine:>7} {policy:>10} {dt:8.2f} {n:9,} {n / dt:9,.0f} {items:12,} {items / dt:10,.0f}")
    print(f"{engine:>7} {'serial':>10} {total:8.2f}")
    return total, asap_s, asap_events, json.dumps(points)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", action="store_true", help="add a row at 384 dies")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--no-reference", action="store_true", help="skip the Python-engine reference sweep")
    args = ap.parse_args()
    sc = load_scenario("asap-paper")
    engines = ["c"] if args.no_reference else ["python", "c"]
    if not kernel_available():
        print("the compiled pipeline kernel is not built: only the Python engine runs")
        engines = ["python"]
    print(
        f"{len(POLICIES)} policies × {len(RATES)} rates ({RATES[0]:g}–{RATES[-1]:g}/s) × {sc.duration_s:g} s, 61 layers, 32 dies"
    )
    print(
        f"{'engine':>7} {'policy':>10} {'seconds':>8} {'requests':>9} {'req/s':>9} {'layer-items':>12} {'items/s':>10}"
    )
    for policy in POLICIES:  # warm-up: imports (polars via the lockstep mechanics) are not timed
        run_point((policy, 0.1, sc.with_knobs({"duration_s": 30})))
    runs = {engine: serial_sweep(sc, engine) for engine in engines}
    final = runs[engines[-1]]
    if len(runs) == 2:
        (ref, ref_asap, _, ref_json), (ker, ker_asap, _, ker_json) = runs["python"], runs["c"]
        print(
            f"serial sweep: Python engine {ref:.2f} s, kernel {ker:.2f} s = {ref / ker:.1f}× "
            f"(asap's points alone {ref_asap / ker_asap:.1f}×); target ≤ 10 s: {'met' if ker <= 10 else 'MISSED'}; "
            f"JSON identical: {'yes' if ref_json == ker_json else 'NO'}"
        )
    events = final[2]
    base = bare_engine(events)
    for engine in engines:
        asap_s = runs[engine][1]
        print(
            f"baseline: the bare Python engine, {events:,} no-op events in {base:.2f} s ({events / base:,.0f} events/s); "
            f"ASAP on the {engine} engine handles {events / asap_s:,.0f} events/s = {base / asap_s:.2f}× the bare loop's rate"
        )
    total = final[0]
    if args.jobs > 1:
        t = time.perf_counter()
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            list(pool.map(run_point, [(p, r, sc) for p in POLICIES for r in RATES]))
        par = time.perf_counter() - t
        print(
            f"{args.jobs} spawned processes ({engines[-1]} engine): {par:.2f} s = {total / par:.2f}× serial (worth it when > 1)"
        )
    if args.scale:
        for policy in POLICIES:
            big = apply_settings(policy_of(policy), SCALE_384)
            t = time.perf_counter()
            done = [run_point((big, r * 12, sc)) for r in RATES[:3]]
            dt = time.perf_counter() - t
            n, items = sum(d[0] for d in done), sum(d[1] for d in done)
            print(
                f"384 dies {policy:>8}: rates {RATES[0] * 12:g}–{RATES[2] * 12:g}/s, {dt:.2f} s, "
                f"{n / dt:,.0f} req/s, {items / dt:,.0f} items/s"
            )


if __name__ == "__main__":
    main()
