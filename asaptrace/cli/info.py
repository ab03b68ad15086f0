"""``asaptrace info``: what a store holds (:func:`asaptrace.pipeline.store_info`, shown by :mod:`asaptrace.views.store`)."""

from __future__ import annotations

from rich.markup import escape

from asaptrace.cli._common import JsonOpt, StoreArg, out, print_json, print_table, print_wrapped, user_errors


@user_errors
def info(store: StoreArg, as_json: JsonOpt = False) -> None:
    """Show what a store holds: ranks, time span, events and device time by kind, accounting, sources.

    Example: asaptrace info run.store --json
    """
    from asaptrace.pipeline import open_store, store_info
    from asaptrace.views.store import discovery_lines, info_summary, info_tables

    data = store_info(open_store(store))
    if as_json:
        print_json(data)
        return
    head, accounting = info_summary(data)
    print_wrapped(out, f"[bold]{escape(str(data['store']))}[/]  ", head.strip())
    print_wrapped(out, "", accounting)
    for line in discovery_lines(data):
        print_wrapped(out, "", line)
    for view in info_tables(data):
        print_table(view)
