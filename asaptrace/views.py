"""What a human sees of a result: which tables, which columns, which rows, in which order.

Display policy lives here once, so the CLI now and the report and the dashboard later show the same
things; faces only render a :class:`TableView` (cells formatted by :mod:`asaptrace.units`). Every
table stays whole in ``--json`` / ``--csv`` / the Python API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from asaptrace.units import format_table, human_ns, metric_value, plural, rps_text

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis


@dataclass(frozen=True)
class KeyTable:
    """A Diagnosis table as every face shows it: title, columns (the rest: --json / --csv),
    what it means, and how many rows the report shows (a terminal shows :data:`ROW_LIMIT`)."""

    name: str
    title: str
    columns: tuple[str, ...]
    caption: str = ""
    max_rows: int = 40


#: The key tables of a diagnosis, in order (the CLI, the report and the dashboard show these).
KEY_TABLES: tuple[KeyTable, ...] = (
    KeyTable(
        "barrier_by_group",
        "Barrier wait by DP group",
        ("dp_group", "n_ranks", "mean_wait_ns", "last_share", "imposed_wait_ns", "caused_wait_ns"),
        "imposed = time the group alone held the barrier; caused = the other groups' waits while it was last",
    ),
    KeyTable(
        "barrier_by_rank",
        "Barrier wait by rank",
        ("rank", "dp_group", "wait_ns", "exposed_wait_ns", "last_count", "wait_share"),
        "shown when the run has no DP groups to sum ranks into",
    ),
    KeyTable(
        "imbalance_by_step",
        "Imbalance per step",
        (
            "step",
            "n_groups",
            "tokens_ratio",
            "sum_sq_ratio",
            "attention_ratio",
            "max_sum_sq_group",
            "wait_ns",
        ),
        "ratios are max / mean over DP groups",
    ),
    KeyTable(
        "stragglers",
        "Ranks that arrived last, and outliers",
        ("rank", "dp_group", "role", "last_count", "last_share", "compute_ratio", "moe_ratio", "cause"),
        "ranks flagged as outliers or ever last, most often last first",
    ),
    KeyTable(
        "overlap_by_role",
        "Overlap by role",
        (
            "role",
            "n_ranks",
            "comm_ns",
            "overlapped_ns",
            "exposed_comm_ns",
            "overlap_efficiency",
            "utilisation",
        ),
    ),
    KeyTable(
        "barrier_by_layer",
        "Barrier wait by layer (largest first)",
        ("layer", "n_instances", "wait_ns", "mean_wait_ns", "max_wait_ns"),
        max_rows=16,
    ),
    KeyTable(
        "barrier_by_instance",
        "Barrier wait by collective instance",
        ("instance", "step", "op", "n_ranks", "wait_ns", "max_wait_ns", "transfer_ns", "last_rank"),
        "shown when the run has no layers: every matched collective is a barrier; wait = Σ over its ranks",
    ),
    KeyTable(
        "ttft_by_bucket",
        "Prompt-length buckets",
        (
            "bucket",
            "n_requests",
            "mean_seq_len",
            "mean_ttft_ns",
            "mean_kernel_ns",
            "mean_wait_ns",
            "wait_share",
        ),
    ),
)
#: rows a terminal shows per table
ROW_LIMIT = 12


@dataclass(frozen=True)
class TableView:
    """A titled table of raw values, to be shown: ``rows`` holds exactly ``columns``, at most as many
    as are shown; ``more`` rows were left out (said under the table); no rows shows as "none"."""

    title: str
    columns: list[str]
    rows: pl.DataFrame
    more: int = 0
    caption: str = ""
    name: str = ""
    labels: list[str] | None = None  # human column names (default: from the column names)
    reason: str = ""  # why the table has no rows, said in its place (never bare headers)

    def cells(self) -> tuple[list[str], list[list[str]]]:
        """Headers and cells by the one rule of :func:`asaptrace.units.format_table`."""
        return format_table(self.columns, self.rows.iter_rows(named=True), self.labels)


def shown_tables(tables: dict[str, pl.DataFrame]) -> list[tuple[KeyTable, pl.DataFrame, str]]:
    """The key tables a human is shown, rows selected and ordered (not cut), each with the reason
    it has no rows ("" when it has some): barrier tables only when there were barriers, per rank
    only when there are no DP groups (per group otherwise); per layer when there are layers, per
    collective instance when there are none; stragglers only the outliers and the ranks that
    arrived last (most often last first); layers by wait."""
    barriers = tables.get("barrier_instances", pl.DataFrame()).height > 0
    groups = tables.get("barrier_by_group", pl.DataFrame()).height > 0
    inst = tables.get("barrier_instances", pl.DataFrame())
    layers = barriers and ("layer" not in inst.columns or inst.get_column("layer").is_not_null().any())
    shown = []
    for key in KEY_TABLES:
        t = tables.get(key.name)
        if t is None:
            continue
        if key.name.startswith("barrier") and not barriers:
            continue
        if (key.name == "barrier_by_rank" and groups) or (key.name == "barrier_by_group" and not groups):
            continue
        if (key.name == "barrier_by_layer" and not layers) or (key.name == "barrier_by_instance" and layers):
            continue
        if key.name == "stragglers" and t.height:
            t = t.filter(t["outlier"] | (t["last_count"] > 0)).sort(
                ["last_count", "rank"], descending=[True, False]
            )
        elif key.name == "barrier_by_layer" and t.height:
            t = t.sort(["wait_ns", "layer"], descending=[True, False])
        elif key.name == "barrier_by_instance":
            t = t.with_columns(short_op())
        t = t.select([c for c in key.columns if c in t.columns])
        shown.append((key, t, "" if t.height else empty_reason(key.name, tables)))
    return shown


def short_op() -> pl.Expr:
    """A collective's name without its C++ argument list ("ncclKernel_AllReduce_RING_LL_Sum_float"),
    as the findings name it."""
    return pl.col("op").cast(pl.String).str.split("(").list.first().alias("op")


def empty_reason(name: str, tables: dict[str, pl.DataFrame]) -> str:
    """Why key table ``name`` has no rows, in one line a user can act on."""
    barriers = tables.get("barrier_instances", pl.DataFrame()).height > 0
    no_barrier = "no matched collective instances, so no barrier wait could be measured"
    ranks = tables.get("step_breakdown", pl.DataFrame())
    grouped = "dp_group" in ranks.columns and ranks.get_column("dp_group").is_not_null().any()
    if name.startswith("barrier"):
        return no_barrier
    if name == "imbalance_by_step":
        if not grouped:
            return "no DP groups: imbalance is measured between the DP groups of a step (pass --parallel)"
        return "no attention kernel and no request lengths per DP group to compare"
    if name == "stragglers":
        return "no rank ever arrived last and no rank is an outlier" if barriers else no_barrier
    if name == "overlap_by_role":
        return "no device kernels in the store"
    if name == "ttft_by_bucket":
        return "request lengths unknown: no request annotations in the trace and no --batches sidecar"
    return "no rows"


def diagnosis_tables(diag: Diagnosis, limit: int = ROW_LIMIT) -> list[TableView]:
    """The key tables of ``diag`` for a terminal: at most ``limit`` rows each."""
    return [
        TableView(
            key.title,
            list(t.columns),
            t.head(limit),
            max(t.height - limit, 0),
            key.caption,
            key.name,
            reason=reason,
        )
        for key, t, reason in shown_tables(diag.tables)
    ]


def diagnosis_header(diag: Diagnosis) -> str:
    """What follows the store's name on the first line: its deployment and the taxonomy used."""
    deployment = (diag.meta.get("parallel") or {}).get("deployment") or "unknown"
    return f"  {deployment} deployment, taxonomy {diag.meta.get('taxonomy_profile') or 'unknown'}"


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
        f"  format v{info['format_version']}  {plural(info['n_ranks'], 'rank')}  "
        f"{info['n_events']:,} events  span {human_ns(span['duration_ns'])}"
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
    return TableView("findings", rows.columns, rows, labels=["severity", "at stake", "finding"])


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
    return TableView(
        f"arrival order at instance {instance} ({instance_where(barrier_instances, instance)})",
        cols,
        rows,
        labels=["#", "rank", "DP", "arrived after the first", "wait", "last"],
    )


