"""The one place that composes the layers: ingest → enrich → store → diagnose; store → replay →
store; the serving sweep; report, export and compare.

Every face (the CLI, a notebook, the report, the dashboard and the exporter) calls these; the layers
below stay pure (``enrich`` maps frames to frames, ``analyze.diagnosis.diagnose`` maps tables to a
Diagnosis, ``replay`` maps a workload to a result) and never import one another upwards.

**The store is written once.** :func:`build_store` lets the ingest driver write each file's raw
parts into the new store's temporary directory, then enriches them there before the single commit,
streaming a group of ranks at a time (:mod:`asaptrace.enrich.streaming`).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from asaptrace.errors import OutputError, UsageError
from asaptrace.ingest.source import DEFAULT_MAX_DECOMPRESSED
from asaptrace.memory import DEFAULT_BUDGET
from asaptrace.userfiles import check_output_dir, check_output_file, write_atomic

if TYPE_CHECKING:  # every layer is imported by the calls that need it: importing this module is cheap
    import polars as pl

    from asaptrace.advise import Advice
    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.enrich.streaming import EnrichProgress
    from asaptrace.enrich.taxonomy import Profile, Taxonomy
    from asaptrace.enrich.topology import ParallelConfig
    from asaptrace.executors import Executor
    from asaptrace.info import store_info
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.whatif.run import ReplayResult
    from asaptrace.replay.whatif.sweep_result import SweepResult
    from asaptrace.report.sections import Section
    from asaptrace.store import TraceStore
    from asaptrace.synth import load_config as synth_config
    from asaptrace.synth import presets as synth_presets
    from asaptrace.synth import synthesize

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_DECOMPRESSED",
    "advise_store",
    "analyze_store",
    "build_store",
    "comparability_of",
    "compare_diagnoses",
    "compare_stores",
    "diagnose_store",
    "enrich_store",
    "export_store",
    "open_store",
    "policy_catalogue",
    "read_ahead",
    "read_tables",
    "replay_store",
    "report_format",
    "report_store",
    "store_info",
    "sweep",
    "synth_config",
    "synth_presets",
    "synthesize",
    "timeline_of",
    "write_tables_csv",
]

TABLES = ("events", "args", "flows", "streams", "ranks", "batches")
#: A layer's own function a face calls as it is, imported on first use (:func:`__getattr__`)
FORWARDED = {
    "store_info": ("asaptrace.info", "store_info"),  # what a store holds (``asaptrace info --json``)
    "synth_presets": ("asaptrace.synth", "presets"),  # name → what the preset simulates
    "synth_config": ("asaptrace.synth", "load_config"),  # a preset + a TOML + overrides
    "synthesize": ("asaptrace.synth", "synthesize"),  # a synthetic run's traces and truth.json
}


def __getattr__(name: str) -> Any:
    """The names of :data:`FORWARDED`, imported on first use: importing this module stays cheap
    (``asaptrace ingest`` starts reading files before numpy, pyarrow and polars are imported)."""
    if name in FORWARDED:
        module, attr = FORWARDED[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_store(path: str | Path) -> TraceStore:
    """The store at ``path``, checked as it is opened (:meth:`asaptrace.store.TraceStore.open`)."""
    from asaptrace.store import TraceStore

    return TraceStore.open(path)


def read_ahead(paths: Sequence[str | Path], *, max_bytes: int) -> int:
    """Start reading, hashing and scanning the first Kineto files of ``paths`` on a thread while
    the caller imports the rest of the ingest (:mod:`asaptrace.ingest.kineto.prefetch`; the
    standard library only); :func:`build_store` takes what was read. Returns the files queued."""
    from asaptrace.ingest.kineto import prefetch

    return prefetch.start(paths, max_bytes=max_bytes)


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
    disk is not modified)."""
    from asaptrace.analyze.diagnosis import diagnose, store_context
    from asaptrace.enrich.frames import enrich_frames

    in_memory = not (store.meta.get("enriched") and parallel is None and batches is None and taxonomy is None)
    if not in_memory:
        events, ranks, bt, m = store.events(), store.ranks(), store.scan("batches"), store.meta
    else:
        result = enrich_frames(read_tables(store), parallel=parallel, taxonomy=taxonomy, batches=batches)
        events, ranks, bt = (result.tables[n].lazy() for n in ("events", "ranks", "batches"))
        m = {**store.meta, **result.meta}
    return diagnose(events, ranks, batches=bt, meta=store_context(str(store.path), m, in_memory=in_memory))


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


