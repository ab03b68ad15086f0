"""Pieces the `report`, `export` and `compare` commands share: the command line as run, table printing."""

from __future__ import annotations

import shlex
from typing import Any

import polars as pl
from rich.table import Table

from asaptrace._cli_common import out
from asaptrace.report._format import cell, metric_value


def invocation(ctx: Any) -> str:
    """The running command as a user would retype it (shown in a report): ``asaptrace report S -o R``.

    Rebuilt from what click parsed (arguments, then options that differ from their defaults), so it
    is the same however the CLI was started (console script, ``python -m``, a test runner).
    ``ctx`` is the command's ``typer.Context``.
    """
    words = ["asaptrace", ctx.info_name or ""]
    opts: list[str] = []
    for p in ctx.command.params:
        value = ctx.params.get(p.name or "")
        if p.param_type_name == "argument":
            words += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        elif p.param_type_name == "option" and value is not None and value != p.default:
            flag = max(p.opts, key=len)
            opts += [flag] if getattr(p, "is_flag", False) else [flag, str(value)]
    return shlex.join(words + opts)


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