def instances_view(tables: dict[str, pl.DataFrame], *, step: int | None, limit: int) -> TableView | None:
    """The matched collective instances of a run without layers (None when it has layers: they
    are summed by layer there), one step or all, in arrival order."""
    inst = tables["barrier_instances"]
    if inst.height and inst.get_column("layer").is_not_null().any():
        return None
    key = next(k for k in KEY_TABLES if k.name == "barrier_by_instance")
    t = tables["barrier_by_instance"]
    if step is not None:
        t = t.filter(pl.col("step") == step)
    t = t.with_columns(short_op())
    reason = (
        "" if t.height else empty_reason(key.name, tables) + (f" in step {step}" if step is not None else "")
    )
    return TableView(
        key.title,
        list(key.columns),
        t.select(key.columns).head(limit),
        max(t.height - limit, 0),
        key.caption,
        key.name,
        reason=reason,
    )


def instance_where(barrier_instances: pl.DataFrame, instance: int) -> str:
    """Where an instance is, in words: "ncclKernel_AllReduce…, step 10" (layer and micro-batch when known)."""
    t = barrier_instances.filter(pl.col("instance") == instance)
    if t.height == 0:
        return "unknown instance"
    r = t.row(0, named=True)
    parts = [str(r["op"]).split("(")[0][:60]]
    parts += [
        f"{k.replace('_', '-')} {r[k]}" for k in ("step", "layer", "micro_batch") if r.get(k) is not None
    ]
    return ", ".join(parts)


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


