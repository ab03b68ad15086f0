"""``asaptrace validate``: a what-if checked against a run that was measured (:func:`asaptrace.pipeline.validate_stores`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from asaptrace.cli._common import JsonOpt, out, print_json, print_table, print_wrapped, user_errors


@user_errors
def validate(
    measured_store: Annotated[Path, typer.Argument(help="The store the costs are fitted on.")],
    other_store: Annotated[
        Path, typer.Argument(help="A store of the same work run another way: its deployment is predicted.")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Fit on MEASURED, predict OTHER's deployment and policy, and say how far off the prediction is.

    The error of the makespan, of each step and of the per-layer work, each with the Monte-Carlo
    band and whether it covers the measured value.

    Example: asaptrace validate coupled.store disaggregated.store --json
    """
    from asaptrace.pipeline import validate_stores
    from asaptrace.views.validate import validate_lines, validate_views

    result = validate_stores(measured_store, other_store)
    if as_json:
        print_json(result)
        return
    _print(result, validate_lines, validate_views)


def _print(result: dict[str, Any], lines: Any, views: Any) -> None:
    for line in lines(result):
        print_wrapped(out, "", line)
    for view in views(result):
        print_table(view)
