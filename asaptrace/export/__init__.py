"""Exports of a store to other tools' formats, one registry entry per format.

Built-in: ``perfetto`` (Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing open;
see :mod:`asaptrace.export.perfetto`). An exporter is ``(events, ranks, barrier_instances, **kw) ->
document``; register another with ``EXPORT_FORMATS.register(name, fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from asaptrace.errors import OutputError
from asaptrace.export.perfetto import export_perfetto, split_by_rank, write_trace
from asaptrace.registry import Registry
from asaptrace.userfiles import check_output_dir, check_output_file

Exporter = Callable[..., dict[str, Any]]

EXPORT_FORMATS: Registry[Exporter] = Registry("export format")
EXPORT_FORMATS.register("perfetto", export_perfetto)

__all__ = ["EXPORT_FORMATS", "Exporter", "check_export_target", "write_export"]


def check_export_target(output: str | Path, *, per_rank: bool) -> Path:
    """Refuse a bad output before the work: a file for one trace, a folder for ``per_rank``."""
    output = Path(output)
    if not per_rank:
        return check_output_file(output)
    if output.exists() and not output.is_dir():
        raise OutputError("exists and is not a folder (--per-rank writes one file per rank)", path=output)
    return check_output_dir(output, what="folder of per-rank traces")


def write_export(trace: dict[str, Any], output: str | Path, *, per_rank: bool) -> list[Path]:
    """Write one trace file, or with ``per_rank`` a folder of one ``rankNNNNN.json.gz`` per rank
    (the form ``asaptrace ingest`` and other Kineto readers read back rank by rank)."""
    output = Path(output)
    if not per_rank:
        return [write_trace(output, trace)]
    output.mkdir(parents=True, exist_ok=True)
    return [write_trace(output / f"rank{r:05d}.json.gz", doc) for r, doc in split_by_rank(trace).items()]