# ------------------------------------------------------------------------------------------ replay
# Views of a replay's JSON form (ReplayResult.to_json(), or the replay block of a replayed store's
# meta.json): the CLI, the report and the dashboard show these tables, in this order.
def window_text(step: int, layers: tuple[int, int] | None) -> str:
    """The timeline window a report shows: the step and layers where the summed wait is largest."""
    if not layers:
        return f"step {step}, all layers"
    return f"step {step}, layers {layers[0]}–{layers[1]} (where the summed wait is largest)"


def deployment_text(dep: dict[str, Any], *, short: bool = False) -> str:
    """'4×4 attention + 16 expert dies (32 devices)' or 'DP8×TP4 coupled (32 devices)'; ``short``:
    '4×4 + 16' / 'DP8×TP4'."""
    if short:
        if dep.get("kind") == "disaggregated":
            return f"{dep['groups']}×{dep['tp']} + {dep['experts']}"
        return f"DP{dep['groups']}×TP{dep['tp']}"
    if dep.get("kind") == "disaggregated":
        return (
            f"{dep['groups']}×{dep['tp']} attention + {dep['experts']} expert dies ({dep['devices']} devices)"
        )
    return (
        f"DP{dep['groups']}×TP{dep['tp']} coupled ({dep.get('devices', dep['groups'] * dep['tp'])} devices)"
    )


def _share(ns: int, of: int) -> float | None:
    return ns / of if of else None


def _rows_view(
    title: str,
    columns: dict[str, str],
    rows: list,
    *,
    name: str,
    caption: str = "",
    dtypes: dict[str, Any] | None = None,
) -> TableView:
    """A view of row tuples: ``columns`` maps each column to its human label, in order; a column not
    in ``dtypes`` has its type inferred (give one where a table may be empty)."""
    schema = {c: (dtypes or {}).get(c) for c in columns}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    return TableView(title, list(columns), frame, caption=caption, name=name, labels=list(columns.values()))


def replay_makespan_view(j: dict[str, Any]) -> TableView:
    """The answer: measured run, reference (a consistency check) and what-if — makespan, latency."""
    ref, lat, rlat = j["reference_makespan_ns"], j.get("latency") or {}, j.get("reference_latency") or {}
    rows = [
        ("measured run", j["measured_makespan_ns"], None, None, None),
        (
            f"{j['reference_policy']} replay (consistency check)",
            ref,
            rlat.get("mean_ns"),
            rlat.get("p99_ns"),
            0,
        ),
        (
            f"{j['policy']} what-if",
            j["makespan_ns"],
            lat.get("mean_ns"),
            lat.get("p99_ns"),
            ref - j["makespan_ns"],
        ),
    ]
    return _rows_view(
        "Makespan (first batch ready → last batch done) and batch latency (ready → done)",
        {
            "run": "run",
            "makespan_ns": "makespan",
            "latency_mean_ns": "batch latency mean",
            "latency_p99_ns": "batch latency p99",
            "recovered_ns": "recovered",
        },
        rows,
        name="makespan",
        caption="recovered = reference makespan − what-if makespan; per-step times below are latencies, never summed",
    )


