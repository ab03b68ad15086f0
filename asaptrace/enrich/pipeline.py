"""Enrich a store: taxonomy → segmentation → topology → clock alignment → batches.

:func:`enrich_frames` does the work on in-memory tables (so ``asaptrace analyze --parallel …`` can
re-enrich without touching the store); :func:`enrich_store` reads a store, enriches it and
rewrites it atomically through :class:`~asaptrace.store.StoreWriter`.

Enrichment is idempotent: the clock offsets a previous run applied are undone first (recorded
times = aligned times + ``clock_offset_ns``), so enriching twice gives the same store.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.enrich.batches import annotated_dp_groups, batches_from_annotations, read_batches_sidecar
from asaptrace.enrich.clock import apply_offsets, estimate_offsets
from asaptrace.enrich.instances import match_instances
from asaptrace.enrich.segment import fill_from_structure, segment
from asaptrace.enrich.taxonomy import Profile, Taxonomy, classify, load_profile, select_taxonomy
from asaptrace.enrich.topology import ParallelConfig, assign_topology, parse_parallel
from asaptrace.errors import StoreError
from asaptrace.ingest.driver import ingest_paths
from asaptrace.schema import Kind
from asaptrace.store import StoreWriter, TraceStore

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
    ranks = (
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

    batch_table, batch_source = _batches(tables.get("batches"), spans, args, batches)

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
    target = pl.col("is_device") & (pl.col("kind").cast(pl.String) != Kind.ANNOTATION)
    names = events.filter(target).get_column("name").cast(pl.String).unique().drop_nulls().to_list()
    context_rules = [r for r in tax.rules if r.context is not None]
    by_context = {n for n in names if any(r.match.search(n) for r in context_rules)}
    plain = {n: k for n in names if n not in by_context and (k := tax.kind_of(n)) is not None}
    name = pl.col("name").cast(pl.String)
    rule_kind = (
        name.replace_strict(plain, default=None, return_dtype=pl.String) if plain else pl.lit(None, pl.String)
    )
    out = events.with_columns(_rule_kind=pl.when(target).then(rule_kind))
    if by_context:
        sub = out.with_row_index("_row").filter(target & name.is_in(list(by_context)))
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


def read_tables(store: TraceStore) -> dict[str, pl.DataFrame]:
    return {name: store.read(name) for name in TABLES}


def enrich_store(
    store: TraceStore,
    out: Path | None = None,
    *,
    parallel: ParallelConfig | str | None = None,
    taxonomy: Taxonomy | Profile | str | Path | None = None,
    batches: pl.DataFrame | str | Path | None = None,
    overwrite: bool = False,
) -> TraceStore:
    """Enrich ``store`` and write the result atomically (in place when ``out`` is None; a store
    already at another ``out`` is replaced only with ``overwrite``)."""
    result = enrich_frames(read_tables(store), parallel=parallel, taxonomy=taxonomy, batches=batches)
    target = Path(out) if out is not None else store.path
    in_place = target.resolve() == store.path.resolve() or overwrite
    meta = {k: v for k, v in store.meta.items() if k not in ("format_version", "asaptrace_version")}
    meta.update(result.meta)
    with StoreWriter(target, overwrite=in_place) as writer:
        t = result.tables
        events = t["events"]
        for (rank,), part in events.sort("rank", "eid").group_by("rank", maintain_order=True):
            writer.write_part("events", f"{int(rank):05d}", part.to_arrow())  # type: ignore[call-overload]
        for name in ("args", "flows"):
            if t[name].height:
                writer.write_part(name, "00000", t[name].to_arrow())
        for name in ("ranks", "streams", "batches"):
            writer.write_table(name, t[name].to_arrow())
        return writer.commit(meta)


def build_store(
    paths: list[Path],
    out: Path,
    *,
    overwrite: bool = False,
    enrich: bool = True,
    parallel: str | None = None,
    taxonomy: str | Path | None = None,
    batches: str | Path | None = None,
    **ingest_options: Any,
) -> TraceStore:
    """Ingest ``paths`` and enrich the result into ``out`` — all or nothing.

    The enrichment options are read and validated before any trace is, and the raw store is built
    in a hidden temporary directory, so a bad option, a bad trace or a failure while enriching
    leaves neither a raw nor a half-enriched store at ``out``.
    """
    if not enrich:
        return ingest_paths(paths, out, overwrite=overwrite, **ingest_options)
    out = Path(out)
    if out.exists() and not overwrite:
        raise StoreError("already exists; pass --force to replace it", path=out)
    parsed_parallel = parse_parallel(parallel) if isinstance(parallel, str) else parallel
    profile = load_profile(taxonomy) if isinstance(taxonomy, (str, Path)) else taxonomy
    sidecar = read_batches_sidecar(batches) if isinstance(batches, (str, Path)) else batches
    raw = out.parent / f".{out.name}.raw-{uuid.uuid4().hex[:8]}"
    try:
        store = ingest_paths(paths, raw, **ingest_options)
        return enrich_store(
            store, out, parallel=parsed_parallel, taxonomy=profile, batches=sidecar, overwrite=overwrite
        )
    finally:
        shutil.rmtree(raw, ignore_errors=True)
