"""``asaptrace compare``: two stores side by side (:func:`asaptrace.pipeline.compare_stores`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import (
    CsvOpt,
    JsonOpt,
    ParquetOpt,
    check_tables,
    err,
    out,
    print_json,
    print_table,
    print_wrapped,
    user_errors,
    write_tables,
)


@user_errors
def compare(
    a_store: Annotated[Path, typer.Argument(help="Store A (e.g. measured, or before a change).")],
    b_store: Annotated[Path, typer.Argument(help="Store B (e.g. replayed, or after).")],
    csv: CsvOpt = None,
    parquet: ParquetOpt = None,
    as_json: JsonOpt = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Compare even runs that share neither their work nor their layout."),
    ] = False,
) -> None:
    """Compare two stores: step time, wait, imbalance and overlap side by side (delta = B − A), overall and per DP group.

    Warns where the runs differ (ranks, deployment, roles, MoE layers, steps); refuses runs that
    share neither their work nor their layout unless --force.

    Example: asaptrace compare measured.store replayed.store --json
    """
    from asaptrace.pipeline import comparability_of, compare_stores
    from asaptrace.views.compare import compare_tables, compare_views

    check_tables(csv, parquet)
    tables, a, b = compare_stores(a_store, b_store, force=force)
    warnings, _ = comparability_of(a, b, (a_store.name, b_store.name))
    write_tables(compare_tables(tables), csv, parquet)
    if as_json:
        print_json(
            {
                "a": str(a_store),
                "b": str(b_store),
                "warnings": warnings,
                "tables": {name: t.to_dicts() for name, t in tables.items()},
            }
        )
        return
    for w in warnings:
        err.print(f"warning: {w}", soft_wrap=True, markup=False, highlight=False)
    # the tables say "a" and "b" to stay narrow: which store is which, said once above them
    print_wrapped(out, "", f"a = {a_store}, b = {b_store}")
    for view in compare_views(tables, "a", "b"):
        print_table(view)
