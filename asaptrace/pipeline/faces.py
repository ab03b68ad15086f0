"""The pipeline's room for what a human reads: the report, the Perfetto export, the comparison of
two runs and the timeline's spans. Every layer is imported by the call that needs it (importing
this module stays cheap).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from asaptrace.errors import OutputError, UsageError
from asaptrace.pipeline.store import diagnose_store, open_store
from asaptrace.pipeline.whatif import advise_store
from asaptrace.userfiles import check_output_file, write_atomic

if TYPE_CHECKING:
    from collections.abc import Sequence

    import polars as pl

    from asaptrace.analyze.critical import CriticalPaths
    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.report.sections import Section
    from asaptrace.store import TraceStore


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
    cp = _critical_of(store)
    if cp is not None:
        from asaptrace.report.critical import critical_section

        # a diagnosis of the measured run: after its key tables, before the what-ifs' sections
        extra.insert(1 if advice else 0, critical_section(cp))
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
        critical_path=_critical_pieces(store),
        metadata={"store": Path(store_path).name},
    )
    return write_export(trace, output, per_rank=per_rank)


def _critical_of(store: TraceStore, *, top: int = 5) -> CriticalPaths | None:
    """The critical path of every step, for the report and the export (none when the store has no steps)."""
    from asaptrace.analyze.critical import NoWindows, critical_path

    try:
        return critical_path(store.events(), store.ranks(), args=store.scan("args"), top=top)
    except NoWindows:
        return None


def _critical_pieces(store: TraceStore) -> pl.DataFrame | None:
    """The path's pieces of every step, for the export to draw."""
    cp = _critical_of(store, top=0)
    return None if cp is None else cp.path


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


def gate_thresholds(fail_if: Sequence[str], thresholds_file: Path | None = None) -> list:
    """The regression gate's thresholds: each ``--fail-if`` expression, then a thresholds file's
    (``fail-if = [...]``; :mod:`asaptrace.analyze.gate`). A bad one is one UsageError."""
    from asaptrace.analyze.gate import parse_threshold, thresholds_from_toml

    rules = [parse_threshold(text) for text in fail_if]
    if thresholds_file is not None:
        try:
            text = Path(thresholds_file).read_text()
        except OSError as err:
            raise UsageError(
                f"cannot read the thresholds file ({err.strerror})", path=thresholds_file
            ) from None
        rules += thresholds_from_toml(text, source=str(thresholds_file))
    return rules


def gate_verdicts(
    comparison: dict[str, pl.DataFrame], a: Diagnosis, b: Diagnosis, thresholds: Sequence
) -> pl.DataFrame:
    """One verdict per threshold and scope for BASE ``a`` and NEW ``b`` (:func:`asaptrace.analyze.gate.verdicts`)."""
    from asaptrace.analyze.gate import verdicts

    return verdicts(comparison, a.tables, b.tables, list(thresholds))
