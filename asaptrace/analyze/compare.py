"""Two runs side by side: the headline numbers of each Diagnosis, overall and per DP group, with deltas.

:func:`headline` reduces one Diagnosis's tables to the numbers a reader looks at first (step time,
exposed wait, imbalance, overlap); the report's summary shows them and :func:`compare` puts two
of them side by side (measured vs replayed, before vs after a scheduler change). Pure: tables in,
tables out. Columns are documented in docs/reference/columns.md (``headline``, ``compare_overall``,
``compare_by_group``).

:func:`comparability` says first whether the two runs can be put side by side at all: it warns
where they differ (ranks, deployment, roles, MoE layers, steps) and refuses when they share
neither their work nor their layout (a 32-rank MoE prefill run beside an 8-rank DLRM training
run: every delta would be noise). It reads a :class:`RunSummary` of each run, so a new property
(the steps' phases) is one field and one line of :func:`_aspects`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from asaptrace.analyze._common import share
from asaptrace.info import phase_counts
from asaptrace.units import plural

#: The headline metrics, in display order: (metric, unit, meaning).
HEADLINE_METRICS: tuple[tuple[str, str, str], ...] = (
    ("n_ranks", "–", "ranks with device work"),
    ("n_steps", "–", "steps (work outside every step not counted)"),
    ("mean_step_time_ns", "ns", "mean step time (per rank and step)"),
    ("exposed_wait_ns", "ns", "exposed wait per rank, all steps (barrier; receive where no barrier)"),
    ("wait_share", "–", "exposed wait / step time"),
    ("transfer_ns", "ns", "exposed transfer per rank (all steps)"),
    ("tokens_ratio", "–", "token imbalance (max / mean over DP groups, mean over steps)"),
    ("sum_sq_ratio", "–", "Σs² imbalance (max / mean over DP groups, mean over steps)"),
    ("attention_ratio", "–", "attention-time imbalance (max / mean, mean over steps)"),
    ("overlap_efficiency", "–", "overlapped / all communication"),
    ("utilisation", "–", "compute / device span"),
)

Tables = Mapping[str, pl.DataFrame]


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def _sum(t: pl.DataFrame, col: str) -> float | None:
    return float(t.get_column(col).sum()) if t.height else None


def _mean(t: pl.DataFrame, col: str) -> float | None:
    v = t.get_column(col).drop_nulls() if t.height else None
    return float(v.mean()) if v is not None and len(v) else None  # type: ignore[arg-type]


def headline(tables: Tables) -> pl.DataFrame:
    """One row per metric of :data:`HEADLINE_METRICS`: ``metric, unit, value`` (value null: unknown).

    Step time, wait and transfer come from ``step_breakdown`` (Σ over ranks and steps / ranks); the
    imbalance ratios are means over steps of ``imbalance_by_step``; overlap and utilisation are
    Σ overlapped / Σ comm and Σ compute / Σ span over ``overlap_by_rank``.
    """
    bd, imb, ov = tables["step_breakdown"], tables["imbalance_by_step"], tables["overlap_by_rank"]
    n_ranks = bd.get_column("rank").n_unique() if bd.height else ov.height
    per_rank = (lambda col: _ratio(_sum(bd, col), n_ranks)) if n_ranks else (lambda col: None)
    values = {
        "n_ranks": float(n_ranks),
        "n_steps": float(bd.get_column("step").drop_nulls().n_unique()) if bd.height else 0.0,
        # the row of work before the first step (step null) is no step: not in the mean when steps exist
        "mean_step_time_ns": _mean(
            bd.filter(pl.col("step").is_not_null()) if bd.height and bd["step"].is_not_null().any() else bd,
            "step_time_ns",
        ),
        "exposed_wait_ns": per_rank("wait_ns"),
        "wait_share": _ratio(_sum(bd, "wait_ns"), _sum(bd, "step_time_ns")),
        "transfer_ns": per_rank("transfer_ns"),
        "tokens_ratio": _mean(imb, "tokens_ratio"),
        "sum_sq_ratio": _mean(imb, "sum_sq_ratio"),
        "attention_ratio": _mean(imb, "attention_ratio"),
        "overlap_efficiency": _ratio(_sum(ov, "overlapped_ns"), _sum(ov, "comm_ns")),
        "utilisation": _ratio(_sum(ov, "compute_ns"), _sum(ov, "span_ns")),
    }
    return pl.DataFrame(
        {
            "metric": [m for m, _, _ in HEADLINE_METRICS],
            "unit": [u for _, u, _ in HEADLINE_METRICS],
            "value": [values[m] for m, _, _ in HEADLINE_METRICS],
        },
        schema={"metric": pl.String, "unit": pl.String, "value": pl.Float64},
    )


def by_group(tables: Tables) -> pl.DataFrame:
    """Per DP group: mean step time, exposed wait per rank, overlap efficiency (Σ over its ranks)."""
    bd, ov = tables["step_breakdown"], tables["overlap_by_rank"]
    steps = bd.group_by("dp_group").agg(
        pl.col("step_time_ns").mean().alias("mean_step_time_ns"),
        (pl.col("wait_ns").sum() / pl.col("rank").n_unique()).alias("exposed_wait_ns"),
    )
    overlap = ov.group_by("dp_group").agg(  # null, never NaN, for a group without communication
        share(pl.col("overlapped_ns").sum(), pl.col("comm_ns").sum()).alias("overlap_efficiency")
    )
    return (
        steps.join(overlap, on="dp_group", how="full", coalesce=True, nulls_equal=True)
        .with_columns(pl.col("dp_group").cast(pl.Int32))
        .sort("dp_group", nulls_last=True)
    )


def compare(a: Tables, b: Tables) -> dict[str, pl.DataFrame]:
    """``compare_overall`` (metric, unit, a, b, delta = b − a, ratio = b / a) and ``compare_by_group``.

    ``compare_by_group`` has per DP group ``<metric>_a``, ``<metric>_b`` and ``<metric>_delta`` for
    the metrics of :func:`by_group`; a group present in one run only has nulls on the other side
    (an ASAP layout may have other DP groups than the coupled run it replays).
    """
    ha, hb = headline(a), headline(b)
    overall = (
        ha.rename({"value": "a"})
        .join(hb.select("metric", pl.col("value").alias("b")), on="metric", how="left", maintain_order="left")
        .with_columns(
            (pl.col("b") - pl.col("a")).alias("delta"),
            pl.when(pl.col("a") != 0).then(pl.col("b") / pl.col("a")).otherwise(None).alias("ratio"),
        )
    )
    ga, gb = by_group(a), by_group(b)
    metrics = [c for c in ga.columns if c != "dp_group"]
    groups = ga.rename({m: f"{m}_a" for m in metrics}).join(
        gb.rename({m: f"{m}_b" for m in metrics}), on="dp_group", how="full", coalesce=True, nulls_equal=True
    )
    groups = groups.with_columns([(pl.col(f"{m}_b") - pl.col(f"{m}_a")).alias(f"{m}_delta") for m in metrics])
    order = ["dp_group"] + [f"{m}_{s}" for m in metrics for s in ("a", "b", "delta")]
    return {
        "compare_overall": overall,
        "compare_by_group": groups.select(order).sort("dp_group", nulls_last=True),
    }


# ------------------------------------------------------------------------------------ comparability
@dataclass(frozen=True)
class RunSummary:
    """What decides whether two runs compare: their layout and their work, in a few values."""

    ranks: int  # ranks with device work
    deployment: str  # coupled | disaggregated | single-device | unknown …
    roles: tuple[str, ...]  # the ranks' roles, sorted
    moe_layers: bool  # the steps were cut into (MoE) layers
    steps: int
    phases: tuple[str, ...] = ()  # the steps' phases the trace says (prefill, decode, training …)
    declared_world: int | None = None  # ranks the job had when the files say more than were traced


def run_summary(tables: Tables, meta: Mapping[str, Any]) -> RunSummary:
    """The :class:`RunSummary` of a Diagnosis (its ``tables`` and ``meta``)."""
    ov, bd = tables["overlap_by_rank"], tables["step_breakdown"]
    layers = (meta.get("segmentation") or {}).get("layer_source")
    return RunSummary(
        ranks=ov.height,
        deployment=(meta.get("parallel") or {}).get("deployment") or "unknown",
        roles=tuple(sorted(ov.get_column("role").drop_nulls().unique().to_list())) if ov.height else (),
        moe_layers=layers not in (None, "none"),
        steps=bd.get_column("step").n_unique() if bd.height else 0,
        phases=tuple(p for p in phase_counts(meta) if p != "unknown"),
        declared_world=(meta.get("parallel") or {}).get("declared_world_size"),
    )


def _aspects(s: RunSummary) -> dict[str, tuple[str, str]]:
    """aspect → (what it is: work, layout or detail; how it reads)."""
    return {
        "ranks": ("layout", plural(s.ranks, "rank")),
        "deployment": ("layout", s.deployment if s.deployment != "unknown" else "deployment unknown"),
        "roles": ("detail", "roles " + (", ".join(s.roles) or "none")),
        "MoE layers": ("work", "MoE layers" if s.moe_layers else "no MoE layers"),
        "steps": ("detail", plural(s.steps, "step")),
        # what the steps did: a training run beside a prefill run is other work
        "phase": ("work", " and ".join(s.phases) + " steps" if s.phases else ""),
        # two traced ranks of a 128-rank job are not a 2-rank job: waits and arrivals differ
        "declared world size": ("detail", f"a job of {plural(s.declared_world or s.ranks, 'rank')}"),
    }


def comparability(
    a: RunSummary, b: RunSummary, names: tuple[str, str] = ("a", "b")
) -> tuple[list[str], str | None]:
    """``(warnings, refusal)``: one warning per aspect the runs differ in, and why they cannot be
    compared at all (None: they can) — when they differ in their work (any ``work`` aspect) *and*
    in their whole layout (every ``layout`` aspect: rank count and deployment)."""
    sa, sb = _aspects(a), _aspects(b)
    differ = {k: sa[k][0] for k in sa if sa[k][1] != sb[k][1]}
    if not (a.phases and b.phases):  # a run whose trace says no phase may have done either
        differ.pop("phase", None)
    if a.declared_world is None and b.declared_world is None:  # both whole jobs: "ranks" says it
        differ.pop("declared world size", None)
    warnings = [f"the runs differ in {k}: {sa[k][1]} in {names[0]}, {sb[k][1]} in {names[1]}" for k in differ]
    layout = [k for k, (kind, _) in sa.items() if kind == "layout"]
    if "work" in differ.values() and all(k in differ for k in layout):

        def said(s: dict[str, tuple[str, str]]) -> str:
            return ", ".join(text for kind, text in s.values() if kind != "detail" and text)

        return warnings, (
            f"nothing to compare: {names[0]} ({said(sa)}) and {names[1]} ({said(sb)}) share neither their "
            "work nor their layout; compare runs of one workload (--force compares them anyway)"
        )
    return warnings, None
