"""``asaptrace advise``: every finding paired with the what-if that would fix it (:func:`asaptrace.pipeline.advise_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from asaptrace.cli._common import (
    CsvOpt,
    JsonOpt,
    ParquetOpt,
    StoreArg,
    check_tables,
    err,
    out,
    print_json,
    print_lines,
    print_table,
    user_errors,
    write_tables,
)


@user_errors
def advise(
    store: StoreArg,
    online: Annotated[
        bool,
        typer.Option(
            "--online",
            help="Also sweep the same candidates online (SLO throughput) on costs fitted to the store.",
        ),
    ] = False,
    costs: Annotated[
        Path | None, typer.Option("--costs", help="Cost model TOML (default: fitted to the store).")
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="Processes for --online's searches (0: one per CPU, at most 8, the default; 1: this process). The answer is the same.",
        ),
    ] = 0,
    csv: CsvOpt = None,
    parquet: ParquetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What should I change, and what would it buy me? The what-ifs that apply to the store, ranked by recovered time, each with its range, its cost-fit quality and the findings it answers.

    Example: asaptrace advise run.store --online
    """
    from asaptrace.pipeline import advise_store

    check_tables(csv, parquet)

    def progress(message: str) -> None:
        if not as_json and err.is_terminal:
            err.print(f"[dim]{escape(message)}[/]")

    # (the views after the advice: with --online its worker processes start before these imports)
    advice = advise_store(store, costs=costs, online=online, progress=progress, jobs=jobs)
    from asaptrace.views.advice import (
        advice_header,
        advice_legend,
        advice_lines,
        advice_tables,
        advice_view,
        online_setup_line,
    )

    j = advice.to_json()
    write_tables(advice_tables(j), csv, parquet)
    if as_json:
        print_json(j)
        return
    print_lines(advice_header(j, store))
    for note in j.get("notes") or []:
        if "no prefill to replay" in note:  # why the prefill what-ifs do not apply (a training, decode run)
            print_lines(note, first="note: ", indent="  ", style="dim")
    if advice.ranked:
        print_table(advice_view(j, width=out.width), answer=True)
        for line in advice_legend(j, width=out.width):
            print_lines(line, indent="  ", style="dim")
    for i, line in enumerate(advice_lines(j), start=1):
        print_lines(line, first=f"{i}. ", indent=" " * len(f"{i}. "))
    if j.get("online"):
        print_lines(online_setup_line(j), indent="  ")
