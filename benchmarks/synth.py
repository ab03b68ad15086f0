"""How fast `asaptrace synth` writes a 32-rank, 61-layer prefill step (Kineto), against a baseline.

Baseline, measured in the same run on the very same events: building each event as a dict and
serialising it with ``json.dumps`` (what a straightforward writer does), then the same gzip. The
writer under test formats events with f-strings from pre-encoded names.

Run: ``.venv/bin/python benchmarks/synth.py [--steps N] [--preset NAME]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time

import numpy as np

from asaptrace.synth import build_timeline, load_config
from asaptrace.synth.kineto_writer import render_rank


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="coupled")
    ap.add_argument("--steps", type=int, default=1)
    args = ap.parse_args()
    cfg = load_config(args.preset, steps=args.steps)

    t0 = time.perf_counter()
    tl = build_timeline(cfg)
    t_sim = time.perf_counter() - t0

    order = np.lexsort((tl.k_start, tl.k_rank))
    bounds = np.searchsorted(tl.k_rank[order], np.arange(tl.world_size + 1))
    anns: dict[int, list] = {}
    for a in tl.annotations:
        anns.setdefault(a.rank, []).append(a)

    # the writer: render + gzip (no disk, so the figure is the writer's, not the file system's)
    t0 = time.perf_counter()
    texts, n_events, gz_bytes = [], 0, 0
    for r in range(tl.world_size):
        text, n = render_rank(tl, r, order[bounds[r] : bounds[r + 1]], anns.get(r, []))
        gz_bytes += len(gzip.compress(text.encode(), compresslevel=6, mtime=0))
        texts.append(text)
        n_events += n
    t_write = time.perf_counter() - t0

    # baseline: the same events as dicts, one json.dumps per event, same gzip
    docs = [json.loads(t) for t in texts]
    t0 = time.perf_counter()
    for doc in docs:
        body = ",\n".join(json.dumps(e) for e in doc["traceEvents"])
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        text = json.dumps(head)[:-1] + ', "traceEvents": [' + body + "]}"
        gzip.compress(text.encode(), compresslevel=6, mtime=0)
    t_base = time.perf_counter() - t0

    print(f"preset {args.preset}: {tl.world_size} ranks, {cfg.model.layers} layers, {args.steps} step(s)")
    print(f"  simulate          {t_sim:7.2f} s   ({tl.kernel_count:,} kernels)")
    print(
        f"  write (asaptrace) {t_write:7.2f} s   {n_events / t_write:12,.0f} events/s   "
        f"({n_events:,} events, {gz_bytes / 2**20:.1f} MiB gzipped)"
    )
    print(
        f"  write (baseline)  {t_base:7.2f} s   {n_events / t_base:12,.0f} events/s   (json.dumps per event)"
    )
    print(f"  ratio             {t_base / t_write:7.2f} x faster than the baseline")
    print(f"  end to end        {t_sim + t_write:7.2f} s for the step(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