def replay_steps_view(j: dict[str, Any]) -> TableView:
    """Per measured step: its measured time and each replay's latency (ready → last batch done)."""
    rows = [(s["step"], s["measured_ns"], s["reference_ns"], s["replayed_ns"]) for s in j["steps"]]
    return _rows_view(
        "Per step: latency of its batches (they may overlap the next step's: not summed)",
        {
            "step": "step",
            "measured_ns": "measured step",
            "reference_ns": f"{j['reference_policy']} replay",
            "replayed_ns": f"{j['policy']}",
        },
        rows,
        name="steps",
        dtypes=dict.fromkeys(("step", "measured_ns", "reference_ns", "replayed_ns"), pl.Int64),
    )


def replay_causes_view(j: dict[str, Any]) -> TableView:
    """Recovered time by cause, each at its deployment (the counterfactual sequence)."""
    ref = j["reference_makespan_ns"]
    cf = j.get("counterfactuals") or [
        {"cause": c, "deployment": j["deployment"], "replayed_ns": None, "recovered_ns": v}
        for c, v in (j.get("recovered_ns") or {}).items()
    ]
    total = ref - j["makespan_ns"]
    rows = [
        *(
            (
                r["cause"].replace("_", " "),
                deployment_text(r["deployment"], short=True),
                r["replayed_ns"],
                r["recovered_ns"],
                _share(r["recovered_ns"], ref),
            )
            for r in cf
        ),
        ("total", deployment_text(j["deployment"], short=True), j["makespan_ns"], total, _share(total, ref)),
    ]
    return _rows_view(
        "Recovered time by cause (each step replayed at the store's device total unless asked)",
        {
            "cause": "cause",
            "deployment": "deployment",
            "replayed_ns": "makespan after",
            "recovered_ns": "recovered",
            "recovered_share": "of the reference",
        },
        rows,
        name="recovered",
        caption="each cause is the drop in makespan from the replay before it; they add up to the total",
        dtypes={"replayed_ns": pl.Int64},
    )


def cost_fit_view(fit: dict[str, Any] | None) -> TableView:
    """Per cost part: fitted or default (why), points, R², residual p50 / p95."""
    rows = [
        (
            part,
            q.get("status", "fitted" if "r2" in q else "default"),
            q.get("n"),
            q.get("r2"),
            q.get("residual_p50_pct"),
            q.get("residual_p95_pct"),
            q.get("reason") or q.get("note") or q.get("data") or "",
        )
        for part, q in (fit or {}).items()
    ]
    return _rows_view(
        "Cost fit (what every what-if rests on)",
        {
            "part": "part",
            "status": "status",
            "points": "points",
            "r2": "R²",
            "residual_p50_pct": "residual p50 %",
            "residual_p95_pct": "residual p95 %",
            "note": "note",
        },
        rows,
        name="fit",
        caption="residual % = |measured − fitted| / measured over the fitted points; a default part was not fitted",
        dtypes={
            "part": pl.String,
            "status": pl.String,
            "points": pl.Int64,
            "r2": pl.Float64,
            "residual_p50_pct": pl.Float64,
            "residual_p95_pct": pl.Float64,
            "note": pl.String,
        },
    )


def split_view(splits: list[dict[str, Any]]) -> TableView:
    """--split auto: every split of the device total, the best marked."""
    rows = [
        (
            ("★ " if r["best"] else "") + r["split"],
            r["makespan_ns"],
            r["latency_mean_ns"],
            r["latency_p99_ns"],
            r["pool_utilisation"],
            r["attention_utilisation"],
            r["binding"] + (" (bandwidth-bound)" if r.get("bandwidth_bound") else ""),
        )
        for r in splits
    ]
    return _rows_view(
        "Every attention/expert split of the device total (★ the best makespan)",
        {
            "split": "split",
            "makespan_ns": "makespan",
            "latency_mean_ns": "latency mean",
            "latency_p99_ns": "latency p99",
            "pool_utilisation": "pool busy",
            "attention_utilisation": "attention busy",
            "binding": "binds",
        },
        rows,
        name="splits",
    )


