"""Enrichment on in-memory tables: taxonomy → segmentation → topology → clock alignment → batches.

Pure frame → frame functions; reading and writing stores is :mod:`asaptrace.enrich.streaming`'s job.

:func:`enrich_frames` enriches whole tables at once. The same steps also run on a group of ranks
at a time (any number, from one to all: every step works per rank inside the frame), so a store
can be enriched while streaming its parts with memory bounded by the group:
:func:`segment_ranks` (taxonomy, segmentation, kinds), :func:`facts_of` (what the cross-rank steps
need from the group: its kinds, its collective kernels, its annotation spans, its step gaps),
:func:`decide` (topology, clock offsets, batches — from the facts of every rank) and
:func:`finish_ranks` (the group's final events and flows). Both ways give the same tables.

Enrichment is idempotent: the clock offsets a previous run applied are undone first (recorded
times = aligned times + ``clock_offset_ns``), so enriching twice gives the same store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.enrich.batches import annotated_dp_groups, batches_from_annotations, read_batches_sidecar
from asaptrace.enrich.clock import apply_offsets, estimate_offsets
from asaptrace.enrich.host_chunks import HostPass
from asaptrace.enrich.instances import match_instances
from asaptrace.enrich.phases import batches_from_step_names, read_step_names, step_table, steps_json
from asaptrace.enrich.segment import SegmentNotes, segment
from asaptrace.enrich.structure import (
    StepPlan,
    fill_from_structure,
    note_layers,
    note_steps,
    plan_steps,
    ranks_without,
    step_gaps,
)
from asaptrace.enrich.taxonomy import Profile, Taxonomy, classify, select_taxonomy
from asaptrace.enrich.topology import ParallelConfig, assign_topology, parse_parallel
from asaptrace.schema import Kind

TABLES = ("events", "args", "flows", "streams", "ranks", "batches")


@dataclass
class Enriched:
    """The enriched tables and what enrichment found (goes into meta.json)."""

    tables: dict[str, pl.DataFrame]
    meta: dict[str, Any] = field(default_factory=dict)


def _as_taxonomy(names: list[str], taxonomy: Taxonomy | Profile | str | Path | None) -> Taxonomy:
    if isinstance(taxonomy, Taxonomy):
        return taxonomy
    return select_taxonomy(names, user=taxonomy)


def _as_parallel(parallel: ParallelConfig | str | None) -> ParallelConfig | None:
    return parse_parallel(parallel) if isinstance(parallel, str) else parallel


def enrich_frames(
    tables: dict[str, pl.DataFrame],
    *,
    parallel: ParallelConfig | str | None = None,
    taxonomy: Taxonomy | Profile | str | Path | None = None,
    batches: pl.DataFrame | str | Path | None = None,
) -> Enriched:
    """Enrich in-memory store tables (see the module docstring); inputs are not modified."""
    events, args, ranks = tables["events"], tables["args"], tables["ranks"]
    flows = tables.get("flows")
    # undo a previous alignment so estimates always start from the recorded times
    old = ranks.select("rank", "clock_offset_ns").rename({"clock_offset_ns": "offset_ns"})
    events = apply_offsets(events, old, sign=+1)
    if flows is not None and flows.height:
        flows = apply_offsets(flows, old, sign=+1)

    names = events.get_column("name").cast(pl.String).unique().drop_nulls().to_list()
    tax = _as_taxonomy(names, taxonomy)

    events, spans, seg_notes = segment(events, args, tax)
    events = _classify(events, tax)
    events = fill_from_structure(events, seg_notes)

    par = _as_parallel(parallel)
    ranks, parallel_meta = assign_topology(
        ranks, events, annotated_dp=annotated_dp_groups(spans, args), parallel=par
    )

    instances = match_instances(events, ranks)
    offsets, clock_notes = estimate_offsets(instances, ranks.get_column("rank").to_list())
    events = apply_offsets(events, offsets)
    if flows is not None and flows.height:
        flows = apply_offsets(flows, offsets)
    ranks = _with_offsets(ranks, offsets)

    batch_table, batch_source = _batches(tables.get("batches"), spans, args, batches)
    steps, batch_table, batch_source = _steps_and_batches(
        _steps_seen(events), _span_names(spans), tax, _training(events, tax), ranks, batch_table, batch_source
    )
    seg_notes.steps = steps_json(steps)

    out = dict(tables)
    out.update(events=events.drop("context"), ranks=ranks, batches=batch_table)
    if flows is not None:
        out["flows"] = flows
    meta = {
        "enriched": True,
        "taxonomy_profile": tax.label,
        "taxonomy": tax.to_json(),
        "parallel": parallel_meta,
        "segmentation": seg_notes.to_json(),
        "clock": clock_notes.to_json(),
        "batches_source": batch_source,
    }
    return Enriched(tables=out, meta=meta)


def _classify(events: pl.DataFrame, tax: Taxonomy) -> pl.DataFrame:
    """Device events (not annotations) get the kind of the first matching rule, else keep theirs.

    Rules are applied to unique names; only names that a context rule could match are looked up
    per (name, annotation context).
    """
    # kind and name are categorical in raw frames: compared and mapped as they are (a cast to
    # strings materialises every row), only the distinct names become strings
    target = pl.col("is_device") & (pl.col("kind") != Kind.ANNOTATION.value)
    names = events.filter(target).get_column("name").unique().cast(pl.String).drop_nulls().to_list()
    context_rules = [r for r in tax.rules if r.context is not None]
    by_context = {n for n in names if any(r.match.search(n) for r in context_rules)}
    plain = {n: k for n in names if n not in by_context and (k := tax.kind_of(n)) is not None}
    rule_kind = (
        pl.col("name").replace_strict(plain, default=None, return_dtype=pl.String)
        if plain
        else pl.lit(None, pl.String)
    )
    name = pl.col("name").cast(pl.String)
    out = events.with_columns(_rule_kind=pl.when(target).then(rule_kind))
    if by_context:
        sub = out.with_row_index("_row").filter(target & pl.col("name").is_in(list(by_context)))
        pairs = sub.select(name.alias("_n"), pl.col("context").fill_null("").alias("_c")).unique()
        kinds = classify(tax, pairs.get_column("_n").to_list(), pairs.get_column("_c").to_list())
        lookup = pairs.with_columns(_k=pl.Series(kinds, dtype=pl.String))
        hit = (
            sub.with_columns(_n=name, _c=pl.col("context").fill_null(""))
            .join(lookup, on=["_n", "_c"], how="left")
            .select("_row", "_k")
        )
        fill = pl.repeat(None, out.height, dtype=pl.String, eager=True).scatter(
            hit.get_column("_row"), hit.get_column("_k")
        )
        out = out.with_columns(_rule_kind=pl.coalesce(fill, "_rule_kind"))
    return out.with_columns(kind=pl.coalesce("_rule_kind", pl.col("kind").cast(pl.String))).drop("_rule_kind")


def _batches(
    existing: pl.DataFrame | None,
    spans: pl.DataFrame,
    args: pl.DataFrame,
    sidecar: pl.DataFrame | str | Path | None,
) -> tuple[pl.DataFrame, str]:
    if isinstance(sidecar, pl.DataFrame):
        return sidecar, "given"
    if sidecar is not None:
        return read_batches_sidecar(sidecar), f"sidecar:{Path(sidecar).name}"
    from_ann = batches_from_annotations(spans, args)
    if from_ann.height:
        return from_ann, "annotations"
    if existing is not None and existing.height:
        return existing, "store"
    return from_ann, "none"


def _steps_seen(events: pl.DataFrame) -> pl.DataFrame:
    """The distinct steps of a group's device work (the run's steps table lists each)."""
    return events.filter(pl.col("is_device") & pl.col("step").is_not_null()).select("step").unique()


def _span_names(spans: pl.DataFrame) -> pl.DataFrame:
    """The step spans (rank, eid, own_step, is_step_span, step_name: the name of a step span)."""
    return spans.select(
        "rank",
        "eid",
        "own_step",
        "is_step_span",
        pl.when(pl.col("is_step_span")).then(pl.col("name")).alias("step_name"),
    )


def _training(events: pl.DataFrame, tax: Taxonomy) -> bool:
    """Whether an event name of ``events`` is a training marker (taxonomy ``[[marker]]`` rules)."""
    if not any(m.phase == "training" for m in tax.markers):
        return False
    return _names_train(events.get_column("name").unique().cast(pl.String).drop_nulls().to_list(), tax)


def _names_train(names: list[str], tax: Taxonomy) -> bool:
    """Whether one of ``names`` is a training marker."""
    markers = [m.match for m in tax.markers if m.phase == "training"]
    return any(p.search(n) for n in names for p in markers)


def _steps_and_batches(
    seen: pl.DataFrame,
    spans: pl.DataFrame,
    tax: Taxonomy,
    training: bool,
    ranks: pl.DataFrame,
    batch_table: pl.DataFrame,
    batch_source: str,
) -> tuple[pl.DataFrame, pl.DataFrame, str]:
    """The steps table (:mod:`asaptrace.enrich.phases`) and, when nothing else gave batches, the
    batches the step annotations' names count (derived)."""
    named = spans.filter(pl.col("step_name").is_not_null()).select(
        "rank", pl.col("own_step").alias("step"), "step_name"
    )
    read = read_step_names(named.get_column("step_name").unique().to_list(), tax)
    named = named.join(read, on="step_name", how="inner")
    steps = step_table(seen.get_column("step").to_list(), named, training=training)
    if batch_source == "none" and named.height:
        dp = ranks.select("rank", pl.col("dp_group").fill_null(0))
        derived = batches_from_step_names(named, dict(dp.iter_rows()), dict(batch_table.schema))
        if derived.height:
            return (
                steps,
                derived,
                "annotation names (derived: requests of equal length from each step's totals)",
            )
    return steps, batch_table, batch_source


