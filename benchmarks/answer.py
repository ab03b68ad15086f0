"""How long the answer under load takes, as a user runs it (issue 26's targets).

Times, each as a fresh ``python -m asaptrace.cli`` process (import, work and output, as a user
pays them), on the bundled coupled sample ingested once into a temporary store (not timed):

* ``advise --online`` (target ≤ 30 s here): the offline what-ifs, then each served under load,
  median over 5 seeds, ≥ 2,000 arrivals at every rate; its baseline, measured in the same run, is
  the offline ``advise`` alone, so the ratio is what the online answer adds;
* ``sweep`` at its defaults (target ≤ 10 s): the paper's scenario, 3 policies, 300 s per rate;
  its baseline is the same sweep of one policy (``--policies coupled``), so the ratio says what
  each further policy costs.

Each is run ``--repeat`` times (the best wall time kept: the least disturbed by other work on
the machine) and prints wall seconds, CPU seconds (user + system of the child: steadier on a
busy machine) and the ratio to its baseline. Usage::

    python benchmarks/answer.py               # from the repository root
    python benchmarks/answer.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "coupled" / "kineto"
TARGETS = {"advise --online": 30.0, "sweep": 10.0}


def timed(args: list[str], repeat: int) -> tuple[float, float]:
    """Best wall seconds and that run's CPU seconds (user + system) of ``asaptrace ARGS``."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        before = os.times()
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "asaptrace.cli", *args],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - t0
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        best = min(best, (wall, cpu))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command (best wall time kept)")
    a = ap.parse_args()
    if not SAMPLE.is_dir():
        sys.exit(
            f"the coupled sample is absent: {SAMPLE} (regenerate with `asaptrace synth --preset coupled`)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "coupled.store")
        subprocess.run(
            [sys.executable, "-m", "asaptrace.cli", "ingest", str(SAMPLE), "-o", store, "--force"],
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rows = [
            (
                "advise --online",
                ["advise", store, "--online", "--json"],
                "advise (offline)",
                ["advise", store, "--json"],
            ),
            (
                "sweep",
                ["sweep", "--json"],
                "sweep --policies coupled",
                ["sweep", "--policies", "coupled", "--json"],
            ),
        ]
        print(f"{'command':<26} {'wall s':>8} {'cpu s':>8} {'target s':>9}  ratio to its baseline")
        for name, args, base_name, base_args in rows:
            base_wall, base_cpu = timed(base_args, a.repeat)
            wall, cpu = timed(args, a.repeat)
            ok = "ok" if wall <= TARGETS[name] else "OVER"
            print(f"{base_name:<26} {base_wall:>8.2f} {base_cpu:>8.2f} {'':>9}  (baseline)")
            print(
                f"{name:<26} {wall:>8.2f} {cpu:>8.2f} {TARGETS[name]:>9.0f}  "
                f"{wall / base_wall:.2f}× wall, {cpu / max(base_cpu, 1e-9):.2f}× cpu ({ok})"
            )
    print(f"on {os.cpu_count()} cores; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
