"""Critical path time at hundreds of ranks: does ``asaptrace critical`` stay within 10 s at 384?

Usage:  python benchmarks/critical.py [--ranks 384] [--workdir DIR]

Builds the one-step coupled synthetic run of :mod:`benchmarks.ingest_ranks` (``[model] layers = 8,
experts = 384``, ``[deployment] dp = N/4, tp = 4``, ``[run] steps = 1``), ingests it once, then times
in this process, on the same store: :func:`asaptrace.pipeline.critical_store` (open, read, build the
graph, walk it, re-walk it for the top 5 kernels) and, as the baseline, the store's diagnosis
(:func:`asaptrace.pipeline.diagnose_store`, what ``analyze`` computes). Prints the first call
(imports, cold caches) and a second; events, nodes'
windows, both times and their ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest_ranks import synth_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=384)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-critical-"))
    work.mkdir(parents=True, exist_ok=True)
    src = synth_run(work, a.ranks)
    store_dir = work / f"coupled-{a.ranks}.store"
    if not store_dir.is_dir():
        cmd = [sys.executable, "-m", "asaptrace.cli", "ingest", str(src), "-o", str(store_dir)]
        subprocess.run(cmd, check=True, capture_output=True)
    from asaptrace.pipeline import critical_store, diagnose_store, open_store

    t0 = time.perf_counter()
    cp = critical_store(store_dir)
    t_cold = time.perf_counter() - t0  # the first call: imports of the analysis and cold caches
    t0 = time.perf_counter()
    cp = critical_store(store_dir)
    t_critical = time.perf_counter() - t0
    t0 = time.perf_counter()
    diagnose_store(open_store(store_dir))
    t_analyze = time.perf_counter() - t0
    events = open_store(store_dir).events().select("rank").collect().height
    step = cp.steps.row(0, named=True)
    print(f"ranks {a.ranks}  events {events:,}  windows {cp.steps.height}  hops {step['hops']}")
    print(
        f"critical {t_cold:.2f} s first, {t_critical:.2f} s again   analyze (baseline) {t_analyze:.2f} s   ratio {t_critical / t_analyze:.2f}"
    )


if __name__ == "__main__":
    main()
