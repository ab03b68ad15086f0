"""``asaptrace critical``: the path that set each step (:func:`asaptrace.pipeline.critical_store`,
shown by :mod:`asaptrace.views.critical`)."""

from __future__ import annotations

from typing import Annotated

import typer

from asaptrace.cli._common import JsonOpt, StoreArg, out, print_json, print_table, print_wrapped, user_errors


@user_errors
def critical(
    store: StoreArg,
    annotation: Annotated[
        str | None,
        typer.Option(
            "--annotation",
            help="Walk each instance of this annotation (e.g. ProfilerStep) instead of the steps.",
        ),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", help="Kernels to list and re-walk 20 % faster per window.")
    ] = 5,
    as_json: JsonOpt = False,
) -> None:
    """The critical path of each step across ranks: its length, its time by kind and rank, the top
    kernels on it and how much shorter the step would be were each 20 % faster.

    Example: asaptrace critical run.store ; asaptrace critical run.store --annotation ProfilerStep --json
    """
    from asaptrace.pipeline import critical_store
    from asaptrace.views.critical import critical_json, critical_views

    cp = critical_store(store, annotation=annotation, top=top)
    if as_json:
        print_json(critical_json(cp, str(store)))
        return
    for view in critical_views(cp):
        print_table(view)
    for note in cp.notes:
        print_wrapped(out, "[dim]note:[/] ", note, style="dim")