def _with_offsets(ranks: pl.DataFrame, offsets: pl.DataFrame) -> pl.DataFrame:
    return (
        ranks.drop("clock_offset_ns", "clock_residual_ns")
        .join(
            offsets.select(
                "rank",
                pl.col("offset_ns").alias("clock_offset_ns"),
                pl.col("residual_ns").alias("clock_residual_ns"),
            ),
            on="rank",
            how="left",
        )
        .with_columns(pl.col("clock_offset_ns").fill_null(0))
    )


# ------------------------------------------------------------------------------ a group of ranks at a time
def taxonomy_for(names: list[str], taxonomy: Taxonomy | Profile | str | Path | None) -> Taxonomy:
    """The taxonomy for a run whose distinct event names (over every rank) are ``names``."""
    return _as_taxonomy(names, taxonomy)


def _recorded(frame: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """``frame``'s times as recorded: a previous alignment undone (nothing to undo in a new ingest,
    whose offsets are all 0: the frame is returned as it is, without a join per group)."""
    old = ranks.select("rank", "clock_offset_ns").rename({"clock_offset_ns": "offset_ns"})
    if not (old.get_column("offset_ns").fill_null(0) != 0).any():
        return frame
    return apply_offsets(frame, old, sign=+1)


@dataclass
class RankSegments:
    """A group of ranks' events with kinds and annotation step/layer, before the cross-rank fill."""

    events: pl.DataFrame
    spans: pl.DataFrame
    notes: SegmentNotes
    training: bool = False  # a training marker among the group's event names

    def only(self, ranks: list[int]) -> RankSegments:
        """The same, for ``ranks`` of the group only."""
        keep = pl.col("rank").is_in(ranks)
        return RankSegments(self.events.filter(keep), self.spans.filter(keep), self.notes, self.training)


def segment_ranks(
    events: pl.DataFrame,
    args: pl.DataFrame,
    ranks: pl.DataFrame,
    tax: Taxonomy,
    outside: HostPass | None = None,
) -> RankSegments:
    """Undo a previous alignment, segment from annotations, classify (a group of ranks' tables;
    ``outside``: a big rank's host rows kept out of them, :mod:`asaptrace.enrich.host_chunks`)."""
    ev, spans, notes = segment(_recorded(events, ranks), args, tax, outside)
    training = _training(ev, tax) or (outside is not None and _names_train(list(outside.chunks.names), tax))
    return RankSegments(_classify(ev, tax), spans, notes, training)


def fill_ranks(seg: RankSegments, plan: StepPlan | None) -> tuple[pl.DataFrame, SegmentNotes]:
    """Steps from gaps (by the run-wide ``plan``) and layers from comm order, for a group of ranks."""
    notes = SegmentNotes()
    return fill_from_structure(seg.events, notes, plan=plan, note_plan=False), notes


def stepless_gaps(seg: RankSegments) -> pl.DataFrame | None:
    """The idle gaps (rank, _gap) of the group's ranks without step annotations (input of the
    run-wide step plan); None when every rank of the group has steps."""
    without = ranks_without(seg.events, "step")
    return step_gaps(seg.events, without).select("rank", "ts_ns", "dur_ns", "_gap") if without.len() else None


_COMM = (Kind.DISPATCH, Kind.COMBINE, Kind.COLLECTIVE)


@dataclass
class RankFacts:
    """The little a cross-rank step needs from a group of ranks (kept for every rank while streaming)."""

    kinds: pl.DataFrame  # distinct (rank, is_device, kind) of device events: roles
    comm: pl.DataFrame  # device collective kernels: instances for clock alignment
    spans: (
        pl.DataFrame
    )  # annotation spans (rank, eid, own_step, is_step_span, step_name): dp groups, batches, phases
    span_args: pl.DataFrame  # the args rows of those spans (rank, eid, extra), where extra is set
    segment_notes: SegmentNotes
    fill_notes: SegmentNotes
    steps: pl.DataFrame  # the distinct steps of the group's device work
    training: bool  # a training marker among the group's event names


def facts_of(
    seg: RankSegments, filled: pl.DataFrame, fill_notes: SegmentNotes, args: pl.DataFrame
) -> RankFacts:
    """The group's :class:`RankFacts` (``filled`` from :func:`fill_ranks`, ``args`` its args rows)."""
    kind = pl.col("kind").cast(pl.String)
    dev = filled.filter(pl.col("is_device"))
    spans = _span_names(seg.spans)
    return RankFacts(
        kinds=dev.select("rank", "is_device", kind.alias("kind")).unique(),
        comm=dev.filter(kind.is_in(_COMM)).select(
            "rank",
            "step",
            "layer",
            "micro_batch",
            "is_device",
            "kind",  # categorical, as read: match_instances casts them (a string per kernel of
            "name",  # every rank held until the decision costs 30 MB on 32 ranks × 10 steps)
            "ts_ns",
            "dur_ns",
        ),
        spans=spans,
        # what the decision reads of them (dp groups and batches: the annotation args' "extra")
        span_args=args.select("rank", "eid", "extra")
        .filter(pl.col("extra").is_not_null())
        .join(spans, on=["rank", "eid"], how="semi"),
        segment_notes=seg.notes,
        fill_notes=fill_notes,
        steps=_steps_seen(filled),
        training=seg.training,
    )


@dataclass
class Decision:
    """What enrichment decided over every rank: the new ranks table, batches, and meta."""

    ranks: pl.DataFrame
    offsets: pl.DataFrame
    batches: pl.DataFrame
    meta: dict[str, Any]


def plan_of(gaps: list[pl.DataFrame]) -> StepPlan | None:
    """The run-wide step plan from the gaps of every step-less rank (None: every rank has steps)."""
    return plan_steps(pl.concat(gaps)) if gaps else None


def decide(
    facts: list[RankFacts],
    ranks: pl.DataFrame,
    tax: Taxonomy,
    plan: StepPlan | None,
    *,
    existing_batches: pl.DataFrame | None = None,
    parallel: ParallelConfig | str | None = None,
    batches: pl.DataFrame | str | Path | None = None,
) -> Decision:
    """Topology, clock offsets and batches of the run from the facts of every rank (given group by
    group, in any order: each table is put back in rank order, a rank's rows in their own order)."""
    seg = SegmentNotes(
        step_source="annotations"
        if any(f.segment_notes.step_source == "annotations" for f in facts)
        else "none",
        layer_source="annotations"
        if any(f.segment_notes.layer_source == "annotations" for f in facts)
        else "none",
    )
    seg.notes += list(dict.fromkeys(n for f in facts for n in f.segment_notes.notes))  # each once
    if plan is not None:
        note_steps(seg, plan)
    if any(f.fill_notes.layer_source == "comm_order" for f in facts):
        note_layers(seg)
    spans = _by_rank([f.spans for f in facts])
    span_args = _by_rank([f.span_args for f in facts])
    annotated = annotated_dp_groups(spans, span_args)
    new_ranks, parallel_meta = assign_topology(
        ranks, _by_rank([f.kinds for f in facts]), annotated_dp=annotated, parallel=_as_parallel(parallel)
    )
    comm = _by_rank([f.comm for f in facts])
    instances = match_instances(comm, new_ranks)
    offsets, clock_notes = estimate_offsets(instances, new_ranks.get_column("rank").to_list())
    batch_table, batch_source = _batches(existing_batches, spans, span_args, batches)
    seen = pl.concat([f.steps for f in facts]) if facts else pl.DataFrame(schema={"step": pl.Int32})
    steps, batch_table, batch_source = _steps_and_batches(
        seen, spans, tax, any(f.training for f in facts), new_ranks, batch_table, batch_source
    )
    seg.steps = steps_json(steps)
    meta = {
        "enriched": True,
        "taxonomy_profile": tax.label,
        "taxonomy": tax.to_json(),
        "parallel": parallel_meta,
        "segmentation": seg.to_json(),
        "clock": clock_notes.to_json(),
        "batches_source": batch_source,
    }
    return Decision(ranks=_with_offsets(new_ranks, offsets), offsets=offsets, batches=batch_table, meta=meta)


def finish_ranks(
    filled: pl.DataFrame, flows: pl.DataFrame, old_ranks: pl.DataFrame, offsets: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A group of ranks' final events (aligned, sorted by rank and eid) and flows (re-aligned)."""
    events = apply_offsets(filled, offsets).drop("context")
    if not _in_order(events):  # a sort copies every column: skipped when the rows are in order
        events = events.sort("rank", "eid")
    if flows.height:
        flows = apply_offsets(_recorded(flows, old_ranks), offsets)
    return events, flows


def _in_order(events: pl.DataFrame) -> bool:
    """Whether the rows are sorted by (rank, eid) already."""
    if events.height < 2:
        return True
    dr, de = pl.col("rank").diff(), pl.col("eid").diff()
    ok = ((dr > 0) | ((dr == 0) & (de >= 0))).all() & (
        pl.col("rank").null_count() + pl.col("eid").null_count() == 0
    )
    return bool(events.select(ok.alias("ok")).item())


def _by_rank(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Concatenated and in rank order, each rank's rows in their own order (a stable sort, only
    when the groups came out of order: a copy of every rank's facts is not free)."""
    frame = pl.concat(frames, how="vertical_relaxed")
    return frame if frame.get_column("rank").is_sorted() else frame.sort("rank", maintain_order=True)
