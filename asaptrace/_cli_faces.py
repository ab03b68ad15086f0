"""Pieces the `report`, `export` and `compare` commands share: the command line as run, table printing."""

from __future__ import annotations

import shlex
import sys

import polars as pl
from rich.table import Table

from asaptrace._cli_common import out
from asaptrace.report._format import cell, metric_value


def invocation() -> str:
    """The command line that is running, as a user would retype it (shown in a report)."""
    return shlex.join(["asaptrace", *sys.argv[1:]])


def print_frame(title: str, frame: pl.DataFrame) -> None:
    """A polars table as a rich table, cells formatted by column name (ns as ms/s, shares as %)."""
    view = Table(*frame.columns, title=title, title_justify="left")
    for row in frame.iter_rows(named=True):
        view.add_row(*[cell(c, v) for c, v in row.items()])
    out.print(view)


def print_overall(frame: pl.DataFrame) -> None:
    """compare_overall: one row per headline metric, values in their unit."""
    view = Table("metric", "a", "b", "delta", "ratio", title="overall", title_justify="left")
    for r in frame.iter_rows(named=True):
        view.add_row(
            r["metric"],
            *(metric_value(r["unit"], r["metric"], r[k]) for k in ("a", "b", "delta")),
            cell("ratio", r["ratio"]),
        )
    out.print(view)
