"""Pieces every CLI command shares: the user-error edge, consoles, options, size parsing, JSON and table output."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from asaptrace.cli._layout import print_plain, print_wrapped
from asaptrace.errors import AsaptraceError, UsageError
from asaptrace.units import more_rows

if TYPE_CHECKING:
    from asaptrace.views.table import TableView

F = TypeVar("F", bound=Callable[..., Any])

#: Exit code for a user mistake (bad input file, bad option); 1 stays for "ran, found a problem".
EXIT_USER_ERROR = 2
#: Exit code for "ran, found a problem" (``compare --fail-if``: a regression beyond a threshold).
EXIT_FOUND = 1

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def usage_error_line(e: Any) -> str:
    """A click usage error (bad or missing option, unknown command) as one line: where it happened,
    what was wrong, and where help is — instead of typer's multi-line box."""
    ctx = getattr(e, "ctx", None)
    where = ctx.command_path if ctx is not None else "asaptrace"
    message = " ".join(e.format_message().split())
    return f"error: {where}: {message} (see '{where} -h')"


def user_errors(fn: F) -> F:
    """Turn any :class:`AsaptraceError` into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AsaptraceError as e:
            print_message(err, "[bold red]error:[/] ", str(e))
            raise typer.Exit(EXIT_USER_ERROR) from None
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """'512M', '8G', '1000' → bytes (binary units)."""
    m = _SIZE.match(text)
    if not m:
        raise typer.BadParameter(f"not a size: {text!r} (examples: 512M, 8G)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * _UNITS[unit])


def terminal_width(console: Console) -> int | None:
    """The width messages wrap to: the terminal's, or ``COLUMNS`` when set; None when the stream is
    neither a terminal nor sized (a log, a pipe: each message stays one line that grep finds)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return console.width if console.is_terminal else None


def print_message(console: Console, prefix: str, text: str, *, style: str = "") -> None:
    """An error, warning or note: ``prefix`` (rich markup) then ``text`` (plain), wrapped between
    words to :func:`terminal_width` with its continuation lines under the text, by the one
    wrapper (:func:`asaptrace.views.table.wrap`); one whole line where no width is known."""
    from rich.text import Text

    from asaptrace.views.table import wrap

    head = Text.from_markup(prefix)
    width = terminal_width(console)
    lead = " " * len(head.plain) if len(head.plain) <= (width or 0) // 3 else ""
    for i, line in enumerate(wrap(text, width, first=" " * len(head.plain), indent=lead)):
        body = Text(line[len(head.plain) :] if i == 0 else line, style=style)
        console.print(Text.assemble(head, body) if i == 0 else body, soft_wrap=True, highlight=False)


def print_warning(text: str) -> None:
    """A warning on stderr (:func:`print_message`)."""
    print_message(err, "[bold yellow]warning:[/] ", text.removeprefix("warning: "))


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def print_lines(text: str, *, first: str = "", indent: str = "", style: str = "") -> None:
    """``first + text`` wrapped to the terminal, its continuation lines indented by ``indent``."""
    print_plain(out, text, first=first, indent=indent, style=style)


def print_table(view: TableView, *, answer: bool = False) -> None:
    """Render a :class:`~asaptrace.views.table.TableView` on stdout fitted to the terminal's width
    (:func:`asaptrace.cli._layout.fitted_tables`, the one way: narrowed, then split into column
    groups, never cut); "none" when empty, its caption, how many rows were left out when cut.
    ``answer`` (``advise``, ``sweep``): the answer table's layout (one block per row where no table
    fits), no caption (the command says its legend itself) and a blank line after."""
    from asaptrace.cli._layout import fitted_tables

    if view.rows.height == 0:
        print_wrapped(
            out, f"[italic]{escape(view.title)}[/]: ", "none" + (f" ({view.reason})" if view.reason else "")
        )
        return
    headers, rows = view.cells()
    numeric = [i > 0 and view.rows.schema[c].is_numeric() for i, c in enumerate(view.columns)]
    for table in fitted_tables(view.title, headers, rows, numeric, out.width, answer=answer):
        out.print(table)
    if view.caption and not answer:
        print_wrapped(out, "", view.caption, style="dim")
    if view.more:
        print_plain(out, more_rows(view.more), style="dim")
    if answer:
        out.print()


