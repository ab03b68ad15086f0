"""A diagnosis as a human sees it: the key tables (which, which columns, which rows, in which order),
the header line, the findings — and the two the dashboard shows beside its figures.

Every table stays whole in ``--json`` / ``--csv`` / the Python API.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import polars as pl

from asaptrace.analyze.breakdown import PARTS
from asaptrace.info import deployment_phrase, phase_counts, steps_text
from asaptrace.units import metric_label, metric_value
from asaptrace.views.table import ROW_LIMIT, TableView

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis


#: The key tables of a diagnosis, in order (the CLI, the report and the dashboard show these).
def _key(name: str, title: str, columns: tuple[str, ...], caption: str = "", max_rows: int = 40) -> TableView:
    """A key table before its rows: title, columns (the rest: --json / --csv), what it means, and how
    many rows the report shows (a terminal shows :data:`~asaptrace.views.table.ROW_LIMIT`)."""
    return TableView(title, list(columns), pl.DataFrame(), caption=caption, name=name, max_rows=max_rows)


KEY_TABLES: tuple[TableView, ...] = (
    _key(
        "step_breakdown",
        "Step time by part, per rank (mean per step)",
        ("rank", "step_time_ns", *PARTS, "lag_ns"),
        "the parts add up to the step time; idle by cause: host launch, synchronisation, other; lag = "
        "how far the device runs behind the step's host spans (not a part); most idle first",
        max_rows=16,
    ),
    _key(
        "barrier_by_group",
        "Barrier wait by DP group",
        ("dp_group", "n_ranks", "mean_wait_ns", "last_share", "imposed_wait_ns", "caused_wait_ns"),
        "imposed = time the group alone held the barrier; caused = the other groups' waits while it was last",
    ),
    _key(
        "barrier_by_rank",
        "Barrier wait by rank",
        ("rank", "dp_group", "wait_ns", "exposed_wait_ns", "last_count", "wait_share"),
        "shown when the run has no DP groups to sum ranks into",
    ),
    _key(
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
    _key(
        "stragglers",
        "Ranks that arrived last, and outliers",
        ("rank", "dp_group", "role", "last_count", "last_share", "compute_ratio", "moe_ratio", "cause"),
        "ranks flagged as outliers or ever last, most often last first",
    ),
    _key(
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
    _key(
        "barrier_by_layer",
        "Barrier wait by layer (largest first)",
        ("layer", "n_instances", "wait_ns", "mean_wait_ns", "max_wait_ns"),
        max_rows=16,
    ),
    _key(
        "barrier_by_instance",
        "Barrier wait by collective instance",
        ("instance", "step", "op", "n_ranks", "wait_ns", "max_wait_ns", "transfer_ns", "last_rank"),
        "shown when the run has no layers: every matched collective is a barrier; wait = Σ over its ranks",
    ),
    _key(
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


def shown_tables(tables: dict[str, pl.DataFrame], batches_source: str | None = None) -> list[TableView]:
    """The key tables a human is shown, rows selected and ordered (not cut), each with its ``reason``
    when it has no rows ("" when it has some): barrier tables only when there were barriers, per rank
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
        if key.name == "step_breakdown" and t.height:
            t = per_rank_breakdown(t)
        elif key.name == "stragglers" and t.height:
            t = t.filter(t["outlier"] | (t["last_count"] > 0)).sort(
                ["last_count", "rank"], descending=[True, False]
            )
        elif key.name == "barrier_by_layer" and t.height:
            t = t.sort(["wait_ns", "layer"], descending=[True, False])
        elif key.name == "barrier_by_instance":
            t = t.with_columns(short_op())
        t = t.select([c for c in key.columns if c in t.columns])
        why = "" if t.height else empty_reason(key.name, tables, batches_source)
        shown.append(replace(key, columns=list(t.columns), rows=t, reason=why))
    return shown


def per_rank_breakdown(bd: pl.DataFrame) -> pl.DataFrame:
    """The step breakdown as a mean per step of each rank (its steps' sums over their count, so the
    parts still add up to the step time within rounding), most idle first."""
    cols = [c for c in key_table("step_breakdown").columns[1:] if c in bd.columns]
    steps = pl.col("step").n_unique() + pl.col("step").null_count().clip(upper_bound=1)
    return (
        bd.group_by("rank")
        .agg(*[pl.col(c).sum() for c in cols if c != "lag_ns"], pl.col("lag_ns").mean(), steps.alias("_n"))
        .with_columns(*[(pl.col(c) / pl.col("_n")).round().cast(pl.Int64) for c in cols])
        .with_columns(
            (pl.col("idle_host_ns") + pl.col("idle_sync_ns") + pl.col("idle_other_ns")).alias("_idle")
        )
        .sort(["_idle", "rank"], descending=[True, False])
        .drop("_n", "_idle")
    )


