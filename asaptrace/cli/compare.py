"""``asaptrace compare``: two stores side by side (:func:`asaptrace.pipeline.compare_stores`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import polars as pl
import typer
from rich.table import Table

from asaptrace.cli._common import JsonOpt, out, print_json, print_table, user_errors
from asaptrace.units import cell, metric_value
from asaptrace.views import TableView


@user_errors
def compare(
    a_store: Annotated[Path, typer.Argument(help="Store A (e.g. measured, or before a change).")],
    b_store: Annotated[Path, typer.Argument(help="Store B (e.g. replayed, or after).")],
    as_json: JsonOpt = False,
) -> None:
    """Compare two stores: step time, wait, imbalance and overlap side by side (delta = B − A), overall and per DP group.

    Example: asaptrace compare measured.store replayed.store --json
    """
    from asaptrace.pipeline import compare_stores

    tables, _, _ = compare_stores(a_store, b_store)
    if as_json:
        print_json(
            {
                "a": str(a_store),
                "b": str(b_store),
                "tables": {name: t.to_dicts() for name, t in tables.items()},
            }
        )
        return
    _print_overall(tables["compare_overall"])
    _print_frame("per DP group", tables["compare_by_group"])


def _print_frame(title: str, frame: pl.DataFrame) -> None:
    """A polars table as a rich table, by the one rule of every face (views / units)."""
    print_table(TableView(title, frame.columns, frame))


def _print_overall(frame: pl.DataFrame) -> None:
    """compare_overall: one row per headline metric, values in their unit."""
    view = Table("metric", "a", "b", "delta", "ratio", title="overall", title_justify="left")
    for r in frame.iter_rows(named=True):
        view.add_row(
            r["metric"],
            *(metric_value(r["unit"], r["metric"], r[k]) for k in ("a", "b", "delta")),
            cell("ratio", r["ratio"]),
        )
    out.print(view)
