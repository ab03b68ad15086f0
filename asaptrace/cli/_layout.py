"""Fitting text to a terminal: tables that stay readable at 80 columns and lines that wrap with a
hanging indent, for every command (the findings, advice, replay and policy lines alike).

A table is drawn whole when it fits; else its headers wrap between words; else its columns are
split into several tables of the same rows, each repeating the first (key) column, so nothing is
ever cut to "…" and no line is wider than the terminal. At ≥ 120 columns every table of the
project fits in one piece. Rich's own shrinking would cut numbers ("657.…"); here a number column
never gets narrower than its widest cell.

Widths are budgeted in :func:`asaptrace.units.text_width` columns (a line's UTF-8 bytes, never less
than its cells in any terminal): a table gives up the room its non-ASCII cells may need, its rule is
ASCII, and every line is wrapped by :func:`asaptrace.views.table.wrap`, the one wrapper.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from asaptrace.units import text_width

#: a text cell longer than this may wrap between words (shorter ones stay on one line)
WRAP_AT = 24

#: rich's SIMPLE_HEAD with an ASCII rule: "─" takes two cells where East Asian ambiguous characters
#: are wide (and three bytes), so a rule of them would outgrow the table it underlines
RULE_BOX = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def row_extra(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The most columns any row (or the header) may take beyond its characters: the room a table
    gives up so that a row of µ, × or – cells stays within the width in every terminal."""
    return max(sum(text_width(c) - len(c) for c in r) for r in [headers, *rows])


def table_width(widths: Sequence[int]) -> int:
    """The width of a ``box.SIMPLE_HEAD`` table with these column widths: one space of padding each
    side of every cell, one separator between columns, one edge each side."""
    return sum(widths) + 3 * len(widths) + 1


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def min_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool]) -> list[int]:
    """The narrowest each column can be without cutting anything: a number column its widest cell,
    a text column its longest word (cells up to :data:`WRAP_AT` characters kept whole), and never
    narrower than its header's longest word."""
    out = []
    for i, h in enumerate(headers):
        cells = [r[i] for r in rows]
        if numeric[i]:
            w = max((len(c) for c in cells), default=0)
        else:
            w = max((max(_longest_word(c), min(len(c), WRAP_AT)) for c in cells), default=0)
        out.append(max(w, _longest_word(h)))
    return out


def natural_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width with nothing wrapped."""
    return [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]


def column_groups(widths: Sequence[int], width: int) -> list[list[int]]:
    """Columns (by index) split into as few tables as fit ``width``, each starting with column 0
    (the key that names the row), in their order, as even in width as that many allow (not eight
    columns then one)."""
    if table_width(widths) <= width or len(widths) <= 1:
        return [list(range(len(widths)))]
    fewest = len(_greedy(widths, width))
    low, high = table_width([widths[0], max(widths[1:])]), width
    while low < high:  # the narrowest limit that still needs no more tables
        mid = (low + high) // 2
        if len(_greedy(widths, mid)) <= fewest:
            high = mid
        else:
            low = mid + 1
    return _greedy(widths, high)


def _greedy(widths: Sequence[int], width: int) -> list[list[int]]:
    groups: list[list[int]] = [[0]]
    for i in range(1, len(widths)):
        if len(groups[-1]) > 1 and table_width([widths[j] for j in [*groups[-1], i]]) > width:
            groups.append([0])
        groups[-1].append(i)
    return groups


def _spread(natural: list[int], least: list[int], width: int) -> list[int]:
    """Column widths from ``least`` up towards ``natural``, within ``width``: the room left is
    handed out one character at a time to the column that lacks the most."""
    widths = list(least)
    spare = width - table_width(widths)
    while spare > 0:
        lack = [n - w for n, w in zip(natural, widths, strict=True)]
        i = max(range(len(lack)), key=lack.__getitem__)
        if lack[i] <= 0:
            break
        widths[i] += 1
        spare -= 1
    return widths


def fitted_tables(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    width: int,
) -> list[Group]:
    """``rows`` under ``headers`` as one or more titled rich tables no wider than ``width`` (see the module
    docstring); ``numeric`` columns are right-aligned and never wrapped."""
    from asaptrace.views.table import wrap

    width -= row_extra(headers, rows)
    natural = natural_widths(headers, rows)
    least = min_widths(headers, rows, numeric)
    if table_width(natural) <= width:
        groups = [list(range(len(headers)))]
    else:
        room = width - table_width([least[0]]) - 3  # a lone column wider than the rest folds
        least = [least[0]] + [min(w, max(room, 1)) for w in least[1:]]
        groups = column_groups(least, width)
    tables = []
    for k, cols in enumerate(groups, start=1):
        widths = _spread([natural[i] for i in cols], [least[i] for i in cols], width)
        name = title if len(groups) == 1 else f"{title} ({k} of {len(groups)})"
        table = Table(box=RULE_BOX)
        for i, w in zip(cols, widths, strict=True):
            head = headers[i]
            if len(head) > w:  # wrap the header between words, never inside one
                head = "\n".join(textwrap.wrap(head, w, break_long_words=False))
            table.add_column(
                head, justify="right" if numeric[i] else "left", width=w, overflow="fold", no_wrap=numeric[i]
            )
        for r in rows:
            table.add_row(*(r[i] for i in cols))
        heading = [Text(line, style="italic") for line in wrap(name, width, indent="  ")]
        tables.append(Group(*heading, table))
    return tables


def print_wrapped(console: Console, prefix: str, text: str | Text, *, style: str | None = None) -> None:
    """One numbered or labelled line (``prefix`` in rich markup, ``text`` plain or a rich ``Text``)
    wrapped to the console's width with a hanging indent under the text, as the findings are
    printed; a word longer than the width is folded, never cut. The text keeps its styles."""
    from asaptrace.views.table import wrap

    body = text if isinstance(text, Text) else Text(text, style=style or "")
    head = Text.from_markup(prefix)
    if len(head.plain) > console.width // 3:  # a long prefix (a path): no hanging indent
        body, head = Text.assemble(head, body), Text()
    plain, lead = body.plain, " " * len(head.plain)
    cursor = 0
    for i, line in enumerate(wrap(plain, console.width, first=lead, indent=lead)):
        part = line[len(lead) :]
        start = plain.find(part, cursor)
        if start < 0:  # white space the wrapper changed (a newline): the line as wrapped, plain
            piece = Text(part, style=style or "")
        else:
            piece, cursor = body[start : start + len(part)], start + len(part)
        console.print(Text.assemble(head if i == 0 else lead, piece), overflow="fold", crop=False)


def print_plain(
    console: Console,
    text: str,
    *,
    first: str = "",
    indent: str = "",
    style: str = "",
    width: int | None = None,
) -> None:
    """``first + text`` wrapped to the console's width (or ``width``), its continuation lines
    indented by ``indent``; no markup is read from it."""
    from asaptrace.views.table import wrap

    for line in wrap(text, width or console.width, first=first, indent=indent):
        console.print(Text(line, style=style), overflow="fold", crop=False)


def print_hanging(console: Console, line: str, *, hang: int = 4) -> None:
    """A plain line wrapped between words to the console's width, its own indent kept and the
    lines after the first indented ``hang`` more (a list of parameters under a name)."""
    indent = " " * (len(line) - len(line.lstrip()))
    print_plain(
        console, line.strip(), first=indent, indent=indent + " " * hang, width=max(console.width - 1, 20)
    )
