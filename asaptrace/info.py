"""What a store holds: ranks, time span, events and time by kind, accounting, sources.

This is the data behind ``asaptrace info``; its JSON form is versioned (``INFO_SCHEMA_VERSION``) and
documented in ``docs/reference/info-json.md`` so scripts can rely on it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.store import TraceStore
from asaptrace.units import plural

INFO_SCHEMA_VERSION = 3

#: The steps table (one row per step of the run, its phase from what the trace says; made by
#: :mod:`asaptrace.enrich.phases`, kept in ``meta.json`` under ``segmentation.steps``).
STEPS_SCHEMA: dict[str, Any] = {
    "step": pl.Int32,
    "phase": pl.String,  # prefill | decode | mixed | training | unknown
    "requests": pl.Int64,  # requests in the step's batch (null: not said)
    "new_tokens": pl.Int64,  # new tokens the step computes (null: not said)
    "source": pl.String,  # annotation:<profile> | training markers | none
}
#: Phases in the order sentences list them.
PHASES = ("prefill", "decode", "mixed", "training", "unknown")
#: Phases a prefill statement or what-if applies to (a mixed step's prefill part; unknown: the
#: trace does not say, and the tool's default reading is prefill — said as "steps", not "prefill steps").
PREFILL_PHASES = ("prefill", "mixed", "unknown")


def deployment_phrase(parallel: dict[str, Any] | None, devices: int | None = None) -> str:
    """How every command names a run's deployment: 'single device', 'coupled, 32 devices',
    'disaggregated, 32 devices', 'dense model, 8 devices', 'unknown deployment, 8 devices', and
    when the files say the job had more ranks than were traced (``distributedInfo``'s world size),
    'unknown deployment, 2 of 128 devices traced' — never 'single device' for one rank of many.
    ``parallel`` is meta.json's block; ``devices`` overrides its world size."""
    p = parallel or {}
    n = devices if devices is not None else p.get("world_size")
    declared = p.get("declared_world_size")
    partial = n is not None and declared is not None and int(declared) > int(n)
    if n == 1 and not partial:
        return "single device"
    label = {"dense": "dense model", "unknown": "unknown deployment", None: "unknown deployment"}.get(
        p.get("deployment"), str(p.get("deployment"))
    )
    label = "coupled" if label == "single-device" else label
    if partial:
        return f"{label}, {int(n)} of {plural(int(declared), 'device')} traced"
    return label if n is None else f"{label}, {plural(int(n), 'device')}"


def steps_json(table: pl.DataFrame) -> list[dict[str, Any]]:
    """The steps table as ``meta.json`` keeps it."""
    return table.to_dicts()


def steps_of(meta: dict[str, Any]) -> pl.DataFrame:
    """The steps table of a store's (or a Diagnosis's) meta; empty for a store enriched before
    phases were recorded (its steps then count as ``unknown``)."""
    rows = ((meta.get("segmentation") or {}).get("steps")) or []
    return pl.DataFrame(rows, schema=STEPS_SCHEMA, orient="row")


def phase_counts(meta: dict[str, Any]) -> dict[str, int]:
    """How many steps of each phase, in :data:`PHASES` order (phases without steps left out)."""
    t = steps_of(meta)
    counts = dict(t.group_by("phase").len().iter_rows()) if t.height else {}
    return {p: int(counts[p]) for p in PHASES if counts.get(p)}


def steps_text(meta: dict[str, Any], n_steps: int | None = None) -> str:
    """'1 training step', '1 prefill step and 2 decode steps', '3 steps' (phase unknown): what a
    sentence that counts steps says. ``n_steps`` (the steps an analysis measured) is used when
    the meta holds no steps table, or differs from it."""
    counts = phase_counts(meta)
    if not counts or (n_steps is not None and n_steps != sum(counts.values())):
        return plural(int(n_steps or sum(counts.values())), "step")
    parts = [plural(n, "step" if p == "unknown" else f"{p} step") for p, n in counts.items()]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def prefill_steps(meta: dict[str, Any]) -> list[int] | None:
    """The steps a prefill statement or what-if applies to (phase prefill, mixed or unknown); None
    when the store has no steps table (every step then applies)."""
    t = steps_of(meta)
    return t.filter(pl.col("phase").is_in(PREFILL_PHASES)).get_column("step").to_list() if t.height else None


def not_prefill_reason(meta: dict[str, Any]) -> str | None:
    """One line saying why prefill what-ifs do not apply (no step is prefill, mixed or unknown),
    else None."""
    steps = prefill_steps(meta)
    if steps is None or steps:
        return None
    return f"this run holds no prefill to replay ({steps_text(meta)}): the what-ifs model MoE prefill"


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
            pl.col("dur_ns").sum().alias("time_ns"),
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
        # annotations are labels over time, not device work: nested spans and the host's spans
        # would count the same time many times over (v2 summed them as device time)
        "device_time_by_kind_ns": {
            r["kind"]: r["device_time_ns"] or 0
            for r in by_kind.iter_rows(named=True)
            if r["kind"] != "annotation"
        },
        "annotation_time_ns": sum(
            r["time_ns"] or 0 for r in by_kind.iter_rows(named=True) if r["kind"] == "annotation"
        ),
        "steps": steps_json(steps_of(meta)),
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
