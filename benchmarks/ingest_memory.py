"""Peak memory of a multi-rank ingest: the streaming enrichment vs. the old whole-run-in-memory path.

Usage:  python benchmarks/ingest_memory.py [--steps 10] [--workdir DIR]

Generates a 32-rank × N-step coupled run with ``asaptrace synth`` (DP8×TP4 / EP32, Kineto), then
ingests it in fresh processes (one file at a time, ``jobs=1``, so the peak RSS is the process's own):

- ``build_store`` — what ``asaptrace ingest`` does: raw parts, then enrichment streamed rank by rank
  before the single commit;
- baseline, measured in the same run: the old path — ingest a raw store, read every table into
  memory, ``enrich_frames`` the whole run, write it again;
- floor: the raw ingest alone (``enrich=False``).

Prints each peak RSS and the ratio to the baseline (the acceptance target is ≤ 0.5).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

_MEASURE = r"""
import json, resource, sys, time
src, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
{body}
print(json.dumps({{"seconds": time.perf_counter() - t0,
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""

BODIES = {
    "build_store (streaming enrichment, one write)": """
from asaptrace.pipeline import build_store
build_store([src], out, overwrite=True, jobs=1)
""",
    "baseline: raw store → whole run in memory → enrich → rewrite": """
from asaptrace.enrich import enrich_frames
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import read_tables
from asaptrace.store import StoreWriter
raw = ingest_paths([src], out + ".raw", overwrite=True, jobs=1)
result = enrich_frames(read_tables(raw))
with StoreWriter(out, overwrite=True) as w:
    t = result.tables
    for (rank,), part in t["events"].sort("rank", "eid").group_by("rank", maintain_order=True):
        w.write_part("events", f"{int(rank):05d}", part.to_arrow())
    for name in ("args", "flows"):
        if t[name].height:
            w.write_part(name, "00000", t[name].to_arrow())
    for name in ("ranks", "streams", "batches"):
        w.write_table(name, t[name].to_arrow())
    w.commit({**raw.meta, **result.meta})
""",
    "floor: raw ingest only (enrich=False)": """
from asaptrace.pipeline import build_store
build_store([src], out, overwrite=True, enrich=False, jobs=1)
""",
}


def measure(body: str, src: Path, out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE.format(body=body), str(src), str(out)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"measurement failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-mem-"))
    run = work / f"coupled-{a.steps}"
    if not (run / "kineto").is_dir():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "asaptrace.cli",
                "synth",
                "--preset",
                "coupled",
                "--steps",
                str(a.steps),
                "-o",
                str(run),
            ],
            check=True,
        )
    src = run / "kineto"
    size_mb = sum(f.stat().st_size for f in src.iterdir()) / 1e6
    print(f"input: 32 ranks × {a.steps} steps, {size_mb:.1f} MB of trace files ({src})")
    results = {name: measure(body, src, work / "store") for name, body in BODIES.items()}
    base = results["baseline: raw store → whole run in memory → enrich → rewrite"]["rss_mb"]
    print(f"\n{'measurement':62s} {'s':>6s} {'peak RSS':>9s} {'vs baseline':>11s}")
    for name, r in results.items():
        print(f"{name:62s} {r['seconds']:6.1f} {r['rss_mb']:7.0f}MB {r['rss_mb'] / base:10.2f}×")


if __name__ == "__main__":
    main()
