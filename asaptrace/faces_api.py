"""Library calls behind `asaptrace report`, `export` and `compare`: read store → diagnose → render/write.

Each function composes the layers for one face (the CLI commands only parse options and format);
they move into ``asaptrace/pipeline.py`` when the CLI package lands (merge note in the PR).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl

from asaptrace.analyze.compare import compare
from asaptrace.analyze.diagnosis import Diagnosis, diagnose_store
from asaptrace.errors import UsageError
from asaptrace.export import EXPORT_FORMATS
from asaptrace.export.perfetto import split_by_rank, write_trace
from asaptrace.report.render import render_report
from asaptrace.report.sections import Section
from asaptrace.store import TraceStore
from asaptrace.viz.timeline import timeline_spans, worst_window


def _waits(diag: Diagnosis) -> pl.DataFrame:
    """Barrier waits and (in a disaggregated run) receive waits: what the wait band and slices show."""
    t = diag.tables
    if t["receive_waits"].height == 0:
        return t["barrier_instances"]
    return pl.concat([t["barrier_instances"], t["receive_waits"]])


def _writable_target(path: Path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise UsageError("is a directory; give a file name", path=path)
    if not path.parent.is_dir():
        raise UsageError("its folder does not exist", path=path)
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary sibling renamed into place (never half-written)."""
    path = _writable_target(path)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def report_store(
    store_path: Path,
    output: Path,
    *,
    command: str,
    fmt: Literal["html", "md"] = "html",
    compare_path: Path | None = None,
    sections: Sequence[Section] = (),
    store_label: str | None = None,
    path_root: Path | None = None,
) -> Path:
    """Diagnose a store (and optionally a second one to compare with) and write its report atomically.

    ``sections`` is where the replay and the sweep add theirs (see asaptrace.report.sections).
    """
    output = _writable_target(output)
    store = TraceStore.open(store_path)
    diag = diagnose_store(store)
    other = None
    if compare_path is not None:
        other = (Path(compare_path).name, diagnose_store(TraceStore.open(compare_path)))
    spans, window = None, ""
    if fmt == "html":
        step, layers = worst_window(diag.tables["barrier_by_rank_layer"], diag.tables["step_breakdown"])
        spans = timeline_spans(store.events(), store.ranks(), _waits(diag), step=step, layers=layers)
        window = f"step {step}" + (f", layers {layers[0]}–{layers[1]}" if layers else ", all layers")
        window += " (where the summed wait is largest)" if layers else ""
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
    return write_text_atomic(output, text)


def export_store(
    store_path: Path, output: Path, *, fmt: str = "perfetto", per_rank: bool = False
) -> list[Path]:
    """Write a store's Chrome/Perfetto trace: one ``run.json.gz`` or, with ``per_rank``, a folder of one
    file per rank (the form ``asaptrace ingest`` reads back rank by rank)."""
    exporter = EXPORT_FORMATS.get(fmt)
    store = TraceStore.open(store_path)
    diag = diagnose_store(store)
    trace = exporter(
        store.events(),
        store.ranks(),
        _waits(diag),
        streams=store.read("streams"),
        metadata={"store": Path(store_path).name},
    )
    output = Path(output)
    if not per_rank:
        return [write_trace(_writable_target(output), trace)]
    if output.exists() and not output.is_dir():
        raise UsageError("exists and is not a folder (--per-rank writes one file per rank)", path=output)
    output.mkdir(parents=True, exist_ok=True)
    return [write_trace(output / f"rank{r:05d}.json.gz", doc) for r, doc in split_by_rank(trace).items()]


def compare_stores(a_path: Path, b_path: Path) -> tuple[dict[str, pl.DataFrame], Diagnosis, Diagnosis]:
    """Diagnose two stores and compare them (tables of asaptrace.analyze.compare)."""
    a = diagnose_store(TraceStore.open(a_path))
    b = diagnose_store(TraceStore.open(b_path))
    return compare(a.tables, b.tables), a, b


def json_tables(tables: dict[str, pl.DataFrame]) -> dict[str, Any]:
    return {name: t.to_dicts() for name, t in tables.items()}