def vary_view(j: dict[str, Any]) -> TableView:
    """--vary: the recovered time per knob value (the range over what the store cannot pin)."""
    rows = [(v["knob"], v["value"], v["makespan_ns"], v["recovered_ns"]) for v in j.get("vary") or []]
    return _rows_view(
        "The answer's range: one knob the store cannot pin varied at a time",
        {"knob": "knob", "value": "value", "makespan_ns": "what-if makespan", "recovered_ns": "recovered"},
        rows,
        name="vary",
        dtypes={"knob": pl.String, "value": pl.String, "makespan_ns": pl.Int64, "recovered_ns": pl.Int64},
    )


def replay_views(j: dict[str, Any]) -> list[TableView]:
    """The tables of a replay every face shows, in order (``name`` is each table's id): the splits
    tried, the makespans, the steps, the causes, the range, the cost fit."""
    views = [split_view(j["splits"])] if j.get("splits") else []
    views += [replay_makespan_view(j), replay_steps_view(j)]
    if j.get("recovered_ns"):
        views.append(replay_causes_view(j))
    if j.get("vary"):
        views.append(vary_view(j))
    return [*views, cost_fit_view(j.get("cost_fit"))]


def band_text(j: dict[str, Any]) -> str:
    """One line: the recovered time with its band from the fit's residuals (or why there is none)."""
    total = j["reference_makespan_ns"] - j["makespan_ns"]
    b = j.get("band") or {}
    if b.get("status") == "fitted":
        parts = ", ".join(f"{k} ±{100 * v:.0f}%" for k, v in b["parts"].items())
        return (
            f"recovered {human_ns(total)} (band {human_ns(b['recovered_low_ns'])} … "
            f"{human_ns(b['recovered_high_ns'])} from the fit's residual p95: {parts})"
        )
    return f"recovered {human_ns(total)} (no band from the fit: {b.get('reason', 'not computed')})"


def consistency_text(j: dict[str, Any]) -> str:
    c = j.get("consistency") or {
        "policy": j.get("reference_policy"),
        "mean_pct": j.get("error_mean_pct", 0),
        "max_pct": j.get("error_max_pct", 0),
        "exact_by_construction": j.get("reference_policy") == "coupled",
    }
    how = (
        "exact by construction: it checks the mechanics, not the cost model"
        if c.get("exact_by_construction")
        else "on the fitted costs"
    )
    return f"consistency check: the {c['policy']} replay differs from the measured steps by {c['mean_pct']:.2f}% mean, {c['max_pct']:.2f}% max ({how})"


# --------------------------------------------------------------------------------------------- sweep
def sweep_header(res: Any) -> list[str]:
    """The lines above a sweep's tables: what was swept, the knobs and costs it assumed, the
    calibration and the length fit (each only when there is one)."""
    k = res.get("knobs") or {}
    lines = [
        f"sweep: scenario {res.get('scenario', '–')}, {res.get('workload', '–')}, "
        f"{res.get('duration_ns', 0) / 1e9:g} s per rate, SLO mean TTFT ≤ {res['slo_ttft_ns'] / 1e9:g} s, "
        f"seed {k.get('seed', '–')}"
    ]
    if k:
        served = res.get("policy_settings") or {}
        deps = ", ".join(
            f"{p} {deployment_text(s['deployment'], short=True)}"
            for p, s in served.items()
            if s.get("deployment")
        )
        lines.append(
            f"knobs assumed: k_s {k['coupled_k_s']:g}, E_ref {k['moe_e_ref']:g}, φ {k['attn_phi']:g}, "
            f"cost scale {k['cost_scale']:g} ({k['cost_source']}); {k['layers']} layers"
            + (f"; served on {deps}" if deps else "")
        )
    if res.get("costs_from"):
        lines.append(f"costs: {res['costs_from']}")
    if res.get("calibration"):
        c = res["calibration"]
        lines.append(
            f"calibrated: cost scale {c['cost_scale']:g} makes {c['policy']} {c['target_ms']:g} ms at {c['rate']:g}/s"
        )
    if res.get("lengths_fit"):
        f = res["lengths_fit"]
        qs = "  ".join(f"{q} {f[q]:,.0f}" for q in f if q.startswith("q"))
        lines.append(
            f"lengths: log-logistic α {f['alpha']:,.0f} β {f['beta']:.3f} truncated to [{f['lo']}, {f['hi']}]: "
            f"mean {f['mean']:,.0f}, mode {f['mode']:,.0f}; quantiles {qs}"
        )
    return lines


