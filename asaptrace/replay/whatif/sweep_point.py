"""One point of the SLO sweep's curve: a serving run's TTFT and its decomposition, overall and by
prompt length (what the curves, the TTFT-by-rate table and the decomposition show)."""

from __future__ import annotations

from typing import Any

import numpy as np

from asaptrace.replay.serving.requests import ServingResult

#: length buckets of the TTFT decomposition (prompt tokens, [lo, hi))
BUCKETS = ((0, 512), (512, 2048), (2048, 8192), (8192, 16384), (16384, None))


def point_stats(res: ServingResult, rate: float, seq_len: np.ndarray) -> dict[str, Any]:
    """One curve point: TTFT mean / p50 / p99 and the mean decomposition (ns), and by bucket."""
    ttft = res.ttft_ns
    n = len(ttft)
    row: dict[str, Any] = {"rate": float(rate), "n_requests": n}
    if n == 0:
        return row | {k: None for k in ("mean_ttft_ns", "p50_ttft_ns", "p99_ttft_ns")}
    row |= {
        "mean_ttft_ns": round(ttft.mean()),
        "p50_ttft_ns": int(np.percentile(ttft, 50, method="inverted_cdf")),
        "p99_ttft_ns": int(np.percentile(ttft, 99, method="inverted_cdf")),
        "mean_queue_ns": round(res.queue_ns.mean()),
        "mean_own_ns": round(res.own_ns.mean()),
        "mean_sync_ns": round(res.sync_ns.mean()),
        "steps": res.steps,
        "layer_items": res.layer_items,
    }
    buckets = []
    for lo, hi in BUCKETS:
        m = (seq_len >= lo) & (seq_len < (hi if hi is not None else np.iinfo(np.int64).max))
        k = int(m.sum())
        if not k:
            continue
        t, q, o, s = (float(x[m].mean()) for x in (ttft, res.queue_ns, res.own_ns, res.sync_ns))
        buckets.append(
            {
                "bucket": f"{lo}-{hi}" if hi else f"{lo}+",
                "lo_tokens": lo,
                "hi_tokens": hi,
                "n_requests": k,
                "mean_ttft_ns": round(t),
                "mean_queue_ns": round(q),
                "mean_own_ns": round(o),
                "mean_sync_ns": round(s),
                "queue_share": q / t if t else 0.0,
                "own_share": o / t if t else 0.0,
                "sync_share": s / t if t else 0.0,
            }
        )
    row["buckets"] = buckets
    return row
