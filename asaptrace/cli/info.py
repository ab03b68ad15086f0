"""``asaptrace info``: what a store holds (:func:`asaptrace.info.store_info`, shown by :mod:`asaptrace.views`)."""

from __future__ import annotations

from asaptrace.cli._common import JsonOpt, StoreArg, out, print_json, print_table, user_errors


@user_errors
def info(store: StoreArg, as_json: JsonOpt = False) -> None:
    """Show what a store holds: ranks, time span, events and device time by kind, accounting, sources.

    Example: asaptrace info run.store --json
    """
    from asaptrace.info import store_info
    from asaptrace.store import TraceStore
    from asaptrace.views import discovery_lines, info_summary, info_tables

    data = store_info(TraceStore.open(store))
    if as_json:
        print_json(data)
        return
    head, accounting = info_summary(data)
    out.print(f"[bold]{data['store']}[/]{head}")
    out.print(accounting, soft_wrap=True)
    for line in discovery_lines(data):
        out.print(line, soft_wrap=True)
    for view in info_tables(data):
        print_table(view)