# --------------------------------------------------------------------------------------------- replay
def replay_store(
    store_path: str | Path,
    policy: str = "asap",
    *,
    params: dict[str, Any] | None = None,
    costs: CostModel | str | Path | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    attribute: bool = True,
    split: str | None = None,
    vary: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    executor: str = "local",
    jobs: int = 1,
    ray_address: str | None = None,
    save_costs: str | Path | None = None,
) -> ReplayResult:
    """Replay a measured store under ``policy``: open → extract the workload → replay → (write).

    See :mod:`asaptrace.replay.whatif.run` for what the replay does and its JSON form; with ``out`` the
    replay is written as a store in the canonical schema (atomically), so every analysis, report
    and export works on it as on a measured run. ``split="auto"`` first replays every split of the
    store's device total (:func:`asaptrace.replay.whatif.explore.search_splits`) and replays the best;
    each ``vary`` spec (``KNOB=V1,V2``) re-runs the what-if per value (the range, a tornado).
    The splits and the values are independent replays, one task each on ``executor``
    (:func:`~asaptrace.executors.resolve_executor`: ``local`` with ``jobs`` processes, or
    ``ray`` on ``ray_address`` / a local instance); the result does not depend on it.
    ``progress`` is told each stage as it starts. ``save_costs``: the cost model used, with its
    fit quality, written there as TOML (for ``--costs``).
    """
    from asaptrace.executors import resolve_executor
    from asaptrace.replay.whatif.explore import parse_vary, replay_explored
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.run import save_result_costs
    from asaptrace.store import check_store_target

    t0 = time.perf_counter()
    specs = [parse_vary(v) for v in vary]  # a bad spec fails before any simulation
    if split not in (None, "auto"):
        raise UsageError(f"--split takes auto, not {split!r}")
    if out is not None:
        check_store_target(out, overwrite=overwrite)
    runner = resolve_executor(executor, jobs=jobs, address=ray_address)  # a bad name fails here too
    (progress or (lambda _m: None))("extracting the workload")
    # the coupled replay re-runs what was measured, whatever its phase (a consistency check, on
    # a training run too); every other policy is a what-if of MoE prefill: prefill steps only
    wl = extract_measured_work(open_store(store_path), prefill_only=policy != "coupled")
    result = replay_explored(
        wl,
        policy,
        params=dict(params or {}),
        costs=costs,
        attribute=attribute,
        split=split,
        specs=specs,
        executor=runner,
        source=str(store_path),
        out=out,
        overwrite=overwrite,
        progress=progress,
    )
    if save_costs is not None:
        save_result_costs(result, save_costs)
    return replace(result, seconds=time.perf_counter() - t0)


