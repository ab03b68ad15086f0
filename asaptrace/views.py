"""What a human sees of a result: which tables, which columns, which rows, in which order.

Display policy lives here once, so the CLI now and the report and the dashboard later show the same
things; faces only render a :class:`TableView` (cells formatted by :mod:`asaptrace.units`). Every
table stays whole in ``--json`` / ``--csv`` / the Python API.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from asaptrace.units import human_ns, metric_value

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis

#: Diagnosis tables a human is shown, with the columns shown (the rest: --json / --csv).
DIAGNOSIS_COLUMNS: dict[str, list[str]] = {
    "barrier_by_group": ["dp_group", "n_ranks", "mean_wait_ns", "last_share", "imposed_wait_ns"],
    "barrier_by_rank": ["rank", "dp_group", "wait_ns", "exposed_wait_ns", "last_count", "wait_share"],
    "imbalance_by_step": [
        "step",
        "n_groups",
        "tokens_ratio",
        "sum_sq_ratio",
        "attention_ratio",
        "max_sum_sq_group",
    ],
    "overlap_by_role": ["role", "n_ranks", "comm_ns", "exposed_comm_ns", "overlap_efficiency", "utilisation"],
    "stragglers": ["rank", "dp_group", "last_share", "compute_ratio", "moe_ratio", "cause"],
}
#: rows shown per table
ROW_LIMIT = 12


@dataclass(frozen=True)
class TableView:
    """A titled table of raw values (``rows`` holds exactly ``columns``; ``headers`` label them)."""

    title: str
    columns: list[str]
    rows: pl.DataFrame
    headers: list[str] | None = None

    @property
    def labels(self) -> list[str]:
        return self.headers or self.columns


def diagnosis_tables(diag: Diagnosis, limit: int = ROW_LIMIT) -> list[TableView]:
    """The Diagnosis tables worth a human's look: barrier tables only when there were barriers
    (per rank only when there are no DP groups to show instead), stragglers only the outliers and
    the ranks that arrived last, most often last first."""
    views: list[TableView] = []
    barriers = diag.tables["barrier_instances"].height > 0
    for name, cols in DIAGNOSIS_COLUMNS.items():
        table = diag.tables.get(name)
        if table is None or table.height == 0:
            continue
        if name.startswith("barrier") and (
            not barriers or (name == "barrier_by_rank" and diag.tables["barrier_by_group"].height)
        ):
            continue
        if name == "stragglers":
            table = table.filter(table["outlier"] | (table["last_count"] > 0)).sort(
                "last_count", descending=True
            )
        views.append(TableView(name, cols, table.head(limit).select(cols)))
    return views


def diagnosis_header(diag: Diagnosis) -> str:
    """What follows the store's name on the first line: its deployment and the taxonomy used."""
    deployment = (diag.meta.get("parallel") or {}).get("deployment", "?")
    return f"  {deployment} deployment, taxonomy {diag.meta.get('taxonomy_profile')}"


def info_tables(info: dict[str, Any]) -> list[TableView]:
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
        TableView(
            "by kind", ["kind", "events", "device_time_ns"], by_kind, ["kind", "events", "device time"]
        ),
        TableView(
            "ranks",
            rank_cols,
            ranks.select(rank_cols),
            ["rank", "role", "dp", "format", "events", "rank from", "source"],
        ),
    ]


def info_summary(info: dict[str, Any]) -> tuple[str, str]:
    """What follows the store's name on ``asaptrace info``'s first line, and the accounting line."""
    span, acc = info["time_span"], info["accounting"]
    head = (
        f"  format v{info['format_version']}  {info['n_ranks']} ranks  "
        f"{info['n_events']:,} events  span {human_ns(span['duration_ns'])}"
    )
    rejected = ", ".join(f"{k}: {v:,}" for k, v in acc["rejected"].items()) or "none"
    kept = ", ".join(f"{k} {v:,}" for k, v in acc["kept_by_table"].items())
    return head, f"accounting: read {acc['read']:,} = kept {acc['kept']:,} ({kept}) + rejected ({rejected})"


def ingest_summary(info: dict[str, Any]) -> str:
    """What ``asaptrace ingest`` says when it is done."""
    acc = info["accounting"]
    rejected = sum(acc["rejected"].values())
    return f"{info['n_ranks']} ranks, {acc['kept']:,} of {acc['read']:,} events kept" + (
        f", {rejected:,} rejected" if acc["rejected"] else ""
    )


# ------------------------------------------------------------------------------ dashboard / report
def headline_rows(diag: Diagnosis) -> list[tuple[str, str, str]]:
    """The headline numbers of a Diagnosis as (metric, meaning, value text), in display order."""
    from asaptrace.analyze.compare import HEADLINE_METRICS, headline

    meaning = {m: text for m, _, text in HEADLINE_METRICS}
    return [(m, meaning[m], metric_value(u, m, v)) for m, u, v in headline(diag.tables).iter_rows()]


def findings_view(diag: Diagnosis) -> TableView:
    """The ranked findings: severity, the time at stake per rank, the text."""
    rows = pl.DataFrame(
        {
            "severity": [f.severity for f in diag.findings],
            "cost_ns": [f.cost_ns for f in diag.findings],
            "text": [f.text for f in diag.findings],
        },
        schema={"severity": pl.String, "cost_ns": pl.Int64, "text": pl.String},
    )
    return TableView("findings", rows.columns, rows, ["severity", "at stake", "finding"])


def instance_at(barrier_instances: pl.DataFrame, *, step: int | None, rank: int, layer: int) -> int | None:
    """The barrier instance of a heatmap cell: where ``rank`` waited longest in that step and layer."""
    t = barrier_instances.filter((pl.col("rank") == rank) & (pl.col("layer") == layer))
    if step is not None:
        t = t.filter(pl.col("step") == step)
    if t.height == 0:
        return None
    return int(t.sort(["wait_ns", "instance"], descending=[True, False]).get_column("instance")[0])


def arrival_order(barrier_instances: pl.DataFrame, instance: int) -> TableView:
    """One barrier instance's ranks in the order they arrived: offset from the first, wait, last."""
    t = barrier_instances.filter(pl.col("instance") == instance).sort("arrival_ns", "rank")
    cols = ["order", "rank", "dp_group", "after_first_ns", "wait_ns", "is_last"]
    rows = t.with_columns(
        pl.int_range(1, pl.len() + 1).alias("order"),
        (pl.col("arrival_ns") - pl.col("arrival_ns").min()).alias("after_first_ns"),
    ).select(cols)
    first = t.row(0, named=True) if t.height else {}
    where = f"step {first.get('step')}, layer {first.get('layer')}, {first.get('op')}" if first else ""
    return TableView(
        f"arrival order at instance {instance} ({where})",
        cols,
        rows,
        ["#", "rank", "DP", "arrived after the first", "wait", "last"],
    )


def instance_window(barrier_instances: pl.DataFrame, instance: int) -> dict[str, Any]:
    """Where to look at one instance on the timeline: step, layer, its ranks, [first arrival, release]."""
    t = barrier_instances.filter(pl.col("instance") == instance)
    first = t.row(0, named=True)
    return {
        "step": first["step"],
        "layer": first["layer"],
        "ranks": sorted(t.get_column("rank").to_list()),
        "window_ns": (int(t.get_column("arrival_ns").min()), int(t.get_column("release_ns").max())),  # type: ignore[arg-type]
    }
