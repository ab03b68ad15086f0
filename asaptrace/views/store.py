"""What a store holds as a human sees it (``info``, ``ingest``), and the policy catalogue (``policies``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from asaptrace.units import human_bytes, human_ns, plural
from asaptrace.views.diagnosis import diagnosis_header
from asaptrace.views.table import TableView

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis


def info_tables(info: dict[str, Any], limit: int = 32) -> list[TableView]:
    """``asaptrace info``'s tables from :func:`asaptrace.info.store_info`: events and device time
    by kind, and one row per rank (its source by file name)."""
    by_kind = pl.DataFrame(
        {
            "kind": list(info["events_by_kind"]),
            "events": list(info["events_by_kind"].values()),
            "device_time_ns": [info["device_time_by_kind_ns"].get(k) for k in info["events_by_kind"]],
        },
        schema={"kind": pl.String, "events": pl.Int64, "device_time_ns": pl.Int64},
    )
    rank_cols = ["rank", "role", "dp_group", "format", "events", "rank_source", "source"]
    ranks = (
        pl.DataFrame(
            [{**r, "source": Path(r["source_file"]).name} for r in info["ranks"]],
            schema={
                "rank": pl.Int64,
                "role": pl.String,
                "dp_group": pl.Int64,
                "format": pl.String,
                "events": pl.Int64,
                "rank_source": pl.String,
                "source": pl.String,
            },
            orient="row",
        )
        if info["ranks"]
        else pl.DataFrame(schema=dict.fromkeys(rank_cols, pl.String))
    )
    return [
        TableView("by kind", ["kind", "events", "device_time_ns"], by_kind),
        TableView("ranks", rank_cols, ranks.select(rank_cols).head(limit), max(ranks.height - limit, 0)),
    ]


def info_summary(info: dict[str, Any]) -> tuple[str, str]:
    """What follows the store's name on ``asaptrace info``'s first line, and the accounting line."""
    span, acc = info["time_span"], info["accounting"]
    head = (
        f"  store format v{info['format_version']}"
        + (f" (asaptrace {info['asaptrace_version']})" if info.get("asaptrace_version") else "")
        + f"  {plural(info['n_ranks'], 'rank')}  "
        f"{plural(info['n_events'], 'event')}  span {human_ns(span['duration_ns'])}"
    )
    rejected = ", ".join(f"{k}: {v:,}" for k, v in acc["rejected"].items()) or "none"
    kept = ", ".join(f"{k} {v:,}" for k, v in acc["kept_by_table"].items())
    unread = f"; {plural(n, 'unreadable file')} left out" if (n := acc.get("files_unreadable", 0)) else ""
    return (
        head,
        f"accounting: read {acc['read']:,} = kept {acc['kept']:,} ({kept}) + rejected ({rejected}){unread}",
    )


def ingest_summary(info: dict[str, Any], seconds: float | None = None) -> str:
    """What ``asaptrace ingest`` says when it is done (``seconds``: the time it took)."""
    acc = info["accounting"]
    rejected = sum(acc["rejected"].values())
    text = (
        f"{plural(info['n_ranks'], 'rank')}, {acc['kept']:,} of {acc['read']:,} events kept"
        + (f", {rejected:,} rejected" if acc["rejected"] else "")
        + (f" ({plural(n, 'unreadable file')} left out)" if (n := acc.get("files_unreadable", 0)) else "")
    )
    if seconds is not None:
        rate = acc["read"] / seconds if seconds > 0 else 0.0
        text += f" in {seconds:.1f} s ({rate:,.0f} events/s)"
    return text


def discovery_lines(info: dict[str, Any]) -> list[str]:
    """What ingest left out and what it doubts (``info["discovery"]``), and a rank it assumed."""
    d = info.get("discovery") or {}
    lines = []
    if (skipped := skipped_line(d.get("skipped", []))) is not None:
        lines.append(skipped)
    if d.get("repeated"):
        lines.append(f"named more than once, read once: {', '.join(Path(p).name for p in d['repeated'])}")
    lines += [f"skipped {Path(u['path']).name}, unreadable: {u['reason']}" for u in d.get("unreadable", [])]
    lines += [f"warning: {w}" for w in d.get("warnings", [])]
    if any(r.get("rank_source") == "single-file" for r in info["ranks"]):
        lines.append("the only source says no rank: it is rank 0 (rank_source single-file)")
    return lines


def skipped_line(skipped: Sequence[dict[str, str]], *, show: int = 5) -> str | None:
    """``skipped 2 files that are not profiler traces: truth.json, config.toml`` (None: none)."""
    if not skipped:
        return None
    paths = [Path(s["path"]) for s in skipped]
    clash = {p.name for p in paths if sum(q.name == p.name for q in paths) > 1}
    names = [f"{p.parent.name}/{p.name}" if p.name in clash else p.name for p in paths]
    listed = ", ".join(names[:show]) + (f" and {len(names) - show} more" if len(names) > show else "")
    verb = "is not a profiler trace" if len(names) == 1 else "are not profiler traces"
    return f"skipped {plural(len(names), 'file')} that {verb}: {listed}"


def policies_lines(catalogue: list[dict[str, Any]]) -> list[str]:
    """The policy registry in words: each policy, where it runs, what it is, its settings (with
    their defaults, as ``replay --set`` / ``sweep --set NAME.SETTING=V`` take them) and its named
    ablations."""
    lines = []
    for p in catalogue:
        runs = "replay and sweep" if p["online"] else "replay only"
        lines.append(f"{p['name']} ({p['family']}, {runs}): {p['summary']}")
        settings = ", ".join(f"{k}={v}" for k, v in p["params"].items()) or "none"
        lines.append(f"    settings (--set {p['name']}.SETTING=V): {settings}")
        if p["variants"]:
            lines.append("    named ablations: " + ", ".join(p["variants"]))
    return lines


#: the clock alignment's status (meta.json ``clock.status``) as a person reads it
CLOCK_STATUS = {
    "aligned": "aligned",
    "partial": "partly aligned",
    "impossible": "not possible (too few collectives shared by two ranks)",
    "single_rank": "one rank, nothing to align",
    "not_run": "not run",
    "replayed": "replayed (one clock)",
}


def clock_status_text(status: str | None) -> str:
    """``single_rank`` → ``one rank, nothing to align`` (the report's and the dashboard's words)."""
    return CLOCK_STATUS.get(status or "", status or "–")


def store_provenance(
    label: str, diag: Diagnosis, info: dict[str, Any], meta: dict[str, Any]
) -> list[tuple[str, str]]:
    """Where a store came from, as (what, value) lines: its deployment, ranks and events, the
    accounting identity, the clock, the batches and the version that wrote it (the dashboard's overview)."""
    acc = info["accounting"]
    rejected = ", ".join(f"{k}: {v:,}" for k, v in acc["rejected"].items()) or "none"
    provenance = [
        ("store", label),
        ("deployment", diagnosis_header(diag).strip()),
        ("ranks, events", f"{plural(info['n_ranks'], 'rank')}, {plural(info['n_events'], 'event')}"),
        ("accounting", f"read {acc['read']:,} = kept {acc['kept']:,} + rejected ({rejected})"),
        ("clock", clock_status_text((meta.get("clock") or {}).get("status"))),
        ("batches", str(diag.meta.get("batches_source") or "-")),
        (
            "written by",
            f"asaptrace {meta.get('asaptrace_version', '?')}, format v{meta.get('format_version')}",
        ),
    ]
    return provenance


def store_sources(meta: dict[str, Any]) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The trace files a store was read from: headers and one row per file (name, format, rank, size)."""
    sources = [
        (
            str(src.get("path", "")).rsplit("/", 1)[-1],
            src.get("format", "-"),
            src.get("rank", "-"),
            human_bytes(int(src.get("size", 0))),
        )
        for src in meta.get("sources", [])
    ]
    return ["file", "format", "rank", "size"], sources
