"""How long the answer under load takes, as a user runs it (issue 26's targets).

Times, each as a fresh ``python -m asaptrace.cli`` process (import, work and output, as a user
pays them), on the bundled coupled sample ingested once into a temporary store (not timed):

* ``advise --online`` (target ≤ 5 s here, ≤ 20 s at 384 ranks: issue 40): the offline what-ifs, then each served under load,
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

``--before DIR`` (a checkout of older code, e.g. ``git worktree add /tmp/before COMMIT``) times
``advise --online`` of both trees instead, runs alternated (before, after, before, …) so both see
the same load, and prints the **median** wall and CPU seconds of each, after / before, and each
policy's median SLO rate from both (the answers, to 3 digits); ``--ranks N`` adds a synthetic
coupled store of N ranks (``benchmarks/ingest_ranks.py``'s: dp N/4 × tp 4, 8 layers, 384
experts, one step) beside the sample::

    python benchmarks/answer.py --before /tmp/before --ranks 384 --repeat 3

``--warm`` times both trees as a user's second run goes: each tree's modules compiled to bytecode
first (a default Python writes it at the first import; a machine with ``PYTHONDONTWRITEBYTECODE``
set, as this one, compiles every module again in every process, ≈ 0.25 s each) and each tree
advising its own copy of each store, whose diagnosis it has kept (without it, alternated trees
overwrite each other's kept diagnosis and every run diagnoses again, ≈ 0.2 s on the sample)::

    python benchmarks/answer.py --before /tmp/before --ranks 384 --repeat 3 --warm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "coupled" / "kineto"
TARGETS = {"advise --online": 5.0, "sweep": 10.0}


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


def once(root: Path, args: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds and stdout of ``asaptrace ARGS`` run from the tree ``root``."""
    before = os.times()
    t0 = time.perf_counter()
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-m", "asaptrace.cli", *args], cwd=root, env=env, check=True, capture_output=True
    ).stdout.decode()
    wall = time.perf_counter() - t0
    after = os.times()
    return (
        wall,
        (after.children_user - before.children_user) + (after.children_system - before.children_system),
        out,
    )


def _answer(on: dict, policy: str) -> str:
    """One policy's median SLO rate to 3 digits, its seeds' range and its bound."""
    v, r = on["slo_rps"][policy], on["slo_range"].get(policy)
    bound = (on["capacity"].get(policy) or {}).get("bound_rps")
    if v is None:
        return f"{policy} –"
    return f"{policy} {v:.3g} ({r[0]:.3g}–{r[1]:.3g}; bound {bound:.4g})"


def warmed(trees: dict[str, Path], store: str) -> dict[str, str]:
    """Each tree's own copy of ``store`` with its diagnosis kept, and its modules compiled (``--warm``)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    own = {}
    for tree, root in trees.items():
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(root / "asaptrace")], env=env, check=True
        )
        own[tree] = f"{store}-{tree}"
        shutil.copytree(store, own[tree], dirs_exist_ok=True)
        once(root, ["advise", own[tree], "--json"])  # (the diagnosis kept beside the copy)
    return own


def before_after(old: Path, stores: dict[str, str], repeat: int, warm: bool = False) -> None:
    """``advise --online`` of the older tree and of this one, alternated; medians and answers."""
    print(f"{'store':<10} {'tree':<7} {'wall s':>8} {'cpu s':>8}  SLO rate per policy (median of seeds)")
    trees = {"before": old, "after": ROOT}
    for name, store in stores.items():
        runs: dict[str, list[tuple[float, float, str]]] = {"before": [], "after": []}
        own = warmed(trees, store) if warm else dict.fromkeys(trees, store)
        for _ in range(repeat):
            for tree, root in trees.items():
                runs[tree].append(once(root, ["advise", own[tree], "--online", "--json"]))
        med = {
            t: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
            for t, rs in runs.items()
        }
        for tree, rs in runs.items():
            on = json.loads(rs[-1][2])["online"]
            text = ", ".join(_answer(on, p) for p in on["slo_rps"])
            print(f"{name:<10} {tree:<7} {med[tree][0]:>8.2f} {med[tree][1]:>8.2f}  {text}")
        print(
            f"{name:<10} {'ratio':<7} {med['after'][0] / med['before'][0]:>7.2f}× {med['after'][1] / med['before'][1]:>7.2f}×"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs of each command (best wall time kept)")
    ap.add_argument(
        "--before", type=Path, help="a checkout of older code: advise --online of both, alternated"
    )
    ap.add_argument(
        "--ranks", type=int, default=0, help="with --before, also a synthetic coupled store of N ranks"
    )
    ap.add_argument(
        "--warm", action="store_true", help="with --before: bytecode compiled, each tree's diagnosis kept"
    )
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
        if a.before is not None:
            stores = {"sample": store}
            if a.ranks:
                sys.path.insert(0, str(ROOT / "benchmarks"))
                from ingest_ranks import ingest, synth_run

                big = Path(tmp) / f"coupled-{a.ranks}.store"
                ingest(synth_run(Path(tmp), a.ranks), big)
                stores[f"{a.ranks} ranks"] = str(big)
            before_after(a.before, stores, a.repeat, a.warm)
            return
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