#: the capacity bound's binding resource, abbreviated in the tables (the legend says which is which)
BINDING_SHORT = {
    "attention groups": "A",
    "MoE pool": "P",
    "coupled steps": "S",
    "MoE on the attention dies": "M",
}
BOUND_LEGEND = "its binding resource A attention groups, P MoE pool, S coupled steps"


def bound_text(cap: dict[str, Any] | None) -> str:
    """``7.91 P``: a policy's capacity bound and its binding resource (– when it has none)."""
    if not cap:
        return "–"
    return f"{rps_text(cap['bound_rps'])} {BINDING_SHORT.get(cap['binding'], cap['binding'])}"


def range_rps_text(r: list[float] | None) -> str:
    return "–" if not r else f"{rps_text(r[0])}–{rps_text(r[1])}"


def sweep_slo_view(res: Any) -> TableView:
    """Per policy: our SLO-compliant throughput and its ratio to the first policy, the paper's beside
    them, and the mean TTFT at 1 request/s (ours, the paper's)."""
    pols = list(res["policies"])
    paper = res.get("paper") or {}
    p_rps, p_1 = paper.get("slo_rps") or {}, paper.get("mean_ttft_ms_at_1rps") or {}
    base = p_rps.get(pols[0]) if pols else None
    censored, ratios, at1 = (
        res.get("slo_censored") or {},
        res.get("ratios") or {},
        res.get("mean_ttft_ns_at_1rps") or {},
    )
    cap, ranges = res.get("capacity") or {}, res.get("slo_range") or {}
    seeds = len(res.get("seeds") or []) > 1
    rows = [
        (
            p,
            rps_text(res["slo_rps"].get(p), bool(censored.get(p))),
            *((range_rps_text(ranges.get(p)),) if seeds else ()),
            bound_text(cap.get(p)),
            ratios.get(p),
            None if p_rps.get(p) is None else f"{p_rps[p]:g}",
            p_rps[p] / base if p_rps.get(p) is not None and base else None,
            at1.get(p),
            None if p_1.get(p) is None else round(p_1[p] * 1e6),
        )
        for p in pols
    ]
    question = f" — {res['question']}" if res.get("question") else ""
    return _rows_view(
        f"SLO-compliant throughput (requests/s){question}",
        {
            "policy": "policy",
            "slo_rps": "SLO RPS" + (" (median)" if seeds else ""),
            **({"slo_range": "seeds"} if seeds else {}),
            "bound": "bound",
            "ratio": "ratio",
            "paper_slo_rps": "paper RPS",
            "paper_ratio": "paper ratio",
            "ttft_at_1rps_ns": "mean TTFT @1/s",
            "paper_ttft_at_1rps_ns": "paper @1/s",
        },
        rows,
        name="sweep-slo",
        caption="≥: the SLO was met at every rate swept (a lower bound); "
        + (f"seeds: min–max over {len(res['seeds'])} seeds; " if seeds else "")
        + f"bound: the capacity bound, {BOUND_LEGEND}; ratio = policy / "
        + (pols[0] if pols else "the first policy"),
        dtypes={
            "policy": pl.String,
            "slo_rps": pl.String,
            **({"slo_range": pl.String} if seeds else {}),
            "bound": pl.String,
            "ratio": pl.Float64,
            "paper_slo_rps": pl.String,
            "paper_ratio": pl.Float64,
            "ttft_at_1rps_ns": pl.Int64,
            "paper_ttft_at_1rps_ns": pl.Int64,
        },
    )


