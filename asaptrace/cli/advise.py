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
    print_table,
    user_errors,
    write_tables,
)
from asaptrace.units import plural


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
    csv: CsvOpt = None,
    parquet: ParquetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """What should I change, and what would it buy me? The what-ifs that apply to the store, ranked by recovered time, each with its range, its cost-fit quality and the findings it answers.

    Example: asaptrace advise run.store --online
    """
    from asaptrace.pipeline import advise_store
    from asaptrace.tables import advice_tables
    from asaptrace.views import advice_lines, advice_view, human_ns

    check_tables(csv, parquet)

    def progress(message: str) -> None:
        if not as_json and err.is_terminal:
            err.print(f"[dim]{escape(message)}[/]")

    advice = advise_store(store, costs=costs, online=online, progress=progress)
    j = advice.to_json()
    write_tables(advice_tables(j), csv, parquet)
    if as_json:
        print_json(j)
        return
    out.print(
        f"[bold]{escape(str(store))}[/]: {j['deployment']} run on {plural(j['devices'], 'device')}, measured makespan "
        f"{human_ns(j['measured_makespan_ns'], sig=True)}; what each change would win back:",
        soft_wrap=True,
    )
    if advice.ranked:
        print_table(advice_view(j))
    for i, line in enumerate(advice_lines(j), start=1):
        out.print(f"{i}. {escape(line)}", soft_wrap=True)
    if j.get("online") and j["online"].get("status") == "run":
        out.print(
            f"online: {escape(j['online']['reading'])} Requests: {escape(j['online']['requests'])}.",
            soft_wrap=True,
        )
    elif j.get("online"):
        out.print(f"online: not run ({escape(j['online']['reason'])})")
