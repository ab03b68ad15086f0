"""``asaptrace report``: the self-contained diagnostic report of a store (:func:`asaptrace.pipeline.report_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import StoreArg, invocation, out, user_errors
from asaptrace.units import human_bytes


@user_errors
def report(
    ctx: typer.Context,
    store: StoreArg,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Report file to write, .html or .md (replaced atomically)."),
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help="html (self-contained, offline) or md; default: what -o's suffix says."
        ),
    ] = None,
    compare_with: Annotated[
        Path | None, typer.Option("--compare", help="A second store to compare with, as a section.")
    ] = None,
    replays: Annotated[
        list[Path] | None,
        typer.Option(
            "--replay",
            help="A replayed store (`asaptrace replay STORE -o …`) to add as a Replay section; repeatable.",
        ),
    ] = None,
    sweep_results: Annotated[
        Path | None,
        typer.Option(
            "--sweep", help="A sweep results JSON (`asaptrace sweep -o …`) to add as a Sweep section."
        ),
    ] = None,
    advice: Annotated[
        bool,
        typer.Option(
            "--advice/--no-advice",
            help="Put the ranked what-ifs (`asaptrace advise`) at the top (a few seconds).",
        ),
    ] = True,
) -> None:
    """Write the diagnostic report of a store: findings, figures, key tables, provenance, this command.

    Example: asaptrace report run.store -o reports/run.html
    Example: asaptrace report run.store --replay asap.store --sweep sweep.json -o reports/run.html
    """
    from asaptrace.pipeline import report_store

    if fmt not in (None, "html", "md"):
        raise typer.BadParameter("must be html or md", param_hint="--format")
    path = report_store(
        store,
        output,
        command=invocation(ctx),
        fmt=fmt,
        compare_path=compare_with,  # type: ignore[arg-type]
        replays=replays or (),
        sweep_path=sweep_results,
        advice=advice,
    )
    out.print(f"wrote [bold]{path}[/] ({human_bytes(path.stat().st_size)})")