def short_op() -> pl.Expr:
    """A collective's name without its C++ argument list ("ncclKernel_AllReduce_RING_LL_Sum_float"),
    as the findings name it."""
    return pl.col("op").cast(pl.String).str.split("(").list.first().alias("op")


def empty_reason(name: str, tables: dict[str, pl.DataFrame], batches_source: str | None = None) -> str:
    """Why key table ``name`` has no rows, in one line a user can act on (``batches_source``: the
    store's, which says whether request lengths are known)."""
    barriers = tables.get("barrier_instances", pl.DataFrame()).height > 0
    no_barrier = "no matched collective instances, so no barrier wait could be measured"
    ranks = tables.get("step_breakdown", pl.DataFrame())
    grouped = "dp_group" in ranks.columns and ranks.get_column("dp_group").is_not_null().any()
    if name.startswith("barrier"):
        return no_barrier
    if name == "imbalance_by_step":
        if not grouped and "rank" in ranks.columns and ranks.get_column("rank").n_unique() <= 1:
            # --parallel cannot help here: it names groups of ranks, and there is one rank
            return "one rank traced: imbalance is measured between the DP groups of a step"
        if not grouped:
            return "no DP groups: imbalance is measured between the DP groups of a step (pass --parallel)"
        return "no attention kernel and no request lengths per DP group to compare"
    if name == "stragglers":
        return "no rank ever arrived last and no rank is an outlier" if barriers else no_barrier
    if name in ("overlap_by_role", "step_breakdown"):
        return "no device kernels in the store"
    if name == "ttft_by_bucket":
        if batches_source not in (None, "", "none"):  # lengths known, arrivals not
            return "no request arrival times, which a TTFT needs: request annotations or --batches give them"
        return "request lengths unknown: no request annotations in the trace and no --batches sidecar"
    return "no rows"


def diagnosis_tables(diag: Diagnosis, limit: int = ROW_LIMIT) -> list[TableView]:
    """The key tables of ``diag`` for a terminal: at most ``limit`` rows each."""
    return [v.head(limit) for v in shown_tables(diag.tables, diag.meta.get("batches_source"))]


def key_table(name: str) -> TableView:
    """Key table ``name`` before its rows (title, columns, caption)."""
    return next(k for k in KEY_TABLES if k.name == name)


#: the columns of the dashboard's imbalance table: the key table's, less the wait its figures show
IMBALANCE_COLUMNS = tuple(c for c in key_table("imbalance_by_step").columns if c != "wait_ns")


def imbalance_steps_view(by_step: pl.DataFrame) -> TableView:
    """Imbalance per step beside the dashboard's figures: every step, the ratios without the wait."""
    cols = [c for c in IMBALANCE_COLUMNS if c in by_step.columns]
    return TableView("imbalance per step", cols, by_step.select(cols))


def overlap_roles_view(tables: dict[str, pl.DataFrame]) -> TableView:
    """Overlap by role beside the dashboard's figures: the key table's columns, every role."""
    cols = key_table("overlap_by_role").columns
    return TableView("overlap by role", cols, tables["overlap_by_role"].select(cols))


def diagnosis_header(diag: Diagnosis) -> str:
    """What follows the store's name on the first line: its deployment, its steps by phase and
    the taxonomy used."""
    steps = f", {steps_text(diag.meta)}" if phase_counts(diag.meta) else ""
    return (
        f"  {deployment_phrase(diag.meta.get('parallel'))}{steps}, "
        f"taxonomy {diag.meta.get('taxonomy_profile') or 'unknown'}"
    )


def headline_rows(diag: Diagnosis) -> list[tuple[str, str, str]]:
    """The headline numbers of a Diagnosis as (metric, meaning, value text), in display order."""
    from asaptrace.analyze.compare import HEADLINE_METRICS, headline

    meaning = {m: text for m, _, text in HEADLINE_METRICS}
    return [
        (metric_label(m), meaning[m], metric_value(u, m, v)) for m, u, v in headline(diag.tables).iter_rows()
    ]


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
