"""What a store holds: ranks, time span, events and time by kind, accounting, sources.

This is the data behind ``asaptrace info``; its JSON form is versioned (``INFO_SCHEMA_VERSION``) and
documented in ``docs/reference/info-json.md`` so scripts can rely on it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.store import TraceStore

INFO_SCHEMA_VERSION = 2


def store_info(store: TraceStore) -> dict[str, Any]:
    """A JSON-ready description of ``store`` (see docs/reference/info-json.md)."""
    events = store.events()
    span = (
        events.select(
            pl.col("ts_ns").min().alias("start_ns"),
            (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end_ns"),
            pl.len().alias("events"),
        )
        .collect()
        .row(0, named=True)
    )
    by_kind = (
        events.group_by(pl.col("kind").cast(pl.String))
        .agg(
            pl.len().alias("events"),
            pl.col("dur_ns").filter(pl.col("is_device")).sum().alias("device_time_ns"),
        )
        .sort("kind")
        .collect()
    )
    ranks = store.ranks().sort("rank").collect()
    meta = store.meta
    discovery = meta.get("discovery") or {}
    start, end = span["start_ns"], span["end_ns"]
    return {
        "schema_version": INFO_SCHEMA_VERSION,
        "store": str(store.path),
        "format_version": meta.get("format_version"),
        "asaptrace_version": meta.get("asaptrace_version"),
        "enriched": bool(meta.get("enriched")),
        "parallel": meta.get("parallel"),
        "taxonomy_profile": meta.get("taxonomy_profile"),
        "n_ranks": ranks.height,
        "n_events": span["events"],
        "time_span": {
            "start_ns": start,
            "end_ns": end,
            "duration_ns": None if start is None else end - start,
        },
        "events_by_kind": {r["kind"]: r["events"] for r in by_kind.iter_rows(named=True)},
        "device_time_by_kind_ns": {
            r["kind"]: r["device_time_ns"] or 0 for r in by_kind.iter_rows(named=True)
        },
        "accounting": {
            "read": meta["accounting"]["read"],
            "kept": meta["accounting"]["kept"],
            "kept_by_table": meta["accounting"].get("kept_by_table", {}),
            "rejected": meta["accounting"]["rejected"],
            "files_unreadable": meta["accounting"].get("files_unreadable", 0),
        },
        "ranks": [
            {
                "rank": r["rank"],
                "format": r["format"],
                "source_file": r["source_file"],
                "events": r["events"],
                "role": r["role"],
                "dp_group": r["dp_group"],
                "tp_index": r["tp_index"],
                "ep_index": r["ep_index"],
                "device": r["device"],
                "rank_source": r["rank_source"],
                "clock_offset_ns": r["clock_offset_ns"],
            }
            for r in ranks.iter_rows(named=True)
        ],
        "sources": [
            {k: s.get(k) for k in ("path", "size", "sha256", "format", "rank")}
            for s in meta.get("sources", [])
        ],
        "discovery": {
            "skipped": list(discovery.get("skipped", [])),
            "repeated": list(discovery.get("repeated", [])),
            "unreadable": list(discovery.get("unreadable", [])),
            "warnings": list(discovery.get("warnings", [])),
        },
    }
