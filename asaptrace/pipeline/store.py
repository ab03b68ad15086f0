"""The pipeline's first room: ingest → enrich → store, and store → diagnose.

:func:`build_store` writes the store once: the ingest driver writes each file's raw parts into the
new store's temporary directory and they are enriched there before the single commit, streaming a
group of ranks at a time (:mod:`asaptrace.enrich.streaming`). Every layer is imported by the call
that needs it, so importing this module stays cheap (``asaptrace ingest`` starts reading files before
numpy, pyarrow and polars are imported).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asaptrace.userfiles import check_output_dir

if TYPE_CHECKING:
    from collections.abc import Sequence

    import polars as pl

    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.enrich.streaming import EnrichProgress
    from asaptrace.enrich.taxonomy import Profile, Taxonomy
    from asaptrace.enrich.topology import ParallelConfig
    from asaptrace.executors import Executor
    from asaptrace.store import TraceStore

#: The tables of a store, in the order :func:`read_tables` reads them.
TABLES = ("events", "args", "flows", "streams", "ranks", "batches")


def open_store(path: str | Path) -> TraceStore:
    """The store at ``path``, checked as it is opened (:meth:`asaptrace.store.TraceStore.open`)."""
    from asaptrace.store import TraceStore

    return TraceStore.open(path)


def read_ahead(
    paths: Sequence[str | Path], *, max_bytes: int, budget: int | None = None, enrich: bool = True
) -> int:
    """Start reading, hashing and scanning the first Kineto files of ``paths`` on a thread while
    the caller imports the rest of the ingest (:mod:`asaptrace.ingest.kineto.prefetch`; the
    standard library only), within ``budget`` bytes (the ingest's memory budget: a file over it
    is read in pieces, never whole, and so is a lone file over 128 MiB when the ingest
    ``enrich``-es); :func:`build_store` takes what was read. Returns the files queued."""
    from asaptrace.ingest.kineto import prefetch

    return prefetch.start(paths, max_bytes=max_bytes, budget=budget, enrich=enrich)


def read_tables(store: TraceStore) -> dict[str, pl.DataFrame]:
    """Every table of ``store`` in memory (for small stores and in-memory re-enrichment)."""
    return {name: store.read(name) for name in TABLES}


def build_store(
    paths: list[Path],
    out: Path,
    *,
    overwrite: bool = False,
    enrich: bool = True,
    parallel: ParallelConfig | str | None = None,
    taxonomy: Profile | str | Path | None = None,
    batches: pl.DataFrame | str | Path | None = None,
    enrich_progress: EnrichProgress | None = None,
    max_bytes: int | None = None,
    rank_map: dict[str, int] | str | Path | None = None,
    executor: str | Executor | None = None,
    ray_address: str | None = None,
    **ingest_options: Any,
) -> TraceStore:
    """Ingest ``paths`` and enrich them into the store ``out`` — all or nothing, written once.

    ``ingest_options`` go to :func:`asaptrace.ingest.driver.ingest_paths` (``jobs``, ``options``,
    ``rank_from``, ``format``, ``progress``, ``on_stale``), with ``max_bytes`` (the largest file,
    inflated), ``rank_map`` (a file of ``<trace file> <rank>`` lines, or its mapping) and ``executor``
    (a name, on ``ray_address`` for ``ray``, or an executor). The enrichment options are read and
    validated before any trace is, so a bad option, a bad trace or a failure while enriching
    leaves nothing at ``out`` (and an existing store there untouched). ``enrich_progress(phase,
    done, total)`` is called as the enrichment goes (see :data:`EnrichProgress`).
    """
    from asaptrace.enrich.batches import read_batches_sidecar
    from asaptrace.enrich.streaming import ingest_enrichment
    from asaptrace.enrich.taxonomy import load_profile
    from asaptrace.enrich.topology import parse_parallel
    from asaptrace.executors import make_executor
    from asaptrace.ingest.base import IngestOptions
    from asaptrace.ingest.driver import hold_budget, ingest_paths
    from asaptrace.ingest.ranks import load_rank_map
    from asaptrace.store import check_store_target

    if max_bytes is not None:
        ingest_options["options"] = IngestOptions(max_decompressed_bytes=max_bytes)
    said = {"parallel": parallel, "batches": batches, "taxonomy": taxonomy}  # as typed: to rebuild the store
    ingest_options["options_said"] = {
        k: str(Path(v).absolute()) if Path(v).is_file() else str(v)
        for k, v in said.items()
        if isinstance(v, (str, Path))
    }
    ingest_options["rank_map"] = load_rank_map(rank_map) if isinstance(rank_map, (str, Path)) else rank_map
    if isinstance(executor, str):  # a bad name or a stray address fails before any file is read
        executor = make_executor(executor, jobs=ingest_options.get("jobs"), address=ray_address)
    if not enrich:
        return ingest_paths(paths, out, overwrite=overwrite, executor=executor, **ingest_options)
    out = check_store_target(out, overwrite=overwrite)
    par = parse_parallel(parallel) if isinstance(parallel, str) else parallel
    profile = load_profile(taxonomy) if isinstance(taxonomy, (str, Path)) else taxonomy
    sidecar = read_batches_sidecar(batches) if isinstance(batches, (str, Path)) else batches

    finish, after_read = ingest_enrichment(
        parallel=par, taxonomy=profile, batches=sidecar, progress=enrich_progress, budget=hold_budget()
    )
    return ingest_paths(
        paths,
        out,
        overwrite=overwrite,
        finish=finish,
        after_read=after_read,
        executor=executor,
        **ingest_options,
    )


def enrich_store(
    store: TraceStore,
    out: Path | None = None,
    *,
    parallel: ParallelConfig | str | None = None,
    taxonomy: Taxonomy | Profile | str | Path | None = None,
    batches: pl.DataFrame | str | Path | None = None,
    overwrite: bool = False,
) -> TraceStore:
    """Enrich ``store`` (streaming, a group of ranks at a time) and write the result atomically: in place
    when ``out`` is None; a store already at another ``out`` is replaced only with ``overwrite``."""
    from asaptrace.enrich.streaming import enrich_streaming
    from asaptrace.store import StoreWriter

    target = Path(out) if out is not None else store.path
    in_place = target.resolve() == store.path.resolve() or overwrite
    meta = {k: v for k, v in store.meta.items() if k not in ("format_version", "asaptrace_version")}
    with StoreWriter(target, overwrite=in_place) as writer:
        meta.update(enrich_streaming(store, writer, parallel=parallel, taxonomy=taxonomy, batches=batches))
        writer.write_table("streams", store.read("streams").to_arrow())
        return writer.commit(meta)


def diagnose_store(
    store: TraceStore,
    *,
    parallel: ParallelConfig | str | None = None,
    batches: pl.DataFrame | str | Path | None = None,
    taxonomy: Taxonomy | Profile | str | Path | None = None,
) -> Diagnosis:
    """Diagnose a store. It is read lazily; when it was never enriched, or when an option overrides
    the parallel layout, the batches or the taxonomy, it is enriched in memory first (the store on
    disk is not modified). Without options, the diagnosis is kept beside the store and read back
    the next time while the store and asaptrace are the same (:mod:`asaptrace.pipeline.cache`)."""
    from asaptrace.analyze.diagnosis import diagnose, store_context
    from asaptrace.enrich.frames import enrich_frames
    from asaptrace.pipeline.cache import read_cached, write_cached

    in_memory = not (store.meta.get("enriched") and parallel is None and batches is None and taxonomy is None)
    if not in_memory:
        cached = read_cached(store)
        if cached is not None:
            return cached
        events, ranks, bt, m = store.events(), store.ranks(), store.scan("batches"), store.meta
    else:
        result = enrich_frames(read_tables(store), parallel=parallel, taxonomy=taxonomy, batches=batches)
        events, ranks, bt = (result.tables[n].lazy() for n in ("events", "ranks", "batches"))
        m = {**store.meta, **result.meta}
    diag = diagnose(events, ranks, batches=bt, meta=store_context(str(store.path), m, in_memory=in_memory))
    if not in_memory:
        from asaptrace.info import store_info as describe

        write_cached(store, diag, describe(store))
    return diag


def store_info(store: TraceStore) -> dict[str, Any]:
    """What ``store`` holds (:func:`asaptrace.info.store_info`; ``asaptrace info --json``), read
    from beside the store when its diagnosis was kept there and is still true
    (:mod:`asaptrace.pipeline.cache`), else worked out (0.3–0.7 s of scanning at 384 ranks)."""
    from asaptrace.info import store_info as describe
    from asaptrace.pipeline.cache import read_cached_info

    cached = read_cached_info(store)
    return cached if cached is not None else describe(store)


def analyze_store(
    store_path: str | Path,
    *,
    csv: str | Path | None = None,
    parallel: ParallelConfig | str | None = None,
    batches: pl.DataFrame | str | Path | None = None,
    taxonomy: Taxonomy | Profile | str | Path | None = None,
) -> tuple[Diagnosis, list[Path]]:
    """Open and diagnose a store (see :func:`diagnose_store`); with ``csv``, every table is also
    written as ``csv/<table>.csv`` — that folder checked before the work, not after it. Returns
    the diagnosis and the CSV files written."""
    if csv is not None:
        check_output_dir(csv, what="folder of CSV tables")
    diag = diagnose_store(open_store(store_path), parallel=parallel, batches=batches, taxonomy=taxonomy)
    return diag, (write_tables_csv(diag.tables, csv) if csv is not None else [])


def write_tables_csv(tables: dict[str, pl.DataFrame], folder: str | Path) -> list[Path]:
    """Write every table as ``folder/<table>.csv``, all or nothing (:func:`asaptrace.views.files.write_tables`)."""
    from asaptrace.views.files import write_tables

    return write_tables(tables, folder, "csv")