def sweep_curves_view(res: Any) -> TableView:
    """Rate → mean (and p99, up to three policies) TTFT per policy; every quantile is in --json."""
    pols = list(res["policies"])
    rates = sorted({row["rate"] for p in pols for row in res["curves"][p]})
    by = {(p, row["rate"]): row for p in pols for row in res["curves"][p]}
    p99 = len(pols) <= 3
    columns = {"rate": "rate /s"}
    for i, p in enumerate(pols):
        columns[f"mean_{i}_ns"] = f"{p} mean"
        if p99:
            columns[f"p99_{i}_ns"] = f"{p} p99"
    rows = []
    for r in rates:
        row: list[Any] = [r]
        for p in pols:
            point = by.get((p, r)) or {}
            row.append(point.get("mean_ttft_ns"))
            if p99:
                row.append(point.get("p99_ttft_ns"))
        rows.append(tuple(row))
    dtypes = {c: (pl.Float64 if c == "rate" else pl.Int64) for c in columns}
    return _rows_view("TTFT by rate", columns, rows, name="sweep-curves", dtypes=dtypes)


def sweep_decomposition_view(res: Any) -> TableView:
    """TTFT = queue + own + sync by prompt length at the decomposition rate (shares of the mean)."""
    from asaptrace.replay.sweep_result import DECOMPOSITION_SCHEMA  # `ingest` loads no replay module

    rows = [tuple(b[c] for c in DECOMPOSITION_SCHEMA) for b in res.get("decomposition") or []]
    return _rows_view(
        f"TTFT decomposition at {res.get('decomposition_rate', 0):g}/s",
        {
            "policy": "policy",
            "bucket": "prompt tokens",
            "n_requests": "requests",
            "mean_ttft_ns": "mean TTFT",
            "queue_share": "queue",
            "own_share": "own",
            "sync_share": "sync",
        },
        rows,
        name="sweep-decomposition",
        caption="queue: arrival → first work; own: its share of the kernels it is in; sync: the rest",
        dtypes=DECOMPOSITION_SCHEMA,
    )


def sweep_vary_view(res: Any) -> TableView:
    """One knob at a time: each value's SLO throughput per policy and the headline ratio."""
    from asaptrace.replay.sweep_result import headline_policy  # `ingest` loads no replay module

    pols = list(res["policies"])
    columns = {"knob": "knob", "value": "value"}
    columns |= {f"rps_{i}": f"{p} RPS" for i, p in enumerate(pols)}
    columns["ratio"] = f"{headline_policy(pols)}/{pols[0]}" if pols else "ratio"
    rows = [
        (
            str(v["knob"]),
            str(v["value"]),
            *(rps_text((v.get("slo_rps") or {}).get(p)) for p in pols),
            v.get("ratio"),
        )
        for v in res.get("vary") or []
    ]
    dtypes = dict.fromkeys(columns, pl.String) | {"ratio": pl.Float64}
    return _rows_view("Sensitivity (one knob at a time)", columns, rows, name="sweep-vary", dtypes=dtypes)


def sweep_tornado_view(res: Any) -> TableView:
    """Each varied knob's range of the headline ratio, widest first."""
    rows = [
        (
            e["knob"],
            e["ratio_min"],
            str(e["at_min"]),
            e["ratio_max"],
            str(e["at_max"]),
            e["ratio_max"] - e["ratio_min"],
        )
        for e in res.get("tornado") or []
    ]
    return _rows_view(
        "Tornado (widest first)",
        {
            "knob": "knob",
            "min_ratio": "lowest ratio",
            "at_min": "at",
            "max_ratio": "highest ratio",
            "at_max": "at",
            "swing": "swing",
        },
        rows,
        name="sweep-tornado",
        caption="no rows: no ratio to compare (the SLO was met at every rate swept, or missed at the lowest)",
        dtypes={
            "knob": pl.String,
            "min_ratio": pl.Float64,
            "at_min": pl.String,
            "max_ratio": pl.Float64,
            "at_max": pl.String,
            "swing": pl.Float64,
        },
    )


def sweep_views(res: Any) -> list[TableView]:
    """Every table of a sweep, in the order each face shows them (vary and tornado when asked)."""
    views = [sweep_slo_view(res), sweep_curves_view(res), sweep_decomposition_view(res)]
    if res.get("vary"):
        views += [sweep_vary_view(res), sweep_tornado_view(res)]
    return views