def advise_store(
    store_path: str | Path | TraceStore,
    *,
    diagnosis: Diagnosis | None = None,
    costs: CostModel | str | Path | None = None,
    online: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Advice:
    """Diagnose a store, run every what-if that applies to it at its best setting, and rank them
    (:func:`asaptrace.advise.advise`); ``online`` adds the SLO sweep of the same candidates on a
    scenario fitted to the store (:func:`asaptrace.advise.online.advise_online`)."""
    from asaptrace.advise import advise_store_workload
    from asaptrace.info import deployment_phrase, not_prefill_reason
    from asaptrace.store import TraceStore

    store = store_path if isinstance(store_path, TraceStore) else open_store(store_path)
    label = store.path.name if isinstance(store_path, TraceStore) else str(store_path)
    diag = diagnosis or diagnose_store(store)
    advice = advise_store_workload(store, diag, costs=costs, online=online, source=label, progress=progress)
    reason = not_prefill_reason(store.meta)  # e.g. a training or decode run: said in one line
    if reason and not all(w.reason and reason in w.reason for w in advice.whatifs):
        advice.notes.insert(0, reason)
    return replace(advice, deployment_phrase=deployment_phrase(store.meta.get("parallel")))


def policy_catalogue() -> list[dict[str, Any]]:
    """The one registry, for a face: each policy's family, online former, ablations and parameters
    (:func:`asaptrace.replay.policies.catalogue`), and the sweep's default policies."""
    from asaptrace.replay.policies import catalogue
    from asaptrace.replay.whatif.sweep import DEFAULT_POLICIES

    return [p | {"sweep_default": p["name"] in DEFAULT_POLICIES} for p in catalogue()]


# ------------------------------------------------------------------------ report / export / compare
def _waits(diag: Diagnosis) -> pl.DataFrame:
    """Barrier waits and (in a disaggregated run) receive waits: what the wait band and slices show."""
    t = diag.tables
    if t["receive_waits"].height == 0:
        return t["barrier_instances"]
    import polars as pl

    return pl.concat([t["barrier_instances"], t["receive_waits"]])


def timeline_of(
    store: TraceStore,
    diag: Diagnosis,
    *,
    step: int | None = None,
    layers: tuple[int, int] | None = None,
    rank_subset: Sequence[int] | None = None,
) -> pl.DataFrame:
    """The timeline's spans of one step and layer range (:func:`asaptrace.viz.timeline.timeline_spans`)
    with the store's barrier and receive waits in the wait band."""
    from asaptrace.viz.timeline import timeline_spans

    return timeline_spans(
        store.events(), store.ranks(), _waits(diag), step=step, layers=layers, rank_subset=rank_subset
    )


def report_store(
    store_path: Path,
    output: Path,
    *,
    command: str,
    fmt: Literal["html", "md"] | None = None,
    compare_path: Path | None = None,
    sections: Sequence[Section] = (),
    replays: Sequence[Path] = (),
    sweep_path: Path | None = None,
    store_label: str | None = None,
    path_root: Path | None = None,
    advice: bool = True,
) -> Path:
    """Diagnose a store (and optionally a second one to compare with) and write its report atomically.

    ``sections`` are added after the built-in ones (see asaptrace.report.sections); ``replays`` (stores
    written by :func:`replay_store`) each add a Replay section with the measured-vs-replayed
    comparison, ``sweep_path`` (a :func:`sweep` results JSON) a Sweep section
    (asaptrace.report.replay_sweep), ``advice`` the Advice section at the top (:func:`advise_store`).
    Every input is read before anything is written. ``fmt`` (None: what ``output``'s suffix says)
    must agree with the suffix, which is .html or .md (:func:`report_format`).
    """
    from asaptrace.replay.whatif.replayed_store import read_replay_block
    from asaptrace.replay.whatif.sweep_result import SweepResult
    from asaptrace.report.render import render_report
    from asaptrace.report.replay_sweep import replay_section, sweep_section
    from asaptrace.views.barriers import window_text
    from asaptrace.viz.timeline import worst_window

    fmt = report_format(output, fmt)
    output = check_output_file(output)
    store = open_store(store_path)
    replayed = [(Path(p), open_store(p)) for p in replays]
    blocks = [read_replay_block(s.meta, s.path) for _, s in replayed]
    results = SweepResult.read(sweep_path) if sweep_path is not None else None
    diag = diagnose_store(store)
    extra = [
        replay_section(i, p.name, block, compare_diagnoses(diag, diagnose_store(s)))
        for i, ((p, s), block) in enumerate(zip(replayed, blocks, strict=True), start=1)
    ]
    if results is not None:
        extra.append(sweep_section(results, Path(sweep_path).name))  # type: ignore[arg-type]
    if advice:
        from asaptrace.report.advice import advice_section

        extra.insert(0, advice_section(advise_store(store, diagnosis=diag).to_json()))
    sections = [*sections, *extra]
    other = None
    if compare_path is not None:  # refused, as by `compare`, when the runs have nothing in common
        other = (Path(compare_path).name, diagnose_store(open_store(compare_path)))
        _, refusal = comparability_of(diag, other[1], (Path(store_path).name, other[0]))
        if refusal is not None:
            raise UsageError(refusal)
    spans, window = None, ""
    if fmt == "html":
        step, layers = worst_window(diag.tables["barrier_by_rank_layer"], diag.tables["step_breakdown"])
        spans, window = timeline_of(store, diag, step=step, layers=layers), window_text(step, layers)
    text = render_report(
        diag,
        store.meta,
        command=command,
        store_label=store_label or Path(store_path).name,
        timeline_spans=spans,
        timeline_window=window,
        compare_with=other,
        sections=sections,
        path_root=path_root,
        fmt=fmt,
    )
    return write_atomic(output, text.encode("utf-8"))


#: A report file's suffix → its format.
REPORT_SUFFIXES: dict[str, Literal["html", "md"]] = {".html": "html", ".htm": "html", ".md": "md"}


def report_format(output: Path, fmt: str | None = None) -> Literal["html", "md"]:
    """The format of the report file ``output``: what its suffix says (.html, .htm, .md), which a
    given ``fmt`` must agree with — never HTML written into a .pdf, or Markdown into a .html."""
    suffix = Path(output).suffix.lower()
    said = REPORT_SUFFIXES.get(suffix)
    if said is None:
        what = f"not {suffix}" if suffix else "the name has no suffix"
        raise OutputError(f"a report is written as .html or .md ({what})", path=output)
    if fmt is not None and fmt != said:
        raise UsageError(f"--format {fmt} but the file name says {said} ({suffix})", path=output)
    return said


def export_store(
    store_path: Path, output: Path, *, fmt: str = "perfetto", per_rank: bool = False
) -> list[Path]:
    """Write a store's Chrome/Perfetto trace: one ``run.json.gz`` or, with ``per_rank``, a folder of one
    file per rank (the form ``asaptrace ingest`` reads back rank by rank).

    A disaggregated store (attention and expert ranks, e.g. a replayed ASAP run) also gets a counter
    track of the in-flight MoE items on the pool (:mod:`asaptrace.analyze.in_flight`)."""
    from asaptrace.analyze.in_flight import in_flight_moe_items
    from asaptrace.export import EXPORT_FORMATS, check_export_target, write_export

    exporter = EXPORT_FORMATS.get(fmt)
    check_export_target(output, per_rank=per_rank)
    store = open_store(store_path)
    in_flight = in_flight_moe_items(store.events(), store.ranks())
    trace = exporter(
        store.events(),
        store.ranks(),
        _waits(diagnose_store(store)),
        streams=store.read("streams"),
        counters=in_flight if in_flight.height else None,
        metadata={"store": Path(store_path).name},
    )
    return write_export(trace, output, per_rank=per_rank)


def compare_stores(
    a_path: Path, b_path: Path, *, force: bool = False
) -> tuple[dict[str, pl.DataFrame], Diagnosis, Diagnosis]:
    """Diagnose two stores and compare them (tables of asaptrace.analyze.compare); runs with
    nothing in common are refused unless ``force`` (:func:`comparability_of` says why)."""
    a = diagnose_store(open_store(a_path))
    b = diagnose_store(open_store(b_path))
    _, refusal = comparability_of(a, b, (Path(a_path).name, Path(b_path).name))
    if refusal is not None and not force:
        raise UsageError(refusal)
    return compare_diagnoses(a, b), a, b


def comparability_of(
    a: Diagnosis, b: Diagnosis, names: tuple[str, str] = ("a", "b")
) -> tuple[list[str], str | None]:
    """Where two diagnosed runs differ (warnings) and why they cannot be compared at all (None: they
    can): :func:`asaptrace.analyze.compare.comparability` of their summaries."""
    from asaptrace.analyze.compare import comparability, run_summary

    return comparability(run_summary(a.tables, a.meta), run_summary(b.tables, b.meta), names)


def compare_diagnoses(a: Diagnosis, b: Diagnosis) -> dict[str, pl.DataFrame]:
    """Compare two Diagnoses already made (``compare_overall``, ``compare_by_group``; delta = B − A)."""
    from asaptrace.analyze.compare import compare

    return compare(a.tables, b.tables)


# ---------------------------------------------------------------------------------------------- sweep
def sweep(
    scenario: str | Path = "asap-paper",
    *,
    policies: Sequence[str] | None = None,
    rates: Sequence[float] | None = None,
    knobs: dict[str, Any] | None = None,
    costs: str | Path | None = None,
    workload: str | Path | None = None,
    lengths: str = "fit",
    decomposition_rate: float = 4.0,
    jobs: int = 1,
    vary: Sequence[str] = (),
    calibrate: str | None = None,
    progress: Any = None,
    out: str | Path | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    seeds: int = 1,
) -> SweepResult:
    """Online serving sweep: scenario (+ cost file, + knob overrides) → curves, SLO throughput,
    sensitivity (``vary``: ``"KNOB=v1,v2"``) and calibration (``calibrate``: ``"asap=350@1"``).

    Returns a :class:`~asaptrace.replay.whatif.sweep_result.SweepResult` (its JSON: docs/reference/sweep-json.md);
    with ``out`` it is also written there atomically. ``jobs``: processes over (policy, rate) points (0: one per core);
    ``executor="ray"`` runs one Ray task per (policy, rate) point instead, on ``ray_address`` or
    a local instance of ``jobs`` CPUs (0: all) — the same results either way. ``seeds``: the SLO
    search on that many seeds from the scenario's (the answer their median, with the range).
    """
    from asaptrace.replay.whatif.sensitivity import sweep_scenario

    if out is not None:
        check_output_file(out)  # before the sweep, not after it
    res = sweep_scenario(
        scenario,
        policies=policies,
        rates=rates,
        knobs=knobs,
        costs=costs,
        workload=workload,
        lengths=lengths,
        decomposition_rate=decomposition_rate,
        jobs=jobs,
        vary=vary,
        calibrate=calibrate,
        progress=progress,
        executor=executor,
        ray_address=ray_address,
        seeds=seeds,
    )
    if out is not None:
        res.write(out)
    return res
