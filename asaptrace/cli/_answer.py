"""How ``advise`` and ``sweep`` print their answer at any terminal width: tables whose cells are
never cut (a column is at least as wide as its longest word; a narrow terminal gets the views'
short layout, :mod:`asaptrace.views.sweep`, :mod:`asaptrace.views.advice`) and lines wrapped to the terminal between words,
continuation lines indented under their number, as the findings read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from asaptrace.cli._common import out
from asaptrace.cli._layout import RULE_BOX, _longest_word, print_plain, row_extra
from asaptrace.units import more_rows

if TYPE_CHECKING:
    from asaptrace.views.table import TableView


def width() -> int:
    """The terminal's width in columns (``COLUMNS`` when set, else the terminal's, else 80)."""
    return out.width


def print_lines(text: str, *, first: str = "", indent: str = "", style: str = "") -> None:
    """``first + text`` wrapped to the terminal, its continuation lines indented by ``indent``."""
    print_plain(out, text, first=first, indent=indent, style=style)


def print_answer_table(view: TableView) -> None:
    """A :class:`~asaptrace.views.table.TableView` as a rich table that wraps a cell between its words
    and never inside one (no "…"): each column's minimum width is its longest word. When even
    those minimums do not fit the terminal, one block per row instead (its first cell, then each
    column's header and cell), so nothing is ever cut."""
    from rich.table import Table

    if view.rows.height == 0:
        print_lines(view.title + ": none" + (f" ({view.reason})" if view.reason else ""))
        return
    headers, rows = view.cells()
    print_lines(view.title, indent="  ", style="italic")
    mins = [max([_unbroken(h, 0)] + [_unbroken(r[i], SHORT) for r in rows]) for i, h in enumerate(headers)]
    # a column takes its width, a space of padding and (but the last) a space of rule; less what
    # non-ASCII cells may take beyond their length
    room = width() - (2 * len(headers) - 1) - row_extra(headers, rows)
    if sum(mins) > room:
        skip = 2 if headers[0] == "#" else 1  # a ranked table: "1. balanced", then its columns
        for r in rows:
            print_lines(" ".join(r[:skip]) if skip == 1 else f"{r[0]}. {r[1]}")
            for h, c in zip(headers[skip:], r[skip:], strict=True):
                print_lines(f"{' '.join(h.split())}: {c}", first="    ", indent="      ")
        return
    widths = _widths(
        mins, [max(len(t) for t in (h, *(r[i] for r in rows))) for i, h in enumerate(headers)], room
    )
    table = Table(box=RULE_BOX, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for i, (h, c) in enumerate(zip(headers, view.columns, strict=True)):
        numeric = i > 0 and view.rows.schema[c].is_numeric()
        table.add_column(h, justify="right" if numeric else "left", width=widths[i], overflow="fold")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    if view.more:
        out.print(f"[dim]{more_rows(view.more)}[/]")
    out.print()


#: a cell this short ("7.61 S", "3.11–3.75") is never wrapped; a longer one wraps between words
SHORT = 12


def _unbroken(text: str, short: int) -> int:
    """The least width ``text`` can have: whole when at most ``short`` long, else its longest word."""
    return len(text) if len(text) <= short else _longest_word(text)


def _widths(mins: list[int], natural: list[int], room: int) -> list[int]:
    """Column widths within ``room``: each at least its longest word; the space left goes first to
    the columns a few characters short of whole (a header on one line), then to the column naming each row, then to the
    others in proportion to what they still need."""
    widths = list(mins)
    left = room - sum(widths)
    short = [i for i in range(len(widths)) if natural[i] - mins[i] <= 6]
    for i in sorted(short, key=lambda i: natural[i] - mins[i]):
        give = min(natural[i] - widths[i], left)
        widths[i] += give
        left -= give
    if len(widths) > 1:  # then the column naming each row (the what-if, the policy), whole if it can be
        give = min(natural[1] - widths[1], left)
        widths[1] += give
        left -= give
    need = {i: natural[i] - widths[i] for i in range(len(widths)) if natural[i] > widths[i]}
    total = sum(need.values())
    for i, n in need.items():  # what is left, shared in proportion to what each still needs
        widths[i] += min(n, left * n // total)
    return widths
