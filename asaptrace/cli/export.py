"""``asaptrace export``: a Chrome/Perfetto trace of a store, waits drawn (:func:`asaptrace.pipeline.export_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import StoreArg, out, user_errors
from asaptrace.units import human_bytes


@user_errors
def export(
    store: StoreArg,
    output: Annotated[Path, typer.Option("-o", "--output", help="run.json.gz, or a folder with --per-rank.")],
    fmt: Annotated[str, typer.Option("--format", help="Export format (perfetto).")] = "perfetto",
    per_rank: Annotated[
        bool,
        typer.Option("--per-rank", help="One file per rank in OUTPUT/ (what `asaptrace ingest` reads back)."),
    ] = False,
) -> None:
    """Export a store's device timeline with its barrier waits and arrows, for ui.perfetto.dev or chrome://tracing.

    Example: asaptrace export run.store --format perfetto -o run.json.gz
    """
    from asaptrace.pipeline import export_store

    paths = export_store(store, output, fmt=fmt, per_rank=per_rank)
    size = sum(p.stat().st_size for p in paths)
    out.print(
        f"wrote [bold]{output}[/]: {len(paths)} file{'s' if len(paths) > 1 else ''}, {human_bytes(size)}"
    )
