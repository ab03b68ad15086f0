"""``asaptrace analyze``: the diagnosis (:func:`asaptrace.pipeline.diagnose_store`, shown by :mod:`asaptrace.views.diagnosis`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from asaptrace.cli._common import (
    BatchesOpt,
    JsonOpt,
    ParallelOpt,
    StoreArg,
    TaxonomyOpt,
    err,
    out,
    print_json,
    print_message,
    print_table,
    print_wrapped,
    user_errors,
)

_SEVERITY_COLOUR = {"high": "red", "medium": "yellow", "low": "cyan"}


@user_errors
def analyze(
    store: StoreArg,
    as_json: JsonOpt = False,
    csv: Annotated[Path | None, typer.Option("--csv", help="Write every table as DIR/<table>.csv.")] = None,
    parallel: ParallelOpt = None,
    batches: BatchesOpt = None,
    taxonomy: TaxonomyOpt = None,
) -> None:
    """Diagnose a store: who waited on whom, for how long, and why (findings ranked by time at stake).

    Options re-enrich the store in memory (the store on disk is left as it is).

    Example: asaptrace analyze run.store --csv tables/ ; asaptrace analyze run.store --json > diagnosis.json
    """
    from asaptrace.pipeline import analyze_store
    from asaptrace.units import plural
    from asaptrace.views.diagnosis import diagnosis_header, diagnosis_tables

    diag, written = analyze_store(store, csv=csv, parallel=parallel, batches=batches, taxonomy=taxonomy)
    if csv is not None:
        print_message(err, "", f"wrote {plural(len(written), 'table')} as CSV to {csv}/")
    if as_json:
        print_json(diag.to_json())
        return
    print_wrapped(out, f"[bold]{escape(str(diag.meta.get('store')))}[/]  ", diagnosis_header(diag).strip())
    for i, f in enumerate(diag.findings, 1):
        colour = _SEVERITY_COLOUR.get(f.severity, "dim")
        print_wrapped(out, f"[bold]{i}.[/] ", Text.assemble((f.severity, colour), " ", f.text))
    for note in diag.notes:
        print_wrapped(out, "[dim]note:[/] ", note, style="dim")
    for view in diagnosis_tables(diag):
        print_table(view)