# ------------------------------------------------------------------------------------------- compare
def compare_views(comparison: dict[str, pl.DataFrame], a: str = "A", b: str = "B") -> list[TableView]:
    """Two stores side by side: each headline metric in its own unit, then per DP group."""
    rows = [
        (
            r["metric"],
            metric_value(r["unit"], r["metric"], r["a"]),
            metric_value(r["unit"], r["metric"], r["b"]),
            metric_value(r["unit"], r["metric"], r["delta"]),
            r["ratio"],
        )
        for r in comparison["compare_overall"].iter_rows(named=True)
    ]
    overall = _rows_view(
        f"{a} vs {b}",
        {"metric": "metric", "a": a, "b": b, "delta": "delta", "ratio": "ratio"},
        rows,
        name="compare-overall",
        caption=f"delta = {b} − {a}; ratio = {b} / {a}",
        dtypes={"metric": pl.String, "a": pl.String, "b": pl.String, "delta": pl.String, "ratio": pl.Float64},
    )
    groups = comparison["compare_by_group"]
    by_group = TableView(f"{a} vs {b}, per DP group", groups.columns, groups, name="compare-by-group")
    return [overall, by_group]


# ------------------------------------------------------------------------------------------ policies
def policies_lines(catalogue: list[dict[str, Any]]) -> list[str]:
    """The policy registry in words: each policy, where it runs, what it is, its parameters (with
    their defaults) and its named ablations."""
    lines = []
    for p in catalogue:
        runs = "replay and sweep" if p["online"] else "replay only"
        lines.append(f"{p['name']} ({p['family']}, {runs}): {p['summary']}")
        lines.append("    parameters: " + (", ".join(f"{k}={v}" for k, v in p["params"].items()) or "none"))
        if p["variants"]:
            lines.append("    named ablations: " + ", ".join(p["variants"]))
    return lines


# -------------------------------------------------------------------------------------------- advice
def advice_view(j: dict[str, Any]) -> TableView:
    """The ranked what-ifs of an advice (its JSON): recovered time and range, against the reference
    replay's makespan, the findings each answers, and (``--online``) its SLO throughput."""
    online = any((w.get("online") or {}).get("slo_rps") is not None for w in j["whatifs"])
    rows = []
    for i, w in enumerate((w for w in j["whatifs"] if w["applies"]), start=1):
        o = w.get("online") or {}
        rows.append(
            (
                i,
                w["label"],
                w["recovered_ns"],
                w["recovered_low_ns"],
                w["recovered_high_ns"],
                w["reference_ns"],
                ", ".join(a["code"] for a in w.get("answers") or []) or "–",
                "yes" if any(q.get("weak") for q in w.get("fit") or []) else "no",
                *(
                    (
                        rps_text(o.get("slo_rps"), bool(o.get("censored"))) if o else "–",
                        range_rps_text(o.get("range")),
                        bound_text({"bound_rps": o["bound_rps"], "binding": o["binding"]})
                        if o.get("bound_rps") is not None
                        else "–",
                    )
                    if online
                    else ()
                ),
            )
        )
    columns = {
        "rank": "rank",
        "whatif": "what-if",
        "recovered_ns": "recovered",
        "recovered_low_ns": "low",
        "recovered_high_ns": "high",
        "reference_ns": "of",
        "answers": "answers",
        "weak_fit": "weak fit",
    }
    if online:
        columns |= {"slo_rps": "online RPS", "slo_range": "seeds", "bound": "bound"}
    dtypes = {c: pl.String for c in columns} | {
        c: pl.Int64 for c in columns if c.endswith("_ns") or c == "rank"
    }
    on = j.get("online") or {}
    base = (on.get("slo_rps") or {}).get(on.get("measured_policy", "coupled"))
    caption = (
        "offline: recovered = the reference replay's makespan − the what-if's on these batches as they"
        " arrived (negative: it loses time); low/high: its range"
    )
    if online and base is not None:
        caption += (
            f"; online ({on.get('question', 'served under load')}): SLO RPS median over seeds, their"
            f" min–max, the capacity bound ({BOUND_LEGEND}), beside the measured policy's {rps_text(base)}"
        )
    return _rows_view(
        "Advice: what to change, and what it buys",
        columns,
        rows,
        name="advice",
        caption=caption,
        dtypes=dtypes,
    )


def advice_lines(j: dict[str, Any]) -> list[str]:
    """Every advice line, ranked, then one per what-if that does not apply (each from its numbers)."""
    return [w["line"] for w in j["whatifs"]]
