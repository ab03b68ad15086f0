"""``asaptrace compare``: two stores side by side (:func:`asaptrace.pipeline.compare_stores`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import (
    EXIT_FOUND,
    CsvOpt,
    JsonOpt,
    ParquetOpt,
    check_tables,
    out,
    print_json,
    print_lines,
    print_table,
    print_warning,
    print_wrapped,
    user_errors,
    write_tables,
)
from asaptrace.errors import UsageError


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
    fail_if: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-if",
            help="A regression threshold, METRIC>+X% or METRIC<-X% (repeatable), e.g. step_time>+5%: "
            "exit 1 when B is beyond it (and beyond the steps' noise) overall or in a DP group.",
        ),
    ] = None,
    thresholds: Annotated[
        Path | None,
        typer.Option("--thresholds", help='A TOML file of thresholds: fail-if = ["step_time>+5%", …].'),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option("--format", help="text (tables), or markdown (a summary to post on a pull request)."),
    ] = "text",
) -> None:
    """Compare two stores: step time, wait, imbalance and overlap side by side (delta = B − A), overall and per DP group.

    Warns where the runs differ (ranks, deployment, roles, MoE layers, steps); refuses runs that
    share neither their work nor their layout unless --force.

    As a CI gate (A = BASE, B = NEW; exit 1 on a regression, one line per threshold):

    asaptrace compare base.store new.store --fail-if "step_time>+5%" --fail-if "exposed_wait>+10%"

    Example: asaptrace compare measured.store replayed.store --json
    """
    from asaptrace.pipeline import comparability_of, compare_stores, gate_thresholds, gate_verdicts
    from asaptrace.views.compare import compare_tables, compare_views, gate_lines, gate_markdown

    if fmt not in ("text", "markdown"):
        raise UsageError(f"--format {fmt!r}: must be text or markdown")
    check_tables(csv, parquet)
    rules = gate_thresholds(fail_if or [], thresholds)
    tables, a, b = compare_stores(a_store, b_store, force=force)
    warnings, _ = comparability_of(a, b, (a_store.name, b_store.name))
    verdicts = gate_verdicts(tables, a, b, rules) if rules else None
    write_tables(compare_tables(tables, verdicts), csv, parquet)
    failed = verdicts is not None and bool((verdicts.get_column("status") == "fail").any())
    if as_json:
        print_json(
            {
                "a": str(a_store),
                "b": str(b_store),
                "warnings": warnings,
                "tables": {name: t.to_dicts() for name, t in tables.items()},
                "verdicts": None if verdicts is None else verdicts.to_dicts(),
                "failed": failed,
            }
        )
    elif fmt == "markdown":
        out.print(gate_markdown(tables, verdicts, str(a_store), str(b_store)), markup=False, soft_wrap=True)
    else:
        for w in warnings:
            print_warning(f"warning: {w}")
        # the tables say "a" and "b" to stay narrow: which store is which, said once above them
        print_wrapped(out, "", f"a = {a_store}, b = {b_store}")
        for view in compare_views(tables, "a", "b"):
            print_table(view)
        for line in gate_lines(verdicts) if verdicts is not None else []:
            print_lines(line, indent="  ", style="bold red" if line.startswith("FAIL") else "")
    if failed:
        raise typer.Exit(EXIT_FOUND)
