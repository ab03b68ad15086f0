"""The Diagnosis: every analysis table of a store plus ranked findings in plain words.

:func:`diagnose` runs the analyses on (events, ranks, batches) and turns their tables into
findings, each with the time at stake (``cost_ns``, per rank on average) used to rank them. It is
pure: reading a store (and re-enriching it when options differ) is
:func:`asaptrace.pipeline.diagnose_store`'s job.

The JSON form (:meth:`Diagnosis.to_json`) is a versioned schema that scripts can rely on
(documented in ``docs/reference/columns.md``)::

    {"schema_version": 1, "store": ..., "meta": {...}, "notes": [...],
     "findings": [{"code", "severity", "cost_ns", "text", "data"}, ...],
     "tables": {name: [row, ...], ...}}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from asaptrace.analyze import barrier as bw
from asaptrace.analyze._common import lazy
from asaptrace.analyze._idle import host_frame
from asaptrace.analyze.breakdown import breakdown_tables
from asaptrace.analyze.findings import Finding, rank_findings
from asaptrace.analyze.imbalance import fit_attention, imbalance_by_group, imbalance_by_step
from asaptrace.analyze.overlap import overlap_by_rank, overlap_by_role
from asaptrace.analyze.straggler import straggler_groups, stragglers
from asaptrace.analyze.ttft import ttft_by_bucket, ttft_requests
from asaptrace.display import HtmlRepr
from asaptrace.enrich.instances import match_instances
from asaptrace.info import phase_counts, steps_of

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "TABLE_NAMES", "Diagnosis", "Finding", "diagnose"]

#: Tables every Diagnosis carries (possibly empty), in display order.
TABLE_NAMES = (
    "barrier_instances",
    "barrier_by_rank",
    "barrier_by_group",
    "barrier_by_layer",
    "barrier_by_instance",
    "barrier_by_step",
    "barrier_by_rank_layer",
    "receive_waits",
    "step_breakdown",
    "idle_ops",
    "imbalance_by_group",
    "imbalance_by_step",
    "imbalance_fit",
    "overlap_by_rank",
    "overlap_by_role",
    "stragglers",
    "straggler_groups",
    "ttft_requests",
    "ttft_by_bucket",
    "clock",
)


@dataclass(repr=False)
class Diagnosis(HtmlRepr):
    """The tables of every analysis, the ranked findings, notes on what enrichment could not do."""

    tables: dict[str, pl.DataFrame]
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        top = self.findings[0].text if self.findings else "no findings"
        top = top if len(top) <= 90 else top[:89] + "…"
        return f"<Diagnosis {self.meta.get('store', '')}: {len(self.findings)} findings; top: {top}>"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "store": self.meta.get("store"),
            "meta": {k: v for k, v in self.meta.items() if k != "store"},
            "notes": self.notes,
            "findings": [f.to_json() for f in self.findings],
            "tables": {name: self.tables[name].to_dicts() for name in TABLE_NAMES if name in self.tables},
        }


# --------------------------------------------------------------------------------------------- assembly
def store_context(store: str, m: dict[str, Any], *, in_memory: bool = False) -> dict[str, Any]:
    """What a Diagnosis says of its store (``meta``): where it came from, its layout, clock and
    segmentation, and the ingest's warnings (e.g. several runs mixed) as notes beside the findings
    they may explain; ``m`` is the store's meta.json (with in-memory enrichment's, when that ran)."""
    meta: dict[str, Any] = {"store": store}
    if in_memory:
        meta["enriched_in_memory"] = True
    keys = ("parallel", "taxonomy_profile", "clock", "segmentation", "batches_source")
    meta |= {k: m.get(k) for k in keys}
    meta["phases"] = phase_counts(m)  # steps by phase (the steps table: meta.segmentation.steps)
    meta["notes"] = [
        *(m.get("discovery") or {}).get("warnings", []),
        *(m.get("segmentation") or {}).get("notes", []),
        *(m.get("clock") or {}).get("notes", []),
    ]
    return meta


def diagnose(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    *,
    batches: pl.LazyFrame | pl.DataFrame | None = None,
    meta: dict[str, Any] | None = None,
) -> Diagnosis:
    """Run every analysis and rank the findings."""
    meta = dict(meta or {})
    ev = lazy(events)
    rk = lazy(ranks).collect()
    # reduce early: device work only, the columns the analyses read
    present = set(ev.collect_schema().names())
    cols = ["rank", "stream", "is_device", "kind", "name", "cat", "ts_ns", "dur_ns", "step", "layer"]
    cols += ["micro_batch", "corr"]
    dev = ev.filter(pl.col("is_device")).select(c for c in cols if c in present).collect()
    b = batches.collect() if isinstance(batches, pl.LazyFrame) else batches
    inst = match_instances(dev, rk)
    barrier = bw.barrier_wait(dev, rk, instances=inst)
    receive = bw.receive_wait(dev, rk)
    waits = pl.concat([barrier, receive]) if receive.height else barrier
    host = host_frame(ev)
    breakdown, idle_ops = breakdown_tables(dev, rk, barrier=waits, host=host)
    by_group_imb = imbalance_by_group(dev, rk, batches=b, breakdown=breakdown)
    ov = overlap_by_rank(dev, rk)
    t: dict[str, pl.DataFrame] = {
        "barrier_instances": barrier,
        "barrier_by_rank": bw.wait_by_rank(barrier, breakdown),
        "barrier_by_group": bw.wait_by_group(barrier),
        "barrier_by_layer": bw.wait_by_layer(barrier),
        "barrier_by_instance": bw.wait_by_instance(barrier),
        "barrier_by_step": bw.wait_by_step(barrier, breakdown),
        "barrier_by_rank_layer": bw.wait_by_rank_layer(waits),
        "receive_waits": receive,
        "step_breakdown": _with_phase(breakdown, meta),
        "idle_ops": idle_ops,
        "imbalance_by_group": by_group_imb,
        "imbalance_by_step": imbalance_by_step(by_group_imb),
        "imbalance_fit": fit_attention(by_group_imb),
        "overlap_by_rank": ov,
        "overlap_by_role": overlap_by_role(ov),
        "stragglers": stragglers(dev, rk, barrier=barrier, imbalance=by_group_imb),
        "straggler_groups": straggler_groups(barrier, by_group_imb),
        "clock": rk.select(
            "rank",
            pl.col("clock_offset_ns").alias("offset_ns"),
            pl.col("clock_residual_ns").alias("residual_ns"),
        ).sort("rank"),
    }
    t["ttft_requests"] = ttft_requests(b, breakdown=breakdown)
    t["ttft_by_bucket"] = ttft_by_bucket(t["ttft_requests"])
    notes = list(meta.pop("notes", []))
    if b is not None and b.height:
        known = set(rk.get_column("dp_group").drop_nulls().to_list())
        stray = sorted(set(b.get_column("dp_group").drop_nulls().to_list()) - known)
        # batches derived from the store's own step annotations name its one implicit group 0
        derived = "derived" in str(meta.get("batches_source") or "")
        if stray and (known or not derived):
            notes.append(
                f"the batches name DP groups {', '.join(map(str, stray[:8]))}{' …' if len(stray) > 8 else ''} "
                "that no rank of the store belongs to; their requests are left out of the imbalance analysis"
            )
    incomplete = inst.filter(~pl.col("complete")).get_column("instance").n_unique()
    if incomplete:
        notes.append(
            f"{incomplete} collective instances miss some ranks and were left out of the barrier analysis"
        )
    findings = rank_findings(t, rk, meta)
    return Diagnosis(tables=t, findings=findings, notes=notes, meta=meta)


def _with_phase(breakdown: pl.DataFrame, meta: dict[str, Any]) -> pl.DataFrame:
    """The step breakdown with each step's phase (prefill, decode, mixed, training; ``unknown``
    where the trace does not say), so every per-step row names what it measured."""
    steps = steps_of(meta).select(pl.col("step").cast(breakdown.schema["step"]), "phase")
    out = breakdown.join(steps, on="step", how="left") if steps.height else breakdown
    phase = pl.col("phase").fill_null("unknown") if "phase" in out.columns else pl.lit("unknown")
    return out.with_columns(phase.alias("phase"))