class PhaseBar:
    """Rich progress bars on stderr for a library call that reports ``(phase, done, total)``
    (synth's, the enrichment's), one bar per named task; silent (rich.progress not even imported)
    when stderr is not a terminal or ``enabled`` is False."""

    def __init__(self, label: str, *, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled and err.is_terminal
        self.tasks: dict[str, Any] = {}
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description:<7}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        )

    def __enter__(self) -> Self:
        if self.enabled:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()

    def advance(self, name: str, done: int, total: int, detail: str) -> None:
        """Set the bar ``name`` (made on first use) to ``done`` of ``total``, with ``detail``."""
        if not self.enabled:
            return
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(name, total=total, detail="")
        self.bar.update(self.tasks[name], completed=done, total=total, detail=detail)

    def __call__(self, phase: str, done: int, total: int) -> None:
        self.advance(self.label, done, total, phase)


StoreArg = Annotated[Path, typer.Argument(help="A store directory written by `asaptrace ingest`.")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print a machine-readable JSON object instead of tables.")
]
# results as tables (replay, sweep, compare, advise; docs/reference/tables.md)
CsvOpt = Annotated[
    Path | None, typer.Option("--csv", help="Also write the results as CSV tables in this folder.")
]
ParquetOpt = Annotated[
    Path | None, typer.Option("--parquet", help="Also write the results as Parquet tables in this folder.")
]


def check_tables(csv: Path | None, parquet: Path | None) -> None:
    """Refuse a bad --csv / --parquet folder before the work, not after it."""
    from asaptrace.views.files import check_tables_target

    check_tables_target(csv, "csv")
    check_tables_target(parquet, "parquet")


def write_tables(tables: Any, csv: Path | None, parquet: Path | None) -> None:
    """Write ``tables`` (a name → frame dict) as CSV and/or Parquet, saying where."""
    from asaptrace.views.files import write_tables as write

    for folder, fmt in ((csv, "csv"), (parquet, "parquet")):
        if folder is not None:
            paths = write(tables, folder, fmt)
            err.print(f"wrote {len(paths)} {fmt} tables to [bold]{folder}[/]", highlight=False)


# options of the enrichment step, shared by `ingest` and `analyze`
ParallelOpt = Annotated[
    str | None,
    typer.Option("--parallel", help="Deployment when the traces do not say it, e.g. dp=8,tp=4,ep=32."),
]
BatchesOpt = Annotated[
    Path | None,
    typer.Option("--batches", help="batches.jsonl sidecar: request lengths per step and DP group."),
]
TaxonomyOpt = Annotated[
    Path | None,
    typer.Option("--taxonomy", help="TOML rule file mapping kernel names to kinds (tried first)."),
]


def invocation(ctx: Any) -> str:
    """The running command as a user would retype it (shown in a report): ``asaptrace report S -o R``.

    Rebuilt from what click parsed (arguments, then options that differ from their defaults), so it
    is the same however the CLI was started (console script, ``python -m``, a test runner).
    ``ctx`` is the command's ``typer.Context``.
    """
    words = ["asaptrace", ctx.info_name or ""]
    opts: list[str] = []
    for p in ctx.command.params:
        value = ctx.params.get(p.name or "")
        if p.param_type_name == "argument":
            words += [str(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
        elif p.param_type_name == "option" and value not in (None, (), []) and value != p.default:
            flag = max(p.opts, key=len)
            if getattr(p, "is_flag", False):
                opts.append(flag)
            else:  # a repeatable option is retyped once per value
                for v in value if isinstance(value, (list, tuple)) else [value]:
                    opts += [flag, str(v)]
    return shlex.join(words + opts)


def parse_sets(items: list[str], what: str = "KNOB=VALUE") -> dict[str, str]:
    """``--set KEY=VALUE`` items, in order (a later key wins); one line when an item has no ``=``."""
    out_: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes {what}, not {item!r}")
        out_[key.strip()] = value.strip()
    return out_
