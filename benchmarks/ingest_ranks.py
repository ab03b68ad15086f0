"""Ingest time against the number of ranks: does enrichment scale to hundreds of ranks?

Usage:  python benchmarks/ingest_ranks.py [--ranks 32,128,384] [--workdir DIR]

For each rank count N, ``asaptrace synth --preset coupled`` writes a one-step run (``[model]
layers = 8, experts = 384``, ``[deployment] dp = N/4, tp = 4``, ``[run] steps = 1``) into a
temporary folder, then its Kineto folder is ingested by the ``asaptrace`` CLI in a fresh process,
timed from outside (start-up, imports, parse, enrichment, writes): ``ingest`` and, as the baseline
measured in the same run, ``ingest --no-enrich`` (what reading the files costs). The ``ingest``
process also counts its polars queries (every ``collect`` and every eager operation polars runs as
a query, :mod:`benchmarks._polars_queries`).

Prints, per N: events, trace size, both times and their ratio, the polars queries (total and per
rank); then the exponent k of time ∝ ranksᵏ fitted (least squares on log-log) over every N, and
the one from the first N to the last. Linear enrichment means k ≈ 1.
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

_CLI = r"""
import json, sys
sys.path.insert(0, {root!r})
from benchmarks._polars_queries import count_queries
from asaptrace.cli import main
sys.argv = ["asaptrace", *sys.argv[1:]]
with count_queries() as n:
    try:
        main()
    except SystemExit as e:
        if e.code:
            raise
print(json.dumps({{"queries": n.queries}}), file=sys.stderr)
"""

_CONFIG = """[model]
layers = 8
experts = 384
[deployment]
dp = {dp}
tp = 4
[run]
steps = 1
"""


def synth_run(work: Path, ranks: int) -> Path:
    """The Kineto folder of a one-step coupled run on ``ranks`` ranks (generated once per workdir)."""
    run = work / f"coupled-{ranks}"
    if not (run / "kineto").is_dir():
        config = work / f"coupled-{ranks}.toml"
        config.write_text(_CONFIG.format(dp=ranks // 4))
        cmd = [sys.executable, "-m", "asaptrace.cli", "synth", "--preset", "coupled", "--config", str(config)]
        subprocess.run([*cmd, "-o", str(run)], check=True, capture_output=True)
    return run / "kineto"


def ingest(src: Path, out: Path, *extra: str) -> tuple[float, int]:
    """Seconds of a whole-CLI ``asaptrace ingest`` and the polars queries it ran."""
    args = ["ingest", str(src), "-o", str(out), "--force", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _CLI.format(root=str(ROOT)), *args], capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ingest failed:\n{proc.stderr}")
    return seconds, json.loads(proc.stderr.strip().splitlines()[-1])["queries"]


def exponent(points: list[tuple[int, float]]) -> float:
    """k of ``seconds ∝ ranks**k``, least squares on log-log."""
    xs = [math.log(r) for r, _ in points]
    ys = [math.log(s) for _, s in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="32,128,384", help="comma-separated rank counts (multiples of 4)")
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    counts = [int(n) for n in a.ranks.split(",")]
    print(
        f"{'ranks':>5s} {'events':>9s} {'size':>8s} {'ingest':>8s} {'no-enrich':>9s} {'ratio':>6s} "
        f"{'queries':>8s} {'per rank':>8s}"
    )
    points = []
    for n in counts:
        src = synth_run(work, n)
        size = sum(f.stat().st_size for f in src.iterdir())
        floor, _ = ingest(src, work / f"raw-{n}.store", "--no-enrich")
        seconds, queries = ingest(src, work / f"store-{n}")
        meta = json.loads((work / f"store-{n}" / "meta.json").read_text())
        events = meta["accounting"]["kept_by_table"]["events"]
        points.append((n, seconds))
        print(
            f"{n:5d} {events:9,d} {size / 1e6:6.1f}MB {seconds:7.1f}s {floor:8.1f}s {seconds / floor:5.1f}× "
            f"{queries:8,d} {queries / n:8.1f}",
            flush=True,
        )
    if len(points) > 1:
        (r0, s0), (r1, s1) = points[0], points[-1]
        print(
            f"\nexponent k (time ∝ ranks^k): fitted {exponent(points):.2f}; "
            f"{r0} → {r1} ranks {math.log(s1 / s0) / math.log(r1 / r0):.2f}"
        )


if __name__ == "__main__":
    main()
