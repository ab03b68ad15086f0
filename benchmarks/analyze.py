"""How long enrichment and the diagnosis take as the rank count grows (8, 32, 128 ranks).

For each rank count a coupled DeepSeek-V3-class run (61 layers, two micro-batches, DP×TP4/EP) is
generated with ``asaptrace synth`` and ingested without enrichment (not timed). Then, in this
process, it times:

* baseline — reading the whole events table into memory (the floor any analysis pays);
* enrich   — taxonomy, segmentation, topology, clock alignment, rewriting the store;
* analyze  — the whole Diagnosis (every table and finding) from the enriched store;

and prints seconds, events/s and the ratio to the baseline, so the growth with rank count is
visible. Usage::

    python benchmarks/analyze.py                 # 8, 32, 128 ranks, 5 steps each
    python benchmarks/analyze.py --steps 10 --ranks 32
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store, enrich_store
from asaptrace.store import TraceStore
from asaptrace.synth import load_config, synthesize

TP = 4
T = TypeVar("T")


def build(ranks: int, steps: int, work: Path) -> TraceStore:
    """A raw (not enriched) store of a coupled run of ``ranks`` devices."""
    conf = work / f"r{ranks}.toml"
    conf.write_text(f'[deployment]\nmode = "coupled"\ndp = {ranks // TP}\ntp = {TP}\nmicro_batches = 2\n')
    cfg = load_config("coupled", conf, steps=steps, fmt="kineto")
    run = synthesize(cfg, work / f"r{ranks}")
    return ingest_paths([run.out_dir / "kineto"], work / f"r{ranks}.store", overwrite=True)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--keep", type=Path, help="keep the generated runs and stores in this folder")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="asaptrace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"{'ranks':>5} {'events':>10} {'baseline s':>10} {'enrich s':>9} {'ev/s':>10} {'x base':>7} "
        f"{'analyze s':>9} {'ev/s':>10} {'x base':>7}"
    )
    try:
        for ranks in args.ranks:
            raw = build(ranks, args.steps, work)
            events, base = timed(lambda raw=raw: raw.read("events"))
            n = events.height
            del events
            out = work / f"r{ranks}.enriched"
            enriched, t_enrich = timed(lambda raw=raw, out=out: enrich_store(raw, out))
            diag, t_analyze = timed(lambda enriched=enriched: diagnose_store(enriched))
            assert diag.tables["barrier_instances"].height > 0
            print(
                f"{ranks:>5} {n:>10,} {base:>10.3f} {t_enrich:>9.2f} {n / t_enrich:>10,.0f} "
                f"{t_enrich / base:>7.1f} {t_analyze:>9.2f} {n / t_analyze:>10,.0f} {t_analyze / base:>7.1f}"
            )
            shutil.rmtree(work / f"r{ranks}", ignore_errors=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
