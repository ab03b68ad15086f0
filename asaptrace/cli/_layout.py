"""Fitting text to a terminal: tables that stay readable at 80 columns and lines that wrap with a
hanging indent, for every command (the findings, advice, replay and policy lines alike).

One way to draw a table (:func:`fitted_tables`): drawn whole when it fits; else its columns narrow,
each no narrower than its longest word (a number column its widest cell), headers wrapping between
words; else it gives way: the analysis tables split their columns into several tables of the same
rows, each repeating the first (key) column; an *answer* table (``advise``, ``sweep``: a ranked
what-if per row) prints one block per row instead (its name, then each header and cell). Nothing is
ever cut to "…" and no line is wider than the terminal. At ≥ 120 columns every table of the project
fits in one piece. Rich's own shrinking would cut numbers ("657.…"). An answer table keeps fewer
cells whole, draws no box edge and gives its room first to columns a few characters short of whole
and to the column naming each row: the options of the one function.

Widths are budgeted in :func:`asaptrace.units.text_width` columns (a line's UTF-8 bytes, never less
than its cells in any terminal): a table gives up the room its non-ASCII cells may need, its rule is
ASCII, and every line is wrapped by :func:`asaptrace.views.table.wrap`, the one wrapper.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from asaptrace.units import text_width

#: a text cell longer than this may wrap between words (shorter ones stay on one line)
WRAP_AT = 24
#: the same for an answer table, whose what-if labels wrap: only a short cell ("7.61 S", "3.11–3.75")
#: is always kept whole
ANSWER_WRAP_AT = 12
#: an answer table gives its room first to the columns this close to whole (a header on one line)
NEARLY_WHOLE = 6

#: rich's SIMPLE_HEAD with an ASCII rule: "─" takes two cells where East Asian ambiguous characters
#: are wide (and three bytes), so a rule of them would outgrow the table it underlines
RULE_BOX = box.Box("    \n    \n -- \n    \n    \n    \n    \n    \n", ascii=True)


def row_extra(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The most columns any row (or the header) may take beyond its characters: the room a table
    gives up so that a row of µ, × or – cells stays within the width in every terminal."""
    return max(sum(text_width(c) - len(c) for c in r) for r in [headers, *rows])


def table_width(widths: Sequence[int], *, edges: bool = True) -> int:
    """The width of a table with these column widths: with ``edges`` (``box.SIMPLE_HEAD``) one space
    of padding each side of every cell, one separator between columns, one edge each side; without
    (an answer table), a space of padding and one of rule after each column but the last."""
    return sum(widths) + (3 * len(widths) + 1 if edges else 2 * len(widths) - 1)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def min_widths(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    *,
    whole: int = WRAP_AT,
) -> list[int]:
    """The narrowest each column can be without cutting anything: a number column its widest cell,
    a text column its longest word (cells up to ``whole`` characters kept whole), and never
    narrower than its header's longest word."""
    out = []
    for i, h in enumerate(headers):
        cells = [r[i] for r in rows]
        if numeric[i]:
            w = max((len(c) for c in cells), default=0)
        else:
            w = max((max(_longest_word(c), min(len(c), whole)) for c in cells), default=0)
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


def _spread(natural: list[int], least: list[int], spare: int, first: Sequence[int] = ()) -> list[int]:
    """Column widths from ``least`` up towards ``natural`` with ``spare`` columns to hand out: the
    columns in ``first`` made whole first, in that order, then one character at a time to the
    column that lacks the most."""
    widths = list(least)
    for i in first:
        give = max(min(natural[i] - widths[i], spare), 0)
        widths[i] += give
        spare -= give
    while spare > 0:
        lack = [n - w for n, w in zip(natural, widths, strict=True)]
        i = max(range(len(lack)), key=lack.__getitem__)
        if lack[i] <= 0:
            break
        widths[i] += 1
        spare -= 1
    return widths


def _answer_first(natural: list[int], least: list[int]) -> list[int]:
    """Where an answer table's room goes first: the columns a few characters short of whole (their
    header on one line), nearest first, then the column naming each row (the what-if, the policy)."""
    near = [i for i in range(len(least)) if natural[i] - least[i] <= NEARLY_WHOLE]
    return sorted(near, key=lambda i: natural[i] - least[i]) + ([1] if len(least) > 1 else [])


def _row_blocks(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[Text]:
    """One block per row, for a terminal too narrow for any table: the row's name (``1. balanced``
    in a ranked table), then each column's header and cell, indented."""
    from asaptrace.views.table import wrap

    skip = 2 if headers[0] == "#" else 1  # a ranked table: "1. balanced", then its columns
    lines = []
    for r in rows:
        lines += wrap(r[0] if skip == 1 else f"{r[0]}. {r[1]}", width)
        for h, c in zip(headers[skip:], r[skip:], strict=True):
            lines += wrap(f"{' '.join(h.split())}: {c}", width, first="    ", indent="      ")
    return [Text(line) for line in lines]


def fitted_tables(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: Sequence[bool],
    width: int,
    *,
    answer: bool = False,
) -> list[RenderableType]:
    """``rows`` under ``headers`` as one or more titled rich tables no wider than ``width`` (see the
    module docstring); ``numeric`` columns are right-aligned and never wrapped. ``answer``: the
    answer table's options (fewer cells kept whole, no box edge, room to the near-whole and naming
    columns first, one block per row when even the narrowest columns do not fit)."""
    from asaptrace.views.table import wrap

    edges = not answer
    full, width = width, width - row_extra(headers, rows)
    natural = natural_widths(headers, rows)
    least = min_widths(headers, rows, numeric, whole=ANSWER_WRAP_AT if answer else WRAP_AT)
    heading = [Text(line, style="italic") for line in wrap(title, width, indent="  ")]
    if table_width(natural, edges=edges) <= width:
        groups = [list(range(len(headers)))]
    elif answer:
        if table_width(least, edges=False) > width:
            return [Group(*heading, *_row_blocks(headers, rows, full))]
        groups = [list(range(len(headers)))]
    else:
        room = width - table_width([least[0]]) - 3  # a lone column wider than the rest folds
        least = [least[0]] + [min(w, max(room, 1)) for w in least[1:]]
        groups = column_groups(least, width)
    tables: list[RenderableType] = []
    for k, cols in enumerate(groups, start=1):
        nat, low = [natural[i] for i in cols], [least[i] for i in cols]
        first = _answer_first(nat, low) if answer else ()
        widths = _spread(nat, low, width - table_width(low, edges=edges), first)
        if len(groups) > 1:
            heading = [
                Text(line, style="italic")
                for line in wrap(f"{title} ({k} of {len(groups)})", width, indent="  ")
            ]
        table = (
            Table(box=RULE_BOX)
            if edges
            else Table(box=RULE_BOX, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        )
        for i, w in zip(cols, widths, strict=True):
            head = headers[i]
            if len(head) > w:  # wrap the header between words, never inside one
                head = "\n".join(textwrap.wrap(head, w, break_long_words=False))
            table.add_column(
                head, justify="right" if numeric[i] else "left", width=w, overflow="fold", no_wrap=numeric[i]
            )
        for r in rows:
            table.add_row(*(r[i] for i in cols))
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
